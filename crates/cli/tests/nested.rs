//! Root tests of a `pjw run` from inside a job — a step of that job, never a job of its own —
//! and of logins joining a job through `pjw pam-adopt`, against a real daemon and the real
//! cgroupfs (pjw-testkit). The sshd here is a stand-in: a root shell that runs `pjw pam-adopt`
//! with pam_exec's environment, as sshd's privileged process does through pam_exec; the real
//! sshd is the systemd guest's (vm/systemd/guest-ssh.sh). The attacks of docs/security.md J7,
//! U15, U16 and U17 are written here as attacks, run by real unprivileged users.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pjw_core::CpuSet;
use pjw_testkit::job::{run, wait, KillOnDrop};
use pjw_testkit::machine::{allowed_cpus, me, test_user};
use pjw_testkit::{require_root, TestDaemon};

/// Adoption swept every 50 ms.
const CONFIG: &str = "[adopt]\nsweep_interval_ms = 50\n";

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn jobs(st: &serde_json::Value) -> Vec<serde_json::Value> {
    st["jobs"].as_array().cloned().unwrap_or_default()
}

fn job<'a>(st: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    st["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id))
}

/// A daemon whose socket unprivileged users can reach (the temp dir is root's 0700).
fn daemon(extra: &str) -> TestDaemon {
    let d = TestDaemon::start(&pjw_bin(), extra);
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// The job cgroup (name below the parent) `pid` is in, if any.
fn job_of(d: &TestDaemon, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    d.driver()
        .job_of(&pjw_kernelfs::proc_cgroup::parse(&text).ok()?)
}

/// The hierarchies (keys) of job `name` whose `cgroup.procs` lists `pid`, and those that do not.
fn hierarchies_with(d: &TestDaemon, name: &str, pid: u32) -> (Vec<String>, Vec<String>) {
    let want = pid.to_string();
    d.driver()
        .job_dirs(name)
        .into_iter()
        .partition::<Vec<_>, _>(|(_, dir)| {
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .is_ok_and(|t| t.lines().any(|l| l == want))
        })
        .into_map()
}

trait IntoMap {
    fn into_map(self) -> (Vec<String>, Vec<String>);
}

impl IntoMap for (Vec<(String, PathBuf)>, Vec<(String, PathBuf)>) {
    fn into_map(self) -> (Vec<String>, Vec<String>) {
        (
            self.0.into_iter().map(|(k, _)| k).collect(),
            self.1.into_iter().map(|(k, _)| k).collect(),
        )
    }
}

fn allowed_of(pid: u32) -> Option<CpuSet> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| CpuSet::parse_list(v.trim()).ok())
}

fn wait_file(path: &Path) -> String {
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || std::fs::read_to_string(path)
            .is_ok_and(|t| t.ends_with('\n'))),
        "{} was not written",
        path.display()
    );
    std::fs::read_to_string(path).unwrap()
}

fn gone(pid: u32) -> bool {
    // A zombie of ours still has /proc/PID: its state says it is dead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cmd` as `uid` (its own gid, no supplementary groups), set by the kernel before exec.
fn as_user(uid: u32, cmd: &Path) -> Command {
    let mut c = Command::new(cmd);
    c.uid(uid).gid(uid).current_dir("/");
    c
}

/// The issue's case: a process of a registered (workload-manager) job runs `pjw run -c 1`. It
/// stays in the job's cgroups in every hierarchy (so under its cpuset and memory limit), runs
/// on one of the job's CPUs, is listed as a step of the job and never as a job, asking for
/// more CPUs than the job has is a clear error, and the job's end kills it.
#[test]
fn a_registered_jobs_process_running_pjw_run_stays_in_the_job_and_ends_with_it() {
    require_root!();
    let id = pjw_testkit::machine::wlm_job_id(71);
    let tag = format!("slurm:{id}");
    let cg = format!("job-{tag}");
    let d = TestDaemon::start(&pjw_bin(), CONFIG);
    let ncpus = allowed_cpus().len().min(2);
    run(d.pjw().args([
        "job",
        "register",
        "--wlm",
        "slurm",
        "-j",
        &id,
        "-u",
        &me().name,
        "-c",
        &ncpus.to_string(),
        "--mem",
        "256M",
    ]))
    .ok();
    let st = d.status();
    let job_cpus = CpuSet::parse_list(
        job(&st, &tag).expect("registered")["cpus"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    // A task of the job, started outside pjw (as slurmstepd starts it), adopted by its
    // SLURM_JOB_ID; once in, it runs `pjw run` twice: too many CPUs, then one.
    let dir = d.dir();
    let script = format!(
        r#"while [ ! -e {d}/go ]; do sleep 0.02; done
"$PJW" run -c {many} -- true 2> {d}/too-many.err; echo $? > {d}/too-many.rc
exec "$PJW" run -c 1 -- sh -c 'echo $$ > {d}/step.pid; exec sleep 600'"#,
        d = dir.display(),
        many = ncpus + 1
    );
    let task = KillOnDrop::new(
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .env("SLURM_JOB_ID", &id)
            .env("PJW", pjw_bin())
            .env("PJW_SOCKET", d.socket())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the task"),
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || job_of(&d, task.id()).as_deref()
            == Some(cg.as_str())),
        "the task was not adopted:\n{}",
        d.log()
    );
    std::fs::write(dir.join("go"), "").unwrap();
    let rc = wait_file(&dir.join("too-many.rc"));
    let err = std::fs::read_to_string(dir.join("too-many.err")).unwrap_or_default();
    assert_eq!(rc.trim(), "125", "{err}");
    assert!(
        err.contains(&format!("inside job {tag}")) && err.contains(&format!("at most {ncpus}")),
        "{err}"
    );
    let pid: u32 = wait_file(&dir.join("step.pid")).trim().parse().unwrap();
    assert_eq!(
        pid,
        task.id(),
        "pjw run and its command are the task's own process"
    );

    // In the job in every hierarchy the daemon uses, on one of its CPUs, under its limit.
    let (inside, outside) = hierarchies_with(&d, &cg, pid);
    assert!(
        outside.is_empty() && !inside.is_empty(),
        "the step is in the job's cgroups in {inside:?} but not in {outside:?}"
    );
    let allowed = allowed_of(pid).expect("the step's affinity");
    assert!(
        allowed.len() == 1 && allowed.is_subset(&job_cpus),
        "the step runs on {allowed}, not one of the job's cpus {job_cpus}"
    );
    let st = d.status();
    assert_eq!(jobs(&st).len(), 1, "a step is no job: {st:#}");
    let steps = job(&st, &tag).unwrap()["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(steps.len(), 1, "{st:#}");
    assert_eq!(
        (steps[0]["step"].as_u64(), steps[0]["pid"].as_u64()),
        (Some(0), Some(pid as u64))
    );
    assert_eq!(steps[0]["cpus"], allowed.to_string());
    let shown = run(d.pjw().arg("status")).ok().stdout();
    assert!(
        shown.contains(&format!("{tag}: step 0 sh on cpus {allowed}, pid {pid}")),
        "{shown}"
    );
    // The Epilog's end kills the step with the job; no job, no cgroup is left.
    run(d.pjw().args(["job", "end", &tag])).ok();
    wait(task.into_inner(), "the step").signal(libc::SIGKILL);
    assert!(jobs(&d.status()).is_empty());
    assert!(d.driver().job_dirs(&cg).iter().all(|(_, p)| !p.exists()));
    let log = d.log();
    assert!(log.contains(&format!("step started job={tag}")), "{log}");
    assert!(
        log.contains(&format!("step ended job={tag} step=0 pid={pid}"))
            || log.contains("steps ended with their job"),
        "the step did not end with its job (killed):\n{log}"
    );
}

/// A `pjw run` job's command runs `pjw run` twice: the first step's exit status is its own and
/// it ran in the job's cgroup; the second, left running in the background, is killed when the
/// job's main process exits, and the job's client gets the job's status.
#[test]
fn a_nested_run_in_a_run_job_is_a_step_with_its_exit_status_and_dies_with_the_job() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let script = format!(
        r#"cat /proc/self/cgroup > {d}/outer.cg
"$PJW" run -c 1 -- sh -c 'cat /proc/self/cgroup > {d}/inner.cg; echo "inner step $PJW_STEP_ID of $PJW_JOB_ID"; exit 7'
echo "inner-status $?"
"$PJW" run -q -c 1 -- sh -c 'echo $$ > {d}/bg.pid; exec sleep 600' &
while [ ! -e {d}/end ]; do sleep 0.02; done
exit 3"#,
        d = dir.display()
    );
    let client = d
        .pjw()
        .args([
            "run", "-c", "1", "--job-id", "outer", "--", "sh", "-c", &script,
        ])
        .env("PJW", pjw_bin())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pjw run");
    let bg: u32 = wait_file(&dir.join("bg.pid")).trim().parse().unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || {
            let st = d.status();
            jobs(&st).len() == 1
                && job(&st, "outer").is_some_and(|j| {
                    j["steps"]
                        .as_array()
                        .is_some_and(|s| s.len() == 1 && s[0]["pid"] == bg)
                })
        }),
        "the background step is not listed as outer's only step: {:#}",
        d.status()
    );
    assert_eq!(job_of(&d, bg).as_deref(), Some("job-outer"));
    std::fs::write(dir.join("end"), "").unwrap();
    let out = wait(client, "the outer job").code(3);
    let stdout = out.stdout();
    let field = |k: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k:?} in {stdout}"))
            .trim()
            .to_string()
    };
    let outer = std::fs::read_to_string(dir.join("outer.cg")).unwrap();
    assert!(outer.contains("/job-outer\n"), "{outer}");
    let inner = std::fs::read_to_string(dir.join("inner.cg")).unwrap();
    assert_eq!(
        inner, outer,
        "the step is in its job's cgroups, every hierarchy"
    );
    assert_eq!(field("inner "), "step 0 of outer", "{stdout}");
    assert_eq!(field("inner-status "), "7", "{stdout}");
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || gone(bg)),
        "the background step outlived its job"
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || jobs(
        &d.status()
    )
    .is_empty()));
    // The job's report lists both steps: the first with its own status, the second killed
    // (its exit event may come after the job's record on a slow machine: written then).
    let report = || {
        let rep = run(d.pjw().args(["report", "-J", "outer", "--format", "json"]))
            .ok()
            .stdout();
        let rep: serde_json::Value = serde_json::from_str(&rep).unwrap();
        let steps = rep[0]["steps"].as_array().cloned().unwrap_or_default();
        let got: Vec<(u64, i64)> = steps
            .iter()
            .map(|s| {
                (
                    s["step"].as_u64().unwrap(),
                    s["exit_status"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        (got, rep)
    };
    let want = vec![(0, 7), (1, 128 + 9)];
    TestDaemon::wait_for(Duration::from_secs(30), || report().0 == want);
    let (got, rep) = report();
    assert_eq!(got, want, "{rep:#}");
    let shown = run(d.pjw().args(["report", "-J", "outer"])).ok().stdout();
    assert!(shown.contains("  Steps           2"), "{shown}");
}

/// J7, as the attack: a user's job runs `pjw run` with every option that could make it a job of
/// its own — another id, `--exclusive`, more CPUs, another user — and each either stays in the
/// job's cgroup as a step or is refused; no second job ever appears.
#[test]
fn a_process_inside_a_job_cannot_leave_it_through_a_nested_run() {
    require_root!();
    let attacker = test_user("pjw-nest-a");
    let d = daemon("");
    let script = r#"mine=$(cat /proc/self/cgroup)
case "$mine" in *job-jailed*) echo IN-JAILED ;; esac
for args in "--job-id free" "--job-id free --priority 12" "--backfill-only" "-c 1"; do
  got=$("$PJW" run -q $args -- cat /proc/self/cgroup 2>&1)
  if [ "$got" = "$mine" ]; then echo "STAYED $args"; else echo "LEFT $args: $got"; fi
done
for args in "--exclusive" "-c 99" "--user root"; do
  if "$PJW" run -q $args -- true 2>/dev/null; then echo "RAN $args"; else echo "REFUSED $args"; fi
done"#;
    let o = as_user(attacker, &pjw_bin())
        .args([
            "run", "-c", "1", "--job-id", "jailed", "--", "sh", "-c", script,
        ])
        .env("PJW", pjw_bin())
        .env("PJW_SOCKET", d.socket())
        .stdin(Stdio::null())
        .output()
        .expect("run the attack");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.contains("IN-JAILED"), "{out}");
    assert!(!out.contains("LEFT") && !out.contains("RAN"), "{out}");
    assert_eq!(out.matches("STAYED").count(), 4, "{out}");
    assert_eq!(out.matches("REFUSED").count(), 3, "{out}");
    // No job "free" ever existed: the store has only the jailed one.
    let rep = run(d.pjw().args(["report", "--format", "json"]))
        .ok()
        .stdout();
    let ids: Vec<String> = serde_json::from_str::<serde_json::Value>(&rep)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec!["jailed".to_string()], "{rep}");
}

/// U15, as the attack: a user cannot make their own `pjw run` a step of another user's job —
/// not by naming its id, not by forging the variables a step's command has (`PJW_JOB_ID`,
/// `PJW_STEP_ID`): a process outside the job gets a job of its own, or a refusal.
#[test]
fn a_user_cannot_make_their_run_a_step_of_another_users_job() {
    require_root!();
    let attacker = test_user("pjw-nest-a");
    let victim = test_user("pjw-nest-v");
    let d = daemon("");
    let held = as_user(victim, &pjw_bin())
        .args(["run", "-c", "1", "--job-id", "victim", "--", "sleep", "600"])
        .env("PJW_SOCKET", d.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the victim's job");
    let held = KillOnDrop::new(held);
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || job(
        &d.status(),
        "victim"
    )
    .is_some_and(|j| j["state"] == "running")));
    let named = as_user(attacker, &pjw_bin())
        .args(["run", "-c", "1", "--job-id", "victim", "--", "true"])
        .env("PJW_SOCKET", d.socket())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!named.status.success(), "{}", text(&named));
    assert!(
        String::from_utf8_lossy(&named.stderr).contains("already in use"),
        "{}",
        text(&named)
    );
    let forged = as_user(attacker, &pjw_bin())
        .args([
            "run",
            "-c",
            "1",
            "--",
            "sh",
            "-c",
            "cat /proc/self/cgroup; echo job $PJW_JOB_ID",
        ])
        .env("PJW_SOCKET", d.socket())
        .env("PJW_JOB_ID", "victim")
        .env("PJW_STEP_ID", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(forged.status.success(), "{}", text(&forged));
    let out = String::from_utf8_lossy(&forged.stdout);
    assert!(
        !out.contains("job-victim") && !out.contains("job victim\n"),
        "{out}"
    );
    let v = job(&d.status(), "victim").cloned().unwrap();
    assert!(v["steps"].as_array().is_none_or(|s| s.is_empty()), "{v:#}");
    drop(held);
}

/// A stand-in for sshd's privileged process: a root shell that runs `pjw pam-adopt` as pam_exec
/// does (PAM_TYPE, PAM_USER, PAM_SERVICE), then — as sshd forks the user's shell after the
/// session stack — a child that prints where it is. `as_uid`: run the whole thing as that user
/// instead (the attack of a user invoking the subcommand).
fn login(d: &TestDaemon, user: &str, phase: &str, as_uid: Option<u32>) -> (i32, String, String) {
    let script = r#""$PJW" pam-adopt --socket "$SOCK"; echo "rc $?"; echo "shell $(sh -c 'cat /proc/self/cgroup' | tr '\n' ' ')""#;
    let mut c = match as_uid {
        Some(uid) => as_user(uid, Path::new("/bin/sh")),
        None => Command::new("/bin/sh"),
    };
    let o = c
        .args(["-c", script])
        .env("PJW", pjw_bin())
        .env("SOCK", d.socket())
        // What a user's ~/.pam_environment can put in the PAM environment (pam_env runs
        // before pjw's line): ignored, or no login here would join its job (review 4, M1).
        .env("PJW_SOCKET", "/nonexistent/pjw-users-own.sock")
        .env("PAM_TYPE", phase)
        .env("PAM_USER", user)
        .env("PAM_SERVICE", "sshd")
        .stdin(Stdio::null())
        .output()
        .expect("the stand-in sshd");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let rc = out
        .lines()
        .find_map(|l| l.strip_prefix("rc "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rc in {out}"));
    let shell = out
        .lines()
        .find_map(|l| l.strip_prefix("shell "))
        .unwrap_or_default()
        .trim()
        .to_string();
    (
        rc,
        shell,
        format!("{out}{}", String::from_utf8_lossy(&o.stderr)),
    )
}

/// Whether the cgroup lines `shell` (joined by spaces; one line on pure v2) put it in job `id`.
fn in_job(shell: &str, id: &str) -> bool {
    let job = format!("/job-{id}");
    shell.split_whitespace().any(|l| l.ends_with(&job))
}

/// `pjw run --user USER -c 1 --job-id ID -- sleep 600` by root (job starter mode): USER's job.
fn job_for(d: &TestDaemon, user: &str, id: &str) -> KillOnDrop {
    let c = d
        .pjw()
        .args([
            "run", "-c", "1", "--user", user, "--job-id", id, "--", "sleep", "600",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a user's job");
    let c = KillOnDrop::new(c);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || job(&d.status(), id)
            .is_some_and(|j| j["state"] == "running")),
        "{id} did not start: {:#}",
        d.status()
    );
    c
}

/// Logins, and U17 as the attack: a login lands in its own user's newest running job, never in
/// another user's; a user without a job stays outside (the default) or is refused
/// (`login_without_job = "refuse"`, live on reload); root is never adopted nor refused.
#[test]
fn a_login_joins_its_users_newest_job_never_another_users() {
    require_root!();
    let _a = test_user("pjw-login-a");
    let _b = test_user("pjw-login-b");
    let cpus = allowed_cpus().len();
    if cpus < 2 {
        pjw_testkit::skip!("two jobs need two CPUs; this machine has {cpus}");
    }
    let mut d = daemon("");
    let first = job_for(&d, "pjw-login-a", "a-first");
    std::thread::sleep(Duration::from_millis(50));
    let newest = job_for(&d, "pjw-login-a", "a-newest");

    let (rc, shell, out) = login(&d, "pjw-login-a", "account", None);
    assert_eq!(
        (rc, shell.contains("/job-")),
        (0, false),
        "account moves nothing: {out}"
    );
    let (rc, shell, out) = login(&d, "pjw-login-a", "open_session", None);
    assert_eq!(rc, 0, "{out}");
    assert!(
        in_job(&shell, "a-newest"),
        "the session's shell is in {shell}: {out}"
    );
    assert!(
        out.contains("pjw: the session joined job a-newest"),
        "{out}"
    );
    // Another user's session never lands in a's jobs: b has none, so it stays outside.
    let (rc, shell, out) = login(&d, "pjw-login-b", "open_session", None);
    assert_eq!(rc, 0, "{out}");
    assert!(
        !shell.contains("/job-"),
        "b's session landed in {shell}: {out}"
    );
    // Root: never adopted.
    let (rc, shell, out) = login(&d, "root", "open_session", None);
    assert_eq!((rc, shell.contains("/job-")), (0, false), "{out}");
    assert!(d.log().contains("login joined job"), "{}", d.log());

    // The node refuses logins without a job: b is refused at the account stack, a and root
    // are not. The key is live on reload.
    let cfg = d.dir().join("pjw.toml");
    let text0 = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("[adopt]\nlogin_without_job = \"refuse\"\n{text0}"),
    )
    .unwrap();
    // SAFETY: signalling our own child (the daemon) with SIGHUP.
    unsafe { libc::kill(d.pid().unwrap() as i32, libc::SIGHUP) };
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || d
            .log()
            .contains("adopt.login_without_job")),
        "no reload of adopt.login_without_job:\n{}",
        d.log()
    );
    let (rc, _, out) = login(&d, "pjw-login-b", "account", None);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("no running job"), "{out}");
    assert_eq!(login(&d, "pjw-login-a", "account", None).0, 0);
    assert_eq!(login(&d, "root", "account", None).0, 0);
    // The newest job ends: a's next session lands in the older one.
    drop(newest);
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || job(
        &d.status(),
        "a-newest"
    )
    .is_none()));
    let (_, shell, out) = login(&d, "pjw-login-a", "open_session", None);
    assert!(in_job(&shell, "a-first"), "{shell}: {out}");
    drop(first);
    let _ = &mut d;
}

/// U23, as the attack (review 4, M1): a user points the root-run PAM hook at a daemon of
/// their own — through PJW_SOCKET in ~/.pam_environment (ignored: every login test here sets
/// it to a path that does not exist and still joins its job), or by a socket path a site got
/// wrong — so that their session answers "go on" and stays outside every job. A socket root
/// does not own is never asked.
#[test]
fn the_pam_hook_never_asks_a_socket_root_does_not_own() {
    require_root!();
    let user = test_user("pjw-login-a");
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("users-own.sock");
    let listener = std::os::unix::net::UnixListener::bind(&fake).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::os::unix::fs::chown(&fake, Some(user), None).unwrap();
    let o = Command::new(pjw_bin())
        .args(["pam-adopt", "--socket"])
        .arg(&fake)
        .env("PAM_TYPE", "account")
        .env("PAM_USER", "pjw-login-a")
        .env("PAM_SERVICE", "sshd")
        .output()
        .expect("pjw pam-adopt");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("is not root's socket"), "{err}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the hook connected to the user's socket"
    );
}

/// U16, as the attack: a user who runs `pjw pam-adopt` (with any PAM variables) moves nothing —
/// not their own shell into another user's job, not anything at all — and is told no.
#[test]
fn a_user_cannot_move_a_process_with_the_pam_subcommand() {
    require_root!();
    let attacker = test_user("pjw-nest-a");
    let _victim = test_user("pjw-login-a");
    let d = daemon("");
    let victim = job_for(&d, "pjw-login-a", "victim");
    let t0 = Instant::now();
    for phase in ["open_session", "account"] {
        let (rc, shell, out) = login(&d, "pjw-login-a", phase, Some(attacker));
        assert_eq!(rc, 1, "{phase}: {out}");
        assert!(
            !shell.contains("/job-"),
            "{phase}: the attacker's shell is in {shell}"
        );
        assert!(out.contains("only root asks for logins"), "{phase}: {out}");
    }
    let v = job(&d.status(), "victim").cloned().unwrap();
    assert_eq!(v["procs"], 1, "only the victim's own process: {v:#}");
    assert!(d
        .log()
        .contains("a login request from a user other than root refused"));
    eprintln!("attack refused in {:?}", t0.elapsed());
    drop(victim);
}
