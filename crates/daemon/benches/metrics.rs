//! Cost of one metrics scrape's rendering (on the blocking thread, not the engine) for a node
//! with 200 sampled jobs, and of the engine-side snapshot copy it starts from.

use criterion::{criterion_group, criterion_main, Criterion};
use pjw_daemon::metrics::{render, JobSnap, Metrics, Snapshot};
use pjw_proto::JobState;

fn snapshot(n: usize) -> Snapshot {
    Snapshot {
        node: "cn1".into(),
        cpus: 256,
        free_cpus: 56,
        gpus: 8,
        free_gpus: 0,
        queue_len: 10,
        jobs: (0..n)
            .map(|i| JobSnap {
                id: format!("{}", 100_000 + i),
                user: format!("user{}", i % 17),
                state: if i % 10 == 0 {
                    JobState::Backfill
                } else {
                    JobState::Running
                },
                cgroup: Some(format!("job-{}", 100_000 + i)),
                cpu_usec: Some(i as u64 * 1_234_567),
                mem_bytes: Some(i as u64 * 12_345_678),
                gpus: if i < 8 {
                    pjw_core::GpuSet::first_n(1 + i as u32)
                        .difference(&pjw_core::GpuSet::first_n(i as u32))
                } else {
                    pjw_core::GpuSet::new()
                },
                io_rbytes: None,
                io_wbytes: None,
                io: Default::default(),
                gpu_util: None,
                gpu_mem: None,
                oom_kills: (i % 50 == 0) as u64,
            })
            .collect(),
        store_write_errors: 0,
        starts: None,
        memory: Some(pjw_daemon::metrics::MemorySnap {
            limit: 1 << 40,
            used: 1 << 39,
            shared: false,
            outside: false,
            node_psi_some: Some(1.0),
            partition_psi_some: Some(0.5),
        }),
    }
}

fn bench(c: &mut Criterion) {
    let m = Metrics::new();
    for i in 0..1000 {
        m.launch(0.001 * (i % 50) as f64);
    }
    let snap = snapshot(200);
    c.bench_function("render 200 jobs", |b| b.iter(|| render(&snap, &m, None)));
    c.bench_function("snapshot clone 200 jobs", |b| b.iter(|| snap.clone()));
}

criterion_group!(benches, bench);
criterion_main!(benches);
