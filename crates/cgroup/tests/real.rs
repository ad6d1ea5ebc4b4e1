//! Root tests on the machine's real cgroupfs.
//!
//! Everything is created below this test process's own cgroup in each hierarchy
//! (`self/pjw-cgtest-<pid>`), only the `sleep` child this test starts is moved, frozen or
//! killed, and a guard removes what was created even when an assertion fails. Nothing is
//! mounted or reconfigured. Root and a cgroup filesystem are what `make test` provides: without
//! them the tests fail on the host (testkit's `require!`). A test whose own cgroup cannot have
//! children with controllers (pure v2, the process shares its cgroup with others: the
//! no-internal-process rule) is recorded as skipped, saying so.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pjw_cgroup::{CgroupError, CpuSet, Driver, JobLimits, Mode, ParentSpec};
use pjw_testkit::{require, skip, Component};

const JOB: &str = "job";

/// Kills our own child and removes our cgroups, also on panic.
struct Guard {
    driver: Driver,
    child: Option<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.driver.remove_job(JOB).is_err() && Instant::now() < deadline {
            let _ = self.driver.kill(JOB);
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.driver.remove_parent_if_empty();
    }
}

/// Why `prepare_parent` cannot work below this process's own cgroup here, if that is the
/// reason it failed: in unified mode a cgroup with processes of its own (other than the root)
/// cannot enable controllers for children. Any other failure is a failure.
fn shared_own_cgroup(d: &Driver, e: &CgroupError) -> Option<String> {
    match e {
        CgroupError::SubtreeBusy { path, .. } if d.mode() == Mode::Unified => Some(format!(
            "this process's cgroup {} has other processes, so no controllers can be enabled \
             below it (cgroup v2 no-internal-process rule); these tests need a delegated cgroup",
            path.display()
        )),
        _ => None,
    }
}

/// The first CPU this process may use (the job's cpuset), and the CPUs' list.
fn first_cpu() -> CpuSet {
    pjw_testkit::machine::first_cpus(1).expect("a CPU this process may use")
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn dir(list: &[(String, PathBuf)], key: &str) -> Option<PathBuf> {
    list.iter().find(|(k, _)| k == key).map(|(_, p)| p.clone())
}

fn procs_of(dir: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    pjw_cgroup::parse_pids(&text).unwrap()
}

#[test]
fn job_lifecycle_on_the_real_cgroupfs() {
    require!(Component::Root);
    // Below our own cgroup, or in the tests' delegated scope under systemd on pure v2.
    let parent = ParentSpec::parse(&pjw_testkit::test_parent(&format!(
        "pjw-cgtest-{}",
        std::process::id()
    )))
    .unwrap();
    let driver = Driver::detect(Path::new("/proc"), &parent).unwrap();
    eprintln!("{}", driver.describe());
    let looks_hybrid =
        Path::new("/sys/fs/cgroup/cpuset").is_dir() && Path::new("/sys/fs/cgroup/unified").is_dir();
    if looks_hybrid {
        assert_eq!(driver.mode(), Mode::Hybrid);
    }
    // Pure v1 (the busybox-v1 guest): no cgroup2 mounted, so legacy mode, for real.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    if Path::new("/sys/fs/cgroup/cpuset").is_dir()
        && !mounts
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
    {
        assert_eq!(driver.mode(), Mode::Legacy, "{}", driver.describe());
    }
    let mut g = Guard {
        driver,
        child: None,
    };
    let d = &g.driver;
    let parents = d.parent_dirs();
    if let Err(e) = d.prepare_parent() {
        match shared_own_cgroup(d, &e) {
            Some(why) => skip!("{why}"),
            None => panic!("prepare_parent: {e}"),
        }
    }
    for (k, p) in &parents {
        assert!(p.is_dir(), "{k}: {}", p.display());
    }
    let mems = match dir(&parents, "cpuset") {
        Some(p) => std::fs::read_to_string(p.join("cpuset.mems")).unwrap(),
        // No cpuset hierarchy: the mems are not written anywhere.
        None => String::new(),
    };
    let limits = JobLimits {
        cpus: first_cpu(),
        mems: CpuSet::parse_list(&mems).unwrap(),
        memory_max: Some(64 << 20),
        pids_max: Some(100),
        swap_max: None,
        io: Default::default(),
    };
    d.create_job(JOB, &limits).unwrap();
    assert_eq!(d.list_jobs().unwrap(), [JOB]);
    assert_eq!(d.job_cpus(JOB).unwrap(), first_cpu());
    let jobs = d.job_dirs(JOB);
    if let Some(mem) = dir(&jobs, "memory") {
        let f = if d.mode() == Mode::Unified {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let v = std::fs::read_to_string(mem.join(f)).unwrap();
        assert_eq!(v.trim(), (64u64 << 20).to_string());
    }

    if let Some(p) = dir(&jobs, "pids").or_else(|| dir(&jobs, "unified")) {
        if p.join("pids.max").exists() {
            assert_eq!(
                std::fs::read_to_string(p.join("pids.max")).unwrap().trim(),
                "100"
            );
        }
    }

    let child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    g.child = Some(child);
    let d = &g.driver;
    d.add_process(JOB, pid).unwrap();

    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let status = pjw_kernelfs::proc_status::parse(&status).unwrap();
    assert_eq!(status.cpus_allowed_list, first_cpu());
    for key in ["memory", "unified", "cpuset"] {
        if let Some(j) = dir(&jobs, key) {
            assert!(
                procs_of(&j).contains(&pid),
                "pid {pid} not in {}",
                j.display()
            );
        }
    }
    assert!(d.procs(JOB).unwrap().contains(&pid));
    assert!(d.is_populated(JOB).unwrap());
    assert!(d.thread_count(JOB).unwrap() >= 1);

    // The idle class for backfill, on whichever hierarchy has the cpu controller.
    d.set_idle(JOB, true).unwrap();
    let idle_files: Vec<_> = d
        .job_dirs(JOB)
        .into_iter()
        .map(|(_, dir)| dir.join("cpu.idle"))
        .filter(|f| f.exists())
        .collect();
    assert!(
        !idle_files.is_empty(),
        "no cpu.idle in {:?}",
        d.job_dirs(JOB)
    );
    for f in &idle_files {
        assert_eq!(
            std::fs::read_to_string(f).unwrap().trim(),
            "1",
            "{}",
            f.display()
        );
    }
    d.set_idle(JOB, false).unwrap();

    if let Some(events) = d.events_path(JOB) {
        d.freeze(JOB, true).unwrap();
        wait_until("frozen", || {
            let ev = pjw_kernelfs::cgroup_events::parse(&std::fs::read_to_string(&events).unwrap())
                .unwrap();
            ev.frozen == Some(true)
        });
        assert!(d.is_frozen(JOB).unwrap());
        d.freeze(JOB, false).unwrap();
        wait_until("thawed", || !d.is_frozen(JOB).unwrap());
    } else {
        d.freeze(JOB, true).unwrap();
        assert!(d.is_frozen(JOB).unwrap());
        d.freeze(JOB, false).unwrap();
    }

    // A signal to every process of the job (the warning before a kill at a time limit):
    // delivered through a pidfd to the job's one process. SIGSTOP, so that it is seen and the
    // kill below still ends it.
    let pid = g.child.as_ref().unwrap().id();
    let state = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(") ").next().unwrap().chars().next().unwrap()
    };
    assert_eq!(d.signal(JOB, libc::SIGSTOP).unwrap(), 1);
    wait_until("stopped by the job's signal", || state(pid) == 'T');
    assert_eq!(d.signal(JOB, libc::SIGCONT).unwrap(), 1);
    wait_until("continued", || state(pid) != 'T');

    d.kill(JOB).unwrap();
    let mut child = g.child.take().unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "child ended with {st:?}");
    let d = &g.driver;
    wait_until("job unpopulated", || !d.is_populated(JOB).unwrap());

    d.remove_job(JOB).unwrap();
    assert!(d.list_jobs().unwrap().is_empty());
    d.remove_parent_if_empty().unwrap();
    for (k, p) in d.job_dirs(JOB).into_iter().chain(d.parent_dirs()) {
        assert!(!p.exists(), "{k}: {} left behind", p.display());
    }
    drop(g);
}

/// The sampler's statistics files kept open: a cached file re-read with pread shows fresh
/// numbers, and removing the job closes its files (its cgroup goes away cleanly).
#[test]
fn statistics_files_kept_open_read_fresh_values_and_close_with_the_job() {
    require!(Component::Root);
    let parent = ParentSpec::parse(&pjw_testkit::test_parent(&format!(
        "pjw-cgtest-stat-{}",
        std::process::id()
    )))
    .unwrap();
    let mut driver = Driver::detect(Path::new("/proc"), &parent).unwrap();
    driver.keep_stat_files_open(64);
    let mut g = Guard {
        driver,
        child: None,
    };
    if let Err(e) = g.driver.prepare_parent() {
        match shared_own_cgroup(&g.driver, &e) {
            Some(why) => skip!("{why}"),
            None => panic!("prepare_parent: {e}"),
        }
    }
    let mems = match dir(&g.driver.parent_dirs(), "cpuset") {
        Some(p) => std::fs::read_to_string(p.join("cpuset.mems")).unwrap(),
        // No cpuset hierarchy: the mems are not written anywhere.
        None => String::new(),
    };
    let limits = JobLimits {
        cpus: first_cpu(),
        mems: CpuSet::parse_list(&mems).unwrap(),
        memory_max: None,
        pids_max: None,
        swap_max: None,
        io: Default::default(),
    };
    g.driver.create_job(JOB, &limits).unwrap();
    // A busy shell loop: its CPU time grows while we read.
    let child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = child.id();
    g.child = Some(child);
    let d = &g.driver;
    d.add_process(JOB, pid).unwrap();
    let first = d.cpu_time(JOB).unwrap();
    let _ = d.memory_usage(JOB).unwrap();
    let _ = d.memory_peak(JOB).unwrap();
    let _ = d.memory_breakdown(JOB).unwrap();
    let open = d.open_stat_files();
    assert!(open >= 3, "{open} statistics files kept open");
    wait_until(
        "the job's CPU time, read through the open file, grows",
        || {
            let now = d.cpu_time(JOB).unwrap();
            now.user_usec + now.system_usec > first.user_usec + first.system_usec + 50_000
        },
    );
    assert_eq!(d.open_stat_files(), open, "re-reads open nothing new");

    d.kill(JOB).unwrap();
    let mut child = g.child.take().unwrap();
    child.wait().unwrap();
    let d = &g.driver;
    wait_until("job unpopulated", || !d.is_populated(JOB).unwrap());
    d.remove_job(JOB).unwrap();
    assert_eq!(d.open_stat_files(), 0, "the job's files are closed with it");
    for (k, p) in d.job_dirs(JOB) {
        assert!(!p.exists(), "{k}: {} left behind", p.display());
    }
    d.remove_parent_if_empty().unwrap();
    drop(g);
}
