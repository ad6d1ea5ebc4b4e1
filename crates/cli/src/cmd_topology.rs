//! `pjw topology`

use std::path::Path;

use anyhow::Context;

use crate::cli::TopologyArgs;

pub fn run(a: TopologyArgs) -> anyhow::Result<()> {
    let (topo, gpus) = if let Some(x) = &a.xml {
        (pjw_topology::load_xml(x)?, pjw_topology::load_xml_gpus(x)?)
    } else if let Some(s) = &a.synthetic {
        (pjw_core::synthetic::parse(s)?, pjw_core::Gpus::none())
    } else {
        let topo = pjw_topology::discover(Path::new("/sys"), Path::new("/proc"))
            .context("cannot read this machine's topology")?;
        let gpus =
            pjw_topology::discover_gpus(Path::new("/sys"), Path::new("/dev"), Path::new("/proc"))
                .context("cannot read this machine's gpus")?;
        (topo, gpus)
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&topo)?);
    } else {
        print!("{}", pjw_topology::render(&topo));
        print!("{}", pjw_topology::render_gpus(&gpus));
    }
    Ok(())
}
