use super::*;

/// One step: (policy's GPUs, CPUs) asked, then what it gives (None: the job waits).
type Step = (usize, usize, Option<(&'static str, &'static str)>);

/// Run `steps` in order on a fresh node described by `d`, each placed job keeping its share.
fn run(name: &str, policy: &str, d: &str, steps: &[Step]) {
    let topo = pjw_core::synthetic::parse(d).unwrap();
    let gpus = pjw_core::synthetic::gpus(d, &topo).unwrap();
    let mut p = by_name(policy, &topo, &gpus).unwrap();
    let (mut fc, mut fg) = (topo.online(), gpus.all());
    for (i, (g, n, want)) in steps.iter().enumerate() {
        let got = p.place(&fc, &fg, *g, *n);
        let got_s = got.map(|(a, b)| (a.to_string(), b.to_string()));
        let want_s = want.map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(
            got_s, want_s,
            "{policy}: {name}: step {i} ({g} gpus, {n} cpus)"
        );
        if let Some((a, b)) = got {
            fg = fg.difference(&a);
            fc = fc.difference(&b);
        }
    }
}

/// 2 sockets = 2 NUMA nodes of 4 CPUs (0-3, 4-7), 2 GPUs each (0-1, 2-3).
const TWO: &str = "package:2 numa:1 core:4 gpu:2";
/// 1 socket of 2 NUMA nodes (0-3, 4-7), 1 GPU each.
const SNC: &str = "package:1 numa:2 core:4 gpu:1";

#[test]
fn policy_tables() {
    let cases: Vec<(&str, &str, &str, Vec<Step>)> = vec![
        (
            "kubelet-single-numa",
            TWO,
            "one node for gpus and cpus, else the job waits",
            vec![
                (1, 2, Some(("0", "0-1"))),
                (0, 3, Some(("", "4-6"))),
                (1, 3, None),
                (1, 1, Some(("1", "2"))),
            ],
        ),
        (
            "kubelet-single-numa",
            TWO,
            "more gpus than a node has: never admitted",
            vec![(4, 2, None), (3, 1, None)],
        ),
        (
            "kubelet-best-effort",
            TWO,
            "no node holds both: the narrowest non-preferred hint, the rest elsewhere",
            vec![
                (1, 2, Some(("0", "0-1"))),
                (0, 3, Some(("", "4-6"))),
                (1, 3, Some(("1", "2-3,7"))),
            ],
        ),
        (
            "kubelet-best-effort",
            TWO,
            "a cpu-only job packs onto the node of the free gpus",
            vec![(2, 2, Some(("0-1", "0-1"))), (0, 2, Some(("", "2-3")))],
        ),
        (
            "kubelet-best-effort",
            TWO,
            "four gpus span both nodes",
            vec![(4, 6, Some(("0-3", "0-5")))],
        ),
        (
            "slurm-enforce",
            TWO,
            "gpus of one socket with its cpus, else the job waits",
            vec![
                (1, 3, Some(("0", "0-2"))),
                (0, 3, Some(("", "4-6"))),
                (2, 2, None),
                (1, 1, Some(("1", "3"))),
                (2, 1, Some(("2-3", "7"))),
            ],
        ),
        (
            "slurm-enforce",
            TWO,
            "a job of more gpus than a socket has takes the first sockets",
            vec![(3, 2, Some(("0-2", "0-1")))],
        ),
        (
            "slurm",
            TWO,
            "without enforce-binding the cpus go anywhere when the socket is short",
            vec![
                (1, 3, Some(("0", "0-2"))),
                (0, 3, Some(("", "4-6"))),
                (2, 2, Some(("1-2", "3,7"))),
            ],
        ),
        (
            "slurm",
            SNC,
            "binding is per socket: cpus of the wrong NUMA node of the right socket",
            vec![(0, 2, Some(("", "0-1"))), (1, 4, Some(("0", "2-5")))],
        ),
        (
            "pjw",
            SNC,
            "the same jobs: the cpu-only job keeps off the free gpus' cores",
            vec![(0, 2, Some(("", "2-3"))), (1, 4, Some(("1", "4-7")))],
        ),
        (
            "pjw-stranded",
            SNC,
            "the same jobs: the cpu-only job takes the higher of equal nodes, the gpu job the other",
            vec![(0, 2, Some(("", "4-5"))), (1, 4, Some(("0", "0-3")))],
        ),
        (
            "kubelet-best-effort",
            SNC,
            "the same jobs: the cpu-only job takes node 0, the gpu job node 1",
            vec![(0, 2, Some(("", "0-1"))), (1, 4, Some(("1", "4-7")))],
        ),
    ];
    for (policy, d, name, steps) in cases {
        run(name, policy, d, &steps);
    }
}

#[test]
fn names_resolve() {
    let topo = pjw_core::synthetic::parse(TWO).unwrap();
    let gpus = pjw_core::synthetic::gpus(TWO, &topo).unwrap();
    for n in ALL {
        assert_eq!(by_name(n, &topo, &gpus).unwrap().name(), n);
    }
    assert!(by_name("nope", &topo, &gpus).is_none());
}
