//! `pjw check`: the preflight an admin runs on a node before putting it in service.
//!
//! [`facts::gather`] reads the machine below injectable roots into plain data;
//! [`rules::evaluate`] turns that into one verdict per check (pure, tested on literal facts and
//! on fake trees). Output: one line per check, `OK|WARN|FAIL  name  detail — fix`, or `--json`;
//! the exit code is 1 when any check FAILs.

pub mod facts;
pub mod rules;
pub mod slurm;

use anyhow::Result;

use crate::cli::CheckArgs;
use rules::Status;

/// Run every check; the exit code is 0 unless one FAILs.
pub fn run(args: CheckArgs) -> Result<i32> {
    // This binary is PREFIX/lib/pjw/pjw-full once installed (the launch front execs it), or
    // beside PREFIX/bin/pjw in a build tree.
    let hooks_dir = std::env::current_exe()
        .ok()
        .and_then(|p| {
            let dir = p.parent()?;
            if dir.ends_with("lib/pjw") {
                return Some(dir.to_path_buf());
            }
            dir.parent().map(|pre| pre.join("lib/pjw"))
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/lib/pjw".into());
    let roots = facts::Roots {
        etc: "/etc".into(),
        run: "/run".into(),
        backend: pjw_cgroup::Backend::Kernel,
        commands: true,
        hooks_dir,
        slurm_conf: args.slurm_conf,
    };
    let req = facts::Request {
        config: args.config,
        cgroup_parent: args.cgroup_parent,
        socket: std::env::var_os("PJW_SOCKET").map(Into::into),
    };
    let lines = rules::evaluate(&facts::gather(&roots, &req));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&lines)?);
    } else {
        for l in &lines {
            println!("{}", l.render());
        }
    }
    Ok(if lines.iter().any(|l| l.status == Status::Fail) {
        1
    } else {
        0
    })
}

#[cfg(test)]
mod tests;
