//! Time limits in the engine, on the recording fake cgroup driver and a fake clock: a job is
//! killed once it has run its limit out (not before), time it spends suspended does not count,
//! its end is recorded as a time limit, and its user's watcher is told.

use pjw_core::time_limit::LimitSource;
use pjw_proto::{ErrorCode, Response, RunRequest};
use tokio::sync::oneshot;

use super::{Control, Event};
use crate::test_support::{
    client, run_request, who, FakeCgroups, Gate, Live, OpenOnDrop, TestEngine,
};

const UID: u32 = 1000;

async fn start_limited(t: &mut TestEngine, id: &str, limit_s: u64) -> i64 {
    let req = RunRequest {
        time_limit_s: Some(limit_s),
        ..run_request(id, 1)
    };
    let (r, _rx) = t.submit(1, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    t.seq_of(id)
}

fn tick(t: &mut TestEngine) {
    t.engine.handle(Event::Tick {
        generation: t.engine.tick_generation,
    });
}

/// The store's writes of the time counted, in order (refused ones end in ` !`).
fn time_writes(t: &TestEngine) -> Vec<String> {
    t.store
        .state()
        .calls
        .iter()
        .filter(|c| c.starts_with("set_times_ran"))
        .cloned()
        .collect()
}

fn kills(fake: &FakeCgroups) -> usize {
    fake.calls()
        .iter()
        .filter(|c| c.starts_with("kill "))
        .count()
}

async fn control(t: &mut TestEngine, id: &str, what: Control) {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Control {
        cred: client(UID),
        who: who(),
        job: id.into(),
        what,
        reply,
    });
    let r = rx.await.expect("an answer");
    assert!(matches!(r, Response::Done { .. }), "{r:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_is_killed_at_its_time_limit_and_not_a_moment_before() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let seq = start_limited(&mut t, "a", 60).await;
    // The engine armed its timer for the limit.
    assert!(t
        .engine
        .next_time_limit()
        .is_some_and(|d| d.as_millis() == 60_001));
    t.clock.advance(59_000);
    tick(&mut t);
    // What would act did run (the job was looked at), and did nothing yet.
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(1_001)
    );
    assert_eq!(kills(&fake), 0);
    assert!(t.engine.jobs.contains_key(&seq));
    // `pjw status` tells the limit and what is left of it.
    let st = t.engine.status();
    assert_eq!(
        (st.jobs[0].time_limit_s, st.jobs[0].time_left_s),
        (Some(60), Some(1))
    );
    t.clock.advance(1_000);
    tick(&mut t);
    // At its limit: SIGTERM to its processes (on a blocking thread), the kill `kill_wait`
    // (30 s) later.
    t.signals_done().await;
    assert!(
        fake.calls().contains(&"signal job-a 15".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(kills(&fake), 0);
    assert!(
        t.engine.jobs.contains_key(&seq),
        "it may end on its own meanwhile"
    );
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(30_001)
    );
    t.clock.advance(29_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 0);
    t.clock.advance(1_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 1, "{:?}", fake.calls());
    assert!(
        !t.engine.jobs.contains_key(&seq),
        "its cgroup emptied: it ended"
    );
    let reason = t.store.state().rows[&seq].end_reason.clone();
    assert_eq!(
        reason.as_deref(),
        Some("killed at its time limit (0:01:00)")
    );
    // Its user's watcher is told how it ended.
    let o = t.engine.outcome(client(UID), "a");
    let Response::Outcome(o) = o else {
        panic!("{o:?}")
    };
    assert_eq!(
        o.ended.as_deref(),
        Some("killed at its time limit (0:01:00)")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn time_suspended_does_not_count_against_the_limit() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.cfg.kill_wait_s = 0;
    let seq = start_limited(&mut t, "a", 60).await;
    t.clock.advance(20_000);
    control(&mut t, "a", Control::Suspend).await;
    assert_eq!(
        t.engine.next_time_limit(),
        None,
        "a frozen job does not run towards it"
    );
    t.clock.advance(100_000);
    tick(&mut t);
    control(&mut t, "a", Control::Resume).await;
    t.clock.advance(39_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 0, "59 s run of 60: {:?}", fake.calls());
    assert!(t.engine.jobs.contains_key(&seq));
    t.clock.advance(1_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 1);
    let reason = t.store.state().rows[&seq].end_reason.clone();
    assert_eq!(
        reason.as_deref(),
        Some("killed at its time limit (0:01:00)")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_time_limit_is_checked_and_kept_with_the_job() {
    let mut t = TestEngine::new();
    for bad in [0, pjw_core::time_limit::MAX_SECS + 1] {
        let req = RunRequest {
            time_limit_s: Some(bad),
            ..run_request("x", 1)
        };
        let (r, _rx) = t.submit(1, std::process::id(), UID, req).await;
        let Response::Error { message, .. } = r else {
            panic!("{bad}: {r:?}")
        };
        assert!(message.starts_with("--time of"), "{message}");
    }
    t.fake_stat(std::process::id());
    let seq = start_limited(&mut t, "a", 90).await;
    assert_eq!(
        t.store
            .state()
            .time_limit
            .get(&seq)
            .map(|l| (l.limit.secs(), l.source)),
        Some((90, LimitSource::Asked))
    );
    // After a restart the job keeps its limit.
    let cg = super::cgroup_name(&TestEngine::id("a"));
    t.in_cgroup(std::process::id(), &format!("/pjw/{cg}"));
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    assert_eq!(
        t.engine.jobs[&seq].req.time_limit.map(|l| l.secs()),
        Some(90)
    );
}

/// A job waiting as an idle-class backfiller may get no CPU at all: that time is not held
/// against its limit; a backfill-only job's is, or it could run forever.
#[tokio::test(flavor = "current_thread")]
async fn backfilling_counts_only_for_a_backfill_only_job() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.cfg.kill_wait_s = 0;
    t.engine.policy.vcpus = 8;
    let (a, _a) = t
        .submit(1, std::process::id(), UID, run_request("a", 4))
        .await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    // Live main processes of their own (an ended one would end its job).
    let mut sleepers = [(); 2].map(|()| {
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep")
    });
    let mut clients = Vec::new();
    for (conn, id, placement) in [
        (2, "b", pjw_proto::Placement::Any),
        (3, "c", pjw_proto::Placement::BackfillOnly),
    ] {
        let req = RunRequest {
            time_limit_s: Some(10),
            placement,
            ..run_request(id, 1)
        };
        let (r, rx) = t
            .submit(conn, sleepers[conn as usize - 2].id(), UID, req)
            .await;
        assert!(matches!(r, Response::Started { .. }), "{id}: {r:?}");
        clients.push(rx);
    }
    let (b, c) = (t.seq_of("b"), t.seq_of("c"));
    assert_eq!(t.engine.jobs[&b].phase, pjw_core::sched::Phase::Backfill);
    assert_eq!(t.engine.jobs[&c].phase, pjw_core::sched::Phase::Backfill);
    t.clock.advance(11_000);
    tick(&mut t);
    assert!(
        t.engine.jobs.contains_key(&b),
        "b backfilled 11 s: not its own CPUs"
    );
    assert!(
        !t.engine.jobs.contains_key(&c),
        "c can only backfill: its limit counts"
    );
    let reason = t.store.state().rows[&c].end_reason.clone();
    assert_eq!(
        reason.as_deref(),
        Some("killed at its time limit (0:00:10)")
    );
    for p in &mut sleepers {
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// A backfiller that holds CPUs no primary holds runs there at full speed: its limit counts
/// (a short --time cannot buy unlimited CPU as a backfiller).
#[tokio::test(flavor = "current_thread")]
async fn a_backfiller_on_cpus_no_primary_holds_counts() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.cfg.kill_wait_s = 0;
    t.engine.policy.vcpus = 8;
    let (a, _a) = t
        .submit(1, std::process::id(), UID, run_request("a", 1))
        .await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep");
    let req = RunRequest {
        time_limit_s: Some(10),
        placement: pjw_proto::Placement::Any,
        ..run_request("wide", 4)
    };
    let (r, _rx) = t.submit(2, sleeper.id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let wide = t.seq_of("wide");
    assert_eq!(t.engine.jobs[&wide].phase, pjw_core::sched::Phase::Backfill);
    assert!(
        t.engine.next_time_limit().is_some(),
        "it counts: a timer is armed"
    );
    t.clock.advance(10_000);
    tick(&mut t);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!t.engine.jobs.contains_key(&wide), "{:?}", fake.calls());
    let reason = t.store.state().rows[&wide].end_reason.clone();
    assert_eq!(
        reason.as_deref(),
        Some("killed at its time limit (0:00:10)")
    );
}

/// What a job leaves running when leftovers are not killed is killed at its limit; a job
/// whose leftovers pjw is killing already ended on its own, not at its limit.
#[tokio::test(flavor = "current_thread")]
async fn leftovers_run_no_longer_than_the_limit() {
    for kill_leftovers in [false, true] {
        let fake = FakeCgroups::default();
        let mut t = TestEngine::recording(fake.clone());
        t.engine.cfg.kill_wait_s = 0;
        t.engine.cfg.kill_leftovers = kill_leftovers;
        let seq = start_limited(&mut t, "a", 60).await;
        t.engine.handle(Event::MainExited { seq });
        let before = kills(&fake);
        t.clock.advance(61_000);
        tick(&mut t);
        let reason = t.store.state().rows[&seq].end_reason.clone();
        if kill_leftovers {
            assert_eq!(before, 1, "pjw killed the leftovers at the main exit");
            assert_eq!(reason.as_deref(), Some("exited"), "{:?}", fake.calls());
        } else {
            assert_eq!((before, kills(&fake)), (0, 1), "{:?}", fake.calls());
            assert_eq!(
                reason.as_deref(),
                Some("killed at its time limit (0:01:00)")
            );
        }
    }
}

/// The node's rules: a job that asks for no limit gets `default_time`, and is told so at its
/// end; a user asking for more than `max_time` is refused (root is not); a manager's job that
/// root submits (a job starter) keeps the manager's limits, and a user claiming to be one
/// (`--from-env`: nothing checks the claim) gets the node's all the same.
#[tokio::test(flavor = "current_thread")]
async fn the_nodes_default_and_maximum_limits_hold_users() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording_with_config(
        fake.clone(),
        "[job]\ndefault_time = \"2m\"\nmax_time = \"1h\"\n",
    );
    let (r, _rx) = t
        .submit(1, std::process::id(), UID, run_request("plain", 1))
        .await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = t.seq_of("plain");
    assert!(
        t.store
            .state()
            .calls
            .contains(&format!("set_time_limit {seq} 120 node-default")),
        "{:?}",
        t.store.state().calls
    );
    let st = t.engine.status();
    assert_eq!(
        (st.jobs[0].time_limit_s, st.jobs[0].time_limit_default),
        (Some(120), true)
    );
    // More than the maximum: refused, with the node's rule named.
    let too_long = RunRequest {
        time_limit_s: Some(7200),
        ..run_request("long", 1)
    };
    let (r, _rx) = t
        .submit(2, std::process::id() + 1, UID, too_long.clone())
        .await;
    let Response::Error { code, message } = r else {
        panic!("{r:?}")
    };
    assert_eq!(code, ErrorCode::Denied);
    assert_eq!(
        message,
        "--time 2:00:00 is more than this node lets a job run (1:00:00, job.max_time)"
    );
    // Root may ask for more.
    let p = Live::new(3);
    let (r, _rx) = t.submit(3, p.pid(0), 0, too_long).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(
        t.engine.jobs[&t.seq_of("long")]
            .req
            .time_limit
            .map(|l| l.secs()),
        Some(7200)
    );
    // A manager's job root's job starter submits: its manager's limits, none of pjw's default.
    let managed = |id: &str| RunRequest {
        wlm: Some("slurm:41".into()),
        ..run_request(id, 1)
    };
    let (r, _rx) = t.submit(4, p.pid(1), 0, managed("managed")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&t.seq_of("managed")].req.time_limit, None);
    // A user's claim to be a manager's job lifts nothing: the default, and the maximum holds.
    let claim = RunRequest {
        time_limit_s: Some(30 * 86_400),
        ..managed("claim")
    };
    let (r, _rx) = t.submit(5, p.pid(2), UID, claim).await;
    let Response::Error { code, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(code, ErrorCode::Denied);
    let (r, _rx) = t.submit(6, p.pid(2), UID, managed("claim")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let claimed = &t.engine.jobs[&t.seq_of("claim")];
    assert_eq!(
        (
            claimed.req.time_limit.map(|l| l.secs()),
            claimed.time_source
        ),
        (Some(120), LimitSource::NodeDefault)
    );
    // At the default limit: ended, and the end says whose limit it was.
    t.clock.advance(120_000);
    tick(&mut t);
    t.signals_done().await;
    assert!(fake.calls().contains(&"signal job-plain 15".to_string()));
    t.clock.advance(30_000);
    tick(&mut t);
    assert_eq!(
        t.store.state().rows[&seq].end_reason.as_deref(),
        Some("killed at its time limit (0:02:00, the node's default)")
    );
}

/// The running time counted is written every minute of it, and a restart goes on from what
/// was written: it gives the job back at most that minute, never the whole limit; a limit
/// that was the node's default is still the node's after the restart.
#[tokio::test(flavor = "current_thread")]
async fn a_restart_goes_on_from_the_running_time_written() {
    let mut t = TestEngine::with_config("[job]\ndefault_time = \"5m\"\n");
    t.fake_stat(std::process::id());
    let (r, _rx) = t
        .submit(1, std::process::id(), UID, run_request("a", 1))
        .await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = t.seq_of("a");
    // The timer wakes for the write before the limit.
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(60_001)
    );
    for _ in 0..2 {
        t.clock.advance(60_000);
        tick(&mut t);
    }
    t.clock.advance(30_000);
    tick(&mut t);
    assert_eq!(
        time_writes(&t),
        [
            format!("set_times_ran {seq}:60000"),
            format!("set_times_ran {seq}:120000")
        ]
    );
    let cg = super::cgroup_name(&TestEngine::id("a"));
    t.in_cgroup(std::process::id(), &format!("/pjw/{cg}"));
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    t.clock.advance(10_000);
    tick(&mut t);
    assert_eq!(
        t.engine.status().jobs[0].time_left_s,
        Some(170),
        "300 s less the 120 s written and the 10 s since the restart"
    );
    assert_eq!(t.engine.jobs[&seq].time_source, LimitSource::NodeDefault);
    // A clean stop writes what was counted since: the next start gives nothing back.
    t.clock.advance(20_000);
    t.engine.shutdown();
    assert_eq!(
        t.store.state().time_limit[&seq].ran_ms,
        150_000,
        "120 s written before, 30 s since the restart"
    );
}

/// A store that refuses the write of the time counted: tried again 10 s later, not at every
/// look, and nothing else of the job is written again meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_write_of_the_time_counted_is_tried_again_later_not_at_every_look() {
    let mut t = TestEngine::new();
    let seq = start_limited(&mut t, "a", 300).await;
    t.clock.advance(60_000);
    t.store.state().fail_next = 1;
    tick(&mut t);
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(10_001),
        "the next try in 10 s"
    );
    t.clock.advance(5_000);
    tick(&mut t);
    assert_eq!(time_writes(&t), [format!("set_times_ran {seq}:60000 !")]);
    t.clock.advance(5_000);
    tick(&mut t);
    assert_eq!(
        time_writes(&t),
        [
            format!("set_times_ran {seq}:60000 !"),
            format!("set_times_ran {seq}:70000")
        ]
    );
    assert!(
        !t.engine.jobs[&seq].store_dirty,
        "no row marked to write again"
    );
}

/// A daemon restart never ends a job early: the limit counts again from the running time
/// last written (none, in its first minute).
#[tokio::test(flavor = "current_thread")]
async fn a_restart_never_kills_a_job_early() {
    let mut t = TestEngine::new();
    t.fake_stat(std::process::id());
    let seq = start_limited(&mut t, "a", 60).await;
    t.clock.advance(50_000);
    let cg = super::cgroup_name(&TestEngine::id("a"));
    t.in_cgroup(std::process::id(), &format!("/pjw/{cg}"));
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    t.clock.advance(20_000);
    tick(&mut t);
    assert!(
        t.engine.jobs.contains_key(&seq),
        "70 s after its start, 20 s after the restart"
    );
    assert_eq!(
        t.engine.status().jobs[0].time_left_s,
        Some(40),
        "counted from the restart"
    );
}

/// The warning is best effort and the kill does not depend on it: a SIGTERM the kernel refuses
/// still leads to the kill at the deadline. The grace is `kill_wait` or the limit, whichever is
/// shorter: a job that claims 2 s runs at most 4 s.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_warning_still_ends_in_the_kill_within_a_grace_no_longer_than_the_limit() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    fake.state().fail.push("signal");
    let seq = start_limited(&mut t, "a", 2).await;
    t.clock.advance(2_000);
    tick(&mut t);
    t.signals_done().await;
    assert!(
        fake.calls().contains(&"signal job-a 15 !".to_string()),
        "{:?}",
        fake.calls()
    );
    assert_eq!(kills(&fake), 0);
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(2_001),
        "the grace is the 2-s limit, not kill_wait's 30 s"
    );
    t.clock.advance(2_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 1, "{:?}", fake.calls());
    assert!(!t.engine.jobs.contains_key(&seq));
}

/// What a warned job leaves when its main process dies of the SIGTERM (a wrapper script) has
/// until the deadline to finish, then is killed.
#[tokio::test(flavor = "current_thread")]
async fn a_warned_jobs_leftovers_get_the_grace_then_the_kill() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let seq = start_limited(&mut t, "a", 60).await;
    t.clock.advance(60_000);
    tick(&mut t);
    t.signals_done().await;
    assert!(fake.calls().contains(&"signal job-a 15".to_string()));
    // The wrapper dies of the SIGTERM; its program is still in the job.
    t.engine.handle(Event::MainExited { seq });
    assert_eq!(kills(&fake), 0, "leftovers wait for the deadline");
    assert!(t.engine.jobs.contains_key(&seq));
    t.clock.advance(30_000);
    tick(&mut t);
    assert_eq!(kills(&fake), 1, "{:?}", fake.calls());
    assert!(!t.engine.jobs.contains_key(&seq));
    let reason = t.store.state().rows[&seq].end_reason.clone();
    assert_eq!(
        reason.as_deref(),
        Some("killed at its time limit (0:01:00)")
    );
}

/// Many limited jobs, one write: the first job whose unwritten time reaches a minute takes
/// every job with half a minute or more along in one transaction, and their writes fall due
/// together from then on.
#[tokio::test(flavor = "current_thread")]
async fn the_time_counted_of_many_jobs_is_written_in_one_transaction() {
    let mut t = TestEngine::new();
    let p = Live::new(3);
    let limited = |id: &str| RunRequest {
        time_limit_s: Some(3600),
        ..run_request(id, 1)
    };
    let (r, _a) = t.submit(1, p.pid(0), UID, limited("a")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    t.clock.advance(20_000);
    let (r, _b) = t.submit(2, p.pid(1), UID, limited("b")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    t.clock.advance(25_000);
    let (r, _c) = t.submit(3, p.pid(2), UID, limited("c")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let (a, b, c) = (t.seq_of("a"), t.seq_of("b"), t.seq_of("c"));
    // At 60 s a is due; b (40 s unwritten) goes along, c (15 s) waits.
    t.clock.advance(15_000);
    tick(&mut t);
    assert_eq!(
        time_writes(&t),
        [format!("set_times_ran {a}:60000 {b}:40000")]
    );
    // A minute later a and b are due together, and c (75 s) goes with them.
    t.clock.advance(60_000);
    tick(&mut t);
    assert_eq!(
        time_writes(&t)[1],
        format!("set_times_ran {a}:120000 {b}:100000 {c}:75000")
    );
    assert_eq!(
        t.engine.next_time_limit().map(|d| d.as_millis()),
        Some(60_001),
        "one wake a minute for all three"
    );
}

/// The attack: a job's SIGTERM at its time limit lists the processes of its cgroup by name, off
/// the engine's thread. The job ends (its processes died of it) while the pass is still on its
/// way; another user submits a job of the same id at once. Were its cgroups made and its client
/// moved in, the late pass would signal the new job's processes. The engine answers requests
/// while the pass waits, and the new job neither waits in its cgroups nor starts until the pass
/// has reported; then it starts.
#[tokio::test(flavor = "current_thread")]
async fn a_late_time_limit_sigterm_never_reaches_a_new_job_of_the_same_name() {
    let fake = FakeCgroups::default();
    let gate = OpenOnDrop(Gate::default());
    fake.state().slow_signal = Some(gate.0.clone());
    let mut t = TestEngine::recording(fake.clone());
    let seq = start_limited(&mut t, "a", 60).await;
    t.clock.advance(60_000);
    tick(&mut t);
    // The engine is back while the pass waits: nothing signalled yet, the kill planned.
    assert!(!fake.calls().iter().any(|c| c.starts_with("signal ")));
    assert_eq!(t.engine.signals_under_way(), 1);
    assert_eq!(
        t.engine.status().jobs.len(),
        1,
        "a request is answered meanwhile"
    );
    // Its processes die of the SIGTERM: its cgroup is empty and the job ends.
    fake.state()
        .jobs
        .get_mut("job-a")
        .expect("cgroup")
        .1
        .clear();
    t.engine.handle(Event::MainExited { seq });
    assert!(!t.engine.jobs.contains_key(&seq), "ended");
    t.removals_done().await;
    // Another user's job of the same id waits in the queue, outside any cgroup of that name.
    let p = Live::new(1);
    let (r, _rx) = t.submit(7, p.pid(0), 2000, run_request("a", 1)).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    let made_after_end = |fake: &FakeCgroups| {
        let calls = fake.calls();
        let end = calls
            .iter()
            .rposition(|c| c.starts_with("remove_job job-a"))
            .expect("removed");
        calls[end..]
            .iter()
            .any(|c| c.starts_with("create_job job-a") || c.starts_with("add_process job-a"))
    };
    assert!(!made_after_end(&fake), "{:?}", fake.calls());
    // The pass reports: the name is free, and the new job starts in new cgroups.
    gate.0.open();
    t.signals_done().await;
    assert!(fake.calls().contains(&"signal job-a 15".to_string()));
    assert_eq!(t.engine.signals_under_way(), 0);
    assert!(made_after_end(&fake), "{:?}", fake.calls());
    let new = t.seq_of("a");
    assert!(
        new != seq && t.engine.jobs[&new].started.is_some(),
        "the new job started"
    );
}
