//! Where a candidate fits, on the state of one pass: CPUs as a primary without displacing
//! anyone ([`primary_fit`]), GPUs and CPUs for a GPU job ([`gpu_fit`]), the fewest
//! lower-priority primaries to preempt ([`preempt_fit`]); and what the state holds (CPUs of a
//! phase, slots used, GPUs held).

use std::collections::BTreeMap;

use super::{GpuNode, JobKey, JobView, Phase};
use crate::alloc::{Allocator, Scratch};
use crate::gpu_alloc::{could_be_local, place, GpuPolicy, Locality};
use crate::{CpuSet, GpuSet};

/// GPUs held by started jobs, running or frozen (a frozen process keeps its devices open).
pub(super) fn gpus_held(state: &BTreeMap<JobKey, JobView>) -> GpuSet {
    state
        .values()
        .filter(|j| j.phase != Phase::Queued)
        .fold(GpuSet::new(), |a, j| a.union(&j.gpus))
}

/// Whether no other primary is exclusive (one keeps new primaries off the node).
pub(super) fn no_exclusive_primary(state: &BTreeMap<JobKey, JobView>, cur: &JobView) -> bool {
    !state
        .values()
        .any(|j| j.key != cur.key && j.phase == Phase::Primary && j.req.exclusive)
}

/// GPUs and CPUs for a GPU job as a primary without displacing anyone: a queued job's from the
/// free GPUs, a resumed one's CPUs next to the GPUs it kept.
pub(super) fn gpu_fit(
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

/// CPUs of the jobs whose phase passes `f`.
pub(super) fn cpus_of(state: &BTreeMap<JobKey, JobView>, f: impl Fn(Phase) -> bool) -> CpuSet {
    state
        .values()
        .filter(|j| f(j.phase))
        .fold(CpuSet::new(), |a, j| a.union(&j.cpus))
}

/// Each CPU of `base` (ascending) with the number of backfillers running on it: one pass over
/// the backfillers' CPUs, not over every job per CPU.
pub(super) fn backfillers_per_cpu(
    state: &BTreeMap<JobKey, JobView>,
    base: &CpuSet,
) -> Vec<(u32, usize)> {
    let mut load: Vec<(u32, usize)> = base.iter().map(|c| (c, 0)).collect();
    for j in state.values().filter(|j| j.phase == Phase::Backfill) {
        for c in j.cpus.intersection(base).iter() {
            if let Ok(i) = load.binary_search_by_key(&c, |&(x, _)| x) {
                load[i].1 += 1;
            }
        }
    }
    load
}

/// Job-CPUs in use by running jobs (primaries and backfillers).
pub(super) fn slots_used(state: &BTreeMap<JobKey, JobView>) -> usize {
    state
        .values()
        .filter(|j| matches!(j.phase, Phase::Primary | Phase::Backfill))
        .map(|j| j.cpus.len())
        .sum()
}

/// CPUs for `cur` as a primary without displacing anyone.
pub(super) fn primary_fit(
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
pub(super) fn preempt_fit(
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
