//! `pjw sim --gpus`: replay a trace of GPU and CPU-only jobs on machines with GPUs under each GPU
//! placement policy and print one table per machine. The simulation is pure
//! (`pjw_sim::gpu`); this module loads the machines and prints.

use std::path::Path;

use anyhow::{bail, Context};
use pjw_core::{Gpus, Level, Topology};
use pjw_sim::gpu::{self, GpuReport};
use pjw_sim::gpu_policies;

use crate::cli::SimArgs;

/// The corpus machine with GPUs `--corpus` runs (2 packages = 2 NUMA nodes, 2 GPUs each).
const CORPUS: [&str; 1] = ["power8gpudistances.xml"];

/// Synthetic machines `--gpus` runs when none is given: 2 sockets × 4 GPUs, one NUMA node per
/// socket; and 2 sockets of 2 NUMA nodes (sub-NUMA clustering) × 2 GPUs each.
pub const DEFAULT_SYNTHETIC: [&str; 2] = [
    "package:2 numa:1 core:8 pu:2 gpu:4",
    "package:2 numa:2 core:8 pu:2 gpu:2",
];

/// Offered load when none is given.
const DEFAULT_LOAD: f64 = 0.7;

pub fn run(a: &SimArgs, seed: u64, njobs: usize) -> anyhow::Result<()> {
    if a.swf.is_some() {
        bail!("--gpus runs synthetic traces only (--swf has no GPU requests)");
    }
    let mut machines: Vec<(String, Topology, Gpus)> = Vec::new();
    let mut xmls: Vec<std::path::PathBuf> = Vec::new();
    if let Some(dir) = &a.corpus {
        xmls.extend(CORPUS.iter().map(|f| dir.join(f)));
    }
    xmls.extend(a.xml.iter().cloned());
    for x in &xmls {
        let name = x
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| x.display().to_string());
        machines.push((name, load_xml(x)?, load_gpus(x)?));
    }
    let synthetic: Vec<String> = if a.synthetic.is_empty() && xmls.is_empty() {
        DEFAULT_SYNTHETIC.iter().map(|s| s.to_string()).collect()
    } else {
        a.synthetic.clone()
    };
    for s in &synthetic {
        let t = pjw_core::synthetic::parse(s)?;
        let g = pjw_core::synthetic::gpus(s, &t)?;
        machines.push((format!("synthetic {s:?}"), t, g));
    }
    let policies: Vec<String> = if a.policies.is_empty() {
        gpu_policies::ALL.iter().map(|s| s.to_string()).collect()
    } else {
        a.policies.clone()
    };
    if let Some(bad) = policies
        .iter()
        .find(|p| !gpu_policies::ALL.contains(&p.as_str()))
    {
        bail!(
            "unknown GPU policy {bad:?} (known: {})",
            gpu_policies::ALL.join(", ")
        );
    }
    let load = a.load.unwrap_or(DEFAULT_LOAD);
    let seeds = a.seeds.max(1);
    let mut out = Vec::new();
    for (name, topo, gpus) in &machines {
        if gpus.is_empty() {
            bail!("{name} has no GPUs (give gpu:N in a synthetic description)");
        }
        let cpus = topo.online().len();
        let traces: Vec<Vec<gpu::GpuJob>> = (seed..seed + seeds)
            .map(|s| gpu::trace(s, njobs, cpus, gpus.len(), load))
            .collect();
        let mut rows = Vec::new();
        for p in &policies {
            let mut runs = Vec::new();
            for jobs in &traces {
                let mut pol = gpu_policies::by_name(p, topo, gpus).context("unknown GPU policy")?;
                runs.push(
                    gpu::simulate(topo, gpus, jobs, pol.as_mut())
                        .with_context(|| format!("simulation of {p} on {name} failed"))?,
                );
            }
            rows.push(gpu::mean(&runs).context("no runs")?);
        }
        let head = format!(
            "{name}: {cpus} PUs, {} NUMA nodes, {} GPUs; trace synthetic:{seed}:{njobs}{}, load {load}",
            topo.domains(Level::Numa).len(),
            gpus.len(),
            if seeds > 1 {
                format!(" (means over seeds {seed}-{})", seed + seeds - 1)
            } else {
                String::new()
            },
        );
        out.push((head, rows));
    }
    if a.json {
        let v: Vec<serde_json::Value> = out
            .iter()
            .map(|(h, rows)| serde_json::json!({ "machine": h, "rows": rows }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (i, (h, rows)) in out.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print!("{}", render(h, rows));
        }
    }
    Ok(())
}

fn load_xml(p: &Path) -> anyhow::Result<Topology> {
    Ok(pjw_topology::load_xml(p)?)
}

fn load_gpus(p: &Path) -> anyhow::Result<Gpus> {
    Ok(pjw_topology::load_xml_gpus(p)?)
}

/// One machine's table.
pub fn render(head: &str, rows: &[GpuReport]) -> String {
    let mut s = format!("{head}\n");
    s.push_str(&format!(
        "{:<20} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>10}\n",
        "policy",
        "local%",
        "1node%",
        "strand%",
        "strand-h",
        "delayed",
        "unplaced",
        "wait s",
        "gpuwait s",
        "makespan s"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:<20} {:>7.2} {:>7.2} {:>8.2} {:>9.1} {:>8.1} {:>8.1} {:>9.0} {:>9.0} {:>10.0}\n",
            r.policy,
            r.local * 100.0,
            r.one_node * 100.0,
            r.stranded * 100.0,
            r.stranded_gpu_h,
            r.delayed,
            r.unplaceable,
            r.mean_wait_s,
            r.mean_gpu_wait_s,
            r.makespan_s
        ));
    }
    s
}
