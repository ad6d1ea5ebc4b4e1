//! The store's tests: privacy of the files, jobs, migrations, side rows.

use super::*;
use crate::schema::MIGRATIONS;
use pjw_core::io_limits::JobIo;
use pjw_core::sched::Placement;
use pjw_core::thread_bind::BindMode;
use pjw_core::CpuSet;

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The database and every sidecar SQLite makes are 0600 from their creation on, and ones
/// an older pjw left open are narrowed at the next open (issue 25, item 1: job names and
/// command lines were read back from a 0644 `pjw.db-wal`).
#[test]
fn the_database_and_its_wal_files_are_private_from_creation() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    s.conn
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES ('--password=hunter2');")
        .unwrap();
    let db = dir.path().join("pjw.db");
    let wal = dir.path().join("pjw.db-wal");
    let shm = dir.path().join("pjw.db-shm");
    for p in [&db, &wal, &shm] {
        assert!(p.exists(), "{} missing", p.display());
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }
    drop(s);
    // As an older pjw (or one killed with -9) left them: open to all. Opening narrows.
    use std::os::unix::fs::PermissionsExt;
    for p in [&db, &wal, &shm] {
        if !p.exists() {
            std::fs::write(p, b"").unwrap();
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let journal = dir.path().join("pjw.db-journal");
    let s = Store::open(dir.path()).unwrap();
    for p in [&db, &wal, &shm] {
        assert_eq!(mode(p), 0o600, "{} after reopening", p.display());
    }
    assert!(!journal.exists());
    drop(s);
    // A sidecar that is a symlink is not followed (O_NOFOLLOW): the open fails, saying so.
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, b"").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _ = std::fs::remove_file(&wal);
    std::os::unix::fs::symlink(&target, &wal).unwrap();
    let Err(e) = Store::open(dir.path()) else {
        panic!("a symlinked sidecar was opened");
    };
    assert!(e.to_string().contains("cannot make"), "{e}");
    assert_eq!(mode(&target), 0o644, "the link's target was changed");
}

/// Two connections writing at once (the engine's and the profile writer's) never see
/// "database is locked": a transaction that reads before it writes takes the write lock at
/// BEGIN (IMMEDIATE), so it waits in the busy handler. A deferred one fails at once when the
/// other connection committed after its read (SQLITE_BUSY_SNAPSHOT: no busy handler runs),
/// which refused a `pjw run` in CI.
#[test]
fn read_then_write_transactions_wait_for_another_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Store::open(dir.path()).unwrap();
    let b = Store::open(dir.path()).unwrap();
    let other = std::thread::spawn(move || {
        for i in 0..400 {
            b.insert_job(&job(&format!("w{i}"))).unwrap();
        }
    });
    let mut last = 0;
    for _ in 0..400 {
        let n = a.next_job_number().expect("no busy error");
        assert!(n > last);
        last = n;
    }
    other.join().unwrap();
}

fn job(id: &str) -> JobRecord {
    JobRecord {
        seq: 0,
        job_id: id.into(),
        name: "spin".into(),
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        ncpus: 2,
        cpus: CpuSet::parse_list("0-1").unwrap(),
        mems: CpuSet::parse_list("0").unwrap(),
        mem_limit: Some(1 << 30),
        pid: Some(4242),
        pid_start: Some(123456),
        cgroup: format!("job-{id}"),
        argv: vec!["spin".into(), "a \"quoted\"\nline\\".into(), "\u{1}".into()],
        state: StoredState::Starting,
        submitted_ms: 1000,
        started_ms: Some(1500),
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: Placement::Any,
        exclusive: false,
        role: StoredRole::Primary,
    }
}

#[test]
fn jobs_live_and_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let seq = s.insert_job(&job("7")).unwrap();
    // A live id cannot be taken twice.
    assert!(s.insert_job(&job("7")).is_err());
    s.set_running(seq).unwrap();
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 1);
    let mut want = job("7");
    want.seq = seq;
    want.state = StoredState::Running;
    assert_eq!(live[0], want);
    s.set_ended(seq, 9000, "exited").unwrap();
    assert!(s.live_jobs().unwrap().is_empty());
    // Once ended, the id may be used again.
    let seq2 = s.insert_job(&job("7")).unwrap();
    assert_ne!(seq, seq2);
    let ended = s.job(seq).unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("exited"));
    assert_eq!(ended.ended_ms, Some(9000));
}

#[test]
fn state_survives_reopen_and_numbers_are_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = Store::open(dir.path()).unwrap();
        assert_eq!(s.next_job_number().unwrap(), 1);
        assert_eq!(s.next_job_number().unwrap(), 2);
        s.insert_job(&job("a")).unwrap();
    }
    let mut s = Store::open(dir.path()).unwrap();
    assert_eq!(s.next_job_number().unwrap(), 3);
    assert_eq!(s.live_jobs().unwrap().len(), 1);
}

#[test]
fn upgrades_a_version_1_database_keeping_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pjw.db");
    {
        // A database as pjw 0.1 (schema 1) left it, with a running job.
        let c = Connection::open(&path).unwrap();
        c.execute_batch(MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
                "INSERT INTO jobs (job_id, name, uid, gid, user, ncpus, cpus, mems, cgroup, argv, state, submitted_ms)
                 VALUES ('old', 'sim', 1000, 1000, 'alice', 2, '0-1', '0', 'job-old', '[\"sim\"]', 'running', 5)",
                [],
            )
            .unwrap();
    }
    let s = Store::open_file(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].job_id, "old");
    assert_eq!(live[0].cpus.to_string(), "0-1");
    assert_eq!(
        (
            live[0].priority,
            placement_str(live[0].placement),
            live[0].exclusive,
            live[0].role.as_str()
        ),
        (10, "any", false, "primary")
    );
    s.set_role(
        live[0].seq,
        StoredRole::Backfill,
        &live[0].cpus,
        &live[0].mems,
    )
    .unwrap();
    s.set_priority(live[0].seq, 3).unwrap();
    let j = s.job(live[0].seq).unwrap().unwrap();
    assert_eq!((j.role, j.priority), (StoredRole::Backfill, 3));
}

#[test]
fn roles_and_placements_round_trip_and_unknown_text_is_a_bad_row() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    let mut rec = job("r1");
    for (role, placement) in [
        (StoredRole::Primary, Placement::Any),
        (StoredRole::Backfill, Placement::BackfillOnly),
        (StoredRole::Preempted, Placement::PrimaryOnly),
        (StoredRole::Suspended, Placement::Any),
    ] {
        rec.job_id = format!("{}-{}", role.as_str(), placement_str(placement));
        rec.role = role;
        rec.placement = placement;
        let seq = s.insert_job(&rec).unwrap();
        let back = s.job(seq).unwrap().unwrap();
        assert_eq!((back.role, back.placement), (role, placement));
        s.set_ended(seq, 1, "done").unwrap();
    }
    // A row whose role no pjw writes is an error naming it, not a primary by default.
    let seq = s.insert_job(&rec).unwrap();
    s.conn
        .execute("UPDATE jobs SET role = 'boss' WHERE seq = ?1", [seq])
        .unwrap();
    let e = s.job(seq).unwrap_err().to_string();
    assert!(e.contains("unknown role \"boss\""), "{e}");
    s.conn
        .execute(
            "UPDATE jobs SET role = 'primary', placement = 'anywhere' WHERE seq = ?1",
            [seq],
        )
        .unwrap();
    let e = s.job(seq).unwrap_err().to_string();
    assert!(e.contains("unknown placement \"anywhere\""), "{e}");
}

#[test]
fn a_jobs_bind_mode_is_kept_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    let seq = s.insert_job(&job("b1")).unwrap();
    assert_eq!(s.bind(seq).unwrap(), None);
    s.set_bind(seq, BindMode::Cores).unwrap();
    assert_eq!(s.bind(seq).unwrap(), Some(BindMode::Cores));
    s.set_bind(seq, BindMode::None).unwrap();
    assert_eq!(s.bind(seq).unwrap(), Some(BindMode::None));
    s.conn
        .execute(
            "UPDATE job_bind SET mode = 'sideways' WHERE seq = ?1",
            [seq],
        )
        .unwrap();
    let e = s.bind(seq).unwrap_err();
    assert!(e.to_string().contains("sideways"), "{e}");
}

#[test]
fn starter_details_are_kept_beside_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    let seq = s.insert_job(&job("pbs1")).unwrap();
    assert_eq!(s.starter(seq).unwrap(), None);
    let mut st = StarterRecord {
        wlm: Some("pbs:1234.pbs01".into()),
        client_uid: 0,
        tmp_size: Some(16 << 20),
        tmpdir: None,
    };
    s.set_starter(seq, &st).unwrap();
    assert_eq!(s.starter(seq).unwrap().as_ref(), Some(&st));
    st.tmpdir = Some("/var/lib/pjw/tmp/job-pbs1".into());
    s.set_starter(seq, &st).unwrap();
    assert_eq!(s.starter(seq).unwrap(), Some(st));
}

#[test]
fn io_settings_are_kept_beside_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    let seq = s.insert_job(&job("io1")).unwrap();
    assert_eq!(s.io(seq).unwrap(), None);
    let io = JobIo::parse("weight=50; 254:0 rbps=10M").unwrap();
    s.set_io(seq, &io).unwrap();
    assert_eq!(s.io(seq).unwrap(), Some(io));
    s.conn
        .execute("UPDATE job_io SET io = 'weight=0' WHERE seq = ?1", [seq])
        .unwrap();
    let e = s.io(seq).unwrap_err().to_string();
    assert!(e.contains("weight=0"), "{e}");
}

#[test]
fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pjw.db");
    {
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    let e = Store::open_file(&path).unwrap_err();
    assert!(e.to_string().contains("newer"), "{e}");
}
