//! The binder's port on a real machine: job processes from the cgroup driver, threads and run
//! times and parents from `/proc` (any root), affinity with `sched_getaffinity` and
//! `sched_setaffinity`.

use std::path::{Path, PathBuf};
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
        Ok(TaskFacts {
            comm: t.comm,
            cpu: t.processor,
        })
    }

    /// Only on kernels with CONFIG_SCHED_DEBUG; without it the row has no migrations.
    fn migrations(&self, pid: u32, tid: u32) -> Option<u64> {
        std::fs::read_to_string(self.task_dir(pid, tid).join("sched"))
            .ok()
            .and_then(|s| pjw_kernelfs::task_sched::migrations(&s).ok().flatten())
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

    /// Checked around the call: a thread id read earlier may have been freed and given to a
    /// thread of another job since (review 4, L1). A thread no longer in `cgroup` before the
    /// call is left alone; one that left it during the call gets its old set back.
    fn set_affinity(&self, cgroup: &str, tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
        set_checked(&self.proc_root, cgroup, tid, cpus)
    }

    fn affinity(&self, tid: u32) -> Result<CpuSet, BindError> {
        sched_get(tid)
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

/// Thread `tid` on `cpus`, checked around the call: a thread id read earlier may have been
/// freed and given to a thread of another job since (review 4, L1). A thread no longer in
/// `cgroup` before the call is left alone; one that left it during the call gets its old set
/// back. Either is [`BindError::Gone`] for the job.
fn set_checked(proc_root: &Path, cgroup: &str, tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
    if !thread_in(proc_root, tid, cgroup)? {
        return Err(BindError::Gone);
    }
    let old = sched_get(tid)?;
    sched_set(tid, cpus)?;
    if thread_in(proc_root, tid, cgroup).unwrap_or(false) {
        return Ok(());
    }
    tracing::warn!(
        tid,
        cgroup,
        "a thread id changed hands while it was pinned: its set is put back"
    );
    match sched_set(tid, &old) {
        Ok(()) | Err(BindError::Gone) => Err(BindError::Gone),
        Err(e) => Err(e),
    }
}

/// The CPUs thread `tid` may run on.
fn sched_get(tid: u32) -> Result<CpuSet, BindError> {
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

/// `sched_setaffinity(tid, cpus)`; a thread that is gone is [`BindError::Gone`].
fn sched_set(tid: u32, cpus: &CpuSet) -> Result<(), BindError> {
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

/// Whether thread `tid` is in job cgroup `cgroup` (a name below the parent) in some hierarchy,
/// by `/proc/<tid>/cgroup`: one of its paths holds `cgroup` as whole components.
fn thread_in(proc_root: &Path, tid: u32, cgroup: &str) -> Result<bool, BindError> {
    let path = proc_root.join(tid.to_string()).join("cgroup");
    let text = std::fs::read_to_string(&path).map_err(|e| BindError::of_io(&e, path.display()))?;
    let want = format!("/{}/", cgroup.trim_matches('/'));
    Ok(text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|p| format!("{}/", p.trim_end_matches('/')).contains(&want)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_with(tid: u32, text: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(tid.to_string())).unwrap();
        std::fs::write(d.path().join(tid.to_string()).join("cgroup"), text).unwrap();
        d
    }

    #[test]
    fn a_thread_is_in_its_jobs_cgroup_by_whole_components() {
        let d = proc_with(
            7,
            "12:cpuset:/pjw/job-42\n3:memory:/pjw/job-42/step-1\n0::/user.slice\n",
        );
        assert_eq!(thread_in(d.path(), 7, "job-42"), Ok(true));
        assert_eq!(thread_in(d.path(), 7, "job-4"), Ok(false));
        let d = proc_with(8, "0::/pjw.slice/pjw-jobs.scope/jobs/job-2\n");
        assert_eq!(thread_in(d.path(), 8, "jobs/job-2"), Ok(true));
        assert_eq!(thread_in(d.path(), 8, "job-21"), Ok(false));
    }

    #[test]
    fn a_thread_gone_is_gone_not_outside() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(thread_in(d.path(), 9, "job-1"), Err(BindError::Gone));
    }

    /// The attack (review 4, L1): a thread id the binder listed for its job now names a thread
    /// of someone else (here: this test's own thread, outside any job). The real port leaves
    /// it as it is, and says the job's thread is gone.
    #[test]
    fn a_recycled_thread_id_of_another_cgroup_is_never_pinned() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(mine) = own
            .lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .find(|p| p.len() > 1)
            .map(|p| p.trim_start_matches('/').to_string())
        else {
            pjw_testkit::skip!("this test runs in the root cgroup of every hierarchy: no cgroup of its own to pin in");
        };
        let proc_root = Path::new("/proc");
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let before = sched_get(me).unwrap();
        let one: CpuSet = before.iter().take(1).collect();
        // What would act does act on a thread that is where its job is ...
        assert_eq!(set_checked(proc_root, &mine, me, &one), Ok(()));
        assert_eq!(sched_get(me).unwrap(), one);
        set_checked(proc_root, &mine, me, &before).unwrap();
        // ... and never on one that is not.
        assert_eq!(
            set_checked(proc_root, "job-not-mine", me, &one),
            Err(BindError::Gone)
        );
        assert_eq!(sched_get(me).unwrap(), before, "its set was changed");
    }
}
