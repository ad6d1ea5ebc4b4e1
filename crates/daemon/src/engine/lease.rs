//! Leases of registered jobs in the engine (docs/decisions.md (cc)): the lease tick (renew what
//! has processes, end what ran out, hand the askable jobs to the asker's thread), the managers'
//! words, and the end they may bring.
//!
//! The engine never runs a manager's command: [`crate::lease::Asker`] does, on its own thread,
//! and its words come back as [`Event::LeaseWords`]. The rule is [`pjw_core::lease::judge`]: a
//! job ends only on a definite "gone" or an expired lease; no answer never ends a job.

use std::str::FromStr;
use std::time::Duration;

use pjw_core::lease::{self, Verdict, Why, Word};
use pjw_proto::LeaseInfo;
use pjw_wlm::Manager;
use tracing::{info, warn};

use super::{Engine, Event, Job};
use crate::lease::{AskJob, Asker};
use crate::profile::{EndReason, LeaseEnd};

/// What the engine knows of one registered job's lease.
#[derive(Clone, Debug)]
pub(super) struct JobLease {
    /// The last renewal (ms since the epoch).
    renewed_ms: i64,
    /// The manager's latest word, and when it came.
    word: Option<(i64, Word)>,
}

impl Engine {
    /// Ask workload managers through `a` at every lease tick.
    pub fn set_asker(&mut self, a: Asker) {
        self.asker = Some(a);
    }

    /// A registered job that runs: started, not ending, in a manager's namespace.
    pub(super) fn leased(j: &Job) -> bool {
        j.starter.wlm.is_some()
            && j.id.namespace().is_some()
            && j.started.is_some()
            && !j.end.ending
    }

    fn manager_of(j: &Job) -> Option<Manager> {
        j.id.namespace().and_then(|m| Manager::from_str(m).ok())
    }

    /// Whether job `j` has a process now (the process events' count, else its last sample's).
    fn has_procs(&self, j: &Job) -> bool {
        if self.proc_events {
            if let Some(c) = self.procs.counts(j.seq) {
                return c.procs_now > 0;
            }
        }
        j.prof.last.as_ref().and_then(|s| s.procs).unwrap_or(0) > 0
    }

    /// Arm the next lease tick if a registered job runs and none is armed: every
    /// `[lease] check_interval` (every minute when the managers are never asked).
    pub(super) fn arm_lease(&mut self) {
        if self.lease_armed || !self.jobs.values().any(Engine::leased) {
            return;
        }
        self.lease_armed = true;
        let every = match self.cfg.lease.check_ms {
            0 => 60_000,
            ms => ms,
        };
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(every)).await;
            let _ = tx.send(Event::LeaseTick);
        });
    }

    /// The lease tick: renew the leases of jobs with processes, end those run out, ask the
    /// managers about the rest.
    pub(super) fn lease_tick(&mut self) {
        self.lease_armed = false;
        let now = self.clock.now_ms();
        let lease_ms = self.cfg.lease.lease_ms;
        let live: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| Engine::leased(j))
            .map(|j| j.seq)
            .collect();
        self.leases.retain(|seq, _| live.contains(seq));
        let mut ends = Vec::new();
        let mut ask = Vec::new();
        for seq in live {
            let Some(j) = self.jobs.get(&seq) else {
                continue;
            };
            let has = self.has_procs(j);
            let l = self.leases.entry(seq).or_insert(JobLease {
                renewed_ms: now,
                word: None,
            });
            match lease::judge(l.renewed_ms, now, lease_ms, has, None) {
                Verdict::Keep { renewed_ms } => l.renewed_ms = renewed_ms,
                Verdict::End(why) => ends.push((seq, why)),
            }
            if self.cfg.lease.check_ms > 0 {
                if let (Some(m), Some((_, id))) =
                    (Engine::manager_of(j), j.id.as_str().split_once(':'))
                {
                    if pjw_wlm::ask::askable(m) {
                        ask.push(AskJob {
                            seq,
                            manager: m,
                            id: id.to_string(),
                        });
                    }
                }
            }
        }
        for (seq, why) in ends {
            self.end_by_lease(seq, why);
        }
        if let (Some(a), false) = (&self.asker, ask.is_empty()) {
            a.ask(ask);
        }
        self.arm_lease();
    }

    /// The managers' words about registered jobs.
    pub(super) fn lease_words(&mut self, words: Vec<(i64, Word)>) {
        let now = self.clock.now_ms();
        let lease_ms = self.cfg.lease.lease_ms;
        let mut ends = Vec::new();
        for (seq, w) in words {
            let Some(j) = self.jobs.get(&seq).filter(|j| Engine::leased(j)) else {
                continue;
            };
            let has = self.has_procs(j);
            let manager = j.id.namespace().unwrap_or("").to_string();
            let id = j.id.to_string();
            let l = self.leases.entry(seq).or_insert(JobLease {
                renewed_ms: now,
                word: None,
            });
            let was_silent = matches!(l.word, Some((_, Word::NoAnswer(_))));
            match &w {
                Word::NoAnswer(why) if !was_silent => warn!(
                    job = %id, manager = %manager, why = %why,
                    "workload manager gives no answer about the job; it runs on (only an answer that it is gone, or its lease running out, ends it)"
                ),
                Word::Running(_) | Word::Gone(_) if was_silent => {
                    info!(job = %id, manager = %manager, word = %w.text(), "workload manager answers again")
                }
                _ => {}
            }
            let verdict = lease::judge(l.renewed_ms, now, lease_ms, has, Some(&w));
            l.word = Some((now, w));
            match verdict {
                Verdict::Keep { renewed_ms } => l.renewed_ms = renewed_ms,
                Verdict::End(why) => ends.push((seq, why)),
            }
        }
        for (seq, why) in ends {
            self.end_by_lease(seq, why);
        }
    }

    /// End registered job `seq` for its lease: the reason recorded, its processes killed, its
    /// CPUs returned once its cgroup is empty (as after its Epilog's `end`).
    fn end_by_lease(&mut self, seq: i64, why: Why) {
        let now = self.clock.now_ms();
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        let manager = j.id.namespace().unwrap_or("its manager").to_string();
        let reason = match why {
            Why::Gone(state) => EndReason::Lease(LeaseEnd::Gone { manager, state }),
            Why::Expired { renewed_ms } => EndReason::Lease(LeaseEnd::Expired {
                manager,
                silent_s: (now - renewed_ms).max(0) / 1000,
            }),
        };
        warn!(job = %j.id, user = %j.user, reason = %reason.text(), "registered job ended: its processes are killed and its CPUs returned");
        j.starter.held = false;
        j.end.reason = Some(reason);
        let was_ending = j.end.ending;
        j.end.ending = true;
        self.leases.remove(&seq);
        if !was_ending {
            if let Err(e) = self.kill_processes(seq) {
                if let Some(j) = self.jobs.get(&seq) {
                    warn!(job = %j.id, error = %e, "cannot kill the job's processes");
                }
            }
        }
        self.check_empty(seq);
    }

    /// What `pjw status` shows of job `j`'s lease.
    pub(super) fn lease_info(&self, j: &Job) -> Option<LeaseInfo> {
        if !Engine::leased(j) {
            return None;
        }
        let l = self.leases.get(&j.seq);
        let renewed_ms = l
            .map(|l| l.renewed_ms)
            .unwrap_or_else(|| self.clock.now_ms());
        let asked =
            self.cfg.lease.check_ms > 0 && Engine::manager_of(j).is_some_and(pjw_wlm::ask::askable);
        Some(LeaseInfo {
            renewed_ms,
            expires_ms: self
                .cfg
                .lease
                .lease_ms
                .map(|ms| renewed_ms.saturating_add(ms.min(i64::MAX as u64) as i64)),
            asked,
            word: l.and_then(|l| l.word.as_ref()).map(|(_, w)| w.text()),
            word_ms: l.and_then(|l| l.word.as_ref()).map(|(at, _)| *at),
        })
    }
}
