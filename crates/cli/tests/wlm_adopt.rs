//! Root tests of workload-manager jobs against a real daemon and real cgroups, without a
//! manager: `pjw job register|end` as the manager's hooks call them, and adoption of a process
//! started outside pjw that names the job in its environment (as an ssh-launched MPI rank or a
//! task forked by slurmstepd does). The live Slurm and Grid Engine tests are in wlm_live.rs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pjw_core::CpuSet;
use pjw_testkit::{require_root, TestDaemon};

const CONFIG: &str = "cpus = \"0-1\"\n[adopt]\nsweep_interval_ms = 50\n";

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn job<'a>(st: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    st["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id))
}

/// The pjw job cgroup `pid` is in, if any (by its /proc/PID/cgroup).
fn job_of(d: &TestDaemon, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    d.driver()
        .job_of(&pjw_kernelfs::proc_cgroup::parse(&text).ok()?)
}

/// `env VAR=ID setsid sleep 600`, started by the test outside every job.
fn outsider(var: &str, id: &str) -> Child {
    Command::new("setsid")
        .args(["sleep", "600"])
        .env(var, id)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn setsid sleep")
}

/// Poll (every 100 µs) until `pid` is in job cgroup `name`; the time since the call.
fn moved_within(d: &TestDaemon, pid: u32, name: &str, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let dirs = d.driver().job_dirs(name);
    let procs = dirs
        .iter()
        .find(|(k, _)| k == "unified" || k.contains("cpuset"))
        .map(|(_, p)| p.join("cgroup.procs"))?;
    let want = pid.to_string();
    while t0.elapsed() < limit {
        if std::fs::read_to_string(&procs)
            .map(|t| t.lines().any(|l| l == want))
            .unwrap_or(false)
        {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    None
}

fn cgroups_exist(d: &TestDaemon, name: &str) -> bool {
    d.driver()
        .job_dirs(name)
        .iter()
        .any(|(_, p)| Path::new(p).exists())
}

#[test]
fn registered_job_holds_cpus_adopts_its_processes_and_ends() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), CONFIG);
    let out = d
        .pjw()
        .args([
            "job", "register", "--wlm", "slurm", "-j", "9101", "-u", "root", "-c", "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("job slurm:9101 registered on cpus"));
    let st = d.status();
    let j = job(&st, "slurm:9101").expect("registered job listed");
    assert_eq!(j["wlm"], j["id"], "a registered job's id is its tag");
    assert_eq!(j["state"], "running");
    assert_eq!(j["procs"], 0);
    let cpus = CpuSet::parse_list(j["cpus"].as_str().unwrap()).unwrap();
    assert_eq!(cpus.len(), 1);
    // Held while empty: still there after several sweeps.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        job(&d.status(), "slurm:9101").is_some(),
        "an empty registered job must be held"
    );
    assert!(cgroups_exist(&d, "job-slurm:9101"));

    // A process of the job started outside it is adopted; one of an unknown job is not.
    let t0 = Instant::now();
    let mut mine = outsider("SLURM_JOB_ID", "9101");
    let mut stranger = outsider("SLURM_JOB_ID", "424242");
    assert!(
        TestDaemon::wait_for(Duration::from_secs(10), || job_of(&d, mine.id()).as_deref()
            == Some("job-slurm:9101")),
        "process naming job 9101 was not adopted:\n{}",
        d.log()
    );
    eprintln!(
        "adoption latency (spawn to moved, sweep every 50 ms): {:?}",
        t0.elapsed()
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", mine.id())).unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| CpuSet::parse_list(v.trim()).unwrap())
        .unwrap();
    assert_eq!(allowed, cpus, "the adopted process runs on the job's cpus");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        job_of(&d, stranger.id()),
        None,
        "unknown job id must be left alone"
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(5), || d
            .log()
            .contains("process of an unknown job left alone")),
        "unknown job id not logged:\n{}",
        d.log()
    );
    assert_eq!(job(&d.status(), "slurm:9101").unwrap()["procs"], 1);

    // The epilog's end: the adopted process is killed, the cgroups are gone when it answers.
    let out = d.pjw().args(["job", "end", "slurm:9101"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !cgroups_exist(&d, "job-slurm:9101"),
        "cgroups left after end"
    );
    assert!(job(&d.status(), "slurm:9101").is_none());
    let st = mine.wait().unwrap();
    assert!(!st.success(), "adopted process should have been killed");
    // Ending it again is not an error (the epilog may run for a job never registered).
    let out = d.pjw().args(["job", "end", "slurm:9101"]).output().unwrap();
    assert!(out.status.success());
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[test]
fn registered_job_survives_a_daemon_crash_and_bad_registrations_are_refused() {
    require_root!();
    let mut d = TestDaemon::start(&pjw_bin(), CONFIG);
    let reg = |d: &TestDaemon, args: &[&str]| {
        d.pjw()
            .args(["job", "register", "--wlm", "slurm"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = reg(&d, &["-j", "55", "-u", "root", "-c", "1", "-m", "256M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (args, want) in [
        (&["-j", "55", "-u", "root", "-c", "1"][..], "already in use"),
        (
            &["-j", "56", "-u", "no-such-user-pjw", "-c", "1"][..],
            "no user",
        ),
        (&["-j", "57", "-u", "root", "-c", "64"][..], "cpus"),
        (&["-j", "../x", "-u", "root", "-c", "1"][..], "job id"),
    ] {
        let out = reg(&d, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    }
    d.restart();
    let st = d.status();
    let j = job(&st, "slurm:55").expect("held job recovered after a crash");
    assert_eq!(j["wlm"], j["id"], "a registered job's id is its tag");
    assert_eq!(j["mem"], 256u64 << 20);
    let out = d.pjw().args(["job", "end", "slurm:55"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!cgroups_exist(&d, "job-slurm:55"));
}

#[test]
fn attached_registration_runs_the_command_inside_and_ends_with_it() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), CONFIG);
    let out = d
        .pjw()
        .args([
            "job", "register", "--wlm", "sge", "-j", "77", "-u", "nobody", "-c", "1", "--",
        ])
        .args(["sh", "-c", "cat /proc/self/cgroup; echo pid=$$"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("/job-sge:77"), "not inside its job: {text}");
    assert!(
        TestDaemon::wait_for(Duration::from_secs(10), || job(&d.status(), "sge:77")
            .is_none()),
        "job did not end with its command"
    );
    assert!(!cgroups_exist(&d, "job-sge:77"));
    assert!(
        d.log().contains("user=nobody") || d.log().contains("user=\"nobody\""),
        "{}",
        d.log()
    );
}

/// With the sweep off, exec events alone adopt a process: the figure printed is the time from
/// spawning it to finding it moved (measured, not asserted).
#[test]
fn exec_events_adopt_without_the_sweep() {
    require_root!();
    let d = TestDaemon::start(
        &pjw_bin(),
        "cpus = \"0-1\"\n[adopt]\nsweep_interval_ms = 0\n",
    );
    let out = d
        .pjw()
        .args([
            "job", "register", "--wlm", "slurm", "-j", "31", "-u", "root", "-c", "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut times = Vec::new();
    let mut kids = Vec::new();
    for _ in 0..5 {
        // spawn() returns once the child has exec'd: the figure is exec to moved.
        let c = outsider("SLURM_JOB_ID", "31");
        let pid = c.id();
        kids.push(c);
        times.push(
            moved_within(&d, pid, "job-slurm:31", Duration::from_secs(10))
                .unwrap_or_else(|| panic!("not adopted from its exec event:\n{}", d.log())),
        );
    }
    assert!(d.log().contains("via=\"exec\""), "{}", d.log());
    eprintln!("adoption latency from exec events, spawn to moved: {times:?}");
    let out = d.pjw().args(["job", "end", "slurm:31"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for mut c in kids {
        let _ = c.wait();
    }
}
