//! CPU-only jobs under [`PlacementRule::FewestStranded`](super::PlacementRule): the one choice
//! where that rule has candidates of its own rather than a different pick among the same ones.

use super::{fair_share_cores, reserved_cpus, stranded, GpuPolicy};
use crate::alloc::Allocator;
use crate::gpu::{GpuSet, Gpus};
use crate::CpuSet;
use std::cmp::Reverse;

/// Place a CPU-only job of `n` CPUs, never on the cores reserved for GPU jobs: of these
/// candidates, the first leaving the fewest free GPUs stranded ([`stranded`]) — one NUMA node's
/// free CPUs, nodes without GPUs first, then the node with the most free GPUs first (on a tie
/// the highest node), so CPU-only jobs gather where GPU jobs are not (those pack onto nodes whose
/// GPUs are in use, the lowest on a tie) for as long as every free GPU there keeps a free CPU;
/// then anywhere keeping `k` cores of each free GPU's local CPUs, `k` from its share of its local
/// cores ([`fair_share_cores`]) down to one; then anywhere.
pub fn place_cpu_only(
    alloc: &Allocator,
    gpus: &Gpus,
    free_cpus: &CpuSet,
    free_gpus: &GpuSet,
    n: usize,
    policy: &GpuPolicy,
) -> Option<CpuSet> {
    let reserved = reserved_cpus(
        alloc,
        gpus,
        free_gpus,
        free_cpus,
        policy.reserve_cores_per_gpu,
    );
    let usable = free_cpus.difference(&reserved);
    let topo = alloc.topology();
    // (whether the node has GPUs, its free GPUs, its id, its usable CPUs)
    let mut nodes: Vec<(bool, usize, u32, CpuSet)> = topo
        .numa_nodes
        .iter()
        .map(|node| {
            let has = gpus.gpus.iter().any(|g| g.cpus.intersects(&node.cpus));
            let near = free_gpus
                .iter()
                .filter(|id| gpus.get(*id).is_some_and(|g| g.cpus.intersects(&node.cpus)))
                .count();
            (has, near, node.os, node.cpus.intersection(&usable))
        })
        .collect();
    // Nodes without GPUs first; then the most free GPUs first, on a tie the highest node (the
    // other end from GPU jobs' ties).
    nodes.sort_by_key(|&(has, near, os, _)| (has, Reverse((near, os))));
    let keeps = (policy.reserve_cores_per_gpu + 1..=fair_share_cores(alloc, gpus, free_gpus))
        .rev()
        .map(|k| free_cpus.difference(&reserved_cpus(alloc, gpus, free_gpus, free_cpus, k)));
    let pools = nodes
        .into_iter()
        .map(|(_, _, _, pool)| pool)
        .chain(keeps)
        .chain(std::iter::once(usable));
    let mut best: Option<(usize, CpuSet)> = None;
    for pool in pools {
        if pool.len() < n {
            continue;
        }
        let Some(cpus) = alloc.allocate(&pool, n) else {
            continue;
        };
        let s = stranded(gpus, &free_cpus.difference(&cpus), free_gpus);
        if s == 0 {
            return Some(cpus);
        }
        if best.as_ref().is_none_or(|(b, _)| s < *b) {
            best = Some((s, cpus));
        }
    }
    best.map(|(_, cpus)| cpus)
}
