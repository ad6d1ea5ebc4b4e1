//! The binder's passes on a recording fake port: the pins follow the busy threads, sleepers get
//! the whole job set back, vanished threads are skipped and failures are not taken as pins, and
//! a runtime's pins are never moved or widened.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pjw_core::{synthetic, CpuSet};

use super::*;

const SEC: u64 = 1_000_000_000;

/// A machine of jobs, processes and threads whose run times the test moves by hand; records
/// every affinity set.
#[derive(Default)]
struct Fake {
    procs: HashMap<String, Vec<u32>>,
    threads: HashMap<u32, Vec<u32>>,
    run: Mutex<HashMap<u32, u64>>,
    /// Threads whose reads or pins fail with this error.
    fail: HashMap<u32, BindError>,
    set: Mutex<Vec<(u32, CpuSet)>>,
    /// Each thread's affinity (absent: the whole machine, wider than any job).
    aff: Mutex<HashMap<u32, CpuSet>>,
    /// Each process's parent, and how often one was asked for.
    parents: HashMap<u32, u32>,
    parent_reads: Mutex<u32>,
    /// A runtime that binds a thread just after pjw first reads its affinity (the read sees
    /// the old set, every later one the new).
    bind_after_read: Mutex<Option<(u32, CpuSet)>>,
    /// The clock of events and changes (ns): every reading advances it.
    clock_ns: Mutex<u64>,
}

impl Fake {
    fn job(cgroup: &str, pid: u32, tids: &[u32]) -> Fake {
        let mut f = Fake::default();
        f.procs.insert(cgroup.into(), vec![pid]);
        f.threads.insert(pid, tids.to_vec());
        f.run.lock().unwrap().extend(tids.iter().map(|&t| (t, 0)));
        f
    }
    /// Threads `busy` ran the whole second, the others 1 ms.
    fn advance(&self, busy: &[u32]) {
        for (tid, ns) in self.run.lock().unwrap().iter_mut() {
            *ns += if busy.contains(tid) { SEC } else { SEC / 1000 };
        }
    }
    /// The time now on the events' clock (a fork's timestamp); advances the clock.
    fn stamp(&self) -> u64 {
        let mut c = self.clock_ns.lock().unwrap();
        *c += 1_000;
        *c
    }
    fn take_set(&self) -> Vec<(u32, CpuSet)> {
        let mut v = std::mem::take(&mut *self.set.lock().unwrap());
        v.sort();
        v
    }
    /// A runtime (not pjw) pins thread `tid` to `cpus`.
    fn runtime_pin(&self, tid: u32, cpus: &str) {
        self.aff.lock().unwrap().insert(tid, set(cpus));
    }
    fn affinity_of(&self, tid: u32) -> CpuSet {
        self.aff
            .lock()
            .unwrap()
            .get(&tid)
            .copied()
            .unwrap_or_else(|| set("0-63"))
    }
    fn failure(&self, tid: u32) -> Option<BindError> {
        self.fail.get(&tid).map(|e| match e {
            BindError::Gone => BindError::Gone,
            BindError::Failed(m) => BindError::Failed(m.clone()),
        })
    }
}

impl BindPort for Fake {
    fn procs(&self, cgroup: &str) -> Result<Vec<u32>, BindError> {
        self.procs.get(cgroup).cloned().ok_or(BindError::Gone)
    }
    fn threads(&self, pid: u32) -> Result<Vec<u32>, BindError> {
        self.threads.get(&pid).cloned().ok_or(BindError::Gone)
    }
    fn runnable_ns(&self, _pid: u32, tid: u32) -> Result<u64, BindError> {
        self.run
            .lock()
            .unwrap()
            .get(&tid)
            .copied()
            .ok_or(BindError::Gone)
    }
    fn set_affinity(&self, _cgroup: &str, tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
        if let Some(e) = self.failure(tid) {
            return Err(e);
        }
        self.set.lock().unwrap().push((tid, *cpus));
        self.aff.lock().unwrap().insert(tid, *cpus);
        Ok(())
    }
    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError> {
        let now = self.affinity_of(tid);
        let mut later = self.bind_after_read.lock().unwrap();
        if let Some((t, cpus)) = *later {
            if t == tid {
                self.aff.lock().unwrap().insert(tid, cpus);
                *later = None;
            }
        }
        Ok(now)
    }
    fn now_ns(&self) -> u64 {
        self.stamp()
    }
    fn parent(&self, pid: u32) -> Result<u32, BindError> {
        *self.parent_reads.lock().unwrap() += 1;
        self.parents.get(&pid).copied().ok_or(BindError::Gone)
    }
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

fn job(mode: BindMode, cpus: &str) -> BindJob {
    BindJob {
        seq: 1,
        cgroup: "job-a".into(),
        cpus: set(cpus),
        mode,
    }
}

/// Run passes one second apart.
struct Clock(Instant);
impl Clock {
    fn next(&mut self) -> Instant {
        self.0 += Duration::from_secs(1);
        self.0
    }
}

fn pins(b: &Balancer) -> BTreeMap<u32, u32> {
    b.pins(1)
        .map(|p| p.iter().map(|(t, c)| (t.0, *c)).collect())
        .unwrap_or_default()
}

#[test]
fn busy_threads_pinned_apart_sleepers_free_and_pins_follow() {
    let topo = synthetic::parse("core:4").unwrap();
    let fake = Fake::job("job-a", 100, &[100, 101, 102, 103, 104, 105]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "2-3")];
    // The first pass only measures and sets nothing: every thread is free.
    assert_eq!(b.pass(&fake, &j, clock.next()), PassReport::default());
    assert!(fake.take_set().is_empty());
    fake.advance(&[101, 102]);
    let r = b.pass(&fake, &j, clock.next());
    assert_eq!(r.pinned, 2);
    assert_eq!(fake.take_set(), vec![(101, set("2")), (102, set("3"))]);
    assert_eq!(pins(&b), BTreeMap::from([(101, 2), (102, 3)]));
    // Same behaviour: nothing is set again.
    fake.advance(&[101, 102]);
    assert_eq!(b.pass(&fake, &j, clock.next()), PassReport::default());
    assert!(fake.take_set().is_empty());
    // 101 sleeps, 104 wakes: 101 keeps its pin through this first idle pass (one pass of
    // grace), 104 shares its cpu, 102 stays.
    fake.advance(&[102, 104]);
    let r = b.pass(&fake, &j, clock.next());
    assert_eq!((r.pinned, r.unpinned), (1, 0));
    assert_eq!(fake.take_set(), vec![(104, set("2"))]);
    assert_eq!(pins(&b), BTreeMap::from([(101, 2), (102, 3), (104, 2)]));
    // Idle a second pass: 101 gets the job set back; 104 keeps cpu 2, 102 stays.
    fake.advance(&[102, 104]);
    let r = b.pass(&fake, &j, clock.next());
    assert_eq!((r.pinned, r.unpinned), (0, 1));
    assert_eq!(fake.take_set(), vec![(101, set("2-3"))]);
    assert_eq!(pins(&b), BTreeMap::from([(102, 3), (104, 2)]));
}

#[test]
fn cores_mode_pins_whole_cores_of_the_job() {
    let topo = synthetic::parse("core:4 pu:2").unwrap();
    let fake = Fake::job("job-a", 10, &[10, 11, 12]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Cores, "0-3")];
    b.pass(&fake, &j, clock.next());
    fake.take_set();
    fake.advance(&[10, 11, 12]);
    b.pass(&fake, &j, clock.next());
    // Two cores in the job: the third busy thread shares the first core.
    assert_eq!(
        fake.take_set(),
        vec![(10, set("0-1")), (11, set("2-3")), (12, set("0-1"))]
    );
}

#[test]
fn a_changed_job_set_applies_every_pin_again_inside_it() {
    let topo = synthetic::parse("core:4").unwrap();
    let fake = Fake::job("job-a", 10, &[10, 11]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    b.pass(&fake, &[job(BindMode::Threads, "0-1")], clock.next());
    fake.take_set();
    fake.advance(&[10, 11]);
    b.pass(&fake, &[job(BindMode::Threads, "0-1")], clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0")), (11, set("1"))]);
    // Moved to 1-2 (the cpuset rewrote both threads' affinity): both pins set again, inside.
    fake.advance(&[10, 11]);
    b.pass(&fake, &[job(BindMode::Threads, "1-2")], clock.next());
    let got = fake.take_set();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|(_, c)| c.is_subset(&set("1-2"))), "{got:?}");
    assert_ne!(got[0].1, got[1].1);
}

#[test]
fn vanished_threads_are_skipped_failures_not_taken_as_pins() {
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10, 11, 12]);
    fake.fail.insert(11, BindError::Gone);
    fake.fail
        .insert(12, BindError::Failed("operation not permitted".into()));
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-3")];
    b.pass(&fake, &j, clock.next());
    fake.take_set();
    fake.advance(&[10, 11, 12]);
    let r = b.pass(&fake, &j, clock.next());
    assert_eq!((r.pinned, r.failed), (1, 1));
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    assert_eq!(pins(&b), BTreeMap::from([(10, 0)]));
    // The failed pin is tried again at the next pass.
    fake.fail.remove(&12);
    fake.advance(&[10, 12]);
    b.pass(&fake, &j, clock.next());
    let got = fake.take_set();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 12);
    assert!(
        got[0].1.len() == 1 && got[0].1.is_subset(&set("1-3")),
        "{got:?}"
    );
}

#[test]
fn jobs_without_binding_or_gone_are_not_read() {
    let topo = synthetic::parse("core:2").unwrap();
    let fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    b.pass(&fake, &[job(BindMode::Threads, "0-1")], clock.next());
    assert!(b.pins(1).is_some());
    fake.take_set();
    fake.advance(&[10]);
    b.pass(&fake, &[job(BindMode::Threads, "0-1")], clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    // Its mode is now none (a reload): the pinned thread gets the job set back, then nothing.
    b.pass(&fake, &[job(BindMode::None, "0-1")], clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0-1"))]);
    assert!(b.pins(1).is_none());
    b.pass(&fake, &[job(BindMode::None, "0-1")], clock.next());
    assert!(fake.take_set().is_empty());
    // Not listed any more (ended): forgotten.
    b.pass(&fake, &[job(BindMode::Threads, "0-1")], clock.next());
    assert!(b.pins(1).is_some());
    b.pass(&fake, &[], clock.next());
    assert!(b.pins(1).is_none());
    // A job whose cgroup is gone is skipped.
    let mut gone = job(BindMode::Threads, "0-1");
    gone.cgroup = "job-gone".into();
    assert_eq!(b.pass(&fake, &[gone], clock.next()), PassReport::default());
}

#[test]
fn a_new_thread_gets_the_job_set_at_first_sight() {
    let topo = synthetic::parse("core:2").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-1")];
    b.pass(&fake, &j, clock.next());
    fake.advance(&[10]);
    b.pass(&fake, &j, clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    // Pinned thread 10 starts thread 11 (which inherits its pin): 11 gets the job set back at
    // once, before it is measured; 10 keeps its pin.
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    fake.runtime_pin(11, "0");
    fake.advance(&[10]);
    b.pass(&fake, &j, clock.next());
    assert_eq!(fake.take_set(), vec![(11, set("0-1"))]);
    // Measured busy at the next pass: pinned to the other cpu.
    fake.advance(&[10, 11]);
    b.pass(&fake, &j, clock.next());
    assert_eq!(fake.take_set(), vec![(11, set("1"))]);
}

#[test]
fn a_born_thread_is_pinned_at_once_and_kept_only_if_busy() {
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-2");
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.take_set();
    assert_eq!(pins(&b), BTreeMap::from([(10, 0)]));
    // Two threads born 0.4 s before the next pass: each goes to the least pinned cpu at once.
    fake.threads.insert(10, vec![10, 11, 12]);
    fake.run.lock().unwrap().extend([(11, 0), (12, 0)]);
    let mut r = PassReport::default();
    let birth = clock.0 + Duration::from_millis(600);
    for tid in [11, 12] {
        let born = Born {
            job: j.clone(),
            tgid: 10,
            tid,
            at: Birth::Fork {
                by: 1,
                at_ns: fake.stamp(),
            },
        };
        b.place_born(&fake, &born, birth, &mut r);
    }
    assert_eq!(r.pinned, 2);
    assert_eq!(fake.take_set(), vec![(11, set("1")), (12, set("2"))]);
    // Measured from birth: at the next pass 11 (busy all its 0.4 s: 40% of the interval but all
    // of its life) keeps its cpu, 12 (asleep) is unpinned.
    fake.advance(&[10]);
    *fake.run.lock().unwrap().get_mut(&11).unwrap() += SEC * 4 / 10;
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(12, set("0-2"))]);
    assert_eq!(pins(&b), BTreeMap::from([(10, 0), (11, 1)]));
    // A job not balanced yet, or whose cpus changed: left to the next pass.
    let mut other = j.clone();
    other.seq = 2;
    b.place_born(
        &fake,
        &Born {
            job: other,
            tgid: 10,
            tid: 13,
            at: Birth::Fork {
                by: 1,
                at_ns: fake.stamp(),
            },
        },
        birth,
        &mut r,
    );
    let mut moved = j.clone();
    moved.cpus = set("1-3");
    b.place_born(
        &fake,
        &Born {
            job: moved,
            tgid: 10,
            tid: 13,
            at: Birth::Fork {
                by: 1,
                at_ns: fake.stamp(),
            },
        },
        birth,
        &mut r,
    );
    assert!(fake.take_set().is_empty());
}

#[test]
fn a_runtimes_pins_are_never_moved_or_widened_and_pjw_places_around_them() {
    // libgomp under OMP_PROC_BIND=close pinned its threads 100 and 101 to cpus 0 and 1 of a
    // 4-cpu job before the binder's first look; 102 is busy and free, 103 sleeps.
    let topo = synthetic::parse("core:4").unwrap();
    let fake = Fake::job("job-a", 100, &[100, 101, 102, 103]);
    fake.runtime_pin(100, "0");
    fake.runtime_pin(101, "1");
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-3")];
    assert_eq!(b.pass(&fake, &j, clock.next()), PassReport::default());
    assert!(fake.take_set().is_empty());
    // Busy, all three: the binder acts (102 pinned) but only on 102, and not on 0 or 1.
    for _ in 0..3 {
        fake.advance(&[100, 101, 102]);
        b.pass(&fake, &j, clock.next());
    }
    assert_eq!(fake.take_set(), vec![(102, set("2"))]);
    assert_eq!(pins(&b), BTreeMap::from([(102, 2)]));
    // The OpenMP threads idle between parallel regions: still theirs, never widened.
    for _ in 0..3 {
        fake.advance(&[102]);
        b.pass(&fake, &j, clock.next());
    }
    assert!(fake.take_set().is_empty());
    assert_eq!(
        (fake.affinity_of(100), fake.affinity_of(101)),
        (set("0"), set("1"))
    );
    // The runtime-pinned main thread's parent is not read pass after pass.
    assert_eq!(*fake.parent_reads.lock().unwrap(), 0);
}

#[test]
fn pjws_own_pins_are_known_and_a_later_runtime_pin_is_left() {
    let topo = synthetic::parse("core:2").unwrap();
    let fake = Fake::job("job-a", 10, &[10, 11]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-1")];
    b.pass(&fake, &j, clock.next());
    fake.advance(&[10, 11]);
    b.pass(&fake, &j, clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0")), (11, set("1"))]);
    // pjw's own pins are not taken for a runtime's: kept and tracked, nothing set again.
    fake.advance(&[10, 11]);
    b.pass(&fake, &j, clock.next());
    assert!(fake.take_set().is_empty());
    assert_eq!(pins(&b), BTreeMap::from([(10, 0), (11, 1)]));
    // The program pins 10 to cpu 1 itself (sched_setaffinity, hwloc-bind): its choice stays,
    // pjw's 11 moves off its cpu to the free one, and when 10 then sleeps it is not given the
    // job set back.
    fake.runtime_pin(10, "1");
    for busy in [&[10, 11][..], &[11], &[11], &[11]] {
        fake.advance(busy);
        b.pass(&fake, &j, clock.next());
    }
    assert_eq!(fake.take_set(), vec![(11, set("0"))]);
    assert_eq!(fake.affinity_of(10), set("1"));
    assert_eq!(pins(&b), BTreeMap::from([(11, 0)]));
    // A reload switches the job to none: pjw gives back its own pin only.
    b.pass(&fake, &[job(BindMode::None, "0-1")], clock.next());
    assert_eq!(fake.take_set(), vec![(11, set("0-1"))]);
    assert_eq!(fake.affinity_of(10), set("1"));
}

#[test]
fn a_thread_born_on_a_runtimes_place_stays_there() {
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    // libgomp creates 11 on its place, cpu 3; 12 is born free.
    fake.threads.insert(10, vec![10, 11, 12]);
    fake.run.lock().unwrap().extend([(11, 0), (12, 0)]);
    fake.runtime_pin(11, "3");
    let mut r = PassReport::default();
    for tid in [11, 12] {
        let born = Born {
            job: j.clone(),
            tgid: 10,
            tid,
            at: Birth::Fork {
                by: 1,
                at_ns: fake.stamp(),
            },
        };
        b.place_born(&fake, &born, clock.0, &mut r);
    }
    assert_eq!(fake.take_set(), vec![(12, set("1"))]);
    // Passes later, busy or not, 11 is where its runtime put it.
    for _ in 0..3 {
        fake.advance(&[10, 11, 12]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    for _ in 0..3 {
        fake.advance(&[10]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert!(
        fake.take_set().iter().all(|(t, _)| *t != 11),
        "11 was touched"
    );
    assert_eq!(fake.affinity_of(11), set("3"));
}

#[test]
fn a_born_process_keeps_the_job_set_for_the_program_it_execs() {
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    // Pinned 10 forks 20 (which inherits cpu 0) and 30 is forked free. 10 is a launcher: its
    // pin goes at once, so what it forks next starts free; 20 gets the job set when it execs
    // (not at its fork: a launcher may bind it before), 30 is left as it is.
    fake.procs.insert("job-a".into(), vec![10, 20, 30]);
    fake.threads.insert(20, vec![20]);
    fake.threads.insert(30, vec![30]);
    fake.run.lock().unwrap().extend([(20, 0), (30, 0)]);
    fake.runtime_pin(20, "0");
    fake.parents.extend([(20, 10), (30, 10)]);
    let mut r = PassReport::default();
    let event = |pid, at| Born {
        job: j.clone(),
        tgid: pid,
        tid: pid,
        at,
    };
    b.place_born(
        &fake,
        &event(
            20,
            Birth::Fork {
                by: 10,
                at_ns: fake.stamp(),
            },
        ),
        clock.0,
        &mut r,
    );
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    fake.aff.lock().unwrap().insert(30, set("0-3"));
    b.place_born(
        &fake,
        &event(
            30,
            Birth::Fork {
                by: 10,
                at_ns: fake.stamp(),
            },
        ),
        clock.0,
        &mut r,
    );
    assert!(fake.take_set().is_empty());
    for pid in [20, 30] {
        b.place_born(&fake, &event(pid, Birth::Exec), clock.0, &mut r);
    }
    assert_eq!(fake.take_set(), vec![(20, set("0-3"))]);
    // Measured from the first pass that sees them (the program each execs has a full
    // interval to start on the job set), pinned at the one after; the launcher never again.
    fake.advance(&[10, 20, 30]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(fake.take_set().is_empty());
    fake.advance(&[10, 20, 30]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    let got = fake.take_set();
    assert_eq!(
        got.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        vec![20, 30],
        "{got:?}"
    );
    assert!(
        got.iter().all(|(_, c)| c.len() == 1) && got[0].1 != got[1].1,
        "{got:?}"
    );
}

#[test]
fn a_rank_its_launcher_binds_between_fork_and_exec_keeps_that_binding() {
    // The hpc_tasks failure in the systemd guest: pjw had pinned mpirun's busy main thread
    // (10) to cpu 0 before it forked its ranks; each rank was born on cpu 0, and Open MPI
    // bound rank 20 to cpus 2-3 before its exec. pjw freeing the child at its fork raced with
    // that binding and undid it (the rank's libgomp then counted 4 cpus).
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    fake.procs.insert("job-a".into(), vec![10, 20]);
    fake.threads.insert(20, vec![20, 21]);
    fake.run.lock().unwrap().extend([(20, 0), (21, 0)]);
    fake.parents.insert(20, 10);
    fake.runtime_pin(20, "0");
    let mut r = PassReport::default();
    let event = |at| Born {
        job: j.clone(),
        tgid: 20,
        tid: 20,
        at,
    };
    b.place_born(
        &fake,
        &event(Birth::Fork {
            by: 10,
            at_ns: fake.stamp(),
        }),
        clock.0,
        &mut r,
    );
    // Only the launcher's own pin went; the rank is not touched at its fork.
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    // Open MPI binds it, it execs; libgomp places its two threads inside the binding.
    fake.runtime_pin(20, "2-3");
    b.place_born(&fake, &event(Birth::Exec), clock.0, &mut r);
    fake.runtime_pin(20, "2");
    fake.runtime_pin(21, "3");
    for _ in 0..3 {
        fake.advance(&[10, 20, 21]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert!(
        fake.take_set().is_empty(),
        "the launcher stays free, the rank its runtime's"
    );
    assert_eq!(
        (fake.affinity_of(20), fake.affinity_of(21)),
        (set("2"), set("3"))
    );
}

#[test]
fn a_runtime_pin_equal_to_pjws_pin_in_another_process_is_still_the_runtimes() {
    // pjw pinned the busy thread of process 10 to cpu 0; process 20 (not 10's child) starts,
    // its threads placed by libgomp on cpu 0 as well: a coincidence, not an inheritance.
    let topo = synthetic::parse("core:2").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-1")];
    b.pass(&fake, &j, clock.next());
    fake.advance(&[10]);
    b.pass(&fake, &j, clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
    fake.procs.insert("job-a".into(), vec![10, 20]);
    fake.threads.insert(20, vec![20, 21]);
    fake.parents.insert(20, 1);
    fake.run.lock().unwrap().extend([(20, 0), (21, 0)]);
    fake.runtime_pin(20, "0");
    fake.runtime_pin(21, "0");
    for _ in 0..3 {
        fake.advance(&[10, 20, 21]);
        b.pass(&fake, &j, clock.next());
    }
    // Only pjw's own thread moved (off the cpu the runtime holds); 20 and 21 stay.
    assert_eq!(fake.take_set(), vec![(10, set("1"))]);
    assert_eq!(
        (fake.affinity_of(20), fake.affinity_of(21)),
        (set("0"), set("0"))
    );
}

#[test]
fn a_thread_born_to_a_process_not_seen_computing_is_measured_first() {
    // mpirun (10) sleeps and starts helper threads; it forks its ranks from them, so a pin on
    // one would be every rank's.
    let topo = synthetic::parse("core:2").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-1");
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.advance(&[]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    let mut r = PassReport::default();
    let born = Born {
        job: j.clone(),
        tgid: 10,
        tid: 11,
        at: Birth::Fork {
            by: 1,
            at_ns: fake.stamp(),
        },
    };
    b.place_born(&fake, &born, clock.0, &mut r);
    assert!(fake.take_set().is_empty());
    // Measured from birth: a busy one is placed at the next pass, a sleeper never.
    fake.advance(&[11]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(11, set("0"))]);
}

#[test]
fn a_failure_is_a_warning_once_per_job_and_kind() {
    let mut l = Logged::default();
    assert!(l.first(1, "cannot pin"));
    assert!(!l.first(1, "cannot pin"));
    assert!(l.first(1, "cannot unpin"));
    assert!(l.first(2, "cannot pin"));
    // A job forgotten (ended) is forgotten here too.
    l.retain(|seq| seq == 2);
    assert!(l.first(1, "cannot pin"));
    assert!(!l.first(2, "cannot pin"));
}

/// mpirun (10) with two busy threads pjw pinned to two cpus; returns those cpus.
fn launcher_pinned(
    fake: &mut Fake,
    b: &mut Balancer,
    clock: &mut Clock,
    j: &BindJob,
) -> Vec<CpuSet> {
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    b.pass(&*fake, std::slice::from_ref(j), clock.next());
    fake.advance(&[10, 11]);
    b.pass(&*fake, std::slice::from_ref(j), clock.next());
    let got = fake.take_set();
    assert_eq!(
        got.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        vec![10, 11]
    );
    got.into_iter().map(|(_, c)| c).collect()
}

/// Rank `pid` (threads pid and pid+1), forked by 10: the runtime placed them on `cpus`.
fn rank(fake: &mut Fake, pid: u32, cpus: [&CpuSet; 2]) {
    fake.procs.get_mut("job-a").unwrap().push(pid);
    fake.threads.insert(pid, vec![pid, pid + 1]);
    fake.parents.insert(pid, 10);
    fake.run.lock().unwrap().extend([(pid, 0), (pid + 1, 0)]);
    fake.aff
        .lock()
        .unwrap()
        .extend([(pid, *cpus[0]), (pid + 1, *cpus[1])]);
}

#[test]
fn ranks_whose_libgomp_places_equal_the_launchers_pins_keep_them_when_first_seen_by_a_pass() {
    // The hpc_tasks failure: `--bind threads -- mpirun -np 2` with OMP_PROC_BIND. pjw pinned
    // mpirun's busy threads; each rank's libgomp master landed on a cpu of one of them, its worker
    // on the rank's other cpu. No fork events (missed): the first pass sees them placed.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let l = launcher_pinned(&mut fake, &mut b, &mut clock, &j);
    // The workers go to the two cpus mpirun's threads do not hold.
    let rest: Vec<u32> = set("0-3")
        .difference(&l[0])
        .difference(&l[1])
        .iter()
        .collect();
    let (w20, w30) = (set(&rest[0].to_string()), set(&rest[1].to_string()));
    rank(&mut fake, 20, [&l[0], &w20]);
    rank(&mut fake, 30, [&l[1], &w30]);
    for _ in 0..3 {
        fake.advance(&[10, 11, 20, 21, 30, 31]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    // No rank thread was freed or pinned by pjw: each is where its runtime put it.
    let touched: Vec<u32> = fake
        .take_set()
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| *t >= 20)
        .collect();
    assert!(touched.is_empty(), "pjw moved rank threads {touched:?}");
    assert_eq!(
        [20, 21, 30, 31].map(|t| fake.affinity_of(t)),
        [l[0], w20, l[1], w30]
    );
}

#[test]
fn a_process_seen_free_at_birth_keeps_the_pin_its_runtime_gives_it_later() {
    // Rank 20 is born free (mpirun forked it from an unpinned thread); before the next pass
    // libgomp pins its only thread to the cpu pjw holds on mpirun's thread 10.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let l = launcher_pinned(&mut fake, &mut b, &mut clock, &j);
    fake.procs.get_mut("job-a").unwrap().push(20);
    fake.threads.insert(20, vec![20]);
    fake.parents.insert(20, 10);
    fake.run.lock().unwrap().insert(20, 0);
    fake.runtime_pin(20, "0-3");
    let mut r = PassReport::default();
    let born = Born {
        job: j.clone(),
        tgid: 20,
        tid: 20,
        at: Birth::Fork {
            by: 12,
            at_ns: fake.stamp(),
        },
    };
    b.place_born(&fake, &born, clock.0, &mut r);
    assert!(fake.take_set().is_empty());
    fake.aff.lock().unwrap().insert(20, l[0]);
    for _ in 0..3 {
        fake.advance(&[10, 11, 20]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert!(fake.take_set().iter().all(|(t, _)| *t != 20));
    assert_eq!(fake.affinity_of(20), l[0]);
}

#[test]
fn a_thread_seen_before_and_narrowed_to_a_siblings_pin_later_is_the_runtimes() {
    // Thread 12 of process 10 was seen free at a pass; then the program pins it itself to the
    // cpu pjw holds on its sibling 10: inheritance happens at birth only, so it is left.
    let topo = synthetic::parse("core:4").unwrap();
    let fake = Fake::job("job-a", 10, &[10, 12]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-3")];
    b.pass(&fake, &j, clock.next());
    fake.advance(&[10]);
    b.pass(&fake, &j, clock.next());
    let got = fake.take_set();
    assert_eq!(got.len(), 1, "{got:?}");
    let (_, pin10) = got[0];
    fake.aff.lock().unwrap().insert(12, pin10);
    for _ in 0..2 {
        fake.advance(&[10, 12]);
        b.pass(&fake, &j, clock.next());
    }
    assert!(fake.take_set().iter().all(|(t, _)| *t != 12));
    assert_eq!(fake.affinity_of(12), pin10);
}

/// The first pass looks; busy thread 10 is pinned to cpu 0 at the second.
fn main_thread_pinned(fake: &Fake, b: &mut Balancer, clock: &mut Clock, j: &BindJob) {
    b.pass(fake, std::slice::from_ref(j), clock.next());
    fake.advance(&[10]);
    b.pass(fake, std::slice::from_ref(j), clock.next());
    assert_eq!(fake.take_set(), vec![(10, set("0"))]);
}

/// mpirun (10) pinned to cpu 0 by pjw forks rank 20, which inherits the pin; its fork event
/// makes 10 a launcher (its pin goes). Returns the fork event's maker.
fn rank_forked_on_the_launchers_pin(
    fake: &mut Fake,
    b: &mut Balancer,
    clock: &mut Clock,
    j: &BindJob,
) -> impl Fn(Birth) -> Born {
    main_thread_pinned(fake, b, clock, j);
    fake.procs.insert("job-a".into(), vec![10, 20]);
    fake.threads.insert(20, vec![20]);
    fake.run.lock().unwrap().insert(20, 0);
    fake.parents.insert(20, 10);
    fake.runtime_pin(20, "0");
    let job = j.clone();
    let event = move |at| Born {
        job: job.clone(),
        tgid: 20,
        tid: 20,
        at,
    };
    b.place_born(
        &*fake,
        &event(Birth::Fork {
            by: 10,
            at_ns: fake.stamp(),
        }),
        clock.0,
        &mut PassReport::default(),
    );
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    event
}

#[test]
fn a_pass_between_a_ranks_fork_and_its_exec_leaves_the_rank_to_its_launcher() {
    // The hpc_tasks failure that stayed after the fork event stopped freeing ranks (systemd
    // guest, 16 vCPUs emulated): a pass came while the rank was between its fork and its exec,
    // read it on mpirun's pin, and gave it the job set just after Open MPI had bound it to its
    // share: the rank's libgomp counted the job's 4 cpus instead of its 2.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let event = rank_forked_on_the_launchers_pin(&mut fake, &mut b, &mut clock, &j);
    fake.advance(&[10, 20]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(
        fake.take_set().is_empty(),
        "the pass touched the rank before its exec"
    );
    // Open MPI binds it and it execs: its binding stays, and later passes leave it too.
    fake.runtime_pin(20, "2-3");
    b.place_born(
        &fake,
        &event(Birth::Exec),
        clock.0,
        &mut PassReport::default(),
    );
    for _ in 0..2 {
        fake.advance(&[10, 20]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert!(fake.take_set().is_empty());
    assert_eq!(fake.affinity_of(20), set("2-3"));
}

#[test]
fn a_process_forked_on_a_pin_that_never_execs_gets_the_job_set_at_the_second_pass() {
    // A worker forked by a busy process pjw had pinned (Python's multiprocessing): no exec
    // comes, so the pass after the one that first saw it frees it, and it is measured after.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let _exec = rank_forked_on_the_launchers_pin(&mut fake, &mut b, &mut clock, &j);
    fake.advance(&[10, 20]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(fake.take_set().is_empty());
    fake.advance(&[10, 20]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(20, set("0-3"))]);
    // Busy since: pinned like any thread of pjw's (the launcher 10 never again).
    fake.advance(&[10, 20]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    let got = fake.take_set();
    assert!(
        got.len() == 1 && got[0].0 == 20 && got[0].1.len() == 1,
        "{got:?}"
    );
}

#[test]
fn a_process_a_pass_finds_on_its_parents_pin_without_its_fork_event_waits_a_pass() {
    // The pass can list a process before its fork event reaches the binder: the same wait.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    main_thread_pinned(&fake, &mut b, &mut clock, &j);
    fake.procs.insert("job-a".into(), vec![10, 20, 30]);
    for (pid, parent) in [(20, 10), (30, 10)] {
        fake.threads.insert(pid, vec![pid]);
        fake.run.lock().unwrap().insert(pid, 0);
        fake.parents.insert(pid, parent);
        fake.runtime_pin(pid, "0");
    }
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(
        fake.take_set().iter().all(|(t, _)| *t == 10),
        "a process on its parent's pin was freed at first sight"
    );
    // 20 is bound by its launcher in between; 30 never is.
    fake.runtime_pin(20, "2-3");
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    let got: Vec<_> = fake
        .take_set()
        .into_iter()
        .filter(|(t, _)| *t != 10)
        .collect();
    assert_eq!(got, vec![(30, set("0-3"))]);
    assert_eq!(fake.affinity_of(20), set("2-3"));
}

#[test]
fn a_thread_its_runtime_binds_after_the_pass_read_it_is_not_freed_over_that_binding() {
    // A new thread on a pin of pjw's is freed at first sight, but the runtime may bind it
    // between the pass's read and its write: the affinity is read again just before.
    let topo = synthetic::parse("core:2").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = [job(BindMode::Threads, "0-1")];
    main_thread_pinned(&fake, &mut b, &mut clock, &j[0]);
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    fake.runtime_pin(11, "0");
    *fake.bind_after_read.lock().unwrap() = Some((11, set("1")));
    fake.advance(&[10]);
    b.pass(&fake, &j, clock.next());
    assert!(
        fake.take_set().is_empty(),
        "freed over the runtime's binding"
    );
    assert_eq!(fake.affinity_of(11), set("1"));
}

/// mpirun (10) whose busy main thread pjw pinned to cpu 0, with helper thread 11 (never
/// pinned).
fn mpirun_main_thread_pinned(fake: &mut Fake, b: &mut Balancer, clock: &mut Clock, j: &BindJob) {
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    main_thread_pinned(fake, b, clock, j);
}

fn new_process(fake: &mut Fake, pid: u32, parent: u32, cpus: &str) {
    fake.procs.get_mut("job-a").unwrap().push(pid);
    fake.threads.insert(pid, vec![pid]);
    fake.parents.insert(pid, parent);
    fake.run.lock().unwrap().insert(pid, 0);
    fake.runtime_pin(pid, cpus);
}

fn process_event(j: &BindJob, pid: u32, at: Birth) -> Born {
    Born {
        job: j.clone(),
        tgid: pid,
        tid: pid,
        at,
    }
}

#[test]
fn a_rank_forked_by_a_thread_pjw_never_pinned_keeps_its_pin_though_it_equals_one_of_mpiruns() {
    // The hpc_tasks failure seen again this session: mpirun forks its ranks from a helper
    // thread pjw never pinned; the binder read a rank's affinity late, after Open MPI had bound
    // it to cpus 0-1 and its libgomp had put the master on cpu 0, equal to the pin pjw held on
    // mpirun's main thread, took it for an inheritance and freed it at its exec (the rank's
    // master ran on the job's 4 cpus). The fork event names the forking thread: born free.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    mpirun_main_thread_pinned(&mut fake, &mut b, &mut clock, &j);
    new_process(&mut fake, 20, 10, "0");
    let mut r = PassReport::default();
    b.place_born(
        &fake,
        &process_event(
            &j,
            20,
            Birth::Fork {
                by: 11,
                at_ns: fake.stamp(),
            },
        ),
        clock.0,
        &mut r,
    );
    b.place_born(&fake, &process_event(&j, 20, Birth::Exec), clock.0, &mut r);
    for _ in 0..2 {
        fake.advance(&[10, 20]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert!(
        fake.take_set().iter().all(|(t, _)| *t != 20),
        "the rank's own pin was touched"
    );
    assert_eq!(fake.affinity_of(20), set("0"));
}

#[test]
fn a_process_forked_on_a_pin_pjw_took_off_before_its_fork_event_came_is_still_born_on_it() {
    // mpirun's main thread forks 20 on its pin; the pass that comes before the fork event
    // reaches the binder finds the thread idle and gives it the job set back. 20 still holds
    // the pin it was born on and is freed at its exec like any child born on one.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    mpirun_main_thread_pinned(&mut fake, &mut b, &mut clock, &j);
    let forked = fake.stamp();
    // Idle: kept through one pass of grace, given the job set back at the next.
    for _ in 0..2 {
        fake.advance(&[]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    new_process(&mut fake, 20, 10, "0");
    let mut r = PassReport::default();
    b.place_born(
        &fake,
        &process_event(
            &j,
            20,
            Birth::Fork {
                by: 10,
                at_ns: forked,
            },
        ),
        clock.0,
        &mut r,
    );
    assert!(fake.take_set().is_empty(), "freed at its fork");
    b.place_born(&fake, &process_event(&j, 20, Birth::Exec), clock.0, &mut r);
    assert_eq!(fake.take_set(), vec![(20, set("0-3"))]);
}

#[test]
fn every_child_a_pinned_thread_forked_before_its_first_fork_event_came_is_born_on_its_pin() {
    // 10 forks 20 and 30 on its pin in quick succession; the first fork event makes 10 a
    // launcher and takes its pin off. 30 was born on it all the same.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    mpirun_main_thread_pinned(&mut fake, &mut b, &mut clock, &j);
    new_process(&mut fake, 20, 10, "0");
    new_process(&mut fake, 30, 10, "0");
    let mut r = PassReport::default();
    let forked = fake.stamp();
    for pid in [20, 30] {
        b.place_born(
            &fake,
            &process_event(
                &j,
                pid,
                Birth::Fork {
                    by: 10,
                    at_ns: forked,
                },
            ),
            clock.0,
            &mut r,
        );
    }
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    for pid in [20, 30] {
        b.place_born(&fake, &process_event(&j, pid, Birth::Exec), clock.0, &mut r);
    }
    assert_eq!(fake.take_set(), vec![(20, set("0-3")), (30, set("0-3"))]);
}

fn fork_at(j: &BindJob, pid: u32, by: u32, at_ns: u64) -> Born {
    process_event(j, pid, Birth::Fork { by, at_ns })
}

#[test]
fn a_process_forked_after_pjw_took_its_threads_pin_off_keeps_the_pin_its_runtime_gives_it() {
    // mpirun's main thread is given the job set back (idle); only then does it fork rank 20,
    // which Open MPI binds and libgomp places on cpu 0 — the cpu of the old pin. The fork
    // event, handled late, is after the change: 20 was born free, and its pin is its own.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    mpirun_main_thread_pinned(&mut fake, &mut b, &mut clock, &j);
    for _ in 0..2 {
        fake.advance(&[]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    assert_eq!(fake.take_set(), vec![(10, set("0-3"))]);
    let forked = fake.stamp();
    new_process(&mut fake, 20, 10, "0");
    let mut r = PassReport::default();
    b.place_born(&fake, &fork_at(&j, 20, 10, forked), clock.0, &mut r);
    b.place_born(&fake, &process_event(&j, 20, Birth::Exec), clock.0, &mut r);
    fake.advance(&[20]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(fake.take_set().is_empty());
    assert_eq!(fake.affinity_of(20), set("0"));
}

#[test]
fn a_process_forked_by_a_new_thread_before_its_birth_was_handled_is_born_on_what_the_thread_held() {
    // Busy 10 (pinned to cpu 0) starts thread 11, which inherits cpu 0 and forks 20 at once;
    // handling 11's birth then pins 11 elsewhere. 20 was born on cpu 0, not on 11's new pin,
    // and gets the job set at its exec.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    main_thread_pinned(&fake, &mut b, &mut clock, &j);
    fake.threads.insert(10, vec![10, 11]);
    fake.run.lock().unwrap().insert(11, 0);
    fake.runtime_pin(11, "0");
    let (born11, forked) = (fake.stamp(), fake.stamp());
    new_process(&mut fake, 20, 10, "0");
    let mut r = PassReport::default();
    let thread = Born {
        job: j.clone(),
        tgid: 10,
        tid: 11,
        at: Birth::Fork {
            by: 1,
            at_ns: born11,
        },
    };
    b.place_born(&fake, &thread, clock.0, &mut r);
    let pinned11 = fake.affinity_of(11);
    assert!(pinned11 != set("0") && pinned11.len() == 1, "{pinned11}");
    fake.take_set();
    b.place_born(&fake, &fork_at(&j, 20, 11, forked), clock.0, &mut r);
    b.place_born(&fake, &process_event(&j, 20, Birth::Exec), clock.0, &mut r);
    assert_eq!(fake.affinity_of(20), set("0-3"));
}

#[test]
fn a_worker_that_never_execs_is_freed_with_the_threads_it_made_on_its_pin() {
    // A multiprocessing worker forked on pjw's pin starts BLAS threads before the pass that
    // frees it: they inherited the same pin and go with it.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let _exec = rank_forked_on_the_launchers_pin(&mut fake, &mut b, &mut clock, &j);
    fake.threads.insert(20, vec![20, 21]);
    fake.run.lock().unwrap().insert(21, 0);
    fake.runtime_pin(21, "0");
    fake.advance(&[10, 20, 21]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(fake.take_set().is_empty(), "touched before the second pass");
    fake.advance(&[10, 20, 21]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert_eq!(fake.take_set(), vec![(20, set("0-3")), (21, set("0-3"))]);
}

#[test]
fn a_busy_process_pjw_pinned_that_execs_has_the_threads_its_program_makes_placed_apart() {
    // The numa test's 16-CPU job (busybox guest): its busy main process was pinned, then
    // exec'd its workload, which started its threads at once, on that pin. Freeing the
    // process at its exec (tried) left those threads on the old pin, taken for a runtime's:
    // the job ran on one CPU. The process keeps its pin; its new threads are placed apart.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    main_thread_pinned(&fake, &mut b, &mut clock, &j);
    fake.threads.insert(10, vec![10, 11, 12]);
    fake.run.lock().unwrap().extend([(11, 0), (12, 0)]);
    fake.runtime_pin(11, "0");
    fake.runtime_pin(12, "0");
    let mut r = PassReport::default();
    b.place_born(&fake, &process_event(&j, 10, Birth::Exec), clock.0, &mut r);
    for tid in [11, 12] {
        let born = Born {
            job: j.clone(),
            tgid: 10,
            tid,
            at: Birth::Fork {
                by: 1,
                at_ns: fake.stamp(),
            },
        };
        b.place_born(&fake, &born, clock.0, &mut r);
    }
    let on: Vec<CpuSet> = [10, 11, 12].iter().map(|t| fake.affinity_of(*t)).collect();
    assert!(
        on.iter().all(|c| c.len() == 1) && on[0] != on[1] && on[1] != on[2] && on[0] != on[2],
        "{on:?}"
    );
}

#[test]
fn a_runtimes_worker_in_a_rank_whose_exec_was_not_handled_yet_keeps_its_place() {
    // Rank 20 was born on mpirun's pin (cpu 0) and waits for its exec. Open MPI binds it to
    // cpus 0-1, it execs, libgomp puts its master on cpu 1 and its worker 21 on cpu 0 — the
    // old pin — and a pass comes before the exec event is handled. The worker is libgomp's.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let exec = rank_forked_on_the_launchers_pin(&mut fake, &mut b, &mut clock, &j);
    fake.runtime_pin(20, "1");
    fake.threads.insert(20, vec![20, 21]);
    fake.run.lock().unwrap().insert(21, 0);
    fake.runtime_pin(21, "0");
    let mut r = PassReport::default();
    let worker = Born {
        job: j.clone(),
        tgid: 20,
        tid: 21,
        at: Birth::Fork {
            by: 10,
            at_ns: fake.stamp(),
        },
    };
    b.place_born(&fake, &worker, clock.0, &mut r);
    for _ in 0..2 {
        fake.advance(&[10, 20, 21]);
        b.pass(&fake, std::slice::from_ref(&j), clock.next());
    }
    b.place_born(&fake, &exec(Birth::Exec), clock.0, &mut r);
    assert!(fake.take_set().is_empty(), "a runtime's place was touched");
    assert_eq!(
        (fake.affinity_of(20), fake.affinity_of(21)),
        (set("1"), set("0"))
    );
}

#[test]
fn a_child_born_on_a_pin_that_is_gone_before_any_pass_leaves_nothing_behind() {
    // Fork events of children born on a pin that exit before a pass sees them: their notes
    // go at the next pass, so a recycled pid is never taken for one of them.
    let topo = synthetic::parse("core:4").unwrap();
    let mut fake = Fake::job("job-a", 10, &[10]);
    let mut b = Balancer::new(topo);
    let mut clock = Clock(Instant::now());
    let j = job(BindMode::Threads, "0-3");
    let _exec = rank_forked_on_the_launchers_pin(&mut fake, &mut b, &mut clock, &j);
    assert!(b.jobs[&1].inherited.contains_key(&Tid(20)));
    fake.procs.insert("job-a".into(), vec![10]);
    fake.advance(&[10]);
    b.pass(&fake, std::slice::from_ref(&j), clock.next());
    assert!(b.jobs[&1].inherited.is_empty());
}
