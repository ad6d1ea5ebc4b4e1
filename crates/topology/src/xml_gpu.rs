//! GPUs in hwloc XML (version 2): `PCIDev` objects of a display class (`pci_type="03xx
//! [vvvv:dddd] ..."`) from NVIDIA, AMD or Intel.
//!
//! hwloc places an I/O object below the CPU-side object it is local to; the GPU's local CPUs
//! are that object's `cpuset`, and its NUMA node that object's `nodeset` when it names exactly one
//! node. A file says nothing of device nodes: GPUs read from XML have none (they are for
//! `pjw topology` and the simulator, not for fencing).
//!
//! hwloc nests `Bridge` objects: a host bridge (`bridge_type="0-1"`), below it a root port and
//! any PCI-to-PCI bridges (`"1-1"`) down to the device. A GPU with a bridge between its root port
//! and itself sits under the PCIe switch whose upstream port is the first such bridge
//! ([`switch_of`]), as the sysfs reader finds it.

use roxmltree::{Document, Node, ParsingOptions};

use pjw_core::{CpuSet, Gpu, GpuId, GpuVendor, Gpus};

use crate::xml::parse_hwloc_mask;
use crate::TopologyError;

/// Class and vendor of an hwloc `pci_type` (`"0302 [10de:15f9] [10de:116b] a1"`).
pub fn parse_pci_type(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace();
    let class = u16::from_str_radix(it.next()?, 16).ok()?;
    let ids = it.next()?.strip_prefix('[')?.strip_suffix(']')?;
    let vendor = u16::from_str_radix(ids.split(':').next()?, 16).ok()?;
    Some((class, vendor))
}

/// The nearest ancestor that is a CPU-side object (one with a `cpuset`).
fn locality<'a>(node: Node<'a, 'a>) -> Option<Node<'a, 'a>> {
    node.ancestors()
        .skip(1)
        .find(|n| n.has_tag_name("object") && n.attribute("cpuset").is_some())
}

/// The PCIe switch above a `PCIDev`: the `pci_busid` of the second PCI-to-PCI bridge from the
/// top of its chain (the first below the root port), if the chain has one.
fn switch_of(node: Node<'_, '_>) -> Option<String> {
    let mut bridges: Vec<Node<'_, '_>> = node
        .ancestors()
        .skip(1)
        .filter(|n| {
            n.has_tag_name("object")
                && n.attribute("type") == Some("Bridge")
                && n.attribute("bridge_type")
                    .is_some_and(|t| t.starts_with("1-"))
        })
        .collect();
    bridges.reverse();
    bridges
        .get(1)
        .and_then(|b| b.attribute("pci_busid"))
        .map(str::to_lowercase)
}

/// The GPUs of an hwloc XML text; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<Gpus, TopologyError> {
    let err = |reason: String| TopologyError::Xml {
        file: source.to_string(),
        reason,
    };
    let opts = ParsingOptions {
        allow_dtd: true,
        ..ParsingOptions::default()
    };
    let doc = Document::parse_with_options(text, opts).map_err(|e| err(e.to_string()))?;
    let mut found = Vec::new();
    for n in doc
        .descendants()
        .filter(|n| n.has_tag_name("object") && n.attribute("type") == Some("PCIDev"))
    {
        let Some((class, vendor)) = n.attribute("pci_type").and_then(parse_pci_type) else {
            continue;
        };
        let Some(vendor) = GpuVendor::from_pci(vendor) else {
            continue;
        };
        if class >> 8 != 0x03 {
            continue;
        }
        let (mut cpus, mut numa) = (CpuSet::new(), None);
        if let Some(loc) = locality(n) {
            let cs = loc.attribute("cpuset").unwrap_or("");
            cpus = parse_hwloc_mask(cs).map_err(|e| err(format!("cpuset {cs:?}: {e}")))?;
            if let Some(ns) = loc.attribute("nodeset") {
                let nodes =
                    parse_hwloc_mask(ns).map_err(|e| err(format!("nodeset {ns:?}: {e}")))?;
                if nodes.len() == 1 {
                    numa = nodes.first();
                }
            }
        }
        found.push(Gpu {
            id: GpuId(0),
            vendor,
            pci: n.attribute("pci_busid").map(str::to_lowercase),
            switch: switch_of(n),
            numa,
            cpus,
            devices: Vec::new(),
        });
    }
    let gpus = Gpus::numbered(found, Vec::new());
    gpus.validate().map_err(|e| err(e.to_string()))?;
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_types() {
        assert_eq!(
            parse_pci_type("0302 [10de:15f9] [10de:116b] a1"),
            Some((0x0302, 0x10de))
        );
        assert_eq!(parse_pci_type("0604 [1014:03dc]"), Some((0x0604, 0x1014)));
        assert_eq!(parse_pci_type("0302"), None);
        assert_eq!(parse_pci_type("xx [10de:1]"), None);
    }
}
