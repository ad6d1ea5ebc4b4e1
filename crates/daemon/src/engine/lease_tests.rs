//! Leases in the engine, on a fake clock and a collecting asker: a registered job is asked
//! about at each tick; no answer never ends it (one with a process is renewed); its lease
//! running out, or its manager saying it is gone, ends it with that reason.

use pjw_core::lease::Word;
use pjw_proto::{RegisterRequest, Response};
use tokio::sync::mpsc;

use super::{Cred, Event, Who};
use crate::lease::Asker;
use crate::test_support::TestEngine;

const ROOT: Cred = Cred {
    pid: 1,
    uid: 0,
    gid: 0,
};

fn register(t: &mut TestEngine, job: &str, wlm: &str) -> i64 {
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn: 1,
        cred: ROOT,
        who: Who {
            name: "root".into(),
            admin: false,
            named: Some((1000, 1000)),
        },
        req: RegisterRequest {
            job: job.into(),
            wlm: wlm.into(),
            user: "someone".into(),
            cpus: 1,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply,
    });
    let r = rx.try_recv().expect("an answer");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    t.seq_of(&format!("{wlm}:{job}"))
}

fn reason(t: &TestEngine, seq: i64) -> Option<String> {
    t.store.state().rows[&seq].end_reason.clone()
}

#[tokio::test(flavor = "current_thread")]
async fn no_answer_never_ends_a_job_a_gone_answer_or_an_expired_lease_does() {
    let mut t = TestEngine::with_config("[lease]\ncheck_interval = \"10s\"\nduration = \"60s\"\n");
    let (asker, asked) = Asker::collecting();
    t.engine.set_asker(asker);
    let a = register(&mut t, "7", "slurm");
    let b = register(&mut t, "8", "slurm");
    let c = register(&mut t, "9", "pbs");
    t.engine.handle(Event::LeaseTick);
    // Slurm's jobs are asked about in one batch; PBS is not asked (its lease alone).
    let batch = asked.try_recv().expect("an ask");
    let ids: Vec<(i64, &str)> = batch.iter().map(|j| (j.seq, j.id.as_str())).collect();
    assert_eq!(ids, [(a, "7"), (b, "8")]);
    let st = t.engine.status();
    let lease = |id: &str| {
        st.jobs
            .iter()
            .find(|j| j.id == id)
            .and_then(|j| j.lease.clone())
            .unwrap()
    };
    assert!(lease("slurm:7").asked && !lease("pbs:9").asked);
    assert_eq!(
        lease("pbs:9").expires_ms,
        Some(lease("pbs:9").renewed_ms + 60_000)
    );

    // The controller stops answering; job 8 has a process, 7 and 9 are held with none.
    if let Some(j) = t.engine.jobs.get_mut(&b) {
        j.prof.last = Some(pjw_store::Sample {
            procs: Some(1),
            ..Default::default()
        });
    }
    let silent = |t: &mut TestEngine| {
        let none = |s| {
            (
                s,
                Word::NoAnswer("squeue did not answer within 30 s".into()),
            )
        };
        t.engine.handle(Event::LeaseWords(vec![none(a), none(b)]));
    };
    t.clock.advance(30_000);
    silent(&mut t);
    t.engine.handle(Event::LeaseTick);
    assert!(reason(&t, a).is_none() && reason(&t, b).is_none() && reason(&t, c).is_none());
    let st = t.engine.status();
    let word = st
        .jobs
        .iter()
        .find(|j| j.id == "slurm:7")
        .and_then(|j| j.lease.clone());
    assert_eq!(
        word.and_then(|l| l.word).as_deref(),
        Some("no answer: squeue did not answer within 30 s")
    );
    // Past the lease: the held jobs without a word or a process end; the job with a process
    // was renewed at every look and runs on.
    t.clock.advance(31_000);
    silent(&mut t);
    t.engine.handle(Event::LeaseTick);
    assert!(
        reason(&t, a).is_some_and(|r| r.starts_with("lease: expired (no word from slurm")),
        "{:?}",
        reason(&t, a)
    );
    assert!(reason(&t, c).is_some_and(|r| r.starts_with("lease: expired (no word from pbs")));
    assert!(reason(&t, b).is_none());
    assert!(t.engine.jobs.contains_key(&b) && !t.engine.jobs.contains_key(&a));
    // The controller answers: job 8 is gone. It ends with Slurm's word, its CPUs free.
    let free = t.engine.status().free_cpus.len();
    t.engine
        .handle(Event::LeaseWords(vec![(b, Word::Gone("COMPLETED".into()))]));
    assert_eq!(
        reason(&t, b).as_deref(),
        Some("lease: slurm says COMPLETED")
    );
    assert!(!t.engine.jobs.contains_key(&b));
    assert_eq!(t.engine.status().free_cpus.len(), free + 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_word_that_the_job_runs_renews_its_lease() {
    let mut t = TestEngine::with_config("[lease]\ncheck_interval = \"10s\"\nduration = \"20s\"\n");
    let (asker, _asked) = Asker::collecting();
    t.engine.set_asker(asker);
    let a = register(&mut t, "7", "slurm");
    for _ in 0..6 {
        t.clock.advance(10_000);
        t.engine.handle(Event::LeaseTick);
        t.engine.handle(Event::LeaseWords(vec![(
            a,
            Word::Running("RUNNING".into()),
        )]));
    }
    assert!(reason(&t, a).is_none(), "{:?}", reason(&t, a));
    assert!(t.engine.jobs.contains_key(&a));
    // The start-time statistics counted the start, and the end of none.
    let s = t.engine.start_figures();
    assert_eq!((s.total.started, s.total.ended), (1, 0));
}
