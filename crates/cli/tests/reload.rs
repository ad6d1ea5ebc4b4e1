//! SIGHUP (`systemctl reload pjw`) re-reads the config: vcpus changes at once and `pjw status`
//! shows it while a running job stays as it was; an invalid file, or one that moves the state
//! directory, changes nothing and the log says why.

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
