//! The allocator simulator: replay a job trace on a topology under a placement policy and
//! measure how well the policy keeps jobs inside domains and free CPUs usable.
//!
//! Everything here is pure: time is the trace's own (milliseconds), never a clock. The CLI
//! (`pjw sim`) measures decision time by wrapping a policy in a timing [`Placement`].
//!
//! ```
//! use pjw_core::sim::{self, baselines, trace};
//! let topo = pjw_core::synthetic::parse("package:2 numa:1 core:4 pu:2").unwrap();
//! let jobs = trace::synthetic(7, 200, topo.online().len(), 0.9);
//! let mut policy = baselines::by_name("pjw", &topo).unwrap();
//! let r = sim::simulate(&topo, &jobs, policy.as_mut(), &[4]).unwrap();
//! assert_eq!(r.placed, 200);
//! assert!(r.mean_numa >= 1.0);
//! ```
//!
//! # Loop
//!
//! Event-driven. Events are job arrivals (the trace's submit times) and job ends (start + run
//! time). At each event time all ends are processed first (their CPUs are freed), then all
//! arrivals join the back of one FIFO queue; then the head of the queue is offered to the policy
//! as long as the free CPUs number at least its size: a set starts the job, a refusal stops the
//! pass (strict FIFO, no backfill, so a refusal holds up the jobs behind). After the pass, the
//! fragmentation is sampled. Every set the policy returns is checked: exactly `n` CPUs, all of
//! them free; anything else is an error ([`SimError::BadPlacement`]), so the simulator can never
//! double-allocate.
//!
//! # Metrics
//!
//! See [`SimReport`]; docs/placement.md gives the definitions with the results.

pub mod baselines;
pub mod gpu;
pub mod gpu_policies;
pub mod trace;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::topology::{Level, Topology};
use crate::CpuSet;

/// A placement policy: which `n` CPUs of `free` a job gets, or `None` to make it wait.
pub trait Placement {
    /// Short name used in reports.
    fn name(&self) -> &str;
    /// Exactly `n` CPUs out of `free`, or `None` (the job waits for the next event).
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet>;
}

impl<P: Placement + ?Sized> Placement for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        (**self).place(free, n)
    }
}

/// One job of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Submit time in milliseconds from the start of the trace.
    pub submit: u64,
    /// Run time in milliseconds (at least 1).
    pub run: u64,
    /// Number of CPUs (at least 1, at most the machine's online CPUs).
    pub cpus: usize,
}

/// What the simulator refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A policy returned a set that is not exactly `n` free CPUs.
    #[error("policy {policy} returned {got} for a job of {n} cpus with {free} free")]
    BadPlacement {
        policy: String,
        n: usize,
        /// The set returned, in list format.
        got: String,
        /// The free CPUs, in list format.
        free: String,
    },
    /// A job larger than the machine.
    #[error("job {index} asks for {n} cpus but the machine has {online}")]
    TooLarge {
        index: usize,
        n: usize,
        online: usize,
    },
    /// A job asking for more GPUs than the machine has.
    #[error("job {index} asks for {n} gpus but the machine has {gpus}")]
    TooManyGpus { index: usize, n: usize, gpus: usize },
    /// A line of a Standard Workload Format file that does not parse.
    #[error("swf line {line}: {reason}")]
    BadSwf { line: usize, reason: String },
}

/// Results of one simulation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimReport {
    /// The policy's name.
    pub policy: String,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs that were started.
    pub placed: usize,
    /// Jobs the policy refused even on an idle machine (dropped so the run ends).
    pub unplaceable: usize,
    /// Mean number of NUMA nodes a started job spans.
    pub mean_numa: f64,
    /// Mean number of L3 domains a started job spans (0 when the topology has no L3 data).
    pub mean_l3: f64,
    /// Mean number of packages a started job spans.
    pub mean_packages: f64,
    /// Share of started jobs that span, at each of NUMA, L3 and package level, the fewest
    /// domains whose free CPUs at that moment could hold the job ("minimal given the free set").
    pub minimal: f64,
    /// Share of started jobs that span, at each level, `ceil(n / largest domain)` domains (the
    /// bound on an idle machine).
    pub minimal_idle: f64,
    /// Per `k`: free CPUs that cannot host a job of `k` inside one NUMA node, as a share of all
    /// free CPUs, summed over the samples (one per event): `Σ Σ_node (free_node mod k) / Σ free`.
    pub fragmentation: Vec<(usize, f64)>,
    /// Jobs the policy refused at least once although the free CPUs numbered at least their size.
    pub delayed: usize,
    /// Mean wait from submit to start, seconds.
    pub mean_wait_s: f64,
    /// Time of the last job end, seconds.
    pub makespan_s: f64,
}

/// Per-CPU domain indices at the levels the report measures.
struct Domains {
    /// For NUMA, L3, package: the domains' CPU sets, and per CPU its domain index.
    levels: [(Vec<CpuSet>, Vec<u32>); 3],
}

/// Marks a CPU without a domain at a level.
pub(crate) const NO: u32 = u32::MAX;

/// The domains of `level` (their online CPUs) and, indexed by CPU number, each CPU's domain
/// index ([`NO`] for none).
pub(crate) fn domain_index(topo: &Topology, level: Level) -> (Vec<CpuSet>, Vec<u32>) {
    let max = topo
        .pus
        .iter()
        .map(|p| p.os as usize + 1)
        .max()
        .unwrap_or(0);
    let doms: Vec<CpuSet> = topo.domains(level).into_iter().map(|d| d.1).collect();
    let mut of = vec![NO; max];
    for (i, d) in doms.iter().enumerate() {
        for c in d {
            of[c as usize] = i as u32;
        }
    }
    (doms, of)
}

const LEVELS: [Level; 3] = [Level::Numa, Level::L3, Level::Package];

impl Domains {
    fn new(topo: &Topology) -> Domains {
        Domains {
            levels: LEVELS.map(|l| domain_index(topo, l)),
        }
    }

    fn spanned(&self, level: usize, cpus: &CpuSet) -> usize {
        let (doms, of) = &self.levels[level];
        let mut seen = vec![false; doms.len()];
        let mut k = 0;
        for c in cpus {
            let d = of.get(c as usize).copied().unwrap_or(NO);
            if d != NO && !seen[d as usize] {
                seen[d as usize] = true;
                k += 1;
            }
        }
        k
    }

    /// Fewest domains of `level` whose free CPUs hold `n` (0 when the level is unknown).
    fn fewest(&self, level: usize, free: &CpuSet, n: usize) -> usize {
        let doms = &self.levels[level].0;
        if doms.is_empty() {
            return 0;
        }
        fewest_holding(doms.iter().map(|d| d.intersection_len(free)).collect(), n)
            .unwrap_or(doms.len())
    }

    /// `ceil(n / largest domain)` (0 when the level is unknown).
    fn fewest_idle(&self, level: usize, n: usize) -> usize {
        let big = self.levels[level]
            .0
            .iter()
            .map(|d| d.len())
            .max()
            .unwrap_or(0);
        if big == 0 {
            0
        } else {
            n.div_ceil(big)
        }
    }

    /// Σ over NUMA nodes of (free CPUs mod k).
    fn stranded(&self, free: &CpuSet, k: usize) -> usize {
        self.levels[0]
            .0
            .iter()
            .map(|d| d.intersection_len(free) % k)
            .sum()
    }
}

/// Fewest of `frees` (free CPUs per domain) that add up to at least `n`, taking the freest
/// first; `None` when all of them together hold fewer.
pub fn fewest_holding(mut frees: Vec<usize>, n: usize) -> Option<usize> {
    frees.sort_unstable_by(|a, b| b.cmp(a));
    let (mut sum, mut k) = (0, 0);
    for f in frees {
        if sum >= n {
            break;
        }
        sum += f;
        k += 1;
    }
    (sum >= n).then_some(k)
}

/// Replay `jobs` (sorted by submit time) on `topo`'s online CPUs under `policy`, sampling
/// fragmentation for every job size in `frag_sizes`.
pub fn simulate(
    topo: &Topology,
    jobs: &[Job],
    policy: &mut dyn Placement,
    frag_sizes: &[usize],
) -> Result<SimReport, SimError> {
    let online = topo.online();
    let total = online.len();
    for (index, j) in jobs.iter().enumerate() {
        if j.cpus > total {
            return Err(SimError::TooLarge {
                index,
                n: j.cpus,
                online: total,
            });
        }
    }
    let doms = Domains::new(topo);
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));

    let mut st = State {
        jobs,
        doms: &doms,
        free: online,
        queue: VecDeque::new(),
        running: BinaryHeap::new(),
        sets: vec![CpuSet::new(); jobs.len()],
        delayed: vec![false; jobs.len()],
        placed: 0,
        span_sum: [0; 3],
        minimal: 0,
        minimal_idle: 0,
        wait_sum: 0,
    };
    let mut next = 0;
    let mut unplaceable = 0usize;
    let mut stranded = vec![0usize; frag_sizes.len()];
    let mut free_sum = 0usize;
    let mut last_end = 0u64;

    loop {
        let t_arr = order.get(next).map(|&i| jobs[i].submit);
        let t_end = st.running.peek().map(|r| r.0 .0);
        let t = match (t_arr, t_end) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => {
                // Idle machine, and the head is still refused: drop it so the run ends.
                if st.queue.pop_front().is_some() {
                    unplaceable += 1;
                    st.pass(policy, last_end)?;
                    continue;
                }
                break;
            }
        };
        while let Some(&Reverse((e, i))) = st.running.peek() {
            if e != t {
                break;
            }
            st.running.pop();
            st.free = st.free.union(&st.sets[i]);
            last_end = last_end.max(e);
        }
        while let Some(&i) = order.get(next) {
            if jobs[i].submit != t {
                break;
            }
            st.queue.push_back(i);
            next += 1;
        }
        st.pass(policy, t)?;
        let f = st.free.len();
        if f > 0 {
            free_sum += f;
            for (s, &k) in stranded.iter_mut().zip(frag_sizes) {
                *s += doms.stranded(&st.free, k.max(1));
            }
        }
    }
    let State {
        placed,
        span_sum,
        minimal,
        minimal_idle,
        wait_sum,
        delayed,
        ..
    } = st;

    let per_job = |x: usize| {
        if placed == 0 {
            0.0
        } else {
            x as f64 / placed as f64
        }
    };
    Ok(SimReport {
        policy: policy.name().to_string(),
        jobs: jobs.len(),
        placed,
        unplaceable,
        mean_numa: per_job(span_sum[0]),
        mean_l3: per_job(span_sum[1]),
        mean_packages: per_job(span_sum[2]),
        minimal: per_job(minimal),
        minimal_idle: per_job(minimal_idle),
        fragmentation: frag_sizes
            .iter()
            .zip(&stranded)
            .map(|(&k, &s)| {
                let share = if free_sum == 0 {
                    0.0
                } else {
                    s as f64 / free_sum as f64
                };
                (k, share)
            })
            .collect(),
        delayed: delayed.iter().filter(|d| **d).count(),
        mean_wait_s: if placed == 0 {
            0.0
        } else {
            wait_sum as f64 / placed as f64 / 1000.0
        },
        makespan_s: last_end as f64 / 1000.0,
    })
}

/// The simulation's running state.
struct State<'a> {
    jobs: &'a [Job],
    doms: &'a Domains,
    free: CpuSet,
    queue: VecDeque<usize>,
    running: BinaryHeap<Reverse<(u64, usize)>>,
    sets: Vec<CpuSet>,
    delayed: Vec<bool>,
    placed: usize,
    span_sum: [usize; 3],
    minimal: usize,
    minimal_idle: usize,
    wait_sum: u64,
}

impl State<'_> {
    /// Start queued jobs in FIFO order at time `t` until the head does not fit or is refused.
    fn pass(&mut self, policy: &mut dyn Placement, t: u64) -> Result<(), SimError> {
        while let Some(&i) = self.queue.front() {
            let job = self.jobs[i];
            let n = job.cpus;
            if self.free.len() < n {
                break;
            }
            let Some(got) = policy.place(&self.free, n) else {
                self.delayed[i] = true;
                break;
            };
            if got.len() != n || !got.is_subset(&self.free) {
                return Err(SimError::BadPlacement {
                    policy: policy.name().to_string(),
                    n,
                    got: got.to_string(),
                    free: self.free.to_string(),
                });
            }
            let (mut is_min, mut is_min_idle) = (true, true);
            for l in 0..3 {
                let s = self.doms.spanned(l, &got);
                self.span_sum[l] += s;
                is_min &= s == self.doms.fewest(l, &self.free, n);
                is_min_idle &= s == self.doms.fewest_idle(l, n);
            }
            self.minimal += is_min as usize;
            self.minimal_idle += is_min_idle as usize;
            self.free = self.free.difference(&got);
            self.sets[i] = got;
            self.running.push(Reverse((t + job.run.max(1), i)));
            self.placed += 1;
            self.wait_sum += t.saturating_sub(job.submit);
            self.queue.pop_front();
        }
        Ok(())
    }
}
