//! The machine model: processing units (PUs) and the domains they share.
//!
//! A [`Topology`] is plain data, built by the loaders in `pjw-topology` (sysfs, hwloc XML) or by
//! [`crate::synthetic`]. Every PU records which core, L2, L3, NUMA node and package it belongs to,
//! as small domain ids that are unique within their level. The allocator works on the
//! [`DomainTree`] derived from it: the levels that nest, from the machine down to single PUs.

use serde::{Deserialize, Serialize};

use crate::{CoreError, CpuSet};

/// A level of the machine's hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Machine,
    Package,
    Numa,
    L3,
    L2,
    Core,
    Pu,
}

impl Level {
    /// Levels that group PUs, outermost first (without Machine and Pu).
    pub const GROUPING: [Level; 5] = [
        Level::Package,
        Level::Numa,
        Level::L3,
        Level::L2,
        Level::Core,
    ];

    /// Short name used in output and synthetic descriptions.
    pub fn name(self) -> &'static str {
        match self {
            Level::Machine => "machine",
            Level::Package => "package",
            Level::Numa => "numa",
            Level::L3 => "l3",
            Level::L2 => "l2",
            Level::Core => "core",
            Level::Pu => "pu",
        }
    }
}

/// One processing unit (hardware thread), as the OS numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pu {
    /// The OS CPU number (what `cpuset.cpus` uses).
    pub os: u32,
    /// Core domain id (PUs of one core are SMT siblings).
    pub core: u32,
    /// L2 domain id, if known.
    pub l2: Option<u32>,
    /// L3 domain id, if known.
    pub l3: Option<u32>,
    /// OS number of the NUMA node whose memory is local to this PU, if known.
    pub numa: Option<u32>,
    /// Package (socket) domain id.
    pub package: u32,
    /// Whether the PU is online.
    pub online: bool,
}

impl Pu {
    /// The domain id of this PU at `level` (Machine is always 0, Pu is the OS number).
    pub fn domain(&self, level: Level) -> Option<u32> {
        match level {
            Level::Machine => Some(0),
            Level::Package => Some(self.package),
            Level::Numa => self.numa,
            Level::L3 => self.l3,
            Level::L2 => self.l2,
            Level::Core => Some(self.core),
            Level::Pu => Some(self.os),
        }
    }
}

/// A NUMA node: memory, and the CPUs it is local to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// The OS node number (what `cpuset.mems` uses).
    pub os: u32,
    /// CPUs local to this node. For a memory-only node (no PU of its own, as MCDRAM on KNL)
    /// this is the locality hwloc or sysfs gives, which may be empty.
    pub cpus: CpuSet,
    /// Local memory in bytes, if known.
    pub memory: Option<u64>,
    /// True for a node without PUs of its own.
    pub memory_only: bool,
}

/// A whole machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Where this topology came from ("sysfs", a file name, a synthetic description).
    pub source: String,
    /// All PUs known, sorted by OS number, online or not.
    pub pus: Vec<Pu>,
    /// NUMA nodes, sorted by OS number.
    pub numa_nodes: Vec<NumaNode>,
    /// CPUs this process (or the loaded description) is allowed to use.
    pub allowed: CpuSet,
    /// Distances between NUMA nodes (sysfs `nodeN/distance`, hwloc's `NUMALatency`): empty when
    /// unknown.
    #[serde(default, skip_serializing_if = "NumaDistances::is_empty")]
    pub distances: NumaDistances,
}

/// The NUMA distance matrix (ACPI SLIT values: 10 to itself, larger further away).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaDistances {
    /// The nodes' OS numbers, in the matrix's order.
    pub nodes: Vec<u32>,
    /// Row-major, `nodes.len()` × `nodes.len()`.
    pub values: Vec<u32>,
}

impl NumaDistances {
    /// A matrix over `nodes`, or None when `values` is not square over them (or a node is
    /// named twice).
    pub fn new(nodes: Vec<u32>, values: Vec<u32>) -> Option<NumaDistances> {
        let n = nodes.len();
        let unique = nodes
            .iter()
            .enumerate()
            .all(|(i, a)| !nodes[i + 1..].contains(a));
        (n > 0 && values.len() == n * n && unique).then_some(NumaDistances { nodes, values })
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The distance from node `a` to node `b` (OS numbers), if known.
    pub fn get(&self, a: u32, b: u32) -> Option<u32> {
        let i = self.nodes.iter().position(|&x| x == a)?;
        let j = self.nodes.iter().position(|&x| x == b)?;
        self.values.get(i * self.nodes.len() + j).copied()
    }
}

impl Topology {
    /// The NUMA nodes by their distance from the nearest of `from` (OS numbers), nearest first,
    /// ties (and nodes of unknown distance, last) by number.
    pub fn numa_by_distance(&self, from: &[u32]) -> Vec<u32> {
        let mut v: Vec<(u32, u32)> = self
            .numa_nodes
            .iter()
            .map(|n| {
                let d = from
                    .iter()
                    .filter_map(|&f| {
                        if f == n.os {
                            Some(0)
                        } else {
                            self.distances.get(f, n.os)
                        }
                    })
                    .min()
                    .unwrap_or(u32::MAX);
                (d, n.os)
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, os)| os).collect()
    }

    /// Check the invariants loaders must uphold: PUs sorted and unique, allowed ⊆ online.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.pus.is_empty() {
            return Err(CoreError::BadTopology {
                reason: "no processing units".into(),
            });
        }
        for w in self.pus.windows(2) {
            if w[0].os >= w[1].os {
                return Err(CoreError::BadTopology {
                    reason: format!("pus not sorted or duplicated at cpu {}", w[1].os),
                });
            }
        }
        if !self.allowed.is_subset(&self.online()) {
            return Err(CoreError::BadTopology {
                reason: format!(
                    "allowed cpus {} include cpus that are not online ({})",
                    self.allowed,
                    self.allowed.difference(&self.online())
                ),
            });
        }
        Ok(())
    }

    /// Every PU, online or not.
    pub fn all_cpus(&self) -> CpuSet {
        self.pus.iter().map(|p| p.os).collect()
    }

    /// Online PUs.
    pub fn online(&self) -> CpuSet {
        self.pus.iter().filter(|p| p.online).map(|p| p.os).collect()
    }

    /// Offline PUs.
    pub fn offline(&self) -> CpuSet {
        self.pus
            .iter()
            .filter(|p| !p.online)
            .map(|p| p.os)
            .collect()
    }

    /// The PU with OS number `os`.
    pub fn pu(&self, os: u32) -> Option<&Pu> {
        self.pus
            .binary_search_by_key(&os, |p| p.os)
            .ok()
            .map(|i| &self.pus[i])
    }

    /// The domains of `level`, as (id, online PUs) pairs sorted by id. PUs without a domain at
    /// that level are left out.
    pub fn domains(&self, level: Level) -> Vec<(u32, CpuSet)> {
        let mut out: Vec<(u32, CpuSet)> = Vec::new();
        for p in self.pus.iter().filter(|p| p.online) {
            if let Some(id) = p.domain(level) {
                match out.binary_search_by_key(&id, |d| d.0) {
                    Ok(i) => out[i].1.insert(p.os),
                    Err(i) => {
                        let mut s = CpuSet::new();
                        s.insert(p.os);
                        out.insert(i, (id, s));
                    }
                }
            }
        }
        out
    }

    /// Number of distinct domains at `level` that `cpus` touches.
    pub fn domains_spanned(&self, level: Level, cpus: &CpuSet) -> usize {
        let mut ids: Vec<u32> = cpus
            .iter()
            .filter_map(|c| self.pu(c))
            .filter_map(|p| p.domain(level))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// The NUMA nodes whose memory a job on `cpus` should use: the nodes of those PUs. When no
    /// PU has a known node (a machine without NUMA information), the first node, or node 0.
    pub fn mems_for(&self, cpus: &CpuSet) -> CpuSet {
        let mut mems: CpuSet = cpus
            .iter()
            .filter_map(|c| self.pu(c))
            .filter_map(|p| p.numa)
            .collect();
        if mems.is_empty() {
            mems.insert(self.numa_nodes.first().map(|n| n.os).unwrap_or(0));
        }
        mems
    }

    /// Number of hardware threads per core (the largest core's size).
    pub fn smt_width(&self) -> usize {
        self.domains(Level::Core)
            .iter()
            .map(|d| d.1.len())
            .max()
            .unwrap_or(1)
    }
}

/// A node of the [`DomainTree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainNode {
    /// Level of this node.
    pub level: Level,
    /// Domain id within its level (OS number for a PU).
    pub id: u32,
    /// Online PUs below this node (not restricted to the allowed set).
    pub cpus: CpuSet,
    /// Indices of children in [`DomainTree::nodes`], sorted by their lowest CPU.
    pub children: Vec<usize>,
    /// Index of the parent, `None` for the root.
    pub parent: Option<usize>,
}

/// The nesting levels of a topology as a tree: machine → … → core → PU.
///
/// Levels whose domains are all identical to the level above (an L2 per core, one NUMA node per
/// package) are folded away; a level whose domains do not nest inside the level above (which real
/// machines do not produce, but a hand-written XML might) is left out of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainTree {
    /// All nodes; index 0 is the machine.
    pub nodes: Vec<DomainNode>,
    /// The levels kept, outermost first, always starting with Machine and ending with Pu.
    pub levels: Vec<Level>,
}

impl DomainTree {
    /// Build the tree of `topo`'s online PUs.
    pub fn build(topo: &Topology) -> DomainTree {
        let online = topo.online();
        // Candidate levels ordered by how many domains they have (fewer = outer); on a tie the
        // inner level's name is kept (a core rather than its private L2, a NUMA node rather than a
        // package holding just one).
        let mut cands: Vec<(Level, Vec<(u32, CpuSet)>)> = Level::GROUPING
            .iter()
            .map(|l| (*l, topo.domains(*l)))
            .filter(|(_, d)| {
                !d.is_empty() && d.iter().map(|x| x.1.len()).sum::<usize>() == online.len()
            })
            .collect();
        cands.sort_by_key(|(l, d)| (d.len(), std::cmp::Reverse(*l)));

        let mut levels = vec![Level::Machine];
        let mut parts: Vec<Vec<CpuSet>> = vec![vec![online]];
        for (level, doms) in cands {
            let sets: Vec<CpuSet> = doms.iter().map(|d| d.1).collect();
            let above = parts.last().map(|v| v.as_slice()).unwrap_or(&[]);
            // Same partition as the level above: fold it away.
            if sets.len() == above.len() {
                continue;
            }
            // Must nest: every domain inside exactly one domain above.
            let nests = sets.iter().all(|s| above.iter().any(|a| s.is_subset(a)));
            if !nests {
                continue;
            }
            levels.push(level);
            parts.push(sets);
        }
        levels.push(Level::Pu);
        parts.push(online.iter().map(|c| CpuSet::from_iter([c])).collect());

        // Ids per level, in the same order as `parts`.
        let mut ids: Vec<Vec<u32>> = vec![vec![0]];
        for (li, level) in levels.iter().enumerate().skip(1) {
            if *level == Level::Pu {
                ids.push(online.iter().collect());
            } else {
                let doms = topo.domains(*level);
                ids.push(doms.iter().map(|d| d.0).collect());
                debug_assert_eq!(ids[li].len(), parts[li].len());
            }
        }

        let mut nodes = vec![DomainNode {
            level: Level::Machine,
            id: 0,
            cpus: online,
            children: vec![],
            parent: None,
        }];
        let mut prev: Vec<usize> = vec![0];
        for li in 1..levels.len() {
            let mut cur = Vec::with_capacity(parts[li].len());
            // Sort this level's domains by lowest CPU so children come out ordered.
            let mut order: Vec<usize> = (0..parts[li].len()).collect();
            order.sort_by_key(|&i| parts[li][i].first());
            for i in order {
                let set = parts[li][i];
                let parent = prev
                    .iter()
                    .copied()
                    .find(|&p| set.is_subset(&nodes[p].cpus))
                    .unwrap_or(0);
                let idx = nodes.len();
                nodes.push(DomainNode {
                    level: levels[li],
                    id: ids[li][i],
                    cpus: set,
                    children: vec![],
                    parent: Some(parent),
                });
                nodes[parent].children.push(idx);
                cur.push(idx);
            }
            prev = cur;
        }
        DomainTree { nodes, levels }
    }

    /// Index of the leaf node of PU `cpu`.
    pub fn leaf(&self, cpu: u32) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.level == Level::Pu && n.id == cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    #[test]
    fn tree_folds_identical_levels_and_orders_children() {
        // L2 per core, one NUMA node and one L3 per package: all fold into one level each.
        let t = synthetic::parse("package:2 numa:1 l3:1 l2:4 core:1 pu:2").unwrap();
        let tree = DomainTree::build(&t);
        assert_eq!(
            tree.levels,
            vec![Level::Machine, Level::L3, Level::Core, Level::Pu]
        );
        // Machine has 2 packages, each 4 cores of 2 PUs.
        assert_eq!(tree.nodes[0].children.len(), 2);
        let p0 = tree.nodes[0].children[0];
        assert_eq!(tree.nodes[p0].children.len(), 4);
        assert_eq!(tree.nodes[p0].cpus.len(), 8);
    }

    #[test]
    fn mems_follow_cpus() {
        let t = synthetic::parse("package:2 numa:2 core:2 pu:2").unwrap();
        let node0 = t.numa_nodes[0].cpus;
        assert_eq!(t.mems_for(&node0).to_string(), "0");
        let all = t.online();
        assert_eq!(t.mems_for(&all).to_string(), "0-3");
        assert_eq!(t.domains_spanned(Level::Package, &all), 2);
    }
}
