//! Root integration tests: a real daemon, real cgroups (below this test's own cgroup), real jobs.
//!
//! Each test starts its own daemon through `pjw_testkit::TestDaemon`, whose drop kills whatever
//! the test left and removes the cgroups even when an assertion fails. Waits have generous
//! bounds: they check that something happens, never how fast.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use pjw_core::CpuSet;
use pjw_testkit::job::{describe, run, wait};
use pjw_testkit::machine::{allowed_cpus, nobody};
use pjw_testkit::{require_root, TestDaemon};

/// A daemon configuration with exactly two CPUs for jobs (the first two this process may use),
/// whatever the machine (the guests have 16); on a machine with one CPU the test is skipped.
macro_rules! two_cpus {
    () => {
        format!("cpus = \"{}\"", pjw_testkit::need_cpus!(2))
    };
}

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn wl() -> PathBuf {
    // pjw-wl is built into the same target directory by `make test`.
    let p = pjw_bin().with_file_name("pjw-wl");
    assert!(
        p.exists(),
        "pjw-wl not built at {} (run `cargo build -p pjw-workloads`)",
        p.display()
    );
    p
}

fn wait_file(p: &Path) -> String {
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || p.exists()),
        "{} never appeared",
        p.display()
    );
    // Written with a single shell redirection; wait until it is complete.
    let mut text = String::new();
    let whole = TestDaemon::wait_for(Duration::from_secs(20), || {
        text = std::fs::read_to_string(p).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(whole, "{} stayed incomplete: {text:?}", p.display());
    text
}

/// `Cpus_allowed_list` of a task, from /proc.
fn allowed(path: &Path) -> CpuSet {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| CpuSet::parse_list(v.trim()).unwrap())
        .unwrap_or_default()
}

fn touch(p: &Path) {
    std::fs::write(p, "").unwrap();
}

fn jobs(status: &serde_json::Value) -> Vec<serde_json::Value> {
    status["jobs"].as_array().cloned().unwrap_or_default()
}

fn job_cpus(status: &serde_json::Value, id: &str) -> Option<CpuSet> {
    jobs(status)
        .iter()
        .find(|j| j["id"] == id)
        .map(|j| CpuSet::parse_list(j["cpus"].as_str().unwrap()).unwrap())
}

/// A job script that records its CPUs and waits for a go file.
fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "grep Cpus_allowed_list /proc/self/status > {d}/{tag}.cpus; while [ ! -e {d}/{tag}.go ]; do sleep 0.02; done",
        d = dir.display()
    )
}

/// What a finished job printed.
struct Ended {
    code: i32,
    stdout: String,
    stderr: String,
    /// Status, stdout and stderr, for messages.
    desc: String,
}

impl Ended {
    /// Assert the job exited 0.
    #[track_caller]
    fn ok(self) -> Ended {
        assert_eq!(self.code, 0, "{}", self.desc);
        self
    }
}

/// Wait for a `pjw run` client (bounded: a hung job fails the test instead of hanging it).
fn finish(mut c: Child) -> Ended {
    use std::io::Read;
    let mut status = None;
    TestDaemon::wait_for(Duration::from_secs(60), || {
        status = c.try_wait().ok().flatten();
        status.is_some()
    });
    let st = match status {
        Some(s) => s,
        None => {
            let _ = c.kill();
            c.wait().expect("wait")
        }
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let desc = describe(
        "pjw run",
        &std::process::Output {
            status: st,
            stdout: stdout.clone().into_bytes(),
            stderr: stderr.clone().into_bytes(),
        },
    );
    Ended {
        code: st.code().unwrap_or(-1),
        stdout,
        stderr,
        desc,
    }
}

#[test]
fn two_single_cpu_jobs_are_disjoint_and_a_two_cpu_job_waits_for_both() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "1", "--job-id", "a"], &hold(&dir, "a"));
    let b = d.run_sh(&["--cpus", "1", "--job-id", "b"], &hold(&dir, "b"));
    let ca = allowed(&dir.join("a.cpus"));
    let _ = wait_file(&dir.join("a.cpus"));
    let _ = wait_file(&dir.join("b.cpus"));
    let ca = if ca.is_empty() {
        allowed(&dir.join("a.cpus"))
    } else {
        ca
    };
    let cb = allowed(&dir.join("b.cpus"));
    assert_eq!(ca.len(), 1, "job a allowed {ca}");
    assert_eq!(cb.len(), 1, "job b allowed {cb}");
    assert!(!ca.intersects(&cb), "a {ca} and b {cb} overlap");

    let c = d.run_sh(
        &["--cpus", "2", "--job-id", "c"],
        &format!(
            "grep Cpus_allowed_list /proc/self/status > {}/c.cpus",
            dir.display()
        ),
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || jobs(&d.status())
            .iter()
            .any(|j| j["id"] == "c" && j["state"] == "queued")),
        "job c not queued: {}",
        d.status()
    );
    touch(&dir.join("a.go"));
    finish(a).ok();
    // One CPU is free now, but c needs two: it keeps waiting.
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || d.status()
        ["free_cpus"]
        .as_str()
        .map(|s| CpuSet::parse_list(s).unwrap().len())
        == Some(1)));
    assert!(!dir.join("c.cpus").exists(), "c started with one cpu free");
    assert_eq!(
        jobs(&d.status()).iter().find(|j| j["id"] == "c").unwrap()["state"],
        "queued"
    );
    touch(&dir.join("b.go"));
    finish(b).ok();
    let Ended {
        code, stderr: err, ..
    } = finish(c);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("queued"),
        "c did not say it was queued: {err:?}"
    );
    assert_eq!(
        err.matches("queued").count(),
        1,
        "said queued more than once: {err:?}"
    );
    assert_eq!(allowed(&dir.join("c.cpus")), ca.union(&cb));
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .is_empty()));
}

#[test]
fn daemonized_children_and_threads_stay_jailed_and_die_with_the_job() {
    require_root!();
    // `status` tells the sampler's last figures: a sample every second here.
    let d = TestDaemon::start(pjw_bin(), "[profile]\ninterval = \"1s\"\n");
    let dir = d.dir().to_path_buf();
    let pidfile = dir.join("escapee.pid");
    // The job double-forks a setsid daemon running 16 threads, starts 8 threads itself, and
    // ends when the go file appears.
    let script = format!(
        "( setsid {wl} threads 16 600 {pid} </dev/null >/dev/null 2>&1 & ) ; {wl} threads 8 600 </dev/null >/dev/null 2>&1 & while [ ! -e {d}/go ]; do sleep 0.02; done",
        wl = wl().display(),
        pid = pidfile.display(),
        d = dir.display()
    );
    let job = d.run_sh(&["--cpus", "1", "--job-id", "esc"], &script);
    let escapee: i32 = wait_file(&pidfile).trim().parse().unwrap();
    let drv = d.driver();
    let cpus = drv.job_cpus("job-esc").unwrap();
    assert_eq!(cpus.len(), 1);
    // Every thread of every process of the job is confined to the job's CPU.
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || drv
        .thread_count("job-esc")
        .unwrap_or(0)
        >= 24 + 3));
    let procs = drv.procs("job-esc").unwrap();
    assert!(
        procs.contains(&(escapee as u32)),
        "setsid daemon {escapee} is not in the job cgroup"
    );
    let mut threads = 0;
    for p in &procs {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let a = allowed(&t.path().join("status"));
            if a.is_empty() {
                continue; // exited meanwhile
            }
            assert_eq!(
                a,
                cpus,
                "task {} of pid {p} is allowed {a}, job has {cpus}",
                t.path().display()
            );
            threads += 1;
        }
    }
    assert!(threads >= 24, "only {threads} threads seen");
    // A sample taken after the threads started shows them all (the process count is the
    // process events' own, at once where they arrive).
    let mut me = serde_json::Value::Null;
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || {
            me = jobs(&d.status())
                .into_iter()
                .find(|j| j["id"] == "esc")
                .unwrap_or_default();
            me["procs"].as_u64().unwrap_or(0) >= 3 && me["threads"].as_u64().unwrap_or(0) >= 24
        }),
        "{me}"
    );

    touch(&dir.join("go"));
    let Ended {
        code, stderr: err, ..
    } = finish(job);
    assert_eq!(code, 0, "{err}");
    // The setsid daemon does not survive the job, and the job's cgroups go away.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || !Path::new(&format!(
            "/proc/{escapee}"
        ))
        .exists()
            || std::fs::read_to_string(format!("/proc/{escapee}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)),
        "setsid daemon {escapee} survived the job"
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || drv
            .list_jobs()
            .unwrap()
            .is_empty()),
        "job cgroup left behind"
    );
    assert!(jobs(&d.status()).is_empty());
}

#[test]
fn kill_9_of_the_daemon_loses_nothing_and_gives_no_cpu_twice() {
    require_root!();
    let mut d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "1", "--job-id", "a"], &hold(&dir, "a"));
    let b = d.run_sh(&["--cpus", "1", "--job-id", "b"], &hold(&dir, "b"));
    wait_file(&dir.join("a.cpus"));
    wait_file(&dir.join("b.cpus"));
    let before = d.status();
    let (ca, cb) = (
        job_cpus(&before, "a").unwrap(),
        job_cpus(&before, "b").unwrap(),
    );

    d.kill9();
    // The jobs keep running, confined, while there is no daemon.
    assert!(d.driver().is_populated("job-a").unwrap());
    d.restart();
    let after = d.status();
    assert_eq!(job_cpus(&after, "a"), Some(ca), "{after}");
    assert_eq!(job_cpus(&after, "b"), Some(cb), "{after}");
    assert_eq!(after["free_cpus"], "");

    // A new job must not get their CPUs: it waits.
    let c = d.run_sh(
        &["--cpus", "1", "--job-id", "c"],
        &format!(
            "grep Cpus_allowed_list /proc/self/status > {}/c.cpus",
            dir.display()
        ),
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .iter()
    .any(|j| j["id"] == "c" && j["state"] == "queued")));
    assert!(!dir.join("c.cpus").exists());
    // When a ends, its CPU goes to c (the recovered job is watched by pidfd again).
    touch(&dir.join("a.go"));
    let Ended {
        code, stderr: cerr, ..
    } = finish(c);
    assert_eq!(code, 0, "{cerr}");
    assert_eq!(allowed(&dir.join("c.cpus")), ca);
    touch(&dir.join("b.go"));
    finish(a).ok();
    finish(b).ok();
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || {
        let s = d.status();
        jobs(&s).is_empty()
            && CpuSet::parse_list(s["free_cpus"].as_str().unwrap())
                .unwrap()
                .len()
                == 2
    }));
    assert!(
        d.driver().list_jobs().unwrap().is_empty(),
        "cgroups left: {:?}",
        d.driver().list_jobs()
    );
}

#[test]
fn jobs_that_end_while_the_daemon_is_down_are_cleaned_up_at_restart() {
    require_root!();
    let mut d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "gone"], &hold(&dir, "a"));
    wait_file(&dir.join("a.cpus"));
    d.kill9();
    touch(&dir.join("a.go"));
    finish(a).ok();
    d.restart();
    let s = d.status();
    assert!(jobs(&s).is_empty(), "{s}");
    assert_eq!(
        CpuSet::parse_list(s["free_cpus"].as_str().unwrap())
            .unwrap()
            .len(),
        2
    );
    assert!(d.driver().list_jobs().unwrap().is_empty());
}

/// The daemon removes an ended job's cgroups on a blocking thread after recording its end
/// (decision (ck)): a `kill -9` in between leaves them, empty, with the job `ended`. Here the
/// job ran to its end, then its directories are made again in every hierarchy as such a crash
/// would have left them: the restarted daemon removes them and adopts nothing.
#[test]
fn an_ended_jobs_cgroups_left_by_a_crash_before_their_removal_are_removed_at_restart() {
    require_root!();
    let mut d = TestDaemon::start(pjw_bin(), &two_cpus!());
    run(d
        .pjw()
        .args(["run", "-q", "--job-id", "left", "--", "true"]))
    .code(0);
    d.kill9();
    let mems = std::fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|t| CpuSet::parse_list(t.trim()).ok())
        .unwrap_or_else(|| CpuSet::parse_list("0").unwrap());
    let cpus = pjw_testkit::need_cpus!(2);
    let limits = pjw_cgroup::JobLimits {
        cpus,
        mems,
        memory_max: None,
        pids_max: None,
        swap_max: None,
        io: Default::default(),
    };
    d.driver()
        .create_job("job-left", &limits)
        .expect("the leftover cgroups");
    assert_eq!(d.driver().list_jobs().unwrap(), ["job-left"]);
    d.restart();
    let s = d.status();
    assert!(jobs(&s).is_empty(), "{s}");
    assert!(
        d.driver().list_jobs().unwrap().is_empty(),
        "cgroups left: {:?}\n{}",
        d.driver().list_jobs(),
        d.log()
    );
}

#[test]
fn a_client_queued_when_the_daemon_dies_is_served_after_the_restart() {
    require_root!();
    let mut d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "big"], &hold(&dir, "a"));
    wait_file(&dir.join("a.cpus"));
    let q = d.run_sh(&["--cpus", "1", "--job-id", "waiter"], "echo served");
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .iter()
    .any(|j| j["id"] == "waiter")));
    d.kill9();
    d.restart();
    touch(&dir.join("a.go"));
    finish(a).ok();
    let q = finish(q).ok();
    assert!(q.stdout.contains("served"), "{}", q.stdout);
}

#[test]
fn exit_status_memory_limit_and_environment_reach_the_command() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    run(d.pjw().args(["run", "--", "sh", "-c", "exit 7"])).code(7);
    let out = run(d.pjw().args(["run", "--", "/nonexistent/cmd"])).code(127);
    assert!(
        out.stderr().contains("command not found"),
        "{}",
        out.describe()
    );
    // The memory limit is set on the job's own memory cgroup.
    let script = r#"p=$(grep -E '^[0-9]+:(memory|):' /proc/self/cgroup | head -1 | cut -d: -f3-)
        for f in /sys/fs/cgroup/memory$p/memory.limit_in_bytes /sys/fs/cgroup$p/memory.max; do [ -r $f ] && cat $f && break; done
        echo "$PJW_JOB_ID $PJW_CPUS""#;
    let out = run(d.pjw().args([
        "run", "--mem", "64M", "--job-id", "memjob", "--", "sh", "-c", script,
    ]))
    .ok();
    let text = out.stdout();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("67108864"), "{text}");
    let env = lines.next().unwrap_or_default();
    assert!(env.starts_with("memjob "), "{env}");
}

#[test]
fn bad_input_gets_one_line_errors_and_the_daemon_survives() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    let pool = d.pool();
    let too_many = (pool.len() + 1).to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--cpus", "0", "--", "true"], "at least 1"),
        (
            &["run", "--cpus", &too_many, "--", "true"],
            "more than this node has",
        ),
        (&["run", "--mem", "12Q", "--", "true"], "invalid size"),
        (&["run", "--job-id", "a/b", "--", "true"], "invalid job id"),
        (&["kill", "nosuchjob"], "no job nosuchjob"),
    ];
    for (args, want) in cases {
        let out = run(d.pjw().args(*args)).failed();
        let err = out.stderr();
        assert!(err.contains(want), "{args:?}: {err:?}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err:?}"
        );
    }
    // Raw garbage on the socket: malformed, oversized, unknown, truncated, silent.
    use std::io::{Read, Write};
    let frames: Vec<Vec<u8>> = vec![
        [&9u32.to_be_bytes()[..], b"not json!"].concat(),
        (u32::MAX).to_be_bytes().to_vec(),
        [
            &40u32.to_be_bytes()[..],
            br#"{"v":1,"req":{"type":"format_disk"}}"#,
        ]
        .concat(),
        [
            &30u32.to_be_bytes()[..],
            br#"{"v":9,"req":{"type":"status"}}"#,
        ]
        .concat(),
        [&100u32.to_be_bytes()[..], b"{}"].concat(),
    ];
    for f in frames {
        let mut s = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(&f);
        if f.len() == 102 {
            // Truncated frame: close our side; the daemon must not hang on it.
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
    }
    // A silent client does not block others.
    let _silent = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
    let st = d.status();
    assert_eq!(st["total_cpus"], pool.len());
    assert_eq!(pool, allowed_cpus());
    run(d.pjw().args(["run", "--", "true"])).ok();
}

#[test]
fn a_user_cannot_kill_another_users_job() {
    require_root!();
    let nb = nobody();
    let d = TestDaemon::start(pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    // Let the unprivileged user reach the socket.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = d.run_sh(&["--cpus", "1", "--job-id", "roots"], &hold(&dir, "a"));
    wait_file(&dir.join("a.cpus"));
    // nobody's real and effective ids, no supplementary groups (std drops them when root
    // sets a uid), as setpriv --reuid --regid --clear-groups would (busybox's cannot).
    let as_nobody = |args: &[&str]| {
        use std::os::unix::process::CommandExt;
        run(Command::new(pjw_bin())
            .uid(nb.uid)
            .gid(nb.gid)
            .args(args)
            .env("PJW_SOCKET", d.socket())
            .current_dir("/"))
    };
    let out = as_nobody(&["kill", "roots"]).failed();
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("belongs to {}", pjw_testkit::machine::me().name)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        jobs(&d.status()).iter().any(|j| j["id"] == "roots"),
        "job was killed"
    );
    // nobody can run a job of its own and see it by its user.
    let out = as_nobody(&["run", "--job-id", "nob", "--", "id", "-u"]).ok();
    assert_eq!(out.stdout().trim(), nb.uid.to_string());
    // root may kill anyone's job; the job's processes die.
    run(d.pjw().args(["kill", "roots"])).ok();
    let a = finish(a);
    assert_ne!(a.code, 0, "killed job exited 0: {}", a.desc);
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .is_empty()));
    // The store says how each job ended.
    let store = pjw_store::Store::open_file(&dir.join("state/pjw.db")).unwrap();
    let rec = store.latest_by_id("roots").unwrap().unwrap();
    assert_eq!(
        rec.end_reason,
        Some(format!("killed by {}", pjw_testkit::machine::me().name))
    );
    let rec = store.latest_by_id("nob").unwrap().unwrap();
    assert_eq!(
        (rec.uid, rec.end_reason.as_deref()),
        (nb.uid, Some("exited"))
    );
}

#[test]
fn a_queued_client_that_gives_up_leaves_the_queue() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "2", "--job-id", "big"], &hold(&dir, "a"));
    wait_file(&dir.join("a.cpus"));
    let mut q = d.run_sh(&["--cpus", "1", "--job-id", "impatient"], "true");
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .iter()
    .any(|j| j["id"] == "impatient")));
    q.kill().unwrap();
    wait(q, "the impatient client (killed)").signal(libc::SIGKILL);
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || !jobs(
        &d.status()
    )
    .iter()
    .any(|j| j["id"] == "impatient")));
    // The same id can be used again at once.
    touch(&dir.join("a.go"));
    finish(a).ok();
    run(d.pjw().args(["run", "--job-id", "impatient", "--", "true"])).ok();
}

#[test]
fn status_text_shows_the_table_and_node_map() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), &two_cpus!());
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(
        &["--cpus", "1", "--job-id", "shown", "--name", "demo"],
        &hold(&dir, "a"),
    );
    wait_file(&dir.join("a.cpus"));
    let out = run(d.pjw().arg("status")).ok();
    let text = out.stdout();
    assert!(text.lines().next().unwrap().contains("JOB"), "{text}");
    assert!(
        text.contains("shown") && text.contains("demo") && text.contains("running"),
        "{text}"
    );
    let map = text.lines().find(|l| l.starts_with("node ")).unwrap();
    let inside = &map[map.find('[').unwrap() + 1..map.rfind(']').unwrap()];
    assert_eq!(inside.len(), 2, "{map}");
    assert_eq!(inside.matches('A').count(), 1, "{map}");
    assert_eq!(inside.matches('.').count(), 1, "{map}");
    assert!(text.contains("1 free, 1 allocated"), "{text}");
    touch(&dir.join("a.go"));
    finish(a).ok();
}

#[test]
fn duplicate_live_job_ids_are_refused() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "1", "--job-id", "same"], &hold(&dir, "a"));
    wait_file(&dir.join("a.cpus"));
    let out = run(d.pjw().args(["run", "--job-id", "same", "--", "true"])).code(125);
    assert!(out.stderr().contains("already in use"));
    touch(&dir.join("a.go"));
    finish(a).ok();
}
