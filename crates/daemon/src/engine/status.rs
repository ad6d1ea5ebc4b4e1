//! What the engine tells about itself: `pjw status` and the metrics snapshot, from its state
//! (no cgroup read: the figures are the live pass's or the sampler's last, see `live.rs`).

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{JobInfo, StatusReport};

use super::live::Figures;
use super::{Engine, Job};

impl Engine {
    /// The node's state for `pjw status`: running jobs, then the queue in order.
    pub fn status(&self) -> StatusReport {
        let mut jobs: Vec<JobInfo> = self
            .jobs
            .values()
            .filter(|j| j.phase != Phase::Queued)
            .map(|j| self.job_info(j))
            .collect();
        jobs.extend(
            self.queue_order()
                .iter()
                .filter_map(|s| self.jobs.get(s))
                .map(|j| self.job_info(j)),
        );
        StatusReport {
            node: self.node.clone(),
            total_cpus: self.pool.len() as u32,
            cpus: self.pool,
            free_cpus: self.free(),
            vcpus: self.policy.vcpus as u32,
            jobs,
            gpus: self.gpus.all(),
            free_gpus: self.free_gpus(),
            cgroup: self.driver.describe(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            starts: Some(Box::new(self.start_figures())),
            memory: self.memory_status(),
            cut: None,
        }
    }

    /// Job `j` as `pjw status` shows it.
    fn job_info(&self, j: &Job) -> JobInfo {
        // No cgroup file is read here: figures are the freshest of the live pass's (`live.rs`,
        // read off this thread for the request) and the sampler's last sample; process and
        // thread counts are the process tracker's where process events arrive. A request
        // costs O(jobs) in memory.
        let last = j.prof.last.as_ref().filter(|_| j.started.is_some());
        let fig = self.figures(j);
        let (procs, threads) = self.procs_threads(j, fig);
        JobInfo {
            id: j.id.to_string(),
            name: j.name.clone(),
            user: j.user.clone(),
            uid: j.uid,
            cpus: j.cpus,
            mems: if j.cpus.is_empty() {
                CpuSet::new()
            } else {
                j.mems
            },
            ncpus: j.req.ncpus as u32,
            mem: j.mem,
            procs,
            threads,
            state: j.state(),
            reason: if j.phase == Phase::Queued {
                Some(self.wait_reason(j))
            } else {
                self.memory_reason(j).or_else(|| j.reason.clone())
            },
            priority: j.req.priority,
            age_secs: j.started.unwrap_or(j.queued_at).elapsed().as_secs(),
            pid: j.pid,
            cpu_usec: fig.and_then(|f| f.cpu_usec),
            mem_bytes: fig.and_then(|f| f.mem_bytes),
            sampled_ms: fig.map(|f| f.ts_ms),
            wlm: j.starter.wlm.clone(),
            ngpus: j.req.ngpus as u32,
            gpus: if j.phase == Phase::Queued {
                j.req.pinned
            } else {
                j.gpus
            },
            gpu_env: if j.phase == Phase::Queued || j.gpus.is_empty() {
                Vec::new()
            } else {
                Engine::gpu_env_of(&self.gpus, self.gpus_fenced, j)
            },
            io: super::io::io_info(j),
            gpu_util: last.and_then(|s| s.gpu_util),
            gpu_mem: last.and_then(|s| s.gpu_mem),
            lease: self.lease_info(j),
            steps: Engine::step_infos(j),
            oom_kills: j.memory.oom_kills,
            time_limit_s: j.req.time_limit.map(pjw_core::time_limit::TimeLimit::secs),
            time_left_s: self.time_left_ms(j).map(|ms| ms as u64 / 1000),
            time_limit_default: j.req.time_limit.is_some()
                && j.time_source == pjw_core::time_limit::LimitSource::NodeDefault,
        }
    }

    /// The processes and threads of `j`: the process tracker's counts where process events
    /// arrive, else the last sample's (`fig`).
    fn procs_threads(&self, j: &Job, fig: Option<Figures>) -> (u32, u32) {
        let last = j.prof.last.as_ref().filter(|_| j.started.is_some());
        let counts = if self.proc_events && j.started.is_some() {
            self.procs.counts(j.seq)
        } else {
            None
        };
        // Before its first sample (within a second of its start) a started job whose main
        // process has not exited has that one at least: it was moved into the job.
        let main = u32::from(j.started.is_some() && j.pid.is_some() && !j.end.ending);
        let procs = counts
            .map(|c| c.procs_now as u32)
            .or_else(|| last.and_then(|s| s.procs))
            .unwrap_or(main);
        // Every process has at least one thread: a count read at another moment than
        // the process count (or none) never shows fewer.
        let threads = counts
            .map(|c| c.threads_now.min(u32::MAX as u64) as u32)
            .or_else(|| {
                fig.and_then(|f| f.tasks)
                    .map(|t| t.min(u32::MAX as u64) as u32)
            })
            .unwrap_or(0)
            .max(procs);
        (procs, threads)
    }

    /// What a metrics scrape needs from the engine: in-memory state only, O(jobs).
    pub fn metrics_snapshot(&self) -> crate::metrics::Snapshot {
        let starts = Some(self.start_figures());
        crate::metrics::Snapshot {
            starts,
            node: self.node.clone(),
            cpus: self.pool.len() as u32,
            free_cpus: self.free().len() as u32,
            gpus: self.gpus.len() as u32,
            free_gpus: self.free_gpus().len() as u32,
            queue_len: self
                .jobs
                .values()
                .filter(|j| j.phase == Phase::Queued)
                .count() as u32,
            jobs: self
                .jobs
                .values()
                .map(|j| crate::metrics::JobSnap {
                    id: j.id.to_string(),
                    user: j.user.clone(),
                    state: j.state(),
                    cgroup: j.started.map(|_| j.cgroup.clone()),
                    // The freshest figures held; the scrape reads the cgroup without any.
                    cpu_usec: self.figures(j).and_then(|f| f.cpu_usec),
                    mem_bytes: self.figures(j).and_then(|f| f.mem_bytes),
                    gpus: if j.phase == Phase::Queued {
                        pjw_core::GpuSet::new()
                    } else {
                        j.gpus
                    },
                    io_rbytes: j.prof.last.as_ref().and_then(|s| s.io_rbytes),
                    io_wbytes: j.prof.last.as_ref().and_then(|s| s.io_wbytes),
                    io: j.io.clone(),
                    gpu_util: j.prof.last.as_ref().and_then(|s| s.gpu_util),
                    gpu_mem: j.prof.last.as_ref().and_then(|s| s.gpu_mem),
                    oom_kills: j.memory.oom_kills,
                })
                .collect(),
            store_write_errors: self.writer.as_ref().map_or(0, |w| w.errors()),
            memory: self.memory_status().map(|m| crate::metrics::MemorySnap {
                limit: m.limit,
                used: m.used,
                shared: m.shared.is_some(),
                outside: m.outside.is_some(),
                node_psi_some: m.node_psi_some,
                partition_psi_some: m.partition_psi_some,
            }),
        }
    }
}

impl Engine {
    /// The start-time statistics as `pjw status` and the metrics page show them: over the
    /// window (`[metrics] stats_window`) and since the daemon started.
    pub(super) fn start_figures(&self) -> pjw_proto::StartStats {
        let now = self.clock.now_ms();
        let window_secs = (self.start_stats.window_ms() / 1000) as u64;
        let secs = |ms: Option<f64>| ms.map(|m| m / 1000.0);
        let conv = |f: pjw_core::start_stats::Figures, window_secs: u64| pjw_proto::StartWindow {
            window_secs,
            covered_secs: f.covered_ms as f64 / 1000.0,
            started: f.started,
            ended: f.ended,
            started_per_sec: f.started_per_sec,
            ended_per_sec: f.ended_per_sec,
            wait_mean_secs: secs(f.wait_mean_ms),
            wait_p50_secs: secs(f.wait_p50_ms),
            wait_p90_secs: secs(f.wait_p90_ms),
            wait_p99_secs: secs(f.wait_p99_ms),
            wait_max_secs: f.wait_max_ms.map(|m| m as f64 / 1000.0),
            queue_mean: f.queue_mean,
            queue_max: f.queue_max,
            freezes: f.freezes,
        };
        let (recent, total) = self.start_stats.figures(now);
        pjw_proto::StartStats {
            queue_len: self.start_stats.queue_len(),
            recent: conv(recent, window_secs),
            total: conv(total, 0),
        }
    }
}
