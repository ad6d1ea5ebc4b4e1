//! Fake machines for tests: a temp directory holding `proc/self/mountinfo`,
//! `proc/self/cgroup` and one directory per cgroup mount, laid out like a real machine in
//! [`Mode::Unified`], [`Mode::Hybrid`] or [`Mode::Legacy`].
//!
//! Drive it with [`crate::Driver::detect_with`] and [`crate::Backend::FakeTree`]: `mkdir` then
//! creates the interface files the kernel would, and writes to `cgroup.procs`, `cgroup.kill`,
//! `cgroup.freeze` and `cgroup.subtree_control` take effect on the fake files (no process is
//! ever moved or signalled). Pids written to a fake tree are just numbers.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::fs::{fake, DirKind};
use crate::Mode;

/// What fake machine to build. Hierarchies are named by key: the v1 mount's controllers
/// (`cpuset`, `cpu,cpuacct`, `name=systemd`) or `unified` for cgroup2.
#[derive(Clone, Debug)]
pub struct FakeSpec {
    pub mode: Mode,
    /// v1 mounts by controllers (ignored in Unified mode). Default: like a systemd hybrid
    /// machine with cpu and cpuacct mounted separately.
    pub v1_mounts: Vec<String>,
    /// The cgroup2 root's `cgroup.controllers` (ignored in Legacy mode).
    pub v2_controllers: String,
    /// The process's own cgroup per hierarchy key (default `/`).
    pub own_cgroups: Vec<(String, String)>,
    /// Mount root (mountinfo field 4) per hierarchy key (default `/`).
    pub mount_roots: Vec<(String, String)>,
    /// A pid put in the process's own cgroup in every hierarchy (the "process itself").
    pub own_pid: Option<u32>,
    /// The root cpuset.
    pub cpus: String,
    pub mems: String,
}

impl FakeSpec {
    /// Defaults for `mode`: hybrid and legacy get v1 cpu, cpuacct, cpuset, memory, devices,
    /// freezer, blkio, pids and name=systemd mounts; unified and hybrid a cgroup2 mount
    /// (with `cpuset cpu io memory pids` in unified mode, no controllers in hybrid mode).
    pub fn new(mode: Mode) -> FakeSpec {
        let v1 = [
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "devices",
            "freezer",
            "blkio",
            "pids",
            "name=systemd",
        ];
        FakeSpec {
            mode,
            v1_mounts: if mode == Mode::Unified {
                Vec::new()
            } else {
                v1.iter().map(|s| s.to_string()).collect()
            },
            v2_controllers: if mode == Mode::Unified {
                "cpuset cpu io memory pids".into()
            } else {
                String::new()
            },
            own_cgroups: Vec::new(),
            mount_roots: Vec::new(),
            own_pid: Some(1),
            cpus: "0-3".into(),
            mems: "0".into(),
        }
    }

    /// Set the process's own cgroup in hierarchy `key`.
    pub fn own(mut self, key: &str, path: &str) -> FakeSpec {
        self.own_cgroups.push((key.into(), path.into()));
        self
    }

    /// Set the mount root (mountinfo field 4) of hierarchy `key`.
    pub fn mount_root(mut self, key: &str, root: &str) -> FakeSpec {
        self.mount_roots.push((key.into(), root.into()));
        self
    }

    /// Build the machine below `dir` (created if needed).
    pub fn build(&self, dir: &Path) -> io::Result<FakeMachine> {
        let proc_self = dir.join("proc/self");
        let cg_root = dir.join("cgroup");
        fs::create_dir_all(&proc_self)?;
        fs::create_dir_all(&cg_root)?;
        let lookup = |list: &[(String, String)], key: &str| {
            list.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| "/".into())
        };
        let mut keys: Vec<(String, bool)> = Vec::new();
        if self.mode != Mode::Unified {
            keys.extend(self.v1_mounts.iter().map(|k| (k.clone(), false)));
        }
        if self.mode != Mode::Legacy {
            keys.push(("unified".into(), true));
        }
        let mut mountinfo = format!(
            "22 1 0:21 / {} rw,relatime - proc proc rw\n",
            escape(&dir.join("proc"))
        );
        let mut cgroup_lines = Vec::new();
        let mut mounts = Vec::new();
        for (i, (key, v2)) in keys.iter().enumerate() {
            let id = 40 + i;
            let mp = cg_root.join(key.replace('=', "_"));
            fs::create_dir_all(&mp)?;
            let root = lookup(&self.mount_roots, key);
            let own = lookup(&self.own_cgroups, key);
            if *v2 {
                mountinfo.push_str(&format!(
                    "{id} 31 0:{id} {} {} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n",
                    escape(Path::new(&root)),
                    escape(&mp)
                ));
                cgroup_lines.push(format!("0::{own}"));
                self.populate_v2_root(&mp)?;
            } else {
                mountinfo.push_str(&format!(
                    "{id} 31 0:{id} {} {} rw,nosuid,nodev,noexec,relatime shared:{id} - cgroup cgroup rw,{key}\n",
                    escape(Path::new(&root)),
                    escape(&mp)
                ));
                cgroup_lines.insert(0, format!("{}:{key}:{own}", i + 1));
                self.populate_v1_root(&mp, key)?;
            }
            // The process's own cgroup, created level by level as the kernel would.
            let mut own_dir = mp.clone();
            if let Some(rel) = crate::detect::below_root(&own, &root) {
                let controllers: Vec<String> = key.split(',').map(str::to_string).collect();
                for comp in rel {
                    let next = own_dir.join(comp);
                    if *v2 {
                        // Delegate everything down to the process's cgroup, as systemd does.
                        let avail = fs::read_to_string(own_dir.join("cgroup.controllers"))?;
                        fs::write(own_dir.join("cgroup.subtree_control"), avail)?;
                    }
                    if !next.exists() {
                        fs::create_dir(&next)?;
                        if *v2 {
                            fake::populate(&next, DirKind::V2)?;
                        } else {
                            fake::populate(&next, DirKind::V1(&controllers))?;
                            if controllers.iter().any(|c| c == "cpuset") {
                                fs::write(next.join("cpuset.cpus"), format!("{}\n", self.cpus))?;
                                fs::write(next.join("cpuset.mems"), format!("{}\n", self.mems))?;
                            }
                        }
                    }
                    own_dir = next;
                }
                if let Some(pid) = self.own_pid {
                    fs::write(own_dir.join("cgroup.procs"), format!("{pid}\n"))?;
                    let threads = if *v2 { "cgroup.threads" } else { "tasks" };
                    fs::write(own_dir.join(threads), format!("{pid}\n"))?;
                    if *v2 && own_dir != mp {
                        fs::write(own_dir.join("cgroup.events"), "populated 1\nfrozen 0\n")?;
                    }
                }
            }
            mounts.push((key.clone(), mp));
        }
        fs::write(proc_self.join("mountinfo"), mountinfo)?;
        let mut cg = cgroup_lines.join("\n");
        cg.push('\n');
        fs::write(proc_self.join("cgroup"), cg)?;
        Ok(FakeMachine {
            proc_root: dir.join("proc"),
            cgroup_root: cg_root,
            mounts,
        })
    }

    fn populate_v1_root(&self, mp: &Path, key: &str) -> io::Result<()> {
        let controllers: Vec<String> = key.split(',').map(str::to_string).collect();
        fake::populate(mp, DirKind::V1(&controllers))?;
        if controllers.iter().any(|c| c == "cpuset") {
            fs::write(mp.join("cpuset.cpus"), format!("{}\n", self.cpus))?;
            fs::write(mp.join("cpuset.mems"), format!("{}\n", self.mems))?;
        }
        Ok(())
    }

    fn populate_v2_root(&self, mp: &Path) -> io::Result<()> {
        fs::write(
            mp.join("cgroup.controllers"),
            format!("{}\n", self.v2_controllers),
        )?;
        fs::write(mp.join("cgroup.subtree_control"), "\n")?;
        fs::write(mp.join("cgroup.procs"), "")?;
        fs::write(mp.join("cgroup.threads"), "")?;
        if self
            .v2_controllers
            .split_whitespace()
            .any(|c| c == "cpuset")
        {
            fs::write(mp.join("cpuset.cpus.effective"), format!("{}\n", self.cpus))?;
            fs::write(mp.join("cpuset.mems.effective"), format!("{}\n", self.mems))?;
        }
        Ok(())
    }
}

/// A built fake machine.
#[derive(Clone, Debug)]
pub struct FakeMachine {
    /// Pass this as `proc_root` to [`crate::Driver::detect_with`].
    pub proc_root: PathBuf,
    /// The directory holding every fake mount.
    pub cgroup_root: PathBuf,
    mounts: Vec<(String, PathBuf)>,
}

impl FakeMachine {
    /// The mount point of hierarchy `key` (`cpuset`, `unified`, …).
    pub fn mount_point(&self, key: &str) -> Option<&Path> {
        self.mounts
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, p)| p.as_path())
    }
}

fn escape(p: &Path) -> String {
    p.display()
        .to_string()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012")
}
