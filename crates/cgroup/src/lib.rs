//! pjw-cgroup: find the machine's cgroup hierarchies and manage job cgroups in all of them.
//!
//! API CONTRACT (the daemon is written against these signatures; keep them, add freely):
//!
//! - [`Driver::detect`] reads `<proc_root>/self/mountinfo` and `<proc_root>/self/cgroup`, finds
//!   the cgroup2 mount and the v1 controller mounts, and returns a driver in mode
//!   [`Mode::Unified`] (pure v2 with controllers), [`Mode::Hybrid`] (v1 controllers + a
//!   controller-less cgroup2 for tracking/freeze/kill/events/PSI) or [`Mode::Legacy`] (v1 only;
//!   any v1 controller may be missing).
//! - The parent ([`ParentSpec`]) is `/pjw` (a path inside each hierarchy) or `self[/SUB]`: below
//!   the cgroup the calling process runs in, in each hierarchy (read from /proc/self/cgroup).
//! - Job cgroups are leaves named by the caller (e.g. `job-42`) directly below the parent.
pub use pjw_core::CpuSet;
use std::path::{Path, PathBuf};

/// How the machine's cgroups are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pure cgroup v2: every controller in one tree.
    Unified,
    /// v1 controllers, plus a controller-less cgroup2 tree (systemd's "hybrid").
    Hybrid,
    /// v1 only.
    Legacy,
}

/// Where job cgroups go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParentSpec {
    /// An absolute path inside every hierarchy, e.g. `/pjw`.
    Absolute(String),
    /// Below the caller's own cgroup in every hierarchy, optionally in a sub-path.
    SelfRelative(Option<String>),
}

impl ParentSpec {
    /// Parse `/pjw`, `self`, `self/SUB`. Errors on anything else (relative paths, `..`).
    pub fn parse(_text: &str) -> Result<ParentSpec, CgroupError> {
        todo!()
    }
}

/// Limits and placement of one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLimits {
    pub cpus: CpuSet,
    pub mems: CpuSet,
    /// Memory limit in bytes (`memory.max` / `memory.limit_in_bytes`).
    pub memory_max: Option<u64>,
    /// Task limit (`pids.max`).
    pub pids_max: Option<u64>,
}

/// One error enum for the crate; I/O errors carry the path (and the value for writes).
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("placeholder")]
    Placeholder,
}

/// The driver: one type over all modes (static dispatch inside).
#[derive(Debug)]
pub struct Driver {}

impl Driver {
    /// Detect the layout from `<proc_root>/self/mountinfo` and `<proc_root>/self/cgroup` and
    /// resolve `parent` in every hierarchy used. Does not create anything.
    pub fn detect(_proc_root: &Path, _parent: &ParentSpec) -> Result<Driver, CgroupError> {
        todo!()
    }
    /// The detected mode.
    pub fn mode(&self) -> Mode {
        todo!()
    }
    /// Human-readable description of hierarchies and parent paths (for logs and `pjw status`).
    pub fn describe(&self) -> String {
        todo!()
    }
    /// Create the parent in every hierarchy (idempotent). v1 cpuset: copy cpus/mems from the
    /// level above. v2: enable the controllers pjw needs in subtree_control down to the parent.
    pub fn prepare_parent(&self) -> Result<(), CgroupError> {
        todo!()
    }
    /// Create job cgroup `name` below the parent in every hierarchy and apply `limits`.
    /// Idempotent on an existing job cgroup (re-applies limits).
    pub fn create_job(&self, _name: &str, _limits: &JobLimits) -> Result<(), CgroupError> {
        todo!()
    }
    /// Move process `pid` (all its threads) into job `name` in every hierarchy.
    pub fn add_process(&self, _name: &str, _pid: u32) -> Result<(), CgroupError> {
        todo!()
    }
    /// Kill every process of the job (cgroup.kill where available; else freeze + SIGKILL each).
    pub fn kill(&self, _name: &str) -> Result<(), CgroupError> {
        todo!()
    }
    /// Freeze / thaw the job (cgroup.freeze, or the v1 freezer).
    pub fn freeze(&self, _name: &str, _frozen: bool) -> Result<(), CgroupError> {
        todo!()
    }
    /// Whether any process is left in the job (cgroup.events `populated`, or cgroup.procs).
    pub fn is_populated(&self, _name: &str) -> Result<bool, CgroupError> {
        todo!()
    }
    /// The `cgroup.events` file of the job, when the mode has one (for inotify).
    pub fn events_path(&self, _name: &str) -> Option<PathBuf> {
        todo!()
    }
    /// Process ids in the job.
    pub fn procs(&self, _name: &str) -> Result<Vec<u32>, CgroupError> {
        todo!()
    }
    /// Number of threads in the job.
    pub fn thread_count(&self, _name: &str) -> Result<usize, CgroupError> {
        todo!()
    }
    /// The CPUs the job's cpuset holds (`cpuset.cpus`), for recovery after a restart.
    pub fn job_cpus(&self, _name: &str) -> Result<CpuSet, CgroupError> {
        todo!()
    }
    /// Names of job cgroups below the parent (union over hierarchies).
    pub fn list_jobs(&self) -> Result<Vec<String>, CgroupError> {
        todo!()
    }
    /// Remove the job's cgroup in every hierarchy; missing ones are fine, populated ones fail.
    pub fn remove_job(&self, _name: &str) -> Result<(), CgroupError> {
        todo!()
    }
    /// Remove the parent in every hierarchy if it holds no job (used by tests and the demo).
    pub fn remove_parent_if_empty(&self) -> Result<(), CgroupError> {
        todo!()
    }
}
