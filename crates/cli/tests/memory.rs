//! Root test of the memory governor: jobs whose memory together is twice the node's job
//! partition all finish, with correct results and no OOM kill, because the governor freezes
//! some of them before the partition thrashes and thaws them one at a time when memory is free.
//!
//! It adds a temporary swap file (as a node under memory pressure has one) and removes it
//! again, also when the test fails. How much sooner than plain Linux this is, is measured in
//! bench/, not here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn wl() -> PathBuf {
    pjw_bin().with_file_name("pjw-wl")
}

/// A swap file that exists for the life of the value.
struct Swap {
    path: PathBuf,
}

impl Swap {
    fn create(mib: u64) -> Option<Swap> {
        let path = PathBuf::from(format!("/var/tmp/pjw-test-swap-{}", std::process::id()));
        let ok = |c: &mut Command| {
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let swap = Swap { path };
        let p = swap.path.to_str()?;
        if !ok(Command::new("fallocate").args(["-l", &format!("{mib}M"), p])) {
            return None;
        }
        let _ = ok(Command::new("chmod").args(["600", p]));
        if !ok(Command::new("mkswap").arg(p)) || !ok(Command::new("swapon").arg(p)) {
            return None;
        }
        Some(swap)
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.path).status();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn the_governor_lets_jobs_twice_the_partition_finish_without_oom_kills() {
    require_root!();
    if !Path::new("/proc/pressure/memory").exists() {
        eprintln!("skipped: no PSI");
        return;
    }
    let Some(_swap) = Swap::create(768) else {
        eprintln!("skipped: cannot add a swap file here");
        return;
    };
    let d = TestDaemon::start(
        &pjw_bin(),
        "cpus = \"0-1\"\nvcpus = 4\n[memory]\nlimit = \"256M\"\ninterval_ms = 200\nvm_prediction = 1.0",
    );
    let (mib, rounds) = ("120", "40");
    let want = String::from_utf8(
        Command::new(wl())
            .args(["check", mib, rounds])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let jobs: Vec<_> = (0..4)
        .map(|i| {
            d.pjw()
                .args(["run", "--job-id", &format!("m{i}"), "--"])
                .arg(wl())
                .args(["grow", mib, "3", rounds])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Watch the governor act while they run.
    let mut saw_frozen = false;
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let st = d.status();
        let list = st["jobs"].as_array().cloned().unwrap_or_default();
        if list.iter().any(|j| j["state"] == "frozen") {
            saw_frozen = true;
        }
        if list.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, j) in jobs.into_iter().enumerate() {
        let out = j.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "job m{i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "job m{i} computed a wrong result"
        );
    }
    let log = d.log();
    assert!(
        saw_frozen || log.contains("memory pressure: job frozen"),
        "the governor never acted:\n{log}"
    );
    assert!(log.contains("job thawed"), "no job was thawed:\n{log}");
    // No OOM kill: every job ended as "exited".
    let store = pjw_store::Store::open_file(&d.dir().join("state/pjw.db")).unwrap();
    for i in 0..4 {
        let rec = store.latest_by_id(&format!("m{i}")).unwrap().unwrap();
        assert_eq!(rec.end_reason.as_deref(), Some("exited"), "job m{i}");
    }
}

#[test]
fn a_job_frozen_for_memory_before_a_crash_is_thawed_by_the_restarted_daemon() {
    require_root!();
    let mut d = TestDaemon::start(&pjw_bin(), "cpus = \"0-1\"\n[memory]\ninterval_ms = 200");
    let dir = d.dir().to_path_buf();
    let script = format!(
        "touch {d}/up; while [ ! -e {d}/go ]; do sleep 0.02; done; echo thawed-and-done",
        d = dir.display()
    );
    let job = d
        .pjw()
        .args(["run", "--job-id", "cold", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(TestDaemon::wait_for(Duration::from_secs(20), || dir
        .join("up")
        .exists()));
    // The daemon dies while the governor has the job frozen.
    d.kill9();
    d.driver().freeze("job-cold", true).unwrap();
    d.restart();
    // Memory is plentiful: the restarted governor knows the job is frozen and thaws it.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !d
            .driver()
            .is_frozen("job-cold")
            .unwrap_or(true)),
        "never thawed:\n{}",
        d.log()
    );
    assert!(d.log().contains("memory_frozen=true"), "{}", d.log());
    std::fs::write(dir.join("go"), "").unwrap();
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "thawed-and-done"
    );
}
