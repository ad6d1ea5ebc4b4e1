//! NUMA tests on pure cgroup v2 and pure v1 (the VM tiers: 2 sockets × 4 cores × 2 threads, one
//! NUMA node of 1 GiB per socket, CPUs 0-7 and 8-15; busybox-v2 has cgroup2 as the only cgroup
//! filesystem, busybox-v1 the v1 hierarchies only).
//!
//! Each test needs root (what `make test` provides: missing on the host, it fails) and is
//! recorded as skipped, saying why, unless the machine has at least 2 NUMA nodes, at least 16
//! CPUs and one kind of cgroup filesystem; the placement tests run on both, those of cgroup v2
//! features skip on v1 saying so. The tests run
//! one at a time (they place jobs on whole NUMA nodes), each with its own daemon through
//! `pjw_testkit::TestDaemon`, which kills what a test left and removes its cgroups.
//!
//! The allocator spreads on a nearly idle machine: on an idle guest two 4-CPU jobs (half a node
//! each) get a NUMA node (and L3) each; otherwise it packs (best fit). The same placements are a
//! table test in crates/core/tests/alloc.rs (`the_vm_guests_four_and_eight_cpu_jobs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use pjw_core::CpuSet;
use pjw_testkit::TestDaemon;

static SERIAL: Mutex<()> = Mutex::new(());

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_default()
}

/// The NUMA nodes' CPUs, from sysfs (node number, CPUs).
fn nodes() -> Vec<(u32, CpuSet)> {
    let online =
        CpuSet::parse_list(read("/sys/devices/system/node/online").trim()).unwrap_or_default();
    online
        .iter()
        .map(|n| {
            let cpus = read(format!("/sys/devices/system/node/node{n}/cpulist"));
            (n, CpuSet::parse_list(cpus.trim()).unwrap_or_default())
        })
        .collect()
}

/// Why this machine cannot run these tests, if it cannot.
fn unsuitable() -> Option<String> {
    let n = nodes();
    let cpus = CpuSet::parse_list(read("/sys/devices/system/cpu/online").trim())
        .unwrap_or_default()
        .len();
    if n.len() < 2 || cpus < 16 {
        return Some(format!(
            "needs >= 2 NUMA nodes and >= 16 CPUs (has {} and {cpus})",
            n.len()
        ));
    }
    let (v1, v2) = cgroup_fs();
    if v1 == v2 {
        return Some("needs pure cgroup v2 or pure v1 (one kind of cgroup filesystem)".into());
    }
    None
}

/// Whether cgroup v1 and cgroup2 filesystems are mounted.
fn cgroup_fs() -> (bool, bool) {
    let mounts = read("/proc/self/mountinfo");
    let fstypes: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(" - ").nth(1)?.split_whitespace().next())
        .collect();
    (fstypes.contains(&"cgroup"), fstypes.contains(&"cgroup2"))
}

/// Pure cgroup v1 (the busybox-v1 guest).
fn pure_v1() -> bool {
    cgroup_fs() == (true, false)
}

/// Skip unless this machine suits the NUMA tests (pure v2 or pure v1).
macro_rules! require_numa {
    () => {
        pjw_testkit::require!(pjw_testkit::Component::Root);
        if let Some(why) = unsuitable() {
            pjw_testkit::skip!("{why}");
        }
    };
}

/// The same, and pure cgroup v2: `$why` says what the test needs that v1 has not.
macro_rules! require_numa_v2 {
    ($why:literal) => {
        require_numa!();
        if pure_v1() {
            pjw_testkit::skip!("cgroup v1: {}", $why);
        }
    };
}

/// A job script: record its cgroup, then wait until killed.
fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "cat /proc/self/cgroup > {d}/{tag}.cg.tmp && mv {d}/{tag}.cg.tmp {d}/{tag}.cg; while :; do sleep 1; done",
        d = dir.display()
    )
}

/// The job's cgroup directory (v1: in the cpuset hierarchy), from the /proc/self/cgroup it
/// recorded.
fn job_cgroup(dir: &Path, tag: &str) -> PathBuf {
    job_cgroup_of(dir, tag, "cpuset")
}

/// The job's cgroup directory holding `controller`: the `0::/path` line on v2; on v1 the line
/// of the hierarchy with `controller`, mounted at /sys/fs/cgroup/<controller>.
fn job_cgroup_of(dir: &Path, tag: &str, controller: &str) -> PathBuf {
    let f = dir.join(format!("{tag}.cg"));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(120), || f.exists()),
        "job {tag} did not start"
    );
    let text = read(&f);
    if pure_v1() {
        let rel = text
            .lines()
            .find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, cs, path) = (p.next()?, p.next()?, p.next()?);
                cs.split(',').any(|c| c == controller).then_some(path)
            })
            .unwrap_or_else(|| panic!("no {controller} line in {text:?}"));
        return Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(rel.trim_start_matches('/'));
    }
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no cgroup2 line in {text:?}"));
    Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'))
}

/// The CPUs and memory nodes a cgroup's tasks may use: cpuset.cpus.effective and
/// cpuset.mems.effective (v2), cpuset.effective_cpus and cpuset.effective_mems (v1).
fn cpuset_of(cg: &Path) -> (CpuSet, CpuSet) {
    let f = |n: &str| {
        CpuSet::parse_list(read(cg.join(n)).trim())
            .unwrap_or_else(|e| panic!("{}/{n}: {e}", cg.display()))
    };
    if cg.join("cpuset.effective_cpus").exists() {
        return (f("cpuset.effective_cpus"), f("cpuset.effective_mems"));
    }
    (f("cpuset.cpus.effective"), f("cpuset.mems.effective"))
}

/// The node whose CPUs hold all of `cpus`, if one does.
fn node_of(cpus: &CpuSet) -> Option<u32> {
    nodes()
        .into_iter()
        .find(|(_, nc)| cpus.iter().all(|c| nc.contains(c)))
        .map(|(n, _)| n)
}

fn node_cpus(n: u32) -> CpuSet {
    nodes()
        .into_iter()
        .find(|(m, _)| *m == n)
        .map(|(_, c)| c)
        .unwrap_or_default()
}

fn node_set(n: u32) -> CpuSet {
    CpuSet::parse_list(&n.to_string()).unwrap()
}

fn stop(d: &TestDaemon, ids: &[&str], children: Vec<Child>) {
    for id in ids {
        pjw_testkit::job::run(d.pjw().args(["kill", id])).ok();
    }
    for c in children {
        pjw_testkit::job::wait(c, "a held job (killed)").signal(libc::SIGKILL);
    }
    // `pjw kill` answers once the signal is sent; the CPUs are free only once the daemon has
    // seen each job's cgroup empty and dropped it.
    let listed = |d: &TestDaemon| {
        d.status()["jobs"]
            .as_array()
            .is_some_and(|l| l.iter().any(|j| ids.iter().any(|id| j["id"] == *id)))
    };
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !listed(d)),
        "jobs {ids:?} still listed after their kill:\n{}",
        d.log()
    );
}

/// The CPUs sharing an L3 cache with `cpu` (sysfs cache index3), if the machine says.
fn l3_of(cpu: u32) -> Option<CpuSet> {
    let t = read(format!(
        "/sys/devices/system/cpu/cpu{cpu}/cache/index3/shared_cpu_list"
    ));
    CpuSet::parse_list(t.trim()).ok().filter(|s| !s.is_empty())
}

#[test]
fn four_cpu_jobs_spread_over_the_nodes_and_an_eight_cpu_job_takes_a_whole_one() {
    require_numa!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["--cpus", "4", "--job-id", "a"], &hold(&dir, "a"));
    let (ca, ma) = cpuset_of(&job_cgroup(&dir, "a"));
    let b = d.run_sh(&["--cpus", "4", "--job-id", "b"], &hold(&dir, "b"));
    let (cb, mb) = cpuset_of(&job_cgroup(&dir, "b"));
    eprintln!("placement: a cpus {ca} mems {ma}; b cpus {cb} mems {mb}");
    let mut node = Vec::new();
    for (name, c, m) in [("a", &ca, &ma), ("b", &cb, &mb)] {
        assert_eq!(c.len(), 4, "job {name}: {c}");
        let n = node_of(c).unwrap_or_else(|| panic!("job {name} spans NUMA nodes: {c}"));
        assert_eq!(*m, node_set(n), "job {name}: mems {m} is not its node {n}");
        node.push(n);
    }
    // The node is mostly free: each job gets a NUMA node (and its L3) to itself.
    assert_ne!(node[0], node[1], "both 4-CPU jobs on node {}", node[0]);
    let (la, lb) = (l3_of(ca.first().unwrap()), l3_of(cb.first().unwrap()));
    eprintln!("placement: L3 of a {la:?}, of b {lb:?}");
    if let (Some(la), Some(lb)) = (la, lb) {
        assert!(ca.is_subset(&la) && cb.is_subset(&lb), "a job spans L3s");
        assert_ne!(la, lb, "both 4-CPU jobs share an L3");
    }
    // Whole cores: with SMT 2, 4 CPUs are 2 whole cores (sibling pairs 2k, 2k+1 here).
    for c in [&ca, &cb] {
        for cpu in c.iter() {
            assert!(c.contains(cpu ^ 1), "{c} splits a core");
        }
    }
    // b ends; an 8-CPU job then takes b's node whole (a keeps its own).
    stop(&d, &["b"], vec![b]);
    let big = d.run_sh(&["--cpus", "8", "--job-id", "big"], &hold(&dir, "big"));
    let (cbig, mbig) = cpuset_of(&job_cgroup(&dir, "big"));
    eprintln!("placement: big cpus {cbig} mems {mbig}");
    let n = node_of(&cbig).unwrap_or_else(|| panic!("8-CPU job spans nodes: {cbig}"));
    assert_eq!(cbig, node_cpus(n), "8-CPU job does not hold its whole node");
    assert_eq!(mbig, node_set(n));
    assert_eq!(n, node[1], "8-CPU job not on the node b left");
    assert!(
        cbig.iter().all(|c| !ca.contains(c)),
        "8-CPU job overlaps job a"
    );
    stop(&d, &["a", "big"], vec![a, big]);
}

#[test]
fn an_eight_cpu_job_on_an_idle_machine_takes_exactly_one_node() {
    require_numa!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let j = d.run_sh(&["--cpus", "8", "--job-id", "eight"], &hold(&dir, "e"));
    let cg = job_cgroup(&dir, "e");
    let (c, m) = cpuset_of(&cg);
    eprintln!("placement: 8-CPU job cpus {c} mems {m}");
    let n = node_of(&c).unwrap_or_else(|| panic!("8-CPU job spans nodes: {c}"));
    assert_eq!(c, node_cpus(n));
    assert_eq!(m, node_set(n));
    // The kernel sees the same: the job's process may only run on those CPUs.
    let procs = read(cg.join("cgroup.procs"));
    let pid = procs.lines().next().expect("a process in the job");
    let status = read(format!("/proc/{pid}/status"));
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| CpuSet::parse_list(v.trim()).unwrap())
        .unwrap();
    assert_eq!(allowed, c);
    let mems_allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Mems_allowed_list:"))
        .map(|v| CpuSet::parse_list(v.trim()).unwrap())
        .unwrap();
    assert_eq!(mems_allowed, m);
    // The daemon names the user from the user database (the guest has an /etc/passwd).
    let st = d.status();
    let job = &st["jobs"][0];
    assert_eq!(
        (job["id"].as_str(), job["user"].as_str()),
        (Some("eight"), Some("root"))
    );
    stop(&d, &["eight"], vec![j]);
}

/// The anonymous memory per node of memory.numa_stat, in bytes: v2 `anon N0=bytes …`, v1
/// `anon=total N0=pages …` (4 KiB pages on x86-64).
fn anon_per_node(cg: &Path) -> Vec<(u32, u64)> {
    let text = read(cg.join("memory.numa_stat"));
    let (line, unit) = match text.lines().find(|l| l.starts_with("anon ")) {
        Some(l) => (l, 1),
        None => (
            text.lines()
                .find(|l| l.starts_with("anon="))
                .unwrap_or_else(|| panic!("no anon line in memory.numa_stat: {text:?}")),
            4096,
        ),
    };
    line.split_whitespace()
        .skip(1)
        .filter_map(|w| {
            let (n, v) = w.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, v.parse::<u64>().ok()? * unit))
        })
        .collect()
}

#[test]
fn a_jobs_memory_lands_on_its_node() {
    require_numa!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let wl = pjw_bin().with_file_name("pjw-wl");
    assert!(wl.exists(), "pjw-wl not built at {}", wl.display());
    // Fill node 0 with an 8-CPU job so that the measured job goes to node 1 (not the node the
    // test and the daemon run on by default).
    let filler = d.run_sh(&["--cpus", "8", "--job-id", "filler"], &hold(&dir, "f"));
    let (cf, _) = cpuset_of(&job_cgroup(&dir, "f"));
    let script = format!(
        "cat /proc/self/cgroup > {d}/m.cg.tmp && mv {d}/m.cg.tmp {d}/m.cg; exec {wl} touch 64 {d}/m.touched",
        d = dir.display(),
        wl = wl.display()
    );
    let m = d.run_sh(&["--cpus", "2", "--job-id", "mem"], &script);
    let cg = job_cgroup(&dir, "m");
    let memcg = job_cgroup_of(&dir, "m", "memory");
    let (c, mems) = cpuset_of(&cg);
    let n = node_of(&c).unwrap_or_else(|| panic!("job spans nodes: {c}"));
    assert_ne!(Some(n), node_of(&cf), "job shares the filler's node");
    assert_eq!(mems, node_set(n));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(120), || dir.join("m.touched").exists()),
        "the job did not touch its memory"
    );
    let anon = anon_per_node(&memcg);
    let total: u64 = anon.iter().map(|(_, v)| v).sum();
    let mine = anon
        .iter()
        .find(|(node, _)| *node == n)
        .map_or(0, |(_, v)| *v);
    eprintln!("placement: memory job cpus {c} mems {mems}; anon per node {anon:?}");
    assert!(total >= 60 << 20, "only {total} bytes of anon memory");
    assert!(
        mine * 10 >= total * 9,
        "only {mine} of {total} anon bytes on node {n}: {anon:?}"
    );
    stop(&d, &["filler", "mem"], vec![filler, m]);
}

/// `pjw run --mem` sets memory.max on v2, and a job that goes beyond it is OOM-killed.
#[test]
fn mem_limit_is_memory_max_on_v2() {
    require_numa_v2!("memory.max and memory.swap.max are v2 files (v1's memory.limit_in_bytes: jail.rs's exit_status_memory_limit_and_environment_reach_the_command)");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let j = d.run_sh(
        &["--cpus", "1", "--mem", "32M", "--job-id", "lim"],
        &hold(&dir, "l"),
    );
    let cg = job_cgroup(&dir, "l");
    assert_eq!(
        read(cg.join("memory.max")).trim(),
        (32u64 << 20).to_string()
    );
    // No swap limit unless configured.
    assert_eq!(read(cg.join("memory.swap.max")).trim(), "max");
    stop(&d, &["lim"], vec![j]);
    let wl = pjw_bin().with_file_name("pjw-wl");
    // A 64 MiB job under a 32 MiB limit: `pjw run` became it, and the OOM killer ended it.
    pjw_testkit::job::run(
        Command::new(pjw_bin())
            .env("PJW_SOCKET", d.socket())
            .args([
                "run", "--cpus", "1", "--mem", "32M", "--job-id", "oom", "--",
            ])
            .arg(&wl)
            .args(["touch", "64"])
            .arg(dir.join("oom.touched")),
    )
    .signal(libc::SIGKILL);
    assert!(!dir.join("oom.touched").exists());
}

/// The VM tier's self-check: with `PJW_VM_INJECT_FAILURE=1` (set by `make test-vm
/// VM_INJECT_FAILURE=1`) this test fails, and the tier must report the failure.
#[test]
fn injected_failure_when_asked() {
    if std::env::var_os("PJW_VM_INJECT_FAILURE").is_some_and(|v| v == "1") {
        panic!("injected failure (PJW_VM_INJECT_FAILURE=1)");
    }
    // Not asked to fail, it checks nothing: a skip, not a pass.
    pjw_testkit::skip!("fails only on purpose, in the VM self-check (PJW_VM_INJECT_FAILURE=1)");
}

/// Whether the running kernel is older than MAJOR.MINOR.
fn kernel_before(major: u32, minor: u32) -> bool {
    let rel = read("/proc/sys/kernel/osrelease");
    let mut it = rel
        .trim()
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) < (major, minor)
}

/// The calling process's cgroup2 directory.
fn own_cgroup() -> PathBuf {
    let text = read("/proc/self/cgroup");
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup2 line in /proc/self/cgroup");
    Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'))
}

/// Remove `dir` and every cgroup below it, deepest first (processes must be gone).
fn remove_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// On v2 with a `self` parent the daemon's own cgroup must enable controllers for the jobs,
/// which the kernel refuses while the daemon sits in it: the daemon moves into a leaf
/// (`pjw-daemon`) and the job cgroups go beside it — what happens under systemd's
/// `Delegate=yes`, where the service's cgroup holds only the daemon.
#[test]
fn daemon_alone_in_its_cgroup_moves_into_a_leaf() {
    require_numa_v2!(
        "the no-internal-process rule, which the daemon's leaf answers, is cgroup v2's"
    );
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A cgroup of the daemon's own: below this test's, or — where systemd runs and this test's
    // own cgroup is a session scope shared with others — in the tests' delegated scope, whose
    // root holds no process and hands the controllers down.
    let own = match pjw_testkit::scope_base() {
        Some(base) => {
            let dir = Path::new("/sys/fs/cgroup").join(base.trim_start_matches('/'));
            std::fs::write(
                dir.join("cgroup.subtree_control"),
                "+cpuset +cpu +memory +pids",
            )
            .expect("enable controllers in the tests' scope");
            dir
        }
        None => own_cgroup(),
    };
    let y = own.join(format!("pjw-test-{}-leaf", std::process::id()));
    std::fs::create_dir(&y).expect("create the daemon's cgroup");
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            remove_tree(&self.0);
        }
    }
    let _cleanup = Cleanup(y.clone());
    let wrapper = std::env::temp_dir().join(format!("pjw-test-{}-leaf.sh", std::process::id()));
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = daemon ]; then echo $$ > {}/cgroup.procs || exit 1; fi\nexec {} \"$@\"\n",
            y.display(),
            pjw_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    {
        let mut d = TestDaemon::start_below_self(&wrapper, "");
        let dir = d.dir().to_path_buf();
        let pid = d.pid().expect("daemon pid");
        let leaf = y.join("pjw-daemon");
        let procs = read(leaf.join("cgroup.procs"));
        assert!(
            procs.lines().any(|l| l.trim() == pid.to_string()),
            "daemon {pid} not in {}: {procs:?}\n{}",
            leaf.display(),
            d.log()
        );
        assert_eq!(
            read(y.join("cgroup.procs")).trim(),
            "",
            "processes left in {}",
            y.display()
        );
        let ctl = read(y.join("cgroup.subtree_control"));
        for c in ["cpuset", "memory", "cpu", "pids"] {
            assert!(
                ctl.split_whitespace().any(|w| w == c),
                "{c} not enabled in {}: {ctl}",
                y.display()
            );
        }
        let j = d.run_sh(&["--cpus", "2", "--job-id", "leafjob"], &hold(&dir, "lj"));
        let cg = job_cgroup(&dir, "lj");
        eprintln!(
            "daemon leaf {}, job cgroup {}",
            leaf.display(),
            cg.display()
        );
        assert!(
            cg.starts_with(&y),
            "job cgroup {} not below {}",
            cg.display(),
            y.display()
        );
        assert!(
            !cg.starts_with(&leaf),
            "job cgroup inside the daemon's leaf"
        );
        assert_eq!(cpuset_of(&cg).0.len(), 2);
        stop(&d, &["leafjob"], vec![j]);
        d.stop();
    }
    let _ = std::fs::remove_file(&wrapper);
}

/// `[job] swap_max` becomes each job's `memory.swap.max` (v2), or on v1, where memory and swap
/// are capped together, `memory.memsw.limit_in_bytes` = the job's `--mem` + swap_max.
#[test]
fn swap_max_is_set_per_job() {
    require_numa!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "[job]\nswap_max = \"16M\"\n");
    let dir = d.dir().to_path_buf();
    let j = d.run_sh(
        &["--cpus", "1", "--mem", "32M", "--job-id", "sw"],
        &hold(&dir, "sw"),
    );
    let cg = job_cgroup_of(&dir, "sw", "memory");
    if pure_v1() {
        assert_eq!(
            read(cg.join("memory.memsw.limit_in_bytes")).trim(),
            (48u64 << 20).to_string()
        );
    } else {
        assert_eq!(
            read(cg.join("memory.swap.max")).trim(),
            (16u64 << 20).to_string()
        );
    }
    stop(&d, &["sw"], vec![j]);
}

/// With `[job] partition = "root"` and CPUs kept back for the system (all but the first two), the
/// daemon's parent becomes a partition root and an exclusive job its own partition: the kernel
/// takes its CPUs out of the root cgroup's, so nothing else is balanced onto them.
#[test]
fn exclusive_job_is_a_cpuset_partition() {
    require_numa_v2!("cpuset partitions (cpuset.cpus.partition) are cgroup v2 only");
    if pjw_testkit::scope_base().is_some() && kernel_before(6, 7) {
        pjw_testkit::skip!(
            "under systemd the job parent sits in a slice's scope, and before Linux 6.7 a partition's parent must itself be a partition root, which systemd's slices are not (this kernel: {})",
            read("/proc/sys/kernel/osrelease").trim()
        );
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let root_cpus = || {
        CpuSet::parse_list(read("/sys/fs/cgroup/cpuset.cpus.effective").trim()).unwrap_or_default()
    };
    let before = root_cpus();
    // The first two CPUs stay the system's; the rest are the daemon's pool.
    let system: CpuSet = before.iter().take(2).collect();
    let pool = before.difference(&system);
    {
        let d = TestDaemon::start(
            &pjw_bin(),
            &format!("cpus = \"{pool}\"\n[job]\npartition = \"root\"\n"),
        );
        let dir = d.dir().to_path_buf();
        assert!(
            d.log().contains("exclusive jobs become partitions"),
            "parent is not a partition root:\n{}",
            d.log()
        );
        let j = d.run_sh(
            &["--exclusive", "--cpus", "4", "--job-id", "ex"],
            &hold(&dir, "ex"),
        );
        let cg = job_cgroup(&dir, "ex");
        let part = read(cg.join("cpuset.cpus.partition"));
        let (c, _) = cpuset_of(&cg);
        let outside = root_cpus();
        eprintln!("exclusive job cpus {c}, partition {:?}; root cgroup now runs on {outside} (was {before})", part.trim());
        assert_eq!(part.trim(), "root", "{}", d.log());
        assert!(
            outside.iter().all(|x| !c.contains(x)),
            "root cgroup still has {outside}, job {c}"
        );
        assert_eq!(outside, system);
        stop(&d, &["ex"], vec![j]);
    }
    // The daemon gone and its parent removed, the CPUs are the root's again.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || root_cpus() == before),
        "root cgroup has {} after the test, had {before}",
        root_cpus()
    );
}

/// The physical core of a CPU (package, core id), from sysfs.
fn core_of(cpu: u32) -> (String, String) {
    let t = |f: &str| {
        read(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
            .trim()
            .to_string()
    };
    (t("physical_package_id"), t("core_id"))
}

/// `Cpus_allowed_list` of thread `tid` (empty once it is gone).
fn allowed(tid: u32) -> CpuSet {
    read(format!("/proc/{tid}/status"))
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| CpuSet::parse_list(v.trim()).ok())
        .unwrap_or_default()
}

#[test]
fn a_sixteen_cpu_jobs_busy_threads_land_on_distinct_cores_of_one_node_first() {
    require_numa!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = TestDaemon::start(&pjw_bin(), "[job]\nbind_interval_ms = 200\n");
    let dir = d.dir().join("roles");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..4 {
        std::fs::write(dir.join(format!("busy-{i}")), "").unwrap();
    }
    let wl = pjw_bin().with_file_name("pjw-wl");
    let script = format!("exec {} roles 6 {}", wl.display(), dir.display());
    let mut job = d
        .pjw()
        .args([
            "run", "--cpus", "16", "--job-id", "b16", "--bind", "threads",
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn pjw run");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tid = |i: usize| {
            read(dir.join(format!("tid-{i}")))
                .trim()
                .parse::<u32>()
                .ok()
        };
        assert!(
            TestDaemon::wait_for(Duration::from_secs(120), || (0..6)
                .all(|i| tid(i).is_some())),
            "the workload's threads never wrote their ids"
        );
        let tids: Vec<u32> = (0..6).map(|i| tid(i).unwrap()).collect();
        // 4 busy threads: each on one CPU, 4 different cores, all of one NUMA node; the two
        // sleepers keep the whole job set.
        let mut last = String::new();
        let ok = TestDaemon::wait_for(Duration::from_secs(60), || {
            let pins: Vec<CpuSet> = tids[..4].iter().map(|&t| allowed(t)).collect();
            let cpus: Vec<u32> = pins
                .iter()
                .filter(|p| p.len() == 1)
                .filter_map(CpuSet::first)
                .collect();
            let cores: std::collections::BTreeSet<_> = cpus.iter().map(|&c| core_of(c)).collect();
            let one_node = node_of(&CpuSet::from_cpus(cpus.iter().copied()).unwrap()).is_some();
            let sleepers_free = tids[4..].iter().all(|&t| allowed(t).len() == 16);
            last = format!(
                "busy pins {pins:?}, cores {cores:?}, sleepers {:?}",
                tids[4..].iter().map(|&t| allowed(t)).collect::<Vec<_>>()
            );
            cpus.len() == 4 && cores.len() == 4 && one_node && sleepers_free
        });
        assert!(
            ok,
            "busy threads not on 4 cores of one node: {last}\n{}",
            d.log()
        );
    }));
    std::fs::write(dir.join("stop"), "").unwrap();
    let ended = TestDaemon::wait_for(Duration::from_secs(60), || {
        matches!(job.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = job.kill();
    }
    let _ = job.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
