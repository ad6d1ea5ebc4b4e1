//! The thread profiler: the most active threads first, a job with more threads than the scan
//! read in turns, and a recent balancing pass's readings used instead of reading again.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn act(tid: u32, run_ns: u64, total: u64) -> Activity {
    Activity {
        reading: Reading {
            pid: 1,
            tid,
            sched: SchedRead {
                run_ns: total,
                wait_ns: 0,
            },
        },
        run_ns,
        wait_ns: 0,
        span_ns: 1,
    }
}

#[test]
fn the_most_active_threads_first() {
    let tids = |v: Vec<Activity>| v.iter().map(|a| a.reading.tid).collect::<Vec<_>>();
    let all = vec![
        act(1, 0, 900),
        act(2, 50, 50),
        act(3, 70, 70),
        act(4, 0, 10),
    ];
    assert_eq!(tids(top_threads(all.clone(), 2)), [3, 2]);
    // Idle threads: most CPU since they started first.
    assert_eq!(tids(top_threads(all.clone(), 9)), [3, 2, 1, 4]);
    assert!(top_threads(all, 0).is_empty());
}

/// A job of two busy and two sleeping threads; counts the schedstat and migration reads.
#[derive(Default)]
struct Fake {
    run: Mutex<HashMap<u32, u64>>,
    reads: AtomicUsize,
    migration_reads: AtomicUsize,
    /// Threads that ended.
    gone: Mutex<Vec<u32>>,
    /// Last CPUs other than `tid % 2`.
    cpu: Mutex<HashMap<u32, u32>>,
    /// The job's process 10 left its cgroup (its id may be another process's now).
    left: std::sync::atomic::AtomicBool,
    /// Names other than `t{tid}`.
    comm: Mutex<HashMap<u32, String>>,
}

impl Fake {
    fn alive(&self, tid: u32) -> Result<(), BindError> {
        match self.gone.lock().unwrap().contains(&tid) {
            true => Err(BindError::Gone),
            false => Ok(()),
        }
    }
}

impl BindPort for Fake {
    fn procs(&self, _: &str) -> Result<Vec<u32>, BindError> {
        match self.left.load(Ordering::Relaxed) {
            true => Ok(vec![]),
            false => Ok(vec![10]),
        }
    }
    fn threads(&self, _: u32) -> Result<Vec<u32>, BindError> {
        let gone = self.gone.lock().unwrap();
        Ok([10, 11, 12, 13, 14]
            .into_iter()
            .filter(|t| !gone.contains(t))
            .collect())
    }
    fn runnable_ns(&self, pid: u32, tid: u32) -> Result<u64, BindError> {
        self.sched(pid, tid).map(|s| s.run_ns + s.wait_ns)
    }
    fn sched(&self, _: u32, tid: u32) -> Result<SchedRead, BindError> {
        self.alive(tid)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let run = *self.run.lock().unwrap().get(&tid).unwrap_or(&0);
        Ok(SchedRead {
            run_ns: run,
            wait_ns: 0,
        })
    }
    fn task(&self, _: u32, tid: u32) -> Result<TaskFacts, BindError> {
        self.alive(tid)?;
        let comm = self.comm.lock().unwrap().get(&tid).cloned();
        Ok(TaskFacts {
            comm: comm.unwrap_or_else(|| format!("t{tid}")),
            cpu: *self.cpu.lock().unwrap().get(&tid).unwrap_or(&(tid % 2)),
        })
    }
    fn migrations(&self, _: u32, _: u32) -> Option<u64> {
        self.migration_reads.fetch_add(1, Ordering::Relaxed);
        Some(1)
    }
    fn set_affinity(&self, _: &str, _: u32, _: &CpuSet) -> Result<(), BindError> {
        Ok(())
    }
    fn affinity(&self, _: u32) -> Result<CpuSet, BindError> {
        Err(BindError::Failed("the profiler reads no affinity".into()))
    }
    fn parent(&self, _: u32) -> Result<u32, BindError> {
        Err(BindError::Failed("the profiler reads no parent".into()))
    }
}

#[test]
fn a_job_with_more_threads_than_the_scan_is_read_in_turns() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = ProfileTick {
        ts_ms: 0,
        top: 9,
        scan: 2,
        reuse: Duration::from_secs(1),
        jobs: vec![ProfJob {
            seq: 1,
            cgroup: "job-1".into(),
            cpus: CpuSet::parse_list("0").unwrap(),
            mode: BindMode::None,
        }],
        writer,
    };
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..3 {
        let rows = p.sample(&port, &tick, &|_, _| None, t0 + Duration::from_secs(i));
        // At most `scan` threads read; thread 10, idle since its row, gets none the third time.
        assert_eq!(rows.len(), [2, 2, 1][i as usize], "tick {i}");
        seen.extend(rows.iter().map(|r| r.tid));
    }
    assert_eq!(port.reads.load(Ordering::Relaxed), 6);
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [10, 11, 12, 13, 14]);
}

#[test]
fn busy_threads_lead_and_a_recent_pass_is_not_read_again() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let job = ProfJob {
        seq: 1,
        cgroup: "job-1".into(),
        cpus: CpuSet::parse_list("0-1").unwrap(),
        mode: BindMode::Threads,
    };
    let tick = |top| ProfileTick {
        ts_ms: 0,
        top,
        scan: 1024,
        reuse: Duration::from_secs(1),
        jobs: vec![job.clone()],
        writer: writer.clone(),
    };
    let pin = |_: &ProfJob, t: Tid| (t.0 == 11).then(|| CpuSet::parse_list("1").unwrap());
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    assert_eq!(p.sample(&port, &tick(3), &pin, t0).len(), 3);
    assert_eq!(port.reads.load(Ordering::Relaxed), 5);
    // Threads 11 and 12 run the next second.
    for (t, ns) in [(11, 1_000_000_000), (12, 900_000_000), (10, 1_000_000)] {
        port.run.lock().unwrap().insert(t, ns);
    }
    let rows = p.sample(&port, &tick(3), &pin, t0 + Duration::from_secs(1));
    let got: Vec<(u32, u64, u64)> = rows
        .iter()
        .map(|r| (r.tid, r.run_usec, r.span_usec))
        .collect();
    assert_eq!(
        got,
        [
            (11, 1_000_000, 1_000_000),
            (12, 900_000, 1_000_000),
            (10, 1000, 1_000_000)
        ]
    );
    assert_eq!(rows[0].pin.as_deref(), Some("1"));
    assert_eq!(rows[1].pin, None);
    assert_eq!(rows[0].comm, "t11");
    // Between rankings only the three top threads were read.
    assert_eq!(port.reads.load(Ordering::Relaxed), 8);
    // A balancing pass read the job just now: the tick uses its readings.
    let rec = Recorder::new(&port);
    rec.procs("job-1").unwrap();
    for t in [10, 11, 12, 13, 14] {
        rec.runnable_ns(10, t).unwrap();
    }
    let t2 = t0 + Duration::from_secs(2);
    p.remember(rec.take(), t2);
    assert_eq!(port.reads.load(Ordering::Relaxed), 13);
    let rows = p.sample(&port, &tick(5), &pin, t2 + Duration::from_millis(300));
    assert_eq!(
        port.reads.load(Ordering::Relaxed),
        13,
        "no schedstat read again"
    );
    // Nothing ran since: the idle threads that have a row get none now; the two that never
    // had one get theirs, over the two seconds between their two readings (the second tick
    // read the top three alone).
    let got: Vec<(u32, u64, u64)> = rows
        .iter()
        .map(|r| (r.tid, r.run_usec, r.span_usec))
        .collect();
    assert_eq!(got, [(13, 0, 2_000_000), (14, 0, 2_000_000)]);
    // A minute on, the idle threads get a row whose span covers all the time since their
    // last one, and thread 11, which ran again, one of its own time.
    port.run.lock().unwrap().insert(11, 1_500_000_000);
    let t3 = t2 + IDLE_ROW_EVERY;
    let rows = p.sample(&port, &tick(5), &pin, t3);
    let got: Vec<(u32, u64, u64)> = rows
        .iter()
        .map(|r| (r.tid, r.run_usec, r.span_usec))
        .collect();
    let minute = IDLE_ROW_EVERY.as_micros() as u64;
    assert_eq!(
        got,
        [
            (11, 500_000, minute + 1_000_000),
            (12, 0, minute + 1_000_000),
            (10, 0, minute + 1_000_000),
            (13, 0, minute),
            (14, 0, minute),
        ]
    );
}

fn one_job(top: usize, writer: &Writer) -> ProfileTick {
    ProfileTick {
        ts_ms: 0,
        top,
        scan: 1024,
        reuse: Duration::from_secs(1),
        jobs: vec![ProfJob {
            seq: 1,
            cgroup: "job-1".into(),
            cpus: CpuSet::parse_list("0-1").unwrap(),
            mode: BindMode::None,
        }],
        writer: writer.clone(),
    }
}

#[test]
fn between_rankings_only_the_top_threads_are_read_and_a_thread_turning_busy_loses_no_time() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = one_job(2, &writer);
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let reads = || port.reads.load(Ordering::Relaxed);
    p.sample(&port, &tick, &|_, _| None, at(0));
    assert_eq!(reads(), 5, "a ranking reads every thread");
    // Thread 14, not in the top two (10 and 11), runs 3 s from the second second on.
    port.run.lock().unwrap().insert(14, 3_000_000_000);
    for s in 1..5 {
        let rows = p.sample(&port, &tick, &|_, _| None, at(s));
        assert!(
            rows.iter().all(|r| r.tid != 14),
            "second {s}: not ranked yet"
        );
    }
    assert_eq!(reads(), 5 + 4 * 2, "between rankings: the top two alone");
    // The next ranking finds it, and its row holds all of its time since its last reading.
    let rows = p.sample(&port, &tick, &|_, _| None, at(5));
    assert_eq!(reads(), 5 + 4 * 2 + 5);
    let r = rows.iter().find(|r| r.tid == 14).expect("ranked first");
    assert_eq!((r.run_usec, r.span_usec), (3_000_000, 5_000_000));
    assert_eq!(rows[0].tid, 14);
    assert_eq!(
        rows.len(),
        1,
        "thread 10, the other top one, idle since its row"
    );
    // A top thread that ends brings the next ranking forward.
    port.gone.lock().unwrap().push(10);
    let rows = p.sample(&port, &tick, &|_, _| None, at(6));
    assert_eq!(
        reads(),
        5 + 4 * 2 + 5 + 1,
        "only the live top thread was read"
    );
    assert_eq!(rows.len(), 0, "both idle or gone");
    p.sample(&port, &tick, &|_, _| None, at(7));
    assert_eq!(
        reads(),
        5 + 4 * 2 + 5 + 1 + 4,
        "ranked again: the four threads left"
    );
}

#[test]
fn migrations_are_read_again_when_the_thread_changed_cpu_or_its_count_is_old() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = one_job(1, &writer);
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let migration_reads = || port.migration_reads.load(Ordering::Relaxed);
    let mut busy = 0;
    let mut run = |p: &mut ThreadProfiler, ms: u64| {
        busy += 100_000_000;
        port.run.lock().unwrap().insert(11, busy);
        let rows = p.sample(&port, &tick, &|_, _| None, at(ms));
        assert_eq!(rows.len(), 1, "at {ms} ms");
        assert_eq!((rows[0].tid, rows[0].migrations), (11, Some(1)));
    };
    run(&mut p, 0);
    assert_eq!(migration_reads(), 1, "its first row");
    run(&mut p, 1000);
    run(&mut p, 2000);
    assert_eq!(migration_reads(), 1, "same CPU, count recent: kept");
    port.cpu.lock().unwrap().insert(11, 0);
    run(&mut p, 3000);
    assert_eq!(migration_reads(), 2, "seen on another CPU");
    run(&mut p, 12_000);
    assert_eq!(migration_reads(), 2, "9 s old");
    run(&mut p, 13_000);
    assert_eq!(migration_reads(), 3, "10 s old");
}

#[test]
fn a_top_thread_whose_process_left_the_job_is_not_read_between_rankings() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = one_job(2, &writer);
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    let reads = || port.reads.load(Ordering::Relaxed);
    p.sample(&port, &tick, &|_, _| None, t0);
    p.sample(&port, &tick, &|_, _| None, t0 + Duration::from_secs(1));
    assert_eq!(reads(), 5 + 2, "the top two read between rankings");
    // Process 10 is no longer in the job's cgroup: its id may name another process now.
    port.left.store(true, Ordering::Relaxed);
    port.run.lock().unwrap().insert(10, 1_000_000_000);
    let rows = p.sample(&port, &tick, &|_, _| None, t0 + Duration::from_secs(2));
    assert_eq!(
        (reads(), rows.len()),
        (5 + 2, 0),
        "nothing read of it, no row"
    );
}

#[test]
fn a_busy_top_thread_keeps_its_place_against_threads_measured_over_longer() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = one_job(1, &writer);
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Thread 11 runs all the time, 12 to 14 30% of it (from a second before the first tick).
    let set = |s: u64| {
        let mut run = port.run.lock().unwrap();
        run.insert(11, (s + 1) * 1_000_000_000);
        for t in [12, 13, 14] {
            run.insert(t, (s + 1) * 300_000_000);
        }
    };
    set(0);
    p.sample(&port, &tick, &|_, _| None, at(0));
    for s in 1..=5 {
        set(s);
        let rows = p.sample(&port, &tick, &|_, _| None, at(s));
        // Between rankings it was read every second, the others at the last ranking only:
        // its one second at 100% still beats their five at 30%.
        assert_eq!(
            rows.iter().map(|r| r.tid).collect::<Vec<_>>(),
            [11],
            "second {s}"
        );
    }
}

#[test]
fn a_thread_id_given_to_a_new_thread_is_not_taken_for_the_old_one() {
    let port = Fake::default();
    let (writer, _rx) = Writer::collecting();
    let tick = one_job(1, &writer);
    let mut p = ThreadProfiler::default();
    let t0 = Instant::now();
    port.run.lock().unwrap().insert(11, 5_000_000_000);
    let rows = p.sample(&port, &tick, &|_, _| None, t0);
    assert_eq!((rows[0].tid, rows[0].comm.as_str()), (11, "t11"));
    // Thread 11 ended and a new thread got its id: lower counters, another name.
    port.run.lock().unwrap().insert(11, 100_000_000);
    port.comm.lock().unwrap().insert(11, "new".into());
    let before = port.migration_reads.load(Ordering::Relaxed);
    let rows = p.sample(&port, &tick, &|_, _| None, t0 + Duration::from_secs(1));
    let r = &rows[0];
    assert_eq!(
        (r.tid, r.comm.as_str(), r.cpu_usec, r.run_usec, r.span_usec),
        (11, "new", 100_000, 0, 0),
        "seen for the first time: its own name, no deltas from the old thread"
    );
    assert_eq!(port.migration_reads.load(Ordering::Relaxed), before + 1);
}
