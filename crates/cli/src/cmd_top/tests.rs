//! The live view's tables: sort keys, rows, the CPU map.

use super::*;
use pjw_core::CpuSet;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn job(id: &str, cpus: &str, state: JobState, cpu_usec: u64, mem: u64) -> JobInfo {
    JobInfo {
        id: id.into(),
        name: format!("n{id}"),
        user: "u".into(),
        uid: 1000,
        cpus: CpuSet::parse_list(cpus).unwrap(),
        mems: CpuSet::new(),
        ncpus: 1,
        mem: None,
        procs: 1,
        threads: 1,
        state,
        reason: None,
        priority: 10,
        age_secs: 61,
        pid: None,
        cpu_usec: Some(cpu_usec),
        mem_bytes: Some(mem),
        sampled_ms: None,
        wlm: None,
        ngpus: 0,
        gpus: Default::default(),
        gpu_env: Vec::new(),
        io: None,
        gpu_util: None,
        gpu_mem: None,
        lease: None,
        steps: vec![],
        oom_kills: 0,
        time_limit_s: None,
        time_left_s: None,
        time_limit_default: false,
    }
}

fn status(jobs: Vec<JobInfo>) -> StatusReport {
    StatusReport {
        node: "n1".into(),
        total_cpus: 16,
        cpus: CpuSet::parse_list("0-15").unwrap(),
        free_cpus: CpuSet::parse_list("4-15").unwrap(),
        vcpus: 16,
        jobs,
        gpus: Default::default(),
        free_gpus: Default::default(),
        cgroup: "v2".into(),
        version: "0".into(),
        starts: None,
        memory: None,
        cut: None,
    }
}

#[test]
fn cpu_percent_comes_from_two_readings_and_keys_sort() {
    let t0 = Instant::now();
    let mut v = View::new();
    v.update(
        status(vec![
            job("1", "0-1", JobState::Running, 0, 10 << 20),
            job("2", "2-3", JobState::Running, 0, 900 << 20),
        ]),
        t0,
    );
    v.update(
        status(vec![
            job("1", "0-1", JobState::Running, 2_000_000, 10 << 20),
            job("2", "2-3", JobState::Running, 500_000, 900 << 20),
        ]),
        t0 + Duration::from_secs(1),
    );
    assert!((v.cpu_pct["1"] - 200.0).abs() < 1e-6);
    assert!((v.cpu_pct["2"] - 50.0).abs() < 1e-6);
    let ids = |v: &View| v.sorted().iter().map(|j| j.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&v), ["1", "2"]); // by CPU %
    assert!(v.key('m'));
    assert_eq!(ids(&v), ["2", "1"]); // by memory
    assert!(v.key('m'));
    assert_eq!(ids(&v), ["1", "2"]); // reversed
    assert!(!v.key('q'));
}

#[test]
fn cpu_percent_from_the_daemons_samples_holds_between_them() {
    let sampled = |cpu_usec, ms| JobInfo {
        sampled_ms: Some(ms),
        ..job("1", "0-1", JobState::Running, cpu_usec, 1 << 20)
    };
    let t0 = Instant::now();
    let mut v = View::new();
    // (CPU time, when sampled, CPU % shown): refreshes are a second apart, samples 10 s.
    let table = [
        (0, 0, None),
        (0, 0, None),
        (5_000_000, 10_000, Some(50.0)),
        // The same sample on the next refresh: still 50 %, not 0 %.
        (5_000_000, 10_000, Some(50.0)),
        (25_000_000, 20_000, Some(200.0)),
    ];
    for (i, (cpu, ms, want)) in table.into_iter().enumerate() {
        v.update(
            status(vec![sampled(cpu, ms)]),
            t0 + Duration::from_secs(i as u64),
        );
        let got = v.cpu_pct.get("1").copied();
        assert_eq!(got.map(|p| (p * 1e6).round() / 1e6), want, "row {i}");
    }
}

trait WithGpus {
    fn with_gpus(self, gpus: &str) -> Self;
}

impl WithGpus for StatusReport {
    fn with_gpus(mut self, gpus: &str) -> StatusReport {
        self.gpus = pjw_core::GpuSet::parse_list(gpus).unwrap();
        self
    }
}

#[test]
fn screen_fits_80x24_with_map_and_jobs() {
    let mut v = View::new();
    v.update(
        status(vec![
            JobInfo {
                ngpus: 1,
                gpus: pjw_core::GpuSet::parse_list("1").unwrap(),
                ..job("41", "0-1", JobState::Running, 0, 1 << 20)
            },
            job("42", "", JobState::Queued, 0, 0),
        ])
        .with_gpus("0-3"),
        Instant::now(),
    );
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| v.draw(f)).unwrap();
    let buf = t.backend().buffer().clone();
    let text: String = (0..24)
        .map(|y| {
            (0..80)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                + "\n"
        })
        .collect();
    assert!(text.contains("    0 AA...... ........"), "{text}");
    assert!(text.contains("  gpu .A.."), "{text}");
    assert!(text.contains("GPUS"), "{text}");
    // Without GPUs, neither the column nor the map line.
    let mut bare = View::new();
    bare.update(
        status(vec![job("41", "0-1", JobState::Running, 0, 1 << 20)]),
        Instant::now(),
    );
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| bare.draw(f)).unwrap();
    let buf = t.backend().buffer().clone();
    let text: String = (0..24)
        .flat_map(|y| (0..80).map(move |x| (x, y)))
        .map(|(x, y)| buf[(x, y)].symbol().to_string())
        .collect();
    assert!(!text.contains("GPUS") && !text.contains(" gpu "), "{text}");
    assert!(text.contains("41"), "{text}");
    assert!(text.contains("queued"), "{text}");
    assert!(text.contains("q quit"), "{text}");
}
