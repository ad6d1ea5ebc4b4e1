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

    // First mount of each v1 hierarchy (bind mounts repeat them) and the first cgroup2 mount.
    let mut v1_mounts: Vec<(Vec<String>, &Mount)> = Vec::new();
    let mut v2_mount: Option<&Mount> = None;
    for m in &mounts {
        match m.cgroup() {
            Some(CgroupMount::V1 { controllers })
                if !v1_mounts.iter().any(|(c, _)| same_set(c, &controllers)) =>
            {
                v1_mounts.push((controllers, m));
            }
            Some(CgroupMount::V2) if v2_mount.is_none() => v2_mount = Some(m),
            _ => {}
        }
    }
    let ours_on_v1 = v1_mounts.iter().any(|(c, _)| {
        c.iter()
            .any(|x| V1_CONTROLLERS.contains(&x.as_str()) || x == "freezer")
    });
    let root_v2_controllers = match v2_mount {
        Some(m) => {
            crate::unified::read_list(fs, &Path::new(&m.mount_point).join("cgroup.controllers"))?
        }
        None => Vec::new(),
    };
    let mode = match (ours_on_v1, v2_mount) {
        (true, Some(_)) => Mode::Hybrid,
        (true, None) => Mode::Legacy,
        (false, Some(_)) if !root_v2_controllers.is_empty() => Mode::Unified,
        (false, Some(m)) => {
            return Err(CgroupError::NoCgroupFs {
                path: mi_path,
                reason: format!(
                    "the cgroup2 mount at {} has no controllers and no v1 controller is mounted",
                    m.mount_point
                ),
            })
        }
        (false, None) => {
            return Err(CgroupError::NoCgroupFs {
                path: mi_path,
                reason: "no cgroup or cgroup2 mount".into(),
            })
        }
    };

    let mut v1 = Vec::new();
    if mode != Mode::Unified {
        let mut wanted: Vec<&str> = V1_CONTROLLERS.to_vec();
        match mode {
            Mode::Legacy => wanted.push("freezer"),
            // The cgroup2 tree's cpu.stat counts CPU time in every cgroup, controller or not: a
            // cpuacct hierarchy of its own would be one more mkdir, move and rmdir per job for
            // nothing (co-mounted as cpu,cpuacct it comes with cpu anyway).
            _ => wanted.retain(|c| *c != "cpuacct"),
        }
        for c in wanted {
            let Some((controllers, m)) = v1_mounts.iter().find(|(cs, _)| cs.iter().any(|x| x == c))
            else {
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
                .any(|h: &Hierarchy| h.mount_point == Path::new(&m.mount_point))
            {
                continue; // co-mounted with one already in use (cpu,cpuacct)
            }
            let own = lines
                .iter()
                .find(|l| same_set(&l.controllers, controllers))
                .or_else(|| lines.iter().find(|l| l.controllers.iter().any(|x| x == c)));
            v1.push(resolve(
                m,
                false,
                controllers.clone(),
                own,
                parent,
                &cg_path,
            )?);
        }
    }

    let mut devices = None;
    if mode != Mode::Unified {
        if let Some((controllers, m)) = v1_mounts
            .iter()
            .find(|(cs, _)| cs.iter().any(|x| x == "devices"))
        {
            let shared = v1
                .iter()
                .any(|h: &Hierarchy| h.mount_point == Path::new(&m.mount_point));
            if !shared {
                let own = lines
                    .iter()
                    .find(|l| same_set(&l.controllers, controllers))
                    .or_else(|| {
                        lines
                            .iter()
                            .find(|l| l.controllers.iter().any(|x| x == "devices"))
                    });
                devices = Some(resolve(
                    m,
                    false,
                    controllers.clone(),
                    own,
                    parent,
                    &cg_path,
                )?);
            }
        }
    }

    let v2 = match v2_mount {
        Some(m) => {
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
            let own = lines.iter().find(|l| l.is_v2());
            let mut h = resolve(m, true, controllers, own, parent, &cg_path)?;
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
            Some(h)
        }
        None => None,
    };
    Ok(Detected {
        mode,
        v1,
        v2,
        devices,
    })
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
