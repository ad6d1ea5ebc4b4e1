//! What the real-software tests (hpc.rs, hpc_tasks.rs) share: a private daemon whose jobs an
//! unprivileged user runs, as HPC users do; the probe (fixtures/hpc/probe.c) built with gcc's
//! OpenMP and with Open MPI's mpicc; its output parsed; and a sampler of the affinity of every
//! thread of a job's processes.

#![allow(dead_code)] // each test file uses its own part

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use pjw_core::CpuSet;
use pjw_testkit::TestDaemon;

pub fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

/// The unprivileged user the jobs run as (a real account: Open MPI looks its name up).
pub const USER: &str = "pjw-hpc";

/// A daemon, the probe built for it, and the user who runs jobs on it.
pub struct Hpc {
    pub d: TestDaemon,
    pub user: pjw_testkit::User,
    /// Where the probes are: `omp` (OpenMP) and `hybrid` (MPI + OpenMP).
    pub bin: PathBuf,
    home: PathBuf,
}

impl Hpc {
    /// A daemon with `config`, the probes built (`hybrid` only when `mpi`).
    pub fn start(config: &str, mpi: bool) -> Hpc {
        pjw_testkit::machine::test_user(USER);
        let user = pjw_testkit::machine::user_by_name(USER).expect("the test user exists");
        let d = TestDaemon::start(pjw_bin(), config);
        // The user reaches the socket and the probes; the temp dir is root's 0700.
        std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let bin = d.dir().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = d.dir().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid)).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hpc/probe.c");
        compile("gcc", &["-fopenmp"], &src, &bin.join("omp"));
        if mpi {
            compile(
                "mpicc",
                &["-fopenmp", "-DUSE_MPI"],
                &src,
                &bin.join("hybrid"),
            );
        }
        Hpc { d, user, bin, home }
    }

    /// A probe's path as text.
    pub fn probe(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    /// `pjw ARGS` as the user, in a clean environment (no OMP_* or OMPI_* of the test's own).
    pub fn pjw(&self, args: &[&str]) -> Command {
        let mut c = self.command(pjw_bin());
        c.args(args);
        c
    }

    /// `program` as the user, in a clean environment that reaches the daemon.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.uid(self.user.uid)
            .gid(self.user.gid)
            .current_dir(&self.home)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("USER", USER)
            .env("LOGNAME", USER)
            .env("PJW_SOCKET", self.d.socket())
            .stdin(Stdio::null());
        c
    }

    /// `pjw run ARGS -- CMD` as the user, to the end.
    pub fn run(&self, args: &[&str], cmd: &[&str]) -> Output {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.push("--");
        all.extend_from_slice(cmd);
        self.pjw(&all).output().expect("pjw run")
    }

    /// `pjw run ARGS -- CMD` as the user, in the background, its output piped.
    pub fn spawn(&self, args: &[&str], cmd: &[&str]) -> Child {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.push("--");
        all.extend_from_slice(cmd);
        self.pjw(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pjw run")
    }

    /// The CPUs of job `id` while it runs (its cpuset).
    pub fn job_cpus(&self, id: &str) -> Option<CpuSet> {
        self.d.driver().job_cpus(&format!("job-{id}")).ok()
    }

    /// Every thread of job `id`'s processes now.
    pub fn job_threads(&self, id: &str) -> Vec<Task> {
        let pids = self
            .d
            .driver()
            .procs(&format!("job-{id}"))
            .unwrap_or_default();
        let mut out = Vec::new();
        for pid in pids {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for e in rd.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
                    .unwrap_or_default();
                let Some(allowed) = status_field(&status, "Cpus_allowed_list:")
                    .and_then(|v| CpuSet::parse_list(v).ok())
                else {
                    continue;
                };
                out.push(Task {
                    pid,
                    tid,
                    cmdline: cmdline.clone(),
                    allowed,
                });
            }
        }
        out
    }
}

/// One thread of a job.
#[derive(Clone, Debug)]
pub struct Task {
    pub pid: u32,
    pub tid: u32,
    pub cmdline: String,
    pub allowed: CpuSet,
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

fn compile(cc: &str, flags: &[&str], src: &Path, out: &Path) {
    let o = Command::new(cc)
        .args(flags)
        .arg("-O1")
        .arg("-o")
        .arg(out)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        o.status.success(),
        "{cc} {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The probe's first line: the CPUs it could use before it ran anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct First {
    pub allowed: CpuSet,
    /// The MPI rank (`OMPI_COMM_WORLD_RANK`), None outside mpirun.
    pub rank: Option<u32>,
    pub pjw_cpus: Option<CpuSet>,
    pub omp_num_threads: Option<String>,
}

/// One OpenMP thread's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    pub rank: u32,
    pub num: u32,
    pub of: u32,
    pub procs: u32,
    pub cpu: u32,
    pub allowed: CpuSet,
}

/// The probe lines of a job's output (other lines, a launcher's, are left out).
#[derive(Debug, Default)]
pub struct Probe {
    pub first: Vec<First>,
    pub threads: Vec<Thread>,
}

fn fields(line: &str) -> std::collections::HashMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect()
}

impl Probe {
    pub fn parse(out: &str) -> Probe {
        let mut p = Probe::default();
        for line in out.lines() {
            let f = fields(line);
            let set = |k: &str| f.get(k).and_then(|v| CpuSet::parse_list(v).ok());
            let num = |k: &str| f.get(k).and_then(|v| v.parse::<u32>().ok());
            if line.starts_with("first ") {
                p.first.push(First {
                    allowed: set("allowed").expect("first allowed="),
                    rank: num("rank"),
                    pjw_cpus: set("pjw_cpus"),
                    omp_num_threads: f
                        .get("omp_num_threads")
                        .filter(|v| **v != "-")
                        .map(|v| v.to_string()),
                });
            } else if line.starts_with("thread ") {
                p.threads.push(Thread {
                    rank: num("rank").expect("rank="),
                    num: num("num").expect("num="),
                    of: num("of").expect("of="),
                    procs: num("procs").expect("procs="),
                    cpu: num("cpu").expect("cpu="),
                    allowed: set("allowed").expect("allowed="),
                });
            }
        }
        p
    }

    /// The threads of rank `r`.
    pub fn rank(&self, r: u32) -> Vec<&Thread> {
        self.threads.iter().filter(|t| t.rank == r).collect()
    }
}

/// The text of an output, both streams, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
