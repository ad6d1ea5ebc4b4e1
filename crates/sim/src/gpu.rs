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
//! use pjw_sim::{gpu, gpu_policies};
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
use pjw_core::topology::{Level, Topology};
use pjw_core::{CpuSet, GpuSet, Gpus};

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
    /// The policy's name.
    pub policy: String,
    /// Jobs in the trace.
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
    check_sizes(jobs, topo.online().len(), gpus.len())?;
    let mut run = Run::new(topo, gpus, jobs);
    while let Some(t) = run.next_time() {
        run.count_stranded(t);
        run.end_jobs(t);
        run.arrive(t);
        run.pass(policy, t)?;
        run.sample_stranded(t);
    }
    Ok(run.report(policy.name()))
}

/// Every job fits the machine (`cpus` online CPUs, `ngpus` GPUs).
fn check_sizes(jobs: &[GpuJob], cpus: usize, ngpus: usize) -> Result<(), SimError> {
    for (index, j) in jobs.iter().enumerate() {
        if j.cpus > cpus {
            return Err(SimError::TooLarge {
                index,
                n: j.cpus,
                online: cpus,
            });
        }
        if j.gpus > ngpus {
            return Err(SimError::TooManyGpus {
                index,
                n: j.gpus,
                gpus: ngpus,
            });
        }
    }
    Ok(())
}

/// A simulation with GPU jobs in progress.
struct Run<'a> {
    topo: &'a Topology,
    gpus: &'a Gpus,
    jobs: &'a [GpuJob],
    numas: Vec<CpuSet>,
    /// Per CPU, its NUMA domain index (`NO`: none).
    numa_of: Vec<u32>,
    /// Per GPU, its NUMA domain index, if known.
    gpu_node: Vec<Option<usize>>,
    /// Job indices by submit time; `order[next..]` have not arrived yet.
    order: Vec<usize>,
    next: usize,
    free_cpus: CpuSet,
    free_gpus: GpuSet,
    queue: VecDeque<usize>,
    running: BinaryHeap<Reverse<(u64, usize)>>,
    held: Vec<(GpuSet, CpuSet)>,
    delayed: Vec<bool>,
    placed: usize,
    gpu_placed: usize,
    local: usize,
    one_node: usize,
    wait_sum: u64,
    gpu_wait_sum: u64,
    unplaceable: usize,
    strand_events: usize,
    stranded_ms: u128,
    /// The stranded GPU count sampled after the last pass, and its time.
    sample: Option<(u64, usize)>,
    last_end: u64,
    now: u64,
}

impl<'a> Run<'a> {
    fn new(topo: &'a Topology, gpus: &'a Gpus, jobs: &'a [GpuJob]) -> Self {
        let (numas, numa_of) = domain_index(topo, Level::Numa);
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&i| (jobs[i].submit, i));
        Run {
            topo,
            gpus,
            jobs,
            numas,
            numa_of,
            gpu_node: gpu_nodes(topo, gpus),
            order,
            next: 0,
            free_cpus: topo.online(),
            free_gpus: gpus.all(),
            queue: VecDeque::new(),
            running: BinaryHeap::new(),
            held: vec![(GpuSet::new(), CpuSet::new()); jobs.len()],
            delayed: vec![false; jobs.len()],
            placed: 0,
            gpu_placed: 0,
            local: 0,
            one_node: 0,
            wait_sum: 0,
            gpu_wait_sum: 0,
            unplaceable: 0,
            strand_events: 0,
            stranded_ms: 0,
            sample: None,
            last_end: 0,
            now: 0,
        }
    }

    /// The time of the next arrival or end; with neither left, the queue's head (refused on an
    /// idle machine) is dropped and the pass runs again now. `None` when nothing is left.
    fn next_time(&mut self) -> Option<u64> {
        let t_arr = self.order.get(self.next).map(|&i| self.jobs[i].submit);
        let t_end = self.running.peek().map(|r| r.0 .0);
        let t = match (t_arr, t_end) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => {
                self.queue.pop_front()?;
                self.unplaceable += 1;
                self.now
            }
        };
        self.now = t;
        Some(t)
    }

    /// The GPUs stranded since the last sample, over the time up to `t`.
    fn count_stranded(&mut self, t: u64) {
        if let Some((t0, s)) = self.sample.take() {
            self.stranded_ms += s as u128 * t.saturating_sub(t0) as u128;
        }
    }

    /// The jobs that end at `t` free their GPUs and CPUs.
    fn end_jobs(&mut self, t: u64) {
        while let Some(&Reverse((e, i))) = self.running.peek() {
            if e != t {
                break;
            }
            self.running.pop();
            self.free_gpus = self.free_gpus.union(&self.held[i].0);
            self.free_cpus = self.free_cpus.union(&self.held[i].1);
            self.last_end = self.last_end.max(e);
        }
    }

    /// The jobs submitted at `t` join the back of the queue.
    fn arrive(&mut self, t: u64) {
        while let Some(&i) = self.order.get(self.next) {
            if self.jobs[i].submit != t {
                break;
            }
            self.queue.push_back(i);
            self.next += 1;
        }
    }

    /// The scheduling pass: start queued jobs in FIFO order at `t` until the head does not fit
    /// or is refused. A placement that is not exactly the job's size out of the free GPUs and
    /// CPUs is an error.
    fn pass(&mut self, policy: &mut dyn GpuPlacement, t: u64) -> Result<(), SimError> {
        while let Some(&i) = self.queue.front() {
            let job = self.jobs[i];
            let (free_cpus, free_gpus) = (self.free_cpus, self.free_gpus);
            if free_cpus.len() < job.cpus || free_gpus.len() < job.gpus {
                break;
            }
            let Some((g, c)) = policy.place(&free_cpus, &free_gpus, job.gpus, job.cpus) else {
                self.delayed[i] = true;
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
            self.free_cpus = free_cpus.difference(&c);
            self.free_gpus = free_gpus.difference(&g);
            self.held[i] = (g, c);
            self.running.push(Reverse((t + job.run.max(1), i)));
            self.queue.pop_front();
            self.record_start(job, t, &g, &c);
        }
        Ok(())
    }

    /// Count a job started at `t` on GPUs `g` and CPUs `c`: its wait, and for a GPU job whether
    /// its CPUs are local to its GPUs and whether all of them lie in one NUMA node.
    fn record_start(&mut self, job: GpuJob, t: u64, g: &GpuSet, c: &CpuSet) {
        self.placed += 1;
        let wait = t.saturating_sub(job.submit);
        self.wait_sum += wait;
        if job.gpus == 0 {
            return;
        }
        self.gpu_placed += 1;
        self.gpu_wait_sum += wait;
        self.local += c.is_subset(&local_of(self.topo, self.gpus, g)) as usize;
        let mut nodes: Vec<usize> = Vec::new();
        let mut known = true;
        for cpu in c {
            match self.numa_of.get(cpu as usize).copied() {
                Some(d) if d != NO => nodes.push(d as usize),
                _ => known = false,
            }
        }
        for id in g.iter() {
            match self.gpu_node.get(id.0 as usize).copied().flatten() {
                Some(d) => nodes.push(d),
                None => known = false,
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        self.one_node += (known && nodes.len() == 1 && !self.numas.is_empty()) as usize;
    }

    /// While a GPU job waits: how many GPUs are stranded after the pass at `t`.
    fn sample_stranded(&mut self, t: u64) {
        if self.queue.iter().any(|&i| self.jobs[i].gpus > 0) {
            let s = pjw_core::gpu_alloc::stranded(self.gpus, &self.free_cpus, &self.free_gpus);
            self.strand_events += (s > 0) as usize;
            self.sample = Some((t, s));
        }
    }

    /// What the run measured, under the policy's name.
    fn report(&self, policy: &str) -> GpuReport {
        let share = |x: usize, of: usize| if of == 0 { 0.0 } else { x as f64 / of as f64 };
        let gpu_time = self.gpus.len() as f64 * self.last_end as f64;
        GpuReport {
            policy: policy.to_string(),
            jobs: self.jobs.len() as f64,
            gpu_jobs: self.jobs.iter().filter(|j| j.gpus > 0).count() as f64,
            placed: self.placed as f64,
            unplaceable: self.unplaceable as f64,
            local: share(self.local, self.gpu_placed),
            one_node: share(self.one_node, self.gpu_placed),
            stranded: if gpu_time > 0.0 {
                self.stranded_ms as f64 / gpu_time
            } else {
                0.0
            },
            stranded_gpu_h: self.stranded_ms as f64 / 3_600_000.0,
            strand_events: self.strand_events as f64,
            delayed: self.delayed.iter().filter(|d| **d).count() as f64,
            mean_wait_s: share(self.wait_sum as usize, self.placed) / 1000.0,
            mean_gpu_wait_s: share(self.gpu_wait_sum as usize, self.gpu_placed) / 1000.0,
            makespan_s: self.last_end as f64 / 1000.0,
        }
    }
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
mod tests;

/// The headline comparison of docs/placement.md on a fixed seed (a deterministic simulation).
#[cfg(test)]
mod headline;
