//! One decision of the allocator: [`Run::select`] fits the job in the best domain of a scope,
//! or spans it over the fewest children that hold it (the two steps of the algorithm in
//! [`super`]).

use std::cmp::Ordering;

use super::view::View;
use super::NONE;
use crate::CpuSet;

/// Largest subset-sum table [`Run::span`] builds, in 64-bit words (256 KiB); past it, a job that
/// spans takes the freest children.
const SUMS_MAX: usize = 1 << 15;

/// `dst |= src << shift`, as bit sets of the same length (bits shifted past the end are lost).
pub(super) fn shl_or(dst: &mut [u64], src: &[u64], shift: usize) {
    let (q, r) = (shift / 64, shift % 64);
    for w in (q..dst.len()).rev() {
        let mut x = src[w - q] << r;
        if r > 0 && w > q {
            x |= src[w - q - 1] >> (64 - r);
        }
        dst[w] |= x;
    }
}

/// One decision in progress.
pub(super) struct Run<'a> {
    pub(super) v: View<'a>,
    pub(super) free: &'a CpuSet,
    pub(super) stack: &'a mut Vec<(u32, u32)>,
    pub(super) sums: &'a mut Vec<u64>,
    pub(super) out: CpuSet,
}

impl Run<'_> {
    /// Place `n` CPUs in the subtrees listed in `stack[lo..hi]`, which hold at least `n` free.
    pub(super) fn select(&mut self, lo: usize, hi: usize, n: u32) {
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
