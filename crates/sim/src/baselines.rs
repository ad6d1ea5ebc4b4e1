//! Placement policies to hold pjw's allocator against, re-implemented from their descriptions
//! (docs/placement.md gives the readings). All are pure and deterministic.
//!
//! ```
//! use pjw_sim::{baselines, Placement};
//! let topo = pjw_core::synthetic::parse("package:2 core:4 pu:1").unwrap();
//! let mut cyclic = baselines::by_name("slurm-cyclic", &topo).unwrap();
//! // A 4-core job on an idle 2-socket node spreads 2 + 2.
//! assert_eq!(cyclic.place(&topo.online(), 4).unwrap().to_string(), "0-1,4-5");
//! ```

use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::topology::{Level, Topology};
use pjw_core::CpuSet;

use super::{domain_index, Placement, NO};

/// Names of every policy, in report order.
pub const ALL: [&str; 7] = [
    "pjw",
    "pjw-pack",
    "kubelet",
    "slurm-cyclic",
    "slurm-block",
    "range",
    "pbs",
];

/// The policy called `name` (see [`ALL`]) for `topo`.
pub fn by_name(name: &str, topo: &Topology) -> Option<Box<dyn Placement>> {
    Some(match name {
        "pjw" => Box::new(Pjw::new(topo)),
        "pjw-pack" => Box::new(Pjw::packing(topo)),
        "kubelet" => Box::new(Kubelet::new(topo)),
        "slurm-cyclic" => Box::new(SlurmCyclic::new(topo)),
        "slurm-block" => Box::new(SlurmBlock::new(topo)),
        "range" => Box::new(Range),
        "pbs" => Box::new(Pbs::new(topo)),
        _ => return None,
    })
}

/// The machine's domains as plain lists, for the baselines.
#[derive(Clone, Debug)]
struct Layout {
    /// Cores, packages, NUMA nodes, L3 domains: online CPUs of each, sorted by domain id.
    cores: Vec<CpuSet>,
    packages: Vec<CpuSet>,
    numas: Vec<CpuSet>,
    l3s: Vec<CpuSet>,
    /// Per CPU number, the index in `cores` / `packages` / `numas` / `l3s` (`NO` if none).
    core_of: Vec<u32>,
    package_of: Vec<u32>,
    numa_of: Vec<u32>,
    l3_of: Vec<u32>,
}

impl Layout {
    fn new(topo: &Topology) -> Layout {
        let level = |l: Level| domain_index(topo, l);
        let (mut cores, index) = level(Level::Core);
        let max = index.len();
        // Cores in the order of their lowest CPU (ids already are, but do not rely on it).
        cores.sort_by_key(|c| c.first());
        let mut core_of = vec![NO; max];
        for (i, d) in cores.iter().enumerate() {
            for c in d {
                core_of[c as usize] = i as u32;
            }
        }
        let (packages, package_of) = level(Level::Package);
        let (numas, numa_of) = level(Level::Numa);
        let (l3s, l3_of) = level(Level::L3);
        Layout {
            cores,
            packages,
            numas,
            l3s,
            core_of,
            package_of,
            numa_of,
            l3_of,
        }
    }
}

/// The lowest `n` CPUs of `set` (all of them if it has fewer).
fn lowest(set: &CpuSet, n: usize) -> CpuSet {
    set.iter().take(n).collect()
}

/// pjw's own allocator ([`Allocator`]), with reused scratch space.
#[derive(Debug)]
pub struct Pjw {
    alloc: Allocator,
    scratch: Scratch,
}

impl Pjw {
    /// For `topo`, as the daemon runs it (spreading large jobs only on a nearly idle machine).
    pub fn new(topo: &Topology) -> Pjw {
        Pjw {
            alloc: Allocator::new(topo),
            scratch: Scratch::new(),
        }
    }

    /// For `topo`, never spreading (`[placement] spread = false`).
    pub fn packing(topo: &Topology) -> Pjw {
        Pjw {
            alloc: Allocator::new(topo).with_spread(false),
            scratch: Scratch::new(),
        }
    }
}

impl Placement for Pjw {
    fn name(&self) -> &str {
        if self.alloc.spread() {
            "pjw"
        } else {
            "pjw-pack"
        }
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        self.alloc.allocate_with(&mut self.scratch, free, n)
    }
}

/// The kubelet CPU manager's static policy in packed mode, with the topology manager's NUMA
/// hint under the best-effort policy.
///
/// 1. Hint: the narrowest set of NUMA nodes whose free CPUs hold the request (a set of the
///    fewest nodes; among those the numerically lowest node mask). The request is served from the
///    free CPUs of those nodes.
/// 2. `takeByTopologyNUMAPacked` on them: whole free first-level units while the remaining need
///    is at least a unit (NUMA nodes, or packages when there are more NUMA nodes than packages,
///    i.e. packages are the larger unit), then whole free second-level units, then whole free L3
///    groups, then whole free cores, then single CPUs. Candidates are sorted by the free CPUs of
///    their first-level unit, its id, the same for the second level, L3, core (ascending: the
///    fullest first), then CPU number.
#[derive(Debug, Clone)]
pub struct Kubelet {
    l: Layout,
    numa_first: bool,
}

impl Kubelet {
    /// For `topo`.
    pub fn new(topo: &Topology) -> Kubelet {
        let l = Layout::new(topo);
        // kubelet: NUMA first when sockets >= NUMA nodes (NUMA nodes hold sockets or match them).
        let numa_first = l.packages.len() >= l.numas.len() && !l.numas.is_empty();
        Kubelet { l, numa_first }
    }

    /// The NUMA hint: indices of the nodes, or `None` when there is no NUMA data.
    fn hint(&self, free: &CpuSet, n: usize) -> Option<Vec<usize>> {
        let nodes = &self.l.numas;
        if nodes.is_empty() {
            return None;
        }
        let f: Vec<usize> = nodes.iter().map(|d| d.intersection_len(free)).collect();
        let mut sorted = f.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let (mut k, mut sum) = (0, 0);
        while sum < n && k < sorted.len() {
            sum += sorted[k];
            k += 1;
        }
        if sum < n {
            return None;
        }
        // Numerically lowest mask of k nodes holding n: choose the highest node as low as
        // possible, then recurse below it.
        let mut pick = Vec::with_capacity(k);
        let (mut need, mut below) = (n, nodes.len());
        for left in (1..=k).rev() {
            let mut chosen = None;
            for m in (left - 1)..below {
                let mut others: Vec<usize> = f[..m].to_vec();
                others.sort_unstable_by(|a, b| b.cmp(a));
                let best: usize = others.iter().take(left - 1).sum();
                if f[m] + best >= need {
                    chosen = Some(m);
                    break;
                }
            }
            let m = chosen?;
            pick.push(m);
            need = need.saturating_sub(f[m]);
            below = m;
        }
        Some(pick)
    }

    /// `takeByTopologyNUMAPacked` over `avail` (which holds at least `n`).
    fn take_packed(&self, avail: CpuSet, n: usize) -> CpuSet {
        let l = &self.l;
        let mut avail = avail;
        let mut out = CpuSet::new();
        let mut rem = n;
        let (first, first_of, second, second_of) = if self.numa_first {
            (&l.numas, &l.numa_of, &l.packages, &l.package_of)
        } else {
            (&l.packages, &l.package_of, &l.numas, &l.numa_of)
        };
        let take = |s: &CpuSet, out: &mut CpuSet, avail: &mut CpuSet| {
            *out = out.union(s);
            *avail = avail.difference(s);
        };
        // Whole units of each level while the need is at least a unit.
        for units in [first, second, &l.l3s] {
            if rem == 0 {
                return out;
            }
            let mut free: Vec<usize> = (0..units.len())
                .filter(|&i| !units[i].is_empty() && units[i].is_subset(&avail))
                .collect();
            free.sort_by_key(|&i| (units[i].len(), i));
            for i in free {
                let u = units[i];
                if rem >= u.len() && u.is_subset(&avail) {
                    take(&u, &mut out, &mut avail);
                    rem -= u.len();
                }
            }
        }
        if rem == 0 {
            return out;
        }
        let count = |doms: &Vec<CpuSet>, avail: &CpuSet| -> Vec<usize> {
            doms.iter().map(|d| d.intersection_len(avail)).collect()
        };
        let key_of = |c: u32, fa: &[usize], sa: &[usize], la: &[usize]| {
            let i = c as usize;
            let f = first_of.get(i).copied().unwrap_or(NO);
            let s = second_of.get(i).copied().unwrap_or(NO);
            let l3 = l.l3_of.get(i).copied().unwrap_or(NO);
            let g = |v: &[usize], d: u32| v.get(d as usize).copied().unwrap_or(0);
            (g(fa, f), f, g(sa, s), s, g(la, l3), l3)
        };
        // Whole free cores.
        let (fa, sa, la) = (
            count(first, &avail),
            count(second, &avail),
            count(&l.l3s, &avail),
        );
        let mut cores: Vec<usize> = (0..l.cores.len())
            .filter(|&i| !l.cores[i].is_empty() && l.cores[i].is_subset(&avail))
            .collect();
        cores.sort_by_key(|&i| {
            let c = l.cores[i].first().unwrap_or(0);
            (key_of(c, &fa, &sa, &la), i)
        });
        for i in cores {
            let core = l.cores[i];
            if rem >= core.len() {
                take(&core, &mut out, &mut avail);
                rem -= core.len();
            }
        }
        if rem == 0 {
            return out;
        }
        // Single CPUs.
        let (fa, sa, la) = (
            count(first, &avail),
            count(second, &avail),
            count(&l.l3s, &avail),
        );
        let ca = count(&l.cores, &avail);
        let mut cpus: Vec<u32> = avail.iter().collect();
        cpus.sort_by_key(|&c| {
            let core = l.core_of.get(c as usize).copied().unwrap_or(NO);
            let cf = ca.get(core as usize).copied().unwrap_or(0);
            (key_of(c, &fa, &sa, &la), cf, core, c)
        });
        for c in cpus.into_iter().take(rem) {
            out.insert(c);
        }
        out
    }
}

impl Placement for Kubelet {
    fn name(&self) -> &str {
        "kubelet"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || free.len() < n {
            return None;
        }
        let aligned = match self.hint(free, n) {
            Some(nodes) => nodes
                .iter()
                .fold(CpuSet::new(), |s, &i| s.union(&self.l.numas[i])),
            None => *free,
        };
        Some(self.take_aligned(free, &aligned, n))
    }
}

impl Kubelet {
    /// The static policy's allocation for a NUMA hint: `n` of `free` (which holds them), packed
    /// onto the hint's CPUs `aligned` first, the rest packed over the other free CPUs.
    pub(crate) fn take_aligned(&self, free: &CpuSet, aligned: &CpuSet, n: usize) -> CpuSet {
        let aligned = aligned.intersection(free);
        let first = self.take_packed(aligned, n.min(aligned.len()));
        let rest = n - first.len();
        if rest == 0 {
            return first;
        }
        let more = self.take_packed(free.difference(&first), rest);
        first.union(&more)
    }
}

/// Cores per package with at least one free CPU, in the order of their lowest CPU.
fn free_cores_by_package(l: &Layout, free: &CpuSet) -> Vec<Vec<CpuSet>> {
    let mut per = vec![Vec::new(); l.packages.len().max(1)];
    for core in &l.cores {
        let f = core.intersection(free);
        if let Some(c) = f.first() {
            let p = l.package_of.get(c as usize).copied().unwrap_or(0);
            let p = if p == NO { 0 } else { p as usize };
            per[p].push(f);
        }
    }
    per
}

/// Slurm cons_tres, default cyclic distribution: round-robin over the packages in ascending
/// order, taking the lowest core with a free CPU of each, until the job has its CPUs. Taking a
/// core takes its free CPUs (lowest first, no more than still needed).
#[derive(Debug, Clone)]
pub struct SlurmCyclic {
    l: Layout,
}

impl SlurmCyclic {
    /// For `topo`.
    pub fn new(topo: &Topology) -> SlurmCyclic {
        SlurmCyclic {
            l: Layout::new(topo),
        }
    }
}

impl Placement for SlurmCyclic {
    fn name(&self) -> &str {
        "slurm-cyclic"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || free.len() < n {
            return None;
        }
        let per = free_cores_by_package(&self.l, free);
        let mut out = CpuSet::new();
        let mut rem = n;
        let mut round = 0;
        while rem > 0 {
            let mut any = false;
            for cores in &per {
                if let Some(core) = cores.get(round) {
                    any = true;
                    let t = lowest(core, rem);
                    rem -= t.len();
                    out = out.union(&t);
                    if rem == 0 {
                        break;
                    }
                }
            }
            if !any {
                return None;
            }
            round += 1;
        }
        Some(out)
    }
}

/// Slurm cons_tres block distribution: repeatedly the package with the fewest free CPUs that
/// still cover the remaining need, else the one with the most free CPUs (ties: lowest id); its
/// free CPUs are taken core by core in ascending core order.
#[derive(Debug, Clone)]
pub struct SlurmBlock {
    l: Layout,
}

impl SlurmBlock {
    /// For `topo`.
    pub fn new(topo: &Topology) -> SlurmBlock {
        SlurmBlock {
            l: Layout::new(topo),
        }
    }
}

impl Placement for SlurmBlock {
    fn name(&self) -> &str {
        "slurm-block"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || free.len() < n {
            return None;
        }
        let mut per = free_cores_by_package(&self.l, free);
        let mut out = CpuSet::new();
        let mut rem = n;
        while rem > 0 {
            let sizes: Vec<usize> = per
                .iter()
                .map(|cs| cs.iter().map(|c| c.len()).sum())
                .collect();
            let fit = (0..per.len())
                .filter(|&p| sizes[p] >= rem)
                .min_by_key(|&p| (sizes[p], p));
            let p = match fit {
                Some(p) => p,
                None => (0..per.len())
                    .filter(|&p| sizes[p] > 0)
                    .min_by_key(|&p| (std::cmp::Reverse(sizes[p]), p))?,
            };
            for core in std::mem::take(&mut per[p]) {
                if rem == 0 {
                    break;
                }
                let t = lowest(&core, rem);
                rem -= t.len();
                out = out.union(&t);
            }
        }
        Some(out)
    }
}

/// The recursive range allocator: the smallest run of consecutive free CPU numbers that holds
/// the need (its lowest CPUs), otherwise the largest run whole (ties: lowest start), and again
/// for the rest.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range;

/// Runs of consecutive numbers in `set`, as (start, length).
fn runs(set: &CpuSet) -> Vec<(u32, usize)> {
    let mut out: Vec<(u32, usize)> = Vec::new();
    for c in set {
        match out.last_mut() {
            Some((s, len)) if *s + *len as u32 == c => *len += 1,
            _ => out.push((c, 1)),
        }
    }
    out
}

impl Placement for Range {
    fn name(&self) -> &str {
        "range"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || free.len() < n {
            return None;
        }
        let mut rs = runs(free);
        let mut out = CpuSet::new();
        let mut rem = n;
        loop {
            if let Some(&(s, _)) = rs.iter().filter(|r| r.1 >= rem).min_by_key(|r| (r.1, r.0)) {
                out = out.union(&(s..s + rem as u32).collect());
                return Some(out);
            }
            let i = (0..rs.len()).min_by_key(|&i| (std::cmp::Reverse(rs[i].1), rs[i].0))?;
            let (s, len) = rs.remove(i);
            out = out.union(&(s..s + len as u32).collect());
            rem -= len;
        }
    }
}

/// PBS-style shared cpusets. The machine is cut into vnodes, one per NUMA node. A job of at most
/// a vnode's CPUs (the chunk) shares a vnode with other small jobs: the first vnode (by id) with
/// enough free CPUs, its lowest free CPUs. A larger job gets whole vnodes only: the fewest
/// entirely free vnodes (lowest ids) that hold it, filled in order. Otherwise the job waits.
#[derive(Debug, Clone)]
pub struct Pbs {
    vnodes: Vec<CpuSet>,
    chunk: usize,
}

impl Pbs {
    /// For `topo` (a machine without NUMA data is one vnode).
    pub fn new(topo: &Topology) -> Pbs {
        let mut vnodes: Vec<CpuSet> = Layout::new(topo)
            .numas
            .into_iter()
            .filter(|d| !d.is_empty())
            .collect();
        if vnodes.is_empty() {
            vnodes.push(topo.online());
        }
        let chunk = vnodes.iter().map(|v| v.len()).max().unwrap_or(1);
        Pbs { vnodes, chunk }
    }

    /// CPUs in one vnode (the largest, if they differ).
    pub fn chunk(&self) -> usize {
        self.chunk
    }
}

impl Placement for Pbs {
    fn name(&self) -> &str {
        "pbs"
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || free.len() < n {
            return None;
        }
        if n <= self.chunk {
            return self
                .vnodes
                .iter()
                .map(|v| v.intersection(free))
                .find(|f| f.len() >= n)
                .map(|f| lowest(&f, n));
        }
        let mut out = CpuSet::new();
        for v in self.vnodes.iter().filter(|v| v.is_subset(free)) {
            out = out.union(&lowest(v, n - out.len()));
            if out.len() == n {
                return Some(out);
            }
        }
        None
    }
}
