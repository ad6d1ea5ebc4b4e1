//! The cgroup facts of the parent the daemon would use: its mode, the parent resolved as the
//! daemon resolves it (below pjw.service's daemon for a `self/...` parent where systemd runs
//! one), the controllers there, and whether swap is accounted.

use std::path::{Path, PathBuf};
use std::process::Command;

use pjw_cgroup::{Backend, Driver, Mode};
use pjw_core::CpuSet;

use super::{words, CgroupFacts, Roots};

/// The cgroup facts of the configured parent, resolved as the daemon resolves it: a `self/...`
/// parent is below the daemon's own cgroup, so where systemd runs one it is resolved against
/// that process (a proc root whose `self` is it), not against this shell.
pub(super) fn daemon_cgroup_facts(
    roots: &Roots,
    cfg: &pjw_daemon::Config,
) -> (CgroupFacts, Option<CpuSet>, Option<PathBuf>) {
    let daemon_pid = match cfg.cgroup_parent {
        pjw_cgroup::ParentSpec::SelfRelative(_)
            if roots.commands && roots.run.join("systemd/system").is_dir() =>
        {
            service_main_pid()
        }
        _ => None,
    };
    let daemon_proc = daemon_pid.and_then(|pid| {
        let dir = tempfile_dir()?;
        std::os::unix::fs::symlink(cfg.proc_root.join(pid.to_string()), dir.join("self")).ok()?;
        Some(dir)
    });
    let (mut cgroup, parent_cpus, memory_dirs) = cgroup_facts(
        daemon_proc.as_deref().unwrap_or(&cfg.proc_root),
        &cfg.cgroup_parent,
        roots.backend,
    );
    if let Some(dir) = &daemon_proc {
        let _ = std::fs::remove_file(dir.join("self"));
        let _ = std::fs::remove_dir(dir);
    }
    if let pjw_cgroup::ParentSpec::SelfRelative(_) = cfg.cgroup_parent {
        cgroup.parent = match daemon_pid {
            Some(pid) => format!("{} of pjw.service's daemon (pid {pid})", cgroup.parent),
            None => format!(
                "{} of this process (the daemon resolves it against its own cgroup)",
                cgroup.parent
            ),
        };
    }
    (cgroup, parent_cpus, memory_dirs)
}

/// Whether swap is accounted per cgroup: off when the kernel was booted with
/// `swapaccount=0`, else what the memory hierarchy's files say.
pub(super) fn swap_accounting_of(
    proc_root: &Path,
    cgroup: &CgroupFacts,
    memory_dirs: &Option<PathBuf>,
) -> Option<bool> {
    let cmdline = std::fs::read_to_string(proc_root.join("cmdline")).unwrap_or_default();
    if cmdline.split_whitespace().any(|w| w == "swapaccount=0") {
        Some(false)
    } else {
        swap_accounting(cgroup, memory_dirs)
    }
}

/// The cgroup facts, the parent's cpuset (if it exists) and the memory hierarchy's parent
/// directory (for swap accounting).
fn cgroup_facts(
    proc_root: &Path,
    parent: &pjw_cgroup::ParentSpec,
    backend: Backend,
) -> (CgroupFacts, Option<CpuSet>, Option<PathBuf>) {
    let mut f = CgroupFacts {
        mode: Err(String::new()),
        describe: String::new(),
        parent: parent.to_string(),
        parent_dir: PathBuf::new(),
        nearest: PathBuf::new(),
        available: Vec::new(),
        parent_subtree: None,
        v1_mounted: Vec::new(),
        v1_disabled: Vec::new(),
    };
    if let Ok(t) = std::fs::read_to_string(proc_root.join("cgroups")) {
        // subsys_name hierarchy num_cgroups enabled
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() >= 4 && cols[3] == "0" {
                f.v1_disabled.push(cols[0].to_string());
            }
        }
    }
    let driver = match Driver::detect_with(proc_root, parent, backend) {
        Ok(d) => d,
        Err(e) => {
            f.mode = Err(e.to_string());
            return (f, None, None);
        }
    };
    f.mode = Ok(driver.mode());
    f.describe = driver.describe();
    let dirs = driver.parent_dirs();
    let mut memory_dir = None;
    for (key, dir) in &dirs {
        if key == "unified" {
            if driver.mode() == Mode::Unified {
                memory_dir = Some(dir.clone());
            }
            f.parent_dir = dir.clone();
            let mut nearest = dir.clone();
            while !nearest.exists() {
                match nearest.parent() {
                    Some(p) => nearest = p.to_path_buf(),
                    None => break,
                }
            }
            f.available = words(&nearest.join("cgroup.controllers"));
            if nearest == *dir {
                f.parent_subtree = Some(words(&dir.join("cgroup.subtree_control")));
            }
            f.nearest = nearest;
        } else {
            for c in key.split(',') {
                f.v1_mounted.push(c.to_string());
                if c == "memory" {
                    memory_dir = Some(dir.clone());
                }
            }
        }
    }
    let cpus = driver.parent_cpus().ok().flatten();
    (f, cpus, memory_dir)
}

/// Whether the memory controller accounts swap: its swap files exist in the memory
/// hierarchy (v2 `memory.swap.max`, not in the root cgroup; v1 `memory.memsw.limit_in_bytes`).
fn swap_accounting(c: &CgroupFacts, memory_dir: &Option<PathBuf>) -> Option<bool> {
    let dir = memory_dir.as_ref()?;
    let file = match c.mode {
        Ok(Mode::Unified) => "memory.swap.max",
        Ok(_) => "memory.memsw.limit_in_bytes",
        Err(_) => return None,
    };
    let mut d = dir.clone();
    while !d.exists() {
        d = d.parent()?.to_path_buf();
    }
    if d.join(file).exists() {
        return Some(true);
    }
    // The v2 root cgroup has no memory.swap.*: look at a child.
    let child = std::fs::read_dir(&d)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && p.join("memory.current").exists())?;
    Some(child.join(file).exists())
}

/// pjw.service's main process, when systemd runs it.
fn service_main_pid() -> Option<u32> {
    let out = Command::new("systemctl")
        .args(["show", "-p", "MainPID", "--value", "pjw.service"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|p| *p > 0)
}

/// A fresh private directory for the daemon's proc-root view.
fn tempfile_dir() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("pjw-check-{}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}
