//! The node's GPUs at start: the ones `[gpus]` declares (their device numbers read with `stat`),
//! or else the ones discovery finds below `[paths] sys`, `dev` and `proc`.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use pjw_core::{CpuSet, DeviceNode, Gpu, GpuId, Gpus, Topology};

use crate::config::{Config, GpuConfig};
use crate::DaemonError;

/// The character device at `path` (refused if it is anything else or is missing).
fn char_device(path: &Path, key: &str) -> Result<DeviceNode, DaemonError> {
    let m = std::fs::metadata(path).map_err(|e| DaemonError::Gpus {
        key: key.to_string(),
        reason: format!("{}: {e}", path.display()),
    })?;
    if !m.file_type().is_char_device() {
        return Err(DaemonError::Gpus {
            key: key.to_string(),
            reason: format!("{} is not a character device", path.display()),
        });
    }
    Ok(DeviceNode {
        path: path.display().to_string(),
        major: rustix::fs::major(m.rdev()),
        minor: rustix::fs::minor(m.rdev()),
    })
}

/// The GPUs declared in `g`, with local CPUs from `topo` where only a NUMA node is given.
pub fn declared(g: &GpuConfig, topo: &Topology) -> Result<Gpus, DaemonError> {
    let mut out = Vec::new();
    for (i, d) in g.declared.iter().enumerate() {
        let dev = char_device(&d.file, &format!("device[{i}].file"))?;
        let cpus = match (d.cpus, d.numa) {
            (Some(c), _) => c,
            (None, Some(n)) => topo
                .numa_nodes
                .iter()
                .find(|x| x.os == n)
                .map(|x| x.cpus)
                .ok_or_else(|| DaemonError::Gpus {
                    key: format!("device[{i}].numa"),
                    reason: format!("this machine has no NUMA node {n}"),
                })?,
            (None, None) => CpuSet::new(),
        };
        out.push(Gpu {
            id: GpuId(i as u32),
            vendor: d.vendor,
            pci: d.pci.clone(),
            switch: d.switch.clone(),
            numa: d.numa,
            cpus,
            devices: vec![dev],
        });
    }
    // Declared GPUs keep the order they are written in (as gres.conf's do).
    Ok(Gpus {
        gpus: out,
        shared: Vec::new(),
    })
}

/// The node's GPUs as `cfg` says: declared, discovered, or none.
pub fn resolve(cfg: &Config, topo: &Topology) -> Result<Gpus, DaemonError> {
    let g = &cfg.gpus;
    let mut gpus = if !g.declared.is_empty() {
        declared(g, topo)?
    } else if g.discover {
        pjw_topology::discover_gpus(&cfg.sys_root, &cfg.dev_root, &cfg.proc_root)?
    } else {
        Gpus::none()
    };
    if let Some(shared) = &g.shared {
        gpus.shared = shared
            .iter()
            .map(|p| char_device(p, "shared"))
            .collect::<Result<_, _>>()?;
    }
    gpus.validate().map_err(DaemonError::GpuSet)?;
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    #[test]
    fn a_declared_gpu_must_be_a_character_device() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("nvidia0");
        std::fs::write(&f, "").unwrap();
        let text = format!(
            "[[gpus.device]]\nfile = \"{}\"\nvendor = \"nvidia\"\nnuma = 0\n",
            f.display()
        );
        let cfg = Config::parse("t.toml", &text, &Overrides::default()).unwrap();
        let topo = pjw_core::synthetic::parse("numa:2 core:2").unwrap();
        let err = resolve(&cfg, &topo).unwrap_err().to_string();
        assert!(err.contains("is not a character device"), "{err}");
        let missing = Config::parse(
            "t.toml",
            "[[gpus.device]]\nfile = \"/nonexistent/nvidia9\"\nvendor = \"nvidia\"\n",
            &Overrides::default(),
        )
        .unwrap();
        let err = resolve(&missing, &topo).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/nvidia9"), "{err}");
    }

    #[test]
    fn a_declared_switch_is_the_gpus() {
        // /dev/null stands in for a GPU's character device.
        let text = "[[gpus.device]]\nfile = \"/dev/null\"\nvendor = \"nvidia\"\nswitch = \"0000:3A:00.0\"\n\
                    [[gpus.device]]\nfile = \"/dev/zero\"\nvendor = \"nvidia\"\n";
        let cfg = Config::parse("t.toml", text, &Overrides::default()).unwrap();
        let topo = pjw_core::synthetic::parse("numa:2 core:2").unwrap();
        let g = resolve(&cfg, &topo).unwrap();
        assert_eq!(g.gpus[0].switch.as_deref(), Some("0000:3a:00.0"));
        assert_eq!(g.gpus[1].switch, None);
    }

    #[test]
    fn discovery_reads_the_configured_roots_and_can_be_off() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("sys/bus/pci/devices/0000:01:00.0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("class"), "0x030200\n").unwrap();
        std::fs::write(d.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(d.join("numa_node"), "1\n").unwrap();
        let text = format!(
            "[paths]\nsys = \"{0}/sys\"\ndev = \"{0}/dev\"\nproc = \"{0}/proc\"\n",
            tmp.path().display()
        );
        let topo = pjw_core::synthetic::parse("numa:2 core:2").unwrap();
        let cfg = Config::parse("t.toml", &text, &Overrides::default()).unwrap();
        let g = resolve(&cfg, &topo).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g.gpus[0].numa, Some(1));
        assert_eq!(g.gpus[0].devices[0].path, "/dev/nvidia0");
        let off = format!("{text}[gpus]\ndiscover = false\n");
        let cfg = Config::parse("t.toml", &off, &Overrides::default()).unwrap();
        assert!(resolve(&cfg, &topo).unwrap().is_empty());
    }
}
