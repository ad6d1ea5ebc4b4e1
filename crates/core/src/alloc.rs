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

use std::cmp::Ordering;

use crate::topology::{DomainTree, Level, Topology};
use crate::CpuSet;

const NONE: u32 = u32::MAX;

/// Largest subset-sum table [`Run::span`] builds, in 64-bit words (256 KiB); past it, a job that
/// spans takes the freest children.
const SUMS_MAX: usize = 1 << 15;

/// `dst |= src << shift`, as bit sets of the same length (bits shifted past the end are lost).
fn shl_or(dst: &mut [u64], src: &[u64], shift: usize) {
    let (q, r) = (shift / 64, shift % 64);
    for w in (q..dst.len()).rev() {
        let mut x = src[w - q] << r;
        if r > 0 && w > q {
            x |= src[w - q - 1] >> (64 - r);
        }
        dst[w] |= x;
    }
}

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

/// One decision in progress.
struct Run<'a> {
    v: View<'a>,
    free: &'a CpuSet,
    stack: &'a mut Vec<(u32, u32)>,
    sums: &'a mut Vec<u64>,
    out: CpuSet,
}

/// The free counts of one decision.
#[derive(Clone, Copy)]
struct View<'a> {
    a: &'a Allocator,
    /// Free CPUs per node.
    counts: &'a [u32],
    /// Core histograms per node, `stride` entries each.
    hist: &'a [u16],
    stride: usize,
    /// This decision spreads (see [`Allocator::with_spread`]).
    spread: bool,
}

impl Run<'_> {
    /// Place `n` CPUs in the subtrees listed in `stack[lo..hi]`, which hold at least `n` free.
    fn select(&mut self, lo: usize, hi: usize, n: u32) {
        let v = self.v;
        let a = v.a;
        let mut best = NONE;
        for s in lo..hi {
            let root = self.stack[s].1 as usize;
            let stop = a.end[root] as usize;
            let mut i = root;
            while i < stop {
                if v.counts[i] < n {
                    i = a.end[i] as usize;
                    continue;
                }
                if best == NONE
                    || a.depth[i] > a.depth[best as usize]
                    || (a.depth[i] == a.depth[best as usize]
                        && v.fit_key_cmp(i, best as usize, n) == Ordering::Less)
                {
                    best = i as u32;
                }
                i += 1;
            }
        }
        let base = self.stack.len();
        if best != NONE {
            let b = best as usize;
            if v.counts[b] == n {
                self.take(b);
                return;
            }
            // No child of `b` holds n (b is the deepest fit): span them.
            for k in a.kid_start[b]..a.kid_start[b + 1] {
                let c = a.kids[k as usize];
                let f = v.counts[c as usize];
                if f > 0 {
                    self.stack.push((f, c));
                }
            }
        } else {
            for s in lo..hi {
                let e = self.stack[s];
                if e.0 > 0 {
                    self.stack.push(e);
                }
            }
        }
        self.span(base, n);
        self.stack.truncate(base);
    }

    /// Place `n` CPUs over the sibling subtrees `stack[base..]`, none of which holds `n`, using as
    /// few of them as possible. May reorder `stack[base..]`.
    fn span(&mut self, base: usize, n: u32) {
        let v = self.v;
        // Ascending by free CPUs; among equals the child to take whole first (free CPUs over
        // more cores, i.e. more half-used cores; then the lowest CPU) last, where the subset
        // search below looks first.
        self.stack[base..].sort_unstable_by(|x, y| {
            let (x, y) = ((x.0, x.1 as usize), (y.0, y.1 as usize));
            x.0.cmp(&y.0)
                .then_with(|| v.cores_used(x.1).cmp(&v.cores_used(y.1)))
                .then_with(|| v.a.first[y.1].cmp(&v.a.first[x.1]))
        });
        let top = self.stack.len();
        // The fewest children that hold n: k of them.
        let (mut k, mut sum) = (0usize, 0u32);
        while sum < n {
            k += 1;
            sum += self.stack[top - k].0;
        }
        // Of the sets of k children that hold n, the one with the fewest free CPUs in total
        // (the least left over), moved to the end in order; without a table, the k freest,
        // which are there already.
        let m = top - base;
        if let Some(chosen) = self.tightest(base, k, n) {
            for i in 0..m {
                if chosen >> i & 1 == 1 {
                    let e = self.stack[base + i];
                    self.stack.push(e);
                }
            }
            let mut w = base;
            for i in 0..m {
                if chosen >> i & 1 == 0 {
                    self.stack[w] = self.stack[base + i];
                    w += 1;
                }
            }
            debug_assert_eq!(w, top - k);
            for j in 0..k {
                self.stack[w + j] = self.stack[top + j];
            }
            self.stack.truncate(top);
        }
        let lo = top - k;
        let total: u32 = self.stack[lo..top].iter().map(|e| e.0).sum();
        let left = total - n;
        // All but one are taken whole. The one left partly free is the smallest, or, when the
        // children are domains (NUMA nodes, L3s) rather than cores, the one where the rest
        // touches the fewest of their own children (L3 domains), smallest first on a tie.
        let mut part = lo;
        let node0 = self.stack[lo].1 as usize;
        if v.a.depth[node0] + 1 < v.a.core_depth {
            let used: u32 = self.stack[lo..top]
                .iter()
                .map(|e| v.kids_used(e.1 as usize))
                .sum();
            let mut best = u32::MAX;
            for i in lo..top {
                let (f, c) = (self.stack[i].0, self.stack[i].1 as usize);
                if f <= left {
                    continue;
                }
                let inner = used - v.kids_used(c) + v.kids_for(c, f - left);
                if inner < best {
                    best = inner;
                    part = i;
                }
            }
        }
        let mut rest = n;
        for i in lo..top {
            if i != part {
                let (f, c) = self.stack[i];
                self.take(c as usize);
                rest -= f;
            }
        }
        self.select(part, part + 1, rest);
    }

    /// Of the sets of exactly `k` subtrees of `stack[base..]` (sorted as in [`Run::span`]) whose
    /// free CPUs add up to at least `n`, the one with the least total, preferring the later
    /// (freer, preferred) subtrees on a tie: a bit mask over `stack[base..]`. `None` when there
    /// are more than 64 subtrees or the table would exceed [`SUMS_MAX`] words.
    ///
    /// A subset-sum table of bit sets: row `(i, c)` holds the totals reachable with `c` of the
    /// first `i` subtrees, up to `n - 1 + largest` (the total of the `k` freest, which is at
    /// most that, bounds the least one).
    fn tightest(&mut self, base: usize, k: usize, n: u32) -> Option<u64> {
        let items = &self.stack[base..];
        let m = items.len();
        if m > 64 || k == 0 {
            return None;
        }
        let cap = (n + items[m - 1].0 - 1) as usize;
        let words = cap / 64 + 1;
        let layer = (k + 1) * words;
        if (m + 1) * layer > SUMS_MAX {
            return None;
        }
        let sums = &mut *self.sums;
        sums.clear();
        sums.resize((m + 1) * layer, 0);
        sums[0] = 1;
        for (i, item) in items.iter().enumerate() {
            let f = item.0 as usize;
            let (prev, next) = sums.split_at_mut((i + 1) * layer);
            let prev = &prev[i * layer..];
            for c in 0..=k.min(i + 1) {
                let dst = &mut next[c * words..(c + 1) * words];
                dst.copy_from_slice(&prev[c * words..(c + 1) * words]);
                if c > 0 {
                    shl_or(dst, &prev[(c - 1) * words..c * words], f);
                }
            }
        }
        let bit = |row: &[u64], s: usize| row[s / 64] >> (s % 64) & 1 == 1;
        let last = &sums[m * layer + k * words..m * layer + (k + 1) * words];
        let mut s = (n as usize..=cap).find(|&s| bit(last, s))?;
        let (mut mask, mut c) = (0u64, k);
        for i in (0..m).rev() {
            if c == 0 {
                break;
            }
            let f = items[i].0 as usize;
            if s >= f && bit(&sums[i * layer + (c - 1) * words..], s - f) {
                mask |= 1 << i;
                c -= 1;
                s -= f;
            }
        }
        debug_assert!(c == 0 && s == 0);
        Some(mask)
    }

    /// Add every free CPU of `node` to the result.
    fn take(&mut self, node: usize) {
        self.out = self.out.union(&self.v.a.cpus[node].intersection(self.free));
    }
}

impl View<'_> {
    /// Number of cores a job of `n` CPUs touches in `node`, taking the freest cores first.
    fn cores_for(&self, node: usize, n: u32) -> u32 {
        if self.a.depth[node] >= self.a.core_depth {
            return 1;
        }
        let h = &self.hist[node * self.stride..(node + 1) * self.stride];
        let (mut rest, mut k) = (n, 0u32);
        for f in (1..self.stride).rev() {
            let cores = h[f] as u32;
            let need = rest.div_ceil(f as u32);
            if need <= cores {
                return k + need;
            }
            k += cores;
            rest -= cores * f as u32;
        }
        k
    }

    /// Number of cores with a free PU in `node`.
    fn cores_used(&self, node: usize) -> u32 {
        if self.a.depth[node] >= self.a.core_depth {
            return 1;
        }
        let h = &self.hist[node * self.stride..(node + 1) * self.stride];
        h[1..].iter().map(|&c| c as u32).sum()
    }

    /// Whether every online CPU of `node` is free.
    fn empty(&self, node: usize) -> bool {
        self.counts[node] as usize == self.a.cpus[node].len()
    }

    /// How many nested domains above the cores, from the innermost one holding `node` up (the
    /// machine excluded), are entirely free: 0 when the job would share its L3 with another.
    fn empty_domains(&self, node: usize) -> u32 {
        let a = self.a;
        let mut i = node;
        while a.depth[i] >= a.core_depth && a.parent[i] != NONE {
            i = a.parent[i] as usize;
        }
        let mut k = 0;
        while a.parent[i] != NONE && self.empty(i) {
            k += 1;
            i = a.parent[i] as usize;
        }
        k
    }

    /// Order of two same-depth candidates that both hold `n`: fewer cores touched; when the
    /// decision spreads, inside more entirely free domains; fewer child domains touched (the
    /// L3s of a NUMA node); fewer free CPUs (best fit); fuller ancestors, outermost first (the
    /// fullest package, then NUMA node, …); lowest CPU.
    fn fit_key_cmp(&self, x: usize, y: usize, n: u32) -> Ordering {
        let a = self.a;
        let c = &self.counts;
        self.cores_for(x, n)
            .cmp(&self.cores_for(y, n))
            .then_with(|| {
                if self.spread {
                    self.empty_domains(y).cmp(&self.empty_domains(x))
                } else {
                    Ordering::Equal
                }
            })
            .then_with(|| {
                if a.depth[x] + 1 < a.core_depth {
                    self.kids_for(x, n).cmp(&self.kids_for(y, n))
                } else {
                    Ordering::Equal
                }
            })
            .then(c[x].cmp(&c[y]))
            .then_with(|| self.ancestors_cmp(x, y))
            .then(a.first[x].cmp(&a.first[y]))
    }

    /// Free CPUs of the ancestors of two same-depth nodes below their common ancestor, compared
    /// outermost first.
    fn ancestors_cmp(&self, x: usize, y: usize) -> Ordering {
        let a = self.a;
        // At most one ancestor per level of the tree (7 levels).
        let (mut fx, mut fy) = ([0u32; 8], [0u32; 8]);
        let (mut px, mut py, mut d) = (a.parent[x], a.parent[y], 0);
        while px != py && d < 8 {
            fx[d] = self.counts[px as usize];
            fy[d] = self.counts[py as usize];
            d += 1;
            px = a.parent[px as usize];
            py = a.parent[py as usize];
        }
        (0..d)
            .rev()
            .map(|i| fx[i].cmp(&fy[i]))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// Children of `node` with a free CPU (cores with a free PU when its children are cores).
    fn kids_used(&self, node: usize) -> u32 {
        let a = self.a;
        if a.depth[node] >= a.core_depth {
            return 1;
        }
        if a.depth[node] + 1 == a.core_depth {
            return self.cores_used(node);
        }
        let kids = &a.kids[a.kid_start[node] as usize..a.kid_start[node + 1] as usize];
        kids.iter()
            .filter(|&&k| self.counts[k as usize] > 0)
            .count() as u32
    }

    /// Children of `node` a job of `n` CPUs touches there, taking the freest children first
    /// (cores through the histogram when its children are cores).
    fn kids_for(&self, node: usize, n: u32) -> u32 {
        let a = self.a;
        if a.depth[node] >= a.core_depth {
            return 1;
        }
        if a.depth[node] + 1 == a.core_depth {
            return self.cores_for(node, n);
        }
        let kids = &a.kids[a.kid_start[node] as usize..a.kid_start[node + 1] as usize];
        // The freest child after the previous one in (free descending, index) order, until n.
        let (mut k, mut sum) = (0u32, 0u32);
        let (mut last_f, mut last_i) = (u32::MAX, usize::MAX);
        while sum < n {
            let mut next = (0u32, usize::MAX);
            for (i, &kid) in kids.iter().enumerate() {
                let f = self.counts[kid as usize];
                if f > next.0 && (f < last_f || (f == last_f && i > last_i)) {
                    next = (f, i);
                }
            }
            if next.1 == usize::MAX {
                break;
            }
            sum += next.0;
            k += 1;
            (last_f, last_i) = next;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    #[test]
    fn depth_first_ranges_cover_subtrees() {
        let t = synthetic::parse("package:2 numa:2 l3:2 core:4 pu:2").unwrap();
        let a = Allocator::new(&t);
        assert_eq!(a.end[0] as usize, a.parent.len());
        for i in 0..a.parent.len() {
            let mut below = CpuSet::new();
            for j in i..a.end[i] as usize {
                below = below.union(&a.cpus[j]);
            }
            assert_eq!(below, a.cpus[i], "node {i}");
        }
        assert_eq!(a.smt, 2);
        assert_eq!(a.tree.levels[a.core_depth as usize], Level::Core);
    }

    #[test]
    fn cores_touched_follow_the_histogram() {
        // One L3 of 5 cores, free {2,1,1,2,2}.
        let t = synthetic::parse("core:5 pu:2").unwrap();
        let a = Allocator::new(&t);
        let free = t.online().difference(&set("2,4"));
        let mut s = Scratch::new();
        a.allocate_with(&mut s, &free, 1).unwrap();
        let run = View {
            a: &a,
            counts: &s.free,
            hist: &s.hist,
            stride: a.smt + 1,
            spread: false,
        };
        let want = [(1, 1), (2, 1), (3, 2), (6, 3), (7, 4), (8, 5)];
        for (n, k) in want {
            assert_eq!(run.cores_for(0, n), k, "n={n}");
        }
        assert_eq!(run.cores_used(0), 5);
    }

    #[test]
    fn shifted_bit_sets() {
        let src = [0b1011u64, 1 << 63, 0];
        for (shift, want) in [
            (0, [0b1011, 1 << 63, 0]),
            (1, [0b10110, 0, 1]),
            (64, [0, 0b1011, 1 << 63]),
            (66, [0, 0b101100, 0]),
        ] {
            let mut dst = [0u64; 3];
            shl_or(&mut dst, &src, shift);
            assert_eq!(dst, want, "shift {shift}");
        }
    }

    #[test]
    fn spanning_without_a_table_takes_the_freest_children() {
        // 80 cores, every other one half used: more than 64 children to span.
        let t = synthetic::parse("core:80 pu:2").unwrap();
        let a = Allocator::new(&t);
        let used: CpuSet = (0..80u32).filter(|c| c % 2 == 1).map(|c| 2 * c).collect();
        let free = t.online().difference(&used);
        let got = a.allocate(&free, 100).unwrap();
        assert_eq!(got.len(), 100);
        assert!(got.is_subset(&free));
        // The 40 whole cores first, then 20 half-used ones.
        assert_eq!(t.domains_spanned(Level::Core, &got), 60);
        // 60 packages of 16: a 900-CPU job needs 57 of them, a table of 61 × 58 × 15 words.
        let t = synthetic::parse("package:60 core:8 pu:2").unwrap();
        let a = Allocator::new(&t);
        let free = t.online().difference(&set("0-5"));
        let got = a.allocate(&free, 900).unwrap();
        assert_eq!(got.len(), 900);
        assert!(got.is_subset(&free));
        assert_eq!(t.domains_spanned(Level::Package, &got), 57);
    }

    #[test]
    fn single_core_machine() {
        let t = synthetic::parse("core:1 pu:4").unwrap();
        let a = Allocator::new(&t);
        assert_eq!(a.core_depth, 0);
        let free = t.online();
        assert_eq!(a.allocate(&free, 3).unwrap(), set("0-2"));
    }
}
