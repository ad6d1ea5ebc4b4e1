//! Control requests about one job: kill, suspend, resume and priority.

use pjw_core::sched::Phase;
use pjw_proto::{ErrorCode, Response};
use pjw_store::StoredRole;
use tracing::info;

use super::freezing::FreezeFor;
use super::store_writes::OnFail;
use super::{err, Control, Cred, End, Engine, Who};
use crate::profile::EndReason;

impl Engine {
    pub(super) fn control(&mut self, cred: Cred, who: &Who, job: &str, what: Control) -> Response {
        let Some(seq) = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job)
            .map(|j| j.seq)
        else {
            return err(ErrorCode::NotFound, format!("no job {job} on this node"));
        };
        let j = &self.jobs[&seq];
        if cred.uid != 0 && cred.uid != j.uid {
            return err(
                ErrorCode::Denied,
                format!("job {job} belongs to {}", j.user),
            );
        }
        let by = who.name.clone();
        match what {
            // Handled by `end` (it answers later); never reaches here.
            Control::End => err(ErrorCode::Invalid, "end is answered elsewhere"),
            Control::Kill => self.kill(seq, by),
            Control::Suspend => self.suspend(seq, job, &by),
            Control::Resume => self.resume(seq, job, &by),
            Control::Priority(p) => self.change_priority(&cred, who, seq, job, p, &by),
        }
    }

    /// Suspend job `job` (`seq`): frozen, its CPUs given to others, until resumed.
    fn suspend(&mut self, seq: i64, job: &str, by: &str) -> Response {
        let j = &self.jobs[&seq];
        if j.end.ending {
            return err(ErrorCode::Invalid, format!("job {job} is ending"));
        }
        match j.phase {
            Phase::Queued => err(
                ErrorCode::Invalid,
                format!("job {job} is queued; kill it to withdraw it"),
            ),
            Phase::Suspended => err(
                ErrorCode::Invalid,
                format!("job {job} is already suspended"),
            ),
            Phase::Preempted => {
                // Frozen already; it now stays frozen until resumed. Recorded first:
                // nothing has acted on it yet, so a store that refuses refuses it.
                let (cpus, mems) = (j.cpus, j.mems);
                if let Err(e) = self.store_write(seq, "set_role", OnFail::Refuse, |s| {
                    s.set_role(seq, StoredRole::Suspended, &cpus, &mems)
                }) {
                    return err(
                        ErrorCode::Internal,
                        format!("cannot record the suspension of job {job}, so it was not suspended: {e}"),
                    );
                }
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.phase = Phase::Suspended;
                    j.reason = Some(format!("suspended by {by}"));
                }
                Response::Done {
                    message: format!("job {job} suspended"),
                }
            }
            Phase::Primary | Phase::Backfill => {
                let reason = Some(format!("suspended by {by}"));
                match self.freeze_job(seq, Phase::Suspended, reason) {
                    Ok(true) => {
                        self.replan();
                        Response::Done {
                            message: format!("job {job} suspended; its cpus went to others"),
                        }
                    }
                    Ok(false) => Response::Done {
                        message: format!(
                            "job {job} is being frozen; its cpus go to others once the freezer confirms it"
                        ),
                    },
                    Err(e) => err(
                        ErrorCode::Internal,
                        format!("cannot suspend job {job}: {e}"),
                    ),
                }
            }
        }
    }

    /// Resume a suspended job: it competes for CPUs like a preempted job and is thawed when it
    /// has them (or its suspension is cancelled before the v1 freezer confirmed it).
    fn resume(&mut self, seq: i64, job: &str, by: &str) -> Response {
        let j = &self.jobs[&seq];
        // Suspended, but the v1 freezer has not confirmed it yet (the suspend said "being
        // frozen"): cancelled; thawed when the freezer answers, its role and CPUs kept.
        if matches!(
            j.freezing,
            Some(FreezeFor::Role {
                phase: Phase::Suspended,
                ..
            })
        ) {
            if let Some(j) = self.jobs.get_mut(&seq) {
                j.freezing = Some(FreezeFor::Cancelled);
            }
            return Response::Done {
                message: format!(
                    "job {job} resumed: its suspension is cancelled before the freezer confirmed it"
                ),
            };
        }
        if j.phase != Phase::Suspended {
            return err(ErrorCode::Invalid, format!("job {job} is not suspended"));
        }
        // It competes for CPUs like a preempted job and is thawed when it has them.
        // Recorded first: a restart before it has CPUs must not bring it back
        // suspended, and a store that refuses refuses the resume.
        let (cpus, mems) = (j.cpus, j.mems);
        if let Err(e) = self.store_write(seq, "set_role", OnFail::Refuse, |s| {
            s.set_role(seq, StoredRole::Preempted, &cpus, &mems)
        }) {
            return err(
                ErrorCode::Internal,
                format!("cannot record the resumption of job {job}, so it stays suspended: {e}"),
            );
        }
        if let Some(j) = self.jobs.get_mut(&seq) {
            info!(job = %j.id, user = %j.user, by = %by, "job resumed; waiting for cpus");
            j.phase = Phase::Preempted;
            j.reason = Some("resumed; waiting for cpus".into());
        }
        self.replan();
        let resumed = self
            .jobs
            .get(&seq)
            .is_some_and(|j| j.phase != Phase::Preempted);
        Response::Done {
            message: if resumed {
                format!("job {job} resumed")
            } else {
                format!("job {job} will resume when cpus are free")
            },
        }
    }

    /// Give job `job` (`seq`) priority `p`, if `who` may.
    fn change_priority(
        &mut self,
        cred: &Cred,
        who: &Who,
        seq: i64,
        job: &str,
        p: u8,
        by: &str,
    ) -> Response {
        if let Err((code, message)) = self.check_priority(cred, who, p) {
            return err(code, message);
        }
        // Recorded first: a store that refuses the change refuses the request.
        if let Err(e) = self.store_write(seq, "set_priority", OnFail::Refuse, |s| {
            s.set_priority(seq, p)
        }) {
            return err(
                ErrorCode::Internal,
                format!(
                    "cannot record the new priority of job {job}, so it keeps its priority: {e}"
                ),
            );
        }
        if let Some(j) = self.jobs.get_mut(&seq) {
            info!(job = %j.id, from = j.req.priority, to = p, by = %by, "priority changed");
            j.req.priority = p;
        }
        self.replan();
        Response::Done {
            message: format!("job {job} now has priority {p}"),
        }
    }

    /// Kill a running job or withdraw a queued one.
    pub(super) fn kill(&mut self, seq: i64, by: String) -> Response {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return err(ErrorCode::NotFound, "no such job");
        };
        let job = j.id.to_string();
        if j.started.is_none() {
            let j = self.jobs.remove(&seq);
            if let Some(j) = j {
                info!(job = %j.id, user = %j.user, by = %by, "queued job withdrawn");
                let mut end = End::of(EndReason::KilledBy(by.clone()));
                end.killed = true;
                self.end_queued(&j, end);
                if let Some(w) = j.client.waiter {
                    let _ = w.reply.send(err(
                        ErrorCode::Invalid,
                        format!("job {job} was killed while queued"),
                    ));
                }
            }
            self.replan();
            return Response::Done {
                message: format!("job {job} withdrawn from the queue"),
            };
        }
        info!(job = %j.id, user = %j.user, by = %by, "killing job");
        j.end.killed_by = Some(by);
        j.starter.held = false;
        if let Err(e) = self.kill_processes(seq) {
            return err(ErrorCode::Internal, format!("cannot kill job {job}: {e}"));
        }
        self.check_empty(seq);
        Response::Done {
            message: format!("job {job} killed"),
        }
    }
}
