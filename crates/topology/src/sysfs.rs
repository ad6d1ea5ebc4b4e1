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
    let present = present_cpus(&cpu_dir)?;
    let online = online_cpus(&cpu_dir, &present)?;
    let mut facts: BTreeMap<u32, CpuFacts> = BTreeMap::new();
    for cpu in &online {
        facts.insert(cpu, read_cpu_facts(&cpu_dir, cpu)?);
    }
    let ids = DomainIds::number(&facts);
    let numa = Numa::read(&node_dir, proc_root, online)?;
    let pus = pus(&cpu_dir, &present, &facts, &ids, &numa)?;
    let allowed = allowed_cpus(proc_root, online)?;
    let distances = if numa.none {
        NumaDistances::default()
    } else {
        distances(&node_dir, &numa.nodes)?
    };
    validated(Topology {
        source: "sysfs".into(),
        pus,
        numa_nodes: numa.nodes,
        allowed: allowed.intersection(&online),
        distances,
    })
}

/// Which CPUs exist: `present`, else the `cpuN` directories.
fn present_cpus(cpu_dir: &Path) -> Result<CpuSet, TopologyError> {
    let present = match read_list_opt(&cpu_dir.join("present"))? {
        Some(s) if !s.is_empty() => s,
        _ => numbered_entries(cpu_dir, "cpu")?.into_iter().collect(),
    };
    if present.is_empty() {
        return Err(TopologyError::NoCpus {
            path: cpu_dir.to_path_buf(),
        });
    }
    Ok(present)
}

/// Which of the present CPUs run: `online`, else each CPU's own `online` file.
fn online_cpus(cpu_dir: &Path, present: &CpuSet) -> Result<CpuSet, TopologyError> {
    let online = match read_list_opt(&cpu_dir.join("online"))? {
        Some(s) => s.intersection(present),
        None => {
            let mut s = CpuSet::new();
            for cpu in present {
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
    Ok(online)
}

/// The domains of the online CPUs, numbered by distinct keys (a CPU without a key gets a domain
/// of its own); index `i` is the `i`-th online CPU.
struct DomainIds {
    core: Vec<u32>,
    package: Vec<u32>,
    l2: Vec<Option<u32>>,
    l3: Vec<Option<u32>>,
}

impl DomainIds {
    fn number(facts: &BTreeMap<u32, CpuFacts>) -> DomainIds {
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
        let pkg_items: Vec<(u32, Option<PackageKey>)> = facts
            .iter()
            .map(|(&cpu, f)| (cpu, f.package_key.clone()))
            .collect();
        let cache_ids = |pick: fn(&CpuFacts) -> &Option<CacheKey>| -> Vec<Option<u32>> {
            let items: Vec<(u32, CacheKey)> = facts
                .iter()
                .filter_map(|(&cpu, f)| pick(f).clone().map(|k| (cpu, k)))
                .collect();
            let ids = number_by_first_cpu(&items);
            let by_cpu: BTreeMap<u32, u32> = items.iter().map(|x| x.0).zip(ids).collect();
            facts.keys().map(|c| by_cpu.get(c).copied()).collect()
        };
        DomainIds {
            core: number_by_first_cpu(&core_items),
            package: number_by_first_cpu(&pkg_items),
            l2: cache_ids(|f| &f.l2),
            l3: cache_ids(|f| &f.l3),
        }
    }
}

/// The NUMA nodes: each `nodeN` with its `cpulist` and memory, or, without any, one node holding
/// every online CPU and `<proc>/meminfo`'s memory.
struct Numa {
    nodes: Vec<NumaNode>,
    /// The kernel shows no NUMA node: `nodes` is the one made up for the machine.
    none: bool,
}

impl Numa {
    fn read(node_dir: &Path, proc_root: &Path, online: CpuSet) -> Result<Numa, TopologyError> {
        let mut nodes = Vec::new();
        for n in numbered_entries(node_dir, "node")? {
            let dir = node_dir.join(format!("node{n}"));
            let cpus = read_list_opt(&dir.join("cpulist"))?.unwrap_or_default();
            let memory = read_opt(&dir.join("meminfo"))?
                .as_deref()
                .and_then(pjw_kernelfs::meminfo::parse_total);
            nodes.push(NumaNode {
                os: n,
                cpus,
                memory,
                memory_only: cpus.is_empty(),
            });
        }
        let none = nodes.is_empty();
        if none {
            let memory = read_opt(&proc_root.join("meminfo"))?
                .as_deref()
                .and_then(pjw_kernelfs::meminfo::parse_total);
            nodes.push(NumaNode {
                os: 0,
                cpus: online,
                memory,
                memory_only: false,
            });
        }
        Ok(Numa { nodes, none })
    }

    /// The node of `cpu`: the one whose `cpulist` holds it, else (an offline CPU drops out of
    /// its node's cpulist) the one its `cpuN/nodeM` link names.
    fn node_of(&self, cpu_dir: &Path, cpu: u32) -> Result<Option<u32>, TopologyError> {
        if self.none {
            return Ok(Some(0));
        }
        if let Some(n) = self.nodes.iter().find(|n| n.cpus.contains(cpu)) {
            return Ok(Some(n.os));
        }
        let linked = numbered_entries(&cpu_dir.join(format!("cpu{cpu}")), "node")?;
        Ok(linked
            .into_iter()
            .find(|n| self.nodes.iter().any(|x| x.os == *n)))
    }
}

/// Every present CPU as a PU: an online one with its domains, an offline one with a core of its
/// own and the package its `physical_package_id` names.
fn pus(
    cpu_dir: &Path,
    present: &CpuSet,
    facts: &BTreeMap<u32, CpuFacts>,
    ids: &DomainIds,
    numa: &Numa,
) -> Result<Vec<Pu>, TopologyError> {
    let mut pus = Vec::with_capacity(present.len());
    let mut next_core = ids.core.iter().max().map_or(0, |m| m + 1);
    let online_index: BTreeMap<u32, usize> =
        facts.keys().enumerate().map(|(i, c)| (*c, i)).collect();
    for cpu in present {
        let pu = match online_index.get(&cpu) {
            Some(&i) => Pu {
                os: cpu,
                core: ids.core[i],
                l2: ids.l2[i],
                l3: ids.l3[i],
                numa: numa.node_of(cpu_dir, cpu)?,
                package: ids.package[i],
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
                    numa: numa.node_of(cpu_dir, cpu)?,
                    package: offline_package(cpu_dir, cpu, facts, &ids.package)?,
                    online: false,
                }
            }
        };
        pus.push(pu);
    }
    Ok(pus)
}

/// What this process may use: `<proc>/self/status`'s allowed CPUs (all online ones when it
/// names none).
fn allowed_cpus(proc_root: &Path, online: CpuSet) -> Result<CpuSet, TopologyError> {
    let status = proc_root.join("self/status");
    let text = fs::read_to_string(&status).map_err(|e| io_err(&status, e))?;
    match pjw_kernelfs::proc_status::parse_cpus_allowed(&text) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Ok(online),
        Err(e) => Err(TopologyError::Parse {
            path: status,
            text: text
                .lines()
                .find(|l| l.starts_with("Cpus_allowed"))
                .unwrap_or("")
                .to_string(),
            reason: e.to_string(),
        }),
    }
}

/// Distances: each node's `distance` lists its distance to every online node, in node order.
/// A file that does not match the nodes found is ignored (distances unknown).
fn distances(node_dir: &Path, nodes: &[NumaNode]) -> Result<NumaDistances, TopologyError> {
    let nodes: Vec<u32> = nodes.iter().map(|n| n.os).collect();
    let mut values = Vec::new();
    for n in &nodes {
        let text = read_opt(&node_dir.join(format!("node{n}/distance")))?.unwrap_or_default();
        values.extend(text.split_ascii_whitespace().map(|w| w.parse::<u32>().ok()));
    }
    let values: Option<Vec<u32>> = values.into_iter().collect();
    Ok(values
        .and_then(|v| NumaDistances::new(nodes, v))
        .unwrap_or_default())
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
