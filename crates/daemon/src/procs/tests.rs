//! The tracker's tables: counts from literal event sequences, live threads, forks and execs
//! outside jobs, ends and re-seeds.

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
