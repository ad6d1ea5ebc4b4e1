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
mod tests;
