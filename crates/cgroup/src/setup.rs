//! The parent: prepared in every hierarchy (leaving the daemon's own cgroup where pure v2
//! needs it), its CPUs, limits and weight, and its removal when no job is left.

use std::io;
use std::path::PathBuf;

use crate::fs::is_busy;
use crate::{
    cpu, cpuset, memory, parent, unified, CgroupError, CpuSet, Driver, Layout, Partition,
    DAEMON_LEAF,
};

impl Driver {
    /// Create the parent in every hierarchy (idempotent). v1 cpuset: copy cpus/mems from the
    /// level above. v2: enable the controllers pjw needs in subtree_control down to the parent.
    ///
    /// With `self`, v2 controllers are enabled from the process's own cgroup down; a cgroup that
    /// has processes of its own cannot do that ([`CgroupError::SubtreeBusy`]).
    pub fn prepare_parent(&self) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            if !self.fs.exists(&h.base) {
                return Err(CgroupError::ParentMissing {
                    path: h.base.clone(),
                });
            }
            let enable = h.v2 && !h.controllers.is_empty();
            if enable {
                unified::enable_controllers(&self.fs, &h.base, &h.controllers)?;
            }
            let mut cur = h.base.clone();
            for comp in &h.parent_rel {
                let next = cur.join(comp);
                self.fs.mkdir(&next, h.kind())?;
                if !h.v2 && h.has("cpuset") {
                    cpuset::inherit_v1(&self.fs, &cur, &next)?;
                }
                if !h.v2 && h.has("memory") {
                    memory::use_hierarchy_v1(&self.fs, &next);
                }
                if enable {
                    unified::enable_controllers(&self.fs, &next, &h.controllers)?;
                }
                cur = next;
            }
        }
        Ok(())
    }

    /// [`Driver::prepare_parent`] for a daemon that may have to leave its own cgroup first.
    ///
    /// With a `self` parent in pure cgroup v2 the daemon's own cgroup must enable controllers for
    /// its children, which the kernel refuses while the cgroup holds processes (the
    /// no-internal-process rule). Then the daemon (`pid`, every thread of it) moves into a leaf
    /// [`DAEMON_LEAF`] below its cgroup, and the parent is prepared again. That works when the
    /// daemon was alone in its cgroup, as under systemd with `Delegate=yes`; when other processes
    /// share it the error says so. Returns the leaf the daemon moved into, if it moved.
    pub fn prepare_parent_for_daemon(&self, pid: u32) -> Result<Option<PathBuf>, CgroupError> {
        match self.prepare_parent() {
            Err(CgroupError::SubtreeBusy { path, value }) => {
                let Some(v2) = self.v2().filter(|h| h.v2 && path == h.base) else {
                    return Err(CgroupError::SubtreeBusy { path, value });
                };
                let leaf = v2.base.join(DAEMON_LEAF);
                self.fs.mkdir(&leaf, v2.kind())?;
                self.fs
                    .write(&leaf.join("cgroup.procs"), &pid.to_string())?;
                tracing::info!(cgroup = %leaf.display(), pid, "daemon moved into a leaf of its own cgroup (no-internal-process rule)");
                match self.prepare_parent() {
                    Ok(()) => Ok(Some(leaf)),
                    Err(CgroupError::SubtreeBusy { path, value }) => {
                        Err(CgroupError::SharedSelfCgroup { path, value })
                    }
                    Err(e) => Err(e),
                }
            }
            other => other.map(|_| None),
        }
    }

    /// The CPUs the parent may give its children: `cpuset.cpus.effective` (v2) or
    /// `cpuset.effective_cpus` (v1, else `cpuset.cpus`) of the prepared parent. A slice a site
    /// restricts with systemd's `AllowedCPUs=` shows here, not in the daemon's own affinity.
    /// `None` when the parent has no such file (no cpuset there); a read error is an error.
    pub fn parent_cpus(&self) -> Result<Option<CpuSet>, CgroupError> {
        let h = self.cpuset_hierarchy();
        let dir = h.parent();
        let names: &[&str] = if h.v2 {
            &["cpuset.cpus.effective"]
        } else {
            &["cpuset.effective_cpus", "cpuset.cpus"]
        };
        for name in names {
            if self.fs.exists(&dir.join(name)) {
                return cpuset::read(&self.fs, &dir, name).map(Some);
            }
        }
        Ok(None)
    }

    /// Cap the memory of all jobs together: the limit of the parent (the node's job partition).
    pub fn set_partition_limit(&self, bytes: u64) -> Result<(), CgroupError> {
        let h = self.memory_hierarchy()?;
        memory::apply(&self.fs, &h.parent(), h.v2, Some(bytes))
    }

    /// Give the parent the CPU weight of `ncpus` busy processes, so that against work outside
    /// pjw the jobs together count as the CPUs they hold, not as one process (the default
    /// weight). Without a cpu controller there is nothing to do.
    pub fn set_parent_cpu_weight(&self, ncpus: usize) -> Result<(), CgroupError> {
        for h in self.hierarchies().filter(|h| h.has("cpu")) {
            cpu::set_weight_for_cpus(&self.fs, &h.parent(), h.v2, ncpus)?;
        }
        Ok(())
    }

    /// Make job `name` (or, with `None`, the parent) a cpuset partition of type `kind`, cgroup v2
    /// only. The kernel decides whether it is valid (a partition's parent must be a partition
    /// root, its CPUs exclusive among its siblings, and a parent with processes must keep a CPU);
    /// when it is not, the cgroup is set back to `member` and the kernel's reason is returned in
    /// [`CgroupError::PartitionInvalid`]. For the parent, its `cpuset.cpus` is first set to
    /// `cpus` (a partition root cannot simply inherit every CPU of the machine).
    pub fn set_partition(
        &self,
        name: Option<&str>,
        kind: Partition,
        cpus: Option<&CpuSet>,
    ) -> Result<(), CgroupError> {
        let h = match &self.layout {
            Layout::Unified { v2 } if v2.has("cpuset") => v2,
            _ => {
                return Err(CgroupError::MissingController {
                    controller: "cpuset (cgroup v2 partitions)".into(),
                    where_: None,
                })
            }
        };
        let dir = match name {
            Some(n) => {
                parent::validate_job_name(n)?;
                h.job(n)
            }
            None => h.parent(),
        };
        if let Some(c) = cpus {
            self.fs.write(&dir.join("cpuset.cpus"), &c.to_string())?;
        }
        cpuset::set_partition(&self.fs, &dir, kind.as_str())
    }

    /// Remove the parent in every hierarchy if it holds no job (used by tests and the demo).
    ///
    /// Removes the parent's components deepest first and stops at the first one that is not
    /// empty (that is not an error). The base is never removed: the mount point for an
    /// absolute parent, the process's own cgroup for `self/SUB`.
    pub fn remove_parent_if_empty(&self) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            for depth in (1..=h.parent_rel.len()).rev() {
                let mut dir = h.base.clone();
                dir.extend(&h.parent_rel[..depth]);
                match self.fs.rmdir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if is_busy(&e) => break,
                    Err(e) => {
                        return Err(CgroupError::RemoveDir {
                            path: dir,
                            source: e,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}
