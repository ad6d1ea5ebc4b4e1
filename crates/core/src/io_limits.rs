//! A job's block I/O weight and limits, and the cgroup file lines they become.
//!
//! Typed values parsed from text (`pjw run --io-weight`, `--io-max`, `[job] io_weight`,
//! `[job] io_max`); the cgroup adapter writes the lines made here. A device is named by
//! `major:minor` only: resolving a path to the block device behind it is the caller's (an OS
//! adapter's) job.
//!
//! ```
//! use pjw_core::io_limits::{IoMax, IoWeight};
//! let w = IoWeight::parse("500").unwrap();
//! assert_eq!((w.get(), w.v1()), (500, 500));
//! let m = IoMax::parse("254:0 rbps=100M wiops=200").unwrap();
//! assert_eq!(m.v2_line(), "254:0 rbps=104857600 wbps=max riops=max wiops=200");
//! assert_eq!(m.to_string(), "254:0 rbps=100M wiops=200");
//! ```

use std::fmt;

use crate::CoreError;

/// A cgroup v2 I/O weight, 1-10000 (the kernel's default is 100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IoWeight(u16);

impl IoWeight {
    pub const MIN: u16 = 1;
    pub const MAX: u16 = 10_000;
    /// The kernel's default weight of a cgroup (`io.weight` and BFQ's).
    pub const DEFAULT: IoWeight = IoWeight(100);

    /// A weight in 1-10000.
    pub fn new(w: u64) -> Result<IoWeight, CoreError> {
        if (Self::MIN as u64..=Self::MAX as u64).contains(&w) {
            Ok(IoWeight(w as u16))
        } else {
            Err(CoreError::BadIo {
                text: w.to_string(),
                reason: "an I/O weight is 1-10000".into(),
            })
        }
    }

    /// Parse a decimal weight in 1-10000.
    pub fn parse(text: &str) -> Result<IoWeight, CoreError> {
        let t = text.trim();
        let n: u64 = t.parse().map_err(|_| CoreError::BadIo {
            text: t.to_string(),
            reason: "an I/O weight is a whole number 1-10000".into(),
        })?;
        IoWeight::new(n).map_err(|_| CoreError::BadIo {
            text: t.to_string(),
            reason: "an I/O weight is 1-10000".into(),
        })
    }

    pub fn get(self) -> u16 {
        self.0
    }

    /// The weight on the cgroup v1 and BFQ scale (`blkio.bfq.weight`, `io.bfq.weight`,
    /// `blkio.weight`): the same number, held to 10-1000. The default 100 stays 100 (BFQ's
    /// default); weights above 1000 all become 1000 and below 10 become 10.
    pub fn v1(self) -> u16 {
        self.0.clamp(10, 1000)
    }
}

impl fmt::Display for IoWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A block device, `major:minor` (a whole disk: the kernel refuses limits on a partition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockDev {
    pub major: u32,
    pub minor: u32,
}

impl BlockDev {
    /// Parse `major:minor`.
    pub fn parse(text: &str) -> Result<BlockDev, CoreError> {
        let bad = || CoreError::BadIo {
            text: text.to_string(),
            reason: "a device is major:minor, e.g. 8:0".into(),
        };
        let (a, b) = text.trim().split_once(':').ok_or_else(bad)?;
        let num = |s: &str| -> Result<u32, CoreError> {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        Ok(BlockDev {
            major: num(a)?,
            minor: num(b)?,
        })
    }
}

impl BlockDev {
    /// Split a `dev_t` (`st_dev`, `st_rdev`) the way glibc's `major()`/`minor()` do.
    pub fn from_dev_t(dev: u64) -> BlockDev {
        BlockDev {
            major: (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32,
            minor: ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32,
        }
    }
}

impl fmt::Display for BlockDev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// The four limits of `io.max` on one device; `None` = no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoRates {
    /// Read bytes per second.
    pub rbps: Option<u64>,
    /// Write bytes per second.
    pub wbps: Option<u64>,
    /// Read operations per second.
    pub riops: Option<u64>,
    /// Write operations per second.
    pub wiops: Option<u64>,
}

impl IoRates {
    /// The fields in `io.max` order, with their key.
    pub fn fields(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("rbps", self.rbps),
            ("wbps", self.wbps),
            ("riops", self.riops),
            ("wiops", self.wiops),
        ]
    }

    /// The tighter of two limits, field by field (a job can only tighten the node's).
    pub fn tightest(&self, other: &IoRates) -> IoRates {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        IoRates {
            rbps: min(self.rbps, other.rbps),
            wbps: min(self.wbps, other.wbps),
            riops: min(self.riops, other.riops),
            wiops: min(self.wiops, other.wiops),
        }
    }
}

/// Limits on one device: `MAJ:MIN rbps=… wbps=… riops=… wiops=…`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoMax {
    pub dev: BlockDev,
    pub rates: IoRates,
}

impl IoMax {
    /// Parse `MAJ:MIN key=value…` with keys rbps, wbps (sizes: `100M`, bytes per second),
    /// riops, wiops (whole numbers) and `max` for no limit. At least one key; no key twice.
    pub fn parse(text: &str) -> Result<IoMax, CoreError> {
        let mut words = text.split_whitespace();
        let dev = BlockDev::parse(words.next().unwrap_or(""))?;
        Ok(IoMax {
            dev,
            rates: parse_rates(text, words)?,
        })
    }

    /// The `io.max` line (cgroup v2); unlimited fields are written `max`, so the line also
    /// lifts a limit set before.
    pub fn v2_line(&self) -> String {
        let mut s = self.dev.to_string();
        for (k, v) in self.rates.fields() {
            match v {
                Some(v) => s.push_str(&format!(" {k}={v}")),
                None => s.push_str(&format!(" {k}=max")),
            }
        }
        s
    }

    /// The cgroup v1 throttle files and their lines: `(blkio.throttle.FILE, "MAJ:MIN VALUE")`;
    /// an unlimited field is `0` (v1's "no limit").
    pub fn v1_lines(&self) -> Vec<(&'static str, String)> {
        let file = |k: &str| match k {
            "rbps" => "blkio.throttle.read_bps_device",
            "wbps" => "blkio.throttle.write_bps_device",
            "riops" => "blkio.throttle.read_iops_device",
            _ => "blkio.throttle.write_iops_device",
        };
        self.rates
            .fields()
            .iter()
            .map(|(k, v)| (file(k), format!("{} {}", self.dev, v.unwrap_or(0))))
            .collect()
    }
}

impl fmt::Display for IoMax {
    /// The short form that [`IoMax::parse`] reads back: only the set limits, bytes as sizes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dev)?;
        for (k, v) in self.rates.fields() {
            if let Some(v) = v {
                if k.ends_with("bps") {
                    write!(f, " {k}={}", short_size(v))?;
                } else {
                    write!(f, " {k}={v}")?;
                }
            }
        }
        Ok(())
    }
}

/// A byte count in the largest unit that holds it exactly (`100M`, `1536K`, `1000`).
fn short_size(n: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if n > 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

fn parse_rates<'a>(text: &str, words: impl Iterator<Item = &'a str>) -> Result<IoRates, CoreError> {
    let bad = |reason: String| CoreError::BadIo {
        text: text.trim().to_string(),
        reason,
    };
    let mut r = IoRates::default();
    let mut seen = Vec::new();
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or_else(|| bad(format!("{w:?} is not key=value")))?;
        if seen.contains(&k) {
            return Err(bad(format!("{k} given twice")));
        }
        seen.push(k);
        let val = if v == "max" {
            None
        } else if k.ends_with("bps") {
            let n = crate::parse_size(v).map_err(|e| bad(e.to_string()))?;
            Some(n)
        } else {
            Some(
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{k}={v}: not a whole number")))?,
            )
        };
        if val == Some(0) {
            return Err(bad(format!("{k}=0 would stop all I/O (use max for none)")));
        }
        match k {
            "rbps" => r.rbps = val,
            "wbps" => r.wbps = val,
            "riops" => r.riops = val,
            "wiops" => r.wiops = val,
            _ => {
                return Err(bad(format!(
                    "unknown key {k:?} (expected rbps, wbps, riops, wiops)"
                )))
            }
        }
    }
    if seen.is_empty() {
        return Err(bad("no limit given (e.g. rbps=100M)".into()));
    }
    Ok(r)
}

/// A job's I/O settings: its weight (None: the kernel's default) and its limits per device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobIo {
    pub weight: Option<IoWeight>,
    /// At most one entry per device, ordered by device.
    pub max: Vec<IoMax>,
}

impl JobIo {
    pub fn is_empty(&self) -> bool {
        self.weight.is_none() && self.max.is_empty()
    }

    /// Merge a job's own limits into the node's: per device, field by field, the tighter one.
    pub fn merge_max(node: &[IoMax], job: &[IoMax]) -> Vec<IoMax> {
        let mut out: Vec<IoMax> = node.to_vec();
        for j in job {
            match out.iter_mut().find(|m| m.dev == j.dev) {
                Some(m) => m.rates = m.rates.tightest(&j.rates),
                None => out.push(*j),
            }
        }
        out.sort_by_key(|m| m.dev);
        out
    }

    /// One line for people and the store: `weight=500; 254:0 rbps=100M` (`-` when empty).
    /// [`JobIo::parse`] reads it back.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(w) = self.weight {
            parts.push(format!("weight={w}"));
        }
        parts.extend(self.max.iter().map(|m| m.to_string()));
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join("; ")
        }
    }

    /// Read what [`JobIo::summary`] wrote.
    pub fn parse(text: &str) -> Result<JobIo, CoreError> {
        let mut io = JobIo::default();
        for part in text.split(';').map(str::trim) {
            if part.is_empty() || part == "-" {
                continue;
            }
            if let Some(w) = part.strip_prefix("weight=") {
                io.weight = Some(IoWeight::parse(w)?);
            } else {
                io.max.push(IoMax::parse(part)?);
            }
        }
        io.max = JobIo::merge_max(&[], &io.max);
        Ok(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_1_to_10000_and_map_to_10_to_1000() {
        for (t, w, v1) in [
            ("1", 1, 10),
            ("100", 100, 100),
            ("1000", 1000, 1000),
            ("10000", 10000, 1000),
        ] {
            let x = IoWeight::parse(t).unwrap();
            assert_eq!((x.get(), x.v1()), (w, v1), "{t}");
        }
        for bad in ["0", "10001", "-5", "1e3", "", "abc", "99999999999999999999"] {
            let e = IoWeight::parse(bad).unwrap_err().to_string();
            assert!(e.contains("I/O weight"), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn devices_are_major_colon_minor() {
        assert_eq!(
            BlockDev::parse("8:16").unwrap(),
            BlockDev {
                major: 8,
                minor: 16
            }
        );
        // glibc's makedev(254, 0) and makedev(259, 1048577).
        assert_eq!(BlockDev::from_dev_t(0xfe00).to_string(), "254:0");
        assert_eq!(
            BlockDev::from_dev_t(0x1_0001_0301).to_string(),
            "259:1048577"
        );
        for bad in ["8", "8:", ":0", "a:b", "8:0:1", "-1:0", "+8:0", "8 :0"] {
            assert!(BlockDev::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn io_max_parses_sizes_counts_and_max() {
        let m = IoMax::parse("8:0 rbps=1M wbps=2048 riops=100 wiops=max").unwrap();
        assert_eq!(
            m.rates,
            IoRates {
                rbps: Some(1 << 20),
                wbps: Some(2048),
                riops: Some(100),
                wiops: None
            }
        );
        assert_eq!(
            m.v2_line(),
            "8:0 rbps=1048576 wbps=2048 riops=100 wiops=max"
        );
        assert_eq!(m.to_string(), "8:0 rbps=1M wbps=2K riops=100");
        assert_eq!(IoMax::parse(&m.to_string()).unwrap(), m);
        assert_eq!(
            m.v1_lines(),
            vec![
                ("blkio.throttle.read_bps_device", "8:0 1048576".to_string()),
                ("blkio.throttle.write_bps_device", "8:0 2048".to_string()),
                ("blkio.throttle.read_iops_device", "8:0 100".to_string()),
                ("blkio.throttle.write_iops_device", "8:0 0".to_string()),
            ]
        );
    }

    #[test]
    fn io_max_refuses_bad_input_in_one_line() {
        for (bad, why) in [
            ("8:0", "no limit"),
            ("8:0 rbps", "key=value"),
            ("8:0 rbps=1M rbps=2M", "twice"),
            ("8:0 rbps=0", "stop all I/O"),
            ("8:0 riops=1.5", "whole number"),
            ("8:0 rbps=lots", "invalid size"),
            ("8:0 speed=1", "unknown key"),
            ("/dev/sda rbps=1M", "major:minor"),
            ("", "major:minor"),
        ] {
            let e = IoMax::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_job_can_only_tighten_the_node_limits() {
        let node = [IoMax::parse("8:0 rbps=100M wbps=50M").unwrap()];
        let job = [
            IoMax::parse("8:0 rbps=200M wbps=10M riops=5").unwrap(),
            IoMax::parse("7:1 wiops=9").unwrap(),
        ];
        let merged = JobIo::merge_max(&node, &job);
        assert_eq!(
            merged.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            ["7:1 wiops=9", "8:0 rbps=100M wbps=10M riops=5"]
        );
    }

    #[test]
    fn summary_round_trips() {
        let io = JobIo {
            weight: Some(IoWeight::parse("250").unwrap()),
            max: vec![IoMax::parse("254:0 rbps=10M").unwrap()],
        };
        assert_eq!(io.summary(), "weight=250; 254:0 rbps=10M");
        assert_eq!(JobIo::parse(&io.summary()).unwrap(), io);
        assert_eq!(JobIo::default().summary(), "-");
        assert_eq!(JobIo::parse("-").unwrap(), JobIo::default());
        assert!(JobIo::parse("weight=0").is_err());
    }
}
