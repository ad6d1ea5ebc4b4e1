//! What the trees say of jobs: their directories, processes, threads, CPUs, memory charged,
//! OOM kills and pressure, whose a process is, which jobs exist.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::detect::Hierarchy;
use crate::{
    cpuset, memory, parent, parse_pids, unified, CgroupError, CpuSet, Driver, DAEMON_LEAF,
};

impl Driver {
    /// The parent directory in every hierarchy used, keyed like [`Driver::describe`]
    /// (`cpuset`, `memory`, `cpu,cpuacct`, `unified`, …).
    pub fn parent_dirs(&self) -> Vec<(String, PathBuf)> {
        self.hierarchies().map(|h| (h.key(), h.parent())).collect()
    }

    /// The job of this driver a process is in, from its `/proc/PID/cgroup` lines: the job's
    /// cgroup name when the process's cgroup in the tracking hierarchy (cgroup2; v1 cpuset in
    /// legacy mode) is a job below the parent or below one, else None. Paths are compared
    /// relative to the hierarchy's mount (the daemon's cgroup namespace is the root one).
    pub fn job_of(&self, lines: &[pjw_kernelfs::proc_cgroup::CgroupLine]) -> Option<String> {
        let (h, line) = match self.v2() {
            Some(h) => (h, lines.iter().find(|l| l.is_v2())?),
            None => {
                let h = self.v1_with("cpuset")?;
                let line = lines
                    .iter()
                    .find(|l| !l.is_v2() && l.controllers.iter().any(|c| c == "cpuset"))?;
                (h, line)
            }
        };
        let parent = h.parent();
        let rel = parent.strip_prefix(&h.mount_point).ok()?;
        let rel = format!("/{}", rel.display());
        let below = line.path.strip_prefix(rel.trim_end_matches('/'))?;
        let below = below.strip_prefix('/')?;
        let name = below.split('/').next()?;
        (!name.is_empty()).then(|| name.to_string())
    }

    /// The job's directory in every hierarchy used, keyed like [`Driver::parent_dirs`].
    pub fn job_dirs(&self, name: &str) -> Vec<(String, PathBuf)> {
        self.hierarchies().map(|h| (h.key(), h.job(name))).collect()
    }

    /// Names of job cgroups below the parent (union over hierarchies).
    pub fn list_jobs(&self) -> Result<Vec<String>, CgroupError> {
        let mut all = BTreeSet::new();
        for h in self.hierarchies() {
            all.extend(self.fs.child_dirs(&h.parent())?);
        }
        // With a bare `self` parent the daemon's own leaf sits beside the jobs.
        all.remove(DAEMON_LEAF);
        Ok(all.into_iter().collect())
    }

    /// Whether any process is left in the job: `populated` in cgroup.events where there is a
    /// cgroup2 tree; in legacy mode, whether the `cgroup.procs` of any of the job's v1 cgroups
    /// lists a process (v1 has no populated flag, and a process moved into some hierarchies
    /// only still keeps the job's cgroups from going).
    ///
    /// A job cgroup that does not exist holds nothing (`Ok(false)`); any other failure to read
    /// the kernel is an error, never "empty": a caller that took it as empty would end a job
    /// that still runs and hand its CPUs to another.
    pub fn is_populated(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match self.v2() {
            Some(v2) => {
                let dir = v2.job(name);
                match unified::events(&self.fs, &dir) {
                    Ok(ev) => Ok(ev.populated),
                    Err(e) if e.is_not_found() && !self.fs.exists(&dir) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            None => Ok(!self.v1_procs_everywhere(name)?.is_empty()),
        }
    }

    /// The processes in any of job `name`'s v1 cgroups (sorted, without repeats); a hierarchy
    /// where the job has no cgroup counts none.
    pub(crate) fn v1_procs_everywhere(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        let mut all = BTreeSet::new();
        for h in self.hierarchies() {
            let dir = h.job(name);
            let path = dir.join("cgroup.procs");
            match self.fs.read(&path) {
                Ok(text) => {
                    let pids = parse_pids(&text).ok_or(CgroupError::BadContent {
                        path,
                        text: text.clone(),
                    })?;
                    all.extend(pids);
                }
                Err(e) if e.is_not_found() && !self.fs.exists(&dir) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(all.into_iter().collect())
    }

    /// The `cgroup.events` file of the job, when the mode has one (for inotify).
    pub fn events_path(&self, name: &str) -> Option<PathBuf> {
        self.v2().map(|v2| v2.job(name).join("cgroup.events"))
    }

    /// Process ids in the job.
    pub fn procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        parent::validate_job_name(name)?;
        let path = self.tracking().job(name).join("cgroup.procs");
        let text = self.fs.read(&path)?;
        parse_pids(&text).ok_or(CgroupError::BadContent { path, text })
    }

    /// Number of threads in the job.
    pub fn thread_count(&self, name: &str) -> Result<usize, CgroupError> {
        parent::validate_job_name(name)?;
        let t = self.tracking();
        let file = if t.v2 { "cgroup.threads" } else { "tasks" };
        let text = self.fs.read(&t.job(name).join(file))?;
        Ok(text.lines().filter(|l| !l.trim().is_empty()).count())
    }

    /// The CPUs the job's cpuset holds (`cpuset.cpus`), for recovery after a restart.
    pub fn job_cpus(&self, name: &str) -> Result<CpuSet, CgroupError> {
        parent::validate_job_name(name)?;
        cpuset::read(&self.fs, &self.cpuset_hierarchy().job(name), "cpuset.cpus")
    }

    /// Memory charged to job `name` now (bytes).
    pub fn memory_usage(&self, name: &str) -> Result<u64, CgroupError> {
        parent::validate_job_name(name)?;
        let h = self.memory_hierarchy()?;
        let path = memory::usage_path(&h.job(name), h.v2);
        let text = self.read_stat(name, &path)?;
        memory::parse_usage(path, &text)
    }

    /// Processes the kernel OOM-killed inside job `name` (at its own limit or the partition's).
    pub fn oom_kills(&self, name: &str) -> u64 {
        self.memory_hierarchy()
            .map(|h| memory::oom_kills(&self.fs, &h.job(name), h.v2))
            .unwrap_or(0)
    }

    /// Whether job `name`'s own memory limit was ever reached: an OOM kill in a job whose own
    /// limit never was came from the job partition's. None when it cannot be told.
    pub fn oom_at_own_limit(&self, name: &str) -> Option<bool> {
        let h = self.memory_hierarchy().ok()?;
        memory::own_limit_hit(&self.fs, &h.job(name), h.v2)
    }

    /// Memory pressure (PSI) of job `name`, or of all jobs together when `None`, from the
    /// cgroup2 tree (hybrid and unified modes; `None` in legacy mode).
    pub fn memory_pressure(&self, name: Option<&str>) -> Option<pjw_kernelfs::psi::Psi> {
        let v2 = self.hierarchies().find(|h| h.v2)?;
        let dir = match name {
            Some(n) => v2.job(n),
            None => v2.parent(),
        };
        let text = self.fs.read(&dir.join("memory.pressure")).ok()?;
        pjw_kernelfs::psi::parse(&text).ok()
    }

    pub(crate) fn memory_hierarchy(&self) -> Result<&Hierarchy, CgroupError> {
        self.hierarchies()
            .find(|h| h.has("memory"))
            .ok_or(CgroupError::MissingController {
                controller: "memory".into(),
                where_: None,
            })
    }
}
