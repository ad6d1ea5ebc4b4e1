use super::*;
use crate::synthetic;

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

#[test]
fn depth_first_ranges_cover_subtrees() {
    let t = synthetic::parse("package:2 numa:2 l3:2 core:4 pu:2").unwrap();
    let a = Allocator::new(&t);
    assert_eq!(a.end[0] as usize, a.parent.len());
    for i in 0..a.parent.len() {
        let mut below = CpuSet::new();
        for j in i..a.end[i] as usize {
            below = below.union(&a.cpus[j]);
        }
        assert_eq!(below, a.cpus[i], "node {i}");
    }
    assert_eq!(a.smt, 2);
    assert_eq!(a.tree.levels[a.core_depth as usize], Level::Core);
}

#[test]
fn cores_touched_follow_the_histogram() {
    // One L3 of 5 cores, free {2,1,1,2,2}.
    let t = synthetic::parse("core:5 pu:2").unwrap();
    let a = Allocator::new(&t);
    let free = t.online().difference(&set("2,4"));
    let mut s = Scratch::new();
    a.allocate_with(&mut s, &free, 1).unwrap();
    let run = View {
        a: &a,
        counts: &s.free,
        hist: &s.hist,
        stride: a.smt + 1,
        spread: false,
    };
    let want = [(1, 1), (2, 1), (3, 2), (6, 3), (7, 4), (8, 5)];
    for (n, k) in want {
        assert_eq!(run.cores_for(0, n), k, "n={n}");
    }
    assert_eq!(run.cores_used(0), 5);
}

#[test]
fn shifted_bit_sets() {
    let src = [0b1011u64, 1 << 63, 0];
    for (shift, want) in [
        (0, [0b1011, 1 << 63, 0]),
        (1, [0b10110, 0, 1]),
        (64, [0, 0b1011, 1 << 63]),
        (66, [0, 0b101100, 0]),
    ] {
        let mut dst = [0u64; 3];
        shl_or(&mut dst, &src, shift);
        assert_eq!(dst, want, "shift {shift}");
    }
}

#[test]
fn spanning_without_a_table_takes_the_freest_children() {
    // 80 cores, every other one half used: more than 64 children to span.
    let t = synthetic::parse("core:80 pu:2").unwrap();
    let a = Allocator::new(&t);
    let used: CpuSet = (0..80u32).filter(|c| c % 2 == 1).map(|c| 2 * c).collect();
    let free = t.online().difference(&used);
    let got = a.allocate(&free, 100).unwrap();
    assert_eq!(got.len(), 100);
    assert!(got.is_subset(&free));
    // The 40 whole cores first, then 20 half-used ones.
    assert_eq!(t.domains_spanned(Level::Core, &got), 60);
    // 60 packages of 16: a 900-CPU job needs 57 of them, a table of 61 × 58 × 15 words.
    let t = synthetic::parse("package:60 core:8 pu:2").unwrap();
    let a = Allocator::new(&t);
    let free = t.online().difference(&set("0-5"));
    let got = a.allocate(&free, 900).unwrap();
    assert_eq!(got.len(), 900);
    assert!(got.is_subset(&free));
    assert_eq!(t.domains_spanned(Level::Package, &got), 57);
}

#[test]
fn single_core_machine() {
    let t = synthetic::parse("core:1 pu:4").unwrap();
    let a = Allocator::new(&t);
    assert_eq!(a.core_depth, 0);
    let free = t.online();
    assert_eq!(a.allocate(&free, 3).unwrap(), set("0-2"));
}
