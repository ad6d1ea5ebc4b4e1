//! GPU jobs through the engine, without root, on a fake cgroup tree and the recording fake
//! store: 4 CPUs, 4 GPUs (0 and 1 local to CPUs 0-1, 2 and 3 to CPUs 2-3).

use pjw_core::sched::Phase;
use pjw_core::{CpuSet, Gpu, GpuId, GpuSet, GpuVendor, Gpus};
use pjw_proto::{ErrorCode, Response};
use pjw_store::{JobRecord, StoredState};
use tokio::sync::mpsc;

use super::table_tests::{job_cgroup, record};
use super::{cgroup_name, Cred, Event};
use crate::store_port::{StoreDetailWriter, StoreWriter};
use crate::test_support::{client, run_request, who, FakeCgroups, TestEngine};

const UID: u32 = 1000;

fn cs(s: &str) -> CpuSet {
    CpuSet::parse_list(s).expect("cpu list")
}

fn gs(s: &str) -> GpuSet {
    GpuSet::parse_list(s).expect("gpu list")
}

fn node_gpus() -> Gpus {
    let gpu = |i: u32, cpus: &str| Gpu {
        id: GpuId(i),
        vendor: GpuVendor::Nvidia,
        pci: None,
        switch: None,
        numa: None,
        cpus: cs(cpus),
        devices: vec![pjw_core::DeviceNode {
            path: format!("/dev/nvidia{i}"),
            major: 195,
            minor: i,
        }],
    };
    Gpus {
        gpus: vec![gpu(0, "0-1"), gpu(1, "0-1"), gpu(2, "2-3"), gpu(3, "2-3")],
        shared: vec![],
    }
}

fn engine() -> TestEngine {
    let mut t = TestEngine::new();
    t.engine.set_gpus(node_gpus(), false);
    t
}

/// Submit `id` asking for `gpus` GPUs and `cpus` CPUs from process `pid`; its first answer,
/// and its channel (kept open: a queued job whose client is gone is withdrawn).
async fn submit(
    t: &mut TestEngine,
    conn: u64,
    pid: u32,
    id: &str,
    cpus: u32,
    gpus: u32,
) -> (Response, mpsc::UnboundedReceiver<Response>) {
    t.fake_process(pid, UID);
    let (reply, mut rx) = mpsc::unbounded_channel();
    let mut req = run_request(id, cpus);
    req.gpus = gpus;
    t.engine.handle(Event::Submit {
        conn,
        cred: Cred { pid, ..client(UID) },
        who: who(),
        req,
        reply,
    });
    let first = rx.recv().await.expect("an answer");
    (first, rx)
}

fn env_of<'a>(r: &'a Response, key: &str) -> Option<&'a str> {
    match r {
        Response::Started { env, .. } => {
            env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
        }
        _ => None,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn four_one_gpu_jobs_get_four_gpus_with_local_cpus_and_a_fifth_waits() {
    let mut t = engine();
    let me = std::process::id();
    let mut seen = GpuSet::new();
    let mut clients = Vec::new();
    for (i, pid) in [me, 1, 2, 3].into_iter().enumerate() {
        let (r, rx) = submit(&mut t, i as u64, pid, &format!("g{i}"), 1, 1).await;
        let Response::Started { cpus, .. } = &r else {
            panic!("job {i} did not start: {r:?}")
        };
        let host = env_of(&r, "PJW_GPUS").expect("PJW_GPUS");
        let g = gs(host);
        clients.push(rx);
        assert_eq!(g.len(), 1, "{r:?}");
        assert!(!g.intersects(&seen), "gpu {g} handed out twice");
        seen = seen.union(&g);
        let local = node_gpus().get(g.iter().next().unwrap()).unwrap().cpus;
        assert!(
            cpus.is_subset(&local),
            "job {i}: cpus {cpus} not local to gpu {g}"
        );
        // No device fence yet: the runtime sees every GPU, so the host position is kept.
        assert_eq!(env_of(&r, "CUDA_VISIBLE_DEVICES"), Some(host));
        assert_eq!(env_of(&r, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    }
    assert_eq!(seen, gs("0-3"));
    let (r, _rx) = submit(&mut t, 9, 4, "g4", 1, 1).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    // Every grant was written before its job started.
    assert_eq!(
        t.store.calls_to("set_gpus").len(),
        5 + 4,
        "{:?}",
        t.store.calls_to("set_gpus")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn more_gpus_than_the_node_has_is_refused() {
    let mut t = engine();
    let (r, _rx) = submit(&mut t, 1, std::process::id(), "big", 1, 5).await;
    match r {
        Response::Error { code, message } => {
            assert_eq!(code, ErrorCode::Invalid);
            assert!(
                message.contains("--gpus 5 is more than this node has (4 gpus)"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn after_a_restart_a_recovered_job_keeps_its_gpus() {
    let mut t = engine();
    let pid = std::process::id();
    t.fake_process(pid, UID);
    t.fake_stat(pid);
    let rec = record("old", StoredState::Running, pid);
    let mut store = t.store.clone();
    let seq = store.insert_job(&rec).expect("insert");
    store.set_gpus(seq, 2, &gs("0-1")).expect("gpus row");
    job_cgroup(&t, &rec, Some(pid));

    t.engine.recover().expect("recover");
    let j = &t.engine.jobs[&seq];
    assert_eq!(
        (j.phase, j.gpus, j.req.ngpus),
        (Phase::Primary, gs("0-1"), 2)
    );

    // Its GPUs are not handed out again: a 2-GPU job gets the other two, a third waits.
    let (r, _new) = submit(&mut t, 1, 1, "new", 2, 2).await;
    assert_eq!(env_of(&r, "PJW_GPUS"), Some("2,3"), "{r:?}");
    let (r, _late) = submit(&mut t, 2, 2, "late", 1, 1).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_fenced_job_is_denied_the_other_gpus_and_counts_its_own_from_zero() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.set_gpus(node_gpus(), true);
    let (r, _a) = submit(&mut t, 1, std::process::id(), "g", 1, 1).await;
    assert_eq!(env_of(&r, "PJW_GPUS"), Some("0"), "{r:?}");
    assert_eq!(env_of(&r, "CUDA_VISIBLE_DEVICES"), Some("0"), "{r:?}");
    let (r, _b) = submit(&mut t, 2, 1, "h", 1, 1).await;
    // Fenced, GPU 1 is the only one the job's runtime sees: device 0.
    assert_eq!(env_of(&r, "PJW_GPUS"), Some("1"), "{r:?}");
    assert_eq!(env_of(&r, "CUDA_VISIBLE_DEVICES"), Some("0"), "{r:?}");
    let (r, _c) = submit(&mut t, 3, 2, "cpu", 1, 0).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(env_of(&r, "CUDA_VISIBLE_DEVICES"), None, "{r:?}");
    let calls = fake.calls();
    let deny: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("deny_devices"))
        .collect();
    assert_eq!(
        deny,
        [
            "deny_devices job-g 195:1,195:2,195:3",
            "deny_devices job-h 195:0,195:2,195:3",
            "deny_devices job-cpu 195:0,195:1,195:2,195:3",
        ]
    );
    // The fence comes before the client joins the job.
    let fence = calls
        .iter()
        .position(|c| c == "deny_devices job-g 195:1,195:2,195:3");
    let join = calls
        .iter()
        .position(|c| c.starts_with("add_process job-g "));
    assert!(fence.expect("fenced") < join.expect("joined"), "{calls:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_whose_fence_the_kernel_refuses_does_not_start_unfenced() {
    let fake = FakeCgroups::default();
    fake.state().fail.push("deny_devices");
    let mut t = TestEngine::recording(fake.clone());
    t.engine.set_gpus(node_gpus(), true);
    let (r, _a) = submit(&mut t, 1, std::process::id(), "g", 1, 1).await;
    let Response::Error { code, message } = r else {
        panic!("expected an error, got {r:?}");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(
        message.starts_with("cannot set up the job's cgroups: "),
        "{message}"
    );
    // Created, the fence refused, removed: no process ever joined the job.
    let calls = fake.calls();
    assert!(
        calls.contains(&"deny_devices job-g 195:1,195:2,195:3 !".to_string()),
        "{calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c.starts_with("add_process")),
        "{calls:?}"
    );
    assert_eq!(calls.last().map(String::as_str), Some("remove_job job-g"));
    assert!(t.engine.jobs.is_empty());
}

/// `slurm prolog` registers job `id` of user1000 with `cpus` CPUs and the GPUs Slurm chose
/// (`gpus`, Slurm's indices); the first answer.
fn register(t: &mut TestEngine, id: &str, cpus: u32, gpus: Option<Vec<u32>>) -> Response {
    let (reply, mut rx) = mpsc::unbounded_channel();
    t.engine.handle(Event::Register {
        conn: 1,
        cred: Cred {
            pid: 1,
            uid: 0,
            gid: 0,
        },
        who: crate::engine::Who {
            name: "root".into(),
            admin: false,
            named: Some((UID, UID)),
        },
        req: pjw_proto::RegisterRequest {
            job: id.into(),
            wlm: "slurm".into(),
            user: "user1000".into(),
            cpus,
            mem: None,
            name: None,
            attach: false,
            gpus,
        },
        reply,
    });
    rx.try_recv().expect("an answer")
}

fn job_gpus(t: &TestEngine, id: &str) -> (GpuSet, CpuSet) {
    let j = t
        .engine
        .jobs
        .values()
        .find(|j| j.id.as_str() == id)
        .expect("the job");
    (j.gpus, j.cpus)
}

#[tokio::test(flavor = "current_thread")]
async fn a_registered_job_gets_the_gpus_its_manager_chose_fenced_with_local_cpus() {
    let fake = FakeCgroups::default();
    let mut t = TestEngine::recording(fake.clone());
    t.engine.set_gpus(node_gpus(), true);
    // Slurm chose GPU 3 (pjw would have picked 0 first).
    let r = register(&mut t, "7", 1, Some(vec![3]));
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    let (g, c) = job_gpus(&t, "slurm:7");
    assert_eq!(g, gs("3"));
    assert!(c.is_subset(&cs("2-3")), "cpus {c} not local to gpu 3");
    assert!(
        fake.calls()
            .contains(&"deny_devices job-slurm:7 195:0,195:1,195:2".to_string()),
        "{:?}",
        fake.calls()
    );
    // The choice is recorded (recovery keeps it), before the job starts on it.
    let row = format!("set_gpus {} 1 3", t.engine.jobs.keys().next().unwrap());
    assert_eq!(t.store.calls_to("set_gpus"), [row.clone(), row]);
    // A second job on GPUs 0 and 2 gets exactly those.
    let r = register(&mut t, "8", 2, Some(vec![2, 0]));
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(job_gpus(&t, "slurm:8").0, gs("0,2"));
    // No GPUs named: none given, every one fenced.
    let r = register(&mut t, "9", 1, None);
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(job_gpus(&t, "slurm:9").0, GpuSet::new());
}

#[tokio::test(flavor = "current_thread")]
async fn a_gpu_the_node_lacks_or_another_job_holds_is_refused_not_replaced() {
    let mut t = engine();
    for (gpus, code, want) in [
        (
            vec![4],
            ErrorCode::Invalid,
            "slurm gave the job gpu 4, but this node has gpus 0-3",
        ),
        (vec![1, 1], ErrorCode::Invalid, "slurm named gpu 1 twice"),
    ] {
        match register(&mut t, "7", 1, Some(gpus.clone())) {
            Response::Error { code: c, message } => {
                assert_eq!(c, code, "{gpus:?}: {message}");
                assert!(message.contains(want), "{gpus:?}: {message}");
            }
            other => panic!("{gpus:?}: expected a refusal, got {other:?}"),
        }
    }
    assert!(t.engine.jobs.is_empty());
    // A pjw job holds GPU 0: a manager's job pinned to it is refused, not given GPU 1.
    let (r, _rx) = submit(&mut t, 1, std::process::id(), "mine", 1, 1).await;
    assert_eq!(env_of(&r, "PJW_GPUS"), Some("0"), "{r:?}");
    match register(&mut t, "8", 1, Some(vec![0])) {
        Response::Error { code, message } => {
            assert_eq!(code, ErrorCode::Conflict);
            assert!(message.contains("gpu 0 is held by job mine"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A node without GPUs refuses any.
    let mut bare = TestEngine::new();
    match register(&mut bare, "9", 1, Some(vec![0])) {
        Response::Error { message, .. } => {
            assert!(message.contains("this node has no gpus"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn after_a_restart_a_queued_job_keeps_the_gpus_its_manager_chose() {
    let mut t = engine();
    let pid = std::process::id();
    t.fake_process(pid, UID);
    t.fake_stat(pid);
    let id = TestEngine::id("q");
    let rec = JobRecord {
        seq: 0,
        job_id: id.to_string(),
        name: "q".into(),
        uid: UID,
        gid: UID,
        user: "user1000".into(),
        ncpus: 1,
        cpus: CpuSet::new(),
        mems: CpuSet::new(),
        mem_limit: None,
        pid: Some(pid),
        pid_start: None,
        cgroup: cgroup_name(&id),
        argv: vec![],
        state: StoredState::Queued,
        submitted_ms: 0,
        started_ms: None,
        ended_ms: None,
        end_reason: None,
        priority: 16,
        placement: pjw_core::sched::Placement::PrimaryOnly,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    };
    let mut store = t.store.clone();
    let seq = store.insert_job(&rec).expect("insert");
    store.set_gpus(seq, 1, &gs("3")).expect("gpus row");
    t.engine.recover().expect("recover");
    let j = &t.engine.jobs[&seq];
    assert_eq!(
        (j.phase, j.req.ngpus, j.req.pinned, j.gpus),
        (Phase::Queued, 1, gs("3"), GpuSet::new())
    );

    // While it waits for its client to come back (it is not planned meanwhile), the GPU its
    // manager chose is not anyone's to take: a job asking for three GPUs gets the others, one
    // asking for every GPU waits. Found by review: it used to be handed out, and the manager's
    // job would then wait for it for good.
    let (r, _three) = submit(&mut t, 2, 2, "three", 1, 3).await;
    assert!(matches!(r, Response::Started { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&t.seq_of("three")].gpus, gs("0-2"));
    t.engine.handle(Event::MainExited {
        seq: t.seq_of("three"),
    });
    let (r, _all) = submit(&mut t, 1, 1, "all", 1, 4).await;
    assert!(matches!(r, Response::Queued { .. }), "{r:?}");
    assert_eq!(t.engine.jobs[&t.seq_of("all")].gpus, GpuSet::new());
}

#[tokio::test(flavor = "current_thread")]
async fn the_configured_gpu_locality_reaches_the_planner() {
    use pjw_core::gpu_alloc::Locality;
    for (extra, want, wait) in [
        ("", Locality::Prefer, Some(600_000)),
        (
            "[gpus]\nlocality = \"require\"\n",
            Locality::Require,
            Some(600_000),
        ),
        (
            "[gpus]\nlocality = \"require\"\nrequire_wait_secs = 0\n",
            Locality::Require,
            None,
        ),
    ] {
        let t = TestEngine::with_config(extra);
        let gpus = node_gpus();
        let node = super::Engine::gpu_node(&gpus, &t.engine.jobs, &t.engine.cfg, |_| true);
        assert_eq!(
            (node.policy.locality, node.policy.require_wait_ms),
            (want, wait),
            "{extra:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_configured_gpu_placement_rule_reaches_the_planner() {
    use pjw_core::gpu_alloc::PlacementRule;
    for (extra, want) in [
        ("", PlacementRule::KeepGpuCpus),
        (
            "[gpus]\nplacement = \"fewest-stranded\"\n",
            PlacementRule::FewestStranded,
        ),
    ] {
        let t = TestEngine::with_config(extra);
        let gpus = node_gpus();
        let node = super::Engine::gpu_node(&gpus, &t.engine.jobs, &t.engine.cfg, |_| true);
        assert_eq!(node.policy.placement, want, "{extra:?}");
    }
}

/// NVML's readings reach GPU jobs' samples, summaries and metrics: job 7 on GPUs 0 and 1 (1 has
/// no reading), job 8 on GPU 2, job 9 on none. Without the NVML thread nothing is filled.
#[tokio::test(flavor = "current_thread")]
async fn nvml_readings_are_folded_into_gpu_jobs_samples() {
    use crate::gpu_stats::tests::sampler_with;
    const GIB: u64 = 1 << 30;
    let mut t = TestEngine::recording(FakeCgroups::default());
    t.engine.set_gpus(node_gpus(), false);
    for (id, gpus) in [("7", Some(vec![0, 1])), ("8", Some(vec![2])), ("9", None)] {
        let r = register(&mut t, id, 1, gpus);
        assert!(matches!(r, Response::Started { .. }), "{r:?}");
    }
    let figures = |t: &TestEngine| {
        let mut v: Vec<(String, Option<f64>, Option<u64>)> = t
            .engine
            .metrics_snapshot()
            .jobs
            .into_iter()
            .map(|j| (j.id, j.gpu_util, j.gpu_mem))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    // NVML absent: a tick fills no GPU figure.
    t.engine.handle(Event::Sample);
    assert!(figures(&t).iter().all(|f| f.1.is_none() && f.2.is_none()));
    // (readings by GPU: id, util %, memory; then per job: util, memory)
    let ticks = [
        (
            vec![(0, 80, 4 * GIB), (2, 20, GIB), (3, 99, 8 * GIB)],
            [(Some(80.0), Some(4 * GIB)), (Some(20.0), Some(GIB))],
        ),
        (
            vec![(0, 40, 2 * GIB), (1, 60, 6 * GIB)],
            [(Some(50.0), Some(8 * GIB)), (None, None)],
        ),
    ];
    for (i, (readings, want)) in ticks.into_iter().enumerate() {
        t.engine.set_gpu_sampler(sampler_with(&readings));
        t.engine.handle(Event::Sample);
        let got = figures(&t);
        let ids: Vec<&str> = got.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(ids, ["slurm:7", "slurm:8", "slurm:9"], "tick {i}");
        assert_eq!((got[0].1, got[0].2), want[0], "tick {i}: job 7");
        assert_eq!((got[1].1, got[1].2), want[1], "tick {i}: job 8");
        assert_eq!((got[2].1, got[2].2), (None, None), "tick {i}: job 9");
        // `status` answers with the same figures.
        let st = t.engine.status();
        let of = |id: &str| {
            let j = st.jobs.iter().find(|j| j.id == id).unwrap();
            (j.gpu_util, j.gpu_mem)
        };
        assert_eq!(
            [of("slurm:7"), of("slurm:8"), of("slurm:9")],
            [want[0], want[1], (None, None)],
            "tick {i}: status"
        );
    }
    // The summaries: mean and highest utilisation over the samples with one, peak memory.
    let summary = |id: &str| {
        let j = t
            .engine
            .jobs
            .values()
            .find(|j| j.id.as_str() == id)
            .unwrap();
        let s = j.prof.summary(
            j.seq,
            "n",
            pjw_store::EndClass::Completed,
            0,
            &Default::default(),
            None,
        );
        (s.gpu_util_mean, s.gpu_util_max, s.gpu_mem_peak)
    };
    assert_eq!(summary("slurm:7"), (Some(65.0), Some(80.0), Some(8 * GIB)));
    assert_eq!(summary("slurm:8"), (Some(20.0), Some(20.0), Some(GIB)));
    assert_eq!(summary("slurm:9"), (None, None, None));
}
