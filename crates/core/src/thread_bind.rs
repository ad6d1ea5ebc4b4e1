//! Thread balancing inside a job: which of a job's threads to pin to which of its CPUs.
//!
//! The original pjw locked the threads that are "in a RUN state most of the time" to CPUs of the
//! job in round-robin order and left the others free. [`plan`] is that decision, pure: it takes
//! the job's CPU set, the machine's [`Topology`], the pins made on the previous pass and one run
//! time sample per thread, and returns the new pins and the threads to unpin (give back the whole
//! job set). Reading `/proc/PID/task/TID/{stat,schedstat}` and calling `sched_setaffinity` are
//! the daemon's business.
//!
//! Rules:
//! - A thread is **busy** when it ran at least `busy_percent` % of the interval; the others are
//!   sleepers and are never pinned.
//! - **One pass of grace.** A pinned thread that looks idle for the first time keeps its pin and
//!   its place for this pass (listed in `grace`, counted as busy); idle again at the next pass it
//!   is unpinned (listed in `unpin`). A single low sample (a page-fault storm, a short wait)
//!   therefore moves nothing: without it, the other busy threads were compacted towards node 0
//!   and the dipping thread came back to the CPU they left, so two threads swapped NUMA nodes
//!   and ran away from the pages they had touched (bench/scenarios/bind-numa.sh measured it).
//! - Busy threads take CPUs in this order: one PU per physical core first (SMT siblings last),
//!   the cores of one NUMA node before the next, lower CPU numbers first. With more busy threads
//!   than CPUs they wrap round-robin, so per-CPU counts differ by at most one.
//! - Stability: a busy thread keeps its CPU when that CPU is still in the set and keeping it does
//!   not break the rules above (it is not over its share and, with spare CPUs, the CPU is in a
//!   class — sibling rank, and NUMA node while the busy threads span more nodes than the ideal
//!   placement — that the ideal placement uses as often). So threads are gathered onto fewer
//!   nodes when they span too many, but never moved from one node to another for its own sake:
//!   a thread's pages are on the node where it first touched them.
//! - No pin is ever outside the job's set; threads that no longer exist are dropped.
//!
//! ```
//! use std::collections::BTreeMap;
//! use pjw_core::thread_bind::{plan, ThreadSample};
//! use pjw_core::{synthetic, CpuSet, Tid};
//! let topo = synthetic::parse("core:2").unwrap();
//! let s = |t, ms: u64| ThreadSample { tid: Tid(t), run_ns: ms * 1_000_000 };
//! let none = BTreeMap::new();
//! let p = plan(&topo, &topo.online(), &none, &Default::default(), &[s(1, 990), s(2, 3), s(3, 1000)], 1_000_000_000, 50);
//! assert_eq!(p.pins, BTreeMap::from([(Tid(1), 0), (Tid(3), 1)]));
//! ```

use std::collections::{BTreeMap, BTreeSet};

use crate::{CpuSet, Tid, Topology};

/// What a job's threads are bound to (`[job] bind`, `pjw run --bind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindMode {
    /// Each busy thread on one PU of the job.
    Threads,
    /// Each busy thread on the PUs of one core of the job (its SMT siblings included).
    Cores,
    /// No binding: every thread may run on the whole job set.
    #[default]
    None,
}

impl BindMode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [BindMode; 3] = [BindMode::Threads, BindMode::Cores, BindMode::None];

    /// The mode's name in config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BindMode::Threads => "threads",
            BindMode::Cores => "cores",
            BindMode::None => "none",
        }
    }

    /// The mode named `text` (exact, lower-case), if any.
    pub fn parse(text: &str) -> Option<BindMode> {
        BindMode::ALL.into_iter().find(|m| m.name() == text)
    }
}

/// One thread's run time over the last interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSample {
    pub tid: Tid,
    /// Nanoseconds the thread ran during the interval (a schedstat or stat delta).
    pub run_ns: u64,
}

/// What to do this pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindPlan {
    /// The full new pin map: every busy thread and its CPU.
    pub pins: BTreeMap<Tid, u32>,
    /// Threads pinned before that are sleepers for the second pass running: give them the
    /// whole job set back.
    pub unpin: Vec<Tid>,
    /// Pinned threads idle for the first time: kept pinned (they are in `pins`) this pass. The
    /// caller hands this set back as `grace` to the next pass.
    pub grace: BTreeSet<Tid>,
}

/// A CPU's place in the fill order: (sibling rank within its core, NUMA node, CPU number).
/// The first two make its class; CPUs of one class are interchangeable for stability.
type Key = (u32, u32, u32);

/// The job's CPUs in fill order, with their keys.
fn fill_order(topo: &Topology, job: &CpuSet) -> Vec<Key> {
    let mut seen: BTreeMap<(u32, u32), u32> = BTreeMap::new(); // (package, core) -> PUs so far
    let mut keys = Vec::with_capacity(job.len());
    for cpu in job.iter() {
        // A CPU the topology does not know is a core of its own on node 0.
        let core = core_of(topo, cpu);
        let numa = topo.pu(cpu).and_then(|p| p.numa).unwrap_or(0);
        let rank = seen.entry(core).or_insert(0);
        keys.push((*rank, numa, cpu));
        *rank += 1;
    }
    keys.sort_unstable();
    keys
}

/// Whether sample `s` is busy: it ran at least `busy_percent` % of `interval_ns` (never over an
/// empty interval).
pub fn is_busy(s: &ThreadSample, interval_ns: u64, busy_percent: u32) -> bool {
    interval_ns > 0
        && u128::from(s.run_ns) * 100 >= u128::from(busy_percent) * u128::from(interval_ns)
}

/// Decide the pins for one pass. `interval_ns` is the length of the interval the samples cover;
/// a thread is busy when `run_ns * 100 >= busy_percent * interval_ns` (no thread is busy when the
/// interval is empty). `previous` is the pin map the last pass returned, `grace` the set of
/// threads it kept pinned through an idle pass.
pub fn plan(
    topo: &Topology,
    job: &CpuSet,
    previous: &BTreeMap<Tid, u32>,
    grace: &BTreeSet<Tid>,
    samples: &[ThreadSample],
    interval_ns: u64,
    busy_percent: u32,
) -> BindPlan {
    let is_busy = |s: &ThreadSample| is_busy(s, interval_ns, busy_percent);
    let mut busy = Vec::new();
    let mut unpin = Vec::new();
    let mut kept = BTreeSet::new();
    for s in samples {
        if is_busy(s) {
            busy.push(s.tid);
        } else if previous.contains_key(&s.tid) {
            if grace.contains(&s.tid) {
                unpin.push(s.tid);
            } else {
                // First idle pass: placed as a busy thread, so it keeps its CPU.
                busy.push(s.tid);
                kept.insert(s.tid);
            }
        }
    }
    busy.sort_unstable();
    busy.dedup();
    unpin.sort_unstable();
    unpin.dedup();
    let order = fill_order(topo, job);
    let mut out = BindPlan {
        pins: BTreeMap::new(),
        unpin,
        grace: kept,
    };
    if order.is_empty() || busy.is_empty() {
        return out;
    }

    let m = order.len();
    let n = busy.len();
    let base = n / m;
    // With spare CPUs (base 0), the NUMA node is part of a CPU's class only when the busy
    // threads would otherwise span more nodes than the ideal placement does: then they are
    // gathered onto fewer nodes. Otherwise a thread keeps its node, where its pages are (a lone
    // thread left on the second node when its sibling ends is not moved away from them to "fill
    // node 0 first"), and threads to place go to the nodes already held first.
    let node_of: BTreeMap<u32, u32> = order.iter().map(|k| (k.2, k.1)).collect();
    let held: BTreeSet<u32> = busy
        .iter()
        .filter_map(|t| previous.get(t).and_then(|cpu| node_of.get(cpu)))
        .copied()
        .collect();
    let ideal = order[..n.min(m)]
        .iter()
        .map(|k| k.1)
        .collect::<BTreeSet<u32>>()
        .len();
    if base == 0 && held.len() <= ideal {
        let mut near = order.clone();
        near.sort_by_key(|k| (k.0, !held.contains(&k.1), k.1, k.2));
        let pins = assign(&near, &busy, previous, false);
        let spans = pins
            .values()
            .filter_map(|cpu| node_of.get(cpu))
            .collect::<BTreeSet<_>>()
            .len();
        if spans <= ideal {
            out.pins = pins;
            return out;
        }
    }
    out.pins = assign(&order, &busy, previous, true);
    out
}

/// Place `busy` (sorted) on the CPUs of `order` (the fill order): keep each previous pin the
/// rules allow, then round-robin the rest. With `node_class`, a CPU's stability class is its
/// sibling rank and NUMA node, else its sibling rank alone.
fn assign(
    order: &[Key],
    busy: &[Tid],
    previous: &BTreeMap<Tid, u32>,
    node_class: bool,
) -> BTreeMap<Tid, u32> {
    let m = order.len();
    let n = busy.len();
    let (base, extra) = (n / m, n % m);
    let mut pins = BTreeMap::new();
    let index: BTreeMap<u32, usize> = order.iter().enumerate().map(|(i, k)| (k.2, i)).collect();
    let mut count = vec![0usize; m];
    let mut extras_used = 0usize;
    // With spare CPUs (base 0), how many threads each class gets in the ideal placement.
    let class = |k: &Key| (k.0, if node_class { k.1 } else { u32::MAX });
    let mut class_room: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    if base == 0 {
        for k in &order[..n] {
            *class_room.entry(class(k)).or_insert(0) += 1;
        }
    }

    // Keep pass: busy threads stay where they are when the rules allow it.
    let mut movers = Vec::new();
    for &tid in busy {
        let kept = previous.get(&tid).and_then(|cpu| index.get(cpu)).copied();
        let Some(i) = kept else {
            movers.push(tid);
            continue;
        };
        let room = if count[i] < base {
            true
        } else if count[i] == base && extras_used < extra {
            if base == 0 {
                match class_room.get_mut(&class(&order[i])) {
                    Some(r) if *r > 0 => {
                        *r -= 1;
                        true
                    }
                    _ => false,
                }
            } else {
                true
            }
        } else {
            false
        };
        if room {
            if count[i] == base {
                extras_used += 1;
            }
            count[i] += 1;
            pins.insert(tid, order[i].2);
        } else {
            movers.push(tid);
        }
    }

    // Fill pass: round-robin over the fill order, up to `base` each, then the extras.
    let mut movers = movers.into_iter();
    'fill: for level in 0..=base {
        for i in 0..m {
            while count[i] <= level && count[i] < base + 1 {
                if count[i] == base {
                    if extras_used == extra {
                        break;
                    }
                    extras_used += 1;
                }
                let Some(tid) = movers.next() else {
                    break 'fill;
                };
                count[i] += 1;
                pins.insert(tid, order[i].2);
            }
        }
    }
    debug_assert!(movers.next().is_none());
    pins
}

/// Where a thread that was just born goes, before it can be measured: the slot of `job` (the
/// set [`plan`] places on) with the fewest of `pins`, the first in fill order among equals
/// (whole cores first, siblings last, one NUMA node before the next). None for an empty set.
pub fn place_one(topo: &Topology, job: &CpuSet, pins: &BTreeMap<Tid, u32>) -> Option<u32> {
    let mut count: BTreeMap<u32, usize> = BTreeMap::new();
    for cpu in pins.values() {
        *count.entry(*cpu).or_insert(0) += 1;
    }
    fill_order(topo, job)
        .into_iter()
        .map(|k| k.2)
        .min_by_key(|cpu| count.get(cpu).copied().unwrap_or(0))
}

/// The CPUs [`plan`] places threads on in `mode`: the whole job set for `threads`, one PU per
/// physical core (its lowest-numbered PU in the set) for `cores`, nothing for `none`.
pub fn slots(topo: &Topology, job: &CpuSet, mode: BindMode) -> CpuSet {
    match mode {
        BindMode::None => CpuSet::new(),
        BindMode::Threads => *job,
        BindMode::Cores => {
            let mut seen = std::collections::BTreeSet::new();
            let mut out = CpuSet::new();
            for cpu in job.iter() {
                if seen.insert(core_of(topo, cpu)) {
                    out.insert(cpu);
                }
            }
            out
        }
    }
}

/// The affinity a thread pinned to slot `cpu` gets: that PU for `threads`, the PUs of its core
/// that are in the job for `cores`. Never outside `job`.
pub fn pin_set(topo: &Topology, job: &CpuSet, mode: BindMode, cpu: u32) -> CpuSet {
    let mut out = CpuSet::new();
    match mode {
        BindMode::None => {}
        BindMode::Threads => {
            if job.contains(cpu) {
                out.insert(cpu);
            }
        }
        BindMode::Cores => {
            let core = core_of(topo, cpu);
            for c in job.iter().filter(|&c| core_of(topo, c) == core) {
                out.insert(c);
            }
        }
    }
    out
}

/// (package, core) of a CPU; a CPU the topology does not know is a core of its own.
fn core_of(topo: &Topology, cpu: u32) -> (u32, u32) {
    match topo.pu(cpu) {
        Some(p) => (p.package, p.core),
        None => (u32::MAX, cpu),
    }
}

#[cfg(test)]
mod tests;
