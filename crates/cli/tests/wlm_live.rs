//! Live tests against the real Slurm and Grid Engine from Debian (root, host only).
//!
//! Each test starts a private pjw daemon (testkit), then the manager with scripts/wlm/*-up.sh
//! (which install the packages when missing) with pjw's hooks from packaging/ pointed at that
//! daemon through an env file (`PJW_WLM_ENV`), runs real jobs through the manager and checks
//! where they ran. A guard runs scripts/wlm/down.sh, which stops every daemon the up script
//! started, by pid, also when an assertion fails. Skipped only inside the VM tier's guest,
//! which has no Slurm and no Grid Engine; on the host their absence is a failure.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pjw_core::CpuSet;
use pjw_testkit::{need_cpus, require, skip, Component, TestDaemon};

/// Both managers see the whole node; pjw hands out two CPUs (the test machine has two). The
/// two tests run at once, each with its own daemon: each adopts by its own manager's variable
/// only, so neither daemon looks at the other manager's job ids (both number jobs from 1).
/// The daemon's configuration under a manager: `cpus` (two jobs on disjoint sets need two) and
/// adoption by the manager's job id variable.
fn wlm_config(cpus: &pjw_core::CpuSet, var: &str) -> String {
    format!("cpus = \"{cpus}\"\n[adopt]\nenv = [\"{var}\"]\nsweep_interval_ms = 100\n")
}

/// One private Slurm at a time: slurm-up.sh stops the daemons of an earlier run it finds, so two
/// Slurm tests of this binary take turns (the Grid Engine one runs beside them).
static SLURM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn slurm_turn() -> std::sync::MutexGuard<'static, ()> {
    SLURM.lock().unwrap_or_else(|e| e.into_inner())
}

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running manager; dropping it stops it (down.sh: by the pids the up script recorded).
struct Wlm {
    dir: tempfile::TempDir,
}

impl Wlm {
    /// Start `script` (slurm-up.sh or sge-up.sh) with pjw's hooks talking to `d`.
    fn up(script: &str, d: &TestDaemon) -> Wlm {
        Wlm::up_with(script, d, None)
    }

    /// [`Wlm::up`], with Slurm given the GPUs `gpu_dir/nvidiaN` as gres (slurm-up.sh's third
    /// argument).
    fn up_with(script: &str, d: &TestDaemon, gpu_dir: Option<&Path>) -> Wlm {
        Wlm::up_spank(script, d, gpu_dir, "required")
    }

    /// [`Wlm::up_with`], with pjw's SPANK plugin loaded `required`, `optional` or not at all
    /// (`0`: tasks are found by adoption alone), slurm-up.sh's `PJW_SPANK`.
    fn up_spank(script: &str, d: &TestDaemon, gpu_dir: Option<&Path>, spank: &str) -> Wlm {
        Wlm::up_in(Wlm::new_dir(), script, d, gpu_dir, spank, &[])
    }

    /// The directory a manager will run in, made before the daemon starts (whose config may
    /// name files in it).
    fn new_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("pjw-wlm")
            .tempdir()
            .expect("temp dir")
    }

    /// [`Wlm::up_spank`] in `dir`, with more variables for the up script (`PJW_EPILOG=0`).
    fn up_in(
        dir: tempfile::TempDir,
        script: &str,
        d: &TestDaemon,
        gpu_dir: Option<&Path>,
        spank: &str,
        vars: &[(&str, &str)],
    ) -> Wlm {
        // The manager's daemons and the jobs' owner (nobody) must reach files in here.
        set_mode(dir.path(), 0o755);
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        set_mode(&out, 0o1777);
        let env = dir.path().join("pjw-wlm.env");
        std::fs::write(
            &env,
            format!(
                "PJW_SOCKET={}\nPJW={}\n",
                d.socket().display(),
                pjw_bin().display()
            ),
        )
        .unwrap();
        let w = Wlm { dir };
        let res = Command::new(repo().join("scripts/wlm").join(script))
            .env("PJW_SPANK", spank)
            .envs(vars.iter().copied())
            .arg(w.dir.path())
            .arg(&env)
            .args(gpu_dir)
            .output()
            .expect("run up script");
        assert!(
            res.status.success(),
            "{script} failed:\n{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        w
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// A manager command with its environment (SLURM_CONF, SGE_ROOT/SGE_CELL).
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("SLURM_CONF", self.dir().join("slurm.conf"))
            .env("SGE_ROOT", "/var/lib/gridengine")
            .env("SGE_CELL", "default")
            .current_dir(self.out())
            .stdin(Stdio::null());
        c
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for f in [
            "log/slurmd.log",
            "log/slurmctld.log",
            "log/execd.out",
            "log/qmaster.out",
        ] {
            if let Ok(t) = std::fs::read_to_string(self.dir().join(f)) {
                let tail: Vec<&str> = t.lines().rev().take(30).collect();
                s.push_str(&format!("--- {f}\n"));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }
}

impl Drop for Wlm {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/wlm/down.sh"))
            .arg(self.dir.path())
            .status();
    }
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A job script: wait (bounded) until the job runs inside a pjw job cgroup, write where it
/// runs to OUT, then wait for GO (bounded) so that jobs overlap while the test looks.
fn job_script(out: &Path, go: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         i=0; while ! grep -q /job- /proc/self/cgroup && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n\
         {{ grep '^0::' /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status; id -u; }} > {out}.tmp\n\
         mv {out}.tmp {out}\n\
         i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n",
        out = out.display(),
        go = go.display()
    )
}

/// What a job wrote: its cgroup2 path, its allowed CPUs, its uid.
fn job_report(p: &Path) -> (String, CpuSet, u32) {
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || p.exists()),
        "{} never written",
        p.display()
    );
    let t = std::fs::read_to_string(p).unwrap();
    let mut l = t.lines();
    let cg = l.next().unwrap_or_default().to_string();
    let cpus = l
        .next()
        .and_then(|x| x.split_once(':'))
        .map(|(_, v)| CpuSet::parse_list(v.trim()).unwrap())
        .unwrap_or_default();
    let uid = l
        .next()
        .and_then(|x| x.trim().parse().ok())
        .unwrap_or(u32::MAX);
    (cg, cpus, uid)
}

fn jobs_of(st: &serde_json::Value, wlm: &str) -> Vec<serde_json::Value> {
    st["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|j| {
                    j["id"]
                        .as_str()
                        .is_some_and(|i| i.starts_with(&format!("{wlm}:")))
                        && j["wlm"] == j["id"]
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn cpus_of(j: &serde_json::Value) -> CpuSet {
    CpuSet::parse_list(j["cpus"].as_str().unwrap_or("")).unwrap()
}

/// The pjw job cgroup `pid` is in, if any.
fn job_of(d: &TestDaemon, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    d.driver()
        .job_of(&pjw_kernelfs::proc_cgroup::parse(&text).ok()?)
}

/// The memory limit of job cgroup `name` (v1 `memory.limit_in_bytes` or v2 `memory.max`).
fn memory_limit(d: &TestDaemon, name: &str) -> Option<u64> {
    d.driver().job_dirs(name).iter().find_map(|(_, dir)| {
        ["memory.limit_in_bytes", "memory.max"]
            .iter()
            .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .and_then(|t| t.trim().parse().ok())
    })
}

fn no_job_cgroups(d: &TestDaemon) -> bool {
    d.driver()
        .list_jobs()
        .map(|l| l.is_empty())
        .unwrap_or(false)
}

/// Killed when dropped (also when the test fails); its output goes nowhere.
fn spawn_outsider(id: &str) -> pjw_testkit::job::KillOnDrop {
    pjw_testkit::job::KillOnDrop::new(
        Command::new("setsid")
            .args(["sleep", "600"])
            .env("SLURM_JOB_ID", id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn setsid sleep"),
    )
}

#[test]
fn slurm_jobs_run_in_disjoint_pjw_sets_and_their_tasks_are_adopted() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    let _turn = slurm_turn();
    let d = TestDaemon::start(&pjw_bin(), &wlm_config(&two, "SLURM_JOB_ID"));
    let w = Wlm::up("slurm-up.sh", &d);
    let out = w.out();

    // Two 1-CPU batch jobs at once.
    let go = out.join("go1");
    let mut ids = Vec::new();
    for n in 0..2 {
        let script = out.join(format!("job{n}.sh"));
        std::fs::write(&script, job_script(&out.join(format!("job{n}.out")), &go)).unwrap();
        let o = w
            .cmd("sbatch")
            .args(["-n1", "--mem-per-cpu=200M", "-o", "/dev/null"])
            .args(["-J", &format!("solver run{n}")])
            .arg(&script)
            .output()
            .unwrap();
        let text = ok(&o, "sbatch");
        let id = text
            .trim()
            .strip_prefix("Submitted batch job ")
            .unwrap_or_else(|| panic!("sbatch said {text:?}"))
            .to_string();
        ids.push(id);
    }
    let mut seen = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let (cg, allowed, _) = job_report(&out.join(format!("job{n}.out")));
        assert!(
            cg.ends_with(&format!("/job-slurm:{id}")),
            "slurm job {id} ran in {cg:?}\n{}\n{}",
            d.log(),
            w.logs()
        );
        seen.push(allowed);
    }
    let st = d.status();
    let jobs = jobs_of(&st, "slurm");
    assert_eq!(jobs.len(), 2, "{st:#}");
    let pjw_ids: HashSet<String> = jobs
        .iter()
        .filter_map(|j| j["id"].as_str().map(String::from))
        .collect();
    assert_eq!(
        pjw_ids,
        ids.iter().map(|i| format!("slurm:{i}")).collect(),
        "pjw job ids are Slurm's, in Slurm's namespace"
    );
    for (n, (id, allowed)) in ids.iter().zip(&seen).enumerate() {
        let j = jobs
            .iter()
            .find(|j| j["id"] == format!("slurm:{id}"))
            .unwrap();
        // The job's own name, from Slurm (not "slurm job slurm:N").
        assert_eq!(j["name"], format!("solver run{n}"), "job {id}: {j:#}");
        assert_eq!(cpus_of(j).len(), 1);
        // The Prolog is not told the memory; scontrol's Mem= for the node is the job's limit.
        assert_eq!(j["mem"], 200u64 << 20, "job {id}: {j:#}");
        assert_eq!(
            memory_limit(&d, &format!("job-slurm:{id}")),
            Some(200u64 << 20)
        );
        assert_eq!(&cpus_of(j), allowed, "job {id} runs on its pjw cpus");
    }
    assert!(
        seen[0].intersection(&seen[1]).is_empty(),
        "sets overlap: {} and {}",
        seen[0],
        seen[1]
    );
    std::fs::write(&go, "").unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "slurm")
            .is_empty()
            && no_job_cgroups(&d)),
        "slurm jobs or their cgroups left after the epilog:\n{:#}\n{}",
        d.status(),
        w.logs()
    );
    // A job Slurm ended normally (its Epilog's `pjw job end`) is recorded completed, not failed.
    for id in &ids {
        assert_ended_as(&d, &format!("slurm:{id}"), "completed");
    }

    // Prolog and Epilog succeeded (a failed one drains the node): pjw's hooks carry the job's
    // SLURM_JOB_ID but are never adopted into the job they end.
    let state = w.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
    let state = ok(&state, "sinfo");
    assert!(!state.contains("drain"), "node {state:?}:\n{}", w.logs());

    // srun: the task slurmstepd starts is adopted into the job the prolog registered.
    let o = w
        .cmd("timeout")
        .args(["120", "srun", "-n1", "sh", "-c"])
        .arg(
            "i=0; while ! grep -q /job- /proc/self/cgroup && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
             echo $SLURM_JOB_ID; grep '^0::' /proc/self/cgroup",
        )
        .output()
        .unwrap();
    let text = ok(&o, &format!("srun\n{}\n{}", w.logs(), d.log()));
    let mut l = text.lines();
    let id = l.next().unwrap_or_default().trim().to_string();
    let cg = l.next().unwrap_or_default();
    assert!(
        cg.ends_with(&format!("/job-slurm:{id}")),
        "srun task of job {id} ran in {cg:?}"
    );

    // A process of a running job started outside it (as ssh would start an MPI rank) is
    // adopted; one naming an unknown job is left alone.
    let go2 = out.join("go2");
    let script = out.join("hold.sh");
    std::fs::write(&script, job_script(&out.join("hold.out"), &go2)).unwrap();
    let o = w
        .cmd("sbatch")
        .args(["-n1", "-o", "/dev/null"])
        .arg(&script)
        .output()
        .unwrap();
    let text = ok(&o, "sbatch");
    let id = text.trim().rsplit(' ').next().unwrap().to_string();
    job_report(&out.join("hold.out"));
    // spawn() returns once the child has exec'd: the figure is exec to moved.
    let rank = spawn_outsider(&id);
    let t0 = Instant::now();
    let stranger = spawn_outsider("987654");
    let mut latency = None;
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if job_of(&d, rank.id()).as_deref() == Some(format!("job-slurm:{id}").as_str()) {
            latency = Some(t0.elapsed());
            break;
        }
        // Every millisecond: a tighter poll takes a CPU from the daemon it waits for.
        std::thread::sleep(Duration::from_millis(1));
    }
    let latency = latency.unwrap_or_else(|| panic!("rank of job {id} not adopted:\n{}", d.log()));
    eprintln!("adoption latency, exec to moved (slurm job {id}): {latency:?}");
    // First proof that the daemon looked at the stranger (its line names its pid), then that
    // it left it where it was.
    let looked = format!("pid={}", stranger.id());
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || d
            .log()
            .lines()
            .any(|l| l.contains("process of an unknown job left alone")
                && l.split_whitespace().any(|w| w == looked))),
        "the stranger ({looked}) was never looked at:\n{}",
        d.log()
    );
    assert_eq!(
        job_of(&d, stranger.id()),
        None,
        "a process of an unknown job was moved"
    );
    std::fs::write(&go2, "").unwrap();
    // The epilog ends the job: the adopted rank is killed with it, the cgroups are removed.
    // The adopted rank was killed with its job (it would have slept on).
    pjw_testkit::job::wait(rank.into_inner(), "the adopted rank").signal(libc::SIGKILL);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "slurm")
            .is_empty()
            && no_job_cgroups(&d)),
        "job {id} left behind:\n{:#}",
        d.status()
    );
    drop(stranger);
}

/// Items 1 and 2 of issue 12, as a user of the live Slurm: (1) a task that exports
/// `SLURM_SCRIPT_CONTEXT` (a forged hook) and one that re-execs at once without
/// `SLURM_JOB_ID` are adopted all the same (their ancestry is `slurmstepd: [ID.0]`); (2) a job
/// named `x UserId=root(0) NumCPUs=2` with forged scontrol lines after newlines is registered
/// as its real owner's, on the CPUs and memory Slurm gave it. Without pjw's SPANK plugin
/// (`PJW_SPANK=0`): this is the fallback, adoption after exec, that nodes without the plugin
/// (or with it `optional` and no daemon answering) rely on.
#[test]
fn slurm_user_cannot_dodge_adoption_or_steer_the_prolog() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    let uid = pjw_testkit::machine::test_user("pjwatk1");
    let _turn = slurm_turn();
    let d = TestDaemon::start(&pjw_bin(), &wlm_config(&two, "SLURM_JOB_ID"));
    let w = Wlm::up_spank("slurm-up.sh", &d, None, "0");
    let out = w.out();
    let as_user = |prog: &str| {
        let mut c = w.cmd("setpriv");
        c.args([
            "--reuid",
            "pjwatk1",
            "--regid",
            "pjwatk1",
            "--clear-groups",
            prog,
        ]);
        c
    };
    // (2) the forged job name; the job reports where it runs.
    let go = out.join("go-forged");
    let script = out.join("forged.sh");
    std::fs::write(&script, job_script(&out.join("forged.out"), &go)).unwrap();
    set_mode(&script, 0o755);
    let name = "x UserId=root(0) NumCPUs=2 MinMemoryNode=64G\n   NumNodes=1 NumCPUs=2\n     Nodes=vm CPU_IDs=0-1 Mem=99999 GRES=";
    let o = as_user("sbatch")
        .args(["-n1", "--mem-per-cpu=100M", "-o", "/dev/null", "-J", name])
        .arg(&script)
        .output()
        .unwrap();
    let text = ok(&o, "sbatch (forged name)");
    let id = text.trim().rsplit(' ').next().unwrap().to_string();
    let (cg, _, ran_as) = job_report(&out.join("forged.out"));
    assert!(
        cg.ends_with(&format!("/job-slurm:{id}")),
        "job {id} ran in {cg:?}\n{}\n{}",
        d.log(),
        w.logs()
    );
    assert_eq!(ran_as, uid);
    let st = d.status();
    let j = jobs_of(&st, "slurm")
        .into_iter()
        .find(|j| j["id"] == format!("slurm:{id}"))
        .unwrap_or_else(|| panic!("no pjw job slurm:{id}: {st:#}"));
    assert_eq!(j["user"], "pjwatk1", "the name steered the owner: {j:#}");
    // The name is shown, cut at its first newline: what followed is not taken for anything.
    assert_eq!(
        j["name"], "x UserId=root(0) NumCPUs=2 MinMemoryNode=64G",
        "{j:#}"
    );
    assert_eq!(j["uid"], uid);
    assert_eq!(cpus_of(&j).len(), 1, "the name steered the CPUs: {j:#}");
    assert_eq!(j["mem"], 100u64 << 20, "the name steered the memory: {j:#}");
    std::fs::write(&go, "").unwrap();

    // (1) srun tasks that dodge: the forged hook variable in srun's environment (srun passes
    // it to every task, so the task carries it from its first exec: before, a certain
    // escape), and a task that execs at once without SLURM_JOB_ID.
    let probe = "i=0; while ! grep -q /job- /proc/self/cgroup && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
                 echo ${SLURM_JOB_ID:-unset}; grep '^0::' /proc/self/cgroup";
    for (what, hook_var, prefix) in [
        ("forged SLURM_SCRIPT_CONTEXT", true, &[][..]),
        (
            "re-exec without SLURM_JOB_ID",
            false,
            &["env", "-u", "SLURM_JOB_ID", "-u", "SLURM_JOBID"][..],
        ),
    ] {
        let mut c = as_user("timeout");
        if hook_var {
            c.env("SLURM_SCRIPT_CONTEXT", "prolog_slurmd");
        }
        let o = c
            .args(["120", "srun", "-n1"])
            .args(prefix)
            .args(["sh", "-c", probe])
            .output()
            .unwrap();
        let text = ok(&o, &format!("srun ({what})\n{}\n{}", w.logs(), d.log()));
        let cg = text.lines().nth(1).unwrap_or_default();
        assert!(
            cg.contains("/job-slurm:"),
            "a task with {what} escaped its job: ran in {cg:?}\n{}",
            d.log()
        );
    }
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "slurm")
            .is_empty()
            && no_job_cgroups(&d)),
        "slurm jobs left:\n{:#}\n{}",
        d.status(),
        w.logs()
    );
    let state = w.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
    let state = ok(&state, "sinfo");
    assert!(!state.contains("drain"), "node {state:?}:\n{}", w.logs());
}

#[test]
fn grid_engine_jobs_run_in_their_pjw_sets_as_their_owner() {
    require!(Component::Root, Component::GridEngine);
    let two = need_cpus!(2);
    // The jobs' owner: nobody, with its primary group, both from the user database.
    let nb = pjw_testkit::machine::nobody();
    let nb_group = pjw_testkit::machine::group_name(nb.gid).expect("nobody's group has a name");
    let d = TestDaemon::start(&pjw_bin(), &wlm_config(&two, "JOB_ID"));
    let w = Wlm::up("sge-up.sh", &d);
    let out = w.out();
    let go = out.join("go");
    let mut subs = Vec::new();
    for n in 0..2 {
        let script = out.join(format!("sge{n}.sh"));
        std::fs::write(&script, job_script(&out.join(format!("sge{n}.out")), &go)).unwrap();
        set_mode(&script, 0o755);
        let child = w
            .cmd("setpriv")
            .args(["--reuid", &nb.name, "--regid", &nb_group, "--clear-groups"])
            .args([
                "qsub",
                "-sync",
                "y",
                "-pe",
                "smp",
                "1",
                "-j",
                "y",
                "-o",
                "/dev/null",
            ])
            .args(["-S", "/bin/sh", "-cwd", "-N", "sgesim"])
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("qsub");
        subs.push(child);
    }
    let mut seen = Vec::new();
    for n in 0..2 {
        let (cg, allowed, uid) = job_report(&out.join(format!("sge{n}.out")));
        assert!(
            cg.contains("/job-"),
            "grid engine job ran in {cg:?}\n{}\n{}",
            d.log(),
            w.logs()
        );
        assert_eq!(uid, nb.uid, "the job runs as its owner, {}", nb.name);
        seen.push((cg.rsplit("/job-").next().unwrap().to_string(), allowed));
        assert!(seen.last().unwrap().0.starts_with("sge:"), "{cg}");
    }
    let st = d.status();
    let jobs = jobs_of(&st, "sge");
    assert_eq!(jobs.len(), 2, "{st:#}");
    for (id, allowed) in &seen {
        let j = jobs
            .iter()
            .find(|j| j["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no pjw job {id}: {st:#}"));
        assert_eq!(j["user"], nb.name.as_str());
        // The job's own name, from Grid Engine's config for the shepherd.
        assert_eq!(j["name"], "sgesim", "{j:#}");
        assert_eq!(&cpus_of(j), allowed);
        assert_eq!(allowed.len(), 1);
    }
    assert!(
        seen[0].1.intersection(&seen[1].1).is_empty(),
        "sets overlap: {seen:?}"
    );
    std::fs::write(&go, "").unwrap();
    for (n, c) in subs.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let text = ok(&o, "qsub -sync y");
        let id = &seen[n].0;
        assert!(
            seen.iter().any(|(i, _)| text.contains(&format!(
                "Your job {} ",
                i.trim_start_matches("sge:")
            ))),
            "qsub said {text:?} (job {id})"
        );
    }
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "sge")
            .is_empty()
            && no_job_cgroups(&d)),
        "grid engine jobs or their cgroups left:\n{:#}",
        d.status()
    );
    for (id, _) in &seen {
        assert_ended_as(&d, id, "completed");
    }
}

/// The job's report says it ended as `want` (`pjw report -J ID --json`), waiting (bounded) for
/// the record the daemon writes when the job ends.
fn assert_ended_as(d: &TestDaemon, id: &str, want: &str) {
    let mut last = String::new();
    let ok = TestDaemon::wait_for(Duration::from_secs(30), || {
        let o = d
            .pjw()
            .args(["report", "-J", id, "--format", "json"])
            .output()
            .unwrap();
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .ok()
            .and_then(|v| v.as_array().and_then(|a| a.first().cloned()))
            .is_some_and(|j| j["end"] == want)
    });
    assert!(ok, "job {id} not recorded {want}: {last}");
}

/// Make character device `path` with number `major:minor`, mode 0666.
fn mknod(path: &Path, major: u32, minor: u32) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mknod only creates a file in our own temp dir.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    set_mode(path, 0o666);
}

/// A GPU job's script: once inside its pjw job, write its cgroup, its CPUs, Slurm's
/// `SLURM_JOB_GPUS` and what opening each fake GPU gave (`I ENXIO`: past the fence, no driver;
/// `I EPERM`: fenced), then wait for GO (bounded).
fn gpu_job_script(out: &Path, go: &Path, dev: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         i=0; while ! grep -q /job- /proc/self/cgroup && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n\
         {{ grep '^0::' /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status; echo \"gpus $SLURM_JOB_GPUS\"\n\
           echo \"env $CUDA_VISIBLE_DEVICES $PJW_GPUS\"\n\
           for n in 0 1 2 3; do\n\
             e=$(cat {dev}/nvidia$n </dev/null 2>&1 | head -n 1)\n\
             case $e in *'No such device or address'*) e=ENXIO;; *'Operation not permitted'*) e=EPERM;; esac\n\
             echo \"$n $e\"\n\
           done; }} > {out}.tmp\n\
         mv {out}.tmp {out}\n\
         i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n",
        out = out.display(),
        go = go.display(),
        dev = dev.display()
    )
}

/// Issue 16, item 5: Slurm with four fake GPUs — gres.conf `File=` on character devices
/// 195:0-3 made with mknod, as Slurm's own test suite does — and pjw's `[gpus]` declaring the
/// same devices in the same order (GPUs 0 and 2 local to one CPU, 1 and 3 to the other; GPU 3
/// labelled NUMA node 1, the others 0, so that pjw left to itself would give a first 1-GPU job
/// GPU 3, alone on its node, while Slurm gives GPU 0: the test tells them apart). Two
/// `sbatch --gres=gpu:1` jobs at once: each runs on the GPU Slurm chose (`SLURM_JOB_GPUS`, gres
/// index i = pjw GPU i), fenced off the other three by the v1 devices controller, on the CPU
/// local to it. A GPU the node lacks, given to `pjw job register`, is refused.
#[test]
fn slurm_gres_gpu_jobs_get_slurms_gpu_fenced_with_local_cpus() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    if !Path::new("/sys/fs/cgroup/devices/devices.deny").exists() {
        skip!("no cgroup v1 devices controller: this test checks the v1 fence (the v2 BPF fence is checked in the v2 guest's gpu_fence test)");
    }
    let _turn = slurm_turn();
    let dev = tempfile::Builder::new()
        .prefix("pjw-slurm-gpu")
        .tempdir()
        .expect("temp dir");
    set_mode(dev.path(), 0o755);
    let cpu: Vec<u32> = two.iter().collect();
    let mut config = wlm_config(&two, "SLURM_JOB_ID");
    for i in 0..4u32 {
        let p = dev.path().join(format!("nvidia{i}"));
        mknod(&p, 195, i);
        config += &format!(
            "[[gpus.device]]\nfile = \"{}\"\nvendor = \"nvidia\"\ncpus = \"{}\"\nnuma = {}\n",
            p.display(),
            cpu[i as usize % 2],
            if i == 3 { 1 } else { 0 }
        );
    }
    let d = TestDaemon::start(&pjw_bin(), &config);
    let w = Wlm::up_with("slurm-up.sh", &d, Some(dev.path()));
    let out = w.out();

    let go = out.join("go");
    let mut ids = Vec::new();
    for n in 0..2 {
        let script = out.join(format!("gpu{n}.sh"));
        std::fs::write(
            &script,
            gpu_job_script(&out.join(format!("gpu{n}.out")), &go, dev.path()),
        )
        .unwrap();
        let o = w
            .cmd("sbatch")
            .args(["-n1", "--gres=gpu:1", "-o", "/dev/null"])
            .arg(&script)
            .output()
            .unwrap();
        let text = ok(&o, "sbatch");
        ids.push(text.trim().rsplit(' ').next().unwrap().to_string());
    }
    let mut gpus_seen = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let p = out.join(format!("gpu{n}.out"));
        assert!(
            TestDaemon::wait_for(Duration::from_secs(60), || p.exists()),
            "job {id} never wrote {}:\n{}\n{}",
            p.display(),
            d.log(),
            w.logs()
        );
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with(&format!("/job-slurm:{id}")),
            "slurm job {id} ran in {:?}\n{}",
            lines[0],
            w.logs()
        );
        let allowed = CpuSet::parse_list(lines[1].split_once(':').unwrap().1.trim()).unwrap();
        let slurm_gpu: u32 = lines[2]
            .strip_prefix("gpus ")
            .and_then(|g| g.trim().parse().ok())
            .unwrap_or_else(|| panic!("job {id}: SLURM_JOB_GPUS {:?}", lines[2]));
        // pjw gave the job exactly Slurm's GPU...
        let st = d.status();
        let j = jobs_of(&st, "slurm")
            .into_iter()
            .find(|j| j["id"] == format!("slurm:{id}"))
            .unwrap_or_else(|| panic!("job {id} not in {st:#}"));
        assert_eq!(j["gpus"], slurm_gpu.to_string(), "job {id}: {j:#}");
        // ...on the CPU local to it...
        assert_eq!(cpus_of(&j), allowed, "job {id} runs on its pjw cpus");
        assert_eq!(
            allowed.iter().collect::<Vec<_>>(),
            [cpu[slurm_gpu as usize % 2]],
            "job {id}: cpus {allowed} not local to gpu {slurm_gpu}"
        );
        // ...with pjw's variables (the TaskProlog's): the CUDA runtime sees its one GPU as 0
        // inside the fence; PJW_GPUS names the host's...
        assert_eq!(
            lines[3],
            format!("env 0 {slurm_gpu}"),
            "job {id}\n{}",
            w.logs()
        );
        // ...and fenced off the others.
        let want: Vec<String> = (0..4u32)
            .map(|i| format!("{i} {}", if i == slurm_gpu { "ENXIO" } else { "EPERM" }))
            .collect();
        assert_eq!(
            lines[4..],
            want,
            "job {id} on gpu {slurm_gpu}:\n{}",
            d.log()
        );
        gpus_seen.push(slurm_gpu);
    }
    assert_ne!(gpus_seen[0], gpus_seen[1], "two jobs on one GPU");
    let st = d.status();
    assert_eq!(st["gpus"], "0-3", "{st:#}");
    let left: pjw_core::GpuSet = (0..4)
        .filter(|g| !gpus_seen.contains(g))
        .map(pjw_core::GpuId)
        .collect();
    assert_eq!(st["free_gpus"], left.to_string(), "{st:#}");

    // A hook passing a GPU the node lacks (or a UUID) is refused with the reason; no job.
    for (list, why) in [
        ("7", "slurm gave the job gpu 7, but this node has gpus 0-3"),
        ("GPU-0aa1", "names a GPU by UUID"),
    ] {
        let o = d
            .pjw()
            .args([
                "job", "register", "--wlm", "slurm", "-j", "999", "-u", "nobody", "-c", "1",
                "--gpus", list,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(why),
            "--gpus {list}: {err}"
        );
    }
    assert_eq!(jobs_of(&d.status(), "slurm").len(), 2);

    std::fs::write(&go, "").unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "slurm")
            .is_empty()
            && no_job_cgroups(&d)),
        "slurm gpu jobs left after the epilog:\n{:#}\n{}",
        d.status(),
        w.logs()
    );
    assert_eq!(d.status()["free_gpus"], "0-3");
    let state = w.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
    let state = ok(&state, "sinfo");
    assert!(!state.contains("drain"), "node {state:?}:\n{}", w.logs());
}

/// `prog` run through the manager's environment as user `name` (setpriv, no supplementary
/// groups).
fn as_user_of(w: &Wlm, name: &str, prog: &str) -> Command {
    let mut c = w.cmd("setpriv");
    c.args(["--reuid", name, "--regid", name, "--clear-groups", prog]);
    // srun passes its environment to the tasks: none of the runner's own thread settings.
    for v in [
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OMP_PLACES",
        "OMP_PROC_BIND",
        "PJW_THREAD_ENV",
    ] {
        c.env_remove(v);
    }
    c
}

/// Build the OpenMP probe (tests/fixtures/omp_probe.c) with gcc -fopenmp (libgomp) into `dir`.
fn build_probe(dir: &Path) -> PathBuf {
    let exe = dir.join("omp_probe");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/omp_probe.c");
    let o = Command::new("gcc")
        .args(["-fopenmp", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run gcc (build-essential)");
    ok(&o, "gcc -fopenmp omp_probe.c");
    set_mode(&exe, 0o755);
    exe
}

/// What the probe printed, checked for a task of `cpus` CPUs: its first line is its
/// `Cpus_allowed_list` with `cpus` CPUs, OpenMP saw that many (`omp_get_num_procs`), was told
/// `threads` (`OMP_NUM_THREADS`) and ran a team of that many, inside a pjw Slurm job. None, or
/// what was wrong.
fn probe_wrong(text: &str, cpus: usize, threads: usize) -> Option<String> {
    let l: Vec<&str> = text.lines().collect();
    let first = l
        .first()
        .and_then(|f| f.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| CpuSet::parse_list(v.trim()).ok());
    let want = [
        format!("procs {cpus}"),
        format!("omp_num_threads {threads}"),
        format!("team {threads}"),
    ];
    let good = first.is_some_and(|c| c.len() == cpus)
        && l.get(1..4).is_some_and(|got| got == want)
        && l.get(4).is_some_and(|c| c.contains("/job-slurm:"));
    (!good).then(|| format!("{text:?}"))
}

/// Issue 23, item 1, as a user of the live Slurm wired as the project ships it (pjw's SPANK
/// plugin `required`): ten `srun -c1` steps, five `sbatch -c1` scripts, and the same with
/// `-c2`, all submitted at once, each run an OpenMP program (gcc -fopenmp, libgomp) as its
/// first instruction — the batch scripts *are* the program (`#!probe`). Each prints a
/// `Cpus_allowed_list` of its job's size as its first output, and OpenMP sizes itself to it
/// (`omp_get_num_procs()`, `OMP_NUM_THREADS`, the team). A job script of `-n2 -c1` gets a
/// task's count, 1 (the ranks its `mpirun` would start inherit it), and its `srun` tasks 1
/// each (the script's value is pjw's, replaced) unless the user
/// set their own (kept). Then the failure modes: with the daemon unreachable a `required`
/// plugin fails the task before it runs a single instruction, and an `optional` one lets it run
/// and be adopted after exec (the figure printed is adoption's delay; the plugin's is 0).
#[test]
fn slurm_tasks_are_jailed_from_their_first_instruction() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    let t0 = Instant::now();
    pjw_testkit::machine::test_user("pjwspank");
    let _turn = slurm_turn();
    let d = TestDaemon::start(&pjw_bin(), &wlm_config(&two, "SLURM_JOB_ID"));
    let w = Wlm::up("slurm-up.sh", &d);
    let out = w.out();
    let probe = build_probe(w.dir());
    let probe_s = probe.display().to_string();

    // pjw check says which path the node's tasks take.
    let o = d
        .pjw()
        .args(["check", "--json", "--config"])
        .arg(d.dir().join("pjw.toml"))
        .env("SLURM_CONF", w.dir().join("slurm.conf"))
        .env("PJW_SOCKET", d.socket())
        .output()
        .unwrap();
    let lines: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "pjw check --json: {e}: {}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    let tasks = lines
        .as_array()
        .and_then(|a| a.iter().find(|l| l["name"] == "slurm-tasks"))
        .unwrap_or_else(|| panic!("no slurm-tasks line: {lines:#}"));
    assert_eq!(tasks["status"], "OK", "{tasks:#}");
    assert!(
        tasks["detail"]
            .as_str()
            .unwrap_or("")
            .contains("SPANK plugin (required"),
        "{tasks:#}"
    );

    // Everything at once: Slurm runs what fits on the two CPUs and queues the rest.
    let mut sruns = Vec::new();
    for c in [1usize, 2] {
        for _ in 0..10 {
            let child = as_user_of(&w, "pjwspank", "timeout")
                .args(["300", "srun", &format!("-c{c}"), &probe_s])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("srun");
            sruns.push((c, child));
        }
    }
    let mut batch = Vec::new();
    for c in [1usize, 2] {
        for n in 0..5 {
            let script = out.join(format!("sb{c}-{n}.sh"));
            std::fs::write(&script, format!("#!{probe_s}\n")).unwrap();
            set_mode(&script, 0o755);
            let res = out.join(format!("sb{c}-{n}.out"));
            let o = as_user_of(&w, "pjwspank", "sbatch")
                .arg(format!("-c{c}"))
                .arg("-o")
                .arg(&res)
                .arg(&script)
                .output()
                .unwrap();
            ok(&o, "sbatch");
            batch.push((c, res));
        }
    }
    // A script of two 1-CPU tasks: the script's count is a task's, its tasks' their own.
    let nested = out.join("nested.sh");
    std::fs::write(
        &nested,
        format!(
            "#!/bin/sh\necho \"script $OMP_NUM_THREADS\" > {o}/nested-script.out\n\
             srun --output={o}/nested-%t.out {probe_s}\n\
             OMP_NUM_THREADS=3 srun -n1 --output={o}/nested-own.out {probe_s}\n\
             echo done > {o}/nested-done\n",
            o = out.display()
        ),
    )
    .unwrap();
    set_mode(&nested, 0o755);
    let o = as_user_of(&w, "pjwspank", "sbatch")
        .args(["-n2", "-c1", "-o", "/dev/null"])
        .arg(&nested)
        .output()
        .unwrap();
    ok(&o, "sbatch nested.sh");

    let mut wrong = Vec::new();
    for (c, child) in sruns {
        let o = child.wait_with_output().unwrap();
        let text = ok(&o, &format!("srun -c{c}\n{}", w.logs()));
        if let Some(why) = probe_wrong(&text, c, c) {
            wrong.push(format!("srun -c{c}: {why}"));
        }
    }
    for (c, res) in &batch {
        let done = TestDaemon::wait_for(Duration::from_secs(120), || {
            std::fs::read_to_string(res).is_ok_and(|t| t.contains("cgroup "))
        });
        let text = std::fs::read_to_string(res).unwrap_or_default();
        if !done {
            wrong.push(format!(
                "sbatch -c{c}: no output in {}: {text:?}",
                res.display()
            ));
        } else if let Some(why) = probe_wrong(&text, *c, *c) {
            wrong.push(format!("sbatch -c{c}: {why}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 30 tasks were not jailed from their first instruction, or OpenMP sized itself wrong:\n{}\n{}\n{}",
        wrong.len(),
        wrong.join("\n"),
        w.logs(),
        d.log()
    );
    assert!(
        TestDaemon::wait_for(Duration::from_secs(120), || out
            .join("nested-done")
            .exists()),
        "nested.sh did not finish:\n{}",
        w.logs()
    );
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    assert_eq!(
        read("nested-script.out").trim(),
        "script 1",
        "the threads of a script of two 1-CPU tasks: a task's (its mpirun ranks inherit them)"
    );
    for t in ["nested-0.out", "nested-1.out"] {
        // Each task has the job's two CPUs (pjw jails the job, not each task) and one thread.
        assert_eq!(probe_wrong(&read(t), 2, 1), None, "{t}");
    }
    assert_eq!(
        probe_wrong(&read("nested-own.out"), 2, 3),
        None,
        "the user's own OMP_NUM_THREADS is kept"
    );
    let joined = d
        .log()
        .matches("slurm task joined its job before exec")
        .count();
    assert!(joined >= 33, "{joined} joins logged:\n{}", d.log());
    // The join's cost: the daemon's move of the task (one cgroup.procs write per hierarchy).
    let mut moves: Vec<u64> = d
        .log()
        .lines()
        .filter(|l| l.contains("slurm task joined its job before exec"))
        .filter_map(|l| l.split("move_us=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse().ok())
        .collect();
    moves.sort_unstable();
    eprintln!(
        "join: {} tasks moved before exec; move min {} us, median {} us, max {} us",
        moves.len(),
        moves.first().unwrap_or(&0),
        moves.get(moves.len() / 2).unwrap_or(&0),
        moves.last().unwrap_or(&0)
    );

    // The daemon unreachable: `required` fails the task before its first instruction...
    let plugstack = w.dir().join("plugstack.conf");
    let shipped = std::fs::read_to_string(&plugstack).unwrap();
    let so = shipped.split_whitespace().nth(1).unwrap().to_string();
    let nowhere = format!("socket={}", w.dir().join("nowhere.sock").display());
    std::fs::write(&plugstack, format!("required {so} {nowhere}\n")).unwrap();
    let o = as_user_of(&w, "pjwspank", "timeout")
        .args(["120", "srun", "-c1", &probe_s])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && !String::from_utf8_lossy(&o.stdout).contains("Cpus_allowed_list")
            && err.contains("not joined to its pjw job"),
        "a required join that failed let the task run:\n{}\n{err}",
        String::from_utf8_lossy(&o.stdout)
    );
    // ...`optional` lets it run, and adoption moves it after exec.
    std::fs::write(&plugstack, format!("optional {so} {nowhere}\n")).unwrap();
    let o = as_user_of(&w, "pjwspank", "timeout")
        .args(["120", "srun", "-c1", &probe_s, "wait"])
        .output()
        .unwrap();
    let text = ok(&o, "srun (optional plugin, no daemon)");
    let late = text
        .lines()
        .find_map(|l| l.strip_prefix("confined_after_us "))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(-1);
    assert!(
        late >= 0,
        "not adopted after exec either: {text:?}\n{}",
        d.log()
    );
    eprintln!(
        "optional plugin, no daemon: first {:?}, adopted {late} us after exec (with the plugin: before it)",
        text.lines().next().unwrap_or("")
    );
    std::fs::write(&plugstack, shipped).unwrap();

    assert!(
        TestDaemon::wait_for(Duration::from_secs(120), || jobs_of(&d.status(), "slurm")
            .is_empty()
            && no_job_cgroups(&d)),
        "slurm jobs left:\n{:#}\n{}",
        d.status(),
        w.logs()
    );
    let state = w.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
    let state = ok(&state, "sinfo");
    assert!(!state.contains("drain"), "node {state:?}:\n{}", w.logs());
    eprintln!(
        "slurm_tasks_are_jailed_from_their_first_instruction: {:?}",
        t0.elapsed()
    );
}

/// Issue 25, item 2, as a user of the live Slurm: a job named `x MinMemoryNode=1e-9` (which
/// once gave a memory of 0, a refused registration, a failed Prolog and a drained node), one
/// named `x MinMemoryNode=0.001K` (a 1-byte limit), and one whose name forges smaller memory
/// lines after newlines are each registered with the memory Slurm gave them; every Prolog
/// exits 0 (the jobs run, the node is not drained).
#[test]
fn slurm_prolog_registers_the_real_memory_whatever_the_job_name() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    pjw_testkit::machine::test_user("pjwatk1");
    let _turn = slurm_turn();
    let d = TestDaemon::start(&pjw_bin(), &wlm_config(&two, "SLURM_JOB_ID"));
    let w = Wlm::up("slurm-up.sh", &d);
    let out = w.out();
    let cases: [(&str, &[&str], u64); 4] = [
        ("x MinMemoryNode=1e-9", &["--mem-per-cpu=100M"], 100),
        ("x MinMemoryNode=0.001K", &["--mem=150M"], 150),
        (
            "x MinMemoryCPU=1M\n     Nodes=vm CPU_IDs=0 Mem=1 GRES=\n   MinMemoryNode=1M TRES=cpu=1,mem=1M",
            &["--mem-per-cpu=120M"],
            120,
        ),
        ("x MinMemoryNode=1e-9", &["-n2", "--mem-per-cpu=64M"], 128),
    ];
    for (n, (name, args, want_mib)) in cases.iter().enumerate() {
        let go = out.join(format!("go-{n}"));
        let report = out.join(format!("mem-{n}.out"));
        let script = out.join(format!("mem-{n}.sh"));
        std::fs::write(&script, job_script(&report, &go)).unwrap();
        set_mode(&script, 0o755);
        let o = w
            .cmd("setpriv")
            .args([
                "--reuid",
                "pjwatk1",
                "--regid",
                "pjwatk1",
                "--clear-groups",
                "sbatch",
            ])
            .args(*args)
            .args(["-o", "/dev/null", "-J", name])
            .arg(&script)
            .output()
            .unwrap();
        let text = ok(&o, "sbatch");
        let id = text.trim().rsplit(' ').next().unwrap().to_string();
        let (cg, _, _) = job_report(&report);
        assert!(
            cg.ends_with(&format!("/job-slurm:{id}")),
            "job {id} ({name:?}) ran in {cg:?}\n{}\n{}",
            d.log(),
            w.logs()
        );
        let st = d.status();
        let j = jobs_of(&st, "slurm")
            .into_iter()
            .find(|j| j["id"] == format!("slurm:{id}"))
            .unwrap_or_else(|| panic!("no pjw job slurm:{id}: {st:#}"));
        eprintln!(
            "job {id} named {name:?} ({args:?}): registered with mem {}",
            j["mem"]
        );
        assert_eq!(
            j["mem"],
            want_mib << 20,
            "job {id} named {name:?} was not registered with Slurm's memory: {j:#}"
        );
        assert_eq!(
            memory_limit(&d, &format!("job-slurm:{id}")),
            Some(want_mib << 20),
            "the cgroup's limit"
        );
        std::fs::write(&go, "").unwrap();
    }
    // Issue 25, N1: a job array of two tasks that run at once. The last task to start keeps the
    // array's own number, so its Prolog's `squeue -j ID` lists both tasks (squeue matches the
    // array's id too); only its own line is read, it is registered with its memory, and the
    // node is not drained.
    let go = out.join("go-array");
    let report = out.join("array-$SLURM_ARRAY_TASK_ID.out");
    let script = out.join("array.sh");
    std::fs::write(&script, job_script(&report, &go)).unwrap();
    set_mode(&script, 0o755);
    let o = w
        .cmd("setpriv")
        .args(["--reuid", "pjwatk1", "--regid", "pjwatk1", "--clear-groups"])
        .args([
            "sbatch",
            "--array=0-1",
            "--mem-per-cpu=90M",
            "-o",
            "/dev/null",
        ])
        .args(["-J", "x MinMemoryNode=1e-9"])
        .arg(&script)
        .output()
        .unwrap();
    let text = ok(&o, "sbatch --array");
    let base: u64 = text.trim().rsplit(' ').next().unwrap().parse().unwrap();
    for t in 0..2 {
        job_report(&out.join(format!("array-{t}.out")));
    }
    let st = d.status();
    let arr: Vec<_> = jobs_of(&st, "slurm")
        .into_iter()
        .filter(|j| {
            j["id"]
                .as_str()
                .and_then(|i| i.strip_prefix("slurm:"))
                .and_then(|i| i.parse::<u64>().ok())
                .is_some_and(|i| i == base || i == base + 1)
        })
        .collect();
    eprintln!("array {base}: {} jobs registered: {arr:?}", arr.len());
    assert_eq!(arr.len(), 2, "array {base}'s tasks: {st:#}\n{}", w.logs());
    for j in &arr {
        assert_eq!(j["mem"], 90u64 << 20, "array task {j:#}");
    }
    std::fs::write(&go, "").unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || jobs_of(&d.status(), "slurm")
            .is_empty()),
        "slurm jobs left:\n{:#}\n{}",
        d.status(),
        w.logs()
    );
    let state = w.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
    let state = ok(&state, "sinfo");
    assert!(!state.contains("drain"), "node {state:?}:\n{}", w.logs());
    assert!(!w.logs().contains("prolog failed"), "{}", w.logs());
}

/// A Slurm daemon stopped with SIGSTOP; continued when dropped (also when the test fails, so
/// down.sh can stop it).
struct Stopped(i32);

impl Stopped {
    fn slurmctld(w: &Wlm) -> Stopped {
        let pids = std::fs::read_to_string(w.dir().join("pids")).unwrap();
        let pid: i32 = pids
            .lines()
            .filter_map(|l| l.strip_prefix("slurmctld "))
            .next_back()
            .and_then(|p| p.trim().parse().ok())
            .expect("slurmctld's pid in DIR/pids");
        // SAFETY: kill(2) on the pid the up script recorded for the daemon it started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above; continuing a stopped process of our own.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// `GET /metrics` on `port`: the body.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(text)
}

/// The end reason the daemon recorded for job `id`, once it has one.
fn end_reason(d: &TestDaemon, id: &str) -> Option<String> {
    let o = d
        .pjw()
        .args(["report", "-J", id, "--format", "json"])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    v.as_array()?.first()?["end_reason"]
        .as_str()
        .map(String::from)
}

/// How long the lease test keeps slurmctld stopped: the minute (six of the test's 10 s
/// leases; decisions.md (ce) on why it is not shortened).
const OUTAGE: Duration = Duration::from_secs(60);

/// Issue 27, leases: pjw's Epilog is left out of slurm.conf, so no job is ever ended by it.
/// A job that finishes is ended by Slurm's word (`squeue` says COMPLETED); then slurmctld is
/// stopped (SIGSTOP) for a minute ([`OUTAGE`]): a running job is never ended while
/// it gives no answer — its lease is renewed by its processes, and status shows the asks got no
/// answer — while a held job with no process and no word ends when its 10 s lease runs out; the
/// metrics page keeps answering with the start-time figures, and promtool accepts it. Once
/// slurmctld is back, cancelling the running job ends it in pjw by Slurm's word.
#[test]
fn slurm_jobs_without_their_epilog_end_by_their_lease_and_a_stopped_controller_ends_none() {
    require!(Component::Root, Component::Slurm);
    let two = need_cpus!(2);
    let _turn = slurm_turn();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let dir = Wlm::new_dir();
    let conf = dir.path().join("slurm.conf");
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!(
            "{}[lease]\ncheck_interval = \"2s\"\ncheck_timeout = \"5s\"\nduration = \"10s\"\ncommand_env = [\"SLURM_CONF={}\"]\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
            wlm_config(&two, "SLURM_JOB_ID"),
            conf.display()
        ),
    );
    let w = Wlm::up_in(
        dir,
        "slurm-up.sh",
        &d,
        None,
        "required",
        &[("PJW_EPILOG", "0")],
    );
    let sbatch = |name: &str, what: &str| {
        let o = w
            .cmd("sbatch")
            .args([
                "--parsable",
                "-n1",
                "-o",
                "/dev/null",
                "-J",
                name,
                "--wrap",
                what,
            ])
            .output()
            .unwrap();
        ok(&o, "sbatch").trim().to_string()
    };
    let short = sbatch("short", "sleep 2");
    // The attack: a running job named to look ended to a reader of scontrol's or squeue's
    // text (security.md L1). pjw reads only job numbers and state enums.
    let long = sbatch("1|COMPLETED 2|COMPLETED JobState=COMPLETED", "sleep 600");
    let running = |id: &str| {
        d.status()["jobs"].as_array().is_some_and(|a| {
            a.iter()
                .any(|j| j["id"] == format!("slurm:{id}") && j["state"] == "running")
        })
    };
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || running(&long)),
        "slurm:{long} never ran in pjw\n{}\n{}",
        d.log(),
        w.logs()
    );
    // The short job finished; no Epilog came: Slurm's word ends it.
    let mut why = None;
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || {
            why = end_reason(&d, &format!("slurm:{short}"));
            why.is_some()
        }),
        "slurm:{short} not ended\n{}",
        d.log()
    );
    assert_eq!(
        why.as_deref(),
        Some("lease: slurm says COMPLETED"),
        "{}",
        d.log()
    );

    // slurmctld stopped for a minute.
    let stopped = Stopped::slurmctld(&w);
    let t0 = std::time::Instant::now();
    // A held registration Slurm never made (as a Prolog's whose job then vanished): no
    // process, and no answer about it while slurmctld is stopped. Its lease ends it.
    let held = format!("9{}", std::process::id());
    let o = d
        .pjw()
        .args([
            "job", "register", "--wlm", "slurm", "-j", &held, "-u", "nobody", "-c", "1",
        ])
        .output()
        .unwrap();
    ok(&o, "pjw job register");
    let mut silent = false;
    let mut held_why = None;
    let mut page = String::new();
    while t0.elapsed() < OUTAGE {
        assert!(
            running(&long),
            "slurm:{long} ended while slurmctld was stopped\n{}",
            d.log()
        );
        let st = d.status();
        let lease = st["jobs"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|j| j["id"] == format!("slurm:{long}"))
                    .cloned()
            })
            .map(|j| j["lease"].clone())
            .unwrap_or_default();
        silent |= lease["word"]
            .as_str()
            .is_some_and(|w| w.starts_with("no answer"));
        if held_why.is_none() {
            held_why = end_reason(&d, &format!("slurm:{held}"));
        }
        // Scraped once the held job has ended, while slurmctld is still stopped.
        if page.is_empty() && held_why.is_some() {
            page = scrape(port);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // Asks were made and got no answer (what would have ended the job did run).
    assert!(silent, "no 'no answer' seen for slurm:{long}:\n{}", d.log());
    assert!(
        held_why.as_deref().is_some_and(|r| r
            .starts_with("lease: expired (no word from slurm that it runs, and no process, for ")),
        "held job: {held_why:?}\n{}",
        d.log()
    );
    for want in [
        "pjw_jobs_started_total 3",
        "pjw_jobs_ended_total 2",
        "pjw_job_start_wait_seconds{window=\"300s\",stat=\"p90\"} ",
        "pjw_jobs_started_per_second{window=\"300s\"} ",
    ] {
        assert!(page.contains(want), "{want:?} missing from\n{page}");
    }
    if let Ok(mut c) = Command::new("/usr/bin/promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        panic!("promtool missing: run scripts/install-deps.sh");
    }
    drop(stopped);
    // Back: cancelling the running job ends it in pjw by Slurm's word.
    ok(&w.cmd("scancel").arg(&long).output().unwrap(), "scancel");
    let mut why = None;
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || {
            why = end_reason(&d, &format!("slurm:{long}"));
            why.is_some()
        }),
        "slurm:{long} not ended after scancel\n{}",
        d.log()
    );
    assert_eq!(
        why.as_deref(),
        Some("lease: slurm says CANCELLED"),
        "{}",
        d.log()
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(10), || {
        no_job_cgroups(&d)
    }));
}
