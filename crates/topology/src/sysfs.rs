//! Discovery from sysfs and procfs.
//!
//! Files read, all below injectable roots:
//! - `<sys>/devices/system/cpu/{present,online}`: which CPUs exist and which run;
//! - `<sys>/devices/system/cpu/cpuN/topology/*`: SMT siblings (`core_cpus_list`, or the older
//!   `thread_siblings_list`), package (`package_cpus_list` / `core_siblings_list`, or
//!   `physical_package_id`), `die_id`, `core_id`;
//! - `<sys>/devices/system/cpu/cpuN/cache/indexK/{level,type,shared_cpu_list}`: L2 and L3 domains;
//! - `<sys>/devices/system/cpu/cpuN/online` when the global `online` file is missing, and the
//!   `cpuN/nodeM` link for CPUs that are in no node's `cpulist` (offline ones);
//! - `<sys>/devices/system/node/nodeN/{cpulist,meminfo}`: NUMA nodes and their memory;
//! - `<proc>/self/status` (`Cpus_allowed_list`) and, without NUMA nodes, `<proc>/meminfo`.
//!
//! Offline CPUs have no `topology` directory: they are listed with `online = false` and a core
//! of their own.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use pjw_core::{CpuSet, NumaDistances, NumaNode, Pu, Topology};

use crate::{number_by_first_cpu, validated, TopologyError};

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> TopologyError {
    TopologyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Read a file; `Ok(None)` when it does not exist.
pub(crate) fn read_opt(path: &Path) -> Result<Option<String>, TopologyError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, e)),
    }
}

fn parse_list_at(path: &Path, text: &str) -> Result<CpuSet, TopologyError> {
    CpuSet::parse_list(text).map_err(|e| TopologyError::Parse {
        path: path.to_path_buf(),
        text: text.trim().to_string(),
        reason: e.to_string(),
    })
}

/// Read a kernel cpu list; `Ok(None)` when the file does not exist.
fn read_list_opt(path: &Path) -> Result<Option<CpuSet>, TopologyError> {
    match read_opt(path)? {
        Some(t) => parse_list_at(path, &t).map(Some),
        None => Ok(None),
    }
}

/// Read a file holding one integer (which may be negative, as `physical_package_id` is on some
/// machines); `Ok(None)` when it does not exist.
fn read_int_opt(path: &Path) -> Result<Option<i64>, TopologyError> {
    match read_opt(path)? {
        Some(t) => t
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|e| TopologyError::Parse {
                path: path.to_path_buf(),
                text: t.trim().to_string(),
                reason: e.to_string(),
            }),
        None => Ok(None),
    }
}

/// Entries of `dir` named `<prefix><number>`, sorted by number. A missing directory is empty.
fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<u32>, TopologyError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.parse::<u32>().ok())
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The `Cpus_allowed_list` of a `/proc/PID/status` text, or failing that its `Cpus_allowed` mask.
/// `Ok(None)` when neither line is present.
pub fn parse_status_allowed(text: &str) -> Result<Option<CpuSet>, pjw_core::CoreError> {
    let mut mask = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Cpus_allowed_list:") {
            return CpuSet::parse_list(v).map(Some);
        }
        if let Some(v) = line.strip_prefix("Cpus_allowed:") {
            mask = Some(v.trim().to_string());
        }
    }
    mask.map(|m| CpuSet::parse_mask(&m)).transpose()
}

/// `MemTotal` in bytes from a `/proc/meminfo` or `/sys/devices/system/node/nodeN/meminfo` text
/// (`"Node 0 MemTotal:  16311180 kB"`). `None` when there is no such line or it does not parse.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.split_whitespace().last() != Some("MemTotal") {
            continue;
        }
        let mut parts = value.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        let mult = match parts.next().map(|u| u.to_ascii_lowercase()) {
            None => 1,
            Some(u) if u == "b" => 1,
            Some(u) if u == "kb" => 1024,
            Some(u) if u == "mb" => 1024 * 1024,
            Some(u) if u == "gb" => 1024 * 1024 * 1024,
            Some(_) => return None,
        };
        return n.checked_mul(mult);
    }
    None
}

/// What one online CPU's sysfs directory says about it.
#[derive(Debug, Default)]
struct CpuFacts {
    core_key: Option<CpuSet>,
    core_fallback: Option<(i64, i64)>,
    package_key: Option<PackageKey>,
    package_id: Option<i64>,
    l2: Option<CacheKey>,
    l3: Option<CacheKey>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PackageKey {
    Cpus(CpuSet),
    Id(i64),
}

/// What tells a core apart: its SMT sibling set, else (package and die, core_id), else nothing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CoreKey {
    Siblings(CpuSet),
    Ids(i64, i64),
    Own(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CacheKey {
    Cpus(CpuSet),
    Id(i64),
    Own(u32),
}

fn read_cpu_facts(cpu_dir: &Path, cpu: u32) -> Result<CpuFacts, TopologyError> {
    let dir = cpu_dir.join(format!("cpu{cpu}"));
    let topo = dir.join("topology");
    let mut f = CpuFacts::default();
    if topo.is_dir() {
        f.core_key = match read_list_opt(&topo.join("core_cpus_list"))? {
            Some(s) => Some(s),
            None => read_list_opt(&topo.join("thread_siblings_list"))?,
        };
        let pkg_id = read_int_opt(&topo.join("physical_package_id"))?;
        f.package_id = pkg_id;
        let pkg_cpus = match read_list_opt(&topo.join("package_cpus_list"))? {
            Some(s) => Some(s),
            None => read_list_opt(&topo.join("core_siblings_list"))?,
        };
        f.package_key = match (pkg_cpus, pkg_id) {
            (Some(s), _) if !s.is_empty() => Some(PackageKey::Cpus(s)),
            (_, Some(id)) => Some(PackageKey::Id(id)),
            _ => None,
        };
        if f.core_key.is_some_and(|s| s.is_empty()) {
            f.core_key = None;
        }
        if f.core_key.is_none() {
            let core_id = read_int_opt(&topo.join("core_id"))?;
            let die_id = read_int_opt(&topo.join("die_id"))?.unwrap_or(0);
            if let (Some(c), Some(p)) = (core_id, pkg_id) {
                f.core_fallback = Some((p * 65536 + die_id, c));
            }
        }
    }
    let cache = dir.join("cache");
    for index in numbered_entries(&cache, "index")? {
        let idir = cache.join(format!("index{index}"));
        let Some(level) = read_int_opt(&idir.join("level"))? else {
            continue;
        };
        let kind = read_opt(&idir.join("type"))?.unwrap_or_default();
        if kind.trim() == "Instruction" {
            continue;
        }
        let key = match read_list_opt(&idir.join("shared_cpu_list"))? {
            Some(s) if !s.is_empty() => CacheKey::Cpus(s),
            _ => match read_int_opt(&idir.join("id"))? {
                Some(id) => CacheKey::Id(id),
                None => CacheKey::Own(cpu),
            },
        };
        match level {
            2 => f.l2 = Some(key),
            3 => f.l3 = Some(key),
            _ => {}
        }
    }
    Ok(f)
}

pub(crate) fn discover(sys_root: &Path, proc_root: &Path) -> Result<Topology, TopologyError> {
    let cpu_dir = sys_root.join("devices/system/cpu");
    let node_dir = sys_root.join("devices/system/node");

    // Which CPUs exist.
    let present = match read_list_opt(&cpu_dir.join("present"))? {
        Some(s) if !s.is_empty() => s,
        _ => numbered_entries(&cpu_dir, "cpu")?.into_iter().collect(),
    };
    if present.is_empty() {
        return Err(TopologyError::NoCpus { path: cpu_dir });
    }

    // Which of them run.
    let online = match read_list_opt(&cpu_dir.join("online"))? {
        Some(s) => s.intersection(&present),
        None => {
            let mut s = CpuSet::new();
            for cpu in &present {
                let path = cpu_dir.join(format!("cpu{cpu}/online"));
                // cpu0 often has no `online` file: it cannot be taken offline.
                match read_int_opt(&path)? {
                    Some(0) => {}
                    _ => s.insert(cpu),
                }
            }
            s
        }
    };
    if online.is_empty() {
        return Err(TopologyError::NoCpus {
            path: cpu_dir.join("online"),
        });
    }

    // Per-CPU facts for online CPUs.
    let mut facts: BTreeMap<u32, CpuFacts> = BTreeMap::new();
    for cpu in &online {
        facts.insert(cpu, read_cpu_facts(&cpu_dir, cpu)?);
    }

    // Number domains by distinct keys. A CPU without a key gets a domain of its own.
    let core_items: Vec<(u32, CoreKey)> = facts
        .iter()
        .map(|(&cpu, f)| {
            let key = match (&f.core_key, f.core_fallback) {
                (Some(s), _) => CoreKey::Siblings(*s),
                (None, Some((pkg, core))) => CoreKey::Ids(pkg, core),
                (None, None) => CoreKey::Own(cpu),
            };
            (cpu, key)
        })
        .collect();
    let core_ids = number_by_first_cpu(&core_items);
    let pkg_items: Vec<(u32, Option<PackageKey>)> = facts
        .iter()
        .map(|(&cpu, f)| (cpu, f.package_key.clone()))
        .collect();
    let pkg_ids = number_by_first_cpu(&pkg_items);
    let cache_ids = |pick: fn(&CpuFacts) -> &Option<CacheKey>| -> Vec<Option<u32>> {
        let items: Vec<(u32, CacheKey)> = facts
            .iter()
            .filter_map(|(&cpu, f)| pick(f).clone().map(|k| (cpu, k)))
            .collect();
        let ids = number_by_first_cpu(&items);
        let by_cpu: BTreeMap<u32, u32> = items.iter().map(|x| x.0).zip(ids).collect();
        facts.keys().map(|c| by_cpu.get(c).copied()).collect()
    };
    let l2_ids = cache_ids(|f| &f.l2);
    let l3_ids = cache_ids(|f| &f.l3);

    // NUMA nodes.
    let mut numa_nodes = Vec::new();
    for n in numbered_entries(&node_dir, "node")? {
        let dir = node_dir.join(format!("node{n}"));
        let cpus = read_list_opt(&dir.join("cpulist"))?.unwrap_or_default();
        let memory = read_opt(&dir.join("meminfo"))?
            .as_deref()
            .and_then(parse_meminfo_total);
        numa_nodes.push(NumaNode {
            os: n,
            cpus,
            memory,
            memory_only: cpus.is_empty(),
        });
    }
    let no_numa = numa_nodes.is_empty();
    if no_numa {
        let memory = read_opt(&proc_root.join("meminfo"))?
            .as_deref()
            .and_then(parse_meminfo_total);
        numa_nodes.push(NumaNode {
            os: 0,
            cpus: online,
            memory,
            memory_only: false,
        });
    }
    let node_of = |cpu: u32| -> Result<Option<u32>, TopologyError> {
        if no_numa {
            return Ok(Some(0));
        }
        if let Some(n) = numa_nodes.iter().find(|n| n.cpus.contains(cpu)) {
            return Ok(Some(n.os));
        }
        // Offline CPUs drop out of their node's cpulist but keep their `nodeM` link.
        let linked = numbered_entries(&cpu_dir.join(format!("cpu{cpu}")), "node")?;
        Ok(linked
            .into_iter()
            .find(|n| numa_nodes.iter().any(|x| x.os == *n)))
    };

    // PUs.
    let mut pus = Vec::with_capacity(present.len());
    let mut next_core = core_ids.iter().max().map_or(0, |m| m + 1);
    let online_index: BTreeMap<u32, usize> =
        facts.keys().enumerate().map(|(i, c)| (*c, i)).collect();
    for cpu in &present {
        let pu = match online_index.get(&cpu) {
            Some(&i) => Pu {
                os: cpu,
                core: core_ids[i],
                l2: l2_ids[i],
                l3: l3_ids[i],
                numa: node_of(cpu)?,
                package: pkg_ids[i],
                online: true,
            },
            None => {
                let core = next_core;
                next_core += 1;
                Pu {
                    os: cpu,
                    core,
                    l2: None,
                    l3: None,
                    numa: node_of(cpu)?,
                    package: offline_package(&cpu_dir, cpu, &facts, &pkg_ids)?,
                    online: false,
                }
            }
        };
        pus.push(pu);
    }

    // What this process may use.
    let status = proc_root.join("self/status");
    let text = fs::read_to_string(&status).map_err(|e| io_err(&status, e))?;
    let allowed = match parse_status_allowed(&text) {
        Ok(Some(s)) => s,
        Ok(None) => online,
        Err(e) => {
            return Err(TopologyError::Parse {
                path: status,
                text: text
                    .lines()
                    .find(|l| l.starts_with("Cpus_allowed"))
                    .unwrap_or("")
                    .to_string(),
                reason: e.to_string(),
            })
        }
    };

    // Distances: each node's `distance` lists its distance to every online node, in node
    // order. A file that does not match the nodes found is ignored (distances unknown).
    let mut distances = NumaDistances::default();
    if !no_numa {
        let nodes: Vec<u32> = numa_nodes.iter().map(|n| n.os).collect();
        let mut values = Vec::new();
        for n in &nodes {
            let text = read_opt(&node_dir.join(format!("node{n}/distance")))?.unwrap_or_default();
            values.extend(text.split_ascii_whitespace().map(|w| w.parse::<u32>().ok()));
        }
        let values: Option<Vec<u32>> = values.into_iter().collect();
        if let Some(d) = values.and_then(|v| NumaDistances::new(nodes, v)) {
            distances = d;
        }
    }
    validated(Topology {
        source: "sysfs".into(),
        pus,
        numa_nodes,
        allowed: allowed.intersection(&online),
        distances,
    })
}

/// The package of an offline CPU: the package of an online CPU with the same
/// `physical_package_id` when the kernel still shows it, else 0.
fn offline_package(
    cpu_dir: &Path,
    cpu: u32,
    facts: &BTreeMap<u32, CpuFacts>,
    pkg_ids: &[u32],
) -> Result<u32, TopologyError> {
    let path = cpu_dir.join(format!("cpu{cpu}/topology/physical_package_id"));
    let Some(id) = read_int_opt(&path)? else {
        return Ok(0);
    };
    Ok(facts
        .values()
        .position(|f| f.package_id == Some(id))
        .map_or(0, |i| pkg_ids[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_allowed_list_is_read() {
        let text =
            "Name:\tcat\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed_list:\t0\n";
        assert_eq!(
            parse_status_allowed(text).unwrap().unwrap().to_string(),
            "0-3,6"
        );
        // Old kernels without the list line: the mask.
        let text = "Name:\tcat\nCpus_allowed:\t0000000f\n";
        assert_eq!(
            parse_status_allowed(text).unwrap().unwrap().to_string(),
            "0-3"
        );
        assert_eq!(parse_status_allowed("Name:\tcat\n").unwrap(), None);
        assert!(parse_status_allowed("Cpus_allowed_list:\tx\n").is_err());
    }

    #[test]
    fn meminfo_totals_in_bytes() {
        assert_eq!(
            parse_meminfo_total("Node 0 MemTotal:        4417748 kB\nNode 0 MemFree: 1 kB\n"),
            Some(4417748 * 1024)
        );
        assert_eq!(
            parse_meminfo_total("MemTotal:       16311180 kB\n"),
            Some(16311180 * 1024)
        );
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots\n"), None);
    }
}
