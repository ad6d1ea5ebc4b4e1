//! GPU placement policies for the simulator: pjw's ([`pjw_core::gpu_alloc`]) and re-implementations
//! of the kubelet's topology manager and Slurm's socket-granular GRES binding, read from their
//! documentation (docs/placement.md gives the readings and the pages). All pure, deterministic.
//!
//! ```
//! use pjw_sim::{gpu::GpuPlacement, gpu_policies};
//! let d = "package:2 numa:1 core:4 gpu:2";
//! let topo = pjw_core::synthetic::parse(d).unwrap();
//! let gpus = pjw_core::synthetic::gpus(d, &topo).unwrap();
//! let mut k = gpu_policies::by_name("kubelet-single-numa", &topo, &gpus).unwrap();
//! // A 1-GPU, 2-CPU job on an idle node: GPU 0 and two CPUs of its node.
//! let (g, c) = k.place(&topo.online(), &gpus.all(), 1, 2).unwrap();
//! assert_eq!((g.to_string(), c.to_string()), ("0".into(), "0-1".into()));
//! ```

use pjw_core::alloc::Allocator;
use pjw_core::gpu_alloc::{self, GpuPolicy, Locality, PlacementRule};
use pjw_core::topology::{Level, Topology};
use pjw_core::{CpuSet, GpuId, GpuSet, Gpus};

use super::baselines::{Kubelet, SlurmBlock};
use super::gpu::{gpu_nodes, GpuPlacement};
use super::{domain_index, Placement, NO};

/// Names of every GPU policy, in report order.
pub const ALL: [&str; 7] = [
    "pjw",
    "pjw-stranded",
    "pjw-require",
    "kubelet-single-numa",
    "kubelet-best-effort",
    "slurm",
    "slurm-enforce",
];

/// The GPU policy called `name` (see [`ALL`]) for `topo` with `gpus`.
pub fn by_name(name: &str, topo: &Topology, gpus: &Gpus) -> Option<Box<dyn GpuPlacement>> {
    Some(match name {
        "pjw" => Box::new(Pjw::new(topo, gpus)),
        "pjw-stranded" => Box::new(Pjw::with(
            topo,
            gpus,
            Locality::Prefer,
            PlacementRule::FewestStranded,
        )),
        "pjw-require" => Box::new(Pjw::with(
            topo,
            gpus,
            Locality::Require,
            PlacementRule::KeepGpuCpus,
        )),
        "kubelet-single-numa" => Box::new(KubeletTm::new(topo, gpus, true)),
        "kubelet-best-effort" => Box::new(KubeletTm::new(topo, gpus, false)),
        "slurm" => Box::new(SlurmGres::new(topo, gpus, false)),
        "slurm-enforce" => Box::new(SlurmGres::new(topo, gpus, true)),
        _ => return None,
    })
}

/// pjw: [`gpu_alloc::place`] as the daemon runs it (no reserved cores). By default ("pjw") it
/// keeps CPU-only jobs off the CPUs local to free GPUs while they fit elsewhere, with
/// `locality = "prefer"`; "pjw-stranded" is `placement = "fewest-stranded"` (every choice the
/// one stranding the fewest free GPUs), "pjw-require" is `locality = "require"`.
#[derive(Debug)]
pub struct Pjw {
    alloc: Allocator,
    gpus: Gpus,
    policy: GpuPolicy,
}

impl Pjw {
    /// The default: `locality = "prefer"`, CPU-only jobs kept off the free GPUs' CPUs.
    pub fn new(topo: &Topology, gpus: &Gpus) -> Pjw {
        Pjw::with(topo, gpus, Locality::Prefer, PlacementRule::KeepGpuCpus)
    }

    /// With the `[gpus] locality` and `placement` given.
    pub fn with(topo: &Topology, gpus: &Gpus, locality: Locality, placement: PlacementRule) -> Pjw {
        Pjw {
            alloc: Allocator::new(topo),
            gpus: gpus.clone(),
            policy: GpuPolicy {
                locality,
                placement,
                ..GpuPolicy::default()
            },
        }
    }
}

impl GpuPlacement for Pjw {
    fn name(&self) -> &str {
        match (self.policy.locality, self.policy.placement) {
            (Locality::Prefer, PlacementRule::KeepGpuCpus) => "pjw",
            (Locality::Prefer, PlacementRule::FewestStranded) => "pjw-stranded",
            (Locality::Require, PlacementRule::KeepGpuCpus) => "pjw-require",
            (Locality::Require, PlacementRule::FewestStranded) => "pjw-require-stranded",
        }
    }
    fn place(
        &mut self,
        free_cpus: &CpuSet,
        free_gpus: &GpuSet,
        gpus: usize,
        cpus: usize,
    ) -> Option<(GpuSet, CpuSet)> {
        let p = gpu_alloc::place(
            &self.alloc,
            &self.gpus,
            free_cpus,
            free_gpus,
            gpus,
            cpus,
            &self.policy,
        )?;
        Some((p.gpus, p.cpus))
    }
}

/// A NUMA node mask (bit `i`: NUMA domain `i`) and whether its provider prefers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hint {
    mask: u32,
    preferred: bool,
}

/// Most NUMA nodes the kubelet model enumerates masks for (2^N masks per provider).
const MAX_HINT_NODES: usize = 12;

/// The kubelet: CPU manager `static` policy, a device plugin's GPUs, and the topology manager
/// (`single-numa-node` or `best-effort`, container scope).
///
/// 1. Hints. The CPU manager offers every NUMA mask whose free CPUs hold the request, preferred
///    when the mask has the fewest nodes whose CPUs (free or not) could ever hold it. The device
///    manager does the same for GPUs (a GPU's node: its local CPUs' node); a device of unknown
///    node makes it offer no hint ("don't care": any mask, preferred). A provider with no
///    fitting mask offers one non-preferred hint of every node.
/// 2. Merge. Every pair (CPU hint, GPU hint) is ANDed; empty masks are skipped; a pair is
///    preferred when both are. The best is a preferred one over a non-preferred one, then the
///    narrower (fewer nodes, then the numerically lower mask); none: every node, not preferred.
///    Under `single-numa-node` the providers' hints are first filtered to preferred single-node
///    ones, and the job is admitted only if the merged hint is preferred; otherwise it waits (the
///    kubelet fails the pod with a topology affinity error; the simulator keeps it queued, as
///    a controller re-creating the pod would).
/// 3. Allocation under the hint. GPUs: the free GPUs of the hint's nodes first, in id order, then
///    the others. CPUs: the static policy's packed allocation on the hint's free CPUs first, the
///    rest elsewhere ([`Kubelet`] in the CPU simulator). CPU-only jobs have the CPU hint alone;
///    nothing keeps them off the CPUs next to free GPUs.
#[derive(Debug, Clone)]
pub struct KubeletTm {
    cpu: Kubelet,
    numas: Vec<CpuSet>,
    gpu_node: Vec<Option<usize>>,
    single: bool,
}

impl KubeletTm {
    /// The `best-effort` policy, or `single-numa-node` when `single`.
    pub fn new(topo: &Topology, gpus: &Gpus, single: bool) -> KubeletTm {
        let (numas, _) = domain_index(topo, Level::Numa);
        KubeletTm {
            cpu: Kubelet::new(topo),
            numas,
            gpu_node: gpu_nodes(topo, gpus),
            single,
        }
    }

    fn all_mask(&self) -> u32 {
        ((1u64 << self.numas.len()) - 1) as u32
    }

    /// Hints of a provider with per-node `free` and `total` counts for a request of `n`.
    fn hints(&self, free: &[usize], total: &[usize], n: usize) -> Vec<Hint> {
        let sum = |v: &[usize], m: u32| -> usize {
            (0..v.len())
                .filter(|i| m & (1 << i) != 0)
                .map(|i| v[i])
                .sum()
        };
        let masks = 1..=self.all_mask();
        let min = masks
            .clone()
            .filter(|&m| sum(total, m) >= n)
            .map(|m| m.count_ones())
            .min()
            .unwrap_or(u32::MAX);
        masks
            .filter(|&m| sum(free, m) >= n)
            .map(|mask| Hint {
                mask,
                preferred: mask.count_ones() == min,
            })
            .collect()
    }

    /// The merged hint, or `None` when the job is refused.
    fn merged(&self, providers: &[Vec<Hint>]) -> Option<Hint> {
        let all = self.all_mask();
        let mut lists: Vec<Vec<Hint>> = Vec::new();
        for p in providers {
            let mut l = p.clone();
            if self.single {
                l.retain(|h| h.preferred && h.mask.count_ones() == 1);
                if l.is_empty() {
                    return None;
                }
            } else if l.is_empty() {
                l.push(Hint {
                    mask: all,
                    preferred: false,
                });
            }
            lists.push(l);
        }
        let mut best: Option<Hint> = None;
        let mut combo = vec![0usize; lists.len()];
        loop {
            let mut h = Hint {
                mask: all,
                preferred: true,
            };
            for (l, &k) in lists.iter().zip(&combo) {
                h.mask &= l[k].mask;
                h.preferred &= l[k].preferred;
            }
            if h.mask != 0 {
                let better = match best {
                    None => true,
                    Some(b) if h.preferred != b.preferred => h.preferred,
                    Some(b) => (h.mask.count_ones(), h.mask) < (b.mask.count_ones(), b.mask),
                };
                if better {
                    best = Some(h);
                }
            }
            // Next combination.
            let mut i = 0;
            while i < combo.len() {
                combo[i] += 1;
                if combo[i] < lists[i].len() {
                    break;
                }
                combo[i] = 0;
                i += 1;
            }
            if i == combo.len() {
                break;
            }
        }
        let best = best.unwrap_or(Hint {
            mask: all,
            preferred: false,
        });
        if self.single && (!best.preferred || best.mask.count_ones() != 1) {
            return None;
        }
        Some(best)
    }
}

impl GpuPlacement for KubeletTm {
    fn name(&self) -> &str {
        if self.single {
            "kubelet-single-numa"
        } else {
            "kubelet-best-effort"
        }
    }
    fn place(
        &mut self,
        free_cpus: &CpuSet,
        free_gpus: &GpuSet,
        gpus: usize,
        cpus: usize,
    ) -> Option<(GpuSet, CpuSet)> {
        if free_cpus.len() < cpus || free_gpus.len() < gpus {
            return None;
        }
        if self.numas.is_empty() || self.numas.len() > MAX_HINT_NODES {
            // No NUMA data (or too many nodes to enumerate): no alignment.
            let g: GpuSet = free_gpus.iter().take(gpus).collect();
            return Some((g, self.cpu.take_aligned(free_cpus, free_cpus, cpus)));
        }
        let node_cpus = |set: &CpuSet| -> Vec<usize> {
            self.numas.iter().map(|d| d.intersection_len(set)).collect()
        };
        let mut providers = vec![self.hints(
            &node_cpus(free_cpus),
            &node_cpus(&self.numas.iter().fold(CpuSet::new(), |a, d| a.union(d))),
            cpus,
        )];
        if gpus > 0 && self.gpu_node.iter().all(|n| n.is_some()) {
            let count = |set: &GpuSet| -> Vec<usize> {
                let mut v = vec![0; self.numas.len()];
                for id in set.iter() {
                    if let Some(Some(n)) = self.gpu_node.get(id.0 as usize) {
                        v[*n] += 1;
                    }
                }
                v
            };
            let every: GpuSet = (0..self.gpu_node.len() as u32).map(GpuId).collect();
            providers.push(self.hints(&count(free_gpus), &count(&every), gpus));
        }
        let hint = self.merged(&providers)?;
        let in_hint = |id: &GpuId| matches!(self.gpu_node.get(id.0 as usize), Some(Some(n)) if hint.mask & (1 << n) != 0);
        let g: GpuSet = free_gpus
            .iter()
            .filter(in_hint)
            .chain(free_gpus.iter().filter(|id| !in_hint(id)))
            .take(gpus)
            .collect();
        let aligned = (0..self.numas.len())
            .filter(|i| hint.mask & (1 << i) != 0)
            .fold(CpuSet::new(), |a, i| a.union(&self.numas[i]));
        Some((g, self.cpu.take_aligned(free_cpus, &aligned, cpus)))
    }
}

/// Slurm `select/cons_tres` with GPUs declared in gres.conf with `Cores=` the cores of their
/// socket (package), with `--gres-flags=enforce-binding` off or on.
///
/// - `enforce-binding` on: the job may use only CPUs of the sockets bound to its GPUs, and a job
///   that fits the GPUs of one socket gets them on one socket ("a job requiring two GPUs and one
///   CPU will be delayed until both GPUs on a single socket are available"). Sockets are tried
///   in ascending order: the first whose free GPUs and free CPUs hold the job; a job of more
///   GPUs than a socket has takes the GPUs of the first 2, 3, ... sockets. GPUs in id order;
///   CPUs from the sockets of those GPUs by Slurm's block distribution ([`SlurmBlock`]). No such
///   socket: the job waits.
/// - off: the same placement when it exists, otherwise CPUs chosen by the block distribution as
///   if there were no GPUs and GPUs from the sockets of those CPUs first, then any.
/// - CPU-only jobs: the block distribution over all free CPUs; nothing keeps them off the CPUs
///   bound to free GPUs (`RestrictedCoresPerGPU`, since 23.11, is not modelled).
#[derive(Debug, Clone)]
pub struct SlurmGres {
    block: SlurmBlock,
    packages: Vec<CpuSet>,
    package_of: Vec<u32>,
    gpu_package: Vec<Option<usize>>,
    enforce: bool,
}

impl SlurmGres {
    /// `--gres-flags=enforce-binding` when `enforce`, else without it.
    pub fn new(topo: &Topology, gpus: &Gpus, enforce: bool) -> SlurmGres {
        let (packages, package_of) = domain_index(topo, Level::Package);
        let gpu_package = gpus
            .gpus
            .iter()
            .map(|g| {
                let c = g.cpus.first()?;
                let p = package_of.get(c as usize).copied().unwrap_or(NO);
                (p != NO).then_some(p as usize)
            })
            .collect();
        SlurmGres {
            block: SlurmBlock::new(topo),
            packages,
            package_of,
            gpu_package,
            enforce,
        }
    }

    /// Free GPUs bound to the sockets in `socks`, in id order.
    fn gpus_on(&self, free: &GpuSet, socks: &[usize]) -> Vec<GpuId> {
        free.iter()
            .filter(|id| {
                matches!(self.gpu_package.get(id.0 as usize), Some(Some(p)) if socks.contains(p))
            })
            .collect()
    }

    /// The bound placement: GPUs of one socket and CPUs of that socket (the lowest socket
    /// whose free GPUs and CPUs hold the job); for more GPUs than any socket has, GPUs of the
    /// fewest sockets (the first 2, 3, ... in ascending order) and CPUs of the sockets of the
    /// GPUs taken.
    fn bound(
        &self,
        free_cpus: &CpuSet,
        free_gpus: &GpuSet,
        g: usize,
        n: usize,
    ) -> Option<(GpuSet, CpuSet)> {
        let np = self.packages.len();
        let most = (0..np)
            .map(|p| self.gpu_package.iter().filter(|q| **q == Some(p)).count())
            .max()
            .unwrap_or(0);
        let mut tries: Vec<Vec<usize>> = Vec::new();
        if g <= most {
            tries.extend((0..np).map(|p| vec![p]));
        } else {
            tries.extend((2..=np).map(|k| (0..k).collect()));
        }
        for socks in tries {
            let on = self.gpus_on(free_gpus, &socks);
            if on.len() < g {
                continue;
            }
            let gs: GpuSet = on.iter().take(g).copied().collect();
            let cpus = gs
                .iter()
                .filter_map(|id| self.gpu_package.get(id.0 as usize).copied().flatten())
                .fold(CpuSet::new(), |a, p| a.union(&self.packages[p]))
                .intersection(free_cpus);
            if cpus.len() < n {
                continue;
            }
            let c = self.block.clone().place(&cpus, n)?;
            return Some((gs, c));
        }
        None
    }
}

impl GpuPlacement for SlurmGres {
    fn name(&self) -> &str {
        if self.enforce {
            "slurm-enforce"
        } else {
            "slurm"
        }
    }
    fn place(
        &mut self,
        free_cpus: &CpuSet,
        free_gpus: &GpuSet,
        gpus: usize,
        cpus: usize,
    ) -> Option<(GpuSet, CpuSet)> {
        if free_cpus.len() < cpus || free_gpus.len() < gpus {
            return None;
        }
        if gpus == 0 {
            return Some((GpuSet::new(), self.block.place(free_cpus, cpus)?));
        }
        if let Some(p) = self.bound(free_cpus, free_gpus, gpus, cpus) {
            return Some(p);
        }
        if self.enforce {
            return None;
        }
        let c = self.block.place(free_cpus, cpus)?;
        let mut socks: Vec<usize> = c
            .iter()
            .filter_map(|cpu| {
                let p = self.package_of.get(cpu as usize).copied().unwrap_or(NO);
                (p != NO).then_some(p as usize)
            })
            .collect();
        socks.sort_unstable();
        socks.dedup();
        let first = self.gpus_on(free_gpus, &socks);
        let gs: GpuSet = first
            .iter()
            .copied()
            .chain(free_gpus.iter().filter(|id| !first.contains(id)))
            .take(gpus)
            .collect();
        Some((gs, c))
    }
}

#[cfg(test)]
mod tests;
