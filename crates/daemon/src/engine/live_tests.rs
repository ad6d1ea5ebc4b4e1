//! `status` with live figures (`live.rs`): a request starts one pass off the engine thread and
//! is answered with its readings; requests during a pass share it; a fresh pass answers at once;
//! a hung pass does not hold requests; threads never fewer than processes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pjw_proto::{Response, StatusReport};
use proc_connector::ProcEvent;
use tokio::sync::{mpsc, oneshot};

use super::{cgroup_name, Cred, Event};
use crate::clock::Clock;
use crate::live::{Reader, Reading};
use crate::procs::ProcMsg;
use crate::test_support::{client, run_request, who, FakeCgroups, TestEngine};

const UID: u32 = 1000;

async fn started(t: &mut TestEngine, id: &str) -> i64 {
    let me = client(UID);
    t.fake_process(me.pid, UID);
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 1,
        cred: me,
        who: who(),
        req: run_request(id, 1),
        reply,
    });
    let r = rx.recv().await.expect("an answer");
    assert!(matches!(r, Response::Started { .. }), "{id}: {r:?}");
    t.seq_of(id)
}

/// A reader over a table the test sets (cgroup → CPU µs, memory, tasks), counting its reads;
/// `hold` keeps every read waiting while set.
/// Cgroup name → (CPU µs, memory, tasks).
type Table = std::collections::HashMap<String, (u64, u64, u64)>;

#[derive(Clone, Default)]
struct FakeReader {
    table: Arc<Mutex<Table>>,
    reads: Arc<AtomicU64>,
    hold: Arc<Mutex<()>>,
}

impl FakeReader {
    fn set(&self, cgroup: &str, cpu: u64, mem: u64, tasks: u64) {
        self.table
            .lock()
            .unwrap()
            .insert(cgroup.to_string(), (cpu, mem, tasks));
    }
    fn reader(&self) -> Reader {
        let me = self.clone();
        Arc::new(move |cg: &str| {
            let _held = me.hold.lock().unwrap_or_else(|e| e.into_inner());
            me.reads.fetch_add(1, Ordering::SeqCst);
            let v = me.table.lock().unwrap().get(cg).copied();
            Reading {
                at: Instant::now(),
                cpu_usec: v.map(|v| v.0),
                mem_bytes: v.map(|v| v.1),
                tasks: v.map(|v| v.2),
            }
        })
    }
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
}

fn ask(t: &mut TestEngine) -> oneshot::Receiver<Response> {
    let (reply, rx) = oneshot::channel();
    t.engine.handle(Event::Status { reply });
    rx
}

/// Hand the engine what it sent itself until `rx` is answered.
async fn answered(t: &mut TestEngine, mut rx: oneshot::Receiver<Response>) -> StatusReport {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = rx.try_recv() {
            match r {
                Response::Status(s) => return s,
                r => panic!("expected a status, got {r:?}"),
            }
        }
        assert!(Instant::now() < deadline, "no answer within 10 s");
        match tokio::time::timeout(Duration::from_millis(50), t._events.recv()).await {
            Ok(Some(ev @ (Event::LiveRead { .. } | Event::LiveLate))) => t.engine.handle(ev),
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("the engine's channel closed"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_is_answered_with_figures_read_for_it_off_the_engine_thread() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let live = FakeReader::default();
    t.engine.set_live_reader(live.reader());
    let cg = cgroup_name(&TestEngine::id("a"));
    fake.set_stats(&cg, 1 << 20, 1_000_000);
    started(&mut t, "a").await;
    // The job moved on since its start sample; the engine itself reads no file for status.
    t.clock.advance(1000);
    live.set(&cg, 3_500_000, 5 << 20, 4);
    let engine_reads = fake.reads().len();
    let rx = ask(&mut t);
    assert_eq!(
        fake.reads()[engine_reads..],
        [] as [String; 0],
        "the engine thread read a file"
    );
    let s = answered(&mut t, rx).await;
    let a = &s.jobs[0];
    assert_eq!(
        (a.cpu_usec, a.mem_bytes, a.threads),
        (Some(3_500_000), Some(5 << 20), 4)
    );
    assert!(a.sampled_ms.unwrap() >= t.clock.now_ms() - 1000, "{a:?}");
    assert_eq!((live.reads(), t.engine.live_passes()), (1, 1));

    // Asked again at once: the pass is fresh, answered without reading.
    let s = {
        let rx = ask(&mut t);
        answered(&mut t, rx)
    }
    .await;
    assert_eq!(s.jobs[0].cpu_usec, Some(3_500_000));
    assert_eq!(live.reads(), 1);
    assert_eq!(fake.reads().len(), engine_reads);
}

#[tokio::test(flavor = "current_thread")]
async fn requests_during_a_pass_share_it() {
    let mut t = TestEngine::recording(FakeCgroups::default());
    let live = FakeReader::default();
    t.engine.set_live_reader(live.reader());
    started(&mut t, "a").await;
    t.clock.advance(1000);
    live.set(&cgroup_name(&TestEngine::id("a")), 7, 8, 1);
    // Three callers while the pass is held: one pass, three answers.
    let guard = live.hold.lock().unwrap();
    let rxs: Vec<_> = (0..3).map(|_| ask(&mut t)).collect();
    drop(guard);
    for rx in rxs {
        assert_eq!(answered(&mut t, rx).await.jobs[0].cpu_usec, Some(7));
    }
    assert_eq!((live.reads(), t.engine.live_passes()), (1, 1));
}

// The reader's lock is held across awaits on purpose: it is the hung read (the reading thread
// waits on it, not this one).
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "current_thread")]
async fn a_hung_pass_does_not_hold_requests() {
    let mut t = TestEngine::recording(FakeCgroups::default());
    let live = FakeReader::default();
    t.engine.set_live_reader(live.reader());
    started(&mut t, "a").await;
    let guard = live.hold.lock().unwrap();
    let t0 = Instant::now();
    // Answered from the start sample once the pass is late (live::WAIT), not after it.
    let s = {
        let rx = ask(&mut t);
        answered(&mut t, rx)
    }
    .await;
    assert!(t0.elapsed() < crate::live::WAIT + Duration::from_secs(3));
    assert_eq!(s.jobs[0].id, "a");
    // While it is late, requests are answered at once; nothing else starts.
    let s = {
        let rx = ask(&mut t);
        answered(&mut t, rx)
    }
    .await;
    assert_eq!(s.jobs.len(), 1);
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.engine.live_passes() == 0 {
        assert!(Instant::now() < deadline, "the late pass never ended");
        if let Ok(Some(ev)) =
            tokio::time::timeout(Duration::from_millis(50), t._events.recv()).await
        {
            if matches!(ev, Event::LiveRead { .. }) {
                t.engine.handle(ev);
            }
        }
    }
    assert_eq!(live.reads(), 1);
}

fn fork(parent: u32, child_pid: u32, child_tgid: u32) -> ProcEvent {
    ProcEvent::Fork {
        cpu: 0,
        seq: 0,
        parent_pid: parent,
        parent_tgid: parent,
        child_pid,
        child_tgid,
        timestamp_ns: 0,
    }
}

fn exit(pid: u32, tgid: u32) -> ProcEvent {
    ProcEvent::Exit {
        cpu: 0,
        seq: 0,
        pid,
        tgid,
        exit_code: 0,
        exit_signal: 17,
        parent_pid: 1,
        parent_tgid: 1,
        timestamp_ns: 0,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn threads_are_counted_from_process_events_and_never_fewer_than_processes() {
    let mut t = TestEngine::recording(FakeCgroups::default());
    t.engine.set_proc_events(true);
    let live = FakeReader::default();
    t.engine.set_live_reader(live.reader());
    started(&mut t, "a").await;
    let main = Cred { ..client(UID) }.pid;
    // The live pass says 1 task (read before the forks, say): never shown below the processes.
    live.set(&cgroup_name(&TestEngine::id("a")), 0, 0, 1);
    // (events, processes shown, threads shown)
    let table: Vec<(Vec<ProcEvent>, u32, u32)> = vec![
        // sh -c 'sleep & sleep & sleep & wait': four processes of one thread each.
        (
            vec![
                fork(main, 800_001, 800_001),
                fork(main, 800_002, 800_002),
                fork(main, 800_003, 800_003),
            ],
            4,
            4,
        ),
        // Two threads in one of them, then one thread ends.
        (
            vec![fork(1, 800_010, 800_001), fork(1, 800_011, 800_001)],
            4,
            6,
        ),
        (vec![exit(800_011, 800_001)], 4, 5),
        // The process with the other thread exits: its threads go with it.
        (vec![exit(800_001, 800_001)], 3, 3),
    ];
    for (i, (events, procs, threads)) in table.into_iter().enumerate() {
        t.engine.handle(Event::Proc(ProcMsg::Events(events)));
        t.clock.advance(1000);
        tokio::time::sleep(crate::live::FRESH).await;
        let s = {
            let rx = ask(&mut t);
            answered(&mut t, rx)
        }
        .await;
        let a = &s.jobs[0];
        assert_eq!((a.procs, a.threads), (procs, threads), "row {i}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_the_pass_could_not_read_keeps_its_samples_figures() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let live = FakeReader::default();
    t.engine.set_live_reader(live.reader());
    fake.set_stats(&cgroup_name(&TestEngine::id("a")), 1 << 20, 1_000_000);
    let t0 = t.clock.now_ms();
    started(&mut t, "a").await;
    // Its first sample (the sampler's tick; a start reads nothing).
    t.engine.handle(Event::Sample);
    t.clock.advance(1000);
    // Nothing readable for it (its cgroup going away): the last sample's figures and time.
    let s = {
        let rx = ask(&mut t);
        answered(&mut t, rx)
    }
    .await;
    let a = &s.jobs[0];
    assert_eq!((a.cpu_usec, a.sampled_ms), (Some(1_000_000), Some(t0)));
    assert_eq!(live.reads(), 1);
}
