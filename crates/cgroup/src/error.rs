//! The one error type of pjw-cgroup.

use std::io;
use std::path::PathBuf;

/// Everything the cgroup driver can fail with. I/O variants carry the path, writes the value.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Reading a file failed.
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// Writing a value to a cgroup file failed.
    #[error("cannot write {value:?} to {}: {source}", path.display())]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    /// Creating a cgroup directory failed.
    #[error("cannot create cgroup {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    /// Removing a cgroup directory failed.
    #[error("cannot remove cgroup {}: {source}", path.display())]
    RemoveDir { path: PathBuf, source: io::Error },
    /// Listing a cgroup directory failed.
    #[error("cannot list {}: {source}", path.display())]
    ListDir { path: PathBuf, source: io::Error },
    /// A kernel file that does not parse.
    #[error("cannot parse {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: pjw_kernelfs::ParseError,
    },
    /// A cgroup file with unexpected contents.
    #[error("unexpected contents in {}: {text:?}", path.display())]
    BadContent { path: PathBuf, text: String },
    /// The parent specification is not usable.
    #[error("invalid cgroup parent {text:?}: {reason} (expected /PATH, self or self/SUB)")]
    BadParent { text: String, reason: String },
    /// The job name is not usable as a cgroup directory name.
    #[error("invalid job cgroup name {name:?}: {reason}")]
    BadJobName { name: String, reason: String },
    /// No usable cgroup filesystem in the mount table.
    #[error("no usable cgroup filesystem in {}: {reason}", path.display())]
    NoCgroupFs { path: PathBuf, reason: String },
    /// A controller pjw cannot work without.
    #[error("cgroup controller {controller} is not available{}", where_.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    MissingController {
        controller: String,
        where_: Option<PathBuf>,
    },
    /// On pure cgroup v2, a `self` parent below a cgroup whose parent does not delegate a
    /// controller pjw needs (its `cgroup.subtree_control` lacks it): seen in containers and
    /// sandboxes that enable only `memory` for their children.
    #[error("cgroup controller {controller} is not delegated to {} (its parent's cgroup.subtree_control lacks it): give an absolute cgroup parent (--cgroup-parent /pjw, enabled from the root down) or enable +{controller} in the cgroup.subtree_control of every cgroup above it", cgroup.display())]
    NotDelegated { controller: String, cgroup: PathBuf },
    /// The process's own cgroup in a hierarchy is unknown.
    #[error("no line for hierarchy {hierarchy} in {}", path.display())]
    NoOwnCgroup { hierarchy: String, path: PathBuf },
    /// A cgroup path that the mount does not show (the mount is of a sub-tree).
    #[error("cgroup {cgroup_path} is outside the mount at {} (mount root {mount_root})", mount_point.display())]
    OutsideMount {
        cgroup_path: String,
        mount_root: String,
        mount_point: PathBuf,
    },
    /// cgroup v2's no-internal-process rule refused enabling controllers.
    #[error("cannot enable controllers {value:?} in {}: the cgroup has processes of its own (no-internal-process rule); move them into a leaf cgroup first", path.display())]
    SubtreeBusy { path: PathBuf, value: String },
    /// The daemon moved into its leaf, and its own cgroup still holds other processes.
    #[error("cannot enable controllers ({value}) in {}: other processes share the daemon's cgroup; with a `self` parent on cgroup v2 the daemon must be alone in its cgroup (systemd: Delegate=yes), or use an absolute parent", path.display())]
    SharedSelfCgroup { path: PathBuf, value: String },
    /// The kernel did not accept a cpuset partition.
    #[error("{}: the kernel refused the partition: {reason}", path.display())]
    PartitionInvalid { path: PathBuf, reason: String },
    /// The parent does not exist yet.
    #[error("parent cgroup {} does not exist (prepare_parent creates it)", path.display())]
    ParentMissing { path: PathBuf },
    /// rmdir refused because processes (or child cgroups) are left.
    #[error("cannot remove cgroup {}: still populated (processes or child cgroups left)", path.display())]
    Populated { path: PathBuf },
    /// Moving a process failed in some hierarchies.
    #[error("cannot move pid {pid} into job {job} in {} hierarchies: {}", failures.len(), join(failures))]
    AddProcess {
        pid: u32,
        job: String,
        failures: Vec<CgroupError>,
    },
    /// The v1 freezer did not reach FROZEN in time.
    #[error("{} did not reach FROZEN (last state {state:?})", path.display())]
    FreezeTimeout { path: PathBuf, state: String },
    /// The operation needs something this machine lacks.
    #[error("{what} is not supported in {mode} mode: {reason}")]
    Unsupported {
        what: &'static str,
        mode: &'static str,
        reason: &'static str,
    },
    /// Loading or attaching a job's cgroup v2 device program (the GPU fence) failed.
    #[error("cannot {step} the device program of cgroup {}: {source}{detail}", path.display())]
    DeviceProgram {
        path: PathBuf,
        step: &'static str,
        source: io::Error,
        /// Why, where the kernel says more (the verifier's last lines, a hint).
        detail: String,
    },
    /// A device list that cannot become a device program.
    #[error("cannot fence the devices of cgroup {}: {reason}", path.display())]
    BadDeviceList { path: PathBuf, reason: String },
    /// kill(2) failed.
    #[error("cannot send SIGKILL to pid {pid}: {source}")]
    Signal { pid: u32, source: io::Error },
}

impl CgroupError {
    /// A read of a file that does not exist (the cgroup is gone): a fact about the cgroup,
    /// unlike other read errors, which say nothing about it.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CgroupError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn join(errors: &[CgroupError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
