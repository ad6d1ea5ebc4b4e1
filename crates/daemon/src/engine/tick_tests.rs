//! Table tests of the engine's timer, watcher and kernel events without root, on the recording
//! fake cgroup driver: the governor's tick (freeze, thaw), process events (counts, exit status,
//! an overrun), the adoption sweep, `cgroup.events` changes and rechecks, metrics, `report`, and
//! the sampler's tick with `status` answered from its last sample (no cgroup read).

use pjw_core::sched::Phase;
use pjw_proto::{ErrorCode, ReportQuery, Response};
use proc_connector::ProcEvent;
use tokio::sync::{mpsc, oneshot};

use super::{cgroup_name, Cred, Event};
use crate::clock::Clock;
use crate::procs::ProcMsg;
use crate::test_support::{client, run_request, who, FakeCgroups, Gate, OpenOnDrop, TestEngine};

const UID: u32 = 1000;
const MIB: u64 = 1 << 20;

/// Start `id` on `cpus` CPUs from connection `conn` (the first from this process, the second
/// from process 1); its seq.
async fn started(t: &mut TestEngine, conn: u64, id: &str, cpus: u32) -> i64 {
    let me = Cred {
        pid: if conn == 1 { std::process::id() } else { 1 },
        ..client(UID)
    };
    t.fake_process(me.pid, UID);
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn,
        cred: me,
        who: who(),
        req: run_request(id, cpus),
        reply,
    });
    let r = rx.recv().await.expect("an answer");
    assert!(matches!(r, Response::Started { .. }), "{id}: {r:?}");
    t.seq_of(id)
}

fn cg(id: &str) -> String {
    cgroup_name(&TestEngine::id(id))
}

/// The writes made since `from`.
fn writes_since(fake: &FakeCgroups, from: usize) -> Vec<String> {
    fake.calls()[from..].to_vec()
}

#[tokio::test(flavor = "current_thread")]
async fn the_governor_tick_throttles_then_freezes_the_grower_never_the_idle_job_and_thaws_it() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::governed(fake.clone());
    let a = started(&mut t, 1, "a", 2).await;
    let b = started(&mut t, 2, "b", 2).await;
    // (memory of a, memory of b, the writes the tick makes, b frozen after it). The fake is
    // cgroup v2: it can throttle.
    let high = |mib: u64| format!("set_memory_high {} Some({})", cg("b"), mib * MIB);
    let table = [
        // The first look: where they start.
        (100 * MIB, 100 * MIB, vec![], false),
        // b grows past 90 % of the 1 GiB partition: b, the grower, is throttled at its usage.
        (100 * MIB, 600 * MIB, vec![high(600)], false),
        // It keeps growing under its throttle: frozen.
        (
            100 * MIB,
            700 * MIB,
            vec![format!("freeze {} true", cg("b"))],
            true,
        ),
        // a and b's 700 MiB do not fit under 75 %: b stays frozen.
        (100 * MIB, 700 * MIB, vec![], true),
        // a shrank: they fit: b is thawed.
        (
            50 * MIB,
            700 * MIB,
            vec![format!("freeze {} false", cg("b"))],
            false,
        ),
        // Room again (b no longer grows): its throttle is lifted.
        (
            50 * MIB,
            700 * MIB,
            vec![format!("set_memory_high {} None", cg("b"))],
            false,
        ),
    ];
    for (step, (mem_a, mem_b, writes, frozen)) in table.into_iter().enumerate() {
        fake.set_stats(&cg("a"), mem_a, 0);
        fake.set_stats(&cg("b"), mem_b, 0);
        let from = fake.calls().len();
        t.engine.handle(Event::Govern);
        assert_eq!(writes_since(&fake, from), writes, "step {step}");
        assert_eq!(t.engine.jobs[&b].memory.frozen, frozen, "step {step}");
        assert!(!t.engine.jobs[&a].memory.frozen, "step {step}");
        assert!(!t.engine.jobs[&a].memory.throttled, "step {step}");
        // A job frozen for memory keeps its CPUs (it is thawed in place).
        assert_eq!(t.engine.jobs[&b].phase, Phase::Primary, "step {step}");
        assert_eq!(t.engine.jobs[&b].cpus.len(), 2, "step {step}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_governor_tick_only_counts_oom_kills_when_the_governor_is_off() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    started(&mut t, 1, "a", 2).await;
    fake.set_stats(&cg("a"), 2 << 30, 0);
    fake.set_ooms(&cg("a"), 2);
    let (writes, reads) = (fake.calls().len(), fake.reads().len());
    t.engine.handle(Event::Govern);
    assert_eq!(fake.calls().len(), writes, "nothing written");
    assert_eq!(fake.reads()[reads..], [format!("oom_kills {}", cg("a"))]);
    let st = status(&mut t).await;
    assert_eq!(st.jobs[0].oom_kills, 2, "status shows them");
    assert!(st.memory.is_none(), "no governor, no memory assessment");
}

fn fork(parent: u32, child: u32) -> ProcEvent {
    ProcEvent::Fork {
        cpu: 0,
        seq: 0,
        parent_pid: parent,
        parent_tgid: parent,
        child_pid: child,
        child_tgid: child,
        timestamp_ns: 0,
    }
}

fn exit(pid: u32, exit_code: u32) -> ProcEvent {
    ProcEvent::Exit {
        cpu: 0,
        seq: 0,
        pid,
        tgid: pid,
        exit_code,
        exit_signal: 17,
        parent_pid: 1,
        parent_tgid: 1,
        timestamp_ns: 0,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn process_events_count_a_jobs_processes_and_an_overrun_relearns_them_from_its_cgroup() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let seq = started(&mut t, 1, "a", 2).await;
    let main = client(UID).pid;
    let counts = |t: &TestEngine| t.engine.procs.counts(seq).expect("tracked");
    // (events, processes ever, processes now)
    let table = [
        (vec![fork(main, 700_001), fork(700_001, 700_002)], 3, 3),
        // A fork by a process of no job is not the job's.
        (vec![fork(700_999, 700_998)], 3, 3),
        (vec![exit(700_002, 0)], 3, 2),
    ];
    for (i, (events, ever, now)) in table.into_iter().enumerate() {
        t.engine.handle(Event::Proc(ProcMsg::Events(events)));
        let c = counts(&t);
        assert_eq!((c.procs_ever, c.procs_now), (ever, now), "row {i}");
    }
    // The main process's exit carries its status (exit 3: wait status 3 << 8).
    t.engine
        .handle(Event::Proc(ProcMsg::Events(vec![exit(main, 3 << 8)])));
    assert_eq!(t.engine.jobs[&seq].prof.exit_status, Some(3));
    // Events were lost: the job's processes are read again from its cgroup, counts marked lossy.
    let reads = fake.reads().len();
    t.engine.handle(Event::Proc(ProcMsg::Overrun));
    assert_eq!(fake.reads()[reads..], [format!("procs {}", cg("a"))]);
    assert!(counts(&t).lossy);
}

/// Slurm job 42 of user [`UID`], registered by root as a prolog would: its seq and cgroup.
fn register_42(t: &mut TestEngine) -> (i64, String) {
    let root = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
    };
    let (reply, mut answers) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn: 1,
        cred: root,
        who: crate::engine::Who {
            name: "root".into(),
            admin: false,
            named: Some((UID, UID)),
        },
        req: pjw_proto::RegisterRequest {
            job: "42".into(),
            wlm: "slurm".into(),
            user: "user1000".into(),
            cpus: 1,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply,
    });
    let r = answers.try_recv().expect("an answer");
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = *t.engine.jobs.keys().next().expect("the job");
    (seq, t.engine.jobs[&seq].cgroup.clone())
}

/// A fake process `pid` of `uid` with environment `env`, outside every job.
fn env_process(t: &TestEngine, pid: u32, uid: u32, env: &str) {
    t.fake_process(pid, uid);
    t.fake_stat(pid);
    let dir = t.proc_root().join(pid.to_string());
    std::fs::write(dir.join("environ"), format!("{env}\0")).expect("environ");
    std::fs::write(dir.join("cgroup"), "0::/user.slice\n").expect("cgroup");
}

#[tokio::test(flavor = "current_thread")]
async fn the_sweep_adopts_a_process_that_names_a_registered_job_and_no_other() {
    let mut t = TestEngine::new();
    let (seq, cgroup) = register_42(&mut t);
    // (pid, its uid, its environment, adopted)
    let table = [
        (700_101, UID, "SLURM_JOB_ID=42", true),
        (700_102, UID, "SLURM_JOB_ID=43", false),
        // Another user's process naming the job is not taken in.
        (700_103, 1001, "SLURM_JOB_ID=42", false),
        (700_104, UID, "HOME=/", false),
    ];
    for &(pid, uid, env, _) in &table {
        env_process(&t, pid, uid, env);
    }
    t.engine.handle(Event::Sweep);
    let inside = t.engine.driver.procs(&cgroup).expect("procs");
    for (pid, _, env, adopted) in table {
        assert_eq!(inside.contains(&pid), adopted, "{pid} {env}: {inside:?}");
        assert_eq!(
            t.engine.procs.job_of(pid) == Some(seq),
            adopted,
            "{pid} {env}"
        );
    }
}

/// Thousands of new processes are swept in turns of SWEEP_TURN, each next turn sent to the
/// back of the engine's queue (so requests already waiting go first), and a timer tick
/// meanwhile starts no second sweep; every process is looked at once.
#[tokio::test(flavor = "current_thread")]
async fn a_large_sweep_is_taken_in_turns_each_queued_behind_waiting_requests() {
    let mut t = TestEngine::new();
    let (seq, cgroup) = register_42(&mut t);
    while t._events.try_recv().is_ok() {}
    let pids: Vec<u32> = (0..150).map(|i| 710_000 + i).collect();
    for &pid in &pids {
        env_process(&t, pid, UID, "SLURM_JOB_ID=42");
    }
    let adopted = |t: &TestEngine| {
        pids.iter()
            .filter(|p| t.engine.procs.job_of(**p) == Some(seq))
            .count()
    };
    let more = |t: &mut TestEngine| {
        let mut n = 0;
        while let Ok(ev) = t._events.try_recv() {
            n += usize::from(matches!(ev, Event::SweepMore));
        }
        n
    };
    // (event, processes adopted after it, next turns queued by it)
    let steps = [
        (Event::Sweep, 64, 1),
        // The timer's tick while a sweep is under way: nothing.
        (Event::Sweep, 64, 0),
        (Event::SweepMore, 128, 1),
        (Event::SweepMore, 150, 0),
        // Nothing left to look at: a stray turn does nothing.
        (Event::SweepMore, 150, 0),
    ];
    for (i, (ev, want, queued)) in steps.into_iter().enumerate() {
        t.engine.handle(ev);
        assert_eq!((adopted(&t), more(&mut t)), (want, queued), "step {i}");
    }
    let inside = t.engine.driver.procs(&cgroup).expect("procs");
    assert!(pids.iter().all(|p| inside.contains(p)), "{inside:?}");
    // A new process after the pass: the next tick starts a new sweep and takes it.
    env_process(&t, 720_000, UID, "SLURM_JOB_ID=42");
    t.engine.handle(Event::Sweep);
    assert_eq!(t.engine.procs.job_of(720_000), Some(seq));
    assert_eq!(more(&mut t), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_cgroup_events_change_or_a_recheck_ends_a_job_only_once_its_cgroup_is_empty() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let a = started(&mut t, 1, "a", 2).await;
    let b = started(&mut t, 2, "b", 2).await;
    // A watch on a's cgroup.events (the engine learns it from inotify at start).
    let dir = tempfile::tempdir().expect("dir");
    let ino = inotify::Inotify::init().expect("inotify");
    let wd = ino
        .watches()
        .add(dir.path(), inotify::WatchMask::MODIFY)
        .expect("a watch");
    t.engine.by_watch.insert(wd.clone(), a);

    // (event, job, cgroup emptied first, job ended after it)
    for (ev, seq, empty, ended) in [
        ("changed", a, false, false),
        ("changed", a, true, true),
        ("recheck", b, false, false),
        ("recheck", b, true, true),
    ] {
        let name = t.engine.jobs[&seq].cgroup.clone();
        if empty {
            fake.state().jobs.get_mut(&name).expect("cgroup").1.clear();
        }
        t.engine.handle(match ev {
            "changed" => Event::CgroupChanged { wd: wd.clone() },
            _ => Event::Recheck { seq },
        });
        assert_eq!(!t.engine.jobs.contains_key(&seq), ended, "{ev} {name}");
        t.removals_done().await;
        let row = t.store.state().rows[&seq].clone();
        assert_eq!(
            row.end_reason.as_deref(),
            ended.then_some("exited"),
            "{ev} {name}"
        );
        assert_eq!(
            fake.calls().contains(&format!("remove_job {name}")),
            ended,
            "{ev} {name}"
        );
    }
    assert_eq!(t.engine.free().len(), 4);
}

#[tokio::test(flavor = "current_thread")]
async fn a_metrics_scrape_is_answered_from_memory_without_a_cgroup_read() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    started(&mut t, 1, "a", 3).await;
    let reads = fake.reads().len();
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Metrics { reply });
    let snap = rx.await.expect("a snapshot");
    assert_eq!((snap.cpus, snap.free_cpus, snap.queue_len), (4, 1, 0));
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(snap.jobs[0].cgroup.as_deref(), Some(cg("a").as_str()));
    assert_eq!(fake.reads().len(), reads);
}

#[tokio::test(flavor = "current_thread")]
async fn a_report_on_another_users_jobs_is_denied_and_reads_nothing() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    started(&mut t, 1, "a", 1).await;
    let reads = fake.reads().len();
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Report {
        cred: client(UID),
        who: who(),
        query: ReportQuery {
            user: Some("1001".into()),
            ..ReportQuery::default()
        },
        reply,
    });
    let r = rx.await.expect("an answer");
    let crate::report::ReportAnswer::Refused(refusal) = r else {
        panic!("expected a refusal, got {r:?}");
    };
    let Response::Error { code, message } = *refusal else {
        panic!("expected an error frame, got {refusal:?}");
    };
    assert_eq!(code, ErrorCode::Denied);
    assert!(message.contains("only your own jobs"), "{message}");
    assert_eq!(fake.reads().len(), reads);
}

async fn status(t: &mut TestEngine) -> pjw_proto::StatusReport {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Status { reply });
    match rx.await.expect("an answer") {
        Response::Status(s) => s,
        r => panic!("expected a status, got {r:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn status_answers_from_the_last_sample_and_reads_no_cgroup_file() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let t0 = t.clock.now_ms();
    fake.set_stats(&cg("a"), 64 * MIB, 1_000_000);
    started(&mut t, 1, "a", 2).await;
    // A second job waits for the whole node.
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 2,
        cred: Cred {
            pid: 1,
            ..client(UID)
        },
        who: who(),
        req: run_request("b", 4),
        reply,
    });
    assert!(matches!(rx.recv().await, Some(Response::Queued { .. })));

    // (sampler tick first, memory and CPU time in the cgroup now, what status shows: memory,
    // CPU time, when sampled). The job's start read nothing (its first sample is the next
    // tick's, within a second): without a live pass (`live.rs`), status has no figure yet.
    let seen = |mem, cpu, at| (Some(mem), Some(cpu), Some(at));
    let table = [
        (false, 64 * MIB, 1_000_000, (None, None, None)),
        (
            true,
            64 * MIB,
            1_000_000,
            seen(64 * MIB, 1_000_000, t0 + 10_000),
        ),
        // The cgroup moved on, no tick yet: status tells the last sample, and its time.
        (
            false,
            80 * MIB,
            3_000_000,
            seen(64 * MIB, 1_000_000, t0 + 10_000),
        ),
        (
            true,
            80 * MIB,
            3_000_000,
            seen(80 * MIB, 3_000_000, t0 + 20_000),
        ),
    ];
    for (i, (tick, mem, cpu, want)) in table.into_iter().enumerate() {
        fake.set_stats(&cg("a"), mem, cpu);
        if tick {
            t.clock.advance(10_000);
            let before = fake.reads().len();
            t.engine.handle(Event::Sample);
            let reads = fake.reads()[before..].to_vec();
            for r in ["cpu_time", "memory_usage"] {
                assert!(
                    reads.contains(&format!("{r} {}", cg("a"))),
                    "row {i}: {reads:?}"
                );
            }
        }
        let before = fake.reads().len();
        let s = status(&mut t).await;
        assert_eq!(fake.reads()[before..], [] as [String; 0], "row {i}");
        let a = s.jobs.iter().find(|j| j.id == "a").expect("a");
        assert_eq!(
            ((a.mem_bytes, a.cpu_usec, a.sampled_ms), a.procs, a.threads),
            (want, 1, 1),
            "row {i}"
        );
        let b = s.jobs.iter().find(|j| j.id == "b").expect("b");
        assert_eq!((b.mem_bytes, b.cpu_usec, b.sampled_ms), (None, None, None));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn kill_rounds_run_off_the_engine_thread_and_the_job_keeps_its_cpus_until_it_is_empty() {
    let fake = FakeCgroups::default();
    let gate = OpenOnDrop(Gate::default());
    fake.state().slow_kill = Some(gate.0.clone());
    let mut t = TestEngine::recording(fake.clone());
    let a = started(&mut t, 1, "a", 2).await;
    // Its main process exits and leaves a process behind; there is no cgroup.kill.
    fake.state()
        .jobs
        .get_mut(&cg("a"))
        .expect("cgroup")
        .1
        .push(700_201);
    t.engine.handle(Event::MainExited { seq: a });

    // The engine is back while the kill rounds still wait: the job is ending and keeps its
    // CPUs, and a request is answered meanwhile.
    assert!(t.engine.jobs[&a].end.ending);
    assert_eq!(t.engine.free().len(), 2);
    assert!(!fake.calls().iter().any(|c| c.starts_with("kill_rounds")));
    assert_eq!(status(&mut t).await.jobs.len(), 1);

    // The rounds finish and report back; the events the engine sent itself are handed to it
    // in order until then.
    gate.0.open();
    loop {
        let ev = t._events.recv().await.expect("an event");
        let done = matches!(ev, Event::Killed { .. });
        t.engine.handle(ev);
        if done {
            break;
        }
    }
    assert!(!t.engine.jobs.contains_key(&a));
    assert_eq!(t.engine.free().len(), 4);
    t.removals_done().await;
    let calls = fake.calls();
    let at = |c: &str| {
        calls
            .iter()
            .position(|x| x == c)
            .unwrap_or_else(|| panic!("no {c}: {calls:?}"))
    };
    let name = cg("a");
    assert!(at(&format!("kill {name}")) < at(&format!("kill_rounds {name}")));
    assert!(at(&format!("kill_rounds {name}")) < at(&format!("remove_job {name}")));
    let row = t.store.state().rows[&a].clone();
    assert_eq!(row.end_reason.as_deref(), Some("exited"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_young_job_is_sampled_every_second_from_its_start() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    fake.set_stats(&cg("a"), MIB, 0);
    let seq = started(&mut t, 1, "a", 1).await;
    // Its start read none of its files (nothing on the engine's thread at a start); the young
    // jobs' tick is armed: it arrives within 1 s and takes its first sample.
    assert_eq!(t.engine.jobs[&seq].prof.samples, 0);
    assert!(
        !fake
            .reads()
            .iter()
            .any(|r| r.ends_with(&format!(" {}", cg("a")))),
        "{:?}",
        fake.reads()
    );
    let ev = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match t._events.recv().await {
                Some(ev @ Event::SampleYoung) => return ev,
                Some(_) => {}
                None => panic!("channel closed"),
            }
        }
    })
    .await
    .expect("the young jobs' tick within 5 s");
    // (clock advanced since the last sample, sampled by the tick)
    let table = [(1000, true), (300, false), (700, true)];
    let mut ev = Some(ev);
    for (i, (advance, sampled)) in table.into_iter().enumerate() {
        t.clock.advance(advance);
        let before = t.engine.jobs[&seq].prof.samples;
        t.engine.handle(ev.take().unwrap_or(Event::SampleYoung));
        let after = t.engine.jobs[&seq].prof.samples;
        assert_eq!(after == before + 1, sampled, "row {i}");
    }
}

#[test]
fn young_jobs_are_due_every_second_for_their_first_minute() {
    use crate::profile::young_due;
    use std::time::Duration;
    let s = Duration::from_secs;
    // (age, last sampled ms ago, due)
    let table = [
        (s(0), None, true),
        (s(5), Some(1000), true),
        (s(5), Some(950), true),
        (s(5), Some(500), false),
        (s(59), Some(1000), true),
        (s(60), Some(1000), false),
        (s(600), None, false),
    ];
    for (age, since, due) in table {
        assert_eq!(young_due(age, since), due, "{age:?} {since:?}");
    }
}

/// The attack on the kill rounds (no `cgroup.kill`): they list the job's cgroup by name on a
/// blocking thread, 10 ms apart. What they were sent for exits on its own, the job ends and its
/// cgroups are removed while they still wait; another user submits the same id at once. The
/// name is held until the rounds report: the new job neither waits in nor gets cgroups of that
/// name until then, so the late rounds never see its processes; then it starts.
#[tokio::test(flavor = "current_thread")]
async fn late_kill_rounds_never_reach_a_new_job_of_the_same_name() {
    let fake = FakeCgroups::default();
    let gate = OpenOnDrop(Gate::default());
    fake.state().slow_kill = Some(gate.0.clone());
    let mut t = TestEngine::recording(fake.clone());
    let a = started(&mut t, 1, "a", 2).await;
    let name = cg("a");
    fake.state()
        .jobs
        .get_mut(&name)
        .expect("cgroup")
        .1
        .push(700_201);
    t.engine.handle(Event::MainExited { seq: a });
    assert!(t.engine.jobs[&a].end.ending, "the rounds wait at the gate");
    // The leftover exits on its own: the job is empty and ends while the rounds still wait.
    fake.state().jobs.get_mut(&name).expect("cgroup").1.clear();
    t.engine.handle(Event::Recheck { seq: a });
    assert!(!t.engine.jobs.contains_key(&a), "ended");
    t.removals_done().await;
    let removed = fake
        .calls()
        .iter()
        .rposition(|c| *c == format!("remove_job {name}"))
        .expect("its cgroups removed");
    let p = crate::test_support::Live::new(1);
    let (r, _rx) = t.submit(7, p.pid(0), 2000, run_request("a", 1)).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    let touched = |fake: &FakeCgroups| {
        fake.calls()[removed..]
            .iter()
            .filter(|c| c.starts_with("create_job ") || c.starts_with("add_process "))
            .filter(|c| c.split(' ').nth(1) == Some(name.as_str()))
            .count()
    };
    assert_eq!(touched(&fake), 0, "{:?}", fake.calls());
    // The rounds run (in the fake they empty whatever the cgroup of that name holds) and
    // report; only then the new job gets its cgroups and starts.
    gate.0.open();
    t.signals_done().await;
    let calls = fake.calls();
    let rounds = calls
        .iter()
        .rposition(|c| *c == format!("kill_rounds {name}"))
        .expect("the rounds ran");
    let made = calls
        .iter()
        .rposition(|c| c.starts_with(&format!("create_job {name} ")))
        .expect("the new job's cgroups made");
    assert!(rounds < made, "{calls:?}");
    let new = t.seq_of("a");
    assert!(new != a && t.engine.jobs[&new].started.is_some(), "started");
}
