//! `discover_gpus` on fake sysfs / dev / proc trees built in temp dirs, and the GPUs of the
//! hwloc corpus file that has some.

use pjw_core::{CpuSet, DeviceNode, GpuVendor};
use pjw_topology::{discover_gpus, load_xml_gpus, parse_xml_gpus, render_gpus, TopologyError};
use std::fs;
use std::path::{Path, PathBuf};

fn w(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// A PCI function under `<sys>/bus/pci/devices/<addr>`; `None` leaves a file out.
fn pci(sys: &Path, addr: &str, class: &str, vendor: &str, numa: Option<&str>, cpus: Option<&str>) {
    let d = format!("bus/pci/devices/{addr}");
    w(sys, &format!("{d}/class"), &format!("{class}\n"));
    w(sys, &format!("{d}/vendor"), &format!("{vendor}\n"));
    if let Some(n) = numa {
        w(sys, &format!("{d}/numa_node"), &format!("{n}\n"));
    }
    if let Some(c) = cpus {
        w(sys, &format!("{d}/local_cpulist"), &format!("{c}\n"));
    }
}

struct Roots {
    _tmp: tempfile::TempDir,
    sys: PathBuf,
    dev: PathBuf,
    proc: PathBuf,
}

fn roots() -> Roots {
    let tmp = tempfile::tempdir().unwrap();
    let (sys, dev, proc) = (
        tmp.path().join("sys"),
        tmp.path().join("dev"),
        tmp.path().join("proc"),
    );
    for d in [&sys, &dev, &proc] {
        fs::create_dir_all(d).unwrap();
    }
    Roots {
        _tmp: tmp,
        sys,
        dev,
        proc,
    }
}

fn node(path: &str, major: u32, minor: u32) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        major,
        minor,
    }
}

/// id, PCI address, NUMA node, local CPUs, device nodes.
type GpuRow<'a> = (u32, &'a str, Option<u32>, String, Vec<DeviceNode>);

#[test]
fn two_numa_nodes_with_two_nvidia_gpus_each() {
    let r = roots();
    // Listed out of order; a NIC and a bridge in between.
    pci(
        &r.sys,
        "0000:c1:00.0",
        "0x030200",
        "0x10de",
        Some("1"),
        Some("4-7"),
    );
    pci(
        &r.sys,
        "0000:01:00.0",
        "0x030200",
        "0x10de",
        Some("0"),
        Some("0-3"),
    );
    pci(
        &r.sys,
        "0000:02:00.0",
        "0x020000",
        "0x8086",
        Some("0"),
        Some("0-3"),
    );
    pci(
        &r.sys,
        "0000:00:01.0",
        "0x060400",
        "0x10de",
        Some("0"),
        Some("0-3"),
    );
    pci(
        &r.sys,
        "0000:41:00.0",
        "0x030200",
        "0x10de",
        Some("0"),
        Some("0-3"),
    );
    pci(
        &r.sys,
        "0000:c2:00.0",
        "0x030000",
        "0x10de",
        Some("1"),
        Some("4-7"),
    );
    // The driver numbers the last two the other way round.
    w(
        &r.proc,
        "driver/nvidia/gpus/0000:c1:00.0/information",
        "Model: x\nDevice Minor: \t 3\n",
    );
    w(
        &r.proc,
        "driver/nvidia/gpus/0000:c2:00.0/information",
        "Model: x\nDevice Minor: \t 2\n",
    );
    let g = discover_gpus(&r.sys, &r.dev, &r.proc).unwrap();
    let got: Vec<GpuRow> = g
        .gpus
        .iter()
        .map(|g| {
            (
                g.id.0,
                g.pci.as_deref().unwrap(),
                g.numa,
                g.cpus.to_string(),
                g.devices.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                0,
                "0000:01:00.0",
                Some(0),
                "0-3".into(),
                vec![node("/dev/nvidia0", 195, 0)]
            ),
            (
                1,
                "0000:41:00.0",
                Some(0),
                "0-3".into(),
                vec![node("/dev/nvidia1", 195, 1)]
            ),
            (
                2,
                "0000:c1:00.0",
                Some(1),
                "4-7".into(),
                vec![node("/dev/nvidia3", 195, 3)]
            ),
            (
                3,
                "0000:c2:00.0",
                Some(1),
                "4-7".into(),
                vec![node("/dev/nvidia2", 195, 2)]
            ),
        ]
    );
    assert!(g.gpus.iter().all(|g| g.vendor == GpuVendor::Nvidia));
    // No control node under the fake /dev: none listed.
    assert!(g.shared.is_empty());
    assert_eq!(
        render_gpus(&g),
        "GPUs by NUMA node:\n\
         \x20 node 0:\n\
         \x20   gpu 0 nvidia 0000:01:00.0, cpus 0-3, /dev/nvidia0\n\
         \x20   gpu 1 nvidia 0000:41:00.0, cpus 0-3, /dev/nvidia1\n\
         \x20 node 1:\n\
         \x20   gpu 2 nvidia 0000:c1:00.0, cpus 4-7, /dev/nvidia3\n\
         \x20   gpu 3 nvidia 0000:c2:00.0, cpus 4-7, /dev/nvidia2\n"
    );
}

#[test]
fn numa_node_minus_one_and_missing_files_mean_unknown() {
    let r = roots();
    pci(
        &r.sys,
        "0000:01:00.0",
        "0x030200",
        "0x10de",
        Some("-1"),
        Some(""),
    );
    pci(&r.sys, "0000:02:00.0", "0x030200", "0x10de", None, None);
    // No class or vendor file: not a GPU pjw can tell.
    w(&r.sys, "bus/pci/devices/0000:03:00.0/numa_node", "0\n");
    w(&r.sys, "bus/pci/devices/0000:04:00.0/class", "0x030200\n");
    // A display controller of a vendor pjw does not know.
    pci(
        &r.sys,
        "0000:05:00.0",
        "0x030000",
        "0x1a03",
        Some("0"),
        Some("0-3"),
    );
    let g = discover_gpus(&r.sys, &r.dev, &r.proc).unwrap();
    assert_eq!(g.len(), 2);
    for gpu in &g.gpus {
        assert_eq!(gpu.numa, None, "{gpu:?}");
        assert_eq!(gpu.cpus, CpuSet::new(), "{gpu:?}");
    }
    assert!(
        render_gpus(&g).contains("  node unknown:\n    gpu 0 nvidia 0000:01:00.0, /dev/nvidia0\n")
    );
}

#[test]
fn amd_and_intel_gpus_are_their_drm_nodes() {
    let r = roots();
    pci(
        &r.sys,
        "0000:03:00.0",
        "0x038000",
        "0x1002",
        Some("0"),
        Some("0-7"),
    );
    w(
        &r.sys,
        "bus/pci/devices/0000:03:00.0/drm/card1/dev",
        "226:1\n",
    );
    w(
        &r.sys,
        "bus/pci/devices/0000:03:00.0/drm/renderD129/dev",
        "226:129\n",
    );
    w(
        &r.sys,
        "bus/pci/devices/0000:03:00.0/drm/controlD65/dev",
        "226:65\n",
    );
    pci(
        &r.sys,
        "0000:00:02.0",
        "0x030000",
        "0x8086",
        Some("0"),
        Some("0-7"),
    );
    w(
        &r.sys,
        "bus/pci/devices/0000:00:02.0/drm/renderD128/dev",
        "226:128\n",
    );
    // An AMD display controller without DRM nodes (no amdgpu driver) is left out.
    pci(
        &r.sys,
        "0000:04:00.0",
        "0x030000",
        "0x1002",
        Some("0"),
        Some("0-7"),
    );
    let g = discover_gpus(&r.sys, &r.dev, &r.proc).unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g.gpus[0].vendor, GpuVendor::Intel);
    assert_eq!(
        g.gpus[0].devices,
        vec![node("/dev/dri/renderD128", 226, 128)]
    );
    assert_eq!(g.gpus[1].vendor, GpuVendor::Amd);
    assert_eq!(
        g.gpus[1].devices,
        vec![
            node("/dev/dri/card1", 226, 1),
            node("/dev/dri/renderD129", 226, 129)
        ]
    );
    // No /dev/kfd under the fake /dev.
    assert!(g.shared.is_empty());
}

#[test]
fn no_pci_directory_is_no_gpus() {
    let r = roots();
    let g = discover_gpus(&r.sys, &r.dev, &r.proc).unwrap();
    assert!(g.is_empty());
    assert_eq!(render_gpus(&g), "");
}

#[test]
fn a_bad_local_cpulist_names_its_file() {
    let r = roots();
    pci(
        &r.sys,
        "0000:01:00.0",
        "0x030200",
        "0x10de",
        Some("0"),
        Some("x-y"),
    );
    match discover_gpus(&r.sys, &r.dev, &r.proc) {
        Err(TopologyError::Parse { path, .. }) => {
            assert!(path.ends_with("0000:01:00.0/local_cpulist"), "{path:?}")
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn the_power8_corpus_file_has_four_gpus_two_per_node() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topologies/power8gpudistances.xml");
    let g = load_xml_gpus(&path).unwrap();
    let got: Vec<(&str, Option<u32>)> = g
        .gpus
        .iter()
        .map(|g| (g.pci.as_deref().unwrap(), g.numa))
        .collect();
    assert_eq!(
        got,
        vec![
            ("0002:01:00.0", Some(0)),
            ("0003:01:00.0", Some(0)),
            ("000a:01:00.0", Some(1)),
            ("000b:01:00.0", Some(1)),
        ]
    );
    let topo = pjw_topology::load_xml(&path).unwrap();
    for gpu in &g.gpus {
        assert_eq!(gpu.vendor, GpuVendor::Nvidia);
        let node = topo
            .numa_nodes
            .iter()
            .find(|n| Some(n.os) == gpu.numa)
            .unwrap();
        assert_eq!(
            gpu.cpus, node.cpus,
            "gpu {} is local to its node's cpus",
            gpu.id
        );
        assert!(gpu.devices.is_empty());
    }
    // The corpus machines without GPUs have none.
    let plain =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/topologies/16em64t-4s2c2t.xml");
    assert!(load_xml_gpus(&plain).unwrap().is_empty());
}

/// A PCI function laid out as the kernel does: its directory under `<sys>/devices/<chain>` (the
/// chain from the host bridge to it) and `<sys>/bus/pci/devices/<addr>` a relative link to it.
fn linked_pci(sys: &Path, chain: &str, class: &str, numa: &str, cpus: &str) {
    let addr = chain.rsplit('/').next().unwrap();
    let dir = format!("devices/{chain}");
    w(sys, &format!("{dir}/class"), &format!("{class}\n"));
    w(sys, &format!("{dir}/vendor"), "0x10de\n");
    w(sys, &format!("{dir}/numa_node"), &format!("{numa}\n"));
    w(sys, &format!("{dir}/local_cpulist"), &format!("{cpus}\n"));
    let links = sys.join("bus/pci/devices");
    fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(format!("../../../{dir}"), links.join(addr)).unwrap();
}

#[test]
fn gpus_under_one_switch_share_its_upstream_port() {
    let r = roots();
    // Node 0: a switch (upstream port 01:00.0) below root port 00:01.0 with two GPUs on its
    // downstream ports, and a GPU on root port 00:03.0 itself. Node 1: a switch below root
    // port 80:01.0 with one GPU.
    let sw0 = "pci0000:00/0000:00:01.0/0000:01:00.0";
    linked_pci(
        &r.sys,
        &format!("{sw0}/0000:02:08.0/0000:03:00.0"),
        "0x030200",
        "0",
        "0-3",
    );
    linked_pci(
        &r.sys,
        &format!("{sw0}/0000:02:10.0/0000:04:00.0"),
        "0x030200",
        "0",
        "0-3",
    );
    linked_pci(
        &r.sys,
        "pci0000:00/0000:00:03.0/0000:05:00.0",
        "0x030200",
        "0",
        "0-3",
    );
    let sw1 = "pci0000:80/0000:80:01.0/0000:81:00.0";
    linked_pci(
        &r.sys,
        &format!("{sw1}/0000:82:00.0/0000:83:00.0"),
        "0x030200",
        "1",
        "4-7",
    );
    // The bridges themselves are not GPUs.
    linked_pci(&r.sys, sw0, "0x060400", "0", "0-3");
    linked_pci(&r.sys, "pci0000:00/0000:00:01.0", "0x060400", "0", "0-3");
    let g = discover_gpus(&r.sys, &r.dev, &r.proc).unwrap();
    let got: Vec<(&str, Option<&str>)> = g
        .gpus
        .iter()
        .map(|g| (g.pci.as_deref().unwrap(), g.switch.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("0000:03:00.0", Some("0000:01:00.0")),
            ("0000:04:00.0", Some("0000:01:00.0")),
            ("0000:05:00.0", None),
            ("0000:83:00.0", Some("0000:81:00.0")),
        ]
    );
    assert_eq!(
        render_gpus(&g),
        "GPUs by NUMA node:\n\
         \x20 node 0:\n\
         \x20   gpu 0 nvidia 0000:03:00.0, switch 0000:01:00.0, cpus 0-3, /dev/nvidia0\n\
         \x20   gpu 1 nvidia 0000:04:00.0, switch 0000:01:00.0, cpus 0-3, /dev/nvidia1\n\
         \x20   gpu 2 nvidia 0000:05:00.0, cpus 0-3, /dev/nvidia2\n\
         \x20 node 1:\n\
         \x20   gpu 3 nvidia 0000:83:00.0, switch 0000:81:00.0, cpus 4-7, /dev/nvidia3\n"
    );
}

/// hwloc XML of one package, two NUMA nodes; below node 0's host bridge a root port, under it a
/// switch (upstream port 0000:01:00.0, two downstream ports) with a GPU on each downstream
/// port; below node 1's a GPU on its root port.
const SWITCHED_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x000000ff" complete_cpuset="0x000000ff" allowed_cpuset="0x000000ff" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3" local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
      </object>
      <object type="Bridge" gp_index="10" bridge_type="0-1" depth="0" bridge_pci="0000:[00-04]">
        <object type="Bridge" gp_index="11" bridge_type="1-1" depth="1" bridge_pci="0000:[01-04]" pci_busid="0000:00:01.0" pci_type="0604 [8086:2030] [0000:0000] 04">
          <object type="Bridge" gp_index="12" bridge_type="1-1" depth="2" bridge_pci="0000:[02-04]" pci_busid="0000:01:00.0" pci_type="0604 [10b5:9797] [0000:0000] ab">
            <object type="Bridge" gp_index="13" bridge_type="1-1" depth="3" bridge_pci="0000:[03-03]" pci_busid="0000:02:08.0" pci_type="0604 [10b5:9797] [0000:0000] ab">
              <object type="PCIDev" gp_index="14" pci_busid="0000:03:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1"/>
            </object>
            <object type="Bridge" gp_index="15" bridge_type="1-1" depth="3" bridge_pci="0000:[04-04]" pci_busid="0000:02:10.0" pci_type="0604 [10b5:9797] [0000:0000] ab">
              <object type="PCIDev" gp_index="16" pci_busid="0000:04:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1"/>
            </object>
          </object>
        </object>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x000000f0" complete_cpuset="0x000000f0" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="20">
      <object type="NUMANode" os_index="1" cpuset="0x000000f0" complete_cpuset="0x000000f0" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="21" local_memory="1073741824"/>
      <object type="Core" os_index="4" cpuset="0x000000f0" complete_cpuset="0x000000f0" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="22">
        <object type="PU" os_index="4" cpuset="0x00000010" complete_cpuset="0x00000010" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="23"/>
      </object>
      <object type="Bridge" gp_index="30" bridge_type="0-1" depth="0" bridge_pci="0000:[80-81]">
        <object type="Bridge" gp_index="31" bridge_type="1-1" depth="1" bridge_pci="0000:[81-81]" pci_busid="0000:80:01.0" pci_type="0604 [8086:2030] [0000:0000] 04">
          <object type="PCIDev" gp_index="32" pci_busid="0000:81:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1"/>
        </object>
      </object>
    </object>
  </object>
</topology>
"#;

#[test]
fn hwloc_gpus_below_a_bridge_under_the_root_port_share_a_switch() {
    let g = parse_xml_gpus(SWITCHED_XML, "switched.xml").unwrap();
    let got: Vec<(&str, Option<u32>, Option<&str>)> = g
        .gpus
        .iter()
        .map(|g| (g.pci.as_deref().unwrap(), g.numa, g.switch.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("0000:03:00.0", Some(0), Some("0000:01:00.0")),
            ("0000:04:00.0", Some(0), Some("0000:01:00.0")),
            ("0000:81:00.0", Some(1), None),
        ]
    );
    // The power8 corpus machine has each GPU on a root port of its own: no switch.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topologies/power8gpudistances.xml");
    let g = load_xml_gpus(&path).unwrap();
    assert_eq!(g.len(), 4);
    assert!(g.gpus.iter().all(|g| g.switch.is_none()), "{g:?}");
}
