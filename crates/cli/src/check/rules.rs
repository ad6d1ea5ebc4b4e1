//! The verdicts of `pjw check`: pure functions from [`Facts`] (what was read) to [`Line`]s.
//! No I/O here, so every rule is tested on literal facts.

use pjw_cgroup::Mode;
use pjw_core::CpuSet;
use serde::Serialize;

use super::facts::{CgroupFacts, Facts, PathFacts, WlmFacts};

/// OK, WARN or FAIL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's verdict: `STATUS  name  detail — fix`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    pub status: Status,
    pub name: String,
    pub detail: String,
    /// What to do about it (empty when OK).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

impl Line {
    pub(super) fn new(
        status: Status,
        name: &str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Line {
        Line {
            status,
            name: name.into(),
            detail: detail.into(),
            fix: fix.into(),
        }
    }
    pub(super) fn ok(name: &str, detail: impl Into<String>) -> Line {
        Line::new(Status::Ok, name, detail, "")
    }

    /// The text form, one line.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{:<5} {:<20} {}",
            self.status.as_str(),
            self.name,
            self.detail
        );
        if !self.fix.is_empty() {
            s.push_str(" — ");
            s.push_str(&self.fix);
        }
        s
    }
}

/// Controllers pjw needs for every job; `io` is used where it exists (cgroup v2).
pub const NEEDED: [&str; 4] = ["cpuset", "cpu", "memory", "pids"];

/// Every check, in the order they print.
pub fn evaluate(f: &Facts) -> Vec<Line> {
    let mut out = Vec::new();
    out.push(config(f));
    out.extend(cgroups(&f.cgroup));
    out.push(psi(f));
    out.extend(swap(f));
    out.push(proc_connector(f));
    out.push(directory(
        "socket-dir",
        &f.socket_dir,
        "the daemon creates it at start (RuntimeDirectory=pjw under systemd)",
    ));
    out.push(directory(
        "state-dir",
        &f.state_dir,
        "the daemon creates it at start (StateDirectory=pjw under systemd)",
    ));
    out.push(topology(f));
    out.extend(wlm(&f.wlm));
    out.push(systemd_slice(f));
    out
}

fn config(f: &Facts) -> Line {
    let name = "config";
    if let Some(e) = &f.config_error {
        return Line::new(
            Status::Fail,
            name,
            e.clone(),
            "fix the file; `pjw daemon --check-config` says the same",
        );
    }
    if let Some(m) = &f.config_file {
        if m.uid != 0 {
            return Line::new(
                Status::Fail,
                name,
                format!("{} is owned by uid {}, not root", f.config_origin, m.uid),
                format!("chown root:root {}", f.config_origin),
            );
        }
        if m.mode & 0o022 != 0 {
            return Line::new(
                Status::Fail,
                name,
                format!("{} is writable by group or others (mode {:04o}): they could reconfigure a root daemon", f.config_origin, m.mode),
                format!("chmod 0600 {}", f.config_origin),
            );
        }
        if f.config_has_secret && m.mode & 0o044 != 0 {
            return Line::new(
                Status::Fail,
                name,
                format!(
                    "{} holds a secret and is readable by group or others (mode {:04o})",
                    f.config_origin, m.mode
                ),
                format!("chmod 0600 {}", f.config_origin),
            );
        }
    }
    Line::ok(name, format!("{}: valid", f.config_origin))
}

fn cgroups(c: &CgroupFacts) -> Vec<Line> {
    let mut out = Vec::new();
    let mode = match &c.mode {
        Ok(m) => *m,
        Err(e) => {
            out.push(Line::new(
                Status::Fail,
                "cgroup-mode",
                e.clone(),
                "mount cgroup2 (pure v2) or the v1 cpuset hierarchy; pjw needs cpuset",
            ));
            return out;
        }
    };
    let name = match mode {
        Mode::Unified => "v2",
        Mode::Hybrid => "hybrid",
        Mode::Legacy => "v1",
    };
    // describe() starts with the driver's own mode name ("unified: …").
    let dirs = c
        .describe
        .split_once(": ")
        .map(|(_, d)| d)
        .unwrap_or(&c.describe);
    out.push(Line::ok(
        "cgroup-mode",
        format!("{name}, parent {} ({dirs})", c.parent),
    ));
    match mode {
        Mode::Unified => {
            // The controllers must reach the parent: available in its cgroup.controllers (the
            // level above enabled them) and, where the parent already exists, enabled in its
            // cgroup.subtree_control so its job cgroups get them.
            for ctl in NEEDED.iter().chain(std::iter::once(&"io")) {
                let optional = *ctl == "io";
                let lname = format!("controller-{ctl}");
                let avail = c.available.iter().any(|x| x == ctl);
                if !avail {
                    let status = if optional { Status::Warn } else { Status::Fail };
                    out.push(Line::new(
                        status,
                        &lname,
                        format!("{ctl} is not delegated to {} (not in its cgroup.controllers){}", c.nearest.display(), if optional { "; jobs get no io statistics" } else { "" }),
                        format!(
                            "echo +{ctl} > {}/cgroup.subtree_control (and in every level above), or Delegate=yes on the unit that holds it",
                            c.nearest.parent().map(|p| p.display().to_string()).unwrap_or_default()
                        ),
                    ));
                    continue;
                }
                match &c.parent_subtree {
                    Some(st) if !st.iter().any(|x| x == ctl) => {
                        let status = if optional { Status::Warn } else { Status::Fail };
                        out.push(Line::new(
                            status,
                            &lname,
                            format!("{ctl} is not enabled in {}/cgroup.subtree_control: job cgroups get no {ctl} controller", c.parent_dir.display()),
                            format!("echo +{ctl} > {}/cgroup.subtree_control (pjw daemon does it at start when the parent has no processes of its own)", c.parent_dir.display()),
                        ));
                    }
                    Some(_) => out.push(Line::ok(&lname, format!("enabled in {}", c.parent_dir.display()))),
                    None => out.push(Line::ok(
                        &lname,
                        format!("available in {} (the parent is made and {ctl} enabled at daemon start)", c.nearest.display()),
                    )),
                }
            }
        }
        Mode::Hybrid | Mode::Legacy => {
            for ctl in NEEDED {
                let lname = format!("controller-{ctl}");
                let mounted = c.v1_mounted.iter().any(|x| x == ctl);
                let enabled = !c.v1_disabled.iter().any(|x| x == ctl);
                if mounted && enabled {
                    out.push(Line::ok(&lname, "v1 hierarchy mounted"));
                } else {
                    let status = if ctl == "cpuset" {
                        Status::Fail
                    } else {
                        Status::Warn
                    };
                    let why = if enabled {
                        "not mounted"
                    } else {
                        "disabled (cgroup_disable= on the kernel command line)"
                    };
                    out.push(Line::new(
                        status,
                        &lname,
                        format!("v1 {ctl} hierarchy {why}{}", if ctl == "cpuset" { "" } else { ": jobs get no such limit" }),
                        format!("mount -t cgroup -o {ctl} cgroup /sys/fs/cgroup/{ctl}, or boot with cgroup v2"),
                    ));
                }
            }
        }
    }
    out
}

fn psi(f: &Facts) -> Line {
    if f.psi_memory.is_some() {
        Line::ok("psi", "memory pressure readable")
    } else {
        Line::new(
            Status::Warn,
            "psi",
            "no /proc/pressure/memory: the memory governor sees pressure only from MemAvailable and swap-in",
            "boot with psi=1 (CONFIG_PSI)",
        )
    }
}

fn swap(f: &Facts) -> Vec<Line> {
    let mut out = Vec::new();
    let swaps = f
        .swaps
        .as_deref()
        .map(|t| t.lines().skip(1).filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0);
    if swaps > 0 {
        out.push(Line::ok("swap", format!("{swaps} swap area(s)")));
    } else {
        out.push(Line::new(
            Status::Warn,
            "swap",
            "no swap: jobs the memory governor freezes keep their memory",
            "add a swap file or partition (swapon)",
        ));
    }
    match f.swap_accounting {
        Some(true) => out.push(Line::ok("swap-accounting", "on")),
        Some(false) => out.push(Line::new(
            Status::Warn,
            "swap-accounting",
            "off: [job] swap_max cannot be applied",
            "boot with swapaccount=1",
        )),
        None => out.push(Line::new(
            Status::Warn,
            "swap-accounting",
            "unknown (no memory cgroup to look at)",
            "",
        )),
    }
    out
}

fn proc_connector(f: &Facts) -> Line {
    match &f.proc_connector {
        Ok(()) => Line::ok("proc-connector", "exec events can be subscribed to"),
        Err(e) => Line::new(
            Status::Warn,
            "proc-connector",
            format!("{e}: adoption falls back to the sweep ([adopt] sweep_interval_ms)"),
            "run as root, with CONFIG_PROC_EVENTS",
        ),
    }
}

fn directory(name: &str, d: &PathFacts, create_note: &str) -> Line {
    let Some(m) = d.meta else {
        return Line::new(
            Status::Warn,
            name,
            format!("{} does not exist yet", d.path.display()),
            create_note.to_string(),
        );
    };
    if !m.is_dir {
        return Line::new(
            Status::Fail,
            name,
            format!("{} is not a directory", d.path.display()),
            "remove it or point the config elsewhere",
        );
    }
    if m.uid != 0 {
        return Line::new(
            Status::Fail,
            name,
            format!("{} is owned by uid {}, not root", d.path.display(), m.uid),
            format!("chown root {}", d.path.display()),
        );
    }
    // Writable by others without the sticky bit: anyone could replace the socket or the store.
    if m.mode & 0o002 != 0 && m.mode & 0o1000 == 0 {
        return Line::new(
            Status::Fail,
            name,
            format!(
                "{} is world-writable (mode {:04o})",
                d.path.display(),
                m.mode
            ),
            format!("chmod 0755 {}", d.path.display()),
        );
    }
    Line::ok(name, format!("{} mode {:04o}", d.path.display(), m.mode))
}

fn topology(f: &Facts) -> Line {
    let name = "topology";
    let t = match &f.topology {
        Ok(t) => t,
        Err(e) => {
            return Line::new(
                Status::Fail,
                name,
                e.clone(),
                "pjw reads /sys/devices/system/cpu; check [paths] sys",
            )
        }
    };
    let allowed = &f.allowed_cpus;
    if let Some(cpus) = &f.config_cpus {
        let bad = cpus.difference(allowed);
        if !bad.is_empty() {
            return Line::new(
                Status::Fail,
                name,
                format!("config cpus {cpus}: {bad} are not cpus the daemon may use (allowed: {allowed})"),
                "make cpus a subset of the allowed CPUs (taskset, AllowedCPUs=, cpuset)",
            );
        }
    }
    if t.allowed != *allowed {
        return Line::new(
            Status::Warn,
            name,
            format!(
                "topology allows {} but this process may use {allowed}",
                t.allowed
            ),
            "",
        );
    }
    Line::ok(
        name,
        format!(
            "{} PUs online ({} allowed: {allowed}), {} NUMA node(s); nproc {}",
            t.online.len(),
            allowed.len(),
            t.numa_nodes,
            f.nproc
        ),
    )
}

/// What the topology check needs of the discovered topology.
#[derive(Clone, Debug)]
pub struct TopoSummary {
    pub online: CpuSet,
    pub allowed: CpuSet,
    pub numa_nodes: usize,
}

fn wlm(w: &WlmFacts) -> Vec<Line> {
    let mut out = Vec::new();
    match &w.slurm {
        None => out.push(Line::ok("wlm-slurm", "no slurm.conf here")),
        Some(slurm) => out.extend(super::slurm::lines(slurm, &w.hooks_dir)),
    }
    match &w.sge_conf {
        None => out.push(Line::ok("wlm-sge", "no Grid Engine here")),
        Some(Err(e)) => out.push(Line::new(
            Status::Warn,
            "wlm-sge",
            format!("Grid Engine is installed but its configuration could not be read: {e}"),
            "start sge_qmaster, or check shepherd_cmd with qconf -sconf",
        )),
        Some(Ok(text)) => {
            let shepherd = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("shepherd_cmd"))
                .map(|v| v.trim().to_string())
                .unwrap_or_default();
            if shepherd.contains("pjw") {
                out.push(Line::ok("wlm-sge", format!("shepherd_cmd {shepherd}")));
            } else {
                out.push(Line::new(
                    Status::Warn,
                    "wlm-sge",
                    format!("shepherd_cmd is {shepherd:?}: Grid Engine jobs are not jailed"),
                    format!(
                        "qconf -mconf: shepherd_cmd {}/sge/pjw-shepherd.sh",
                        w.hooks_dir
                    ),
                ));
            }
        }
    }
    out
}

fn systemd_slice(f: &Facts) -> Line {
    let name = "systemd-slice";
    let Some(allowed) = &f.slice_allowed_cpus else {
        return Line::ok(name, "no systemd, or no AllowedCPUs= on pjw.slice");
    };
    match &f.config_cpus {
        Some(cpus) if !cpus.is_subset(allowed) => Line::new(
            Status::Fail,
            name,
            format!("pjw.slice has AllowedCPUs={allowed} but config cpus = {cpus}: systemd would take {} back", cpus.difference(allowed)),
            "make config cpus a subset of AllowedCPUs, or change the slice (systemctl set-property pjw.slice AllowedCPUs=…)",
        ),
        _ => Line::ok(name, format!("pjw.slice AllowedCPUs={allowed}: pjw's pool follows it")),
    }
}
