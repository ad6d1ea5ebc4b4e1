//! The text `pjw topology` prints.
//!
//! Two summary lines, then one block per package: the package line names the NUMA node and L3
//! domain it lies in when there is one of each, otherwise the nodes and L3 domains inside it get
//! lines of their own; below each, its cores with their PUs (SMT siblings in brackets). Last, the
//! NUMA nodes with their memory. Lines fit 80 columns on small machines; long core lists wrap.

use std::collections::BTreeSet;
use std::fmt::Write;

use pjw_core::{CpuSet, Gpus, Level, Topology};

const WIDTH: usize = 80;

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Bytes as MiB or GiB, one decimal at most ("512 MiB", "15.6 GiB", "16 GiB").
pub(crate) fn format_memory(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let (unit, div) = if bytes >= GIB {
        ("GiB", GIB)
    } else if bytes >= MIB {
        ("MiB", MIB)
    } else if bytes >= KIB {
        ("KiB", KIB)
    } else {
        return format!("{bytes} B");
    };
    let tenths = (u128::from(bytes) * 10 + u128::from(div) / 2) / u128::from(div);
    let (whole, frac) = (tenths / 10, tenths % 10);
    if frac == 0 {
        format!("{whole} {unit}")
    } else {
        format!("{whole}.{frac} {unit}")
    }
}

pub(crate) fn render(topo: &Topology) -> String {
    let mut out = String::new();
    let online = topo.online();
    let offline = topo.offline();

    // Summary.
    let _ = writeln!(out, "topology from {}", topo.source);
    let mut line = format!("{} online ({online}), ", plural(online.len(), "PU", "PUs"));
    if topo.allowed == online {
        line.push_str("all allowed");
    } else {
        let _ = write!(line, "{} allowed ({})", topo.allowed.len(), topo.allowed);
    }
    if !offline.is_empty() {
        let _ = write!(line, ", {} offline ({offline})", offline.len());
    }
    let _ = writeln!(out, "{line}");
    let packages = topo.domains(Level::Package);
    let mem_only = topo.numa_nodes.iter().filter(|n| n.memory_only).count();
    let mut numa = plural(topo.numa_nodes.len(), "NUMA node", "NUMA nodes");
    if mem_only > 0 {
        let _ = write!(numa, " ({mem_only} memory-only)");
    }
    let _ = writeln!(
        out,
        "{}, {numa}, {}, {}, SMT {}",
        plural(packages.len(), "package", "packages"),
        plural(topo.domains(Level::L3).len(), "L3 domain", "L3 domains"),
        plural(topo.domains(Level::Core).len(), "core", "cores"),
        topo.smt_width()
    );

    // Packages, by id (ids follow the lowest CPU, offline ones included for hwloc files).
    for (id, cpus) in packages {
        group(&mut out, topo, cpus, vec![format!("package {id}")], 0, 0);
    }

    // NUMA nodes.
    if !topo.numa_nodes.is_empty() {
        let _ = writeln!(out, "NUMA nodes:");
    }
    for n in &topo.numa_nodes {
        let mut parts = Vec::new();
        if n.memory_only {
            parts.push("memory-only".to_string());
        } else {
            parts.push(format!("cpus {}", n.cpus));
        }
        if let Some(m) = n.memory {
            parts.push(format_memory(m));
        }
        if n.memory_only && !n.cpus.is_empty() {
            parts.push(format!("near cpus {}", n.cpus));
        }
        let _ = writeln!(out, "  node {}: {}", n.os, parts.join(", "));
    }
    out
}

/// The levels a package is split by, outermost first.
const INNER: [Level; 2] = [Level::Numa, Level::L3];

/// Write the group of `cpus` named by `label`, splitting it by `INNER[li..]`.
fn group(
    out: &mut String,
    topo: &Topology,
    cpus: CpuSet,
    mut label: Vec<String>,
    li: usize,
    indent: usize,
) {
    let Some(&level) = INNER.get(li) else {
        header(out, topo, &cpus, &label, indent);
        cores(out, topo, &cpus, indent + 2);
        return;
    };
    let pus = || cpus.iter().filter_map(|c| topo.pu(c));
    let ids: BTreeSet<u32> = pus().filter_map(|p| p.domain(level)).collect();
    if ids.is_empty() {
        return group(out, topo, cpus, label, li + 1, indent);
    }
    let missing = pus().any(|p| p.domain(level).is_none());
    let mut doms: Vec<(u32, CpuSet)> = topo
        .domains(level)
        .into_iter()
        .filter(|d| ids.contains(&d.0))
        .collect();
    doms.sort_by_key(|d| d.1.first());
    let nested = !missing && doms.iter().all(|d| d.1.is_subset(&cpus));
    if ids.len() == 1 || !nested {
        // The group lies in one domain (or straddles several that reach beyond it): name it.
        let list: CpuSet = ids.iter().copied().collect();
        label.push(format!("{} {list}", level.name()));
        group(out, topo, cpus, label, li + 1, indent);
    } else {
        header(out, topo, &cpus, &label, indent);
        for (id, sub) in doms {
            group(
                out,
                topo,
                sub,
                vec![format!("{} {id}", level.name())],
                li + 1,
                indent + 2,
            );
        }
    }
}

fn header(out: &mut String, topo: &Topology, cpus: &CpuSet, label: &[String], indent: usize) {
    let allowed = cpus.intersection(&topo.allowed);
    let note = if allowed == *cpus {
        String::new()
    } else if allowed.is_empty() {
        " (none allowed)".to_string()
    } else {
        format!(" (allowed {allowed})")
    };
    let _ = writeln!(out, "{:indent$}{}: cpus {cpus}{note}", "", label.join(", "));
}

/// The cores of `cpus`, wrapped at [`WIDTH`].
fn cores(out: &mut String, topo: &Topology, cpus: &CpuSet, indent: usize) {
    let mut cores: Vec<CpuSet> = topo
        .domains(Level::Core)
        .into_iter()
        .map(|d| d.1.intersection(cpus))
        .filter(|s| !s.is_empty())
        .collect();
    cores.sort_by_key(|s| s.first());
    let head = format!("{:indent$}{}:", "", plural(cores.len(), "core", "cores"));
    let cont = head.len();
    let mut line = head;
    let mut first = true;
    for c in cores {
        let item = if c.len() == 1 {
            c.to_string()
        } else {
            format!("[{c}]")
        };
        if !first && line.len() + 1 + item.len() > WIDTH {
            let _ = writeln!(out, "{line}");
            line = " ".repeat(cont);
        }
        line.push(' ');
        line.push_str(&item);
        first = false;
    }
    let _ = writeln!(out, "{line}");
}

pub(crate) fn render_gpus(gpus: &Gpus) -> String {
    let mut out = String::new();
    if gpus.is_empty() {
        return out;
    }
    let _ = writeln!(out, "GPUs by NUMA node:");
    let mut nodes: Vec<Option<u32>> = gpus.gpus.iter().map(|g| g.numa).collect();
    nodes.sort_by_key(|n| (n.is_none(), *n));
    nodes.dedup();
    for node in nodes {
        match node {
            Some(n) => {
                let _ = writeln!(out, "  node {n}:");
            }
            None => {
                let _ = writeln!(out, "  node unknown:");
            }
        }
        for g in gpus.gpus.iter().filter(|g| g.numa == node) {
            let mut line = format!("    gpu {} {}", g.id, g.vendor.name());
            if let Some(p) = &g.pci {
                let _ = write!(line, " {p}");
            }
            if let Some(s) = &g.switch {
                let _ = write!(line, ", switch {s}");
            }
            if !g.cpus.is_empty() {
                let _ = write!(line, ", cpus {}", g.cpus);
            }
            let devs: Vec<&str> = g.devices.iter().map(|d| d.path.as_str()).collect();
            if !devs.is_empty() {
                let _ = write!(line, ", {}", devs.join(" "));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if !gpus.shared.is_empty() {
        let devs: Vec<&str> = gpus.shared.iter().map(|d| d.path.as_str()).collect();
        let _ = writeln!(out, "  shared: {}", devs.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(format_memory(1 << 30), "1 GiB");
        assert_eq!(format_memory(16311180 * 1024), "15.6 GiB");
        assert_eq!(format_memory(512 << 20), "512 MiB");
        assert_eq!(format_memory(1536 << 20), "1.5 GiB");
        assert_eq!(format_memory(2048), "2 KiB");
        assert_eq!(format_memory(10), "10 B");
    }
}
