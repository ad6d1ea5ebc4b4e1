//! Time limits (`pjw run --time`): a job that has run as long as its limit — as a primary (a
//! backfill-only job: as a backfiller too; time queued or frozen never counts,
//! [`crate::profile::JobProf::ran_ms`]) — is killed, its end recorded as
//! [`EndReason::TimeLimit`] (class `timeout`) and its user told by `pjw run`'s watcher. The
//! engine's timer wakes at the next job's limit ([`Engine::next_time_limit`]).

use std::time::Duration;

use pjw_core::time_limit::TimeLimit;
use tracing::{error, warn};

use super::job::Job;
use super::Engine;
use crate::profile::{EndReason, ProfState};

impl Engine {
    /// Kill every started job that has run its time limit out.
    pub(super) fn enforce_time_limits(&mut self) {
        let now = self.clock.now_ms();
        let over: Vec<(i64, TimeLimit)> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some() && j.end.reason.is_none() && j.end.killed_by.is_none())
            .filter_map(|j| {
                let limit = j.req.time_limit?;
                (ran_ms(j, now) >= limit.millis() as i64).then_some((j.seq, limit))
            })
            .collect();
        for (seq, limit) in over {
            self.end_at_time_limit(seq, limit);
        }
    }

    /// How long until the next running job reaches its limit (frozen, queued and most
    /// backfilling jobs do not run towards theirs); None: no running job has one.
    pub(super) fn next_time_limit(&self) -> Option<Duration> {
        let now = self.clock.now_ms();
        self.jobs
            .values()
            .filter(|j| j.started.is_some() && j.end.reason.is_none() && j.end.killed_by.is_none())
            .filter(|j| match j.prof_state() {
                ProfState::Running => true,
                ProfState::Backfill => backfill_counts(j),
                ProfState::Queued | ProfState::Frozen => false,
            })
            .filter_map(|j| {
                let left = j.req.time_limit?.millis() as i64 - ran_ms(j, now);
                Some(Duration::from_millis(left.max(0) as u64 + 1))
            })
            .min()
    }

    /// The time job `j` has left to run (ms), once it has started; None: no limit, or queued.
    pub(super) fn time_left_ms(&self, j: &Job) -> Option<i64> {
        let limit = j.req.time_limit?;
        j.started?;
        Some((limit.millis() as i64 - ran_ms(j, self.clock.now_ms())).max(0))
    }

    /// Kill job `seq` at its time limit; its CPUs return once its cgroup is empty.
    fn end_at_time_limit(&mut self, seq: i64, limit: TimeLimit) {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        warn!(job = %j.id, user = %j.user, limit = %limit, "job ran its time limit out: killing it");
        j.end.reason = Some(EndReason::TimeLimit(limit));
        j.starter.held = false;
        let was_ending = j.end.ending;
        j.end.ending = true;
        if !was_ending {
            if let Err(e) = self.kill_processes(seq) {
                if let Some(j) = self.jobs.get(&seq) {
                    error!(job = %j.id, error = %e, "cannot kill the job at its time limit");
                }
            }
        }
        self.check_empty(seq);
    }
}

/// Whether time as a backfiller counts against job `j`'s limit: only for a job that can run
/// only as one.
fn backfill_counts(j: &Job) -> bool {
    j.req.placement == pjw_core::sched::Placement::BackfillOnly
}

/// The time job `j` has run towards its limit at `now_ms`.
fn ran_ms(j: &Job, now_ms: i64) -> i64 {
    j.prof.ran_ms(now_ms, backfill_counts(j))
}
