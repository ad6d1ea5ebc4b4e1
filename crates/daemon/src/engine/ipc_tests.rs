//! A job's /dev/shm and IPC through the engine: who is told to make a private one, of what size;
//! when the scrub runs and for whom, and that it removes a file the job left in a fake /dev/shm.

use std::time::{Duration, SystemTime};

use pjw_proto::Response;

use crate::clock::Clock;
use crate::test_support::{run_request, TestEngine};

#[tokio::test(flavor = "current_thread")]
async fn a_root_client_is_told_its_shm_size_a_user_none() {
    let mut t = TestEngine::new();
    t.engine.cfg.ipc.shm_size = Some(32 << 20);
    let cases: &[(&str, u32, Option<u64>, Option<u64>)] = &[
        ("root, no --mem: shm_size", 0, None, Some(32 << 20)),
        (
            "root, --mem: the job's memory",
            0,
            Some(48 << 20),
            Some(48 << 20),
        ),
        ("a user cannot make namespaces", 1000, Some(48 << 20), None),
    ];
    for (i, (what, uid, mem, want)) in cases.iter().enumerate() {
        let mut req = run_request(&format!("s{i}"), 1);
        req.mem = *mem;
        let (r, _rx) = t.submit(i as u64 + 1, 5001 + i as u32, *uid, req).await;
        let Response::Started { shm, .. } = r else {
            panic!("{what}: {r:?}");
        };
        assert_eq!(shm, *want, "{what}");
    }
    // private_ipc = false: nobody is; without shm_size, the job partition.
    let mut off = TestEngine::new();
    off.engine.cfg.ipc.private = false;
    let (r, _rx) = off
        .submit(1, std::process::id(), 0, run_request("o", 1))
        .await;
    assert!(matches!(r, Response::Started { shm: None, .. }), "{r:?}");
    let mut dflt = TestEngine::new();
    let (r, _rx) = dflt
        .submit(1, std::process::id(), 0, run_request("d", 1))
        .await;
    let part = dflt.engine.mem_limit;
    assert!(
        matches!(r, Response::Started { shm: Some(s), .. } if s == part),
        "{r:?}"
    );
}

/// A child that sleeps until dropped.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn new() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("sleep"),
        )
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn clock_to_wall(t: &TestEngine) {
    t.clock.advance(wall_ms() - t.clock.now_ms());
}

#[tokio::test(flavor = "current_thread")]
async fn the_scrub_waits_for_the_owners_last_job_and_removes_what_it_left() {
    let mut t = TestEngine::new();
    clock_to_wall(&t);
    // Files made as root belong to another uid here: root's are never scrubbed.
    let me = rustix::process::getuid().as_raw();
    let owner = if me == 0 { 4244 } else { me };
    // Live main processes (a job whose main process is gone ends at once).
    let mut procs = Vec::new();
    let mut rxs = Vec::new();
    for (i, (id, uid)) in [("a", owner), ("b", owner), ("r", 0)]
        .into_iter()
        .enumerate()
    {
        let p = Sleeper::new();
        let (r, rx) = t
            .submit(i as u64 + 1, p.0.id(), uid, run_request(id, 1))
            .await;
        assert!(matches!(r, Response::Started { .. }), "{r:?}");
        rxs.push(rx);
        procs.push(p);
    }
    let (a, b, r) = (t.seq_of("a"), t.seq_of("b"), t.seq_of("r"));
    let job_a = t.engine.jobs.remove(&a).expect("job a");
    assert_eq!(
        t.engine.scrub_for(&job_a, 1000),
        None,
        "b of the same owner still runs"
    );
    let job_r = t.engine.jobs.remove(&r).expect("job r");
    assert_eq!(t.engine.scrub_for(&job_r, 1000), None, "root's job");
    // b's job made a file in /dev/shm during its life.
    let shm = t.engine.cfg.dev_root.join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let left = shm.join("left");
    std::fs::write(&left, "x").unwrap();
    if me == 0 {
        std::os::unix::fs::lchown(&left, Some(owner), None).unwrap();
    }
    clock_to_wall(&t);
    let now = t.clock.now_ms() as u64;
    // As finish sees it: b out of the table, no other job of the owner's running.
    let job_b = t.engine.jobs.remove(&b).expect("job b");
    let (ended, live) = t.engine.scrub_for(&job_b, 2000).expect("b is the last");
    assert_eq!(ended.uid, owner);
    assert_eq!(
        (ended.since, ended.until),
        ((now - 2000) / 1000, now.div_ceil(1000))
    );
    assert!(live.is_empty(), "{live:?}");
    t.engine.cfg.ipc.scrub = false;
    assert_eq!(t.engine.scrub_for(&job_b, 2000), None, "scrub_ipc = false");
    t.engine.cfg.ipc.scrub = true;
    t.engine.jobs.insert(b, job_b);
    t.engine.finish(b, crate::profile::EndReason::Exited);
    // The removal runs on a blocking thread: wait for it (a correctness bound, not a timing).
    let mut waited = Duration::ZERO;
    while left.exists() && waited < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert!(!left.exists(), "the file b left is still there");
}

/// Issue 25, N5: one scrub per owner at a time. A thousand job ends of one user while a scrub
/// of theirs runs make one more scrub, not a thousand, with the lives joined; another user's
/// starts at once; once the owner's last is over a new one starts again.
#[test]
fn job_ends_while_a_scrub_runs_are_merged_into_one_more_per_owner() {
    use super::ipc::{ask, next, Scrubs};
    use pjw_core::ipc_scrub::Ended;
    let scrubs = Scrubs::default();
    let e = |uid, since, until| Ended { uid, since, until };
    assert!(ask(&scrubs, e(1000, 10, 20), vec![]));
    for i in 0..1000u64 {
        assert!(!ask(&scrubs, e(1000, 30 + i, 40 + i), vec![7]));
    }
    assert!(
        ask(&scrubs, e(1001, 5, 6), vec![]),
        "another owner waits for nobody"
    );
    assert_eq!(next(&scrubs, 1000), Some((e(1000, 30, 1039), vec![7])));
    assert_eq!(next(&scrubs, 1000), None);
    assert!(
        ask(&scrubs, e(1000, 50, 60), vec![]),
        "none runs for 1000 any more"
    );
}
