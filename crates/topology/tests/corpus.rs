//! Every hwloc XML file of the topology corpus (`data/topologies`, hwloc's test machines kept in
//! the repository) loads, with the counts of its README table and of the XML itself.

use pjw_core::{Level, Topology};
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/topologies")
}

fn load(name: &str) -> Topology {
    pjw_topology::load_xml(&corpus_dir().join(name))
        .unwrap_or_else(|e| panic!("{name} does not load: {e}"))
}

struct Expect {
    file: &'static str,
    /// All PUs, online or not.
    pus: usize,
    online: usize,
    nodes: usize,
    memory_only: usize,
    packages: usize,
    /// L3Cache objects, not counting KNL's memory-side caches.
    l3: usize,
    allowed: usize,
    smt: usize,
}

#[rustfmt::skip]
const CORPUS: &[Expect] = &[
    Expect { file: "16em64t-4s2c2t.xml", pus: 16, online: 16, nodes: 1, memory_only: 0, packages: 4, l3: 4, allowed: 16, smt: 2 },
    Expect { file: "16em64t-4s2c2t-offlines.xml", pus: 16, online: 7, nodes: 1, memory_only: 0, packages: 4, l3: 4, allowed: 7, smt: 2 },
    Expect { file: "16amd64-8n2c-cpusets.xml", pus: 16, online: 10, nodes: 5, memory_only: 2, packages: 6, l3: 0, allowed: 10, smt: 1 },
    Expect { file: "16amd64-4distances.xml", pus: 16, online: 16, nodes: 8, memory_only: 0, packages: 8, l3: 0, allowed: 16, smt: 1 },
    Expect { file: "24em64t-2n6c2t-pci.xml", pus: 24, online: 24, nodes: 2, memory_only: 0, packages: 2, l3: 2, allowed: 24, smt: 2 },
    Expect { file: "32em64t-2n8c2t-pci-noio.xml", pus: 32, online: 32, nodes: 2, memory_only: 0, packages: 2, l3: 2, allowed: 32, smt: 2 },
    Expect { file: "64intel64-fakeKNL-SNC4-hybrid.xml", pus: 64, online: 64, nodes: 8, memory_only: 4, packages: 1, l3: 0, allowed: 64, smt: 4 },
    Expect { file: "96em64t-4n4d3ca2co-pci.xml", pus: 96, online: 96, nodes: 4, memory_only: 0, packages: 16, l3: 16, allowed: 96, smt: 1 },
    Expect { file: "192em64t-24n8c2t.xml", pus: 384, online: 384, nodes: 24, memory_only: 0, packages: 24, l3: 24, allowed: 384, smt: 2 },
    Expect { file: "192em64t-12gr2n8c2t.xml", pus: 384, online: 384, nodes: 24, memory_only: 0, packages: 24, l3: 24, allowed: 384, smt: 2 },
    Expect { file: "power8gpudistances.xml", pus: 16, online: 16, nodes: 2, memory_only: 0, packages: 2, l3: 8, allowed: 16, smt: 2 },
    Expect { file: "fakecpukinds.xml", pus: 4, online: 4, nodes: 1, memory_only: 0, packages: 1, l3: 0, allowed: 4, smt: 2 },
];

#[test]
fn every_corpus_file_loads_with_its_counts() {
    let dir = corpus_dir();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CORPUS.iter().map(|e| e.file.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "corpus files and the test table differ");

    for e in CORPUS {
        let t = load(e.file);
        let got = (
            t.pus.len(),
            t.online().len(),
            t.numa_nodes.len(),
            t.numa_nodes.iter().filter(|n| n.memory_only).count(),
            t.domains(Level::Package).len(),
            t.domains(Level::L3).len(),
            t.allowed.len(),
            t.smt_width(),
        );
        let want = (
            e.pus,
            e.online,
            e.nodes,
            e.memory_only,
            e.packages,
            e.l3,
            e.allowed,
            e.smt,
        );
        assert_eq!(
            got, want,
            "{}: (pus, online, nodes, memory-only, packages, l3, allowed, smt)",
            e.file
        );
        assert_eq!(t.source, e.file);
        assert!(t.allowed.is_subset(&t.online()));
        // Every online PU has a NUMA node, except on the restricted machine, where hwloc dropped
        // the node of the PUs outside the allowed node set.
        if e.file != "16amd64-8n2c-cpusets.xml" {
            assert!(
                t.pus.iter().filter(|p| p.online).all(|p| p.numa.is_some()),
                "{}: online pu without a numa node",
                e.file
            );
        }
        // The rendering works on every file.
        assert!(pjw_topology::render(&t).contains("NUMA nodes:"));
    }
}

#[test]
fn smt_siblings_are_numbered_far_apart() {
    let t = load("16em64t-4s2c2t.xml");
    let core0 = t.pu(0).unwrap().core;
    let siblings: Vec<u32> = t
        .pus
        .iter()
        .filter(|p| p.core == core0)
        .map(|p| p.os)
        .collect();
    assert_eq!(siblings, vec![0, 8]);
    // Core ids are unique across packages although hwloc's Core os_index repeats.
    assert_eq!(t.domains(Level::Core).len(), 8);
}

#[test]
fn offline_pus_are_holes_in_the_cpu_list() {
    let t = load("16em64t-4s2c2t-offlines.xml");
    assert_eq!(t.online().to_string(), "0-1,3-4,6,12,15");
    assert_eq!(t.offline().to_string(), "2,5,7-11,13-14");
    assert_eq!(t.allowed, t.online());
    // 4 and 12 are online siblings; 8, the sibling of 0, is offline.
    assert_eq!(t.pu(4).unwrap().core, t.pu(12).unwrap().core);
    assert!(!t.pu(8).unwrap().online);
    assert_eq!(t.smt_width(), 2);
}

#[test]
fn restricted_cpuset_limits_allowed() {
    let t = load("16amd64-8n2c-cpusets.xml");
    assert_eq!(t.allowed.to_string(), "0-3,5-6,12-15");
    let mem_only: Vec<u32> = t
        .numa_nodes
        .iter()
        .filter(|n| n.memory_only)
        .map(|n| n.os)
        .collect();
    assert_eq!(mem_only, vec![4, 5]);
    assert_eq!(t.pu(2).unwrap().numa, Some(1));
    // PUs hwloc left out of the tree are offline, each its own core.
    let missing: Vec<u32> = t.pus.iter().filter(|p| !p.online).map(|p| p.os).collect();
    assert_eq!(missing, vec![4, 7, 8, 9, 10, 11]);
    let mut cores: Vec<u32> = t.pus.iter().map(|p| p.core).collect();
    cores.sort_unstable();
    cores.dedup();
    assert_eq!(cores.len(), 16);
}

#[test]
fn knl_mcdram_nodes_are_memory_only() {
    let t = load("64intel64-fakeKNL-SNC4-hybrid.xml");
    assert_eq!(t.numa_nodes.len(), 8);
    for n in &t.numa_nodes {
        // DDR nodes 0-3 hold the PUs; MCDRAM nodes 4-7 are memory-only, local to a quadrant.
        assert_eq!(n.memory_only, n.os >= 4, "node {}", n.os);
        assert_eq!(n.cpus.len(), 16, "node {}", n.os);
        assert_eq!(n.memory, Some(if n.os >= 4 { 2 << 30 } else { 1 << 30 }));
    }
    assert_eq!(t.pu(0).unwrap().numa, Some(0));
    assert_eq!(t.pu(4).unwrap().numa, Some(1));
    // MCDRAM node 7 is local to node 0's quadrant.
    assert_eq!(t.numa_nodes[7].cpus, t.numa_nodes[0].cpus);
    // Quadrants are NUMA domains; the memory-side cache is not an L3.
    assert_eq!(t.domains(Level::Numa).len(), 4);
    assert!(t.pus.iter().all(|p| p.l3.is_none()));
    assert_eq!(t.domains(Level::L2).len(), 8);
}

#[test]
fn big_machine_numa_nodes_follow_packages() {
    let t = load("192em64t-24n8c2t.xml");
    for (id, cpus) in t.domains(Level::Package) {
        assert_eq!(cpus.len(), 16, "package {id}");
        assert_eq!(t.domains_spanned(Level::Numa, &cpus), 1, "package {id}");
        assert_eq!(t.domains_spanned(Level::L3, &cpus), 1, "package {id}");
    }
}

#[test]
fn sparse_masks_with_empty_words_load() {
    let t = load("power8gpudistances.xml");
    assert_eq!(
        t.online().to_string(),
        "0-1,8-9,16-17,24-25,80-81,88-89,96-97,104-105"
    );
}

#[test]
fn numa_distances_are_read_from_hwloc_in_its_node_order() {
    // power8: two nodes, 10 to itself, 40 to the other.
    let t = load("power8gpudistances.xml");
    assert_eq!(
        (
            t.distances.get(0, 0),
            t.distances.get(0, 1),
            t.distances.get(1, 0)
        ),
        (Some(10), Some(40), Some(40))
    );
    assert_eq!(t.numa_by_distance(&[1]), vec![1, 0]);
    // 16amd64-4distances lists its 8 nodes as "1 0 2 5 4 3 6 7": row 0 is node 1's.
    let t = load("16amd64-4distances.xml");
    assert_eq!(t.distances.nodes, vec![1, 0, 2, 5, 4, 3, 6, 7]);
    assert_eq!(
        (t.distances.get(1, 1), t.distances.get(1, 0)),
        (Some(10), Some(20))
    );
    for n in 0..8 {
        assert_eq!(t.distances.get(n, n), Some(10), "node {n}");
    }
    // A file without distances has none.
    let t = load("16em64t-4s2c2t.xml");
    assert!(t.distances.is_empty());
}
