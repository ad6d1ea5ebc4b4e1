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
//!      and slots allow) on CPUs the primaries hold;
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

use std::collections::BTreeMap;

use crate::alloc::{Allocator, Scratch};
use crate::gpu_alloc::{could_be_local, place, place_cpu_only, GpuPolicy, Locality};
use crate::{CpuSet, GpuSet, Gpus};

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
    fn for_job(&self, cur: &JobView, now_ms: i64) -> Self {
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

/// [`plan`] on a node with `node`'s GPUs.
pub fn plan_gpus(
    policy: &QueuePolicy,
    alloc: &Allocator,
    scratch: &mut Scratch,
    pool: &CpuSet,
    jobs: &[JobView],
    now_ms: i64,
    node: &GpuNode,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut state: BTreeMap<JobKey, JobView> = jobs.iter().map(|j| (j.key, *j)).collect();

    let mut order: Vec<JobView> = state
        .values()
        .filter(|j| matches!(j.phase, Phase::Queued | Phase::Preempted | Phase::Backfill))
        .copied()
        .collect();
    order.sort_by_key(|j| (std::cmp::Reverse(j.req.priority), j.req.submitted_ms, j.key));

    for cand in order {
        // The candidate may have been changed by an earlier step (a backfiller turned into a
        // victim does not exist here: victims are primaries).
        let Some(cur) = state.get(&cand.key).copied() else {
            continue;
        };
        let n = if cur.req.exclusive {
            pool.len()
        } else {
            cur.req.ncpus
        };
        let primary_cpus = cpus_of(&state, |p| p == Phase::Primary);
        let running = slots_used(&state);
        let needs_slots = if cur.phase == Phase::Backfill { 0 } else { n };
        let slots_ok = running + needs_slots <= policy.vcpus;
        let wants_primary = cur.req.placement != Placement::BackfillOnly;

        let free_gpus = node
            .gpus
            .all()
            .difference(&gpus_held(&state))
            .difference(&node.busy);

        // 1. Primary on free CPUs (and GPUs).
        if wants_primary && slots_ok {
            let fit = if cur.req.exclusive {
                primary_fit(alloc, scratch, pool, &state, &cur, n, &primary_cpus)
                    .map(|cpus| (cpus, node.gpus.all()))
            } else if cur.req.ngpus > 0 {
                let node = node.for_job(&cur, now_ms);
                gpu_fit(alloc, &node, pool, &state, &cur, &primary_cpus, &free_gpus)
            } else if !node.gpus.is_empty() {
                let free = pool.difference(&primary_cpus);
                no_exclusive_primary(&state, &cur)
                    .then(|| place_cpu_only(alloc, node.gpus, &free, &free_gpus, n, &node.policy))
                    .flatten()
                    .map(|cpus| (cpus, GpuSet::new()))
            } else {
                primary_fit(alloc, scratch, pool, &state, &cur, n, &primary_cpus)
                    .map(|cpus| (cpus, GpuSet::new()))
            };
            if let Some((cpus, gpus)) = fit {
                if !gpus.is_empty() {
                    actions.push(Action::GrantGpus { key: cur.key, gpus });
                }
                actions.push(become_primary(&cur, cpus));
                set(&mut state, cur.key, Phase::Primary, cpus);
                if let Some(j) = state.get_mut(&cur.key) {
                    j.gpus = gpus;
                }
                continue;
            }
        }

        // A GPU job neither preempts nor backfills: it waits.
        if cur.req.ngpus > 0 {
            if cur.phase == Phase::Queued {
                break;
            }
            continue;
        }

        // 2. Preemption of lower-priority primaries.
        if wants_primary
            && policy.hard_preemption
            && cur.req.priority >= policy.preempt_min_priority
        {
            if let Some((victims, cpus)) =
                preempt_fit(alloc, scratch, pool, &state, &cur, n, policy.vcpus)
            {
                let mut running_after = slots_used(&state)
                    - victims.iter().map(|v| v.req.ncpus_eff(pool)).sum::<usize>()
                    + if cur.phase == Phase::Backfill { 0 } else { n };
                for v in &victims {
                    let vn = v.req.ncpus_eff(pool);
                    let to_backfill = policy.backfill
                        && v.req.placement != Placement::PrimaryOnly
                        && running_after + vn <= policy.vcpus;
                    if to_backfill {
                        running_after += vn;
                        set(&mut state, v.key, Phase::Backfill, v.cpus);
                    } else {
                        set(&mut state, v.key, Phase::Preempted, CpuSet::new());
                    }
                    actions.push(Action::Preempt {
                        key: v.key,
                        by: cur.key,
                        to_backfill,
                    });
                }
                if cur.req.exclusive && !node.gpus.is_empty() {
                    actions.push(Action::GrantGpus {
                        key: cur.key,
                        gpus: node.gpus.all(),
                    });
                    if let Some(j) = state.get_mut(&cur.key) {
                        j.gpus = node.gpus.all();
                    }
                }
                actions.push(become_primary(&cur, cpus));
                set(&mut state, cur.key, Phase::Primary, cpus);
                continue;
            }
        }

        // 3. A queued job starts as a backfiller; a frozen one that may backfill is thawed as
        // one (a backfill-only job suspended and resumed has no other way back).
        if matches!(cur.phase, Phase::Queued | Phase::Preempted)
            && policy.backfill
            && cur.req.placement != Placement::PrimaryOnly
            && !cur.req.exclusive
            && slots_ok
            && !state
                .values()
                .any(|j| j.phase == Phase::Primary && j.req.exclusive)
        {
            let base = if primary_cpus.len() >= n {
                primary_cpus
            } else {
                *pool
            };
            if let Some(cpus) = alloc.allocate_with(scratch, &base, n) {
                actions.push(if cur.phase == Phase::Preempted {
                    Action::ResumeBackfill { key: cur.key, cpus }
                } else {
                    Action::StartBackfill { key: cur.key, cpus }
                });
                set(&mut state, cur.key, Phase::Backfill, cpus);
                continue;
            }
        }

        // 4. It waits; so does everyone behind it, except backfillers and preempted jobs, which
        // keep what they have.
        if cur.phase == Phase::Queued {
            break;
        }
    }

    // A job past `queue_ttl` expires only if it still cannot start: one whose CPUs are free
    // when the daemon gets to it starts, however late that is (a slow node may take longer
    // than the ttl between a request and its first plan).
    if let Some(ttl) = policy.queue_ttl_ms {
        for j in state.values() {
            if j.phase == Phase::Queued && now_ms - j.req.submitted_ms > ttl {
                actions.push(Action::Expire { key: j.key });
            }
        }
    }
    actions
}

/// Why each waiting job waits, given the same snapshot [`plan`] saw (after its actions).
pub fn wait_reasons(jobs: &[JobView]) -> Vec<(JobKey, WaitReason)> {
    let mut queued: Vec<&JobView> = jobs.iter().filter(|j| j.phase == Phase::Queued).collect();
    queued.sort_by_key(|j| (std::cmp::Reverse(j.req.priority), j.req.submitted_ms, j.key));
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
    fn ncpus_eff(&self, pool: &CpuSet) -> usize {
        if self.exclusive {
            pool.len()
        } else {
            self.ncpus
        }
    }
}

fn become_primary(cur: &JobView, cpus: CpuSet) -> Action {
    match cur.phase {
        Phase::Backfill => Action::Promote { key: cur.key, cpus },
        Phase::Preempted => Action::Resume { key: cur.key, cpus },
        _ => Action::StartPrimary { key: cur.key, cpus },
    }
}

fn set(state: &mut BTreeMap<JobKey, JobView>, key: JobKey, phase: Phase, cpus: CpuSet) {
    if let Some(j) = state.get_mut(&key) {
        j.phase = phase;
        j.cpus = cpus;
    }
}

/// GPUs held by started jobs, running or frozen (a frozen process keeps its devices open).
fn gpus_held(state: &BTreeMap<JobKey, JobView>) -> GpuSet {
    state
        .values()
        .filter(|j| j.phase != Phase::Queued)
        .fold(GpuSet::new(), |a, j| a.union(&j.gpus))
}

/// Whether no other primary is exclusive (one keeps new primaries off the node).
fn no_exclusive_primary(state: &BTreeMap<JobKey, JobView>, cur: &JobView) -> bool {
    !state
        .values()
        .any(|j| j.key != cur.key && j.phase == Phase::Primary && j.req.exclusive)
}

/// GPUs and CPUs for a GPU job as a primary without displacing anyone: a queued job's from the
/// free GPUs, a resumed one's CPUs next to the GPUs it kept.
fn gpu_fit(
    alloc: &Allocator,
    node: &GpuNode,
    pool: &CpuSet,
    state: &BTreeMap<JobKey, JobView>,
    cur: &JobView,
    primary_cpus: &CpuSet,
    free_gpus: &GpuSet,
) -> Option<(CpuSet, GpuSet)> {
    if !no_exclusive_primary(state, cur) {
        return None;
    }
    let free = pool.difference(primary_cpus);
    let from = if cur.phase != Phase::Queued {
        cur.gpus
    } else if cur.req.pinned.is_empty() {
        *free_gpus
    } else if cur.req.pinned.difference(free_gpus).is_empty() {
        // The manager's choice, all of it, or nothing yet.
        cur.req.pinned
    } else {
        return None;
    };
    let fit = |policy: &GpuPolicy| {
        place(
            alloc,
            node.gpus,
            &free,
            &from,
            cur.req.ngpus,
            cur.req.ncpus,
            policy,
        )
        .map(|p| (p.cpus, p.gpus))
    };
    let got = fit(&node.policy);
    if got.is_some() || node.policy.locality != Locality::Require {
        return got;
    }
    // A job that could never have only local CPUs here — on the CPUs jobs may use and the GPUs
    // it may have (the manager's choice, those it kept, or any) — is placed as under `prefer`
    // rather than left waiting for good.
    let may_have = if cur.phase != Phase::Queued {
        cur.gpus
    } else if cur.req.pinned.is_empty() {
        node.gpus.all()
    } else {
        cur.req.pinned
    };
    if could_be_local(
        alloc,
        node.gpus,
        pool,
        &may_have,
        cur.req.ngpus,
        cur.req.ncpus,
    ) {
        return None;
    }
    fit(&GpuPolicy {
        locality: Locality::Prefer,
        ..node.policy
    })
}

fn cpus_of(state: &BTreeMap<JobKey, JobView>, f: impl Fn(Phase) -> bool) -> CpuSet {
    state
        .values()
        .filter(|j| f(j.phase))
        .fold(CpuSet::new(), |a, j| a.union(&j.cpus))
}

/// Job-CPUs in use by running jobs (primaries and backfillers).
fn slots_used(state: &BTreeMap<JobKey, JobView>) -> usize {
    state
        .values()
        .filter(|j| matches!(j.phase, Phase::Primary | Phase::Backfill))
        .map(|j| j.cpus.len())
        .sum()
}

/// CPUs for `cur` as a primary without displacing anyone.
fn primary_fit(
    alloc: &Allocator,
    scratch: &mut Scratch,
    pool: &CpuSet,
    state: &BTreeMap<JobKey, JobView>,
    cur: &JobView,
    n: usize,
    primary_cpus: &CpuSet,
) -> Option<CpuSet> {
    if cur.req.exclusive {
        // The whole node, and nobody else running on it.
        let others = state
            .values()
            .any(|j| j.key != cur.key && matches!(j.phase, Phase::Primary | Phase::Backfill));
        return (!others).then_some(*pool);
    }
    // An exclusive primary keeps backfillers and new primaries off the node.
    if state
        .values()
        .any(|j| j.key != cur.key && j.phase == Phase::Primary && j.req.exclusive)
    {
        return None;
    }
    alloc.allocate_with(scratch, &pool.difference(primary_cpus), n)
}

/// The fewest lower-priority primaries (lowest priority, then youngest, first) whose CPUs let
/// `cur` start as a primary, and the CPUs it would get.
fn preempt_fit(
    alloc: &Allocator,
    scratch: &mut Scratch,
    pool: &CpuSet,
    state: &BTreeMap<JobKey, JobView>,
    cur: &JobView,
    n: usize,
    vcpus: usize,
) -> Option<(Vec<JobView>, CpuSet)> {
    let mut victims_pool: Vec<JobView> = state
        .values()
        .filter(|j| {
            j.key != cur.key
                && j.phase == Phase::Primary
                && j.req.priority < cur.req.priority
                && j.gpus.is_empty()
        })
        .copied()
        .collect();
    if victims_pool.is_empty() {
        return None;
    }
    victims_pool.sort_by_key(|j| {
        (
            j.req.priority,
            std::cmp::Reverse(j.req.submitted_ms),
            std::cmp::Reverse(j.key),
        )
    });
    let primary_cpus = cpus_of(state, |p| p == Phase::Primary);
    let others_exclusive = state.values().any(|j| {
        j.key != cur.key
            && j.phase == Phase::Primary
            && j.req.exclusive
            && j.req.priority >= cur.req.priority
    });
    if others_exclusive {
        return None;
    }
    let mut freed = CpuSet::new();
    let mut taken = Vec::new();
    let running = slots_used(state);
    for v in victims_pool {
        freed = freed.union(&v.cpus);
        taken.push(v);
        let free = pool.difference(&primary_cpus).union(&freed);
        let slots_after = running - taken.iter().map(|t| t.cpus.len()).sum::<usize>()
            + if cur.phase == Phase::Backfill { 0 } else { n };
        if slots_after > vcpus {
            continue;
        }
        let got = if cur.req.exclusive {
            // All primaries must go (higher ones make this impossible, checked above).
            let still = state.values().any(|j| {
                j.key != cur.key
                    && j.phase == Phase::Primary
                    && !taken.iter().any(|t| t.key == j.key)
            });
            (!still).then_some(*pool)
        } else {
            alloc.allocate_with(scratch, &free, n)
        };
        if let Some(cpus) = got {
            // Keep only the victims whose CPUs the job actually got, if the slots allow.
            let needed: Vec<JobView> = taken
                .iter()
                .filter(|t| t.cpus.intersects(&cpus) || cur.req.exclusive)
                .copied()
                .collect();
            let slots_needed = running - needed.iter().map(|t| t.cpus.len()).sum::<usize>()
                + if cur.phase == Phase::Backfill { 0 } else { n };
            if slots_needed <= vcpus {
                taken = needed;
            }
            return Some((taken, cpus));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    fn req(ncpus: usize, priority: u8, at: i64) -> Request {
        Request {
            ncpus,
            ngpus: 0,
            pinned: GpuSet::new(),
            priority,
            placement: Placement::Any,
            exclusive: false,
            submitted_ms: at,
        }
    }

    fn job(key: JobKey, r: Request, phase: Phase, cpus: &str) -> JobView {
        JobView {
            key,
            req: r,
            phase,
            cpus: CpuSet::parse_list(cpus).unwrap(),
            gpus: GpuSet::new(),
        }
    }

    fn policy(vcpus: usize) -> QueuePolicy {
        QueuePolicy {
            vcpus,
            backfill: true,
            hard_preemption: true,
            preempt_min_priority: 1,
            queue_ttl_ms: None,
        }
    }

    fn cs(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    struct Case {
        what: &'static str,
        policy: QueuePolicy,
        jobs: Vec<JobView>,
        now: i64,
        want: Vec<Action>,
    }

    #[test]
    fn transitions() {
        let q = Phase::Queued;
        let p = Phase::Primary;
        let b = Phase::Backfill;
        let cases = vec![
            Case {
                what: "queued job starts as primary on free cpus",
                policy: policy(2),
                jobs: vec![job(1, req(1, 10, 0), q, "")],
                now: 0,
                want: vec![Action::StartPrimary {
                    key: 1,
                    cpus: cs("0"),
                }],
            },
            Case {
                what: "two jobs, FIFO, disjoint cpus",
                policy: policy(2),
                jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(1, 10, 1), q, "")],
                now: 0,
                want: vec![
                    Action::StartPrimary {
                        key: 1,
                        cpus: cs("0"),
                    },
                    Action::StartPrimary {
                        key: 2,
                        cpus: cs("1"),
                    },
                ],
            },
            Case {
                what: "no free cpus and no spare slots: waits, and blocks the job behind it",
                policy: policy(2),
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(2, 10, 1), q, ""),
                    job(3, req(1, 10, 2), q, ""),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "spare slots: a job that cannot get exclusive cpus backfills",
                policy: policy(4),
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(1, 10, 1), q, ""),
                ],
                now: 0,
                want: vec![Action::StartBackfill {
                    key: 2,
                    cpus: cs("0"),
                }],
            },
            Case {
                what: "primary-only jobs do not backfill",
                policy: policy(4),
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(
                        2,
                        Request {
                            placement: Placement::PrimaryOnly,
                            ..req(1, 10, 1)
                        },
                        q,
                        "",
                    ),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "backfill-only jobs backfill even when cpus are free",
                policy: policy(4),
                jobs: vec![
                    job(1, req(1, 10, 0), p, "0"),
                    job(
                        2,
                        Request {
                            placement: Placement::BackfillOnly,
                            ..req(1, 10, 1)
                        },
                        q,
                        "",
                    ),
                ],
                now: 0,
                want: vec![Action::StartBackfill {
                    key: 2,
                    cpus: cs("0"),
                }],
            },
            Case {
                what: "a backfiller is promoted when cpus free up",
                policy: policy(4),
                jobs: vec![job(2, req(1, 10, 1), b, "0")],
                now: 0,
                want: vec![Action::Promote {
                    key: 2,
                    cpus: cs("0"),
                }],
            },
            Case {
                what:
                    "higher priority preempts the youngest lowest-priority primary, which backfills",
                policy: policy(4),
                jobs: vec![
                    job(1, req(1, 5, 0), p, "0"),
                    job(2, req(1, 5, 1), p, "1"),
                    job(3, req(1, 16, 2), q, ""),
                ],
                now: 0,
                want: vec![
                    Action::Preempt {
                        key: 2,
                        by: 3,
                        to_backfill: true,
                    },
                    Action::StartPrimary {
                        key: 3,
                        cpus: cs("1"),
                    },
                ],
            },
            Case {
                what: "without spare slots the victim is frozen",
                policy: policy(2),
                jobs: vec![
                    job(1, req(1, 5, 0), p, "0"),
                    job(2, req(1, 8, 1), p, "1"),
                    job(3, req(1, 16, 2), q, ""),
                ],
                now: 0,
                want: vec![
                    Action::Preempt {
                        key: 1,
                        by: 3,
                        to_backfill: false,
                    },
                    Action::StartPrimary {
                        key: 3,
                        cpus: cs("0"),
                    },
                ],
            },
            Case {
                what: "equal priority does not preempt",
                policy: QueuePolicy {
                    backfill: false,
                    ..policy(2)
                },
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(1, 10, 1), q, ""),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "below the preemption threshold a higher priority waits",
                policy: QueuePolicy {
                    backfill: false,
                    preempt_min_priority: 13,
                    ..policy(2)
                },
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(1, 12, 1), q, ""),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "at the preemption threshold it preempts",
                policy: QueuePolicy {
                    backfill: false,
                    preempt_min_priority: 13,
                    ..policy(2)
                },
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(1, 13, 1), q, ""),
                ],
                now: 0,
                want: vec![
                    Action::Preempt {
                        key: 1,
                        by: 2,
                        to_backfill: false,
                    },
                    Action::StartPrimary {
                        key: 2,
                        cpus: cs("0"),
                    },
                ],
            },
            Case {
                what: "preemption off: waits",
                policy: QueuePolicy {
                    hard_preemption: false,
                    backfill: false,
                    ..policy(2)
                },
                jobs: vec![job(1, req(2, 1, 0), p, "0-1"), job(2, req(1, 16, 1), q, "")],
                now: 0,
                want: vec![],
            },
            Case {
                what: "a preempted job resumes when cpus free up",
                policy: policy(2),
                jobs: vec![job(1, req(1, 5, 0), Phase::Preempted, "")],
                now: 0,
                want: vec![Action::Resume {
                    key: 1,
                    cpus: cs("0"),
                }],
            },
            Case {
                // Found by the chaos test: it had no way back and stayed frozen for good.
                what: "a backfill-only job suspended and resumed is thawed as a backfiller",
                policy: policy(2),
                jobs: vec![job(
                    1,
                    Request {
                        placement: Placement::BackfillOnly,
                        ..req(2, 10, 0)
                    },
                    Phase::Preempted,
                    "",
                )],
                now: 0,
                want: vec![Action::ResumeBackfill {
                    key: 1,
                    cpus: cs("0-1"),
                }],
            },
            Case {
                what: "a preempted job waits while every slot is used",
                policy: policy(2),
                jobs: vec![
                    job(1, req(1, 12, 0), p, "0"),
                    job(2, req(1, 12, 1), p, "1"),
                    job(3, req(1, 5, 2), Phase::Preempted, ""),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "priority order beats arrival order",
                policy: policy(1),
                jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(1, 12, 5), q, "")],
                now: 0,
                want: vec![Action::StartPrimary {
                    key: 2,
                    cpus: cs("0"),
                }],
            },
            Case {
                what: "exclusive job takes the whole node, displacing lower priorities",
                policy: QueuePolicy {
                    backfill: false,
                    ..policy(2)
                },
                jobs: vec![
                    job(1, req(1, 5, 0), p, "0"),
                    job(
                        3,
                        Request {
                            exclusive: true,
                            ..req(1, 12, 1)
                        },
                        q,
                        "",
                    ),
                ],
                now: 0,
                want: vec![
                    Action::Preempt {
                        key: 1,
                        by: 3,
                        to_backfill: false,
                    },
                    Action::StartPrimary {
                        key: 3,
                        cpus: cs("0-1"),
                    },
                ],
            },
            Case {
                what: "nothing starts beside an exclusive job, not even a backfiller",
                policy: policy(4),
                jobs: vec![
                    job(
                        1,
                        Request {
                            exclusive: true,
                            ..req(1, 10, 0)
                        },
                        p,
                        "0-1",
                    ),
                    job(2, req(1, 10, 1), q, ""),
                ],
                now: 0,
                want: vec![],
            },
            Case {
                what: "queue ttl expires old queued jobs only",
                policy: QueuePolicy {
                    queue_ttl_ms: Some(1000),
                    ..policy(2)
                },
                jobs: vec![
                    job(1, req(2, 10, 0), p, "0-1"),
                    job(2, req(1, 10, 0), q, ""),
                    job(3, req(1, 10, 1500), q, ""),
                ],
                now: 2000,
                want: vec![Action::Expire { key: 2 }],
            },
            Case {
                what: "a job past the queue ttl whose cpus are free starts instead of expiring",
                policy: QueuePolicy {
                    queue_ttl_ms: Some(1000),
                    ..policy(2)
                },
                jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(2, 10, 0), q, "")],
                now: 2000,
                want: vec![
                    Action::StartPrimary {
                        key: 1,
                        cpus: cs("0"),
                    },
                    Action::Expire { key: 2 },
                ],
            },
            Case {
                what: "suspended jobs are left alone and hold no cpus",
                policy: policy(2),
                jobs: vec![
                    job(1, req(2, 10, 0), Phase::Suspended, ""),
                    job(2, req(2, 10, 1), q, ""),
                ],
                now: 0,
                want: vec![Action::StartPrimary {
                    key: 2,
                    cpus: cs("0-1"),
                }],
            },
        ];
        let topo = synthetic::parse("core:2 pu:1").unwrap();
        let alloc = Allocator::new(&topo);
        let mut scratch = Scratch::new();
        for c in cases {
            let got = plan(
                &c.policy,
                &alloc,
                &mut scratch,
                &topo.online(),
                &c.jobs,
                c.now,
            );
            assert_eq!(got, c.want, "{}", c.what);
        }
    }

    #[test]
    fn eight_jobs_on_two_cpus_with_four_slots_run_two_by_two() {
        // The turnaround scenario: two primaries, two backfillers, the rest queued.
        let topo = synthetic::parse("core:2 pu:1").unwrap();
        let alloc = Allocator::new(&topo);
        let mut scratch = Scratch::new();
        let mut jobs: Vec<JobView> = (1..=8)
            .map(|k| job(k, req(1, 10, k), Phase::Queued, ""))
            .collect();
        let acts = plan(&policy(4), &alloc, &mut scratch, &topo.online(), &jobs, 0);
        let starts: Vec<_> = acts
            .iter()
            .map(|a| match a {
                Action::StartPrimary { key, .. } => (*key, "primary"),
                Action::StartBackfill { key, .. } => (*key, "backfill"),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            starts,
            vec![
                (1, "primary"),
                (2, "primary"),
                (3, "backfill"),
                (4, "backfill")
            ]
        );
        // Job 1 ends: the oldest backfiller is promoted onto its CPU; job 5 backfills.
        for a in &acts {
            if let Action::StartPrimary { key, cpus } | Action::StartBackfill { key, cpus } = *a {
                let j = jobs.iter_mut().find(|j| j.key == key).unwrap();
                j.cpus = cpus;
                j.phase = if matches!(a, Action::StartPrimary { .. }) {
                    Phase::Primary
                } else {
                    Phase::Backfill
                };
            }
        }
        jobs.retain(|j| j.key != 1);
        let acts = plan(&policy(4), &alloc, &mut scratch, &topo.online(), &jobs, 0);
        assert!(
            matches!(acts[0], Action::Promote { key: 3, .. }),
            "{acts:?}"
        );
        assert!(
            matches!(acts[1], Action::StartBackfill { key: 5, .. }),
            "{acts:?}"
        );
        assert_eq!(acts.len(), 2);
    }

    #[test]
    fn wait_reasons_name_the_head_of_the_queue() {
        let jobs = vec![
            job(1, req(1, 10, 5), Phase::Queued, ""),
            job(2, req(1, 12, 9), Phase::Queued, ""),
        ];
        assert_eq!(
            wait_reasons(&jobs),
            vec![(2, WaitReason::Cpus), (1, WaitReason::Behind(2))]
        );
    }
}
