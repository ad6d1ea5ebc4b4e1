use super::*;
use crate::gpu_policies::{by_name, ALL};

/// Each policy's mean over seeds 1-5 (2000 jobs each), as `pjw sim --gpus --seeds 5`.
fn run_all(d: &str, load: f64) -> Vec<GpuReport> {
    let topo = pjw_core::synthetic::parse(d).unwrap();
    let gpus = pjw_core::synthetic::gpus(d, &topo).unwrap();
    let traces: Vec<Vec<GpuJob>> = (1..=5)
        .map(|seed| trace(seed, 2000, topo.online().len(), gpus.len(), load))
        .collect();
    ALL.iter()
        .map(|p| {
            let runs: Vec<GpuReport> = traces
                .iter()
                .map(|jobs| {
                    let mut pol = by_name(p, &topo, &gpus).unwrap();
                    simulate(&topo, &gpus, jobs, pol.as_mut()).unwrap()
                })
                .collect();
            mean(&runs).unwrap()
        })
        .collect()
}

fn get<'a>(rs: &'a [GpuReport], name: &str) -> &'a GpuReport {
    rs.iter().find(|r| r.policy == name).unwrap()
}

/// pjw (prefer, under either placement rule: `name` is "pjw" or "pjw-stranded") against the
/// policies that start a job as soon as enough is free: the same start times, so the same
/// waits; more GPU jobs local.
fn prefer_against_work_conserving(rs: &[GpuReport], name: &str) {
    let pjw = get(rs, name);
    assert_eq!(pjw.placed, 2000.0);
    for other in ["kubelet-best-effort", "slurm"] {
        let o = get(rs, other);
        assert_eq!(o.mean_wait_s, pjw.mean_wait_s, "{other}");
        assert!(
            pjw.local > o.local,
            "{other}: {} vs {name} {}",
            o.local,
            pjw.local
        );
    }
}

/// `placement = "fewest-stranded"` strands less GPU time than every work-conserving baseline
/// (and than the default rule).
fn fewest_stranded_strands_least(rs: &[GpuReport]) {
    prefer_against_work_conserving(rs, "pjw-stranded");
    let pjw = get(rs, "pjw-stranded");
    for other in ["kubelet-best-effort", "slurm", "pjw"] {
        let o = get(rs, other);
        assert!(
            pjw.stranded < o.stranded,
            "{other}: stranded {} vs pjw-stranded {}",
            o.stranded,
            pjw.stranded
        );
    }
}

/// pjw (require) against the policies that hold a job until it can be local: every GPU job
/// local, every job started, and shorter waits than either.
fn require_against_refusing(rs: &[GpuReport]) {
    let req = get(rs, "pjw-require");
    assert_eq!((req.local, req.placed), (1.0, 2000.0));
    for other in ["kubelet-single-numa", "slurm-enforce"] {
        let o = get(rs, other);
        assert!(
            req.mean_wait_s < o.mean_wait_s,
            "{other}: {} vs pjw-require {}",
            o.mean_wait_s,
            req.mean_wait_s
        );
    }
    // Waiting for local CPUs costs little next to starting at once.
    assert!(req.mean_wait_s < 1.25 * get(rs, "pjw").mean_wait_s);
}

#[test]
fn where_numa_is_finer_than_the_socket() {
    let rs = run_all("package:2 numa:2 core:8 pu:2 gpu:2", 0.7);
    prefer_against_work_conserving(&rs, "pjw");
    fewest_stranded_strands_least(&rs);
    require_against_refusing(&rs);
    let pjw = get(&rs, "pjw");
    for other in ["kubelet-best-effort", "slurm", "slurm-enforce"] {
        let o = get(&rs, other);
        assert!(pjw.local > o.local, "{other}");
    }
    for other in ["kubelet-best-effort", "slurm"] {
        let o = get(&rs, other);
        assert!(
            pjw.stranded < o.stranded,
            "{other}: {} vs pjw {}",
            o.stranded,
            pjw.stranded
        );
    }
    // single-numa-node is local by construction, and pays by never starting the jobs that
    // do not fit one NUMA node (every 4-GPU job here) and by long waits.
    let k = get(&rs, "kubelet-single-numa");
    assert_eq!(k.local, 1.0);
    assert!(k.unplaceable > 0.0 && k.mean_wait_s > 10.0 * pjw.mean_wait_s);
}

#[test]
fn where_the_socket_is_the_numa_node() {
    let rs = run_all("package:2 numa:1 core:8 pu:2 gpu:4", 0.7);
    prefer_against_work_conserving(&rs, "pjw");
    fewest_stranded_strands_least(&rs);
    require_against_refusing(&rs);
    let pjw = get(&rs, "pjw");
    let s = get(&rs, "slurm");
    assert!(
        pjw.stranded < s.stranded,
        "slurm {} vs pjw {}",
        s.stranded,
        pjw.stranded
    );
    // Not claimed: kubelet best-effort strands a little less here (docs/placement.md).
    let e = get(&rs, "slurm-enforce");
    assert!(e.local == 1.0 && e.mean_wait_s > pjw.mean_wait_s);
}
