//! `pjw topology`

use std::path::Path;

use anyhow::Context;

use crate::cli::TopologyArgs;

pub fn run(a: TopologyArgs) -> anyhow::Result<()> {
    let topo = if let Some(x) = &a.xml {
        pjw_topology::load_xml(x)?
    } else if let Some(s) = &a.synthetic {
        pjw_core::synthetic::parse(s)?
    } else {
        pjw_topology::discover(Path::new("/sys"), Path::new("/proc"))
            .context("cannot read this machine's topology")?
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&topo)?);
    } else {
        print!("{}", pjw_topology::render(&topo));
    }
    Ok(())
}
