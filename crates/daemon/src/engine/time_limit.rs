//! Time limits (`pjw run --time`): a job that has run as long as its limit gets SIGTERM and,
//! `[job] kill_wait` seconds later if it has not ended, is killed; its end is recorded as
//! [`EndReason::TimeLimit`] (class `timeout`) and its user told by `pjw run`'s watcher. What counts ([`counts_now`]): time as a primary on its own CPUs, and time as a
//! backfiller that holds CPUs no primary holds or that can only backfill; not time queued,
//! frozen (preempted, suspended, frozen by the memory governor) or backfilling in the idle class
//! on CPUs primaries hold (it may get no CPU at all). The engine updates each job's
//! [`RunClock`] after every event; its timer wakes at the next limit ([`Engine::next_time_limit`]),
//! and the governor's tick looks again (a thaw that arms no timer).
//!
//! The limit a job gets is the node's to hold ([`Engine::time_limit_for`]): a job that asks for
//! none gets `[job] default_time` (or `max_time`), one that asks for more than `max_time` is
//! refused unless an administrator asks; a workload manager's job submitted by root or the
//! admin group (a job starter) keeps the manager's limits (pjw applies only what it asked
//! for); a user's claim to be one does not lift the node's. The running time counted is written to
//! the store at least every [`SAVE_EVERY_MS`] of it, so that a restart goes on from there.

use std::time::Duration;

use pjw_core::sched::{Phase, Placement};
use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, RunRequest};
use tracing::{error, warn};

use super::job::Job;
use super::store_writes::OnFail;
use super::{refuse, Cred, Engine, Refusal, Who};
use crate::profile::EndReason;

/// How much counted running time may go unwritten: what a restart may give a job back.
pub const SAVE_EVERY_MS: i64 = 60_000;
/// After the store refused a write of it: the next try.
const SAVE_RETRY_MS: i64 = 10_000;

/// The time a job's limit has counted (pure: times are passed in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunClock {
    /// Counted up to the last observation (ms).
    ran_ms: i64,
    /// Whether it counted from the last observation on, and when that was.
    since: Option<(bool, i64)>,
    /// Counted time the store holds (ms).
    saved_ms: i64,
    /// The store refused the last write: the next try, not before.
    retry_at: Option<i64>,
}

impl RunClock {
    /// A clock that goes on from `ran_ms` counted before (read back from the store).
    pub fn resumed(ran_ms: u64) -> RunClock {
        let ran_ms = i64::try_from(ran_ms).unwrap_or(i64::MAX);
        RunClock {
            ran_ms,
            since: None,
            saved_ms: ran_ms,
            retry_at: None,
        }
    }

    /// How long until the counted time not yet written reaches [`SAVE_EVERY_MS`], or a write
    /// the store refused is tried again (0: due).
    pub fn save_due_in(&self, now_ms: i64) -> i64 {
        let due = (SAVE_EVERY_MS - (self.ran_ms_at(now_ms) - self.saved_ms)).max(0);
        match self.retry_at {
            Some(at) if due == 0 => (at - now_ms).max(0),
            _ => due,
        }
    }

    /// The store refused a write at `now_ms`: tried again [`SAVE_RETRY_MS`] later.
    pub fn save_refused(&mut self, now_ms: i64) {
        self.retry_at = Some(now_ms + SAVE_RETRY_MS);
    }

    /// The job counts (`counts`) or not from `now_ms` on; the time since the last observation
    /// goes to what it did then.
    pub fn observe(&mut self, counts: bool, now_ms: i64) {
        self.ran_ms = self.ran_ms_at(now_ms);
        self.since = Some((counts, now_ms));
    }

    /// The store holds the time counted up to `ran_ms`.
    pub fn saved(&mut self, ran_ms: i64) {
        self.saved_ms = self.saved_ms.max(ran_ms);
        self.retry_at = None;
    }

    /// The counted time the store holds.
    pub fn saved_ms(&self) -> i64 {
        self.saved_ms
    }

    /// The time counted up to `now_ms`.
    pub fn ran_ms_at(&self, now_ms: i64) -> i64 {
        match self.since {
            Some((true, since)) => self.ran_ms + (now_ms - since).max(0),
            _ => self.ran_ms,
        }
    }
}

/// Whether job `j`'s limit counts now, given the CPUs primaries hold.
pub(super) fn counts_now(j: &Job, primary_cpus: &CpuSet) -> bool {
    if j.started.is_none() || j.memory.frozen {
        return false;
    }
    match j.phase {
        Phase::Primary => true,
        Phase::Backfill => {
            j.req.placement == Placement::BackfillOnly
                || !j.cpus.difference(primary_cpus).is_empty()
        }
        Phase::Queued | Phase::Preempted | Phase::Suspended => false,
    }
}

impl Engine {
    /// The limit a new job gets, and where it came from (see the module's text); refused: a
    /// user asking for more than the node's maximum.
    pub(super) fn time_limit_for(
        &self,
        cred: &Cred,
        who: &Who,
        req: &RunRequest,
    ) -> Result<Option<(TimeLimit, LimitSource)>, Refusal> {
        let asked = req.time_limit_s.and_then(TimeLimit::from_secs); // range checked in validate
        let privileged = self.privileged(cred, who);
        // A manager's job starter running as root keeps its manager's limits; a user's claim
        // to be a manager's job (`--from-env`, nothing checks it) does not lift the node's.
        if req.wlm.is_some() && privileged {
            return Ok(asked.map(|l| (l, LimitSource::Asked)));
        }
        self.cfg
            .time_limits
            .limit_for(asked, privileged)
            .map_err(|e| {
                refuse(
                    ErrorCode::Denied,
                    format!(
                        "--time {} is more than this node lets a job run ({}, job.max_time)",
                        e.asked, e.max
                    ),
                )
            })
    }

    /// Every job's run clock, after an event (its role, CPUs or freeze may have changed).
    pub(super) fn observe_run_clocks(&mut self) {
        // After every event, the launch's included: nothing to do on a node without limits.
        if !self.jobs.values().any(|j| j.req.time_limit.is_some()) {
            return;
        }
        let now_ms = self.clock.mono_ms();
        let primary_cpus = self.primary_cpus();
        for j in self
            .jobs
            .values_mut()
            .filter(|j| j.req.time_limit.is_some())
        {
            let counts = counts_now(j, &primary_cpus);
            j.run_clock.observe(counts, now_ms);
        }
    }

    /// Kill every job that has run its time limit out (and is not ending already, killed by
    /// pjw for its leftovers or by a user: that end stays its own).
    pub(super) fn enforce_time_limits(&mut self) {
        let now = self.clock.mono_ms();
        self.save_run_clocks(now);
        let kill_leftovers = self.cfg.kill_leftovers;
        let over: Vec<(i64, TimeLimit)> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some() && j.end.reason.is_none() && j.end.killed_by.is_none())
            // Its command ended and what it left is being killed: it ended on its own.
            .filter(|j| !(j.end.ending && kill_leftovers))
            .filter_map(|j| {
                let limit = j.req.time_limit?;
                (j.run_clock.ran_ms_at(now) >= limit.millis() as i64).then_some((j.seq, limit))
            })
            .collect();
        for (seq, limit) in over {
            self.end_at_time_limit(seq, limit);
        }
        let due: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.end.kill_due_ms.is_some_and(|at| at <= now))
            .map(|j| j.seq)
            .collect();
        for seq in due {
            self.kill_after_warning(seq);
        }
    }

    /// Once some job's unwritten counted time reached [`SAVE_EVERY_MS`]: write it, and that of
    /// every job with at least half as much unwritten, in one transaction. The jobs' writes fall
    /// due together after that, so a node of many limited jobs wakes about once a minute for
    /// them, not once per job.
    fn save_run_clocks(&mut self, now: i64) {
        let due = self
            .jobs
            .values()
            .any(|j| j.req.time_limit.is_some() && j.run_clock.save_due_in(now) == 0);
        if due {
            let batch = self.unwritten_clocks(now, SAVE_EVERY_MS / 2);
            self.save_run_clocks_of(&batch, now);
        }
    }

    /// Write every limited job's counted time not yet written (the daemon is stopping).
    pub(super) fn save_all_run_clocks(&mut self) {
        let now = self.clock.mono_ms();
        let unsaved = self.unwritten_clocks(now, 1);
        self.save_run_clocks_of(&unsaved, now);
    }

    /// `(seq, counted ms)` of each limited job with at least `at_least` ms counted and not
    /// yet written.
    fn unwritten_clocks(&self, now: i64, at_least: i64) -> Vec<(i64, i64)> {
        self.jobs
            .values()
            .filter(|j| j.req.time_limit.is_some())
            .map(|j| (j.seq, j.run_clock.ran_ms_at(now), j.run_clock.saved_ms()))
            .filter(|&(_, ran, saved)| ran - saved >= at_least)
            .map(|(seq, ran, _)| (seq, ran))
            .collect()
    }

    /// Write these jobs' counted times (`(seq, ms)`) in one transaction; refused, each is
    /// tried again [`SAVE_RETRY_MS`] later (nothing else of the jobs is marked to write again:
    /// their rows are not behind).
    fn save_run_clocks_of(&mut self, times: &[(i64, i64)], now: i64) {
        if times.is_empty() {
            return;
        }
        let rows: Vec<(i64, u64)> = times.iter().map(|&(s, ms)| (s, ms.max(0) as u64)).collect();
        let seq = if times.len() == 1 { times[0].0 } else { 0 };
        let wrote = self.store_write(seq, "set_times_ran", OnFail::Later, |s| {
            s.set_times_ran(&rows)
        });
        let ok = wrote.is_ok();
        for &(seq, ran_ms) in times {
            if let Some(j) = self.jobs.get_mut(&seq) {
                if ok {
                    j.run_clock.saved(ran_ms);
                } else {
                    j.run_clock.save_refused(now);
                }
            }
        }
    }

    /// How long until the next counting job reaches its limit, its counted time is due to be
    /// written, or a warned one is due to be killed; None: none of these. Whether a
    /// job counts is taken as it is now (this event may have started or thawed it), the time
    /// it ran from its clock.
    pub(super) fn next_time_limit(&self) -> Option<Duration> {
        let now = self.clock.mono_ms();
        let primary_cpus = self.primary_cpus();
        self.jobs
            .values()
            .filter(|j| j.end.reason.is_none() && j.end.killed_by.is_none())
            .filter(|j| counts_now(j, &primary_cpus))
            .filter_map(|j| {
                let left = j.req.time_limit?.millis() as i64 - j.run_clock.ran_ms_at(now);
                // One already over it was looked at and could not be signalled: the next
                // event or the governor's tick tries again, not a timer spinning on it.
                let save = j.run_clock.save_due_in(now).max(1);
                let next = if left > 0 { left.min(save) } else { save };
                Some(Duration::from_millis(next as u64 + 1))
            })
            .chain(self.jobs.values().filter_map(|j| {
                let left = j.end.kill_due_ms? - now;
                Some(Duration::from_millis(left.max(0) as u64 + 1))
            }))
            .min()
    }

    /// The time job `j` has left to run (ms), once it has started; None: no limit, or queued.
    pub(super) fn time_left_ms(&self, j: &Job) -> Option<i64> {
        let limit = j.req.time_limit?;
        j.started?;
        let ran = j.run_clock.ran_ms_at(self.clock.mono_ms());
        Some((limit.millis() as i64 - ran).max(0))
    }

    /// Job `seq` reached its time limit: SIGTERM to its processes, the kill a grace later:
    /// `kill_wait`, or its limit where that is shorter (a job that claims 2 s to start sooner
    /// runs at most 4 s), at once where it is 0. The warning is best effort: a signal the
    /// kernel refuses is logged and the kill still follows; a kill it refuses records nothing
    /// and is tried again at the next look.
    fn end_at_time_limit(&mut self, seq: i64, limit: TimeLimit) {
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        let grace_s = self.cfg.kill_wait_s.min(limit.secs());
        // Written now (once): a restart during the grace warns it again at once, not a
        // minute later.
        let now = self.clock.mono_ms();
        let ran_ms = j.run_clock.ran_ms_at(now);
        if ran_ms > j.run_clock.saved_ms() {
            self.save_run_clocks_of(&[(seq, ran_ms)], now);
        }
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        warn!(job = %j.id, user = %j.user, limit = %limit, grace_s, "job ran its time limit out: SIGTERM, then SIGKILL");
        let kill_due = if grace_s == 0 {
            if let Err(e) = self.kill_processes(seq) {
                if let Some(j) = self.jobs.get(&seq) {
                    error!(job = %j.id, error = %e, "cannot kill the job at its time limit; trying again at the next look");
                }
                return;
            }
            None
        } else {
            self.signal_job(seq, libc::SIGTERM);
            Some(self.clock.mono_ms() + grace_s as i64 * 1000)
        };
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.end.reason = Some(EndReason::TimeLimit(limit, j.time_source));
            j.starter.held = false;
            j.end.kill_due_ms = kill_due;
            j.end.ending |= kill_due.is_none();
        }
        self.check_empty(seq);
    }

    /// A job warned at its time limit has not ended by its deadline: killed, and killed again
    /// every second while anything of it is left (kill rounds a fork bomb outlived, a kill the
    /// kernel refused), until its cgroup is empty and it ends.
    fn kill_after_warning(&mut self, seq: i64) {
        let again = self.clock.mono_ms() + 1000;
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        j.end.kill_due_ms = Some(again);
        warn!(job = %j.id, user = %j.user, "job still running past its time limit's grace: killing it");
        if let Err(e) = self.kill_processes(seq) {
            if let Some(j) = self.jobs.get(&seq) {
                error!(job = %j.id, error = %e, "cannot kill the job after its time limit; trying again in 1 s");
            }
            return;
        }
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.end.ending = true;
        }
        self.check_empty(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::{RunClock, SAVE_EVERY_MS};

    #[test]
    fn the_run_clock_counts_only_the_spans_that_count() {
        let mut c = RunClock::default();
        assert_eq!(c.ran_ms_at(5_000), 0);
        c.observe(true, 1_000);
        assert_eq!(c.ran_ms_at(3_000), 2_000);
        c.observe(false, 4_000);
        assert_eq!(c.ran_ms_at(10_000), 3_000);
        c.observe(true, 10_000);
        c.observe(true, 11_000);
        assert_eq!(c.ran_ms_at(12_500), 5_500);
        // A clock that went back counts nothing for that span.
        c.observe(true, 9_000);
        assert_eq!(c.ran_ms_at(9_000), 4_000);
    }

    #[test]
    fn counted_time_is_due_to_be_written_every_minute_and_a_restart_goes_on_from_it() {
        let mut c = RunClock::default();
        c.observe(true, 0);
        assert_eq!(c.save_due_in(0), SAVE_EVERY_MS);
        assert_eq!(c.save_due_in(59_000), 1_000);
        assert_eq!(c.save_due_in(61_000), 0);
        c.saved(61_000);
        assert_eq!(c.save_due_in(61_000), SAVE_EVERY_MS);
        // A refused write is tried again 10 s later, not at every look.
        let mut refused = c;
        refused.observe(true, 61_000);
        assert_eq!(refused.save_due_in(121_000), 0);
        refused.save_refused(121_000);
        assert_eq!(refused.save_due_in(125_000), 6_000);
        assert_eq!(refused.save_due_in(131_000), 0);
        refused.saved(131_000);
        assert_eq!(refused.save_due_in(131_000), SAVE_EVERY_MS);
        // Time that does not count does not make a write due.
        c.observe(false, 70_000);
        assert_eq!(c.save_due_in(500_000), SAVE_EVERY_MS - 9_000);
        // Read back after a restart: counting goes on from the stored time once observed.
        let mut r = RunClock::resumed(61_000);
        assert_eq!(r.ran_ms_at(1_000_000), 61_000);
        assert_eq!(r.save_due_in(1_000_000), SAVE_EVERY_MS);
        r.observe(true, 1_000_000);
        assert_eq!(r.ran_ms_at(1_030_000), 91_000);
    }
}
