//! SIGHUP (`systemctl reload pjw`) re-reads the config: vcpus changes at once and `pjw status`
//! shows it while a running job stays as it was; an invalid file, or one that moves the state
//! directory, changes nothing and the log says why. The timers and the metrics listener follow
//! a reload too: the sampler's new interval shows in its pass count, metrics move to the new
//! port and the old one closes, and a port that cannot be bound keeps the old listener.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn hup(d: &TestDaemon) {
    let pid = d.pid().expect("daemon pid") as libc::pid_t;
    // SAFETY: signalling the test's own daemon child, by the pid it holds and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}

fn write_config(d: &TestDaemon, text: &str) {
    // The file TestDaemon started the daemon with (its socket, state dir and parent come from
    // the command line, which a reload keeps).
    std::fs::write(
        d.dir().join("pjw.toml"),
        format!("{text}\n[log]\nlevel = \"debug\"\n"),
    )
    .unwrap();
}

#[test]
fn sighup_changes_vcpus_live_and_refuses_bad_configs() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "vcpus = 1");
    assert_eq!(d.status()["vcpus"], 1);
    let mut job = d.run_sh(&["--cpus", "1", "--job-id", "stay"], "sleep 60");
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || {
        d.status()["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["id"] == "stay" && j["state"] == "running")
    }));
    let cpus_before = d.status()["jobs"][0]["cpus"].clone();

    write_config(&d, "vcpus = 2");
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d.status()["vcpus"] == 2),
        "vcpus did not change:\n{}",
        d.log()
    );
    let s = d.status();
    assert_eq!(s["jobs"][0]["id"], "stay");
    assert_eq!(s["jobs"][0]["state"], "running");
    assert_eq!(s["jobs"][0]["cpus"], cpus_before, "the running job moved");
    assert!(d.log().contains("config reloaded"), "{}", d.log());
    // pjw status (text) says it too.
    let text = d.pjw().arg("status").output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("of 2 in use"));

    // An invalid file: nothing changes, the log says why.
    write_config(&d, "vcpus = 0");
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d
            .log()
            .contains("reload refused: the config is invalid")),
        "{}",
        d.log()
    );
    assert!(d.log().contains("vcpus"), "{}", d.log());
    assert_eq!(d.status()["vcpus"], 2);
    // More job-CPUs than 512 per CPU of the pool: refused too, naming the bound.
    write_config(&d, "vcpus = 1000000");
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d
            .log()
            .contains("vcpus: 1000000 is more than 512 times the")),
        "{}",
        d.log()
    );
    assert_eq!(d.status()["vcpus"], 2);

    // A key that cannot change live (the state directory): refused whole, vcpus too stays.
    write_config(&d, "vcpus = 3\nstate_dir = \"/var/tmp/pjw-elsewhere\"");
    hup(&d);
    // --state-dir on the command line wins over the file, as at start: nothing to refuse, and
    // vcpus applies.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d.status()["vcpus"] == 3),
        "{}",
        d.log()
    );
    write_config(
        &d,
        "vcpus = 2\n[job]\ntmp_root = \"/var/tmp/pjw-other-tmp\"",
    );
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d.log().contains("job.tmp_root")),
        "{}",
        d.log()
    );
    assert!(d.log().contains("reload refused"), "{}", d.log());
    assert_eq!(d.status()["vcpus"], 3);
    assert!(!Path::new("/var/tmp/pjw-elsewhere").exists());

    d.pjw().args(["kill", "stay"]).output().unwrap();
    let _ = job.wait();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The metrics page at `port`, or None when nothing answers there.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// Sampler passes so far (the count of its duration histogram).
fn sampler_passes(port: u16) -> Option<u64> {
    scrape(port)?
        .lines()
        .find_map(|l| l.strip_prefix("pjw_sampler_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn sighup_restarts_the_sampler_and_moves_the_metrics_listener() {
    require_root!();
    let first = free_port();
    // A sample an hour: none but the first before the reload.
    let d = TestDaemon::start(
        pjw_bin(),
        &format!("[profile]\ninterval = \"1h\"\n[metrics]\nlisten = \"127.0.0.1:{first}\""),
    );
    let mut job = d.run_sh(&["--cpus", "1", "--job-id", "stay"], "sleep 120");
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || {
        d.status()["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["id"] == "stay" && j["state"] == "running")
    }));
    let before = d.status()["jobs"][0].clone();
    let n0 = sampler_passes(first).expect("metrics on the first port");
    assert!(n0 <= 2, "{n0} sampler passes with an hour between them");

    // A port another process holds: the rest of the reload applies (the sampler now runs every
    // second, the governor every 200 ms), metrics stay where they were and the log says why.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().port();
    write_config(
        &d,
        &format!("[profile]\ninterval = \"1s\"\n[memory]\ninterval_ms = 200\n[metrics]\nlisten = \"127.0.0.1:{busy}\""),
    );
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || d
            .log()
            .contains(&format!("cannot listen on 127.0.0.1:{busy}"))),
        "{}",
        d.log()
    );
    let log = d.log();
    assert!(
        log.contains(&format!("still served at http://127.0.0.1:{first}/metrics")),
        "{log}"
    );
    assert!(log.contains("config reloaded"), "{log}");
    assert!(log.contains("timer restarted"), "{log}");
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || sampler_passes(first)
            .is_some_and(|n| n >= n0 + 3)),
        "the sampler did not speed up: {:?} passes (was {n0})\n{}",
        sampler_passes(first),
        d.log()
    );

    // A free port: metrics move there and the old port closes.
    let second = free_port();
    write_config(
        &d,
        &format!("[profile]\ninterval = \"1s\"\n[memory]\ninterval_ms = 200\n[metrics]\nlisten = \"127.0.0.1:{second}\""),
    );
    hup(&d);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || scrape(second).is_some()),
        "metrics did not move to {second}:\n{}",
        d.log()
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || TcpStream::connect((
            "127.0.0.1",
            first
        ))
        .is_err()),
        "the old metrics port {first} still answers"
    );
    let page = scrape(second).unwrap();
    assert!(page.contains("job=\"stay\""), "{page}");
    drop(taken);

    // The running job was not touched.
    let s = d.status();
    assert_eq!(s["jobs"][0]["id"], "stay");
    assert_eq!(s["jobs"][0]["state"], "running");
    assert_eq!(
        s["jobs"][0]["cpus"], before["cpus"],
        "the running job moved"
    );
    assert!(job.try_wait().unwrap().is_none(), "the job's client ended");

    d.pjw().args(["kill", "stay"]).output().unwrap();
    let _ = job.wait();
}
