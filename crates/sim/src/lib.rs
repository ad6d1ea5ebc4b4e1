//! pjw-sim: the allocator simulator. Replay a job trace on a topology under a placement policy
//! and measure how well the policy keeps jobs inside domains and free CPUs usable.
//!
//! Evaluation tooling, apart from the pure core the daemon runs: `pjw sim` (docs/placement.md)
//! and its tests are its only users. It drives pjw's own allocator (`pjw_core::alloc`,
//! `pjw_core::gpu_alloc`) beside baselines re-implemented from their descriptions.
//!
//! Everything here is pure: time is the trace's own (milliseconds), never a clock. The CLI
//! (`pjw sim`) measures decision time by wrapping a policy in a timing [`Placement`].
//!
//! ```
//! use pjw_sim::{baselines, trace};
//! let topo = pjw_core::synthetic::parse("package:2 numa:1 core:4 pu:2").unwrap();
//! let jobs = trace::synthetic(7, 200, topo.online().len(), 0.9);
//! let mut policy = baselines::by_name("pjw", &topo).unwrap();
//! let r = pjw_sim::simulate(&topo, &jobs, policy.as_mut(), &[4]).unwrap();
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

// Issue 29's `missing_docs`, on where it passes (decisions (cg)).
#![warn(missing_docs)]

pub mod baselines;
pub mod gpu;
pub mod gpu_policies;
pub mod trace;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use pjw_core::topology::{Level, Topology};
use pjw_core::CpuSet;

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
        /// The policy's name.
        policy: String,
        /// The CPUs the job asked for.
        n: usize,
        /// The set returned, in list format.
        got: String,
        /// The free CPUs, in list format.
        free: String,
    },
    /// A job larger than the machine.
    #[error("job {index} asks for {n} cpus but the machine has {online}")]
    TooLarge {
        /// The job's index in the trace.
        index: usize,
        /// The CPUs it asks for.
        n: usize,
        /// The machine's online CPUs.
        online: usize,
    },
    /// A job asking for more GPUs than the machine has.
    #[error("job {index} asks for {n} gpus but the machine has {gpus}")]
    TooManyGpus {
        /// The job's index in the trace.
        index: usize,
        /// The GPUs it asks for.
        n: usize,
        /// The machine's GPUs.
        gpus: usize,
    },
    /// A line of a Standard Workload Format file that does not parse.
    #[error("swf line {line}: {reason}")]
    BadSwf {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
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
    check_sizes(jobs, online.len())?;
    let doms = Domains::new(topo);
    let mut st = State::new(jobs, &doms, online);
    let mut frag = Fragmentation::new(frag_sizes);
    loop {
        let Some(t) = st.next_event() else {
            // Idle machine, and the head is still refused: drop it so the run ends.
            if st.queue.pop_front().is_some() {
                st.unplaceable += 1;
                st.pass(policy, st.last_end)?;
                continue;
            }
            break;
        };
        st.end_jobs(t);
        st.arrive(t);
        st.pass(policy, t)?;
        frag.sample(&doms, &st.free);
    }
    Ok(st.report(policy.name(), &frag))
}

/// Every job fits the machine (`total` online CPUs).
fn check_sizes(jobs: &[Job], total: usize) -> Result<(), SimError> {
    for (index, j) in jobs.iter().enumerate() {
        if j.cpus > total {
            return Err(SimError::TooLarge {
                index,
                n: j.cpus,
                online: total,
            });
        }
    }
    Ok(())
}

/// Free CPUs stranded for each job size, summed over the samples (one per event).
struct Fragmentation<'a> {
    sizes: &'a [usize],
    /// Per size: free CPUs that cannot host a job of that size inside one NUMA node.
    stranded: Vec<usize>,
    /// Free CPUs, summed over the same samples.
    free_sum: usize,
}

impl<'a> Fragmentation<'a> {
    fn new(sizes: &'a [usize]) -> Self {
        Fragmentation {
            sizes,
            stranded: vec![0; sizes.len()],
            free_sum: 0,
        }
    }

    /// One sample of the free CPUs `free` (none when nothing is free).
    fn sample(&mut self, doms: &Domains, free: &CpuSet) {
        let f = free.len();
        if f > 0 {
            self.free_sum += f;
            for (s, &k) in self.stranded.iter_mut().zip(self.sizes) {
                *s += doms.stranded(free, k.max(1));
            }
        }
    }

    /// Per size, the stranded share of all free CPUs sampled.
    fn shares(&self) -> Vec<(usize, f64)> {
        self.sizes
            .iter()
            .zip(&self.stranded)
            .map(|(&k, &s)| {
                let share = if self.free_sum == 0 {
                    0.0
                } else {
                    s as f64 / self.free_sum as f64
                };
                (k, share)
            })
            .collect()
    }
}

/// The simulation's running state.
struct State<'a> {
    jobs: &'a [Job],
    doms: &'a Domains,
    /// Job indices by submit time; `order[next..]` have not arrived yet.
    order: Vec<usize>,
    next: usize,
    free: CpuSet,
    queue: VecDeque<usize>,
    running: BinaryHeap<Reverse<(u64, usize)>>,
    sets: Vec<CpuSet>,
    delayed: Vec<bool>,
    placed: usize,
    unplaceable: usize,
    span_sum: [usize; 3],
    minimal: usize,
    minimal_idle: usize,
    wait_sum: u64,
    last_end: u64,
}

impl<'a> State<'a> {
    fn new(jobs: &'a [Job], doms: &'a Domains, online: CpuSet) -> Self {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&i| (jobs[i].submit, i));
        State {
            jobs,
            doms,
            order,
            next: 0,
            free: online,
            queue: VecDeque::new(),
            running: BinaryHeap::new(),
            sets: vec![CpuSet::new(); jobs.len()],
            delayed: vec![false; jobs.len()],
            placed: 0,
            unplaceable: 0,
            span_sum: [0; 3],
            minimal: 0,
            minimal_idle: 0,
            wait_sum: 0,
            last_end: 0,
        }
    }

    /// The time of the next arrival or end, whichever comes first (`None`: neither is left).
    fn next_event(&self) -> Option<u64> {
        let t_arr = self.order.get(self.next).map(|&i| self.jobs[i].submit);
        let t_end = self.running.peek().map(|r| r.0 .0);
        match (t_arr, t_end) {
            (Some(a), Some(e)) => Some(a.min(e)),
            (a, e) => a.or(e),
        }
    }

    /// The jobs that end at `t` free their CPUs.
    fn end_jobs(&mut self, t: u64) {
        while let Some(&Reverse((e, i))) = self.running.peek() {
            if e != t {
                break;
            }
            self.running.pop();
            self.free = self.free.union(&self.sets[i]);
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

    /// What the run measured, under the policy's name.
    fn report(&self, policy: &str, frag: &Fragmentation) -> SimReport {
        let placed = self.placed;
        let per_job = |x: usize| {
            if placed == 0 {
                0.0
            } else {
                x as f64 / placed as f64
            }
        };
        SimReport {
            policy: policy.to_string(),
            jobs: self.jobs.len(),
            placed,
            unplaceable: self.unplaceable,
            mean_numa: per_job(self.span_sum[0]),
            mean_l3: per_job(self.span_sum[1]),
            mean_packages: per_job(self.span_sum[2]),
            minimal: per_job(self.minimal),
            minimal_idle: per_job(self.minimal_idle),
            fragmentation: frag.shares(),
            delayed: self.delayed.iter().filter(|d| **d).count(),
            mean_wait_s: if placed == 0 {
                0.0
            } else {
                self.wait_sum as f64 / placed as f64 / 1000.0
            },
            makespan_s: self.last_end as f64 / 1000.0,
        }
    }
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
