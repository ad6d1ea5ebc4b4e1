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
