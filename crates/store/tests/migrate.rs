//! Upgrading databases older pjw versions left behind (literal fixtures in tests/fixtures, not
//! built from this crate's migrations, so a later edit of a migration cannot hide a break).

use pjw_store::{
    EndClass, JobFilter, JobSummary, Sample, SampleState, Store, StoredState, SCHEMA_VERSION,
};
use rusqlite::Connection;

fn fixture(dir: &std::path::Path, sql: &str) -> std::path::PathBuf {
    let path = dir.join("pjw.db");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(sql).unwrap();
    path
}

/// After an upgrade the profile tables work: samples, a finish, a report query.
fn profile_round_trip(s: &mut Store, seq: i64) {
    let batch: Vec<Sample> = (0..3)
        .map(|i| Sample {
            seq,
            ts_ms: 10_000 + i * 1000,
            state: Some(SampleState::Running),
            mem_current: Some(100 << 20),
            mem_peak: Some((100 << 20) * (i as u64 + 1)),
            procs: Some(1),
            ..Sample::default()
        })
        .collect();
    s.insert_samples(&batch).unwrap();
    assert_eq!(s.samples(seq, None).unwrap(), batch);
    let mut sum = JobSummary::new(seq, "node1", EndClass::Completed);
    sum.mem_peak = 300 << 20;
    sum.samples = 3;
    s.finish_job(20_000, "exited", &sum).unwrap();
    let got = s.summary(seq).unwrap().unwrap();
    assert_eq!(got, sum);
    let j = s.job(seq).unwrap().unwrap();
    assert_eq!(j.state, StoredState::Ended);
}

#[test]
fn upgrades_a_version_1_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), include_str!("fixtures/v1.sql"));
    let mut s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    // Jobs, their ids and the job counter survive.
    assert_eq!(s.next_job_number().unwrap(), 3);
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (
            live[0].job_id.as_str(),
            live[0].mem_limit,
            live[0].role.as_str()
        ),
        ("2", Some(1 << 30), "primary")
    );
    let old = s.latest_by_id("1").unwrap().unwrap();
    assert_eq!(old.end_reason.as_deref(), Some("exited"));
    // An old ended job has no summary; a report still lists it.
    let all = s.find_jobs(&JobFilter::default()).unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|p| p.summary.is_none()));
    profile_round_trip(&mut s, live[0].seq);
    gpus_round_trip(&s, old.seq, live[0].seq);
}

#[test]
fn upgrades_a_version_2_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), include_str!("fixtures/v2.sql"));
    let s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 2);
    assert_eq!(
        (
            live[0].role.as_str(),
            live[0].priority,
            pjw_store::placement_str(live[0].placement)
        ),
        ("backfill", 4, "backfill_only")
    );
    assert_eq!(live[1].state, StoredState::Queued);
    assert!(live[1].exclusive);
    // Opening again is a no-op.
    drop(s);
    let mut s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    profile_round_trip(&mut s, live[0].seq);
    let queued = s
        .find_jobs(&JobFilter {
            state: Some(pjw_store::StateFilter::Queued),
            ..JobFilter::default()
        })
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].job.job_id, "7");
    gpus_round_trip(&s, live[0].seq, live[1].seq);
}

/// After an upgrade (version 6) old jobs have no GPUs, and a job's GPUs are kept.
fn gpus_round_trip(s: &Store, old: i64, other: i64) {
    use pjw_core::GpuSet;
    assert_eq!(s.gpus(old).unwrap(), None);
    s.set_gpus(other, 2, &GpuSet::new()).unwrap();
    assert_eq!(s.gpus(other).unwrap(), Some((2, GpuSet::new())));
    let held = GpuSet::parse_list("1,3").unwrap();
    s.set_gpus(other, 2, &held).unwrap();
    assert_eq!(s.gpus(other).unwrap(), Some((2, held)));
    assert_eq!(s.gpus(old).unwrap(), None);
}

#[test]
fn upgrades_a_version_8_database_with_gpu_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), include_str!("fixtures/v8.sql"));
    let mut s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    // Old rows keep their figures and have no GPU readings.
    let old = s.samples(1, None).unwrap();
    assert_eq!(old.len(), 2);
    assert_eq!(old[1].cpu_user_usec, Some(900));
    assert!(old
        .iter()
        .all(|x| x.gpu_util.is_none() && x.gpu_mem.is_none()));
    let sum = s.summary(1).unwrap().unwrap();
    assert_eq!((sum.mem_peak, sum.samples), (2 << 20, 2));
    assert_eq!(
        (sum.gpu_util_mean, sum.gpu_util_max, sum.gpu_mem_peak),
        (None, None, None)
    );
    // New samples and the summary of the GPU job carry them.
    let new = Sample {
        seq: 2,
        ts_ms: 8000,
        state: Some(SampleState::Running),
        gpu_util: Some(62.5),
        gpu_mem: Some(3 << 30),
        ..Sample::default()
    };
    s.insert_samples(std::slice::from_ref(&new)).unwrap();
    assert_eq!(s.samples(2, Some(8000)).unwrap(), vec![new]);
    let mut fin = JobSummary::new(2, "node1", EndClass::Completed);
    fin.gpu_util_mean = Some(40.0);
    fin.gpu_util_max = Some(62.5);
    fin.gpu_mem_peak = Some(3 << 30);
    // Version 11: thread rows of the upgraded job, removed by retention with its series.
    let t = pjw_store::ThreadSample {
        seq: 2,
        ts_ms: 8000,
        tid: 77,
        pid: 70,
        comm: "worker".into(),
        cpu_usec: 5000,
        ..Default::default()
    };
    s.insert_thread_samples(std::slice::from_ref(&t)).unwrap();
    assert_eq!(s.thread_totals(2).unwrap()[0].cpu_usec, 5000);
    s.finish_job(9000, "exited", &fin).unwrap();
    assert_eq!(s.summary(2).unwrap().unwrap(), fin);
    s.apply_retention(9000 + 10_000, Some(1), None, false)
        .unwrap();
    assert!(s.thread_totals(2).unwrap().is_empty());
    // Opening again is a no-op.
    drop(s);
    let s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
}

/// Version 13: a time limit written by schema 12 reads back as the job's own (`asked`) with no
/// running time counted yet, and the running time written later reads back.
#[test]
fn upgrades_a_version_12_database_with_a_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), include_str!("fixtures/v12.sql"));
    let mut s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let t = s.time_limit(3).unwrap().expect("its limit");
    assert_eq!(
        (t.limit.secs(), t.source, t.ran_ms),
        (5400, pjw_core::time_limit::LimitSource::Asked, 0)
    );
    s.set_times_ran(&[(3, 120_000)]).unwrap();
    assert_eq!(s.time_limit(3).unwrap().unwrap().ran_ms, 120_000);
    assert_eq!(s.time_limit(2).unwrap(), None);
}
