//! GPU discovery from sysfs, `/dev` and `/proc` (all injectable roots).
//!
//! Files read:
//! - `<sys>/bus/pci/devices/<addr>/{class,vendor,numa_node,local_cpulist}`: display controllers
//!   (class `0x03xxxx`) of NVIDIA (`0x10de`), AMD (`0x1002`) and Intel (`0x8086`); `numa_node`
//!   -1 (no node) or missing means unknown, and an empty or missing `local_cpulist` too;
//! - `<sys>/bus/pci/devices/<addr>/drm/{renderD*,card*}`: an AMD or Intel GPU's own nodes
//!   (`<dev>/dri/renderDN`, `<dev>/dri/cardN`);
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
    let mut addrs: Vec<String> = match fs::read_dir(&pci) {
        Ok(rd) => {
            let mut v = Vec::new();
            for entry in rd {
                let entry = entry.map_err(|e| io_err(&pci, e))?;
                v.push(entry.file_name().to_string_lossy().to_lowercase());
            }
            v
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(&pci, e)),
    };
    addrs.sort();
    let mut found: Vec<Gpu> = Vec::new();
    let mut nvidia_ordinal = 0u32;
    let (mut any_nvidia, mut any_amd) = (false, false);
    for addr in addrs {
        let dir = pci.join(&addr);
        let class = read_opt(&dir.join("class"))?.and_then(|t| parse_hex(&t));
        if class.map(|c| c >> 16) != Some(0x03) {
            continue;
        }
        let Some(vendor) = read_opt(&dir.join("vendor"))?
            .and_then(|t| parse_hex(&t))
            .and_then(|v| u16::try_from(v).ok())
            .and_then(GpuVendor::from_pci)
        else {
            continue;
        };
        let numa = read_opt(&dir.join("numa_node"))?.and_then(|t| parse_numa_node(&t));
        let cpus_path = dir.join("local_cpulist");
        let cpus = match read_opt(&cpus_path)? {
            Some(t) => CpuSet::parse_list(&t).map_err(|e| TopologyError::Parse {
                path: cpus_path.clone(),
                text: t.trim().to_string(),
                reason: e.to_string(),
            })?,
            None => CpuSet::new(),
        };
        let devices = match vendor {
            GpuVendor::Nvidia => {
                any_nvidia = true;
                let info = proc_root.join(format!("driver/nvidia/gpus/{addr}/information"));
                let minor = read_opt(&info)?
                    .and_then(|t| parse_nvidia_minor(&t))
                    .unwrap_or(nvidia_ordinal);
                nvidia_ordinal += 1;
                let node = device_node(
                    dev_root,
                    &format!("nvidia{minor}"),
                    Some((NVIDIA_MAJOR, minor)),
                )?;
                node.into_iter().collect()
            }
            GpuVendor::Amd => {
                any_amd = true;
                drm_nodes(&dir, dev_root)?
            }
            GpuVendor::Intel => drm_nodes(&dir, dev_root)?,
        };
        if vendor != GpuVendor::Nvidia && devices.is_empty() {
            // An AMD or Intel display controller without DRM nodes is not a GPU pjw can give.
            continue;
        }
        found.push(Gpu {
            id: GpuId(0),
            vendor,
            pci: Some(addr),
            numa,
            cpus,
            devices,
        });
    }
    let mut shared = Vec::new();
    if any_nvidia {
        for rel in [
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "nvidia-modeset",
        ] {
            shared.extend(device_node(dev_root, rel, None)?);
        }
    }
    if any_amd {
        shared.extend(device_node(dev_root, "kfd", None)?);
    }
    let gpus = Gpus::numbered(found, shared);
    gpus.validate().map_err(|source| TopologyError::Invalid {
        origin: "sysfs gpus".into(),
        source,
    })?;
    Ok(gpus)
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
}
