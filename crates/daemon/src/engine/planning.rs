//! Planning: asking the node-queue policy what changes and carrying out its actions (start,
//! promote, preempt, resume, expire), memory admission, and the queue's timer.

use std::time::{Duration, Instant};

use pjw_core::sched::{self, Action, JobView, Phase};
use pjw_core::CpuSet;
use pjw_proto::ErrorCode;
use tracing::{info, warn};

use super::{err, End, Engine, Event, Job};
use crate::os;

/// How soon a start put off because its client could not be read is planned again.
const START_RETRY: Duration = Duration::from_secs(1);
use crate::profile::EndReason;

impl Engine {
    /// Ask the policy what changes now and carry it out, until nothing does.
    pub(super) fn replan(&mut self) {
        // A failed start removes the job; plan again so the next one gets its chance. A queued
        // job that memory holds back is left out of the next plan, so the CPUs it was planned
        // on go to jobs that memory admits instead of idling (it starts when memory frees).
        let mut held: Vec<i64> = Vec::new();
        for _ in 0..64 {
            // Not a job that is ending, nor a recovered queued job whose client has not come
            // back, nor one memory holds back, nor a queued job whose name's old cgroups are
            // still being removed (engine/removal.rs, engine/preplace.rs: it starts when they
            // are gone) or signalled (engine/signalling.rs).
            let in_plan = |j: &Job| {
                !j.end.ending
                    && (j.phase != Phase::Queued
                        || (j.client.waiter.is_some() && !self.name_held(&j.cgroup)))
                    && !held.contains(&j.seq)
            };
            let views: Vec<JobView> = self
                .jobs
                .values()
                .filter(|j| in_plan(j))
                .map(Job::view)
                .collect();
            // An ending job keeps its CPUs until its cgroup is empty (its leftovers may run on,
            // with `kill_leftovers = false`); the policy does not see it, so they are not in
            // the pool it plans with.
            let pool = self
                .jobs
                .values()
                .filter(|j| j.end.ending && j.phase == Phase::Primary)
                .fold(self.pool, |p, j| p.difference(&j.cpus));
            let node = Engine::gpu_node(&self.gpus, &self.jobs, &self.cfg, in_plan);
            let actions = sched::plan_gpus(
                &self.policy,
                &self.alloc,
                &mut self.scratch,
                &pool,
                &views,
                self.clock.now_ms(),
                &node,
            );
            if actions.is_empty() {
                break;
            }
            // A start that memory does not admit is dropped, and so are the preemptions planned
            // to make room for it.
            let held_back: Vec<i64> = actions
                .iter()
                .filter_map(|a| match a {
                    Action::StartPrimary { key, .. } | Action::StartBackfill { key, .. } => {
                        Some(*key)
                    }
                    _ => None,
                })
                .filter(|k| !self.memory_admits(*k))
                .collect();
            held.extend(&held_back);
            let undone = self.carry_out(actions, &held_back, &mut held);
            if held_back.is_empty() && !undone {
                break;
            }
        }
        self.arm_timer();
    }

    /// Carry out one plan's `actions` but those `held_back` (memory does not admit their start);
    /// jobs that must wait out this plan go to `held`. True: something could not be done.
    fn carry_out(&mut self, actions: Vec<Action>, held_back: &[i64], held: &mut Vec<i64>) -> bool {
        let mut failed = false;
        // A preemption that did not happen (the freeze was not confirmed) frees no CPUs:
        // the job it made room for does not start on them, and waits out this plan.
        let mut not_freed: Vec<i64> = Vec::new();
        for a in actions {
            let skip = match a {
                // A job's GPUs are granted right before its start: both go, or neither.
                Action::StartPrimary { key, .. }
                | Action::StartBackfill { key, .. }
                | Action::GrantGpus { key, .. } => {
                    held_back.contains(&key) || not_freed.contains(&key)
                }
                Action::Promote { key, .. }
                | Action::Resume { key, .. }
                | Action::ResumeBackfill { key, .. } => not_freed.contains(&key),
                Action::Preempt { by, .. } => held_back.contains(&by) || not_freed.contains(&by),
                Action::Expire { .. } => false,
            };
            if skip {
                continue;
            }
            let preempted_for = match a {
                Action::Preempt { by, .. } => Some(by),
                _ => None,
            };
            let start_of = match a {
                Action::StartPrimary { key, .. } | Action::StartBackfill { key, .. } => Some(key),
                _ => None,
            };
            if !self.apply(a) {
                failed = true;
                if let Some(by) = preempted_for {
                    not_freed.push(by);
                    held.push(by);
                }
                // A start put off while its job still waits (its client could not be
                // read) is not planned again in this pass: the timer tries it later.
                if let Some(k) =
                    start_of.filter(|k| self.jobs.get(k).is_some_and(|j| j.phase == Phase::Queued))
                {
                    held.push(k);
                }
            }
        }
        failed
    }

    /// Memory promised to started jobs by their `--mem`.
    pub(super) fn mem_promised(&self) -> u64 {
        self.jobs
            .values()
            .filter(|j| j.started.is_some())
            .filter_map(|j| j.mem)
            .sum()
    }

    /// Whether a queued job may start as far as memory goes: its `--mem` fits in the partition
    /// next to the `--mem` of the jobs that hold memory, and the governor admits it (a job
    /// that fits the memory left starts while others are frozen; see `mem_status.rs`).
    pub(super) fn memory_admits(&self, key: i64) -> bool {
        self.jobs
            .get(&key)
            .is_none_or(|j| self.memory_wait(j).is_ok())
    }

    /// Carry out one action; false when it could not be done (the job is gone).
    pub(super) fn apply(&mut self, a: Action) -> bool {
        match a {
            Action::GrantGpus { key, gpus } => self.grant_gpus(key, gpus),
            Action::StartPrimary { key, cpus } => self.start(key, cpus, false),
            Action::StartBackfill { key, cpus } => self.start(key, cpus, true),
            Action::Promote { key, cpus } => self.move_job(key, cpus, Phase::Primary, None),
            Action::Resume { key, cpus } => self.move_job(key, cpus, Phase::Primary, None),
            Action::ResumeBackfill { key, cpus } => self.move_job(key, cpus, Phase::Backfill, None),
            Action::Preempt {
                key,
                by,
                to_backfill,
            } => {
                let by_id = self
                    .jobs
                    .get(&by)
                    .map(|j| j.id.to_string())
                    .unwrap_or_default();
                let reason = Some(format!("preempted by job {by_id}"));
                if to_backfill {
                    let cpus = self.jobs.get(&key).map(|j| j.cpus).unwrap_or_default();
                    self.move_job(key, cpus, Phase::Backfill, reason)
                } else {
                    // Its CPUs are free only once the freeze is confirmed.
                    self.freeze_job(key, Phase::Preempted, reason) == Ok(true)
                }
            }
            Action::Expire { key } => {
                if let Some(j) = self.jobs.remove(&key) {
                    let waited = j.queued_at.elapsed().as_secs();
                    info!(job = %j.id, user = %j.user, waited_s = waited, "job expired in the queue");
                    self.end_queued(&j, End::of(EndReason::Expired("expired in queue".into())));
                    if let Some(w) = j.client.waiter {
                        let _ = w.reply.send(err(
                            ErrorCode::Invalid,
                            format!(
                                "job {} expired after waiting {waited} s in the queue (queue_ttl)",
                                j.id
                            ),
                        ));
                    }
                }
                true
            }
        }
    }

    /// Wake up when the next queued job would expire, a running job reaches its time limit or
    /// a recovered client's grace ends.
    pub(super) fn arm_timer(&mut self) {
        let now = self.clock.now_ms();
        let mut next: Option<Duration> = None;
        let mut consider = |d: Duration| next = Some(next.map_or(d, |n: Duration| n.min(d)));
        if let Some(ttl) = self.policy.queue_ttl_ms {
            for j in self.jobs.values().filter(|j| j.phase == Phase::Queued) {
                let left = (j.req.submitted_ms + ttl - now).max(0) as u64 + 1;
                consider(Duration::from_millis(left));
            }
        }
        if let Some(d) = self.next_time_limit() {
            consider(d);
        }
        if let Some(at) = self.start_retry {
            consider(at.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
        }
        for j in self.jobs.values() {
            if let Some(by) = j.client.reconnect_by {
                consider(by.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
            }
        }
        if let Some(d) = next {
            self.tick_generation += 1;
            let generation = self.tick_generation;
            let tx = self.tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = tx.send(Event::Tick { generation });
            });
        }
    }

    /// The uid of queued job `seq`'s client process `pid` now (`Some(None)`: it is gone; no
    /// pid: `Some(None)` too, a registered job's). None: it could not be read, which is no fact
    /// about it (review F6): the job keeps its place, and the timer plans again in a second.
    pub(super) fn client_uid_now(&mut self, seq: i64, pid: Option<u32>) -> Option<Option<u32>> {
        let Some(p) = pid else {
            return Some(None);
        };
        match os::process_uid_checked(&self.cfg.proc_root, p) {
            Ok(uid) => Some(uid),
            Err(e) => {
                let id = self
                    .jobs
                    .get(&seq)
                    .map(|j| j.id.to_string())
                    .unwrap_or_default();
                warn!(job = %id, pid = p, error = %e, "cannot read the client process before its start: the job waits");
                self.start_retry = Some(Instant::now() + START_RETRY);
                None
            }
        }
    }

    /// Recovered queued jobs whose client did not come back in time are dropped.
    pub(super) fn drop_unclaimed(&mut self) {
        let now = Instant::now();
        let gone: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.client.reconnect_by.is_some_and(|b| b <= now))
            .map(|j| j.seq)
            .collect();
        for seq in gone {
            if let Some(j) = self.jobs.remove(&seq) {
                info!(job = %j.id, "queued client did not reconnect; job withdrawn");
                self.end_queued(&j, End::not_started("client left the queue"));
            }
        }
    }

    /// A connection closed: a job whose client waited on it leaves the queue.
    pub(super) fn client_gone(&mut self, conn: u64) {
        let gone = self
            .jobs
            .values()
            .find(|j| j.client.waiter.as_ref().is_some_and(|w| w.conn == conn))
            .map(|j| j.seq);
        if let Some(seq) = gone {
            if let Some(j) = self.jobs.remove(&seq) {
                info!(job = %j.id, user = %j.user, "queued client left; job withdrawn");
                self.end_queued(&j, End::not_started("client left the queue"));
            }
            self.replan();
        }
    }

    /// Queued jobs in the order they will be served.
    pub(super) fn queue_order(&self) -> Vec<i64> {
        let mut q: Vec<&Job> = self
            .jobs
            .values()
            .filter(|j| j.phase == Phase::Queued)
            .collect();
        let now = self.clock.now_ms();
        q.sort_by_key(|j| pjw_core::sched::turn_key(self.policy.order, now, &j.view()));
        q.into_iter().map(|j| j.seq).collect()
    }

    /// CPUs held by primaries.
    pub(super) fn primary_cpus(&self) -> CpuSet {
        self.jobs
            .values()
            .filter(|j| j.phase == Phase::Primary)
            .fold(CpuSet::new(), |acc, j| acc.union(&j.cpus))
    }

    /// The pool's CPUs no primary holds.
    pub(super) fn free(&self) -> CpuSet {
        self.pool.difference(&self.primary_cpus())
    }
}
