//! I/O weight and limits through the engine, on the recording fake cgroups and store.

use pjw_core::io_limits::{IoWeight, JobIo};
use pjw_proto::{ErrorCode, Response};

use crate::test_support::{run_request, FakeCgroups, TestEngine};

const UID: u32 = 1000;

fn node_io(t: &mut TestEngine, text: &str) {
    t.engine.cfg.io = JobIo::parse(text).expect("node io");
}

#[tokio::test(flavor = "current_thread")]
async fn a_user_may_lower_but_not_raise_the_io_weight_and_only_tighten_limits() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    node_io(&mut t, "weight=200; 254:0 rbps=100M");

    let mut req = run_request("hi", 1);
    req.io_weight = Some(201);
    let (r, _a) = t.submit(1, std::process::id(), UID, req).await;
    assert!(
        matches!(&r, Response::Error { code: ErrorCode::Denied, message } if message.contains("only root")),
        "{r:?}"
    );
    for (w, code) in [(0u16, ErrorCode::Invalid), (10001, ErrorCode::Invalid)] {
        let mut req = run_request("bad", 1);
        req.io_weight = Some(w);
        let (r, _x) = t.submit(2, std::process::id(), 0, req).await;
        assert!(
            matches!(&r, Response::Error { code: c, .. } if *c == code),
            "{w}: {r:?}"
        );
    }
    let mut req = run_request("bad2", 1);
    req.io_max = vec!["254:0 rbps=0".into()];
    let (r, _x) = t.submit(2, std::process::id(), UID, req).await;
    assert!(
        matches!(
            &r,
            Response::Error {
                code: ErrorCode::Invalid,
                ..
            }
        ),
        "{r:?}"
    );

    let mut req = run_request("lo", 1);
    req.io_weight = Some(50);
    req.io_max = vec!["254:0 rbps=500M wbps=1M".into(), "8:0 riops=10".into()];
    let (r, _b) = t.submit(3, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let want = "weight=50; 8:0 riops=10; 254:0 rbps=100M wbps=1M";
    assert!(
        fake.calls()
            .iter()
            .any(|c| c == &format!("create_job job-lo 0 io {want}")),
        "{:?}",
        fake.calls()
    );
    assert_eq!(
        t.store.calls_to("set_io"),
        [format!("set_io {} {want}", t.seq_of("lo"))]
    );
    let s = t.engine.status();
    let j = s.jobs.iter().find(|j| j.id == "lo").expect("job lo");
    assert_eq!(j.io.as_deref(), Some(want));

    // Root may raise it; a job that asks nothing gets the node's defaults.
    let mut req = run_request("root", 1);
    req.io_weight = Some(5000);
    let (r, _c) = t.submit(4, std::process::id(), 0, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let calls = fake.calls();
    let want = "create_job job-root 1 io weight=5000; 254:0 rbps=100M";
    assert!(calls.iter().any(|c| c == want), "{want}: {calls:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_that_asks_nothing_gets_the_node_defaults() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    node_io(&mut t, "weight=200; 254:0 rbps=100M");
    let (r, _d) = t
        .submit(1, std::process::id(), UID, run_request("plain", 1))
        .await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let want = "create_job job-plain 0 io weight=200; 254:0 rbps=100M";
    assert!(fake.calls().iter().any(|c| c == want), "{:?}", fake.calls());
}

#[tokio::test(flavor = "current_thread")]
async fn without_io_settings_nothing_is_stored_or_shown() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let (r, _a) = t
        .submit(1, std::process::id(), UID, run_request("a", 1))
        .await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert!(t.store.calls_to("set_io").is_empty());
    let s = t.engine.status();
    assert_eq!(s.jobs.len(), 1, "{s:?}");
    assert_eq!(s.jobs[0].io, None);
    assert!(
        fake.calls().iter().any(|c| c == "create_job job-a 0"),
        "{:?}",
        fake.calls()
    );
    assert_eq!(IoWeight::DEFAULT.get(), 100);
}

#[tokio::test(flavor = "current_thread")]
async fn a_recovered_job_gets_its_io_settings_back() {
    let mut t = TestEngine::new();
    let mut req = run_request("r", 1);
    req.io_weight = Some(30);
    let (r, _a) = t.submit(1, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let seq = t.seq_of("r");
    // Recovery builds the job from its row (no I/O settings) and restores the rest.
    let mut j = t.engine.jobs.remove(&seq).expect("job");
    j.io = JobIo::default();
    t.engine.restore_starter(&mut j);
    assert_eq!(j.io.summary(), "weight=30");
}

#[tokio::test(flavor = "current_thread")]
async fn too_many_io_max_devices_or_text_after_a_limit_is_refused_with_no_job() {
    // Security rule U13: at most 16 devices, and no free text reaches a cgroup file (a line
    // break or a second key after a limit is refused, not written).
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    let cases: Vec<Vec<String>> = vec![
        (0..17).map(|i| format!("8:{i} rbps=1M")).collect(),
        vec!["254:0 rbps=1M\n254:1 rbps=1M".into()],
        vec!["254:0 rbps=1M; 8:0 wbps=1M".into()],
        vec!["254:0 rbps=1M rbps=2M".into()],
        vec!["254:0\trbps=1M\0".into()],
    ];
    for (i, io_max) in cases.into_iter().enumerate() {
        let mut req = run_request(&format!("x{i}"), 1);
        req.io_max = io_max.clone();
        let (r, _a) = t.submit(1, std::process::id(), UID, req).await;
        assert!(
            matches!(
                &r,
                Response::Error {
                    code: ErrorCode::Invalid,
                    ..
                }
            ),
            "{io_max:?}: {r:?}"
        );
    }
    assert!(t.engine.jobs.is_empty());
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("create_job")),
        "{:?}",
        fake.calls()
    );
    // A line break between a device's keys is white space: what is written is rebuilt from
    // the parsed values, one line per device.
    let mut req = run_request("nl", 1);
    req.io_max = vec!["254:0 rbps=1M\nwbps=2M".into()];
    let (r, _b) = t.submit(2, std::process::id(), UID, req).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let want = "create_job job-nl 0 io 254:0 rbps=1M wbps=2M";
    assert!(
        fake.calls().iter().any(|c| c == want),
        "{want}: {:?}",
        fake.calls()
    );
}
