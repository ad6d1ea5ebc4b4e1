//! The engine on the recording cgroup fake: the exact cgroup writes an event makes, and a
//! cgroup write failing mid-launch (a clear error to that client, no job, no CPU held).

use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, Placement, Response, RunRequest};
use pjw_store::StoredState;
use tokio::sync::mpsc;

use super::{Cred, Event};
use crate::test_support::{client, run_request, who, FakeCgroups, TestEngine};

fn me() -> Cred {
    client(1000)
}

fn run(id: &str, cpus: u32) -> RunRequest {
    RunRequest {
        gpus: 0,
        placement: Placement::Any,
        ..run_request(id, cpus)
    }
}

/// Submit `id` and return the first answer.
async fn submit(t: &mut TestEngine, id: &str, cpus: u32) -> Response {
    let (reply, mut answers) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 1,
        cred: me(),
        who: who(),
        req: run(id, cpus),
        reply,
    });
    answers.recv().await.expect("an answer")
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_and_its_main_process_exiting_make_exactly_these_cgroup_writes() {
    let cg = FakeCgroups::default();
    let mut t = TestEngine::recording(cg.clone());
    t.fake_process(me().pid, 1000);

    let r = submit(&mut t, "s1", 2).await;
    let Response::Started { cpus, .. } = r else {
        panic!("expected Started, got {r:?}");
    };
    let pid = me().pid;
    assert_eq!(
        cg.calls(),
        [
            format!("create_job job-s1 {cpus}"),
            format!("add_process job-s1 {pid}")
        ]
    );

    let seq = *t.engine.jobs.keys().next().expect("the job");
    t.engine.handle(Event::MainExited { seq });
    t.removals_done().await;
    assert_eq!(
        cg.calls()[2..],
        ["kill job-s1".to_string(), "remove_job job-s1".to_string()]
    );
    assert!(t.engine.jobs.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_cgroup_write_failing_mid_launch_is_an_error_to_that_client_and_holds_no_cpu() {
    let cg = FakeCgroups::default();
    cg.state().fail.push("add_process");
    let mut t = TestEngine::recording(cg.clone());
    t.fake_process(me().pid, 1000);

    let r = submit(&mut t, "f1", 4).await;
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(
        message.starts_with("cannot set up the job's cgroups: cannot write")
            && message.contains("No space left on device"),
        "{message}"
    );
    // Created, the move failed, removed again: no job, no cgroup, every CPU free.
    let pid = me().pid;
    assert_eq!(
        cg.calls(),
        [
            "create_job job-f1 0-3".to_string(),
            format!("add_process job-f1 {pid} !"),
            "remove_job job-f1".to_string(),
        ]
    );
    assert!(t.engine.jobs.is_empty());
    assert!(cg.state().jobs.is_empty());
    assert_eq!(t.engine.free(), CpuSet::parse_list("0-3").expect("cpus"));
    let row = t
        .store
        .state()
        .rows
        .values()
        .next()
        .cloned()
        .expect("its row");
    assert_eq!(row.state, StoredState::Ended);
    assert!(
        row.end_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("start failed: ")),
        "{:?}",
        row.end_reason
    );

    // The next job gets the whole node: nothing was left holding a CPU.
    cg.state().fail.clear();
    let r = submit(&mut t, "f2", 4).await;
    assert!(
        matches!(&r, Response::Started { cpus, .. } if cpus.len() == 4),
        "{r:?}"
    );
}
