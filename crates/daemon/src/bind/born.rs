//! Threads and processes placed at their birth (fork events) and freed at their exec.

use std::time::Instant;

use pjw_core::pin_owner::{self, Owner};
use pjw_core::thread_bind::{self, BindMode};
use pjw_core::Tid;
use tracing::debug;

use super::track::{Inheritance, Track};
use super::{free, Balancer, BindError, BindJob, BindPort, Logged, PassReport};

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
            t.inherited.insert(tid, Inheritance::at_fork(current));
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
        match port.set_affinity(&b.job.cgroup, b.tid, &set) {
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
    let Some(Inheritance { pin, .. }) = t.inherited.remove(&tid) else {
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
