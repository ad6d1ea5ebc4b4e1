//! Profile tests: filters, process rows, pages, retention and the size cap.

use super::*;
use crate::Store;
use crate::StoredState;
use pjw_core::CpuSet;

fn job(id: &str, user: &str, uid: u32, name: &str, submitted_ms: i64) -> JobRecord {
    JobRecord {
        seq: 0,
        job_id: id.into(),
        name: name.into(),
        uid,
        gid: uid,
        user: user.into(),
        ncpus: 1,
        cpus: CpuSet::parse_list("0").unwrap(),
        mems: CpuSet::parse_list("0").unwrap(),
        mem_limit: None,
        pid: Some(1),
        pid_start: Some(1),
        cgroup: format!("job-{id}"),
        argv: vec!["x".into()],
        state: StoredState::Running,
        submitted_ms,
        started_ms: Some(submitted_ms),
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: crate::StoredRole::Primary,
    }
}

fn samples(seq: i64, n: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            seq,
            ts_ms: 1000 * i,
            state: Some(SampleState::Running),
            cpu_user_usec: Some(i as u64 * 1000),
            mem_current: Some(1 << 20),
            psi_cpu_some: Some(0.5),
            ..Sample::default()
        })
        .collect()
}

/// Three users' jobs, two ended (completed, oom), one running.
fn fill(s: &mut Store) -> (i64, i64, i64) {
    let a = s
        .insert_job(&job("1", "alice", 1000, "sim", 1_000))
        .unwrap();
    let b = s.insert_job(&job("2", "bob", 1001, "sim", 2_000)).unwrap();
    let c = s
        .insert_job(&job("3", "alice", 1000, "post", 3_000))
        .unwrap();
    for seq in [a, b, c] {
        s.insert_samples(&samples(seq, 5)).unwrap();
    }
    s.finish_job(
        5_000,
        "exited",
        &JobSummary::new(a, "n1", EndClass::Completed),
    )
    .unwrap();
    s.finish_job(
        6_000,
        "exited; 1 OOM",
        &JobSummary::new(b, "n1", EndClass::Oom),
    )
    .unwrap();
    (a, b, c)
}

#[test]
fn filters_narrow_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let (a, b, c) = fill(&mut s);
    let seqs =
        |f: JobFilter| -> Vec<i64> { s.find_jobs(&f).unwrap().iter().map(|p| p.job.seq).collect() };
    let table: Vec<(JobFilter, Vec<i64>)> = vec![
        (JobFilter::default(), vec![c, b, a]),
        (
            JobFilter {
                uid: Some(1000),
                ..Default::default()
            },
            vec![c, a],
        ),
        (
            JobFilter {
                user: Some("bob".into()),
                ..Default::default()
            },
            vec![b],
        ),
        (
            JobFilter {
                name: Some("sim".into()),
                ..Default::default()
            },
            vec![b, a],
        ),
        (
            JobFilter {
                job_id: Some("3".into()),
                ..Default::default()
            },
            vec![c],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Ended(EndClass::Oom)),
                ..Default::default()
            },
            vec![b],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Running),
                ..Default::default()
            },
            vec![c],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Ended(EndClass::Completed)),
                uid: Some(1001),
                ..Default::default()
            },
            vec![],
        ),
        // Since 5.5 s: b ended after, c is live; a ended before.
        (
            JobFilter {
                since_ms: Some(5_500),
                ..Default::default()
            },
            vec![c, b],
        ),
        (
            JobFilter {
                limit: 1,
                ..Default::default()
            },
            vec![c],
        ),
    ];
    for (f, want) in table {
        assert_eq!(seqs(f.clone()), want, "{f:?}");
    }
    let p = s
        .find_jobs(&JobFilter {
            job_id: Some("2".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(p[0].summary.as_ref().unwrap().end, EndClass::Oom);
    assert_eq!(p[0].job.end_reason.as_deref(), Some("exited; 1 OOM"));
    assert_eq!(s.samples(a, Some(3000)).unwrap().len(), 2);
}

/// A word in a text column that no type knows (a newer pjw's, or a damaged row) is an error
/// reading the store, never taken as a fact: not `failed`, not "no state".
#[test]
fn an_unknown_stored_word_is_an_error_not_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let (a, b, _) = fill(&mut s);
    // Both words read back as they were written.
    assert_eq!(s.summary(b).unwrap().unwrap().end, EndClass::Oom);
    assert_eq!(
        s.samples(a, None).unwrap()[0].state,
        Some(SampleState::Running)
    );
    s.conn
        .execute(
            "UPDATE job_summary SET end_class = 'vanished' WHERE seq = ?1",
            [b],
        )
        .unwrap();
    s.conn
        .execute("UPDATE samples SET state = 'paused' WHERE seq = ?1", [a])
        .unwrap();
    let e = s.summary(b).unwrap_err().to_string();
    assert!(e.contains("unknown end class \"vanished\""), "{e}");
    let e = s.find_jobs(&JobFilter::default()).unwrap_err().to_string();
    assert!(e.contains("unknown end class \"vanished\""), "{e}");
    let e = s.samples(a, None).unwrap_err().to_string();
    assert!(e.contains("unknown sample state \"paused\""), "{e}");
}

#[test]
fn process_rows_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let seq = s.insert_job(&job("1", "alice", 1000, "sim", 0)).unwrap();
    let rows = vec![
        ProcessSample {
            seq,
            ts_ms: 5,
            pid: 10,
            comm: "a".into(),
            cpu_usec: 1,
            rss: 2,
            threads: 1,
        },
        ProcessSample {
            seq,
            ts_ms: 5,
            pid: 11,
            comm: "b".into(),
            cpu_usec: 9,
            rss: 2,
            threads: 3,
        },
    ];
    s.insert_process_samples(&rows).unwrap();
    let got = s.process_samples(seq).unwrap();
    assert_eq!(got, vec![rows[1].clone(), rows[0].clone()]);
}

/// Reports read in pages (issue 25, item 7): jobs by seq, samples by time, process rows by
/// whole ticks; the pages put together are the whole, in order.
#[test]
fn pages_put_together_are_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let (a, b, c) = fill(&mut s);
    let page = |before| {
        s.find_jobs(&JobFilter {
            limit: 2,
            before_seq: before,
            ..Default::default()
        })
        .unwrap()
        .iter()
        .map(|p| p.job.seq)
        .collect::<Vec<_>>()
    };
    assert_eq!(page(None), vec![c, b]);
    assert_eq!(page(Some(b)), vec![a]);
    assert_eq!(page(Some(a)), Vec::<i64>::new());
    let whole: Vec<i64> = s
        .samples(a, None)
        .unwrap()
        .iter()
        .map(|x| x.ts_ms)
        .collect();
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let p = s.samples_page(a, after, 2).unwrap();
        if p.is_empty() {
            break;
        }
        assert!(p.len() <= 2);
        after = p.last().map(|x| x.ts_ms);
        paged.extend(p.iter().map(|x| x.ts_ms));
    }
    assert_eq!(paged, whole);
    // Process rows: 3 ticks of 2, 1 and 3 rows; pages of about 2 rows never cut a tick.
    let row = |ts_ms, pid, cpu_usec| ProcessSample {
        seq: b,
        ts_ms,
        pid,
        comm: "p".into(),
        cpu_usec,
        rss: 0,
        threads: 1,
    };
    s.insert_process_samples(&[
        row(10, 1, 5),
        row(10, 2, 9),
        row(20, 1, 1),
        row(30, 1, 1),
        row(30, 2, 3),
        row(30, 3, 2),
    ])
    .unwrap();
    let whole = s.process_samples(b).unwrap();
    let mut paged: Vec<ProcessSample> = Vec::new();
    let mut ticks = Vec::new();
    let mut after = None;
    loop {
        let p = s.process_samples_page(b, after, 2).unwrap();
        if p.is_empty() {
            break;
        }
        ticks.push(p.iter().map(|r| r.ts_ms).collect::<Vec<_>>());
        after = p.last().map(|r| r.ts_ms);
        paged.extend(p);
    }
    assert_eq!(paged, whole);
    assert_eq!(ticks, vec![vec![10, 10], vec![20, 30, 30, 30]]);
}

#[test]
fn retention_removes_old_ended_jobs_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let (a, b, c) = fill(&mut s);
    // a ended at 5 s, b at 6 s. At 10 s with 4.5 s retention, a goes.
    let p = s.apply_retention(10_000, Some(4_500), None, false).unwrap();
    assert_eq!(
        p,
        Pruned {
            jobs: 1,
            samples: 5
        }
    );
    assert!(s.job(a).unwrap().is_none());
    assert!(s.summary(a).unwrap().is_none());
    assert!(s.samples(a, None).unwrap().is_empty());
    assert!(s.job(b).unwrap().is_some());
    // The live job stays whatever its age.
    let p = s.apply_retention(1_000_000, Some(1), None, true).unwrap();
    // b is not shipped yet: kept.
    assert_eq!(p, Pruned::default());
    assert_eq!(
        s.unshipped(10)
            .unwrap()
            .iter()
            .map(|x| x.seq)
            .collect::<Vec<_>>(),
        vec![b]
    );
    s.mark_shipped(&[b], 7_000).unwrap();
    assert!(s.unshipped(10).unwrap().is_empty());
    assert_eq!(s.summary(b).unwrap().unwrap().shipped_at, Some(7_000));
    let p = s.apply_retention(1_000_000, Some(1), None, true).unwrap();
    assert_eq!(p.jobs, 1);
    assert!(s.job(c).unwrap().is_some());
    assert_eq!(s.samples(c, None).unwrap().len(), 5);
}

#[test]
fn size_cap_drops_series_of_oldest_ended_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let mut ended = Vec::new();
    for i in 0..6 {
        let seq = s
            .insert_job(&job(&i.to_string(), "alice", 1000, "sim", i))
            .unwrap();
        s.insert_samples(&samples(seq, 2000)).unwrap();
        s.finish_job(
            i + 1,
            "exited",
            &JobSummary::new(seq, "n1", EndClass::Completed),
        )
        .unwrap();
        ended.push(seq);
    }
    let live = s
        .insert_job(&job("live", "alice", 1000, "sim", 99))
        .unwrap();
    s.insert_samples(&samples(live, 2000)).unwrap();
    let before = s.used_bytes().unwrap();
    let cap = before / 2;
    let p = s.apply_retention(100, None, Some(cap), false).unwrap();
    assert!(
        s.used_bytes().unwrap() <= cap,
        "{} > {cap}",
        s.used_bytes().unwrap()
    );
    assert!(p.samples > 0 && p.jobs == 0);
    // Oldest first: the first job lost its series, the newest ended one kept it; records and
    // summaries stay; the live job is untouched.
    assert!(s.samples(ended[0], None).unwrap().is_empty());
    assert_eq!(s.samples(ended[5], None).unwrap().len(), 2000);
    assert!(s.summary(ended[0]).unwrap().is_some());
    assert_eq!(s.samples(live, None).unwrap().len(), 2000);
}

/// Review F3, as the attack: one user floods the store with short jobs (rows without series)
/// past `max_db_size`. Retention used to drop every other user's series and never a row; now
/// that user's oldest ended jobs beyond the per-user share go first, whole, and the other
/// user's series stay.
#[test]
fn a_users_flood_of_jobs_goes_before_other_users_series() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let end = |s: &mut Store, seq: i64, at: i64| {
        s.finish_job(
            at,
            "exited",
            &JobSummary::new(seq, "n1", EndClass::Completed),
        )
        .unwrap();
    };
    let mut bobs = Vec::new();
    for i in 0..3 {
        let seq = s
            .insert_job(&job(&format!("b{i}"), "bob", 1000, "sim", i))
            .unwrap();
        s.insert_samples(&samples(seq, 2000)).unwrap();
        end(&mut s, seq, i + 1);
        bobs.push(seq);
    }
    let mut floods = Vec::new();
    let mut cap = 0;
    for i in 0..400 {
        let seq = s
            .insert_job(&job(&format!("m{i}"), "mallory", 1001, "true", 10 + i))
            .unwrap();
        end(&mut s, seq, 10 + i + 1);
        floods.push(seq);
        if i == 49 {
            // The store's cap: what it held with mallory's first 50, and a little room.
            cap = s.used_bytes().unwrap() + 16 * 1024;
        }
    }
    assert!(s.used_bytes().unwrap() > cap, "the flood is over the cap");
    let p = s
        .apply_retention_with(100_000, None, Some(cap), false, 50)
        .unwrap();
    assert!(
        s.used_bytes().unwrap() <= cap,
        "{} > {cap}",
        s.used_bytes().unwrap()
    );
    // Mallory's oldest went whole, her newest 50 stay; bob's series are all there.
    assert_eq!(p.jobs, 350);
    assert!(s.job(floods[0]).unwrap().is_none() && s.summary(floods[0]).unwrap().is_none());
    assert!(s.job(floods[349]).unwrap().is_none());
    assert!(s.job(floods[350]).unwrap().is_some());
    for b in &bobs {
        assert_eq!(
            s.samples(*b, None).unwrap().len(),
            2000,
            "bob's series stay"
        );
    }
    // The series rule still runs when no user is over the share (the check above did run).
    let p = s
        .apply_retention_with(100_000, None, Some(s.used_bytes().unwrap() / 2), false, 50)
        .unwrap();
    assert!(p.samples > 0 && p.jobs == 0);
}
