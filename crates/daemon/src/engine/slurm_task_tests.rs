//! The SPANK join in the engine, without root: a fake `/proc` in which process 500 runs the
//! `slurmstepd` executable (its `exe` a link to it) as root with argv `slurmstepd: [42.STEP]`
//! and 501 is its child. What the task is given: the job's CPUs and, per step, its thread
//! variables — the batch script the job's CPUs, an srun task its CPUs per task, several tasks
//! no OpenMP places, the user's own variables left alone.

use pjw_core::thread_bind::BindMode;
use pjw_proto::{RegisterRequest, Response, SlurmTaskRequest};
use tokio::sync::{mpsc, oneshot};

use super::{Cred, Event, Who};
use crate::test_support::TestEngine;

const STEPD: u32 = 500;
const TASK: u32 = 501;

/// A fake process: `stat` (parent, start time), `status` (uid), `cgroup`, and optionally its
/// executable and argv.
fn process(t: &TestEngine, pid: u32, ppid: u32, start: u64, uid: u32, exe: Option<(&str, &str)>) {
    let dir = t.proc_root().join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stat"),
        format!("{pid} (x) S {ppid} 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
    )
    .unwrap();
    std::fs::write(
        dir.join("status"),
        format!("Name:\tx\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\nThreads:\t1\nCpus_allowed_list:\t0-3\n"),
    )
    .unwrap();
    std::fs::write(dir.join("cgroup"), "0::/\n").unwrap();
    if let Some((exe, argv0)) = exe {
        let _ = std::fs::remove_file(dir.join("exe"));
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::fs::write(dir.join("cmdline"), format!("{argv0}\0")).unwrap();
    }
}

/// Job slurm:42 of uid 1000 on `cpus` CPUs, registered and held; its key.
fn job42(t: &mut TestEngine, cpus: u32) -> i64 {
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn: 1,
        cred: Cred {
            pid: 1,
            uid: 0,
            gid: 0,
        },
        who: Who {
            name: "root".into(),
            admin: false,
            named: Some((1000, 1000)),
        },
        req: RegisterRequest {
            job: "42".into(),
            wlm: "slurm".into(),
            user: "alice".into(),
            cpus,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply,
    });
    assert!(matches!(rx.try_recv(), Ok(Response::Started { .. })));
    t.seq_of("slurm:42")
}

/// The task of `step` asks to join.
fn join(t: &mut TestEngine, step: &str, req: SlurmTaskRequest) -> Response {
    process(
        t,
        STEPD,
        1,
        100,
        0,
        Some(("/usr/sbin/slurmstepd", &format!("slurmstepd: [42.{step}]"))),
    );
    process(t, TASK, STEPD, 200, 0, None);
    let (reply, mut rx) = oneshot::channel();
    t.engine.handle(Event::SlurmTask {
        cred: Cred {
            pid: TASK,
            uid: 0,
            gid: 0,
        },
        req,
        reply,
    });
    rx.try_recv().expect("an answer")
}

fn req(cpus_per_task: u32, tasks: u32, set: &[&str]) -> SlurmTaskRequest {
    SlurmTaskRequest {
        uid: 1000,
        cpus_per_task: Some(cpus_per_task),
        tasks: Some(tasks),
        job_cpus_per_task: None,
        job_tasks: None,
        set: set.iter().map(|s| s.to_string()).collect(),
    }
}

fn defaults(r: &Response) -> Vec<(String, String)> {
    match r {
        Response::Started { env_defaults, .. } => env_defaults.clone(),
        other => panic!("not started: {other:?}"),
    }
}

fn value<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_gets_its_jobs_cpus_and_thread_variables_for_its_step() {
    let mut t = TestEngine::new();
    let seq = job42(&mut t, 2);
    t.engine.jobs.get_mut(&seq).unwrap().bind = Some(BindMode::Threads);

    // The job script: the job's two CPUs, and its places.
    let r = join(&mut t, "batch", req(1, 1, &[]));
    let Response::Started { job, cpus, .. } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(job, "slurm:42");
    assert_eq!(cpus.len(), 2);
    let env = defaults(&r);
    assert_eq!(value(&env, "OMP_NUM_THREADS"), Some("2"), "{env:?}");
    assert_eq!(value(&env, "OMP_PLACES"), Some("threads"), "{env:?}");
    assert!(
        t.engine.procs.job_of(TASK) == Some(seq),
        "tracked as the job's"
    );

    // A script of two 1-CPU tasks (sbatch -n2 -c1): its counts are a task's, and no places,
    // since the ranks its mpirun starts inherit them (2 threads in each of 2 ranks would put 4
    // threads on the job's 2 CPUs).
    let mut two = req(2, 1, &[]);
    two.job_cpus_per_task = Some(1);
    two.job_tasks = Some(2);
    let env = defaults(&join(&mut t, "batch", two));
    assert_eq!(value(&env, "OMP_NUM_THREADS"), Some("1"), "{env:?}");
    assert_eq!(value(&env, "OMP_PLACES"), None, "{env:?}");

    // An srun -c1 task, alone on the node: one thread, placed.
    let env = defaults(&join(&mut t, "0", req(1, 1, &[])));
    assert_eq!(value(&env, "OMP_NUM_THREADS"), Some("1"), "{env:?}");
    assert_eq!(value(&env, "OMP_PLACES"), Some("threads"), "{env:?}");

    // Two tasks of a step share the job's set: one thread each, no places.
    let env = defaults(&join(&mut t, "1", req(1, 2, &[])));
    assert_eq!(value(&env, "OMP_NUM_THREADS"), Some("1"), "{env:?}");
    assert_eq!(value(&env, "OMP_PLACES"), None, "{env:?}");
    assert_eq!(value(&env, "OMP_PROC_BIND"), None, "{env:?}");

    // The user's own OMP_NUM_THREADS: no default for it, nor for MKL's, which falls back on
    // it (decisions.md (bd)); a count no runtime reads in its place is still given.
    let env = defaults(&join(&mut t, "2", req(2, 1, &["HOME", "OMP_NUM_THREADS"])));
    assert_eq!(value(&env, "OMP_NUM_THREADS"), None, "{env:?}");
    assert_eq!(value(&env, "MKL_NUM_THREADS"), None, "{env:?}");
    assert_eq!(value(&env, "PYTHON_CPU_COUNT"), Some("2"), "{env:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_of_another_user_or_below_a_forged_step_daemon_is_refused() {
    let mut t = TestEngine::new();
    job42(&mut t, 1);
    let mut r = req(1, 1, &[]);
    r.uid = 1001;
    let a = join(&mut t, "0", r);
    assert!(
        matches!(&a, Response::Error { message, .. } if message.contains("belongs to uid 1000")),
        "{a:?}"
    );
    assert_eq!(t.engine.procs.job_of(TASK), None);
    // The step daemon's executable is not slurmstepd (argv alone proves nothing).
    process(
        &t,
        STEPD,
        1,
        100,
        0,
        Some(("/usr/bin/bash", "slurmstepd: [42.0]")),
    );
    let (reply, mut rx) = oneshot::channel();
    t.engine.handle(Event::SlurmTask {
        cred: Cred {
            pid: TASK,
            uid: 0,
            gid: 0,
        },
        req: req(1, 1, &[]),
        reply,
    });
    let a = rx.try_recv().unwrap();
    assert!(
        matches!(&a, Response::Error { message, .. } if message.contains("not a root slurmstepd")),
        "{a:?}"
    );
}
