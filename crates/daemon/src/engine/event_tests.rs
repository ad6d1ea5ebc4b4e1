//! Table tests of the engine's control and connection events without root, on the recording
//! fake cgroup driver: suspend and resume (the freezer writes, the CPUs handed on and back),
//! a queued client that leaves, and the refusals of control requests that do not apply.

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{Response, RunRequest};
use pjw_store::StoredState;
use tokio::sync::{mpsc, oneshot};

use super::{Control, Cred, Event};
use crate::test_support::{client, run_request, who, FakeCgroups, TestEngine};

const UID: u32 = 1000;

fn me() -> Cred {
    client(UID)
}

fn run(id: &str, cpus: u32) -> RunRequest {
    run_request(id, cpus)
}

/// Submit `id` on connection `conn` from process `pid`; its first answer and its channel.
async fn submit(
    t: &mut TestEngine,
    conn: u64,
    pid: u32,
    id: &str,
    cpus: u32,
) -> (Response, mpsc::UnboundedReceiver<Response>) {
    t.fake_process(pid, UID);
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn,
        cred: Cred { pid, ..me() },
        who: who(),
        req: run(id, cpus),
        reply,
    });
    let first = rx.recv().await.expect("an answer");
    (first, rx)
}

/// Send a control request about `job` as its owner; the answer.
async fn control(t: &mut TestEngine, job: &str, what: Control) -> Response {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Control {
        cred: me(),
        who: who(),
        job: job.into(),
        what,
        reply,
    });
    rx.await.expect("an answer")
}

fn seq_of(t: &TestEngine, id: &str) -> i64 {
    t.engine
        .jobs
        .values()
        .find(|j| j.id.to_string() == id)
        .map(|j| j.seq)
        .unwrap_or_else(|| panic!("no job {id}"))
}

#[tokio::test(flavor = "current_thread")]
async fn suspend_freezes_and_hands_the_cpus_on_resume_thaws_when_they_are_back() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, mut b_rx) = submit(&mut t, 2, 1, "b", 2).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");

    // Suspending a: frozen, its CPUs go to the queued b.
    let r = control(&mut t, "a", Control::Suspend).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    assert!(
        fake.calls().contains(&"freeze job-a true".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(t.engine.jobs[&seq_of(&t, "a")].phase, Phase::Suspended);
    assert!(matches!(b_rx.recv().await, Some(Response::Started { .. })));

    // A second suspend, and a resume of a job that is not suspended, are refused.
    let r = control(&mut t, "a", Control::Suspend).await;
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
    let r = control(&mut t, "b", Control::Resume).await;
    assert!(matches!(r, Response::Error { .. }), "{r:?}");

    // Resumed while b holds 2 of the 4 CPUs: it waits for them, still frozen.
    let r = control(&mut t, "a", Control::Resume).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&seq_of(&t, "a")].phase, Phase::Preempted);
    assert!(!fake.calls().contains(&"freeze job-a false".to_string()));

    // b ends: a gets its CPUs back and is thawed.
    let b_seq = seq_of(&t, "b");
    t.engine.handle(Event::MainExited { seq: b_seq });
    assert_eq!(t.engine.jobs[&seq_of(&t, "a")].phase, Phase::Primary);
    assert!(
        fake.calls().contains(&"freeze job-a false".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(
        t.engine.jobs[&seq_of(&t, "a")].cpus,
        CpuSet::parse_list("0-3").unwrap()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_client_that_leaves_withdraws_its_job_and_no_other() {
    let mut t = TestEngine::new();
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, _b) = submit(&mut t, 2, 1, "b", 1).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    let b_seq = seq_of(&t, "b");

    // A connection that holds no queued job changes nothing.
    t.engine.handle(Event::ClientGone { conn: 1 });
    assert_eq!(t.engine.jobs.len(), 2);

    t.engine.handle(Event::ClientGone { conn: 2 });
    assert_eq!(t.engine.jobs.len(), 1);
    let row = t.store.state().rows[&b_seq].clone();
    assert_eq!(
        (row.state, row.end_reason.as_deref()),
        (StoredState::Ended, Some("client left the queue"))
    );
    // The running job goes on.
    assert_eq!(t.engine.jobs[&seq_of(&t, "a")].phase, Phase::Primary);
}

#[tokio::test(flavor = "current_thread")]
async fn control_of_an_unknown_or_queued_job_is_refused() {
    let mut t = TestEngine::new();
    let r = control(&mut t, "nosuch", Control::Suspend).await;
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, _b) = submit(&mut t, 2, 1, "b", 1).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    let r = control(&mut t, "b", Control::Suspend).await;
    let Response::Error { message, .. } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert!(message.contains("is queued"), "{message}");
}
