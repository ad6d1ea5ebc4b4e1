//! Thread balancing inside jobs, off the engine thread (docs/decisions.md (ap)).
//!
//! On every balancing tick the engine sends the binder a snapshot of the running jobs
//! ([`BindJob`]) and returns at once; the binder's own thread does the rest through a
//! [`BindPort`]: it lists each job's processes from its cgroup, reads how long each of their
//! threads has been runnable (`/proc/PID/task/TID/schedstat`: time on a CPU plus time waiting
//! for one — the original pjw's "in a RUN state", which a loaded node does not hide), computes
//! each thread's share of the interval since the last pass, asks the pure policy
//! ([`pjw_core::thread_bind::plan`]) which busy thread goes to which CPU, and applies the pins
//! with `sched_setaffinity`. A thread that stops being busy gets the whole job set back. The cost
//! is one directory listing per process and one small read per thread of the jobs that bind,
//! nothing for the other threads of the node.
//!
//! Threads born in a binding job (fork events, [`Born`]) are pinned at once to the job's least
//! pinned slot and measured from birth; a new process keeps the job set (the program it execs
//! sizes itself from it) and is measured from birth. A thread first seen by a pass that inherited a pin pjw
//! set on the thread that made it gets the whole job set, and is measured from the next pass.
//! Whether a process was born on a pin of pjw's is told by its fork event: what the forking
//! thread held at the fork's time (pjw remembers the affinities it replaced, with when), never
//! guessed from the child's affinity read later. The threads a waiting worker made go free
//! with it.
//! A process born on a pin pjw set on its parent's thread gets the job set when it execs, not
//! at its fork (a launcher binds its child in between: Open MPI its ranks, taskset, hwloc-bind)
//! nor at the first pass that sees it (the second frees it if it never exec'd; a pass reads a
//! thread's affinity again just before it frees it), and its parent is a launcher: its pins go at once and it is not pinned again, so what it
//! forks next starts free. Inheritance happens at birth only: a thread pjw saw before (at birth or at a pass) with
//! another affinity, or the first thread of a process whose other threads carry a runtime's
//! pins elsewhere, was placed by its runtime even when its pin equals one of pjw's.
//! A thread or process that vanished between the listing and the read is normal and skipped;
//! any other error is logged (at warn once per job and kind) and the thread is left as it is
//! (not recorded as pinned).
//!
//! **A runtime's pins are left alone** (docs/decisions.md (bf)): every pass reads each thread's
//! affinity, and one narrower than the job set that pjw did not set (libgomp's places under
//! `OMP_PROC_BIND`, Open MPI's rank binding, `hwloc-bind`, `taskset`; or a pin from before a
//! daemon restart) is never sampled, moved, widened or pinned; pjw remembers what it set on
//! each thread to tell its own pins apart ([`pjw_core::pin_owner::owner`]). pjw's own pins
//! avoid the CPUs such pins hold while others are free ([`pjw_core::pin_owner::open_slots`]).

use pjw_core::thread_bind::BindMode;
use pjw_core::{CpuSet, Tid};
use tracing::debug;

/// Log a failure: at warn the first time for this job and kind, then at debug (defined before
/// the modules that use it).
macro_rules! failed {
    ($logged:expr, $seq:expr, $what:literal, $($field:tt)*) => {
        if $logged.first($seq, $what) {
            tracing::warn!($($field)*, concat!("thread balancing: ", $what, " (more of these for this job are logged at debug)"))
        } else {
            tracing::debug!($($field)*, concat!("thread balancing: ", $what))
        }
    };
}

mod binder;
mod born;
mod pass;
mod proc_port;
#[cfg(test)]
mod tests;
pub mod threads;
mod track;

pub use binder::{BindMsg, Binder};
pub use born::{Birth, Born};
pub use pass::{Balancer, PassReport};
pub use proc_port::ProcPort;
pub use threads::{ProfJob, ProfileTick, SchedRead, TaskFacts, ThreadProfiler};

/// A thread counts as busy when it ran at least this share of the interval (%).
pub const BUSY_PERCENT: u32 = 50;

/// One job to balance, as the engine sees it at the tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindJob {
    /// The engine's key for the job.
    pub seq: i64,
    /// Its cgroup's name below the parent.
    pub cgroup: String,
    /// The CPUs it holds now.
    pub cpus: CpuSet,
    pub mode: BindMode,
}

/// Why a read or a syscall failed.
#[derive(Debug, PartialEq, Eq)]
pub enum BindError {
    /// The process or thread is gone (ENOENT, ESRCH): normal, skipped.
    Gone,
    /// Anything else: logged, never taken as a fact.
    Failed(String),
}

impl BindError {
    /// `Gone` for the errors a vanished process or thread gives, else `Failed` with `what`.
    pub fn of_io(e: &std::io::Error, what: impl std::fmt::Display) -> BindError {
        if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(ESRCH) {
            BindError::Gone
        } else {
            BindError::Failed(format!("{what}: {e}"))
        }
    }
}

/// ESRCH on every Linux architecture.
const ESRCH: i32 = 3;

/// Which kinds of failure were logged at warn for which job: the first of each per job is a
/// warning, the rest (a daemon without the right to pin, retried every pass) go to debug.
#[derive(Debug, Default)]
struct Logged(std::collections::HashSet<(i64, &'static str)>);

impl Logged {
    fn first(&mut self, seq: i64, what: &'static str) -> bool {
        self.0.insert((seq, what))
    }
    fn retain(&mut self, keep: impl Fn(i64) -> bool) {
        self.0.retain(|(seq, _)| keep(*seq));
    }
}

/// What the binder needs from the machine.
pub trait BindPort: Send {
    /// The process ids in job cgroup `cgroup`.
    fn procs(&self, cgroup: &str) -> Result<Vec<u32>, BindError>;
    /// The thread ids of process `pid`.
    fn threads(&self, pid: u32) -> Result<Vec<u32>, BindError>;
    /// How long thread `tid` of `pid` has been runnable (on a CPU or waiting for one), in
    /// nanoseconds, since it started.
    fn runnable_ns(&self, pid: u32, tid: u32) -> Result<u64, BindError>;
    /// Let thread `tid` run only on `cpus`.
    fn set_affinity(&self, cgroup: &str, tid: u32, cpus: &CpuSet) -> Result<(), BindError>;
    /// CLOCK_MONOTONIC in ns, the clock of the proc connector's event timestamps: when pjw
    /// changed a thread's affinity, to tell a fork before the change from one after.
    fn now_ns(&self) -> u64 {
        crate::procs::monotonic_ns()
    }
    /// Thread `tid`'s time on a CPU and time waiting for one, apart (thread profiles); by
    /// default all of [`BindPort::runnable_ns`] as running.
    fn sched(&self, pid: u32, tid: u32) -> Result<SchedRead, BindError> {
        self.runnable_ns(pid, tid)
            .map(|run_ns| SchedRead { run_ns, wait_ns: 0 })
    }
    /// Thread `tid`'s name and last CPU (thread profiles' top threads only).
    fn task(&self, _pid: u32, _tid: u32) -> Result<TaskFacts, BindError> {
        Err(BindError::Failed(
            "thread facts are not offered here".into(),
        ))
    }
    /// Thread `tid`'s CPU migrations since it started, where the kernel counts them (thread
    /// profiles' top threads, not every tick: [`threads::MIGRATIONS_EVERY`]).
    fn migrations(&self, _pid: u32, _tid: u32) -> Option<u64> {
        None
    }
    /// The CPUs thread `tid` may run on now.
    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError>;
    /// The parent of process `pid`.
    fn parent(&self, pid: u32) -> Result<u32, BindError>;
}

/// Give thread `tid` the whole job set (a new thread that inherited a pin of pjw's); whether
/// that was done.
fn free(
    port: &dyn BindPort,
    job: &BindJob,
    tid: Tid,
    logged: &mut Logged,
    r: &mut PassReport,
) -> bool {
    match port.set_affinity(&job.cgroup, tid.0, &job.cpus) {
        Ok(()) => {
            debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %job.cpus, "inherited pin freed");
            true
        }
        Err(BindError::Gone) => false,
        Err(BindError::Failed(e)) => {
            failed!(logged, job.seq, "cannot give a new thread the job's cpus", cgroup = %job.cgroup, tid = tid.0, error = %e);
            r.failed += 1;
            false
        }
    }
}
