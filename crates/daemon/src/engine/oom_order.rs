//! Who the kernel's OOM killer spares: a process joining a job with a reservation (`--mem`)
//! gets `oom_score_adj` -997, so when the jobs together fill the partition the kernel kills a
//! process of a job that reserved nothing before one of a job inside its reservation (decision
//! (ct); the kubelet gives its Guaranteed pods the same value). Jobs without `--mem` keep what
//! they inherited: a hog outside pjw is still chosen by size in a node-wide OOM, and a job that
//! forks before its join has nothing to escape. Written by root with `CAP_SYS_RESOURCE`, the
//! value is also the floor no process may go below without it; the job's own OOM at its
//! `--mem` still kills inside the job (-997 is not -1000, "never").

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use pjw_cgroup::CgroupError;
use tracing::{debug, warn};

use super::job::Job;
use super::Engine;
use crate::cgroup_port::CgroupPort;

/// The kubelet's value for its Guaranteed pods: far below any process without one, in a
/// partition's OOM and in a node-wide one, yet killable at the job's own limit.
pub(super) const RESERVED: i16 = -997;

/// Said once per daemon: the protection could not be written for lack of a right.
static REFUSED_TOLD: AtomicBool = AtomicBool::new(false);

impl Engine {
    /// Move `pid` into job `j`'s cgroups; then, when `j` holds a reservation, put it at the back
    /// of the OOM killer's line. Only the move can fail: a process that cannot be marked (gone
    /// already, or a daemon without the right) is still the job's, and the kernel then picks by
    /// size as before.
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
    if j.mem.is_some() {
        protect(proc_root, j, pid);
    }
    Ok(())
}

/// [`RESERVED`] for every process of job `j` listed in `pids` when it holds a reservation (the
/// processes found again after a restart, or after lost process events).
pub(super) fn protect_all(proc_root: &Path, j: &Job, pids: &[u32]) {
    if j.mem.is_some() {
        for &pid in pids {
            protect(proc_root, j, pid);
        }
    }
}

/// Write [`RESERVED`] for `pid` of job `j`; a refusal (no `CAP_SYS_RESOURCE`, a user
/// namespace's root) is warned about once, a process already gone is not.
fn protect(proc_root: &Path, j: &Job, pid: u32) {
    match crate::os::set_oom_score_adj(proc_root, pid, RESERVED) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            if !REFUSED_TOLD.swap(true, Ordering::Relaxed) {
                warn!(job = %j.id, pid, error = %e, "cannot protect jobs with --mem from the OOM killer (the daemon needs CAP_SYS_RESOURCE in the machine's user namespace): the kernel picks by size when the jobs fill the partition");
            }
        }
        Err(e) => {
            debug!(job = %j.id, pid, error = %e, "cannot protect a process of a job with --mem from the OOM killer")
        }
    }
}
