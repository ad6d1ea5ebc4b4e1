//! Steps and logins on the engine, without root: a fake cgroup v2 tree and a fake `/proc` say
//! which cgroup each caller is in. A `run` from inside a job is a step of it (its CPUs, never a
//! job of its own, listed in `status`, gone when its process exits, recorded at the job's
//! end); a login joins its user's newest job; who may ask for either.

use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, LoginPhase, LoginRequest, Response, RunRequest};
use tokio::sync::oneshot;

use super::{Cred, Event, Who};
use crate::test_support::{client, run_request, who, Live, TestEngine};

const UID: u32 = 1000;

fn started(r: &Response) -> (String, CpuSet, Vec<(String, String)>) {
    match r {
        Response::Started { job, cpus, env, .. } => (job.clone(), *cpus, env.clone()),
        other => panic!("not started: {other:?}"),
    }
}

fn error(r: &Response) -> (ErrorCode, String) {
    match r {
        Response::Error { code, message } => (*code, message.clone()),
        other => panic!("not an error: {other:?}"),
    }
}

fn step_of(env: &[(String, String)]) -> Option<&str> {
    env.iter()
        .find(|(k, _)| k == "PJW_STEP_ID")
        .map(|(_, v)| v.as_str())
}

/// A job `a` of `cpus` CPUs whose main process is `pid`.
async fn job_a(t: &mut TestEngine, pid: u32, cpus: u32) {
    let (r, _rx) = t.submit(1, pid, UID, run_request("a", cpus)).await;
    assert_eq!(started(&r).0, "a");
}

/// `pjw run -c N` from pid `pid` (uid `uid`), inside the cgroup `cg`.
async fn run_in(t: &mut TestEngine, pid: u32, uid: u32, cg: &str, req: RunRequest) -> Response {
    t.fake_process(pid, uid);
    t.in_cgroup(pid, cg);
    t.submit(pid as u64, pid, uid, req).await.0
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_from_inside_a_job_is_a_step_on_its_cpus_never_a_job() {
    let mut t = TestEngine::new();
    let p = Live::new(5);
    job_a(&mut t, p.pid(0), 4).await;
    let jobs_before = t.engine.jobs.len();
    let a = t.seq_of("a");
    let job_cpus = t.engine.jobs[&a].cpus;

    // Two steps of 2 run side by side; a third of 1 shares one of their CPUs; none is a job.
    let mut held = Vec::new();
    for (pid, k, want) in [(p.pid(1), 2, "0"), (p.pid(2), 2, "1"), (p.pid(3), 1, "2")] {
        let mut req = run_request("ignored", k);
        req.job_id = None;
        let r = run_in(&mut t, pid, UID, "/pjw/job-a", req).await;
        let (job, cpus, env) = started(&r);
        assert_eq!(job, "a", "a step answers with its job");
        assert_eq!(step_of(&env), Some(want), "{env:?}");
        assert!(
            cpus.is_subset(&job_cpus) && cpus.len() == k as usize,
            "{cpus}"
        );
        held.push(cpus);
    }
    assert!(!held[0].intersects(&held[1]), "{held:?}");
    assert_eq!(t.engine.jobs.len(), jobs_before, "no new job");
    let st = t.engine.status();
    assert_eq!(st.jobs.len(), 1);
    let steps = &st.jobs[0].steps;
    assert_eq!(
        steps.iter().map(|s| (s.step, s.pid)).collect::<Vec<_>>(),
        vec![(0, p.pid(1)), (1, p.pid(2)), (2, p.pid(3))]
    );
    assert_eq!(steps[0].name, "sleep");

    // More CPUs than the job has: refused, saying so; still no new job.
    let r = run_in(&mut t, 204, UID, "/pjw/job-a", run_request("x", 5)).await;
    let (code, msg) = error(&r);
    assert_eq!(code, ErrorCode::Invalid);
    assert!(
        msg.contains("inside job a") && msg.contains("at most 4"),
        "{msg}"
    );
    // A time limit on a step: refused, not silently dropped.
    let mut req = run_request("t", 1);
    req.time_limit_s = Some(60);
    let (code, msg) = error(&run_in(&mut t, 205, UID, "/pjw/job-a", req).await);
    assert_eq!(code, ErrorCode::Invalid);
    assert!(
        msg.contains("inside job a") && msg.contains("--time is for jobs, not steps"),
        "{msg}"
    );
    // Tasks that do not divide the step's CPUs: refused as a job's are.
    let mut req = run_request("t", 3);
    req.tasks = Some(2);
    let (code, msg) = error(&run_in(&mut t, 206, UID, "/pjw/job-a", req).await);
    assert_eq!(code, ErrorCode::Invalid);
    assert!(
        msg.contains("inside job a") && msg.contains("--ntasks 2 does not divide"),
        "{msg}"
    );
    // A step runs as its caller: naming another user is refused.
    let mut req = run_request("y", 1);
    req.user = Some("bob".into());
    let r = run_in(&mut t, 205, UID, "/pjw/job-a", req).await;
    assert_eq!(
        error(&r).0,
        ErrorCode::Invalid,
        "an unknown --user is refused"
    );
    // Another user's process inside the job (a setuid program) is a step too: it stays in.
    let r = run_in(&mut t, p.pid(4), 1001, "/pjw/job-a", run_request("w", 1)).await;
    assert_eq!(step_of(&started(&r).2), Some("3"));
    t.engine.handle(Event::StepExited { seq: a, step: 3 });
    assert_eq!(t.engine.jobs.len(), jobs_before);

    // A step's process exits: it is gone from status, and recorded when the job ends.
    t.engine.handle(Event::StepExited { seq: a, step: 1 });
    let steps: Vec<u32> = t.engine.status().jobs[0]
        .steps
        .iter()
        .map(|s| s.step)
        .collect();
    assert_eq!(steps, vec![0, 2]);
    assert_eq!(t.engine.jobs[&a].steps.ended.len(), 2);

    // The job's own main process, told Started by this daemon, runs a step too.
    let r = run_in(&mut t, p.pid(0), UID, "/pjw/job-a", run_request("z", 4)).await;
    let (job, cpus, env) = started(&r);
    assert_eq!(
        (job.as_str(), cpus, step_of(&env)),
        ("a", job_cpus, Some("4"))
    );

    // The job ends: its running steps end with it, and all five go to the store.
    t.engine.finish(a, crate::profile::EndReason::Exited);
    let recorded = t.store.state().steps.get(&a).cloned().unwrap_or_default();
    let mut numbers: Vec<u32> = recorded.iter().map(|s| s.step).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, vec![0, 1, 2, 3, 4], "{recorded:?}");
    assert!(recorded.iter().all(|s| s.ended_ms.is_some()));
    assert_eq!(t.store.calls_to("record_steps").len(), 1, "one transaction");

    // A step killed with its job whose exit event comes after the job's record (a slow
    // machine): its status is written over its row when it arrives.
    assert_eq!(
        recorded.iter().find(|s| s.step == 2).unwrap().exit_status,
        None
    );
    let killed = proc_connector::ProcEvent::Exit {
        cpu: 0,
        seq: 0,
        pid: p.pid(3),
        tgid: p.pid(3),
        exit_code: 9,
        exit_signal: 17,
        parent_pid: 1,
        parent_tgid: 1,
        timestamp_ns: 0,
    };
    t.engine
        .handle(Event::Proc(crate::procs::ProcMsg::Events(vec![killed])));
    let recorded = t.store.state().steps.get(&a).cloned().unwrap_or_default();
    let late: Vec<Option<i32>> = recorded
        .iter()
        .filter(|s| s.step == 2)
        .map(|s| s.exit_status)
        .collect();
    assert_eq!(late.last(), Some(&Some(128 + 9)), "{recorded:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_caller_whose_cgroup_cannot_be_told_or_is_an_unknown_job_gets_no_job() {
    let mut t = TestEngine::new();
    let p = Live::new(2);
    job_a(&mut t, p.pid(0), 2).await;
    // A job cgroup of this parent that the daemon does not run.
    let r = run_in(&mut t, 301, UID, "/pjw/job-ghost", run_request("g", 1)).await;
    let (code, msg) = error(&r);
    assert_eq!(code, ErrorCode::Denied);
    assert!(msg.contains("job-ghost"), "{msg}");
    // An unreadable /proc/PID/cgroup: an error, never a job.
    t.fake_process(302, UID);
    let cg = t.proc_root().join("302/cgroup");
    std::fs::remove_file(&cg).unwrap();
    std::fs::create_dir(&cg).unwrap();
    let (reply, mut rx) = tokio::sync::mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 9,
        cred: Cred {
            pid: 302,
            uid: UID,
            gid: UID,
        },
        who: crate::test_support::who(),
        req: run_request("h", 1),
        reply,
    });
    let (code, msg) = error(&rx.recv().await.unwrap());
    assert_eq!(code, ErrorCode::Internal);
    assert!(msg.contains("cgroup"), "{msg}");
    assert!(t.engine.seq_of("g").is_none() && t.engine.seq_of("h").is_none());
    // Outside every job (another cgroup of the machine): a job of its own, as always.
    let r = run_in(&mut t, p.pid(1), UID, "/user.slice", run_request("o", 1)).await;
    assert_eq!(started(&r).0, "o");
    assert!(step_of(&started(&r).2).is_none());
}

/// A login from process `child` (pam_exec's `pjw pam-adopt`) whose parent is `session`.
async fn login(
    t: &mut TestEngine,
    uid: u32,
    user: Option<u32>,
    phase: LoginPhase,
    child: u32,
) -> Response {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Login {
        cred: Cred {
            pid: child,
            uid,
            gid: uid,
        },
        who: Who {
            name: "root".into(),
            admin: false,
            named: user.map(|u| (u, u)),
        },
        req: LoginRequest {
            user: "someone".into(),
            phase,
        },
        reply,
    });
    rx.await.expect("an answer")
}

fn proc_stat(t: &TestEngine, pid: u32, ppid: u32, start: u64) {
    let d = t.proc_root().join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("stat"),
        format!("{pid} (x) S {ppid} 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
    )
    .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_login_joins_its_users_newest_job_and_only_root_asks() {
    let mut t = TestEngine::new();
    let p = Live::new(3);
    job_a(&mut t, p.pid(0), 2).await;
    // b starts after a (the clock moves on): it is alice's newest.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (r, _b) = t.submit(2, p.pid(1), UID, run_request("b", 1)).await;
    started(&r);
    let (r, _c) = t.submit(3, p.pid(2), 1001, run_request("c", 1)).await;
    started(&r);
    // sshd's privileged process 500 and its pam_exec child 501.
    t.fake_process(500, 0);
    proc_stat(&t, 500, 1, 1000);
    t.fake_process(501, 0);
    proc_stat(&t, 501, 500, 1001);
    // The pids in a job's cgroup, as numbers: a substring test would take a live pid like
    // 15003 for 500 (a flaky failure once in six runs).
    let procs_of = |t: &TestEngine, job: &str| -> Vec<u32> {
        t.engine
            .driver
            .procs(&format!("job-{job}"))
            .unwrap_or_default()
    };

    // A user's process asking is refused, and nothing moves.
    let r = login(&mut t, UID, Some(UID), LoginPhase::Session, 501).await;
    assert_eq!(error(&r).0, ErrorCode::Denied);
    assert!(!procs_of(&t, "b").contains(&500));
    // The account phase moves nothing; the session phase moves the parent into the newest job.
    let r = login(&mut t, 0, Some(UID), LoginPhase::Account, 501).await;
    assert!(
        matches!(r, Response::Done { ref message } if message.contains("job b")),
        "{r:?}"
    );
    assert!(!procs_of(&t, "b").contains(&500));
    let r = login(&mut t, 0, Some(UID), LoginPhase::Session, 501).await;
    assert!(
        matches!(r, Response::Done { ref message } if message.contains("job b")),
        "{r:?}"
    );
    assert!(procs_of(&t, "b").contains(&500), "{:?}", procs_of(&t, "b"));
    assert!(!procs_of(&t, "a").contains(&500) && !procs_of(&t, "c").contains(&500));
    // Root is never moved nor refused.
    let r = login(&mut t, 0, Some(0), LoginPhase::Session, 501).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");

    // A user without a job: outside by default; refused where the node says so.
    let r = login(&mut t, 0, Some(1002), LoginPhase::Account, 501).await;
    assert!(
        matches!(r, Response::Done { ref message } if message.contains("outside")),
        "{r:?}"
    );
    let mut t2 = TestEngine::with_config("[adopt]\nlogin_without_job = \"refuse\"\n");
    t2.fake_process(501, 0);
    let r = login(&mut t2, 0, Some(1002), LoginPhase::Account, 501).await;
    let (code, msg) = error(&r);
    assert_eq!(code, ErrorCode::Denied);
    assert!(msg.contains("no running job"), "{msg}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_already_inside_a_job_never_leaves_it() {
    let mut t = TestEngine::new();
    let p = Live::new(2);
    job_a(&mut t, p.pid(0), 2).await;
    let (r, _c) = t.submit(3, p.pid(1), 1001, run_request("c", 1)).await;
    started(&r);
    // `su - bob` from inside alice's job: its process is in job a, bob's login must not move it
    // into bob's job c (that would let it leave a).
    t.fake_process(600, 0);
    proc_stat(&t, 600, 1, 1000);
    t.in_cgroup(600, "/pjw/job-a");
    t.fake_process(601, 0);
    proc_stat(&t, 601, 600, 1001);
    let r = login(&mut t, 0, Some(1001), LoginPhase::Session, 601).await;
    let (code, msg) = error(&r);
    assert_eq!(code, ErrorCode::Denied);
    assert!(msg.contains("inside job a"), "{msg}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_step_of_a_pinned_caller_stays_in_its_cpus_and_a_rerun_replaces_its_step() {
    let mut t = TestEngine::new();
    let p = Live::new(3);
    job_a(&mut t, p.pid(0), 4).await;
    // A caller pinned to CPUs 2-3 (a step's child, an MPI rank): its step is one of them.
    let pinned = p.pid(1);
    t.fake_process(pinned, UID);
    let status = t.proc_root().join(format!("{pinned}/status"));
    let text = std::fs::read_to_string(&status).unwrap();
    std::fs::write(
        &status,
        text.replace("Cpus_allowed_list:\t0-3", "Cpus_allowed_list:\t2-3"),
    )
    .unwrap();
    t.in_cgroup(pinned, "/pjw/job-a");
    let r = submit_as_is(&mut t, pinned, run_request("s", 1)).await;
    let (_, cpus, _) = started(&r);
    assert!(
        cpus.is_subset(&CpuSet::parse_list("2-3").unwrap()),
        "{cpus}"
    );
    // Asking for more than its own CPUs: chosen among the job's.
    let r = submit_as_is(&mut t, pinned, run_request("s", 3)).await;
    let (_, cpus, env) = started(&r);
    assert_eq!(cpus.len(), 3);
    assert_eq!(step_of(&env), Some("1"));
    // That was the same process running `pjw run` again: its first step ended.
    let a = t.seq_of("a");
    let live: Vec<u32> = t.engine.jobs[&a].steps.live.iter().map(|s| s.n).collect();
    assert_eq!(live, vec![1]);
    assert_eq!(t.engine.jobs[&a].steps.ended.len(), 1);
}

/// A run from `pid` of the fake `/proc` as it is (its status and cgroup untouched).
async fn submit_as_is(t: &mut TestEngine, pid: u32, req: RunRequest) -> Response {
    let (reply, mut rx) = tokio::sync::mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: pid as u64,
        cred: Cred {
            pid,
            uid: UID,
            gid: UID,
        },
        who: crate::test_support::who(),
        req,
        reply,
    });
    rx.recv().await.expect("an answer")
}

/// Round-4 review L2, as the attack: user `other` connected from a pid that a process of job
/// `a` (its owner's) holds by the time the request is read (a pid reused between connect and
/// the first request): refused, never a step of `a`, which keeps its step slots.
#[tokio::test(flavor = "current_thread")]
async fn a_run_from_a_pid_another_users_job_now_holds_is_never_its_step() {
    let mut t = TestEngine::new();
    let p = Live::new(3);
    job_a(&mut t, p.pid(0), 2).await;
    let mut req = run_request("ignored", 1);
    req.job_id = None;
    t.in_cgroup(p.pid(1), "/pjw/job-a");
    let (reply, mut rx) = tokio::sync::mpsc::unbounded_channel();
    t.fake_process(p.pid(1), UID);
    t.engine.handle(Event::Submit {
        conn: 7,
        cred: Cred {
            pid: p.pid(1),
            ..client(UID + 1)
        },
        who: who(),
        req: req.clone(),
        reply,
    });
    let r = rx.recv().await.expect("an answer");
    let (code, msg) = error(&r);
    assert_eq!(code, ErrorCode::Denied);
    assert!(msg.contains("is not the caller's"), "{msg}");
    assert!(t.engine.status().jobs[0].steps.is_empty());
    // The owner's own run from a process of the job is a step: the check ran and let it by.
    let r = run_in(&mut t, p.pid(2), UID, "/pjw/job-a", req).await;
    assert_eq!(started(&r).0, "a");
    assert_eq!(t.engine.status().jobs[0].steps.len(), 1);
}

/// `pjw run --user bob --job-id a -c 2` from root (a job starter) at pid `pid` on connection
/// `conn`: the daemon's first answer.
async fn root_runs_a_for_bob(t: &mut TestEngine, conn: u64, pid: u32) -> Response {
    let mut req = run_request("a", 2);
    req.user = Some("bob".into());
    let (reply, mut rx) = tokio::sync::mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn,
        cred: Cred { pid, ..client(0) },
        who: Who {
            name: "root".into(),
            admin: false,
            named: Some((UID, UID)),
        },
        req,
        reply,
    });
    rx.recv().await.expect("an answer")
}

/// Root's starter starts bob's job `a` at pid `pid`, which then sits in its cgroup.
async fn starters_job_a(t: &mut TestEngine, pid: u32) {
    t.fake_process(pid, 0);
    t.fake_stat(pid);
    assert_eq!(started(&root_runs_a_for_bob(t, 1, pid).await).0, "a");
    t.in_cgroup(pid, "/pjw/job-a");
}

/// Review F1, as the attack: root's job starter started bob's job `a` (`pjw run --user bob`),
/// whose main process is now bob's (the starter's `setuid`); the daemon restarts, so it has
/// told that process nothing. The process runs `pjw run` again from the same pid (`exec pjw
/// run -c 1 -- payload`): it is a step of `a`, never a job of its own (which would move it out
/// of `a`'s cgroups, cpuset and memory limit and past the manager's end). The starter's own
/// retry as root — a client that lost the crashed daemon — is told its job again.
#[tokio::test(flavor = "current_thread")]
async fn after_a_restart_a_starters_main_process_cannot_leave_its_job_through_pjw_run() {
    let mut t = TestEngine::new();
    let p = Live::new(1);
    starters_job_a(&mut t, p.pid(0)).await;
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    assert!(!t.engine.jobs[&t.seq_of("a")].steps.main_told);

    let mut req = run_request("b", 1);
    req.job_id = Some("b".into());
    let r = run_in(&mut t, p.pid(0), UID, "/pjw/job-a", req).await;
    let (job, cpus, env) = started(&r);
    assert_eq!(job, "a", "answered as a step of its own job: {r:?}");
    assert_eq!(step_of(&env), Some("0"), "{env:?}");
    assert_eq!(cpus.len(), 1);
    assert_eq!(t.engine.jobs.len(), 1, "no job of its own");
    assert!(t.engine.jobs.values().all(|j| j.id.as_str() != "b"));

    // The starter asking again as root after a restart: its job, told again (not a step).
    let mut t = TestEngine::new();
    let p = Live::new(1);
    starters_job_a(&mut t, p.pid(0)).await;
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    let r = root_runs_a_for_bob(&mut t, 2, p.pid(0)).await;
    let (job, cpus, env) = started(&r);
    assert_eq!((job.as_str(), cpus.len(), step_of(&env)), ("a", 2, None));
    assert!(t.engine.jobs[&t.seq_of("a")].steps.main_told);
}

/// Review F2, as the attack: one user starts the most steps each of many jobs allows (64 + 8
/// per CPU of the job), thousands in all, until every `status` answer — other users', root's,
/// the Slurm task prolog's — is too big for a frame. A user's running steps over all the
/// node's jobs are bounded as one job's are on a job of every CPU; another user's are not
/// touched by it.
#[tokio::test(flavor = "current_thread")]
async fn a_users_steps_over_all_its_jobs_are_bounded_on_the_node() {
    let mut t = TestEngine::new();
    let p = Live::new(4);
    job_a(&mut t, p.pid(0), 1).await;
    let (r, _rx) = t.submit(2, p.pid(1), UID, run_request("b", 1)).await;
    assert_eq!(started(&r).0, "b");
    let limit = 64 + 8 * t.engine.pool.len();
    let per_job = 64 + 8;
    assert!(limit > per_job && limit < 2 * per_job, "{limit}");
    // Job a's steps at its own limit; job b's one short of the user's.
    let fill = |t: &mut TestEngine, id: &str, n: usize| {
        let seq = t.seq_of(id);
        let j = t.engine.jobs.get_mut(&seq).expect("job");
        for k in 0..n {
            j.steps.live.push(super::steps::Step {
                n: k as u32,
                pid: 900_000 + k as u32,
                uid: UID,
                name: "s".into(),
                cpus: j.cpus,
                started: std::time::Instant::now(),
                started_ms: 0,
                ended_ms: None,
                exit_status: None,
            });
        }
        j.steps.next = n as u32;
    };
    fill(&mut t, "a", per_job);
    fill(&mut t, "b", limit - per_job - 1);
    let mut req = run_request("ignored", 1);
    req.job_id = None;
    // The last one the user may have: b has room, the user has one.
    let r = run_in(&mut t, p.pid(2), UID, "/pjw/job-b", req.clone()).await;
    assert_eq!(started(&r).0, "b");
    // One more: b still has room, the user has none.
    let (code, msg) = error(&run_in(&mut t, p.pid(3), UID, "/pjw/job-b", req.clone()).await);
    assert_eq!(code, ErrorCode::Denied);
    assert!(
        msg.contains("the limit per user") && msg.contains(&format!("{limit} steps")),
        "{msg}"
    );
    // Another user's process in that job still gets its step: the bound is the user's.
    let r = run_in(&mut t, p.pid(3), UID + 1, "/pjw/job-b", req).await;
    assert_eq!(started(&r).0, "b");
}
