//! Per-thread profiles, on the binder's thread (docs/decisions.md (cb)).
//!
//! At every sampler tick the engine sends the binder the started jobs ([`ProfileTick`]) and
//! returns. Here, per job: its threads' scheduler statistics (`schedstat`: time on a CPU, time
//! runnable waiting for one) — taken from the balancing pass that just read them when the job
//! binds, so a thread's file is never read twice in one interval — give each thread's running
//! and waiting since its last reading; the top N by that activity ([`top_threads`], pure) get
//! two more reads each (`stat`: name and last CPU; `sched`: migrations) and a row, with the pin
//! the balancer gave them — except a thread that neither ran nor waited since, which gets a row
//! once a minute ([`IDLE_ROW_EVERY`]), its facts unchanged and unread. Rows go to the profile
//! writer. Ranking needs every thread read; it is done at most every [`RANK_EVERY`] (or at
//! every tick of a job read in turns): between rankings only the top threads are read, so a
//! thread that turns busy gets rows within that time, its first one covering all the time since
//! its previous reading. `sched` (migrations) is read again when a thread's last CPU changed,
//! else at most every [`MIGRATIONS_EVERY`]. Per job and tick that is, at a ranking, one listing
//! per process and at most `scan` small reads, and N to 3N reads at every tick: nothing on the
//! engine's thread, and the rows stored grow with jobs (N each), not with threads.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pjw_core::thread_bind::BindMode;
use pjw_core::{CpuSet, Tid};
use pjw_store::ThreadSample;
use tracing::debug;

use super::{BindError, BindPort};
use crate::profile::{WriteOp, Writer};

/// One thread's scheduler statistics (`/proc/PID/task/TID/schedstat`), nanoseconds since it
/// started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedRead {
    pub run_ns: u64,
    pub wait_ns: u64,
}

/// What the top threads' rows add (`stat`): read only for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFacts {
    pub comm: String,
    /// The CPU it last ran on.
    pub cpu: u32,
}

/// One job to profile, as the engine sees it at the tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfJob {
    pub seq: i64,
    pub cgroup: String,
    pub cpus: CpuSet,
    pub mode: BindMode,
}

/// A sampler tick's request.
#[derive(Debug)]
pub struct ProfileTick {
    pub ts_ms: i64,
    /// Rows per job (`profile.threads`).
    pub top: usize,
    /// Threads of one job read per tick at most (`profile.threads_scan`); the rest wait for the
    /// next tick, in turn.
    pub scan: usize,
    /// A balancing pass's readings younger than this are used instead of reading again.
    pub reuse: Duration,
    pub jobs: Vec<ProfJob>,
    pub writer: Writer,
}

/// One thread's reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub pid: u32,
    pub tid: u32,
    pub sched: SchedRead,
}

/// A thread's activity since its previous reading (pure input of [`top_threads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    pub reading: Reading,
    pub run_ns: u64,
    pub wait_ns: u64,
    /// Time since its previous reading; 0 for a thread seen for the first time.
    pub span_ns: u64,
}

/// The `n` most active threads: the largest share of their span running or runnable first (a
/// rate, so threads last read at different times compare fairly: between rankings the top
/// threads are read every tick, the others not), then most CPU time since they started
/// (threads seen for the first time have no span), then by id.
pub fn top_threads(mut all: Vec<Activity>, n: usize) -> Vec<Activity> {
    let rate = |a: &Activity| match a.span_ns {
        0 => 0,
        span => u128::from(a.run_ns + a.wait_ns) * 1_000_000_000 / u128::from(span),
    };
    all.sort_by(|a, b| {
        rate(b)
            .cmp(&rate(a))
            .then(b.reading.sched.run_ns.cmp(&a.reading.sched.run_ns))
            .then(a.reading.tid.cmp(&b.reading.tid))
    });
    all.truncate(n);
    all
}

/// A port that remembers what a balancing pass read, per job, for the profile that follows.
pub struct Recorder<'a> {
    inner: &'a (dyn BindPort + Sync),
    current: std::cell::RefCell<Option<String>>,
    reads: std::cell::RefCell<HashMap<String, Vec<Reading>>>,
}

impl std::fmt::Debug for Recorder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("reads", &self.reads)
            .finish()
    }
}

impl<'a> Recorder<'a> {
    pub fn new(inner: &'a (dyn BindPort + Sync)) -> Recorder<'a> {
        Recorder {
            inner,
            current: Default::default(),
            reads: Default::default(),
        }
    }

    /// What was read, per job cgroup.
    pub fn take(self) -> HashMap<String, Vec<Reading>> {
        self.reads.into_inner()
    }
}

impl BindPort for Recorder<'_> {
    fn procs(&self, cgroup: &str) -> Result<Vec<u32>, BindError> {
        let r = self.inner.procs(cgroup);
        if r.is_ok() {
            *self.current.borrow_mut() = Some(cgroup.to_string());
            self.reads
                .borrow_mut()
                .insert(cgroup.to_string(), Vec::new());
        } else {
            *self.current.borrow_mut() = None;
        }
        r
    }
    fn threads(&self, pid: u32) -> Result<Vec<u32>, BindError> {
        self.inner.threads(pid)
    }
    fn runnable_ns(&self, pid: u32, tid: u32) -> Result<u64, BindError> {
        let s = self.inner.sched(pid, tid)?;
        if let Some(cg) = self.current.borrow().as_ref() {
            if let Some(v) = self.reads.borrow_mut().get_mut(cg) {
                v.push(Reading { pid, tid, sched: s });
            }
        }
        Ok(s.run_ns.saturating_add(s.wait_ns))
    }
    fn sched(&self, pid: u32, tid: u32) -> Result<SchedRead, BindError> {
        self.inner.sched(pid, tid)
    }
    fn task(&self, pid: u32, tid: u32) -> Result<TaskFacts, BindError> {
        self.inner.task(pid, tid)
    }
    fn migrations(&self, pid: u32, tid: u32) -> Option<u64> {
        self.inner.migrations(pid, tid)
    }
    fn set_affinity(&self, cgroup: &str, tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
        self.inner.set_affinity(cgroup, tid, cpus)
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError> {
        self.inner.affinity(tid)
    }
    fn parent(&self, pid: u32) -> Result<u32, BindError> {
        self.inner.parent(pid)
    }
}

/// One thread's last row: its reading and when, its facts (reused while it stays idle) and its
/// migrations with when they were read.
#[derive(Clone, Debug)]
struct Stored {
    sched: SchedRead,
    at: Instant,
    facts: TaskFacts,
    migrations: Option<u64>,
    migrations_at: Instant,
}

/// How the threads of a job were read at a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Every thread: a ranking.
    All,
    /// `scan` of them, in turns.
    Turn,
    /// Only the top threads of the last ranking.
    Top,
}

/// What the profiler remembers of one job between ticks.
#[derive(Debug, Default)]
struct JobThreads {
    /// Each thread's last reading and when it was taken.
    prev: HashMap<u32, (SchedRead, Instant)>,
    /// Each thread's last row.
    stored: HashMap<u32, Stored>,
    /// Where the next tick's scan starts, for a job with more threads than `scan`.
    offset: usize,
    /// The last ranking of every thread.
    ranked: Option<Ranking>,
}

/// A ranking of every thread of a job: when, for how many rows per job (`profile.threads` may
/// change), and its top threads (pid, tid).
#[derive(Debug)]
struct Ranking {
    at: Instant,
    rows: usize,
    top: Vec<(u32, u32)>,
}

impl JobThreads {
    /// What each thread of `reads`, taken at `at`, did since its previous reading. Counters
    /// lower than that reading's are a new thread that got the id: seen for the first time.
    fn activities(&self, reads: &[Reading], at: Instant) -> Vec<Activity> {
        reads
            .iter()
            .map(|r| match self.prev.get(&r.tid) {
                Some((p, was)) if at >= *was && !went_back(&r.sched, p) => Activity {
                    reading: *r,
                    run_ns: r.sched.run_ns.saturating_sub(p.run_ns),
                    wait_ns: r.sched.wait_ns.saturating_sub(p.wait_ns),
                    span_ns: at.saturating_duration_since(*was).as_nanos() as u64,
                },
                _ => Activity {
                    reading: *r,
                    run_ns: 0,
                    wait_ns: 0,
                    span_ns: 0,
                },
            })
            .collect()
    }

    /// Keep `reads` as the threads' last readings, forgetting the threads that are gone
    /// (`complete`: every thread was read) or, read in turns, bounding what is kept.
    fn remember(&mut self, reads: &[Reading], at: Instant, complete: bool, scan: usize) {
        if complete {
            // Every thread was read: those not there any more are gone.
            self.prev.clear();
            self.stored
                .retain(|tid, _| reads.iter().any(|r| r.tid == *tid));
        } else if self.prev.len() > 8 * scan.max(1) {
            // Read in turns: threads that exited cannot be told apart; bounded instead.
            self.prev.clear();
            self.stored.clear();
        }
        for r in reads {
            self.prev.insert(r.tid, (r.sched, at));
        }
    }

    /// Keep `reads` of the top threads alone as their last readings.
    fn refresh(&mut self, reads: &[Reading], at: Instant) {
        for r in reads {
            self.prev.insert(r.tid, (r.sched, at));
        }
    }

    /// The top threads to read alone at `now`, when the last ranking is recent enough and was
    /// for `top` rows; None when every thread is to be read (a ranking is due).
    fn between_rankings(&self, now: Instant, top: usize) -> Option<&[(u32, u32)]> {
        match &self.ranked {
            Some(r) if r.rows == top && now.saturating_duration_since(r.at) < RANK_EVERY => {
                Some(&r.top)
            }
            _ => None,
        }
    }

    /// After reading `how` at `at`: a ranking of every thread starts a new interval; a read in
    /// turns has none; a top thread that could not be read (gone) brings the next ranking now.
    fn note_ranking(&mut self, how: Read, at: Instant, top: &[Activity], n: usize) {
        match how {
            Read::All => {
                let top = top.iter().map(|a| (a.reading.pid, a.reading.tid)).collect();
                self.ranked = Some(Ranking { at, rows: n, top });
            }
            Read::Turn => self.ranked = None,
            Read::Top => {
                if self
                    .ranked
                    .as_ref()
                    .is_some_and(|r| r.top.len() != top.len())
                {
                    self.ranked = None;
                }
            }
        }
    }

    /// The row of top thread `a` of `job` at `at`; none for an idle thread whose last row is
    /// recent, or one that cannot be read.
    fn row(
        &mut self,
        port: &dyn BindPort,
        (job, tick): (&ProfJob, &ProfileTick),
        pin: &dyn Fn(&ProfJob, Tid) -> Option<CpuSet>,
        a: Activity,
        at: Instant,
    ) -> Option<ThreadSample> {
        let Reading { pid, tid, sched } = a.reading;
        let idle = a.span_ns > 0 && a.run_ns + a.wait_ns == 0;
        // Counters lower than at its last row: another thread got the id since; its name, CPU
        // and migrations are its own, read afresh.
        let last = self
            .stored
            .get(&tid)
            .filter(|l| !went_back(&sched, &l.sched));
        if idle && last.is_some_and(|l| at.saturating_duration_since(l.at) < IDLE_ROW_EVERY) {
            return None;
        }
        // A thread that did not run cannot have moved or migrated: its facts are kept.
        let facts = match last {
            Some(l) if idle => l.facts.clone(),
            _ => match port.task(pid, tid) {
                Ok(f) => f,
                Err(BindError::Gone) => return None,
                Err(BindError::Failed(e)) => {
                    debug!(cgroup = %job.cgroup, tid, error = %e, "thread profile: cannot read the thread");
                    return None;
                }
            },
        };
        let (migrations, migrations_at) = match last {
            Some(l) if !migrations_due(l, &facts, at) => (l.migrations, l.migrations_at),
            _ => (port.migrations(pid, tid), at),
        };
        // Deltas since the thread's last row (the rows of a thread cover its time without
        // gaps or overlaps), or since its previous reading for its first row.
        let (run_ns, wait_ns, span_ns) = match last {
            Some(l) if at >= l.at => (
                sched.run_ns.saturating_sub(l.sched.run_ns),
                sched.wait_ns.saturating_sub(l.sched.wait_ns),
                at.saturating_duration_since(l.at).as_nanos() as u64,
            ),
            _ => (a.run_ns, a.wait_ns, a.span_ns),
        };
        let us = |ns: u64| ns / 1000;
        // A span shorter than what ran in it (readings taken a little apart) is the run.
        let span = span_ns.max(run_ns + wait_ns);
        let row = ThreadSample {
            seq: job.seq,
            ts_ms: tick.ts_ms,
            tid,
            pid,
            comm: facts.comm.clone(),
            cpu_usec: us(sched.run_ns),
            run_usec: us(run_ns),
            wait_usec: us(wait_ns),
            span_usec: if span_ns == 0 { 0 } else { us(span) },
            cpu: facts.cpu,
            migrations,
            pin: pin(job, Tid(tid)).map(|c| c.to_string()),
        };
        self.stored.insert(
            tid,
            Stored {
                sched,
                at,
                facts,
                migrations,
                migrations_at,
            },
        );
        Some(row)
    }
}

/// Whether reading `now` of a thread id has lower counters than `was`: not the same thread.
fn went_back(now: &SchedRead, was: &SchedRead) -> bool {
    now.run_ns < was.run_ns || now.wait_ns < was.wait_ns
}

/// Whether a thread's migrations are to be read again for a row at `at`: it was last seen on
/// another CPU (it migrated at least once), or its count is older than [`MIGRATIONS_EVERY`]
/// (it may have gone and come back).
fn migrations_due(last: &Stored, facts: &TaskFacts, at: Instant) -> bool {
    last.facts.cpu != facts.cpu
        || at.saturating_duration_since(last.migrations_at) >= MIGRATIONS_EVERY
}

/// A top thread that neither ran nor waited since its last reading gets a row at most this
/// often: its next row's span covers the time in between, so its shares stay exact, and an
/// idle thread costs no `stat`, no `sched` and no row at most ticks.
pub const IDLE_ROW_EVERY: Duration = Duration::from_secs(60);

/// Every thread of a job is read and ranked at most this often (and at every tick of a job
/// read in turns); between rankings only its top threads are read. A thread that turns busy
/// gets rows within this time; no time is lost, because a row holds the deltas since the
/// thread's previous reading or row.
pub const RANK_EVERY: Duration = Duration::from_secs(5);

/// A top thread's migrations (`sched`, the longest file read per thread) are read again when
/// its last CPU changed, else at most this often: a row's count is at most this old.
pub const MIGRATIONS_EVERY: Duration = Duration::from_secs(10);

/// The profiler's state: per job, the threads' last readings; per job cgroup, what the last
/// balancing pass read.
#[derive(Debug, Default)]
pub struct ThreadProfiler {
    jobs: HashMap<i64, JobThreads>,
    passes: HashMap<String, (Instant, Vec<Reading>)>,
}

impl ThreadProfiler {
    /// A balancing pass read these at `at`.
    pub fn remember(&mut self, reads: HashMap<String, Vec<Reading>>, at: Instant) {
        self.passes.retain(|cg, _| reads.contains_key(cg));
        for (cg, r) in reads {
            self.passes.insert(cg, (at, r));
        }
    }

    /// One tick: the rows of every job's top threads. `pin` gives the CPUs the balancer pinned a
    /// thread of a job to.
    pub fn sample(
        &mut self,
        port: &dyn BindPort,
        tick: &ProfileTick,
        pin: &dyn Fn(&ProfJob, Tid) -> Option<CpuSet>,
        now: Instant,
    ) -> Vec<ThreadSample> {
        self.jobs
            .retain(|seq, _| tick.jobs.iter().any(|j| j.seq == *seq));
        let mut rows = Vec::new();
        for job in &tick.jobs {
            let fresh = self
                .passes
                .get(&job.cgroup)
                .filter(|(at, _)| now.saturating_duration_since(*at) <= tick.reuse)
                .map(|(at, r)| (*at, r.clone()));
            let st = self.jobs.entry(job.seq).or_default();
            // A balancing pass reads every thread; a read of our own may stop at `scan`, or,
            // between rankings, read the top threads alone.
            let between = st.between_rankings(now, tick.top).map(<[_]>::to_vec);
            let (at, reads, how) = match (fresh, between) {
                (Some((at, r)), _) => (at, r, Read::All),
                (None, Some(top)) => match read_top(port, job, &top) {
                    Some(r) => (now, r, Read::Top),
                    None => continue,
                },
                (None, None) => match read_job(port, job, tick.scan, &mut st.offset) {
                    Some((r, true)) => (now, r, Read::All),
                    Some((r, false)) => (now, r, Read::Turn),
                    None => continue,
                },
            };
            let acts = st.activities(&reads, at);
            if how == Read::Top {
                st.refresh(&reads, at);
            } else {
                st.remember(&reads, at, how == Read::All, tick.scan);
            }
            let top = top_threads(acts, tick.top);
            st.note_ranking(how, at, &top, tick.top);
            for a in top {
                rows.extend(st.row(port, (job, tick), pin, a, at));
            }
        }
        rows
    }

    /// Run a tick and hand its rows to the writer.
    pub fn tick(
        &mut self,
        port: &dyn BindPort,
        tick: ProfileTick,
        pin: &dyn Fn(&ProfJob, Tid) -> Option<CpuSet>,
    ) {
        let t0 = Instant::now();
        let rows = self.sample(port, &tick, pin, Instant::now());
        debug!(
            jobs = tick.jobs.len(),
            rows = rows.len(),
            took_us = t0.elapsed().as_micros() as u64,
            "threads profiled"
        );
        if !rows.is_empty() {
            tick.writer.send(WriteOp::Threads(rows));
        }
    }
}

/// Read the top threads `top` of `job` alone; one that cannot be read is left out (gone, or a
/// failure logged at debug), which brings the next ranking forward. A thread whose process is
/// no longer in the job's cgroup is left out unread: its process id may have been given to
/// another process since the ranking. None: the job's processes cannot be listed.
fn read_top(port: &dyn BindPort, job: &ProfJob, top: &[(u32, u32)]) -> Option<Vec<Reading>> {
    let pids = match port.procs(&job.cgroup) {
        Ok(p) => p,
        Err(e) => {
            debug!(cgroup = %job.cgroup, error = ?e, "thread profile: cannot list the job's processes");
            return None;
        }
    };
    let pids: std::collections::HashSet<u32> = pids.into_iter().collect();
    let mut out = Vec::with_capacity(top.len());
    for &(pid, tid) in top.iter().filter(|(pid, _)| pids.contains(pid)) {
        match port.sched(pid, tid) {
            Ok(sched) => out.push(Reading { pid, tid, sched }),
            Err(BindError::Gone) => {}
            Err(BindError::Failed(e)) => {
                debug!(cgroup = %job.cgroup, tid, error = %e, "thread profile: cannot read run time")
            }
        }
    }
    Some(out)
}

/// Read the threads of `job` (at most `scan`, from `offset` on in turn), and whether that was
/// all of them. None: the job's processes cannot be listed (it ended, or a failure, logged at
/// debug).
fn read_job(
    port: &dyn BindPort,
    job: &ProfJob,
    scan: usize,
    offset: &mut usize,
) -> Option<(Vec<Reading>, bool)> {
    let pids = match port.procs(&job.cgroup) {
        Ok(p) => p,
        Err(e) => {
            debug!(cgroup = %job.cgroup, error = ?e, "thread profile: cannot list the job's processes");
            return None;
        }
    };
    let mut tids = Vec::new();
    for pid in pids {
        match port.threads(pid) {
            Ok(t) => tids.extend(t.into_iter().map(|t| (pid, t))),
            Err(BindError::Gone) => {}
            Err(BindError::Failed(e)) => {
                debug!(cgroup = %job.cgroup, pid, error = %e, "thread profile: cannot list threads")
            }
        }
    }
    let scan = scan.max(1);
    let start = if tids.len() > scan {
        let s = *offset % tids.len();
        *offset = s + scan;
        s
    } else {
        *offset = 0;
        0
    };
    let mut out = Vec::with_capacity(tids.len().min(scan));
    for i in 0..tids.len().min(scan) {
        let (pid, tid) = tids[(start + i) % tids.len()];
        match port.sched(pid, tid) {
            Ok(sched) => out.push(Reading { pid, tid, sched }),
            Err(BindError::Gone) => {}
            Err(BindError::Failed(e)) => {
                debug!(cgroup = %job.cgroup, tid, error = %e, "thread profile: cannot read run time")
            }
        }
    }
    Some((out, tids.len() <= scan))
}

#[cfg(test)]
mod tests;
