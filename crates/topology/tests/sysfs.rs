//! `discover` on fake sysfs/procfs trees built in temp dirs, and a smoke test on this machine.

use pjw_core::{CpuSet, Level};
use pjw_topology::{discover, TopologyError};
use std::fs;
use std::path::Path;

fn w(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// One online CPU's topology and caches, with the current kernel's file names.
fn cpu(sys: &Path, n: u32, core_id: u32, pkg: u32, siblings: &str, package: &str) {
    let d = format!("devices/system/cpu/cpu{n}");
    w(sys, &format!("{d}/online"), "1\n");
    w(
        sys,
        &format!("{d}/topology/core_id"),
        &format!("{core_id}\n"),
    );
    w(
        sys,
        &format!("{d}/topology/physical_package_id"),
        &format!("{pkg}\n"),
    );
    w(sys, &format!("{d}/topology/die_id"), "0\n");
    w(
        sys,
        &format!("{d}/topology/core_cpus_list"),
        &format!("{siblings}\n"),
    );
    w(
        sys,
        &format!("{d}/topology/thread_siblings_list"),
        &format!("{siblings}\n"),
    );
    w(
        sys,
        &format!("{d}/topology/package_cpus_list"),
        &format!("{package}\n"),
    );
    w(
        sys,
        &format!("{d}/topology/core_siblings_list"),
        &format!("{package}\n"),
    );
    for (i, level, kind, shared) in [
        (0, 1, "Data", siblings),
        (1, 1, "Instruction", siblings),
        (2, 2, "Unified", siblings),
        (3, 3, "Unified", package),
    ] {
        let c = format!("{d}/cache/index{i}");
        w(sys, &format!("{c}/level"), &format!("{level}\n"));
        w(sys, &format!("{c}/type"), &format!("{kind}\n"));
        w(sys, &format!("{c}/shared_cpu_list"), &format!("{shared}\n"));
        w(sys, &format!("{c}/id"), &format!("{pkg}\n"));
    }
}

fn node(sys: &Path, n: u32, cpulist: &str, kb: u64) {
    let d = format!("devices/system/node/node{n}");
    w(sys, &format!("{d}/cpulist"), &format!("{cpulist}\n"));
    w(
        sys,
        &format!("{d}/meminfo"),
        &format!("Node {n} MemTotal:       {kb} kB\nNode {n} MemFree:        1000 kB\n"),
    );
}

fn status(proc_: &Path, allowed: &str) {
    w(
        proc_,
        "self/status",
        &format!("Name:\tpjw\nCpus_allowed:\tff\nCpus_allowed_list:\t{allowed}\nMems_allowed_list:\t0-1\n"),
    );
}

/// 2 packages × 2 cores × 2 threads, siblings numbered 4 apart (0 and 4), core_id repeating per
/// package, 2 NUMA nodes, cpu 7 offline, and a process restricted to 0-3,7.
fn two_socket(sys: &Path, proc_: &Path) {
    let c = "devices/system/cpu";
    w(sys, &format!("{c}/present"), "0-7\n");
    w(sys, &format!("{c}/possible"), "0-7\n");
    w(sys, &format!("{c}/online"), "0-6\n");
    w(sys, &format!("{c}/offline"), "7\n");
    cpu(sys, 0, 0, 0, "0,4", "0-1,4-5");
    cpu(sys, 1, 1, 0, "1,5", "0-1,4-5");
    cpu(sys, 2, 0, 1, "2,6", "2-3,6");
    cpu(sys, 3, 1, 1, "3", "2-3,6");
    cpu(sys, 4, 0, 0, "0,4", "0-1,4-5");
    cpu(sys, 5, 1, 0, "1,5", "0-1,4-5");
    cpu(sys, 6, 0, 1, "2,6", "2-3,6");
    // Offline: no topology or cache directory, but its node link stays.
    w(sys, &format!("{c}/cpu7/online"), "0\n");
    fs::create_dir_all(sys.join(format!("{c}/cpu7/node1"))).unwrap();
    node(sys, 0, "0-1,4-5", 16 * 1024 * 1024);
    node(sys, 1, "2-3,6", 8 * 1024 * 1024);
    status(proc_, "0-3,7");
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

#[test]
fn two_socket_smt_machine() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    two_socket(sys.path(), proc_.path());
    let t = discover(sys.path(), proc_.path()).unwrap();

    assert_eq!(t.source, "sysfs");
    assert_eq!(t.pus.len(), 8);
    assert_eq!(t.online(), set("0-6"));
    assert_eq!(t.offline(), set("7"));
    assert_eq!(
        t.allowed,
        set("0-3"),
        "allowed is Cpus_allowed_list ∩ online"
    );

    // Packages and cores by sibling sets: core_id 0 of package 0 and of package 1 differ.
    let pkgs: Vec<CpuSet> = t.domains(Level::Package).into_iter().map(|d| d.1).collect();
    assert_eq!(pkgs, vec![set("0-1,4-5"), set("2-3,6")]);
    let cores: Vec<CpuSet> = t.domains(Level::Core).into_iter().map(|d| d.1).collect();
    assert_eq!(cores, vec![set("0,4"), set("1,5"), set("2,6"), set("3")]);
    assert_eq!(t.domains(Level::L2).len(), 4);
    assert_eq!(t.domains(Level::L3).len(), 2);
    assert_eq!(t.smt_width(), 2);

    // The offline cpu has a core of its own, no caches, and its node from the cpu7/node1 link.
    let p7 = t.pu(7).unwrap();
    assert!(!p7.online);
    assert!(t
        .pus
        .iter()
        .filter(|p| p.os != 7)
        .all(|p| p.core != p7.core));
    assert_eq!((p7.l2, p7.l3, p7.numa), (None, None, Some(1)));

    assert_eq!(t.numa_nodes.len(), 2);
    assert_eq!(t.numa_nodes[1].cpus, set("2-3,6"));
    assert_eq!(t.numa_nodes[0].memory, Some(16 << 30));
    assert_eq!(t.numa_nodes[1].memory, Some(8 << 30));
    assert!(t.numa_nodes.iter().all(|n| !n.memory_only));
    assert_eq!(t.pu(5).unwrap().numa, Some(0));
    assert_eq!(t.pu(6).unwrap().numa, Some(1));
    assert_eq!(t.mems_for(&t.allowed), set("0-1"));

    let out = pjw_topology::render(&t);
    assert!(
        out.contains("7 PUs online (0-6), 4 allowed (0-3), 1 offline (7)"),
        "{out}"
    );
    assert!(
        out.contains("package 1, numa 1, l3 1: cpus 2-3,6 (allowed 2-3)"),
        "{out}"
    );
}

#[test]
fn memory_only_node() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    two_socket(sys.path(), proc_.path());
    node(sys.path(), 2, "", 64 * 1024 * 1024);
    let t = discover(sys.path(), proc_.path()).unwrap();
    assert_eq!(t.numa_nodes.len(), 3);
    let n2 = t.numa_nodes[2];
    assert!(n2.memory_only && n2.cpus.is_empty());
    assert_eq!(n2.memory, Some(64 << 30));
    assert!(t.pus.iter().all(|p| p.numa != Some(2)));
}

/// Older kernels: no core_cpus_list/package_cpus_list, no global online file; no NUMA directory.
#[test]
fn old_file_names_and_no_numa() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s, p) = (sys.path(), proc_.path());
    w(s, "devices/system/cpu/present", "0-3\n");
    for (n, sib) in [(0, "0-1"), (1, "0-1"), (2, "2-3"), (3, "2-3")] {
        let d = format!("devices/system/cpu/cpu{n}/topology");
        w(s, &format!("{d}/thread_siblings_list"), sib);
        w(s, &format!("{d}/core_siblings_list"), "0-3");
        w(s, &format!("{d}/core_id"), &format!("{}", n / 2));
        w(s, &format!("{d}/physical_package_id"), "0");
    }
    // cpu0 has no online file (it cannot go offline); cpu3 is offline.
    w(s, "devices/system/cpu/cpu1/online", "1");
    w(s, "devices/system/cpu/cpu2/online", "1");
    w(s, "devices/system/cpu/cpu3/online", "0");
    status(p, "0-3");
    w(p, "meminfo", "MemTotal:        2048 kB\nMemFree: 1 kB\n");
    let t = discover(s, p).unwrap();
    assert_eq!(t.online(), set("0-2"));
    assert_eq!(t.allowed, set("0-2"));
    assert_eq!(t.domains(Level::Core).len(), 2);
    assert_eq!(t.domains(Level::Package).len(), 1);
    assert_eq!(t.domains(Level::L3).len(), 0);
    assert_eq!(t.numa_nodes.len(), 1);
    assert_eq!(t.numa_nodes[0].cpus, set("0-2"));
    assert_eq!(t.numa_nodes[0].memory, Some(2 << 20));
    assert!(t.pus.iter().all(|p| p.numa == Some(0)));
}

/// Without sibling lists, cores are told apart by (package, die, core_id).
#[test]
fn core_ids_without_sibling_lists() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s, p) = (sys.path(), proc_.path());
    w(s, "devices/system/cpu/present", "0-3\n");
    w(s, "devices/system/cpu/online", "0-3\n");
    for n in 0..4u32 {
        let d = format!("devices/system/cpu/cpu{n}/topology");
        w(s, &format!("{d}/core_id"), "0");
        w(
            s,
            &format!("{d}/physical_package_id"),
            &format!("{}", n % 2),
        );
    }
    status(p, "0-3");
    let t = discover(s, p).unwrap();
    let cores: Vec<CpuSet> = t.domains(Level::Core).into_iter().map(|d| d.1).collect();
    assert_eq!(cores, vec![set("0,2"), set("1,3")]);
    assert_eq!(t.domains(Level::Package).len(), 2);
}

#[test]
fn errors_name_the_file() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s, p) = (sys.path(), proc_.path());

    // Nothing there at all.
    let e = discover(s, p).unwrap_err();
    assert!(matches!(e, TopologyError::NoCpus { .. }), "{e}");
    assert!(e.to_string().starts_with("no cpus found under "), "{e}");

    // No status file.
    two_socket(s, p);
    fs::remove_file(p.join("self/status")).unwrap();
    let e = discover(s, p).unwrap_err();
    assert!(matches!(e, TopologyError::Io { .. }), "{e}");
    assert!(e.to_string().contains("self/status"), "{e}");

    // A garbled cpu list.
    status(p, "0-3");
    w(s, "devices/system/cpu/online", "0-x\n");
    let e = discover(s, p).unwrap_err().to_string();
    assert!(
        e.contains("devices/system/cpu/online") && e.contains("0-x"),
        "{e}"
    );
    assert!(!e.ends_with('.'));

    // A garbled Cpus_allowed_list.
    w(s, "devices/system/cpu/online", "0-6\n");
    status(p, "zero");
    let e = discover(s, p).unwrap_err().to_string();
    assert!(e.contains("self/status") && e.contains("zero"), "{e}");
}

/// This machine (2 CPUs, 1 NUMA node in CI): only what must hold anywhere.
#[test]
fn real_machine_smoke() {
    let (sys, proc_) = (Path::new("/sys"), Path::new("/proc"));
    if !sys.join("devices/system/cpu").is_dir() || !proc_.join("self/status").is_file() {
        pjw_testkit::skip!("no /sys/devices/system/cpu or /proc/self/status on this machine");
    }
    let t = discover(sys, proc_).unwrap();
    assert!(!t.pus.is_empty());
    assert!(!t.online().is_empty());
    assert!(!t.allowed.is_empty());
    assert!(t.allowed.is_subset(&t.online()));
    assert!(!t.numa_nodes.is_empty());
    assert!(t.smt_width() >= 1);
    assert!(pjw_topology::render(&t).starts_with("topology from sysfs\n"));
}

#[test]
fn numa_distances_come_from_each_nodes_distance_file() {
    let (sys, proc_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    two_socket(sys.path(), proc_.path());
    w(sys.path(), "devices/system/node/node0/distance", "10 21\n");
    w(sys.path(), "devices/system/node/node1/distance", "21 10\n");
    let t = discover(sys.path(), proc_.path()).unwrap();
    assert_eq!(
        (t.distances.get(0, 1), t.distances.get(1, 1)),
        (Some(21), Some(10))
    );
    assert_eq!(t.numa_by_distance(&[1]), vec![1, 0]);
    // A file that does not match the nodes found (one value for two nodes) is not taken.
    w(sys.path(), "devices/system/node/node1/distance", "10\n");
    let t = discover(sys.path(), proc_.path()).unwrap();
    assert!(t.distances.is_empty());
}
