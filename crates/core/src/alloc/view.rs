//! The free counts of one decision and the keys the allocator compares candidates by: cores
//! and child domains a job would touch, emptiness, the fit key with its tie-breaks.

use std::cmp::Ordering;

use super::{Allocator, NONE};

/// The free counts of one decision.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) a: &'a Allocator,
    /// Free CPUs per node.
    pub(super) counts: &'a [u32],
    /// Core histograms per node, `stride` entries each.
    pub(super) hist: &'a [u16],
    pub(super) stride: usize,
    /// This decision spreads (see [`Allocator::with_spread`]).
    pub(super) spread: bool,
}

impl View<'_> {
    /// Number of cores a job of `n` CPUs touches in `node`, taking the freest cores first.
    pub(super) fn cores_for(&self, node: usize, n: u32) -> u32 {
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
    pub(super) fn cores_used(&self, node: usize) -> u32 {
        if self.a.depth[node] >= self.a.core_depth {
            return 1;
        }
        let h = &self.hist[node * self.stride..(node + 1) * self.stride];
        h[1..].iter().map(|&c| c as u32).sum()
    }

    /// Whether every online CPU of `node` is free.
    pub(super) fn empty(&self, node: usize) -> bool {
        self.counts[node] as usize == self.a.cpus[node].len()
    }

    /// How many nested domains above the cores, from the innermost one holding `node` up (the
    /// machine excluded), are entirely free: 0 when the job would share its L3 with another.
    pub(super) fn empty_domains(&self, node: usize) -> u32 {
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
    pub(super) fn fit_key_cmp(&self, x: usize, y: usize, n: u32) -> Ordering {
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
    pub(super) fn ancestors_cmp(&self, x: usize, y: usize) -> Ordering {
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
    pub(super) fn kids_used(&self, node: usize) -> u32 {
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
    pub(super) fn kids_for(&self, node: usize, n: u32) -> u32 {
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
