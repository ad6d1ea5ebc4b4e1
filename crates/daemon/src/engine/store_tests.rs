//! Tests of the engine's store writes against a store that fails like a full disk: every
//! failure is counted, no job is lost, and a request the store refuses is refused to its client.

use std::time::Instant;

use pjw_cgroup::JobLimits;
use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, Placement, Response, RunRequest};
use pjw_store::{JobRecord, StoredState};
use tokio::sync::mpsc;

use super::{cgroup_name, Control, Cred, Event, Who};
use crate::store_port::{StoreReader, StoreWriter};
use crate::test_support::TestEngine;

const ROOT: Cred = Cred {
    pid: 1,
    uid: 0,
    gid: 0,
};

fn root() -> Who {
    Who {
        name: "root".into(),
        ..Who::default()
    }
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).expect("cpu list")
}

/// A job as the store and the engine hold it: queued, or started on `on` (its cgroups made).
fn add_job(t: &mut TestEngine, id: &str, on: Option<&str>) -> i64 {
    let job_id = TestEngine::id(id);
    let rec = JobRecord {
        seq: 0,
        job_id: job_id.to_string(),
        name: "test".into(),
        uid: 0,
        gid: 0,
        user: "root".into(),
        ncpus: 2,
        cpus: CpuSet::new(),
        mems: CpuSet::new(),
        mem_limit: None,
        pid: None,
        pid_start: None,
        cgroup: cgroup_name(&job_id),
        argv: vec![],
        state: StoredState::Queued,
        submitted_ms: 0,
        started_ms: None,
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    };
    let seq = t.store.clone().insert_job(&rec).expect("insert");
    let rec = JobRecord { seq, ..rec };
    let job = match on {
        None => t
            .engine
            .job_from_record(&rec, job_id, Phase::Queued, CpuSet::new(), None),
        Some(list) => {
            let limits = JobLimits {
                cpus: cpus(list),
                mems: cpus("0"),
                memory_max: None,
                pids_max: None,
                swap_max: None,
                io: Default::default(),
            };
            t.engine
                .driver
                .create_job(&rec.cgroup, &limits)
                .expect("job cgroups on the fake tree");
            t.engine.job_from_record(
                &rec,
                job_id,
                Phase::Primary,
                cpus(list),
                Some(Instant::now()),
            )
        }
    };
    t.engine.jobs.insert(seq, job);
    seq
}

#[tokio::test(flavor = "current_thread")]
async fn a_priority_change_the_store_refuses_is_refused_to_the_client_and_counted() {
    let mut t = TestEngine::new();
    let seq = add_job(&mut t, "7", None);
    t.store.set_full(true);

    let r = t.engine.control(ROOT, &root(), "7", Control::Priority(3));

    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(
        message.contains("cannot record the new priority of job 7")
            && message.contains("database or disk is full"),
        "{message}"
    );
    // Tried twice, refused: memory and store both keep the old priority.
    assert_eq!(
        t.store.calls_to("set_priority"),
        ["set_priority 1 3 !", "set_priority 1 3 !"]
    );
    assert_eq!(t.engine.jobs[&seq].req.priority, 10);
    assert_eq!(t.store.state().rows[&seq].priority, 10);
    // Counted once (one refused write), and shown on the metrics page.
    assert_eq!(t.engine.store_write_errors(), 1);
    let page = crate::metrics::render(&t.engine.metrics_snapshot(), &t.engine.metrics(), None);
    assert!(page.contains("pjw_store_write_errors_total 1"), "{page}");
    assert_eq!(t.engine.store_backlog(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_the_store_cannot_record_gets_a_clear_error_and_leaves_no_job() {
    let mut t = TestEngine::new();
    t.store.set_full(true);
    let (reply, mut answers) = mpsc::unbounded_channel();
    let req = RunRequest {
        gpus: 0,
        bind: None,
        tasks: None,
        time_limit_s: None,
        cpus: 1,
        mem: None,
        job_id: Some("t1".into()),
        name: None,
        argv: vec!["true".into()],
        priority: None,
        placement: Placement::Any,
        exclusive: false,
        user: None,
        wlm: None,
        tmp: None,
        io_weight: None,
        io_max: vec![],
    };

    t.engine.handle(Event::Submit {
        conn: 1,
        cred: ROOT,
        who: root(),
        req,
        reply,
    });

    let r = answers.try_recv().expect("an answer");
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(message.starts_with("cannot record job: "), "{message}");
    assert!(message.contains("database or disk is full"), "{message}");
    assert!(t.engine.jobs.is_empty());
    assert_eq!(t.engine.store_write_errors(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_move_the_store_refuses_stays_in_memory_and_is_written_once_the_disk_has_room() {
    let mut t = TestEngine::new();
    let seq = add_job(&mut t, "8", Some("0-1"));
    t.store.set_full(true);

    // Moved in the kernel: the store's refusal does not undo it.
    assert!(t.engine.move_job(seq, cpus("2-3"), Phase::Backfill, None));

    let j = &t.engine.jobs[&seq];
    assert_eq!((j.phase, j.cpus), (Phase::Backfill, cpus("2-3")));
    assert_eq!(t.store.calls_to("set_role"), ["set_role 1 backfill 2-3 !"]);
    assert_eq!(t.store.state().rows[&seq].role.as_str(), "primary");
    assert_eq!(t.engine.store_write_errors(), 1);
    assert_eq!(t.engine.store_backlog(), 1);

    // Still full at the retry: counted again, still pending.
    t.engine.handle(Event::StoreRetry);
    assert_eq!(t.engine.store_write_errors(), 2);
    assert_eq!(t.engine.store_backlog(), 1);

    t.store.set_full(false);
    t.engine.handle(Event::StoreRetry);
    assert_eq!(t.engine.store_backlog(), 0);
    let row = t.store.state().rows[&seq].clone();
    assert_eq!((row.role.as_str(), row.cpus), ("backfill", cpus("2-3")));
    assert_eq!(row.state, StoredState::Running);
    assert_eq!(t.engine.store_write_errors(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn an_end_the_store_refuses_is_not_lost() {
    let mut t = TestEngine::new();
    let seq = add_job(&mut t, "9", Some("0-1"));
    t.store.set_full(true);

    t.engine.finish(seq, crate::profile::EndReason::Exited);

    // Gone from memory (its cgroups are gone), its end kept until the store takes it.
    assert!(!t.engine.jobs.contains_key(&seq));
    assert_eq!(t.engine.store_backlog(), 1);
    assert_eq!(t.store.live_jobs().expect("rows").len(), 1);
    assert_eq!(
        t.store.calls_to("finish_job"),
        ["finish_job 1 exited !"],
        "{:?}",
        t.store.state().calls
    );
    assert_eq!(
        t.engine.store_write_errors(),
        2,
        "finish_job, then set_ended"
    );

    t.store.set_full(false);
    t.engine.handle(Event::StoreRetry);
    assert_eq!(t.engine.store_backlog(), 0);
    let row = t.store.state().rows[&seq].clone();
    assert_eq!(row.state, StoredState::Ended);
    assert_eq!(row.end_reason.as_deref(), Some("exited"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_register_takes_the_run_path_and_a_full_store_refuses_it_to_the_manager() {
    let mut t = TestEngine::new();
    let (reply, mut answers) = mpsc::unbounded_channel();
    let who = Who {
        name: "root".into(),
        admin: false,
        named: Some((1000, 1000)),
    };
    let store = t.store.clone();
    t.engine.handle(Event::Register {
        conn: 1,
        cred: ROOT,
        who: who.clone(),
        req: pjw_proto::RegisterRequest {
            job: "42".into(),
            wlm: "slurm".into(),
            user: "someone".into(),
            cpus: 1,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply: reply.clone(),
    });
    // With a store that works, the job is queued or started, its manager tag recorded.
    assert_eq!(store.calls_to("set_starter").len(), 1);
    let first = answers.try_recv().expect("an answer");
    assert!(
        matches!(first, Response::Queued { .. } | Response::Started { .. }),
        "{first:?}"
    );

    // A second manager job while the disk is full: refused, no job, counted.
    store.set_full(true);
    let before = t.engine.jobs.len();
    t.engine.handle(Event::Register {
        conn: 2,
        cred: ROOT,
        who,
        req: pjw_proto::RegisterRequest {
            job: "43".into(),
            wlm: "slurm".into(),
            user: "someone".into(),
            cpus: 1,
            mem: None,
            name: None,
            attach: false,
            gpus: None,
        },
        reply,
    });
    let r = answers.try_recv().expect("an answer");
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(message.starts_with("cannot record job: "), "{message}");
    assert_eq!(t.engine.jobs.len(), before);
    assert!(t.engine.store_write_errors() >= 1);
}

/// `pjw run -- true` with a generated id: what the store is asked from submission to end.
fn plain_run() -> RunRequest {
    RunRequest {
        job_id: None,
        argv: vec!["true".into()],
        ..crate::test_support::run_request("unused", 1)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_plain_launch_is_one_transaction_to_submit_and_start_it_and_one_to_end_it() {
    let mut t = TestEngine::new();
    let me = std::process::id();
    let before = t.store.transactions();
    let (r, _rx) = t.submit(1, me, 1000, plain_run()).await;
    let Response::Started { job, cpus: on, .. } = r else {
        panic!("expected Started, got {r:?}");
    };
    assert_eq!(job, "1");
    let seq = t.seq_of("1");
    // The submission (number, row) and the start (CPUs, role, running), nothing else.
    assert_eq!(
        t.store.transactions() - before,
        2,
        "{:?}",
        t.store.state().calls
    );
    assert_eq!(
        t.store.state().calls,
        [
            "take_job_number 1".to_string(),
            "insert_job 1".to_string(),
            format!("set_starting {seq} primary {on}"),
            format!("set_running {seq}"),
        ]
    );
    let row = t.store.state().rows[&seq].clone();
    assert_eq!((row.state, row.cpus), (StoredState::Running, on));

    // Its end: the row ended with its summary, one transaction.
    t.engine.handle(Event::MainExited { seq });
    assert_eq!(
        t.store.transactions() - before,
        3,
        "{:?}",
        t.store.state().calls
    );
    assert_eq!(t.store.state().rows[&seq].state, StoredState::Ended);
    assert_eq!(t.engine.store_write_errors(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_submission_the_store_refuses_leaves_no_row_no_side_row_and_no_number_taken() {
    let mut t = TestEngine::new();
    let me = std::process::id();
    let req = RunRequest {
        io_weight: Some(50),
        bind: Some(pjw_core::thread_bind::BindMode::Cores),
        ..plain_run()
    };
    t.store.set_full(true);
    let (r, _rx) = t.submit(1, me, 1000, req.clone()).await;
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(message.starts_with("cannot record job: "), "{message}");
    // Tried twice as one transaction each time: every part failed together, none applied.
    {
        let st = t.store.state();
        assert_eq!(
            st.calls,
            [
                "take_job_number 1 !",
                "insert_job 1 !",
                "set_io 1 weight=50 !",
                "set_bind 1 cores !",
                "take_job_number 1 !",
                "insert_job 1 !",
                "set_io 1 weight=50 !",
                "set_bind 1 cores !",
            ]
        );
        assert!(st.rows.is_empty() && st.io.is_empty() && st.bind.is_empty());
        assert_eq!(st.transactions, 0);
    }
    assert!(t.engine.jobs.is_empty());
    assert_eq!(t.engine.store_write_errors(), 1);
    assert_eq!(t.store.job_number().expect("number"), 1);

    // Once the disk has room the next run takes the number after the refused one's: a number
    // is not offered twice (it may be a row the store still holds live); gaps are harmless.
    t.store.set_full(false);
    let (r, _rx) = t.submit(2, me, 1000, req).await;
    assert!(
        matches!(&r, Response::Started { job, .. } if job == "2"),
        "{r:?}"
    );
    let seq = t.seq_of("2");
    let st = t.store.state();
    assert_eq!(st.io[&seq].summary(), "weight=50");
    assert_eq!(st.bind[&seq], pjw_core::thread_bind::BindMode::Cores);
    assert_eq!(
        t.engine.jobs[&seq].bind,
        Some(pjw_core::thread_bind::BindMode::Cores)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_start_the_store_refuses_writes_none_of_it_and_is_refused_to_its_client() {
    let mut t = TestEngine::new();
    let me = std::process::id();
    // The whole node to one job; the second waits for it.
    let whole = |id: &str| RunRequest {
        cpus: 4,
        ..crate::test_support::run_request(id, 4)
    };
    let (r, _a) = t.submit(1, me, 1000, whole("a")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    // Another client process (one already running a job is told that job again).
    let (r, mut b) = t.submit(2, 4242, 1000, whole("b")).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    let (a, bseq) = (t.seq_of("a"), t.seq_of("b"));

    // The disk fills; a ends (kept for later), b's start is refused: tried twice, all or nothing.
    t.store.set_full(true);
    t.engine.handle(Event::MainExited { seq: a });
    let r = b.try_recv().expect("b's answer");
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(message.starts_with("cannot record job: "), "{message}");
    assert_eq!(
        t.store.calls_to("set_starting")[1..],
        [
            format!("set_starting {bseq} primary 0-3 !"),
            format!("set_starting {bseq} primary 0-3 !")
        ]
    );
    assert_eq!(
        t.store.calls_to("set_running").last(),
        Some(&format!("set_running {bseq} !"))
    );
    let row = t.store.state().rows[&bseq].clone();
    assert_eq!((row.state, row.started_ms), (StoredState::Queued, None));
    assert!(!t.engine.jobs.contains_key(&bseq));
    // b waited in its own cgroups (decision (cm)): they go once its client, told, has left.
    let b_cg = cgroup_name(&TestEngine::id("b"));
    assert!(t.engine.driver.list_jobs().expect("list").contains(&b_cg));
    let _ = t.engine.driver.kill(&b_cg).expect("the client exits");
    t.engine.handle(Event::Vacate);
    assert!(!t.engine.driver.list_jobs().expect("list").contains(&b_cg));
    // Its end is kept and written once the disk has room: no live row is left behind to hold
    // the id "b" (or a generated number) against later submissions.
    t.store.set_full(false);
    t.engine.handle(Event::StoreRetry);
    let row = t.store.state().rows[&bseq].clone();
    assert_eq!(
        (row.state, row.end_reason.as_deref()),
        (StoredState::Ended, Some("start failed: store"))
    );
    let (r, _b2) = t.submit(3, 4243, 1000, whole("b")).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
}

/// Review F3, as the attack: a user's command line of megabytes (4,096 arguments of up to
/// 128 KiB each pass the argument count) was kept whole in the job's row for the retention
/// period, a megabyte per `pjw run -- true …`, until the store's disk filled. The row keeps
/// its first 4 KiB and says what was left out; a short command line is kept as it is.
#[tokio::test(flavor = "current_thread")]
async fn a_megabyte_command_line_is_not_kept_whole() {
    let mut t = TestEngine::new();
    let mut req = crate::test_support::run_request("big", 1);
    req.argv = vec!["true".into(), "x".repeat(1 << 20), "y".repeat(1 << 20)];
    let (r, _rx) = t.submit(1, 4100, 1000, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let row_of = |t: &TestEngine, id: &str| {
        let rows = t.store.state().rows.clone();
        rows.into_values()
            .find(|r| r.job_id == id)
            .expect("its row")
    };
    let row = row_of(&t, "big");
    let kept: usize = row.argv.iter().map(String::len).sum();
    assert!(kept < 4096 + 64, "{kept} bytes kept");
    assert_eq!(row.argv[0], "true");
    assert_eq!(
        row.argv.last().map(String::as_str),
        Some(
            format!(
                "[… {} more bytes in 2 more arguments]",
                2 * (1 << 20) + 4 - 4096
            )
            .as_str()
        )
    );
    // The check ran beside a row kept whole.
    let (r, _rx) = t
        .submit(2, 4101, 1000, crate::test_support::run_request("small", 1))
        .await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(row_of(&t, "small").argv, ["sleep"]);
}
