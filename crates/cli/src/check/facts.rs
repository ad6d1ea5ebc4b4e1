//! What `pjw check` reads from the machine, below injectable roots ([`Roots`]), into plain
//! [`Facts`]. The verdicts are in [`super::rules`]; tests point the roots at fake trees.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use pjw_cgroup::{Backend, Mode};
use pjw_core::CpuSet;

use super::rules::TopoSummary;

mod cgroup;

use cgroup::{daemon_cgroup_facts, swap_accounting_of};

/// Where to look. `proc` and `sys` come from the config's `[paths]`; `etc` and `run` default to
/// `/etc` and `/run`.
#[derive(Clone, Debug)]
pub struct Roots {
    pub etc: PathBuf,
    pub run: PathBuf,
    /// The cgroup backend (a fake tree in tests).
    pub backend: Backend,
    /// Run commands (qconf, systemctl) and open the proc connector; off in tests.
    pub commands: bool,
    /// Where the WLM hooks are installed (`/usr/lib/pjw`, `/usr/local/lib/pjw`).
    pub hooks_dir: String,
    /// Slurm's slurm.conf when not in `etc` (`--slurm-conf`, `SLURM_CONF`).
    pub slurm_conf: Option<PathBuf>,
}

/// What was asked on the command line.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub config: Option<PathBuf>,
    /// `--cgroup-parent`, else `PJW_CGROUP_PARENT`, else pjw-scope's env file, else the config.
    pub cgroup_parent: Option<String>,
    /// The daemon's socket when not the config's (`PJW_SOCKET`).
    pub socket: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub uid: u32,
    pub mode: u32,
    pub is_dir: bool,
}

#[derive(Clone, Debug)]
pub struct PathFacts {
    pub path: PathBuf,
    pub meta: Option<Meta>,
}

#[derive(Clone, Debug)]
pub struct CgroupFacts {
    pub mode: Result<Mode, String>,
    pub describe: String,
    pub parent: String,
    /// The parent's directory in the cgroup2 tree (unified mode).
    pub parent_dir: PathBuf,
    /// The parent, or its nearest existing ancestor.
    pub nearest: PathBuf,
    /// `cgroup.controllers` of `nearest` (unified).
    pub available: Vec<String>,
    /// `cgroup.subtree_control` of the parent, when it exists (unified).
    pub parent_subtree: Option<Vec<String>>,
    /// v1 controllers with a hierarchy pjw uses (hybrid, legacy).
    pub v1_mounted: Vec<String>,
    /// Controllers `/proc/cgroups` lists as disabled.
    pub v1_disabled: Vec<String>,
}

/// Slurm's configuration as `pjw check` reads it.
#[derive(Clone, Debug)]
pub struct SlurmFacts {
    /// slurm.conf's path and text.
    pub conf_path: String,
    pub conf: String,
    /// The plugin stack's file (`PlugStackConfig`, else plugstack.conf beside slurm.conf) and
    /// pjw's plugin entries in it and the files it includes; an error when it cannot be read
    /// or parsed.
    pub plugstack_path: String,
    pub plugstack: Result<Vec<super::slurm::PjwPlugin>, String>,
    /// Where the daemon listens (`PJW_SOCKET`, else the config's `socket`).
    pub daemon_socket: String,
}

#[derive(Clone, Debug, Default)]
pub struct WlmFacts {
    /// Slurm's configuration, where there is one.
    pub slurm: Option<SlurmFacts>,
    /// `qconf -sconf`, where Grid Engine is installed.
    pub sge_conf: Option<Result<String, String>>,
    pub hooks_dir: String,
}

#[derive(Clone, Debug)]
pub struct Facts {
    pub config_origin: String,
    pub config_error: Option<String>,
    pub config_file: Option<Meta>,
    pub config_has_secret: bool,
    pub config_cpus: Option<CpuSet>,
    pub cgroup: CgroupFacts,
    pub psi_memory: Option<String>,
    pub swaps: Option<String>,
    pub swap_accounting: Option<bool>,
    pub proc_connector: Result<(), String>,
    pub socket_dir: PathFacts,
    pub state_dir: PathFacts,
    pub topology: Result<TopoSummary, String>,
    /// The CPUs jobs may get here: the process's affinity within the parent's cpuset.
    pub allowed_cpus: CpuSet,
    pub nproc: usize,
    pub wlm: WlmFacts,
    pub slice_allowed_cpus: Option<CpuSet>,
}

fn meta(p: &Path) -> Option<Meta> {
    std::fs::metadata(p).ok().map(|m| Meta {
        uid: m.uid(),
        mode: m.mode() & 0o7777,
        is_dir: m.is_dir(),
    })
}

fn words(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The parent pjw-scope wrote for the service (`PJW_CGROUP_PARENT=...`).
pub fn parse_env_file(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("PJW_CGROUP_PARENT="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// Read everything `pjw check` looks at.
pub fn gather(roots: &Roots, req: &Request) -> Facts {
    let config = load_config(roots, req);
    let cfg = &config.cfg;
    let proc_root = cfg.proc_root.clone();
    let (cgroup, parent_cpus, memory_dirs) = daemon_cgroup_facts(roots, cfg);
    let topology = topology_summary(&cfg.sys_root, &proc_root);
    let affinity = topology.as_ref().map(|t| t.allowed).unwrap_or_default();
    let allowed_cpus = match parent_cpus {
        Some(p) => affinity.intersection(&p),
        None => affinity,
    };
    let systemd = roots.commands && roots.run.join("systemd/system").is_dir();
    Facts {
        config_origin: config
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in defaults".into()),
        config_error: config.error.clone(),
        config_file: config.path.as_deref().and_then(meta),
        config_has_secret: cfg
            .central
            .as_ref()
            .is_some_and(|c| pjw_daemon::config::url_password(&c.url).is_some()),
        config_cpus: cfg.cpus,
        psi_memory: std::fs::read_to_string(proc_root.join("pressure/memory")).ok(),
        swaps: std::fs::read_to_string(proc_root.join("swaps")).ok(),
        swap_accounting: swap_accounting_of(&proc_root, &cgroup, &memory_dirs),
        proc_connector: if roots.commands {
            open_proc_connector()
        } else {
            Ok(())
        },
        socket_dir: path_facts(cfg.socket.parent().unwrap_or(Path::new("/"))),
        state_dir: path_facts(&cfg.state_dir),
        nproc: affinity.len(),
        topology,
        allowed_cpus,
        wlm: WlmFacts {
            slurm: slurm_facts(roots, req.socket.as_deref().unwrap_or(&cfg.socket)),
            sge_conf: if roots.commands { sge_conf() } else { None },
            hooks_dir: roots.hooks_dir.clone(),
        },
        slice_allowed_cpus: if systemd { slice_allowed_cpus() } else { None },
        cgroup,
    }
}

/// The configuration `pjw check` judges, where it came from, and why it did not load.
struct LoadedConfig {
    cfg: pjw_daemon::Config,
    /// The file read (`--config`, else `<etc>/pjw/pjw.toml` when it exists).
    path: Option<PathBuf>,
    /// Why the file did not load; `cfg` then holds the defaults (with the parent asked for).
    error: Option<String>,
}

/// The configuration as the daemon would load it, with the parent pjw-scope wrote for the
/// service; on an error the defaults, so the other checks still run.
fn load_config(roots: &Roots, req: &Request) -> LoadedConfig {
    let path = req.config.clone().or_else(|| {
        let p = roots.etc.join("pjw/pjw.toml");
        p.exists().then_some(p)
    });
    let parent = req.cgroup_parent.clone().or_else(|| {
        std::fs::read_to_string(roots.run.join("pjw/cgroup-parent.env"))
            .ok()
            .and_then(|t| parse_env_file(&t))
    });
    let ov = pjw_daemon::Overrides {
        cgroup_parent: parent,
        ..Default::default()
    };
    match pjw_daemon::Config::load(path.as_deref(), &ov) {
        Ok(cfg) => LoadedConfig {
            cfg,
            path,
            error: None,
        },
        Err(e) => {
            // Go on with the defaults (and the parent asked for) so the other checks still run.
            let fallback = pjw_daemon::Config::load(
                Some(Path::new("/dev/null")),
                &pjw_daemon::Overrides {
                    cgroup_parent: ov
                        .cgroup_parent
                        .clone()
                        .filter(|p| pjw_cgroup::ParentSpec::parse(p).is_ok()),
                    ..Default::default()
                },
            )
            .expect("the built-in defaults are valid");
            LoadedConfig {
                cfg: fallback,
                path,
                error: Some(e.to_string()),
            }
        }
    }
}

/// The machine's CPUs and NUMA nodes, and the CPUs this process may use.
fn topology_summary(sys_root: &Path, proc_root: &Path) -> Result<TopoSummary, String> {
    pjw_topology::discover(sys_root, proc_root)
        .map(|t| TopoSummary {
            online: t.online(),
            allowed: t.allowed,
            numa_nodes: t.numa_nodes.len(),
        })
        .map_err(|e| e.to_string())
}

/// A directory and its owner and mode.
fn path_facts(dir: &Path) -> PathFacts {
    PathFacts {
        meta: meta(dir),
        path: dir.to_path_buf(),
    }
}

/// slurm.conf (`roots.slurm_conf`, else below `etc`) and its plugin stack.
fn slurm_facts(roots: &Roots, daemon_socket: &Path) -> Option<SlurmFacts> {
    let path = roots.slurm_conf.clone().or_else(|| {
        ["slurm/slurm.conf", "slurm-llnl/slurm.conf"]
            .iter()
            .map(|rel| roots.etc.join(rel))
            .find(|p| p.exists())
    })?;
    let conf = std::fs::read_to_string(&path).ok()?;
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let plugstack_path = super::slurm::conf_value(&conf, "PlugStackConfig")
        .map(|p| dir.join(p))
        .unwrap_or_else(|| dir.join("plugstack.conf"));
    let plugin_dir = super::slurm::conf_value(&conf, "PluginDir")
        .and_then(|d| d.split(':').next().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"));
    let mut plugins = Vec::new();
    let plugstack = read_plugstack(&plugstack_path, &plugin_dir, 0, &mut plugins).map(|()| plugins);
    Some(SlurmFacts {
        conf_path: path.display().to_string(),
        conf,
        plugstack_path: plugstack_path.display().to_string(),
        plugstack,
        daemon_socket: daemon_socket.display().to_string(),
    })
}

/// pjw's plugin entries of plugstack file `path` and the files it includes (at most 4 deep),
/// into `out`. A missing top file is an empty stack (Slurm's view too).
fn read_plugstack(
    path: &Path,
    plugin_dir: &Path,
    depth: usize,
    out: &mut Vec<super::slurm::PjwPlugin>,
) -> Result<(), String> {
    use super::slurm::{parse_plugstack, PjwPlugin, PlugLine, PLUGIN};
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth == 0 => return Ok(()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    for entry in parse_plugstack(&text).map_err(|e| format!("{}: {e}", path.display()))? {
        match entry {
            PlugLine::Plugin {
                required,
                path: so,
                args,
            } => {
                if Path::new(&so).file_name().and_then(|n| n.to_str()) != Some(PLUGIN) {
                    continue;
                }
                let full = if so.starts_with('/') {
                    PathBuf::from(&so)
                } else {
                    plugin_dir.join(&so)
                };
                out.push(PjwPlugin {
                    source: path.display().to_string(),
                    required,
                    exists: full.is_file(),
                    path: so,
                    args,
                });
            }
            PlugLine::Include(glob) if depth < 4 => {
                for f in expand_glob(&dir.join(glob)) {
                    read_plugstack(&f, plugin_dir, depth + 1, out)?;
                }
            }
            PlugLine::Include(_) => {
                return Err(format!("{}: includes nest too deep", path.display()))
            }
        }
    }
    Ok(())
}

/// The files a plugstack `include` names: a path whose last part may hold `*` (any run of
/// characters), sorted, as Slurm's glob(3) returns them.
fn expand_glob(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (
        pattern.parent(),
        pattern.file_name().and_then(|n| n.to_str()),
    ) else {
        return Vec::new();
    };
    if !name.contains('*') {
        return vec![pattern.to_path_buf()]
            .into_iter()
            .filter(|p| p.is_file())
            .collect();
    }
    let parts: Vec<&str> = name.split('*').collect();
    let matches = |n: &str| {
        let (first, last) = (parts[0], parts[parts.len() - 1]);
        if !n.starts_with(first) || !n.ends_with(last) || n.len() < first.len() + last.len() {
            return false;
        }
        let mut rest = &n[first.len()..n.len() - last.len()];
        for mid in &parts[1..parts.len() - 1] {
            match rest.find(mid) {
                Some(i) => rest = &rest[i + mid.len()..],
                None => return false,
            }
        }
        true
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| !n.starts_with('.') && matches(n))
                })
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Open and bind a netlink socket to the proc connector's multicast group, as the daemon does.
fn open_proc_connector() -> Result<(), String> {
    const NETLINK_CONNECTOR: i32 = 11;
    const CN_IDX_PROC: u32 = 1;
    // SAFETY: socket(2) with constant arguments; the descriptor is checked and closed below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_CONNECTOR,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot open a netlink connector socket: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value before the fields are set.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_pid = 0;
    addr.nl_groups = CN_IDX_PROC;
    // SAFETY: `addr` is a valid sockaddr_nl of the size passed, `fd` is our open socket.
    let rc = unsafe {
        libc::bind(
            fd,
            &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("cannot bind to the proc connector: {err}"));
    }
    Ok(())
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

fn sge_conf() -> Option<Result<String, String>> {
    if !on_path("qconf") {
        return None;
    }
    let out = Command::new("timeout")
        .args(["5", "qconf", "-sconf"])
        .output();
    Some(match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().replace('\n', " ")),
        Err(e) => Err(e.to_string()),
    })
}

fn slice_allowed_cpus() -> Option<CpuSet> {
    let out = Command::new("systemctl")
        .args(["show", "-p", "AllowedCPUs", "--value", "pjw.slice"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text.is_empty() {
        return None;
    }
    CpuSet::parse_list(&text).ok()
}
