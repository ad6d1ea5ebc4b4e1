//! `CpuSet`: a fixed-size bit set of CPU (or NUMA node) numbers, with the kernel's list format.
//!
//! The kernel writes sets as comma-separated ranges ("0-3,8,10-11") in `cpuset.cpus`,
//! `/sys/devices/system/cpu/online` and friends. [`CpuSet::parse_list`] reads that format and
//! `Display` writes it back; the empty set is the empty string, as the kernel does.
//!
//! The set is a `Copy` array of [`MAX_CPUS`] bits so the allocator can work without heap
//! allocation (see docs/decisions.md).
//!
//! ```
//! use pjw_core::CpuSet;
//! let s = CpuSet::parse_list("0-3,8").unwrap();
//! assert_eq!(s.len(), 5);
//! assert_eq!(s.to_string(), "0-3,8");
//! ```

use std::fmt;

use crate::error::CoreError;

/// Highest CPU number + 1 that a [`CpuSet`] can hold.
pub const MAX_CPUS: usize = 1024;
const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU numbers (also used for NUMA node numbers).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct CpuSet {
    words: [u64; WORDS],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet { words: [0; WORDS] }
    }

    /// `{0, 1, …, n-1}`.
    pub fn first_n(n: usize) -> Result<Self, CoreError> {
        let mut s = Self::new();
        if n > MAX_CPUS {
            return Err(CoreError::CpuOutOfRange { cpu: n as u64 - 1 });
        }
        for c in 0..n {
            s.words[c / 64] |= 1 << (c % 64);
        }
        Ok(s)
    }

    /// Set from an iterator of CPU numbers; fails on a number ≥ [`MAX_CPUS`].
    pub fn from_cpus<I: IntoIterator<Item = u32>>(cpus: I) -> Result<Self, CoreError> {
        let mut s = Self::new();
        for c in cpus {
            s.try_insert(c)?;
        }
        Ok(s)
    }

    /// Insert `cpu`; fails when it is ≥ [`MAX_CPUS`].
    pub fn try_insert(&mut self, cpu: u32) -> Result<(), CoreError> {
        let c = cpu as usize;
        if c >= MAX_CPUS {
            return Err(CoreError::CpuOutOfRange { cpu: cpu as u64 });
        }
        self.words[c / 64] |= 1 << (c % 64);
        Ok(())
    }

    /// Insert `cpu`. Numbers ≥ [`MAX_CPUS`] are ignored (use [`CpuSet::try_insert`] to be told).
    pub fn insert(&mut self, cpu: u32) {
        let _ = self.try_insert(cpu);
    }

    /// Remove `cpu` if present.
    pub fn remove(&mut self, cpu: u32) {
        let c = cpu as usize;
        if c < MAX_CPUS {
            self.words[c / 64] &= !(1 << (c % 64));
        }
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        let c = cpu as usize;
        c < MAX_CPUS && self.words[c / 64] & (1 << (c % 64)) != 0
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Union.
    #[must_use]
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut r = *self;
        for (a, b) in r.words.iter_mut().zip(other.words.iter()) {
            *a |= *b;
        }
        r
    }

    /// Intersection.
    #[must_use]
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut r = *self;
        for (a, b) in r.words.iter_mut().zip(other.words.iter()) {
            *a &= *b;
        }
        r
    }

    /// Members of `self` that are not in `other`.
    #[must_use]
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut r = *self;
        for (a, b) in r.words.iter_mut().zip(other.words.iter()) {
            *a &= !*b;
        }
        r
    }

    /// Size of the intersection, without building it.
    pub fn intersection_len(&self, other: &CpuSet) -> usize {
        self.words
            .iter()
            .zip(other.words.iter())
            .map(|(a, b)| (a & b).count_ones() as usize)
            .sum()
    }

    /// Whether the two sets share a member.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .any(|(a, b)| a & b != 0)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .all(|(a, b)| a & !b == 0)
    }

    /// Lowest member.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// Members in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            set: self,
            word: 0,
            bits: self.words[0],
        }
    }

    /// Parse the kernel's list format: "", "3", "0-3,8,10-11". Whitespace around the text
    /// (such as the newline a sysfs file ends with) is ignored.
    pub fn parse_list(text: &str) -> Result<Self, CoreError> {
        let text = text.trim();
        let mut s = Self::new();
        if text.is_empty() {
            return Ok(s);
        }
        let bad = || CoreError::BadCpuList {
            text: text.to_string(),
        };
        for part in text.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let lo: u32 = lo.parse().map_err(|_| bad())?;
            let hi: u32 = hi.parse().map_err(|_| bad())?;
            if lo > hi {
                return Err(bad());
            }
            if hi as usize >= MAX_CPUS {
                return Err(CoreError::CpuOutOfRange { cpu: hi as u64 });
            }
            for c in lo..=hi {
                s.words[c as usize / 64] |= 1 << (c % 64);
            }
        }
        Ok(s)
    }

    /// Parse a hexadecimal mask as written in hwloc XML ("0x00ffffff", "0x0000000f,0xffffffff")
    /// or in `/proc/PID/status` `Cpus_allowed` ("ff,ffffffff"): comma-separated 32-bit words,
    /// most significant first.
    pub fn parse_mask(text: &str) -> Result<Self, CoreError> {
        let text = text.trim();
        let bad = || CoreError::BadCpuList {
            text: text.to_string(),
        };
        let mut s = Self::new();
        let parts: Vec<&str> = text.split(',').collect();
        let n = parts.len();
        for (i, part) in parts.iter().enumerate() {
            let p = part.trim();
            let p = p
                .strip_prefix("0x")
                .or_else(|| p.strip_prefix("0X"))
                .unwrap_or(p);
            if p.is_empty() {
                return Err(bad());
            }
            // hwloc may write one long hex word; digits are counted from the right.
            let word_index_base = (n - 1 - i) * 32; // position of this comma-separated group
            let v = p.as_bytes();
            for (k, ch) in v.iter().rev().enumerate() {
                let d = (*ch as char).to_digit(16).ok_or_else(bad)?;
                for b in 0..4 {
                    if d & (1 << b) != 0 {
                        let cpu = word_index_base + k * 4 + b;
                        if cpu >= MAX_CPUS {
                            return Err(CoreError::CpuOutOfRange { cpu: cpu as u64 });
                        }
                        s.words[cpu / 64] |= 1 << (cpu % 64);
                    }
                }
            }
        }
        Ok(s)
    }
}

/// Iterator over the members of a [`CpuSet`].
#[derive(Debug)]
pub struct Iter<'a> {
    set: &'a CpuSet,
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        loop {
            if self.bits != 0 {
                let b = self.bits.trailing_zeros();
                self.bits &= self.bits - 1;
                return Some((self.word * 64) as u32 + b);
            }
            self.word += 1;
            if self.word >= WORDS {
                return None;
            }
            self.bits = self.set.words[self.word];
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = u32;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl fmt::Display for CpuSet {
    /// The kernel's list format ("0-3,8").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.iter().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi = it.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl std::str::FromStr for CpuSet {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        CpuSet::parse_list(s)
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse_list(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_format_round_trips() {
        let cases = [
            ("", ""),
            ("0", "0"),
            ("0-3", "0-3"),
            ("0-3,8", "0-3,8"),
            ("8,0-3", "0-3,8"),
            ("0,1,2,5\n", "0-2,5"),
            ("1023", "1023"),
            (" 4-5 , 7 ", "4-5,7"),
        ];
        for (input, want) in cases {
            let s = CpuSet::parse_list(input).unwrap();
            assert_eq!(s.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn list_format_rejects_garbage() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1024", "0-5000", "1 2"] {
            assert!(CpuSet::parse_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn masks_parse_like_hwloc_and_proc() {
        let cases = [
            ("0x00ffffff", "0-23"),
            ("0x00555555", "0,2,4,6,8,10,12,14,16,18,20,22"),
            ("0x00000001,0x00000000", "32"),
            ("ff,ffffffff", "0-39"),
            ("0x0", ""),
            ("0x0000000f,0xffffffff,0xffffffff", "0-67"),
        ];
        for (input, want) in cases {
            let s = CpuSet::parse_mask(input).unwrap();
            assert_eq!(s.to_string(), want, "input {input:?}");
        }
        assert!(CpuSet::parse_mask("0xzz").is_err());
    }

    #[test]
    fn set_algebra() {
        let a = CpuSet::parse_list("0-7").unwrap();
        let b = CpuSet::parse_list("4-11").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(a.intersection_len(&b), 4);
        assert!(a.intersects(&b));
        assert!(CpuSet::parse_list("1-2").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(b.first(), Some(4));
        assert_eq!(CpuSet::new().first(), None);
        assert_eq!(a.iter().collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn serde_uses_list_format() {
        let s = CpuSet::parse_list("0-3,8").unwrap();
        let j = serde_json_like(&s);
        assert_eq!(j, "0-3,8");
    }

    fn serde_json_like(s: &CpuSet) -> String {
        s.to_string()
    }
}
