//! The engine's port to the cgroup trees: what it asks of a cgroup driver, as four traits by
//! role — [`CgroupLifecycle`], [`CgroupFreezing`], [`CgroupTree`], [`CgroupStats`] — joined in
//! [`CgroupPort`], with [`pjw_cgroup::Driver`] (every mode, cgroupfs or a fake tree) as its
//! adapter and a recording fake in [`crate::test_support`].

use std::path::PathBuf;

use pjw_cgroup::{
    CgroupError, CpuSet, CpuStat, Driver, IoBytes, JobLimits, MemoryBreakdown, Partition, Resource,
};
use pjw_kernelfs::proc_cgroup::CgroupLine;
use pjw_kernelfs::psi::Psi;

/// What a kill left to do (see [`CgroupLifecycle::kill`]).
pub enum Killed {
    /// Every process of the job is killed, or there was none.
    Done,
    /// Processes are left and killing them waits (no `cgroup.kill`: freeze, which the v1
    /// freezer confirms within 2 s, SIGKILL each, thaw; or rounds 10 ms apart): the engine runs
    /// this on a blocking thread, never on its own.
    Rounds(Box<dyn FnOnce() -> Result<(), CgroupError> + Send>),
}

impl std::fmt::Debug for Killed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Killed::Done => "Done",
            Killed::Rounds(_) => "Rounds",
        })
    }
}

/// What removes a job's cgroups (see [`CgroupLifecycle::removal`]): run on a blocking thread,
/// never on the engine's.
pub type Removal = Box<dyn FnOnce() -> Result<(), CgroupError> + Send>;

/// What signals a job's processes (see [`CgroupLifecycle::signaller`]): run on a blocking
/// thread, never on the engine's; how many got the signal.
pub type Signaller = Box<dyn FnOnce() -> Result<usize, CgroupError> + Send>;

/// How far a freeze got at once (see [`CgroupFreezing::freeze_begin`]).
pub enum Freezing {
    /// The job is frozen (or, with `cgroup.freeze`, the kernel completes it by itself).
    Frozen,
    /// The v1 freezer is FREEZING: waiting for FROZEN (up to 2 s) is left to this, which the
    /// engine runs on a blocking thread; an error means the freeze did not happen.
    Wait(Box<dyn FnOnce() -> Result<(), CgroupError> + Send>),
}

impl std::fmt::Debug for Freezing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Freezing::Frozen => "Frozen",
            Freezing::Wait(_) => "Wait",
        })
    }
}

/// A job's cgroups from creation to removal: made with their limits, filled, given CPUs,
/// killed and removed.
pub trait CgroupLifecycle {
    /// Create job `name`'s cgroups with its limits.
    fn create_job(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError>;
    /// Give existing job `name` these limits in place of its present ones (a queued job's
    /// waiting limits at its start); `None` is no limit.
    fn set_limits(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError>;
    /// Put the job in (or take it out of) the idle scheduling class.
    fn set_idle(&self, name: &str, idle: bool) -> Result<(), CgroupError>;
    /// Make the job (or the parent, with `None`) a cpuset partition.
    fn set_partition(
        &self,
        name: Option<&str>,
        kind: Partition,
        cpus: Option<&CpuSet>,
    ) -> Result<(), CgroupError>;
    /// Move process `pid` into the job.
    fn add_process(&self, name: &str, pid: u32) -> Result<(), CgroupError>;
    /// Keep the job from opening these character devices (major, minor): the GPU fence.
    fn deny_devices(&self, name: &str, devs: &[(u32, u32)]) -> Result<(), CgroupError>;
    /// Give the job these CPUs and memory nodes.
    fn set_cpus(&self, name: &str, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError>;
    /// Kill every process of the job: at once where the kernel can (`cgroup.kill`), else what
    /// waits is handed back as [`Killed::Rounds`].
    fn kill(&self, name: &str) -> Result<Killed, CgroupError>;
    /// Sending `sig` to every process of the job (each pinned by a pidfd), to run later on a
    /// blocking thread: a pidfd open and a signal per process, so its cost grows with the
    /// job's processes.
    fn signaller(&self, name: &str, sig: i32) -> Signaller;
    /// Remove the job's cgroups.
    fn remove_job(&self, name: &str) -> Result<(), CgroupError>;
    /// [`CgroupLifecycle::remove_job`] to run later, on a blocking thread: an `rmdir` in
    /// each hierarchy waits in the kernel (a v1 memory cgroup's charges move to its parent).
    fn removal(&self, name: &str) -> Removal;
    /// Remove the parent cgroups when no job is left.
    fn remove_parent_if_empty(&self) -> Result<(), CgroupError>;
}

/// Holding a job back: freezing and thawing it, throttling its memory.
pub trait CgroupFreezing {
    /// Freeze or thaw the job.
    fn freeze(&self, name: &str, frozen: bool) -> Result<(), CgroupError>;
    /// Freeze the job without waiting: [`Freezing::Wait`] hands back what waits.
    fn freeze_begin(&self, name: &str) -> Result<Freezing, CgroupError>;
    /// Whether the job is frozen.
    fn is_frozen(&self, name: &str) -> Result<bool, CgroupError>;
    /// Throttle the job's memory at `high` (None: no throttle).
    fn set_memory_high(&self, name: &str, high: Option<u64>) -> Result<(), CgroupError>;
}

/// What the trees hold: the mode, the jobs, their processes and CPUs, whose a process is.
pub trait CgroupTree {
    /// The mode and the hierarchies, for `pjw status`.
    fn describe(&self) -> String;
    /// The cgroup mode (what a reload may switch on: memory throttling needs pure v2).
    fn mode(&self) -> pjw_cgroup::Mode;
    /// Whether I/O is counted per job.
    fn counts_io(&self) -> bool;
    /// The job cgroups below the parent.
    fn list_jobs(&self) -> Result<Vec<String>, CgroupError>;
    /// Whether any process is left in the job (an error is never "empty").
    fn is_populated(&self, name: &str) -> Result<bool, CgroupError>;
    /// The job's `cgroup.events`, where the mode has one (for inotify).
    fn events_path(&self, name: &str) -> Option<PathBuf>;
    /// The CPUs the job's cpuset holds.
    fn job_cpus(&self, name: &str) -> Result<CpuSet, CgroupError>;
    /// The job's processes.
    fn procs(&self, name: &str) -> Result<Vec<u32>, CgroupError>;
    /// The job's threads.
    fn thread_count(&self, name: &str) -> Result<usize, CgroupError>;
    /// The job a process belongs to, from its `/proc/PID/cgroup` lines.
    fn job_of(&self, lines: &[CgroupLine]) -> Option<String>;
}

/// A job's usage and pressure, for the sampler, the governor and the reports.
pub trait CgroupStats {
    /// Processes of the job the kernel killed for memory.
    fn oom_kills(&self, name: &str) -> u64;
    /// Whether the job's own memory limit was ever reached (None: cannot be told): OOM kills
    /// in a job whose own limit never was are the job partition's.
    fn oom_at_own_limit(&self, name: &str) -> Option<bool>;
    /// Memory charged to the job now (bytes).
    fn memory_usage(&self, name: &str) -> Result<u64, CgroupError>;
    /// The job's CPU time.
    fn cpu_time(&self, name: &str) -> Result<CpuStat, CgroupError>;
    /// Memory pressure of the job, or of all jobs with `None`.
    fn memory_pressure(&self, name: Option<&str>) -> Option<Psi>;
    /// Bytes the job read and wrote.
    fn io_bytes(&self, name: &str) -> Result<Option<IoBytes>, CgroupError>;
    /// The job's memory by kind.
    fn memory_breakdown(&self, name: &str) -> Result<MemoryBreakdown, CgroupError>;
    /// The job's memory high-water mark.
    fn memory_peak(&self, name: &str) -> Result<u64, CgroupError>;
    /// The job's swap high-water mark, where the kernel keeps one.
    fn memory_swap_peak(&self, name: &str) -> Result<Option<u64>, CgroupError>;
    /// The job's task count from the pids controller.
    fn pids_current(&self, name: &str) -> Result<Option<u64>, CgroupError>;
    /// The job's pressure (PSI) for `what`.
    fn pressure(&self, name: &str, what: Resource) -> Option<Psi>;
}

/// What the engine asks of the cgroup trees, all four roles (job `name` is its cgroup's name
/// below the parent). Implemented for every type that has the four parts, so generic code and
/// `dyn CgroupPort` name one trait while a fake or an adapter implements the roles apart.
pub trait CgroupPort: CgroupLifecycle + CgroupFreezing + CgroupTree + CgroupStats + Send {}

impl<T: CgroupLifecycle + CgroupFreezing + CgroupTree + CgroupStats + Send + ?Sized> CgroupPort
    for T
{
}

impl CgroupLifecycle for Driver {
    fn create_job(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        Driver::create_job(self, name, limits)
    }
    fn set_limits(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        Driver::set_limits(self, name, limits)
    }
    fn set_idle(&self, name: &str, idle: bool) -> Result<(), CgroupError> {
        Driver::set_idle(self, name, idle)
    }
    fn set_partition(
        &self,
        name: Option<&str>,
        kind: Partition,
        cpus: Option<&CpuSet>,
    ) -> Result<(), CgroupError> {
        Driver::set_partition(self, name, kind, cpus)
    }
    fn add_process(&self, name: &str, pid: u32) -> Result<(), CgroupError> {
        Driver::add_process(self, name, pid)
    }
    fn deny_devices(&self, name: &str, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
        Driver::deny_devices(self, name, devs)
    }
    fn set_cpus(&self, name: &str, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        Driver::set_cpus(self, name, cpus, mems)
    }
    fn kill(&self, name: &str) -> Result<Killed, CgroupError> {
        if Driver::kill_at_once(self, name)? {
            return Ok(Killed::Done);
        }
        let (driver, name) = (self.clone(), name.to_string());
        Ok(Killed::Rounds(Box::new(move || driver.kill_rounds(&name))))
    }
    fn signaller(&self, name: &str, sig: i32) -> Signaller {
        let (driver, name) = (self.clone(), name.to_string());
        Box::new(move || driver.signal(&name, sig))
    }
    fn remove_job(&self, name: &str) -> Result<(), CgroupError> {
        Driver::remove_job(self, name)
    }
    fn removal(&self, name: &str) -> Removal {
        let (driver, name) = (self.clone(), name.to_string());
        Box::new(move || driver.remove_job(&name))
    }
    fn remove_parent_if_empty(&self) -> Result<(), CgroupError> {
        Driver::remove_parent_if_empty(self)
    }
}

impl CgroupFreezing for Driver {
    fn freeze(&self, name: &str, frozen: bool) -> Result<(), CgroupError> {
        Driver::freeze(self, name, frozen)
    }
    fn freeze_begin(&self, name: &str) -> Result<Freezing, CgroupError> {
        if Driver::freeze_begin(self, name)? {
            return Ok(Freezing::Frozen);
        }
        let (driver, name) = (self.clone(), name.to_string());
        Ok(Freezing::Wait(Box::new(move || driver.freeze_wait(&name))))
    }
    fn is_frozen(&self, name: &str) -> Result<bool, CgroupError> {
        Driver::is_frozen(self, name)
    }
    fn set_memory_high(&self, name: &str, high: Option<u64>) -> Result<(), CgroupError> {
        Driver::set_memory_high(self, name, high)
    }
}

impl CgroupTree for Driver {
    fn describe(&self) -> String {
        Driver::describe(self)
    }
    fn mode(&self) -> pjw_cgroup::Mode {
        Driver::mode(self)
    }
    fn counts_io(&self) -> bool {
        Driver::counts_io(self)
    }
    fn list_jobs(&self) -> Result<Vec<String>, CgroupError> {
        Driver::list_jobs(self)
    }
    fn is_populated(&self, name: &str) -> Result<bool, CgroupError> {
        Driver::is_populated(self, name)
    }
    fn events_path(&self, name: &str) -> Option<PathBuf> {
        Driver::events_path(self, name)
    }
    fn job_cpus(&self, name: &str) -> Result<CpuSet, CgroupError> {
        Driver::job_cpus(self, name)
    }
    fn procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        Driver::procs(self, name)
    }
    fn thread_count(&self, name: &str) -> Result<usize, CgroupError> {
        Driver::thread_count(self, name)
    }
    fn job_of(&self, lines: &[CgroupLine]) -> Option<String> {
        Driver::job_of(self, lines)
    }
}

impl CgroupStats for Driver {
    fn oom_kills(&self, name: &str) -> u64 {
        Driver::oom_kills(self, name)
    }
    fn oom_at_own_limit(&self, name: &str) -> Option<bool> {
        Driver::oom_at_own_limit(self, name)
    }
    fn memory_usage(&self, name: &str) -> Result<u64, CgroupError> {
        Driver::memory_usage(self, name)
    }
    fn cpu_time(&self, name: &str) -> Result<CpuStat, CgroupError> {
        Driver::cpu_time(self, name)
    }
    fn memory_pressure(&self, name: Option<&str>) -> Option<Psi> {
        Driver::memory_pressure(self, name)
    }
    fn io_bytes(&self, name: &str) -> Result<Option<IoBytes>, CgroupError> {
        Driver::io_bytes(self, name)
    }
    fn memory_breakdown(&self, name: &str) -> Result<MemoryBreakdown, CgroupError> {
        Driver::memory_breakdown(self, name)
    }
    fn memory_peak(&self, name: &str) -> Result<u64, CgroupError> {
        Driver::memory_peak(self, name)
    }
    fn memory_swap_peak(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        Driver::memory_swap_peak(self, name)
    }
    fn pids_current(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        Driver::pids_current(self, name)
    }
    fn pressure(&self, name: &str, what: Resource) -> Option<Psi> {
        Driver::pressure(self, name, what)
    }
}
