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

/// The tests' time origin: an hour ago (rows must be inside the central store's retention).
fn t0() -> i64 {
    static T0: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *T0.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        now - 3_600_000
    })
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
        submitted_ms: t0() + 1_000,
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
            t0() + 2_000,
        )
        .unwrap();
    store.set_running(seq).unwrap();
    seq
}

fn samples(seq: i64, from: i64, to: i64) -> Vec<Sample> {
    (from..=to)
        .map(|i| Sample {
            seq,
            ts_ms: t0() + 2_000 + i * 1_000,
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
    store.finish_job(t0() + 6_000, "exited", &s).unwrap();
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
        retention: pjw_central::Retention::default(),
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
    let shipped = pjw_central::ship_pending(&mut store, &mut central, 2).unwrap();
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
    central.ship(&again, t0() + 9_999).unwrap();
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
                end_class: Some(pjw_store::EndClass::Oom),
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
    // Two more samples are taken, then the job ends: its summary goes with the samples
    // PostgreSQL lacks (from its high-water mark on); the series is complete, no duplicates.
    store.insert_samples(&samples(seq, 6, 7)).unwrap();
    let mut s = JobSummary::new(seq, "n1", EndClass::Completed);
    s.samples = 7;
    store.finish_job(t0() + 10_000, "exited", &s).unwrap();
    assert_eq!(
        pjw_central::ship_pending_from(&mut store, &mut c, 2, Some("n1")).unwrap(),
        1
    );
    assert_eq!(ship(&store, &mut c), 0);
    let series = c.samples("n1", seq).unwrap();
    assert_eq!(
        series.iter().map(|x| x.ts_ms).collect::<Vec<_>>(),
        [3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000].map(|t| t0() + t)
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
    store.finish_job(t0() + 9_000, "exited", &s).unwrap();
    let cpu_job = finish(&mut store, "c1", "bob", 1002, "n1");
    // First contact adds the columns to the old tables; a second contact changes nothing.
    let mut c = Central::connect(&pg.url()).unwrap();
    drop(Central::connect(&pg.url()).unwrap());
    assert_eq!(pjw_central::ship_pending(&mut store, &mut c, 2).unwrap(), 2);
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

const DAY: i64 = 86_400_000;

/// A finished job as a node ships it (no local store): `ended` ms since the epoch.
fn shipped_job(
    node: &str,
    id: &str,
    seq: i64,
    user: &str,
    ended: i64,
    (cpu_s, mem_mib, queued_s): (u64, u64, i64),
    nsamples: i64,
) -> (JobRecord, JobSummary, Vec<Sample>) {
    let rec = JobRecord {
        seq,
        job_id: id.into(),
        name: format!("name-{id}"),
        uid: 1000 + user.len() as u32,
        gid: 1000,
        user: user.into(),
        ncpus: 1,
        cpus: CpuSet::parse_list("0").unwrap(),
        mems: CpuSet::parse_list("0").unwrap(),
        mem_limit: None,
        pid: None,
        pid_start: None,
        cgroup: format!("job-{id}"),
        argv: vec![],
        state: StoredState::Ended,
        submitted_ms: ended - 60_000 - queued_s * 1000,
        started_ms: Some(ended - 60_000),
        ended_ms: Some(ended),
        end_reason: Some("exited".into()),
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    };
    let mut s = JobSummary::new(seq, node, EndClass::Completed);
    s.cpu_user_usec = cpu_s * 1_000_000;
    s.mem_peak = mem_mib << 20;
    s.queued_ms = queued_s * 1000;
    s.samples = nsamples as u32;
    let samples = (0..nsamples)
        .map(|i| Sample {
            seq,
            ts_ms: ended - 60_000 + i * 10_000,
            mem_current: Some(mem_mib << 20),
            ..Default::default()
        })
        .collect();
    (rec, s, samples)
}

fn now() -> i64 {
    t0() + 3_600_000
}

fn scalar(c: &mut Central, sql: &str) -> i64 {
    c.client().query_one(sql, &[]).unwrap().get(0)
}

/// Schema migrations are numbered: tables an older pjw made (plain, no GPU columns) become
/// the partitioned ones, keeping the rows inside the retention, once.
#[test]
fn tables_of_an_older_pjw_move_into_time_partitions_once() {
    require_pg!();
    let pg = PgServer::start();
    let mut old = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    old.batch_execute(SCHEMA_BEFORE_GPUS).unwrap();
    let ins_job = "INSERT INTO pjw_jobs (node, job_id, seq, name, user_name, uid, ncpus, cpus,
        submitted_ms, ended_ms, end_class, queued_ms, running_ms, backfill_ms, frozen_ms, freezes,
        cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, io_rbytes, io_wbytes, procs_max,
        threads_max, samples, shipped_ms)
        VALUES ('n1', $1, $2, 'x', 'alice', 1001, 1, '0', $3, $4, 'completed', 0, 0, 0, 0, 0,
        5, 0, 7, 0, 0, 0, 1, 1, 0, $3)";
    let jobs: [(&str, i64, i64, Option<i64>); 4] = [
        ("recent", 1, now() - DAY, Some(now() - DAY + 5)),
        ("tendays", 2, now() - 10 * DAY, Some(now() - 10 * DAY)),
        ("ancient", 3, now() - 500 * DAY, Some(now() - 500 * DAY)),
        ("noend", 4, now() - 2 * DAY, None),
    ];
    for (id, seq, sub, end) in jobs {
        old.execute(ins_job, &[&id, &seq, &sub, &end]).unwrap();
    }
    for (seq, ts) in [
        (1i64, now() - DAY),
        (2, now() - 10 * DAY),
        (2, now() - 40 * DAY),
    ] {
        old.execute(
            "INSERT INTO pjw_samples (node, seq, ts_ms) VALUES ('n1', $1, $2)",
            &[&seq, &ts],
        )
        .unwrap();
    }
    drop(old);

    let mut c = Central::connect(&pg.url()).unwrap();
    assert_eq!(
        scalar(&mut c, "SELECT max(version)::bigint FROM pjw_schema"),
        2
    );
    for t in ["pjw_jobs", "pjw_samples"] {
        let kind: i8 = c
            .client()
            .query_one(
                "SELECT relkind::\"char\" FROM pg_class WHERE relname = $1",
                &[&t],
            )
            .unwrap()
            .get(0);
        assert_eq!(kind as u8, b'p', "{t} is not partitioned");
    }
    assert_eq!(
        scalar(
            &mut c,
            "SELECT count(*) FROM pg_class WHERE relname IN ('pjw_jobs_v1', 'pjw_samples_v1')"
        ),
        0
    );
    // Inside the retention (400 days of jobs, 30 of samples) everything moved, the job without
    // an end filed under its submission; the rest did not.
    let ids: Vec<String> = c
        .jobs(&CentralFilter::default())
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(ids, ["recent", "noend", "tendays"]);
    assert_eq!(scalar(&mut c, "SELECT count(*) FROM pjw_samples"), 2);
    // The GPU columns of migration 1 are there, a second contact changes nothing.
    drop(c);
    let mut again = Central::connect(&pg.url()).unwrap();
    assert_eq!(
        scalar(&mut again, "SELECT count(*)::bigint FROM pjw_schema"),
        2
    );
    assert_eq!(again.jobs(&CentralFilter::default()).unwrap().len(), 3);
}

/// Whole partitions older than the retention are dropped; a late row (a node that spooled for
/// weeks) gets its partition made; rows already older than the retention are not sent.
#[test]
fn retention_drops_old_partitions_and_late_rows_find_theirs() {
    require_pg!();
    let pg = PgServer::start();
    let ep = pjw_central::Endpoint::new(&pg.url(), None).unwrap();
    let retention = pjw_central::Retention {
        jobs_days: 30,
        samples_days: 7,
    };
    let mut c = Central::open(&ep, &retention).unwrap();
    let batch = [
        shipped_job("n1", "now", 1, "alice", now(), (1, 1, 0), 3),
        shipped_job("n1", "late", 2, "alice", now() - 20 * DAY, (1, 1, 0), 3),
        shipped_job("n1", "gone", 3, "alice", now() - 45 * DAY, (1, 1, 0), 3),
    ];
    let sent = c.ship(&batch, now()).unwrap();
    // The samples of "late" are past the 7 days of samples, "gone" is past everything.
    assert_eq!(sent, 3);
    let ids: Vec<String> = c
        .jobs(&CentralFilter::default())
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(ids, ["now", "late"]);
    let parts = |c: &mut Central, t: &str| -> Vec<String> {
        c.client()
            .query(
                "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = to_regclass($1) ORDER BY 1",
                &[&t],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let late_week = pjw_central::schema::Table::Jobs
        .partition_name(pjw_central::schema::Table::Jobs.start_of(now() - 20 * DAY));
    assert!(
        parts(&mut c, "pjw_jobs").contains(&late_week),
        "{late_week}"
    );

    // Maintenance: 25 days on, "late" (45 days old then) has gone with its week, "now" stays;
    // no sample partition older than 7 days is left.
    let later = now() + 25 * DAY;
    let m = c.maintain(later, true).unwrap();
    assert!(m.ran);
    assert!(m.dropped.contains(&late_week), "{m:?}");
    let ids: Vec<String> = c
        .jobs(&CentralFilter::default())
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(ids, ["now"]);
    for p in parts(&mut c, "pjw_samples") {
        let start = pjw_central::schema::Table::Samples
            .start_from_name(&p)
            .unwrap();
        assert!(start + DAY > later - 7 * DAY, "{p} outlived the retention");
    }
    // Partitions ahead of the later time exist; within the hour another pass does nothing.
    let ahead = pjw_central::schema::Table::Samples
        .partition_name(pjw_central::schema::Table::Samples.start_of(later + DAY));
    assert!(parts(&mut c, "pjw_samples").contains(&ahead));
    assert!(!c.maintain(later + 60_000, false).unwrap().ran);
}

/// The cluster questions: a node, a time range, a user, and the top jobs by CPU, memory or
/// wait; a time range reads only its partitions.
#[test]
fn cluster_queries_by_node_time_user_and_top() {
    require_pg!();
    let pg = PgServer::start();
    let mut c = Central::connect(&pg.url()).unwrap();
    let batch = [
        shipped_job("n1", "a", 1, "alice", now() - 3 * DAY, (500, 10, 5), 1),
        shipped_job("n1", "b", 2, "bob", now() - DAY, (10, 4000, 1), 1),
        shipped_job("n2", "c", 1, "alice", now() - DAY, (20, 20, 900), 1),
        shipped_job(
            "n3",
            "d",
            1,
            "carol",
            now() - 12 * DAY,
            (9000, 9000, 9000),
            1,
        ),
    ];
    c.ship(&batch, now()).unwrap();
    let ids = |c: &mut Central, f: CentralFilter| -> Vec<String> {
        c.jobs(&f).unwrap().into_iter().map(|j| j.job_id).collect()
    };
    let week = CentralFilter {
        since_ms: Some(now() - 7 * DAY),
        until_ms: Some(now()),
        ..Default::default()
    };
    let table: [(CentralFilter, &[&str]); 6] = [
        (
            CentralFilter {
                node: Some("n1".into()),
                ..Default::default()
            },
            &["b", "a"],
        ),
        (week.clone(), &["b", "c", "a"]),
        (
            CentralFilter {
                order: pjw_central::Order::Cpu,
                limit: 2,
                ..week.clone()
            },
            &["a", "c"],
        ),
        (
            CentralFilter {
                order: pjw_central::Order::Mem,
                limit: 1,
                ..week.clone()
            },
            &["b"],
        ),
        (
            CentralFilter {
                order: pjw_central::Order::Wait,
                ..Default::default()
            },
            &["d", "c", "a", "b"],
        ),
        (
            CentralFilter {
                user: Some("alice".into()),
                order: pjw_central::Order::Wait,
                ..week.clone()
            },
            &["c", "a"],
        ),
    ];
    for (f, want) in table {
        assert_eq!(ids(&mut c, f.clone()), want, "{f:?}");
    }
    // The plan of a week's top jobs reads this week's and last week's partitions, not the one
    // of twelve days ago.
    let (sql, _) = pjw_central::query::jobs_sql(&CentralFilter {
        order: pjw_central::Order::Cpu,
        limit: 10,
        ..week.clone()
    });
    let explain = format!(
        "EXPLAIN {}",
        sql.replace("$1", &(now() - 2 * DAY).to_string())
            .replace("$2", &now().to_string())
    );
    let plan: Vec<String> = c
        .client()
        .query(explain.as_str(), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    let old = pjw_central::schema::Table::Jobs
        .partition_name(pjw_central::schema::Table::Jobs.start_of(now() - 12 * DAY));
    let recent = pjw_central::schema::Table::Jobs
        .partition_name(pjw_central::schema::Table::Jobs.start_of(now() - DAY));
    assert!(plan.contains(&recent), "{plan}");
    assert!(!plan.contains(&old), "{plan}");
    // The end class is typed on the way in and out: a filter by one finds its jobs, and a
    // word no pjw wrote is an error naming the row, never taken as `failed`.
    let done = CentralFilter {
        end_class: Some(EndClass::Completed),
        ..Default::default()
    };
    assert_eq!(ids(&mut c, done.clone()).len(), 4);
    let ended = c.jobs(&done).unwrap();
    assert!(ended.iter().all(|j| j.summary.end == EndClass::Completed));
    c.client()
        .execute(
            "UPDATE pjw_jobs SET end_class = 'vanished' WHERE node = 'n1' AND seq = 2",
            &[],
        )
        .unwrap();
    let e = c.jobs(&CentralFilter::default()).unwrap_err().to_string();
    assert!(
        e.contains("job 2 of node n1") && e.contains("unknown end class \"vanished\""),
        "{e}"
    );
}
