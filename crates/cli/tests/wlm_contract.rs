//! Contract tests of the PBS hook, the LSF job starter and the HTCondor job wrapper
//! (packaging/): each is run the way its manager runs it — with the manager's environment,
//! job files and hook objects replayed — against a real daemon, and the job must run under pjw
//! with the manager's id, the job's user, and its CPU count and memory.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pjw_testkit::{require_root, TestDaemon};
use serde_json::{json, Value};

/// The jobs' owner in these contracts: nobody, its ids from the user database.
fn nb() -> pjw_testkit::User {
    pjw_testkit::machine::nobody()
}
const MIB: u64 = 1 << 20;

const PBS_HOOK: &str = include_str!("../../../packaging/pbs/pjw_hook.py");
const FAKE_PBS: &str = include_str!("fixtures/pbs/pbs.py");
const LSF_STARTER: &str = include_str!("../../../packaging/lsf/pjw-job-starter");
const CONDOR_WRAPPER: &str = include_str!("../../../packaging/condor/pjw-job-wrapper");
const PBS_ENV: &str = include_str!("../../wlm/tests/samples/pbs-pro-job.env");
const LSF_ENV: &str = include_str!("../../wlm/tests/samples/lsf-job.env");
const CONDOR_ENV: &str = include_str!("../../wlm/tests/samples/condor-job.env");
const CONDOR_JOB_AD: &str = include_str!("../../wlm/tests/samples/condor-job.ad");
const CONDOR_MACHINE_AD: &str = include_str!("../../wlm/tests/samples/condor-slot.machine.ad");

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// `KEY=VALUE` lines with some values replaced.
fn env_with(sample: &str, set: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = sample
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .filter(|(k, _)| !set.iter().any(|(s, _)| s == k))
        .collect();
    env.extend(set.iter().map(|(k, v)| (k.to_string(), v.clone())));
    env
}

/// A private, world-readable directory for the manager's files.
fn scratch(d: &TestDaemon, name: &str) -> PathBuf {
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = d.dir().join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines_until_end(c: &mut Child) -> Vec<String> {
    let mut r = BufReader::new(c.stdout.take().expect("piped stdout"));
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap_or(0) == 0 || l.trim_end() == "END" {
            break;
        }
        lines.push(l.trim_end().to_string());
    }
    std::mem::forget(r);
    lines
}

fn job(d: &TestDaemon, id: &str) -> Value {
    let st = d.status();
    st["jobs"]
        .as_array()
        .and_then(|js| js.iter().find(|j| j["id"] == id).cloned())
        .unwrap_or_else(|| panic!("no job {id} in {st}\n{}", d.log()))
}

fn gone(d: &TestDaemon, id: &str) -> bool {
    TestDaemon::wait_for(Duration::from_secs(20), || {
        !d.status()["jobs"]
            .as_array()
            .is_some_and(|js| js.iter().any(|j| j["id"] == id))
    })
}

/// The job ran under pjw as the manager described it: id, user, CPUs, memory, WLM tag, and the
/// process is in the job's cgroups.
fn check_job(d: &TestDaemon, id: &str, wlm: &str, mem: u64, pid: u32, lines: &[String]) {
    assert!(lines.iter().any(|l| l == "user=nobody"), "{lines:?}");
    assert!(
        lines.iter().any(|l| l == &format!("pjw={id}")),
        "PJW_JOB_ID: {lines:?}"
    );
    let j = job(d, id);
    assert_eq!(j["user"], "nobody", "{j}");
    assert_eq!(j["uid"], nb().uid);
    assert_eq!(j["ncpus"], 1);
    assert_eq!(j["cpus"].as_str().map(|c| c.is_empty()), Some(false));
    assert_eq!(j["mem"], mem);
    assert_eq!(j["wlm"], wlm);
    assert_eq!(
        j["pid"], pid,
        "the job's main process is the one the manager started"
    );
    let procs = d.driver().procs(&format!("job-{id}")).unwrap();
    assert!(procs.contains(&pid), "{procs:?} lacks {pid}");
}

/// The parent of `pid`.
fn ppid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

const JOB_SCRIPT: &str = "echo user=$(id -un); echo pjw=$PJW_JOB_ID; echo END; exec sleep 600";

// ---- PBS -------------------------------------------------------------------------------------

struct Pbs<'a> {
    d: &'a TestDaemon,
    dir: PathBuf,
    python: PathBuf,
}

impl Pbs<'_> {
    /// Run the hook for one event, as MoM does (root), with the fake `pbs` module.
    fn event(&self, name: &str, socket: &Path, mut scenario: Value) -> Value {
        let cfg = self.dir.join(format!("{name}.config.json"));
        std::fs::write(
            &cfg,
            json!({"pjw": pjw_bin(), "socket": socket}).to_string(),
        )
        .unwrap();
        scenario["hook_config"] = json!(cfg);
        scenario["nodename"] = json!(hostname());
        let ev = self.dir.join(format!("{name}.event.json"));
        let res = self.dir.join(format!("{name}.result.json"));
        std::fs::write(&ev, scenario.to_string()).unwrap();
        let out = Command::new(&self.python)
            .arg(self.dir.join("pjw_hook.py"))
            .env("PYTHONPATH", self.dir.join("fake"))
            .env("FAKE_PBS_EVENT", &ev)
            .env("FAKE_PBS_RESULT", &res)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(&res).unwrap_or_else(|_| {
            panic!(
                "hook left no result: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.d.log()
            )
        });
        serde_json::from_str(&text).unwrap()
    }
}

fn find_python() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("python3"))
            .find(|f| f.is_file())
    })
}

/// `execjob_launch` for `the_job` (owned by nobody), and what MoM then does: exec what the hook
/// left as the job's user, with the job's PBS environment (`PBS_JOBID` the job's id). The
/// hook's result and the running job.
fn pbs_launch(pbs: &Pbs, d: &TestDaemon, dir: &Path, the_job: &Value) -> (Value, Child) {
    // execjob_launch: MoM would start `/bin/sh -c SCRIPT` as nobody with the job's environment.
    let job_env = env_with(
        &PBS_ENV.replace("1234.pbs01", the_job["id"].as_str().unwrap()),
        &[
            ("USER", "nobody".into()),
            ("LOGNAME", "nobody".into()),
            ("HOME", "/".into()),
            ("PATH", "/usr/local/bin:/usr/bin:/bin".into()),
            ("PBS_NODEFILE", dir.join("nodefile").display().to_string()),
        ],
    );
    let env: serde_json::Map<String, Value> =
        job_env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let r = pbs.event(
        &format!("launch-{}", the_job["id"].as_str().unwrap_or("job")),
        &d.socket(),
        json!({"type": "execjob_launch", "job": the_job, "progname": "/bin/sh",
               "argv": ["-sh", "-c", JOB_SCRIPT], "env": env}),
    );
    assert_eq!(r["accepted"], true, "{r}");
    let argv: Vec<String> = serde_json::from_value(r["argv"].clone()).unwrap();
    let launched: Vec<(String, String)> =
        serde_json::from_value::<serde_json::Map<String, Value>>(r["env"].clone())
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
            .collect();
    // MoM: exec progname with argv as the job's user, in the job's environment.
    let c = Command::new(r["progname"].as_str().unwrap())
        .arg0(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(launched)
        .uid(nb().uid)
        .gid(nb().gid)
        .current_dir("/")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (r, c)
}

#[test]
fn pbs_hook_runs_the_job_under_pjw_and_ends_it() {
    require_root!();
    pjw_testkit::require!(pjw_testkit::Component::Python3);
    let python = find_python().expect("python3 on PATH");
    let d = TestDaemon::start(pjw_bin(), "");
    let dir = scratch(&d, "pbs");
    std::fs::create_dir_all(dir.join("fake")).unwrap();
    std::fs::write(dir.join("fake/pbs.py"), FAKE_PBS).unwrap();
    std::fs::write(dir.join("pjw_hook.py"), PBS_HOOK).unwrap();
    let pbs = Pbs {
        d: &d,
        dir: dir.clone(),
        python,
    };
    let host = hostname();
    // Two chunks, one here: 1 CPU and 64 MiB on this host out of the job's 4 CPUs.
    let the_job = json!({
        "id": "1234.pbs01",
        "Job_Name": "relax",
        "Job_Owner": "nobody@login1.cluster.example.org",
        "euser": "nobody",
        "egroup": "nogroup",
        "queue": "workq",
        "Resource_List": {"ncpus": 4, "mem": "4160mb", "nodect": 2, "select": "1:ncpus=1:mem=64mb+1:ncpus=3:mem=4gb"},
        "exec_vnode": format!("({host}:ncpus=1:mem=65536kb)+(node08:ncpus=3:mem=4gb)"),
    });
    // execjob_begin: the daemon answers, the job may start.
    let r = pbs.event(
        "begin",
        &d.socket(),
        json!({"type": "execjob_begin", "job": the_job}),
    );
    assert_eq!(r["accepted"], true, "{r}");
    let (r, mut c) = pbs_launch(&pbs, &d, &dir, &the_job);
    assert_eq!(r["progname"], json!(pjw_bin()));
    let lines = lines_until_end(&mut c);
    check_job(
        &d,
        "pbs:1234.pbs01",
        "pbs:1234.pbs01",
        64 * MIB,
        c.id(),
        &lines,
    );
    // A second task of the same job on this node is not given a second set.
    let r2 = pbs.event(
        "launch2",
        &d.socket(),
        json!({"type": "execjob_launch", "job": the_job, "progname": "/bin/true",
               "argv": ["true"], "env": {}}),
    );
    assert_eq!(
        (r2["accepted"].clone(), r2["progname"].clone()),
        (json!(true), json!("/bin/true"))
    );
    // execjob_end: whatever is left of the job is killed, and the job ends.
    let r = pbs.event(
        "end",
        &d.socket(),
        json!({"type": "execjob_end", "job": the_job}),
    );
    assert_eq!(r["accepted"], true, "{r}");
    assert!(gone(&d, "pbs:1234.pbs01"), "{}", d.log());
    // The job's process was killed at execjob_end.
    pjw_testkit::job::wait(c, "the PBS job").killed();
    // A node whose daemon does not answer rejects the job rather than run it unconfined.
    let r = pbs.event(
        "begin-down",
        &dir.join("no-daemon.sock"),
        json!({"type": "execjob_begin", "job": the_job}),
    );
    assert_eq!(r["accepted"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("pjw daemon not answering"),
        "{r}"
    );
}

/// LSF's sbatchd starting job `jobid` through the shipped starter as nobody, with bsub -M 64M:
/// the running shell and the lines the job printed up to END.
fn lsf_start(d: &TestDaemon, dir: &Path, jobid: &str) -> (Child, Vec<String>) {
    let starter = dir.join("pjw-job-starter");
    write_exec(&starter, LSF_STARTER);
    // The job file LSF writes and runs (LSB_JOBFILENAME).
    let jobfile = dir.join(format!("1700000000.{jobid}"));
    write_exec(&jobfile, &format!("#!/bin/sh\n{JOB_SCRIPT}\n"));
    let host = hostname();
    let env = env_with(
        LSF_ENV,
        &[
            ("USER", "nobody".into()),
            ("LOGNAME", "nobody".into()),
            ("LSFUSER", "nobody".into()),
            ("HOME", "/".into()),
            ("PATH", "/usr/bin:/bin".into()),
            ("LSB_HOSTS", format!("{host} node08 node08")),
            ("LSB_MCPU_HOSTS", format!("{host} 1 node08 2")),
            ("LSB_DJOB_NUMPROC", "1".into()),
            ("LSB_JOBID", jobid.into()),
            ("LSB_JOBFILENAME", jobfile.display().to_string()),
            ("PJW", pjw_bin().display().to_string()),
            ("PJW_SOCKET", d.socket().display().to_string()),
        ],
    );
    // sbatchd: `/bin/sh -c "JOB_STARTER command"` as the user, with bsub -M 64M as RLIMIT_RSS.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("{} {}", starter.display(), jobfile.display()))
        .env_clear()
        .envs(env)
        .uid(nb().uid)
        .gid(nb().gid)
        .current_dir("/")
        .stdout(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; the closure touches no shared state.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64 << 20,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_RSS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut c = cmd.spawn().unwrap();
    let lines = lines_until_end(&mut c);
    (c, lines)
}

// ---- LSF -------------------------------------------------------------------------------------

#[test]
fn lsf_job_starter_runs_the_job_under_pjw() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    let dir = scratch(&d, "lsf");
    let (c, lines) = lsf_start(&d, &dir, "4711");
    // The starter execs pjw, which execs the job: the job is the shell LSF started (shells
    // that exec the last command of -c, as busybox sh does) or its direct child (dash forks).
    let main = job(&d, "lsf:4711")["pid"].as_u64().unwrap() as u32;
    assert!(
        main == c.id() || ppid(main) == c.id(),
        "job pid {main}, sh {}",
        c.id()
    );
    check_job(&d, "lsf:4711", "lsf:4711", 64 * MIB, main, &lines);
    pjw_testkit::job::run_ok(d.pjw().args(["kill", "lsf:4711"]));
    assert!(gone(&d, "lsf:4711"));
    // The starter shell execs pjw or (dash) forks it: killed itself, or reporting 137.
    pjw_testkit::job::wait(c, "job 4711 (killed)").killed();
}

/// HTCondor's starter starting job `CLUSTER.0` through the shipped wrapper as nobody, in a
/// scratch directory of its own with the job and machine ads: the running wrapper, the scratch
/// directory and the environment for a given socket.
#[allow(clippy::type_complexity)]
fn condor_start(
    d: &TestDaemon,
    dir: &Path,
    cluster: &str,
) -> (Child, PathBuf, impl Fn(&Path) -> Vec<(String, String)>) {
    let wrapper = dir.join("pjw-job-wrapper");
    write_exec(&wrapper, CONDOR_WRAPPER);
    // The starter's scratch directory: the job ad and machine ad it writes there.
    let exec = dir.join(format!("execute/dir_{cluster}"));
    std::fs::create_dir_all(&exec).unwrap();
    // The starter makes the scratch directory the job user's.
    std::os::unix::fs::chown(&exec, Some(nb().uid), Some(nb().gid)).unwrap();
    let ad = CONDOR_JOB_AD
        .replace("Owner = \"carol\"", "Owner = \"nobody\"")
        .replace("ClusterId = 42", &format!("ClusterId = {cluster}"))
        .replace("RequestCpus = 2", "RequestCpus = 1")
        .replace("RequestMemory = 2048", "RequestMemory = 64");
    std::fs::write(exec.join(".job.ad"), ad).unwrap();
    std::fs::write(exec.join(".machine.ad"), CONDOR_MACHINE_AD).unwrap();
    let scratch_dir = exec.display().to_string();
    let error_file = exec.join(".wrapper_error").display().to_string();
    let env = move |socket: &Path| {
        env_with(
            &CONDOR_ENV.replace("/var/lib/condor/execute/dir_31337", &scratch_dir),
            &[
                ("HOME", "/".into()),
                ("PATH", "/usr/bin:/bin".into()),
                ("_CONDOR_WRAPPER_ERROR_FILE", error_file.clone()),
                ("PJW", pjw_bin().display().to_string()),
                ("PJW_SOCKET", socket.display().to_string()),
            ],
        )
    };
    // condor_starter: the wrapper as the job's user, in the scratch directory, with the job's
    // executable and arguments.
    let c = Command::new(&wrapper)
        .args(["/bin/sh", "-c", JOB_SCRIPT])
        .env_clear()
        .envs(env(&d.socket()))
        .uid(nb().uid)
        .gid(nb().gid)
        .current_dir(&exec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (c, exec, env)
}

// ---- HTCondor --------------------------------------------------------------------------------

#[test]
fn condor_job_wrapper_runs_the_job_under_pjw_or_holds_it() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    let dir = scratch(&d, "condor");
    let (mut c, exec, env) = condor_start(&d, &dir, "42");
    let wrapper = dir.join("pjw-job-wrapper");
    let lines = lines_until_end(&mut c);
    check_job(&d, "condor:42.0", "condor:42.0", 64 * MIB, c.id(), &lines);
    pjw_testkit::job::run_ok(d.pjw().args(["kill", "condor:42.0"]));
    assert!(gone(&d, "condor:42.0"));
    pjw_testkit::job::wait(c, "job 42.0 (killed)").killed();
    assert!(!exec.join(".wrapper_error").exists());
    // No daemon: the wrapper fails and says why in the error file (HTCondor holds the job).
    let out = Command::new(&wrapper)
        .args(["/bin/true"])
        .env_clear()
        .envs(env(&dir.join("no-daemon.sock")))
        .uid(nb().uid)
        .gid(nb().gid)
        .current_dir(&exec)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let why = std::fs::read_to_string(exec.join(".wrapper_error")).unwrap();
    assert!(why.contains("the pjw daemon does not answer"), "{why}");
}

// ---- Squatting a manager's id (issue 25, item 5) ----------------------------------------------

/// `pjw run ARGS -- sleep 600` as the attacker `pjwatk1`, with `env` added: a job that holds
/// an id for as long as the test needs.
fn squat(d: &TestDaemon, args: &[&str], env: &[(&str, String)]) -> pjw_testkit::job::KillOnDrop {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "pjwatk1", "--regid", "pjwatk1", "--clear-groups"])
        .arg(pjw_bin())
        .args(["run", "--quiet"])
        .args(args)
        .args(["--", "sleep", "600"])
        .env("PJW_SOCKET", d.socket())
        .env("USER", "pjwatk1")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    pjw_testkit::job::KillOnDrop::new(c.spawn().expect("spawn the squatter"))
}

/// A later task of the victim's job `id` (as `nobody`, outside every pjw job, naming the
/// manager's id by `var`), which adoption must move into `id`; it is returned to be killed.
fn second_task(
    d: &TestDaemon,
    id: &str,
    (var, value): (&str, &str),
) -> pjw_testkit::job::KillOnDrop {
    let c = Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .args(["sleep", "600"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env(var, value)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the victim's second task");
    let pid = c.id();
    let task = pjw_testkit::job::KillOnDrop::new(c);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || d
            .driver()
            .procs(&format!("job-{id}"))
            .is_ok_and(|p| p.contains(&pid))),
        "the victim's task {pid} ({var}={value}) was not adopted into {id}:\n{}",
        d.log()
    );
    task
}

/// Issue 25, item 5, as written there: a user takes the ids of LSF's, HTCondor's and PBS's
/// next jobs before they land — in pjw's own namespace (`4242`, `77.0`, `124.srv`) and, with
/// forged manager environments, in the managers' namespaces too (`lsf:4242`, `condor:77.0`,
/// `pbs:124.srv`). Then each manager starts its job for another user through the shipped
/// wrapper or hook: each runs under pjw, confined, as its owner's (no exit 125, and the PBS
/// hook wraps it instead of leaving it outside pjw); the squatter keeps only its own jobs, and
/// the PBS end hook kills the victim's job, not the squatter's.
#[test]
fn managers_job_ids_cannot_be_squatted_through_the_shipped_wrappers() {
    require_root!();
    pjw_testkit::require!(pjw_testkit::Component::Python3);
    let python = find_python().expect("python3 on PATH");
    pjw_testkit::machine::test_user("pjwatk1");
    // Enough job CPUs for every squat and victim at once (they share the node's CPUs).
    let d = TestDaemon::start(pjw_bin(), "vcpus = 64\n");
    let dir = scratch(&d, "squat");
    // The forged HTCondor job ad the squatter points _CONDOR_JOB_AD at.
    let forged_ad = dir.join("forged.ad");
    std::fs::write(
        &forged_ad,
        "ClusterId = 77\nProcId = 0\nOwner = \"pjwatk1\"\nRequestCpus = 1\nRequestMemory = 64\n",
    )
    .unwrap();
    let _squats = [
        squat(&d, &["--job-id", "4242"], &[]),
        squat(&d, &["--job-id", "77.0"], &[]),
        squat(&d, &["--job-id", "124.srv"], &[]),
        squat(
            &d,
            &["--from-env", "lsf"],
            &[
                ("LSB_JOBID", "4242".into()),
                ("LSB_DJOB_NUMPROC", "1".into()),
            ],
        ),
        squat(
            &d,
            &["--from-env", "condor"],
            &[("_CONDOR_JOB_AD", forged_ad.display().to_string())],
        ),
        squat(
            &d,
            &["--from-env", "pbs"],
            &[("PBS_JOBID", "124.srv".into())],
        ),
    ];
    let squatted = [
        "4242",
        "77.0",
        "124.srv",
        "lsf:4242",
        "condor:77.0",
        "pbs:124.srv",
    ];
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || {
            let st = d.status();
            squatted.iter().all(|id| {
                st["jobs"].as_array().is_some_and(|js| {
                    js.iter().any(|j| {
                        j["id"] == *id
                            && j["user"] == "pjwatk1"
                            && (j["state"] == "running" || j["state"] == "backfill")
                    })
                })
            })
        }),
        "the squats did not all start: {:#}\n{}",
        d.status(),
        d.log()
    );
    let own = |id: &str| format!("{id}_u{}", nb().uid);

    // LSF's job 4242 for nobody, through the shipped job starter.
    let (c, lines) = lsf_start(&d, &dir, "4242");
    let main = job(&d, &own("lsf:4242"))["pid"].as_u64().unwrap() as u32;
    check_job(&d, &own("lsf:4242"), "lsf:4242", 64 * MIB, main, &lines);
    // Issue 25, N3: the victim's later task (a blaunch or ssh rank: `LSB_JOBID=4242`, outside
    // every pjw job) is adopted into the victim's job, not refused as the squatter's and left
    // unjailed.
    let _task = second_task(&d, &own("lsf:4242"), ("LSB_JOBID", "4242"));
    pjw_testkit::job::run_ok(d.pjw().args(["kill", &own("lsf:4242")]));
    pjw_testkit::job::wait(c, "the victim's LSF job (killed)").killed();

    // HTCondor's job 77.0 for nobody, through the shipped job wrapper.
    let (mut c, exec, _) = condor_start(&d, &dir, "77");
    let lines = lines_until_end(&mut c);
    check_job(
        &d,
        &own("condor:77.0"),
        "condor:77.0",
        64 * MIB,
        c.id(),
        &lines,
    );
    assert!(!exec.join(".wrapper_error").exists(), "the wrapper failed");
    pjw_testkit::job::run_ok(d.pjw().args(["kill", &own("condor:77.0")]));
    pjw_testkit::job::wait(c, "the victim's HTCondor job (killed)").killed();

    // PBS's job 124.srv for nobody: the hook wraps it (before, it found the squatter's live
    // `124.srv` and left the job outside pjw), and its end kills the victim's job only.
    let dir_pbs = dir.join("pbs");
    std::fs::create_dir_all(dir_pbs.join("fake")).unwrap();
    std::fs::set_permissions(&dir_pbs, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir_pbs.join("fake/pbs.py"), FAKE_PBS).unwrap();
    std::fs::write(dir_pbs.join("pjw_hook.py"), PBS_HOOK).unwrap();
    let pbs = Pbs {
        d: &d,
        dir: dir_pbs.clone(),
        python,
    };
    let host = hostname();
    let the_job = json!({
        "id": "124.srv",
        "Job_Owner": "nobody@login1",
        "euser": "nobody",
        "egroup": "nogroup",
        "Resource_List": {"ncpus": 1, "mem": "64mb"},
        "exec_vnode": format!("({host}:ncpus=1:mem=64mb)"),
    });
    let (r, mut c) = pbs_launch(&pbs, &d, &dir_pbs, &the_job);
    assert_eq!(
        r["progname"],
        json!(pjw_bin()),
        "the hook left the victim's job outside pjw: {r}"
    );
    let lines = lines_until_end(&mut c);
    check_job(
        &d,
        &own("pbs:124.srv"),
        "pbs:124.srv",
        64 * MIB,
        c.id(),
        &lines,
    );
    // Issue 25, N3, as the review wrote it: a `pbsdsh`/`mpiexec` task of the victim's job
    // (`PBS_JOBID=124.srv`), which the hook leaves to adoption, lands in the victim's job.
    let _task = second_task(&d, &own("pbs:124.srv"), ("PBS_JOBID", "124.srv"));
    let r = pbs.event(
        "end-124",
        &d.socket(),
        json!({"type": "execjob_end", "job": the_job}),
    );
    assert_eq!(r["accepted"], true, "{r}");
    assert!(gone(&d, &own("pbs:124.srv")), "{}", d.log());
    pjw_testkit::job::wait(c, "the victim's PBS job (killed at its end)").killed();
    // The squatter kept its own jobs, and only those.
    let st = d.status();
    for id in squatted {
        let j = job(&d, id);
        assert_eq!(j["user"], "pjwatk1", "{id}: {j}");
    }
    assert_eq!(
        st["jobs"].as_array().map(|a| a.len()),
        Some(squatted.len()),
        "{st:#}"
    );
}
