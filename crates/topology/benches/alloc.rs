//! One allocation decision on the corpus machine 192em64t-24n8c2t (24 NUMA nodes of 8 cores with
//! 2 threads, 384 PUs), loaded from its hwloc XML, on an empty machine, on a half-full fragmented
//! one, and with one thread of every core in use.
//!
//! `cargo bench -p pjw-topology --bench alloc -- --quick` (or `make bench-alloc`)

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::{synthetic, CpuSet, Level, Topology};

/// The corpus machine, or its synthetic equivalent if the XML cannot be read.
fn machine() -> Topology {
    let xml = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topologies/192em64t-24n8c2t.xml");
    match pjw_topology::load_xml(&xml) {
        Ok(t) => t,
        Err(e) => {
            println!("corpus not available ({e}); using the synthetic equivalent");
            synthetic::parse("package:24 numa:1 l3:1 core:8 pu:2").unwrap()
        }
    }
}

/// A half-full machine after churn: 2000 steps of allocating jobs of mixed sizes while under half
/// full and releasing random ones while over, driven by a fixed pseudo-random sequence so every
/// run measures the same state.
fn fragmented(alloc: &Allocator) -> CpuSet {
    let online = alloc.topology().online();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut live: Vec<CpuSet> = Vec::new();
    let used = |live: &[CpuSet]| live.iter().fold(CpuSet::new(), |u, s| u.union(s));
    for _ in 0..2000 {
        let r = next();
        if used(&live).len() >= online.len() / 2 {
            let i = (r % live.len() as u64) as usize;
            live.remove(i);
            continue;
        }
        let n = [1, 1, 2, 3, 4, 5, 8, 12, 16, 24][(r >> 8) as usize % 10];
        let free = online.difference(&used(&live));
        if let Some(s) = alloc.allocate(&free, n) {
            live.push(s);
        }
    }
    online.difference(&used(&live))
}

fn bench(c: &mut Criterion) {
    let topo = machine();
    println!("machine: {} ({} pus)", topo.source, topo.online().len());
    let alloc = Allocator::new(&topo);
    let empty = topo.online();
    let frag = fragmented(&alloc);
    // Worst case for whole cores: one thread of every core in use.
    let halves: CpuSet = topo
        .domains(Level::Core)
        .iter()
        .filter_map(|(_, cpus)| cpus.iter().nth(1))
        .collect();
    println!(
        "fragmented state: {} of {} cpus free: {frag}",
        frag.len(),
        empty.len()
    );

    c.bench_function("new/384", |b| b.iter(|| Allocator::new(black_box(&topo))));

    let mut g = c.benchmark_group("allocate/384");
    for (state, free) in [
        ("empty", empty),
        ("fragmented", frag),
        ("half-cores", halves),
    ] {
        for n in [1usize, 2, 7, 16, 40, 100] {
            let mut scratch = Scratch::new();
            g.bench_with_input(BenchmarkId::new(state, n), &n, |b, &n| {
                b.iter(|| alloc.allocate_with(&mut scratch, black_box(&free), black_box(n)))
            });
        }
        g.bench_with_input(
            BenchmarkId::new(format!("{state}-fresh-scratch"), 16),
            &16,
            |b, &n| b.iter(|| alloc.allocate(black_box(&free), black_box(n))),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
