//! Who the kernel's OOM killer takes first: a process joining a job without a reservation
//! (`--mem`) gets `oom_score_adj` 1000, so when the jobs together fill the partition the kernel
//! kills a process of a job that reserved nothing before one of a job inside its reservation
//! (decision (ct); the kubelet does the same for its BestEffort pods). Written by root, the
//! value is also the process's floor: the job cannot lower it (the kernel asks
//! `CAP_SYS_RESOURCE` for that). Its children inherit it. A job with `--mem` keeps what it has.

use std::path::Path;

use pjw_cgroup::CgroupError;
use tracing::debug;

use super::job::Job;
use super::Engine;
use crate::cgroup_port::CgroupPort;

/// The kernel's highest `oom_score_adj`: taken before any process without it.
pub(super) const OOM_FIRST: i16 = 1000;

impl Engine {
    /// Move `pid` into job `j`'s cgroups; then, when `j` reserved no memory, make it the OOM
    /// killer's first pick. Only the move can fail: a process that cannot be marked (gone
    /// already) is still the job's, and the kernel then picks by size as before.
    pub(super) fn join_job(&self, j: &Job, pid: u32) -> Result<(), CgroupError> {
        join(&*self.driver, &self.cfg.proc_root, j, &j.cgroup, pid)
    }
}

/// [`Engine::join_job`] into `cgroup` (a queued job's waiting cgroups, or a job being placed),
/// from its parts (for callers holding other fields of the engine).
pub(super) fn join(
    driver: &dyn CgroupPort,
    proc_root: &Path,
    j: &Job,
    cgroup: &str,
    pid: u32,
) -> Result<(), CgroupError> {
    driver.add_process(cgroup, pid)?;
    if j.mem.is_none() {
        if let Err(e) = crate::os::set_oom_score_adj(proc_root, pid, OOM_FIRST) {
            debug!(job = %j.id, pid, error = %e, "cannot make a process of a job without --mem the OOM killer's first pick");
        }
    }
    Ok(())
}
