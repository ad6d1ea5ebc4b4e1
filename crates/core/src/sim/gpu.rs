//! The simulator with GPU jobs: a job asks for GPUs and CPUs (or CPUs only), a policy picks both,
//! and the report says how often a GPU job's CPUs were local to its GPUs and how long free GPUs
//! sat stranded (no free CPU local to them) while a GPU job waited.
//!
//! The loop is the CPU simulator's ([`super::simulate`]): event-driven, ends before arrivals,
//! one strict FIFO queue without backfill; the head is offered while the free CPUs and GPUs
//! number at least its request; a refusal ends the pass. Every placement is checked (exactly the
//! GPUs and CPUs asked, all free).
//!
//! ```
//! use pjw_core::sim::{gpu, gpu_policies};
//! let d = "package:2 numa:1 core:8 gpu:4";
//! let topo = pjw_core::synthetic::parse(d).unwrap();
//! let gpus = pjw_core::synthetic::gpus(d, &topo).unwrap();
//! let jobs = gpu::trace(1, 300, 16, 8, 0.9);
//! let mut p = gpu_policies::by_name("pjw", &topo, &gpus).unwrap();
//! let r = gpu::simulate(&topo, &gpus, &jobs, p.as_mut()).unwrap();
//! assert_eq!(r.placed, 300.0);
//! assert!(r.local > 0.5 && r.local <= 1.0);
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::trace::{Rng, RUN_MS};
use super::{domain_index, SimError, NO};
use crate::topology::{Level, Topology};
use crate::{CpuSet, GpuSet, Gpus};

/// One job of a GPU trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuJob {
    /// Submit time in milliseconds from the start of the trace.
    pub submit: u64,
    /// Run time in milliseconds (at least 1).
    pub run: u64,
    /// CPUs (at least 1).
    pub cpus: usize,
    /// Whole GPUs (0: a CPU-only job).
    pub gpus: usize,
}

/// A placement policy for jobs with GPUs.
pub trait GpuPlacement {
    /// Short name used in reports.
    fn name(&self) -> &str;
    /// `gpus` GPUs of `free_gpus` and `cpus` CPUs of `free_cpus`, or `None` (the job waits).
    fn place(
        &mut self,
        free_cpus: &CpuSet,
        free_gpus: &GpuSet,
        gpus: usize,
        cpus: usize,
    ) -> Option<(GpuSet, CpuSet)>;
}

/// `njobs` jobs for a machine of `cpus` CPUs and `ngpus` GPUs at offered load `load`.
///
/// Half the jobs are CPU-only, sizes log-uniform over `1..=max(1, cpus/2)`. The others ask for
/// 1 GPU (60%), 2 (25%) or 4 (15%), clamped to `ngpus`, with `k` CPUs per GPU, `k` log-uniform
/// over `1..=max(1, cpus/ngpus)` (at most the machine's CPUs in all). Run times log-uniform over
/// [`RUN_MS`]. Arrivals are a Poisson process whose rate makes the busier of the two resources
/// see `load`: `max(Σ cpus·run / cpus, Σ gpus·run / ngpus) / span ≈ load`. With `ngpus == 0`
/// every job is CPU-only.
pub fn trace(seed: u64, njobs: usize, cpus: usize, ngpus: usize, load: f64) -> Vec<GpuJob> {
    let mut rng = Rng::new(seed);
    let cpus = cpus.max(1);
    let cpu_max = (cpus / 2).max(1);
    let per_gpu = (cpus / ngpus.max(1)).max(1);
    let mut jobs: Vec<GpuJob> = (0..njobs)
        .map(|_| {
            let gpu_job = ngpus > 0 && rng.unit() < 0.5;
            let (g, n) = if gpu_job {
                let u = rng.unit();
                let g = if u < 0.6 {
                    1
                } else if u < 0.85 {
                    2
                } else {
                    4
                };
                let g = g.min(ngpus);
                let k =
                    (rng.log_uniform(1.0, per_gpu as f64 + 1.0).floor() as usize).clamp(1, per_gpu);
                (g, (g * k).min(cpus))
            } else {
                let n =
                    (rng.log_uniform(1.0, cpu_max as f64 + 1.0).floor() as usize).clamp(1, cpu_max);
                (0, n)
            };
            let run = rng.log_uniform(RUN_MS.0, RUN_MS.1).round().max(1.0) as u64;
            GpuJob {
                submit: 0,
                run,
                cpus: n,
                gpus: g,
            }
        })
        .collect();
    let cpu_work: f64 = jobs.iter().map(|j| j.cpus as f64 * j.run as f64).sum();
    let gpu_work: f64 = jobs.iter().map(|j| j.gpus as f64 * j.run as f64).sum();
    let busy = (cpu_work / cpus as f64).max(if ngpus > 0 {
        gpu_work / ngpus as f64
    } else {
        0.0
    });
    let load = if load > 0.0 { load } else { 1.0 };
    let gap = busy / (njobs.max(1) as f64 * load);
    let mut t = 0.0f64;
    for j in &mut jobs {
        j.submit = t.round() as u64;
        t += -gap * (1.0 - rng.unit()).ln();
    }
    jobs
}

/// Results of one simulation with GPU jobs (counts are `f64` so that [`mean`] can average them).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GpuReport {
    pub policy: String,
    pub jobs: f64,
    /// Jobs that asked for GPUs.
    pub gpu_jobs: f64,
    /// Jobs started.
    pub placed: f64,
    /// Jobs the policy refused on an idle machine (dropped so the run ends).
    pub unplaceable: f64,
    /// Share of started GPU jobs whose CPUs are all local to their GPUs (each CPU in the local
    /// CPUs of at least one of the job's GPUs).
    pub local: f64,
    /// Share of started GPU jobs whose GPUs and CPUs all lie in one NUMA node.
    pub one_node: f64,
    /// Stranded GPU time as a share of all GPU time (GPUs × makespan): a GPU is stranded while
    /// it is free, none of its local CPUs is free, and a GPU job waits in the queue.
    pub stranded: f64,
    /// Stranded GPU time in GPU-hours.
    pub stranded_gpu_h: f64,
    /// Scheduling passes after which at least one GPU was stranded.
    pub strand_events: f64,
    /// Jobs refused at least once although enough CPUs and GPUs were free.
    pub delayed: f64,
    /// Mean wait from submit to start over all started jobs, seconds.
    pub mean_wait_s: f64,
    /// The same over the started GPU jobs.
    pub mean_gpu_wait_s: f64,
    /// Time of the last job end, seconds.
    pub makespan_s: f64,
}

/// Per GPU: the NUMA domain index it sits in (the node of its first local CPU), if known.
pub(crate) fn gpu_nodes(topo: &Topology, gpus: &Gpus) -> Vec<Option<usize>> {
    let (_, of) = domain_index(topo, Level::Numa);
    gpus.gpus
        .iter()
        .map(|g| {
            let c = g.cpus.first()?;
            let d = of.get(c as usize).copied().unwrap_or(NO);
            (d != NO).then_some(d as usize)
        })
        .collect()
}

/// The CPUs local to `ids` (every online CPU for a GPU of unknown locality).
fn local_of(topo: &Topology, gpus: &Gpus, ids: &GpuSet) -> CpuSet {
    let mut out = CpuSet::new();
    for id in ids.iter() {
        match gpus.get(id) {
            Some(g) if !g.cpus.is_empty() => out = out.union(&g.cpus),
            _ => return topo.online(),
        }
    }
    out
}

/// Replay `jobs` on `topo`'s online CPUs and `gpus` under `policy`.
pub fn simulate(
    topo: &Topology,
    gpus: &Gpus,
    jobs: &[GpuJob],
    policy: &mut dyn GpuPlacement,
) -> Result<GpuReport, SimError> {
    let online = topo.online();
    for (index, j) in jobs.iter().enumerate() {
        if j.cpus > online.len() {
            return Err(SimError::TooLarge {
                index,
                n: j.cpus,
                online: online.len(),
            });
        }
        if j.gpus > gpus.len() {
            return Err(SimError::TooManyGpus {
                index,
                n: j.gpus,
                gpus: gpus.len(),
            });
        }
    }
    let (numas, numa_of) = domain_index(topo, Level::Numa);
    let gpu_node = gpu_nodes(topo, gpus);
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));
    let mut free_cpus = online;
    let mut free_gpus = gpus.all();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut held = vec![(GpuSet::new(), CpuSet::new()); jobs.len()];
    let mut delayed = vec![false; jobs.len()];
    let (mut placed, mut gpu_placed, mut local, mut one_node) = (0usize, 0usize, 0usize, 0usize);
    let (mut wait_sum, mut gpu_wait_sum) = (0u64, 0u64);
    let (mut unplaceable, mut strand_events) = (0usize, 0usize);
    let mut stranded_ms = 0u128;
    // The stranded GPU count sampled after the last pass, and its time.
    let mut sample: Option<(u64, usize)> = None;
    let mut next = 0;
    let (mut last_end, mut now) = (0u64, 0u64);
    loop {
        let t_arr = order.get(next).map(|&i| jobs[i].submit);
        let t_end = running.peek().map(|r| r.0 .0);
        let t = match (t_arr, t_end) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => {
                if queue.pop_front().is_some() {
                    unplaceable += 1;
                } else {
                    break;
                }
                now
            }
        };
        now = t;
        if let Some((t0, s)) = sample.take() {
            stranded_ms += s as u128 * t.saturating_sub(t0) as u128;
        }
        while let Some(&Reverse((e, i))) = running.peek() {
            if e != t {
                break;
            }
            running.pop();
            free_gpus = free_gpus.union(&held[i].0);
            free_cpus = free_cpus.union(&held[i].1);
            last_end = last_end.max(e);
        }
        while let Some(&i) = order.get(next) {
            if jobs[i].submit != t {
                break;
            }
            queue.push_back(i);
            next += 1;
        }
        // The scheduling pass.
        while let Some(&i) = queue.front() {
            let job = jobs[i];
            if free_cpus.len() < job.cpus || free_gpus.len() < job.gpus {
                break;
            }
            let Some((g, c)) = policy.place(&free_cpus, &free_gpus, job.gpus, job.cpus) else {
                delayed[i] = true;
                break;
            };
            if g.len() != job.gpus
                || c.len() != job.cpus
                || !c.is_subset(&free_cpus)
                || g.intersection(&free_gpus) != g
            {
                return Err(SimError::BadPlacement {
                    policy: policy.name().to_string(),
                    n: job.cpus,
                    got: format!("gpus {g} cpus {c}"),
                    free: format!("gpus {free_gpus} cpus {free_cpus}"),
                });
            }
            free_cpus = free_cpus.difference(&c);
            free_gpus = free_gpus.difference(&g);
            held[i] = (g, c);
            running.push(Reverse((t + job.run.max(1), i)));
            queue.pop_front();
            placed += 1;
            let wait = t.saturating_sub(job.submit);
            wait_sum += wait;
            if job.gpus > 0 {
                gpu_placed += 1;
                gpu_wait_sum += wait;
                local += c.is_subset(&local_of(topo, gpus, &g)) as usize;
                let mut nodes: Vec<usize> = Vec::new();
                let mut known = true;
                for cpu in &c {
                    match numa_of.get(cpu as usize).copied() {
                        Some(d) if d != NO => nodes.push(d as usize),
                        _ => known = false,
                    }
                }
                for id in g.iter() {
                    match gpu_node.get(id.0 as usize).copied().flatten() {
                        Some(d) => nodes.push(d),
                        None => known = false,
                    }
                }
                nodes.sort_unstable();
                nodes.dedup();
                one_node += (known && nodes.len() == 1 && !numas.is_empty()) as usize;
            }
        }
        if queue.iter().any(|&i| jobs[i].gpus > 0) {
            let s = crate::gpu_alloc::stranded(gpus, &free_cpus, &free_gpus);
            strand_events += (s > 0) as usize;
            sample = Some((t, s));
        }
    }
    let share = |x: usize, of: usize| if of == 0 { 0.0 } else { x as f64 / of as f64 };
    let gpu_time = gpus.len() as f64 * last_end as f64;
    Ok(GpuReport {
        policy: policy.name().to_string(),
        jobs: jobs.len() as f64,
        gpu_jobs: jobs.iter().filter(|j| j.gpus > 0).count() as f64,
        placed: placed as f64,
        unplaceable: unplaceable as f64,
        local: share(local, gpu_placed),
        one_node: share(one_node, gpu_placed),
        stranded: if gpu_time > 0.0 {
            stranded_ms as f64 / gpu_time
        } else {
            0.0
        },
        stranded_gpu_h: stranded_ms as f64 / 3_600_000.0,
        strand_events: strand_events as f64,
        delayed: delayed.iter().filter(|d| **d).count() as f64,
        mean_wait_s: share(wait_sum as usize, placed) / 1000.0,
        mean_gpu_wait_s: share(gpu_wait_sum as usize, gpu_placed) / 1000.0,
        makespan_s: last_end as f64 / 1000.0,
    })
}

/// The mean of several runs of one policy (counts become means too); `None` for no runs.
pub fn mean(runs: &[GpuReport]) -> Option<GpuReport> {
    let first = runs.first()?;
    let n = runs.len() as f64;
    let m = |f: fn(&GpuReport) -> f64| runs.iter().map(f).sum::<f64>() / n;
    Some(GpuReport {
        policy: first.policy.clone(),
        jobs: m(|r| r.jobs),
        gpu_jobs: m(|r| r.gpu_jobs),
        placed: m(|r| r.placed),
        unplaceable: m(|r| r.unplaceable),
        local: m(|r| r.local),
        one_node: m(|r| r.one_node),
        stranded: m(|r| r.stranded),
        stranded_gpu_h: m(|r| r.stranded_gpu_h),
        strand_events: m(|r| r.strand_events),
        delayed: m(|r| r.delayed),
        mean_wait_s: m(|r| r.mean_wait_s),
        mean_gpu_wait_s: m(|r| r.mean_gpu_wait_s),
        makespan_s: m(|r| r.makespan_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_is_deterministic_and_mixes_gpu_sizes() {
        let a = trace(5, 1000, 32, 8, 0.9);
        assert_eq!(a, trace(5, 1000, 32, 8, 0.9));
        assert_ne!(a, trace(6, 1000, 32, 8, 0.9));
        assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
        let count = |g| a.iter().filter(|j| j.gpus == g).count();
        assert!((400..600).contains(&count(0)), "{} cpu-only", count(0));
        assert!(count(1) > count(2) && count(2) > count(4) && count(4) > 30);
        assert!(a
            .iter()
            .all(|j| j.cpus >= 1 && j.cpus <= 32 && (j.gpus == 0 || j.cpus <= 4 * j.gpus)));
        // No GPUs: CPU-only jobs.
        assert!(trace(5, 100, 32, 0, 0.9).iter().all(|j| j.gpus == 0));
        // 4-GPU jobs are clamped to the machine.
        assert!(trace(5, 100, 8, 2, 0.9).iter().all(|j| j.gpus <= 2));
    }
}

/// The headline comparison of docs/placement.md on a fixed seed (a deterministic simulation).
#[cfg(test)]
mod headline {
    use super::*;
    use crate::sim::gpu_policies::{by_name, ALL};

    /// Each policy's mean over seeds 1-5 (2000 jobs each), as `pjw sim --gpus --seeds 5`.
    fn run_all(d: &str, load: f64) -> Vec<GpuReport> {
        let topo = crate::synthetic::parse(d).unwrap();
        let gpus = crate::synthetic::gpus(d, &topo).unwrap();
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
}
