//! Property tests of the CPU allocator: random synthetic machines (some PUs offline, some not
//! allowed) and random sequences of allocations and releases.

use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::{synthetic, CpuSet, Level, Topology};
use proptest::prelude::*;
use proptest::sample::Index;

/// A synthetic description: 1-3 packages, optional NUMA and L3 levels, 1-6 cores of 1-4 PUs.
fn machine() -> impl Strategy<Value = String> {
    (
        1u32..=3,
        prop::option::of(1u32..=2),
        prop::option::of(1u32..=3),
        1u32..=6,
        1u32..=4,
    )
        .prop_map(|(p, numa, l3, c, u)| {
            let mut s = format!("package:{p} ");
            if let Some(n) = numa {
                s += &format!("numa:{n} ");
            }
            if let Some(l) = l3 {
                s += &format!("l3:{l} ");
            }
            s + &format!("core:{c} pu:{u}")
        })
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(usize),
    Release(Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..=20).prop_map(Op::Allocate),
        1 => any::<Index>().prop_map(Op::Release),
    ]
}

/// `machine` with the PUs in `offline` taken offline.
fn topology(machine: &str, offline: &[u32]) -> Topology {
    let mut topo = synthetic::parse(machine).unwrap();
    for pu in &mut topo.pus {
        if offline.contains(&pu.os) {
            pu.online = false;
        }
    }
    topo.allowed = topo.online();
    topo
}

/// Fewest domains of `level` whose free CPUs add up to `n`.
fn fewest(topo: &Topology, level: Level, free: &CpuSet, n: usize) -> usize {
    let mut frees: Vec<usize> = topo
        .domains(level)
        .iter()
        .map(|d| d.1.intersection_len(free))
        .collect();
    frees.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0;
    for (k, f) in frees.iter().enumerate() {
        sum += f;
        if sum >= n {
            return k + 1;
        }
    }
    usize::MAX
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn allocations_are_exact_disjoint_contained_and_deterministic(
        machine in machine(),
        offline in prop::collection::vec(0u32..150, 0..4),
        excluded in prop::collection::vec(0u32..150, 0..4),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let topo = topology(&machine, &offline);
        let alloc = Allocator::new(&topo);
        let again = Allocator::new(&topo);
        let mut scratch = Scratch::new();
        let online = topo.online();
        let allowed = online.difference(&excluded.iter().copied().collect());
        let first_level = alloc.tree().levels.get(1).copied();
        let mut live: Vec<CpuSet> = Vec::new();
        for op in ops {
            match op {
                Op::Release(i) => {
                    if !live.is_empty() {
                        live.remove(i.index(live.len()));
                    }
                }
                Op::Allocate(n) => {
                    let used = live.iter().fold(CpuSet::new(), |u, s| u.union(s));
                    let free = allowed.difference(&used);
                    let got = alloc.allocate_with(&mut scratch, &free, n);
                    // Deterministic: same input, same output, also from a fresh allocator.
                    prop_assert_eq!(got, alloc.allocate(&free, n));
                    prop_assert_eq!(got, again.allocate(&free, n));
                    let Some(got) = got else {
                        prop_assert!(n > free.len(), "{machine}: refused {n} of free {free}");
                        continue;
                    };
                    prop_assert_eq!(got.len(), n);
                    prop_assert!(got.is_subset(&free), "{got} not in free {free}");
                    prop_assert!(got.is_subset(&allowed));
                    for l in &live {
                        prop_assert!(!got.intersects(l), "{got} overlaps live {l}");
                    }
                    // Contained in one domain whenever one domain has room.
                    for level in [Level::Core, Level::L3, Level::Numa, Level::Package] {
                        let fits = topo
                            .domains(level)
                            .iter()
                            .any(|d| d.1.intersection_len(&free) >= n);
                        if fits {
                            prop_assert_eq!(
                                topo.domains_spanned(level, &got),
                                1,
                                "{} n={} free {} got {} spans several {}",
                                machine, n, free, got, level.name()
                            );
                        }
                    }
                    // The fewest domains of the outermost level.
                    if let Some(level) = first_level.filter(|l| *l != Level::Pu) {
                        prop_assert_eq!(
                            topo.domains_spanned(level, &got),
                            fewest(&topo, level, &free, n),
                            "{} n={} free {} got {}", machine, n, free, got
                        );
                    }
                    live.push(got);
                }
            }
        }
    }

    #[test]
    fn whole_cores_when_a_domain_has_them(
        smt_machine in (1u32..=3, prop::option::of(1u32..=3), 1u32..=6)
            .prop_map(|(p, l3, c)| match l3 {
                Some(l) => format!("package:{p} l3:{l} core:{c} pu:2"),
                None => format!("package:{p} core:{c} pu:2"),
            }),
        used in prop::collection::vec(0u32..150, 0..40),
        half in 1usize..=6,
    ) {
        // On a 2-thread machine, when one domain just above the cores has enough whole free
        // cores, an even request gets only whole cores.
        let n = 2 * half;
        let topo = synthetic::parse(&smt_machine).unwrap();
        let alloc = Allocator::new(&topo);
        let free = topo.online().difference(&used.iter().copied().collect());
        let whole = |cpus: &CpuSet| {
            topo.domains(Level::Core)
                .iter()
                .filter(|c| c.1.is_subset(cpus))
                .count()
        };
        let levels = &alloc.tree().levels;
        // A one-core machine has no core level (it is the machine).
        let core = levels.iter().position(|l| *l == Level::Core);
        prop_assume!(core.is_some());
        let core = core.unwrap_or(1);
        let roomy = match levels[core - 1] {
            Level::Machine => whole(&free) >= half,
            above => topo
                .domains(above)
                .iter()
                .any(|d| whole(&d.1.intersection(&free)) >= half),
        };
        if roomy {
            let got = alloc.allocate(&free, n).unwrap();
            prop_assert_eq!(whole(&got), half, "{} free {} got {}", smt_machine, free, got);
        }
    }
}
