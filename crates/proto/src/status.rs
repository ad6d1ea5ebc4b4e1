//! What `pjw status` shows: the node, its memory, and each job with its state.

use pjw_core::{CpuSet, GpuSet};
use serde::{Deserialize, Serialize};

use super::{is_zero, is_zero_u64, LeaseInfo, StartStats, StepInfo};

/// The node's memory as the governor last saw it (in [`StatusReport`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryStatus {
    /// The job partition and what the jobs have charged (bytes).
    pub limit: u64,
    pub used: u64,
    /// The running jobs' predicted demand (need plus growth) and the frozen jobs' footprints.
    pub demand: u64,
    pub held: u64,
    /// Whether the governor acts on pressure (`[memory] governor`).
    pub governor: bool,
    /// Why pjw's jobs press on each other now (the governor acts), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
    /// Pressure from outside pjw's jobs now (reported, left to the node's memory managers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<String>,
    /// Memory PSI `some` avg10 (percent) of the node and of the job partition, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_psi_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_psi_some: Option<f64>,
    /// When the governor last looked (ms since the epoch).
    pub sampled_ms: i64,
}

/// The state of a job as `pjw status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Holds its CPUs and runs.
    Running,
    /// Runs in the idle class on CPUs other jobs hold.
    Backfill,
    /// Frozen: suspended by its owner, preempted by a higher-priority job, or frozen by the
    /// memory governor (the reason says which).
    Frozen,
    /// Waits for CPUs.
    Queued,
    /// Its main process exited; leftovers are being killed and the cgroups removed.
    Ending,
}

impl JobState {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Backfill => "backfill",
            JobState::Frozen => "frozen",
            JobState::Queued => "queued",
            JobState::Ending => "ending",
        }
    }
}

/// One job in a [`StatusReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    pub uid: u32,
    /// CPUs held (empty while queued).
    pub cpus: CpuSet,
    /// NUMA nodes whose memory the job may use (empty while queued).
    pub mems: CpuSet,
    /// CPUs asked for.
    pub ncpus: u32,
    /// Memory limit in bytes.
    pub mem: Option<u64>,
    pub procs: u32,
    pub threads: u32,
    pub state: JobState,
    /// Why it is not simply running (queued, frozen, backfill), for people.
    #[serde(default)]
    pub reason: Option<String>,
    /// Priority 1-16.
    #[serde(default)]
    pub priority: u8,
    /// Seconds since the job started (or was queued).
    pub age_secs: u64,
    /// The job's main process.
    pub pid: Option<u32>,
    /// CPU time the job had used at `sampled_ms` (microseconds, user + system); absent while
    /// queued, or from a daemon that does not report it. `pjw top` turns two readings into CPU %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
    /// Memory charged to the job (bytes) at `sampled_ms`; absent while queued or from an older
    /// daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// When the daemon read `cpu_usec` and `mem_bytes` (ms since the epoch): for the request,
    /// within half a second of it, or by its sampler, whichever is newer (docs/decisions.md
    /// (bp)). Absent while queued or from an older daemon (whose figures were read at the
    /// request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_ms: Option<i64>,
    /// The workload manager's name for the job (`slurm:42`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wlm: Option<String>,
    /// Whole GPUs asked for (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ngpus: u32,
    /// pjw's ids of the GPUs it holds; while queued, those its workload manager chose for it
    /// (absent: none).
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub gpus: GpuSet,
    /// A started GPU job's runtime variables (`CUDA_VISIBLE_DEVICES`, `PJW_GPUS`, …), as
    /// `started.env` gives a `run` job: for the processes pjw did not start (`pjw slurm
    /// task-prolog`). Absent for a job without GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_env: Vec<(String, String)>,
    /// Its block I/O weight and limits (`weight=500; 254:0 rbps=100M`); absent when it has
    /// the kernel's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<String>,
    /// At `sampled_ms`, from NVML: the mean utilisation of its GPUs (percent) and their used
    /// memory (bytes); absent without a GPU reading (no GPUs, no NVML, or an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem: Option<u64>,
    /// A registered job's lease (absent for other jobs, and from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseInfo>,
    /// Its running steps: `pjw run`s started from inside it (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepInfo>,
    /// Processes of the job the kernel has killed for memory so far (absent: none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub oom_kills: u64,
    /// Its time limit in seconds (`--time`; absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// Of it, the seconds left to run, once it has started (absent: no limit, or queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_left_s: Option<u64>,
    /// The limit is the node's default (`[job] default_time`), not one the job asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_limit_default: bool,
}

/// The node as `pjw status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Host name.
    pub node: String,
    /// CPUs pjw may hand out.
    pub total_cpus: u32,
    /// The CPUs pjw may hand out, as a list.
    pub cpus: CpuSet,
    /// Of those, the free ones.
    pub free_cpus: CpuSet,
    /// Job-CPUs the node runs at once (primaries plus backfillers).
    #[serde(default)]
    pub vcpus: u32,
    /// Running (and ending) jobs first, then the queue in order.
    pub jobs: Vec<JobInfo>,
    /// The node's GPUs, pjw's ids (absent: none).
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub gpus: GpuSet,
    /// Of those, the ones no job holds.
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub free_gpus: GpuSet,
    /// cgroup mode and parent, for people.
    pub cgroup: String,
    /// Daemon version.
    pub version: String,
    /// Start-time statistics (absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<Box<StartStats>>,
    /// The job partition's memory and its pressure, as the governor last saw it (absent
    /// before its first look, or from an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
    /// What the daemon left out so that the answer fits one frame (absent: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<StatusCut>,
}

/// What a `status` answer leaves out to fit one frame ([`crate::MAX_FRAME`]): so many users'
/// steps and queued jobs that the whole list would not fit (review F2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCut {
    /// Running steps not listed (every job's step list is left out first).
    pub steps: u32,
    /// Jobs not listed, from the end of the list: the queue's tail first.
    pub jobs: u32,
}

impl StatusReport {
    /// Cut this answer until `fits` holds: first every job's step list (counted in
    /// [`StatusCut::steps`]), then jobs from the end of the list (running jobs come first, so
    /// the queue's tail goes first), as few as fit. Unchanged when it fits already.
    pub fn cut_to_fit(&mut self, fits: impl Fn(&StatusReport) -> bool) {
        if fits(self) {
            return;
        }
        let mut cut = self.cut.unwrap_or_default();
        for j in &mut self.jobs {
            cut.steps += j.steps.len() as u32;
            j.steps.clear();
        }
        self.cut = Some(cut);
        if fits(self) {
            return;
        }
        let all = std::mem::take(&mut self.jobs);
        let with = |s: &mut StatusReport, k: usize| {
            s.jobs = all[..k].to_vec();
            s.cut = Some(StatusCut {
                jobs: cut.jobs + (all.len() - k) as u32,
                ..cut
            });
        };
        // The most jobs that fit, by bisection: `lo` always fits (none may be needed).
        let (mut lo, mut hi) = (0, all.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            with(self, mid);
            if fits(self) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        with(self, lo);
    }
}
