//! The central store against a real PostgreSQL server (started by the test on loopback, in a
//! temporary directory) and a real SQLite spool: shipping, idempotent re-sends, the spool while
//! PostgreSQL is down, and queries across nodes.

use std::time::Duration;

use pjw_central::{Central, CentralFilter, ShipConfig, Shipper};
use pjw_core::CpuSet;
use pjw_store::{EndClass, JobRecord, JobSummary, Sample, Store, StoredState};
use pjw_testkit::pg::PgServer;
use pjw_testkit::TestDaemon;

/// PostgreSQL (scripts/install-deps.sh) and root (to run it as the postgres user) are what
/// `make test` provides: missing on the host, the test fails; in a test guest, it skips.
macro_rules! require_pg {
    () => {
        pjw_testkit::require!(
            pjw_testkit::Component::Root,
            pjw_testkit::Component::Postgres
        )
    };
}

/// A running job in the local store (no samples yet).
fn running(store: &mut Store, id: &str, user: &str, uid: u32) -> i64 {
    let rec = JobRecord {
        seq: 0,
        job_id: id.into(),
        name: format!("name-{id}"),
        uid,
        gid: uid,
        user: user.into(),
        ncpus: 2,
        cpus: CpuSet::parse_list("0-1").unwrap(),
        mems: CpuSet::parse_list("0").unwrap(),
        mem_limit: Some(1 << 30),
        pid: Some(4242),
        pid_start: Some(1),
        cgroup: format!("job-{id}"),
        argv: vec!["sleep".into(), "1".into()],
        state: StoredState::Queued,
        submitted_ms: 1_000,
        started_ms: None,
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    };
    let seq = store.insert_job(&rec).unwrap();
    store
        .set_starting(
            seq,
            &rec.cpus,
            &rec.mems,
            pjw_store::StoredRole::Primary,
            2_000,
        )
        .unwrap();
    store.set_running(seq).unwrap();
    seq
}

fn samples(seq: i64, from: i64, to: i64) -> Vec<Sample> {
    (from..=to)
        .map(|i| Sample {
            seq,
            ts_ms: 2_000 + i * 1_000,
            mem_current: Some((i as u64 * 100) << 20),
            cpu_user_usec: Some(i as u64 * 900_000),
            procs: Some(1),
            psi_mem_some: Some(0.5),
            ..Default::default()
        })
        .collect()
}

/// A finished job in the local store: record, three samples, summary.
fn finish(store: &mut Store, id: &str, user: &str, uid: u32, node: &str) -> i64 {
    let seq = running(store, id, user, uid);
    store.insert_samples(&samples(seq, 1, 3)).unwrap();
    let mut s = JobSummary::new(seq, node, EndClass::Completed);
    s.exit_status = Some(0);
    s.mem_peak = 300 << 20;
    s.cpu_user_usec = 2_700_000;
    s.procs_total = Some(26);
    s.samples = 3;
    store.finish_job(6_000, "exited", &s).unwrap();
    seq
}

fn cfg(url: &str) -> ShipConfig {
    ShipConfig {
        url: url.into(),
        password: None,
        ship_samples: true,
        batch_size: 2,
        retry: Duration::from_millis(200),
        node: "n1".into(),
    }
}

fn count(c: &mut Central, f: &CentralFilter) -> usize {
    c.jobs(f).unwrap().len()
}

#[test]
fn jobs_ship_once_and_wait_in_the_spool_while_postgres_is_down() {
    require_pg!();
    let mut pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let a = finish(&mut store, "a1", "alice", 1001, "n1");
    let b = finish(&mut store, "b1", "bob", 1002, "n1");
    let c3 = finish(&mut store, "c1", "alice", 1001, "n1");
    assert_eq!(store.unshipped(10).unwrap().len(), 3);

    // Three jobs in batches of two; then nothing is left to ship.
    let mut central = Central::connect(&pg.url()).unwrap();
    let shipped = pjw_central::ship_pending(&mut store, &mut central, &cfg(&pg.url())).unwrap();
    assert_eq!(shipped, 3);
    assert!(store.unshipped(10).unwrap().is_empty());
    let all = central.jobs(&CentralFilter::default()).unwrap();
    assert_eq!(all.len(), 3);
    let a_row = all.iter().find(|j| j.seq == a).unwrap();
    assert_eq!(
        (
            a_row.node.as_str(),
            a_row.job_id.as_str(),
            a_row.user.as_str()
        ),
        ("n1", "a1", "alice")
    );
    assert_eq!(a_row.summary.mem_peak, 300 << 20);
    assert_eq!(a_row.summary.procs_total, Some(26));
    assert_eq!(a_row.end_reason.as_deref(), Some("exited"));
    let series = central.samples("n1", a).unwrap();
    assert_eq!(
        series.iter().map(|s| s.mem_current).collect::<Vec<_>>(),
        [Some(100 << 20), Some(200 << 20), Some(300 << 20)]
    );

    // Sent again (a crash between PostgreSQL's commit and the local mark): no duplicates.
    let again: Vec<_> = [a, b, c3]
        .iter()
        .map(|&s| {
            (
                store.job(s).unwrap().unwrap(),
                store.summary(s).unwrap().unwrap(),
                store.samples(s, None).unwrap(),
            )
        })
        .collect();
    central.ship(&again, 9_999).unwrap();
    assert_eq!(count(&mut central, &CentralFilter::default()), 3);
    assert_eq!(central.samples("n1", a).unwrap().len(), 3);

    // Filters: owner (what a non-admin caller gets), user, job, node.
    let table = [
        (
            CentralFilter {
                uid: Some(1001),
                ..Default::default()
            },
            2,
        ),
        (
            CentralFilter {
                user: Some("bob".into()),
                ..Default::default()
            },
            1,
        ),
        (
            CentralFilter {
                job_id: Some("c1".into()),
                ..Default::default()
            },
            1,
        ),
        (
            CentralFilter {
                node: Some("n2".into()),
                ..Default::default()
            },
            0,
        ),
        (
            CentralFilter {
                end_class: Some("oom".into()),
                ..Default::default()
            },
            0,
        ),
        (
            CentralFilter {
                limit: 1,
                ..Default::default()
            },
            1,
        ),
    ];
    for (f, want) in table {
        assert_eq!(count(&mut central, &f), want, "{f:?}");
    }
    drop(central);

    // PostgreSQL goes away; a job ends meanwhile and waits in the spool; the shipper retries
    // and ships it once PostgreSQL is back.
    pg.stop();
    let shipper = Shipper::spawn(store.path().to_path_buf(), cfg(&pg.url())).unwrap();
    let d = finish(&mut store, "d1", "dave", 1004, "n1");
    shipper.wake();
    std::thread::sleep(Duration::from_millis(600));
    let spooled: Vec<i64> = store.unshipped(10).unwrap().iter().map(|s| s.seq).collect();
    assert_eq!(spooled, [d]);
    pg.start_again();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || store
            .unshipped(10)
            .unwrap()
            .is_empty()),
        "spooled job not shipped after PostgreSQL came back:\n{}",
        pg.log()
    );
    shipper.stop();
    let mut central = Central::connect(&pg.url()).unwrap();
    let d_rows = central
        .jobs(&CentralFilter {
            job_id: Some("d1".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(d_rows.len(), 1);
    assert_eq!(d_rows[0].node, "n1");
    assert_eq!(count(&mut central, &CentralFilter::default()), 4);
}

#[test]
fn a_bad_url_or_dead_server_is_a_clear_error() {
    let e = Central::connect("postgres://pjw:secret@127.0.0.1:1/x").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("127.0.0.1:1/x"), "{text}");
    assert!(!text.contains("secret"), "{text}");
    assert!(Central::connect("postgres://[bad").is_err());
}

#[test]
fn live_samples_ship_incrementally_and_never_twice() {
    require_pg!();
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let seq = running(&mut store, "live1", "alice", 1001);
    store.insert_samples(&samples(seq, 1, 3)).unwrap();
    let mut c = Central::connect(&pg.url()).unwrap();
    let ship = |store: &Store, c: &mut Central| pjw_central::ship_live(store, c, "n1").unwrap();
    assert_eq!(ship(&store, &mut c), 3);
    assert_eq!(ship(&store, &mut c), 0);
    store.insert_samples(&samples(seq, 4, 5)).unwrap();
    assert_eq!(ship(&store, &mut c), 2);
    assert_eq!(c.samples("n1", seq).unwrap().len(), 5);
    // The job ends: its summary goes, its series is complete and has no duplicates.
    let mut s = JobSummary::new(seq, "n1", EndClass::Completed);
    s.samples = 5;
    store.finish_job(9_000, "exited", &s).unwrap();
    assert_eq!(
        pjw_central::ship_pending(&mut store, &mut c, &cfg(&pg.url())).unwrap(),
        1
    );
    assert_eq!(ship(&store, &mut c), 0);
    let series = c.samples("n1", seq).unwrap();
    assert_eq!(
        series.iter().map(|x| x.ts_ms).collect::<Vec<_>>(),
        [3_000, 4_000, 5_000, 6_000, 7_000]
    );
    assert_eq!(c.jobs(&CentralFilter::default()).unwrap().len(), 1);
}

/// The tables as pjw created them before GPU readings (NVML) were shipped: no GPU columns.
const SCHEMA_BEFORE_GPUS: &str = include_str!("fixtures/schema-before-gpus.sql");

#[test]
fn gpu_figures_ship_and_older_tables_get_their_columns() {
    require_pg!();
    let pg = PgServer::start();
    let mut old = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    old.batch_execute(SCHEMA_BEFORE_GPUS).unwrap();
    drop(old);
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    // A GPU job: two samples with readings, one without (NVML had none that tick).
    let seq = running(&mut store, "g1", "alice", 1001);
    let mut series = samples(seq, 1, 3);
    series[0].gpu_util = Some(40.0);
    series[0].gpu_mem = Some(2 << 30);
    series[1].gpu_util = Some(80.0);
    series[1].gpu_mem = Some(6 << 30);
    store.insert_samples(&series).unwrap();
    let mut s = JobSummary::new(seq, "n1", EndClass::Completed);
    s.samples = 3;
    s.gpu_util_mean = Some(60.0);
    s.gpu_util_max = Some(80.0);
    s.gpu_mem_peak = Some(6 << 30);
    store.finish_job(9_000, "exited", &s).unwrap();
    let cpu_job = finish(&mut store, "c1", "bob", 1002, "n1");
    // First contact adds the columns to the old tables; a second contact changes nothing.
    let mut c = Central::connect(&pg.url()).unwrap();
    drop(Central::connect(&pg.url()).unwrap());
    assert_eq!(
        pjw_central::ship_pending(&mut store, &mut c, &cfg(&pg.url())).unwrap(),
        2
    );
    let jobs = c.jobs(&CentralFilter::default()).unwrap();
    let g = &jobs.iter().find(|j| j.seq == seq).unwrap().summary;
    assert_eq!(
        (g.gpu_util_mean, g.gpu_util_max, g.gpu_mem_peak),
        (Some(60.0), Some(80.0), Some(6 << 30))
    );
    let plain = &jobs.iter().find(|j| j.seq == cpu_job).unwrap().summary;
    assert_eq!(
        (plain.gpu_util_mean, plain.gpu_util_max, plain.gpu_mem_peak),
        (None, None, None)
    );
    let back = c.samples("n1", seq).unwrap();
    assert_eq!(
        back.iter()
            .map(|x| (x.gpu_util, x.gpu_mem))
            .collect::<Vec<_>>(),
        [
            (Some(40.0), Some(2 << 30)),
            (Some(80.0), Some(6 << 30)),
            (None, None)
        ]
    );
}
