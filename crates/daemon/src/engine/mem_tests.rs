//! The memory governor in the engine, on the recording fake cgroup driver: a job stalling
//! inside its own limit and pressure from outside pjw move nobody and are shown; admission while
//! a job is frozen (a job that fits starts, one of unknown size waits with its bound); the last
//! step for a job frozen too long; and `outcome` (OOM kills, the limit, the governor's step),
//! owner or root only.

use pjw_proto::{ErrorCode, Response, RunRequest};

use super::{cgroup_name, Event};
use crate::test_support::{client, run_request, FakeCgroups, TestEngine};

const MIB: u64 = 1 << 20;
const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn cg(id: &str) -> String {
    cgroup_name(&TestEngine::id(id))
}

fn req(id: &str, mem: Option<u64>) -> RunRequest {
    RunRequest {
        mem,
        ..run_request(id, 1)
    }
}

/// A live process to be a job's main process (the engine watches it with a pidfd), killed
/// when the test ends.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Submit `r` for `uid` from a process of its own (kept in `procs`); the first answer.
async fn submit(t: &mut TestEngine, procs: &mut Vec<Proc>, uid: u32, r: RunRequest) -> Response {
    let child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    procs.push(Proc(child));
    t.fake_stat(pid);
    t.submit(pid as u64, pid, uid, r).await.0
}

async fn started(t: &mut TestEngine, procs: &mut Vec<Proc>, uid: u32, r: RunRequest) {
    let id = r.job_id.clone().unwrap_or_default();
    let a = submit(t, procs, uid, r).await;
    assert!(matches!(a, Response::Started { .. }), "{id}: {a:?}");
}

async fn status(t: &mut TestEngine) -> pjw_proto::StatusReport {
    let (reply, rx) = tokio::sync::oneshot::channel();
    t.engine.handle(Event::Status { reply });
    match rx.await.expect("an answer") {
        Response::Status(s) => s,
        r => panic!("expected a status, got {r:?}"),
    }
}

fn reason(st: &pjw_proto::StatusReport, id: &str) -> String {
    st.jobs
        .iter()
        .find(|j| j.id == id)
        .and_then(|j| j.reason.clone())
        .unwrap_or_default()
}

/// The node's memory PSI in the fake `/proc`.
fn node_psi(t: &TestEngine, some: f64) {
    let dir = t.proc_root().join("pressure");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("memory"),
        format!("some avg10={some:.2} avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"),
    )
    .unwrap();
}

fn writes_since(fake: &FakeCgroups, from: usize) -> Vec<String> {
    fake.calls()[from..].to_vec()
}

async fn outcome(t: &mut TestEngine, uid: u32, job: &str) -> Response {
    let (reply, rx) = tokio::sync::oneshot::channel();
    t.engine.handle(Event::Outcome {
        cred: client(uid),
        job: job.into(),
        reply,
    });
    rx.await.expect("an answer")
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_stalling_inside_its_own_limit_freezes_nobody_and_status_says_so() {
    let fake = FakeCgroups::default();
    // A sensitive governor: 2 % of memory stall is pressure.
    let mut p = Vec::new();
    let mut t = TestEngine::governed_with(fake.clone(), "psi_some = 2\npsi_full = 1\n");
    started(&mut t, &mut p, ALICE, req("thrash", Some(64 * MIB))).await;
    started(&mut t, &mut p, BOB, req("idle", None)).await;
    // The thrasher at its 64 MiB limit with 100 MiB in swap, stalling 80 % of the time; the
    // node and the partition stall as much (it is the only one who stalls).
    fake.set_stats(&cg("thrash"), 64 * MIB, 0);
    fake.set_need(&cg("thrash"), 60 * MIB, 100 * MIB);
    fake.set_psi(&cg("thrash"), 80.0, 40.0);
    fake.set_psi("(parent)", 79.0, 39.0);
    node_psi(&t, 80.0);
    fake.set_stats(&cg("idle"), 176 << 10, 0);
    let from = fake.calls().len();
    for _ in 0..5 {
        t.engine.handle(Event::Govern);
    }
    assert_eq!(
        writes_since(&fake, from),
        Vec::<String>::new(),
        "nobody throttled or frozen"
    );
    let st = status(&mut t).await;
    let why = reason(&st, "thrash");
    assert!(
        why.contains("stalling on memory inside its own 64M limit") && why.contains("80%"),
        "{why}"
    );
    assert_eq!(reason(&st, "idle"), "");
    let m = st.memory.expect("the governor's view");
    assert_eq!(
        (m.shared, m.outside),
        (None, None),
        "nobody's pressure on others"
    );
    // A new 1-CPU job starts at once.
    started(&mut t, &mut p, BOB, req("new", None)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn pressure_from_outside_pjw_freezes_nobody_and_status_and_metrics_show_it() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed_with(fake.clone(), "psi_some = 2\npsi_full = 1\n");
    started(&mut t, &mut p, ALICE, req("a", None)).await;
    started(&mut t, &mut p, BOB, req("b", None)).await;
    fake.set_stats(&cg("a"), 300 * MIB, 0);
    fake.set_stats(&cg("b"), 300 * MIB, 0);
    fake.set_psi(&cg("a"), 1.0, 0.0);
    fake.set_psi("(parent)", 1.0, 0.0);
    node_psi(&t, 60.0);
    let from = fake.calls().len();
    for _ in 0..3 {
        t.engine.handle(Event::Govern);
    }
    assert_eq!(writes_since(&fake, from), Vec::<String>::new());
    let m = status(&mut t).await.memory.expect("the governor's view");
    assert_eq!(m.shared, None);
    let outside = m.outside.unwrap_or_default();
    assert!(outside.contains("beyond pjw's job partition"), "{outside}");
    assert_eq!(
        (m.node_psi_some, m.partition_psi_some),
        (Some(60.0), Some(1.0))
    );
    let snap = t.engine.metrics_snapshot();
    assert!(
        snap.memory.as_ref().is_some_and(|m| m.outside),
        "{:?}",
        snap.memory
    );
    started(&mut t, &mut p, BOB, req("new", None)).await;
}

/// `a` idles at 100 MiB; `b` grows until it is throttled, then frozen (the fake is cgroup v2).
async fn freeze_the_grower(t: &mut TestEngine, p: &mut Vec<Proc>, fake: &FakeCgroups) {
    started(t, p, ALICE, req("a", None)).await;
    started(t, p, BOB, req("b", None)).await;
    for mem_b in [100, 600, 700] {
        fake.set_stats(&cg("a"), 100 * MIB, 0);
        fake.set_stats(&cg("b"), mem_b * MIB, 0);
        t.engine.handle(Event::Govern);
    }
    let b = t.seq_of("b");
    assert!(t.engine.jobs[&b].memory.frozen, "{:?}", fake.calls());
    // The next look sees it frozen.
    t.engine.handle(Event::Govern);
}

#[tokio::test(flavor = "current_thread")]
async fn while_a_job_is_frozen_one_that_fits_starts_and_one_of_unknown_size_waits_with_its_bound() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed_with(fake.clone(), "frozen_max = \"10m\"\n");
    freeze_the_grower(&mut t, &mut p, &fake).await;
    let st = status(&mut t).await;
    let why = reason(&st, "b");
    assert!(
        why.starts_with("frozen by the memory governor for 0s: it grew")
            && why.contains("into the memory the jobs share")
            && why.contains("or killed in 10m00s (memory.frozen_max 10m00s)"),
        "{why}"
    );
    // Unknown size: it waits, saying for whom and for how long at most.
    match submit(&mut t, &mut p, ALICE, req("unknown", None)).await {
        Response::Queued { reason, .. } => assert!(
            reason.starts_with("waiting for memory (size unknown (no --mem)")
                && reason.contains("1 job(s) frozen for memory come first; at most 10m"),
            "{reason}"
        ),
        r => panic!("{r:?}"),
    }
    // 121.6 MiB are left under `high` (921.6 − a's 100 − b's 700 frozen): 512 MiB wait, 64
    // MiB start.
    match submit(&mut t, &mut p, ALICE, req("big", Some(512 * MIB))).await {
        Response::Queued { reason, .. } => {
            assert!(reason.contains("512M requested, 121.6M left"), "{reason}")
        }
        r => panic!("{r:?}"),
    }
    started(&mut t, &mut p, BOB, req("small", Some(64 * MIB))).await;
    let b = t.seq_of("b");
    assert!(t.engine.jobs[&b].memory.frozen);
}

/// The acceptance run: a job the governor froze for 23 s, then thawed, ended with nothing
/// said — its reason was in `pjw status` only while it lasted. Its owner's `pjw run` and its
/// end reason now say how long, how often and why.
#[tokio::test(flavor = "current_thread")]
async fn a_job_frozen_and_thawed_is_told_why_and_how_long_at_its_end() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed(fake.clone());
    freeze_the_grower(&mut t, &mut p, &fake).await;
    t.clock.advance(23_000);
    // a ends: room again, b is thawed.
    let a = t.seq_of("a");
    t.engine.handle(Event::MainExited { seq: a });
    fake.set_stats(&cg("b"), 700 * MIB, 0);
    t.engine.handle(Event::Govern);
    let b = t.seq_of("b");
    assert!(
        !t.engine.jobs[&b].memory.frozen,
        "thawed: {:?}",
        fake.calls()
    );
    t.clock.advance(5_000);
    t.engine.handle(Event::MainExited { seq: b });
    match outcome(&mut t, BOB, "b").await {
        Response::Outcome(o) => {
            let f = o.frozen.unwrap_or_default();
            assert!(
                f.starts_with("frozen 23 s by the memory governor (1 time): it grew")
                    && f.contains("into the memory the jobs share"),
                "{f}"
            );
            let ended = o.ended.unwrap_or_default();
            assert!(
                ended.contains("; frozen 23 s by the memory governor (1 time)"),
                "{ended}"
            );
        }
        r => panic!("{r:?}"),
    }
}

/// Review of decision (cs), as the attack: with other users' jobs (no `--mem`) holding 60 %
/// of the partition and nothing under pressure, a user asks `--mem` as large as the partition.
/// Admitted against the promises alone, it would grow inside its reservation — never a target
/// — and the governor would freeze the others for it. It waits, saying why; one that fits
/// next to what they hold starts.
#[tokio::test(flavor = "current_thread")]
async fn a_reservation_is_not_admitted_past_what_jobs_without_one_hold() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed(fake.clone());
    started(&mut t, &mut p, ALICE, req("a", None)).await;
    fake.set_stats(&cg("a"), 600 * MIB, 0);
    t.engine.handle(Event::Govern);
    match submit(&mut t, &mut p, BOB, req("huge", Some(1024 * MIB))).await {
        Response::Queued { reason, .. } => assert!(
            reason.contains(
                "1G requested; 0 promised to jobs with --mem and 600M held by jobs without, of 1G"
            ),
            "{reason}"
        ),
        r => panic!("{r:?}"),
    }
    // The check ran beside a start it let through.
    started(&mut t, &mut p, BOB, req("fits", Some(300 * MIB))).await;
    let a = t.seq_of("a");
    assert!(!t.engine.jobs[&a].memory.frozen);
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_frozen_past_frozen_max_is_killed_and_its_outcome_says_why() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed_with(fake.clone(), "frozen_max = 5\n");
    freeze_the_grower(&mut t, &mut p, &fake).await;
    let b = t.seq_of("b");
    // 4 s: not yet.
    t.clock.advance(4_000);
    t.engine.handle(Event::Govern);
    assert!(t.engine.jobs[&b].end.killed_by.is_none());
    let from = fake.calls().len();
    t.clock.advance(2_000);
    t.engine.handle(Event::Govern);
    assert!(
        writes_since(&fake, from).contains(&format!("kill {}", cg("b"))),
        "{:?}",
        fake.calls()
    );
    // Its owner asks what happened; another user may not.
    match outcome(&mut t, BOB, "b").await {
        Response::Outcome(o) => {
            let g = o.governor.unwrap_or_default();
            assert!(
                g.starts_with("the memory governor: frozen 6 s, past memory.frozen_max (5 s)")
                    && g.contains("it grew"),
                "{g}"
            );
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        outcome(&mut t, ALICE, "b").await,
        Response::Error {
            code: ErrorCode::Denied,
            ..
        }
    ));
    assert!(t
        .engine
        .jobs
        .get(&b)
        .is_none_or(|j| j.end.killed_by.is_some()));
    // a ran on all along.
    let a = t.seq_of("a");
    assert!(!t.engine.jobs[&a].memory.frozen && !t.engine.jobs[&a].memory.throttled);
}

/// The acceptance run: a `-m 1800M` job holding 1.7G was OOM-killed when another job filled
/// the partition, and was told (and its record said) that it hit its own limit. A job whose
/// own limit was never reached is told the partition's, naming its own; one whose was, its own.
#[tokio::test(flavor = "current_thread")]
async fn an_oom_kill_at_the_partition_is_not_told_as_the_jobs_own_limit() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed(fake.clone());
    started(&mut t, &mut p, ALICE, req("inno", Some(64 * MIB))).await;
    fake.set_stats(&cg("inno"), 50 * MIB, 0);
    fake.set_ooms(&cg("inno"), 1);
    fake.state().partition_ooms.insert(cg("inno"));
    match outcome(&mut t, ALICE, "inno").await {
        Response::Outcome(o) => assert!(o.oom_at_partition && o.oom_kills == 1, "{o:?}"),
        r => panic!("{r:?}"),
    }
    let seq = t.seq_of("inno");
    t.engine.handle(Event::MainExited { seq });
    match outcome(&mut t, ALICE, "inno").await {
        Response::Outcome(o) => {
            assert!(o.oom_at_partition);
            let ended = o.ended.unwrap_or_default();
            assert!(
                ended.contains("OOM-killed at the node's")
                    && ended.contains("job partition (its own 64M limit was not reached)"),
                "{ended}"
            );
        }
        r => panic!("{r:?}"),
    }
    // The check ran: where its own limit was reached, it is its own.
    started(&mut t, &mut p, ALICE, req("own", Some(64 * MIB))).await;
    fake.set_ooms(&cg("own"), 1);
    match outcome(&mut t, ALICE, "own").await {
        Response::Outcome(o) => assert!(!o.oom_at_partition && o.oom_kills == 1, "{o:?}"),
        r => panic!("{r:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn oom_kills_are_counted_shown_and_told_after_the_end() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed(fake.clone());
    started(&mut t, &mut p, ALICE, req("py", Some(64 * MIB))).await;
    fake.set_stats(&cg("py"), 60 * MIB, 0);
    fake.set_ooms(&cg("py"), 1);
    t.engine.handle(Event::Govern);
    assert_eq!(status(&mut t).await.jobs[0].oom_kills, 1);
    // Its command exits; the client asks before the daemon has seen the end.
    fake.set_ooms(&cg("py"), 2);
    match outcome(&mut t, ALICE, "py").await {
        Response::Outcome(o) => {
            assert_eq!((o.oom_kills, o.mem, o.ended), (2, Some(64 * MIB), None))
        }
        r => panic!("{r:?}"),
    }
    // The end: the outcome is kept for the owner, with the end reason naming the limit.
    let seq = t.seq_of("py");
    t.engine.handle(Event::MainExited { seq });
    assert!(!t.engine.jobs.contains_key(&seq), "ended");
    match outcome(&mut t, ALICE, "py").await {
        Response::Outcome(o) => {
            assert_eq!(o.oom_kills, 2);
            let ended = o.ended.unwrap_or_default();
            assert!(
                ended.starts_with("exited; 2 process(es) OOM-killed at its own 64M limit"),
                "{ended}"
            );
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        outcome(&mut t, BOB, "py").await,
        Response::Error {
            code: ErrorCode::Denied,
            ..
        }
    ));
    assert!(matches!(
        outcome(&mut t, 0, "nosuch").await,
        Response::Error {
            code: ErrorCode::NotFound,
            ..
        }
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn a_throttle_left_from_before_a_restart_is_lifted_when_the_job_is_recovered() {
    let fake = FakeCgroups::default();
    let mut p = Vec::new();
    let mut t = TestEngine::governed(fake.clone());
    started(&mut t, &mut p, ALICE, req("a", None)).await;
    let mut t = t.restart();
    let from = fake.calls().len();
    t.engine.recover().expect("recover");
    let seq = t.seq_of("a");
    assert!(t.engine.jobs.contains_key(&seq), "recovered");
    assert!(
        writes_since(&fake, from).contains(&format!("set_memory_high {} None", cg("a"))),
        "{:?}",
        writes_since(&fake, from)
    );
}

/// The proc connector's exec event for `pid`.
fn exec_of(t: &mut TestEngine, pid: u32) {
    let ev = proc_connector::ProcEvent::Exec {
        cpu: 0,
        seq: 0,
        pid,
        tgid: pid,
        timestamp_ns: 0,
    };
    t.engine
        .handle(Event::Proc(crate::procs::ProcMsg::Events(vec![ev])));
}

/// Decision (ct): a job with `--mem` is put at the back of the kernel OOM killer's line once
/// its process has called exec in the job (its address space then its own: review, a client
/// sharing its memory with a process outside would have marked that one) — by its share of the
/// partition — and a job without one keeps what it inherited, unless that ranked it with the
/// reservations (below 0): then 0.
#[tokio::test(flavor = "current_thread")]
async fn a_job_with_mem_is_marked_at_its_exec_and_one_without_never_ranks_with_it() {
    let mut t = TestEngine::new();
    let mut procs = Vec::new();
    started(&mut t, &mut procs, ALICE, req("free", None)).await;
    // Its client inherited -500 from a starter: raised to 0 as it joins.
    let inherited = Proc(
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap(),
    );
    let pid = inherited.0.id();
    procs.push(inherited);
    t.fake_stat(pid);
    t.fake_process(pid, BOB);
    t.set_oom_score_adj(pid, "-500");
    let r = t
        .submit(pid as u64, pid, BOB, req("inherited", None))
        .await
        .0;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    started(&mut t, &mut procs, BOB, req("reserved", Some(64 * MIB))).await;
    let (free, inherited, reserved) = (procs[0].0.id(), procs[1].0.id(), procs[2].0.id());
    assert_eq!(t.oom_score_adj(free), "0\n", "without --mem: untouched");
    assert_eq!(
        t.oom_score_adj(inherited),
        "0",
        "inherited below 0, without --mem: raised to 0"
    );
    assert_eq!(
        t.oom_score_adj(reserved),
        "0\n",
        "with --mem: nothing before its exec"
    );
    for p in [free, inherited, reserved] {
        exec_of(&mut t, p);
    }
    assert_eq!(
        t.oom_score_adj(free),
        "0\n",
        "without --mem: untouched at exec"
    );
    assert_eq!(t.oom_score_adj(inherited), "0");
    // 64 MiB of the test engine's partition.
    let want = super::oom_order::reserved_adj(64 * MIB, t.engine.mem_limit);
    assert!(want < 0);
    assert_eq!(
        t.oom_score_adj(reserved).trim(),
        want.to_string(),
        "with --mem, after its exec"
    );
}
