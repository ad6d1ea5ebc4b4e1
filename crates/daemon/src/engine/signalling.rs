//! Signals to a job's processes sent off the engine's thread, and the job names they hold.
//!
//! A time limit's SIGTERM opens a pidfd and sends a signal per process, so its cost grows with
//! the job's processes (a fork bomb's thousands); the engine hands it to a blocking thread and
//! waits for nothing, as it does the kill rounds where there is no `cgroup.kill` (a job's in
//! `engine/lifecycle.rs`, a withdrawn queued job's leftovers in `engine/preplace.rs`). Each
//! lists the processes of a cgroup by its name, and a job name is free again once its job
//! ended: so while one is under way, the name is held. No job of that name waits in its cgroups
//! (`engine/preplace.rs`) or starts (`in_plan` in `engine/planning.rs`) until every pass on it
//! has reported ([`Event::Signalled`], [`Event::Killed`]; a pass that panics reports too);
//! else a late pass could list a new job's processes in a cgroup of the same name and signal
//! them (docs/security.md U27).

use pjw_core::sched::Phase;
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
        let (pass, cgroup) = (self.driver.signaller(&j.cgroup, sig), j.cgroup.clone());
        let work = move || pass().err().map(|e| e.to_string());
        if tokio::runtime::Handle::try_current().is_err() {
            let error = work();
            self.log_signalled(seq, sig, error);
            return;
        }
        self.spawn_held(&cgroup, work, move |cgroup, error| Event::Signalled {
            seq,
            cgroup,
            sig,
            error,
        });
    }

    /// Run `work`, a pass over the processes of `cgroup` that returns what failed, on a
    /// blocking thread, holding the name until it reports `report(cgroup, error)` (a pass that
    /// panics reports that). Needs the runtime.
    pub(super) fn spawn_held(
        &mut self,
        cgroup: &str,
        work: impl FnOnce() -> Option<String> + Send + 'static,
        report: impl FnOnce(String, Option<String>) -> Event + Send + 'static,
    ) {
        self.hold_name(cgroup);
        let (tx, cgroup) = (self.tx.clone(), cgroup.to_string());
        tokio::task::spawn_blocking(move || {
            let error = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .unwrap_or_else(|_| Some("the pass panicked".into()));
            let _ = tx.send(report(cgroup, error));
        });
    }

    /// A pass handed to a blocking thread reported ([`Event::Killed`], [`Event::Signalled`]).
    pub(super) fn pass_reported(&mut self, ev: Event) {
        match ev {
            Event::Killed { seq, cgroup, error } => self.killed(seq, &cgroup, error),
            Event::Signalled {
                seq,
                cgroup,
                sig,
                error,
            } => self.signalled(seq, &cgroup, sig, error),
            _ => {}
        }
    }

    /// A signal pass on `cgroup` reported: logged, and the name released.
    fn signalled(&mut self, seq: i64, cgroup: &str, sig: i32, error: Option<String>) {
        self.log_signalled(seq, sig, error);
        self.release_name(cgroup);
    }

    /// The kill rounds of job `seq` (none: a withdrawn job's leftovers) in `cgroup` are over:
    /// whether its cgroup is empty is looked at now, and its name is free again.
    fn killed(&mut self, seq: Option<i64>, cgroup: &str, error: Option<String>) {
        match (seq, error) {
            (Some(seq), error) => {
                if let (Some(e), Some(job)) = (error, self.jobs.get(&seq)) {
                    warn!(job = %job.id, error = %e, "cannot kill every process of the job");
                }
                self.check_empty(seq);
            }
            (None, Some(e)) => {
                warn!(cgroup, error = %e, "cannot kill what stayed in a withdrawn job's cgroups")
            }
            (None, None) => {}
        }
        self.release_name(cgroup);
    }

    fn log_signalled(&self, seq: i64, sig: i32, error: Option<String>) {
        let job = self.jobs.get(&seq).map(|j| j.id.to_string());
        let job = job.as_deref().unwrap_or("(ended)");
        match error {
            None => debug!(job, sig, "job signalled"),
            Some(e) => warn!(
                job,
                sig,
                error = %e,
                "not every process of the job got the signal; the kill follows as planned"
            ),
        }
    }

    /// Whether no job of name `cgroup` may wait in its cgroups or start yet: the old cgroups of
    /// that name are being removed (`engine/removal.rs`) or vacated (`engine/preplace.rs`), or
    /// a pass on them is under way.
    pub(super) fn name_held(&self, cgroup: &str) -> bool {
        self.removing.contains_key(cgroup)
            || self.vacating.holds(cgroup)
            || self.signalling.contains_key(cgroup)
    }

    /// A pass on `cgroup` is under way: the name is held.
    fn hold_name(&mut self, cgroup: &str) {
        *self.signalling.entry(cgroup.to_string()).or_insert(0) += 1;
    }

    /// A pass on `cgroup` reported; when it was the last one, the name is free.
    pub(super) fn release_name(&mut self, cgroup: &str) {
        match self.signalling.get_mut(cgroup) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.signalling.remove(cgroup);
                self.name_freed(cgroup);
            }
            None => {}
        }
    }

    /// A queued job of name `cgroup`, kept out while the name was held, waits in its cgroups
    /// now (where it can) and gets its turn in the plan.
    fn name_freed(&mut self, cgroup: &str) {
        let queued: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.cgroup == cgroup && j.phase == Phase::Queued)
            .map(|j| j.seq)
            .collect();
        if queued.is_empty() {
            return;
        }
        for seq in queued {
            self.preplace(seq);
        }
        self.replan();
    }
}

#[cfg(test)]
impl Engine {
    /// Signal passes and kill rounds handed to a blocking thread and not reported yet.
    pub(crate) fn signals_under_way(&self) -> usize {
        self.signalling.values().sum()
    }
}
