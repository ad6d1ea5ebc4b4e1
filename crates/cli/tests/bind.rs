//! Root test of thread balancing (issue 17): a real daemon, real cgroups below this test's own
//! cgroup, real threads. A 2-CPU job runs 2 busy threads and 4 sleepers: the busy ones end up
//! pinned to different CPUs of the job, the sleepers keep the whole job set, and when one busy
//! thread sleeps and a sleeper gets busy the pins follow. Waits are bounded polls, never timings.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pjw_core::CpuSet;
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn wl() -> PathBuf {
    let p = pjw_bin().with_file_name("pjw-wl");
    assert!(
        p.exists(),
        "pjw-wl not built at {} (run `cargo build -p pjw-workloads`)",
        p.display()
    );
    p
}

/// `Cpus_allowed_list` of thread `tid` (empty once it is gone).
fn allowed(tid: u32) -> CpuSet {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| CpuSet::parse_list(v.trim()).ok())
        .unwrap_or_default()
}

/// The thread ids the workload wrote, one per thread.
fn tids(dir: &Path, n: usize) -> Vec<u32> {
    let all = |v: &mut Vec<u32>| {
        v.clear();
        for i in 0..n {
            match std::fs::read_to_string(dir.join(format!("tid-{i}"))) {
                Ok(t) => v.push(t.trim().parse().expect("a tid")),
                Err(_) => return false,
            }
        }
        true
    };
    let mut v = Vec::new();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || all(&mut v)),
        "the workload's threads never wrote their ids in {}",
        dir.display()
    );
    v
}

/// Busy threads `busy` are each on one CPU of `job`, all different; every other thread of
/// `all` may use the whole job set.
fn placed(all: &[u32], busy: &[usize], job: &CpuSet) -> Result<(), String> {
    let mut seen = CpuSet::new();
    for (i, &tid) in all.iter().enumerate() {
        let a = allowed(tid);
        if busy.contains(&i) {
            if a.len() != 1 || !a.is_subset(job) || seen.intersects(&a) {
                return Err(format!("busy thread {i} ({tid}) allowed {a}"));
            }
            seen = seen.union(&a);
        } else if a != *job {
            return Err(format!("sleeper {i} ({tid}) allowed {a}, job {job}"));
        }
    }
    Ok(())
}

#[test]
fn busy_threads_are_pinned_apart_sleepers_stay_free_and_pins_follow_the_busy() {
    require_root!();
    let cpus = pjw_testkit::need_cpus!(2);
    let d = TestDaemon::start(
        pjw_bin(),
        &format!("cpus = \"{cpus}\"\n[job]\nbind_interval_ms = 200\n"),
    );
    let dir = d.dir().join("roles");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("busy-0"), "").unwrap();
    std::fs::write(dir.join("busy-1"), "").unwrap();
    // The node default is `none`: --bind asks for it; the user's own OMP_NUM_THREADS is kept.
    let script = format!(
        "env > {d}/env; exec {wl} roles 6 {d}",
        d = dir.display(),
        wl = wl().display()
    );
    let mut job = d
        .pjw()
        .args([
            "run", "--cpus", "2", "--job-id", "bind", "--bind", "threads",
        ])
        .args(["--", "sh", "-c", &script])
        .env("OMP_NUM_THREADS", "7")
        .env_remove("OMP_PLACES")
        .env_remove("OPENBLAS_NUM_THREADS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pjw run");
    let stop = dir.join("stop");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let all = tids(&dir, 6);
        let job_set = d.driver().job_cpus("job-bind").expect("the job's cpus");
        assert_eq!(job_set.len(), 2, "{job_set}");

        let env = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
        // The user's count is kept, and OpenBLAS, which falls back on it, is left to it; the
        // CPU count Python reads is the job's.
        assert!(env.lines().any(|l| l == "OMP_NUM_THREADS=7"), "{env}");
        assert!(!env.contains("OPENBLAS_NUM_THREADS="), "{env}");
        assert!(env.lines().any(|l| l == "PYTHON_CPU_COUNT=2"), "{env}");
        assert!(env.lines().any(|l| l == "OMP_PLACES=threads"), "{env}");

        let mut last = String::new();
        let ok = TestDaemon::wait_for(Duration::from_secs(30), || {
            match placed(&all, &[0, 1], &job_set) {
                Ok(()) => true,
                Err(e) => {
                    last = e;
                    false
                }
            }
        });
        assert!(
            ok,
            "threads 0 and 1 never pinned apart: {last}\n{}",
            d.log()
        );

        // Thread 1 sleeps, thread 2 gets busy: 1 gets the job set back, 2 a CPU of its own.
        std::fs::write(dir.join("busy-2"), "").unwrap();
        std::fs::remove_file(dir.join("busy-1")).unwrap();
        let ok = TestDaemon::wait_for(Duration::from_secs(30), || {
            match placed(&all, &[0, 2], &job_set) {
                Ok(()) => true,
                Err(e) => {
                    last = e;
                    false
                }
            }
        });
        assert!(
            ok,
            "the pins did not follow threads 0 and 2: {last}\n{}",
            d.log()
        );
    }));
    std::fs::write(&stop, "").unwrap();
    let ended = TestDaemon::wait_for(Duration::from_secs(30), || {
        matches!(job.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = job.kill();
    }
    let _ = job.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(ended, "the job did not end after its stop file");
}

#[test]
fn an_unknown_bind_mode_is_a_usage_error() {
    let out = std::process::Command::new(pjw_bin())
        .args(["run", "--bind", "sideways", "--", "true"])
        .env("PJW_SOCKET", "/nonexistent/pjw.sock")
        .output()
        .expect("run pjw");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not one of threads, cores, none"), "{err}");
}
