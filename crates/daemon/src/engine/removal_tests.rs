//! Tests of an ended job's cgroups removed off the engine's thread (engine/removal.rs), on the
//! recording fake whose removals wait at a gate: the engine goes on meanwhile (the job ended,
//! recorded, its CPUs free), its `end` is answered only once the cgroups are gone, a job of
//! the same name waits for them, a failed removal says so, a shutdown finishes what is under
//! way, and a restart removes what a crash left.

use pjw_proto::{RegisterRequest, Response};
use pjw_store::StoredState;
use tokio::sync::{mpsc, oneshot};

use super::{cgroup_name, Control, Cred, Event, Who};
use crate::test_support::{FakeCgroups, Gate, OpenOnDrop, TestEngine};

const ROOT: Cred = Cred {
    pid: 1,
    uid: 0,
    gid: 0,
};

fn root_who() -> Who {
    Who {
        name: "root".into(),
        admin: false,
        named: Some((1000, 1000)),
    }
}

/// An engine on the recording fake whose removals wait at the returned gate.
fn engine() -> (TestEngine, FakeCgroups, OpenOnDrop) {
    let fake = FakeCgroups::default();
    let gate = OpenOnDrop(Gate::default());
    fake.state().slow_remove = Some(gate.0.clone());
    let t = TestEngine::recording(fake.clone());
    (t, fake, gate)
}

/// A manager's registration of job `job` (held, no process) on 2 CPUs; its first answer and
/// its channel.
fn register(
    t: &mut TestEngine,
    conn: u64,
    job: &str,
) -> (Response, mpsc::UnboundedReceiver<Response>) {
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn,
        cred: ROOT,
        who: root_who(),
        req: RegisterRequest {
            job: job.into(),
            wlm: "slurm".into(),
            user: "someone".into(),
            cpus: 2,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply,
    });
    let first = rx.try_recv().expect("an answer");
    (first, rx)
}

/// The manager's `end` of `job`; the channel its answer comes on.
fn end(t: &mut TestEngine, job: &str) -> oneshot::Receiver<Response> {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Control {
        cred: ROOT,
        who: root_who(),
        job: job.into(),
        what: Control::End,
        reply,
    });
    rx
}

/// Hand the engine the events it sent itself, in order, up to a removal's report.
async fn until_removed(t: &mut TestEngine) {
    loop {
        let ev = t._events.recv().await.expect("an event");
        let done = matches!(ev, Event::CgroupsRemoved { .. });
        t.engine.handle(ev);
        if done {
            return;
        }
    }
}

fn removals(fake: &FakeCgroups, cgroup: &str) -> usize {
    let call = format!("remove_job {cgroup}");
    fake.calls().iter().filter(|c| c.trim_end() == call).count()
}

#[tokio::test(flavor = "current_thread")]
async fn an_ended_jobs_cgroups_go_off_the_engine_thread_and_its_end_is_answered_once_they_are_gone()
{
    let (mut t, fake, gate) = engine();
    let (r, _rx) = register(&mut t, 1, "7");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = t.seq_of("slurm:7");
    let cgroup = t.engine.jobs[&seq].cgroup.clone();
    assert_eq!(cgroup, cgroup_name(&TestEngine::id("slurm:7")));

    // The removal waits at the gate; the engine does not.
    let mut answer = end(&mut t, "slurm:7");
    assert!(!t.engine.jobs.contains_key(&seq), "the job ended");
    assert_eq!(t.store.state().rows[&seq].state, StoredState::Ended);
    assert_eq!(t.engine.free().len(), 4, "its CPUs are free at once");
    assert!(
        fake.state().jobs.contains_key(&cgroup),
        "its cgroups are still there"
    );
    assert!(
        answer.try_recv().is_err(),
        "not answered before they are gone"
    );

    gate.0.open();
    until_removed(&mut t).await;
    assert!(!fake.state().jobs.contains_key(&cgroup));
    assert_eq!(removals(&fake, &cgroup), 1);
    match answer.try_recv() {
        Ok(Response::Done { message }) => {
            assert_eq!(message, "job slurm:7 ended; its cgroups are gone")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_of_the_same_name_starts_only_once_the_old_cgroups_are_gone() {
    let (mut t, fake, gate) = engine();
    let (r, _first) = register(&mut t, 1, "8");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let cgroup = cgroup_name(&TestEngine::id("slurm:8"));
    let _answer = end(&mut t, "slurm:8");

    // The id is free again, the CPUs are free: the same name waits all the same, while a job
    // of another name starts (the plan ran).
    let (r, mut again) = register(&mut t, 2, "8");
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    let (r, _other) = register(&mut t, 3, "9");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let creates = |fake: &FakeCgroups| {
        fake.calls()
            .iter()
            .filter(|c| c.starts_with(&format!("create_job {cgroup} ")))
            .count()
    };
    assert_eq!(creates(&fake), 1, "{:?}", fake.calls());

    gate.0.open();
    until_removed(&mut t).await;
    assert!(
        matches!(again.try_recv(), Ok(Response::Started { .. })),
        "started once the old cgroups were gone"
    );
    let calls = fake.calls();
    let removed = calls
        .iter()
        .position(|c| c.trim_end() == format!("remove_job {cgroup}"))
        .expect("removed");
    let made_again = calls
        .iter()
        .rposition(|c| c.starts_with(&format!("create_job {cgroup} ")))
        .expect("made again");
    assert!(removed < made_again, "{calls:?}");
    assert!(
        fake.state().jobs.contains_key(&cgroup),
        "the new job's cgroups stay"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_removal_is_told_to_the_waiter_not_called_gone() {
    let (mut t, fake, gate) = engine();
    let (r, _rx) = register(&mut t, 1, "10");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    fake.state().fail.push("remove_job");
    let mut answer = end(&mut t, "slurm:10");
    gate.0.open();
    until_removed(&mut t).await;
    match answer.try_recv() {
        Ok(Response::Done { message }) => assert!(
            message.starts_with("job slurm:10 ended; its cgroups could not all be removed: "),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_shutdown_finishes_the_removals_under_way() {
    let (mut t, fake, _gate) = engine();
    let (r, _rx) = register(&mut t, 1, "11");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let cgroup = cgroup_name(&TestEngine::id("slurm:11"));
    let mut answer = end(&mut t, "slurm:11");
    assert!(fake.state().jobs.contains_key(&cgroup), "still under way");

    t.engine.shutdown();
    assert!(
        !fake.state().jobs.contains_key(&cgroup),
        "removed at shutdown"
    );
    assert!(matches!(answer.try_recv(), Ok(Response::Done { .. })));
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_before_the_removal_leaves_cgroups_the_restart_removes() {
    let (mut t, fake, _gate) = engine();
    let (r, _rx) = register(&mut t, 1, "12");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = t.seq_of("slurm:12");
    let cgroup = cgroup_name(&TestEngine::id("slurm:12"));
    let _answer = end(&mut t, "slurm:12");
    // The daemon dies with the removal waiting: the job is recorded ended, its cgroups are
    // left (empty).
    assert_eq!(t.store.state().rows[&seq].state, StoredState::Ended);
    assert!(fake.state().jobs.contains_key(&cgroup));
    assert_eq!(removals(&fake, &cgroup), 0);

    let mut t = t.restart();
    t.engine.recover().expect("recover");
    assert!(
        !fake.state().jobs.contains_key(&cgroup),
        "removed by recovery"
    );
    assert_eq!(removals(&fake, &cgroup), 1);
    assert!(t.engine.jobs.is_empty(), "nothing adopted");
}
