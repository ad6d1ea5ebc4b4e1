//! pjw-topology: build a [`pjw_core::Topology`] from the running machine or from a file.
//!
//! API CONTRACT (the CLI and daemon use these; keep them, add freely):
//! - [`discover`]: read `<sys_root>/devices/system/cpu/...` and `<sys_root>/devices/system/node/...`;
//!   `allowed` = CPUs the process may use, read from `<proc_root>/self/status` (`Cpus_allowed_list`).
//! - [`load_xml`] / [`parse_xml`]: hwloc XML v2.
//! - [`render`]: the text `pjw topology` prints.
//! - [`discover_gpus`] (`<sys>/bus/pci`, `<dev>`, `<proc>/driver/nvidia`), [`load_xml_gpus`] /
//!   [`parse_xml_gpus`]: the node's GPUs; [`render_gpus`]: them under their NUMA nodes.
//!
//! pjw reads the few sysfs files it needs itself instead of linking libhwloc: the binary stays a
//! static executable without libhwloc, and every root is injectable so tests run on fake trees. hwloc XML is
//! read only as a data format (the topology corpus, the simulator), never through hwloc.
//!
//! Domain ids in the result are unique within their level across the whole machine: the kernel's
//! `core_id` and hwloc's Core `os_index` repeat per package, so ids are assigned by distinct CPU
//! sets, numbered in the order of their lowest CPU.
//!
//! ```
//! let topo = pjw_topology::parse_xml(
//!     r#"<topology version="2.0">
//!          <object type="Machine" os_index="0" cpuset="0x3" complete_cpuset="0x3" allowed_cpuset="0x3">
//!            <object type="NUMANode" os_index="0" cpuset="0x3" local_memory="1073741824"/>
//!            <object type="Package" os_index="0" cpuset="0x3">
//!              <object type="Core" os_index="0" cpuset="0x3">
//!                <object type="PU" os_index="0" cpuset="0x1"/>
//!                <object type="PU" os_index="1" cpuset="0x2"/>
//!              </object>
//!            </object>
//!          </object>
//!        </topology>"#,
//!     "tiny.xml",
//! )
//! .unwrap();
//! assert_eq!(topo.pus.len(), 2);
//! assert_eq!(topo.smt_width(), 2);
//! print!("{}", pjw_topology::render(&topo));
//! ```

// Issue 29's lints, on where they pass (decisions (cg)); the workspace takes them once every
// crate does.
#![warn(missing_docs)]
#![warn(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]
use pjw_core::{CoreError, Topology};
use std::path::{Path, PathBuf};

mod gpu;
mod render;
mod sysfs;
mod xml;
mod xml_gpu;

pub use gpu::{
    parse_hex, parse_numa_node, parse_nvidia_minor, switch_of_link, DRM_MAJOR, NVIDIA_MAJOR,
};
pub use xml::parse_hwloc_mask;
pub use xml_gpu::parse_pci_type;

/// One error enum for the crate; I/O errors carry the path.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file or directory that could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A kernel file whose contents do not parse.
    #[error("{path}: unexpected contents {text:?}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it holds (the line that does not parse).
        text: String,
        /// Why it does not parse.
        reason: String,
    },
    /// No CPU found where the kernel lists them.
    #[error("no cpus found under {path}")]
    NoCpus {
        /// Where the kernel lists them.
        path: PathBuf,
    },
    /// An hwloc XML document that cannot be used.
    #[error("{file}: invalid hwloc xml: {reason}")]
    Xml {
        /// The file's name.
        file: String,
        /// What is wrong, with its line where known.
        reason: String,
    },
    /// The topology read breaks an invariant of [`Topology::validate`].
    #[error("{origin}: {source}")]
    Invalid {
        /// "sysfs" or the file name.
        origin: String,
        /// The invariant broken.
        #[source]
        source: CoreError,
    },
}

/// Discover the running machine (normally `discover(Path::new("/sys"), Path::new("/proc"))`).
pub fn discover(sys_root: &Path, proc_root: &Path) -> Result<Topology, TopologyError> {
    sysfs::discover(sys_root, proc_root)
}

/// Load an hwloc v2 XML file.
pub fn load_xml(path: &Path) -> Result<Topology, TopologyError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    parse_xml(&text, &name)
}

/// Parse hwloc v2 XML text; `source` names it in the result.
pub fn parse_xml(text: &str, source: &str) -> Result<Topology, TopologyError> {
    xml::parse(text, source)
}

/// Discover the GPUs (normally `discover_gpus(Path::new("/sys"), Path::new("/dev"),
/// Path::new("/proc"))`).
pub fn discover_gpus(
    sys_root: &Path,
    dev_root: &Path,
    proc_root: &Path,
) -> Result<pjw_core::Gpus, TopologyError> {
    gpu::discover(sys_root, dev_root, proc_root)
}

/// The GPUs of an hwloc v2 XML file (without device nodes).
pub fn load_xml_gpus(path: &Path) -> Result<pjw_core::Gpus, TopologyError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_xml_gpus(&text, &path.display().to_string())
}

/// The GPUs of an hwloc v2 XML text; `source` names it in errors.
pub fn parse_xml_gpus(text: &str, source: &str) -> Result<pjw_core::Gpus, TopologyError> {
    xml_gpu::parse(text, source)
}

/// The GPU lines of `pjw topology`: each NUMA node's GPUs, then those of unknown node. Empty
/// when there are none.
pub fn render_gpus(gpus: &pjw_core::Gpus) -> String {
    render::render_gpus(gpus)
}

/// Human-readable description for `pjw topology`.
pub fn render(topo: &Topology) -> String {
    render::render(topo)
}

/// Number the distinct keys in `items` (cpu, key) by the lowest cpu carrying each key: the key of
/// the lowest cpu gets 0, and so on. Returns the id of each item, in order.
pub(crate) fn number_by_first_cpu<K: Ord + Clone>(items: &[(u32, K)]) -> Vec<u32> {
    use std::collections::BTreeMap;
    let mut first: BTreeMap<K, u32> = BTreeMap::new();
    for (cpu, key) in items {
        let e = first.entry(key.clone()).or_insert(*cpu);
        if *cpu < *e {
            *e = *cpu;
        }
    }
    let mut order: Vec<(u32, K)> = first.into_iter().map(|(k, c)| (c, k)).collect();
    order.sort();
    let ids: BTreeMap<K, u32> = order
        .into_iter()
        .zip(0u32..)
        .map(|((_, k), i)| (k, i))
        .collect();
    items.iter().map(|(_, k)| ids[k]).collect()
}

/// Run [`Topology::validate`], naming where the topology came from on failure.
pub(crate) fn validated(topo: Topology) -> Result<Topology, TopologyError> {
    match topo.validate() {
        Ok(()) => Ok(topo),
        Err(source) => Err(TopologyError::Invalid {
            origin: topo.source.clone(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_numbered_by_lowest_cpu() {
        let items = vec![(0, "b"), (1, "a"), (2, "b"), (3, "c"), (4, "a")];
        assert_eq!(number_by_first_cpu(&items), vec![0, 1, 0, 2, 1]);
        // A key whose lowest cpu comes later gets a higher id even if seen first.
        let items = vec![(5, "x"), (0, "y"), (1, "x")];
        assert_eq!(number_by_first_cpu(&items), vec![1, 0, 1]);
    }

    #[test]
    fn error_messages_are_lower_case_without_period() {
        let e = TopologyError::Xml {
            file: "a.xml".into(),
            reason: "no root object".into(),
        };
        assert_eq!(e.to_string(), "a.xml: invalid hwloc xml: no root object");
        let e = TopologyError::Io {
            path: "/x/y".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(e.to_string().starts_with("cannot read /x/y: "));
    }
}
