//! Golden test of `render` on a small synthetic machine with an offline PU, a restricted allowed
//! set and a memory-only node. Run with `UPDATE_GOLDEN=1` to rewrite the golden file.

use pjw_core::{synthetic, CpuSet, NumaNode};
use std::path::Path;

fn check_golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        // Nothing was compared: a skip, never a pass.
        pjw_testkit::skip!(
            "UPDATE_GOLDEN is set: {} rewritten, not compared",
            path.display()
        );
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e} (run with UPDATE_GOLDEN=1)",
            path.display()
        )
    });
    assert_eq!(got, want, "render output differs from {}", path.display());
}

#[test]
fn render_small_machine() {
    let mut t = synthetic::parse("package:2 numa:2 core:2 pu:2 mem:2G").unwrap();
    t.source = "test machine".into();
    t.pus[15].online = false;
    t.numa_nodes[3].cpus.remove(15);
    t.allowed = CpuSet::parse_list("0-11").unwrap();
    t.numa_nodes.push(NumaNode {
        os: 4,
        cpus: CpuSet::parse_list("0-7").unwrap(),
        memory: Some(16 << 30),
        memory_only: true,
    });
    t.validate().unwrap();
    let out = pjw_topology::render(&t);
    for line in out.lines() {
        assert!(line.len() <= 80, "line longer than 80 columns: {line:?}");
    }
    check_golden("render_small.txt", &out);
}

#[test]
fn render_single_package_smt() {
    let t = synthetic::parse("package:1 l3:1 core:4 pu:2 mem:512M").unwrap();
    check_golden("render_single.txt", &pjw_topology::render(&t));
}
