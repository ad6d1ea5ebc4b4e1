//! The simulator's verdict on the corpus machines, cheaply: pjw's allocator (as the daemon runs
//! it) against the kubelet and Slurm block baselines on 24em64t-2n6c2t (24 PUs) and
//! 192em64t-24n8c2t (384 PUs), one 1000-job synthetic trace each at offered loads 0.9 and 0.6.
//!
//! Kubelet must do no better on NUMA nodes per job and on free CPUs stranded for 4-CPU jobs. On
//! these machines (package = NUMA node = L3) Slurm block and pjw are both best fit at the package
//! level and tie over many seeds (docs/placement.md): a single trace puts either one ahead by up
//! to about 1% of the span and 1.5 points of stranding, so against block the test allows that
//! much and no more. It catches a policy change that costs containment or fragmentation, not a
//! tie-break that moves the noise.

use pjw_core::Topology;
use pjw_sim::{self as sim, baselines, trace, SimReport};

fn corpus(name: &str) -> Topology {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topologies")
        .join(name);
    pjw_topology::load_xml(&p).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn run(topo: &Topology, policy: &str, load: f64) -> SimReport {
    let jobs = trace::synthetic(1, 1000, topo.online().len(), load);
    let mut p = baselines::by_name(policy, topo).unwrap();
    sim::simulate(topo, &jobs, p.as_mut(), &[4]).unwrap()
}

#[test]
fn pjw_spans_and_strands_no_more_than_kubelet_and_ties_slurm_block() {
    let mut failures = Vec::new();
    for name in ["24em64t-2n6c2t-pci.xml", "192em64t-24n8c2t.xml"] {
        let topo = corpus(name);
        for load in [0.9, 0.6] {
            let pjw = run(&topo, "pjw", load);
            let kubelet = run(&topo, "kubelet", load);
            let block = run(&topo, "slurm-block", load);
            assert_eq!(pjw.placed, 1000);
            let frag4 = |r: &SimReport| r.fragmentation[0].1;
            let show = |r: &SimReport| {
                format!("{} numa {:.4} frag4 {:.4}", r.policy, r.mean_numa, frag4(r))
            };
            let ok = pjw.mean_numa <= kubelet.mean_numa
                && frag4(&pjw) <= frag4(&kubelet)
                && pjw.mean_numa <= block.mean_numa * 1.01
                && frag4(&pjw) <= frag4(&block) + 0.015;
            if !ok {
                failures.push(format!(
                    "{name} load {load}: {}; {}; {}",
                    show(&pjw),
                    show(&kubelet),
                    show(&block)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
