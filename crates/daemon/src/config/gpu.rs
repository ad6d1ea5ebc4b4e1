//! `[gpus]`: whether the node's GPUs are discovered, GPUs declared by hand (as Slurm's
//! gres.conf `File=` lines) and the cores kept for GPU jobs.

use std::path::PathBuf;

use pjw_core::gpu_alloc::{Locality, PlacementRule};
use pjw_core::{CpuSet, GpuVendor, MAX_GPUS};
use serde::Deserialize;

use super::{ConfigError, Errs};

/// `[gpus]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpus {
    pub discover: Option<bool>,
    pub nvml: Option<bool>,
    pub reserve_cores_per_gpu: Option<u32>,
    pub locality: Option<String>,
    pub placement: Option<String>,
    pub require_wait_secs: Option<u64>,
    pub shared: Option<Vec<PathBuf>>,
    #[serde(default)]
    pub device: Vec<RawGpuDevice>,
}

/// One `[[gpus.device]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpuDevice {
    pub file: Option<PathBuf>,
    pub vendor: Option<String>,
    pub numa: Option<u32>,
    pub cpus: Option<String>,
    pub pci: Option<String>,
    pub switch: Option<String>,
}

/// A GPU declared in the config; its device numbers are read at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredGpu {
    /// Its device node (absolute).
    pub file: PathBuf,
    pub vendor: GpuVendor,
    pub numa: Option<u32>,
    /// Its local CPUs; `None`: those of `numa` (every CPU when that is unknown too).
    pub cpus: Option<CpuSet>,
    pub pci: Option<String>,
    /// The PCIe switch it sits below (its upstream port's PCI address, lower case); GPUs
    /// declaring one switch are kept together for multi-GPU jobs.
    pub switch: Option<String>,
}

/// The validated `[gpus]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuConfig {
    /// Read the GPUs from sysfs and `/dev` (ignored when `declared` is not empty).
    pub discover: bool,
    /// Sample each NVIDIA GPU job's utilisation and memory through NVML (loaded at run time;
    /// nothing is sampled where it is absent).
    pub nvml: bool,
    /// Cores of each free GPU's local CPUs that CPU-only jobs may not take.
    pub reserve_cores_per_gpu: u32,
    /// Whether a GPU job may start with CPUs not local to its GPUs (`prefer`) or waits for
    /// local ones (`require`).
    pub locality: Locality,
    /// Which rule picks among the placements that fit: `keep-gpu-cpus` (CPU-only jobs keep off
    /// the CPUs local to free GPUs while others are free) or `fewest-stranded` (every choice
    /// the one leaving the fewest free GPUs without a free local CPU).
    pub placement: PlacementRule,
    /// Under `require`, how long a GPU job waits for local CPUs before it takes far ones
    /// (seconds; 0: as long as it takes).
    pub require_wait_secs: u64,
    /// The shared control nodes, instead of the discovered ones.
    pub shared: Option<Vec<PathBuf>>,
    /// GPUs declared by hand: when any is, they are the node's GPUs and nothing is discovered.
    pub declared: Vec<DeclaredGpu>,
}

impl Default for GpuConfig {
    fn default() -> GpuConfig {
        GpuConfig {
            discover: true,
            nvml: true,
            reserve_cores_per_gpu: 0,
            locality: Locality::Prefer,
            placement: PlacementRule::KeepGpuCpus,
            require_wait_secs: DEFAULT_REQUIRE_WAIT_SECS,
            shared: None,
            declared: Vec::new(),
        }
    }
}

/// `[gpus] require_wait_secs` by default: ten minutes.
pub const DEFAULT_REQUIRE_WAIT_SECS: u64 = 600;
/// Its largest value: thirty days.
const MAX_REQUIRE_WAIT_SECS: u64 = 30 * 86_400;

fn is_pci_address(s: &str) -> bool {
    // dddd:bb:dd.f
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10].contains(&i) || c.is_ascii_hexdigit())
}

/// Validate `[gpus]`.
pub(super) fn parse(g: RawGpus, e: Errs) -> Result<GpuConfig, ConfigError> {
    let reserve = g.reserve_cores_per_gpu.unwrap_or(0);
    if reserve > 64 {
        return Err(e.at(
            "gpus.reserve_cores_per_gpu",
            format!("{reserve} is not 0-64"),
        ));
    }
    let locality = match g.locality.as_deref() {
        None => Locality::Prefer,
        Some(l) => Locality::parse(l).ok_or_else(|| {
            e.at(
                "gpus.locality",
                format!("{l:?} is not one of \"prefer\", \"require\""),
            )
        })?,
    };
    let placement = match g.placement.as_deref() {
        None => PlacementRule::KeepGpuCpus,
        Some(p) => PlacementRule::parse(p).ok_or_else(|| {
            e.at(
                "gpus.placement",
                format!("{p:?} is not one of \"keep-gpu-cpus\", \"fewest-stranded\""),
            )
        })?,
    };
    let require_wait_secs = g.require_wait_secs.unwrap_or(DEFAULT_REQUIRE_WAIT_SECS);
    if require_wait_secs > MAX_REQUIRE_WAIT_SECS {
        return Err(e.at(
            "gpus.require_wait_secs",
            format!("{require_wait_secs} is not 0 (no bound) to {MAX_REQUIRE_WAIT_SECS}"),
        ));
    }
    if let Some(shared) = &g.shared {
        for p in shared {
            if !p.is_absolute() {
                return Err(e.at("gpus.shared", format!("{} is not absolute", p.display())));
            }
        }
    }
    if g.device.len() > MAX_GPUS as usize {
        return Err(e.at(
            "gpus.device",
            format!("{} gpus declared, at most {MAX_GPUS}", g.device.len()),
        ));
    }
    let mut declared: Vec<DeclaredGpu> = Vec::new();
    for (i, d) in g.device.into_iter().enumerate() {
        let gpu = parse_device(&format!("gpus.device[{i}]"), d, &declared, e)?;
        declared.push(gpu);
    }
    Ok(GpuConfig {
        discover: g.discover.unwrap_or(true),
        nvml: g.nvml.unwrap_or(true),
        reserve_cores_per_gpu: reserve,
        locality,
        placement,
        require_wait_secs,
        shared: g.shared,
        declared,
    })
}

/// Validate one `[[gpus.device]]` (`key` names it), against those `declared` before it.
fn parse_device(
    key: &str,
    d: RawGpuDevice,
    declared: &[DeclaredGpu],
    e: Errs,
) -> Result<DeclaredGpu, ConfigError> {
    let Some(file) = d.file else {
        return Err(e.at(&format!("{key}.file"), "missing".into()));
    };
    if !file.is_absolute() {
        return Err(e.at(
            &format!("{key}.file"),
            format!("{} is not absolute", file.display()),
        ));
    }
    if declared.iter().any(|x| x.file == file) {
        return Err(e.at(
            &format!("{key}.file"),
            format!("{} is declared twice", file.display()),
        ));
    }
    let vendor = match d.vendor.as_deref() {
        Some("nvidia") => GpuVendor::Nvidia,
        Some("amd") => GpuVendor::Amd,
        Some("intel") => GpuVendor::Intel,
        Some(v) => {
            return Err(e.at(
                &format!("{key}.vendor"),
                format!("{v:?} is not one of \"nvidia\", \"amd\", \"intel\""),
            ))
        }
        None => return Err(e.at(&format!("{key}.vendor"), "missing".into())),
    };
    if let Some(n) = d.numa {
        if n as usize >= pjw_core::MAX_CPUS {
            return Err(e.at(&format!("{key}.numa"), format!("{n} is out of range")));
        }
    }
    let cpus = d
        .cpus
        .as_deref()
        .map(|c| CpuSet::parse_list(c).map_err(|x| e.at(&format!("{key}.cpus"), x.to_string())))
        .transpose()?;
    if cpus.is_some_and(|c| c.is_empty()) {
        return Err(e.at(&format!("{key}.cpus"), "is empty".into()));
    }
    let pci = match d.pci {
        Some(p) if !is_pci_address(&p.to_lowercase()) => {
            return Err(e.at(
                &format!("{key}.pci"),
                format!("{p:?} is not a PCI address like \"0000:3b:00.0\""),
            ))
        }
        p => p.map(|p| p.to_lowercase()),
    };
    let switch = match d.switch {
        Some(p) if !is_pci_address(&p.to_lowercase()) => {
            return Err(e.at(
                &format!("{key}.switch"),
                format!(
                    "{p:?} is not a PCI address like \"0000:02:00.0\" (the switch's upstream port)"
                ),
            ))
        }
        p => p.map(|p| p.to_lowercase()),
    };
    Ok(DeclaredGpu {
        file,
        vendor,
        numa: d.numa,
        cpus,
        pci,
        switch,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};
    use pjw_core::gpu_alloc::Locality;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse("t.toml", text, &Overrides::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_discover_and_reserve_nothing() {
        let c = parse("").unwrap();
        assert!(c.gpus.discover);
        assert_eq!(c.gpus.reserve_cores_per_gpu, 0);
        assert_eq!(c.gpus.locality, Locality::Prefer);
        assert_eq!(c.gpus.require_wait_secs, 600);
        assert!(c.gpus.declared.is_empty());
        assert_eq!(c.dev_root, std::path::PathBuf::from("/dev"));
        // NVML sampling is on unless turned off (it costs nothing where NVML is absent).
        assert!(c.gpus.nvml);
        assert!(!parse("[gpus]\nnvml = false\n").unwrap().gpus.nvml);
        assert!(parse("[gpus]\nnvml = \"yes\"\n").is_err());
    }

    #[test]
    fn declared_gpus_are_validated() {
        let c = parse(
            "[paths]\ndev = \"/tmp/dev\"\n[gpus]\nreserve_cores_per_gpu = 2\nlocality = \"require\"\n\
             [[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\nnuma = 0\n\
             [[gpus.device]]\nfile = \"/dev/dri/renderD128\"\nvendor = \"amd\"\ncpus = \"4-7\"\npci = \"0000:C1:00.0\"\nswitch = \"0000:C0:01.0\"\n",
        )
        .unwrap();
        assert_eq!(c.dev_root, std::path::PathBuf::from("/tmp/dev"));
        assert_eq!(c.gpus.reserve_cores_per_gpu, 2);
        assert_eq!(c.gpus.locality, Locality::Require);
        assert_eq!(
            parse("[gpus]\nrequire_wait_secs = 0\n")
                .unwrap()
                .gpus
                .require_wait_secs,
            0
        );
        assert_eq!(c.gpus.declared.len(), 2);
        assert_eq!(c.gpus.declared[0].numa, Some(0));
        assert_eq!(c.gpus.declared[1].cpus.unwrap().to_string(), "4-7");
        assert_eq!(c.gpus.declared[1].pci.as_deref(), Some("0000:c1:00.0"));
        assert_eq!(c.gpus.declared[0].switch, None);
        assert_eq!(c.gpus.declared[1].switch.as_deref(), Some("0000:c0:01.0"));
        let table = [
            ("[gpus]\nreserve_cores_per_gpu = 65\n", "gpus.reserve_cores_per_gpu: 65 is not 0-64"),
            ("[gpus]\nlocality = \"strict\"\n", "gpus.locality: \"strict\" is not one of \"prefer\", \"require\""),
            ("[gpus]\nrequire_wait_secs = 2592001\n", "gpus.require_wait_secs: 2592001 is not 0 (no bound) to 2592000"),
            ("[gpus]\nshared = [\"nvidiactl\"]\n", "gpus.shared: nvidiactl is not absolute"),
            ("[[gpus.device]]\nvendor = \"nvidia\"\n", "gpus.device[0].file: missing"),
            ("[[gpus.device]]\nfile = \"nvidia0\"\nvendor = \"nvidia\"\n", "gpus.device[0].file: nvidia0 is not absolute"),
            ("[[gpus.device]]\nfile = \"/dev/nvidia0\"\n", "gpus.device[0].vendor: missing"),
            ("[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"ati\"\n", "gpus.device[0].vendor: \"ati\" is not one of"),
            ("[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\ncpus = \"x\"\n", "gpus.device[0].cpus: invalid cpu list"),
            ("[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\npci = \"01:00.0\"\n", "gpus.device[0].pci: \"01:00.0\" is not a PCI address"),
            ("[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\nswitch = \"plx0\"\n", "gpus.device[0].switch: \"plx0\" is not a PCI address"),
            (
                "[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\n[[gpus.device]]\nfile = \"/dev/nvidia0\"\nvendor = \"nvidia\"\n",
                "gpus.device[1].file: /dev/nvidia0 is declared twice",
            ),
            ("[gpus]\nbogus = 1\n", "unknown field `bogus`"),
        ];
        for (text, want) in table {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err} (wanted {want:?})");
        }
    }

    #[test]
    fn placement_keeps_gpu_cpus_unless_fewest_stranded_is_asked() {
        use pjw_core::gpu_alloc::PlacementRule;
        assert_eq!(
            parse("").unwrap().gpus.placement,
            PlacementRule::KeepGpuCpus
        );
        for (value, want) in [
            ("keep-gpu-cpus", PlacementRule::KeepGpuCpus),
            ("fewest-stranded", PlacementRule::FewestStranded),
        ] {
            let c = parse(&format!("[gpus]\nplacement = \"{value}\"\n")).unwrap();
            assert_eq!(c.gpus.placement, want, "{value}");
        }
        let err = parse("[gpus]\nplacement = \"stranded\"\n").unwrap_err();
        assert!(
            err.contains(
                "gpus.placement: \"stranded\" is not one of \"keep-gpu-cpus\", \"fewest-stranded\""
            ),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}
