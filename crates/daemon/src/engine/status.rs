//! What the engine tells about itself: `pjw status` and the metrics snapshot, from its state.

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{JobInfo, StatusReport};

use super::{Engine, Job};

impl Engine {
    /// The node's state for `pjw status`: running jobs, then the queue in order.
    pub fn status(&self) -> StatusReport {
        let info = |j: &Job| {
            let (procs, threads) = if j.started.is_some() {
                (
                    self.driver
                        .procs(&j.cgroup)
                        .map(|p| p.len() as u32)
                        .unwrap_or(0),
                    self.driver
                        .thread_count(&j.cgroup)
                        .map(|t| t as u32)
                        .unwrap_or(0),
                )
            } else {
                (0, 0)
            };
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
                } else if j.memory.frozen {
                    Some("frozen by the memory governor (memory pressure)".into())
                } else {
                    j.reason.clone()
                },
                priority: j.req.priority,
                age_secs: j.started.unwrap_or(j.queued_at).elapsed().as_secs(),
                pid: j.pid,
                // Two small cgroup reads per started job, like procs and threads above: fresher
                // than the sampler's last sample, so `pjw top` can refresh every second.
                cpu_usec: j
                    .started
                    .and_then(|_| self.driver.cpu_time(&j.cgroup).ok())
                    .map(|c| c.user_usec + c.system_usec),
                mem_bytes: j
                    .started
                    .and_then(|_| self.driver.memory_usage(&j.cgroup).ok()),
                wlm: j.wlm.clone(),
            }
        };
        let mut jobs: Vec<JobInfo> = self
            .jobs
            .values()
            .filter(|j| j.phase != Phase::Queued)
            .map(info)
            .collect();
        jobs.extend(
            self.queue_order()
                .iter()
                .filter_map(|s| self.jobs.get(s))
                .map(info),
        );
        StatusReport {
            node: self.node.clone(),
            total_cpus: self.pool.len() as u32,
            cpus: self.pool,
            free_cpus: self.free(),
            vcpus: self.policy.vcpus as u32,
            jobs,
            cgroup: self.driver.describe(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// What a metrics scrape needs from the engine: in-memory state only, O(jobs).
    pub fn metrics_snapshot(&self) -> crate::metrics::Snapshot {
        crate::metrics::Snapshot {
            cpus: self.pool.len() as u32,
            free_cpus: self.free().len() as u32,
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
                    // The sampler's latest sample; the scrape reads the cgroup without one.
                    cpu_usec: j
                        .prof
                        .last
                        .as_ref()
                        .and_then(|s| Some(s.cpu_user_usec? + s.cpu_system_usec.unwrap_or(0))),
                    mem_bytes: j.prof.last.as_ref().and_then(|s| s.mem_current),
                })
                .collect(),
            store_write_errors: self.writer.as_ref().map_or(0, |w| w.errors()),
        }
    }
}
