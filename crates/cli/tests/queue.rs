//! Root integration tests of the node queue: priorities and preemption, backfill in the idle
//! class, suspend/resume, exclusive jobs, queue expiry, and what survives a daemon restart.
//! Each test runs a private daemon with two CPUs for jobs, below its own cgroup.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use pjw_core::CpuSet;
use pjw_testkit::job::{run, wait, JobOutput};
use pjw_testkit::machine::one_cpu_config;
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// A daemon with two CPUs for jobs (the first two this process may use); a machine with one
/// CPU skips the test.
macro_rules! daemon {
    ($extra:expr) => {{
        let two = pjw_testkit::need_cpus!(2);
        TestDaemon::start(&pjw_bin(), &format!("cpus = \"{two}\"\n{}", $extra))
    }};
}

/// A job that says it started, then waits for `<tag>.go`.
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

/// Wait for a `pjw run` client: its status, stdout and stderr (shown when an assertion fails).
fn output(c: Child) -> JobOutput {
    wait(c, "pjw run")
}

/// Whether job cgroup `name` becomes frozen: the kernel reports a freeze once every task has
/// stopped (cgroup.events "frozen 1", freezer.state FROZEN), after the daemon has answered, so
/// this waits within a bound.
fn frozen(d: &TestDaemon, name: &str) -> bool {
    TestDaemon::wait_for(Duration::from_secs(30), || {
        d.driver().is_frozen(name).unwrap_or(false)
    })
}

fn job(d: &TestDaemon, id: &str) -> Option<serde_json::Value> {
    d.status()["jobs"]
        .as_array()?
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
}

fn state_of(d: &TestDaemon, id: &str) -> String {
    job(d, id)
        .map(|j| j["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| "gone".into())
}

fn wait_state(d: &TestDaemon, id: &str, want: &str) -> bool {
    TestDaemon::wait_for(Duration::from_secs(20), || state_of(d, id) == want)
}

/// The value of `cpu.idle` (or the weight fallback) of a job, from its cgroups.
fn idle(d: &TestDaemon, id: &str) -> Option<String> {
    d.driver()
        .job_dirs(&format!("job-{id}"))
        .into_iter()
        .map(|(_, dir)| dir.join("cpu.idle"))
        .find(|f| f.exists())
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|s| s.trim().to_string())
}

#[test]
fn a_high_priority_job_preempts_and_the_displaced_job_finishes_later() {
    require_root!();
    // No spare slots: the displaced job is frozen, not backfilled.
    let d = daemon!("vcpus = 2");
    let dir = d.dir().to_path_buf();
    let low = d.run_sh(
        &["--cpus", "2", "--priority", "5", "--job-id", "low"],
        &format!(
            "{}; i=0; while [ $i -lt 20 ]; do i=$((i+1)); sleep 0.01; done; echo low-$i",
            hold(&dir, "low")
        ),
    );
    assert!(up(&dir, "low"));
    let high = d.run_sh(
        &["--cpus", "2", "--priority", "16", "--job-id", "high"],
        &hold(&dir, "high"),
    );
    assert!(
        up(&dir, "high"),
        "the priority-16 job did not start: {}",
        d.status()
    );
    let l = job(&d, "low").unwrap();
    assert_eq!(l["state"], "frozen", "{l}");
    assert!(
        l["reason"]
            .as_str()
            .unwrap()
            .contains("preempted by job high"),
        "{l}"
    );
    assert!(frozen(&d, "job-low"), "job-low not frozen: {}", d.status());
    assert_eq!(job(&d, "high").unwrap()["cpus"], d.pool().to_string());
    go(&dir, "low"); // it cannot see this while frozen
    go(&dir, "high");
    let out = output(high).ok().stdout();
    assert_eq!(out.trim(), "high-done");
    // The displaced job gets its CPUs back and finishes with the right output.
    let out = output(low).ok().stdout();
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["low-done", "low-20"]
    );
}

#[test]
fn a_job_that_finds_no_free_cpus_backfills_in_the_idle_class_and_is_promoted() {
    require_root!();
    let d = daemon!("vcpus = 4");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--job-id", "a"], &hold(&dir, "a"));
    let b = d.run_sh(&["--job-id", "b"], &hold(&dir, "b"));
    assert!(up(&dir, "a") && up(&dir, "b"));
    let c = d.run_sh(&["--job-id", "c"], &hold(&dir, "c"));
    assert!(
        up(&dir, "c"),
        "c did not start as a backfiller: {}",
        d.status()
    );
    assert_eq!(state_of(&d, "c"), "backfill");
    assert_eq!(idle(&d, "c").as_deref(), Some("1"));
    let c_cpus = CpuSet::parse_list(job(&d, "c").unwrap()["cpus"].as_str().unwrap()).unwrap();
    assert_eq!(c_cpus.len(), 1);
    // Primary-only jobs do not backfill: this one waits.
    let p = d.run_sh(&["--job-id", "p", "--primary-only"], &hold(&dir, "p"));
    assert!(wait_state(&d, "p", "queued"));
    // When a primary ends, the backfiller is promoted (the oldest candidate goes first).
    go(&dir, "a");
    output(a).ok();
    assert!(wait_state(&d, "c", "running"), "{}", d.status());
    assert_eq!(idle(&d, "c").as_deref(), Some("0"));
    go(&dir, "b");
    output(b).ok();
    assert!(up(&dir, "p"));
    for t in ["c", "p"] {
        go(&dir, t);
    }
    output(c).ok();
    output(p).ok();
}

#[test]
fn suspend_gives_the_cpus_away_and_resume_waits_for_them() {
    require_root!();
    let d = daemon!("vcpus = 2");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let b = d.run_sh(&["--cpus", "2", "--job-id", "b"], &hold(&dir, "b"));
    assert!(wait_state(&d, "b", "queued"));
    run(d.pjw().args(["suspend", "a"])).ok();
    assert!(frozen(&d, "job-a"), "job-a not frozen: {}", d.status());
    assert!(
        up(&dir, "b"),
        "b did not get the suspended job's cpus: {}",
        d.status()
    );
    assert_eq!(state_of(&d, "a"), "frozen");
    // Resume: a waits for CPUs, thawed only when b is done.
    run(d.pjw().args(["resume", "a"])).ok();
    assert_eq!(state_of(&d, "a"), "frozen");
    let out = run(d.pjw().args(["resume", "b"])).failed();
    assert!(out.stderr().contains("not suspended"), "{}", out.describe());
    go(&dir, "a");
    go(&dir, "b");
    output(b).ok();
    let out = output(a).ok().stdout();
    assert_eq!(out.trim(), "a-done");
}

#[test]
fn an_exclusive_job_waits_for_an_empty_node_and_takes_all_of_it() {
    require_root!();
    let d = daemon!("vcpus = 4");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let x = d.run_sh(
        &["--exclusive", "--job-id", "x"],
        &format!(
            "grep Cpus_allowed_list /proc/self/status; {}",
            hold(&dir, "x")
        ),
    );
    assert!(wait_state(&d, "x", "queued"));
    // Nothing overtakes it, not even as a backfiller.
    let y = d.run_sh(&["--job-id", "y"], &hold(&dir, "y"));
    assert!(wait_state(&d, "y", "queued"));
    go(&dir, "a");
    output(a).ok();
    assert!(up(&dir, "x"));
    assert_eq!(job(&d, "x").unwrap()["cpus"], d.pool().to_string());
    assert_eq!(state_of(&d, "y"), "queued");
    go(&dir, "x");
    go(&dir, "y");
    let out = output(x).ok().stdout();
    let all = d.pool();
    assert!(out.contains(&format!("Cpus_allowed_list:\t{all}")), "{out}");
    output(y).ok();
}

#[test]
fn a_job_waiting_longer_than_the_queue_ttl_fails_clearly() {
    require_root!();
    let d = daemon!("vcpus = 2\nqueue_ttl = 1");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let late = d.run_sh(&["--job-id", "late"], "echo should-not-run");
    let late = output(late).code(125);
    let (out, err) = (late.stdout(), late.stderr());
    assert!(err.contains("expired after waiting"), "{err}");
    assert!(!out.contains("should-not-run"));
    go(&dir, "a");
    output(a).ok();
}

#[test]
fn raising_a_queued_jobs_priority_moves_it_ahead() {
    require_root!();
    let d = daemon!("vcpus = 2\nhard_preemption = false");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let first = d.run_sh(&["--cpus", "2", "--job-id", "first"], &hold(&dir, "first"));
    assert!(wait_state(&d, "first", "queued"));
    let second = d.run_sh(
        &["--cpus", "2", "--job-id", "second"],
        &hold(&dir, "second"),
    );
    assert!(wait_state(&d, "second", "queued"));
    let reason = job(&d, "second").unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("behind job first"), "{reason}");
    run(d.pjw().args(["priority", "second", "12"])).ok();
    run(d.pjw().args(["priority", "second", "17"])).failed();
    go(&dir, "a");
    output(a).ok();
    assert!(up(&dir, "second"));
    assert_eq!(state_of(&d, "first"), "queued");
    go(&dir, "second");
    go(&dir, "first");
    output(second).ok();
    output(first).ok();
}

#[test]
fn frozen_and_backfill_roles_and_the_queue_survive_a_daemon_crash() {
    require_root!();
    let mut d = daemon!("vcpus = 3");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--job-id", "a"], &hold(&dir, "a"));
    let b = d.run_sh(&["--job-id", "b"], &hold(&dir, "b"));
    assert!(up(&dir, "a") && up(&dir, "b"));
    let c = d.run_sh(&["--job-id", "c"], &hold(&dir, "c"));
    assert!(up(&dir, "c"));
    assert_eq!(state_of(&d, "c"), "backfill");
    let q = d.run_sh(&["--job-id", "q"], &hold(&dir, "q"));
    assert!(wait_state(&d, "q", "queued"));
    run(d.pjw().args(["suspend", "b"])).ok();
    // b's CPU went to the backfiller c (promoted); q started as a backfiller.
    assert!(wait_state(&d, "c", "running"));
    assert!(up(&dir, "q"));

    d.kill9();
    d.restart();
    assert_eq!(state_of(&d, "a"), "running");
    assert_eq!(state_of(&d, "b"), "frozen");
    assert!(frozen(&d, "job-b"), "job-b not frozen: {}", d.status());
    assert_eq!(state_of(&d, "c"), "running");
    assert_eq!(state_of(&d, "q"), "backfill");
    for t in ["a", "c", "q"] {
        go(&dir, t);
    }
    for ch in [a, c, q] {
        output(ch).ok();
    }
    run(d.pjw().args(["resume", "b"])).ok();
    go(&dir, "b");
    output(b).ok();
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || d.status()
        ["jobs"]
        .as_array()
        .unwrap()
        .is_empty()));
}

/// With `kill_leftovers = false` a job whose main process exited lasts, CPUs and all, until its
/// last process exits: the next job waits for the leftovers, it does not run beside them.
#[test]
fn leftovers_keep_the_cpus_until_they_exit_when_not_killed() {
    require_root!();
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!(
            "{}vcpus = 1\n[job]\nkill_leftovers = false\n",
            one_cpu_config()
        ),
    );
    let dir = d.dir().to_path_buf();
    let leftover = format!(
        "(while [ ! -e {d}/left.go ]; do sleep 0.02; done; touch {d}/left.done) >/dev/null 2>&1 & exit 0",
        d = dir.display()
    );
    let a = d.run_sh(&["--job-id", "a"], &leftover);
    output(a).ok();
    // a's main process is gone, its leftover runs on: a still holds CPU 1.
    let b = d.run_sh(
        &["--job-id", "b"],
        &format!(
            "if [ -e {d}/left.done ]; then echo after; else echo beside; fi; {}",
            hold(&dir, "b"),
            d = dir.display()
        ),
    );
    assert!(
        wait_state(&d, "b", "queued"),
        "b did not wait: {}",
        state_of(&d, "b")
    );
    assert!(!dir.join("b.up").exists());
    go(&dir, "left");
    assert!(up(&dir, "b"), "b did not start after the leftover exited");
    go(&dir, "b");
    let out = output(b).ok().stdout();
    assert!(out.starts_with("after"), "b ran beside a's leftover: {out}");
}

/// Against work outside pjw, the jobs together weigh as many busy processes as the pool has
/// CPUs (the parent's `cpu.shares` / `cpu.weight`), not as one.
#[test]
fn the_job_partition_weighs_as_many_cpus_as_the_pool() {
    require_root!();
    let d = daemon!("");
    let mut seen = 0;
    for (key, dir) in d.driver().parent_dirs() {
        for (file, want) in [("cpu.shares", "2048"), ("cpu.weight", "200")] {
            let f = dir.join(file);
            if f.exists() {
                let got = std::fs::read_to_string(&f).unwrap();
                assert_eq!(got.trim(), want, "{key}: {}", f.display());
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "no cpu controller below the parent");
}

/// The directory job `name`'s cpuset will have: in the hierarchy whose parent has
/// `cpuset.cpus` (v1 cpuset or cgroup2).
fn cpuset_dir(d: &TestDaemon, name: &str) -> PathBuf {
    d.driver()
        .job_dirs(name)
        .into_iter()
        .map(|(_, dir)| dir)
        .find(|dir| dir.parent().is_some_and(|p| p.join("cpuset.cpus").exists()))
        .unwrap_or_else(|| panic!("no cpuset hierarchy for {name}"))
}

fn gone(d: &TestDaemon, name: &str) -> bool {
    TestDaemon::wait_for(Duration::from_secs(20), || {
        d.driver()
            .job_dirs(name)
            .iter()
            .all(|(_, dir)| !dir.exists())
    })
}

/// Decision (cm): a queued job waits in its own cgroups, its client in them; its start only
/// narrows the cpuset, before the client is told, so its command is confined from its first
/// instruction: the CPUs it may run on and its cgroup's cpuset, read first thing, are its own.
#[test]
fn a_queued_job_waits_in_its_cgroups_and_its_command_is_confined_from_its_first_instruction() {
    require_root!();
    let d = daemon!("vcpus = 2");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    // b's cgroup exists while it waits (made for it), so its command can name its cpuset.
    let b = d.run_sh(
        &["--cpus", "1", "--job-id", "b"],
        &format!(
            "grep Cpus_allowed_list /proc/self/status; echo cpuset $(cat {}/cpuset.cpus); {}",
            cpuset_dir(&d, "job-b").display(),
            hold(&dir, "b")
        ),
    );
    assert!(wait_state(&d, "b", "queued"));
    // Waiting: its client (the `pjw run` process) is in b's cgroups, on the pool's CPUs.
    let procs = d.driver().procs("job-b").expect("job-b's processes");
    assert_eq!(procs, vec![b.id()], "{}", d.status());
    assert_eq!(
        d.driver().job_cpus("job-b").expect("job-b's cpuset"),
        d.pool()
    );
    assert!(!dir.join("b.up").exists());
    go(&dir, "a");
    output(a).ok();
    assert!(up(&dir, "b"));
    let cpus = job(&d, "b").unwrap()["cpus"].as_str().unwrap().to_string();
    assert_eq!(cpus.parse::<CpuSet>().unwrap().len(), 1, "{cpus}");
    go(&dir, "b");
    let out = output(b).ok().stdout();
    assert!(
        out.contains(&format!("Cpus_allowed_list:\t{cpus}\n")),
        "{out}"
    );
    assert!(out.contains(&format!("cpuset {cpus}\n")), "{out}");
    assert!(gone(&d, "job-b"));
}

/// A queued job withdrawn by `pjw kill`, or whose client the user kills, leaves no cgroup and
/// no process; the running job keeps its CPUs.
#[test]
fn a_queued_job_killed_or_whose_client_is_killed_leaves_no_cgroup() {
    require_root!();
    let d = daemon!("vcpus = 2");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let b = d.run_sh(&["--job-id", "b"], "echo should-not-run");
    let mut c = d.run_sh(&["--job-id", "c"], "echo should-not-run");
    assert!(wait_state(&d, "b", "queued") && wait_state(&d, "c", "queued"));
    assert_eq!(d.driver().procs("job-b").expect("job-b"), vec![b.id()]);
    assert_eq!(d.driver().procs("job-c").expect("job-c"), vec![c.id()]);

    run(d.pjw().args(["kill", "b"])).ok();
    let b = output(b).failed();
    assert!(!b.stdout().contains("should-not-run"));
    assert!(b.stderr().contains("killed while queued"), "{}", b.stderr());
    assert!(gone(&d, "job-b"), "job-b left behind");

    c.kill().expect("kill c's client");
    c.wait().expect("reap c's client");
    assert!(wait_state(&d, "c", "gone"));
    assert!(gone(&d, "job-c"), "job-c left behind");

    assert_eq!(state_of(&d, "a"), "running");
    go(&dir, "a");
    output(a).ok();
}

/// The daemon killed -9 while a job waits in its cgroups: after the restart it is still a
/// queued job (not taken for a running one, not adopted), its client takes its place back
/// and it starts confined when the CPUs free.
#[test]
fn a_job_waiting_in_its_cgroups_stays_queued_across_a_daemon_crash() {
    require_root!();
    let mut d = daemon!("vcpus = 2");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "a"], &hold(&dir, "a"));
    assert!(up(&dir, "a"));
    let q = d.run_sh(
        &["--cpus", "1", "--job-id", "q"],
        &format!(
            "grep Cpus_allowed_list /proc/self/status; {}",
            hold(&dir, "q")
        ),
    );
    assert!(wait_state(&d, "q", "queued"));
    assert_eq!(d.driver().procs("job-q").expect("job-q"), vec![q.id()]);

    d.kill9();
    d.restart();
    assert_eq!(state_of(&d, "q"), "queued", "{}", d.status());
    assert_eq!(state_of(&d, "a"), "running");
    assert!(!dir.join("q.up").exists());
    go(&dir, "a");
    output(a).ok();
    assert!(
        up(&dir, "q"),
        "q did not start after the restart: {}",
        d.status()
    );
    let cpus = job(&d, "q").unwrap()["cpus"].as_str().unwrap().to_string();
    go(&dir, "q");
    let out = output(q).ok().stdout();
    assert!(
        out.contains(&format!("Cpus_allowed_list:\t{cpus}\n")),
        "{out}"
    );
    assert!(gone(&d, "job-q"));
}
