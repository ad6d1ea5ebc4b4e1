//! Fake-tree tests: the driver on temp-dir imitations of unified, hybrid and legacy machines.

use std::fs;
use std::path::{Path, PathBuf};

use pjw_cgroup::fake_tree::{FakeMachine, FakeSpec};
use pjw_cgroup::{Backend, CgroupError, CpuSet, Driver, JobLimits, Mode, ParentSpec};

const ALL_MODES: [Mode; 3] = [Mode::Unified, Mode::Hybrid, Mode::Legacy];

fn limits(cpus: &str) -> JobLimits {
    JobLimits {
        cpus: CpuSet::parse_list(cpus).unwrap(),
        mems: CpuSet::parse_list("0").unwrap(),
        memory_max: Some(64 << 20),
        pids_max: Some(100),
        swap_max: None,
        io: Default::default(),
    }
}

fn machine(spec: FakeSpec) -> (tempfile::TempDir, FakeMachine) {
    let dir = tempfile::tempdir().unwrap();
    let m = spec.build(dir.path()).unwrap();
    (dir, m)
}

fn driver(m: &FakeMachine, parent: &str) -> Result<Driver, CgroupError> {
    Driver::detect_with(
        &m.proc_root,
        &ParentSpec::parse(parent).unwrap(),
        Backend::FakeTree,
    )
}

fn read(p: &Path) -> String {
    fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn dir_of(list: &[(String, PathBuf)], key: &str) -> PathBuf {
    list.iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no hierarchy {key} in {list:?}"))
        .1
        .clone()
}

#[test]
fn job_lifecycle_in_every_mode() {
    for mode in ALL_MODES {
        let (_tmp, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw/jobs").unwrap();
        assert_eq!(d.mode(), mode);
        assert!(
            d.describe().starts_with(&format!("{mode}: ")),
            "{}",
            d.describe()
        );

        d.prepare_parent().unwrap();
        d.prepare_parent().unwrap(); // idempotent
        let parents = d.parent_dirs();
        for (_, p) in &parents {
            assert!(p.is_dir(), "{mode}: {} missing", p.display());
        }
        let keys: Vec<&str> = parents.iter().map(|(k, _)| k.as_str()).collect();
        match mode {
            Mode::Unified => {
                assert_eq!(keys, ["unified"]);
                let root = m.mount_point("unified").unwrap();
                for dir in [root.to_path_buf(), root.join("pjw"), root.join("pjw/jobs")] {
                    assert_eq!(
                        read(&dir.join("cgroup.subtree_control")),
                        "cpu cpuset io memory pids",
                        "{mode}: {}",
                        dir.display()
                    );
                }
            }
            Mode::Hybrid => {
                // cpuacct is not used: the cgroup2 tree's cpu.stat counts CPU time.
                assert_eq!(
                    keys,
                    ["unified", "cpuset", "memory", "pids", "cpu", "blkio"]
                );
                // No controller in the hybrid cgroup2 tree: nothing enabled.
                let root = m.mount_point("unified").unwrap();
                assert_eq!(read(&root.join("cgroup.subtree_control")), "");
            }
            Mode::Legacy => {
                assert_eq!(
                    keys,
                    ["cpuset", "memory", "pids", "cpu", "blkio", "cpuacct", "freezer"]
                );
            }
        }
        if mode != Mode::Unified {
            // v1 cpuset levels inherit the root's cpus and mems.
            let cs = m.mount_point("cpuset").unwrap();
            for dir in [cs.join("pjw"), cs.join("pjw/jobs")] {
                assert_eq!(read(&dir.join("cpuset.cpus")), "0-3");
                assert_eq!(read(&dir.join("cpuset.mems")), "0");
            }
        }

        d.create_job("job-1", &limits("1-2")).unwrap();
        d.create_job("job-1", &limits("1-2")).unwrap(); // idempotent
        assert_eq!(d.job_cpus("job-1").unwrap().to_string(), "1-2", "{mode}");
        assert_eq!(d.list_jobs().unwrap(), ["job-1"]);
        let jobs = d.job_dirs("job-1");
        if mode == Mode::Unified {
            let j = dir_of(&jobs, "unified");
            assert_eq!(read(&j.join("memory.max")), (64u64 << 20).to_string());
            assert_eq!(read(&j.join("pids.max")), "100");
            assert_eq!(read(&j.join("cpuset.mems")), "0");
        } else {
            let mem = dir_of(&jobs, "memory");
            assert_eq!(
                read(&mem.join("memory.limit_in_bytes")),
                (64u64 << 20).to_string()
            );
            assert_eq!(read(&dir_of(&jobs, "pids").join("pids.max")), "100");
            // CPU time comes from cpuacct on legacy machines only; hybrid ones read cpu.stat of
            // the cgroup2 tree and make no cpuacct cgroup.
            let cpuacct = jobs.iter().any(|(k, _)| k == "cpuacct");
            assert_eq!(cpuacct, mode == Mode::Legacy, "{mode}: {jobs:?}");
        }

        // Backfill: the idle class, and back; promotion moves the cpuset.
        let cpu_dir = if mode == Mode::Unified {
            dir_of(&jobs, "unified")
        } else {
            dir_of(&jobs, "cpu")
        };
        d.set_idle("job-1", true).unwrap();
        assert_eq!(read(&cpu_dir.join("cpu.idle")), "1", "{mode}");
        d.set_idle("job-1", false).unwrap();
        assert_eq!(read(&cpu_dir.join("cpu.idle")), "0", "{mode}");
        d.set_cpus(
            "job-1",
            &CpuSet::parse_list("3").unwrap(),
            &CpuSet::parse_list("0").unwrap(),
        )
        .unwrap();
        assert_eq!(d.job_cpus("job-1").unwrap().to_string(), "3", "{mode}");
        d.set_cpus(
            "job-1",
            &CpuSet::parse_list("1-2").unwrap(),
            &CpuSet::parse_list("0").unwrap(),
        )
        .unwrap();

        // Throttling: memory.high on v2; v1 says it cannot.
        if mode == Mode::Unified {
            d.set_memory_high("job-1", Some(1 << 20)).unwrap();
            assert_eq!(
                read(&dir_of(&jobs, "unified").join("memory.high")),
                "1048576"
            );
            d.set_memory_high("job-1", None).unwrap();
            assert_eq!(read(&dir_of(&jobs, "unified").join("memory.high")), "max");
        } else {
            let e = d.set_memory_high("job-1", Some(1 << 20)).unwrap_err();
            assert!(e.to_string().contains("memory.high"), "{e}");
        }

        assert!(!d.is_populated("job-1").unwrap());
        d.add_process("job-1", 4242).unwrap();
        for (key, dir) in &jobs {
            assert_eq!(read(&dir.join("cgroup.procs")), "4242", "{mode} {key}");
        }
        assert_eq!(d.procs("job-1").unwrap(), [4242]);
        assert_eq!(d.thread_count("job-1").unwrap(), 1);
        assert!(d.is_populated("job-1").unwrap());
        assert_eq!(
            d.events_path("job-1"),
            (mode != Mode::Legacy).then(|| dir_of(&jobs, "unified").join("cgroup.events"))
        );

        d.freeze("job-1", true).unwrap();
        assert!(d.is_frozen("job-1").unwrap(), "{mode}");
        d.freeze("job-1", false).unwrap();
        assert!(!d.is_frozen("job-1").unwrap(), "{mode}");

        // Populated jobs cannot be removed.
        assert!(matches!(
            d.remove_job("job-1"),
            Err(CgroupError::Populated { .. })
        ));
        d.kill("job-1").unwrap();
        assert!(!d.is_populated("job-1").unwrap(), "{mode}");
        assert!(d.procs("job-1").unwrap().is_empty());
        if mode == Mode::Legacy {
            // Freeze, SIGKILL (faked), thaw.
            assert_eq!(
                read(&dir_of(&jobs, "freezer").join("freezer.state")),
                "THAWED"
            );
        }

        d.remove_job("job-1").unwrap();
        d.remove_job("job-1").unwrap(); // missing is fine
        assert!(d.list_jobs().unwrap().is_empty());
        d.remove_parent_if_empty().unwrap();
        for (key, mp) in [("cpuset", "cpuset"), ("unified", "unified")] {
            if let Some(mp) = m.mount_point(mp) {
                assert!(!mp.join("pjw").exists(), "{mode}: {key} parent left");
                assert!(mp.is_dir());
            }
        }
    }
}

#[test]
fn parent_not_empty_is_left_alone() {
    for mode in ALL_MODES {
        let (_tmp, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw").unwrap();
        d.prepare_parent().unwrap();
        d.create_job("a", &limits("0")).unwrap();
        d.remove_parent_if_empty().unwrap();
        for (_, p) in d.parent_dirs() {
            assert!(p.join("a").is_dir());
        }
        d.remove_job("a").unwrap();
        d.remove_parent_if_empty().unwrap();
        for (_, p) in d.parent_dirs() {
            assert!(!p.exists());
        }
    }
}

#[test]
fn self_parent_resolves_per_hierarchy() {
    // Like this project's build machine: our memory cgroup belongs to someone else's agent.
    let spec = FakeSpec::new(Mode::Hybrid).own("memory", "/process_api/abc");
    let (_tmp, m) = machine(spec);
    let d = driver(&m, "self/pjw-x/jobs").unwrap();
    let parents = d.parent_dirs();
    assert_eq!(
        dir_of(&parents, "memory"),
        m.mount_point("memory")
            .unwrap()
            .join("process_api/abc/pjw-x/jobs")
    );
    assert_eq!(
        dir_of(&parents, "cpuset"),
        m.mount_point("cpuset").unwrap().join("pjw-x/jobs")
    );
    assert_eq!(
        dir_of(&parents, "unified"),
        m.mount_point("unified").unwrap().join("pjw-x/jobs")
    );
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("3")).unwrap();
    d.remove_job("j").unwrap();
    d.remove_parent_if_empty().unwrap();
    let mem = m.mount_point("memory").unwrap();
    assert!(!mem.join("process_api/abc/pjw-x").exists());
    assert!(mem.join("process_api/abc").is_dir(), "own cgroup must stay");
}

#[test]
fn mount_root_is_accounted_for() {
    // A container-style mount showing only /docker/c1 of the cpuset hierarchy.
    let spec = FakeSpec::new(Mode::Legacy)
        .mount_root("cpuset", "/docker/c1")
        .own("cpuset", "/docker/c1/inner");
    let (_tmp, m) = machine(spec);
    let cs = m.mount_point("cpuset").unwrap().to_path_buf();

    let d = driver(&m, "self/sub").unwrap();
    assert_eq!(dir_of(&d.parent_dirs(), "cpuset"), cs.join("inner/sub"));
    let d = driver(&m, "/docker/c1/pjw").unwrap();
    assert_eq!(dir_of(&d.parent_dirs(), "cpuset"), cs.join("pjw"));
    assert_eq!(
        dir_of(&d.parent_dirs(), "memory"),
        m.mount_point("memory").unwrap().join("docker/c1/pjw")
    );
    let spec = FakeSpec::new(Mode::Legacy).mount_root("cpuset", "/docker/c1");
    let (_tmp2, m2) = machine(spec);
    let e = driver(&m2, "/pjw").unwrap_err();
    assert!(matches!(e, CgroupError::OutsideMount { .. }), "{e}");
    assert!(e.to_string().contains("mount root /docker/c1"), "{e}");
}

#[test]
fn unified_self_with_processes_gives_a_clear_error() {
    let spec = FakeSpec::new(Mode::Unified).own("unified", "/user.slice/pjwd.service");
    let (_tmp, m) = machine(spec);
    let d = driver(&m, "self/jobs").unwrap();
    let e = d.prepare_parent().unwrap_err();
    let own = m
        .mount_point("unified")
        .unwrap()
        .join("user.slice/pjwd.service");
    assert!(
        matches!(e, CgroupError::SubtreeBusy { ref path, .. } if *path == own),
        "{e}"
    );
    assert!(e.to_string().contains("no-internal-process"), "{e}");

    // Without processes of its own (the daemon moved itself into a leaf) it works.
    let mut spec = FakeSpec::new(Mode::Unified).own("unified", "/user.slice/pjwd.service");
    spec.own_pid = None;
    let (_tmp2, m2) = machine(spec);
    let d = driver(&m2, "self/jobs").unwrap();
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("0-1")).unwrap();
    assert_eq!(d.job_cpus("j").unwrap().to_string(), "0-1");
}

#[test]
fn detection() {
    // cpu and cpuacct co-mounted: one hierarchy, keyed by both.
    let mut spec = FakeSpec::new(Mode::Hybrid);
    spec.v1_mounts = vec!["cpu,cpuacct".into(), "cpuset".into(), "memory".into()];
    let (_tmp, m) = machine(spec);
    let d = driver(&m, "/pjw").unwrap();
    let keys: Vec<String> = d.parent_dirs().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["unified", "cpuset", "memory", "cpu,cpuacct"]);
    assert!(d.describe().contains("cpu,cpuacct="), "{}", d.describe());

    // Legacy without cpuset: refused.
    let mut spec = FakeSpec::new(Mode::Legacy);
    spec.v1_mounts = vec!["memory".into(), "name=systemd".into()];
    let (_tmp, m) = machine(spec);
    let e = driver(&m, "/pjw").unwrap_err();
    assert!(matches!(e, CgroupError::MissingController { .. }), "{e}");
    assert!(e.to_string().contains("cpuset"));

    // Only a named v1 hierarchy plus a controller-less cgroup2: nothing usable.
    let mut spec = FakeSpec::new(Mode::Hybrid);
    spec.v1_mounts = vec!["name=systemd".into()];
    let (_tmp, m) = machine(spec);
    let e = driver(&m, "/pjw").unwrap_err();
    assert!(matches!(e, CgroupError::NoCgroupFs { .. }), "{e}");

    // Unified, self in a cgroup that was not given cpuset: refused, naming the cgroup.
    let spec = FakeSpec::new(Mode::Unified).own("unified", "/user.slice/x");
    let (_tmp, m) = machine(spec);
    let own = m.mount_point("unified").unwrap().join("user.slice/x");
    fs::write(own.join("cgroup.controllers"), "memory pids\n").unwrap();
    let e = driver(&m, "self").unwrap_err();
    assert!(e.to_string().contains(&own.display().to_string()), "{e}");
    // It says what to do: an absolute parent, or delegate the controller.
    assert!(matches!(e, CgroupError::NotDelegated { .. }), "{e}");
    assert!(e.to_string().contains("--cgroup-parent /pjw"), "{e}");

    // Unified without cpuset: refused.
    let mut spec = FakeSpec::new(Mode::Unified);
    spec.v2_controllers = "memory pids".into();
    let (_tmp, m) = machine(spec);
    assert!(matches!(
        driver(&m, "/pjw"),
        Err(CgroupError::MissingController { .. })
    ));

    // Legacy without freezer: freeze unsupported, kill still works by signalling.
    let mut spec = FakeSpec::new(Mode::Legacy);
    spec.v1_mounts = vec!["cpuset".into(), "memory".into()];
    let (_tmp, m) = machine(spec);
    let d = driver(&m, "/pjw").unwrap();
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("0")).unwrap();
    d.add_process("j", 77).unwrap();
    assert!(matches!(
        d.freeze("j", true),
        Err(CgroupError::Unsupported { .. })
    ));
    d.kill("j").unwrap();
    assert!(!d.is_populated("j").unwrap());
}

#[test]
fn create_job_rolls_back_what_it_created() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Hybrid));
    let d = driver(&m, "/pjw").unwrap();
    d.prepare_parent().unwrap();
    // A plain file where the pids job cgroup should go makes mkdir fail there.
    let pids_job = dir_of(&d.job_dirs("j"), "pids");
    fs::write(&pids_job, "").unwrap();
    let e = d.create_job("j", &limits("0")).unwrap_err();
    assert!(matches!(e, CgroupError::CreateDir { .. }), "{e}");
    for (key, dir) in d.job_dirs("j") {
        if key == "pids" {
            assert!(dir.is_file());
        } else {
            assert!(!dir.exists(), "{key}: {} left behind", dir.display());
        }
    }
    fs::remove_file(&pids_job).unwrap();
    d.create_job("j", &limits("0")).unwrap();
}

#[test]
fn create_job_keeps_existing_job_on_failure() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Legacy));
    let d = driver(&m, "/pjw").unwrap();
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("0")).unwrap();
    let mem = dir_of(&d.job_dirs("j"), "memory");
    fs::remove_file(mem.join("memory.limit_in_bytes")).unwrap();
    let e = d.create_job("j", &limits("1")).unwrap_err();
    assert!(
        matches!(e, CgroupError::Write { ref value, .. } if *value == (64u64 << 20).to_string()),
        "{e}"
    );
    assert!(e.to_string().contains("memory.limit_in_bytes"), "{e}");
    for (_, dir) in d.job_dirs("j") {
        assert!(dir.is_dir());
    }
}

#[test]
fn add_process_reports_each_failure() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Hybrid));
    let d = driver(&m, "/pjw").unwrap();
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("0")).unwrap();
    let mem = dir_of(&d.job_dirs("j"), "memory");
    fs::remove_file(mem.join("cgroup.procs")).unwrap();
    let e = d.add_process("j", 5).unwrap_err();
    match &e {
        CgroupError::AddProcess { pid, failures, .. } => {
            assert_eq!(*pid, 5);
            assert_eq!(failures.len(), 1);
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .contains(&mem.join("cgroup.procs").display().to_string()),
        "{e}"
    );
    // The others did move it.
    assert_eq!(
        read(&dir_of(&d.job_dirs("j"), "cpuset").join("cgroup.procs")),
        "5"
    );
}

#[test]
fn bad_names_are_refused() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Hybrid));
    let d = driver(&m, "/pjw").unwrap();
    for bad in ["", ".", "..", "a/b"] {
        assert!(matches!(
            d.create_job(bad, &limits("0")),
            Err(CgroupError::BadJobName { .. })
        ));
        assert!(d.remove_job(bad).is_err());
        assert!(d.kill(bad).is_err());
    }
}

#[test]
fn create_before_prepare_names_the_parent() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Unified));
    let d = driver(&m, "/pjw").unwrap();
    let e = d.create_job("j", &limits("0")).unwrap_err();
    assert!(matches!(e, CgroupError::ParentMissing { .. }), "{e}");
    assert!(e.to_string().contains("pjw"), "{e}");
}

#[test]
fn job_of_reads_the_tracking_hierarchy() {
    use pjw_kernelfs::proc_cgroup::parse;
    let cases: &[(Mode, &str, Option<&str>)] = &[
        (
            Mode::Hybrid,
            "4:cpuset:/\n0::/pjw-x/job-42\n",
            Some("job-42"),
        ),
        (
            Mode::Hybrid,
            "4:cpuset:/pjw-x/job-42\n0::/user.slice\n",
            None,
        ),
        (Mode::Hybrid, "0::/pjw-x/job-7/sub\n", Some("job-7")),
        (Mode::Hybrid, "0::/pjw-xy/job-7\n", None),
        (Mode::Hybrid, "0::/pjw-x\n", None),
        (Mode::Unified, "0::/pjw-x/job-1\n", Some("job-1")),
        (Mode::Unified, "0::/\n", None),
        (
            Mode::Legacy,
            "3:cpuset:/pjw-x/job-9\n2:memory:/\n",
            Some("job-9"),
        ),
        (Mode::Legacy, "3:cpuset:/\n2:memory:/pjw-x/job-9\n", None),
    ];
    for (mode, text, want) in cases {
        let (_tmp, m) = machine(FakeSpec::new(*mode));
        let d = driver(&m, "/pjw-x").unwrap();
        let lines = parse(text).unwrap();
        assert_eq!(d.job_of(&lines).as_deref(), *want, "{mode:?} {text:?}");
    }
}

/// The sampler's reads: which file each value comes from, per mode. The kernel's files are
/// written by hand into the fake job directories.
#[test]
fn usage_is_read_from_the_right_files_in_every_mode() {
    for mode in ALL_MODES {
        let (_tmp, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw").unwrap();
        d.prepare_parent().unwrap();
        d.create_job("job-1", &limits("0")).unwrap();
        let dirs = d.job_dirs("job-1");
        let put = |key: &str, file: &str, text: &str| {
            fs::write(dir_of(&dirs, key).join(file), text).unwrap();
        };
        let mem = if mode == Mode::Unified {
            "unified"
        } else {
            "memory"
        };
        let pids = if mode == Mode::Unified {
            "unified"
        } else {
            "pids"
        };
        put(pids, "pids.current", "7\n");
        if mode == Mode::Legacy {
            put("cpuacct", "cpuacct.usage_user", "3000000\n");
            put("cpuacct", "cpuacct.usage_sys", "1000000\n");
        } else {
            // Hybrid: cpu.stat of the controller-less cgroup2 tree.
            put(
                "unified",
                "cpu.stat",
                "usage_usec 4000\nuser_usec 3000\nsystem_usec 1000\n",
            );
            put(
                "unified",
                "memory.pressure",
                "some avg10=2.50 avg60=0.00 avg300=0.00 total=1\nfull avg10=1.25 avg60=0.00 avg300=0.00 total=1\n",
            );
        }
        if mem == "unified" {
            put(mem, "memory.peak", "314572800\n");
            put(mem, "memory.stat", "anon 300\nfile 20\n");
            put(mem, "memory.swap.current", "4096\n");
            put(
                mem,
                "io.stat",
                "8:0 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n",
            );
        } else {
            put(mem, "memory.max_usage_in_bytes", "314572800\n");
            put(
                mem,
                "memory.stat",
                "cache 1\nrss 2\ntotal_cache 20\ntotal_rss 300\ntotal_swap 4096\n",
            );
        }
        let cpu = d.cpu_time("job-1").unwrap();
        assert_eq!((cpu.user_usec, cpu.system_usec), (3000, 1000), "{mode}");
        assert_eq!(d.memory_peak("job-1").unwrap(), 314572800, "{mode}");
        // The swap peak: the kernel's where it keeps one; on v1 the memory+swap peak less the
        // memory peak (a lower bound); absent where neither file is.
        assert_eq!(d.memory_swap_peak("job-1").unwrap(), None, "{mode}");
        if mem == "unified" {
            put(mem, "memory.swap.peak", "157286400\n");
        } else {
            put(mem, "memory.memsw.max_usage_in_bytes", "471859200\n");
        }
        // v1: less one refused charge (64 pages, or a 2 MiB huge page), which the memory+swap
        // mark takes even where nothing was swapped.
        // SAFETY: sysconf has no preconditions.
        let batch = (64 * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64).max(2 << 20);
        let want = if mem == "unified" {
            157286400
        } else {
            157286400 - batch
        };
        assert_eq!(d.memory_swap_peak("job-1").unwrap(), Some(want), "{mode}");
        if mem != "unified" {
            // A node without swap: the marks one batch apart are no swap at all.
            put(
                mem,
                "memory.memsw.max_usage_in_bytes",
                &format!("{}\n", 314572800 + batch),
            );
            assert_eq!(d.memory_swap_peak("job-1").unwrap(), Some(0), "{mode}");
            put(mem, "memory.memsw.max_usage_in_bytes", "471859200\n");
        }
        // Whether its own limit was ever reached (an OOM kill in it then may be its own
        // limit's; else the partition's): v2 `oom` in memory.events, v1 memory.failcnt.
        let (file, never, once) = if mem == "unified" {
            (
                "memory.events",
                "low 0\nhigh 0\nmax 3\noom 0\noom_kill 1\n",
                "max 9\noom 2\noom_kill 2\n",
            )
        } else {
            ("memory.failcnt", "0\n", "17\n")
        };
        if mem != "unified" {
            // Peaks well below the job's 64 MiB limit.
            put(mem, "memory.max_usage_in_bytes", "33554432\n");
            put(mem, "memory.memsw.max_usage_in_bytes", "33554432\n");
        }
        put(mem, file, never);
        assert_eq!(d.oom_at_own_limit("job-1"), Some(false), "{mode}");
        put(mem, file, once);
        assert_eq!(d.oom_at_own_limit("job-1"), Some(true), "{mode}");
        if mem != "unified" {
            // Kernels since 6.x count no failures on v1: a peak at the limit (within a huge
            // page) says it was reached (found on 6.18: failcnt 0, peak = limit, told
            // "the partition").
            put(mem, file, never);
            put(
                mem,
                "memory.max_usage_in_bytes",
                &format!("{}\n", (64 << 20) - 4096),
            );
            assert_eq!(d.oom_at_own_limit("job-1"), Some(true), "{mode}");
            put(mem, "memory.max_usage_in_bytes", &format!("{}\n", 60 << 20));
            assert_eq!(d.oom_at_own_limit("job-1"), Some(false), "{mode}");
        }
        let b = d.memory_breakdown("job-1").unwrap();
        assert_eq!((b.anon, b.file, b.swap), (300, 20, Some(4096)), "{mode}");
        assert_eq!(d.pids_current("job-1").unwrap(), Some(7), "{mode}");
        let io = d.io_bytes("job-1").unwrap();
        let psi = d.pressure("job-1", pjw_cgroup::Resource::Memory);
        match mode {
            Mode::Unified => {
                assert!(d.counts_io());
                assert_eq!(io.map(|i| (i.rbytes, i.wbytes)), Some((10, 20)));
                assert_eq!(psi.map(|p| p.some.avg10), Some(2.5));
            }
            Mode::Hybrid => {
                assert!(!d.counts_io());
                assert_eq!(io, None);
                assert_eq!(psi.and_then(|p| p.full).map(|f| f.avg10), Some(1.25));
            }
            Mode::Legacy => {
                assert!(!d.counts_io());
                assert_eq!(io, None);
                assert_eq!(psi, None, "no PSI without cgroup2");
            }
        }
        // A bad job name never reaches the filesystem.
        assert!(d.cpu_time("../x").is_err());
        d.remove_job("job-1").unwrap();
    }
}

/// A job whose cgroup is gone holds nothing; a job whose tracking file cannot be read is an
/// error, never "empty" (the daemon would end a running job and give its CPUs away).
#[test]
fn an_unreadable_job_is_an_error_not_empty() {
    for mode in ALL_MODES {
        let (_tmp, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw").unwrap();
        d.prepare_parent().unwrap();
        assert!(!d.is_populated("never-made").unwrap(), "{mode}");
        d.create_job("j", &limits("0")).unwrap();
        d.add_process("j", 31).unwrap();
        let tracking = if mode == Mode::Legacy {
            dir_of(&d.job_dirs("j"), "cpuset").join("cgroup.procs")
        } else {
            dir_of(&d.job_dirs("j"), "unified").join("cgroup.events")
        };
        fs::remove_file(&tracking).unwrap();
        assert!(
            d.is_populated("j").is_err(),
            "{mode}: an unreadable {} read as {:?}",
            tracking.display(),
            d.is_populated("j")
        );
    }
}

/// Legacy mode has no populated flag: a process in any of the job's v1 cgroups keeps the job
/// populated (it keeps the cgroups from going), and kill reaches it there too.
#[test]
fn legacy_counts_a_process_in_any_hierarchy() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Legacy));
    let d = driver(&m, "/pjw").unwrap();
    d.prepare_parent().unwrap();
    d.create_job("j", &limits("0")).unwrap();
    // Only in the memory hierarchy (e.g. a move into the others failed half-way).
    let mem = dir_of(&d.job_dirs("j"), "memory");
    fs::write(mem.join("cgroup.procs"), "52\n").unwrap();
    assert!(d.procs("j").unwrap().is_empty(), "cpuset holds nothing");
    assert!(d.is_populated("j").unwrap(), "a process in memory only");
    assert!(matches!(
        d.remove_job("j"),
        Err(CgroupError::Populated { .. })
    ));
    d.kill("j").unwrap();
    assert!(!d.is_populated("j").unwrap());
    d.remove_job("j").unwrap();
    // Killing an empty job (every job end) does not freeze and thaw it.
    d.create_job("e", &limits("0")).unwrap();
    let freezer = dir_of(&d.job_dirs("e"), "freezer").join("freezer.state");
    fs::write(&freezer, "untouched\n").unwrap();
    d.kill("e").unwrap();
    assert_eq!(read(&freezer), "untouched");
    d.remove_job("e").unwrap();
}

/// `swap_max` on v1: memory and swap are capped together, so a job with a memory limit gets
/// memory.memsw.limit_in_bytes = memory limit + swap_max; without a memory limit, or without
/// swap accounting, nothing is written. (v2's memory.swap.max: numa.rs in the guest.)
#[test]
fn legacy_swap_max_is_memsw_on_top_of_the_memory_limit() {
    for mode in [Mode::Hybrid, Mode::Legacy] {
        let (_tmp, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw").unwrap();
        d.prepare_parent().unwrap();
        let mut l = limits("0");
        l.swap_max = Some(16 << 20);
        d.create_job("j", &l).unwrap();
        let mem = dir_of(&d.job_dirs("j"), "memory");
        assert_eq!(
            read(&mem.join("memory.limit_in_bytes")),
            (64u64 << 20).to_string()
        );
        assert_eq!(
            read(&mem.join("memory.memsw.limit_in_bytes")),
            (80u64 << 20).to_string(),
            "{mode}"
        );
        // No memory limit: v1 cannot cap swap alone.
        l.memory_max = None;
        d.create_job("k", &l).unwrap();
        let mem = dir_of(&d.job_dirs("k"), "memory");
        assert_eq!(
            read(&mem.join("memory.memsw.limit_in_bytes")),
            "9223372036854771712"
        );
        // No swap accounting (no memsw files): the job is still made.
        l.memory_max = Some(64 << 20);
        d.create_job("n", &l).unwrap();
        let mem = dir_of(&d.job_dirs("n"), "memory");
        fs::remove_file(mem.join("memory.memsw.limit_in_bytes")).unwrap();
        d.create_job("n", &l).unwrap();
    }
}

/// Old v1 kernels: a memory cgroup with use_hierarchy 0 does not charge its children, so the
/// job partition's limit would not cover the jobs; the parent levels pjw makes turn it on.
#[test]
fn legacy_parent_levels_are_hierarchical_memory_cgroups() {
    let (_tmp, m) = machine(FakeSpec::new(Mode::Legacy));
    let root = m.mount_point("memory").unwrap();
    fs::write(root.join("memory.use_hierarchy"), "0\n").unwrap();
    let d = driver(&m, "/pjw/jobs").unwrap();
    // Children of a non-hierarchical root start with 0 (the fake tree inherits, as the kernel).
    d.prepare_parent().unwrap();
    for level in ["pjw", "pjw/jobs"] {
        assert_eq!(
            read(&root.join(level).join("memory.use_hierarchy")),
            "1",
            "{level}"
        );
    }
}

#[test]
fn the_device_fence_is_the_v1_controller_where_mounted_else_a_device_program() {
    use pjw_cgroup::devices::{Fence, FAKE_BPF_FILE};
    let without_devices = |mode| {
        let mut spec = FakeSpec::new(mode);
        spec.v1_mounts.retain(|m| m != "devices");
        spec
    };
    let cases = [
        (FakeSpec::new(Mode::Unified), Some(Fence::BpfProgram)),
        (FakeSpec::new(Mode::Hybrid), Some(Fence::V1Controller)),
        (without_devices(Mode::Hybrid), Some(Fence::BpfProgram)),
        (FakeSpec::new(Mode::Legacy), Some(Fence::V1Controller)),
        (without_devices(Mode::Legacy), None),
    ];
    for (spec, want) in cases {
        let what = format!("{:?} with v1 {:?}", spec.mode, spec.v1_mounts);
        let (_t, m) = machine(spec);
        let mut d = driver(&m, "/pjw").unwrap();
        assert_eq!(d.fence_devices(), want, "{what}");
        assert_eq!(d.fences_devices(), want, "{what}");
        d.prepare_parent().unwrap();
        d.create_job("job-1", &limits("0")).unwrap();
        let res = d.deny_devices("job-1", &[(195, 1), (195, 2)]);
        let dirs = d.job_dirs("job-1");
        match want {
            Some(Fence::V1Controller) => {
                res.unwrap();
                // The job also has a v1 devices cgroup (the fake keeps the last rule written);
                // no program anywhere.
                let v1 = dir_of(&dirs, "devices");
                assert_eq!(read(&v1.join("devices.deny")), "c 195:2 rwm", "{what}");
                assert!(dirs.iter().all(|(_, p)| !p.join(FAKE_BPF_FILE).exists()));
            }
            Some(Fence::BpfProgram) => {
                res.unwrap();
                // One program on the job's cgroup2 directory, no v1 devices cgroup.
                let v2 = dir_of(&dirs, "unified");
                assert_eq!(read(&v2.join(FAKE_BPF_FILE)), "c 195:1 rwm,c 195:2 rwm");
                assert!(dirs.iter().all(|(k, _)| k != "devices"), "{what}");
            }
            None => assert!(
                matches!(res, Err(CgroupError::MissingController { .. })),
                "{what}: an unfenced machine must not look fenced: {res:?}"
            ),
        }
        d.remove_job("job-1").unwrap();
    }
}

#[test]
fn a_chosen_fence_is_taken_only_where_the_machine_has_it() {
    use pjw_cgroup::devices::Fence;
    let (_t, m) = machine(FakeSpec::new(Mode::Hybrid));
    let mut d = driver(&m, "/pjw").unwrap();
    assert!(d.fence_devices_by(Fence::BpfProgram));
    assert_eq!(d.fences_devices(), Some(Fence::BpfProgram));
    let (_t, m) = machine(FakeSpec::new(Mode::Unified));
    let mut d = driver(&m, "/pjw").unwrap();
    assert!(!d.fence_devices_by(Fence::V1Controller));
    assert_eq!(d.fences_devices(), None);
}

#[test]
fn io_weight_and_limits_reach_io_or_blkio_files() {
    use pjw_core::io_limits::{IoMax, IoWeight, JobIo};
    for mode in ALL_MODES {
        let (_t, m) = machine(FakeSpec::new(mode));
        let d = driver(&m, "/pjw").unwrap();
        d.prepare_parent().unwrap();
        let mut l = limits("1");
        l.io = JobIo {
            weight: Some(IoWeight::parse("2000").unwrap()),
            max: vec![IoMax::parse("254:0 rbps=10M wiops=50").unwrap()],
        };
        d.create_job("job-io", &l).unwrap();
        let jobs = d.job_dirs("job-io");
        if mode == Mode::Unified {
            let j = dir_of(&jobs, "unified");
            assert_eq!(read(&j.join("io.weight")), "default 2000");
            assert_eq!(
                read(&j.join("io.max")),
                "254:0 rbps=10485760 wbps=max riops=max wiops=50"
            );
        } else {
            let b = dir_of(&jobs, "blkio");
            // v1's scale stops at 1000.
            assert_eq!(read(&b.join("blkio.bfq.weight")), "1000", "{mode}");
            let t = |f: &str| read(&b.join(format!("blkio.throttle.{f}_device")));
            assert_eq!(t("read_bps"), "254:0 10485760", "{mode}");
            assert_eq!(t("write_iops"), "254:0 50", "{mode}");
            assert_eq!(t("write_bps"), "254:0 0", "{mode}");
        }
        d.remove_job("job-io").unwrap();
        assert!(
            d.job_dirs("job-io").iter().all(|(_, p)| !p.exists()),
            "{mode}"
        );
    }
}
