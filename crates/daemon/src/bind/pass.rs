//! The balancing pass: each binding job's threads read, planned and pinned.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use pjw_core::pin_owner::{self, Owner};
use pjw_core::thread_bind::{self, BindMode, BindPlan, ThreadSample};
use pjw_core::{CpuSet, Tid, Topology};
use tracing::debug;

use super::track::{note_change, Changes, Inheritance, Track};
use super::{free, BindError, BindJob, BindPort, Logged, ProfJob, BUSY_PERCENT};

/// The balancing state of every job that binds, and one pass over them.
#[derive(Debug)]
pub struct Balancer {
    pub(super) topo: Topology,
    pub(super) jobs: BTreeMap<i64, Track>,
    pub(super) logged: Logged,
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
                    match port.set_affinity(&job.cgroup, tid.0, &job.cpus) {
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
        let Some(mut prev) = self.jobs.remove(&job.seq) else {
            // The first look: run times since now are measured at the next pass. Nothing is
            // set: a thread at the job set is free already, a narrower one is a runtime's (or
            // pinned before a daemon restart: unknown here, so left alone too).
            self.jobs.insert(job.seq, Track::first_look(job, seen, now));
            return;
        };
        let owners = runtime_processes_keep_their_pins(prev.owners(port, job, &seen), &seen);
        // A launcher's threads are never pjw's to pin: its children would inherit the pin.
        let launchers = std::mem::take(&mut prev.launchers);
        // Nor is a process waiting for its exec on the pin it was born on, or its threads:
        // its launcher may bind it before, and the program it execs is measured from scratch.
        let waiting = std::mem::take(&mut prev.inherited);
        let mine = |tid: &Tid| {
            owners.get(tid).is_some_and(|o| *o != Owner::Runtime)
                && !seen
                    .pid
                    .get(tid)
                    .is_some_and(|p| launchers.contains(p) || waiting.contains_key(&Tid(*p)))
        };
        let interval_ns = now.saturating_duration_since(prev.at).as_nanos() as u64;
        let samples = prev.samples(&seen, mine, now, interval_ns);
        let reserved = seen.runtime_cpus(job, &owners);
        let (applied, plan) =
            self.plan_job(&mut prev, job, &owners, &samples, &reserved, interval_ns);
        let mut apply = Apply {
            port,
            job,
            seen: &seen,
            ours: std::mem::take(&mut prev.ours),
            pins: BTreeMap::new(),
            recent: recent_since(std::mem::take(&mut prev.recent), port, interval_ns),
            logged: &mut self.logged,
            r,
        };
        apply.pin(&self.topo, plan.pins, &applied);
        let inherited = apply.free_inherited(&prev.run, &owners, waiting);
        apply.unpin(plan.unpin, &applied);
        let Apply {
            mut ours,
            pins,
            recent,
            ..
        } = apply;
        ours.retain(|tid, _| seen.run.contains_key(tid));
        let mut launchers = launchers;
        launchers.retain(|p| seen.pid.values().any(|q| q == p));
        let grace = plan
            .grace
            .into_iter()
            .filter(|t| pins.contains_key(t))
            .collect();
        let track = Track {
            cpus: job.cpus,
            pins,
            grace,
            run: seen.run,
            born: HashMap::new(),
            ours,
            reserved,
            inherited,
            launchers,
            recent,
            at: now,
        };
        self.jobs.insert(job.seq, track);
    }

    /// The plan for `job` from this pass's `samples`, and the pins of the last pass still in
    /// place (kept when the job's set did not change).
    fn plan_job(
        &self,
        prev: &mut Track,
        job: &BindJob,
        owners: &HashMap<Tid, Owner>,
        samples: &[ThreadSample],
        reserved: &CpuSet,
        interval_ns: u64,
    ) -> (BTreeMap<Tid, u32>, BindPlan) {
        // Those the plan places: the busy, and the pinned it may keep through a pass of grace.
        let wanted = samples
            .iter()
            .filter(|s| {
                thread_bind::is_busy(s, interval_ns, BUSY_PERCENT) || prev.pins.contains_key(&s.tid)
            })
            .count();
        let slots = pin_owner::open_slots(&self.topo, &job.cpus, job.mode, reserved, wanted);
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
            samples,
            interval_ns,
            BUSY_PERCENT,
        );
        (applied, plan)
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

impl Track {
    /// A job's first look: its threads' run times, measured from now, and the CPUs runtime
    /// pins hold; nothing pjw set.
    fn first_look(job: &BindJob, seen: Seen, now: Instant) -> Track {
        let reserved = seen.runtime_cpus(job, &HashMap::new());
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
            recent: HashMap::new(),
            at: now,
        }
    }

    /// Whose each thread's affinity is, judged on what pjw set by the last pass.
    fn owners(&self, port: &dyn BindPort, job: &BindJob, seen: &Seen) -> HashMap<Tid, Owner> {
        seen.run
            .keys()
            .map(|tid| {
                let o = match (seen.affinity.get(tid), seen.pid.get(tid)) {
                    (Some(cur), Some(pid)) => {
                        let new = !self.run.contains_key(tid);
                        self.owner(port, &job.cpus, (*pid, *tid), new, cur)
                    }
                    // Unreadable: left as it is, like a runtime's pin.
                    _ => Owner::Runtime,
                };
                (*tid, o)
            })
            .collect()
    }

    /// The run time over the interval of pjw's threads (`mine`) seen at both passes; a new
    /// one is measured from the next pass.
    fn samples(
        &self,
        seen: &Seen,
        mine: impl Fn(&Tid) -> bool,
        now: Instant,
        interval_ns: u64,
    ) -> Vec<ThreadSample> {
        seen.run
            .iter()
            .filter(|(tid, _)| mine(tid))
            .filter_map(|(tid, ns)| {
                let was = self.run.get(tid)?;
                let mut run_ns = ns.saturating_sub(*was);
                // Born during the interval: its share of the time it lived, scaled to the
                // interval (a thread busy since birth is busy).
                if let Some(at) = self.born.get(tid) {
                    let lived = now.saturating_duration_since(*at).as_nanos() as u64;
                    if lived > 0 && lived < interval_ns {
                        run_ns = (u128::from(run_ns) * u128::from(interval_ns) / u128::from(lived))
                            .min(u128::from(u64::MAX)) as u64;
                    }
                }
                Some(ThreadSample { tid: *tid, run_ns })
            })
            .collect()
    }
}

/// The changes of `recent` made in the last pass interval or since (`interval_ns` before
/// now): older ones no fork event still in flight can need.
fn recent_since(mut recent: Changes, port: &dyn BindPort, interval_ns: u64) -> Changes {
    let cutoff = port.now_ns().saturating_sub(interval_ns.saturating_mul(2));
    recent.retain(|_, v| {
        v.retain(|c| c.at_ns >= cutoff);
        !v.is_empty()
    });
    recent
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
    /// Thread `tid`'s process (itself when unknown).
    fn pid_of(&self, tid: &Tid) -> u32 {
        self.pid.get(tid).copied().unwrap_or(tid.0)
    }

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

/// What a pass sets on one job's threads: the pins it confirms and what pjw set on each thread.
struct Apply<'a> {
    port: &'a dyn BindPort,
    job: &'a BindJob,
    seen: &'a Seen,
    /// What pjw set on each live thread (carried over from the last pass, updated here).
    ours: HashMap<Tid, (u32, CpuSet)>,
    /// The slots pinned and confirmed by the kernel.
    pins: BTreeMap<Tid, u32>,
    /// The affinities pjw replaced on threads: the last pass's and those since, and this
    /// pass's.
    recent: Changes,
    logged: &'a mut Logged,
    r: &'a mut PassReport,
}

impl Apply<'_> {
    /// Record that pjw set `set` on thread `tid` by a write begun at `at_ns`, and what that
    /// replaced.
    fn set_ours(&mut self, tid: Tid, set: CpuSet, at_ns: u64) {
        self.ours.insert(tid, (self.seen.pid_of(&tid), set));
        if let Some(was) = self.seen.affinity.get(&tid) {
            note_change(&mut self.recent, tid, *was, at_ns);
        }
    }

    /// Pin the threads of `planned` whose pin is not in place already (`applied`).
    fn pin(&mut self, topo: &Topology, planned: BTreeMap<Tid, u32>, applied: &BTreeMap<Tid, u32>) {
        let job = self.job;
        for (tid, slot) in planned {
            if applied.get(&tid) == Some(&slot) {
                self.pins.insert(tid, slot);
                continue;
            }
            let set = thread_bind::pin_set(topo, &job.cpus, job.mode, slot);
            let at = self.port.now_ns();
            match self.port.set_affinity(&job.cgroup, tid.0, &set) {
                Ok(()) => {
                    debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %set, "thread pinned");
                    self.pins.insert(tid, slot);
                    self.set_ours(tid, set, at);
                    self.r.pinned += 1;
                }
                Err(BindError::Gone) => {}
                Err(BindError::Failed(e)) => {
                    failed!(self.logged, job.seq, "cannot pin", cgroup = %job.cgroup, tid = tid.0, cpus = %set, error = %e);
                    self.r.failed += 1;
                }
            }
        }
    }

    /// A thread seen for the first time (not in `before`) that inherited a pin of pjw's from
    /// the thread that made it gets the whole job set until it is measured. A new **process**
    /// born on one may be between its fork and its exec, when a launcher binds it (Open MPI
    /// its ranks): freeing it now could land just after that binding and undo it (the rank's
    /// libgomp then counted the whole job's CPUs). So the first pass that sees it only notes
    /// it, its exec frees it ([`super::born`]), and the next pass frees it if it never
    /// exec'd (a forked worker) and still holds the pin, with the threads it made on that pin.
    /// Returns the processes still waiting (of `waiting`, the last pass's, those not listed
    /// now are gone: every process born in the job is in its cgroup).
    fn free_inherited(
        &mut self,
        before: &HashMap<Tid, u64>,
        owners: &HashMap<Tid, Owner>,
        mut waiting: HashMap<Tid, Inheritance>,
    ) -> HashMap<Tid, Inheritance> {
        let inherited = |tid: &Tid| owners.get(tid) == Some(&Owner::Inherited);
        let waited: BTreeSet<u32> = waiting.keys().map(|t| t.0).collect();
        let mut still = HashMap::new();
        let mut freed = BTreeSet::new();
        let seen = self.seen;
        let processes = seen.affinity.iter().filter(|(t, _)| seen.pid_of(t) == t.0);
        for (tid, cur) in processes {
            let was = waiting.remove(tid);
            if !inherited(tid) {
                continue;
            }
            match was {
                Some(w) if !w.looked => {
                    debug!(cgroup = %self.job.cgroup, pid = tid.0, cpus = %cur, "process born on a pin waits for its exec");
                    still.insert(*tid, Inheritance { looked: true, ..w });
                }
                None if !before.contains_key(tid) => {
                    debug!(cgroup = %self.job.cgroup, pid = tid.0, cpus = %cur, "process born on a pin waits for its exec");
                    still.insert(*tid, Inheritance::seen_by_a_pass(*cur));
                }
                Some(_) if self.free_if_still(*tid, cur) => {
                    freed.insert(tid.0);
                }
                _ => {}
            }
        }
        // A thread of a process that waited goes with it, and only then (its process bound or
        // exec'd since: its threads are its runtime's); any other new one that inherited a
        // pin of pjw's from its process goes at once.
        let threads = seen.affinity.iter().filter(|(t, _)| seen.pid_of(t) != t.0);
        for (tid, cur) in threads {
            let pid = seen.pid_of(tid);
            let due = if waited.contains(&pid) {
                freed.contains(&pid)
            } else {
                !before.contains_key(tid)
            };
            if inherited(tid) && due {
                self.free_if_still(*tid, cur);
            }
        }
        still
    }

    /// Free thread `tid` if its affinity is still `seen` (read again just before: a runtime
    /// may have bound it since this pass read it), and note what pjw set; whether it was
    /// freed.
    fn free_if_still(&mut self, tid: Tid, seen: &CpuSet) -> bool {
        let at = self.port.now_ns();
        let freed = match self.port.affinity(tid.0) {
            Ok(now) if now == *seen => free(self.port, self.job, tid, self.logged, self.r),
            _ => false,
        };
        if freed {
            self.set_ours(tid, self.job.cpus, at);
        }
        freed
    }

    /// Give the threads of `unpin` the whole job set back; one that fails stays pinned at its
    /// slot of `applied`, so the next pass tries again.
    fn unpin(&mut self, unpin: Vec<Tid>, applied: &BTreeMap<Tid, u32>) {
        let job = self.job;
        for tid in unpin {
            let at = self.port.now_ns();
            match self.port.set_affinity(&job.cgroup, tid.0, &job.cpus) {
                Ok(()) => {
                    debug!(cgroup = %job.cgroup, tid = tid.0, cpus = %job.cpus, "thread unpinned");
                    self.set_ours(tid, job.cpus, at);
                    self.r.unpinned += 1;
                }
                Err(BindError::Gone) => {}
                Err(BindError::Failed(e)) => {
                    // Kept as pinned: the next pass tries again.
                    failed!(self.logged, job.seq, "cannot unpin", cgroup = %job.cgroup, tid = tid.0, error = %e);
                    if let Some(slot) = applied.get(&tid) {
                        self.pins.insert(tid, *slot);
                    }
                    self.r.failed += 1;
                }
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
