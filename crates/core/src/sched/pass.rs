//! One pass of the queue policy ([`super::plan_gpus`]): each candidate's turn, the rules of
//! [`super`] in their order — a primary on free CPUs (and GPUs), preemption of lower-priority
//! primaries, a backfiller — and the queue TTL after the last turn.

use std::collections::BTreeMap;

use super::fit::{
    backfillers_per_cpu, cpus_of, gpu_fit, gpus_held, no_exclusive_primary, preempt_fit,
    primary_fit, slots_used,
};
use super::{turn_key, Action, GpuNode, JobKey, JobView, Phase, Placement, QueuePolicy};
use crate::alloc::{Allocator, Scratch};
use crate::gpu_alloc::place_cpu_only;
use crate::{CpuSet, GpuSet};

/// A plan in progress: the node, and every job as the actions so far leave it.
pub(super) struct Pass<'a> {
    pub(super) policy: &'a QueuePolicy,
    pub(super) alloc: &'a Allocator,
    pub(super) scratch: &'a mut Scratch,
    pub(super) pool: &'a CpuSet,
    pub(super) node: GpuNode<'a>,
    pub(super) now_ms: i64,
    pub(super) state: BTreeMap<JobKey, JobView>,
    pub(super) actions: Vec<Action>,
}

/// Whether the candidates after one may still take their turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    Next,
    /// A queued job waits, and so does every queued job behind it.
    Stop,
}

impl Pass<'_> {
    /// Candidates — queued, preempted and backfill jobs — by priority (high first), then in
    /// the policy's order ([`QueueOrder`]): by submission time (old first), or shortest time
    /// limit first with the jobs that waited too long ahead.
    pub(super) fn candidates(&self) -> Vec<JobKey> {
        let mut order: Vec<JobView> = self
            .state
            .values()
            .filter(|j| matches!(j.phase, Phase::Queued | Phase::Preempted | Phase::Backfill))
            .copied()
            .collect();
        order.sort_by_key(|j| turn_key(self.policy.order, self.now_ms, j));
        order.into_iter().map(|j| j.key).collect()
    }

    /// Job `key`'s turn: the first rule that places it, or it waits.
    pub(super) fn turn(&mut self, key: JobKey) -> Turn {
        // The candidate may have been changed by an earlier step (a backfiller turned into a
        // victim does not exist here: victims are primaries).
        let Some(cur) = self.state.get(&key).copied() else {
            return Turn::Next;
        };
        let n = if cur.req.exclusive {
            self.pool.len()
        } else {
            cur.req.ncpus
        };
        let primary_cpus = cpus_of(&self.state, |p| p == Phase::Primary);
        let needs_slots = if cur.phase == Phase::Backfill { 0 } else { n };
        let slots_ok = slots_used(&self.state) + needs_slots <= self.policy.vcpus;
        let wants_primary = cur.req.placement != Placement::BackfillOnly;

        // 1. Primary on free CPUs (and GPUs).
        if wants_primary && slots_ok && self.start_primary(&cur, n, &primary_cpus) {
            return Turn::Next;
        }
        // A GPU job neither preempts nor backfills: it waits.
        if cur.req.ngpus > 0 {
            return waits(&cur);
        }
        // 2. Preemption of lower-priority primaries.
        if wants_primary
            && self.policy.hard_preemption
            && cur.req.priority >= self.policy.preempt_min_priority
            && self.preempt_for(&cur, n)
        {
            return Turn::Next;
        }
        // 3. A queued job starts as a backfiller; a frozen one that may backfill is thawed as
        // one (a backfill-only job suspended and resumed has no other way back).
        if slots_ok && self.start_backfill(&cur, n, &primary_cpus) {
            return Turn::Next;
        }
        // 4. It waits; so does everyone behind it, except backfillers and preempted jobs, which
        // keep what they have.
        waits(&cur)
    }

    /// Rule 1: `cur` becomes a primary on CPUs no primary holds (and GPUs nobody holds), if it
    /// fits there.
    fn start_primary(&mut self, cur: &JobView, n: usize, primary_cpus: &CpuSet) -> bool {
        let node = self.node;
        let free_gpus = node
            .gpus
            .all()
            .difference(&gpus_held(&self.state))
            .difference(&node.busy);
        let (alloc, pool, state) = (self.alloc, self.pool, &self.state);
        let fit = if cur.req.exclusive {
            primary_fit(alloc, self.scratch, pool, state, cur, n, primary_cpus)
                .map(|cpus| (cpus, node.gpus.all()))
        } else if cur.req.ngpus > 0 {
            let node = node.for_job(cur, self.now_ms);
            gpu_fit(alloc, &node, pool, state, cur, primary_cpus, &free_gpus)
        } else if !node.gpus.is_empty() {
            let free = pool.difference(primary_cpus);
            no_exclusive_primary(state, cur)
                .then(|| place_cpu_only(alloc, node.gpus, &free, &free_gpus, n, &node.policy))
                .flatten()
                .map(|cpus| (cpus, GpuSet::new()))
        } else {
            primary_fit(alloc, self.scratch, pool, state, cur, n, primary_cpus)
                .map(|cpus| (cpus, GpuSet::new()))
        };
        let Some((cpus, gpus)) = fit else {
            return false;
        };
        if !gpus.is_empty() {
            self.actions.push(Action::GrantGpus { key: cur.key, gpus });
        }
        self.actions.push(become_primary(cur, cpus));
        set(&mut self.state, cur.key, Phase::Primary, cpus);
        if let Some(j) = self.state.get_mut(&cur.key) {
            j.gpus = gpus;
        }
        true
    }

    /// Rule 2: `cur` takes the CPUs of the fewest lower-priority primaries; each victim goes on
    /// as a backfiller on its own CPUs when backfill is on and slots allow, else it is frozen.
    fn preempt_for(&mut self, cur: &JobView, n: usize) -> bool {
        let (policy, pool) = (self.policy, self.pool);
        let Some((victims, cpus)) = preempt_fit(
            self.alloc,
            self.scratch,
            pool,
            &self.state,
            cur,
            n,
            policy.vcpus,
        ) else {
            return false;
        };
        let mut running_after = slots_used(&self.state)
            - victims.iter().map(|v| v.req.ncpus_eff(pool)).sum::<usize>()
            + if cur.phase == Phase::Backfill { 0 } else { n };
        for v in &victims {
            let vn = v.req.ncpus_eff(pool);
            let to_backfill = policy.backfill
                && v.req.placement != Placement::PrimaryOnly
                && running_after + vn <= policy.vcpus;
            if to_backfill {
                running_after += vn;
                set(&mut self.state, v.key, Phase::Backfill, v.cpus);
            } else {
                set(&mut self.state, v.key, Phase::Preempted, CpuSet::new());
            }
            self.actions.push(Action::Preempt {
                key: v.key,
                by: cur.key,
                to_backfill,
            });
        }
        if cur.req.exclusive && !self.node.gpus.is_empty() {
            self.actions.push(Action::GrantGpus {
                key: cur.key,
                gpus: self.node.gpus.all(),
            });
            if let Some(j) = self.state.get_mut(&cur.key) {
                j.gpus = self.node.gpus.all();
            }
        }
        self.actions.push(become_primary(cur, cpus));
        set(&mut self.state, cur.key, Phase::Primary, cpus);
        true
    }

    /// Rule 3: a queued or preempted job that may backfill starts (or is thawed) as a
    /// backfiller, on the primaries' CPUs when they are enough, else anywhere in the pool.
    fn start_backfill(&mut self, cur: &JobView, n: usize, primary_cpus: &CpuSet) -> bool {
        let may = matches!(cur.phase, Phase::Queued | Phase::Preempted)
            && self.policy.backfill
            && cur.req.placement != Placement::PrimaryOnly
            && !cur.req.exclusive
            && !self
                .state
                .values()
                .any(|j| j.phase == Phase::Primary && j.req.exclusive);
        if !may {
            return false;
        }
        let base = if primary_cpus.len() >= n {
            *primary_cpus
        } else {
            *self.pool
        };
        let Some(cpus) = self.backfill_cpus(&base, n) else {
            return false;
        };
        self.actions.push(if cur.phase == Phase::Preempted {
            Action::ResumeBackfill { key: cur.key, cpus }
        } else {
            Action::StartBackfill { key: cur.key, cpus }
        });
        set(&mut self.state, cur.key, Phase::Backfill, cpus);
        true
    }

    /// CPUs for a backfiller within `base`: the allocator's choice among the CPUs that carry
    /// the fewest backfillers, widened one backfiller at a time until `n` fit. Backfillers
    /// spread over the primaries' CPUs instead of piling onto the first ones: each takes a
    /// little from the primary it shares a CPU with, and a pile makes one primary (and the
    /// queue behind it) pay for all of them.
    fn backfill_cpus(&mut self, base: &CpuSet, n: usize) -> Option<CpuSet> {
        let load = backfillers_per_cpu(&self.state, base);
        let most = load.iter().map(|&(_, k)| k).max().unwrap_or(0);
        for level in 0..=most {
            let within: CpuSet = load
                .iter()
                .filter(|&&(_, k)| k <= level)
                .map(|&(c, _)| c)
                .collect();
            if within.len() < n {
                continue;
            }
            if let Some(cpus) = self.alloc.allocate_with(self.scratch, &within, n) {
                return Some(cpus);
            }
        }
        None
    }

    /// A job past `queue_ttl` expires only if it still cannot start: one whose CPUs are free
    /// when the daemon gets to it starts, however late that is (a slow node may take longer
    /// than the ttl between a request and its first plan).
    pub(super) fn expire(&mut self) {
        let Some(ttl) = self.policy.queue_ttl_ms else {
            return;
        };
        for j in self.state.values() {
            if j.phase == Phase::Queued && self.now_ms - j.req.submitted_ms > ttl {
                self.actions.push(Action::Expire { key: j.key });
            }
        }
    }
}

/// A candidate no rule placed: a queued one stops the queue behind it; a backfiller or a
/// preempted job keeps what it has and the turns go on.
fn waits(cur: &JobView) -> Turn {
    if cur.phase == Phase::Queued {
        Turn::Stop
    } else {
        Turn::Next
    }
}

/// The action that makes `cur` a primary on `cpus`, from the phase it is in.
fn become_primary(cur: &JobView, cpus: CpuSet) -> Action {
    match cur.phase {
        Phase::Backfill => Action::Promote { key: cur.key, cpus },
        Phase::Preempted => Action::Resume { key: cur.key, cpus },
        _ => Action::StartPrimary { key: cur.key, cpus },
    }
}

/// Move job `key` to `phase` on `cpus`.
fn set(state: &mut BTreeMap<JobKey, JobView>, key: JobKey, phase: Phase, cpus: CpuSet) {
    if let Some(j) = state.get_mut(&key) {
        j.phase = phase;
        j.cpus = cpus;
    }
}
