//! Freezing a job (preemption, suspend, the memory governor): at once where the kernel freezes
//! by itself (`cgroup.freeze`), else the v1 freezer's wait for FROZEN on a blocking thread that
//! reports [`Event::Frozen`]. A job gives up its CPUs only once its freeze is confirmed; a
//! freeze that is not confirmed is not taken as one (the job runs on in its role, thawed).

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use tracing::{debug, info, warn};

use super::store_writes::OnFail;
use super::{role_of, Engine, Event};
use crate::cgroup_port::Freezing;

/// What a freeze under way is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FreezeFor {
    /// Preempted or suspended: the job takes `phase` and gives up its CPUs.
    Role {
        phase: Phase,
        reason: Option<String>,
    },
    /// The memory governor's: the job keeps its CPUs.
    Memory,
    /// A suspension resumed before the v1 freezer confirmed it: thawed once the freezer
    /// answers; the job runs on in its role with its CPUs.
    Cancelled,
}

impl Engine {
    /// Freeze a running job so that it gives up its CPUs in role `phase`. `Ok(true)`: frozen
    /// now; `Ok(false)`: the v1 freezer is FREEZING — the job keeps its role and CPUs until
    /// [`Event::Frozen`] confirms it; `Err`: not frozen (the job runs on in its role).
    pub(super) fn freeze_job(
        &mut self,
        seq: i64,
        phase: Phase,
        reason: Option<String>,
    ) -> Result<bool, String> {
        let why = FreezeFor::Role {
            phase,
            reason: reason.clone(),
        };
        if !self.begin_freeze(seq, why)? {
            return Ok(false);
        }
        self.frozen_as(seq, phase, reason);
        Ok(true)
    }

    /// Start freezing job `seq` for `why`. `Ok(true)`: frozen; `Ok(false)`: a blocking thread
    /// waits for FROZEN and reports [`Event::Frozen`]; `Err`: not frozen (a freezer left
    /// FREEZING is thawed), or a freeze of the job is still under way.
    pub(super) fn begin_freeze(&mut self, seq: i64, why: FreezeFor) -> Result<bool, String> {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return Err("no such job".into());
        };
        if j.freezing.is_some() {
            return Err("its freeze is still under way".into());
        }
        match self.driver.freeze_begin(&j.cgroup) {
            Ok(Freezing::Frozen) => Ok(true),
            Ok(Freezing::Wait(wait)) => {
                debug!(job = %j.id, "freezer FREEZING: waiting for FROZEN on a blocking thread");
                j.freezing = Some(why);
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let error = wait().err().map(|e| e.to_string());
                    let _ = tx.send(Event::Frozen { seq, error });
                });
                Ok(false)
            }
            Err(e) => {
                warn!(job = %j.id, error = %e, "cannot freeze job; it keeps its cpus");
                let thaw = !j.memory.frozen;
                self.thaw_after_failed_freeze(seq, thaw);
                Err(e.to_string())
            }
        }
    }

    /// The v1 freezer may be left FREEZING (a task that would not stop in time): thaw what
    /// stopped, as the job runs on (unless the governor holds it frozen).
    fn thaw_after_failed_freeze(&mut self, seq: i64, thaw: bool) {
        let Some(j) = self.jobs.get(&seq).filter(|_| thaw) else {
            return;
        };
        if let Err(e) = self.driver.freeze(&j.cgroup, false) {
            warn!(job = %j.id, error = %e, "cannot thaw after a failed freeze");
        }
    }

    /// A frozen job takes role `phase` and gives up its CPUs.
    fn frozen_as(&mut self, seq: i64, phase: Phase, reason: Option<String>) {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        // Frozen now for another reason (preempted, suspended): no longer the governor's to thaw,
        // and the governor's span ends here.
        if j.memory.frozen {
            if let Some(since) = j.memory.frozen_since_ms.take() {
                j.memory.frozen_total_ms += (self.clock.now_ms() - since).max(0);
            }
        }
        j.memory.frozen = false;
        j.phase = phase;
        j.cpus = CpuSet::new();
        j.reason = reason;
        info!(job = %j.id, user = %j.user, role = role_of(phase).as_str(), reason = j.reason.as_deref().unwrap_or(""), "job frozen");
        // Frozen in the kernel already: kept in memory if the store refuses, and written again.
        let (cpus, mems) = (j.cpus, j.mems);
        let _ = self.store_write(seq, "set_role", OnFail::Rewrite, |s| {
            s.set_role(seq, role_of(phase), &cpus, &mems)
        });
    }

    /// The wait for FROZEN of job `seq` is over: with `error`, the freeze did not happen (the
    /// job runs on in its role, thawed); else the transition it was for is made now.
    pub(super) fn freeze_done(&mut self, seq: i64, error: Option<String>) {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        let Some(why) = j.freezing.take() else {
            return;
        };
        let (ending, governor_holds) = (j.end.ending, j.memory.frozen);
        if let Some(e) = error {
            warn!(job = %j.id, error = %e, "the freezer did not confirm the freeze; the job runs on in its role");
            self.thaw_after_failed_freeze(seq, !governor_holds);
            return;
        }
        if ending {
            // It ended meanwhile: its leftovers must be able to exit; its CPUs go with its end.
            self.thaw_after_failed_freeze(seq, true);
            return;
        }
        match why {
            FreezeFor::Role { phase, reason } => {
                self.frozen_as(seq, phase, reason);
                self.replan();
            }
            FreezeFor::Memory => self.memory_frozen(seq),
            FreezeFor::Cancelled => {
                info!(job = %self.jobs[&seq].id, "suspension cancelled before the freezer confirmed it: thawed");
                self.thaw_after_failed_freeze(seq, !governor_holds);
            }
        }
    }
}
