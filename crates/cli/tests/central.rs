//! Root integration test of the cluster store: a private daemon shipping to a private
//! PostgreSQL server (started by the test on loopback, stopped and removed on drop). PostgreSQL
//! is stopped while a job ends and started again later; the job must then be in the central
//! store exactly once, and `pjw report --central` lists it with its node. PostgreSQL is
//! host-only (scripts/install-deps.sh installs it); the VM guest skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pjw_central::{Central, CentralFilter};
use pjw_testkit::machine::one_cpu_config;
use pjw_testkit::pg::PgServer;
use pjw_testkit::{require, require_root, Component, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "touch {d}/{tag}.up; while [ ! -e {d}/{tag}.go ]; do sleep 0.05; done",
        d = dir.display()
    )
}

fn report(d: &TestDaemon, args: &[&str]) -> Output {
    d.pjw().arg("report").args(args).output().unwrap()
}

/// `pjw ARGS` as nobody: its real and effective ids, no supplementary groups (std drops them
/// when root sets a uid).
fn as_nobody(d: &TestDaemon, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let nb = pjw_testkit::machine::nobody();
    Command::new(pjw_bin())
        .uid(nb.uid)
        .gid(nb.gid)
        .args(args)
        .env("PJW_SOCKET", d.socket())
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_job_ending_while_postgres_is_down_reaches_it_once_later() {
    require!(Component::Root, Component::Postgres);
    let mut pg = PgServer::start();
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!(
            "{}[profile]\ninterval = \"1s\"\n[central]\nurl = \"{}\"\nretry_secs = 0.3\nbatch_size = 10\nship_samples = true\n",
            one_cpu_config(),
            pg.url()
        ),
    );
    let dir = d.dir().to_path_buf();
    let node = d.status()["node"].as_str().unwrap().to_string();

    // A first job ships while PostgreSQL is up.
    pjw_testkit::job::run_ok(d.pjw().args([
        "run",
        "-c",
        "1",
        "--job-id",
        "up1",
        "--",
        "sh",
        "-c",
        "sleep 0.2",
    ]));
    let mut central = None;
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || {
            let c = central.get_or_insert_with(|| Central::connect(&pg.url()).unwrap());
            c.jobs(&CentralFilter::default()).unwrap().len() == 1
        }),
        "first job not shipped:\n{}",
        d.log()
    );
    drop(central);

    // The second job runs; PostgreSQL stops; the job ends.
    let b = d.run_sh(&["-c", "1", "--job-id", "down1"], &hold(&dir, "b"));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || dir.join("b.up").exists()),
        "job did not start:\n{}",
        d.log()
    );
    // With ship_samples its samples reach PostgreSQL while it runs (run number 2 in a fresh
    // store: the node's second job).
    let mut c = Central::connect(&pg.url()).unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || !c
            .samples(&node, 2)
            .unwrap()
            .is_empty()),
        "no live samples shipped:\n{}",
        d.log()
    );
    drop(c);
    pg.stop();
    std::fs::write(dir.join("b.go"), "").unwrap();
    pjw_testkit::job::wait(b, "job down1").ok();
    let ended = std::time::Instant::now();
    // It is recorded locally (ended, with its summary) ...
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || {
        let o = report(&d, &["-J", "down1", "--format", "json"]);
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"state\": \"ended\"")
    }));
    // ... the central report says clearly that PostgreSQL is away ...
    let o = report(&d, &["--central"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("central store"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // ... and the shipper keeps retrying (several retry intervals pass).
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || d
        .log()
        .contains("central store unreachable")));
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.log().contains("finished jobs stay spooled"));

    // PostgreSQL comes back a minute after the job ended (many retry intervals, and longer
    // than any connection timeout): the spooled job arrives, once.
    std::thread::sleep(Duration::from_secs(60).saturating_sub(ended.elapsed()));
    pg.start_again();
    let mut c = Central::connect(&pg.url()).unwrap();
    let only = |c: &mut Central| {
        c.jobs(&CentralFilter {
            job_id: Some("down1".into()),
            ..Default::default()
        })
        .unwrap()
    };
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || !only(&mut c).is_empty()),
        "spooled job not shipped after PostgreSQL came back:\n{}",
        d.log()
    );
    // Wake the shipper again (another job ends): nothing is sent twice.
    pjw_testkit::job::run_ok(d.pjw().args([
        "run", "-c", "1", "--job-id", "after1", "--", "sh", "-c", "true",
    ]));
    assert!(TestDaemon::wait_for(Duration::from_secs(60), || c
        .jobs(&CentralFilter::default())
        .unwrap()
        .len()
        == 3));
    let rows = only(&mut c);
    assert_eq!(rows.len(), 1, "{rows:?}");
    // Its whole series is there, each sample once (live ones and the rest after the end).
    let series = c.samples(&node, rows[0].seq).unwrap();
    assert_eq!(series.len() as u32, rows[0].summary.samples, "{series:?}");
    assert_eq!(rows[0].node, node);
    assert_eq!(rows[0].summary.end.as_str(), "completed");
    assert!(d.log().contains("central store reachable again"));

    // pjw report --central lists it with its node (table and JSON).
    let o = report(
        &d,
        &["--central", "--user", &pjw_testkit::machine::me().name],
    );
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.contains("down1") && l.contains(&node)),
        "{table}"
    );
    let o = report(&d, &["--central", "-J", "down1", "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let jobs = v.as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["node"], node.as_str());
    assert_eq!(jobs[0]["id"], "down1");

    // Another user cannot read root's jobs from the central store either.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = as_nobody(&d, &["report", "--central", "-J", "down1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("belongs to another user"),
        "{}",
        text(&o)
    );
    // And a list of "all" jobs for them is only theirs: none.
    let o = as_nobody(&d, &["report", "--central"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("down1"));
}

#[test]
fn central_without_a_central_store_is_a_clear_error() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), &one_cpu_config());
    let o = report(&d, &["--central"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no central store"), "{err}");
}
