//! Table tests of a queued job waiting in its own cgroups (decision (cm)), on the recording
//! fake cgroup driver and the fake tree: made and its client moved in when admission says
//! wait (in the idle class, under tighter memory and task limits); its start gives it its own
//! limits on its CPUs (a backfill start stays idle); every way out of the
//! queue removes them once the client has left (killed after the linger); a failed
//! pre-placement starts the job the old way; recovery neither leaves them behind nor takes
//! the queued job for a running one; the memory governor does not read them.

use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{Placement, Response, RunRequest};
use pjw_store::StoredState;
use tokio::sync::{mpsc, oneshot};

use super::preplace::{QueuedCgroups, LINGER, WAITING_MEM, WAITING_PIDS};
use super::{cgroup_name, Control, Event};
use crate::test_support::{client, run_request, who, FakeCgroups, TestEngine};

const UID: u32 = 1000;
/// The queued client's process: a live one (its exit is watched once it starts), with a
/// status of the test's making in the fake /proc.
const B: u32 = 1;

/// The writes to job `job`'s cgroups so far.
fn calls_of(fake: &FakeCgroups, job: &str) -> Vec<String> {
    let key = format!(" job-{job}");
    fake.calls()
        .into_iter()
        .filter(|c| c.contains(&key))
        .collect()
}

/// `a` runs on the whole node (its main process alive: this test's).
async fn a_runs(t: &mut TestEngine) {
    t.fake_stat(std::process::id());
    let (a, _a) = t
        .submit(1, std::process::id(), UID, run_request("a", 4))
        .await;
    assert!(matches!(a, Response::Started { .. }), "{a:?}");
}

/// `req` waits from process [`B`] of user `uid`; its channel.
async fn b_waits(
    t: &mut TestEngine,
    uid: u32,
    req: RunRequest,
) -> mpsc::UnboundedReceiver<Response> {
    t.fake_stat(B);
    let (b, b_rx) = t.submit(2, B, uid, req).await;
    assert!(matches!(b, Response::Queued { .. }), "{b:?}");
    b_rx
}

/// `a` runs on the whole node; `b` (`req`) waits for it from process [`B`]. b's channel.
async fn a_runs_b_waits(t: &mut TestEngine, req: RunRequest) -> mpsc::UnboundedReceiver<Response> {
    a_runs(t).await;
    b_waits(t, UID, req).await
}

/// Job `a` ends (its main process exits; the fake empties it).
fn a_ends(t: &mut TestEngine) {
    let seq = t.seq_of("a");
    t.engine.handle(Event::MainExited { seq });
    assert!(!t.engine.jobs.contains_key(&seq), "a ended");
}

/// The client `pid` left job `job`'s cgroups on the recording fake (it exited).
fn exits(fake: &FakeCgroups, job: &str, pid: u32) {
    if let Some(j) = fake.state().jobs.get_mut(&format!("job-{job}")) {
        j.1.retain(|p| *p != pid);
    }
}

async fn control(t: &mut TestEngine, job: &str, what: Control) -> Response {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Control {
        cred: client(UID),
        who: who(),
        job: job.into(),
        what,
        reply,
    });
    rx.await.expect("an answer")
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_job_waits_in_its_cgroups_idle_and_bounded_and_its_start_gives_it_its_own_limits()
{
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let mut b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    // Made at once on the pool under the waiting limits, in the idle class, its client moved
    // in; not a started job.
    assert_eq!(
        calls_of(&fake, "b"),
        [
            format!("create_job job-b 0-3 mem {WAITING_MEM} pids {WAITING_PIDS}"),
            "set_idle job-b true".to_string(),
            format!("add_process job-b {B}")
        ]
    );
    let b = t.seq_of("b");
    assert_eq!(t.engine.jobs[&b].client.cgroups, QueuedCgroups::Ready);
    assert!(t.engine.jobs[&b].started.is_none());

    // a ends: b's hand-off gives it its own limits on its CPUs, then takes it out of the idle
    // class, before b is told Started.
    let before = fake.calls().len();
    a_ends(&mut t);
    let Some(Response::Started { cpus, backfill, .. }) = b_rx.recv().await else {
        panic!("b not started");
    };
    assert!(!backfill);
    let after: Vec<String> = fake.calls()[before..]
        .iter()
        .filter(|c| c.contains(" job-b"))
        .cloned()
        .collect();
    assert_eq!(
        after,
        [
            format!("set_limits job-b {cpus}"),
            "set_idle job-b false".to_string()
        ]
    );
    assert_eq!(cpus.len(), 2);
    let j = &t.engine.jobs[&b];
    assert_eq!((j.phase, j.cpus), (Phase::Primary, cpus));
    assert_eq!(t.store.state().rows[&b].state, StoredState::Running);
    // Its process is the job's from its start (process counts, steps).
    assert_eq!(t.engine.procs.job_of(B), Some(b));
}

#[tokio::test(flavor = "current_thread")]
async fn a_backfill_start_keeps_the_waiting_job_in_the_idle_class() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let req = RunRequest {
        placement: Placement::BackfillOnly,
        ..run_request("b", 2)
    };
    let mut b_rx = a_runs_b_waits(&mut t, req).await;
    let before = fake.calls().len();
    a_ends(&mut t);
    let Some(Response::Started { cpus, backfill, .. }) = b_rx.recv().await else {
        panic!("b not started");
    };
    assert!(backfill);
    let after: Vec<String> = fake.calls()[before..]
        .iter()
        .filter(|c| c.contains(" job-b"))
        .cloned()
        .collect();
    // Idle since it waited: its own limits on its CPUs, and it stays idle.
    assert_eq!(after, [format!("set_limits job-b {cpus}")]);
    assert_eq!(t.engine.jobs[&t.seq_of("b")].phase, Phase::Backfill);
}

#[tokio::test(flavor = "current_thread")]
async fn an_exclusive_job_waits_in_its_cgroups_but_not_where_jobs_are_cpuset_partitions() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let req = RunRequest {
        exclusive: true,
        ..run_request("b", 1)
    };
    a_runs(&mut t).await;
    let mut b_rx = b_waits(&mut t, 0, req.clone()).await;
    assert_eq!(
        calls_of(&fake, "b")[0],
        format!("create_job job-b 0-3 mem {WAITING_MEM} pids {WAITING_PIDS}")
    );
    a_ends(&mut t);
    let Some(Response::Started { cpus, .. }) = b_rx.recv().await else {
        panic!("b not started");
    };
    assert_eq!(cpus, CpuSet::parse_list("0-3").unwrap());
    assert_eq!(calls_of(&fake, "b").last().unwrap(), "set_idle job-b false");

    // Partitions on: a waiting cgroup on the pool would share an exclusive job's CPUs, which
    // the kernel refuses to a partition: placed at its start, as before.
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.partition = Some(pjw_cgroup::Partition::Root);
    a_runs(&mut t).await;
    let _c_rx = b_waits(
        &mut t,
        0,
        RunRequest {
            job_id: Some("c".into()),
            ..req
        },
    )
    .await;
    assert!(calls_of(&fake, "c").is_empty(), "{:?}", fake.calls());
    assert_eq!(
        t.engine.jobs[&t.seq_of("c")].client.cgroups,
        QueuedCgroups::None
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_pre_placement_starts_the_job_the_old_way() {
    for fails in ["create_job", "add_process"] {
        let fake = FakeCgroups::default();
        let mut t = TestEngine::recording(fake.clone());
        a_runs(&mut t).await;
        fake.state().fail.push(fails);
        let mut b_rx = b_waits(&mut t, UID, run_request("b", 2)).await;
        let b = t.seq_of("b");
        assert_eq!(
            t.engine.jobs[&b].client.cgroups,
            QueuedCgroups::None,
            "{fails}"
        );
        // Rolled back: nothing of b is left.
        assert!(!fake.state().jobs.contains_key("job-b"), "{fails}");
        fake.state().fail.clear();
        a_ends(&mut t);
        let Some(Response::Started { cpus, .. }) = b_rx.recv().await else {
            panic!("{fails}: b not started");
        };
        let tail: Vec<String> = calls_of(&fake, "b").into_iter().rev().take(2).collect();
        assert_eq!(
            tail,
            [
                format!("add_process job-b {B}"),
                format!("create_job job-b {cpus}")
            ],
            "{fails}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_job_killed_withdrawn_or_left_has_its_cgroups_removed_once_empty() {
    // (how it leaves the queue, whether its client is still in its cgroups then)
    for (how, client_left_first) in [
        ("pjw kill", false),
        ("client killed by the user", true),
        ("connection dropped, client exits", false),
    ] {
        let fake = FakeCgroups::default();
        let mut t = TestEngine::recording(fake.clone());
        let mut b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
        let b = t.seq_of("b");
        if client_left_first {
            exits(&fake, "b", B);
        }
        match how {
            "pjw kill" => {
                let r = control(&mut t, "b", Control::Kill).await;
                assert!(matches!(r, Response::Done { .. }), "{how}: {r:?}");
                assert!(
                    matches!(b_rx.recv().await, Some(Response::Error { .. })),
                    "{how}"
                );
            }
            _ => t.engine.handle(Event::ClientGone { conn: 2 }),
        }
        assert!(!t.engine.jobs.contains_key(&b), "{how}");
        assert_eq!(t.store.state().rows[&b].state, StoredState::Ended, "{how}");
        if !client_left_first {
            // Its client is still in them: they wait for it, never hand out a CPU.
            assert!(fake.state().jobs.contains_key("job-b"), "{how}");
            assert_eq!(t.engine.vacating.left.len(), 1, "{how}");
            exits(&fake, "b", B);
            t.engine.handle(Event::Vacate);
        }
        assert!(!fake.state().jobs.contains_key("job-b"), "{how}");
        assert!(t.engine.vacating.left.is_empty(), "{how}");
        assert!(
            calls_of(&fake, "b").contains(&"remove_job job-b".to_string()),
            "{how}: {:?}",
            fake.calls()
        );
        assert!(
            !calls_of(&fake, "b").iter().any(|c| c.starts_with("kill")),
            "{how}"
        );
        // a still runs on its CPUs.
        assert_eq!(t.engine.jobs[&t.seq_of("a")].cpus.len(), 4, "{how}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_client_that_stays_in_a_withdrawn_jobs_cgroups_is_killed_after_the_linger() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    // The connection drops; the process lives on in b's cgroups.
    t.engine.handle(Event::ClientGone { conn: 2 });
    t.engine.handle(Event::Vacate);
    assert!(fake.state().jobs.contains_key("job-b"));
    assert!(!calls_of(&fake, "b").iter().any(|c| c.starts_with("kill")));
    // Past the linger: killed (the fake empties it), then removed.
    tokio::time::advance(LINGER).await;
    t.engine.handle(Event::Vacate);
    assert!(
        calls_of(&fake, "b").contains(&"kill job-b".to_string()),
        "{:?}",
        fake.calls()
    );
    t.engine.handle(Event::Vacate);
    assert!(!fake.state().jobs.contains_key("job-b"));
    assert!(t.engine.vacating.left.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn an_expired_queued_job_has_its_cgroups_removed() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording_with_config(fake.clone(), "queue_ttl = 10\n");
    let mut b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    t.clock.advance(11_000);
    t.engine.handle(Event::Tick {
        generation: t.engine.tick_generation,
    });
    assert!(matches!(b_rx.recv().await, Some(Response::Error { .. })));
    exits(&fake, "b", B);
    t.engine.handle(Event::Vacate);
    assert!(
        !fake.state().jobs.contains_key("job-b"),
        "{:?}",
        fake.calls()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_per_user_queue_limit_bounds_the_cgroups_queued_jobs_hold() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording_with_config(fake.clone(), "max_queued_per_user = 1\n");
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    t.fake_stat(B + 1);
    let (c, _c_rx) = t.submit(3, B + 1, UID, run_request("c", 2)).await;
    assert!(matches!(c, Response::Error { .. }), "{c:?}");
    assert!(calls_of(&fake, "c").is_empty(), "{:?}", fake.calls());
}

#[tokio::test(flavor = "current_thread")]
async fn the_memory_governor_does_not_read_or_count_a_waiting_job() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::governed(fake.clone());
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    fake.set_stats("job-a", 1 << 20, 10);
    fake.set_stats("job-b", 1 << 20, 10);
    t.engine.handle(Event::Govern);
    let reads = fake.reads();
    // What would read b did run: a was read.
    assert!(reads.iter().any(|r| r.ends_with(" job-a")), "{reads:?}");
    assert!(!reads.iter().any(|r| r.ends_with(" job-b")), "{reads:?}");
    assert!(!calls_of(&fake, "b").iter().any(|c| c.starts_with("freeze")));
}

#[tokio::test(flavor = "current_thread")]
async fn after_a_crash_a_waiting_job_stays_queued_and_its_client_takes_its_place_back() {
    // On the fake tree: its cgroups and the client's /proc/PID/cgroup are files.
    let mut t = TestEngine::new();
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    let b_cg = cgroup_name(&TestEngine::id("b"));
    assert!(t.engine.driver.procs(&b_cg).expect("procs").contains(&B));
    t.in_cgroup(B, &format!("/pjw/{b_cg}"));
    // It waits under the waiting limits, in the idle class (review F4).
    let limits = |t: &TestEngine| {
        ["memory.max", "pids.max", "cpu.idle"].map(|f| t.job_files(&b_cg, f).join(","))
    };
    assert_eq!(
        limits(&t),
        [
            WAITING_MEM.to_string(),
            WAITING_PIDS.to_string(),
            "1".into()
        ]
    );

    // The daemon is killed -9 and comes back.
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    let b = t.seq_of("b");
    let j = &t.engine.jobs[&b];
    assert_eq!((j.phase, j.started.is_none()), (Phase::Queued, true));
    assert_eq!(j.client.cgroups, QueuedCgroups::Unsure);
    assert_eq!(t.store.state().rows[&b].state, StoredState::Queued);

    // Its client reconnects from inside b's cgroups: its place, not a step, not refused.
    let (r, mut b_rx) = t.submit(5, B, UID, run_request("b", 2)).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    // a ends: b starts, made and moved as a job without waiting cgroups (idempotent).
    let a = t.seq_of("a");
    let a_cg = cgroup_name(&TestEngine::id("a"));
    let _ = t.engine.driver.kill(&a_cg);
    t.engine.handle(Event::MainExited { seq: a });
    let Some(Response::Started { cpus, .. }) = b_rx.recv().await else {
        panic!("b not started");
    };
    assert_eq!(t.engine.driver.job_cpus(&b_cg).expect("cpus"), cpus);
    assert!(t.engine.driver.procs(&b_cg).expect("procs").contains(&B));
    // Placed the way a job without waiting cgroups is, it has its own limits (none here)
    // and has left the idle class, not kept the waiting ones.
    assert_eq!(limits(&t), ["max", "max", "0"]);
}

#[tokio::test(flavor = "current_thread")]
async fn after_a_crash_a_waiting_job_whose_client_died_leaves_no_cgroup() {
    let mut t = TestEngine::new();
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    let b_cg = cgroup_name(&TestEngine::id("b"));
    // The client dies while the daemon is down.
    let _ = t.engine.driver.kill(&b_cg);
    std::fs::remove_file(t.proc_root().join(B.to_string()).join("stat")).expect("dead");
    let mut t = t.restart();
    t.engine.recover().expect("recover");
    let b = t.engine.seq_of("b");
    assert!(b.is_none(), "b is not a job any more");
    assert!(!t.engine.driver.list_jobs().expect("list").contains(&b_cg));
    // Nor adopted as a running job: only a is.
    assert_eq!(t.engine.jobs.len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_new_job_of_a_vacating_name_waits_until_the_old_cgroups_are_gone() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    // b's connection drops; its client stays in job-b for now. a ends: the CPUs are free.
    t.engine.handle(Event::ClientGone { conn: 2 });
    a_ends(&mut t);
    assert!(t.engine.vacating.holds("job-b"));
    let made = calls_of(&fake, "b").len();

    // A new job b waits: neither in the old cgroups nor started in them.
    let me = std::process::id();
    let (r, mut b_rx) = t.submit(3, me, UID, run_request("b", 2)).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    assert_eq!(calls_of(&fake, "b").len(), made, "{:?}", fake.calls());

    // The old client leaves: the old cgroups go, the new b starts in new ones.
    exits(&fake, "b", B);
    t.engine.handle(Event::Vacate);
    assert!(matches!(b_rx.recv().await, Some(Response::Started { .. })));
    let tail: Vec<String> = calls_of(&fake, "b")[made..].to_vec();
    assert_eq!(tail[0], "remove_job job-b");
    assert!(tail[1].starts_with("create_job job-b"), "{tail:?}");
    assert_eq!(tail[2], format!("add_process job-b {me}"));
}

#[tokio::test(flavor = "current_thread")]
async fn the_sampler_does_not_sample_a_waiting_job() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let _b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    fake.set_stats("job-a", 1 << 20, 10);
    fake.set_stats("job-b", 1 << 20, 10);
    let before = fake.reads().len();
    t.engine.handle(Event::Sample);
    let reads = fake.reads()[before..].to_vec();
    // What would read b did run: a was sampled.
    assert!(reads.contains(&"cpu_time job-a".to_string()), "{reads:?}");
    assert!(!reads.iter().any(|r| r.ends_with(" job-b")), "{reads:?}");
}

/// Review of the waiting limits (F1): a start from cgroups that may hold the waiting limits (a
/// queued job recovered after a restart, a narrowing that failed) made them with the job's
/// limits first, and v1 refuses a memory limit above the waiting memory+swap one: the job
/// failed to start. They are made without memory limits, then given the job's own in order,
/// then taken out of the idle class.
#[tokio::test(flavor = "current_thread")]
async fn a_start_from_cgroups_that_may_hold_waiting_limits_gives_the_jobs_own_in_order() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let mut b_rx = a_runs_b_waits(
        &mut t,
        RunRequest {
            mem: Some(256 << 20),
            ..run_request("b", 2)
        },
    )
    .await;
    let b = t.seq_of("b");
    // As recovery leaves it: they may exist, with whatever limits they hold.
    t.engine.jobs.get_mut(&b).expect("b").client.cgroups = QueuedCgroups::Unsure;
    let before = fake.calls().len();
    a_ends(&mut t);
    let Some(Response::Started { cpus, .. }) = b_rx.recv().await else {
        panic!("b not started: {:?}", fake.calls());
    };
    let after: Vec<String> = fake.calls()[before..]
        .iter()
        .filter(|c| c.contains(" job-b"))
        .cloned()
        .collect();
    assert_eq!(
        after,
        [
            format!("create_job job-b {cpus}"),
            format!("set_limits job-b {cpus} mem {}", 256 << 20),
            "set_idle job-b false".to_string(),
            format!("add_process job-b {B}"),
        ]
    );
}

/// Review of the waiting limits (F2): on a node without the cpu controller (optional; only
/// cpuset is required) there is no idle class, and a start that asked for it failed — every
/// queued job recovered after a restart was ended. The job waits and starts without one.
#[tokio::test(flavor = "current_thread")]
async fn without_a_cpu_controller_a_waiting_job_starts_without_the_idle_class() {
    let fake = FakeCgroups::default();
    fake.state().no_cpu_controller = true;
    let mut t = TestEngine::recording(fake.clone());
    let mut b_rx = a_runs_b_waits(&mut t, run_request("b", 2)).await;
    let b = t.seq_of("b");
    assert_eq!(t.engine.jobs[&b].client.cgroups, QueuedCgroups::Ready);
    t.engine.jobs.get_mut(&b).expect("b").client.cgroups = QueuedCgroups::Unsure;
    a_ends(&mut t);
    assert!(
        matches!(b_rx.recv().await, Some(Response::Started { .. })),
        "{:?}",
        fake.calls()
    );
    assert_eq!(t.engine.jobs[&b].phase, Phase::Primary);
}

/// Decision (ct): a queued client waiting in a reserved job's cgroups is not marked — it has
/// not called exec in the job, and its address space could be shared with a process outside —
/// and one waiting in a job without `--mem` with an inherited negative value is raised to 0.
#[tokio::test(flavor = "current_thread")]
async fn a_queued_client_waiting_in_its_cgroups_is_not_marked_before_its_exec() {
    let mut t = TestEngine::new();
    t.fake_stat(B);
    t.fake_process(B, UID);
    t.set_oom_score_adj(B, "-300");
    let _b = a_runs_b_waits(
        &mut t,
        RunRequest {
            mem: Some(64 << 20),
            ..run_request("b", 1)
        },
    )
    .await;
    assert_eq!(
        t.engine.jobs[&t.seq_of("b")].client.cgroups,
        QueuedCgroups::Ready
    );
    assert_eq!(
        t.oom_score_adj(B),
        "-300",
        "reserved: nothing written before its exec"
    );
}
