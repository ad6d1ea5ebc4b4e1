//! GPU discovery from sysfs, `/dev` and `/proc` (all injectable roots).
//!
//! Files read:
//! - `<sys>/bus/pci/devices/<addr>/{class,vendor,numa_node,local_cpulist}`: display controllers
//!   (class `0x03xxxx`) of NVIDIA (`0x10de`), AMD (`0x1002`) and Intel (`0x8086`); `numa_node`
//!   -1 (no node) or missing means unknown, and an empty or missing `local_cpulist` too;
//! - `<sys>/bus/pci/devices/<addr>/drm/{renderD*,card*}`: an AMD or Intel GPU's own nodes
//!   (`<dev>/dri/renderDN`, `<dev>/dri/cardN`);
//! - the link `<sys>/bus/pci/devices/<addr>` itself (`../../../devices/pci0000:00/0000:00:01.0/
//!   0000:01:00.0/0000:02:08.0/0000:03:00.0`): the chain of PCI functions from the root port to
//!   the GPU. The first one below the root port is the upstream port of the PCIe switch the GPU
//!   sits under ([`switch_of_link`]); a GPU on a root port itself, one built into the root
//!   complex, or an entry that is not a link has none;
//! - `<proc>/driver/nvidia/gpus/<addr>/information` (`Device Minor: N`): which `/dev/nvidiaN`
//!   an NVIDIA GPU is; without it the NVIDIA GPUs take minors 0, 1, ... in PCI address order;
//! - `<dev>/...`: each device node's major and minor (`stat`). A node missing under `<dev>` gets
//!   its driver's fixed number where there is one (`nvidiaN` 195:N, `dri/renderDN` and
//!   `dri/cardN` 226:N); the shared control nodes (`nvidiactl`, `nvidia-uvm`,
//!   `nvidia-uvm-tools`, `nvidia-modeset`, `kfd`) are listed only when present.
//!
//! A PCI GPU of an unknown vendor (or none at all) is left out: pjw does not know its device
//! nodes. Such GPUs, or ones sysfs does not show, are declared in the config (`[[gpu]]`).

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use pjw_core::{CpuSet, DeviceNode, Gpu, GpuId, GpuVendor, Gpus};

use crate::sysfs::{io_err, read_opt};
use crate::TopologyError;

/// The NVIDIA driver's character major (`/dev/nvidiaN`, `nvidiactl`, `nvidia-modeset`).
pub const NVIDIA_MAJOR: u32 = 195;
/// The DRM character major (`/dev/dri/*`).
pub const DRM_MAJOR: u32 = 226;

/// A sysfs hex id (`"0x10de\n"`, `"0x030200"`).
pub fn parse_hex(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// A sysfs `numa_node`: `None` for -1 (the device has no node) or text that is not a number.
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The `Device Minor:` of `/proc/driver/nvidia/gpus/<addr>/information`.
pub fn parse_nvidia_minor(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Device Minor:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether `s` is a PCI address: `domain:bb:dd.f` in hex, the domain of 4 digits or more (a
/// VMD domain has 5).
fn is_pci_address(s: &str) -> bool {
    let hex = |t: &str, n: usize| t.len() == n && t.bytes().all(|c| c.is_ascii_hexdigit());
    let mut it = s.splitn(3, ':');
    let (Some(dom), Some(bus), Some(rest)) = (it.next(), it.next(), it.next()) else {
        return false;
    };
    let Some((dev, func)) = rest.split_once('.') else {
        return false;
    };
    dom.len() >= 4 && hex(dom, dom.len()) && hex(bus, 2) && hex(dev, 2) && hex(func, 1)
}

/// Whether `s` is a host bridge's sysfs directory (`pci0000:00`, `pci10000:e0`).
fn is_host_bridge_dir(s: &str) -> bool {
    s.strip_prefix("pci")
        .and_then(|t| t.split_once(':'))
        .is_some_and(|(d, b)| {
            d.len() >= 4
                && b.len() == 2
                && d.bytes().chain(b.bytes()).all(|c| c.is_ascii_hexdigit())
        })
}

/// The PCIe switch of a GPU from the target of its `<sys>/bus/pci/devices/<addr>` link: the
/// PCI functions after the (last) host bridge's `pciDDDD:BB` directory are the root port, the bridges
/// below it and the GPU last; with anything between the root port and the GPU, the first such
/// bridge (the switch's upstream port) names the switch. `None` when the GPU hangs off a root
/// port or the root complex, or the target does not read as such a chain.
///
/// ```
/// use pjw_topology::switch_of_link;
/// let l = "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";
/// assert_eq!(switch_of_link(l).as_deref(), Some("0000:01:00.0"));
/// assert_eq!(switch_of_link("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"), None);
/// ```
pub fn switch_of_link(target: &str) -> Option<String> {
    // The last host bridge: a VMD domain (`pci10000:e0`) sits below a function of another.
    let parts: Vec<&str> = target.split('/').collect();
    let host = parts.iter().rposition(|p| is_host_bridge_dir(p))?;
    let chain: Vec<String> = parts[host + 1..].iter().map(|p| p.to_lowercase()).collect();
    if chain.len() < 3 || !chain.iter().all(|p| is_pci_address(p)) {
        return None;
    }
    Some(chain[1].clone())
}

/// The device node at `<dev>/<rel>`: its real numbers when it exists, `fixed` otherwise (`None`
/// when neither).
fn device_node(
    dev_root: &Path,
    rel: &str,
    fixed: Option<(u32, u32)>,
) -> Result<Option<DeviceNode>, TopologyError> {
    let path = dev_root.join(rel);
    let numbers = match fs::metadata(&path) {
        Ok(m) => {
            let rdev = m.rdev();
            Some((libc::major(rdev), libc::minor(rdev)))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => fixed,
        Err(e) => return Err(io_err(&path, e)),
    };
    Ok(numbers.map(|(major, minor)| DeviceNode {
        path: format!("/dev/{rel}"),
        major,
        minor,
    }))
}

/// The `renderD*` and `card*` entries of a PCI device's `drm` directory.
fn drm_nodes(pci_dir: &Path, dev_root: &Path) -> Result<Vec<DeviceNode>, TopologyError> {
    let dir = pci_dir.join("drm");
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| io_err(&dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let minor = ["renderD", "card"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(minor) = minor {
            if let Some(d) =
                device_node(dev_root, &format!("dri/{name}"), Some((DRM_MAJOR, minor)))?
            {
                out.push(d);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Discover the GPUs below `sys_root` (`/sys`), `dev_root` (`/dev`) and `proc_root` (`/proc`).
pub fn discover(sys_root: &Path, dev_root: &Path, proc_root: &Path) -> Result<Gpus, TopologyError> {
    let pci = sys_root.join("bus/pci/devices");
    let mut scan = Scan {
        dev_root,
        proc_root,
        nvidia_ordinal: 0,
        any_nvidia: false,
        any_amd: false,
    };
    let mut found: Vec<Gpu> = Vec::new();
    for addr in pci_addresses(&pci)? {
        found.extend(scan.gpu(&pci, addr)?);
    }
    let gpus = Gpus::numbered(found, scan.shared_nodes()?);
    gpus.validate().map_err(|source| TopologyError::Invalid {
        origin: "sysfs gpus".into(),
        source,
    })?;
    Ok(gpus)
}

/// The PCI addresses under `<sys>/bus/pci/devices`, lower-case and sorted (none without the
/// directory).
fn pci_addresses(pci: &Path) -> Result<Vec<String>, TopologyError> {
    let mut addrs: Vec<String> = match fs::read_dir(pci) {
        Ok(rd) => {
            let mut v = Vec::new();
            for entry in rd {
                let entry = entry.map_err(|e| io_err(pci, e))?;
                v.push(entry.file_name().to_string_lossy().to_lowercase());
            }
            v
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(pci, e)),
    };
    addrs.sort();
    Ok(addrs)
}

/// A discovery in progress: the roots, and what the GPUs found so far call for.
struct Scan<'a> {
    dev_root: &'a Path,
    proc_root: &'a Path,
    /// The next NVIDIA GPU's device number when the driver does not say it (the GPUs in PCI
    /// order).
    nvidia_ordinal: u32,
    any_nvidia: bool,
    any_amd: bool,
}

impl Scan<'_> {
    /// The GPU at PCI address `addr`, or `None` for a device that is not a display controller
    /// of a known vendor (or an AMD or Intel one without DRM nodes: not a GPU pjw can give).
    fn gpu(&mut self, pci: &Path, addr: String) -> Result<Option<Gpu>, TopologyError> {
        let dir = pci.join(&addr);
        let class = read_opt(&dir.join("class"))?.and_then(|t| parse_hex(&t));
        if class.map(|c| c >> 16) != Some(0x03) {
            return Ok(None);
        }
        let Some(vendor) = read_opt(&dir.join("vendor"))?
            .and_then(|t| parse_hex(&t))
            .and_then(|v| u16::try_from(v).ok())
            .and_then(GpuVendor::from_pci)
        else {
            return Ok(None);
        };
        let numa = read_opt(&dir.join("numa_node"))?.and_then(|t| parse_numa_node(&t));
        let switch = match fs::read_link(&dir) {
            Ok(target) => switch_of_link(&target.to_string_lossy()),
            // Not a link (EINVAL): a tree laid out otherwise, no chain to read.
            Err(e) if e.kind() == ErrorKind::InvalidInput => None,
            Err(e) => return Err(io_err(&dir, e)),
        };
        let cpus = local_cpus(&dir)?;
        let devices = self.devices(&dir, &addr, vendor)?;
        if vendor != GpuVendor::Nvidia && devices.is_empty() {
            return Ok(None);
        }
        Ok(Some(Gpu {
            id: GpuId(0),
            vendor,
            pci: Some(addr),
            switch,
            numa,
            cpus,
            devices,
        }))
    }

    /// The device nodes that open the GPU at `dir`: NVIDIA's `nvidiaN` (N from the driver's
    /// `information` file, else the GPU's ordinal), the DRM nodes of the others.
    fn devices(
        &mut self,
        dir: &Path,
        addr: &str,
        vendor: GpuVendor,
    ) -> Result<Vec<DeviceNode>, TopologyError> {
        Ok(match vendor {
            GpuVendor::Nvidia => {
                self.any_nvidia = true;
                let info = self
                    .proc_root
                    .join(format!("driver/nvidia/gpus/{addr}/information"));
                let minor = read_opt(&info)?
                    .and_then(|t| parse_nvidia_minor(&t))
                    .unwrap_or(self.nvidia_ordinal);
                self.nvidia_ordinal += 1;
                let node = device_node(
                    self.dev_root,
                    &format!("nvidia{minor}"),
                    Some((NVIDIA_MAJOR, minor)),
                )?;
                node.into_iter().collect()
            }
            GpuVendor::Amd => {
                self.any_amd = true;
                drm_nodes(dir, self.dev_root)?
            }
            GpuVendor::Intel => drm_nodes(dir, self.dev_root)?,
        })
    }

    /// The device nodes every GPU job of the vendors found needs (NVIDIA's control and UVM
    /// nodes, AMD's `kfd`), those that exist.
    fn shared_nodes(&self) -> Result<Vec<DeviceNode>, TopologyError> {
        let mut shared = Vec::new();
        if self.any_nvidia {
            for rel in [
                "nvidiactl",
                "nvidia-uvm",
                "nvidia-uvm-tools",
                "nvidia-modeset",
            ] {
                shared.extend(device_node(self.dev_root, rel, None)?);
            }
        }
        if self.any_amd {
            shared.extend(device_node(self.dev_root, "kfd", None)?);
        }
        Ok(shared)
    }
}

/// The CPUs local to the PCI device at `dir` (`local_cpulist`; none without the file).
fn local_cpus(dir: &Path) -> Result<CpuSet, TopologyError> {
    let cpus_path = dir.join("local_cpulist");
    Ok(match read_opt(&cpus_path)? {
        Some(t) => CpuSet::parse_list(&t).map_err(|e| TopologyError::Parse {
            path: cpus_path.clone(),
            text: t.trim().to_string(),
            reason: e.to_string(),
        })?,
        None => CpuSet::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_hex("0x10de\n"), Some(0x10de));
        assert_eq!(parse_hex("0x030200"), Some(0x030200));
        assert_eq!(parse_hex("zz"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node(""), None);
        let info = "Model: \t\t Tesla T4\nIRQ:   \t\t 89\nDevice Minor: \t\t 3\nBus Location: 0000:3b:00.0\n";
        assert_eq!(parse_nvidia_minor(info), Some(3));
        assert_eq!(parse_nvidia_minor("Model: x\n"), None);
    }

    #[test]
    fn the_switch_is_the_first_bridge_below_the_root_port() {
        let t = |l: &str| switch_of_link(l);
        let base = "../../../devices/pci0000:00";
        // Root port 00:01.0, switch upstream port 01:00.0, downstream port 02:08.0, GPU.
        assert_eq!(
            t(&format!(
                "{base}/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0"
            ))
            .as_deref(),
            Some("0000:01:00.0")
        );
        // Two switches deep: the outer one.
        assert_eq!(
            t(&format!("{base}/0000:00:03.0/0000:10:00.0/0000:11:04.0/0000:12:00.0/0000:13:00.0/0000:14:00.0"))
                .as_deref(),
            Some("0000:10:00.0")
        );
        // On a root port, in the root complex: none.
        assert_eq!(t(&format!("{base}/0000:00:01.0/0000:01:00.0")), None);
        assert_eq!(t(&format!("{base}/0000:00:02.0")), None);
        // A VMD domain below a function of domain 0: the chain starts at its own host bridge.
        assert_eq!(
            t(&format!("{base}/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0/10000:e2:00.0/10000:e3:00.0"))
                .as_deref(),
            Some("10000:e1:00.0")
        );
        // Upper case is lowered; what is not a chain of PCI functions is no switch.
        assert_eq!(
            t("/sys/devices/pci0000:3A/0000:3A:00.0/0000:3B:00.0/0000:3C:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(t("../../../devices/platform/gpu0"), None);
        assert_eq!(t(&format!("{base}/0000:00:01.0/usb1/0000:03:00.0")), None);
        assert_eq!(t("0000:01:00.0/0000:02:00.0/0000:03:00.0"), None);
    }
}
