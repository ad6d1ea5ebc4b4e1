//! Placing jobs that ask for GPUs, and keeping CPU-only jobs off the CPUs next to free GPUs.
//!
//! Policy ([`place`]):
//! - A job of `g` GPUs and `n` CPUs gets `g` whole free GPUs, never one another job holds, and
//!   `n` CPUs out of the free set, chosen by the CPU [`Allocator`] among the CPUs local to its
//!   GPUs (their `local_cpulist`; a GPU whose locality is unknown counts every CPU as local).
//! - GPUs on one NUMA node are preferred: every node with `g` free GPUs is tried, the node with
//!   the fewest free GPUs first (packing keeps whole nodes of GPUs for larger GPU jobs), then the
//!   lowest node; the first whose local free CPUs hold the job wins. Failing that, a multi-GPU
//!   job's GPUs are spread over the fewest nodes whose free local CPUs hold it (at least one GPU
//!   of each, so every CPU it gets is local to one of its GPUs), and last taken across nodes,
//!   the nodes with the most free GPUs first.
//! - Of one node's free GPUs, a multi-GPU job takes those under the fewest PCIe switches
//!   ([`Gpu::switch`](crate::Gpu::switch); a GPU under none counts as a switch of its own), from
//!   the switch with the fewest free GPUs that holds them; of nodes with as many free GPUs, the
//!   one that needs the fewest switches comes first. Otherwise the order above stands (GPU sets
//!   spread over nodes do not look at switches).
//! - When no choice has enough local CPUs, under [`Locality::Prefer`] (the default) the job takes
//!   the choice with the most free local CPUs, every one of them, and the rest from the others
//!   the way a CPU-only job would (off the CPUs of the other free GPUs first), from the NUMA
//!   nodes nearest to its GPUs' nodes first (by the topology's distance matrix; any node when
//!   distances are unknown). Under [`Locality::Require`] it waits instead — unless it could never
//!   be local on this node ([`could_be_local`]), which is then placed as under `Prefer`.
//! - A CPU-only job avoids the CPUs local to free GPUs while it fits on the others; then it
//!   leaves as many cores of each free GPU's local CPUs free as it can, from the GPU's share of
//!   its local cores ([`fair_share_cores`]) down to one, while it fits without them and spans no
//!   more NUMA nodes than without that care (so no free GPU is stranded without a local CPU if
//!   that can be helped); otherwise it may use them, except the cores reserved for GPU jobs: [`GpuPolicy::reserve_cores_per_gpu`] cores of each free GPU's local CPUs (as
//!   Slurm's `RestrictedCoresPerGPU`). A GPU job may use
//!   any reserved core, but takes its local CPUs outside the other free GPUs' reservations first.
//!
//!
//! That is the default rule, [`PlacementRule::KeepGpuCpus`]: the first choice that fits wins.
//! Under [`PlacementRule::FewestStranded`] (`[gpus] placement = "fewest-stranded"`) every choice
//! above — a GPU job's GPU set, its far CPUs, a CPU-only job's CPUs — is the first of its
//! candidates leaving the fewest free GPUs [`stranded`] (free, none of their local CPUs free),
//! and a CPU-only job tries one NUMA node at a time ([`fewest_stranded`]).
//!
//! The result depends only on its inputs.
//!
//! ```
//! use pjw_core::{alloc::Allocator, gpu_alloc::{place, GpuPolicy}, synthetic, CpuSet, GpuSet};
//! use pjw_core::{Gpu, GpuId, GpuVendor, Gpus};
//! let topo = synthetic::parse("numa:2 core:4").unwrap();
//! let gpu = |id, numa: u32, cpus| Gpu {
//!     id: GpuId(id), vendor: GpuVendor::Nvidia, pci: None, switch: None, numa: Some(numa),
//!     cpus: CpuSet::parse_list(cpus).unwrap(), devices: vec![],
//! };
//! let gpus = Gpus { gpus: vec![gpu(0, 0, "0-3"), gpu(1, 1, "4-7")], shared: vec![] };
//! let alloc = Allocator::new(&topo);
//! let p = place(&alloc, &gpus, &topo.online(), &GpuSet::first_n(2), 1, 4, &GpuPolicy::default())
//!     .unwrap();
//! assert_eq!((p.gpus.to_string(), p.cpus.to_string()), ("0".into(), "0-3".into()));
//! ```

use crate::alloc::Allocator;
use crate::gpu::{GpuId, GpuSet, Gpus};
use crate::topology::Level;
use crate::CpuSet;
use std::cmp::Reverse;

pub mod fewest_stranded;
mod switches;

use switches::fewest_switches;

/// How GPU jobs and CPU-only jobs share a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuPolicy {
    /// Cores of each free GPU's local CPUs that only GPU jobs may use (0: none).
    pub reserve_cores_per_gpu: u32,
    /// Whether a GPU job may start with CPUs that are not local to its GPUs.
    pub locality: Locality,
    /// Under [`Locality::Require`], how long a queued GPU job waits for local CPUs before it
    /// is placed as under `Prefer` (`[gpus] require_wait_secs`); None: as long as it takes.
    /// A waiting GPU job holds up the queue behind it, so a bound keeps one job whose local
    /// CPUs a long job holds from stalling the node.
    pub require_wait_ms: Option<u64>,
    /// Which rule picks among the choices that fit (`[gpus] placement`).
    pub placement: PlacementRule,
}

/// Which rule picks among the placements that fit (`[gpus] placement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlacementRule {
    /// The first fitting choice in the order above; CPU-only jobs keep off the CPUs local to
    /// free GPUs while others are free, so GPU jobs arriving find their local CPUs free.
    #[default]
    KeepGpuCpus,
    /// Of the choices in the order above, the first leaving the fewest free GPUs [`stranded`];
    /// CPU-only jobs try one NUMA node at a time ([`fewest_stranded::place_cpu_only`]). Less
    /// stranded GPU time in the simulator, but a CPU-only job may take CPUs next to free GPUs
    /// while others are free (docs/placement.md).
    FewestStranded,
}

impl PlacementRule {
    /// The config spelling (`keep-gpu-cpus`, `fewest-stranded`).
    pub fn parse(s: &str) -> Option<PlacementRule> {
        match s {
            "keep-gpu-cpus" => Some(PlacementRule::KeepGpuCpus),
            "fewest-stranded" => Some(PlacementRule::FewestStranded),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            PlacementRule::KeepGpuCpus => "keep-gpu-cpus",
            PlacementRule::FewestStranded => "fewest-stranded",
        }
    }

    /// What a choice costs under this rule: the free GPUs of `free_gpus` it leaves stranded
    /// when `free_cpus` stay free under `FewestStranded`, nothing under `KeepGpuCpus` (the
    /// first choice that fits wins).
    fn cost(self, gpus: &Gpus, free_cpus: &CpuSet, free_gpus: &GpuSet) -> usize {
        match self {
            PlacementRule::KeepGpuCpus => 0,
            PlacementRule::FewestStranded => stranded(gpus, free_cpus, free_gpus),
        }
    }
}

/// How strictly a GPU job's CPUs must be local to its GPUs (`[gpus] locality`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Locality {
    /// Local CPUs when there are enough, else the nearest: the job starts as soon as enough
    /// GPUs and CPUs are free.
    #[default]
    Prefer,
    /// Only CPUs local to the job's GPUs: the job waits until it can have them (as Slurm's
    /// `--gres-flags=enforce-binding` or the kubelet's `single-numa-node`) — unless it could
    /// never have them on this node ([`could_be_local`] is false: more CPUs than the GPUs it
    /// could take have local ones), which is then placed as under `Prefer` rather than left
    /// waiting for good.
    Require,
}

impl Locality {
    /// The config spelling (`prefer`, `require`).
    pub fn parse(s: &str) -> Option<Locality> {
        match s {
            "prefer" => Some(Locality::Prefer),
            "require" => Some(Locality::Require),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Locality::Prefer => "prefer",
            Locality::Require => "require",
        }
    }
}

/// What a job got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub gpus: GpuSet,
    pub cpus: CpuSet,
}

/// The CPUs local to `ids` (every online CPU for a GPU of unknown locality).
pub fn local_cpus(alloc: &Allocator, gpus: &Gpus, ids: &GpuSet) -> CpuSet {
    let mut out = CpuSet::new();
    for id in ids.iter() {
        match gpus.get(id) {
            Some(g) if !g.cpus.is_empty() => out = out.union(&g.cpus),
            _ => return alloc.topology().online(),
        }
    }
    out
}

/// The CPUs of the first `k` cores (by lowest CPU) among the free local CPUs of each GPU in
/// `ids` with a known locality, for GPU jobs only.
pub fn reserved_cpus(
    alloc: &Allocator,
    gpus: &Gpus,
    ids: &GpuSet,
    free_cpus: &CpuSet,
    k: u32,
) -> CpuSet {
    let mut out = CpuSet::new();
    if k == 0 {
        return out;
    }
    let topo = alloc.topology();
    for id in ids.iter() {
        let Some(g) = gpus.get(id) else { continue };
        let mut cores: Vec<u32> = Vec::new();
        for c in g.cpus.intersection(free_cpus).difference(&out).iter() {
            let Some(pu) = topo.pu(c) else { continue };
            if !cores.contains(&pu.core) {
                if cores.len() == k as usize {
                    continue;
                }
                cores.push(pu.core);
            }
            out.insert(c);
        }
    }
    out
}

/// How many of `free_gpus` are stranded when `free_cpus` are free: none of their local CPUs is
/// free (a GPU of unknown locality is never stranded). What [`PlacementRule::FewestStranded`]
/// keeps low, and what the GPU simulator integrates over time.
pub fn stranded(gpus: &Gpus, free_cpus: &CpuSet, free_gpus: &GpuSet) -> usize {
    free_gpus
        .iter()
        .filter(|id| {
            gpus.get(*id)
                .is_some_and(|g| !g.cpus.is_empty() && !g.cpus.intersects(free_cpus))
        })
        .count()
}

/// Place a job of `n_gpus` GPUs and `n_cpus` CPUs; `None` when it does not fit now. With
/// `n_gpus == 0` this is a CPU-only job ([`place_cpu_only`]).
pub fn place(
    alloc: &Allocator,
    gpus: &Gpus,
    free_cpus: &CpuSet,
    free_gpus: &GpuSet,
    n_gpus: usize,
    n_cpus: usize,
    policy: &GpuPolicy,
) -> Option<Placement> {
    let free_gpus = free_gpus.intersection(&gpus.all());
    if n_gpus == 0 {
        return place_cpu_only(alloc, gpus, free_cpus, &free_gpus, n_cpus, policy).map(|cpus| {
            Placement {
                gpus: GpuSet::new(),
                cpus,
            }
        });
    }
    if free_gpus.len() < n_gpus {
        return None;
    }
    let candidates = gpu_candidates(gpus, &free_gpus, n_gpus);
    let require = policy.locality == Locality::Require
        && could_be_local(
            alloc,
            gpus,
            &alloc.topology().online(),
            &gpus.all(),
            n_gpus,
            n_cpus,
        );
    // Under FewestStranded: (stranded GPUs, placement) of the best choice with local CPUs only.
    // Under either rule: ((its cost, fewer free local CPUs), placement) of the best choice short
    // of local CPUs (under KeepGpuCpus the cost is 0: the most free local CPUs wins).
    let mut best: Option<(usize, Placement)> = None;
    let mut fallback: Option<((usize, Reverse<usize>), Placement)> = None;
    for chosen in candidates {
        let others = free_gpus.difference(&chosen);
        let reserved = reserved_cpus(
            alloc,
            gpus,
            &others,
            free_cpus,
            policy.reserve_cores_per_gpu,
        );
        let local = local_cpus(alloc, gpus, &chosen).intersection(free_cpus);
        let cpus = alloc
            .allocate(&local.difference(&reserved), n_cpus)
            .or_else(|| alloc.allocate(&local, n_cpus));
        if let Some(cpus) = cpus {
            let cost = policy
                .placement
                .cost(gpus, &free_cpus.difference(&cpus), &others);
            if cost == 0 {
                // Nothing later can do better, and the first wins ties.
                return Some(Placement { gpus: chosen, cpus });
            }
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, Placement { gpus: chosen, cpus }));
            }
            continue;
        }
        // A choice with no more free local CPUs than a fallback costing nothing cannot beat it.
        let beaten = fallback
            .as_ref()
            .is_some_and(|((c, Reverse(k)), _)| *c == 0 && local.len() <= *k);
        if best.is_none() && !require && free_cpus.len() >= n_cpus && !beaten {
            // Every free local CPU, the rest as a CPU-only job would take it.
            let rest = nearest_rest(
                alloc,
                gpus,
                &chosen,
                &others,
                &free_cpus.difference(&local),
                n_cpus - local.len(),
                policy,
            )?;
            let cpus = local.union(&rest);
            let cost = policy
                .placement
                .cost(gpus, &free_cpus.difference(&cpus), &others);
            let key = (cost, Reverse(local.len()));
            if fallback.as_ref().is_none_or(|(k, _)| key < *k) {
                fallback = Some((key, Placement { gpus: chosen, cpus }));
            }
        }
    }
    best.map(|(_, p)| p).or(fallback.map(|(_, p)| p))
}

/// Whether a job of `n_gpus` GPUs and `n_cpus` CPUs could ever have only CPUs local to its GPUs
/// when it may take GPUs of `ids` and CPUs of `cpus` (all of them free): the `n_gpus` GPUs whose
/// local CPUs in `cpus` together are the most — one GPU of each distinct local CPU set, the
/// largest sets first — hold `n_cpus`. A GPU of unknown locality counts every CPU as local.
pub fn could_be_local(
    alloc: &Allocator,
    gpus: &Gpus,
    cpus: &CpuSet,
    ids: &GpuSet,
    n_gpus: usize,
    n_cpus: usize,
) -> bool {
    if ids.len() < n_gpus {
        return false;
    }
    let mut sets: Vec<CpuSet> = Vec::new();
    for id in ids.iter() {
        let local = local_cpus(alloc, gpus, &[id].into_iter().collect()).intersection(cpus);
        if !sets.contains(&local) {
            sets.push(local);
        }
    }
    sets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let union = sets
        .iter()
        .take(n_gpus)
        .fold(CpuSet::new(), |a, s| a.union(s));
    union.len() >= n_cpus
}

/// `need` CPUs of `free` (none local to the job's GPUs `chosen`), taken as a CPU-only job would
/// take them (off the CPUs of the other free GPUs `others` first), from the NUMA nodes nearest
/// to those GPUs' nodes first: nodes join in order of distance (those at one distance
/// together) until they hold a choice. Where distances are not known, every free CPU at once.
fn nearest_rest(
    alloc: &Allocator,
    gpus: &Gpus,
    chosen: &GpuSet,
    others: &GpuSet,
    free: &CpuSet,
    need: usize,
    policy: &GpuPolicy,
) -> Option<CpuSet> {
    let pick = |pool: &CpuSet| {
        place_cpu_only(alloc, gpus, pool, others, need, policy)
            .or_else(|| alloc.allocate(pool, need))
    };
    let topo = alloc.topology();
    let homes: Vec<u32> = chosen
        .iter()
        .filter_map(|id| gpus.get(id).and_then(|g| g.numa))
        .collect();
    if topo.distances.is_empty() || homes.is_empty() {
        return pick(free);
    }
    let distance = |os: u32| {
        homes
            .iter()
            .filter_map(|&h| topo.distances.get(h, os))
            .min()
            .unwrap_or(u32::MAX)
    };
    let order = topo.numa_by_distance(&homes);
    let mut pool = CpuSet::new();
    for (i, &os) in order.iter().enumerate() {
        if let Some(node) = topo.numa_nodes.iter().find(|n| n.os == os) {
            pool = pool.union(&node.cpus.intersection(free));
        }
        let last_at_this_distance = order
            .get(i + 1)
            .is_none_or(|&next| distance(next) != distance(os));
        if last_at_this_distance && pool.len() >= need {
            if let Some(cpus) = pick(&pool) {
                return Some(cpus);
            }
        }
    }
    pick(free)
}

/// Most NUMA nodes (with free GPUs) whose subsets [`gpu_candidates`] enumerates; beyond, only
/// the greedy spread.
const MAX_SPREAD_NODES: usize = 8;

/// The GPU sets a job of `n` GPUs may take, best first: `n` of one NUMA node's free GPUs for each
/// node that has them, those under the fewest PCIe switches ([`fewest_switches`]) (a node here:
/// GPUs of one node and one local CPU set; fewest free first, then fewest switches, then lowest
/// node; GPUs of unknown node last, grouped by their local CPUs); then `n` spread over the fewest nodes: for 2, 3, ... nodes, every set of
/// that many nodes whose free GPUs number at least `n` (fewest free GPUs first, then lowest
/// nodes), at least one GPU of each node and the rest from those with the fewest free; last, `n`
/// across nodes, most free nodes first. A spread set's local CPUs are those of every node it
/// touches, so a job no single node can hold with local CPUs may still get only local ones.
fn gpu_candidates(gpus: &Gpus, free: &GpuSet, n: usize) -> Vec<GpuSet> {
    // ((node, local CPUs), free GPUs of that node and locality in id order): GPUs of unknown
    // node but different local CPUs are different groups.
    type Key = (Option<u32>, CpuSet);
    let mut groups: Vec<(Key, Vec<GpuId>)> = Vec::new();
    for id in free.iter() {
        let key = gpus
            .get(id)
            .map_or((None, CpuSet::new()), |g| (g.numa, g.cpus));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(id),
            None => groups.push((key, vec![id])),
        }
    }
    groups.sort_by_key(|((numa, cpus), v)| (numa.is_none(), v.len(), *numa, cpus.first()));
    // One node's choice: its GPUs under the fewest PCIe switches; among nodes of as many free
    // GPUs, the fewest switches first (stable: then the order above).
    let mut one_node: Vec<((bool, usize, usize), GpuSet)> = groups
        .iter()
        .filter(|(_, v)| v.len() >= n)
        .map(|((numa, _), v)| {
            let (set, switches) = fewest_switches(gpus, v, n);
            ((numa.is_none(), v.len(), switches), set)
        })
        .collect();
    one_node.sort_by_key(|&(key, _)| key);
    let mut out: Vec<GpuSet> = one_node.into_iter().map(|(_, set)| set).collect();
    let nodes = groups.len();
    if nodes <= MAX_SPREAD_NODES {
        // Subsets of the groups (bit i: groups[i]) by size, then by free GPUs, then by mask.
        let mut subsets: Vec<(u32, usize, u32)> = (1u32..1 << nodes)
            .filter(|m| m.count_ones() >= 2 && m.count_ones() as usize <= n)
            .map(|m| {
                let free: usize = (0..nodes)
                    .filter(|i| m & (1 << i) != 0)
                    .map(|i| groups[i].1.len())
                    .sum();
                (m.count_ones(), free, m)
            })
            .filter(|&(_, free, _)| free >= n)
            .collect();
        subsets.sort_unstable();
        for (_, _, m) in subsets {
            let members: Vec<&Vec<GpuId>> = (0..nodes)
                .filter(|i| m & (1 << i) != 0)
                .map(|i| &groups[i].1)
                .collect();
            // One of each node, then the rest in group order (fewest free first).
            let mut set: GpuSet = members.iter().map(|v| v[0]).collect();
            for id in members.iter().flat_map(|v| v.iter().skip(1)) {
                if set.len() == n {
                    break;
                }
                set.insert(*id);
            }
            if !out.contains(&set) {
                out.push(set);
            }
        }
    }
    let mut spread: Vec<&(Key, Vec<GpuId>)> = groups.iter().collect();
    spread.sort_by_key(|((numa, cpus), v)| {
        (
            numa.is_none(),
            std::cmp::Reverse(v.len()),
            *numa,
            cpus.first(),
        )
    });
    let across: GpuSet = spread
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .take(n)
        .collect();
    if across.len() == n && !out.contains(&across) {
        out.push(across);
    }
    out
}

/// Place a CPU-only job of `n` CPUs: off the CPUs local to free GPUs if it fits there, else
/// anywhere but the cores reserved for GPU jobs.
pub fn place_cpu_only(
    alloc: &Allocator,
    gpus: &Gpus,
    free_cpus: &CpuSet,
    free_gpus: &GpuSet,
    n: usize,
    policy: &GpuPolicy,
) -> Option<CpuSet> {
    if policy.placement == PlacementRule::FewestStranded {
        return fewest_stranded::place_cpu_only(alloc, gpus, free_cpus, free_gpus, n, policy);
    }
    let mut near = CpuSet::new();
    for id in free_gpus.iter() {
        if let Some(g) = gpus.get(id) {
            near = near.union(&g.cpus);
        }
    }
    if let Some(cpus) = alloc.allocate(&free_cpus.difference(&near), n) {
        return Some(cpus);
    }
    let reserved = reserved_cpus(
        alloc,
        gpus,
        free_gpus,
        free_cpus,
        policy.reserve_cores_per_gpu,
    );
    let base = alloc.allocate(&free_cpus.difference(&reserved), n)?;
    // Then keep as many cores for each free GPU as fit, from its share of its local cores down
    // to one, so no free GPU is left without a free local CPU while that can be helped -- but
    // not at the price of the job's own locality (no more NUMA nodes than it would span).
    let topo = alloc.topology();
    let span = topo.domains_spanned(Level::Numa, &base);
    for k in (policy.reserve_cores_per_gpu + 1..=fair_share_cores(alloc, gpus, free_gpus)).rev() {
        let keep = reserved_cpus(alloc, gpus, free_gpus, free_cpus, k);
        if let Some(cpus) = alloc.allocate(&free_cpus.difference(&keep), n) {
            if topo.domains_spanned(Level::Numa, &cpus) <= span {
                return Some(cpus);
            }
        }
    }
    Some(base)
}

/// The cores each of `ids` may count on: the fewest, over those GPUs of known locality, of its
/// local cores divided by the number of GPUs (of the node) local to the same CPUs; 0 if none.
pub fn fair_share_cores(alloc: &Allocator, gpus: &Gpus, ids: &GpuSet) -> u32 {
    let topo = alloc.topology();
    let mut share: Option<u32> = None;
    for id in ids.iter() {
        let Some(g) = gpus.get(id).filter(|g| !g.cpus.is_empty()) else {
            continue;
        };
        let mut cores: Vec<u32> = g
            .cpus
            .iter()
            .filter_map(|c| topo.pu(c).map(|p| p.core))
            .collect();
        cores.sort_unstable();
        cores.dedup();
        let peers = gpus.gpus.iter().filter(|o| o.cpus == g.cpus).count().max(1);
        let s = (cores.len() / peers) as u32;
        share = Some(share.map_or(s, |x| x.min(s)));
    }
    share.unwrap_or(0)
}

#[cfg(test)]
mod tests;
