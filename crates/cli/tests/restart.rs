//! A `pjw run` that arrives while the daemon is down or restarting waits for it (bounded)
//! instead of failing at once: under a workload manager's prolog a failed run drains the node.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use pjw_testkit::job::JobOutput;
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

#[test]
fn a_new_job_waits_for_a_daemon_that_is_restarting() {
    require_root!();
    let mut d = TestDaemon::start(pjw_bin(), "");
    d.kill9();
    // The socket file is still there, and refuses: the daemon is gone.
    let client = d
        .pjw()
        .args(["run", "--job-id", "patient", "--", "sh", "-c", "exit 5"])
        .env("PJW_CONNECT_WAIT", "120")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says it waits (its first line); only then does the daemon come back. (A fixed
    // sleep here let a slow client reach the restarted daemon without ever waiting.)
    let mut client = client;
    let mut first = String::new();
    BufReader::new(client.stderr.take().expect("piped stderr"))
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("waiting up to 120 s"), "{first:?}");
    d.restart();
    let out = pjw_testkit::job::wait(client, "pjw run (waiting for the daemon)");
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}\n{}",
        out.describe(),
        d.log()
    );
}

#[test]
fn with_no_daemon_at_all_a_run_fails_clearly_after_its_wait() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(pjw_bin())
        .args(["run", "--", "true"])
        .env("PJW_SOCKET", dir.path().join("none.sock"))
        .env("PJW_CONNECT_WAIT", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("no pjw daemon came up within 1 s"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

/// Kill the daemon, start `pjw ARGS` (it must say it waits), restart the daemon, and return how
/// the command ended with the rest of its stderr (kept open to the end: a closed pipe would kill
/// its next line with SIGPIPE).
fn across_a_restart(d: &mut TestDaemon, args: &[&str], what: &str) -> (JobOutput, String) {
    d.kill9();
    let mut child = d
        .pjw()
        .args(args)
        .env("PJW_CONNECT_WAIT", "120")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says it waits; only then does the daemon come back.
    let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("waiting up to 120 s"), "{what}: {first:?}");
    d.restart();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let out = pjw_testkit::job::wait(child, what);
    assert!(
        out.status.success(),
        "{}\n{rest}\n{}",
        out.describe(),
        d.log()
    );
    (out, rest)
}

/// A workload manager's prolog (`pjw job register`) and epilog (`pjw job end`) that find the
/// daemon restarting wait for it like `pjw run` does: a failed prolog drains a Slurm node, a
/// failed epilog leaves the job registered. (A chaos run saw `connection refused` here.)
#[test]
fn a_prolog_and_an_epilog_wait_for_a_daemon_that_is_restarting() {
    require_root!();
    let id = pjw_testkit::machine::wlm_job_id(95);
    let root = pjw_testkit::machine::me().name;
    let mut d = TestDaemon::start(pjw_bin(), "");
    let (out, _) = across_a_restart(
        &mut d,
        &[
            "job", "register", "--wlm", "slurm", "-j", &id, "-u", &root, "-c", "1",
        ],
        "pjw job register (waiting for the daemon)",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("job slurm:{id} registered")),
        "{}",
        out.describe()
    );
    // The epilog, the same way.
    let job = format!("slurm:{id}");
    across_a_restart(
        &mut d,
        &["job", "end", &job],
        "pjw job end (waiting for the daemon)",
    );
    assert!(
        !d.status()["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().any(|j| j["id"] == job)),
        "the job is still registered after its epilog\n{}",
        d.log()
    );
}
