//! Signals to a job's processes sent off the engine's thread, and the job names they hold.
//!
//! A time limit's SIGTERM opens a pidfd and sends a signal per process, so its cost grows with
//! the job's processes (a fork bomb's thousands); the engine hands it to a blocking thread and
//! waits for nothing, as it does the kill rounds where there is no `cgroup.kill`
//! (`engine/lifecycle.rs`). Each lists the processes of the job's cgroup by its name, and a job
//! name is free again once its job ended: so while one is under way, the name is held. No job
//! of that name waits in its cgroups (`engine/preplace.rs`) or starts (`in_plan` in
//! `engine/planning.rs`) until every pass on it has reported ([`Event::Signalled`],
//! [`Event::Killed`]); else a late pass could list a new job's processes in a cgroup of the
//! same name and signal them (docs/security.md, S-rows on signals).

use tracing::{debug, warn};

use super::{Engine, Event};

impl Engine {
    /// Send `sig` to every process of job `seq`: on a blocking thread (at once where there is
    /// no runtime), holding its cgroup's name until it reports. Best effort: what the kernel
    /// refused is logged when it reports.
    pub(super) fn signal_job(&mut self, seq: i64, sig: i32) {
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        let (work, cgroup) = (self.driver.signaller(&j.cgroup, sig), j.cgroup.clone());
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            let error = work().err().map(|e| e.to_string());
            self.log_signalled(seq, sig, error);
            return;
        };
        self.hold_name(&cgroup);
        let tx = self.tx.clone();
        rt.spawn_blocking(move || {
            let error = work().err().map(|e| e.to_string());
            let _ = tx.send(Event::Signalled {
                seq,
                cgroup,
                sig,
                error,
            });
        });
    }

    /// A signal pass on `cgroup` reported: logged, and the name released.
    pub(super) fn signalled(&mut self, seq: i64, cgroup: &str, sig: i32, error: Option<String>) {
        self.log_signalled(seq, sig, error);
        self.release_name(cgroup);
    }

    fn log_signalled(&self, seq: i64, sig: i32, error: Option<String>) {
        let job = self.jobs.get(&seq).map(|j| j.id.to_string());
        match error {
            None => debug!(
                job = job.as_deref().unwrap_or("(ended)"),
                sig, "job signalled"
            ),
            Some(e) => warn!(
                job = job.as_deref().unwrap_or("(ended)"),
                sig,
                error = %e,
                "not every process of the job got the signal; the kill follows as planned"
            ),
        }
    }

    /// A pass on `cgroup` is under way: the name is held.
    pub(super) fn hold_name(&mut self, cgroup: &str) {
        *self.signalling.entry(cgroup.to_string()).or_insert(0) += 1;
    }

    /// A pass on `cgroup` reported; when it was the last one, a job of that name may wait in
    /// its cgroups and start now.
    pub(super) fn release_name(&mut self, cgroup: &str) {
        match self.signalling.get_mut(cgroup) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.signalling.remove(cgroup);
                self.replan();
            }
            None => {}
        }
    }
}

#[cfg(test)]
impl Engine {
    /// Signal passes and kill rounds handed to a blocking thread and not reported yet.
    pub(crate) fn signals_under_way(&self) -> usize {
        self.signalling.values().sum()
    }
}
