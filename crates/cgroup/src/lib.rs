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
mod memory;
mod parent;
mod pids;
mod statcache;
mod stats;
mod unified;

pub use error::CgroupError;
pub use fs::Backend;
pub use pjw_core::CpuSet;
pub use pjw_kernelfs::cpu_stat::CpuStat;
pub use pjw_kernelfs::io_stat::IoBytes;
pub use stats::{memory_breakdown, MemoryBreakdown, Resource};

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use detect::Hierarchy;
use fs::{is_busy, Fs};

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

/// How long [`Driver::kill`] keeps signalling when there is no freezer.
const KILL_ROUNDS: usize = 20;

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

    /// The parent directory in every hierarchy used, keyed like [`Driver::describe`]
    /// (`cpuset`, `memory`, `cpu,cpuacct`, `unified`, …).
    pub fn parent_dirs(&self) -> Vec<(String, PathBuf)> {
        self.hierarchies().map(|h| (h.key(), h.parent())).collect()
    }

    /// The job of this driver a process is in, from its `/proc/PID/cgroup` lines: the job's
    /// cgroup name when the process's cgroup in the tracking hierarchy (cgroup2; v1 cpuset in
    /// legacy mode) is a job below the parent or below one, else None. Paths are compared
    /// relative to the hierarchy's mount (the daemon's cgroup namespace is the root one).
    pub fn job_of(&self, lines: &[pjw_kernelfs::proc_cgroup::CgroupLine]) -> Option<String> {
        let (h, line) = match self.v2() {
            Some(h) => (h, lines.iter().find(|l| l.is_v2())?),
            None => {
                let h = self.v1_with("cpuset")?;
                let line = lines
                    .iter()
                    .find(|l| !l.is_v2() && l.controllers.iter().any(|c| c == "cpuset"))?;
                (h, line)
            }
        };
        let parent = h.parent();
        let rel = parent.strip_prefix(&h.mount_point).ok()?;
        let rel = format!("/{}", rel.display());
        let below = line.path.strip_prefix(rel.trim_end_matches('/'))?;
        let below = below.strip_prefix('/')?;
        let name = below.split('/').next()?;
        (!name.is_empty()).then(|| name.to_string())
    }

    /// The job's directory in every hierarchy used, keyed like [`Driver::parent_dirs`].
    pub fn job_dirs(&self, name: &str) -> Vec<(String, PathBuf)> {
        self.hierarchies().map(|h| (h.key(), h.job(name))).collect()
    }

    /// Create the parent in every hierarchy (idempotent). v1 cpuset: copy cpus/mems from the
    /// level above. v2: enable the controllers pjw needs in subtree_control down to the parent.
    ///
    /// With `self`, v2 controllers are enabled from the process's own cgroup down; a cgroup that
    /// has processes of its own cannot do that ([`CgroupError::SubtreeBusy`]).
    pub fn prepare_parent(&self) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            if !self.fs.exists(&h.base) {
                return Err(CgroupError::ParentMissing {
                    path: h.base.clone(),
                });
            }
            let enable = h.v2 && !h.controllers.is_empty();
            if enable {
                unified::enable_controllers(&self.fs, &h.base, &h.controllers)?;
            }
            let mut cur = h.base.clone();
            for comp in &h.parent_rel {
                let next = cur.join(comp);
                self.fs.mkdir(&next, h.kind())?;
                if !h.v2 && h.has("cpuset") {
                    cpuset::inherit_v1(&self.fs, &cur, &next)?;
                }
                if !h.v2 && h.has("memory") {
                    memory::use_hierarchy_v1(&self.fs, &next);
                }
                if enable {
                    unified::enable_controllers(&self.fs, &next, &h.controllers)?;
                }
                cur = next;
            }
        }
        Ok(())
    }

    /// [`Driver::prepare_parent`] for a daemon that may have to leave its own cgroup first.
    ///
    /// With a `self` parent in pure cgroup v2 the daemon's own cgroup must enable controllers for
    /// its children, which the kernel refuses while the cgroup holds processes (the
    /// no-internal-process rule). Then the daemon (`pid`, every thread of it) moves into a leaf
    /// [`DAEMON_LEAF`] below its cgroup, and the parent is prepared again. That works when the
    /// daemon was alone in its cgroup, as under systemd with `Delegate=yes`; when other processes
    /// share it the error says so. Returns the leaf the daemon moved into, if it moved.
    pub fn prepare_parent_for_daemon(&self, pid: u32) -> Result<Option<PathBuf>, CgroupError> {
        match self.prepare_parent() {
            Err(CgroupError::SubtreeBusy { path, value }) => {
                let Some(v2) = self.v2().filter(|h| h.v2 && path == h.base) else {
                    return Err(CgroupError::SubtreeBusy { path, value });
                };
                let leaf = v2.base.join(DAEMON_LEAF);
                self.fs.mkdir(&leaf, v2.kind())?;
                self.fs
                    .write(&leaf.join("cgroup.procs"), &pid.to_string())?;
                tracing::info!(cgroup = %leaf.display(), pid, "daemon moved into a leaf of its own cgroup (no-internal-process rule)");
                match self.prepare_parent() {
                    Ok(()) => Ok(Some(leaf)),
                    Err(CgroupError::SubtreeBusy { path, value }) => {
                        Err(CgroupError::SharedSelfCgroup { path, value })
                    }
                    Err(e) => Err(e),
                }
            }
            other => other.map(|_| None),
        }
    }

    /// The CPUs the parent may give its children: `cpuset.cpus.effective` (v2) or
    /// `cpuset.effective_cpus` (v1, else `cpuset.cpus`) of the prepared parent. A slice a site
    /// restricts with systemd's `AllowedCPUs=` shows here, not in the daemon's own affinity.
    /// `None` when the parent has no such file (no cpuset there); a read error is an error.
    pub fn parent_cpus(&self) -> Result<Option<CpuSet>, CgroupError> {
        let h = self.cpuset_hierarchy();
        let dir = h.parent();
        let names: &[&str] = if h.v2 {
            &["cpuset.cpus.effective"]
        } else {
            &["cpuset.effective_cpus", "cpuset.cpus"]
        };
        for name in names {
            if self.fs.exists(&dir.join(name)) {
                return cpuset::read(&self.fs, &dir, name).map(Some);
            }
        }
        Ok(None)
    }

    /// Create job cgroup `name` below the parent in every hierarchy and apply `limits`.
    /// Idempotent on an existing job cgroup (re-applies limits).
    ///
    /// On failure the directories this call created are removed again.
    pub fn create_job(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut created = Vec::new();
        let res = self.create_job_inner(name, limits, &mut created);
        if res.is_err() {
            for dir in created.iter().rev() {
                if let Err(e) = self.fs.rmdir(dir) {
                    tracing::warn!(path = %dir.display(), error = %e, "rollback: cannot remove job cgroup");
                }
            }
        }
        res
    }

    fn create_job_inner(
        &self,
        name: &str,
        limits: &JobLimits,
        created: &mut Vec<PathBuf>,
    ) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            let parent = h.parent();
            if !self.fs.exists(&parent) {
                return Err(CgroupError::ParentMissing { path: parent });
            }
            let dir = h.job(name);
            if self.fs.mkdir(&dir, h.kind())? {
                created.push(dir.clone());
            }
            if h.has("cpuset") {
                cpuset::apply(&self.fs, &dir, &limits.cpus, &limits.mems)?;
            }
            if h.has("memory") {
                memory::apply(&self.fs, &dir, h.v2, limits.memory_max)?;
                if h.v2 {
                    memory::apply_swap_max(&self.fs, &dir, limits.swap_max)?;
                } else if limits.swap_max.is_some()
                    && !memory::apply_memsw_v1(&self.fs, &dir, limits.memory_max, limits.swap_max)?
                {
                    tracing::debug!(job = name, "cgroup v1: swap not limited (the job has no memory limit, or the kernel does not account swap)");
                }
            }
            if h.has("pids") {
                pids::apply(&self.fs, &dir, limits.pids_max)?;
            }
            if (h.has("io") || h.has("blkio")) && !limits.io.is_empty() {
                let file = blkio::apply(&self.fs, &dir, h.v2, &limits.io)?;
                if limits.io.weight.is_some() && file.is_none() {
                    tracing::warn!(job = name, dir = %dir.display(), "no I/O weight file (no BFQ scheduler module, no io.weight): the job's I/O weight is not applied");
                }
            }
        }
        Ok(())
    }

    /// Memory charged to job `name` now (bytes).
    pub fn memory_usage(&self, name: &str) -> Result<u64, CgroupError> {
        parent::validate_job_name(name)?;
        let h = self.memory_hierarchy()?;
        let path = memory::usage_path(&h.job(name), h.v2);
        let text = self.read_stat(name, &path)?;
        memory::parse_usage(path, &text)
    }

    /// Processes the kernel OOM-killed inside job `name` (at its own limit or the partition's).
    pub fn oom_kills(&self, name: &str) -> u64 {
        self.memory_hierarchy()
            .map(|h| memory::oom_kills(&self.fs, &h.job(name), h.v2))
            .unwrap_or(0)
    }

    /// Throttle job `name` at `high` bytes (`memory.high`: the kernel reclaims instead of letting
    /// it grow), or lift the throttle with `None`. cgroup v2 only: v1 has no equivalent that
    /// throttles without risking the OOM killer, so there the governor goes straight to freezing.
    pub fn set_memory_high(&self, name: &str, high: Option<u64>) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let h = self.memory_hierarchy()?;
        if !h.v2 {
            return Err(CgroupError::Unsupported {
                what: "memory.high",
                mode: self.mode().as_str(),
                reason: "cgroup v1 has no memory.high",
            });
        }
        let value = high.map(|b| b.to_string()).unwrap_or_else(|| "max".into());
        self.fs.write(&h.job(name).join("memory.high"), &value)
    }

    /// Cap the memory of all jobs together: the limit of the parent (the node's job partition).
    pub fn set_partition_limit(&self, bytes: u64) -> Result<(), CgroupError> {
        let h = self.memory_hierarchy()?;
        memory::apply(&self.fs, &h.parent(), h.v2, Some(bytes))
    }

    /// Memory pressure (PSI) of job `name`, or of all jobs together when `None`, from the
    /// cgroup2 tree (hybrid and unified modes; `None` in legacy mode).
    pub fn memory_pressure(&self, name: Option<&str>) -> Option<pjw_kernelfs::psi::Psi> {
        let v2 = self.hierarchies().find(|h| h.v2)?;
        let dir = match name {
            Some(n) => v2.job(n),
            None => v2.parent(),
        };
        let text = self.fs.read(&dir.join("memory.pressure")).ok()?;
        pjw_kernelfs::psi::parse(&text).ok()
    }

    fn memory_hierarchy(&self) -> Result<&Hierarchy, CgroupError> {
        self.hierarchies()
            .find(|h| h.has("memory"))
            .ok_or(CgroupError::MissingController {
                controller: "memory".into(),
                where_: None,
            })
    }

    /// Make job `name` (or, with `None`, the parent) a cpuset partition of type `kind`, cgroup v2
    /// only. The kernel decides whether it is valid (a partition's parent must be a partition
    /// root, its CPUs exclusive among its siblings, and a parent with processes must keep a CPU);
    /// when it is not, the cgroup is set back to `member` and the kernel's reason is returned in
    /// [`CgroupError::PartitionInvalid`]. For the parent, its `cpuset.cpus` is first set to
    /// `cpus` (a partition root cannot simply inherit every CPU of the machine).
    pub fn set_partition(
        &self,
        name: Option<&str>,
        kind: Partition,
        cpus: Option<&CpuSet>,
    ) -> Result<(), CgroupError> {
        let h = match &self.layout {
            Layout::Unified { v2 } if v2.has("cpuset") => v2,
            _ => {
                return Err(CgroupError::MissingController {
                    controller: "cpuset (cgroup v2 partitions)".into(),
                    where_: None,
                })
            }
        };
        let dir = match name {
            Some(n) => {
                parent::validate_job_name(n)?;
                h.job(n)
            }
            None => h.parent(),
        };
        if let Some(c) = cpus {
            self.fs.write(&dir.join("cpuset.cpus"), &c.to_string())?;
        }
        cpuset::set_partition(&self.fs, &dir, kind.as_str())
    }

    /// Move the job to other CPUs and memory nodes (a backfiller promoted, a job resumed).
    pub fn set_cpus(&self, name: &str, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        for h in self.hierarchies().filter(|h| h.has("cpuset")) {
            cpuset::apply(&self.fs, &h.job(name), cpus, mems)?;
        }
        Ok(())
    }

    /// Give the parent the CPU weight of `ncpus` busy processes, so that against work outside
    /// pjw the jobs together count as the CPUs they hold, not as one process (the default
    /// weight). Without a cpu controller there is nothing to do.
    pub fn set_parent_cpu_weight(&self, ncpus: usize) -> Result<(), CgroupError> {
        for h in self.hierarchies().filter(|h| h.has("cpu")) {
            cpu::set_weight_for_cpus(&self.fs, &h.parent(), h.v2, ncpus)?;
        }
        Ok(())
    }

    /// Put the job in the idle scheduling class (backfill) or take it out (primary). Fails with
    /// [`CgroupError::MissingController`] when no hierarchy has the cpu controller.
    pub fn set_idle(&self, name: &str, idle: bool) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut done = false;
        for h in self.hierarchies().filter(|h| h.has("cpu")) {
            cpu::set_idle(&self.fs, &h.job(name), h.v2, idle)?;
            done = true;
        }
        if done {
            Ok(())
        } else {
            Err(CgroupError::MissingController {
                controller: "cpu".into(),
                where_: None,
            })
        }
    }

    /// Move process `pid` (all its threads) into job `name` in every hierarchy.
    ///
    /// Every hierarchy is tried (the v1 cpuset first, then cgroup2, then the other v1
    /// hierarchies); if any fails, the error lists
    /// each failure.
    pub fn add_process(&self, name: &str, pid: u32) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut order: Vec<&Hierarchy> = self.hierarchies().collect();
        // Confinement first: a running process (an adopted one) that sees itself in any of its
        // job's cgroups already runs on the job's CPUs. Then cgroup2 (tracking), then the rest.
        order.sort_by_key(|h| (h.v2 || !h.has("cpuset"), !h.v2));
        let failures: Vec<CgroupError> = order
            .into_iter()
            .filter_map(|h| {
                self.fs
                    .write(&h.job(name).join("cgroup.procs"), &pid.to_string())
                    .err()
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CgroupError::AddProcess {
                pid,
                job: name.to_string(),
                failures,
            })
        }
    }

    /// Kill every process of the job (cgroup.kill where available; else freeze + SIGKILL each).
    pub fn kill(&self, name: &str) -> Result<(), CgroupError> {
        if self.kill_at_once(name)? {
            return Ok(());
        }
        self.kill_rounds(name)
    }

    /// The part of [`Driver::kill`] that never waits: `cgroup.kill` where it exists, or
    /// nothing to kill. False: processes are left and only [`Driver::kill_rounds`] kills them.
    pub fn kill_at_once(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        if let Some(v2) = self.v2() {
            if unified::kill(&self.fs, &v2.job(name))? {
                return Ok(true);
            }
        }
        // Nothing left (the usual case when a job's main process ends): no freeze and thaw.
        Ok(self.legacy_procs(name)?.is_empty())
    }

    /// Every process in any of the job's cgroups, as `is_populated` counts them.
    fn legacy_procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        match self.v2() {
            Some(_) => self.procs(name),
            None => self.v1_procs_everywhere(name),
        }
    }

    /// The part of [`Driver::kill`] that waits, where there is no `cgroup.kill`: freeze (the v1
    /// freezer waits up to 2 s for FROZEN), SIGKILL every process, thaw; without a freezer, up
    /// to 20 rounds 10 ms apart. Blocks: the daemon runs it on a blocking thread.
    pub fn kill_rounds(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let procs = |d: &Driver| d.legacy_procs(name);
        if procs(self)?.is_empty() {
            return Ok(());
        }
        // No cgroup.kill: freeze so nothing forks, SIGKILL each process, thaw so they die.
        let frozen = match self.freeze(name, true) {
            Ok(()) => true,
            Err(CgroupError::Unsupported { .. }) => false,
            Err(e) => {
                // The v1 freezer may be left FREEZING (a task that would not stop in time):
                // thaw it, or the processes already frozen would never act on the SIGKILL.
                tracing::warn!(job = name, error = %e, "cannot freeze before killing, killing anyway");
                if let Err(e) = self.freeze(name, false) {
                    tracing::warn!(job = name, error = %e, "cannot thaw after a failed freeze");
                }
                false
            }
        };
        let dirs: Vec<PathBuf> = self.job_dirs(name).into_iter().map(|(_, d)| d).collect();
        let rounds = if frozen { 1 } else { KILL_ROUNDS };
        let mut result = Ok(());
        for _ in 0..rounds {
            let pids = procs(self)?;
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                if let Err(e) = self.fs.kill_pid(pid, &dirs) {
                    result = Err(e);
                }
            }
            if !frozen {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if frozen {
            self.freeze(name, false)?;
        }
        result
    }

    /// Freeze / thaw the job (cgroup.freeze, or the v1 freezer).
    ///
    /// cgroup.freeze returns at once (watch `frozen` in cgroup.events, or [`Driver::is_frozen`]);
    /// the v1 freezer is polled briefly until FROZEN.
    pub fn freeze(&self, name: &str, frozen: bool) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        match &self.layout {
            Layout::Unified { v2 } | Layout::Hybrid { v2, .. } => {
                unified::freeze(&self.fs, &v2.job(name), frozen)
            }
            Layout::Legacy { .. } => match self.v1_with("freezer") {
                Some(h) => freezer::set(&self.fs, &h.job(name), frozen),
                None => Err(CgroupError::Unsupported {
                    what: "freezing",
                    mode: "legacy",
                    reason: "the v1 freezer is not mounted",
                }),
            },
        }
    }

    /// The part of [`Driver::freeze`] (freezing) that never waits: true when the job is frozen
    /// (`cgroup.freeze`, which the kernel completes by itself, or a v1 freezer that says FROZEN
    /// at once); false while the v1 freezer is FREEZING, for [`Driver::freeze_wait`].
    pub fn freeze_begin(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match &self.layout {
            Layout::Unified { v2 } | Layout::Hybrid { v2, .. } => {
                unified::freeze(&self.fs, &v2.job(name), true).map(|()| true)
            }
            Layout::Legacy { .. } => match self.v1_with("freezer") {
                Some(h) => freezer::begin(&self.fs, &h.job(name)),
                None => Err(CgroupError::Unsupported {
                    what: "freezing",
                    mode: "legacy",
                    reason: "the v1 freezer is not mounted",
                }),
            },
        }
    }

    /// Wait (up to 2 s) until the v1 freezer says FROZEN after [`Driver::freeze_begin`];
    /// an error when it does not (the freezer is left FREEZING: thaw it). Blocks.
    pub fn freeze_wait(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        match (&self.layout, self.v1_with("freezer")) {
            (Layout::Legacy { .. }, Some(h)) => freezer::wait(&self.fs, &h.job(name)),
            _ => Ok(()),
        }
    }

    /// Whether the job is (completely) frozen.
    pub fn is_frozen(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match (self.v2(), self.v1_with("freezer")) {
            (Some(v2), _) => Ok(unified::events(&self.fs, &v2.job(name))?.frozen == Some(true)),
            (None, Some(h)) => Ok(freezer::state(&self.fs, &h.job(name))? == "FROZEN"),
            (None, None) => Ok(false),
        }
    }

    /// Whether any process is left in the job: `populated` in cgroup.events where there is a
    /// cgroup2 tree; in legacy mode, whether the `cgroup.procs` of any of the job's v1 cgroups
    /// lists a process (v1 has no populated flag, and a process moved into some hierarchies
    /// only still keeps the job's cgroups from going).
    ///
    /// A job cgroup that does not exist holds nothing (`Ok(false)`); any other failure to read
    /// the kernel is an error, never "empty": a caller that took it as empty would end a job
    /// that still runs and hand its CPUs to another.
    pub fn is_populated(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match self.v2() {
            Some(v2) => {
                let dir = v2.job(name);
                match unified::events(&self.fs, &dir) {
                    Ok(ev) => Ok(ev.populated),
                    Err(e) if e.is_not_found() && !self.fs.exists(&dir) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            None => Ok(!self.v1_procs_everywhere(name)?.is_empty()),
        }
    }

    /// The processes in any of job `name`'s v1 cgroups (sorted, without repeats); a hierarchy
    /// where the job has no cgroup counts none.
    fn v1_procs_everywhere(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        let mut all = BTreeSet::new();
        for h in self.hierarchies() {
            let dir = h.job(name);
            let path = dir.join("cgroup.procs");
            match self.fs.read(&path) {
                Ok(text) => {
                    let pids = parse_pids(&text).ok_or(CgroupError::BadContent {
                        path,
                        text: text.clone(),
                    })?;
                    all.extend(pids);
                }
                Err(e) if e.is_not_found() && !self.fs.exists(&dir) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(all.into_iter().collect())
    }

    /// The `cgroup.events` file of the job, when the mode has one (for inotify).
    pub fn events_path(&self, name: &str) -> Option<PathBuf> {
        self.v2().map(|v2| v2.job(name).join("cgroup.events"))
    }

    /// Process ids in the job.
    pub fn procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        parent::validate_job_name(name)?;
        let path = self.tracking().job(name).join("cgroup.procs");
        let text = self.fs.read(&path)?;
        parse_pids(&text).ok_or(CgroupError::BadContent { path, text })
    }

    /// Number of threads in the job.
    pub fn thread_count(&self, name: &str) -> Result<usize, CgroupError> {
        parent::validate_job_name(name)?;
        let t = self.tracking();
        let file = if t.v2 { "cgroup.threads" } else { "tasks" };
        let text = self.fs.read(&t.job(name).join(file))?;
        Ok(text.lines().filter(|l| !l.trim().is_empty()).count())
    }

    /// The CPUs the job's cpuset holds (`cpuset.cpus`), for recovery after a restart.
    pub fn job_cpus(&self, name: &str) -> Result<CpuSet, CgroupError> {
        parent::validate_job_name(name)?;
        cpuset::read(&self.fs, &self.cpuset_hierarchy().job(name), "cpuset.cpus")
    }

    /// Names of job cgroups below the parent (union over hierarchies).
    pub fn list_jobs(&self) -> Result<Vec<String>, CgroupError> {
        let mut all = BTreeSet::new();
        for h in self.hierarchies() {
            all.extend(self.fs.child_dirs(&h.parent())?);
        }
        // With a bare `self` parent the daemon's own leaf sits beside the jobs.
        all.remove(DAEMON_LEAF);
        Ok(all.into_iter().collect())
    }

    /// Remove the job's cgroup in every hierarchy; missing ones are fine, populated ones fail.
    ///
    /// Every hierarchy is tried; the first error is returned.
    pub fn remove_job(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        // Close its statistics files first: an open file keeps a removed cgroup's memory.
        self.stat_files.forget_job(name);
        let mut first_err = None;
        for h in self.hierarchies() {
            let dir = h.job(name);
            match self.fs.rmdir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    let err = if is_busy(&e) {
                        CgroupError::Populated { path: dir }
                    } else {
                        CgroupError::RemoveDir {
                            path: dir,
                            source: e,
                        }
                    };
                    first_err.get_or_insert(err);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Remove the parent in every hierarchy if it holds no job (used by tests and the demo).
    ///
    /// Removes the parent's components deepest first and stops at the first one that is not
    /// empty (that is not an error). The base is never removed: the mount point for an
    /// absolute parent, the process's own cgroup for `self/SUB`.
    pub fn remove_parent_if_empty(&self) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            for depth in (1..=h.parent_rel.len()).rev() {
                let mut dir = h.base.clone();
                dir.extend(&h.parent_rel[..depth]);
                match self.fs.rmdir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if is_busy(&e) => break,
                    Err(e) => {
                        return Err(CgroupError::RemoveDir {
                            path: dir,
                            source: e,
                        })
                    }
                }
            }
        }
        Ok(())
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

    /// Fence every job from now on off the devices [`Driver::deny_devices`] names, and say how:
    /// the v1 `devices` controller where it is mounted (every job then also gets a cgroup
    /// there; call before [`Driver::prepare_parent`]), else a `BPF_CGROUP_DEVICE` program on
    /// the job's cgroup2 directory (pure v2, or hybrid without the v1 controller). `None` (and
    /// nothing changes) on a v1-only machine without the devices controller.
    pub fn fence_devices(&mut self) -> Option<devices::Fence> {
        self.fence = if self.devices.is_some() {
            Some(devices::Fence::V1Controller)
        } else if self.v2().is_some() {
            Some(devices::Fence::BpfProgram)
        } else {
            None
        };
        self.fence
    }

    /// [`Driver::fence_devices`] with a chosen fence (tests: the device program on a hybrid
    /// machine that has the v1 controller too). False (and nothing changes) when this machine
    /// lacks it.
    pub fn fence_devices_by(&mut self, fence: devices::Fence) -> bool {
        let there = match fence {
            devices::Fence::V1Controller => self.devices.is_some(),
            devices::Fence::BpfProgram => self.v2().is_some(),
        };
        if there {
            self.fence = Some(fence);
        }
        there
    }

    /// How jobs are fenced off devices ([`Driver::fence_devices`]), if they are.
    pub fn fences_devices(&self) -> Option<devices::Fence> {
        self.fence
    }

    /// Keep job `name` from opening the character devices `devs` (major, minor), before its
    /// first process joins. An error when devices are not fenced (a fence that is not there
    /// must not look as if it were), and when the kernel refuses the v1 rule or the device
    /// program (the job must not start unfenced).
    pub fn deny_devices(&self, name: &str, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        match (self.fence, self.devices.as_ref(), self.v2()) {
            (Some(devices::Fence::V1Controller), Some(h), _) => {
                devices::deny_v1(&self.fs, &h.job(name), devs)
            }
            (Some(devices::Fence::BpfProgram), _, Some(v2)) => {
                devices::deny_v2(&self.fs, &v2.job(name), devs)
            }
            _ => Err(CgroupError::MissingController {
                controller: "devices".into(),
                where_: None,
            }),
        }
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
