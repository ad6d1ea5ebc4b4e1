//! What a scrape gets from the engine: its in-memory state, O(jobs).

use pjw_proto::JobState;

use super::MemorySnap;

/// One job as the engine holds it.
#[derive(Clone, Debug)]
pub struct JobSnap {
    pub id: String,
    pub user: String,
    pub state: JobState,
    /// Its cgroup name when it has started (the scrape reads CPU and memory there when the
    /// sampler has no sample of it yet, or is off).
    pub cgroup: Option<String>,
    /// From the sampler's latest sample: CPU time (µs) and memory (bytes).
    pub cpu_usec: Option<u64>,
    pub mem_bytes: Option<u64>,
    /// pjw's ids of the GPUs it holds.
    pub gpus: pjw_core::GpuSet,
    /// From the latest sample: bytes read and written (where the node counts I/O).
    pub io_rbytes: Option<u64>,
    pub io_wbytes: Option<u64>,
    /// Its I/O weight and limits.
    pub io: pjw_core::io_limits::JobIo,
    /// From the latest sample (NVML): mean utilisation of its GPUs (percent) and their used
    /// memory (bytes); None without a reading.
    pub gpu_util: Option<f64>,
    pub gpu_mem: Option<u64>,
    /// Processes the kernel OOM-killed in it so far.
    pub oom_kills: u64,
}

/// The engine's answer to a scrape: in-memory state only.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The node's name (its host name), for `pjw_node_info`: a cluster's Prometheus joins
    /// every other series of a target on it.
    pub node: String,
    pub cpus: u32,
    pub free_cpus: u32,
    /// The node's GPUs, and those no job holds.
    pub gpus: u32,
    pub free_gpus: u32,
    pub queue_len: u32,
    pub jobs: Vec<JobSnap>,
    /// Failed writes to the local store (the profile writer's count).
    pub store_write_errors: u64,
    /// Start-time statistics (the engine's; None in tests that do not need them).
    pub starts: Option<pjw_proto::StartStats>,
    /// The job partition's memory as the governor last saw it.
    pub memory: Option<MemorySnap>,
}
