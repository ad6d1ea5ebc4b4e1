//! Mode detection and resolution of the parent in every hierarchy.
//!
//! Everything comes from `<proc_root>/self/mountinfo` and `<proc_root>/self/cgroup`; the only
//! filesystem read besides those is the cgroup2 root's `cgroup.controllers`.

use std::path::{Path, PathBuf};

use pjw_kernelfs::mountinfo::{self, CgroupMount, Mount};
use pjw_kernelfs::proc_cgroup::{self, CgroupLine};

use crate::fs::{DirKind, Fs};
use crate::{CgroupError, Mode, ParentSpec};

/// v1 controllers pjw uses in Hybrid mode, in the order it keeps them (cpuset first: it is the
/// tracking hierarchy when there is no cgroup2).
/// blkio carries a job's I/O weight and throttle limits.
pub(crate) const V1_CONTROLLERS: &[&str] = &["cpuset", "memory", "pids", "cpu", "blkio", "cpuacct"];
/// cgroup v2 controllers pjw enables in Unified mode (those the machine has).
pub(crate) const V2_CONTROLLERS: &[&str] = &["cpuset", "memory", "pids", "cpu", "io"];

/// One hierarchy pjw uses, with the parent resolved in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    pub(crate) v2: bool,
    /// v1: the mount's controllers. v2: the controllers pjw uses in it (empty in Hybrid).
    pub(crate) controllers: Vec<String>,
    pub(crate) mount_point: PathBuf,
    /// The directory the parent lives below: the mount point for an absolute parent, the
    /// process's own cgroup for `self`. pjw never creates or removes `base` itself.
    pub(crate) base: PathBuf,
    /// The parent's components below `base`.
    pub(crate) parent_rel: Vec<String>,
}

impl Hierarchy {
    pub(crate) fn key(&self) -> String {
        if self.v2 {
            "unified".to_string()
        } else {
            self.controllers.join(",")
        }
    }
    pub(crate) fn has(&self, c: &str) -> bool {
        self.controllers.iter().any(|x| x == c)
    }
    pub(crate) fn parent(&self) -> PathBuf {
        let mut p = self.base.clone();
        p.extend(&self.parent_rel);
        p
    }
    pub(crate) fn job(&self, name: &str) -> PathBuf {
        self.parent().join(name)
    }
    pub(crate) fn kind(&self) -> DirKind<'_> {
        if self.v2 {
            DirKind::V2
        } else {
            DirKind::V1(&self.controllers)
        }
    }
}

/// What [`detect`] found.
#[derive(Debug)]
pub(crate) struct Detected {
    pub(crate) mode: Mode,
    /// v1 hierarchies in use, one per mount, cpuset first.
    pub(crate) v1: Vec<Hierarchy>,
    pub(crate) v2: Option<Hierarchy>,
    /// The v1 `devices` hierarchy, when mounted (used only once fencing is switched on).
    pub(crate) devices: Option<Hierarchy>,
}

/// Components of cgroup path `path` below mount root `root`, or `None` when the mount does not
/// show `path`.
pub(crate) fn below_root(path: &str, root: &str) -> Option<Vec<String>> {
    let comps = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let p = comps(path);
    let r = comps(root);
    if p.len() < r.len() || p[..r.len()] != r[..] {
        return None;
    }
    Some(p[r.len()..].to_vec())
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

fn resolve(
    mount: &Mount,
    v2: bool,
    controllers: Vec<String>,
    own: Option<&CgroupLine>,
    parent: &ParentSpec,
    cgroup_file: &Path,
) -> Result<Hierarchy, CgroupError> {
    let mount_point = PathBuf::from(&mount.mount_point);
    let outside = |p: &str| CgroupError::OutsideMount {
        cgroup_path: p.to_string(),
        mount_root: mount.root.clone(),
        mount_point: mount_point.clone(),
    };
    let (base, parent_rel) = match parent {
        ParentSpec::Absolute(p) => {
            let rel = below_root(p, &mount.root).ok_or_else(|| outside(p))?;
            (mount_point.clone(), rel)
        }
        ParentSpec::SelfRelative(sub) => {
            let own = own.ok_or_else(|| CgroupError::NoOwnCgroup {
                hierarchy: if v2 {
                    "cgroup2".into()
                } else {
                    controllers.join(",")
                },
                path: cgroup_file.to_path_buf(),
            })?;
            let own_rel = below_root(&own.path, &mount.root).ok_or_else(|| outside(&own.path))?;
            let mut base = mount_point.clone();
            base.extend(own_rel);
            let rel = sub
                .as_deref()
                .map(|s| s.split('/').map(str::to_string).collect())
                .unwrap_or_default();
            (base, rel)
        }
    };
    Ok(Hierarchy {
        v2,
        controllers,
        mount_point,
        base,
        parent_rel,
    })
}

/// The cgroup mounts that matter: the first mount of each v1 hierarchy (bind mounts repeat
/// them) with its controllers, and the first cgroup2 mount.
struct CgroupMounts<'m> {
    v1: Vec<(Vec<String>, &'m Mount)>,
    v2: Option<&'m Mount>,
}

impl<'m> CgroupMounts<'m> {
    fn first_of_each(mounts: &'m [Mount]) -> Self {
        let mut v1: Vec<(Vec<String>, &Mount)> = Vec::new();
        let mut v2: Option<&Mount> = None;
        for m in mounts {
            match m.cgroup() {
                Some(CgroupMount::V1 { controllers })
                    if !v1.iter().any(|(c, _)| same_set(c, &controllers)) =>
                {
                    v1.push((controllers, m));
                }
                Some(CgroupMount::V2) if v2.is_none() => v2 = Some(m),
                _ => {}
            }
        }
        CgroupMounts { v1, v2 }
    }

    /// Whether a controller pjw uses (or the freezer) is mounted as v1.
    fn ours_on_v1(&self) -> bool {
        self.v1.iter().any(|(c, _)| {
            c.iter()
                .any(|x| V1_CONTROLLERS.contains(&x.as_str()) || x == "freezer")
        })
    }

    /// The v1 mount that holds controller `c`.
    fn v1_with(&self, c: &str) -> Option<&(Vec<String>, &'m Mount)> {
        self.v1.iter().find(|(cs, _)| cs.iter().any(|x| x == c))
    }
}

/// Where this process sits: its `/proc/self/cgroup` lines (read from `cg_path`) and the parent
/// asked for, to resolve a hierarchy's parent with.
struct Own<'a> {
    lines: &'a [CgroupLine],
    parent: &'a ParentSpec,
    cg_path: &'a Path,
}

impl Own<'_> {
    /// Hierarchy `controllers` of `mount` (v1) with the parent resolved; `c` picks this
    /// process's line when no line has exactly the mount's controllers.
    fn resolve_v1(
        &self,
        mount: &Mount,
        controllers: &[String],
        c: &str,
    ) -> Result<Hierarchy, CgroupError> {
        let own = self
            .lines
            .iter()
            .find(|l| same_set(&l.controllers, controllers))
            .or_else(|| {
                self.lines
                    .iter()
                    .find(|l| l.controllers.iter().any(|x| x == c))
            });
        resolve(
            mount,
            false,
            controllers.to_vec(),
            own,
            self.parent,
            self.cg_path,
        )
    }
}

pub(crate) fn detect(
    proc_root: &Path,
    parent: &ParentSpec,
    fs: &Fs,
) -> Result<Detected, CgroupError> {
    let mi_path = proc_root.join("self/mountinfo");
    let mounts = mountinfo::parse(&fs.read(&mi_path)?).map_err(|source| CgroupError::Parse {
        path: mi_path.clone(),
        source,
    })?;
    let cg_path = proc_root.join("self/cgroup");
    let lines = proc_cgroup::parse(&fs.read(&cg_path)?).map_err(|source| CgroupError::Parse {
        path: cg_path.clone(),
        source,
    })?;
    let found = CgroupMounts::first_of_each(&mounts);
    let root_v2_controllers = match found.v2 {
        Some(m) => {
            crate::unified::read_list(fs, &Path::new(&m.mount_point).join("cgroup.controllers"))?
        }
        None => Vec::new(),
    };
    let mode = mode_of(&found, &root_v2_controllers, &mi_path)?;
    let own = Own {
        lines: &lines,
        parent,
        cg_path: &cg_path,
    };
    let (v1, devices) = if mode == Mode::Unified {
        (Vec::new(), None)
    } else {
        let v1 = v1_hierarchies(mode, &found, &own)?;
        let devices = devices_hierarchy(&found, &v1, &own)?;
        (v1, devices)
    };
    let v2 = match found.v2 {
        Some(m) => Some(v2_hierarchy(m, mode, &root_v2_controllers, &own, fs)?),
        None => None,
    };
    Ok(Detected {
        mode,
        v1,
        v2,
        devices,
    })
}

/// The mode from what is mounted: a controller pjw uses on v1 makes it Hybrid (with cgroup2) or
/// Legacy; else a cgroup2 root with controllers is Unified.
fn mode_of(
    found: &CgroupMounts<'_>,
    root_v2_controllers: &[String],
    mi_path: &Path,
) -> Result<Mode, CgroupError> {
    match (found.ours_on_v1(), found.v2) {
        (true, Some(_)) => Ok(Mode::Hybrid),
        (true, None) => Ok(Mode::Legacy),
        (false, Some(_)) if !root_v2_controllers.is_empty() => Ok(Mode::Unified),
        (false, Some(m)) => Err(CgroupError::NoCgroupFs {
            path: mi_path.to_path_buf(),
            reason: format!(
                "the cgroup2 mount at {} has no controllers and no v1 controller is mounted",
                m.mount_point
            ),
        }),
        (false, None) => Err(CgroupError::NoCgroupFs {
            path: mi_path.to_path_buf(),
            reason: "no cgroup or cgroup2 mount".into(),
        }),
    }
}

/// The v1 hierarchies pjw uses in Hybrid or Legacy mode, one per mount, cpuset first (a
/// missing cpuset is an error, another missing controller a warning).
fn v1_hierarchies(
    mode: Mode,
    found: &CgroupMounts<'_>,
    own: &Own<'_>,
) -> Result<Vec<Hierarchy>, CgroupError> {
    let mut wanted: Vec<&str> = V1_CONTROLLERS.to_vec();
    match mode {
        Mode::Legacy => wanted.push("freezer"),
        // The cgroup2 tree's cpu.stat counts CPU time in every cgroup, controller or not: a
        // cpuacct hierarchy of its own would be one more mkdir, move and rmdir per job for
        // nothing (co-mounted as cpu,cpuacct it comes with cpu anyway).
        _ => wanted.retain(|c| *c != "cpuacct"),
    }
    let mut v1: Vec<Hierarchy> = Vec::new();
    for c in wanted {
        let Some((controllers, m)) = found.v1_with(c) else {
            if c == "cpuset" {
                return Err(CgroupError::MissingController {
                    controller: c.into(),
                    where_: None,
                });
            }
            tracing::warn!(controller = c, "cgroup v1 controller not mounted, skipped");
            continue;
        };
        if v1
            .iter()
            .any(|h| h.mount_point == Path::new(&m.mount_point))
        {
            continue; // co-mounted with one already in use (cpu,cpuacct)
        }
        v1.push(own.resolve_v1(m, controllers, c)?);
    }
    Ok(v1)
}

/// The v1 `devices` hierarchy, when mounted apart from those in use.
fn devices_hierarchy(
    found: &CgroupMounts<'_>,
    v1: &[Hierarchy],
    own: &Own<'_>,
) -> Result<Option<Hierarchy>, CgroupError> {
    let Some((controllers, m)) = found.v1_with("devices") else {
        return Ok(None);
    };
    if v1
        .iter()
        .any(|h| h.mount_point == Path::new(&m.mount_point))
    {
        return Ok(None);
    }
    Ok(Some(own.resolve_v1(m, controllers, "devices")?))
}

/// The cgroup2 hierarchy: in Unified mode with the controllers pjw uses that the root has (and
/// that our own cgroup has, below it; cpuset required), else with none (Hybrid's tracking and
/// freezing tree).
fn v2_hierarchy(
    m: &Mount,
    mode: Mode,
    root_v2_controllers: &[String],
    own: &Own<'_>,
    fs: &Fs,
) -> Result<Hierarchy, CgroupError> {
    let controllers: Vec<String> = if mode == Mode::Unified {
        if !root_v2_controllers.iter().any(|c| c == "cpuset") {
            return Err(CgroupError::MissingController {
                controller: "cpuset".into(),
                where_: Some(PathBuf::from(&m.mount_point)),
            });
        }
        V2_CONTROLLERS
            .iter()
            .filter(|c| root_v2_controllers.iter().any(|r| r == *c))
            .map(|c| c.to_string())
            .collect()
    } else {
        Vec::new()
    };
    let own_line = own.lines.iter().find(|l| l.is_v2());
    let mut h = resolve(m, true, controllers, own_line, own.parent, own.cg_path)?;
    if mode == Mode::Unified && h.base != h.mount_point {
        // Below our own cgroup only what it has can be enabled.
        let here = crate::unified::read_list(fs, &h.base.join("cgroup.controllers"))?;
        if !here.iter().any(|c| c == "cpuset") {
            return Err(CgroupError::NotDelegated {
                controller: "cpuset".into(),
                cgroup: h.base.clone(),
            });
        }
        h.controllers.retain(|c| here.contains(c));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_root_strips_the_mount_root() {
        assert_eq!(below_root("/", "/"), Some(vec![]));
        assert_eq!(below_root("/a/b", "/"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            below_root("/docker/x/y", "/docker/x"),
            Some(vec!["y".into()])
        );
        assert_eq!(below_root("/docker/x", "/docker/x"), Some(vec![]));
        assert_eq!(below_root("/other", "/docker/x"), None);
        assert_eq!(below_root("/dock", "/docker"), None);
    }
}
