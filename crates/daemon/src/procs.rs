//! Exact process and thread counts per job, from the kernel's process events.
//!
//! The kernel's proc connector (netlink, root only) reports every fork, exec and exit on the node.
//! A reader task (`spawn_reader`) drains the socket and sends the events to the engine in batches;
//! the engine feeds them to its [`ProcTracker`], which knows which job every jailed process
//! belongs to (the job's first process is registered when the job starts; a fork from a job's
//! process puts the child in the same job, because cgroups are inherited). That gives the exact
//! number of distinct processes and threads a job ever had, short-lived ones included, at O(1)
//! per event — nothing scans `/proc`.
//!
//! Events are not reliable under overload: when the socket's buffer overflows the kernel drops
//! events and the reader reports an overrun. The engine then re-seeds every job's processes from
//! its `cgroup.procs` and marks the counts `lossy` (a lower bound). After a daemon restart the
//! counts start again from the processes alive then, also marked `lossy`.
//!
//! A process that execs outside every known job is reported as [`Unknown::Exec`], for adoption.

use std::collections::HashMap;

use proc_connector::{Error as PcError, NetlinkMessageIter, ProcConnector, ProcEvent};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Counts for one job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCounts {
    /// Distinct processes the job ever had (its first process included).
    pub procs_ever: u64,
    /// Distinct tasks (threads, every process's main thread included) the job ever had.
    pub threads_ever: u64,
    /// Processes alive now, as far as the events tell.
    pub procs_now: u64,
    /// Most processes alive at once.
    pub procs_max: u64,
    /// Tasks (threads, main threads included) alive now, as far as the events tell; never
    /// fewer than `procs_now` (a process seen without its threads counts as one).
    pub threads_now: u64,
    /// Most tasks alive at once.
    pub threads_max: u64,
    /// When its last process exited (CLOCK_MONOTONIC ns, the events' clock); None while any
    /// lives.
    pub emptied_ns: Option<u64>,
    /// Events were lost (overrun) or the daemon restarted: the counts are a lower bound.
    pub lossy: bool,
}

#[derive(Debug, Default)]
struct JobProcs {
    counts: ProcCounts,
    /// Its processes and how many tasks each has alive.
    tgids: HashMap<u32, u64>,
}

impl JobProcs {
    /// Process `tgid` with `threads` tasks joins (false: it was there already).
    fn add(&mut self, tgid: u32, threads: u64) -> bool {
        if self.tgids.contains_key(&tgid) {
            return false;
        }
        let threads = threads.max(1);
        self.tgids.insert(tgid, threads);
        let c = &mut self.counts;
        c.procs_ever += 1;
        c.threads_ever += threads;
        c.procs_now += 1;
        c.procs_max = c.procs_max.max(c.procs_now);
        c.threads_now += threads;
        c.threads_max = c.threads_max.max(c.threads_now);
        c.emptied_ns = None;
        true
    }

    /// Process `tgid` left (exited, or moved to another job) at `ns`.
    fn remove(&mut self, tgid: u32, ns: Option<u64>) -> bool {
        let Some(threads) = self.tgids.remove(&tgid) else {
            return false;
        };
        let c = &mut self.counts;
        c.procs_now = c.procs_now.saturating_sub(1);
        c.threads_now = c.threads_now.saturating_sub(threads).max(c.procs_now);
        if c.procs_now == 0 {
            c.emptied_ns = ns;
        }
        true
    }

    /// A new thread in process `tgid`.
    fn thread_born(&mut self, tgid: u32) {
        if let Some(n) = self.tgids.get_mut(&tgid) {
            *n += 1;
            let c = &mut self.counts;
            c.threads_ever += 1;
            c.threads_now += 1;
            c.threads_max = c.threads_max.max(c.threads_now);
        }
    }

    /// A thread (not the main one) of process `tgid` exited.
    fn thread_gone(&mut self, tgid: u32) {
        if let Some(n) = self.tgids.get_mut(&tgid) {
            if *n > 1 {
                *n -= 1;
                self.counts.threads_now = self.counts.threads_now.saturating_sub(1);
            }
        }
    }
}

/// What the tracker could not attribute to a job and the engine may want to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// A process outside every job called exec (candidate for adoption).
    Exec { pid: u32, tgid: u32 },
    /// A process outside every job forked a child process (it may be a job step's task
    /// escaping its parent before adoption).
    Fork { parent: u32, child: u32 },
    /// An adopted process of job `job` forked `child` before it was moved into the job: the
    /// child did not inherit the job's cgroups and must be moved too.
    EarlyFork { job: i64, child: u32 },
}

/// Which job each jailed process belongs to, and per-job counts. Pure: fed events, no I/O.
#[derive(Debug, Default)]
pub struct ProcTracker {
    owner: HashMap<u32, i64>,
    jobs: HashMap<i64, JobProcs>,
    /// Adopted processes: when they were moved into their job (CLOCK_MONOTONIC ns, the clock
    /// of the proc connector's timestamps). A fork stamped before it escaped the move.
    moved_at: HashMap<u32, u64>,
}

impl ProcTracker {
    pub fn new() -> ProcTracker {
        ProcTracker::default()
    }

    /// A job starts with its first process `pid` (a single-threaded process: `pjw run` before it
    /// execs the command).
    pub fn start_job(&mut self, job: i64, pid: u32) {
        self.jobs.entry(job).or_default().add(pid, 1);
        self.owner.insert(pid, job);
    }

    /// A process that was not born in the job joins it (adoption): it counts as one more
    /// process with `threads` tasks.
    pub fn adopt(&mut self, job: i64, tgid: u32, threads: u64) {
        if self.owner.get(&tgid) == Some(&job) {
            return;
        }
        if let Some(old) = self.owner.insert(tgid, job) {
            if let Some(o) = self.jobs.get_mut(&old) {
                o.remove(tgid, None);
            }
        }
        let j = self.jobs.entry(job).or_default();
        // Counted again even if it was the job's before under the same pid (a re-adoption
        // after a reseed): `add` ignores a process it holds.
        j.add(tgid, threads);
    }

    /// `tgid` was moved into its job at `ns` (CLOCK_MONOTONIC): forks it made before are
    /// reported as [`Unknown::EarlyFork`].
    pub fn moved(&mut self, tgid: u32, ns: u64) {
        self.moved_at.insert(tgid, ns);
    }

    /// Replace what the tracker believes a job's processes are with `pids` (from its
    /// `cgroup.procs`), after lost events or a restart. Counts become a lower bound.
    pub fn reseed(&mut self, job: i64, pids: &[u32]) {
        let j = self.jobs.entry(job).or_default();
        for (t, _) in j.tgids.drain() {
            if self.owner.get(&t) == Some(&job) {
                self.owner.remove(&t);
            }
        }
        let mut fresh = 0;
        for &p in pids {
            // Their threads are not known: one task each (a lower bound, as the rest).
            j.tgids.insert(p, 1);
            self.owner.insert(p, job);
            fresh += 1;
        }
        let c = &mut j.counts;
        c.procs_now = fresh;
        c.threads_now = fresh;
        c.procs_ever = c.procs_ever.max(fresh);
        c.threads_ever = c.threads_ever.max(fresh);
        c.procs_max = c.procs_max.max(fresh);
        c.threads_max = c.threads_max.max(fresh);
        c.emptied_ns = None;
        c.lossy = true;
    }

    /// Forget a job that ended; its final counts.
    pub fn end_job(&mut self, job: i64) -> Option<ProcCounts> {
        let j = self.jobs.remove(&job)?;
        for t in j.tgids.keys() {
            if self.owner.get(t) == Some(&job) {
                self.owner.remove(t);
            }
        }
        Some(j.counts)
    }

    pub fn counts(&self, job: i64) -> Option<ProcCounts> {
        self.jobs.get(&job).map(|j| j.counts)
    }

    /// The job a process belongs to, if any.
    pub fn job_of(&self, tgid: u32) -> Option<i64> {
        self.owner.get(&tgid).copied()
    }

    /// Jobs being tracked.
    pub fn jobs(&self) -> impl Iterator<Item = i64> + '_ {
        self.jobs.keys().copied()
    }

    /// Apply one event.
    pub fn apply(&mut self, ev: &ProcEvent) -> Option<Unknown> {
        match *ev {
            ProcEvent::Fork {
                parent_tgid,
                child_pid,
                child_tgid,
                timestamp_ns,
                ..
            } => {
                if child_pid != child_tgid {
                    // A new thread. The kernel names the thread group's parent as its parent
                    // (`real_parent`), so it is attributed by its own thread group.
                    let job = *self.owner.get(&child_tgid)?;
                    self.jobs.get_mut(&job)?.thread_born(child_tgid);
                    return None;
                }
                let Some(&job) = self.owner.get(&parent_tgid) else {
                    return Some(Unknown::Fork {
                        parent: parent_tgid,
                        child: child_tgid,
                    });
                };
                let j = self.jobs.get_mut(&job)?;
                if j.add(child_tgid, 1) {
                    self.owner.insert(child_tgid, job);
                }
                let early = self
                    .moved_at
                    .get(&parent_tgid)
                    .is_some_and(|&t| timestamp_ns <= t);
                early.then_some(Unknown::EarlyFork {
                    job,
                    child: child_tgid,
                })
            }
            ProcEvent::Exit {
                pid,
                tgid,
                timestamp_ns,
                ..
            } => {
                if pid == tgid {
                    self.moved_at.remove(&tgid);
                    if let Some(job) = self.owner.remove(&tgid) {
                        if let Some(j) = self.jobs.get_mut(&job) {
                            j.remove(tgid, Some(timestamp_ns));
                        }
                    }
                } else if let Some(&job) = self.owner.get(&tgid) {
                    if let Some(j) = self.jobs.get_mut(&job) {
                        j.thread_gone(tgid);
                    }
                }
                None
            }
            ProcEvent::Exec { pid, tgid, .. } => {
                (!self.owner.contains_key(&tgid)).then_some(Unknown::Exec { pid, tgid })
            }
            _ => None,
        }
    }
}

/// CLOCK_MONOTONIC in ns: the clock of the proc connector's event timestamps.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The [`Instant`](std::time::Instant) of event timestamp `ns` (CLOCK_MONOTONIC, which
/// `Instant` reads on Linux); now for a timestamp not in the past.
pub fn instant_of_ns(ns: u64) -> std::time::Instant {
    let now = std::time::Instant::now();
    let ago = monotonic_ns().saturating_sub(ns);
    now.checked_sub(std::time::Duration::from_nanos(ago))
        .unwrap_or(now)
}

/// What the reader task sends the engine.
#[derive(Debug)]
pub enum ProcMsg {
    /// Events in the order the kernel sent them.
    Events(Vec<ProcEvent>),
    /// The kernel dropped events (socket buffer overrun).
    Overrun,
}

/// Open the proc connector (needs CAP_NET_ADMIN) and read it in a task, sending batches to `tx`
/// mapped by `wrap`. Returns an error when the connector cannot be opened (not root, no
/// CONFIG_PROC_EVENTS); the daemon then runs without exact process counts.
pub fn spawn_reader<E: Send + 'static>(
    tx: mpsc::UnboundedSender<E>,
    wrap: fn(ProcMsg) -> E,
) -> Result<(), String> {
    let conn = ProcConnector::new().map_err(|e| format!("cannot open the proc connector: {e}"))?;
    conn.set_nonblocking()
        .map_err(|e| format!("proc connector: {e}"))?;
    // Room for bursts (fork storms) before the kernel drops events.
    if let Err(e) = conn.set_recv_buf_size(8 << 20) {
        debug!(error = %e, "cannot enlarge the proc connector buffer");
    }
    // SAFETY: `conn` owns its socket (an OwnedFd inside ProcConnector) and is moved into the
    // AsyncFd, so the descriptor stays open and unreplaced for as long as it is registered.
    let fd = unsafe { AsyncFd::register_with_interest(conn, tokio::io::Interest::READABLE) }
        .map_err(|e| format!("proc connector: {e}"))?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut guard = match fd.readable().await {
                Ok(g) => g,
                Err(e) => {
                    warn!(error = %e, "proc connector wait failed; process counts stop");
                    return;
                }
            };
            let mut batch = Vec::new();
            let mut overrun = false;
            // Drain what is there, then hand it over in one message.
            loop {
                match fd.get_ref().recv_raw(&mut buf) {
                    Ok(n) => {
                        for m in NetlinkMessageIter::new(&buf, n) {
                            match m {
                                Ok(Some(ev)) => batch.push(ev),
                                Ok(None) => {}
                                Err(PcError::Overrun) => overrun = true,
                                Err(e) => debug!(error = %e, "bad proc connector message"),
                            }
                        }
                        if batch.len() >= 4096 {
                            break;
                        }
                    }
                    Err(PcError::WouldBlock) => {
                        guard.clear_ready();
                        break;
                    }
                    Err(PcError::Interrupted) => {}
                    Err(PcError::Overrun) => overrun = true,
                    Err(e) => {
                        warn!(error = %e, "proc connector read failed; process counts stop");
                        return;
                    }
                }
            }
            if !batch.is_empty() && tx.send(wrap(ProcMsg::Events(batch))).is_err() {
                return;
            }
            if overrun {
                warn!(
                    "proc connector overrun: events were lost; process counts become lower bounds"
                );
                if tx.send(wrap(ProcMsg::Overrun)).is_err() {
                    return;
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fork(parent: u32, child_pid: u32, child_tgid: u32) -> ProcEvent {
        ProcEvent::Fork {
            cpu: 0,
            seq: 0,
            parent_pid: parent,
            parent_tgid: parent,
            child_pid,
            child_tgid,
            timestamp_ns: 0,
        }
    }
    /// A new thread `tid` in process `tgid`: the kernel reports the process's parent (here 1).
    fn thread(tgid: u32, tid: u32) -> ProcEvent {
        ProcEvent::Fork {
            cpu: 0,
            seq: 0,
            parent_pid: 1,
            parent_tgid: 1,
            child_pid: tid,
            child_tgid: tgid,
            timestamp_ns: 0,
        }
    }
    fn exit(pid: u32, tgid: u32) -> ProcEvent {
        ProcEvent::Exit {
            cpu: 0,
            seq: 0,
            pid,
            tgid,
            exit_code: 0,
            exit_signal: 17,
            parent_pid: 1,
            parent_tgid: 1,
            timestamp_ns: 0,
        }
    }
    fn exec(pid: u32) -> ProcEvent {
        ProcEvent::Exec {
            cpu: 0,
            seq: 0,
            pid,
            tgid: pid,
            timestamp_ns: 0,
        }
    }

    /// Description, events after job 1 starts with pid 100, and the expected procs_ever,
    /// threads_ever, procs_now, procs_max.
    type Row = (&'static str, Vec<ProcEvent>, u64, u64, u64, u64);

    #[test]
    fn counts_table() {
        let rows: Vec<Row> = vec![
            ("first process only", vec![], 1, 1, 1, 1),
            ("one child", vec![fork(100, 101, 101)], 2, 2, 2, 2),
            (
                "grandchild counts too",
                vec![fork(100, 101, 101), fork(101, 102, 102)],
                3,
                3,
                3,
                3,
            ),
            (
                "threads are tasks, not processes",
                vec![thread(100, 150), thread(100, 151)],
                1,
                3,
                1,
                1,
            ),
            (
                "25 short-lived children, one at a time",
                (0..25)
                    .flat_map(|i| [fork(100, 200 + i, 200 + i), exit(200 + i, 200 + i)])
                    .collect(),
                26,
                26,
                1,
                2,
            ),
            (
                "a thread exiting does not end its process",
                vec![fork(100, 101, 101), thread(101, 160), exit(160, 101)],
                2,
                3,
                2,
                2,
            ),
            (
                "forks outside the job are not counted",
                vec![fork(7, 8, 8), fork(8, 9, 9)],
                1,
                1,
                1,
                1,
            ),
            (
                "threads of processes outside the job are not counted",
                vec![thread(7, 70), thread(1, 71)],
                1,
                1,
                1,
                1,
            ),
            (
                "exec does not create a process",
                vec![fork(100, 101, 101), exec(101)],
                2,
                2,
                2,
                2,
            ),
        ];
        for (what, events, ever, threads, now, max) in rows {
            let mut t = ProcTracker::new();
            t.start_job(1, 100);
            for e in &events {
                match t.apply(e) {
                    None | Some(Unknown::Fork { .. }) => {}
                    other => panic!("{what}: {other:?}"),
                }
            }
            let c = t.counts(1).unwrap();
            assert_eq!(
                (c.procs_ever, c.threads_ever, c.procs_now, c.procs_max),
                (ever, threads, now, max),
                "{what}"
            );
            assert!(!c.lossy, "{what}");
        }
    }

    /// Tasks alive now and at most, and when the job emptied, through threads and processes
    /// coming and going.
    #[test]
    fn live_threads_follow_the_events() {
        let stamped_exit = |pid: u32, tgid: u32, ns: u64| ProcEvent::Exit {
            cpu: 0,
            seq: 0,
            pid,
            tgid,
            exit_code: 0,
            exit_signal: 17,
            parent_pid: 1,
            parent_tgid: 1,
            timestamp_ns: ns,
        };
        let mut t = ProcTracker::new();
        t.start_job(1, 100);
        // (event, threads now, threads max, emptied at)
        let table = [
            (fork(100, 101, 101), 2, 2, None),
            (thread(101, 150), 3, 3, None),
            (thread(101, 151), 4, 4, None),
            (exit(150, 101), 3, 4, None),
            // A process's exit takes its remaining threads with it.
            (exit(101, 101), 1, 4, None),
            // A thread of a process no job holds changes nothing.
            (exit(70, 7), 1, 4, None),
            (stamped_exit(100, 100, 5_000), 0, 4, Some(5_000)),
        ];
        for (i, (ev, now, max, emptied)) in table.into_iter().enumerate() {
            t.apply(&ev);
            let c = t.counts(1).unwrap();
            assert_eq!(
                (c.threads_now, c.threads_max, c.emptied_ns),
                (now, max, emptied),
                "row {i}"
            );
            assert!(c.threads_now >= c.procs_now, "row {i}");
        }
        // An adopted process brings its threads; a reseed knows one task per process.
        t.adopt(1, 500, 3);
        assert_eq!(t.counts(1).unwrap().threads_now, 3);
        assert_eq!(t.counts(1).unwrap().emptied_ns, None);
        t.reseed(1, &[500, 501]);
        assert_eq!(t.counts(1).unwrap().threads_now, 2);
    }

    #[test]
    fn forks_before_an_adoption_are_reported() {
        let stamped = |parent: u32, child: u32, ns: u64| ProcEvent::Fork {
            cpu: 0,
            seq: 0,
            parent_pid: parent,
            parent_tgid: parent,
            child_pid: child,
            child_tgid: child,
            timestamp_ns: ns,
        };
        let mut t = ProcTracker::new();
        t.start_job(1, 100);
        t.adopt(1, 500, 1);
        t.moved(500, 1_000);
        // Forked at 900, before the move at 1000: it did not inherit the job's cgroups.
        assert_eq!(
            t.apply(&stamped(500, 501, 900)),
            Some(Unknown::EarlyFork { job: 1, child: 501 })
        );
        assert_eq!(
            t.apply(&stamped(500, 502, 1_100)),
            None,
            "after the move: inherited"
        );
        assert_eq!(t.apply(&stamped(100, 103, 10)), None, "born in the job");
        assert_eq!(t.counts(1).unwrap().procs_now, 5);
    }

    #[test]
    fn forks_outside_jobs_are_reported() {
        let mut t = ProcTracker::new();
        t.start_job(1, 100);
        assert_eq!(
            t.apply(&fork(100, 101, 101)),
            None,
            "inside: counted, not reported"
        );
        assert_eq!(
            t.apply(&fork(7, 8, 8)),
            Some(Unknown::Fork {
                parent: 7,
                child: 8
            })
        );
        assert_eq!(t.apply(&thread(7, 70)), None, "a thread is no new process");
    }

    #[test]
    fn exec_outside_jobs_is_reported() {
        let mut t = ProcTracker::new();
        t.start_job(1, 100);
        assert_eq!(t.apply(&exec(100)), None);
        assert_eq!(
            t.apply(&exec(500)),
            Some(Unknown::Exec {
                pid: 500,
                tgid: 500
            })
        );
        // Once adopted it is the job's.
        t.adopt(1, 500, 3);
        assert_eq!(t.apply(&exec(500)), None);
        let c = t.counts(1).unwrap();
        assert_eq!((c.procs_ever, c.threads_ever, c.procs_now), (2, 4, 2));
        // Its children are the job's too.
        t.apply(&fork(500, 501, 501));
        assert_eq!(t.job_of(501), Some(1));
    }

    #[test]
    fn end_and_reseed() {
        let mut t = ProcTracker::new();
        t.start_job(1, 100);
        t.start_job(2, 200);
        t.apply(&fork(100, 101, 101));
        assert_eq!(t.end_job(1).unwrap().procs_ever, 2);
        assert_eq!(t.job_of(100), None);
        assert_eq!(t.job_of(101), None);
        assert_eq!(t.job_of(200), Some(2));
        // After lost events: what is alive now, counts kept as a lower bound.
        t.reseed(2, &[200, 201, 202]);
        let c = t.counts(2).unwrap();
        assert_eq!((c.procs_ever, c.procs_now, c.lossy), (3, 3, true));
        assert_eq!(t.job_of(202), Some(2));
        t.apply(&exit(201, 201));
        assert_eq!(t.counts(2).unwrap().procs_now, 2);
        assert!(t.end_job(1).is_none());
    }
}
