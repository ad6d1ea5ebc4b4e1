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

use pjw_testkit::job::wait;
use pjw_testkit::machine::first_cpus;
use pjw_testkit::{guest_tier, require, require_root, skip, Component, TestDaemon};

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
    /// The swap file, or what failed (the command and its words).
    fn create(mib: u64) -> Result<Swap, String> {
        let path = PathBuf::from(format!("/var/tmp/pjw-test-swap-{}", std::process::id()));
        let ok = |c: &mut Command| {
            let what = pjw_testkit::job::command_line(c);
            match c.stdin(Stdio::null()).output() {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!(
                    "{what}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => Err(format!("{what}: {e}")),
            }
        };
        let swap = Swap { path };
        let p = swap
            .path
            .to_str()
            .ok_or("swap path is not UTF-8")?
            .to_string();
        ok(Command::new("fallocate").args(["-l", &format!("{mib}M"), &p]))?;
        ok(Command::new("chmod").args(["600", &p]))?;
        ok(Command::new("mkswap").arg(&p))?;
        ok(Command::new("swapon").arg(&p))?;
        Ok(swap)
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
    require!(Component::Root, Component::Swap);
    if !Path::new("/proc/pressure/memory").exists() {
        skip!("the kernel reports no memory pressure (no /proc/pressure/memory: PSI is off)");
    }
    // make test adds the swap file itself; only a test guest may lack a place for one.
    let _swap = match Swap::create(768) {
        Ok(s) => s,
        Err(e) => match guest_tier() {
            Some(tier) => skip!("the {tier} guest cannot add a swap file: {e}"),
            None => panic!("cannot add a swap file on this host: {e}"),
        },
    };
    // Four jobs run at once on up to two CPUs (vcpus 4), so their memory competes.
    let cpus = first_cpus(2)
        .or_else(|| first_cpus(1))
        .expect("a CPU to run on");
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!("cpus = \"{cpus}\"\nvcpus = 4\n[memory]\nlimit = \"256M\"\ninterval_ms = 200\nvm_prediction = 1.0"),
    );
    let (mib, rounds) = ("120", "40");
    let want = pjw_testkit::job::run_ok(Command::new(wl()).args(["check", mib, rounds])).stdout();
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
    // Watch the governor act while they run. An empty table ends the watch only once a
    // job has been seen: the first look can come before any client has reached the daemon.
    let mut saw_frozen = false;
    let mut saw_jobs = false;
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let st = d.status();
        let list = st["jobs"].as_array().cloned().unwrap_or_default();
        if list.iter().any(|j| j["state"] == "frozen") {
            saw_frozen = true;
        }
        saw_jobs |= !list.is_empty();
        if saw_jobs && list.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, j) in jobs.into_iter().enumerate() {
        let out = wait(j, format!("job m{i}")).ok();
        assert_eq!(
            out.stdout(),
            want,
            "job m{i} computed a wrong result:\n{}",
            out.describe()
        );
    }
    let log = d.log();
    assert!(
        saw_frozen || log.contains("memory pressure: job frozen"),
        "the governor never acted:\n{log}"
    );
    assert!(log.contains("job thawed"), "no job was thawed:\n{log}");
    // A client exits with its job's main process; the daemon records the end when it
    // sees the job's cgroup empty, a moment later. Wait for that before reading the store.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || d.status()["jobs"]
            .as_array()
            .is_some_and(|l| l.is_empty())),
        "jobs still listed after every client ended:\n{}",
        d.log()
    );
    // No OOM kill: every job ended as "exited" (with what the governor's freezes did, for a
    // job it froze: `exited; frozen 3 s by the memory governor (2 times): …`).
    let store = pjw_store::Store::open_file(&d.dir().join("state/pjw.db")).unwrap();
    let mut told = 0;
    for i in 0..4 {
        let rec = store.latest_by_id(&format!("m{i}")).unwrap().unwrap();
        let end = rec.end_reason.unwrap_or_default();
        assert!(
            (end == "exited" || end.starts_with("exited; frozen ")) && !end.contains("OOM"),
            "job m{i}: {end}"
        );
        told += usize::from(end.contains("by the memory governor"));
    }
    assert!(
        told > 0 || !saw_frozen,
        "a frozen job's end says nothing of it"
    );
}

#[test]
fn a_job_frozen_for_memory_before_a_crash_is_thawed_by_the_restarted_daemon() {
    require_root!();
    let mut d = TestDaemon::start(&pjw_bin(), "[memory]\ninterval_ms = 200");
    let dir = d.dir().to_path_buf();
    let script = format!(
        "touch {d}/up; while [ ! -e {d}/go ]; do sleep 0.02; done; echo thawed-and-done",
        d = dir.display()
    );
    let job = d
        .pjw()
        .args(["run", "--job-id", "cold", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    let out = wait(job, "job cold").ok();
    assert_eq!(out.stdout().trim(), "thawed-and-done");
}
