//! Real software under `pjw run`, the way an HPC user runs it (issue 23): Debian's Open MPI
//! 4.1, gcc's libgomp, hwloc, stress-ng, sysbench and Python, in jobs an unprivileged user
//! starts on a private daemon over the real cgroupfs (root tests; 2 CPUs). What they show:
//! confinement from the first instruction (the probe's first output is its CPUs = the job's);
//! OpenMP sized to the job, and to each MPI rank's binding (`mpirun -np 2` in a 2-CPU job: one
//! thread per rank, as plain `mpirun` on those CPUs); `--ntasks`; a failing rank's status
//! reaching the user; `--bind threads` never widening the pins libgomp and Open MPI make; and
//! stress-ng's workers and sysbench's threads running only on the job's CPUs. The 2 × 2-CPU
//! tasks run in the 16-CPU systemd guest (hpc_tasks.rs). Waits are bounds, never timings.

mod hpc_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hpc_support::{text, Hpc, Probe};
use pjw_core::CpuSet;
use pjw_testkit::{need_cpus, require, require_root, Component};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_first_output_is_the_jobs_cpus_and_openmp_sizes_itself_to_them() {
    require_root!();
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), false);
    for n in [1usize, 2] {
        let o = h.run(&["-q", "-c", &n.to_string()], &[&h.probe("omp")]);
        assert!(o.status.success(), "{}", text(&o));
        let out = stdout(&o);
        assert!(
            out.lines().next().is_some_and(|l| l.starts_with("first ")),
            "the probe's first output is not its cpus:\n{out}"
        );
        let p = Probe::parse(&out);
        let f = &p.first[0];
        // Its CPUs before its first instruction ran are the job's, as pjw told it.
        assert_eq!(Some(f.allowed), f.pjw_cpus, "{out}");
        assert_eq!(f.allowed.len(), n, "{out}");
        assert!(f.allowed.is_subset(&cpus), "{out}");
        // No count from pjw: libgomp sized its team from that mask.
        assert_eq!(f.omp_num_threads, None, "{out}");
        assert_eq!(p.threads.len(), n, "{out}");
        for t in &p.threads {
            assert_eq!((t.of as usize, t.procs as usize), (n, n), "{out}");
            assert!(f.allowed.contains(t.cpu), "{out}");
        }
    }
}

#[test]
fn hybrid_mpi_runs_one_openmp_thread_per_rank_as_plain_mpirun_does() {
    require_root!();
    require!(Component::Mpi);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), true);
    let hybrid = h.probe("hybrid");
    let o = h.run(&["-q", "-c", "2"], &["mpirun", "-np", "2", &hybrid]);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    let p = Probe::parse(&out);
    let ranks = ranks_of(&p, &out);
    // Each rank bound by Open MPI to a CPU of its own, inside the job's.
    assert_eq!(ranks.len(), 2, "{out}");
    let job = p.first[0].pjw_cpus.expect("PJW_CPUS");
    assert_eq!(job.len(), 2, "{out}");
    let mut seen = CpuSet::new();
    for (r, set) in &ranks {
        assert!(
            set.len() == 1 && set.is_subset(&job) && !seen.intersects(set),
            "rank {r} on {set}:\n{out}"
        );
        seen = seen.union(set);
        let threads = p.rank(*r);
        assert_eq!(threads.len(), 1, "rank {r}: one OpenMP thread\n{out}");
        assert_eq!((threads[0].of, threads[0].procs), (1, 1), "{out}");
    }

    // The baseline: the same command on the same CPUs without pjw, as the same user.
    let o = h
        .command("taskset")
        .args(["-c", &job.to_string(), "mpirun", "-np", "2", &hybrid])
        .output()
        .expect("plain mpirun");
    assert!(o.status.success(), "{}", text(&o));
    let base = Probe::parse(&stdout(&o));
    let per_rank = |p: &Probe| (0..2).map(|r| p.rank(r).len()).collect::<Vec<_>>();
    assert_eq!(
        per_rank(&base),
        per_rank(&p),
        "plain mpirun:\n{}",
        stdout(&o)
    );
}

#[test]
fn tasks_give_each_rank_its_share_and_mpirun_one_rank_per_task() {
    require_root!();
    require!(Component::Mpi);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), true);
    let hybrid = h.probe("hybrid");
    // (tasks, cpus per task): mpirun without -np starts one rank per task, each bound to its
    // share, running that many threads.
    for (tasks, per) in [(2u32, 1usize), (1, 2)] {
        let o = h.run(
            &["-q", "--ntasks", &tasks.to_string(), "-c", &per.to_string()],
            &["mpirun", &hybrid],
        );
        assert!(o.status.success(), "{}", text(&o));
        let out = stdout(&o);
        let p = Probe::parse(&out);
        let ranks = ranks_of(&p, &out);
        assert_eq!(ranks.len(), tasks as usize, "{out}");
        let job = p.first[0].pjw_cpus.expect("PJW_CPUS");
        assert_eq!(job.len(), tasks as usize * per, "{out}");
        let mut seen = CpuSet::new();
        for (r, set) in &ranks {
            assert!(
                set.len() == per && set.is_subset(&job) && !seen.intersects(set),
                "rank {r} on {set}:\n{out}"
            );
            seen = seen.union(set);
            let threads = p.rank(*r);
            assert_eq!(threads.len(), per, "rank {r}:\n{out}");
            assert!(threads.iter().all(|t| set.contains(t.cpu)), "{out}");
        }
        let n = per.to_string();
        assert!(
            p.first
                .iter()
                .all(|f| f.omp_num_threads.as_deref() == Some(&n)),
            "{out}"
        );
    }
}

#[test]
fn a_failing_ranks_exit_status_reaches_the_user() {
    require_root!();
    require!(Component::Mpi);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), true);
    let o = h.run(
        &["-q", "-c", "2"],
        &[
            "mpirun",
            "-np",
            "2",
            &h.probe("hybrid"),
            "--exit-rank",
            "1",
            "--code",
            "3",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    // A serial program's own status, and the same job succeeding, for contrast.
    let o = h.run(
        &["-q", "-c", "1"],
        &[&h.probe("omp"), "--exit-rank", "0", "--code", "7"],
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    let o = h.run(
        &["-q", "-c", "2"],
        &["mpirun", "-np", "2", &h.probe("hybrid")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Sample every thread of job `id` every 20 ms for `window` from its first thread: each
/// thread's affinities in order.
fn sample(h: &Hpc, id: &str, window: Duration) -> BTreeMap<(u32, u32), (String, Vec<CpuSet>)> {
    let mut seen: BTreeMap<(u32, u32), (String, Vec<CpuSet>)> = BTreeMap::new();
    let mut start = None;
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let now = Instant::now();
        let tasks = h.job_threads(id);
        if start.is_none() && !tasks.is_empty() {
            start = Some(now);
        }
        for t in tasks {
            let e = seen
                .entry((t.pid, t.tid))
                .or_insert_with(|| (t.cmdline.clone(), Vec::new()));
            e.0 = t.cmdline;
            if e.1.last() != Some(&t.allowed) {
                e.1.push(t.allowed);
            }
        }
        match start {
            Some(s) if now.duration_since(s) >= window => return seen,
            None if now > give_up => panic!("job {id} never showed a thread"),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The threads of `samples` of the programs whose command line starts with `prog` that were
/// narrowed below the job's set (by their runtime or by pjw): Err naming one whose affinity
/// then widened; else how many there were.
fn never_widened(
    samples: &BTreeMap<(u32, u32), (String, Vec<CpuSet>)>,
    prog: &str,
    job: &CpuSet,
) -> Result<usize, String> {
    let mut narrowed = 0;
    for ((pid, tid), (cmd, history)) in samples.iter().filter(|(_, (c, _))| c.starts_with(prog)) {
        let Some(i) = history.iter().position(|a| a != job) else {
            continue;
        };
        narrowed += 1;
        let pin = history[i];
        if let Some(w) = history[i..].iter().find(|a| a.len() > pin.len()) {
            return Err(format!(
                "thread {tid} of {pid} ({cmd}) pinned to {pin} was widened to {w}: {history:?}"
            ));
        }
    }
    Ok(narrowed)
}

#[test]
fn with_bind_threads_a_runtimes_pins_never_widen() {
    require_root!();
    require!(Component::Mpi);
    let cpus = need_cpus!(2);
    // Passes every 250 ms: a dozen chances to widen a pin in the 3 s watched.
    let h = Hpc::start(
        &format!("cpus = \"{cpus}\"\n[job]\nbind_interval_ms = 250\n"),
        true,
    );
    let omp = h.probe("omp");
    let hybrid = h.probe("hybrid");
    // libgomp under the OMP_PROC_BIND=close that --bind threads sets pins its threads; the
    // second program opts out (its user's own setting wins), so the binder has threads of its
    // own to pin: proof that it ran and acted in this job. (pjw's own pins may be given back
    // and made again as its measure of a busy thread varies on a loaded machine; they are
    // not what this test is about.)
    let script = format!(
        "{omp} --busy 4 --tag pinned & OMP_PROC_BIND=false {omp} --busy 4 --tag free & wait"
    );
    let job = h.spawn(
        &["-q", "-c", "2", "--bind", "threads", "-j", "gomp"],
        &["sh", "-c", &script],
    );
    let samples = sample(&h, "gomp", Duration::from_secs(3));
    let o = job.wait_with_output().expect("job");
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    let job_set = Probe::parse(&out).first[0].pjw_cpus.expect("PJW_CPUS");
    // libgomp pinned both threads of the first program (the first before main, the other as
    // it made it), and nothing widened those pins while they ran...
    let pinned = format!("{omp} --busy 4 --tag pinned");
    let narrowed =
        never_widened(&samples, &pinned, &job_set).unwrap_or_else(|e| panic!("{e}\n{}", h.d.log()));
    assert_eq!(narrowed, 2, "libgomp's 2 threads: {samples:?}");
    // ... nor did pjw set their affinity at all.
    let log = h.d.log();
    let gomp: Vec<u32> = samples
        .iter()
        .filter(|(_, (c, _))| c.starts_with(&pinned))
        .map(|((_, tid), _)| *tid)
        .collect();
    assert_eq!(gomp.len(), 2, "{samples:?}");
    for t in &gomp {
        assert!(
            !log.contains(&format!("cgroup=job-gomp tid={t} ")),
            "pjw set the affinity of libgomp's thread {t}:\n{log}"
        );
    }
    let free_tids: Vec<u32> = samples
        .iter()
        .filter(|(_, (c, _))| c.contains("--tag free"))
        .map(|((_, tid), _)| *tid)
        .collect();
    assert!(
        free_tids
            .iter()
            .any(|t| log.contains(&format!("thread pinned cgroup=job-gomp tid={t} "))),
        "the binder pinned none of the free program's threads {free_tids:?}: {samples:?}\n{log}"
    );

    // Open MPI's per-rank binding, under the same binder.
    let job = h.spawn(
        &["-q", "-c", "2", "--bind", "threads", "-j", "ompi"],
        &[
            "mpirun", "-np", "2", &hybrid, "--busy", "4", "--tag", "rank",
        ],
    );
    let samples = sample(&h, "ompi", Duration::from_secs(3));
    let o = job.wait_with_output().expect("job");
    assert!(o.status.success(), "{}", text(&o));
    // Open MPI bound each rank to a CPU of its own before it ran (the binder's pins on
    // mpirun's threads would have been inherited by the ranks and left them unbound)...
    let out = stdout(&o);
    let bound = ranks_of(&Probe::parse(&out), &out);
    assert_eq!(bound.len(), 2, "{out}");
    assert!(
        bound.values().all(|s| s.len() == 1) && bound[&0] != bound[&1],
        "{out}"
    );
    // ... and that binding never widened.
    let ranks =
        never_widened(&samples, &hybrid, &job_set).unwrap_or_else(|e| panic!("{e}\n{}", h.d.log()));
    assert!(ranks >= 2, "Open MPI bound its 2 ranks: {samples:?}");
}

#[test]
fn python_and_openmp_agree_on_one_cpu() {
    require_root!();
    require!(Component::Python3);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), false);
    // Python 3.13 reads PYTHON_CPU_COUNT for os.cpu_count(); Debian 12's 3.11 does not, so the
    // variable is checked, and the affinity both read.
    let py = "import os, sys; print('python', os.environ.get('PYTHON_CPU_COUNT'), \
              len(os.sched_getaffinity(0)), os.cpu_count(), sys.version_info >= (3, 13))";
    let script = format!("python3 -c \"{py}\"; {}", h.probe("omp"));
    let o = h.run(&["-q", "-c", "1"], &["sh", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("python "))
        .unwrap_or_else(|| panic!("{out}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        (f[1], f[2]),
        ("1", "1"),
        "PYTHON_CPU_COUNT, affinity: {line}"
    );
    if f[4] == "True" {
        assert_eq!(f[3], "1", "os.cpu_count() on 3.13+: {line}");
    }
    let p = Probe::parse(&out);
    assert_eq!(p.threads.len(), 1, "{out}");
    assert_eq!((p.threads[0].of, p.threads[0].procs), (1, 1), "{out}");
}

/// `hwloc-ps` of process `pid` (threads too): each task's set, as `-c` prints it (a hex mask),
/// and with `last` where it last ran (`-e`).
fn hwloc_ps(pid: u32, last: bool) -> Vec<(u32, CpuSet)> {
    let mut cmd = std::process::Command::new("hwloc-ps");
    cmd.args(["-a", "-t", "-c", "--pid", &pid.to_string()]);
    if last {
        cmd.arg("-e");
    }
    let o = cmd.output().expect("hwloc-ps");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let id = f.next()?.trim().parse().ok()?;
            Some((id, hex_mask(f.next()?)?))
        })
        .collect()
}

/// hwloc's hex cpuset: 32-bit words, most significant first, `0x0000000f,0xffffffff`.
fn hex_mask(text: &str) -> Option<CpuSet> {
    let words: Vec<&str> = text.trim().split(',').collect();
    let mut set = CpuSet::new();
    for (i, w) in words.iter().rev().enumerate() {
        let v = u32::from_str_radix(w.trim().trim_start_matches("0x"), 16).ok()?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                set.insert(i as u32 * 32 + bit);
            }
        }
    }
    Some(set)
}

#[test]
fn hwloc_masks_read_as_cpu_sets() {
    let s = |t: &str| CpuSet::parse_list(t).unwrap();
    assert_eq!(hex_mask("0x00000002"), Some(s("1")));
    assert_eq!(hex_mask("0x00000001,0x80000000"), Some(s("31-32")));
    assert_eq!(hex_mask("0xzz"), None);
}

/// Watch job `id` for `window`: every task of its processes, by hwloc-ps, bound within the
/// job's set and last run on it. The number of tasks seen.
fn watch_with_hwloc(h: &Hpc, id: &str, window: Duration) -> Result<usize, String> {
    let mut tids = std::collections::BTreeSet::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let Some(job) = h.job_cpus(id) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let pids: std::collections::BTreeSet<u32> =
            h.job_threads(id).iter().map(|t| t.pid).collect();
        for pid in pids {
            for last in [false, true] {
                for (tid, set) in hwloc_ps(pid, last) {
                    if !set.is_subset(&job) {
                        let what = if last { "last ran on" } else { "bound to" };
                        return Err(format!("task {tid} of {pid} {what} {set}, job {job}"));
                    }
                    tids.insert(tid);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(tids.len())
}

#[test]
fn stress_ng_workers_stay_in_the_jobs_cpus() {
    require_root!();
    require!(Component::StressNg, Component::Hwloc);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), false);
    // 3 CPU workers in a 1-CPU job: stress-ng sizes nothing from the node here, but every
    // worker it forks must stay on the job's one CPU.
    let job = h.spawn(
        &["-q", "-c", "1", "-j", "stress"],
        &["stress-ng", "--cpu", "3", "--timeout", "3s", "--quiet"],
    );
    let seen = watch_with_hwloc(&h, "stress", Duration::from_secs(2));
    let o = job.wait_with_output().expect("job");
    let seen = seen.unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(seen >= 4, "stress-ng and its 3 workers: {seen} tasks seen");
}

#[test]
fn sysbench_threads_stay_in_the_jobs_cpus() {
    require_root!();
    require!(Component::Sysbench, Component::Hwloc);
    let cpus = need_cpus!(2);
    let h = Hpc::start(&format!("cpus = \"{cpus}\"\n"), false);
    let job = h.spawn(
        &["-q", "-c", "1", "-j", "sysbench"],
        &["sysbench", "cpu", "--threads=3", "--time=3", "run"],
    );
    let seen = watch_with_hwloc(&h, "sysbench", Duration::from_secs(2));
    let o = job.wait_with_output().expect("job");
    let seen = seen.unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(seen >= 4, "sysbench and its 3 workers: {seen} tasks seen");
    assert!(
        stdout(&o).contains("total number of events"),
        "{}",
        text(&o)
    );
}

/// Each rank's CPUs, from its first line (before MPI_Init): rank → set.
fn ranks_of(p: &Probe, out: &str) -> BTreeMap<u32, CpuSet> {
    p.first
        .iter()
        .map(|f| {
            (
                f.rank.unwrap_or_else(|| panic!("no rank:\n{out}")),
                f.allowed,
            )
        })
        .collect()
}
