//! The node queue: who runs, where, and in which role. Pure: the daemon passes a snapshot of
//! its jobs and the time, and applies the [`Action`]s it gets back.
//!
//! Roles: a **primary** holds exclusive CPUs; a **backfiller** runs in the idle scheduling class
//! on CPUs primaries hold, so it only gets the cycles they leave unused; a **preempted** job was
//! displaced by a higher-priority one and is frozen until CPUs come back; a **suspended** job was
//! frozen by its owner and is left alone; a **queued** job waits.
//!
//! Rules, in the order [`plan`] applies them:
//! 1. Queued jobs older than the queue TTL expire.
//! 2. Candidates — queued, preempted and backfill jobs — are taken by priority (high first), then
//!    by submission time (old first). For each:
//!    - it becomes (or stays, as a backfiller being promoted) a **primary** if the allocator finds
//!      its CPUs among those no primary holds and the node's job-CPU slots (`vcpus`) allow;
//!      an exclusive job needs the whole pool and nothing else running;
//!    - else, with hard preemption, it takes CPUs from **lower-priority primaries**, lowest
//!      priority first and youngest first among equals, taking only as many victims as needed;
//!      each victim becomes a backfiller on its own CPUs when backfill is on and slots allow,
//!      else it is frozen;
//!    - else a queued job may start as a **backfiller** (when backfill is on, the job allows it
//!      and slots allow) on CPUs the primaries hold, those with the fewest backfillers first
//!      (each takes a little from the primary beside it: spread, no primary pays for a pile);
//!    - else it waits, and so does every queued job behind it (no job overtakes one that waits,
//!      so big jobs are not starved); backfillers behind it may still be promoted only if that
//!      does not take CPUs the waiting job could use — to keep it simple they wait too.
//!
//! `vcpus` counts the CPUs of running primaries and backfillers; frozen jobs hold none.
//!
//! GPUs ([`plan_gpus`]; [`plan`] is a node without GPUs): a job that asks for GPUs starts only
//! as a primary, on GPUs no primary holds and CPUs local to them ([`crate::gpu_alloc::place`];
//! under [`crate::gpu_alloc::Locality::Require`] only local CPUs, unless the job could never have
//! them on the pool's CPUs and the GPUs it may take — its manager's choice, those it kept, or
//! any — when it is placed as under `Prefer`);
//! [`Action::GrantGpus`] comes right before its start. GPUs stay with a job until it ends, also
//! while it is frozen (its processes keep the devices open), and a resumed GPU job gets CPUs next
//! to the GPUs it kept. It neither preempts nor is preempted, and never backfills
//! (a GPU cannot be shared). When it does not fit it waits like any queued job, and so does
//! every queued job behind it. A job whose GPUs a workload manager chose ([`Request::pinned`])
//! gets exactly those, with CPUs local to them, and waits while any of them is held. An
//! exclusive job gets every GPU with the whole node. CPU-only
//! primaries are placed by [`crate::gpu_alloc::place_cpu_only`] on a node with GPUs.

use crate::alloc::{Allocator, Scratch};
use crate::gpu_alloc::{GpuPolicy, Locality};
use crate::time_limit::TimeLimit;
use crate::{CpuSet, GpuSet, Gpus};

mod fit;
mod pass;

use pass::{Pass, Turn};

/// The daemon's key for a job.
pub type JobKey = i64;

/// Lowest and highest priority; the default is [`DEFAULT_PRIORITY`].
pub const MIN_PRIORITY: u8 = 1;
/// Highest priority.
pub const MAX_PRIORITY: u8 = 16;
/// Priority of a job that names none.
pub const DEFAULT_PRIORITY: u8 = 10;

/// Where a job may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Primary if CPUs are free, else backfill if allowed.
    Any,
    /// Only on exclusive CPUs.
    PrimaryOnly,
    /// Only as a backfiller.
    BackfillOnly,
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Queued,
    Primary,
    Backfill,
    /// Frozen because a higher-priority job took its CPUs.
    Preempted,
    /// Frozen by its owner or root.
    Suspended,
}

/// What a job asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub ncpus: usize,
    /// Whole GPUs wanted (0: a CPU-only job).
    pub ngpus: usize,
    /// The GPUs a workload manager already chose for it (empty: pjw chooses). A queued job
    /// with pinned GPUs starts on exactly those, once all of them are free, with CPUs local to
    /// them; `ngpus` is their count.
    pub pinned: GpuSet,
    pub priority: u8,
    pub placement: Placement,
    pub exclusive: bool,
    /// Submission time (ms), for FIFO order within a priority and for the TTL.
    pub submitted_ms: i64,
    /// How long it may run (`--time`), for [`QueueOrder::ShortestFirst`]; None: not said.
    pub time_limit: Option<TimeLimit>,
}

/// A job as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobView {
    pub key: JobKey,
    pub req: Request,
    pub phase: Phase,
    /// CPUs it runs on (primary: exclusive; backfill: shared with primaries); empty otherwise.
    pub cpus: CpuSet,
    /// GPUs it holds (primaries only; ignored in any other phase).
    pub gpus: GpuSet,
}

/// The node's GPUs and how jobs share them, for [`plan_gpus`].
#[derive(Clone, Copy, Debug)]
pub struct GpuNode<'a> {
    pub gpus: &'a Gpus,
    pub policy: GpuPolicy,
    /// GPUs held by jobs the plan does not see (ending jobs whose cgroups are not empty yet).
    pub busy: GpuSet,
}

impl GpuNode<'_> {
    /// The node as job `cur` sees it at `now_ms`: under `require`, a queued job that has waited
    /// `require_wait_ms` already is placed as under `prefer` (it holds up the queue behind it).
    pub(super) fn for_job(&self, cur: &JobView, now_ms: i64) -> Self {
        let waited_out = self.policy.locality == Locality::Require
            && cur.phase == Phase::Queued
            && self
                .policy
                .require_wait_ms
                .is_some_and(|w| now_ms.saturating_sub(cur.req.submitted_ms) >= w as i64);
        let mut node = *self;
        if waited_out {
            node.policy.locality = Locality::Prefer;
        }
        node
    }
}

/// The node's queue settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Job-CPUs the node runs at once (primaries plus backfillers).
    pub vcpus: usize,
    /// Whether jobs may run as backfillers.
    pub backfill: bool,
    /// Whether a higher-priority job may take CPUs from lower-priority primaries.
    pub hard_preemption: bool,
    /// The lowest priority that preempts (with `hard_preemption`): jobs below it wait like
    /// everyone else. Set above the users' ceiling, only root, registered workload-manager jobs
    /// and admins preempt, and users cannot displace each other.
    pub preempt_min_priority: u8,
    /// How long a job may wait in the queue (None = forever).
    pub queue_ttl_ms: Option<i64>,
    /// The order jobs of one priority take their turn in.
    pub order: QueueOrder,
}

/// The order jobs of one priority take their turn in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueOrder {
    /// Submission order (first come, first served).
    #[default]
    Submission,
    /// The shortest time limit (`--time`) first, jobs without one last; a job that has waited
    /// `max_wait_ms` goes ahead of every younger one, in submission order, so that a long job
    /// is not overtaken forever. Shortest-first gives the lowest mean turnaround, and on a
    /// full node the longest job ends no later than under submission order of the same jobs
    /// sorted by length.
    ShortestFirst { max_wait_ms: i64 },
}

/// A step for the daemon to carry out, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A queued job starts as a primary on `cpus`.
    StartPrimary { key: JobKey, cpus: CpuSet },
    /// A queued job starts as a backfiller on `cpus`.
    StartBackfill { key: JobKey, cpus: CpuSet },
    /// A backfiller becomes a primary on `cpus`.
    Promote { key: JobKey, cpus: CpuSet },
    /// A primary is displaced: it goes on as a backfiller on its CPUs, or is frozen.
    Preempt {
        key: JobKey,
        by: JobKey,
        to_backfill: bool,
    },
    /// A preempted job is thawed as a primary on `cpus`.
    Resume { key: JobKey, cpus: CpuSet },
    /// A preempted (or resumed) job that may backfill is thawed as a backfiller on `cpus`.
    ResumeBackfill { key: JobKey, cpus: CpuSet },
    /// A queued job waited longer than the TTL and this plan could not start it.
    Expire { key: JobKey },
    /// The job that starts next (the following [`Action::StartPrimary`]) gets these GPUs.
    GrantGpus { key: JobKey, gpus: GpuSet },
}

/// Why a job that is not running waits, for `pjw status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// Not enough free CPUs (or slots).
    Cpus,
    /// A job ahead of it in the queue waits.
    Behind(JobKey),
}

/// Decide what changes now. `pool` is the CPUs jobs may use; `jobs` every job the daemon knows.
/// A node without GPUs: see [`plan_gpus`].
pub fn plan(
    policy: &QueuePolicy,
    alloc: &Allocator,
    scratch: &mut Scratch,
    pool: &CpuSet,
    jobs: &[JobView],
    now_ms: i64,
) -> Vec<Action> {
    let none = Gpus::none();
    let node = GpuNode {
        gpus: &none,
        policy: GpuPolicy::default(),
        busy: GpuSet::new(),
    };
    plan_gpus(policy, alloc, scratch, pool, jobs, now_ms, &node)
}

/// [`plan`] on a node with `node`'s GPUs: every candidate takes its turn, rule by rule, until
/// a queued job waits, then the queued jobs past their TTL expire.
pub fn plan_gpus(
    policy: &QueuePolicy,
    alloc: &Allocator,
    scratch: &mut Scratch,
    pool: &CpuSet,
    jobs: &[JobView],
    now_ms: i64,
    node: &GpuNode,
) -> Vec<Action> {
    let mut pass = Pass {
        policy,
        alloc,
        scratch,
        pool,
        node: *node,
        now_ms,
        state: jobs.iter().map(|j| (j.key, *j)).collect(),
        actions: Vec::new(),
    };
    for key in pass.candidates() {
        if pass.turn(key) == Turn::Stop {
            break;
        }
    }
    pass.expire();
    pass.actions
}

/// Where job `j` stands in the queue at `now_ms` (lower goes first): priority (high first),
/// then `order`'s rank (none for submission order; for shortest-first, the jobs that waited
/// `max_wait_ms` first, then by time limit), then submission time (old first).
pub fn turn_key(order: QueueOrder, now_ms: i64, j: &JobView) -> impl Ord {
    let rank = match order {
        QueueOrder::Submission => (false, 0),
        QueueOrder::ShortestFirst { max_wait_ms } => {
            let waited_out = now_ms.saturating_sub(j.req.submitted_ms) >= max_wait_ms;
            let limit = j.req.time_limit.map_or(u64::MAX, TimeLimit::secs);
            (!waited_out, if waited_out { 0 } else { limit })
        }
    };
    (
        std::cmp::Reverse(j.req.priority),
        rank,
        j.req.submitted_ms,
        j.key,
    )
}

/// Why each waiting job waits, given the same snapshot [`plan`] saw (after its actions), the
/// queue's `order` and the time it planned at.
pub fn wait_reasons(jobs: &[JobView], order: QueueOrder, now_ms: i64) -> Vec<(JobKey, WaitReason)> {
    let mut queued: Vec<&JobView> = jobs.iter().filter(|j| j.phase == Phase::Queued).collect();
    queued.sort_by_key(|j| turn_key(order, now_ms, j));
    let mut out = Vec::new();
    if let Some(first) = queued.first() {
        out.push((first.key, WaitReason::Cpus));
        for j in &queued[1..] {
            out.push((j.key, WaitReason::Behind(first.key)));
        }
    }
    out
}

impl Request {
    /// Job-CPUs the job counts for: the whole pool for an exclusive job.
    pub(super) fn ncpus_eff(&self, pool: &CpuSet) -> usize {
        if self.exclusive {
            pool.len()
        } else {
            self.ncpus
        }
    }
}

#[cfg(test)]
mod tests;
