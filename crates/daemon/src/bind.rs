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
//! A process born on a pin pjw set on its parent's thread gets the job set when it execs, not
//! at its fork (a launcher binds its child in between: Open MPI its ranks, taskset, hwloc-bind),
//! and its parent is a launcher: its pins go at once and it is not pinned again, so what it
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc;
use std::time::Instant;

use pjw_core::pin_owner::{self, Owner};
use pjw_core::thread_bind::{self, BindMode, ThreadSample};
use pjw_core::{CpuSet, Tid, Topology};
use tracing::{debug, warn};

mod proc_port;
#[cfg(test)]
mod tests;
pub mod threads;

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

/// Log a failure: at warn the first time for this job and kind, then at debug.
macro_rules! failed {
    ($logged:expr, $seq:expr, $what:literal, $($field:tt)*) => {
        if $logged.first($seq, $what) {
            warn!($($field)*, concat!("thread balancing: ", $what, " (more of these for this job are logged at debug)"))
        } else {
            debug!($($field)*, concat!("thread balancing: ", $what))
        }
    };
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
    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> Result<(), BindError>;
    /// Thread `tid`'s time on a CPU and time waiting for one, apart (thread profiles); by
    /// default all of [`BindPort::runnable_ns`] as running.
    fn sched(&self, pid: u32, tid: u32) -> Result<SchedRead, BindError> {
        self.runnable_ns(pid, tid)
            .map(|run_ns| SchedRead { run_ns, wait_ns: 0 })
    }
    /// Thread `tid`'s name, last CPU and migrations (thread profiles' top threads only).
    fn task(&self, _pid: u32, _tid: u32) -> Result<TaskFacts, BindError> {
        Err(BindError::Failed(
            "thread facts are not offered here".into(),
        ))
    }
    /// The CPUs thread `tid` may run on now.
    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError>;
    /// The parent of process `pid`.
    fn parent(&self, pid: u32) -> Result<u32, BindError>;
}

/// What the binder remembers about a job between passes.
#[derive(Debug)]
struct Track {
    /// The job's set at the last pass: when it changes (the cgroup's cpuset rewrote every
    /// thread's affinity), every pin is applied again.
    cpus: CpuSet,
    /// The slots pinned and confirmed by the kernel.
    pins: BTreeMap<Tid, u32>,
    /// Pinned threads kept through their first idle pass (`thread_bind::plan`'s grace).
    grace: BTreeSet<Tid>,
    /// Each thread's run time at the last pass (or at its birth, for one placed since).
    run: HashMap<Tid, u64>,
    /// Threads placed at birth since the last pass, and when: their share is of the time they
    /// lived, not of the whole interval.
    born: HashMap<Tid, Instant>,
    /// What pjw last set on each live thread (a pin set, or the job set), and the thread's
    /// process: a thread whose affinity is something else was pinned by someone else since.
    ours: HashMap<Tid, (u32, CpuSet)>,
    /// The CPUs of the runtime pins seen at the last pass (kept out of pjw's placements).
    reserved: CpuSet,
    /// Processes born on a pin pjw set on their parent's thread, with that pin: freed when
    /// they exec if they still hold it (a launcher binds its child between fork and exec), or
    /// by the first pass that sees them.
    inherited: HashMap<Tid, CpuSet>,
    /// Processes that forked on a pin of pjw's: launchers (mpirun, a driver script), never
    /// pinned again — what a launcher holds, each child it forks inherits.
    launchers: BTreeSet<u32>,
    at: Instant,
}

impl Track {
    /// What pjw last set on thread `tid`.
    fn ours_of(&self, tid: &Tid) -> Option<&CpuSet> {
        self.ours.get(tid).map(|(_, s)| s)
    }

    /// The pins pjw set on the threads of process `pid` (sets narrower than the job's).
    fn pins_in(&self, pid: u32) -> Vec<CpuSet> {
        self.ours
            .values()
            .filter(|(p, s)| *p == pid && *s != self.cpus)
            .map(|(_, s)| *s)
            .collect()
    }

    /// Whose the affinity `current` of thread `tid` of process `pid` is. A thread may have
    /// inherited a pin pjw set on another thread of its process, and a `new` process's first
    /// thread one pjw set on its parent's (asked of `port` only then).
    fn owner(
        &self,
        port: &dyn BindPort,
        job: &CpuSet,
        (pid, tid): (u32, Tid),
        new: bool,
        current: &CpuSet,
    ) -> Owner {
        let ours = self.ours_of(&tid);
        if new && ours.is_none() && self.inherited.get(&tid) == Some(current) {
            return Owner::Inherited;
        }
        let o = pin_owner::owner(job, current, ours, &self.pins_in(pid));
        // A thread inherits its affinity when it is made, never later: one pjw has seen
        // before with another affinity was narrowed since by someone else, even onto a set
        // equal to a pin of pjw's (libgomp's places and pjw's one-CPU pins meet often).
        if o == Owner::Inherited && !new {
            return Owner::Runtime;
        }
        if o != Owner::Runtime || ours.is_some() || tid.0 != pid || !new {
            return o;
        }
        match port.parent(pid) {
            Ok(parent) => pin_owner::owner(job, current, None, &self.pins_in(parent)),
            Err(_) => o,
        }
    }
}

/// The balancing state of every job that binds, and one pass over them.
#[derive(Debug)]
pub struct Balancer {
    topo: Topology,
    jobs: BTreeMap<i64, Track>,
    logged: Logged,
}

/// What one pass did, for the log and tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub pinned: usize,
    pub unpinned: usize,
    pub failed: usize,
}

impl Balancer {
    pub fn new(topo: Topology) -> Balancer {
        Balancer {
            topo,
            jobs: BTreeMap::new(),
            logged: Logged::default(),
        }
    }

    /// The CPUs thread `tid` of `job` is pinned to by the balancer, if it is.
    pub fn pin_of(&self, job: &ProfJob, tid: Tid) -> Option<CpuSet> {
        let t = self.jobs.get(&job.seq)?;
        let slot = *t.pins.get(&tid)?;
        (t.cpus == job.cpus && job.mode != BindMode::None)
            .then(|| thread_bind::pin_set(&self.topo, &job.cpus, job.mode, slot))
    }

    /// The pins of job `seq` (slot per thread), as last applied.
    pub fn pins(&self, seq: i64) -> Option<&BTreeMap<Tid, u32>> {
        self.jobs.get(&seq).map(|t| &t.pins)
    }

    /// One pass over `jobs` at `now`; jobs not listed are forgotten, jobs listed with mode `none`
    /// are unpinned and forgotten.
    pub fn pass(&mut self, port: &dyn BindPort, jobs: &[BindJob], now: Instant) -> PassReport {
        let mut report = PassReport::default();
        // A job now at `none` (a reload changed the default) gets its pinned threads' whole
        // set back; a job not listed has ended or lost its CPUs (its cpuset rewrote them).
        for job in jobs.iter().filter(|j| j.mode == BindMode::None) {
            if let Some(t) = self.jobs.remove(&job.seq) {
                for tid in t.pins.keys() {
                    // Re-pinned by a runtime since: its pin, not ours to undo.
                    if port.affinity(tid.0).ok().as_ref() != t.ours_of(tid) {
                        continue;
                    }
                    match port.set_affinity(tid.0, &job.cpus) {
                        Ok(()) => report.unpinned += 1,
                        Err(BindError::Gone) => {}
                        Err(BindError::Failed(e)) => {
                            failed!(self.logged, job.seq, "cannot unpin", cgroup = %job.cgroup, tid = tid.0, error = %e);
                            report.failed += 1;
                        }
                    }
                }
            }
        }
        self.jobs
            .retain(|seq, _| jobs.iter().any(|j| j.seq == *seq));
        self.logged.retain(|seq| jobs.iter().any(|j| j.seq == seq));
        for job in jobs.iter().filter(|j| j.mode != BindMode::None) {
            self.pass_job(port, job, now, &mut report);
        }
        report
    }

    fn pass_job(&mut self, port: &dyn BindPort, job: &BindJob, now: Instant, r: &mut PassReport) {
        let Some(seen) = self.read_job(port, job) else {
            return;
        };
        let Some(prev) = self.jobs.get_mut(&job.seq) else {
            // The first look: run times since now are measured at the next pass. Nothing is
            // set: a thread at the job set is free already, a narrower one is a runtime's (or
            // pinned before a daemon restart: unknown here, so left alone too).
            let reserved = seen.runtime_cpus(job, &HashMap::new());
            self.jobs.insert(
                job.seq,
                Track {
                    cpus: job.cpus,
                    pins: BTreeMap::new(),
                    grace: BTreeSet::new(),
                    run: seen.run,
                    born: HashMap::new(),
                    ours: HashMap::new(),
                    reserved,
                    inherited: HashMap::new(),
                    launchers: BTreeSet::new(),
                    at: now,
                },
            );
            return;
        };
        // Whose each thread's affinity is, judged on what pjw set by the last pass.
        let owners: HashMap<Tid, Owner> = seen
            .run
            .keys()
            .map(|tid| {
                let o = match (seen.affinity.get(tid), seen.pid.get(tid)) {
                    (Some(cur), Some(pid)) => {
                        let new = !prev.run.contains_key(tid);
                        prev.owner(port, &job.cpus, (*pid, *tid), new, cur)
                    }
                    // Unreadable: left as it is, like a runtime's pin.
                    _ => Owner::Runtime,
                };
                (*tid, o)
            })
            .collect();
        let owners = runtime_processes_keep_their_pins(owners, &seen);
        // A launcher's threads are never pjw's to pin: its children would inherit the pin.
        let launchers = std::mem::take(&mut prev.launchers);
        let mine = |tid: &Tid| {
            owners.get(tid).is_some_and(|o| *o != Owner::Runtime)
                && !seen.pid.get(tid).is_some_and(|p| launchers.contains(p))
        };
        let interval_ns = now.saturating_duration_since(prev.at).as_nanos() as u64;
        // pjw's threads seen at both passes; a new one is measured from the next pass.
        let samples: Vec<ThreadSample> = seen
            .run
            .iter()
            .filter(|(tid, _)| mine(tid))
            .filter_map(|(tid, ns)| {
                let was = prev.run.get(tid)?;
                let mut run_ns = ns.saturating_sub(*was);
                // Born during the interval: its share of the time it lived, scaled to the
                // interval (a thread busy since birth is busy).
                if let Some(at) = prev.born.get(tid) {
                    let lived = now.saturating_duration_since(*at).as_nanos() as u64;
                    if lived > 0 && lived < interval_ns {
                        run_ns = (u128::from(run_ns) * u128::from(interval_ns) / u128::from(lived))
                            .min(u128::from(u64::MAX)) as u64;
                    }
                }
                Some(ThreadSample { tid: *tid, run_ns })
            })
            .collect();
        let reserved = seen.runtime_cpus(job, &owners);
        // Those the plan places: the busy, and the pinned it may keep through a pass of grace.
        let wanted = samples
            .iter()
            .filter(|s| {
                thread_bind::is_busy(s, interval_ns, BUSY_PERCENT) || prev.pins.contains_key(&s.tid)
            })
            .count();
        let slots = pin_owner::open_slots(&self.topo, &job.cpus, job.mode, &reserved, wanted);
        let (mut applied, grace) = if prev.cpus == job.cpus {
            (
                std::mem::take(&mut prev.pins),
                std::mem::take(&mut prev.grace),
            )
        } else {
            (BTreeMap::new(), BTreeSet::new())
        };
        // A pin that is no longer in place (a runtime re-pinned the thread, or gave it the
        // whole set) is not pjw's any more.
        applied.retain(|tid, _| owners.get(tid) == Some(&Owner::Pjw));
        let plan = thread_bind::plan(
            &self.topo,
            &slots,
            &applied,
            &grace,
            &samples,
            interval_ns,
            BUSY_PERCENT,
        );
        let mut ours = std::mem::take(&mut prev.ours);
        let pid_of = |tid: &Tid| seen.pid.get(tid).copied().unwrap_or(tid.0);
        let mut pins = BTreeMap::new();
        for (tid, slot) in plan.pins {
            if applied.get(&tid) == Some(&slot) {
                pins.insert(tid, slot);
                continue;
            }
            let set = thread_bind::pin_set(&self.topo, &job.cpus, job.mode, slot);
            match port.set_affinity(tid.0, &set) {
                Ok(()) => {
                    debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %set, "thread pinned");
                    pins.insert(tid, slot);
                    ours.insert(tid, (pid_of(&tid), set));
                    r.pinned += 1;
                }
                Err(BindError::Gone) => {}
                Err(BindError::Failed(e)) => {
                    failed!(self.logged, job.seq, "cannot pin", cgroup = %job.cgroup, tid = tid.0, cpus = %set, error = %e);
                    r.failed += 1;
                }
            }
        }
        // A thread seen for the first time that inherited a pin of pjw's from the thread that
        // made it gets the whole job set until it is measured.
        for tid in seen.run.keys().filter(|t| !prev.run.contains_key(t)) {
            if owners.get(tid) == Some(&Owner::Inherited)
                && free(port, job, *tid, &mut self.logged, r)
            {
                ours.insert(*tid, (pid_of(tid), job.cpus));
            }
        }
        for tid in plan.unpin {
            match port.set_affinity(tid.0, &job.cpus) {
                Ok(()) => {
                    debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %job.cpus, "thread unpinned");
                    ours.insert(tid, (pid_of(&tid), job.cpus));
                    r.unpinned += 1;
                }
                Err(BindError::Gone) => {}
                Err(BindError::Failed(e)) => {
                    // Kept as pinned: the next pass tries again.
                    failed!(self.logged, job.seq, "cannot unpin", cgroup = %job.cgroup, tid = tid.0, error = %e);
                    if let Some(slot) = applied.get(&tid) {
                        pins.insert(tid, *slot);
                    }
                    r.failed += 1;
                }
            }
        }
        ours.retain(|tid, _| seen.run.contains_key(tid));
        // Judged by this pass (freed above if it still held the pin), or gone.
        let mut inherited = std::mem::take(&mut prev.inherited);
        inherited.retain(|tid, _| !seen.run.contains_key(tid));
        let mut launchers = launchers;
        launchers.retain(|p| seen.pid.values().any(|q| q == p));
        let grace = plan
            .grace
            .into_iter()
            .filter(|t| pins.contains_key(t))
            .collect();
        *prev = Track {
            cpus: job.cpus,
            pins,
            grace,
            run: seen.run,
            born: HashMap::new(),
            ours,
            reserved,
            inherited,
            launchers,
            at: now,
        };
    }

    /// Each live thread of `job`: its run time and its affinity (None where the job's
    /// processes could not be listed).
    fn read_job(&mut self, port: &dyn BindPort, job: &BindJob) -> Option<Seen> {
        let pids = match port.procs(&job.cgroup) {
            Ok(p) => p,
            Err(BindError::Gone) => return None,
            Err(BindError::Failed(e)) => {
                failed!(self.logged, job.seq, "cannot list the job's processes", cgroup = %job.cgroup, error = %e);
                return None;
            }
        };
        let mut seen = Seen::default();
        for pid in pids {
            let tids = match port.threads(pid) {
                Ok(t) => t,
                Err(BindError::Gone) => continue,
                Err(BindError::Failed(e)) => {
                    failed!(self.logged, job.seq, "cannot list threads", cgroup = %job.cgroup, pid, error = %e);
                    continue;
                }
            };
            for tid in tids {
                match port.runnable_ns(pid, tid) {
                    Ok(ns) => {
                        seen.run.insert(Tid(tid), ns);
                        seen.pid.insert(Tid(tid), pid);
                    }
                    Err(BindError::Gone) => continue,
                    Err(BindError::Failed(e)) => {
                        failed!(self.logged, job.seq, "cannot read run time", cgroup = %job.cgroup, tid, error = %e);
                        continue;
                    }
                }
                match port.affinity(tid) {
                    Ok(a) => {
                        seen.affinity.insert(Tid(tid), a);
                    }
                    Err(BindError::Gone) => {
                        seen.run.remove(&Tid(tid));
                    }
                    Err(BindError::Failed(e)) => {
                        failed!(self.logged, job.seq, "cannot read a thread's affinity", cgroup = %job.cgroup, tid, error = %e);
                    }
                }
            }
        }
        Some(seen)
    }
}

/// What one pass read of a job's threads.
#[derive(Debug, Default)]
struct Seen {
    /// Run time per live thread.
    run: HashMap<Tid, u64>,
    /// Affinity per thread whose affinity could be read.
    affinity: HashMap<Tid, CpuSet>,
    /// Each thread's process.
    pid: HashMap<Tid, u32>,
}

impl Seen {
    /// The CPUs runtime pins hold: the affinities of the threads `owners` calls a runtime's
    /// (every narrower one when `owners` is empty: the first look, when pjw has set nothing).
    fn runtime_cpus(&self, job: &BindJob, owners: &HashMap<Tid, Owner>) -> CpuSet {
        let mut out = CpuSet::new();
        for (tid, cur) in &self.affinity {
            let o = owners
                .get(tid)
                .copied()
                .unwrap_or_else(|| pin_owner::owner(&job.cpus, cur, None, &[]));
            if o == Owner::Runtime {
                out = out.union(&cur.intersection(&job.cpus));
            }
        }
        out
    }
}

/// A thread the kernel just reported born (a fork event), or a process that just called exec,
/// in a job that binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Born {
    pub job: BindJob,
    /// Its thread group (process) and its own id.
    pub tgid: u32,
    pub tid: u32,
    pub at: Birth,
}

/// Which event a [`Born`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Birth {
    /// The thread or process was made.
    Fork,
    /// The process replaced its program.
    Exec,
}

impl Balancer {
    /// Place a thread just born (a process-connector fork event) without waiting for the next
    /// pass: pinned to the job's least pinned open slot, its run time measured from now, so the
    /// next pass keeps the pin if it is busy and gives it the job set back if not (a guess gets
    /// no pass of grace).
    ///
    /// A new **process** is not pinned: it usually execs a program whose runtime sizes itself
    /// from its affinity when it starts (libgomp, OpenBLAS), and pinned to one CPU it would
    /// start one thread; it keeps the job set (gets it back if it inherited a pin of pjw's) and
    /// is measured from the first pass that sees it, so it is placed a full interval after its
    /// start at the earliest. Nor is a new thread of a process none of whose threads pjw has
    /// pinned busy: a launcher's helper thread (`mpirun` forks its ranks from one, and a rank
    /// forked on a pinned thread was left unbound by Open MPI) or a worker of a program that
    /// just started; it is measured from birth, so the next pass places it. Nothing for a thread born pinned by
    /// a runtime (libgomp creates its threads on their places; Open MPI binds each rank), a job
    /// not balanced yet (its first pass only looks) or whose CPUs changed since.
    pub fn place_born(&mut self, port: &dyn BindPort, b: &Born, now: Instant, r: &mut PassReport) {
        let Some(t) = self.jobs.get_mut(&b.job.seq) else {
            return;
        };
        let tid = Tid(b.tid);
        if b.job.mode == BindMode::None || t.cpus != b.job.cpus {
            return;
        }
        if b.at == Birth::Exec {
            return exec_frees_an_inherited_pin(t, port, b, &mut self.logged, r);
        }
        if t.run.contains_key(&tid) {
            return;
        }
        let current = match port.affinity(b.tid) {
            Ok(a) => a,
            Err(BindError::Gone) => return,
            Err(BindError::Failed(e)) => {
                failed!(self.logged, b.job.seq, "cannot read a thread's affinity", cgroup = %b.job.cgroup, tid = b.tid, error = %e);
                return;
            }
        };
        let owner = t.owner(port, &b.job.cpus, (b.tgid, tid), true, &current);
        if owner == Owner::Runtime {
            return;
        }
        let ns = match port.runnable_ns(b.tgid, b.tid) {
            Ok(ns) => ns,
            Err(BindError::Gone) => return,
            Err(BindError::Failed(e)) => {
                failed!(self.logged, b.job.seq, "cannot read a new thread's run time", cgroup = %b.job.cgroup, tid = b.tid, error = %e);
                return;
            }
        };
        // A thread of a process pjw has not seen compute (a launcher's helper thread; a
        // program just started) is measured before it is placed: a launcher's forks inherit
        // its threads' affinity, and Open MPI does not bind a rank forked on a pinned thread.
        let computes = t
            .pins
            .keys()
            .any(|p| t.ours.get(p).is_some_and(|(pid, _)| *pid == b.tgid));
        if b.tgid == b.tid && owner == Owner::Inherited {
            // Born on a pin of pjw's: its parent is a launcher, and the child is freed when it
            // execs, not now — a launcher binds its child between fork and exec (Open MPI its
            // ranks, taskset, hwloc-bind), and freeing it now could undo that binding.
            t.inherited.insert(tid, current);
            t.make_launcher(port, &b.job, b.tgid, &mut self.logged, r);
            return;
        }
        if b.tgid == b.tid || !computes {
            // The job set (back, if it inherited a pin of pjw's).
            if owner == Owner::Inherited && !free(port, &b.job, tid, &mut self.logged, r) {
                return;
            }
            // Seen free at birth (or freed): a pin it gets later is not an inheritance but
            // its runtime's (Open MPI binds a rank, libgomp its first thread), even when it
            // equals a pin pjw holds on the parent's threads.
            t.ours.insert(tid, (b.tgid, b.job.cpus));
            // A thread is measured from birth. A new process only from the first pass that
            // sees it, so it is not pinned before a full interval has passed: the program it
            // execs sizes its runtime from its affinity as it starts (libgomp also pins its
            // first thread then, under OMP_PROC_BIND), and a pin before that is all it sees.
            if b.tgid != b.tid {
                t.run.insert(tid, ns);
                t.born.insert(tid, now);
            }
            return;
        }
        let slots = pin_owner::open_slots(
            &self.topo,
            &b.job.cpus,
            b.job.mode,
            &t.reserved,
            t.pins.len() + 1,
        );
        let Some(slot) = thread_bind::place_one(&self.topo, &slots, &t.pins) else {
            return;
        };
        let set = thread_bind::pin_set(&self.topo, &b.job.cpus, b.job.mode, slot);
        match port.set_affinity(b.tid, &set) {
            Ok(()) => {
                debug!(cgroup = %b.job.cgroup, tid = b.tid, cpus = %set, "new thread pinned");
                t.run.insert(tid, ns);
                t.born.insert(tid, now);
                t.pins.insert(tid, slot);
                t.ours.insert(tid, (b.tgid, set));
                // Its pin is a guess, not a measurement: no pass of grace if it is idle.
                t.grace.insert(tid);
                r.pinned += 1;
            }
            Err(BindError::Gone) => {}
            Err(BindError::Failed(e)) => {
                failed!(self.logged, b.job.seq, "cannot pin a new thread", cgroup = %b.job.cgroup, tid = b.tid, cpus = %set, error = %e);
                r.failed += 1;
            }
        }
    }
}

/// A process some of whose threads carry a runtime's pins elsewhere than its first thread is
/// that runtime's: its first thread's pin is the runtime's too, even where it equals a pin pjw
/// holds on the parent's threads (an Open MPI rank forked by a launcher pjw pinned, its libgomp
/// master placed on the same CPU as the launcher, its workers on the rank's other CPUs), so it
/// is not taken for an inheritance. Threads all on their first thread's CPUs inherited them.
fn runtime_processes_keep_their_pins(
    mut owners: HashMap<Tid, Owner>,
    seen: &Seen,
) -> HashMap<Tid, Owner> {
    let runtime: BTreeSet<u32> = owners
        .iter()
        .filter(|(_, o)| **o == Owner::Runtime)
        .filter_map(|(tid, _)| {
            let pid = *seen.pid.get(tid)?;
            let first = seen.affinity.get(&Tid(pid));
            (first.is_some() && seen.affinity.get(tid) != first).then_some(pid)
        })
        .collect();
    for (tid, o) in owners.iter_mut() {
        if *o == Owner::Inherited && runtime.contains(&tid.0) && seen.pid.get(tid) == Some(&tid.0) {
            *o = Owner::Runtime;
        }
    }
    owners
}

/// Process `b` execs: it is given the whole job set if it still holds the pin it was born on
/// (nobody bound it before its exec), so the program it runs sizes itself from its job's CPUs.
fn exec_frees_an_inherited_pin(
    t: &mut Track,
    port: &dyn BindPort,
    b: &Born,
    logged: &mut Logged,
    r: &mut PassReport,
) {
    let tid = Tid(b.tid);
    let Some(pin) = t.inherited.remove(&tid) else {
        return;
    };
    match port.affinity(b.tid) {
        Ok(current) if current == pin => {
            if free(port, &b.job, tid, logged, r) {
                t.ours.insert(tid, (b.tgid, b.job.cpus));
            }
        }
        // Bound by its launcher before the exec: the launcher's pin.
        Ok(_) | Err(BindError::Gone) => {}
        Err(BindError::Failed(e)) => {
            failed!(logged, b.job.seq, "cannot read a thread's affinity", cgroup = %b.job.cgroup, tid = b.tid, error = %e);
        }
    }
}

impl Track {
    /// The parent of process `child` forked it on a pin of pjw's: the parent is a launcher, its
    /// threads get the job set back and are not pinned again, so its next children start free.
    fn make_launcher(
        &mut self,
        port: &dyn BindPort,
        job: &BindJob,
        child: u32,
        logged: &mut Logged,
        r: &mut PassReport,
    ) {
        let Ok(parent) = port.parent(child) else {
            return;
        };
        if !self.launchers.insert(parent) {
            return;
        }
        let pinned: Vec<Tid> = self
            .ours
            .iter()
            .filter(|(_, (pid, set))| *pid == parent && *set != job.cpus)
            .map(|(tid, _)| *tid)
            .collect();
        for tid in pinned {
            // Re-pinned by a runtime since: its pin, not ours to undo.
            if port.affinity(tid.0).ok().as_ref() != self.ours_of(&tid) {
                continue;
            }
            if free(port, job, tid, logged, r) {
                debug!(cgroup = %job.cgroup, tid = tid.0, parent, "launcher's thread unpinned");
                self.ours.insert(tid, (parent, job.cpus));
                self.pins.remove(&tid);
                self.grace.remove(&tid);
                r.unpinned += 1;
            }
        }
    }
}

/// What the engine sends the binder's thread.
#[derive(Debug)]
pub enum BindMsg {
    /// A balancing pass over these jobs.
    Pass(Vec<BindJob>),
    /// Threads just born in jobs that bind.
    Born(Vec<Born>),
    /// A sampler tick: profile the jobs' top threads.
    Profile(ProfileTick),
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
    match port.set_affinity(tid.0, &job.cpus) {
        Ok(()) => true,
        Err(BindError::Gone) => false,
        Err(BindError::Failed(e)) => {
            failed!(logged, job.seq, "cannot give a new thread the job's cpus", cgroup = %job.cgroup, tid = tid.0, error = %e);
            r.failed += 1;
            false
        }
    }
}

/// The binder's thread: the engine sends it job snapshots; it runs a pass for each.
#[derive(Debug)]
pub struct Binder {
    tx: mpsc::Sender<BindMsg>,
}

impl Binder {
    /// Start the thread balancing through `port`.
    pub fn spawn(port: impl BindPort + Sync + 'static, topo: Topology) -> std::io::Result<Binder> {
        let (tx, rx) = mpsc::channel::<BindMsg>();
        std::thread::Builder::new()
            .name("pjw-bind".into())
            .spawn(move || {
                let mut b = Balancer::new(topo);
                let mut prof = ThreadProfiler::default();
                while let Ok(msg) = rx.recv() {
                    match msg {
                        BindMsg::Pass(mut jobs) => {
                            // Passes that queued up while one ran: only the newest counts.
                            let mut born = Vec::new();
                            let mut ticks = Vec::new();
                            while let Ok(more) = rx.try_recv() {
                                match more {
                                    BindMsg::Pass(newer) => jobs = newer,
                                    BindMsg::Born(b) => born.extend(b),
                                    BindMsg::Profile(t) => ticks.push(t),
                                }
                            }
                            // What the pass reads is kept for the thread profile that follows.
                            let rec = threads::Recorder::new(&port);
                            let at = Instant::now();
                            b.pass(&rec, &jobs, at);
                            prof.remember(rec.take(), at);
                            for t in ticks {
                                prof.tick(&port, t, &|j, tid| b.pin_of(j, tid));
                            }
                            let mut r = PassReport::default();
                            for t in &born {
                                b.place_born(&port, t, Instant::now(), &mut r);
                            }
                        }
                        BindMsg::Born(born) => {
                            let mut r = PassReport::default();
                            for t in &born {
                                b.place_born(&port, t, Instant::now(), &mut r);
                            }
                        }
                        BindMsg::Profile(t) => prof.tick(&port, t, &|j, tid| b.pin_of(j, tid)),
                    }
                }
            })?;
        Ok(Binder { tx })
    }

    /// A sender that only collects the snapshots (engine tests).
    #[cfg(test)]
    pub fn collecting() -> (Binder, mpsc::Receiver<BindMsg>) {
        let (tx, rx) = mpsc::channel();
        (Binder { tx }, rx)
    }

    /// Queue a pass over `jobs`; never blocks.
    pub fn send(&self, jobs: Vec<BindJob>) {
        let _ = self.tx.send(BindMsg::Pass(jobs));
    }

    /// Queue a thread profile tick; never blocks.
    pub fn profile(&self, tick: ProfileTick) {
        let _ = self.tx.send(BindMsg::Profile(tick));
    }

    /// Queue the placement of threads just born; never blocks.
    pub fn born(&self, born: Vec<Born>) {
        let _ = self.tx.send(BindMsg::Born(born));
    }
}
