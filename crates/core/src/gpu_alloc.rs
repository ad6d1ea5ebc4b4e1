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
mod tests {
    use super::*;
    use crate::{synthetic, Gpu, GpuVendor};

    fn gpu(id: u32, numa: Option<u32>, cpus: &str) -> Gpu {
        Gpu {
            id: GpuId(id),
            vendor: GpuVendor::Nvidia,
            pci: None,
            switch: None,
            numa,
            cpus: CpuSet::parse_list(cpus).unwrap(),
            devices: vec![],
        }
    }

    /// 2 NUMA nodes × 4 CPUs (0-3, 4-7), GPUs 0 and 1 on node 0, 2 and 3 on node 1.
    fn two_by_two() -> (Allocator, Gpus) {
        let topo = synthetic::parse("numa:2 core:4").unwrap();
        let gpus = Gpus {
            gpus: vec![
                gpu(0, Some(0), "0-3"),
                gpu(1, Some(0), "0-3"),
                gpu(2, Some(1), "4-7"),
                gpu(3, Some(1), "4-7"),
            ],
            shared: vec![],
        };
        (Allocator::new(&topo), gpus)
    }

    fn cpus(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    fn ids(s: &str) -> GpuSet {
        GpuSet::parse_list(s).unwrap()
    }

    #[test]
    fn cpus_beyond_the_local_ones_come_from_the_nearest_numa_node() {
        // 4 NUMA nodes × 2 CPUs in a ring-less line: 0 — 1 — 2 — 3 (distance 10 to itself, 20 to
        // a neighbour, 30 and 40 further). One GPU on node 3. A job of 1 GPU and 4 CPUs takes
        // node 3's two CPUs and the two of node 2, its neighbour — not the lowest-numbered ones.
        let mut topo = synthetic::parse("numa:4 core:2").unwrap();
        let line = |a: u32, b: u32| 10 + 10 * a.abs_diff(b);
        let nodes: Vec<u32> = (0..4).collect();
        let values = nodes
            .iter()
            .flat_map(|&a| nodes.iter().map(move |&b| line(a, b)))
            .collect();
        topo.distances = crate::NumaDistances::new(nodes, values).unwrap();
        let gpus = Gpus {
            gpus: vec![gpu(0, Some(3), "6-7")],
            shared: vec![],
        };
        let alloc = Allocator::new(&topo);
        let free = topo.online();
        let p = place(&alloc, &gpus, &free, &ids("0"), 1, 4, &GpuPolicy::default()).unwrap();
        assert_eq!(p.cpus, cpus("4-7"));
        // Node 2 busy: the next nearest is node 1, then node 0.
        let p = place(
            &alloc,
            &gpus,
            &cpus("0-3,6-7"),
            &ids("0"),
            1,
            4,
            &GpuPolicy::default(),
        );
        assert_eq!(p.unwrap().cpus, cpus("2-3,6-7"));
        // Without distances, the rest is the CPU allocator's choice among all the others.
        topo.distances = Default::default();
        let alloc = Allocator::new(&topo);
        let p = place(&alloc, &gpus, &free, &ids("0"), 1, 4, &GpuPolicy::default()).unwrap();
        assert_eq!(p.cpus, cpus("0-1,6-7"), "the lowest others, as before");
    }

    /// One step of a table: (GPUs, CPUs) asked, then the GPUs and CPUs expected (None: waits).
    type Step = (usize, usize, Option<(&'static str, &'static str)>);

    /// Run `steps` in order on a fresh node, each placed job keeping what it got.
    fn run_table(name: &str, alloc: &Allocator, gpus: &Gpus, policy: GpuPolicy, steps: &[Step]) {
        let mut free_cpus = alloc.topology().online();
        let mut free_gpus = gpus.all();
        for (i, (g, n, want)) in steps.iter().enumerate() {
            let got = place(alloc, gpus, &free_cpus, &free_gpus, *g, *n, &policy);
            let got_s = got.map(|p| (p.gpus.to_string(), p.cpus.to_string()));
            let want_s = want.map(|(a, b)| (a.to_string(), b.to_string()));
            assert_eq!(got_s, want_s, "{name}: step {i} ({g} gpus, {n} cpus)");
            if let Some(p) = got {
                free_cpus = free_cpus.difference(&p.cpus);
                free_gpus = free_gpus.difference(&p.gpus);
            }
        }
    }

    #[test]
    fn placement_table() {
        let (alloc, gpus) = two_by_two();
        let none = GpuPolicy::default();
        let tables: Vec<(&str, GpuPolicy, Vec<Step>)> = vec![
            (
                "a 1-gpu 4-cpu job's cpus are all local to its gpu",
                none,
                vec![(1, 4, Some(("0", "0-3")))],
            ),
            (
                "four 1-gpu jobs get four gpus, a fifth waits",
                none,
                vec![
                    (1, 1, Some(("0", "0"))),
                    (1, 1, Some(("1", "1"))),
                    (1, 1, Some(("2", "4"))),
                    (1, 1, Some(("3", "5"))),
                    (1, 1, None),
                ],
            ),
            (
                "1-gpu jobs pack onto the node whose gpus are in use, keeping a node whole",
                none,
                vec![
                    (1, 2, Some(("0", "0-1"))),
                    (1, 2, Some(("1", "2-3"))),
                    (2, 4, Some(("2-3", "4-7"))),
                ],
            ),
            (
                "a 2-gpu job takes both gpus of one node",
                none,
                vec![(2, 2, Some(("0-1", "0-1"))), (2, 2, Some(("2-3", "4-5")))],
            ),
            (
                "a cpu-only job takes cpus no free gpu is local to first",
                none,
                vec![
                    (1, 1, Some(("0", "0"))),
                    (1, 1, Some(("1", "1"))),
                    (0, 2, Some(("", "2-3"))),
                ],
            ),
            (
                "a cpu-only job may use gpu-local cpus when nothing else is free",
                none,
                vec![(0, 6, Some(("", "0-5"))), (1, 2, Some(("2", "6-7")))],
            ),
            (
                "reserved cores stay for gpu jobs",
                GpuPolicy {
                    reserve_cores_per_gpu: 1,
                    ..GpuPolicy::default()
                },
                vec![
                    // 4 free gpus reserve cpus 0, 1, 4, 5.
                    (0, 4, Some(("", "2-3,6-7"))),
                    (0, 1, None),
                    // gpu 1 keeps cpu 0, gpus 2 and 3 keep cpus 4 and 5.
                    (1, 1, Some(("0", "1"))),
                ],
            ),
            (
                "a job whose gpu node is short of cpus takes the rest elsewhere",
                none,
                vec![
                    (1, 3, Some(("0", "0-2"))),
                    (2, 2, Some(("2-3", "4-5"))),
                    (1, 3, Some(("1", "3,6-7"))),
                ],
            ),
            (
                "a cpu-only job keeps a core for each free gpu while it fits",
                none,
                vec![
                    // Four free gpus, one core each: 0, 1, 4, 5.
                    (0, 2, Some(("", "2-3"))),
                    (0, 1, Some(("", "6"))),
                    (0, 1, Some(("", "7"))),
                    // Nothing else is free: it takes a kept core.
                    (0, 1, Some(("", "0"))),
                    // Three CPUs left, on two nodes: it takes them.
                    (0, 3, Some(("", "1,4-5"))),
                ],
            ),
            (
                "gpus across nodes when no node has enough",
                none,
                vec![(1, 1, Some(("0", "0"))), (3, 3, Some(("1-3", "1-3")))],
            ),
            ("more gpus than the node has", none, vec![(5, 1, None)]),
        ];
        for (name, policy, steps) in tables {
            run_table(name, &alloc, &gpus, policy, &steps);
        }
    }

    /// One canned case: free CPUs and GPUs, a job of (GPUs, CPUs), and what it gets (GPUs,
    /// CPUs) under `prefer` and under `require` (None: it waits).
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        (usize, usize),
        Option<(&'static str, &'static str)>,
        Option<(&'static str, &'static str)>,
    );

    #[test]
    fn locality_table() {
        let (alloc, gpus) = two_by_two();
        let cases: [Case; 6] = [
            (
                // No node has 4 free CPUs next to 2 free GPUs: one GPU of each node, and the
                // CPUs of both are local (before: GPUs 0-1 with CPUs 2-3 and two far ones).
                "a 2-gpu job spreads over two nodes' gpus rather than take far cpus",
                "2-3,6-7",
                "0-3",
                (2, 4),
                Some(("0,2", "2-3,6-7")),
                Some(("0,2", "2-3,6-7")),
            ),
            (
                "one node still comes first when it holds the job",
                "0-3,6-7",
                "0-3",
                (2, 4),
                Some(("0-1", "0-3")),
                Some(("0-1", "0-3")),
            ),
            (
                // Node 1's gpus are busy; node 0 has 3 free cpus. prefer: its 3 and the
                // nearest other; require: the job waits.
                "short of local cpus: prefer takes far ones, require waits",
                "1-7",
                "0-1",
                (1, 4),
                Some(("0", "1-4")),
                None,
            ),
            (
                // 2 gpus on two nodes would have 8 local cpus: require waits for them.
                "a job that could be local later waits under require",
                "0-6",
                "0-1",
                (2, 6),
                Some(("0-1", "0-5")),
                None,
            ),
            (
                // 5 cpus next to 1 gpu: no gpu of this node has that many local cpus, so
                // require would wait for ever; it is placed as under prefer (the far cpu off
                // the first cores of node 1's free gpus).
                "a job that can never be local is placed as under prefer",
                "0-7",
                "0-3",
                (1, 5),
                Some(("0", "0-3,6")),
                Some(("0", "0-3,6")),
            ),
            (
                "four gpus take every gpu, every cpu local",
                "0-7",
                "0-3",
                (4, 8),
                Some(("0-3", "0-7")),
                Some(("0-3", "0-7")),
            ),
        ];
        for (name, free_cpus, free_gpus, (g, n), prefer, require) in cases {
            for (locality, want) in [(Locality::Prefer, prefer), (Locality::Require, require)] {
                let policy = GpuPolicy {
                    locality,
                    ..GpuPolicy::default()
                };
                let got = place(
                    &alloc,
                    &gpus,
                    &cpus(free_cpus),
                    &ids(free_gpus),
                    g,
                    n,
                    &policy,
                )
                .map(|p| (p.gpus.to_string(), p.cpus.to_string()));
                let want = want.map(|(a, b)| (a.to_string(), b.to_string()));
                assert_eq!(got, want, "{name} ({})", locality.name());
            }
        }
    }

    /// `[gpus] placement = "fewest-stranded"`.
    fn fewest_stranded() -> GpuPolicy {
        GpuPolicy {
            placement: PlacementRule::FewestStranded,
            ..GpuPolicy::default()
        }
    }

    #[test]
    fn under_fewest_stranded_cpu_only_jobs_gather_on_one_node() {
        let (alloc, gpus) = two_by_two();
        // The cases of placement_table that go otherwise under this rule.
        let tables: Vec<(&str, Vec<Step>)> = vec![
            (
                // Node 1's free gpus keep cpus 6-7; another 2-cpu job would strand them, so
                // it takes node 0's (whose gpus are busy).
                "a cpu-only job takes the node with the most free gpus while they keep a cpu",
                vec![
                    (1, 1, Some(("0", "0"))),
                    (1, 1, Some(("1", "1"))),
                    (0, 2, Some(("", "4-5"))),
                    (0, 2, Some(("", "2-3"))),
                ],
            ),
            (
                "cpu-only jobs fill one node while its free gpus keep a cpu, then the other",
                vec![
                    // Both nodes have 2 free gpus: the higher one, node 1, leaving it 6-7.
                    (0, 2, Some(("", "4-5"))),
                    (0, 1, Some(("", "6"))),
                    // Cpu 7 is the last next to gpus 2-3: node 0 instead.
                    (0, 1, Some(("", "0"))),
                    (0, 1, Some(("", "1"))),
                    // Three cpus left, on two nodes: it takes them, stranding every gpu.
                    (0, 3, Some(("", "2-3,7"))),
                ],
            ),
        ];
        for (name, steps) in tables {
            run_table(name, &alloc, &gpus, fewest_stranded(), &steps);
        }
        // locality_table's job that can never be local: the far cpu on node 1, whose free gpus
        // keep free cpus (under keep-gpu-cpus: cpu 6, off the first cores of those gpus).
        for locality in [Locality::Prefer, Locality::Require] {
            let policy = GpuPolicy {
                locality,
                ..fewest_stranded()
            };
            let p = place(&alloc, &gpus, &cpus("0-7"), &ids("0-3"), 1, 5, &policy).unwrap();
            assert_eq!((p.gpus, p.cpus), (ids("0"), cpus("0-4")), "{locality:?}");
        }
        // Far cpus without distances: as a cpu-only job takes them, one node, the highest of
        // those with as many free gpus (none here) — not the lowest others, 0-1.
        let topo = synthetic::parse("numa:4 core:2").unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: vec![gpu(0, Some(3), "6-7")],
            shared: vec![],
        };
        let p = place(
            &alloc,
            &gpus,
            &topo.online(),
            &ids("0"),
            1,
            4,
            &fewest_stranded(),
        );
        assert_eq!(p.unwrap().cpus, cpus("4-7"));
    }

    #[test]
    fn under_fewest_stranded_every_choice_strands_the_fewest_free_gpus() {
        let (alloc, gpus) = two_by_two();
        assert_eq!(stranded(&gpus, &cpus("4-7"), &ids("0-3")), 2);
        assert_eq!(stranded(&gpus, &cpus("3-4"), &ids("0-3")), 0);
        assert_eq!(stranded(&gpus, &CpuSet::new(), &ids("1")), 1);
        // (free cpus, free gpus, (gpus, cpus) asked, what the job gets under fewest-stranded,
        // and under keep-gpu-cpus)
        let cases = [
            (
                // Node 0 comes first (the lowest of equals), but its 2 cpus are gpu 1's last:
                // node 1, which keeps 6-7 for gpu 3.
                "a gpu job takes the node where it strands no other gpu",
                "2-7",
                "0-3",
                (1, 2),
                ("2", "4-5"),
                ("0", "2-3"),
            ),
            (
                "one node still comes first when it strands nothing",
                "0-7",
                "0-3",
                (1, 2),
                ("0", "0-1"),
                ("0", "0-1"),
            ),
            (
                // One node's cpus strand its gpus (2-3 on node 1, 0 on node 0); keeping one
                // core per free gpu (1, 5, 6) strands none. keep-gpu-cpus keeps the job on one
                // node rather than keep those cores, and strands gpu 0.
                "a cpu-only job keeps a core per free gpu when one node would strand some",
                "1-3,5-7",
                "0,2-3",
                (0, 3),
                ("", "2-3,7"),
                ("", "1-3"),
            ),
            (
                // Short of local cpus either way: gpu 2 has more of them (5-7), but taking
                // them all strands gpu 3; gpu 0 with 2-3 and 5-6 leaves 7 for gpus 2-3.
                "short of local cpus, the choice that strands fewest",
                "2-3,5-7",
                "0,2-3",
                (1, 4),
                ("0", "2-3,5-6"),
                ("2", "3,5-7"),
            ),
        ];
        for (name, free_cpus, free_gpus, (g, n), stranding, keeping) in cases {
            for (policy, (wg, wc)) in [
                (fewest_stranded(), stranding),
                (GpuPolicy::default(), keeping),
            ] {
                let p = place(
                    &alloc,
                    &gpus,
                    &cpus(free_cpus),
                    &ids(free_gpus),
                    g,
                    n,
                    &policy,
                )
                .unwrap();
                let want = (ids(wg), cpus(wc));
                assert_eq!((p.gpus, p.cpus), want, "{name} ({:?})", policy.placement);
            }
        }
        assert_eq!(
            PlacementRule::parse("fewest-stranded").map(PlacementRule::name),
            Some("fewest-stranded")
        );
        assert_eq!(
            PlacementRule::parse("keep-gpu-cpus"),
            Some(PlacementRule::default())
        );
        assert_eq!(PlacementRule::parse("stranded"), None);
    }

    /// 2 NUMA nodes × 4 CPUs (0-3, 4-7) × 4 GPUs, two PCIe switches of two GPUs per node: GPUs
    /// 0-1 under switch a, 2-3 under b (node 0), 4-5 under c, 6-7 under d (node 1).
    fn two_by_four_switched() -> (Allocator, Gpus) {
        let topo = synthetic::parse("numa:2 core:4").unwrap();
        let switched = |id: u32, sw: &str| Gpu {
            switch: Some(sw.to_string()),
            ..gpu(id, Some(id / 4), if id < 4 { "0-3" } else { "4-7" })
        };
        let names = ["a", "a", "b", "b", "c", "c", "d", "d"];
        let gpus = Gpus {
            gpus: (0..8).map(|i| switched(i, names[i as usize])).collect(),
            shared: vec![],
        };
        (Allocator::new(&topo), gpus)
    }

    #[test]
    fn a_multi_gpu_job_takes_gpus_of_one_switch() {
        let (alloc, gpus) = two_by_four_switched();
        // (free gpus, gpus asked, gpus got) with every cpu free, under either rule.
        let cases = [
            // GPU 0 busy: the lowest free of node 0 are 1 (switch a) and 2 (b); b holds both.
            ("1-7", 2, "2-3"),
            // Nodes of as many free GPUs: node 0's 1-2 would span two switches, node 1's 4-5
            // one: node 1 (by node order alone: node 0).
            ("1-2,4-5", 2, "4-5"),
            // Three GPUs: no switch has three; a whole switch, then one of the other.
            ("0-3", 3, "0-2"),
            // A 1-GPU job takes the switch with the fewest free GPUs, keeping a and c whole.
            ("0-2,4-7", 1, "2"),
            // Nothing to choose between: the lowest, as before.
            ("0-7", 2, "0-1"),
            ("0-7", 4, "0-3"),
        ];
        for (free, n, want) in cases {
            for policy in [GpuPolicy::default(), fewest_stranded()] {
                let p = place(&alloc, &gpus, &cpus("0-7"), &ids(free), n, 2, &policy).unwrap();
                assert_eq!(p.gpus, ids(want), "{n} of {free} ({:?})", policy.placement);
            }
        }
        // A fresh node filling up: 1-GPU jobs pack onto a switch in use, 2-GPU jobs get whole
        // switches.
        run_table(
            "1- and 2-gpu jobs on a switched node",
            &alloc,
            &gpus,
            GpuPolicy::default(),
            &[
                (1, 1, Some(("0", "0"))),
                (1, 1, Some(("1", "1"))),
                (2, 2, Some(("2-3", "2-3"))),
                (1, 1, Some(("4", "4"))),
                (2, 2, Some(("6-7", "5-6"))),
                (1, 1, Some(("5", "7"))),
                (1, 1, None),
            ],
        );
    }

    #[test]
    fn gpus_of_no_switch_count_one_switch_each() {
        // One node: GPUs 0-1 under switch a, 2 on a root port, 3-4 under switch b.
        let topo = synthetic::parse("numa:1 core:4").unwrap();
        let alloc = Allocator::new(&topo);
        let on = |id, sw: Option<&str>| Gpu {
            switch: sw.map(str::to_string),
            ..gpu(id, Some(0), "0-3")
        };
        let gpus = Gpus {
            gpus: vec![
                on(0, Some("a")),
                on(1, Some("a")),
                on(2, None),
                on(3, Some("b")),
                on(4, Some("b")),
            ],
            shared: vec![],
        };
        let all = ids("0-4");
        let got = |free: &GpuSet, n| {
            place(
                &alloc,
                &gpus,
                &cpus("0-3"),
                free,
                n,
                1,
                &GpuPolicy::default(),
            )
            .unwrap()
            .gpus
        };
        // Two switches either way; a's two and GPU 2 leave b whole.
        assert_eq!(got(&all, 3), ids("0-2"));
        // a (the lowest of the smallest that holds 2), a GPU of no switch for one.
        assert_eq!(got(&all, 2), ids("0-1"));
        assert_eq!(got(&all, 1), ids("2"));
        // GPUs 2 and 4 busy: a, then b's last.
        assert_eq!(got(&ids("0-1,3"), 3), ids("0-1,3"));
        assert_eq!(
            fewest_switches(&gpus, &[GpuId(0), GpuId(2), GpuId(3)], 2),
            (ids("0,2"), 2)
        );
        // Without switches, the first n ids: the order before switches were known.
        let plain = two_by_two().1;
        let v: Vec<GpuId> = ids("0-3").iter().collect();
        for n in 1..=4 {
            assert_eq!(
                fewest_switches(&plain, &v, n),
                (GpuSet::first_n(n as u32), n)
            );
        }
    }

    #[test]
    fn could_be_local_counts_the_largest_local_sets_the_gpus_can_reach() {
        let (alloc, gpus) = two_by_two();
        let all = alloc.topology().online();
        let t = |c: &str, g: &str, ng, nc| could_be_local(&alloc, &gpus, &cpus(c), &ids(g), ng, nc);
        assert!(t("0-7", "0-3", 1, 4));
        assert!(!t("0-7", "0-3", 1, 5), "one gpu has 4 local cpus");
        assert!(t("0-7", "0-3", 2, 8), "two gpus on two nodes reach 8");
        assert!(!t("0-7", "0-1", 2, 5), "both on node 0: 4");
        assert!(!t("1-7", "0", 1, 4), "cpu 0 is not there");
        assert!(!t("0-7", "0", 2, 1), "fewer gpus than asked");
        // A gpu of unknown locality reaches every cpu.
        let anywhere = Gpus {
            gpus: vec![gpu(0, None, "")],
            shared: vec![],
        };
        assert!(could_be_local(&alloc, &anywhere, &all, &ids("0"), 1, 8));
        assert_eq!(Locality::parse("require"), Some(Locality::Require));
        assert_eq!(
            Locality::parse("prefer").map(Locality::name),
            Some("prefer")
        );
        assert_eq!(Locality::parse("strict"), None);
    }

    #[test]
    fn gpus_of_unknown_node_are_grouped_by_their_local_cpus() {
        // No NUMA node known, but GPUs 0-1 are local to CPUs 0-1 and 2-3 to CPUs 2-3. With CPU
        // 0 busy, a 1-GPU 2-CPU job gets GPU 2 and CPUs 2-3 (before: GPU 0 and a far CPU, and
        // under require it waited).
        let topo = synthetic::parse("package:1 core:4").unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: vec![
                gpu(0, None, "0-1"),
                gpu(1, None, "0-1"),
                gpu(2, None, "2-3"),
                gpu(3, None, "2-3"),
            ],
            shared: vec![],
        };
        for locality in [Locality::Prefer, Locality::Require] {
            let policy = GpuPolicy {
                locality,
                ..GpuPolicy::default()
            };
            let p = place(&alloc, &gpus, &cpus("1-3"), &ids("0-3"), 1, 2, &policy).unwrap();
            assert_eq!((p.gpus, p.cpus), (ids("2"), cpus("2-3")), "{locality:?}");
        }
    }

    #[test]
    fn a_gpu_of_unknown_node_counts_every_cpu_as_local() {
        let topo = synthetic::parse("numa:2 core:2").unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: vec![gpu(0, None, "")],
            shared: vec![],
        };
        assert_eq!(local_cpus(&alloc, &gpus, &ids("0")), cpus("0-3"));
        let p = place(
            &alloc,
            &gpus,
            &cpus("1-3"),
            &ids("0"),
            1,
            2,
            &GpuPolicy::default(),
        )
        .unwrap();
        assert_eq!(p.gpus, ids("0"));
        assert_eq!(p.cpus.len(), 2);
        assert!(p.cpus.is_subset(&cpus("1-3")));
    }

    #[test]
    fn reserved_cores_are_whole_cores_of_free_local_cpus() {
        let topo = synthetic::parse("numa:2 core:2 pu:2").unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: vec![gpu(0, Some(0), "0-3"), gpu(1, Some(1), "4-7")],
            shared: vec![],
        };
        let all = topo.online();
        assert_eq!(
            reserved_cpus(&alloc, &gpus, &ids("0-1"), &all, 1),
            cpus("0-1,4-5")
        );
        assert_eq!(
            reserved_cpus(&alloc, &gpus, &ids("1"), &all, 2),
            cpus("4-7")
        );
        // A busy cpu is not reserved; the next core is.
        assert_eq!(
            reserved_cpus(&alloc, &gpus, &ids("0"), &cpus("1-7"), 1),
            cpus("1")
        );
        assert_eq!(
            reserved_cpus(&alloc, &gpus, &ids("0-1"), &all, 0),
            CpuSet::new()
        );
    }
}
