//! Property tests of GPU placement: random machines with GPUs on random NUMA nodes (some of
//! unknown locality), random sequences of GPU and CPU-only jobs and releases. No GPU and no CPU
//! is ever in two live placements, and every placement has exactly what was asked, under either
//! placement rule.

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
