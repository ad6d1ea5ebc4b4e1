//! Thread balancing through the engine, on a fake cgroup tree and the recording fake store: the
//! `--bind` a job asks for is recorded and recovered, the tick hands the binder the running jobs
//! with their modes (the engine itself reads nothing), and a starting job is offered thread
//! counts for its CPUs.

use pjw_core::thread_bind::BindMode;
use pjw_core::CpuSet;
use pjw_proto::Response;
use pjw_store::StoredState;

use super::table_tests::{job_cgroup, record};
use super::Event;
use crate::bind::{BindJob, BindMsg, Binder, Birth, Born};
use crate::procs::ProcMsg;
use crate::store_port::{StoreDetailWriter, StoreWriter};
use crate::test_support::{run_request, TestEngine};

const UID: u32 = 1000;

fn cs(s: &str) -> CpuSet {
    CpuSet::parse_list(s).expect("cpu list")
}

fn defaults(r: &Response) -> Vec<(String, String)> {
    match r {
        Response::Started { env_defaults, .. } => env_defaults.clone(),
        other => panic!("not started: {other:?}"),
    }
}

/// The next message the binder got, as a pass.
fn pass(rx: &std::sync::mpsc::Receiver<BindMsg>) -> Vec<BindJob> {
    match rx.try_recv().expect("a message to the binder") {
        BindMsg::Pass(jobs) => jobs,
        other => panic!("not a pass: {other:?}"),
    }
}

fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "current_thread")]
async fn the_tick_sends_running_jobs_with_their_modes() {
    let mut t = TestEngine::new();
    let (b, rx) = Binder::collecting();
    t.engine.set_binder(b);
    let mut req = run_request("a", 2);
    req.bind = Some(BindMode::Threads);
    // Live processes (a job whose main process is gone ends): this one and init.
    let (r, _a) = t.submit(1, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let (r, _b) = t.submit(2, 1, UID, run_request("b", 1)).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    // Queued behind them: not listed.
    let mut req = run_request("c", 4);
    req.placement = pjw_proto::Placement::PrimaryOnly;
    let (r, _c) = t.submit(3, 2, UID, req).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    assert_eq!(t.store.calls_to("set_bind").len(), 1);

    t.engine.handle(Event::Bind);
    let mut got = pass(&rx);
    got.sort_by_key(|j| j.seq);
    let (a, b) = (t.seq_of("a"), t.seq_of("b"));
    let job = |seq, id: &str, cpus: CpuSet, mode| BindJob {
        seq,
        cgroup: format!("job-{id}"),
        cpus,
        mode,
    };
    let cpus = |seq| t.engine.jobs[&seq].cpus;
    assert_eq!(
        got,
        vec![
            job(a, "a", cpus(a), BindMode::Threads),
            job(b, "b", cpus(b), BindMode::None),
        ]
    );
    assert_eq!(cpus(a).len(), 2);

    // The node's default changes (a reload): the job without --bind follows it.
    t.engine.cfg.bind = BindMode::Cores;
    t.engine.handle(Event::Bind);
    let got = pass(&rx);
    let modes: Vec<BindMode> = got.iter().map(|j| j.mode).collect();
    assert!(
        modes.contains(&BindMode::Threads) && modes.contains(&BindMode::Cores),
        "{got:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_starting_job_is_offered_thread_counts_unless_switched_off() {
    let mut t = TestEngine::new();
    let mut req = run_request("a", 3);
    req.bind = Some(BindMode::Threads);
    let (r, _a) = t.submit(1, 11, UID, req).await;
    let env = defaults(&r);
    // No tasks: OpenMP sizes itself from its mask (a launcher's per-rank binding included);
    // the runtimes that count the node are told the job's CPUs.
    assert_eq!(var(&env, "OMP_NUM_THREADS"), None, "{env:?}");
    assert_eq!(var(&env, "PYTHON_CPU_COUNT"), Some("3"), "{env:?}");
    assert_eq!(var(&env, "OMP_PLACES"), Some("threads"), "{env:?}");
    // Without binding: counts only.
    let (r, _b) = t.submit(2, 12, UID, run_request("b", 1)).await;
    let env = defaults(&r);
    assert_eq!(var(&env, "NUMEXPR_NUM_THREADS"), Some("1"), "{env:?}");
    assert_eq!(var(&env, "OMP_PLACES"), None, "{env:?}");

    let mut t = TestEngine::new();
    t.engine.cfg.thread_env = false;
    let (r, _a) = t.submit(1, 11, UID, run_request("a", 2)).await;
    assert!(defaults(&r).is_empty(), "{r:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_with_tasks_gets_each_tasks_share_and_a_bad_count_is_refused() {
    let mut t = TestEngine::new();
    let mut req = run_request("a", 4);
    req.tasks = Some(2);
    let (r, _a) = t.submit(1, 11, UID, req).await;
    let env = defaults(&r);
    assert_eq!(var(&env, "OMP_NUM_THREADS"), Some("2"), "{env:?}");
    assert_eq!(
        var(&env, "OMPI_MCA_orte_set_default_slots"),
        Some("2"),
        "{env:?}"
    );
    assert_eq!(
        var(&env, "OMPI_MCA_rmaps_base_mapping_policy"),
        Some("slot:PE=2"),
        "{env:?}"
    );

    for (tasks, cpus) in [(0, 2), (3, 2), (3, 4)] {
        let mut req = run_request("bad", cpus);
        req.tasks = Some(tasks);
        let (r, _) = t.submit(2, 12, UID, req).await;
        match r {
            Response::Error { message, .. } => assert!(
                message.contains(&format!("--ntasks {tasks} does not divide")),
                "{message}"
            ),
            other => panic!("--ntasks {tasks} on {cpus} cpus: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn after_a_restart_a_recovered_job_keeps_its_bind_mode() {
    let mut t = TestEngine::new();
    let (b, rx) = Binder::collecting();
    t.engine.set_binder(b);
    let pid = std::process::id();
    t.fake_process(pid, UID);
    t.fake_stat(pid);
    let rec = record("old", StoredState::Running, pid);
    let mut store = t.store.clone();
    let seq = store.insert_job(&rec).expect("insert");
    store.set_bind(seq, BindMode::Cores).expect("bind row");
    job_cgroup(&t, &rec, Some(pid));

    t.engine.recover().expect("recover");
    assert_eq!(t.engine.jobs[&seq].bind, Some(BindMode::Cores));
    t.engine.handle(Event::Bind);
    let got = pass(&rx);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].seq, got[0].cpus, got[0].mode),
        (seq, cs("0-1"), BindMode::Cores)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn threads_born_in_a_binding_job_go_to_the_binder_at_once() {
    let mut t = TestEngine::new();
    let (b, rx) = Binder::collecting();
    t.engine.set_binder(b);
    let main = std::process::id();
    let mut req = run_request("a", 2);
    req.bind = Some(BindMode::Threads);
    let (r, _a) = t.submit(1, main, UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    // Job b does not bind; 1 is its main process.
    let (r, _b) = t.submit(2, 1, UID, run_request("b", 1)).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let fork = |parent: u32, tgid: u32, tid: u32| proc_connector::ProcEvent::Fork {
        cpu: 0,
        seq: 0,
        parent_pid: parent,
        parent_tgid: parent,
        child_pid: tid,
        child_tgid: tgid,
        timestamp_ns: 0,
    };
    // A thread of a's main process, a child process of a, a thread of b, a stranger's child.
    let events = vec![
        fork(1, main, 700_001),
        fork(main, 700_002, 700_002),
        fork(1, 1, 700_003),
        fork(700_999, 700_998, 700_998),
    ];
    t.engine.handle(Event::Proc(ProcMsg::Events(events)));
    let got = match rx.try_recv().expect("a message to the binder") {
        BindMsg::Born(b) => b,
        other => panic!("not born threads: {other:?}"),
    };
    let a = t.seq_of("a");
    let job = BindJob {
        seq: a,
        cgroup: "job-a".into(),
        cpus: t.engine.jobs[&a].cpus,
        mode: BindMode::Threads,
    };
    let born = |tgid, tid, by| Born {
        job: job.clone(),
        tgid,
        tid,
        at: Birth::Fork { by, at_ns: 0 },
    };
    // Each with the thread the kernel names as its parent: for a process, the forking thread.
    assert_eq!(
        got,
        vec![born(main, 700_001, 1), born(700_002, 700_002, main)]
    );
    assert!(rx.try_recv().is_err(), "only one message");
}
