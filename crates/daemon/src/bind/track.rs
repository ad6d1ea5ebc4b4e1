//! What the binder remembers about a job between passes, and whose a thread's affinity is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use pjw_core::pin_owner::{self, Owner};
use pjw_core::{CpuSet, Tid};
use tracing::debug;

use super::{free, BindJob, BindPort, Logged, PassReport};

/// What the binder remembers about a job between passes.
#[derive(Debug)]
pub(super) struct Track {
    /// The job's set at the last pass: when it changes (the cgroup's cpuset rewrote every
    /// thread's affinity), every pin is applied again.
    pub(super) cpus: CpuSet,
    /// The slots pinned and confirmed by the kernel.
    pub(super) pins: BTreeMap<Tid, u32>,
    /// Pinned threads kept through their first idle pass (`thread_bind::plan`'s grace).
    pub(super) grace: BTreeSet<Tid>,
    /// Each thread's run time at the last pass (or at its birth, for one placed since).
    pub(super) run: HashMap<Tid, u64>,
    /// Threads placed at birth since the last pass, and when: their share is of the time they
    /// lived, not of the whole interval.
    pub(super) born: HashMap<Tid, Instant>,
    /// What pjw last set on each live thread (a pin set, or the job set), and the thread's
    /// process: a thread whose affinity is something else was pinned by someone else since.
    pub(super) ours: HashMap<Tid, (u32, CpuSet)>,
    /// The CPUs of the runtime pins seen at the last pass (kept out of pjw's placements).
    pub(super) reserved: CpuSet,
    /// Processes born on a pin pjw set on their parent's thread, waiting for their exec (a
    /// launcher binds its child between fork and exec): freed when they exec if they still
    /// hold the pin, or by the second pass that sees them (a fork that never execs).
    pub(super) inherited: HashMap<Tid, Inheritance>,
    /// Processes that forked on a pin of pjw's: launchers (mpirun, a driver script), never
    /// pinned again — what a launcher holds, each child it forks inherits.
    pub(super) launchers: BTreeSet<u32>,
    /// The affinities pjw replaced on threads in the last two pass intervals, with when: a
    /// process whose fork event is handled after such a change was born on what its forking
    /// thread held at the fork's time.
    pub(super) recent: Changes,
    pub(super) at: Instant,
}

/// An affinity pjw replaced on a thread, and when (CLOCK_MONOTONIC ns, [`BindPort::now_ns`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub(super) was: CpuSet,
    pub(super) at_ns: u64,
}

/// The changes per thread, oldest first.
pub(super) type Changes = HashMap<Tid, Vec<Change>>;

/// Note that pjw replaced `was` on thread `tid` by a write it began at `at_ns` (read before
/// the write: a fork stamped after that may already have seen the new affinity, and is taken
/// for one that did).
pub(super) fn note_change(recent: &mut Changes, tid: Tid, was: CpuSet, at_ns: u64) {
    recent.entry(tid).or_default().push(Change { was, at_ns });
}

/// A process born on a pin of pjw's, waiting for its exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Inheritance {
    /// The pin it was born on.
    pub(super) pin: CpuSet,
    /// A pass has seen it since its fork: the next one frees it if it still holds the pin.
    pub(super) looked: bool,
    /// Told by its fork event (the forking thread held the pin), not guessed by a pass from
    /// its affinity: only then does its exec free it.
    pub(super) from_fork: bool,
}

impl Inheritance {
    /// Born on `pin`, as its fork event told; `looked` if a pass saw it already.
    pub(super) fn at_fork(pin: CpuSet, looked: bool) -> Inheritance {
        Inheritance {
            pin,
            looked,
            from_fork: true,
        }
    }

    /// Found by a pass on `pin`, a pin pjw holds on its parent's threads.
    pub(super) fn seen_by_a_pass(pin: CpuSet) -> Inheritance {
        Inheritance {
            pin,
            looked: true,
            from_fork: false,
        }
    }
}

impl Track {
    /// What thread `tid` held at `ns` if pjw changed it since: the affinity its first change
    /// after `ns` replaced. None: as pjw knows it now.
    pub(super) fn held_at(&self, tid: Tid, ns: u64) -> Option<CpuSet> {
        self.recent
            .get(&tid)?
            .iter()
            .find(|c| c.at_ns > ns)
            .map(|c| c.was)
    }

    /// What pjw last set on thread `tid`.
    pub(super) fn ours_of(&self, tid: &Tid) -> Option<&CpuSet> {
        self.ours.get(tid).map(|(_, s)| s)
    }

    /// The pins pjw set on the threads of process `pid` (sets narrower than the job's).
    pub(super) fn pins_in(&self, pid: u32) -> Vec<CpuSet> {
        self.ours
            .values()
            .filter(|(p, s)| *p == pid && *s != self.cpus)
            .map(|(_, s)| *s)
            .collect()
    }

    /// Whose the affinity `current` of thread `tid` of process `pid` is. A thread may have
    /// inherited a pin pjw set on another thread of its process, and a `new` process's first
    /// thread one pjw set on its parent's (asked of `port` only then); a process waiting for
    /// its exec still holds the pin it was born on.
    pub(super) fn owner(
        &self,
        port: &dyn BindPort,
        job: &CpuSet,
        (pid, tid): (u32, Tid),
        new: bool,
        current: &CpuSet,
    ) -> Owner {
        let ours = self.ours_of(&tid);
        // A process waiting for its exec on the pin it was born on, and a thread it made,
        // which inherited that pin too.
        let waiting = self.inherited.get(&Tid(pid)).map(|i| &i.pin);
        if ours.is_none() && waiting == Some(current) {
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

impl Track {
    /// The parent of process `child` forked it on a pin of pjw's: the parent is a launcher, its
    /// threads get the job set back and are not pinned again, so its next children start free.
    pub(super) fn make_launcher(
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
            let at = port.now_ns();
            if free(port, job, tid, logged, r) {
                debug!(cgroup = %job.cgroup, tid = tid.0, parent, "launcher's thread unpinned");
                if let Some((_, was)) = self.ours.insert(tid, (parent, job.cpus)) {
                    note_change(&mut self.recent, tid, was, at);
                }
                self.pins.remove(&tid);
                self.grace.remove(&tid);
                r.unpinned += 1;
            }
        }
    }
}
