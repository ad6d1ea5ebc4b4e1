//! Table tests of the engine's control and connection events without root, on the recording
//! fake cgroup driver: suspend and resume (the freezer writes, the CPUs handed on and back),
//! a queued client that leaves, the refusals of control requests that do not apply, and a
//! freeze the kernel refuses (no preemption, no suspend, no CPU handed out).

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{Placement, Response, RunRequest};
use pjw_store::{StoredRole, StoredState};
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
    t.submit(conn, pid, UID, run(id, cpus)).await
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
    assert_eq!(t.engine.jobs[&t.seq_of("a")].phase, Phase::Suspended);
    assert!(matches!(b_rx.recv().await, Some(Response::Started { .. })));

    // A second suspend, and a resume of a job that is not suspended, are refused.
    let r = control(&mut t, "a", Control::Suspend).await;
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
    let r = control(&mut t, "b", Control::Resume).await;
    assert!(matches!(r, Response::Error { .. }), "{r:?}");

    // Resumed while b holds 2 of the 4 CPUs: it waits for them, still frozen.
    let r = control(&mut t, "a", Control::Resume).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&t.seq_of("a")].phase, Phase::Preempted);
    assert!(!fake.calls().contains(&"freeze job-a false".to_string()));

    // b ends: a gets its CPUs back and is thawed.
    let b_seq = t.seq_of("b");
    t.engine.handle(Event::MainExited { seq: b_seq });
    assert_eq!(t.engine.jobs[&t.seq_of("a")].phase, Phase::Primary);
    assert!(
        fake.calls().contains(&"freeze job-a false".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(
        t.engine.jobs[&t.seq_of("a")].cpus,
        CpuSet::parse_list("0-3").unwrap()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_suspended_backfill_only_job_is_resumed_as_a_backfiller() {
    // Found by the chaos test: resumed, it waited for CPUs as a primary it may never be, and
    // stayed frozen with every CPU free.
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let req = RunRequest {
        placement: Placement::BackfillOnly,
        ..run("bf", 2)
    };
    let (a, _a) = t.submit(1, std::process::id(), UID, req).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let seq = t.seq_of("bf");
    assert_eq!(t.engine.jobs[&seq].phase, Phase::Backfill);

    let r = control(&mut t, "bf", Control::Suspend).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&seq].phase, Phase::Suspended);
    assert_eq!(t.store.state().rows[&seq].role, StoredRole::Suspended);

    let r = control(&mut t, "bf", Control::Resume).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    let j = &t.engine.jobs[&seq];
    assert_eq!((j.phase, j.cpus.len()), (Phase::Backfill, 2));
    assert!(
        fake.calls().contains(&"freeze job-bf false".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(t.store.state().rows[&seq].role, StoredRole::Backfill);
}

#[tokio::test(flavor = "current_thread")]
async fn a_resume_is_recorded_before_the_job_has_cpus() {
    // Resumed while its CPUs are taken, the job waits thawed-to-be: a restart then must not
    // bring it back suspended (its owner asked once and is not told to ask again).
    let mut t = TestEngine::new();
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, _b) = submit(&mut t, 2, 1, "b", 4).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    let r = control(&mut t, "a", Control::Suspend).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    let r = control(&mut t, "a", Control::Resume).await;
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
    let seq = t.seq_of("a");
    assert_eq!(t.engine.jobs[&seq].phase, Phase::Preempted);
    assert_eq!(t.store.state().rows[&seq].role, StoredRole::Preempted);
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_client_that_leaves_withdraws_its_job_and_no_other() {
    let mut t = TestEngine::new();
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, _b) = submit(&mut t, 2, 1, "b", 1).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    let b_seq = t.seq_of("b");

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
    assert_eq!(t.engine.jobs[&t.seq_of("a")].phase, Phase::Primary);
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

#[tokio::test(flavor = "current_thread")]
async fn a_freeze_the_kernel_refuses_is_not_taken_as_one_and_frees_no_cpu() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording_with_config(
        fake.clone(),
        "max_priority = 16\npreempt_priority = 14\n",
    );
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let a_seq = t.seq_of("a");
    fake.state().fail.push("freeze");

    // A job that may preempt a: a's freeze fails, so a keeps its CPUs and h waits.
    t.fake_process(1, UID);
    let (reply, mut h_rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 2,
        cred: Cred { pid: 1, ..me() },
        who: who(),
        req: RunRequest {
            priority: Some(16),
            ..run("h", 2)
        },
        reply,
    });
    let h = h_rx.recv().await.expect("an answer");
    assert!(matches!(h, Response::Queued { .. }), "{h:?}");
    assert!(h_rx.try_recv().is_err(), "h was told more than Queued");
    let j = &t.engine.jobs[&a_seq];
    assert_eq!((j.phase, j.cpus.len()), (Phase::Primary, 4));
    let calls = fake.calls();
    assert!(
        calls.contains(&"freeze job-a true !".to_string()),
        "{calls:?}"
    );
    // h waits in its own cgroups (decision (cm)), never narrowed to CPUs of its own.
    assert!(
        !calls.iter().any(|c| c.starts_with("set_cpus job-h")),
        "{calls:?}"
    );
    assert_eq!(t.store.state().rows[&a_seq].role.as_str(), "primary");

    // A suspend whose freeze fails is an error to the caller; a still runs on its CPUs.
    let r = control(&mut t, "a", Control::Suspend).await;
    let Response::Error { message, .. } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert!(message.starts_with("cannot suspend job a: "), "{message}");
    assert_eq!(t.engine.jobs[&a_seq].phase, Phase::Primary);

    // The freezer works again: the next plan preempts a and starts h on its CPUs.
    fake.state().fail.clear();
    t.engine.handle(Event::Tick {
        generation: t.engine.tick_generation,
    });
    assert!(matches!(h_rx.recv().await, Some(Response::Started { .. })));
    assert_eq!(t.engine.jobs[&a_seq].phase, Phase::Preempted);
    assert!(t.engine.jobs[&a_seq].cpus.is_empty());
}

/// Review F6: when a queued job's CPUs came free, a client process whose `/proc` entry could
/// not be read (EMFILE, ENOMEM) was taken as gone and its job ended ("client left the
/// queue"). A read error is no fact: the job keeps its place and its waiter, and starts at
/// the timer's next plan once the process can be read; one that is gone is still ended.
#[tokio::test(flavor = "current_thread")]
async fn a_client_that_cannot_be_read_when_its_cpus_come_free_keeps_its_place() {
    let mut t = TestEngine::new();
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (b, mut b_rx) = submit(&mut t, 2, 4242, "b", 1).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    let b_seq = t.seq_of("b");
    // Its status file cannot be read now (a directory where the file was: EISDIR).
    let status = t.proc_root().join("4242").join("status");
    std::fs::remove_file(&status).unwrap();
    std::fs::create_dir(&status).unwrap();

    t.engine.handle(Event::MainExited { seq: t.seq_of("a") });
    let j = &t.engine.jobs[&b_seq];
    assert_eq!(j.phase, Phase::Queued, "still waiting");
    assert!(j.client.waiter.is_some(), "its client still waits");
    assert_eq!(t.store.state().rows[&b_seq].state, StoredState::Queued);
    assert!(t.engine.start_retry.is_some(), "the timer will plan again");
    assert!(b_rx.try_recv().is_err(), "nothing told yet");

    // Readable again: the timer's plan starts it.
    std::fs::remove_dir(&status).unwrap();
    t.fake_process(4242, UID);
    let generation = t.engine.tick_generation;
    t.engine.handle(Event::Tick { generation });
    assert!(matches!(b_rx.recv().await, Some(Response::Started { .. })));
    assert!(
        t.store.state().rows[&b_seq].started_ms.is_some(),
        "it started"
    );

    // The check that keeps a job did run: a client that is gone is ended as before.
    let mut t = TestEngine::new();
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (c, _c) = submit(&mut t, 3, 4343, "c", 1).await;
    assert!(matches!(c, Response::Queued { .. }), "{c:?}");
    let c_seq = t.seq_of("c");
    std::fs::remove_dir_all(t.proc_root().join("4343")).unwrap();
    t.engine.handle(Event::MainExited { seq: t.seq_of("a") });
    assert!(t.engine.start_retry.is_none());
    let row = t.store.state().rows[&c_seq].clone();
    assert_eq!(
        (row.state, row.end_reason.as_deref()),
        (StoredState::Ended, Some("client left the queue"))
    );
}

/// Real software (the acceptance run): `pjw run -m 1 -- true` (also `-m 0.4K`, `-m 4K`) was
/// accepted, and the kernel killed the client at its first page in the job, before its
/// watcher knew the job: exit 137 and nothing said. Less than 1 MiB is refused, saying why;
/// 1 MiB is a job.
#[tokio::test(flavor = "current_thread")]
async fn a_memory_limit_no_process_can_run_in_is_refused() {
    let mut t = TestEngine::new();
    for (i, m) in [1u64, 410, 4096, (1 << 20) - 1].into_iter().enumerate() {
        let mut req = run(&format!("m{i}"), 1);
        req.mem = Some(m);
        let (r, _rx) = t.submit(i as u64 + 1, 6000 + i as u32, UID, req).await;
        match r {
            Response::Error { message, .. } => {
                assert!(
                    message.contains("less than the least a job may ask for (1M)"),
                    "{message}"
                )
            }
            other => panic!("--mem {m}: {other:?}"),
        }
    }
    let mut req = run("ok", 1);
    req.mem = Some(1 << 20);
    let (r, _rx) = t.submit(9, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
}
