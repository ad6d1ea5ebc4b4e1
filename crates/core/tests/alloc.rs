//! Table tests of the CPU allocator on canned machines.
//!
//! Each row: what it checks, the machine (a synthetic description), CPUs already in use, the
//! request, and what must come out (an exact set or `None`).

use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::{synthetic, CpuSet, Level, Topology};

/// A laptop-sized machine: 2 cores without SMT.
const TWO_CPU: &str = "core:2 pu:1";
/// Dual socket, 6 cores with 2 threads each (24 PUs).
const DUAL: &str = "package:2 core:6 pu:2";
/// Dual socket, 2 NUMA nodes per package, 2 L3 per node, 4 cores of 2 threads per L3 (64 PUs).
const DEEP: &str = "package:2 numa:2 l3:2 core:4 pu:2";
/// Quad socket, 4 L3 per package, 6 cores per L3, no SMT (96 PUs).
const QUAD: &str = "package:4 numa:1 l3:4 core:6 pu:1";
/// The corpus machine 192em64t-24n8c2t: 24 NUMA nodes of 8 cores with 2 threads (384 PUs).
const BIG: &str = "package:24 numa:1 l3:1 core:8 pu:2";
/// One L3 of five 2-thread cores.
const ONE_L3: &str = "core:5 pu:2";

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

struct Case {
    what: &'static str,
    machine: &'static str,
    used: &'static str,
    n: usize,
    want: Option<&'static str>,
}

#[rustfmt::skip]
const CASES: &[Case] = &[
    // Edge cases.
    Case { what: "zero cpus is refused", machine: DUAL, used: "", n: 0, want: None },
    Case { what: "more than free is refused", machine: TWO_CPU, used: "", n: 3, want: None },
    Case { what: "more than free is refused when partly used", machine: TWO_CPU, used: "1", n: 2, want: None },
    Case { what: "nothing free", machine: TWO_CPU, used: "0-1", n: 1, want: None },
    Case { what: "two-cpu machine, one cpu", machine: TWO_CPU, used: "", n: 1, want: Some("0") },
    Case { what: "two-cpu machine, the other cpu", machine: TWO_CPU, used: "0", n: 1, want: Some("1") },
    Case { what: "two-cpu machine, everything", machine: TWO_CPU, used: "", n: 2, want: Some("0-1") },
    Case { what: "whole machine", machine: DEEP, used: "", n: 64, want: Some("0-63") },
    // Whole cores.
    Case { what: "even request on smt gets whole cores", machine: DUAL, used: "", n: 2, want: Some("0-1") },
    Case { what: "four cpus: two whole cores", machine: DUAL, used: "", n: 4, want: Some("0-3") },
    Case { what: "whole core elsewhere beats packing onto half cores", machine: DUAL, used: "0,2,4,6,8,10", n: 2, want: Some("12-13") },
    Case { what: "whole core in the fuller package", machine: DUAL, used: "0-9", n: 2, want: Some("10-11") },
    Case { what: "whole cores beat best fit of half cores", machine: DEEP, used: "0,2,4,6", n: 4, want: Some("8-11") },
    Case { what: "l3 {2,1,1,2,2}: four cpus are two whole cores", machine: ONE_L3, used: "2,4", n: 4, want: Some("0-1,6-7") },
    // Packing odd requests.
    Case { what: "single cpu packs onto a half-used core", machine: DUAL, used: "0", n: 1, want: Some("1") },
    Case { what: "odd request: half-used core plus a whole core", machine: DUAL, used: "0", n: 3, want: Some("1-3") },
    Case { what: "l3 {2,1,1,2,2}: three cpus are a whole core and a half core", machine: ONE_L3, used: "2,4", n: 3, want: Some("0-1,3") },
    Case { what: "l3 {2,1,1,2,2}: one cpu packs", machine: ONE_L3, used: "2,4", n: 1, want: Some("3") },
    Case { what: "single cpu goes to the fullest l3", machine: QUAD, used: "0-2,6-10", n: 1, want: Some("11") },
    // Containment.
    Case { what: "fits one l3", machine: DEEP, used: "", n: 8, want: Some("0-7") },
    Case { what: "fits one numa node", machine: DEEP, used: "", n: 16, want: Some("0-15") },
    Case { what: "fits one package", machine: DEEP, used: "", n: 32, want: Some("0-31") },
    Case { what: "fits one l3 of the fuller numa node", machine: DEEP, used: "0-5", n: 4, want: Some("8-11") },
    Case { what: "remaining core of a used l3", machine: DEEP, used: "0-5", n: 2, want: Some("6-7") },
    Case { what: "exact fit of a numa node", machine: DEEP, used: "0-5", n: 10, want: Some("6-15") },
    Case { what: "one package though no numa node holds it: the whole free node, the rest best fit", machine: DEEP, used: "0-7,32-39", n: 20, want: Some("8-11,16-31") },
    Case { what: "free package holds the job", machine: DUAL, used: "0-3", n: 10, want: Some("12-21") },
    Case { what: "big machine: one l3", machine: BIG, used: "", n: 16, want: Some("0-15") },
    Case { what: "big machine: exact fit of a partly used l3", machine: BIG, used: "0-7,16-19", n: 8, want: Some("8-15") },
    // Spanning.
    Case { what: "one package full, one cpu of the next", machine: DEEP, used: "", n: 33, want: Some("0-32") },
    Case { what: "spans two packages: the larger one whole", machine: DUAL, used: "0-3", n: 14, want: Some("4-5,12-23") },
    Case { what: "spans the free numa node of each package", machine: DEEP, used: "0-15,32-47", n: 20, want: Some("16-31,48-51") },
    Case { what: "free {8,6,3}, nine: two packages either way; the 6 and the 3 leave nothing over and keep the 8 whole (8 + 1 of the 3 would leave 2 stranded)", machine: QUAD, used: "0-15,24-41,48-68,72-95", n: 9, want: Some("42-47,69-71") },
    Case { what: "free {8,6,4}, nine: the 6 whole and 3 of the 4 leave 1 over (the 8 and 1 of the 4 would leave 3) and keep the 8 whole", machine: QUAD, used: "0-15,24-41,48-67,72-95", n: 9, want: Some("42-47,68-70") },
    Case { what: "free {8,6,1}, nine: only the 8 with 1 of the 6 or the 1 holds it in two; the 1 whole leaves nothing over", machine: QUAD, used: "0-15,24-41,48-70,72-95", n: 9, want: Some("16-23,71") },
    Case { what: "spans the fewest packages", machine: QUAD, used: "", n: 30, want: Some("0-29") },
    Case { what: "big machine: two l3s, one whole", machine: BIG, used: "", n: 17, want: Some("0-16") },
];

#[test]
fn table() {
    let mut failures = Vec::new();
    for c in CASES {
        let topo = synthetic::parse(c.machine).unwrap();
        let alloc = Allocator::new(&topo).with_spread(false);
        let used = set(c.used);
        let free = topo.online().difference(&used);
        let got = alloc.allocate(&free, c.n);
        let want = c.want.map(set);
        if got != want {
            failures.push(format!(
                "{}: {} used {:?} n={}: got {:?}, want {:?}",
                c.what, c.machine, c.used, c.n, got, want
            ));
        }
        if let Some(g) = got {
            assert_eq!(g.len(), c.n, "{}", c.what);
            assert!(g.is_subset(&free), "{}", c.what);
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn cpus_outside_free_are_never_used() {
    let topo = synthetic::parse("package:2 core:4 pu:2").unwrap();
    let alloc = Allocator::new(&topo);
    let free = set("1,3,5,7,9");
    assert_eq!(alloc.allocate(&free, 4), Some(set("1,3,5,7")));
    assert_eq!(alloc.allocate(&free, 5), Some(free));
    assert_eq!(alloc.allocate(&free, 6), None);
    // CPUs that are not PUs of the machine do not count.
    let free = set("0-1,500-600");
    assert_eq!(alloc.allocate(&free, 2), Some(set("0-1")));
    assert_eq!(alloc.allocate(&free, 3), None);
}

fn with_offline(machine: &str, offline: &str) -> Topology {
    let mut topo = synthetic::parse(machine).unwrap();
    let off = set(offline);
    for pu in &mut topo.pus {
        if off.contains(pu.os) {
            pu.online = false;
        }
    }
    topo.allowed = topo.online();
    topo.validate().unwrap();
    topo
}

#[test]
fn offline_pus_are_never_used() {
    let topo = with_offline("package:2 core:4 pu:2", "1");
    let alloc = Allocator::new(&topo);
    let online = topo.online();
    // A whole core is one whose online PUs are free: core 0 is just PU 0 now.
    assert_eq!(alloc.allocate(&online, 2), Some(set("2-3")));
    assert_eq!(alloc.allocate(&online, 1), Some(set("0")));
    // Even when the caller passes the offline CPU as free.
    let all = topo.all_cpus();
    assert_eq!(alloc.allocate(&all, 15), Some(set("0,2-15")));
    assert_eq!(alloc.allocate(&all, 16), None);
    // A whole package offline.
    let topo = with_offline("package:2 core:4 pu:2", "0-7");
    let alloc = Allocator::new(&topo);
    let all = topo.all_cpus();
    assert_eq!(alloc.allocate(&all, 4), Some(set("8-11")));
    assert_eq!(alloc.allocate(&all, 9), None);
}

#[test]
fn allowed_subset_is_respected_when_the_caller_passes_it() {
    let mut topo = synthetic::parse(DEEP).unwrap();
    topo.allowed = set("4-15,40-63");
    topo.validate().unwrap();
    let alloc = Allocator::new(&topo).with_spread(false);
    let free = topo.allowed;
    // Whole allowed L3s: 8-15, 40-47, 48-55, 56-63; 8-15 is in the fullest package (12 allowed
    // CPUs against 24), so package 1 keeps all 24 for a package-sized job.
    assert_eq!(alloc.allocate(&free, 8), Some(set("8-15")));
    // 4: the partly allowed L3 0-7 is the best fit.
    assert_eq!(alloc.allocate(&free, 4), Some(set("4-7")));
    // 12 fits NUMA node 0's allowed part exactly.
    assert_eq!(alloc.allocate(&free, 12), Some(set("4-15")));
    // 36 = everything allowed.
    assert_eq!(alloc.allocate(&free, 36), Some(free));
    assert_eq!(alloc.allocate(&free, 37), None);
    for n in 1..=36 {
        let got = alloc.allocate(&free, n).unwrap();
        assert!(got.is_subset(&topo.allowed), "n={n}: {got}");
        assert_eq!(got.len(), n);
    }
}

#[test]
fn stays_in_one_domain_while_it_fits() {
    for machine in [DUAL, DEEP, QUAD, BIG] {
        let topo = synthetic::parse(machine).unwrap();
        let alloc = Allocator::new(&topo);
        let free = topo.online();
        for level in [Level::L3, Level::Numa, Level::Package] {
            let doms = topo.domains(level);
            let Some(size) = doms.iter().map(|d| d.1.len()).max() else {
                continue;
            };
            for n in 1..=size {
                let got = alloc.allocate(&free, n).unwrap();
                assert_eq!(
                    topo.domains_spanned(level, &got),
                    1,
                    "{machine}: n={n} got {got} spans {}",
                    level.name()
                );
            }
        }
    }
}

#[test]
fn filling_a_machine_one_core_at_a_time_packs_in_order() {
    let topo = synthetic::parse(DEEP).unwrap();
    let alloc = Allocator::new(&topo).with_spread(false);
    let mut free = topo.online();
    let mut scratch = Scratch::new();
    for core in 0..32u32 {
        let got = alloc.allocate_with(&mut scratch, &free, 2).unwrap();
        assert_eq!(got, CpuSet::from_iter([2 * core, 2 * core + 1]));
        free = free.difference(&got);
    }
    assert_eq!(alloc.allocate_with(&mut scratch, &free, 1), None);
}

#[test]
fn accessors() {
    let topo = synthetic::parse(DEEP).unwrap();
    let alloc = Allocator::new(&topo);
    assert_eq!(alloc.topology(), &topo);
    assert_eq!(
        alloc.tree().levels,
        vec![
            Level::Machine,
            Level::Package,
            Level::Numa,
            Level::L3,
            Level::Core,
            Level::Pu
        ]
    );
}

/// Spreading (the default): while at least half the machine stays free, a job that fits in one
/// domain goes to an entirely free one; past half it packs.
#[rustfmt::skip]
const SPREAD: &[Case] = &[
    // The VM tier's guest: 2 packages = 2 NUMA nodes (one L3 each) of 4 cores × 2 threads.
    Case { what: "first 4-CPU job: node 0", machine: "package:2 core:4 pu:2", used: "", n: 4, want: Some("0-3") },
    Case { what: "second 4-CPU job: the empty node 1", machine: "package:2 core:4 pu:2", used: "0-3", n: 4, want: Some("8-11") },
    Case { what: "an 8-CPU job beside a 4-CPU one: the whole empty node", machine: "package:2 core:4 pu:2", used: "0-3", n: 8, want: Some("8-15") },
    Case { what: "both nodes in use, past half: it packs", machine: "package:2 core:4 pu:2", used: "0-3,8-11", n: 2, want: Some("4-5") },
    Case { what: "no empty domain: best fit", machine: "package:2 core:4 pu:2", used: "0-1,8-9", n: 2, want: Some("2-3") },
    // Between two empty NUMA nodes, the one in the emptier package.
    Case { what: "empty node in the other package", machine: DEEP, used: "0-7", n: 8, want: Some("32-39") },
    Case { what: "whole cores still come first", machine: "package:2 core:4 pu:2", used: "0,8", n: 2, want: Some("2-3") },
    Case { what: "a 2-CPU job (a quarter of a node) packs: a whole core beside the 1-CPU job, node 1 stays whole", machine: "package:2 core:4 pu:2", used: "0", n: 2, want: Some("2-3") },
    Case { what: "one CPU packs: the thread beside another job's, node 1 stays whole", machine: "package:2 core:4 pu:2", used: "0", n: 1, want: Some("1") },
    Case { what: "a 4-CPU job beside a 2-CPU one packs: the used node is not half used", machine: "package:2 core:4 pu:2", used: "0-1", n: 4, want: Some("2-5") },
    Case { what: "a 4-CPU job beside a 6-CPU one: the empty node", machine: "package:2 core:4 pu:2", used: "0-5", n: 4, want: Some("8-11") },
    Case { what: "a third 4-CPU job, both nodes in use: packs", machine: "package:2 core:4 pu:2", used: "0-3,8-11", n: 4, want: Some("4-7") },
    Case { what: "two L3s in use: no spreading, best fit", machine: DEEP, used: "0-3,8-11", n: 4, want: Some("4-7") },
    Case { what: "one L3 half used, a half-L3 job: the L3 of an empty package", machine: DEEP, used: "0-3", n: 4, want: Some("32-35") },
    Case { what: "one CPU when packing: beside the half-used core", machine: "package:2 core:4 pu:2", used: "0-1,8-9,4", n: 1, want: Some("5") },
    Case { what: "a job that spans takes the larger package whole", machine: "package:2 core:4 pu:2", used: "0-1", n: 10, want: Some("2-3,8-15") },
];

#[test]
fn spread_table() {
    let mut failures = Vec::new();
    for c in SPREAD {
        let topo = synthetic::parse(c.machine).unwrap();
        let alloc = Allocator::new(&topo);
        assert!(alloc.spread());
        let free = topo.online().difference(&set(c.used));
        let got = alloc.allocate(&free, c.n);
        if got != c.want.map(set) {
            failures.push(format!(
                "{}: used {:?} n={}: got {:?}, want {:?}",
                c.what, c.used, c.n, got, c.want
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Jobs of `sizes` placed one after another on an idle `topo` by the default allocator (none
/// ends): their sets, and what is left free.
fn place_in_turn(topo: &Topology, sizes: &[usize]) -> (Vec<CpuSet>, CpuSet) {
    let alloc = Allocator::new(topo);
    let mut free = topo.online();
    let mut got = Vec::new();
    for &n in sizes {
        let g = alloc.allocate(&free, n).unwrap();
        free = free.difference(&g);
        got.push(g);
    }
    (got, free)
}

fn names(sets: &[CpuSet]) -> Vec<String> {
    sets.iter().map(|s| s.to_string()).collect()
}

#[test]
fn filling_a_machine_four_cpus_at_a_time_spreads_then_packs() {
    // 2 packages × 4 cores × 2 threads: the first two 4-CPU jobs go one per package, the rest
    // pack, and every job gets two whole cores.
    let topo = synthetic::parse("package:2 core:4 pu:2").unwrap();
    let (got, free) = place_in_turn(&topo, &[4, 4, 4, 4]);
    for g in &got {
        assert_eq!(topo.domains_spanned(Level::Core, g), 2, "{g}");
    }
    assert_eq!(names(&got), ["0-3", "8-11", "4-7", "12-15"]);
    assert!(free.is_empty());
}

#[test]
fn small_jobs_pack_while_spreading() {
    // 1- and 2-CPU jobs never spread: they fill package 0 core by core, the thread beside a
    // 1-CPU job first.
    let topo = synthetic::parse("package:2 core:4 pu:2").unwrap();
    let (got, _) = place_in_turn(&topo, &[1, 2, 1, 2]);
    assert_eq!(names(&got), ["0", "2-3", "1", "4-5"]);
}

/// The VM test `four_cpu_jobs_spread_over_the_nodes_and_an_eight_cpu_job_takes_a_whole_one`
/// (crates/cli/tests/numa.rs) on its guest's topology: 2 NUMA nodes (CPUs 0-7, 8-15, an L3
/// each) of 4 cores × 2 threads.
#[test]
fn the_vm_guests_four_and_eight_cpu_jobs() {
    let topo = synthetic::parse("package:2 numa:1 l3:1 core:4 pu:2").unwrap();
    let alloc = Allocator::new(&topo);
    let online = topo.online();
    let a = alloc.allocate(&online, 4).unwrap();
    let b = alloc.allocate(&online.difference(&a), 4).unwrap();
    for (job, want) in [(&a, "0-3"), (&b, "8-11")] {
        assert_eq!(job.to_string(), want);
        assert_eq!(topo.domains_spanned(Level::Numa, job), 1, "{job}");
        assert_eq!(
            topo.domains_spanned(Level::Core, job),
            2,
            "{job}: whole cores"
        );
    }
    assert_eq!(topo.domains_spanned(Level::L3, &a.union(&b)), 2);
    // b ends: an 8-CPU job takes b's node whole.
    let big = alloc.allocate(&online.difference(&a), 8).unwrap();
    assert_eq!(big.to_string(), "8-15");
}
