//! An ended job's cgroups, removed off the engine's thread: an `rmdir` in each hierarchy (six
//! on a hybrid node) waits in the kernel, and the engine waits for nothing. The engine reads
//! the job's last counters first ([`Engine::finish`]), then hands the removal to a blocking
//! thread, which reports [`Event::CgroupsRemoved`].
//!
//! What stays true meanwhile:
//! - The job's CPUs go to the next job as soon as its cgroup is empty (as before): an empty
//!   cgroup runs nothing, whether its directory is there or not.
//! - No job of the same cgroup name starts before the old directories are gone (a job id is
//!   free again once its job ended, and the name is the id's): it is kept out of the plan
//!   until then (`in_plan` in `engine/planning.rs`), so an old `rmdir` can never take a new job's
//!   directory.
//! - `end` waiters (a manager's epilog) are answered when the removal is done, with what it
//!   did; a failed `rmdir` is logged with the job's id.
//! - A crash before the removal leaves an empty cgroup of an ended job: recovery removes it
//!   (`adopt_unknown` in `engine/recovery.rs`).
//! - An exclusive job that is a cpuset partition is removed at once, on the engine's thread:
//!   while a partition's directory exists its CPUs are taken from its siblings' effective
//!   CPUs, so the next job on them would run elsewhere.

use pjw_core::JobId;
use pjw_proto::Response;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::{Engine, Event};

/// A removal under way: whose cgroups, and who waits for them to be gone.
pub(super) struct Pending {
    job: JobId,
    waiters: Vec<oneshot::Sender<Response>>,
}

impl Engine {
    /// Remove ended job `job`'s cgroups (`cgroup`): on a blocking thread, or at once when
    /// `now` (a partition; or no runtime to hand it to). `waiters` are answered when they are
    /// gone.
    pub(super) fn remove_cgroups(
        &mut self,
        job: &JobId,
        cgroup: &str,
        now: bool,
        waiters: Vec<oneshot::Sender<Response>>,
    ) {
        let pending = Pending {
            job: job.clone(),
            waiters,
        };
        let runtime = tokio::runtime::Handle::try_current().ok();
        let Some(rt) = runtime.filter(|_| !now) else {
            let error = self.driver.remove_job(cgroup).err().map(|e| e.to_string());
            self.removed(cgroup, pending, error);
            return;
        };
        let work = self.driver.removal(cgroup);
        // A second end of the same name cannot come before this one is answered (its job
        // would not have started): the map holds one removal per name.
        self.removing.insert(cgroup.to_string(), pending);
        let (tx, name) = (self.tx.clone(), cgroup.to_string());
        rt.spawn_blocking(move || {
            let error = work().err().map(|e| e.to_string());
            let _ = tx.send(Event::CgroupsRemoved {
                cgroup: name,
                error,
            });
        });
    }

    /// The blocking thread removed `cgroup` (or could not): its waiters answered, and a job of
    /// the same name may start now.
    pub(super) fn cgroups_removed(&mut self, cgroup: &str, error: Option<String>) {
        let Some(pending) = self.removing.remove(cgroup) else {
            // Done already at shutdown.
            return;
        };
        self.removed(cgroup, pending, error);
        self.replan();
    }

    /// At shutdown: the removals still under way done here, so the parent can go too (an
    /// `rmdir` of a directory the blocking thread removed first is no error).
    pub(super) fn finish_removals(&mut self) {
        let names: Vec<String> = self.removing.keys().cloned().collect();
        for name in names {
            if let Some(pending) = self.removing.remove(&name) {
                let error = self.driver.remove_job(&name).err().map(|e| e.to_string());
                self.removed(&name, pending, error);
            }
        }
    }

    /// Log what the removal did and answer the job's waiters with it.
    fn removed(&self, cgroup: &str, pending: Pending, error: Option<String>) {
        let Pending { job, waiters } = pending;
        let message = match &error {
            None => {
                debug!(job = %job, cgroup, "job cgroups removed");
                format!("job {job} ended; its cgroups are gone")
            }
            Some(e) => {
                warn!(job = %job, cgroup, error = %e, "cannot remove job cgroups");
                format!("job {job} ended; its cgroups could not all be removed: {e}")
            }
        };
        for w in waiters {
            let _ = w.send(Response::Done {
                message: message.clone(),
            });
        }
    }
}

#[cfg(test)]
impl Engine {
    /// Removals handed to a blocking thread and not reported yet.
    pub(crate) fn removals_under_way(&self) -> usize {
        self.removing.len()
    }

    /// Send the engine an event as its own tasks do (a test hands back what it set aside).
    pub(crate) fn send_self(&self, ev: Event) {
        let _ = self.tx.send(ev);
    }
}
