//! Property tests of GPU placement: random machines with GPUs on random NUMA nodes (some of
//! unknown locality), random sequences of GPU and CPU-only jobs and releases. No GPU and no CPU
//! is ever in two live placements, and every placement has exactly what was asked, under either
//! placement rule; and with GPUs under random PCIe switches, a one-node job's GPUs are under the
//! fewest switches its node's free GPUs allow.

use pjw_core::alloc::Allocator;
use pjw_core::gpu_alloc::{place, GpuPolicy, Placement, PlacementRule};
use pjw_core::{synthetic, CpuSet, Gpu, GpuId, GpuSet, GpuVendor, Gpus};
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Debug, Clone)]
enum Op {
    /// GPUs, CPUs.
    Place(usize, usize),
    Release(Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..=3, 1usize..=6).prop_map(|(g, c)| Op::Place(g, c)),
        1 => any::<Index>().prop_map(Op::Release),
    ]
}

proptest! {
    #[test]
    fn no_gpu_or_cpu_is_placed_twice(
        nodes in 1u32..=3,
        cores in 1u32..=4,
        // Per GPU: its NUMA node (>= nodes means unknown).
        gpu_nodes in prop::collection::vec(0u32..=3, 0..=6),
        reserve in 0u32..=2,
        // `[gpus] placement = "fewest-stranded"` rather than the default.
        fewest_stranded in any::<bool>(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let topo = synthetic::parse(&format!("numa:{nodes} core:{cores}")).unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: gpu_nodes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let numa = (n < nodes).then_some(n);
                    let cpus = numa
                        .and_then(|n| topo.numa_nodes.iter().find(|x| x.os == n))
                        .map(|x| x.cpus)
                        .unwrap_or_default();
                    Gpu { id: GpuId(i as u32), vendor: GpuVendor::Nvidia, pci: None, switch: None, numa, cpus, devices: vec![] }
                })
                .collect(),
            shared: vec![],
        };
        let placement = if fewest_stranded { PlacementRule::FewestStranded } else { PlacementRule::KeepGpuCpus };
        let policy = GpuPolicy { reserve_cores_per_gpu: reserve, placement, ..Default::default() };
        let mut live: Vec<Placement> = Vec::new();
        for op in ops {
            match op {
                Op::Place(g, c) => {
                    let used_cpus = live.iter().fold(CpuSet::new(), |a, p| a.union(&p.cpus));
                    let used_gpus = live.iter().fold(GpuSet::new(), |a, p| a.union(&p.gpus));
                    let free_cpus = topo.online().difference(&used_cpus);
                    let free_gpus = gpus.all().difference(&used_gpus);
                    if let Some(p) = place(&alloc, &gpus, &free_cpus, &free_gpus, g, c, &policy) {
                        prop_assert_eq!(p.gpus.len(), g);
                        prop_assert_eq!(p.cpus.len(), c);
                        prop_assert!(!p.gpus.intersects(&used_gpus), "gpu handed out twice: {} of {}", p.gpus, used_gpus);
                        prop_assert!(p.gpus.difference(&gpus.all()).is_empty());
                        prop_assert!(p.cpus.is_subset(&free_cpus));
                        live.push(p);
                    } else {
                        // Waiting is allowed only when the job could not fit at all (too few
                        // free GPUs or CPUs), or for a CPU-only job, cores are reserved.
                        prop_assert!(
                            free_gpus.len() < g || free_cpus.len() < c || (g == 0 && reserve > 0 && !free_gpus.is_empty()),
                            "waits with {} free gpus, {} free cpus for {}g {}c", free_gpus.len(), free_cpus.len(), g, c
                        );
                    }
                }
                Op::Release(i) => {
                    if !live.is_empty() {
                        let k = i.index(live.len());
                        live.remove(k);
                    }
                }
            }
        }
    }
}

/// The fewest distinct switches any `g` of `ids` can have (a GPU of none is one of its own),
/// by trying every subset.
fn min_switches(gpus: &Gpus, ids: &[GpuId], g: usize) -> usize {
    (0u32..1 << ids.len())
        .filter(|m| m.count_ones() as usize == g)
        .map(|m| {
            let chosen: GpuSet = (0..ids.len())
                .filter(|i| m & (1 << i) != 0)
                .map(|i| ids[i])
                .collect();
            switches_of(gpus, &chosen)
        })
        .min()
        .unwrap_or(0)
}

fn switches_of(gpus: &Gpus, set: &GpuSet) -> usize {
    let mut named: Vec<&str> = Vec::new();
    let mut count = 0;
    for id in set.iter() {
        match gpus.get(id).and_then(|g| g.switch.as_deref()) {
            Some(s) if named.contains(&s) => {}
            Some(s) => {
                named.push(s);
                count += 1;
            }
            None => count += 1,
        }
    }
    count
}

proptest! {
    /// With GPUs under random PCIe switches (or none), the same invariants hold, and a GPU job
    /// whose GPUs all lie on one NUMA node has as few distinct switches as any choice of as
    /// many of that node's free GPUs.
    #[test]
    fn one_nodes_gpus_are_under_the_fewest_switches(
        nodes in 1u32..=2,
        // Per GPU: its NUMA node and its switch (3: none).
        layout in prop::collection::vec((0u32..=1, 0u32..=3), 1..=8),
        fewest_stranded in any::<bool>(),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let topo = synthetic::parse(&format!("numa:{nodes} core:4")).unwrap();
        let alloc = Allocator::new(&topo);
        let gpus = Gpus {
            gpus: layout
                .iter()
                .enumerate()
                .map(|(i, &(n, s))| {
                    let n = n % nodes;
                    let cpus = topo.numa_nodes.iter().find(|x| x.os == n).unwrap().cpus;
                    // Switch names are per node, as real upstream ports are.
                    let switch = (s < 3).then(|| format!("{n}-{s}"));
                    Gpu { id: GpuId(i as u32), vendor: GpuVendor::Nvidia, pci: None, switch, numa: Some(n), cpus, devices: vec![] }
                })
                .collect(),
            shared: vec![],
        };
        let placement = if fewest_stranded { PlacementRule::FewestStranded } else { PlacementRule::KeepGpuCpus };
        let policy = GpuPolicy { placement, ..Default::default() };
        let mut live: Vec<Placement> = Vec::new();
        for op in ops {
            match op {
                Op::Place(g, c) => {
                    let used_cpus = live.iter().fold(CpuSet::new(), |a, p| a.union(&p.cpus));
                    let used_gpus = live.iter().fold(GpuSet::new(), |a, p| a.union(&p.gpus));
                    let free_cpus = topo.online().difference(&used_cpus);
                    let free_gpus = gpus.all().difference(&used_gpus);
                    let Some(p) = place(&alloc, &gpus, &free_cpus, &free_gpus, g, c, &policy) else {
                        continue;
                    };
                    prop_assert_eq!(p.gpus.len(), g);
                    prop_assert!(!p.gpus.intersects(&used_gpus));
                    prop_assert!(p.cpus.is_subset(&free_cpus));
                    let homes: Vec<Option<u32>> = p.gpus.iter().map(|id| gpus.get(id).unwrap().numa).collect();
                    if let Some(&home) = homes.first() {
                        if homes.iter().all(|h| *h == home) {
                            let node_free: Vec<GpuId> = free_gpus.iter().filter(|id| gpus.get(*id).unwrap().numa == home).collect();
                            prop_assert_eq!(
                                switches_of(&gpus, &p.gpus),
                                min_switches(&gpus, &node_free, g),
                                "gpus {} of node {:?}'s free {:?}", p.gpus, home, node_free
                            );
                        }
                    }
                    live.push(p);
                }
                Op::Release(i) => {
                    if !live.is_empty() {
                        let k = i.index(live.len());
                        live.remove(k);
                    }
                }
            }
        }
    }
}
