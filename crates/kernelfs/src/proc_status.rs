//! `/proc/PID/status`: `Key:\tvalue` lines (see proc(5)).

use std::collections::BTreeMap;

use pjw_core::CpuSet;

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "/proc/PID/status";

/// The fields pjw uses, plus every line by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Name` (empty when absent).
    pub name: String,
    /// Real, effective, saved set, filesystem.
    pub uid: [u32; 4],
    /// Real, effective, saved set, filesystem.
    pub gid: [u32; 4],
    /// `Threads`.
    pub threads: u64,
    /// `Cpus_allowed_list`.
    pub cpus_allowed_list: CpuSet,
    /// `Mems_allowed_list` (absent without NUMA support in the kernel).
    pub mems_allowed_list: Option<CpuSet>,
    /// Every line, key → value (trimmed).
    pub fields: BTreeMap<String, String>,
}

fn ids(key: &'static str, v: &str) -> Result<[u32; 4], ParseError> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    if parts.len() != 4 {
        return Err(bad_value(FORMAT, key, v));
    }
    let mut out = [0; 4];
    for (o, p) in out.iter_mut().zip(parts) {
        *o = p.parse().map_err(|_| bad_value(FORMAT, key, v))?;
    }
    Ok(out)
}

impl ProcStatus {
    /// Supplementary group ids (`Groups:`; empty when the line is absent or empty).
    pub fn groups(&self) -> Vec<u32> {
        self.fields
            .get("Groups")
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Parse the file.
pub fn parse(text: &str) -> Result<ProcStatus, ParseError> {
    let mut fields = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| bad_line(FORMAT, i, line))?;
        fields.insert(k.to_string(), v.trim().to_string());
    }
    let get = |k: &'static str| {
        fields
            .get(k)
            .map(String::as_str)
            .ok_or(ParseError::MissingField {
                format: FORMAT,
                field: k,
            })
    };
    let list =
        |k: &'static str, v: &str| CpuSet::parse_list(v).map_err(|_| bad_value(FORMAT, k, v));
    let threads = get("Threads")?;
    Ok(ProcStatus {
        name: get("Name").unwrap_or("").to_string(),
        uid: ids("Uid", get("Uid")?)?,
        gid: ids("Gid", get("Gid")?)?,
        threads: threads
            .parse()
            .map_err(|_| bad_value(FORMAT, "Threads", threads))?,
        cpus_allowed_list: list("Cpus_allowed_list", get("Cpus_allowed_list")?)?,
        mems_allowed_list: match fields.get("Mems_allowed_list") {
            Some(v) => Some(list("Mems_allowed_list", v)?),
            None => None,
        },
        fields,
    })
}

/// Only the uids (real, effective, saved set, filesystem) from a `/proc/PID/status` text: its
/// `Uid` line alone, no map of every line (the engine asks this at every start). The same
/// errors as [`parse`] for that line: missing, or not four numbers.
pub fn parse_uids(text: &str) -> Result<[u32; 4], ParseError> {
    let line =
        text.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .ok_or(ParseError::MissingField {
                format: FORMAT,
                field: "Uid",
            })?;
    ids("Uid", line.trim())
}

/// Only the CPUs a process may run on, from a `/proc/PID/status` text: its `Cpus_allowed_list`,
/// or failing that (kernels before the list line) its `Cpus_allowed` mask; `Ok(None)` when
/// neither line is present. Unlike [`parse`], it needs no other field.
pub fn parse_cpus_allowed(text: &str) -> Result<Option<CpuSet>, ParseError> {
    let mut mask = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Cpus_allowed_list:") {
            return CpuSet::parse_list(v)
                .map(Some)
                .map_err(|_| bad_value(FORMAT, "Cpus_allowed_list", v.trim()));
        }
        if let Some(v) = line.strip_prefix("Cpus_allowed:") {
            mask = Some(v.trim());
        }
    }
    mask.map(|m| CpuSet::parse_mask(m).map_err(|_| bad_value(FORMAT, "Cpus_allowed", m)))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplementary_groups() {
        let base =
            "Name:\tx\nUid:\t1\t1\t1\t1\nGid:\t2\t2\t2\t2\nThreads:\t1\nCpus_allowed_list:\t0\n";
        let s = parse(&format!("{base}Groups:\t4 24 27 \n")).unwrap();
        assert_eq!(s.groups(), vec![4, 24, 27]);
        let s = parse(&format!("{base}Groups:\t\n")).unwrap();
        assert!(s.groups().is_empty());
        assert!(parse(base).unwrap().groups().is_empty());
    }

    const STATUS: &str = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t4200\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nThreads:\t1\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t2\n";

    #[test]
    fn uids_alone_are_read_with_the_errors_of_the_whole_parse() {
        assert_eq!(parse_uids(STATUS).unwrap(), parse(STATUS).unwrap().uid);
        let own = "Name:\tx\nUid:\t0\t1000\t2\t3\n";
        assert_eq!(parse_uids(own).unwrap(), [0, 1000, 2, 3]);
        // (text, the whole parse's error on its Uid line)
        for text in [
            "Name:\tx\nGid:\t1\t1\t1\t1\n",
            "Uid:\t1000\t1000\n",
            "Uid:\t1000\tx\t1000\t1000\n",
        ] {
            let alone = parse_uids(text).unwrap_err().to_string();
            let whole = format!("{text}Gid:\t1\t1\t1\t1\nThreads:\t1\nCpus_allowed_list:\t0\n");
            assert_eq!(alone, parse(&whole).unwrap_err().to_string(), "{text:?}");
        }
        // A `Uid`-like key is not the line.
        assert!(parse_uids("NoUid:\t1\t1\t1\t1\n").is_err());
    }

    #[test]
    fn status_allowed_list_is_read() {
        let text =
            "Name:\tcat\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed_list:\t0\n";
        assert_eq!(
            parse_cpus_allowed(text).unwrap().unwrap().to_string(),
            "0-3,6"
        );
        // Old kernels without the list line: the mask.
        let text = "Name:\tcat\nCpus_allowed:\t0000000f\n";
        assert_eq!(
            parse_cpus_allowed(text).unwrap().unwrap().to_string(),
            "0-3"
        );
        assert_eq!(parse_cpus_allowed("Name:\tcat\n").unwrap(), None);
        assert!(parse_cpus_allowed("Cpus_allowed_list:\tx\n").is_err());
    }

    #[test]
    fn parses_status() {
        let s = parse(STATUS).unwrap();
        assert_eq!(s.name, "sleep");
        assert_eq!(s.uid, [1000; 4]);
        assert_eq!(s.gid, [100; 4]);
        assert_eq!(s.threads, 1);
        assert_eq!(s.cpus_allowed_list.to_string(), "0-1");
        assert_eq!(s.mems_allowed_list.unwrap().to_string(), "0");
        assert_eq!(s.fields["State"], "S (sleeping)");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("Name:\tx\n").is_err());
        let e = parse(&STATUS.replace("0-1", "0-x")).unwrap_err();
        assert!(e.to_string().contains("0-x"), "{e}");
        assert!(parse(&STATUS.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t1")).is_err());
        assert!(parse("no colon here\n").is_err());
    }
}
