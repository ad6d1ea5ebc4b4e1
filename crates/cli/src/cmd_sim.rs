//! `pjw sim`: replay a job trace on one or more topologies under each placement policy and print
//! one table per topology. The simulation itself is pure (`pjw_sim`); this module loads
//! the inputs and measures each policy decision with the clock, which the core never reads.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use pjw_core::{CpuSet, Level, Topology};
use pjw_sim::{self as sim, baselines, trace, Job, Placement, SimReport};

use crate::cli::SimArgs;

/// The corpus machines `--corpus` runs: 24, 96 and 384 PUs.
const CORPUS: [&str; 3] = [
    "24em64t-2n6c2t-pci.xml",
    "96em64t-4n4d3ca2co-pci.xml",
    "192em64t-24n8c2t.xml",
];

/// Job sizes whose fragmentation is reported.
const FRAG_SIZES: [usize; 2] = [4, 8];

/// A policy with its decision times.
struct Timed {
    inner: Box<dyn Placement>,
    ns: Vec<u64>,
}

impl Placement for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn place(&mut self, free: &CpuSet, n: usize) -> Option<CpuSet> {
        let t = Instant::now();
        let r = self.inner.place(free, n);
        self.ns.push(t.elapsed().as_nanos() as u64);
        r
    }
}

struct Row {
    report: SimReport,
    decisions: usize,
    decision_us_mean: f64,
    decision_us_p99: f64,
}

struct Table {
    topology: String,
    pus: usize,
    packages: usize,
    numa_nodes: usize,
    l3: usize,
    trace: String,
    offered_load: f64,
    rows: Vec<Row>,
}

pub fn run(a: SimArgs) -> anyhow::Result<()> {
    if a.gpus {
        let (seed, njobs) = match &a.trace {
            Some(t) => parse_trace_spec(t)?,
            None => (1, 2000),
        };
        return crate::cmd_sim_gpu::run(&a, seed, njobs);
    }
    let mut topos: Vec<(String, Topology)> = Vec::new();
    if let Some(dir) = &a.corpus {
        for f in CORPUS {
            topos.push((f.to_string(), load_xml(&dir.join(f))?));
        }
    }
    for x in &a.xml {
        let name = x
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| x.display().to_string());
        topos.push((name, load_xml(x)?));
    }
    for s in &a.synthetic {
        topos.push((format!("synthetic {s:?}"), pjw_core::synthetic::parse(s)?));
    }
    if topos.is_empty() {
        let t = pjw_topology::discover(Path::new("/sys"), Path::new("/proc"))
            .context("cannot read this machine's topology (give --xml, --synthetic or --corpus)")?;
        topos.push(("this machine".to_string(), t));
    }
    let policies: Vec<String> = if a.policies.is_empty() {
        baselines::ALL.iter().map(|s| s.to_string()).collect()
    } else {
        a.policies.clone()
    };
    if let Some(bad) = policies
        .iter()
        .find(|p| !baselines::ALL.contains(&p.as_str()))
    {
        bail!(
            "unknown policy {bad:?} (known: {})",
            baselines::ALL.join(", ")
        );
    }
    let swf = match &a.swf {
        Some(p) => Some((
            p.clone(),
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
        )),
        None => None,
    };
    let (seed, njobs) = match &a.trace {
        Some(t) => parse_trace_spec(t)?,
        None => (1, 2000),
    };

    let mut tables = Vec::new();
    for (name, topo) in &topos {
        let cpus = topo.online().len();
        let (jobs, trace_name) = make_trace(&swf, seed, njobs, cpus, a.load)?;
        let mut rows = Vec::new();
        for p in &policies {
            let inner = baselines::by_name(p, topo).context("unknown policy")?;
            let mut timed = Timed {
                inner,
                ns: Vec::with_capacity(jobs.len() * 2),
            };
            let report = sim::simulate(topo, &jobs, &mut timed, &FRAG_SIZES)
                .with_context(|| format!("simulation of {p} on {name} failed"))?;
            let (mean, p99) = stats_us(&mut timed.ns);
            rows.push(Row {
                report,
                decisions: timed.ns.len(),
                decision_us_mean: mean,
                decision_us_p99: p99,
            });
        }
        tables.push(Table {
            topology: name.clone(),
            pus: cpus,
            packages: topo.domains(Level::Package).len(),
            numa_nodes: topo.domains(Level::Numa).len(),
            l3: topo.domains(Level::L3).len(),
            trace: trace_name,
            offered_load: trace::offered_load(&jobs, cpus),
            rows,
        });
    }
    if a.json {
        let v: Vec<serde_json::Value> = tables.iter().map(to_json).collect::<Result<_, _>>()?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (i, t) in tables.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print!("{}", render(t));
        }
    }
    Ok(())
}

fn to_json(t: &Table) -> serde_json::Result<serde_json::Value> {
    let mut rows = Vec::new();
    for r in &t.rows {
        let mut v = serde_json::to_value(&r.report)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("decisions".into(), r.decisions.into());
            o.insert("decision_us_mean".into(), r.decision_us_mean.into());
            o.insert("decision_us_p99".into(), r.decision_us_p99.into());
        }
        rows.push(v);
    }
    Ok(serde_json::json!({
        "topology": t.topology,
        "pus": t.pus,
        "packages": t.packages,
        "numa_nodes": t.numa_nodes,
        "l3": t.l3,
        "trace": t.trace,
        "offered_load": t.offered_load,
        "rows": rows,
    }))
}

fn load_xml(p: &Path) -> anyhow::Result<Topology> {
    Ok(pjw_topology::load_xml(p)?)
}

/// `synthetic:SEED:NJOBS`.
fn parse_trace_spec(t: &str) -> anyhow::Result<(u64, usize)> {
    let bad = || anyhow::anyhow!("invalid trace {t:?} (expected synthetic:SEED:NJOBS)");
    let mut it = t.split(':');
    if it.next() != Some("synthetic") {
        return Err(bad());
    }
    let seed = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let n = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((seed, n))
}

fn make_trace(
    swf: &Option<(PathBuf, String)>,
    seed: u64,
    njobs: usize,
    cpus: usize,
    load: Option<f64>,
) -> anyhow::Result<(Vec<Job>, String)> {
    Ok(match swf {
        Some((path, text)) => {
            let mut jobs = trace::parse_swf(text, cpus)
                .with_context(|| format!("cannot parse {}", path.display()))?;
            if let Some(l) = load {
                trace::scale_to_load(&mut jobs, cpus, l);
            }
            (jobs, format!("swf {}", path.display()))
        }
        None => {
            let l = load.unwrap_or(0.9);
            (
                trace::synthetic(seed, njobs, cpus, l),
                format!("synthetic:{seed}:{njobs}"),
            )
        }
    })
}

/// Mean and 99th percentile of nanosecond samples, in microseconds.
fn stats_us(ns: &mut [u64]) -> (f64, f64) {
    if ns.is_empty() {
        return (0.0, 0.0);
    }
    ns.sort_unstable();
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0;
    let i = ((ns.len() as f64 * 0.99).ceil() as usize).clamp(1, ns.len()) - 1;
    (mean, ns[i] as f64 / 1000.0)
}

fn render(t: &Table) -> String {
    let mut s = format!(
        "{}: {} PUs, {} packages, {} NUMA nodes, {} L3; trace {}, offered load {:.2}\n",
        t.topology, t.pus, t.packages, t.numa_nodes, t.l3, t.trace, t.offered_load
    );
    let mut head = format!(
        "{:<13} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "policy", "numa", "l3", "pkgs", "%min", "%min0"
    );
    for k in FRAG_SIZES {
        head.push_str(&format!(" {:>7}", format!("frag{k}%")));
    }
    head.push_str(&format!(
        " {:>7} {:>8} {:>8} {:>8}\n",
        "delayed", "wait s", "µs mean", "µs p99"
    ));
    s.push_str(&head);
    for r in &t.rows {
        let p = &r.report;
        s.push_str(&format!(
            "{:<13} {:>6.3} {:>6.3} {:>6.3} {:>6.1} {:>6.1}",
            p.policy,
            p.mean_numa,
            p.mean_l3,
            p.mean_packages,
            p.minimal * 100.0,
            p.minimal_idle * 100.0
        ));
        for (_, f) in &p.fragmentation {
            s.push_str(&format!(" {:>7.1}", f * 100.0));
        }
        s.push_str(&format!(
            " {:>7} {:>8.0} {:>8.2} {:>8.2}\n",
            p.delayed, p.mean_wait_s, r.decision_us_mean, r.decision_us_p99
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_spec_parses() {
        assert_eq!(parse_trace_spec("synthetic:7:300").unwrap(), (7, 300));
        for bad in ["synthetic:7", "swf:1:2", "synthetic:x:1", "synthetic:1:2:3"] {
            assert!(parse_trace_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn p99_of_samples() {
        let mut v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(stats_us(&mut v), (50.5, 99.0));
    }
}
