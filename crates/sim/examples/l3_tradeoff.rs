//! Why pjw spans more L3 domains than Slurm block on the 96-PU corpus machine
//! (96em64t-4n4d3ca2co: 4 NUMA nodes of 4 L3s of 6 cores): the L3 span an allocator reaches
//! depends on whether it keeps jobs inside NUMA nodes first.
//!
//! Besides pjw, Slurm block and kubelet, this runs `l3-first`, an experiment that is not a
//! baseline: every job gets the fewest L3 domains that hold it (like block), and among the sets
//! of that many, the one in the fewest NUMA nodes, then the least left over. It prints the means
//! over seeds 1-5 (3000 jobs) at loads 0.9 and 0.6, and per job: `above-bound`, how far the
//! decision's L3 span is above the fewest L3 domains that hold the job within the fewest NUMA
//! nodes (the best a NUMA-first decision can do); `bound-cost`, how far that bound is above the
//! fewest L3 domains that hold the job anywhere (what keeping NUMA first costs that decision).
//!
//! `cargo run --release -p pjw-sim --example l3_tradeoff` (docs/placement.md quotes it)

use pjw_core::{CpuSet, Level, Topology};
use pjw_sim::{self as sim, baselines, trace, Placement};

/// Fewest of `frees` (free CPUs per domain) that add up to `n`, taking the freest first
/// (`usize::MAX` when they cannot).
fn fewest(frees: Vec<usize>, n: usize) -> usize {
    sim::fewest_holding(frees, n).unwrap_or(usize::MAX)
}

/// The machine's L3 domains and NUMA nodes.
struct Domains {
    l3: Vec<CpuSet>,
    numa: Vec<CpuSet>,
    /// NUMA node of each L3 domain.
    numa_of_l3: Vec<usize>,
}

impl Domains {
    fn new(topo: &Topology) -> Domains {
        let sets = |l| -> Vec<CpuSet> { topo.domains(l).into_iter().map(|d| d.1).collect() };
        let (l3, numa) = (sets(Level::L3), sets(Level::Numa));
        let numa_of_l3 = l3
            .iter()
            .map(|d| numa.iter().position(|n| d.is_subset(n)).unwrap())
            .collect();
        Domains {
            l3,
            numa,
            numa_of_l3,
        }
    }

    /// Fewest L3 domains holding `n` of `free` when the job may use only the fewest NUMA nodes.
    fn l3_within_fewest_numa(&self, free: &CpuSet, n: usize) -> usize {
        let per_node: Vec<usize> = self.numa.iter().map(|d| d.intersection_len(free)).collect();
        let k = fewest(per_node, n);
        let m = self.numa.len();
        let mut best = usize::MAX;
        for mask in 0u32..(1 << m) {
            if mask.count_ones() as usize != k {
                continue;
            }
            let nodes = (0..m)
                .filter(|i| mask >> i & 1 == 1)
                .fold(CpuSet::new(), |u, i| u.union(&self.numa[i]));
            let f = nodes.intersection(free);
            if f.len() >= n {
                let frees = self.l3.iter().map(|d| d.intersection_len(&f)).collect();
                best = best.min(fewest(frees, n));
            }
        }
        best
    }
}

/// The `l3-first` experiment (see the module doc).
struct L3First(Domains);

impl Placement for L3First {
    fn name(&self) -> &str {
        "l3-first"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        let d = &self.0;
        let f: Vec<usize> = d.l3.iter().map(|s| s.intersection_len(free)).collect();
        let k = fewest(f.clone(), n);
        let m = f.len();
        let mut best: Option<((u32, usize), u32)> = None;
        for mask in 0u32..(1 << m) {
            if mask.count_ones() as usize != k {
                continue;
            }
            let total: usize = (0..m).filter(|i| mask >> i & 1 == 1).map(|i| f[i]).sum();
            if total < n {
                continue;
            }
            let nodes = (0..m)
                .filter(|i| mask >> i & 1 == 1)
                .fold(0u32, |s, i| s | 1 << d.numa_of_l3[i]);
            let key = (nodes.count_ones(), total - n);
            let better = match best {
                None => true,
                Some((b, _)) => key < b,
            };
            if better {
                best = Some((key, mask));
            }
        }
        let (_, mask) = best?;
        // The freest chosen domains first, the last one partly.
        let mut chosen: Vec<usize> = (0..m).filter(|i| mask >> i & 1 == 1).collect();
        chosen.sort_by_key(|&i| std::cmp::Reverse(f[i]));
        let mut out = CpuSet::new();
        for i in chosen {
            for c in d.l3[i].intersection(free).iter().take(n - out.len()) {
                out.insert(c);
            }
        }
        Some(out)
    }
}

/// A policy with, per decision, its L3 span above the fewest L3s within the fewest NUMA nodes.
struct Excess {
    inner: Box<dyn Placement>,
    doms: Domains,
    decisions: usize,
    excess: usize,
    /// Sum of (fewest L3s within the fewest NUMA nodes - fewest L3s anywhere).
    numa_first: usize,
}

impl Placement for Excess {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        let got = self.inner.place(free, n)?;
        let span = self.doms.l3.iter().filter(|d| d.intersects(&got)).count();
        let bound = self.doms.l3_within_fewest_numa(free, n);
        let anywhere = fewest(
            self.doms
                .l3
                .iter()
                .map(|d| d.intersection_len(free))
                .collect(),
            n,
        );
        self.decisions += 1;
        self.excess += span.saturating_sub(bound);
        self.numa_first += bound - anywhere;
        Some(got)
    }
}

fn main() {
    let xml = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topologies/96em64t-4n4d3ca2co-pci.xml");
    let topo = pjw_topology::load_xml(&xml).expect("the corpus machine");
    for load in [0.9, 0.6] {
        println!("96em64t-4n4d3ca2co-pci.xml, load {load}, means over seeds 1-5 (3000 jobs)");
        println!("policy         numa     l3  frag4%  frag8%  above-bound  bound-cost");
        for name in ["pjw", "slurm-block", "kubelet", "l3-first"] {
            let mut sums = [0.0f64; 6];
            for seed in 1..=5 {
                let jobs = trace::synthetic(seed, 3000, topo.online().len(), load);
                let inner: Box<dyn Placement> = match name {
                    "l3-first" => Box::new(L3First(Domains::new(&topo))),
                    _ => baselines::by_name(name, &topo).unwrap(),
                };
                let mut p = Excess {
                    inner,
                    doms: Domains::new(&topo),
                    decisions: 0,
                    excess: 0,
                    numa_first: 0,
                };
                let r = sim::simulate(&topo, &jobs, &mut p, &[4, 8]).unwrap();
                let v = [
                    r.mean_numa,
                    r.mean_l3,
                    100.0 * r.fragmentation[0].1,
                    100.0 * r.fragmentation[1].1,
                    p.excess as f64 / p.decisions as f64,
                    p.numa_first as f64 / p.decisions as f64,
                ];
                for (s, x) in sums.iter_mut().zip(v) {
                    *s += x / 5.0;
                }
            }
            println!(
                "{name:<12} {:6.3} {:6.3} {:7.1} {:7.1} {:12.3} {:11.3}",
                sums[0], sums[1], sums[2], sums[3], sums[4], sums[5]
            );
        }
        println!();
    }
}
