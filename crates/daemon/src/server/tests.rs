//! The socket layer's tests: limits, report turns, frames.

use super::*;

/// Issue 25, N7: a user holding cluster-store reports open (a frame read every 29 s)
/// holds one slot at most; other users still get the rest, and root its own.
#[tokio::test(flavor = "current_thread")]
async fn one_users_central_reports_leave_slots_for_others_and_root() {
    let slots = ReportSlots::default();
    let held = slots.central(1000).await;
    assert_eq!(held.len(), 2);
    // The same user's second waits; another user's and root's go at once.
    let again = tokio::time::timeout(Duration::from_millis(50), slots.central(1000)).await;
    assert!(
        again.is_err(),
        "a second central report of the same user got a slot"
    );
    let other = tokio::time::timeout(Duration::from_millis(50), slots.central(1001)).await;
    assert!(other.is_ok_and(|p| p.len() == 2));
    let mut users = Vec::new();
    for uid in [1002, 1003] {
        users.push(slots.central(uid).await);
    }
    let root = tokio::time::timeout(Duration::from_millis(50), slots.central(0)).await;
    assert!(root.is_ok_and(|p| p.len() == 1), "root waited behind users");
    drop(held);
    let again = tokio::time::timeout(Duration::from_millis(50), slots.central(1000)).await;
    assert!(again.is_ok(), "the user's slot did not come back");
}

#[test]
fn a_user_over_the_limit_is_refused_root_never_and_slots_come_back() {
    let open = Arc::new(Mutex::new(Open::default()));
    let limits = ConnLimits {
        per_user: 2,
        non_root_total: 3,
    };
    let a1 = take_slot(&open, 1000, limits).unwrap();
    let a2 = take_slot(&open, 1000, limits).unwrap();
    assert!(take_slot(&open, 1000, limits)
        .unwrap_err()
        .contains("max_connections_per_user"));
    let b1 = take_slot(&open, 1001, limits).unwrap();
    // All users together are at their total: another user is refused too.
    assert!(take_slot(&open, 1002, limits)
        .unwrap_err()
        .contains("no connection left"));
    // Root is never counted nor refused.
    for _ in 0..10 {
        assert!(take_slot(&open, 0, limits).unwrap().is_none());
    }
    drop(a1);
    let a3 = take_slot(&open, 1000, limits).unwrap();
    drop((a2, a3, b1));
    let o = open.lock().unwrap();
    assert!(o.by_uid.is_empty() && o.total == 0, "{o:?}");
}

#[test]
fn limits_leave_most_descriptors_to_the_daemon() {
    let l = ConnLimits::new(256, 1 << 20);
    assert_eq!(l.non_root_total, 1 << 18);
    assert_eq!(ConnLimits::new(256, 1024).non_root_total, 256);
}

/// Review F2, as the attack: a `status` answer over the frame (one user's thousands of steps
/// and queued jobs) reached every client as a frame it refuses, so `pjw status`, `pjw top`
/// and the Slurm task prolog failed for everyone. Written to a real socket, it now arrives
/// within the frame, cut, saying what it left out; another answer that big arrives as an
/// error the client reads, not as a frame it refuses.
#[tokio::test(flavor = "current_thread")]
async fn an_answer_over_the_frame_reaches_the_client_cut_or_as_an_error() {
    let base: pjw_proto::JobInfo = serde_json::from_str(
        r#"{"id":"1","name":"x","user":"u","uid":0,"cpus":"0","mems":"0","ncpus":1,
            "mem":null,"procs":1,"threads":1,"state":"running","age_secs":3,"pid":9}"#,
    )
    .unwrap();
    let step = |n| pjw_proto::StepInfo {
        step: n,
        pid: 100 + n,
        uid: 1000,
        name: "😀".repeat(64),
        cpus: pjw_core::CpuSet::parse_list("0").unwrap(),
        age_secs: 1,
    };
    let jobs = (0..64)
        .map(|i| pjw_proto::JobInfo {
            id: format!("j{i}"),
            steps: (0..72).map(step).collect(),
            ..base.clone()
        })
        .collect();
    let big = Response::Status(pjw_proto::StatusReport {
        node: "n1".into(),
        total_cpus: 64,
        cpus: pjw_core::CpuSet::parse_list("0-63").unwrap(),
        free_cpus: pjw_core::CpuSet::new(),
        vcpus: 64,
        jobs,
        gpus: pjw_core::GpuSet::new(),
        free_gpus: pjw_core::GpuSet::new(),
        cgroup: "v2".into(),
        version: "0".into(),
        starts: None,
        memory: None,
        cut: None,
    });
    assert!(
        encode_response(&big).len() > MAX_FRAME,
        "the attack's answer is over the frame"
    );
    let read_back = |resp: Response| async move {
        let (mut a, b) = UnixStream::pair().unwrap();
        let b = b.into_std().unwrap();
        b.set_nonblocking(false).unwrap();
        let reader = std::thread::spawn(move || {
            let mut b = b;
            pjw_proto::read_frame(&mut b).map(|f| pjw_proto::decode_response(&f.expect("a frame")))
        });
        write(&mut a, &resp).await.unwrap();
        reader.join().unwrap()
    };
    match read_back(big).await {
        Ok(Ok(Response::Status(s))) => {
            let cut = s.cut.expect("it says what it left out");
            assert_eq!(cut.steps, 64 * 72);
            assert_eq!(cut.jobs, 0, "without the steps every job fits");
            assert_eq!(s.jobs.len(), 64);
        }
        other => panic!("the client could not read it: {other:?}"),
    }
    let huge = Response::Error {
        code: ErrorCode::Internal,
        message: "x".repeat(MAX_FRAME + 1),
    };
    match read_back(huge).await {
        Ok(Ok(Response::Error { message, .. })) => {
            assert!(
                message.contains("more than the protocol's frame"),
                "{message}"
            )
        }
        other => panic!("the client could not read it: {other:?}"),
    }
}
