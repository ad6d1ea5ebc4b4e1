//! The binder's port on a real machine: job processes from the cgroup driver, threads and run
//! times and parents from `/proc` (any root), affinity with `sched_getaffinity` and
//! `sched_setaffinity`.

use std::path::PathBuf;
use std::sync::Arc;

use pjw_cgroup::{CgroupError, Driver};
use pjw_core::CpuSet;

use super::{BindError, BindPort, SchedRead, TaskFacts};

/// Reads `proc_root` and the job cgroups through `driver`.
#[derive(Debug)]
pub struct ProcPort {
    pub driver: Arc<Driver>,
    pub proc_root: PathBuf,
}

impl ProcPort {
    fn task_dir(&self, pid: u32, tid: u32) -> PathBuf {
        self.proc_root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string())
    }
}

impl BindPort for ProcPort {
    fn procs(&self, cgroup: &str) -> Result<Vec<u32>, BindError> {
        match self.driver.procs(cgroup) {
            Ok(p) => Ok(p),
            Err(CgroupError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Err(BindError::Gone)
            }
            Err(e) => Err(BindError::Failed(e.to_string())),
        }
    }

    fn threads(&self, pid: u32) -> Result<Vec<u32>, BindError> {
        let dir = self.proc_root.join(pid.to_string()).join("task");
        let rd = std::fs::read_dir(&dir).map_err(|e| BindError::of_io(&e, dir.display()))?;
        let mut tids = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| BindError::of_io(&e, dir.display()))?;
            if let Some(t) = ent.file_name().to_str().and_then(|s| s.parse().ok()) {
                tids.push(t);
            }
        }
        Ok(tids)
    }

    fn runnable_ns(&self, pid: u32, tid: u32) -> Result<u64, BindError> {
        self.sched(pid, tid)
            .map(|s| s.run_ns.saturating_add(s.wait_ns))
    }

    fn task(&self, pid: u32, tid: u32) -> Result<TaskFacts, BindError> {
        let dir = self.task_dir(pid, tid);
        let path = dir.join("stat");
        let text =
            std::fs::read_to_string(&path).map_err(|e| BindError::of_io(&e, path.display()))?;
        let t = pjw_kernelfs::task_stat::parse(&text)
            .map_err(|e| BindError::Failed(format!("{}: {e}", path.display())))?;
        // Only on kernels with CONFIG_SCHED_DEBUG; without it the row has no migrations.
        let migrations = std::fs::read_to_string(dir.join("sched"))
            .ok()
            .and_then(|s| pjw_kernelfs::task_sched::migrations(&s).ok().flatten());
        Ok(TaskFacts {
            comm: t.comm,
            cpu: t.processor,
            migrations,
        })
    }

    fn sched(&self, pid: u32, tid: u32) -> Result<SchedRead, BindError> {
        let dir = self.task_dir(pid, tid);
        let path = dir.join("schedstat");
        match std::fs::read_to_string(&path) {
            Ok(text) => pjw_kernelfs::schedstat::parse(&text)
                .map(|s| SchedRead {
                    run_ns: s.run_ns,
                    wait_ns: s.wait_ns,
                })
                .map_err(|e| BindError::Failed(format!("{}: {e}", path.display()))),
            // No schedstat (a kernel without CONFIG_SCHED_INFO): the stat line's CPU ticks
            // (time on a CPU only).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.exists() => {
                let path = dir.join("stat");
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| BindError::of_io(&e, path.display()))?;
                let t = pjw_kernelfs::task_stat::parse(&text)
                    .map_err(|e| BindError::Failed(format!("{}: {e}", path.display())))?;
                let hz = rustix::param::clock_ticks_per_second().max(1);
                Ok(SchedRead {
                    run_ns: t.cpu_ticks().saturating_mul(1_000_000_000 / hz),
                    wait_ns: 0,
                })
            }
            Err(e) => Err(BindError::of_io(&e, path.display())),
        }
    }

    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
        let mut set = rustix::process::CpuSet::new();
        for c in cpus.iter() {
            set.set(c as usize);
        }
        let pid = i32::try_from(tid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| BindError::Failed(format!("bad thread id {tid}")))?;
        rustix::process::sched_setaffinity(Some(pid), &set).map_err(|e| {
            if e == rustix::io::Errno::SRCH {
                BindError::Gone
            } else {
                BindError::Failed(format!("sched_setaffinity({tid}, {cpus}): {e}"))
            }
        })
    }

    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError> {
        let pid = i32::try_from(tid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| BindError::Failed(format!("bad thread id {tid}")))?;
        let set = rustix::process::sched_getaffinity(Some(pid)).map_err(|e| {
            if e == rustix::io::Errno::SRCH {
                BindError::Gone
            } else {
                BindError::Failed(format!("sched_getaffinity({tid}): {e}"))
            }
        })?;
        Ok((0..pjw_core::MAX_CPUS as u32)
            .filter(|&c| set.is_set(c as usize))
            .collect())
    }

    fn parent(&self, pid: u32) -> Result<u32, BindError> {
        let path = self.proc_root.join(pid.to_string()).join("stat");
        let text =
            std::fs::read_to_string(&path).map_err(|e| BindError::of_io(&e, path.display()))?;
        pjw_kernelfs::proc_stat::parse(&text)
            .map(|s| s.ppid)
            .map_err(|e| BindError::Failed(format!("{}: {e}", path.display())))
    }
}
