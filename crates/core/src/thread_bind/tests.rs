use super::*;
use crate::synthetic;

const SEC: u64 = 1_000_000_000;

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

/// Threads `busy` ran the whole second, `idle` ran 1 ms.
fn samples(busy: &[u32], idle: &[u32]) -> Vec<ThreadSample> {
    let b = busy.iter().map(|&t| ThreadSample {
        tid: Tid(t),
        run_ns: SEC,
    });
    let i = idle.iter().map(|&t| ThreadSample {
        tid: Tid(t),
        run_ns: SEC / 1000,
    });
    b.chain(i).collect()
}

fn pins(p: &[(u32, u32)]) -> BTreeMap<Tid, u32> {
    p.iter().map(|&(t, c)| (Tid(t), c)).collect()
}

fn per_cpu(p: &BindPlan) -> BTreeMap<u32, usize> {
    let mut c = BTreeMap::new();
    for cpu in p.pins.values() {
        *c.entry(*cpu).or_insert(0) += 1;
    }
    c
}

#[test]
fn table() {
    struct Case {
        desc: &'static str,
        topo: &'static str,
        job: &'static str,
        previous: &'static [(u32, u32)],
        /// Threads the previous pass kept pinned through their first idle pass.
        grace: &'static [u32],
        busy: &'static [u32],
        idle: &'static [u32],
        want: &'static [(u32, u32)],
        unpin: &'static [u32],
        /// Threads kept pinned through this, their first, idle pass.
        kept: &'static [u32],
    }
    let cases = [
        Case {
            desc: "2 cpus, 2 busy + 4 sleepers: busy on distinct cpus, sleepers free",
            topo: "core:2",
            job: "0-1",
            previous: &[],
            grace: &[],
            busy: &[10, 11],
            idle: &[12, 13, 14, 15],
            want: &[(10, 0), (11, 1)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "busy 10 sleeps, sleeper 12 wakes: 10 keeps cpu 0 one pass, 12 shares it",
            topo: "core:2",
            job: "0-1",
            previous: &[(10, 0), (11, 1)],
            grace: &[],
            busy: &[11, 12],
            idle: &[10, 13, 14, 15],
            want: &[(10, 0), (11, 1), (12, 0)],
            unpin: &[],
            kept: &[10],
        },
        Case {
            desc: "10 idle a second pass: unpinned; 11 keeps cpu 1, 12 keeps cpu 0",
            topo: "core:2",
            job: "0-1",
            previous: &[(10, 0), (11, 1), (12, 0)],
            grace: &[10],
            busy: &[11, 12],
            idle: &[10, 13, 14, 15],
            want: &[(11, 1), (12, 0)],
            unpin: &[10],
            kept: &[],
        },
        Case {
            desc: "one cpu per node, 1 dips for a pass: nobody moves (no swap of nodes)",
            topo: "numa:2 core:1",
            job: "0-1",
            previous: &[(1, 0), (2, 1)],
            grace: &[],
            busy: &[2],
            idle: &[1],
            want: &[(1, 0), (2, 1)],
            unpin: &[],
            kept: &[1],
        },
        Case {
            desc: "one cpu per node, 1 idle a second pass: unpinned; 2 stays on node 1, by its pages",
            topo: "numa:2 core:1",
            job: "0-1",
            previous: &[(1, 0), (2, 1)],
            grace: &[1],
            busy: &[2],
            idle: &[1],
            want: &[(2, 1)],
            unpin: &[1],
            kept: &[],
        },
        Case {
            desc: "2 busy on node 1 alone stay; 3 on 2 nodes where 1 holds them gather on node 0",
            topo: "numa:2 core:4",
            job: "0-7",
            previous: &[(1, 4), (2, 5)],
            grace: &[],
            busy: &[1, 2],
            idle: &[],
            want: &[(1, 4), (2, 5)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "3 busy over 2 nodes where one node holds them: gathered onto node 0",
            topo: "numa:2 core:4",
            job: "0-7",
            previous: &[(1, 0), (2, 1), (3, 4)],
            grace: &[],
            busy: &[1, 2, 3],
            idle: &[],
            want: &[(1, 0), (2, 1), (3, 2)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "a second busy thread with no room on the first's node: both gathered on node 0 (found by the proptest)",
            topo: "numa:2 core:2",
            job: "0,1,3",
            previous: &[(1, 3)],
            grace: &[],
            busy: &[1, 2],
            idle: &[],
            want: &[(1, 0), (2, 1)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "a thread busy again leaves grace",
            topo: "core:2",
            job: "0-1",
            previous: &[(1, 0), (2, 1)],
            grace: &[1],
            busy: &[1, 2],
            idle: &[],
            want: &[(1, 0), (2, 1)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "stable pins are kept even when not in fill order",
            topo: "core:2",
            job: "0-1",
            previous: &[(10, 1), (11, 0)],
            grace: &[],
            busy: &[10, 11],
            idle: &[],
            want: &[(10, 1), (11, 0)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "16 cpus, 2 nodes, smt 2, 4 busy: 4 cores of node 0, no siblings",
            topo: "numa:2 core:4 pu:2",
            job: "0-15",
            previous: &[],
            grace: &[],
            busy: &[1, 2, 3, 4],
            idle: &[5],
            want: &[(1, 0), (2, 2), (3, 4), (4, 6)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "whole cores of node 1 before any sibling",
            topo: "numa:2 core:4 pu:2",
            job: "0-15",
            previous: &[],
            grace: &[],
            busy: &[1, 2, 3, 4, 5, 6, 7, 8, 9],
            idle: &[],
            want: &[
                (1, 0),
                (2, 2),
                (3, 4),
                (4, 6),
                (5, 8),
                (6, 10),
                (7, 12),
                (8, 14),
                (9, 1),
            ],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc:
                "a thread on a sibling or the other node moves to a free whole core of node 0",
            topo: "numa:2 core:4 pu:2",
            job: "0-15",
            previous: &[(1, 2), (2, 3), (3, 9)],
            grace: &[],
            busy: &[1, 2, 3],
            idle: &[],
            want: &[(1, 2), (2, 0), (3, 4)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "pins outside the job's set move inside it",
            topo: "core:4",
            job: "2-3",
            previous: &[(1, 0), (2, 3)],
            grace: &[],
            busy: &[1, 2],
            idle: &[],
            want: &[(1, 2), (2, 3)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "5 busy on 4 cpus: round robin, one cpu gets 2",
            topo: "core:4",
            job: "0-3",
            previous: &[],
            grace: &[],
            busy: &[1, 2, 3, 4, 5],
            idle: &[],
            want: &[(1, 0), (2, 1), (3, 2), (4, 3), (5, 0)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "5 busy on 4 cpus, all stacked on cpu 3 before: spread out",
            topo: "core:4",
            job: "0-3",
            previous: &[(1, 3), (2, 3), (3, 3), (4, 3), (5, 3)],
            grace: &[],
            busy: &[1, 2, 3, 4, 5],
            idle: &[],
            want: &[(1, 3), (2, 3), (3, 0), (4, 1), (5, 2)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "5 busy on 4 cpus, two stacks before: only one cpu keeps two",
            topo: "core:4",
            job: "0-3",
            previous: &[(1, 3), (2, 3), (3, 2), (4, 2), (5, 0)],
            grace: &[],
            busy: &[1, 2, 3, 4, 5],
            idle: &[],
            want: &[(1, 3), (2, 3), (3, 2), (4, 1), (5, 0)],
            unpin: &[],
            kept: &[],
        },
        Case {
            desc: "gone threads are dropped, not unpinned",
            topo: "core:2",
            job: "0-1",
            previous: &[(7, 0), (8, 1)],
            grace: &[],
            busy: &[8],
            idle: &[],
            want: &[(8, 1)],
            unpin: &[],
            kept: &[],
        },
    ];
    for c in cases {
        let topo = synthetic::parse(c.topo).unwrap();
        let p = plan(
            &topo,
            &set(c.job),
            &pins(c.previous),
            &c.grace.iter().map(|&t| Tid(t)).collect(),
            &samples(c.busy, c.idle),
            SEC,
            50,
        );
        assert_eq!(p.pins, pins(c.want), "{}", c.desc);
        let unpin: Vec<Tid> = c.unpin.iter().map(|&t| Tid(t)).collect();
        assert_eq!(p.unpin, unpin, "{}", c.desc);
        let kept: BTreeSet<Tid> = c.kept.iter().map(|&t| Tid(t)).collect();
        assert_eq!(p.grace, kept, "{}", c.desc);
    }
}

#[test]
fn bind_mode_names_round_trip() {
    for m in BindMode::ALL {
        assert_eq!(BindMode::parse(m.name()), Some(m));
    }
    assert_eq!(BindMode::parse("threads"), Some(BindMode::Threads));
    for bad in ["", "Threads", "thread", "core", " none"] {
        assert_eq!(BindMode::parse(bad), None, "{bad:?}");
    }
    assert_eq!(BindMode::default(), BindMode::None);
}

#[test]
fn busy_share_threshold() {
    let topo = synthetic::parse("core:4").unwrap();
    let s = |t, run_ns| ThreadSample {
        tid: Tid(t),
        run_ns,
    };
    let samples = [s(1, SEC / 2), s(2, SEC / 2 - 1), s(3, SEC)];
    let none = BTreeMap::new();
    let g = BTreeSet::new();
    let p = plan(&topo, &topo.online(), &none, &g, &samples, SEC, 50);
    assert_eq!(p.pins, pins(&[(1, 0), (3, 1)]));
    let p = plan(&topo, &topo.online(), &none, &g, &samples, SEC, 90);
    assert_eq!(p.pins, pins(&[(3, 0)]));
    // An empty interval makes nobody busy.
    let p = plan(&topo, &topo.online(), &none, &g, &samples, 0, 50);
    assert!(p.pins.is_empty());
}

#[test]
fn counts_differ_by_at_most_one() {
    let topo = synthetic::parse("core:4").unwrap();
    let busy: Vec<u32> = (1..=5).collect();
    let p = plan(
        &topo,
        &topo.online(),
        &BTreeMap::new(),
        &BTreeSet::new(),
        &samples(&busy, &[]),
        SEC,
        50,
    );
    let c = per_cpu(&p);
    assert_eq!(c.len(), 4);
    let (lo, hi) = (c.values().min().unwrap(), c.values().max().unwrap());
    assert!(hi - lo <= 1, "{c:?}");
}

#[test]
fn slots_and_pin_sets_per_mode() {
    let topo = synthetic::parse("numa:2 core:2 pu:2").unwrap();
    let job = set("0-5");
    assert_eq!(slots(&topo, &job, BindMode::Threads), job);
    assert_eq!(slots(&topo, &job, BindMode::Cores), set("0,2,4"));
    assert!(slots(&topo, &job, BindMode::None).is_empty());
    // A job holding only the second PU of a core: that PU is the core's slot.
    assert_eq!(slots(&topo, &set("1,2-3"), BindMode::Cores), set("1,2"));
    assert_eq!(pin_set(&topo, &job, BindMode::Threads, 3), set("3"));
    assert_eq!(pin_set(&topo, &job, BindMode::Cores, 2), set("2-3"));
    // Siblings outside the job are left out; a cpu outside the job pins to nothing.
    assert_eq!(pin_set(&topo, &set("0-4"), BindMode::Cores, 4), set("4"));
    assert!(pin_set(&topo, &job, BindMode::Threads, 7).is_empty());
    assert!(pin_set(&topo, &job, BindMode::None, 0).is_empty());
    // Two busy threads in cores mode: one core each, siblings included.
    let p = plan(
        &topo,
        &slots(&topo, &job, BindMode::Cores),
        &BTreeMap::new(),
        &BTreeSet::new(),
        &samples(&[1, 2], &[]),
        SEC,
        50,
    );
    let got: Vec<CpuSet> = p
        .pins
        .values()
        .map(|&c| pin_set(&topo, &job, BindMode::Cores, c))
        .collect();
    assert_eq!(got, vec![set("0-1"), set("2-3")]);
}

#[test]
fn a_new_thread_goes_to_the_least_pinned_slot_in_fill_order() {
    let topo = synthetic::parse("numa:2 core:2 pu:2").unwrap();
    let job = set("0-7");
    // (description, pins, expected slot)
    type Case = (&'static str, &'static [(u32, u32)], Option<u32>);
    let cases: &[Case] = &[
        ("no pins: the first whole core of node 0", &[], Some(0)),
        ("cpu 0 taken: the next whole core", &[(1, 0)], Some(2)),
        (
            "node 0's cores taken: node 1's first core",
            &[(1, 0), (2, 2)],
            Some(4),
        ),
        (
            "every core taken: the first sibling",
            &[(1, 0), (2, 2), (3, 4), (4, 6)],
            Some(1),
        ),
        (
            "all eight taken once, cpu 0 twice: cpu 2",
            &[
                (1, 0),
                (2, 2),
                (3, 4),
                (4, 6),
                (5, 1),
                (6, 3),
                (7, 5),
                (8, 7),
                (9, 0),
            ],
            Some(2),
        ),
    ];
    for (desc, p, want) in cases {
        assert_eq!(place_one(&topo, &job, &pins(p)), *want, "{desc}");
    }
    assert_eq!(place_one(&topo, &CpuSet::new(), &BTreeMap::new()), None);
}
