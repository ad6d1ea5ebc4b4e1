//! The CPU allocator: which CPUs a job of `n` CPUs gets.
//!
//! Policy: a job gets exactly `n` CPUs out of the free set it is given, never more, never one
//! outside that set, never an offline one. It prefers whole cores, then keeps the job inside one
//! L3 domain, one NUMA node, one package when it fits; it spans the fewest domains otherwise, and
//! of the ways to span that few, the one that leaves the fewest free CPUs behind in them. Among
//! equal choices it packs: the smallest domain that holds the job, in the fullest package, NUMA
//! node and L3 (least fragmentation). On a nearly idle machine a large job does not share a cache
//! with the one job already there (spreading, [`Allocator::with_spread`]).
//!
//! ```
//! use pjw_core::{alloc::Allocator, synthetic, CpuSet};
//! let topo = synthetic::parse("package:2 core:4 pu:2").unwrap();
//! let used = CpuSet::parse_list("0-3").unwrap();
//! let free = topo.online().difference(&used);
//! // The node is nearly idle: a second 4-CPU job gets the package nobody uses.
//! let alloc = Allocator::new(&topo);
//! assert_eq!(alloc.allocate(&free, 4).unwrap().to_string(), "8-11");
//! // Packing: two whole cores in the package that is already in use.
//! let alloc = Allocator::new(&topo).with_spread(false);
//! assert_eq!(alloc.allocate(&free, 4).unwrap().to_string(), "4-7");
//! // Small jobs always pack; one CPU goes beside a used thread, so that whole cores stay free.
//! let free = topo.online().difference(&CpuSet::parse_list("0").unwrap());
//! assert_eq!(Allocator::new(&topo).allocate(&free, 1).unwrap().to_string(), "1");
//! ```
//!
//! # Algorithm
//!
//! The allocator works on the [`DomainTree`] (machine → package → NUMA → L3 → core → PU, identical
//! levels folded), renumbered in depth-first order so that every subtree is a contiguous range.
//! A decision counts the free CPUs of every node bottom-up (leaves are the online PUs, so offline
//! CPUs never count), plus, for every node above the cores, a histogram of its cores by number of
//! free PUs (to know how many cores a job would touch there). Then `select(scope, n)`, where the
//! scope is a list of sibling subtrees (at first just the machine):
//!
//! 1. **Fit.** Find the deepest level at which some node of the scope has `free >= n` (subtrees
//!    with fewer free CPUs are skipped). Among the nodes of that level the best is the one with
//!    the smallest key
//!    `(cores the job would touch there, child domains it would touch there, free CPUs,
//!    free CPUs of the ancestors outermost first, lowest CPU)`:
//!    first whole cores for the job; then, for a NUMA node or package that the job has to span
//!    inside, the one where it touches the fewest L3s (or NUMA nodes); then best fit (the
//!    smallest domain that holds it); then packing into the fullest package, within it the
//!    fullest NUMA node, L3, core (a 1-CPU job goes to the fullest package, onto the free thread
//!    of a half-used core there); then the lowest CPU for determinism. If the chosen node has
//!    exactly `n` free CPUs the job takes them all; otherwise none of its children holds `n` and
//!    the job spans them (step 2).
//! 2. **Span.** With no single child fitting, take `k`, the fewest children that can hold `n` (the
//!    `k` freest). Of the sets of `k` children that hold `n`, take the one with the fewest free
//!    CPUs in total (the least left over; on a tie, the freer children, then the ones whose free
//!    CPUs are spread over more half-used cores, then the lowest CPU), found with a subset-sum
//!    table of bit sets. All of them but one are taken whole; the rest of the job goes through
//!    step 1 in the remaining one: the smallest of the set, or, when the children are domains
//!    with domains inside (NUMA nodes holding L3s), the one where the rest touches the fewest
//!    of those. Children free `{8, 6, 3}`, `n = 9`: the 6 and the 3 exactly, so the 8 stays
//!    whole (taking the 8 whole and 1 of the 3 leaves 2 stranded in the 3). Cores free
//!    `{2,1,1,2,2}`: `n = 4` takes two whole cores, `n = 3` one whole core plus the free PU of a
//!    half-used core, `n = 1` the free PU of a half-used core.
//!
//! **Spreading** ([`Allocator::with_spread`], on by default) adds one criterion to the fit key,
//! after whole cores: the candidate inside more entirely free domains (its own L3, NUMA node,
//! package) first. It applies only on a nearly idle machine and only to large jobs: at most one
//! domain of the spread level (the deepest of package / NUMA node / L3 in the tree) is in use and
//! at least half of its CPUs are taken, the job needs at least half of the smallest domain that
//! holds it, and at least half of the machine stays free after it. Two 4-CPU jobs on an idle
//! machine of two 8-CPU nodes get a node each; jobs smaller than half a domain (1 to 3 CPUs
//! there), and every job on a node where two domains are in use, pack. Spreading more (every
//! job while the machine is half free) left up to 3.1 points more of the free CPUs stranded in
//! the simulator (docs/placement.md).
//!
//! A decision visits each tree node a bounded number of times (at most once per tree level in
//! the worst case), plus, when a job spans, a table of `children × (k + 1) × (n + largest) / 64`
//! words (about 1300 on the 384-PU machine; past 32768 words, or more than 64 children, the `k`
//! freest children are taken), and needs no heap allocation when a [`Scratch`] is reused
//! ([`Allocator::allocate_with`]); [`Allocator::allocate`] allocates one fresh scratch. The
//! result depends only on the topology, the free set and `n`. On the 384-PU corpus machine a
//! decision takes 1.5–3.5 µs (`cargo bench -p pjw-topology --bench alloc`).
//!
//! Limitations: the whole-core preference never trades away containment (a job that fits in one
//! L3 only as half cores stays there rather than spreading over two L3s for whole cores), and
//! when a job spans domains the children are chosen by free count, with whole cores only as a
//! tie-break. The allocator does not look at the topology's `allowed` set: the caller passes
//! allowed-and-unused CPUs.

use crate::topology::{DomainTree, Level, Topology};
use crate::CpuSet;

mod run;
mod view;

#[cfg(test)]
use run::shl_or;
use run::Run;
use view::View;

/// No node (the root's parent, no best candidate yet).
const NONE: u32 = u32::MAX;

/// Picks exclusive CPU sets for jobs on one machine. Built once per topology; each decision is
/// pure and deterministic.
#[derive(Debug, Clone)]
pub struct Allocator {
    topo: Topology,
    tree: DomainTree,
    /// Per node, in depth-first order (index 0 is the machine):
    /// parent index (`NONE` for the root).
    parent: Vec<u32>,
    /// One past the last node of the subtree.
    end: Vec<u32>,
    /// Depth in the tree (0 = machine).
    depth: Vec<u8>,
    /// Lowest online CPU below the node.
    first: Vec<u32>,
    /// Online CPUs below the node.
    cpus: Vec<CpuSet>,
    /// Children of node `i` are `kids[kid_start[i]..kid_start[i + 1]]`.
    kids: Vec<u32>,
    kid_start: Vec<u32>,
    /// Leaf nodes (PUs) with their CPU number.
    leaves: Vec<(u32, u32)>,
    /// Nodes at or above the core depth, in depth-first order.
    upper: Vec<u32>,
    /// Depth of the nodes that are cores (the PU depth when cores are unknown).
    core_depth: u8,
    /// Largest number of PUs in a core.
    smt: usize,
    /// Per depth, the largest number of online CPUs of a node at that depth.
    level_size: Vec<u32>,
    /// The nodes a spreading job avoids sharing: the deepest level of packages, NUMA nodes or
    /// L3 domains in the tree (empty when the tree has none of them).
    spread_nodes: Vec<u32>,
    /// Give a large job a domain of its own on a nearly idle machine ([`Allocator::with_spread`]).
    spread: bool,
}

/// Reusable working memory for [`Allocator::allocate_with`].
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    /// Free CPUs per node.
    free: Vec<u32>,
    /// Per node above the cores: number of cores with `f` free PUs, at `[node * (smt + 1) + f]`.
    hist: Vec<u16>,
    /// Stack of (free CPUs, node) scopes.
    stack: Vec<(u32, u32)>,
    /// Bit sets of the subset-sum table used when a job spans children.
    sums: Vec<u64>,
}

impl Scratch {
    /// Empty scratch space; it grows on first use.
    pub fn new() -> Scratch {
        Scratch::default()
    }
}

impl Allocator {
    /// Precompute the domain tree of `topo`'s online PUs.
    pub fn new(topo: &Topology) -> Allocator {
        let tree = DomainTree::build(topo);
        let n = tree.nodes.len();
        // Depth-first preorder, children in the tree's order (by lowest CPU).
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut todo: Vec<usize> = vec![0];
        while let Some(i) = todo.pop() {
            order.push(i);
            todo.extend(tree.nodes[i].children.iter().rev().copied());
        }
        let mut index = vec![NONE; n];
        for (new, &old) in order.iter().enumerate() {
            index[old] = new as u32;
        }
        let mut parent = vec![NONE; n];
        let mut depth = vec![0u8; n];
        let mut first = vec![NONE; n];
        let mut cpus = vec![CpuSet::new(); n];
        let mut kids = Vec::with_capacity(n);
        let mut kid_start = Vec::with_capacity(n + 1);
        let mut leaves = Vec::new();
        for (new, &old) in order.iter().enumerate() {
            let node = &tree.nodes[old];
            if let Some(p) = node.parent {
                parent[new] = index[p];
                depth[new] = depth[index[p] as usize] + 1;
            }
            first[new] = node.cpus.first().unwrap_or(NONE);
            cpus[new] = node.cpus;
            kid_start.push(kids.len() as u32);
            kids.extend(node.children.iter().map(|&c| index[c]));
            if node.level == Level::Pu {
                leaves.push((new as u32, node.id));
            }
        }
        kid_start.push(kids.len() as u32);
        let mut end: Vec<u32> = (1..=n as u32).collect();
        for i in (1..n).rev() {
            let p = parent[i] as usize;
            end[p] = end[p].max(end[i]);
        }

        let pu_depth = (tree.levels.len() - 1) as u8;
        let core_depth = match tree.levels.iter().position(|l| *l == Level::Core) {
            Some(d) => d as u8,
            // Folded into the machine: the whole machine is one core.
            None if topo.domains(Level::Core).len() == 1 => 0,
            // Cores that do not nest: treat every PU as its own core.
            None => pu_depth,
        };
        let smt = (0..n)
            .filter(|&i| depth[i] == core_depth)
            .map(|i| cpus[i].len())
            .max()
            .unwrap_or(1)
            .max(1);
        let upper = (0..n as u32)
            .filter(|&i| depth[i as usize] <= core_depth)
            .collect();
        let mut level_size = vec![0u32; tree.levels.len()];
        for i in 0..n {
            let d = depth[i] as usize;
            level_size[d] = level_size[d].max(cpus[i].len() as u32);
        }
        let spread_depth = (1..core_depth as usize)
            .rev()
            .find(|&d| matches!(tree.levels[d], Level::Package | Level::Numa | Level::L3));
        let spread_nodes = match spread_depth {
            Some(d) => (0..n as u32)
                .filter(|&i| depth[i as usize] as usize == d)
                .collect(),
            None => Vec::new(),
        };
        Allocator {
            topo: topo.clone(),
            tree,
            parent,
            end,
            depth,
            first,
            cpus,
            kids,
            kid_start,
            leaves,
            upper,
            core_depth,
            smt,
            level_size,
            spread_nodes,
            spread: true,
        }
    }

    /// Turn spreading on (the default) or off. With spreading, on a nearly idle machine a large
    /// job does not share a cache with the one job already there: it goes to an entirely free
    /// L3 / NUMA node / package when (1) at most one of those domains is in use and at least
    /// half of its CPUs are taken, (2) the job needs at least half of the smallest domain that
    /// holds it, and (3) at least half of the machine's CPUs stay free after it. Two 4-CPU jobs
    /// on an idle 2-node machine of 8-CPU nodes get a node each. Otherwise, or with spreading
    /// off, it packs (best fit), which keeps whole domains for large jobs and free CPUs usable.
    pub fn with_spread(mut self, spread: bool) -> Allocator {
        self.spread = spread;
        self
    }

    /// Whether spreading is on.
    pub fn spread(&self) -> bool {
        self.spread
    }

    /// The topology this allocator was built for.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The domain tree the allocator works on.
    pub fn tree(&self) -> &DomainTree {
        &self.tree
    }

    /// Exclusive set of exactly `n` CPUs from `free` (the caller passes allowed-and-unused CPUs).
    /// `None` if `n == 0` or fewer than `n` CPUs of `free` are in the tree (online PUs).
    pub fn allocate(&self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        self.allocate_with(&mut Scratch::new(), free, n)
    }

    /// [`Allocator::allocate`] with caller-provided working memory, so that repeated decisions
    /// do not allocate.
    pub fn allocate_with(&self, scratch: &mut Scratch, free: &CpuSet, n: usize) -> Option<CpuSet> {
        if n == 0 || n > self.leaves.len() {
            return None;
        }
        let nodes = self.parent.len();
        let Scratch {
            free: counts,
            hist,
            stack,
            sums,
        } = scratch;

        counts.clear();
        counts.resize(nodes, 0);
        for &(node, cpu) in &self.leaves {
            counts[node as usize] = free.contains(cpu) as u32;
        }
        for i in (1..nodes).rev() {
            let c = counts[i];
            counts[self.parent[i] as usize] += c;
        }
        if (counts[0] as usize) < n {
            return None;
        }

        let stride = self.smt + 1;
        hist.clear();
        hist.resize(nodes * stride, 0);
        for &i in self.upper.iter().rev() {
            let i = i as usize;
            if self.depth[i] == self.core_depth {
                let f = (counts[i] as usize).min(self.smt);
                hist[i * stride + f] = 1;
            }
            if i > 0 {
                let p = self.parent[i] as usize;
                for f in 0..stride {
                    let h = hist[i * stride + f];
                    hist[p * stride + f] += h;
                }
            }
        }

        stack.clear();
        stack.push((counts[0], 0));
        let mut run = Run {
            v: View {
                a: self,
                counts,
                hist,
                stride,
                spread: self.spreads(counts, n),
            },
            free,
            stack,
            sums,
            out: CpuSet::new(),
        };
        run.select(0, 1, n as u32);
        let out = run.out;
        debug_assert_eq!(out.len(), n);
        debug_assert!(out.is_subset(free));
        Some(out)
    }

    /// Whether a decision for `n` CPUs with free counts `counts` spreads (see
    /// [`Allocator::with_spread`]).
    fn spreads(&self, counts: &[u32], n: usize) -> bool {
        if !self.spread || 2 * (counts[0] as usize - n) < self.leaves.len() {
            return false;
        }
        // The smallest domain that holds the job: the deepest level above the cores with a
        // node of at least n CPUs. The job must need at least half of it.
        let core = self.core_depth as usize;
        match (1..core)
            .rev()
            .map(|d| self.level_size[d])
            .find(|&s| s as usize >= n)
        {
            Some(size) if 2 * n >= size as usize => {}
            _ => return false,
        }
        let mut used = 0;
        for &d in &self.spread_nodes {
            let d = d as usize;
            let (free, all) = (counts[d] as usize, self.cpus[d].len());
            if free < all {
                used += 1;
                if used > 1 || 2 * free > all {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;
