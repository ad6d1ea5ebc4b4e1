//! pjw-topology: build a [`pjw_core::Topology`] from the running machine or from a file.
//!
//! API CONTRACT (the CLI and daemon use these; keep them, add freely):
//! - [`discover`]: read `<sys_root>/devices/system/cpu/...` and `<sys_root>/devices/system/node/...`;
//!   `allowed` = CPUs the process may use, read from `<proc_root>/self/status` (`Cpus_allowed_list`).
//! - [`load_xml`] / [`parse_xml`]: hwloc XML v2.
//! - [`render`]: the text `pjw topology` prints.
use pjw_core::Topology;
use std::path::Path;

/// One error enum for the crate; I/O errors carry the path.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("placeholder")]
    Placeholder,
}

/// Discover the running machine (normally `discover(Path::new("/sys"), Path::new("/proc"))`).
pub fn discover(_sys_root: &Path, _proc_root: &Path) -> Result<Topology, TopologyError> {
    todo!()
}

/// Load an hwloc v2 XML file.
pub fn load_xml(_path: &Path) -> Result<Topology, TopologyError> {
    todo!()
}

/// Parse hwloc v2 XML text; `source` names it in the result.
pub fn parse_xml(_text: &str, _source: &str) -> Result<Topology, TopologyError> {
    todo!()
}

/// Human-readable description for `pjw topology`.
pub fn render(_topo: &Topology) -> String {
    todo!()
}
