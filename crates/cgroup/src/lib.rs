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
//!
//! Hierarchies used per mode:
//!
//! | mode    | limits (cpuset, memory, pids, cpu)        | tracking, freeze, kill, events |
//! |---------|-------------------------------------------|--------------------------------|
//! | Unified | the cgroup2 tree (+io when present)       | the cgroup2 tree               |
//! | Hybrid  | v1 cpuset, memory, pids, cpu (CPU time: cgroup2 `cpu.stat`) | the cgroup2 tree |
//! | Legacy  | v1 cpuset, memory, pids, cpu, cpuacct     | v1 cpuset; v1 freezer          |
//!
//! A missing v1 controller is skipped with a warning, except cpuset, which is required. All paths
//! come from mountinfo (the mount point plus the cgroup path below the mount's root), so tests
//! point the driver at fake trees: see [`fake_tree`] and [`Backend::FakeTree`].
//!
//! ```
//! use pjw_cgroup::{fake_tree::FakeSpec, Backend, Driver, Mode, ParentSpec};
//! let dir = std::env::temp_dir().join(format!("pjw-cgroup-doc-{}", std::process::id()));
//! let machine = FakeSpec::new(Mode::Hybrid).build(&dir).unwrap();
//! let parent = ParentSpec::parse("/pjw").unwrap();
//! let driver = Driver::detect_with(&machine.proc_root, &parent, Backend::FakeTree).unwrap();
//! assert_eq!(driver.mode(), Mode::Hybrid);
//! driver.prepare_parent().unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

mod blkio;
mod bpf;
mod cpu;
mod cpuset;
mod detect;
pub mod device_prog;
pub mod devices;
mod error;
pub mod fake_tree;
mod freezer;
mod fs;
mod inspect;
mod job;
mod memory;
mod parent;
mod pids;
mod setup;
mod statcache;
mod stats;
mod stop;
mod unified;

pub use error::CgroupError;
pub use fs::Backend;
pub use pjw_core::CpuSet;
pub use pjw_kernelfs::cpu_stat::CpuStat;
pub use pjw_kernelfs::io_stat::IoBytes;
pub use stats::{memory_breakdown, MemoryBreakdown, Resource};

use std::fmt;
use std::path::Path;

use detect::Hierarchy;
use fs::Fs;

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

impl Mode {
    /// Lower-case name: `unified`, `hybrid`, `legacy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Unified => "unified",
            Mode::Hybrid => "hybrid",
            Mode::Legacy => "legacy",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    ///
    /// Components may hold ASCII letters, digits and `-_.@+:=`; empty, `.` and `..` components
    /// are refused, and so is `/` alone (the root cgroup cannot hold jobs directly).
    pub fn parse(text: &str) -> Result<ParentSpec, CgroupError> {
        parent::parse(text)
    }
}

impl fmt::Display for ParentSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParentSpec::Absolute(p) => f.write_str(p),
            ParentSpec::SelfRelative(None) => f.write_str("self"),
            ParentSpec::SelfRelative(Some(s)) => write!(f, "self/{s}"),
        }
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
    /// Swap limit in bytes (`memory.swap.max`); `None` = no limit (`max`). cgroup v1 caps
    /// memory and swap together: a job with a memory limit gets `memory.memsw.limit_in_bytes` =
    /// its memory limit + this; one without is not limited there.
    pub swap_max: Option<u64>,
    /// Block I/O weight and limits (v2 `io`, v1 `blkio`); empty = the kernel's defaults.
    pub io: pjw_core::io_limits::JobIo,
}

/// A cgroup v2 cpuset partition type (`cpuset.cpus.partition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    /// Its own scheduling domain: the scheduler balances load inside it only.
    Root,
    /// Like `Root`, without load balancing at all (one thread per CPU, pinned by the job).
    Isolated,
}

impl Partition {
    pub fn as_str(self) -> &'static str {
        match self {
            Partition::Root => "root",
            Partition::Isolated => "isolated",
        }
    }
}

/// The hierarchies of one mode (static dispatch over the modes).
#[derive(Clone, Debug)]
enum Layout {
    /// The cgroup2 tree does everything.
    Unified { v2: Hierarchy },
    /// v1 for limits (cpuset first), cgroup2 for tracking, freeze, kill and events.
    Hybrid { v1: Vec<Hierarchy>, v2: Hierarchy },
    /// v1 only (cpuset first; the freezer when mounted).
    Legacy { v1: Vec<Hierarchy> },
}

/// The driver: one type over all modes (static dispatch inside).
#[derive(Clone, Debug)]
pub struct Driver {
    layout: Layout,
    fs: Fs,
    /// Statistics files kept open for the sampler (off until [`Driver::keep_stat_files_open`]).
    stat_files: std::sync::Arc<statcache::StatFiles>,
    /// Whether a read through the cache may open and keep a file it does not hold yet. Off in
    /// the copy a thread beside the owner reads with ([`Driver::reader_beside_owner`]): only
    /// the owner, which also closes a job's files at its removal, opens files to keep, so a
    /// read racing a removal can never leave a removed cgroup's file open.
    stat_keep_new: bool,
    /// The v1 devices hierarchy, if mounted; used (created, joined, removed with every job)
    /// only after [`Driver::fence_devices`] chose it.
    devices: Option<Hierarchy>,
    /// How jobs are fenced off devices, once [`Driver::fence_devices`] was called.
    fence: Option<devices::Fence>,
}

/// The leaf below its own cgroup that the daemon moves into on cgroup v2 with a `self` parent
/// (see [`Driver::prepare_parent_for_daemon`]). Never a job's name (jobs are `job-…`).
pub const DAEMON_LEAF: &str = "pjw-daemon";

impl Driver {
    /// Detect the layout from `<proc_root>/self/mountinfo` and `<proc_root>/self/cgroup` and
    /// resolve `parent` in every hierarchy used. Does not create anything.
    pub fn detect(proc_root: &Path, parent: &ParentSpec) -> Result<Driver, CgroupError> {
        Self::detect_with(proc_root, parent, Backend::Kernel)
    }

    /// [`Driver::detect`] on a chosen backend ([`Backend::FakeTree`] for tests on fake trees).
    pub fn detect_with(
        proc_root: &Path,
        parent: &ParentSpec,
        backend: Backend,
    ) -> Result<Driver, CgroupError> {
        let fs = Fs { backend };
        let d = detect::detect(proc_root, parent, &fs)?;
        let devices = d.devices;
        let layout = match (d.mode, d.v2) {
            (Mode::Unified, Some(v2)) => Layout::Unified { v2 },
            (Mode::Hybrid, Some(v2)) => Layout::Hybrid { v1: d.v1, v2 },
            _ => Layout::Legacy { v1: d.v1 },
        };
        let driver = Driver {
            layout,
            fs,
            stat_files: std::sync::Arc::new(statcache::StatFiles::new(0)),
            stat_keep_new: true,
            devices,
            fence: None,
        };
        tracing::debug!(layout = %driver.describe(), "cgroup layout detected");
        Ok(driver)
    }

    /// The detected mode.
    pub fn mode(&self) -> Mode {
        match self.layout {
            Layout::Unified { .. } => Mode::Unified,
            Layout::Hybrid { .. } => Mode::Hybrid,
            Layout::Legacy { .. } => Mode::Legacy,
        }
    }

    /// Human-readable description of hierarchies and parent paths (for logs and `pjw status`),
    /// e.g. `hybrid: cpuset=/sys/fs/cgroup/cpuset/pjw memory=… unified=/sys/fs/cgroup/unified/pjw`.
    pub fn describe(&self) -> String {
        let mut s = format!("{}:", self.mode());
        for h in self.hierarchies() {
            s.push_str(&format!(" {}={}", h.key(), h.parent().display()));
            if h.v2 && !h.controllers.is_empty() {
                s.push_str(&format!(" (controllers {})", h.controllers.join(",")));
            }
        }
        s
    }

    /// Every hierarchy used: cgroup2 first (when used), then v1 with cpuset first.
    fn hierarchies(&self) -> impl Iterator<Item = &Hierarchy> {
        let (v2, v1): (Option<&Hierarchy>, &[Hierarchy]) = match &self.layout {
            Layout::Unified { v2 } => (Some(v2), &[]),
            Layout::Hybrid { v1, v2 } => (Some(v2), v1),
            Layout::Legacy { v1 } => (None, v1),
        };
        let devices = self
            .devices
            .as_ref()
            .filter(|_| self.fence == Some(devices::Fence::V1Controller));
        v2.into_iter().chain(v1.iter()).chain(devices)
    }

    fn v2(&self) -> Option<&Hierarchy> {
        match &self.layout {
            Layout::Unified { v2 } | Layout::Hybrid { v2, .. } => Some(v2),
            Layout::Legacy { .. } => None,
        }
    }

    fn v1_with(&self, controller: &str) -> Option<&Hierarchy> {
        match &self.layout {
            Layout::Unified { .. } => None,
            Layout::Hybrid { v1, .. } | Layout::Legacy { v1 } => {
                v1.iter().find(|h| h.has(controller))
            }
        }
    }

    /// Where cpuset lives: the cgroup2 tree in Unified mode, else the v1 cpuset hierarchy
    /// (required by detection).
    fn cpuset_hierarchy(&self) -> &Hierarchy {
        match &self.layout {
            Layout::Unified { v2 } => v2,
            Layout::Hybrid { v1, .. } | Layout::Legacy { v1 } => &v1[0],
        }
    }

    /// Where processes are counted: cgroup2 when present, else v1 cpuset.
    fn tracking(&self) -> &Hierarchy {
        self.v2().unwrap_or_else(|| self.cpuset_hierarchy())
    }
}

/// Pids from `cgroup.procs` text, one per line; `None` on a line that is not a pid.
pub fn parse_pids(text: &str) -> Option<Vec<u32>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_parse() {
        assert_eq!(parse_pids("1\n22\n"), Some(vec![1, 22]));
        assert_eq!(parse_pids(""), Some(vec![]));
        assert_eq!(parse_pids("1\nx\n"), None);
    }
}
