//! Table tests of the engine without root: a fake cgroup v2 tree and a recording fake store.
//! Events in (submit, main exited, restart with a given store and cgroup state), cgroup state,
//! stored rows and replies out. The recovery matrix: stored state × cgroup populated × main
//! process alive, and stored role × cgroup populated × main process alive.

use pjw_cgroup::JobLimits;
use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{Placement, Response, RunRequest};
use pjw_store::{JobRecord, StoredRole as Role, StoredState};
use tokio::sync::mpsc;

use super::{cgroup_name, Cred, Event, Who};
use crate::store_port::StoreWriter;
use crate::test_support::{run_request, who, TestEngine};

/// A pid no process has (above the kernel's pid_max).
const DEAD_PID: u32 = 4_999_999;

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).expect("cpu list")
}

/// A stored row of job `id` of user 1000 with main process `pid`: 2 CPUs, on 0-1 (node 0)
/// once started. Shared by the engine's recovery tests.
pub(super) fn record(id: &str, state: StoredState, pid: u32) -> JobRecord {
    let started = state != StoredState::Queued;
    JobRecord {
        seq: 0,
        job_id: id.into(),
        name: "t".into(),
        uid: 1000,
        gid: 1000,
        user: "user1000".into(),
        ncpus: 2,
        cpus: if started { cpus("0-1") } else { CpuSet::new() },
        mems: if started { cpus("0") } else { CpuSet::new() },
        mem_limit: None,
        pid: Some(pid),
        pid_start: None,
        cgroup: format!("job-{id}"),
        argv: vec!["sleep".into()],
        state,
        submitted_ms: 1,
        started_ms: started.then_some(2),
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    }
}

/// What a restart finds of a started job `rec`: its cgroups on its CPUs, holding process
/// `pid` when given.
pub(super) fn job_cgroup(t: &TestEngine, rec: &JobRecord, pid: Option<u32>) {
    let limits = JobLimits {
        cpus: rec.cpus,
        mems: rec.mems,
        memory_max: None,
        pids_max: None,
        swap_max: None,
        io: Default::default(),
    };
    t.engine
        .driver
        .create_job(&rec.cgroup, &limits)
        .expect("cgroup");
    if let Some(pid) = pid {
        t.engine
            .driver
            .add_process(&rec.cgroup, pid)
            .expect("process");
    }
}

/// What recovery should make of a job.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    /// Kept in the queue, waiting for its client to reconnect.
    Queued,
    /// Kept running on its CPUs, its row `running`.
    Running,
    /// Ended, with this reason, its cgroup gone.
    Ended(&'static str),
}

#[tokio::test(flavor = "current_thread")]
async fn recovery_matrix() {
    use StoredState::{Queued, Running, Starting};
    // (stored state, cgroup populated, main process alive, expected)
    let table = [
        (Queued, false, true, Want::Queued),
        (Queued, false, false, Want::Ended("client left the queue")),
        (Starting, true, true, Want::Running),
        (Starting, false, true, Want::Ended("start interrupted")),
        (Starting, false, false, Want::Ended("start interrupted")),
        // Main gone, leftovers running: killed (the fake tree empties at once), then ended.
        (Starting, true, false, Want::Ended("exited")),
        (Running, true, true, Want::Running),
        (Running, true, false, Want::Ended("exited")),
        (
            Running,
            false,
            true,
            Want::Ended("ended while daemon was down"),
        ),
        (
            Running,
            false,
            false,
            Want::Ended("ended while daemon was down"),
        ),
    ];
    for (stored, populated, alive, want) in table {
        let case = format!("{stored:?} populated={populated} alive={alive}");
        let mut t = TestEngine::new();
        let pid = if alive { std::process::id() } else { DEAD_PID };
        if alive {
            t.fake_process(pid, 1000);
            t.fake_stat(pid);
        }
        let rec = record("r1", stored, pid);
        let seq = t.store.clone().insert_job(&rec).expect("insert");
        if stored != Queued {
            job_cgroup(&t, &rec, populated.then_some(pid));
        }

        t.engine.recover().expect("recover");
        t.removals_done().await;

        let row = t.store.state().rows[&seq].clone();
        let listed = t.engine.driver.list_jobs().expect("list");
        match want {
            Want::Queued => {
                let j = &t.engine.jobs[&seq];
                assert_eq!(j.phase, Phase::Queued, "{case}");
                assert!(j.client.reconnect_by.is_some(), "{case}");
                assert_eq!(row.state, Queued, "{case}");
            }
            Want::Running => {
                let j = &t.engine.jobs[&seq];
                assert_eq!((j.phase, j.cpus), (Phase::Primary, cpus("0-1")), "{case}");
                assert!(!j.end.ending, "{case}");
                assert_eq!(row.state, Running, "{case}");
                // A `starting` row whose cgroup holds the job is written `running`.
                let rewritten = t.store.calls_to("set_running");
                assert_eq!(rewritten.len(), usize::from(stored == Starting), "{case}");
                assert!(listed.contains(&rec.cgroup), "{case}: {listed:?}");
                assert_eq!(t.engine.free(), cpus("2-3"), "{case}");
            }
            Want::Ended(reason) => {
                assert!(!t.engine.jobs.contains_key(&seq), "{case}");
                assert_eq!(row.state, StoredState::Ended, "{case}");
                assert_eq!(row.end_reason.as_deref(), Some(reason), "{case}");
                assert!(!listed.contains(&rec.cgroup), "{case}: {listed:?}");
                assert_eq!(t.engine.free(), cpus("0-3"), "{case}");
            }
        }
        assert_eq!(t.engine.store_write_errors(), 0, "{case}");
    }
}

/// A start is recorded `running` before the job's cgroups are made: a daemon killed in between
/// leaves a `running` row with no cgroup, whose command never ran. Recovery ends it as a start
/// interrupted (a failure), not as a job that ended while the daemon was down (completed).
#[tokio::test(flavor = "current_thread")]
async fn a_running_row_whose_cgroups_were_never_made_is_a_start_interrupted() {
    for alive in [true, false] {
        let mut t = TestEngine::new();
        let pid = if alive { std::process::id() } else { DEAD_PID };
        if alive {
            t.fake_process(pid, 1000);
            t.fake_stat(pid);
        }
        let rec = record("r1", StoredState::Running, pid);
        let seq = t.store.clone().insert_job(&rec).expect("insert");
        t.engine.recover().expect("recover");
        let row = t.store.state().rows[&seq].clone();
        assert_eq!(
            (row.state, row.end_reason.as_deref()),
            (StoredState::Ended, Some("start interrupted")),
            "alive={alive}"
        );
        assert_eq!(t.engine.free(), cpus("0-3"), "alive={alive}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_is_placed_in_its_cgroup_answered_and_ended_when_its_main_process_exits() {
    let mut t = TestEngine::new();
    let me = Cred {
        pid: std::process::id(),
        uid: 1000,
        gid: 1000,
    };
    t.fake_process(me.pid, me.uid);
    let (reply, mut answers) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 1,
        cred: me,
        who: Who {
            name: "user1000".into(),
            ..Who::default()
        },
        req: RunRequest {
            gpus: 0,
            bind: None,
            tasks: None,
            time_limit_s: None,
            cpus: 2,
            mem: None,
            job_id: Some("s1".into()),
            name: None,
            argv: vec!["sleep".into()],
            priority: None,
            placement: Placement::Any,
            exclusive: false,
            user: None,
            wlm: None,
            tmp: None,
            io_weight: None,
            io_max: vec![],
        },
        reply,
    });

    // The reply names the CPUs the job's cgroup has, and the client's process is in it.
    let r = answers.recv().await.expect("an answer");
    let Response::Started { job, cpus: got, .. } = r else {
        panic!("expected Started, got {r:?}");
    };
    assert_eq!(job, "s1");
    let cg = cgroup_name(&TestEngine::id("s1"));
    assert_eq!(t.engine.driver.job_cpus(&cg).expect("cpuset"), got);
    assert_eq!(t.engine.driver.procs(&cg).expect("procs"), [me.pid]);
    let seq = *t.engine.jobs.keys().next().expect("the job");
    assert_eq!(
        t.store.calls_to("set_starting"),
        [format!("set_starting {seq} primary {got}")]
    );
    assert_eq!(t.store.state().rows[&seq].state, StoredState::Running);

    // Its main process exits: leftovers killed, the cgroup empties, the job ends.
    t.engine.handle(Event::MainExited { seq });
    assert!(t.engine.jobs.is_empty());
    t.removals_done().await;
    assert!(!t.engine.driver.list_jobs().expect("list").contains(&cg));
    let row = t.store.state().rows[&seq].clone();
    assert_eq!(
        (row.state, row.end_reason.as_deref()),
        (StoredState::Ended, Some("exited"))
    );
    assert_eq!(t.engine.free(), cpus("0-3"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_job_expires_at_its_ttl_on_the_tick_and_its_client_is_told() {
    let mut t = TestEngine::with_config("queue_ttl = 10\n");
    let me = Cred {
        pid: std::process::id(),
        uid: 1000,
        gid: 1000,
    };
    t.fake_process(me.pid, me.uid);
    let run = run_request;
    // The whole node to one job; a second one waits.
    let (a_reply, mut a) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 1,
        cred: me,
        who: who(),
        req: run("a", 4),
        reply: a_reply,
    });
    assert!(matches!(a.recv().await, Some(Response::Started { .. })));
    let (b_reply, mut b) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 2,
        cred: Cred { pid: 1, ..me },
        who: who(),
        req: run("b", 1),
        reply: b_reply,
    });
    assert!(matches!(b.recv().await, Some(Response::Queued { .. })));

    // Not yet: a tick before the deadline changes nothing.
    t.clock.advance(9_000);
    t.engine.handle(Event::Tick {
        generation: t.engine.tick_generation,
    });
    assert_eq!(t.engine.jobs.len(), 2);

    t.clock.advance(2_000);
    t.engine.handle(Event::Tick {
        generation: t.engine.tick_generation,
    });
    let r = b.recv().await.expect("b is told");
    let Response::Error { message, .. } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert!(
        message.starts_with("job b expired after waiting") && message.ends_with("(queue_ttl)"),
        "{message}"
    );
    assert_eq!(t.engine.jobs.len(), 1);
    let ended: Vec<_> = t
        .store
        .state()
        .rows
        .values()
        .filter(|r| r.job_id == "b")
        .map(|r| (r.state, r.end_reason.clone()))
        .collect();
    assert_eq!(
        ended,
        [(StoredState::Ended, Some("expired in queue".to_string()))]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn recovery_takes_each_stored_role_then_plans() {
    // (stored role, phase after recovery and the plan that follows it, CPUs it holds, CPUs
    // free for primaries, role stored). The node has room: a backfiller is promoted and a
    // preempted job resumed on the CPUs its cgroup holds; a suspended one stays frozen.
    let table = [
        (Role::Primary, Phase::Primary, "0-1", "2-3", Role::Primary),
        (Role::Backfill, Phase::Primary, "0-1", "2-3", Role::Primary),
        (Role::Preempted, Phase::Primary, "0-1", "2-3", Role::Primary),
        (
            Role::Suspended,
            Phase::Suspended,
            "",
            "0-3",
            Role::Suspended,
        ),
    ];
    for (role, phase, held, free, stored) in table {
        let mut t = TestEngine::new();
        let pid = std::process::id();
        t.fake_process(pid, 1000);
        t.fake_stat(pid);
        let rec = JobRecord {
            role,
            ..record("r1", StoredState::Running, pid)
        };
        let seq = t.store.clone().insert_job(&rec).expect("insert");
        job_cgroup(&t, &rec, Some(pid));

        t.engine.recover().expect("recover");

        let j = &t.engine.jobs[&seq];
        assert_eq!((j.phase, j.cpus), (phase, cpus(held)), "{role:?}");
        assert_eq!(t.engine.free(), cpus(free), "{role:?}");
        assert_eq!(t.store.state().rows[&seq].role, stored, "{role:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn recovery_matrix_by_role() {
    // The matrix's other axis: every stored role of a running job × cgroup populated × main
    // process alive. A role never keeps a job whose main process or cgroup is gone.
    for role in [
        Role::Primary,
        Role::Backfill,
        Role::Preempted,
        Role::Suspended,
    ] {
        for (populated, alive, want) in [
            (true, true, None),
            (true, false, Some("exited")),
            (false, true, Some("ended while daemon was down")),
            (false, false, Some("ended while daemon was down")),
        ] {
            let case = format!("{role:?} populated={populated} alive={alive}");
            let mut t = TestEngine::new();
            let pid = if alive { std::process::id() } else { DEAD_PID };
            if alive {
                t.fake_process(pid, 1000);
                t.fake_stat(pid);
            }
            let rec = JobRecord {
                role,
                ..record("r1", StoredState::Running, pid)
            };
            let seq = t.store.clone().insert_job(&rec).expect("insert");
            job_cgroup(&t, &rec, populated.then_some(pid));

            t.engine.recover().expect("recover");
            t.removals_done().await;

            let row = t.store.state().rows[&seq].clone();
            let listed = t.engine.driver.list_jobs().expect("list");
            match want {
                None => {
                    assert!(t.engine.jobs.contains_key(&seq), "{case}");
                    assert!(listed.contains(&rec.cgroup), "{case}");
                    assert_eq!(row.state, StoredState::Running, "{case}");
                }
                Some(reason) => {
                    assert!(!t.engine.jobs.contains_key(&seq), "{case}");
                    assert_eq!(
                        (row.state, row.end_reason.as_deref()),
                        (StoredState::Ended, Some(reason)),
                        "{case}"
                    );
                    assert!(!listed.contains(&rec.cgroup), "{case}: {listed:?}");
                    assert_eq!(t.engine.free(), cpus("0-3"), "{case}");
                }
            }
        }
    }
}
