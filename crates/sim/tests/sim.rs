//! Tables for the simulator's baselines, the SWF parser, and properties of every policy.

use pjw_core::{synthetic, CpuSet, Topology};
use pjw_sim::{self as sim, baselines, trace, Placement};
use proptest::prelude::*;

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

fn topo(s: &str) -> Topology {
    synthetic::parse(s).unwrap()
}

/// (description, policy, topology, used CPUs, request, expected set or None)
#[allow(clippy::type_complexity)]
const TABLE: &[(&str, &str, &str, &str, usize, Option<&str>)] = &[
    (
        "slurm cyclic spreads a 4-core job 2+2 over an idle 2-socket node",
        "slurm-cyclic",
        "package:2 core:4 pu:1",
        "",
        4,
        Some("0-1,4-5"),
    ),
    (
        "slurm cyclic takes a core's free threads before the next socket",
        "slurm-cyclic",
        "package:2 core:2 pu:2",
        "",
        3,
        Some("0-1,4"),
    ),
    (
        "slurm cyclic skips used cores",
        "slurm-cyclic",
        "package:2 core:4 pu:1",
        "0,4",
        2,
        Some("1,5"),
    ),
    (
        "slurm block picks the smallest socket that covers the need",
        "slurm-block",
        "package:2 core:4 pu:1",
        "0",
        3,
        Some("1-3"),
    ),
    (
        "slurm block takes the freest socket first when none covers",
        "slurm-block",
        "package:2 core:4 pu:1",
        "0",
        6,
        Some("1-2,4-7"),
    ),
    (
        "kubelet packed takes a whole NUMA node for a node-sized request",
        "kubelet",
        "package:2 numa:1 core:4 pu:2",
        "",
        8,
        Some("0-7"),
    ),
    (
        "kubelet's NUMA hint moves a node-sized request to the free node",
        "kubelet",
        "package:2 numa:1 core:4 pu:2",
        "0",
        8,
        Some("8-15"),
    ),
    (
        "kubelet packed takes a whole core in the fullest node",
        "kubelet",
        "package:2 numa:1 core:4 pu:2",
        "0,8,10",
        2,
        Some("2-3"),
    ),
    (
        "kubelet packed fills a half-used core with a single cpu",
        "kubelet",
        "package:2 numa:1 core:4 pu:2",
        "0",
        1,
        Some("1"),
    ),
    (
        "kubelet takes whole nodes then whole cores for more than a node",
        "kubelet",
        "package:2 numa:1 core:4 pu:2",
        "",
        10,
        Some("0-9"),
    ),
    (
        "range picks the smallest free contiguous range that fits",
        "range",
        "core:16",
        "2-3,8-9,13-15",
        3,
        Some("10-12"),
    ),
    (
        "range takes the largest ranges whole and recurses",
        "range",
        "core:16",
        "2-3,8-9,13-15",
        8,
        Some("0,4-7,10-12"),
    ),
    (
        "pbs puts a small job in the first vnode with room",
        "pbs",
        "package:2 numa:1 core:4 pu:1",
        "0",
        4,
        Some("4-7"),
    ),
    (
        "pbs shares a vnode between small jobs",
        "pbs",
        "package:2 numa:1 core:4 pu:1",
        "0",
        3,
        Some("1-3"),
    ),
    (
        "pbs gives a large job whole vnodes",
        "pbs",
        "package:2 numa:1 core:4 pu:1",
        "",
        5,
        Some("0-4"),
    ),
    (
        "pbs refuses a large job without enough whole vnodes",
        "pbs",
        "package:2 numa:1 core:4 pu:1",
        "0",
        5,
        None,
    ),
    (
        "pjw keeps a node-sized job in one NUMA node",
        "pjw",
        "package:2 numa:1 core:4 pu:2",
        "0",
        8,
        Some("8-15"),
    ),
];

#[test]
fn baselines_table() {
    for (what, policy, desc, used, n, want) in TABLE {
        let t = topo(desc);
        let free = t.online().difference(&set(used));
        let mut p = baselines::by_name(policy, &t).unwrap();
        let got = p.place(&free, *n);
        assert_eq!(got, want.map(set), "{what}");
    }
}

#[test]
fn unknown_policy_is_none() {
    assert!(baselines::by_name("fifo", &topo("core:2")).is_none());
}

#[test]
fn swf_parses_fields_comments_and_clamps() {
    let text = "\
; Version: 2.2
; MaxProcs: 128
1   100 10  3600 4  -1 -1  4  -1 -1 1 1 1 -1 1 -1 -1 -1
2   160 0   60   -1 -1 -1  2  -1 -1 1 1 1 -1 1 -1 -1 -1
3   130 0   10   64 -1 -1  64 -1 -1 1 1 1 -1 1 -1 -1 -1 ; too big for the node
4   170 0   -1   8  -1 -1  8  -1 -1 0 1 1 -1 1 -1 -1 -1

5   200 0   0    1  -1 -1  1  -1 -1 1 1 1 -1 1 -1 -1 -1
";
    let jobs = trace::parse_swf(text, 16).unwrap();
    let got: Vec<(u64, u64, usize)> = jobs.iter().map(|j| (j.submit, j.run, j.cpus)).collect();
    assert_eq!(
        got,
        vec![
            (0, 3_600_000, 4),
            (30_000, 10_000, 16),
            (60_000, 60_000, 2),
            (100_000, 1, 1),
        ]
    );
    let err = trace::parse_swf("1 2 3\n", 16).unwrap_err();
    assert_eq!(err.to_string(), "swf line 1: expected 18 fields, found 3");
    let err = trace::parse_swf("1 x 0 1 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1", 16).unwrap_err();
    assert!(err.to_string().contains("field 2"), "{err}");
}

#[test]
fn simulation_counts_delays_and_spans() {
    // Two 4-CPU NUMA nodes; PBS refuses the 5-CPU job while a 1-CPU job holds node 0.
    let t = topo("package:2 numa:1 core:4 pu:1");
    let jobs = [
        sim::Job {
            submit: 0,
            run: 10,
            cpus: 1,
        },
        sim::Job {
            submit: 1,
            run: 10,
            cpus: 5,
        },
    ];
    let mut pbs = baselines::by_name("pbs", &t).unwrap();
    let r = sim::simulate(&t, &jobs, pbs.as_mut(), &[4]).unwrap();
    assert_eq!((r.placed, r.delayed, r.unplaceable), (2, 1, 0));
    assert_eq!(r.mean_numa, 1.5);
    assert!((r.mean_wait_s - 0.0045).abs() < 1e-9, "{}", r.mean_wait_s);
    let mut pjw = baselines::by_name("pjw", &t).unwrap();
    let r = sim::simulate(&t, &jobs, pjw.as_mut(), &[4]).unwrap();
    assert_eq!((r.placed, r.delayed), (2, 0));
    assert_eq!(r.minimal, 1.0);
}

/// A policy that double-allocates, to show the simulator catches it.
struct Greedy;
impl Placement for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn place(&mut self, _free: &CpuSet, n: usize) -> Option<CpuSet> {
        CpuSet::first_n(n).ok()
    }
}

#[test]
fn simulator_rejects_double_allocation() {
    let t = topo("core:4");
    let jobs = trace::synthetic(1, 20, 4, 2.0);
    let err = sim::simulate(&t, &jobs, &mut Greedy, &[4]).unwrap_err();
    assert!(
        err.to_string().starts_with("policy greedy returned"),
        "{err}"
    );
}

const TOPOS: [&str; 4] = [
    "package:2 numa:1 core:4 pu:2",
    "package:2 numa:2 l3:2 core:3 pu:2",
    "package:4 core:6 pu:1",
    "numa:3 l3:2 core:2 pu:2",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_policy_places_exactly_n_free_cpus(
        ti in 0..TOPOS.len(),
        used_bits in any::<u64>(),
        n in 1usize..40,
    ) {
        let t = topo(TOPOS[ti]);
        let online = t.online();
        let used: CpuSet = online.iter().filter(|c| used_bits & (1 << (c % 64)) != 0).collect();
        let free = online.difference(&used);
        let n = n.min(free.len().max(1));
        for name in baselines::ALL {
            let mut p = baselines::by_name(name, &t).unwrap();
            match p.place(&free, n) {
                Some(s) => {
                    prop_assert_eq!(s.len(), n, "{} on {}", name, TOPOS[ti]);
                    prop_assert!(s.is_subset(&free), "{} gave {} outside {}", name, s, free);
                }
                None => prop_assert!(
                    name == "pbs" || free.len() < n,
                    "{} refused {} of {}", name, n, free
                ),
            }
        }
    }

    #[test]
    fn simulations_never_double_allocate(ti in 0..TOPOS.len(), seed in any::<u64>()) {
        let t = topo(TOPOS[ti]);
        let jobs = trace::synthetic(seed, 150, t.online().len(), 1.2);
        for name in baselines::ALL {
            let mut p = baselines::by_name(name, &t).unwrap();
            let r = sim::simulate(&t, &jobs, p.as_mut(), &[4, 8]).unwrap();
            prop_assert_eq!(r.placed + r.unplaceable, jobs.len());
            prop_assert_eq!(r.unplaceable, 0);
        }
    }
}
