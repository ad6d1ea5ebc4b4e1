//! pjw-testkit: run a private `pjw daemon` for a test and leave nothing behind.
//!
//! [`TestDaemon::start`] runs the daemon with its socket and state in a temporary directory and
//! its cgroup parent at `self/pjw-test-<pid>-<n>`, i.e. below the test process's own cgroup in
//! every hierarchy. Dropping it (also when the test fails) stops the daemon, kills every process
//! left in the test's cgroups — all of them started by the test — and removes the cgroups.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pjw_cgroup::{Driver, ParentSpec};

pub mod fuse;
pub mod job;
pub mod machine;
pub mod netns;
pub mod pg;
pub mod pool;
pub mod skip;
pub mod tls;

pub use job::{assert_job_ok, expect_exit, JobOutput};
pub use machine::User;
pub use skip::{guest_tier, in_vm_guest, Component};

static COUNTER: AtomicU32 = AtomicU32::new(0);
static SWEEP: std::sync::Once = std::sync::Once::new();

/// With `PJW_KEEP_FAILED_LOGS=DIR`, a failing test's daemon log is copied whole to
/// `DIR/<parent's last part>.log` (the test prints only its tail; the temporary directory goes).
fn keep_failed_log(dir: &Path, parent: &str) {
    let Some(keep) = std::env::var_os("PJW_KEEP_FAILED_LOGS") else {
        return;
    };
    let name = parent.rsplit('/').next().unwrap_or("daemon");
    let to = Path::new(&keep).join(format!("{name}.log"));
    let _ = std::fs::create_dir_all(&keep);
    match std::fs::copy(dir.join("daemon.log"), &to) {
        Ok(_) => eprintln!("--- the whole log: {}", to.display()),
        Err(e) => eprintln!("--- cannot keep the log at {}: {e}", to.display()),
    }
}

/// Kill the processes of a test parent and remove its cgroups.
fn clean_parent(spec: &str) {
    let Ok(spec) = ParentSpec::parse(spec) else {
        return;
    };
    let Ok(mut d) = Driver::detect(Path::new("/proc"), &spec) else {
        return;
    };
    // A daemon on a node with GPUs puts jobs in the v1 devices hierarchy too.
    d.fence_devices();
    for job in d.list_jobs().unwrap_or_default() {
        let _ = d.kill(&job);
        let end = Instant::now() + Duration::from_secs(10);
        while d.is_populated(&job).unwrap_or(false) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = d.remove_job(&job);
    }
    let _ = d.remove_parent_if_empty();
}

/// `scripts/pjw-scope` of this source tree (the guests mount the tree at the same path).
fn scope_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pjw-scope")
}

/// Where this test process's daemons put their job parents, said once per process:
/// `None` for below our own cgroup (`self/...`: hybrid and v1, the busybox guests' root
/// cgroup), or the cgroup path of a delegated systemd scope where systemd runs on pure v2.
///
/// There our own cgroup is a login session's scope or a service's cgroup, shared with other
/// processes, and the no-internal-process rule forbids enabling controllers in it: the tests
/// then get a scope `pjw-test-<pid>.scope` (scripts/pjw-scope), whose holder ends with this
/// process, so systemd removes the scope when the tests are done (docs/decisions.md).
pub fn scope_base() -> Option<&'static str> {
    static BASE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let script = scope_script();
        let needed = Command::new("sh")
            .arg(&script)
            .arg("--needed")
            .status()
            .is_ok_and(|s| s.success());
        if !needed {
            return None;
        }
        let pid = std::process::id();
        let out = Command::new("sh")
            .arg(&script)
            .args(["--watch", &pid.to_string(), &format!("pjw-test-{pid}")])
            .stderr(Stdio::piped())
            .output()
            .expect("run scripts/pjw-scope");
        assert!(
            out.status.success(),
            "cannot make a delegated scope for the tests ({}): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(path.starts_with('/'), "pjw-scope printed {path:?}");
        Some(path)
    })
    .as_deref()
}

/// The cgroup parent (`--cgroup-parent` text) for a test's cgroups named `name`: below our own
/// cgroup, or in this process's delegated scope ([`scope_base`]).
pub fn test_parent(name: &str) -> String {
    match scope_base() {
        Some(base) => format!("{base}/{name}"),
        None => format!("self/{name}"),
    }
}

/// Remove what an earlier test run left when it was killed before its cleanup ran: parents
/// named `pjw-test-<pid>-<n>` or `pjw-demo-<pid>` whose process is gone, below our own cgroup
/// or in the delegated scopes of such runs. Everything in them was started by those runs.
pub fn sweep_stale() {
    let dead = |name: &str| -> bool {
        let pid = name
            .strip_prefix("pjw-test-")
            .and_then(|r| r.split(['-', '.']).next())
            .or_else(|| name.strip_prefix("pjw-demo-"));
        pid.and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Some(base) = scope_base() {
        // Scopes of earlier test processes beside ours, in the same slice.
        let slice = base.rsplit_once('/').map(|(s, _)| s).unwrap_or("");
        let dir = PathBuf::from(format!("/sys/fs/cgroup{slice}"));
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let scope = e.file_name().to_string_lossy().into_owned();
            if !(scope.starts_with("pjw-test-") && scope.ends_with(".scope") && dead(&scope)) {
                continue;
            }
            for c in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                let child = c.file_name().to_string_lossy().into_owned();
                if child.starts_with("pjw-test-") {
                    clean_parent(&format!("{slice}/{scope}/{child}"));
                }
            }
            let unit = scope.trim_end_matches(".scope").to_string();
            let _ = Command::new("sh")
                .arg(scope_script())
                .args(["--stop", &unit])
                .status();
        }
        return;
    }
    let Ok(d) = Driver::detect(Path::new("/proc"), &ParentSpec::SelfRelative(None)) else {
        return;
    };
    for name in d.list_jobs().unwrap_or_default() {
        if dead(&name) {
            clean_parent(&format!("self/{name}"));
        }
    }
}

/// The `pjw` binary to test: `$PJW_BIN` when set (the VM tier runs test executables built on the
/// host inside a guest, where cargo's build path does not exist), else `built`, which callers pass
/// as `env!("CARGO_BIN_EXE_pjw")`. `pjw-wl` is expected next to it.
pub fn pjw_bin(built: &str) -> PathBuf {
    match std::env::var_os("PJW_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(built),
    }
}

/// Whether root tests can run here (root, and a cgroup filesystem).
pub fn can_run_root_tests() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root && Path::new("/proc/self/cgroup").exists() && Path::new("/sys/fs/cgroup").exists()
}

/// Root tests need root and a cgroup filesystem, which `make test` provides: without them the
/// test fails (on the host) instead of passing silently.
#[macro_export]
macro_rules! require_root {
    () => {
        $crate::require!($crate::Component::Root)
    };
}

/// A private daemon for one test.
#[derive(Debug)]
pub struct TestDaemon {
    bin: PathBuf,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The parent given to the daemon ([`test_parent`]).
    pub parent: String,
    extra_config: String,
    /// Words run before the daemon (`nsenter ...` for a node in a namespace).
    prefix: Vec<String>,
}

impl TestDaemon {
    /// Start a daemon with the `pjw` binary at `bin` and extra TOML config lines.
    pub fn start(bin: &Path, extra_config: &str) -> TestDaemon {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let parent = test_parent(&format!("pjw-test-{}-{n}", std::process::id()));
        Self::start_with_parent(bin, extra_config, parent)
    }

    /// [`TestDaemon::start`] with the parent `self/pjw-test-<pid>-<n>`: below the daemon's own
    /// cgroup whatever the machine (the test of the daemon's leaf puts the daemon in a cgroup of
    /// its own first; under systemd the usual parent is absolute, in the tests' scope).
    pub fn start_below_self(bin: &Path, extra_config: &str) -> TestDaemon {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        Self::start_with_parent(
            bin,
            extra_config,
            format!("self/pjw-test-{}-{n}", std::process::id()),
        )
    }

    /// [`TestDaemon::start`] run through `prefix` (e.g. [`crate::netns::Netns::prefix`]: a node
    /// of a test cluster in its own network and UTS namespace).
    pub fn start_in(bin: &Path, extra_config: &str, prefix: Vec<String>) -> TestDaemon {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let parent = test_parent(&format!("pjw-test-{}-{n}", std::process::id()));
        Self::start_full(bin, extra_config, parent, prefix)
    }

    fn start_with_parent(bin: &Path, extra_config: &str, parent: String) -> TestDaemon {
        Self::start_full(bin, extra_config, parent, Vec::new())
    }

    fn start_full(
        bin: &Path,
        extra_config: &str,
        parent: String,
        prefix: Vec<String>,
    ) -> TestDaemon {
        SWEEP.call_once(sweep_stale);
        let dir = tempfile::Builder::new()
            .prefix("pjw-test")
            .tempdir()
            .expect("temp dir");
        let mut d = TestDaemon {
            bin: bin.to_path_buf(),
            child: None,
            dir,
            parent,
            extra_config: extra_config.to_string(),
            prefix,
        };
        d.spawn();
        d
    }

    /// The socket path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("pjw.sock")
    }

    /// The temporary directory (for test files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let cfg = self.dir.path().join("pjw.toml");
        std::fs::write(
            &cfg,
            format!("{}\n[log]\nlevel = \"debug\"\n", self.extra_config),
        )
        .expect("write config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .expect("log file");
        let mut cmd = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .arg("daemon")
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(self.socket())
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .arg("--cgroup-parent")
            .arg(&self.parent)
            .env("PJW_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start pjw daemon");
        self.child = Some(child);
        // Generous: under an emulated VM or heavy load several daemons start at once.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if std::os::unix::net::UnixStream::connect(self.socket()).is_ok() {
                return;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("pjw daemon exited during start ({st}):\n{}", self.log());
                }
            }
            assert!(
                Instant::now() < deadline,
                "pjw daemon did not come up:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// How the daemon ended, if it has ("running" if not), looked at without reaping it: a test
    /// that finds its daemon gone says whether it exited or which signal ended it.
    pub fn how_ended(&self) -> String {
        let Some(pid) = self.pid() else {
            return "stopped by the test".into();
        };
        // SAFETY: siginfo_t is plain data, valid all zero.
        let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid fills `si` for our own child; WNOWAIT leaves it unreaped (kill9 and
        // Drop still reap it), WNOHANG returns at once.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut si,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid and si_status are valid for a SIGCHLD siginfo that waitid filled.
        let (who, status) = unsafe { (si.si_pid(), si.si_status()) };
        match (rc, who, si.si_code) {
            (0, 0, _) => format!("pid {pid} running"),
            (0, _, libc::CLD_EXITED) => format!("pid {pid} exited with status {status}"),
            (0, _, _) => format!("pid {pid} ended by signal {status}"),
            _ => format!(
                "pid {pid}: waitid failed: {}",
                std::io::Error::last_os_error()
            ),
        }
    }

    /// `kill -9` the daemon (a crash).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stop the daemon with SIGTERM and wait for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child process, whose pid we hold and have not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    /// Start the daemon again with the same socket, state and cgroup parent.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// A `pjw` command talking to this daemon.
    pub fn pjw(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("PJW_SOCKET", self.socket());
        c
    }

    /// Start `pjw run ARGS -- sh -c SCRIPT` in the background, its output piped.
    pub fn run_sh(&self, args: &[&str], script: &str) -> Child {
        self.pjw()
            .arg("run")
            .args(args)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pjw run")
    }

    /// `pjw status --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let out = self
            .pjw()
            .args(["status", "--json"])
            .output()
            .expect("pjw status");
        assert!(
            out.status.success(),
            "pjw status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status json")
    }

    /// The cgroup driver for this daemon's parent (to inspect job cgroups).
    pub fn driver(&self) -> Driver {
        let spec = ParentSpec::parse(&self.parent).expect("test parent");
        Driver::detect(Path::new("/proc"), &spec).expect("detect cgroups")
    }

    /// Wait until `f` holds, up to `limit` (a correctness bound, not a timing assertion).
    ///
    /// In the VM tier's guest (software emulation, several times slower than the host, often
    /// beside a loaded host) the bound is six times longer: it only matters when `f` never holds.
    pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
        let limit = if in_vm_guest() { limit * 6 } else { limit };
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        f()
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.kill9();
        // A failing test shows what the daemon did (CI keeps only the test output).
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let from = lines.len().saturating_sub(80);
            eprintln!(
                "--- last {} lines of the daemon's log ({}):\n{}\n---",
                lines.len() - from,
                self.dir.path().join("daemon.log").display(),
                lines[from..].join("\n")
            );
            keep_failed_log(self.dir.path(), &self.parent);
        }
        // Everything left below the test's parent was started by this test: kill it and
        // remove the cgroups.
        clean_parent(&self.parent);
    }
}
