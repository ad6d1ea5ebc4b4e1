//! The GPUs of a node: what they are, where they sit, which device nodes open them.
//!
//! A [`Gpu`] is plain data, built by the readers in `pjw-topology` (sysfs and `/dev`, hwloc XML)
//! or declared in the daemon's config. GPUs are numbered by pjw ([`GpuId`]) in the order of their
//! PCI address, which is the order `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes the CUDA runtime use; a
//! [`GpuSet`] is a set of those ids (at most [`MAX_GPUS`]).

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::{CoreError, CpuSet};

/// Most GPUs one node may have (the width of a [`GpuSet`]).
pub const MAX_GPUS: u32 = 64;

/// pjw's number of a GPU on this node, 0-based in PCI address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuId(pub u32);

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A set of [`GpuId`]s; serialized in the kernel list format (`"0-2,5"`), like a CPU set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpuSet(u64);

impl Serialize for GpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        GpuSet::parse_list(&s).map_err(serde::de::Error::custom)
    }
}

impl GpuSet {
    /// The empty set.
    pub fn new() -> GpuSet {
        GpuSet(0)
    }

    /// Ids `0..n`.
    pub fn first_n(n: u32) -> GpuSet {
        if n >= MAX_GPUS {
            GpuSet(u64::MAX)
        } else {
            GpuSet((1u64 << n) - 1)
        }
    }

    /// Add `id`; ids past [`MAX_GPUS`] are refused.
    pub fn try_insert(&mut self, id: GpuId) -> Result<(), CoreError> {
        if id.0 >= MAX_GPUS {
            return Err(CoreError::BadGpu {
                text: id.to_string(),
                reason: format!("pjw handles gpus 0-{}", MAX_GPUS - 1),
            });
        }
        self.0 |= 1 << id.0;
        Ok(())
    }

    /// Add `id` (ignored past [`MAX_GPUS`]; use [`GpuSet::try_insert`] on untrusted input).
    pub fn insert(&mut self, id: GpuId) {
        let _ = self.try_insert(id);
    }

    pub fn remove(&mut self, id: GpuId) {
        if id.0 < MAX_GPUS {
            self.0 &= !(1 << id.0);
        }
    }

    pub fn contains(&self, id: GpuId) -> bool {
        id.0 < MAX_GPUS && self.0 & (1 << id.0) != 0
    }

    pub fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    pub fn union(&self, other: &GpuSet) -> GpuSet {
        GpuSet(self.0 | other.0)
    }

    pub fn intersection(&self, other: &GpuSet) -> GpuSet {
        GpuSet(self.0 & other.0)
    }

    pub fn difference(&self, other: &GpuSet) -> GpuSet {
        GpuSet(self.0 & !other.0)
    }

    pub fn intersects(&self, other: &GpuSet) -> bool {
        self.0 & other.0 != 0
    }

    /// The ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = GpuId> + '_ {
        let bits = self.0;
        (0..MAX_GPUS)
            .filter(move |i| bits & (1 << i) != 0)
            .map(GpuId)
    }

    /// Parse a kernel-style list ("0-2,5"; "" is empty).
    pub fn parse_list(text: &str) -> Result<GpuSet, CoreError> {
        let bad = |reason: String| CoreError::BadGpu {
            text: text.trim().to_string(),
            reason,
        };
        let cpus = CpuSet::parse_list(text).map_err(|e| bad(e.to_string()))?;
        let mut out = GpuSet::new();
        for c in cpus.iter() {
            out.try_insert(GpuId(c)).map_err(|e| bad(e.to_string()))?;
        }
        Ok(out)
    }
}

impl FromIterator<GpuId> for GpuSet {
    fn from_iter<I: IntoIterator<Item = GpuId>>(iter: I) -> GpuSet {
        let mut s = GpuSet::new();
        for id in iter {
            s.insert(id);
        }
        s
    }
}

/// Kernel list format ("0-2,5").
impl fmt::Display for GpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus: CpuSet = self.iter().map(|g| g.0).collect();
        write!(f, "{cpus}")
    }
}

/// Who made a GPU: decides its device nodes and its runtime's environment variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    Nvidia,
    Amd,
    Intel,
}

impl GpuVendor {
    /// The vendor of a PCI vendor id (`0x10de`, `0x1002`, `0x8086`).
    pub fn from_pci(vendor: u16) -> Option<GpuVendor> {
        match vendor {
            0x10de => Some(GpuVendor::Nvidia),
            0x1002 => Some(GpuVendor::Amd),
            0x8086 => Some(GpuVendor::Intel),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => "nvidia",
            GpuVendor::Amd => "amd",
            GpuVendor::Intel => "intel",
        }
    }
}

/// A character device node a process opens to use a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceNode {
    /// Its path (`/dev/nvidia0`, `/dev/dri/renderD128`).
    pub path: String,
    pub major: u32,
    pub minor: u32,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub id: GpuId,
    pub vendor: GpuVendor,
    /// PCI address, `domain:bus:device.function` in lower case, if known.
    pub pci: Option<String>,
    /// The NUMA node it is attached to; `None` when the kernel says -1 or nothing.
    pub numa: Option<u32>,
    /// The PCIe switch it sits below: the PCI address of the first bridge below its root port
    /// (the switch's upstream port), lower case. `None` for a GPU directly on a root port (or
    /// built into the root complex) and when unknown. GPUs of one switch talk to each other
    /// without crossing the root complex; [`crate::gpu_alloc::place`] keeps a multi-GPU job's
    /// GPUs under the fewest switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    /// CPUs local to it (`local_cpulist`); empty when unknown.
    pub cpus: CpuSet,
    /// The device nodes that open this GPU alone (`/dev/nvidia0`; an AMD or Intel GPU's render
    /// node). Shared control nodes are in [`Gpus::shared`].
    pub devices: Vec<DeviceNode>,
}

/// The GPUs of a node, and the control nodes every GPU job may open.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpus {
    /// Sorted by id; ids are `0..len`.
    pub gpus: Vec<Gpu>,
    /// Shared control nodes (`/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`,
    /// `/dev/nvidia-modeset`, `/dev/kfd`).
    pub shared: Vec<DeviceNode>,
}

impl Gpus {
    /// No GPUs.
    pub fn none() -> Gpus {
        Gpus::default()
    }

    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// Every GPU's id.
    pub fn all(&self) -> GpuSet {
        self.gpus.iter().map(|g| g.id).collect()
    }

    pub fn get(&self, id: GpuId) -> Option<&Gpu> {
        self.gpus.get(id.0 as usize).filter(|g| g.id == id)
    }

    /// Check the invariants: ids `0..len` in order, at most [`MAX_GPUS`], no device node used by
    /// two GPUs or by a GPU and the shared set.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.gpus.len() > MAX_GPUS as usize {
            return Err(CoreError::BadGpu {
                text: self.gpus.len().to_string(),
                reason: format!("at most {MAX_GPUS} gpus per node"),
            });
        }
        let mut seen: Vec<(u32, u32)> = Vec::new();
        for (i, g) in self.gpus.iter().enumerate() {
            if g.id.0 as usize != i {
                return Err(CoreError::BadGpu {
                    text: g.id.to_string(),
                    reason: format!("gpu ids must be 0..{} in order", self.gpus.len()),
                });
            }
            for d in &g.devices {
                if seen.contains(&(d.major, d.minor)) {
                    return Err(CoreError::BadGpu {
                        text: d.path.clone(),
                        reason: format!("device {}:{} belongs to two gpus", d.major, d.minor),
                    });
                }
                seen.push((d.major, d.minor));
            }
        }
        for d in &self.shared {
            if seen.contains(&(d.major, d.minor)) {
                return Err(CoreError::BadGpu {
                    text: d.path.clone(),
                    reason: "a gpu's own device cannot also be a shared control node".into(),
                });
            }
        }
        Ok(())
    }

    /// Number a list of GPUs found in any order: sorted by PCI address (those without one last,
    /// in the order given), ids `0..len`.
    pub fn numbered(mut gpus: Vec<Gpu>, shared: Vec<DeviceNode>) -> Gpus {
        gpus.sort_by(|a, b| match (&a.pci, &b.pci) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        for (i, g) in gpus.iter_mut().enumerate() {
            g.id = GpuId(i as u32);
        }
        let mut shared = shared;
        shared.sort();
        shared.dedup();
        Gpus { gpus, shared }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(pci: Option<&str>) -> Gpu {
        Gpu {
            id: GpuId(9),
            vendor: GpuVendor::Nvidia,
            pci: pci.map(str::to_string),
            switch: None,
            numa: None,
            cpus: CpuSet::new(),
            devices: Vec::new(),
        }
    }

    #[test]
    fn gpu_sets_parse_print_and_combine() {
        let s = GpuSet::parse_list("0-2,5").unwrap();
        assert_eq!(s.to_string(), "0-2,5");
        assert_eq!(s.len(), 4);
        assert!(s.contains(GpuId(5)) && !s.contains(GpuId(3)));
        let t = GpuSet::parse_list("2,3").unwrap();
        assert_eq!(s.intersection(&t).to_string(), "2");
        assert_eq!(s.difference(&t).to_string(), "0-1,5");
        assert_eq!(s.union(&t).to_string(), "0-3,5");
        assert_eq!(GpuSet::first_n(3).to_string(), "0-2");
        assert!(GpuSet::parse_list("64").is_err());
        assert!(GpuSet::parse_list("x").is_err());
        assert_eq!(GpuSet::parse_list("").unwrap(), GpuSet::new());
    }

    #[test]
    fn gpus_are_numbered_by_pci_address() {
        let g = Gpus::numbered(
            vec![
                gpu(None),
                gpu(Some("0000:81:00.0")),
                gpu(Some("0000:01:00.0")),
            ],
            vec![],
        );
        let pcis: Vec<Option<&str>> = g.gpus.iter().map(|g| g.pci.as_deref()).collect();
        assert_eq!(pcis, [Some("0000:01:00.0"), Some("0000:81:00.0"), None]);
        assert_eq!(g.all().to_string(), "0-2");
        g.validate().unwrap();
    }

    #[test]
    fn a_gpu_without_a_switch_serialises_as_before() {
        // The form written before GPUs had a switch loads, and a GPU under none writes it.
        let old =
            r#"{"id":0,"vendor":"nvidia","pci":"0000:01:00.0","numa":0,"cpus":"0-3","devices":[]}"#;
        let g: Gpu = serde_json::from_str(old).unwrap();
        assert_eq!(g.switch, None);
        assert_eq!(serde_json::to_string(&g).unwrap(), old);
        let mut s = g.clone();
        s.switch = Some("0000:00:01.0".into());
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains(r#""switch":"0000:00:01.0""#), "{text}");
        assert_eq!(serde_json::from_str::<Gpu>(&text).unwrap(), s);
    }

    #[test]
    fn a_device_node_shared_by_two_gpus_is_refused() {
        let dev = DeviceNode {
            path: "/dev/nvidia0".into(),
            major: 195,
            minor: 0,
        };
        let mut a = gpu(Some("0000:01:00.0"));
        a.devices.push(dev.clone());
        let mut b = gpu(Some("0000:02:00.0"));
        b.devices.push(dev.clone());
        let err = Gpus::numbered(vec![a.clone(), b], vec![])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("belongs to two gpus"), "{err}");
        let err = Gpus::numbered(vec![a], vec![dev]).validate().unwrap_err();
        assert!(err.to_string().contains("shared control node"), "{err}");
    }
}
