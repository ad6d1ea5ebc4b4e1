//! A job's cgroups from creation to removal: made in every hierarchy with their limits,
//! given CPUs, memory throttles and the idle class, filled with processes, removed.

use std::io;
use std::path::PathBuf;

use crate::detect::Hierarchy;
use crate::fs::is_busy;
use crate::{blkio, cpu, cpuset, memory, parent, pids, CgroupError, CpuSet, Driver, JobLimits};

impl Driver {
    /// Create job cgroup `name` below the parent in every hierarchy and apply `limits`.
    /// Idempotent on an existing job cgroup (re-applies limits).
    ///
    /// On failure the directories this call created are removed again.
    pub fn create_job(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut created = Vec::new();
        let res = self.create_job_inner(name, limits, &mut created);
        if res.is_err() {
            for dir in created.iter().rev() {
                if let Err(e) = self.fs.rmdir(dir) {
                    tracing::warn!(path = %dir.display(), error = %e, "rollback: cannot remove job cgroup");
                }
            }
        }
        res
    }

    fn create_job_inner(
        &self,
        name: &str,
        limits: &JobLimits,
        created: &mut Vec<PathBuf>,
    ) -> Result<(), CgroupError> {
        for h in self.hierarchies() {
            let dir = h.job(name);
            // A missing parent is mkdir's ENOENT: no separate look first (this is the launch
            // path, six hierarchies on a hybrid node).
            let made = match self.fs.mkdir(&dir, h.kind()) {
                Err(CgroupError::CreateDir { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    return Err(CgroupError::ParentMissing { path: h.parent() });
                }
                r => r?,
            };
            if made {
                created.push(dir.clone());
            }
            if h.has("cpuset") {
                cpuset::apply(&self.fs, &dir, &limits.cpus, &limits.mems)?;
            }
            if h.has("memory") {
                memory::apply(&self.fs, &dir, h.v2, limits.memory_max)?;
                if h.v2 {
                    memory::apply_swap_max(&self.fs, &dir, limits.swap_max)?;
                } else if limits.swap_max.is_some()
                    && !memory::apply_memsw_v1(&self.fs, &dir, limits.memory_max, limits.swap_max)?
                {
                    tracing::debug!(job = name, "cgroup v1: swap not limited (the job has no memory limit, or the kernel does not account swap)");
                }
            }
            if h.has("pids") {
                pids::apply(&self.fs, &dir, limits.pids_max)?;
            }
            if (h.has("io") || h.has("blkio")) && !limits.io.is_empty() {
                let file = blkio::apply(&self.fs, &dir, h.v2, &limits.io)?;
                if limits.io.weight.is_some() && file.is_none() {
                    tracing::warn!(job = name, dir = %dir.display(), "no I/O weight file (no BFQ scheduler module, no io.weight): the job's I/O weight is not applied");
                }
            }
        }
        Ok(())
    }

    /// Move the job to other CPUs and memory nodes (a backfiller promoted, a job resumed).
    pub fn set_cpus(&self, name: &str, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        for h in self.hierarchies().filter(|h| h.has("cpuset")) {
            cpuset::apply(&self.fs, &h.job(name), cpus, mems)?;
        }
        Ok(())
    }

    /// Throttle job `name` at `high` bytes (`memory.high`: the kernel reclaims instead of letting
    /// it grow), or lift the throttle with `None`. cgroup v2 only: v1 has no equivalent that
    /// throttles without risking the OOM killer, so there the governor goes straight to freezing.
    pub fn set_memory_high(&self, name: &str, high: Option<u64>) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let h = self.memory_hierarchy()?;
        if !h.v2 {
            return Err(CgroupError::Unsupported {
                what: "memory.high",
                mode: self.mode().as_str(),
                reason: "cgroup v1 has no memory.high",
            });
        }
        let value = high.map(|b| b.to_string()).unwrap_or_else(|| "max".into());
        self.fs.write(&h.job(name).join("memory.high"), &value)
    }

    /// Put the job in the idle scheduling class (backfill) or take it out (primary). Fails with
    /// [`CgroupError::MissingController`] when no hierarchy has the cpu controller.
    pub fn set_idle(&self, name: &str, idle: bool) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut done = false;
        for h in self.hierarchies().filter(|h| h.has("cpu")) {
            cpu::set_idle(&self.fs, &h.job(name), h.v2, idle)?;
            done = true;
        }
        if done {
            Ok(())
        } else {
            Err(CgroupError::MissingController {
                controller: "cpu".into(),
                where_: None,
            })
        }
    }

    /// Give existing job `name` its `limits` (CPUs, memory nodes, memory, swap, tasks, I/O) in
    /// every hierarchy, from whatever it had: a queued job's cgroups wait under tighter ones
    /// (engine/preplace.rs) and get the job's at its start. A limit `None` is written as the
    /// kernel's "no limit", unlike at creation, where it is left at the kernel's default.
    pub fn set_limits(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        for h in self.hierarchies() {
            let dir = h.job(name);
            if h.has("cpuset") {
                cpuset::apply(&self.fs, &dir, &limits.cpus, &limits.mems)?;
            }
            if h.has("memory") {
                memory::reset(&self.fs, &dir, h.v2, limits.memory_max, limits.swap_max)?;
            }
            if h.has("pids") {
                pids::reset(&self.fs, &dir, limits.pids_max)?;
            }
            if (h.has("io") || h.has("blkio")) && !limits.io.is_empty() {
                blkio::apply(&self.fs, &dir, h.v2, &limits.io)?;
            }
        }
        Ok(())
    }

    /// Move process `pid` (all its threads) into job `name` in every hierarchy.
    ///
    /// Every hierarchy is tried (the v1 cpuset first, then cgroup2, then the other v1
    /// hierarchies); if any fails, the error lists
    /// each failure.
    pub fn add_process(&self, name: &str, pid: u32) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let mut order: Vec<&Hierarchy> = self.hierarchies().collect();
        // Confinement first: a running process (an adopted one) that sees itself in any of its
        // job's cgroups already runs on the job's CPUs. Then cgroup2 (tracking), then the rest.
        order.sort_by_key(|h| (h.v2 || !h.has("cpuset"), !h.v2));
        let failures: Vec<CgroupError> = order
            .into_iter()
            .filter_map(|h| {
                self.fs
                    .write(&h.job(name).join("cgroup.procs"), &pid.to_string())
                    .err()
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CgroupError::AddProcess {
                pid,
                job: name.to_string(),
                failures,
            })
        }
    }

    /// Remove the job's cgroup in every hierarchy; missing ones are fine, populated ones fail.
    ///
    /// Every hierarchy is tried; the first error is returned.
    pub fn remove_job(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        // Close its statistics files first: an open file keeps a removed cgroup's memory.
        self.stat_files.forget_job(name);
        let mut first_err = None;
        for h in self.hierarchies() {
            let dir = h.job(name);
            match self.fs.rmdir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    let err = if is_busy(&e) {
                        CgroupError::Populated { path: dir }
                    } else {
                        CgroupError::RemoveDir {
                            path: dir,
                            source: e,
                        }
                    };
                    first_err.get_or_insert(err);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
