//! The recording fake of the cgroup driver ([`FakeCgroups`]): it records its writes and its
//! reads of job files, fails chosen writes, and with a [`Gate`] makes kills and freezes wait
//! like the kill rounds and the v1 freezer do.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use pjw_cgroup::{CgroupError, CpuStat, IoBytes, JobLimits, MemoryBreakdown, Partition, Resource};
use pjw_core::CpuSet;
use pjw_kernelfs::proc_cgroup::CgroupLine;
use pjw_kernelfs::psi::Psi;

use crate::cgroup_port::{
    CgroupFreezing, CgroupLifecycle, CgroupStats, CgroupTree, Freezing, Killed,
};

/// What the recording fake holds: job cgroups and the writes made, in order.
#[derive(Debug, Default)]
pub struct FakeCgState {
    /// Every write, as `op job args` (`create_job job-a 0-1`); a failed one ends in ` !`.
    pub calls: Vec<String>,
    /// Job cgroups: their CPUs and processes.
    pub jobs: BTreeMap<String, (CpuSet, Vec<u32>)>,
    /// Writes that fail (by op name), like a kernel that refuses them.
    pub fail: Vec<&'static str>,
    /// Jobs whose OOM kills came from the job partition, their own limit never reached.
    pub partition_ooms: std::collections::BTreeSet<String>,
    /// No hierarchy has the cpu controller: no idle class (`set_idle` says so).
    pub no_cpu_controller: bool,
    /// Every read of a job's files, as `op job` (`memory_usage job-a`), in order.
    pub reads: Vec<String>,
    /// What the stats reads return per job: memory charged (bytes) and CPU time (user µs).
    pub stats: BTreeMap<String, (u64, u64)>,
    /// Kills take rounds (no `cgroup.kill`), which wait until the gate opens.
    pub slow_kill: Option<Gate>,
    /// Freezes wait for FROZEN (the v1 freezer) until the gate opens; then they succeed, or
    /// fail with `true` (a task that would not stop).
    pub slow_freeze: Option<(Gate, bool)>,
    /// Removals handed to a blocking thread wait until the gate opens.
    pub slow_remove: Option<Gate>,
    /// Signal passes handed to a blocking thread wait until the gate opens.
    pub slow_signal: Option<Gate>,
    /// Memory PSI per job (`(parent)` for the partition), what `memory_pressure` returns.
    pub psi: BTreeMap<String, Psi>,
    /// What `memory_breakdown` returns per job (else it fails, as a missing file would).
    pub breakdown: BTreeMap<String, MemoryBreakdown>,
    /// OOM kills per job.
    pub ooms: BTreeMap<String, u64>,
}

/// A gate a blocking thread waits at until the test opens it.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    pub fn open(&self) {
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0 .1.notify_all();
    }

    fn wait(&self) {
        let mut open = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.0 .1.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Opens its gate when dropped: a failed test does not leave a blocking thread waiting.
pub struct OpenOnDrop(pub Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A cgroup driver in memory that records its writes and its reads of job files and fails the
/// writes it is told to. A kill empties a job at once, or, with `slow_kill`, takes rounds that
/// wait at a [`Gate`]; memory and CPU time are what
/// [`FakeCgroups::set_stats`] gave (CPU time fails without), the other stats are not there.
#[derive(Clone, Debug, Default)]
pub struct FakeCgroups(Arc<Mutex<FakeCgState>>);

impl FakeCgroups {
    pub fn state(&self) -> MutexGuard<'_, FakeCgState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writes so far.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// The reads of job files so far.
    pub fn reads(&self) -> Vec<String> {
        self.state().reads.clone()
    }

    /// Job `name` uses `mem` bytes and has had `cpu_usec` µs of CPU (user) from now on.
    pub fn set_stats(&self, name: &str, mem: u64, cpu_usec: u64) {
        self.state().stats.insert(name.to_string(), (mem, cpu_usec));
    }

    /// Job `name` (or `(parent)`, the partition) has memory PSI `some`/`full` avg10 from now on.
    pub fn set_psi(&self, name: &str, some: f64, full: f64) {
        let avg = |a: f64| pjw_kernelfs::psi::PsiLine {
            avg10: a,
            avg60: a,
            avg300: a,
            total_us: 0,
        };
        self.state().psi.insert(
            name.to_string(),
            Psi {
                some: avg(some),
                full: Some(avg(full)),
            },
        );
    }

    /// Job `name` has `anon` bytes of anonymous memory and `swap` in swap from now on.
    pub fn set_need(&self, name: &str, anon: u64, swap: u64) {
        self.state().breakdown.insert(
            name.to_string(),
            MemoryBreakdown {
                anon,
                swap: Some(swap),
                ..MemoryBreakdown::default()
            },
        );
    }

    /// The kernel has OOM-killed `n` processes of job `name` so far.
    pub fn set_ooms(&self, name: &str, n: u64) {
        self.state().ooms.insert(name.to_string(), n);
    }

    fn read(&self, op: &str, name: &str) -> Option<(u64, u64)> {
        let mut st = self.state();
        st.reads.push(format!("{op} {name}"));
        st.stats.get(name).copied()
    }

    fn write(&self, op: &'static str, name: &str, args: String) -> Result<(), CgroupError> {
        let mut st = self.state();
        let call = format!(
            "{op} {name}{}{args}",
            if args.is_empty() { "" } else { " " }
        );
        if st.fail.contains(&op) {
            st.calls.push(format!("{call} !"));
            return Err(CgroupError::Write {
                path: PathBuf::from(format!("/fake/{name}/{op}")),
                value: args,
                source: std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
            });
        }
        st.calls.push(call);
        Ok(())
    }

    fn missing(name: &str) -> CgroupError {
        CgroupError::Read {
            path: PathBuf::from(format!("/fake/{name}")),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }
}

/// A job's limits as the recording fake writes them: its CPUs, then its I/O, memory and task
/// limits where it has them.
fn summary(limits: &JobLimits) -> String {
    let mut what = limits.cpus.to_string();
    if !limits.io.is_empty() {
        what.push_str(&format!(" io {}", limits.io.summary()));
    }
    if let Some(m) = limits.memory_max {
        what.push_str(&format!(" mem {m}"));
    }
    if let Some(p) = limits.pids_max {
        what.push_str(&format!(" pids {p}"));
    }
    what
}

impl CgroupLifecycle for FakeCgroups {
    fn create_job(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        self.write("create_job", name, summary(limits))?;
        self.state()
            .jobs
            .insert(name.to_string(), (limits.cpus, Vec::new()));
        Ok(())
    }
    fn set_limits(&self, name: &str, limits: &JobLimits) -> Result<(), CgroupError> {
        self.write("set_limits", name, summary(limits))?;
        if let Some(j) = self.state().jobs.get_mut(name) {
            j.0 = limits.cpus;
        }
        Ok(())
    }
    fn set_idle(&self, name: &str, idle: bool) -> Result<(), CgroupError> {
        if self.state().no_cpu_controller {
            return Err(CgroupError::MissingController {
                controller: "cpu".into(),
                where_: None,
            });
        }
        self.write("set_idle", name, idle.to_string())
    }
    fn set_partition(
        &self,
        name: Option<&str>,
        kind: Partition,
        _cpus: Option<&CpuSet>,
    ) -> Result<(), CgroupError> {
        self.write(
            "set_partition",
            name.unwrap_or("(parent)"),
            kind.as_str().into(),
        )
    }
    fn add_process(&self, name: &str, pid: u32) -> Result<(), CgroupError> {
        self.write("add_process", name, pid.to_string())?;
        if let Some(j) = self.state().jobs.get_mut(name) {
            j.1.push(pid);
        }
        Ok(())
    }
    fn deny_devices(&self, name: &str, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
        let list: Vec<String> = devs.iter().map(|(a, b)| format!("{a}:{b}")).collect();
        self.write("deny_devices", name, list.join(","))
    }
    fn set_cpus(&self, name: &str, cpus: &CpuSet, _mems: &CpuSet) -> Result<(), CgroupError> {
        self.write("set_cpus", name, cpus.to_string())?;
        if let Some(j) = self.state().jobs.get_mut(name) {
            j.0 = *cpus;
        }
        Ok(())
    }
    fn signaller(&self, name: &str, sig: i32) -> crate::cgroup_port::Signaller {
        let (fake, name) = (self.clone(), name.to_string());
        let gate = self.state().slow_signal.clone();
        Box::new(move || {
            if let Some(gate) = gate {
                gate.wait();
            }
            fake.write("signal", &name, sig.to_string())?;
            Ok(fake.state().jobs.get(&name).map_or(0, |j| j.1.len()))
        })
    }
    fn kill(&self, name: &str) -> Result<Killed, CgroupError> {
        self.write("kill", name, String::new())?;
        let Some(gate) = self.state().slow_kill.clone() else {
            if let Some(j) = self.state().jobs.get_mut(name) {
                j.1.clear();
            }
            return Ok(Killed::Done);
        };
        let (fake, name) = (self.clone(), name.to_string());
        Ok(Killed::Rounds(Box::new(move || {
            gate.wait();
            fake.write("kill_rounds", &name, String::new())?;
            if let Some(j) = fake.state().jobs.get_mut(&name) {
                j.1.clear();
            }
            Ok(())
        })))
    }
    fn remove_job(&self, name: &str) -> Result<(), CgroupError> {
        self.remove_now(name)
    }
    fn removal(&self, name: &str) -> crate::cgroup_port::Removal {
        let (fake, name) = (self.clone(), name.to_string());
        let gate = self.state().slow_remove.clone();
        Box::new(move || {
            if let Some(gate) = gate {
                gate.wait();
            }
            fake.remove_now(&name)
        })
    }
    fn remove_parent_if_empty(&self) -> Result<(), CgroupError> {
        Ok(())
    }
}

impl FakeCgroups {
    /// A job's removal: refused while it holds processes, else recorded as `remove_job`.
    fn remove_now(&self, name: &str) -> Result<(), CgroupError> {
        if self.state().jobs.get(name).is_some_and(|j| !j.1.is_empty()) {
            return Err(CgroupError::Populated {
                path: PathBuf::from(format!("/fake/{name}")),
            });
        }
        self.write("remove_job", name, String::new())?;
        self.state().jobs.remove(name);
        Ok(())
    }
}

impl CgroupFreezing for FakeCgroups {
    fn freeze(&self, name: &str, frozen: bool) -> Result<(), CgroupError> {
        self.write("freeze", name, frozen.to_string())
    }
    fn freeze_begin(&self, name: &str) -> Result<Freezing, CgroupError> {
        self.write("freeze", name, "true".into())?;
        let Some((gate, fails)) = self.state().slow_freeze.clone() else {
            return Ok(Freezing::Frozen);
        };
        let (fake, name) = (self.clone(), name.to_string());
        Ok(Freezing::Wait(Box::new(move || {
            gate.wait();
            let state = if fails { "FREEZING" } else { "FROZEN" };
            fake.state()
                .reads
                .push(format!("freezer.state {name} {state}"));
            if fails {
                return Err(CgroupError::FreezeTimeout {
                    path: PathBuf::from(format!("/fake/{name}/freezer.state")),
                    state: state.into(),
                });
            }
            Ok(())
        })))
    }
    fn is_frozen(&self, name: &str) -> Result<bool, CgroupError> {
        self.read("is_frozen", name);
        Ok(false)
    }
    fn set_memory_high(&self, name: &str, high: Option<u64>) -> Result<(), CgroupError> {
        self.write("set_memory_high", name, format!("{high:?}"))
    }
}

impl CgroupTree for FakeCgroups {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn mode(&self) -> pjw_cgroup::Mode {
        pjw_cgroup::Mode::Unified
    }
    fn counts_io(&self) -> bool {
        false
    }
    fn list_jobs(&self) -> Result<Vec<String>, CgroupError> {
        Ok(self.state().jobs.keys().cloned().collect())
    }
    fn is_populated(&self, name: &str) -> Result<bool, CgroupError> {
        self.read("is_populated", name);
        Ok(self.state().jobs.get(name).is_some_and(|j| !j.1.is_empty()))
    }
    fn events_path(&self, _name: &str) -> Option<PathBuf> {
        None
    }
    fn job_cpus(&self, name: &str) -> Result<CpuSet, CgroupError> {
        self.read("job_cpus", name);
        self.state()
            .jobs
            .get(name)
            .map(|j| j.0)
            .ok_or_else(|| FakeCgroups::missing(name))
    }
    fn procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        self.read("procs", name);
        self.state()
            .jobs
            .get(name)
            .map(|j| j.1.clone())
            .ok_or_else(|| FakeCgroups::missing(name))
    }
    fn thread_count(&self, name: &str) -> Result<usize, CgroupError> {
        self.read("thread_count", name);
        self.state()
            .jobs
            .get(name)
            .map(|j| j.1.len())
            .ok_or_else(|| FakeCgroups::missing(name))
    }
    fn job_of(&self, _lines: &[CgroupLine]) -> Option<String> {
        None
    }
}

impl CgroupStats for FakeCgroups {
    fn oom_at_own_limit(&self, name: &str) -> Option<bool> {
        self.read("oom_at_own_limit", name);
        Some(!self.state().partition_ooms.contains(name))
    }
    fn oom_kills(&self, name: &str) -> u64 {
        self.read("oom_kills", name);
        if let Some(n) = self.state().ooms.get(name).copied() {
            return n;
        }
        0
    }
    fn memory_usage(&self, name: &str) -> Result<u64, CgroupError> {
        Ok(self.read("memory_usage", name).map_or(0, |s| s.0))
    }
    fn cpu_time(&self, name: &str) -> Result<CpuStat, CgroupError> {
        match self.read("cpu_time", name) {
            Some((_, user_usec)) => Ok(CpuStat {
                user_usec,
                ..CpuStat::default()
            }),
            None => Err(FakeCgroups::missing(name)),
        }
    }
    fn memory_pressure(&self, name: Option<&str>) -> Option<Psi> {
        let name = name.unwrap_or("(parent)");
        self.read("memory_pressure", name);
        self.state().psi.get(name).copied()
    }
    fn io_bytes(&self, name: &str) -> Result<Option<IoBytes>, CgroupError> {
        self.read("io_bytes", name);
        Ok(None)
    }
    fn memory_breakdown(&self, name: &str) -> Result<MemoryBreakdown, CgroupError> {
        self.read("memory_breakdown", name);
        let b = self.state().breakdown.get(name).copied();
        b.ok_or_else(|| FakeCgroups::missing(name))
    }
    fn memory_peak(&self, name: &str) -> Result<u64, CgroupError> {
        self.read("memory_peak", name);
        Err(FakeCgroups::missing(name))
    }
    fn memory_swap_peak(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        self.read("memory_swap_peak", name);
        Ok(None)
    }
    fn pids_current(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        self.read("pids_current", name);
        Ok(None)
    }
    fn pressure(&self, name: &str, _what: Resource) -> Option<Psi> {
        self.read("pressure", name);
        None
    }
}
