//! Who the kernel's OOM killer spares: a process of a job with a reservation (`--mem`) gets a
//! negative `oom_score_adj` once it has called exec inside the job, so when the jobs together
//! fill the partition the kernel kills a process of a job that reserved nothing before one of a
//! job inside its reservation (decision (ct)). The value is the job's share of the partition,
//! -⌈1000 · mem / partition⌉: a reserved process then scores at most its usage less its
//! reservation in a partition's OOM and in a node-wide one (never above a process without a
//! mark), while inside its own limit the larger processes still score above the smaller ones
//! (kernels before 5.9 raised every score below 1 to 1 and killed the first they met).
//!
//! Why at exec and not as the process joins: `oom_score_adj` belongs to an address space, and
//! the kernel writes it to every process sharing it (`clone(CLONE_VM)`); a client that joined
//! a job could share its memory with a process outside, which would get the mark and its floor
//! (review). After an exec the address space is the process's own, and anything sharing it
//! later was born inside the job. A process joining a job without a reservation with a
//! negative value inherited from its starter is raised to 0: it does not rank with the
//! reservations.
//!
//! Writing a value below 0 needs `CAP_SYS_RESOURCE` in the machine's user namespace, which
//! also makes it the process's floor; without it the daemon warns and the kernel picks by size.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use pjw_cgroup::CgroupError;
use tracing::{debug, warn};

use super::job::Job;
use super::Engine;
use crate::cgroup_port::CgroupPort;

/// Said once per daemon: the mark could not be written for lack of a right.
static REFUSED_TOLD: AtomicBool = AtomicBool::new(false);

/// The mark of a job reserving `mem` bytes of a `partition`: -⌈1000 · mem / partition⌉, at
/// least 1 below 0 and never -1000 (which the kernel never kills, even at the job's own limit).
pub(super) fn reserved_adj(mem: u64, partition: u64) -> i16 {
    let share = (mem as u128 * 1000).div_ceil(partition.max(1) as u128);
    -(share.clamp(1, 999) as i16)
}

impl Engine {
    /// Move `pid` into job `j`'s cgroups (see [`join`]).
    pub(super) fn join_job(&self, j: &Job, pid: u32) -> Result<(), CgroupError> {
        join(&*self.driver, &self.cfg.proc_root, j, &j.cgroup, pid)
    }

    /// Process `tgid` called exec: when it is a reserved job's, its new address space is its
    /// own, and it gets the job's mark.
    pub(super) fn mark_after_exec(&self, tgid: u32) {
        let Some(j) = self.procs.job_of(tgid).and_then(|seq| self.jobs.get(&seq)) else {
            return;
        };
        if let Some(mem) = j.mem {
            let adj = reserved_adj(mem, self.mem_limit);
            write(&self.cfg.proc_root, j, tgid, adj);
        }
    }
}

/// Move `pid` into `cgroup` (job `j`'s, or a queued job's waiting ones); then, when `j` holds
/// no reservation, raise a negative `oom_score_adj` it inherited to 0. Only the move can fail.
pub(super) fn join(
    driver: &dyn CgroupPort,
    proc_root: &Path,
    j: &Job,
    cgroup: &str,
    pid: u32,
) -> Result<(), CgroupError> {
    driver.add_process(cgroup, pid)?;
    if j.mem.is_none() && crate::os::oom_score_adj(proc_root, pid).is_some_and(|v| v < 0) {
        write(proc_root, j, pid, 0);
    }
    Ok(())
}

/// Write `adj` for `pid` of job `j`; a refusal (no `CAP_SYS_RESOURCE`, a user namespace's
/// root) is warned about once, a process already gone is not, anything else is.
fn write(proc_root: &Path, j: &Job, pid: u32, adj: i16) {
    match crate::os::set_oom_score_adj(proc_root, pid, adj) {
        Ok(()) => debug!(job = %j.id, pid, adj, "oom_score_adj set"),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            if !REFUSED_TOLD.swap(true, Ordering::Relaxed) {
                warn!(job = %j.id, pid, error = %e, "cannot put jobs with --mem behind the others in the OOM killer's line (the daemon needs CAP_SYS_RESOURCE in the machine's user namespace): the kernel picks by size when the jobs fill the partition");
            }
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
            debug!(job = %j.id, pid, "process gone before its oom_score_adj was set")
        }
        Err(e) => {
            warn!(job = %j.id, pid, adj, error = %e, "cannot set a job process's oom_score_adj")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reserved_adj;

    #[test]
    fn the_mark_is_the_jobs_share_of_the_partition() {
        const G: u64 = 1 << 30;
        for (mem, partition, want) in [
            (G, 4 * G, -250),
            (1, 4 * G, -1),
            (3 * G, 4 * G, -750),
            (4 * G, 4 * G, -999),
            (8 * G, 4 * G, -999),
            (G / 3, G, -334),
        ] {
            assert_eq!(reserved_adj(mem, partition), want, "{mem} of {partition}");
        }
    }
}
