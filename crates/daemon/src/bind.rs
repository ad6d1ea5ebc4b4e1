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
//! pinned slot and measured from birth. A thread first seen by a pass instead gets the whole job
//! set: it may have inherited a pin from the thread that made it (or from before a daemon
//! restart), and is measured from the next pass. A thread or process that vanished between the
//! listing and the read is normal and skipped; any other error is logged (at warn once per job
//! and kind) and the thread is left as it is (not recorded as pinned).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc;
use std::time::Instant;

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
    at: Instant,
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
        let pids = match port.procs(&job.cgroup) {
            Ok(p) => p,
            Err(BindError::Gone) => return,
            Err(BindError::Failed(e)) => {
                failed!(self.logged, job.seq, "cannot list the job's processes", cgroup = %job.cgroup, error = %e);
                return;
            }
        };
        let mut run = HashMap::new();
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
                        run.insert(Tid(tid), ns);
                    }
                    Err(BindError::Gone) => {}
                    Err(BindError::Failed(e)) => {
                        failed!(self.logged, job.seq, "cannot read run time", cgroup = %job.cgroup, tid, error = %e)
                    }
                }
            }
        }
        let Some(prev) = self.jobs.get_mut(&job.seq) else {
            // The first look: run times since now are measured at the next pass. Every thread
            // gets the whole job set: one pinned before a daemon restart is unknown here.
            for tid in run.keys() {
                free(port, job, *tid, &mut self.logged, r);
            }
            self.jobs.insert(
                job.seq,
                Track {
                    cpus: job.cpus,
                    pins: BTreeMap::new(),
                    grace: BTreeSet::new(),
                    run,
                    born: HashMap::new(),
                    at: now,
                },
            );
            return;
        };
        let interval_ns = now.saturating_duration_since(prev.at).as_nanos() as u64;
        // Threads seen at both passes; a new one is measured from the next pass.
        let samples: Vec<ThreadSample> = run
            .iter()
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
        let slots = thread_bind::slots(&self.topo, &job.cpus, job.mode);
        let (applied, grace) = if prev.cpus == job.cpus {
            (
                std::mem::take(&mut prev.pins),
                std::mem::take(&mut prev.grace),
            )
        } else {
            (BTreeMap::new(), BTreeSet::new())
        };
        let plan = thread_bind::plan(
            &self.topo,
            &slots,
            &applied,
            &grace,
            &samples,
            interval_ns,
            BUSY_PERCENT,
        );
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
                    r.pinned += 1;
                }
                Err(BindError::Gone) => {}
                Err(BindError::Failed(e)) => {
                    failed!(self.logged, job.seq, "cannot pin", cgroup = %job.cgroup, tid = tid.0, cpus = %set, error = %e);
                    r.failed += 1;
                }
            }
        }
        // A thread seen for the first time may have inherited a pin from the thread that
        // made it: it gets the whole job set until it is measured.
        for tid in run.keys().filter(|t| !prev.run.contains_key(t)) {
            free(port, job, *tid, &mut self.logged, r);
        }
        for tid in plan.unpin {
            match port.set_affinity(tid.0, &job.cpus) {
                Ok(()) => {
                    debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %job.cpus, "thread unpinned");
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
        let grace = plan
            .grace
            .into_iter()
            .filter(|t| pins.contains_key(t))
            .collect();
        *prev = Track {
            cpus: job.cpus,
            pins,
            grace,
            run,
            born: HashMap::new(),
            at: now,
        };
    }
}

/// A thread the kernel just reported born (a fork event) in a job that binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Born {
    pub job: BindJob,
    /// Its thread group (process) and its own id.
    pub tgid: u32,
    pub tid: u32,
}

impl Balancer {
    /// Place a thread just born (a process-connector fork event) without waiting for the next
    /// pass: pinned to the job's least pinned slot, its run time measured from now, so the next
    /// pass keeps the pin if it is busy and gives it the job set back if not (a guess gets no
    /// pass of grace). Nothing for a job
    /// not balanced yet (its first pass frees every thread) or whose CPUs changed since.
    pub fn place_born(&mut self, port: &dyn BindPort, b: &Born, now: Instant, r: &mut PassReport) {
        let Some(t) = self.jobs.get_mut(&b.job.seq) else {
            return;
        };
        let tid = Tid(b.tid);
        if b.job.mode == BindMode::None || t.cpus != b.job.cpus || t.run.contains_key(&tid) {
            return;
        }
        let slots = thread_bind::slots(&self.topo, &b.job.cpus, b.job.mode);
        let Some(slot) = thread_bind::place_one(&self.topo, &slots, &t.pins) else {
            return;
        };
        let ns = match port.runnable_ns(b.tgid, b.tid) {
            Ok(ns) => ns,
            Err(BindError::Gone) => return,
            Err(BindError::Failed(e)) => {
                failed!(self.logged, b.job.seq, "cannot read a new thread's run time", cgroup = %b.job.cgroup, tid = b.tid, error = %e);
                return;
            }
        };
        let set = thread_bind::pin_set(&self.topo, &b.job.cpus, b.job.mode, slot);
        match port.set_affinity(b.tid, &set) {
            Ok(()) => {
                debug!(cgroup = %b.job.cgroup, tid = b.tid, cpus = %set, "new thread pinned");
                t.run.insert(tid, ns);
                t.born.insert(tid, now);
                t.pins.insert(tid, slot);
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

/// Give thread `tid` the whole job set (a new thread, or the first look at a job).
fn free(port: &dyn BindPort, job: &BindJob, tid: Tid, logged: &mut Logged, r: &mut PassReport) {
    match port.set_affinity(tid.0, &job.cpus) {
        Ok(()) => {}
        Err(BindError::Gone) => {}
        Err(BindError::Failed(e)) => {
            failed!(logged, job.seq, "cannot give a new thread the job's cpus", cgroup = %job.cgroup, tid = tid.0, error = %e);
            r.failed += 1;
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
