//! Threads and processes placed at their birth (fork events) and freed at their exec.

use std::time::Instant;

use pjw_core::pin_owner::{self, Owner};
use pjw_core::thread_bind::{self, BindMode};
use pjw_core::{CpuSet, Tid};
use tracing::debug;

use super::track::{note_change, Inheritance, Track};
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
    /// The thread or process was made, at `at_ns` (the event's CLOCK_MONOTONIC timestamp); for
    /// a process, `by` is the thread that forked it (the proc connector's `parent_pid`: a new
    /// process's parent is the forking thread), whose affinity at that moment it was born with.
    Fork { by: u32, at_ns: u64 },
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
        let (by, at_ns) = match b.at {
            Birth::Exec => return exec_frees_an_inherited_pin(t, port, b, &mut self.logged, r),
            Birth::Fork { by, at_ns } => (by, at_ns),
        };
        if b.tgid == b.tid {
            return born_process(t, port, b, (Tid(by), at_ns), &mut self.logged, r);
        }
        // A thread of a process waiting for its exec goes with it (freed by the pass that
        // frees it; dead if it execs): judged alone, one a runtime made after an exec not yet
        // handled could be taken for an inheritance.
        if t.run.contains_key(&tid) || t.inherited.contains_key(&Tid(b.tgid)) {
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
        if !computes {
            // The job set (back, if it inherited a pin of pjw's).
            if owner == Owner::Inherited {
                let at = port.now_ns();
                if !free(port, &b.job, tid, &mut self.logged, r) {
                    return;
                }
                note_change(&mut t.recent, tid, current, at);
            }
            // Seen free at birth (or freed): a pin it gets later is not an inheritance but
            // its runtime's (Open MPI binds a rank, libgomp its first thread), even when it
            // equals a pin pjw holds on the parent's threads.
            t.ours.insert(tid, (b.tgid, b.job.cpus));
            t.run.insert(tid, ns);
            t.born.insert(tid, now);
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
        let at = port.now_ns();
        match port.set_affinity(&b.job.cgroup, b.tid, &set) {
            Ok(()) => {
                debug!(cgroup = %b.job.cgroup, tid = b.tid, cpus = %set, "new thread pinned");
                note_change(&mut t.recent, tid, current, at);
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

/// New process `b`, forked by thread `by` at `at_ns`: born on a pin of pjw's when `by` held one
/// then (known from the fork and what pjw set, never guessed from the child's affinity, which a
/// late read finds already set by the program's runtime — a rank's libgomp master on a CPU
/// equal to a pin pjw holds on another thread of mpirun). Born on one, it waits for its exec
/// (a launcher binds its child in between: Open MPI its ranks, taskset, hwloc-bind; freeing it
/// now could undo that) and its parent is a launcher. Born free of pjw, a pin it has later is not pjw's.
/// Either way it is measured from the first pass that sees it, so it is not pinned before a
/// full interval has passed: the program it execs sizes its runtime from its affinity as it
/// starts.
fn born_process(
    t: &mut Track,
    port: &dyn BindPort,
    b: &Born,
    (by, at_ns): (Tid, u64),
    logged: &mut Logged,
    r: &mut PassReport,
) {
    let tid = Tid(b.tid);
    match born_on(t, b, by, at_ns) {
        Some(pin) => {
            let looked = t.inherited.get(&tid).is_some_and(|i| i.looked);
            t.inherited.insert(tid, Inheritance::at_fork(pin, looked));
            t.make_launcher(port, &b.job, b.tgid, logged, r);
        }
        None => {
            t.inherited.remove(&tid);
            t.ours.insert(tid, (b.tgid, b.job.cpus));
        }
    }
}

/// The pin of pjw's new process `b` was born on, if any: what the forking thread `by` held at
/// the fork's time `at_ns` — the affinity pjw replaced on it since, if it did; else the pin pjw
/// holds on it, or the one it waits on for its exec (a process forking before its exec).
/// Narrower than the job set only: the job set is no pin.
fn born_on(t: &Track, b: &Born, by: Tid, at_ns: u64) -> Option<CpuSet> {
    let pin = |s: CpuSet| (s != b.job.cpus && s.is_subset(&b.job.cpus)).then_some(s);
    if let Some(was) = t.held_at(by, at_ns) {
        return pin(was);
    }
    if t.pins.contains_key(&by) {
        return t.ours_of(&by).copied().and_then(pin);
    }
    t.inherited.get(&by).map(|i| i.pin)
}

/// Process `b` execs: it is given the whole job set if it still holds the pin it was born on
/// (nobody bound it before its exec), so the program it runs sizes itself from its job's CPUs.
/// Only a birth its fork event told counts: a pin a pass found is judged by the next pass.
fn exec_frees_an_inherited_pin(
    t: &mut Track,
    port: &dyn BindPort,
    b: &Born,
    logged: &mut Logged,
    r: &mut PassReport,
) {
    let tid = Tid(b.tid);
    // Not a process pjw pinned itself (a busy shell that execs its program): freeing it here
    // left the threads its program made at once on the old pin, which then looked like a
    // runtime's (the numa test's 16-CPU job ran on one CPU); the pass manages it as before.
    let Some(Inheritance {
        pin,
        from_fork: true,
        ..
    }) = t.inherited.get(&tid).copied()
    else {
        return;
    };
    t.inherited.remove(&tid);
    match port.affinity(b.tid) {
        Ok(current) if current == pin => {
            let at = port.now_ns();
            if free(port, &b.job, tid, logged, r) {
                note_change(&mut t.recent, tid, pin, at);
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
