//! Skips that are counted as skips, and components that `make test` provides.
//!
//! libtest has no run-time skip: a test that returns early is reported as passed. A test that
//! cannot run its point calls [`skip!`](crate::skip) instead, which prints `SKIPPED <test>: <why>`
//! and appends one line to the file named by `PJW_SKIP_LOG` (set by `scripts/test-summary.sh` and
//! the guests' runners), so the summary counts it as skipped, not passed, and lists its reason.
//!
//! A component that `make test` installs or provides (root, Slurm, Grid Engine, PostgreSQL, tmux,
//! promtool, python3, a swap file, Open MPI, hwloc, stress-ng, sysbench) is checked with
//! [`require`]: missing on the host, the test fails; missing in one of the project's test guests
//! (which carry `/etc/pjw-guest`), where the host tier runs that test instead, it skips. No environment variable can turn a host test
//! into a skip or a pass: the guest marker is a file the guests' images carry.

use std::io::Write;
use std::path::Path;

/// The file every test guest carries (its tier's name inside); the host has none.
pub const GUEST_MARKER: &str = "/etc/pjw-guest";

/// The tier this test runs in: `None` on the host, else the guest's name from [`GUEST_MARKER`]
/// (`busybox-v2`, `busybox-v1`, `systemd-v2`).
pub fn guest_tier() -> Option<String> {
    let text = std::fs::read_to_string(GUEST_MARKER).ok()?;
    let t = text.trim();
    Some(if t.is_empty() {
        "guest".to_string()
    } else {
        t.to_string()
    })
}

/// Whether this test runs inside one of the project's test guests.
pub fn in_vm_guest() -> bool {
    guest_tier().is_some()
}

/// The name of the running test (libtest names each test's thread after it).
pub fn current_test(fallback: &str) -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => fallback.to_string(),
    }
}

/// Record a skip of the running test: one line on stderr and one in `$PJW_SKIP_LOG`.
/// Use the [`skip!`](crate::skip) macro, which also returns from the test.
pub fn record_skip(fallback_name: &str, reason: &str) {
    let name = current_test(fallback_name);
    let bin = std::env::args()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let reason = reason.replace(['\n', '\t'], " ");
    eprintln!("SKIPPED {name}: {reason}");
    if let Some(log) = std::env::var_os("PJW_SKIP_LOG").filter(|v| !v.is_empty()) {
        let line = format!("{bin}\t{name}\t{reason}\n");
        // One write of a short line to an O_APPEND file: lines of parallel tests do not mix.
        let res = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = res {
            panic!(
                "cannot record the skip in {}: {e}",
                Path::new(&log).display()
            );
        }
    }
}

/// Skip the calling test: say why, record it for the summary, and return.
#[macro_export]
macro_rules! skip {
    ($($why:tt)+) => {{
        $crate::skip::record_skip(module_path!(), &format!($($why)+));
        return;
    }};
}

/// Something a test needs that `make test` installs or provides on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// Running as root with a cgroup filesystem.
    Root,
    /// The single-node Slurm of `scripts/wlm` (sbatch, scontrol, a running slurmctld).
    Slurm,
    /// The single-host Grid Engine of `scripts/wlm` (qsub, qconf).
    GridEngine,
    /// PostgreSQL's server binaries (initdb, pg_ctl).
    Postgres,
    /// tmux, to drive `pjw top`.
    Tmux,
    /// promtool, to check the metrics page.
    Promtool,
    /// python3, to run the PBS hook.
    Python3,
    /// A swap file (swapon works here).
    Swap,
    /// zsh, to ask it for pjw's completions.
    Zsh,
    /// fish, to ask it for pjw's completions.
    Fish,
    /// Open MPI with its compiler wrapper (mpirun, mpicc) and gcc's OpenMP (Debian's
    /// openmpi-bin, libopenmpi-dev).
    Mpi,
    /// hwloc's tools (hwloc-ps, hwloc-bind).
    Hwloc,
    /// stress-ng: real software whose processes `pjw status` counts and whose workers must
    /// stay in their job.
    StressNg,
    /// sysbench.
    Sysbench,
}

impl Component {
    /// Its name in messages and in `PJW_TEST_PRETEND_MISSING`.
    pub fn name(self) -> &'static str {
        match self {
            Component::Root => "root",
            Component::Slurm => "slurm",
            Component::GridEngine => "gridengine",
            Component::Postgres => "postgres",
            Component::Tmux => "tmux",
            Component::Promtool => "promtool",
            Component::Python3 => "python3",
            Component::Swap => "swap",
            Component::Zsh => "zsh",
            Component::Fish => "fish",
            Component::Mpi => "mpi",
            Component::Hwloc => "hwloc",
            Component::StressNg => "stress-ng",
            Component::Sysbench => "sysbench",
        }
    }

    /// Where `make test` gets it from (said when it is missing on the host).
    fn provider(self) -> &'static str {
        match self {
            Component::Root => "run make test as root",
            Component::Slurm | Component::GridEngine => "scripts/wlm/install.sh installs it",
            Component::Swap => "the test adds a swap file with fallocate, mkswap and swapon",
            _ => "scripts/install-deps.sh installs it",
        }
    }

    fn present(self) -> bool {
        let pretend = std::env::var("PJW_TEST_PRETEND_MISSING").unwrap_or_default();
        if pretend.split(',').any(|p| p.trim() == self.name()) {
            return false;
        }
        match self {
            Component::Root => crate::can_run_root_tests(),
            Component::Slurm => on_path("sbatch") && on_path("scontrol"),
            Component::GridEngine => on_path("qsub") || Path::new("/usr/bin/qsub").exists(),
            Component::Postgres => glob_exists("/usr/lib/postgresql", "bin/pg_ctl"),
            Component::Tmux => on_path("tmux"),
            Component::Promtool => on_path("promtool") || Path::new("/usr/bin/promtool").exists(),
            Component::Python3 => on_path("python3"),
            Component::Swap => on_path("swapon") && on_path("mkswap"),
            Component::Zsh => on_path("zsh"),
            Component::Fish => on_path("fish"),
            Component::Mpi => on_path("mpirun") && on_path("mpicc"),
            Component::Hwloc => on_path("hwloc-ps") && on_path("hwloc-bind"),
            Component::StressNg => on_path("stress-ng"),
            Component::Sysbench => on_path("sysbench"),
        }
    }
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

fn glob_exists(dir: &str, rel: &str) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().any(|e| e.path().join(rel).exists()))
        .unwrap_or(false)
}

/// Whether `c` is here. On the host a missing component fails the test (panics, saying who
/// provides it); in a test guest it returns the reason to skip.
pub fn missing(c: Component) -> Option<String> {
    if c.present() {
        return None;
    }
    match guest_tier() {
        Some(tier) => Some(format!(
            "the {tier} guest has no {}; the host tier runs this test",
            c.name()
        )),
        None => panic!(
            "{} is missing on this host, and make test provides it ({}): failing, not skipping",
            c.name(),
            c.provider()
        ),
    }
}

/// Return from the calling test, recorded as a skip, when `$component` is missing in a test
/// guest; fail when it is missing on the host.
#[macro_export]
macro_rules! require {
    ($($c:expr),+ $(,)?) => {{
        $(
            if let Some(why) = $crate::skip::missing($c) {
                $crate::skip!("{}", why);
            }
        )+
    }};
}
