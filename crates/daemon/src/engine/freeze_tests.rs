//! Table tests of freezes the v1 freezer confirms later (FREEZING, then FROZEN or not), on the
//! recording fake cgroup driver: the engine is answered meanwhile, a job gives up its CPUs only
//! once its freeze is confirmed, and a freeze that is not confirmed is not taken as one.

use pjw_core::sched::Phase;
use pjw_proto::{Response, RunRequest};
use tokio::sync::{mpsc, oneshot};

use super::{Control, Event};
use crate::test_support::{client, run_request, who, FakeCgroups, Gate, OpenOnDrop, TestEngine};

const UID: u32 = 1000;

/// An engine whose freezes wait at a gate and then succeed or (`fails`) not; users may preempt
/// (priority 14 and up).
fn engine(fails: bool) -> (TestEngine, FakeCgroups, OpenOnDrop) {
    let fake = FakeCgroups::default();
    let gate = OpenOnDrop(Gate::default());
    fake.state().slow_freeze = Some((gate.0.clone(), fails));
    let t = TestEngine::recording_with_config(
        fake.clone(),
        "max_priority = 16\npreempt_priority = 14\n",
    );
    (t, fake, gate)
}

/// Submit `id` from process `pid` at `priority`; its first answer and its channel.
async fn submit(
    t: &mut TestEngine,
    conn: u64,
    pid: u32,
    id: &str,
    cpus: u32,
    priority: u8,
) -> (Response, mpsc::UnboundedReceiver<Response>) {
    let req = RunRequest {
        priority: Some(priority),
        ..run_request(id, cpus)
    };
    t.submit(conn, pid, UID, req).await
}

/// Hand the engine the events it sent itself, in order, up to the freezer's answer.
async fn until_frozen(t: &mut TestEngine) {
    loop {
        let ev = t._events.recv().await.expect("an event");
        let done = matches!(ev, Event::Frozen { .. });
        t.engine.handle(ev);
        if done {
            return;
        }
    }
}

fn count(fake: &FakeCgroups, call: &str) -> usize {
    fake.calls().iter().filter(|c| *c == call).count()
}

#[tokio::test(flavor = "current_thread")]
async fn a_preemption_hands_the_cpus_on_only_once_the_freezer_confirms_and_never_when_it_does_not()
{
    // (the freezer confirms, a's role and CPUs after its answer, h started, a thawed)
    for (confirms, phase, held, started, thawed) in [
        (true, Phase::Preempted, 0, true, 0),
        (false, Phase::Primary, 4, false, 1),
    ] {
        let case = format!("confirms={confirms}");
        let (mut t, fake, gate) = engine(!confirms);
        let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4, 10).await;
        assert!(matches!(a, Response::Started { .. }), "{case}: {a:?}");
        let a_seq = t.seq_of("a");

        // h may preempt a: a's freezer is FREEZING, the engine is back, h waits.
        let (h, mut h_rx) = submit(&mut t, 2, 1, "h", 2, 16).await;
        assert!(matches!(h, Response::Queued { .. }), "{case}: {h:?}");
        let j = &t.engine.jobs[&a_seq];
        assert_eq!((j.phase, j.cpus.len()), (Phase::Primary, 4), "{case}");
        assert!(j.freezing.is_some(), "{case}");
        assert!(h_rx.try_recv().is_err(), "{case}: h told more than Queued");
        // Another event meanwhile plans again: no second freeze, no start of h.
        t.engine.handle(Event::Tick {
            generation: t.engine.tick_generation,
        });
        assert_eq!(count(&fake, "freeze job-a true"), 1, "{case}");
        assert!(
            !fake.calls().iter().any(|c| c.starts_with("set_cpus job-h")),
            "{case}: h waits in its cgroups, not started"
        );

        // The freezer answers.
        gate.0.open();
        until_frozen(&mut t).await;
        let j = &t.engine.jobs[&a_seq];
        assert_eq!((j.phase, j.cpus.len()), (phase, held), "{case}");
        assert!(j.freezing.is_none(), "{case}");
        assert_eq!(count(&fake, "freeze job-a false"), thawed, "{case}");
        let h = h_rx.try_recv();
        assert_eq!(
            matches!(h, Ok(Response::Started { .. })),
            started,
            "{case}: {h:?}"
        );
        let role = t.store.state().rows[&a_seq].role.as_str();
        assert_eq!(
            role,
            if confirms { "preempted" } else { "primary" },
            "{case}"
        );
        // No CPU in two primaries.
        let primaries: Vec<_> = t
            .engine
            .jobs
            .values()
            .filter(|j| j.phase == Phase::Primary)
            .map(|j| j.cpus)
            .collect();
        let total: usize = primaries.iter().map(|c| c.len()).sum();
        let union = primaries
            .iter()
            .fold(pjw_core::CpuSet::new(), |u, c| u.union(c));
        assert_eq!(total, union.len(), "{case}: {primaries:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_suspend_says_the_freeze_is_under_way_and_takes_the_cpus_once_it_is_confirmed() {
    let (mut t, fake, gate) = engine(false);
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4, 10).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let a_seq = t.seq_of("a");
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Control {
        cred: client(UID),
        who: who(),
        job: "a".into(),
        what: Control::Suspend,
        reply,
    });
    let r = rx.await.expect("an answer");
    let Response::Done { message } = r else {
        panic!("expected Done, got {r:?}");
    };
    assert!(message.contains("is being frozen"), "{message}");
    assert_eq!(t.engine.jobs[&a_seq].phase, Phase::Primary);
    assert_eq!(t.engine.free().len(), 0);
    gate.0.open();
    until_frozen(&mut t).await;
    assert_eq!(t.engine.jobs[&a_seq].phase, Phase::Suspended);
    assert_eq!(t.engine.free().len(), 4);
    assert_eq!(count(&fake, "freeze job-a true"), 1);
}

/// A resume that comes before the freezer confirmed the suspension (the suspend said "being
/// frozen") cancels it: the answer says so, and when the freezer confirms, the job is thawed and
/// runs on in its role with its CPUs (the chaos test met this in the v1 guest: the resume was
/// refused as "not suspended").
#[tokio::test(flavor = "current_thread")]
async fn a_resume_before_the_freezer_confirms_a_suspend_cancels_it() {
    let (mut t, fake, gate) = engine(false);
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4, 10).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let a_seq = t.seq_of("a");
    let control = |t: &mut TestEngine, what| {
        let (reply, rx) = oneshot::channel();
        t.engine.handle(Event::Control {
            cred: client(UID),
            who: who(),
            job: "a".into(),
            what,
            reply,
        });
        rx
    };
    let r = control(&mut t, Control::Suspend).await.expect("an answer");
    assert!(
        matches!(&r, Response::Done { message } if message.contains("is being frozen")),
        "{r:?}"
    );
    let r = control(&mut t, Control::Resume).await.expect("an answer");
    assert!(
        matches!(&r, Response::Done { message } if message.contains("suspension is cancelled")),
        "{r:?}"
    );
    gate.0.open();
    until_frozen(&mut t).await;
    assert_eq!(t.engine.jobs[&a_seq].phase, Phase::Primary);
    assert_eq!(t.engine.free().len(), 0, "a keeps its cpus");
    assert_eq!(count(&fake, "freeze job-a false"), 1, "{:?}", fake.calls());
    // Nothing pending now: a second resume is refused as before.
    let r = control(&mut t, Control::Resume).await.expect("an answer");
    assert!(
        matches!(&r, Response::Error { message, .. } if message.contains("is not suspended")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_that_ends_while_its_freeze_is_under_way_is_thawed_so_it_can_exit() {
    let (mut t, fake, gate) = engine(false);
    let (a, _a) = submit(&mut t, 1, std::process::id(), "a", 4, 10).await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let a_seq = t.seq_of("a");
    fake.state().fail.push("kill");
    let (h, _h) = submit(&mut t, 2, 1, "h", 2, 16).await;
    assert!(matches!(h, Response::Queued { .. }), "{h:?}");
    // Its main process exits while the freezer is FREEZING (the kill fails: leftovers stay).
    t.engine.handle(Event::MainExited { seq: a_seq });
    assert!(t.engine.jobs[&a_seq].end.ending);
    gate.0.open();
    until_frozen(&mut t).await;
    assert_eq!(count(&fake, "freeze job-a false"), 1);
    assert_ne!(t.engine.jobs[&a_seq].phase, Phase::Preempted);
}
