//! Root integration tests of time limits (`pjw run --time`) and the shortest-first queue: a
//! real job warned with SIGTERM at its limit (one that catches it ends its own way, one that
//! ignores it is killed `[job] kill_wait` later), its user told and its end a timeout in the
//! report; a job
//! with a shorter limit starting ahead of a longer one, and a user who gives a short limit to
//! jump the queue killed at it. Each test runs a private daemon below its own cgroup.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pjw_testkit::job::wait;
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// A script that says it started (`<tag>.up`), then sleeps until killed or released
/// (`<tag>.go`).
fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "touch {d}/{tag}.up; while [ ! -e {d}/{tag}.go ]; do sleep 0.02; done; echo {tag}-done",
        d = dir.display()
    )
}

fn up(dir: &Path, tag: &str) -> bool {
    TestDaemon::wait_for(Duration::from_secs(20), || {
        dir.join(format!("{tag}.up")).exists()
    })
}

fn go(dir: &Path, tag: &str) {
    std::fs::write(dir.join(format!("{tag}.go")), "").unwrap();
}

fn state_of(d: &TestDaemon, id: &str) -> String {
    d.status()["jobs"]
        .as_array()
        .and_then(|js| js.iter().find(|j| j["id"] == id).cloned())
        .map(|j| j["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| "gone".into())
}

/// How job `id` ended in the report, once the daemon has recorded it (a bounded wait: the
/// client sees its process die before the daemon records the end).
fn end_of(d: &TestDaemon, id: &str) -> String {
    let mut end = String::new();
    TestDaemon::wait_for(Duration::from_secs(20), || {
        let out = d
            .pjw()
            .args(["report", "--format", "json", "-J", id])
            .output()
            .expect("pjw report");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        end = v[0]["end"].as_str().unwrap_or("").to_string();
        !end.is_empty()
    });
    end
}

#[test]
fn a_job_is_warned_then_killed_at_its_time_limit_and_its_user_told() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), "[job]\nkill_wait = 1\n");
    let dir = d.dir().to_path_buf();
    // One catches the SIGTERM and ends its own way; one ignores it (its children inherit
    // that) and is killed a second later.
    let polite = d.run_sh(
        &["--job-id", "polite", "--time", "2s"],
        &format!(
            "trap 'echo got-term; exit 3' TERM; {}",
            hold(&dir, "polite")
        ),
    );
    let slow = d.run_sh(
        &["--job-id", "slow", "--time", "2s"],
        &format!("trap '' TERM; {}", hold(&dir, "slow")),
    );
    // What the limit acts on ran: both started and were still held when the limit came.
    assert!(up(&dir, "polite") && up(&dir, "slow"), "{}", d.log());
    let out = wait(polite, "pjw run --time 2s (catches TERM)").code(3);
    assert!(out.stdout().contains("got-term"), "{}", out.describe());
    assert!(
        out.stderr().contains(
            "pjw: job polite was ended at its time limit (0:00:02 of running time, --time)"
        ),
        "{}\n{}",
        out.describe(),
        d.log()
    );
    assert_eq!(end_of(&d, "polite"), "timeout", "{}", d.log());
    let out = wait(slow, "pjw run --time 2s (ignores TERM)").killed();
    assert!(
        out.stderr().contains(
            "pjw: job slow was ended at its time limit (0:00:02 of running time, --time)"
        ),
        "{}\n{}",
        out.describe(),
        d.log()
    );
    assert!(!out.stdout().contains("slow-done"), "{}", out.describe());
    assert_eq!(end_of(&d, "slow"), "timeout", "{}", d.log());
    let listed = d
        .pjw()
        .args(["report", "--state", "timeout", "--format", "json"])
        .output()
        .expect("pjw report");
    let v: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert!(
        v.as_array()
            .is_some_and(|a| a.iter().any(|j| j["id"] == "slow")),
        "{v:#}"
    );
    // A limit that cannot be one is a usage error before anything is asked.
    let bad = d
        .pjw()
        .args(["run", "--time", "0", "--", "true"])
        .output()
        .expect("pjw run");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("invalid time limit \"0\": a job needs at least a second"),
        "{err}"
    );
}

/// The shortest limit starts first; a user who claims a short limit to get ahead is held to
/// it (docs/security.md, "a short --time to jump the queue").
#[test]
fn the_shortest_limit_starts_first_and_a_short_limit_is_held_to() {
    require_root!();
    let two = pjw_testkit::need_cpus!(2);
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!(
            "cpus = \"{two}\"\nvcpus = 2\nhard_preemption = false\nqueue_order = \"shortest-first\"\n[job]\nkill_wait = 1\n"
        ),
    );
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let long = d.run_sh(
        &["--cpus", "2", "--job-id", "long", "--time", "1:00:00"],
        &hold(&dir, "long"),
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(20), || state_of(
        &d, "long"
    )
        == "queued"));
    let short = d.run_sh(
        &["--cpus", "2", "--job-id", "short", "--time", "2s"],
        &hold(&dir, "short"),
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(20), || state_of(
        &d, "short"
    )
        == "queued"));
    let head = d.status()["jobs"]
        .as_array()
        .and_then(|js| js.iter().find(|j| j["id"] == "long").cloned())
        .expect("long listed");
    assert!(
        head["reason"]
            .as_str()
            .unwrap_or("")
            .contains("behind job short"),
        "{head}"
    );
    go(&dir, "a");
    wait(a, "a").ok();
    // The later, shorter job starts first; the longer one still waits.
    assert!(up(&dir, "short"), "{}", d.log());
    assert_eq!(state_of(&d, "long"), "queued");
    // It said 2 s and is not released: ended at 2 s of running (SIGTERM), and the long job
    // starts.
    wait(short, "short").signal(libc::SIGTERM);
    assert_eq!(end_of(&d, "short"), "timeout");
    assert!(up(&dir, "long"), "{}", d.log());
    go(&dir, "long");
    wait(long, "long").ok();
}

/// The node's rules (`[job] default_time`, `max_time`): a job that asks for no limit is held to
/// the node's default, and its user is told whose limit it was; a user asking for more than the
/// maximum is refused before anything runs. docs/security.md, "no limit to run forever".
#[test]
fn the_nodes_default_limit_ends_a_job_that_asked_for_none_and_its_maximum_holds_users() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    require_root!();
    let d = TestDaemon::start(
        &pjw_bin(),
        "[job]\nkill_wait = 1\ndefault_time = \"2s\"\nmax_time = \"1h\"\n",
    );
    let dir = d.dir().to_path_buf();
    let plain = d.run_sh(&["--job-id", "plain"], &hold(&dir, "plain"));
    assert!(up(&dir, "plain"), "{}", d.log());
    let out = wait(plain, "pjw run without --time, node default 2 s").signal(libc::SIGTERM);
    assert!(
        out.stderr().contains(
            "pjw: job plain was ended at its time limit (0:00:02 of running time, the node's default limit: ask for one with --time)"
        ),
        "{}\n{}",
        out.describe(),
        d.log()
    );
    assert!(!out.stdout().contains("plain-done"), "{}", out.describe());
    assert_eq!(end_of(&d, "plain"), "timeout", "{}", d.log());
    // A user (a uid no account uses) asking for more than the maximum: refused, nothing ran.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let uid = (61_000u32..65_000)
        // SAFETY: getpwuid with any uid is sound; the result is only compared with null.
        .find(|&u| unsafe { libc::getpwuid(u).is_null() })
        .expect("a free uid");
    // Where the user could write: had the command run, the marker would be there.
    let free = dir.join("free");
    std::fs::create_dir(&free).unwrap();
    std::fs::set_permissions(&free, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = free.join("long-ran");
    let long = std::process::Command::new(pjw_bin())
        .uid(uid)
        .gid(uid)
        .current_dir("/")
        .env("PJW_SOCKET", d.socket())
        .args(["run", "--time", "2h", "--", "touch"])
        .arg(&marker)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("pjw run as a user");
    let err = String::from_utf8_lossy(&long.stderr);
    assert_eq!(long.status.code(), Some(125), "pjw refused it: {err}");
    assert!(
        err.contains(
            "--time 2:00:00 is more than this node lets a job run (1:00:00, job.max_time)"
        ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!marker.exists());
    // The same user within the maximum runs, and could write there.
    let ok = std::process::Command::new(pjw_bin())
        .uid(uid)
        .gid(uid)
        .current_dir("/")
        .env("PJW_SOCKET", d.socket())
        .args(["run", "-q", "--time", "1h", "--", "touch"])
        .arg(&marker)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("pjw run as a user");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(marker.exists());
}
