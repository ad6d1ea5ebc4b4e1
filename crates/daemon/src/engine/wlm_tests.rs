//! Table tests of a manager's registration repeated after a daemon restart, without root: the
//! held form (a prolog's, no process) and the attached form get their job back, queued or
//! started; anything else with the same id is a clash.

use pjw_proto::{ErrorCode, RegisterRequest, Response};
use tokio::sync::mpsc;

use super::{Cred, Event, Who};
use crate::test_support::TestEngine;

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

fn register_req(job: &str, cpus: u32, attach: bool) -> RegisterRequest {
    RegisterRequest {
        job: job.into(),
        wlm: "slurm".into(),
        user: "someone".into(),
        cpus,
        mem: None,
        name: None,
        attach,
        gpus: None,
    }
}

/// Register from process `pid` on connection `conn`; the first answer and the channel.
fn register(
    t: &mut TestEngine,
    conn: u64,
    pid: u32,
    req: RegisterRequest,
) -> (Response, mpsc::UnboundedReceiver<Response>) {
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn,
        cred: Cred { pid, ..ROOT },
        who: root_who(),
        req,
        reply,
    });
    let first = rx.try_recv().expect("an answer");
    (first, rx)
}

/// The engine after a restart on the same store and cgroups.
fn restarted(t: TestEngine) -> TestEngine {
    let mut again = t.restart();
    again.engine.recover().expect("recover");
    again
}

#[tokio::test(flavor = "current_thread")]
async fn a_held_registration_repeated_after_a_restart_gets_its_queued_place_back() {
    let mut t = TestEngine::new();
    // Another manager job holds every CPU (nothing preempts one), so this one waits.
    let (a, _a) = register(&mut t, 1, 4241, register_req("6", 4, false));
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let (r, _rx) = register(&mut t, 2, 4242, register_req("7", 2, false));
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");

    // The daemon dies; the prolog's client registers again once it is back.
    let mut t = restarted(t);
    let seq = t.seq_of("slurm:7");
    assert!(t.engine.jobs[&seq].client.waiter.is_none());
    let (r, _rx) = register(&mut t, 3, 4243, register_req("7", 2, false));
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    let j = &t.engine.jobs[&seq];
    assert!(j.client.waiter.is_some() && j.starter.held && j.client.reconnect_by.is_none());
    assert_eq!(t.engine.jobs.len(), 2, "no second job");

    // While that client waits, the same registration from another is a clash.
    let (r, _rx) = register(&mut t, 4, 4244, register_req("7", 2, false));
    assert!(
        matches!(
            r,
            Response::Error {
                code: ErrorCode::Conflict,
                ..
            }
        ),
        "{r:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_started_held_job_registered_again_is_told_its_cpus_and_an_attach_is_a_clash() {
    let mut t = TestEngine::new();
    let (r, _rx) = register(&mut t, 1, 4242, register_req("8", 2, false));
    let Response::Started { cpus, .. } = r else {
        panic!("expected a start, got {r:?}");
    };
    // The answer was lost with the daemon: asked again, the same CPUs.
    let mut t = restarted(t);
    let seq = t.seq_of("slurm:8");
    assert!(t.engine.jobs[&seq].starter.held, "recovered as held");
    let (r, _rx) = register(&mut t, 2, 4243, register_req("8", 2, false));
    assert!(
        matches!(&r, Response::Started { cpus: c, .. } if *c == cpus),
        "{r:?}"
    );
    assert_eq!(
        (t.engine.jobs.len(), t.seq_of("slurm:8")),
        (1, seq),
        "the same job, no second one"
    );
    // Nor is one asking for other CPUs (a second job under a reused id, not a repeat).
    let (r, _rx) = register(&mut t, 4, 4245, register_req("8", 3, false));
    assert!(
        matches!(
            r,
            Response::Error {
                code: ErrorCode::Conflict,
                ..
            }
        ),
        "{r:?}"
    );
    // An attached registration of that id from some process is not the same registration.
    let (r, _rx) = register(&mut t, 3, std::process::id(), register_req("8", 2, true));
    assert!(
        matches!(
            r,
            Response::Error {
                code: ErrorCode::Conflict,
                ..
            }
        ),
        "{r:?}"
    );
}

/// `end` of a bare id while the manager's job with that id is registered names the job and
/// is an error (a hook passing `9301` for `slurm:9301` must fail, not leave the job holding
/// its CPUs); an id no job has is simply not found; the namespaced id ends the job.
#[tokio::test(flavor = "current_thread")]
async fn ending_a_bare_id_names_the_registered_job() {
    let mut t = TestEngine::new();
    let (r, _rx) = register(&mut t, 1, 0, register_req("9301", 1, false));
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let end = |t: &mut TestEngine, job: &str| {
        let (reply, mut rx) = tokio::sync::oneshot::channel();
        t.engine.handle(Event::Control {
            cred: ROOT,
            who: root_who(),
            job: job.into(),
            what: super::Control::End,
            reply,
        });
        rx.try_recv().ok()
    };
    // (id, error code, the message names)
    let table = [
        ("9301", ErrorCode::Invalid, "slurm:9301"),
        ("9302", ErrorCode::NotFound, "no registered job 9302"),
        (
            "sge:9301",
            ErrorCode::NotFound,
            "no registered job sge:9301",
        ),
    ];
    for (id, code, names) in table {
        match end(&mut t, id) {
            Some(Response::Error { code: c, message }) => {
                assert_eq!(c, code, "{id}: {message}");
                assert!(message.contains(names), "{id}: {message}");
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert!(
        t.engine.seq_of("slurm:9301").is_some(),
        "the job is still there"
    );
}

/// Issue 25, N3: a claim taken in its owner's form (`pbs:124.srv_u1001`, another user held
/// `pbs:124.srv` first) is found by adoption under the manager's own id, for its owner only;
/// an id merely ending like another user's form, or with no namespace, is left as it is.
#[test]
fn a_claim_in_its_owners_form_is_adopted_under_the_managers_id() {
    use super::wlm::target_names;
    let names = |id: &str, tag: &str, uid| target_names(id, Some(tag), uid);
    assert_eq!(
        names("pbs:124.srv_u1001", "pbs:124.srv", 1001),
        ("pbs".to_string(), "124.srv".to_string())
    );
    assert_eq!(
        names("lsf:4242_u1001", "lsf:4242", 1001),
        ("lsf".to_string(), "4242".to_string())
    );
    assert_eq!(
        names("lsf:4242_u1001", "lsf:4242", 1002),
        ("lsf".to_string(), "4242_u1001".to_string())
    );
    assert_eq!(
        names("pbs:124.srv", "pbs:124.srv", 1000),
        ("pbs".to_string(), "124.srv".to_string())
    );
    assert_eq!(
        target_names("x_u7", None, 7),
        (String::new(), "x_u7".to_string())
    );
}

/// Review 4, L3: a squatted claim too long for its owner's form (`pbs:<id>_u1001` cut to 64
/// characters) is still found under the whole id its tasks name, which its tag keeps; a tag that
/// does not begin with the cut claim changes nothing.
#[test]
fn a_long_squatted_claim_is_adopted_under_its_whole_id() {
    use super::wlm::target_names;
    let whole = format!("1234.{}", "s".repeat(55));
    let own = pjw_core::JobId::in_namespace("pbs", &whole)
        .expect("a 60-character PBS id is valid")
        .for_owner(1001);
    let tag = format!("pbs:{whole}");
    assert!(!own.as_str().contains(&whole), "the owner's form was cut");
    assert_eq!(
        target_names(own.as_str(), Some(&tag), 1001),
        ("pbs".to_string(), whole.clone())
    );
    assert_eq!(
        target_names(own.as_str(), Some("pbs:9999.other"), 1001)
            .1
            .len(),
        own.as_str().len() - "pbs:".len() - "_u1001".len()
    );
}
