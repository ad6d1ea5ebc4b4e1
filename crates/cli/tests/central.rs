//! Root integration test of the cluster store: a private daemon shipping to a private
//! PostgreSQL server (started by the test on loopback, stopped and removed on drop). PostgreSQL
//! is stopped while a job ends and started again later; the job must then be in the central
//! store exactly once, and `pjw report --central` lists it with its node. PostgreSQL is
//! host-only (scripts/install-deps.sh installs it); the VM guest skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pjw_central::{Central, CentralFilter};
use pjw_testkit::pg::PgServer;
use pjw_testkit::{in_vm_guest, require_root, TestDaemon};

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

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_job_ending_while_postgres_is_down_reaches_it_once_later() {
    require_root!();
    if in_vm_guest() {
        eprintln!("skipped: PostgreSQL is host-only");
        return;
    }
    let mut pg = PgServer::start();
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!(
            "cpus = \"0\"\n[profile]\ninterval = \"1s\"\n[central]\nurl = \"{}\"\nretry_secs = 0.3\nbatch_size = 10\nship_samples = true\n",
            pg.url()
        ),
    );
    let dir = d.dir().to_path_buf();
    let node = d.status()["node"].as_str().unwrap().to_string();

    // A first job ships while PostgreSQL is up.
    let mut a = d.run_sh(&["-c", "1", "--job-id", "up1"], "sleep 0.2");
    assert!(a.wait().unwrap().success());
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
    let mut b = d.run_sh(&["-c", "1", "--job-id", "down1"], &hold(&dir, "b"));
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
    assert!(b.wait().unwrap().success());
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
    let mut e = d.run_sh(&["-c", "1", "--job-id", "after1"], "true");
    assert!(e.wait().unwrap().success());
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
    let o = report(&d, &["--central", "--user", "root"]);
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
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(pjw_bin())
        .args(["report", "--central", "-J", "down1"])
        .env("PJW_SOCKET", d.socket())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("belongs to another user"),
        "{}",
        text(&o)
    );
    // And a list of "all" jobs for them is only theirs: none.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(pjw_bin())
        .args(["report", "--central"])
        .env("PJW_SOCKET", d.socket())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("down1"));
}

#[test]
fn central_without_a_central_store_is_a_clear_error() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), "cpus = \"0\"\n");
    let o = report(&d, &["--central"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no central store"), "{err}");
}
