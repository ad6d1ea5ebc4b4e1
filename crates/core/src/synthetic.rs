//! Synthetic topologies from a short description, in the spirit of hwloc's synthetic syntax.
//!
//! `"package:2 numa:2 l3:2 core:4 pu:2"` is a machine of 2 packages, each with 2 NUMA nodes,
//! each with 2 L3 domains of 4 cores with 2 hardware threads: 64 PUs. Counts are per parent.
//! Level names: `package`/`socket`, `numa`/`node`/`numanode`, `l3`, `l2`, `core`, `pu`/`thread`
//! (case-insensitive; hwloc's `L3Cache` style is accepted). Omitted levels are absent, except
//! `core` and `pu`, which default to 1, and `package`, which defaults to 1. PUs are numbered in
//! depth-first order, as hwloc does. An optional `mem:SIZE` item gives every NUMA node memory.
//! An optional `gpu:N` item attaches N GPUs to every NUMA node (see [`gpus`]), and `switch:K`
//! puts each node's GPUs under K PCIe switches; [`parse`] itself ignores them (checking their
//! counts), since a [`Topology`] holds no GPUs.
//!
//! ```
//! let t = pjw_core::synthetic::parse("package:2 core:2 pu:2").unwrap();
//! assert_eq!(t.pus.len(), 8);
//! ```

use crate::size::parse_size;
use crate::topology::{Level, NumaNode, Pu, Topology};
use crate::{CoreError, CpuSet, Gpu, GpuId, GpuVendor, Gpus, MAX_CPUS};

/// Parse a synthetic description into a topology whose every PU is online and allowed.
pub fn parse(text: &str) -> Result<Topology, CoreError> {
    let Levels { counts, memory } = levels(text)?;
    let total: u64 = counts.iter().map(|(_, c)| *c as u64).product();
    if total as usize > MAX_CPUS {
        return Err(bad_synthetic(
            text,
            format!("{total} pus is more than pjw handles ({MAX_CPUS})"),
        ));
    }
    let pus = pus(&counts, total);
    let numa_nodes = numa_nodes(&pus, memory);
    let allowed = CpuSet::first_n(total as usize)?;
    let topo = Topology {
        source: format!("synthetic:{}", text.trim()),
        pus,
        numa_nodes,
        allowed,
        distances: Default::default(),
    };
    topo.validate()?;
    Ok(topo)
}

fn bad_synthetic(text: &str, reason: String) -> CoreError {
    CoreError::BadSynthetic {
        text: text.to_string(),
        reason,
    }
}

/// What a description says about the machine.
struct Levels {
    /// The levels it names, outermost first, with their counts per parent (`package`, `core`
    /// and `pu` added with 1 where absent).
    counts: Vec<(Level, u32)>,
    /// The memory of each NUMA node (`mem:SIZE`).
    memory: Option<u64>,
}

/// The levels of a description, checked.
fn levels(text: &str) -> Result<Levels, CoreError> {
    let bad = |reason: String| bad_synthetic(text, reason);
    let mut counts: Vec<(Level, u32)> = Vec::new();
    let mut memory: Option<u64> = None;
    for item in text.split_whitespace() {
        let (name, count) = item
            .split_once(':')
            .ok_or_else(|| bad(format!("item {item:?} is not NAME:COUNT")))?;
        let lname = name.to_ascii_lowercase();
        if lname == "mem" || lname == "memory" {
            memory =
                Some(parse_size(count).map_err(|_| bad(format!("bad memory size {count:?}")))?);
            continue;
        }
        if lname == "gpu" || lname == "gpus" || lname == "switch" || lname == "switches" {
            switches_per_node(text)?;
            continue;
        }
        let level = match lname.as_str() {
            "package" | "socket" => Level::Package,
            "numa" | "node" | "numanode" => Level::Numa,
            "l3" | "l3cache" => Level::L3,
            "l2" | "l2cache" => Level::L2,
            "core" => Level::Core,
            "pu" | "thread" => Level::Pu,
            _ => return Err(bad(format!("unknown level {name:?}"))),
        };
        let count: u32 = count.parse().ok().filter(|c| *c >= 1).ok_or_else(|| {
            bad(format!(
                "count {count:?} of {name} is not a positive integer"
            ))
        })?;
        if let Some((prev, _)) = counts.last() {
            if *prev >= level {
                return Err(bad(format!(
                    "level {} must come before {}",
                    level.name(),
                    prev.name()
                )));
            }
        }
        counts.push((level, count));
    }
    if counts.is_empty() {
        return Err(bad("no levels".into()));
    }
    for must in [Level::Package, Level::Core, Level::Pu] {
        if !counts.iter().any(|(l, _)| *l == must) {
            let pos = counts
                .iter()
                .position(|(l, _)| *l > must)
                .unwrap_or(counts.len());
            counts.insert(pos, (must, 1));
        }
    }
    Ok(Levels { counts, memory })
}

/// The `total` PUs of `counts`, numbered in depth-first order, each with its domains.
fn pus(counts: &[(Level, u32)], total: u64) -> Vec<Pu> {
    // Number of PUs under one domain of each level.
    let mut span = vec![1u64; counts.len()];
    for i in (0..counts.len()).rev() {
        span[i] = if i + 1 < counts.len() {
            span[i + 1] * counts[i + 1].1 as u64
        } else {
            1
        };
    }
    let dom = |level: Level, i: u64| -> Option<u32> {
        counts
            .iter()
            .position(|(l, _)| *l == level)
            .map(|k| (i / span[k]) as u32)
    };
    let has_numa = counts.iter().any(|(l, _)| *l == Level::Numa);
    let mut pus = Vec::with_capacity(total as usize);
    for i in 0..total {
        pus.push(Pu {
            os: i as u32,
            core: dom(Level::Core, i).unwrap_or(0),
            l2: dom(Level::L2, i),
            l3: dom(Level::L3, i),
            numa: Some(if has_numa {
                dom(Level::Numa, i).unwrap_or(0)
            } else {
                0
            }),
            package: dom(Level::Package, i).unwrap_or(0),
            online: true,
        });
    }
    pus
}

/// The NUMA nodes the PUs name, each with `memory`.
fn numa_nodes(pus: &[Pu], memory: Option<u64>) -> Vec<NumaNode> {
    let nodes = pus.iter().filter_map(|p| p.numa).max().unwrap_or(0) + 1;
    (0..nodes)
        .map(|n| NumaNode {
            os: n,
            cpus: pus
                .iter()
                .filter(|p| p.numa == Some(n))
                .map(|p| p.os)
                .collect(),
            memory,
            memory_only: false,
        })
        .collect()
}

/// The `gpu:N` count of a description (0 when absent).
fn gpus_per_node(text: &str) -> Result<u32, CoreError> {
    let mut n = 0;
    for item in text.split_whitespace() {
        if let Some((name, count)) = item.split_once(':') {
            if matches!(name.to_ascii_lowercase().as_str(), "gpu" | "gpus") {
                n = count.parse().map_err(|_| CoreError::BadSynthetic {
                    text: text.to_string(),
                    reason: format!("gpu count {count:?} is not a number"),
                })?;
            }
        }
    }
    Ok(n)
}

/// The `switch:K` count of a description (0 when absent: no switch), checked against `gpu:N`
/// (1 to N).
fn switches_per_node(text: &str) -> Result<u32, CoreError> {
    let per = gpus_per_node(text)?;
    let mut k = 0;
    for item in text.split_whitespace() {
        if let Some((name, count)) = item.split_once(':') {
            if matches!(name.to_ascii_lowercase().as_str(), "switch" | "switches") {
                k = count
                    .parse()
                    .ok()
                    .filter(|k| (1..=per).contains(k))
                    .ok_or_else(|| CoreError::BadSynthetic {
                        text: text.to_string(),
                        reason: format!(
                            "switch count {count:?} is not 1 to the gpus per node ({per})"
                        ),
                    })?;
            }
        }
    }
    Ok(k)
}

/// The GPUs a description's `gpu:N` item attaches to `topo` (parsed from the same text): N per
/// NUMA node, numbered node by node, each local to its node's CPUs; with `switch:K`, a node's
/// GPUs in K consecutive runs under K switches (named by made-up upstream-port addresses,
/// `0000:01:00.0`, `0000:02:00.0`, … across the machine). No device nodes: these GPUs are for
/// the simulator.
///
/// ```
/// let d = "package:2 numa:1 core:8 gpu:4";
/// let topo = pjw_core::synthetic::parse(d).unwrap();
/// let gpus = pjw_core::synthetic::gpus(d, &topo).unwrap();
/// assert_eq!(gpus.len(), 8);
/// assert_eq!(gpus.gpus[5].cpus.to_string(), "8-15");
/// ```
pub fn gpus(text: &str, topo: &Topology) -> Result<Gpus, CoreError> {
    let per = gpus_per_node(text)?;
    let k = switches_per_node(text)?;
    let mut out = Vec::new();
    let mut switches = 0u32;
    for node in &topo.numa_nodes {
        if node.cpus.is_empty() {
            continue;
        }
        for j in 0..per {
            let switch = (k > 0).then(|| {
                let n = switches + j * k / per + 1;
                format!("{:04x}:{:02x}:00.0", n / 256, n % 256)
            });
            out.push(Gpu {
                id: GpuId(out.len() as u32),
                vendor: GpuVendor::Nvidia,
                pci: None,
                switch,
                numa: Some(node.os),
                cpus: node.cpus,
                devices: Vec::new(),
            });
        }
        switches += k;
    }
    let gpus = Gpus {
        gpus: out,
        shared: Vec::new(),
    };
    gpus.validate().map_err(|e| CoreError::BadSynthetic {
        text: text.to_string(),
        reason: e.to_string(),
    })?;
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_multiply_and_domains_are_depth_first() {
        let t = parse("package:2 numa:2 l3:2 core:4 pu:2").unwrap();
        assert_eq!(t.pus.len(), 64);
        assert_eq!(t.numa_nodes.len(), 4);
        assert_eq!(t.domains(Level::L3).len(), 8);
        assert_eq!(t.domains(Level::Core).len(), 32);
        // PUs 0 and 1 are SMT siblings; 0-7 share an L3; 0-15 a NUMA node; 0-31 a package.
        assert_eq!(t.pus[1].core, t.pus[0].core);
        assert_ne!(t.pus[2].core, t.pus[0].core);
        assert_eq!(t.domains(Level::L3)[0].1.to_string(), "0-7");
        assert_eq!(t.numa_nodes[1].cpus.to_string(), "16-31");
        assert_eq!(t.domains(Level::Package)[1].1.to_string(), "32-63");
    }

    #[test]
    fn defaults_and_aliases() {
        let t = parse("Socket:2 L3Cache:1 thread:2 mem:1G").unwrap();
        assert_eq!(t.pus.len(), 4);
        assert_eq!(t.domains(Level::Core).len(), 2);
        assert_eq!(t.numa_nodes.len(), 1);
        assert_eq!(t.numa_nodes[0].memory, Some(1 << 30));
    }

    #[test]
    fn gpus_attach_to_every_numa_node() {
        let d = "package:2 numa:2 core:4 gpu:2";
        let t = parse(d).unwrap();
        assert_eq!(t.pus.len(), 16);
        let g = gpus(d, &t).unwrap();
        let nodes: Vec<Option<u32>> = g.gpus.iter().map(|g| g.numa).collect();
        assert_eq!(
            nodes,
            [
                Some(0),
                Some(0),
                Some(1),
                Some(1),
                Some(2),
                Some(2),
                Some(3),
                Some(3)
            ]
        );
        assert_eq!(g.gpus[3].cpus.to_string(), "4-7");
        assert!(gpus("core:2", &parse("core:2").unwrap())
            .unwrap()
            .is_empty());
        assert!(parse("core:2 gpu:x").is_err());
        assert!(g.gpus.iter().all(|g| g.switch.is_none()));
    }

    #[test]
    fn switches_split_each_nodes_gpus_into_runs() {
        let d = "numa:2 core:4 gpu:4 switch:2";
        let t = parse(d).unwrap();
        let g = gpus(d, &t).unwrap();
        let sw: Vec<&str> = g
            .gpus
            .iter()
            .map(|g| g.switch.as_deref().unwrap())
            .collect();
        assert_eq!(
            sw,
            [
                "0000:01:00.0",
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
                "0000:03:00.0",
                "0000:04:00.0",
                "0000:04:00.0"
            ]
        );
        // Uneven: 3 GPUs under 2 switches are 2 and 1.
        let d = "core:2 gpu:3 switch:2";
        let g = gpus(d, &parse(d).unwrap()).unwrap();
        let sw: Vec<Option<&str>> = g.gpus.iter().map(|g| g.switch.as_deref()).collect();
        assert_eq!(
            sw,
            [
                Some("0000:01:00.0"),
                Some("0000:01:00.0"),
                Some("0000:02:00.0")
            ]
        );
        for bad in [
            "core:2 gpu:2 switch:3",
            "core:2 gpu:2 switch:0",
            "core:2 switch:1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rejects_bad_descriptions() {
        for bad in [
            "",
            "core",
            "core:0",
            "core:x",
            "pu:2 core:2",
            "banana:2",
            "core:2 core:2",
            "core:64 pu:64",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
