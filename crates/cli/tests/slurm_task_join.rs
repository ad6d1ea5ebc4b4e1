//! The join request of pjw's Slurm SPANK plugin (`slurm_task`), attacked (root tests, host):
//! a real daemon, real cgroups, processes whose ancestry the test builds — a copy of bash named
//! `slurmstepd` whose argv is `slurmstepd: [ID.0]` stands for Slurm's step daemon, as in
//! crates/daemon/src/adopt.rs's lineage test. The client is a few lines of Python speaking the
//! protocol's frames, so the attacker controls every byte. Adoption is off in the daemon
//! (`[adopt] env = []`): a process that lands in a job got there by the join alone. The live
//! Slurm test of the plugin is `slurm_tasks_are_jailed_from_their_first_instruction`
//! (wlm_live.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pjw_testkit::{require_root, TestDaemon};

const CONFIG: &str = "cpus = \"0-1\"\n[adopt]\nenv = []\n";

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// Send `req` (a request's JSON, without the frame) to the daemon from a process started by
/// `shell` (a `sh -c` script whose `$CLIENT` runs the client); the answer's JSON and the job
/// cgroup the client was in when it got it.
struct Fixture {
    d: TestDaemon,
    dir: tempfile::TempDir,
    id: String,
}

const CLIENT: &str = r#"
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
b = sys.argv[2].encode()
s.sendall(struct.pack(">I", len(b)) + b)
n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
resp = json.loads(s.recv(n, socket.MSG_WAITALL).decode())
print(json.dumps({"resp": resp, "cgroup": open("/proc/self/cgroup").read()}))
"#;

impl Fixture {
    /// A daemon holding registered job `slurm:ID` (ID unique to this run) of user `owner`.
    fn new(owner: &str) -> Fixture {
        let d = TestDaemon::start(&pjw_bin(), CONFIG);
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        let id = pjw_testkit::machine::wlm_job_id(23);
        let o = d
            .pjw()
            .args([
                "job", "register", "--wlm", "slurm", "-j", &id, "-u", owner, "-c", "1",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("client.py"), CLIENT).unwrap();
        std::fs::copy("/bin/bash", dir.path().join("slurmstepd")).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Fixture { d, dir, id }
    }

    fn client(&self) -> String {
        format!(
            "/usr/bin/python3 {} {}",
            self.dir.path().join("client.py").display(),
            self.d.socket().display()
        )
    }

    /// The join request as the plugin writes it.
    fn request(uid: u32) -> String {
        Fixture::request_with(uid, "[\"HOME\"]")
    }

    /// The same, with the task's environment holding the variables of `set` (a JSON array).
    fn request_with(uid: u32, set: &str) -> String {
        format!(
            r#"{{"v":1,"req":{{"type":"slurm_task","uid":{uid},"cpus_per_task":1,"tasks":1,"set":{set}}}}}"#
        )
    }

    /// Run `cmd` (argv), whose output is the client's; the answer and the pjw job the client was
    /// in when it printed.
    fn ask(&self, cmd: &mut Command) -> (serde_json::Value, Option<String>) {
        // The fake step daemon is a copy of bash made by this test: a child another test
        // thread forked while the copy was written holds its write descriptor until that
        // child's exec, and an exec of the copy meanwhile fails (ETXTBSY; bash says
        // "slurmstepd: Success"). Run again then, a few times: nothing was asked yet.
        let stepd = format!("{}: ", self.dir.path().join("slurmstepd").display());
        let mut o = cmd.stdin(Stdio::null()).output().unwrap();
        for _ in 0..5 {
            if !(o.stdout.is_empty() && String::from_utf8_lossy(&o.stderr).contains(&stepd)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            o = cmd.stdin(Stdio::null()).output().unwrap();
        }
        let text = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
            panic!(
                "client said {text:?} ({e}); stderr {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
        let cg = v["cgroup"].as_str().unwrap_or("");
        let job = pjw_kernelfs::proc_cgroup::parse(cg)
            .ok()
            .and_then(|l| self.d.driver().job_of(&l));
        (v["resp"].clone(), job)
    }

    /// The client as a child of a root process whose executable is `exe` and argv[0] `argv0`
    /// (`slurmstepd: [ID.0]`), sending the plugin's request for `uid`. `deeper`: below a shell
    /// below it, not its direct child.
    fn below_step(&self, exe: &Path, argv0: &str, uid: u32, deeper: bool) -> Command {
        self.below_step_asking(exe, argv0, &Fixture::request(uid), deeper)
    }

    /// [`Fixture::below_step`] sending `req`.
    fn below_step_asking(&self, exe: &Path, argv0: &str, req: &str, deeper: bool) -> Command {
        let client = format!("{} '{req}'", self.client());
        // `; exit` keeps bash from exec'ing the client in its own place.
        let script = if deeper {
            format!("sh -c \"{}; exit\"; exit", client.replace('"', "\\\""))
        } else {
            format!("{client}; exit")
        };
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!("exec -a '{argv0}' {} -c \"$0\"", exe.display()));
        c.arg(script);
        c
    }

    fn job(&self) -> String {
        format!("job-slurm:{}", self.id)
    }

    fn step_argv(&self) -> String {
        format!("slurmstepd: [{}.0]", self.id)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self
            .d
            .pjw()
            .args(["job", "end", &format!("slurm:{}", self.id)])
            .output();
    }
}

fn refused(resp: &serde_json::Value, code: &str, why: &str) -> bool {
    resp["type"] == "error"
        && resp["code"] == code
        && resp["message"].as_str().is_some_and(|m| m.contains(why))
}

/// The rule's positive case first, so that the refusals below are refusals of a path that
/// works: slurmstepd's root child, asking for the job's owner, is moved into the job before it
/// answers, and gets the job's CPUs and a thread count. Then, written as attacks, each refused
/// and left where it was: a root process whose parent is not slurmstepd but carries its argv
/// (`exec -a`, a forged step daemon), a grandchild of the step daemon, a task Slurm runs as
/// another user than the job's owner, and a step of a job pjw does not run.
#[test]
fn only_slurmstepds_root_child_joins_the_job_its_step_names() {
    require_root!();
    let f = Fixture::new("root");
    let stepd = f.dir.path().join("slurmstepd");

    let (resp, job) = f.ask(&mut f.below_step(&stepd, &f.step_argv(), 0, false));
    assert_eq!(resp["type"], "started", "{resp:#}\n{}", f.d.log());
    assert_eq!(resp["job"], format!("slurm:{}", f.id));
    assert_eq!(job.as_deref(), Some(f.job().as_str()), "{resp:#}");
    let cpus = pjw_core::CpuSet::parse_list(resp["cpus"].as_str().unwrap()).unwrap();
    assert_eq!(cpus.len(), 1);
    assert!(
        resp["env_defaults"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p[0] == "OMP_NUM_THREADS" && p[1] == "1")),
        "{resp:#}"
    );
    assert!(f.d.log().contains("slurm task joined its job before exec"));
    // A variable the task's environment has is the user's: no default for it.
    let req = Fixture::request_with(0, "[\"OMP_NUM_THREADS\"]");
    let (resp, job) = f.ask(&mut f.below_step_asking(&stepd, &f.step_argv(), &req, false));
    assert_eq!(job.as_deref(), Some(f.job().as_str()), "{resp:#}");
    assert!(
        resp["env_defaults"]
            .as_array()
            .is_none_or(|a| !a.iter().any(|p| p[0] == "OMP_NUM_THREADS")),
        "{resp:#}"
    );
    // A name that is no variable name is a clear refusal, and nothing is moved.
    let req = Fixture::request_with(0, "[\"A\\nB\"]");
    let (resp, job) = f.ask(&mut f.below_step_asking(&stepd, &f.step_argv(), &req, false));
    assert!(refused(&resp, "invalid", "not a variable name"), "{resp:#}");
    assert_eq!(job, None);

    // A forged step daemon: any executable (bash here, root) with slurmstepd's argv.
    let (resp, job) = f.ask(&mut f.below_step(Path::new("/bin/bash"), &f.step_argv(), 0, false));
    assert!(
        refused(&resp, "denied", "not a root slurmstepd"),
        "{resp:#}"
    );
    assert_eq!(job, None, "a forged step daemon's child was moved");

    // Below the step daemon, but not its child (a task's own child, were it root).
    let (resp, job) = f.ask(&mut f.below_step(&stepd, &f.step_argv(), 0, true));
    assert!(
        refused(&resp, "denied", "not a root slurmstepd"),
        "{resp:#}"
    );
    assert_eq!(job, None);

    // Slurm runs the task as another user than the job's owner (a stale registration).
    let (resp, job) = f.ask(&mut f.below_step(&stepd, &f.step_argv(), 65534, false));
    assert!(refused(&resp, "denied", "belongs to uid 0"), "{resp:#}");
    assert_eq!(job, None);

    // A step of a job this daemon does not run.
    let other = format!("slurmstepd: [{}9.0]", f.id);
    let (resp, job) = f.ask(&mut f.below_step(&stepd, &other, 0, false));
    assert!(refused(&resp, "not_found", "not registered"), "{resp:#}");
    assert_eq!(job, None);
}

/// A user's process — the task itself after exec, or anything else the user runs — sends the
/// join request naming the job's owner, from below a step daemon of that job and from outside:
/// refused as not root before the daemon reads anything about it, and not moved. The same
/// request from root below the step daemon is served (the path works).
#[test]
fn a_user_process_cannot_join_a_job() {
    require_root!();
    let uid = pjw_testkit::machine::test_user("pjwatk1");
    pjw_testkit::machine::test_user("pjwatk2");
    let f = Fixture::new("pjwatk1");
    let stepd = f.dir.path().join("slurmstepd");
    for user in ["pjwatk1", "pjwatk2"] {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            user,
            "--regid",
            user,
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(format!("{} '{}'", f.client(), Fixture::request(uid)));
        let (resp, job) = f.ask(&mut c);
        assert!(refused(&resp, "denied", "is refused"), "{user}: {resp:#}");
        assert_eq!(job, None, "{user}'s process was moved into the job");
    }
    // The task itself below its step daemon, after it dropped root (as it runs the user's
    // program): the same.
    let req = Fixture::request(uid);
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!(
            "exec -a '{}' {} -c \"$0\"",
            f.step_argv(),
            stepd.display()
        ))
        .arg(format!(
            "setpriv --reuid pjwatk1 --regid pjwatk1 --clear-groups {} '{req}'; exit",
            f.client()
        ));
    let (resp, job) = f.ask(&mut c);
    assert!(refused(&resp, "denied", "is refused"), "{resp:#}");
    assert_eq!(job, None);
    // Root below the step daemon, for the owner: joined.
    let (resp, job) = f.ask(&mut f.below_step(&stepd, &f.step_argv(), uid, false));
    assert_eq!(resp["type"], "started", "{resp:#}");
    assert_eq!(job.as_deref(), Some(f.job().as_str()));
}
