//! Job profiles: the sampler's reads, each job's running totals, and the store writer.
//!
//! Every `profile.interval` the engine gets [`crate::engine::Event::Sample`] (and, while a job
//! is younger than [`YOUNG_FOR`], [`crate::engine::Event::SampleYoung`] every [`YOUNG_EVERY`];
//! a job is also sampled at its start and at its end) and, for each
//! started job, reads its cgroup files ([`read_sample`]: a fixed number of reads per job, none
//! per process), folds the sample into the job's [`JobProf`] and hands the batch to the
//! [`Writer`], a thread with its own SQLite connection, so a slow disk never holds up the engine.
//! Time spent queued, as a backfiller and frozen comes from the engine's state transitions
//! ([`JobProf::observe`] after every event), not from samples. When a job ends the engine reads
//! the final counters (CPU, the kernel's memory high-water mark, I/O) before removing its
//! cgroups and writes the [`JobSummary`] in the transaction that marks it ended.

use std::path::Path;

use pjw_cgroup::Resource;
use pjw_store::{EndClass, JobSummary, ProcessSample, Sample, SampleState};
use tracing::debug;

use crate::cgroup_port::CgroupPort;
use crate::procs::ProcCounts;

mod end;
mod writer;

pub use end::{end_class, exit_status, EndReason, LeaseEnd};
pub use writer::{WriteOp, Writer};

/// Where a job is, for time accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfState {
    Queued,
    Running,
    Backfill,
    Frozen,
}

impl ProfState {
    /// The sample state (None while queued: queued jobs are not sampled).
    pub fn sample_state(self) -> Option<SampleState> {
        match self {
            ProfState::Queued => None,
            ProfState::Running => Some(SampleState::Running),
            ProfState::Backfill => Some(SampleState::Backfill),
            ProfState::Frozen => Some(SampleState::Frozen),
        }
    }
}

/// A job's running totals (pure: times are passed in).
#[derive(Clone, Debug, Default)]
pub struct JobProf {
    state: Option<(ProfState, i64)>,
    pub queued_ms: i64,
    pub backfill_ms: i64,
    pub frozen_ms: i64,
    pub freezes: u32,
    /// The latest sample.
    pub last: Option<Sample>,
    pub swap_peak: u64,
    pub procs_max: u32,
    pub threads_max: u32,
    pub samples: u32,
    /// GPU readings (NVML) over the samples that had one: their sum and count (for the mean),
    /// the highest utilisation and the most memory.
    pub gpu_util_sum: f64,
    pub gpu_util_n: u32,
    pub gpu_util_max: Option<f64>,
    pub gpu_mem_peak: Option<u64>,
    /// Exit status of the main process, once the process events told it.
    pub exit_status: Option<i32>,
}

impl JobProf {
    /// Totals of a job that already waited `queued_ms` (recovered after a restart).
    pub fn with_queued(queued_ms: i64) -> JobProf {
        JobProf {
            queued_ms,
            ..JobProf::default()
        }
    }

    /// The job is in `state` at `now_ms`: time since the last observation goes to the state it
    /// was in.
    pub fn observe(&mut self, state: ProfState, now_ms: i64) {
        match self.state {
            Some((prev, since)) => {
                let dt = (now_ms - since).max(0);
                match prev {
                    ProfState::Queued => self.queued_ms += dt,
                    ProfState::Backfill => self.backfill_ms += dt,
                    ProfState::Frozen => self.frozen_ms += dt,
                    ProfState::Running => {}
                }
                if state == ProfState::Frozen && prev != ProfState::Frozen {
                    self.freezes += 1;
                }
                self.state = Some((state, now_ms));
            }
            None => {
                if state == ProfState::Frozen {
                    self.freezes += 1;
                }
                self.state = Some((state, now_ms));
            }
        }
    }

    /// Fold a sample in.
    pub fn add(&mut self, s: &Sample) {
        self.samples += 1;
        self.swap_peak = self.swap_peak.max(s.swap.unwrap_or(0));
        self.procs_max = self.procs_max.max(s.procs.unwrap_or(0));
        self.threads_max = self.threads_max.max(s.threads.unwrap_or(0));
        if let Some(u) = s.gpu_util {
            self.gpu_util_sum += u;
            self.gpu_util_n += 1;
            self.gpu_util_max = Some(self.gpu_util_max.map_or(u, |m| m.max(u)));
        }
        if let Some(m) = s.gpu_mem {
            self.gpu_mem_peak = Some(self.gpu_mem_peak.map_or(m, |p| p.max(m)));
        }
        self.last = Some(s.clone());
    }

    /// The summary as of now. `finals`: counters read at the end (or now), which win over the
    /// last sample; `counts`: exact process counts from the process events.
    pub fn summary(
        &self,
        seq: i64,
        node: &str,
        end: EndClass,
        running_ms: i64,
        finals: &Finals,
        counts: Option<ProcCounts>,
    ) -> JobSummary {
        let last = self.last.clone().unwrap_or_default();
        let pick = |a: Option<u64>, b: Option<u64>| a.or(b).unwrap_or(0);
        let mut s = JobSummary::new(seq, node, end);
        s.exit_status = self.exit_status;
        s.queued_ms = self.queued_ms;
        s.running_ms = running_ms.max(0);
        s.backfill_ms = self.backfill_ms;
        s.frozen_ms = self.frozen_ms;
        s.freezes = self.freezes;
        s.cpu_user_usec = pick(finals.cpu_user_usec, last.cpu_user_usec);
        s.cpu_system_usec = pick(finals.cpu_system_usec, last.cpu_system_usec);
        s.mem_peak = pick(finals.mem_peak, last.mem_peak).max(last.mem_current.unwrap_or(0));
        s.swap_peak = self.swap_peak.max(finals.swap_peak.unwrap_or(0));
        s.io_rbytes = pick(finals.io_rbytes, last.io_rbytes);
        s.io_wbytes = pick(finals.io_wbytes, last.io_wbytes);
        s.procs_max = self.procs_max;
        s.threads_max = self.threads_max;
        if let Some(c) = counts {
            s.procs_total = Some(c.procs_ever);
            s.threads_total = Some(c.threads_ever);
            s.counts_exact = Some(!c.lossy);
            s.procs_max = s.procs_max.max(c.procs_max.min(u32::MAX as u64) as u32);
            s.threads_max = s.threads_max.max(c.threads_max.min(u32::MAX as u64) as u32);
        }
        s.threads_max = s.threads_max.max(s.procs_max);
        s.samples = self.samples;
        s.gpu_util_mean = (self.gpu_util_n > 0).then(|| self.gpu_util_sum / self.gpu_util_n as f64);
        s.gpu_util_max = self.gpu_util_max;
        s.gpu_mem_peak = self.gpu_mem_peak;
        s
    }
}

/// Counters read once, at the end of a job (or for a live report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finals {
    pub cpu_user_usec: Option<u64>,
    pub cpu_system_usec: Option<u64>,
    pub mem_peak: Option<u64>,
    /// The kernel's swap high-water mark (`memory.swap.peak`; on v1 a lower bound), where kept:
    /// exact for a job that swapped between two samples, or ended before its second.
    pub swap_peak: Option<u64>,
    pub io_rbytes: Option<u64>,
    pub io_wbytes: Option<u64>,
}

impl Finals {
    /// The end's counters as a sample read them.
    pub fn of(s: &Sample) -> Finals {
        Finals {
            cpu_user_usec: s.cpu_user_usec,
            cpu_system_usec: s.cpu_system_usec,
            mem_peak: s.mem_peak,
            // No sample reads it: `read_finals`, or the end reads it beside the last sample.
            swap_peak: None,
            io_rbytes: s.io_rbytes,
            io_wbytes: s.io_wbytes,
        }
    }
}

/// How often a young job is sampled, and for how long a job counts as young: a job's first
/// minute is sampled every second (beside its samples at start and end), so a job of a few
/// seconds has a series with its shape; then every `profile.interval`.
pub const YOUNG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
pub const YOUNG_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a job of age `age`, last sampled `since_ms` ago (None: never), is due a young
/// job's sample (pure). A little under the step, so a tick that comes early is not skipped.
pub fn young_due(age: std::time::Duration, since_ms: Option<i64>) -> bool {
    age < YOUNG_FOR && since_ms.is_none_or(|ms| ms >= YOUNG_EVERY.as_millis() as i64 - 100)
}

/// Read the end-of-job counters of `cgroup` (before it is removed).
pub fn read_finals(driver: &dyn CgroupPort, cgroup: &str) -> Finals {
    let cpu = driver.cpu_time(cgroup).ok();
    let io = driver.io_bytes(cgroup).ok().flatten();
    Finals {
        cpu_user_usec: cpu.map(|c| c.user_usec),
        cpu_system_usec: cpu.map(|c| c.system_usec),
        mem_peak: driver.memory_peak(cgroup).ok(),
        swap_peak: driver.memory_swap_peak(cgroup).ok().flatten(),
        io_rbytes: io.map(|i| i.rbytes),
        io_wbytes: io.map(|i| i.wbytes),
    }
}

/// One sample of job `seq` from its cgroup files. A file that cannot be read leaves its
/// fields `None` (logged at debug: a job may end between the tick and the read). `procs_now`:
/// the process count from the process events, when they flow (then `cgroup.procs`, whose
/// cost grows with the job's processes, is not read).
pub fn read_sample(
    driver: &dyn CgroupPort,
    cgroup: &str,
    seq: i64,
    state: Option<SampleState>,
    ts_ms: i64,
    procs_now: Option<u64>,
    read_psi: bool,
) -> Sample {
    fn ok<T>(seq: i64, what: &str, r: Result<T, pjw_cgroup::CgroupError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                debug!(seq, what, error = %e, "sample: cannot read");
                None
            }
        }
    }
    let cpu = ok(seq, "cpu", driver.cpu_time(cgroup));
    let mem = ok(seq, "memory", driver.memory_breakdown(cgroup));
    let io = ok(seq, "io", driver.io_bytes(cgroup)).flatten();
    let psi = |r| read_psi.then(|| driver.pressure(cgroup, r)).flatten();
    let (pc, pm, pi) = (psi(Resource::Cpu), psi(Resource::Memory), psi(Resource::Io));
    let threads = ok(seq, "pids", driver.pids_current(cgroup))
        .flatten()
        .or_else(|| driver.thread_count(cgroup).ok().map(|t| t as u64));
    Sample {
        seq,
        ts_ms,
        state,
        cpu_user_usec: cpu.map(|c| c.user_usec),
        cpu_system_usec: cpu.map(|c| c.system_usec),
        mem_current: ok(seq, "memory.current", driver.memory_usage(cgroup)),
        mem_peak: ok(seq, "memory.peak", driver.memory_peak(cgroup)),
        mem_anon: mem.map(|m| m.anon),
        mem_file: mem.map(|m| m.file),
        swap: mem.and_then(|m| m.swap),
        io_rbytes: io.map(|i| i.rbytes),
        io_wbytes: io.map(|i| i.wbytes),
        procs: match procs_now {
            Some(n) => Some(n.min(u32::MAX as u64) as u32),
            None => ok(seq, "procs", driver.procs(cgroup)).map(|p| p.len() as u32),
        },
        threads: threads.map(|t| t.min(u32::MAX as u64) as u32),
        psi_cpu_some: pc.map(|p| p.some.avg10),
        psi_cpu_full: pc.and_then(|p| p.full).map(|f| f.avg10),
        psi_mem_some: pm.map(|p| p.some.avg10),
        psi_mem_full: pm.and_then(|p| p.full).map(|f| f.avg10),
        psi_io_some: pi.map(|p| p.some.avg10),
        psi_io_full: pi.and_then(|p| p.full).map(|f| f.avg10),
        // Filled by the engine from the NVML thread's latest readings.
        gpu_util: None,
        gpu_mem: None,
    }
}

/// The top `n` processes of a job by CPU time and the top `n` by resident memory
/// (`profile.processes`).
/// Reads `/proc/PID/stat` of each of the job's processes: cost per process, so it is off
/// unless configured.
pub fn top_processes(
    proc_root: &Path,
    pids: &[u32],
    n: usize,
    seq: i64,
    ts_ms: i64,
) -> Vec<ProcessSample> {
    let tick = clock_ticks();
    let page = page_size();
    let rows: Vec<ProcessSample> = pids
        .iter()
        .filter_map(|pid| {
            let text =
                std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
            let st = pjw_kernelfs::proc_stat::parse(&text).ok()?;
            Some(ProcessSample {
                seq,
                ts_ms,
                pid: *pid,
                comm: st.comm,
                cpu_usec: (st.utime + st.stime).saturating_mul(1_000_000) / tick,
                rss: st.rss_pages.saturating_mul(page),
                threads: st.num_threads.min(u32::MAX as u64) as u32,
            })
        })
        .collect();
    top_n(rows, n)
}

/// The top `n` rows by CPU time and the top `n` by resident memory (up to 2n rows), largest
/// CPU first (pure).
pub fn top_n(mut rows: Vec<ProcessSample>, n: usize) -> Vec<ProcessSample> {
    rows.sort_by(|a, b| b.rss.cmp(&a.rss).then(a.pid.cmp(&b.pid)));
    let by_mem: Vec<u32> = rows.iter().take(n).map(|r| r.pid).collect();
    rows.sort_by(|a, b| {
        b.cpu_usec
            .cmp(&a.cpu_usec)
            .then(b.rss.cmp(&a.rss))
            .then(a.pid.cmp(&b.pid))
    });
    let mut i = 0;
    rows.retain(|r| {
        i += 1;
        i <= n || by_mem.contains(&r.pid)
    });
    rows
}

fn clock_ticks() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_goes_to_the_state_the_job_was_in() {
        let mut p = JobProf::default();
        // Queued 0-1000, running 1000-3000, frozen 3000-3500, backfill 3500-4500, frozen again.
        let steps = [
            (ProfState::Queued, 0),
            (ProfState::Queued, 400),
            (ProfState::Running, 1000),
            (ProfState::Running, 2000),
            (ProfState::Frozen, 3000),
            (ProfState::Frozen, 3200),
            (ProfState::Backfill, 3500),
            (ProfState::Frozen, 4500),
            (ProfState::Running, 4700),
        ];
        for (s, t) in steps {
            p.observe(s, t);
        }
        assert_eq!(
            (p.queued_ms, p.backfill_ms, p.frozen_ms, p.freezes),
            (1000, 1000, 700, 2)
        );
    }

    #[test]
    fn end_classes() {
        let table = [
            ("exited", false, 0, Some(0), EndClass::Completed),
            ("exited", false, 0, None, EndClass::Completed),
            ("exited", false, 0, Some(3), EndClass::Failed),
            ("killed by alice", false, 0, Some(137), EndClass::Killed),
            ("exited", true, 0, None, EndClass::Killed),
            ("exited", false, 2, Some(137), EndClass::Oom),
            ("expired in queue", false, 0, None, EndClass::Expired),
            // A job its workload manager ended normally (the epilog) is not a failure.
            ("ended by slurm", false, 0, None, EndClass::Completed),
            ("ended by sge", false, 0, Some(0), EndClass::Completed),
            ("ended by slurm", false, 0, Some(2), EndClass::Failed),
            ("ended by slurm", true, 0, None, EndClass::Killed),
            (
                "lease: slurm says COMPLETED",
                false,
                0,
                None,
                EndClass::Completed,
            ),
            (
                "lease: slurm says FAILED",
                false,
                0,
                Some(1),
                EndClass::Failed,
            ),
            (
                "lease: expired (no word from sge that it runs, and no process, for 3600 s)",
                false,
                0,
                None,
                EndClass::Killed,
            ),
            ("client left the queue", false, 0, None, EndClass::Failed),
            ("start failed: EPERM", false, 0, None, EndClass::Failed),
            ("start interrupted", false, 0, None, EndClass::Failed),
            (
                "ended while daemon was down",
                false,
                0,
                None,
                EndClass::Completed,
            ),
        ];
        // What memory did is appended after "; " and does not change the class.
        for (reason, killed, ooms, status, want) in [
            (
                "exited; stalled on memory inside its own 64M limit for 12 s",
                false,
                0,
                Some(0),
                EndClass::Completed,
            ),
            (
                "killed by the memory governor: frozen 600 s; 1 process(es) OOM-killed at its own 64M limit (peak 64M)",
                true,
                1,
                Some(137),
                EndClass::Killed,
            ),
        ] {
            let typed = EndReason::parse(reason);
            assert_eq!(end_class(&typed, killed, ooms, status), want, "{reason}");
        }
        for (reason, killed, ooms, status, want) in table {
            let typed = EndReason::parse(reason);
            assert_eq!(end_class(&typed, killed, ooms, status), want, "{reason}");
            assert_eq!(typed.text(), reason, "round trip");
        }
    }

    /// The lease's reason is typed where the engine makes it: its class comes from the variant,
    /// and its text is the one older versions stored.
    #[test]
    fn a_lease_end_is_typed_and_keeps_its_text() {
        let expired = EndReason::Lease(LeaseEnd::Expired {
            manager: "sge".into(),
            silent_s: 3600,
        });
        assert_eq!(
            expired.text(),
            "lease: expired (no word from sge that it runs, and no process, for 3600 s)"
        );
        assert_eq!(EndReason::parse(&expired.text()), expired);
        assert_eq!(end_class(&expired, false, 0, None), EndClass::Killed);
        let gone = EndReason::Lease(LeaseEnd::Gone {
            manager: "slurm".into(),
            state: "expired".into(),
        });
        // A manager's state that reads "expired" is still its word, not the lease's expiry.
        assert_eq!(gone.text(), "lease: slurm says expired");
        assert_eq!(EndReason::parse(&gone.text()), gone);
        assert_eq!(end_class(&gone, false, 0, Some(0)), EndClass::Completed);
        let other = EndReason::parse("lease: gone missing");
        assert_eq!(
            other,
            EndReason::Lease(LeaseEnd::Other("gone missing".into()))
        );
        assert_eq!(other.text(), "lease: gone missing");
    }

    #[test]
    fn top_processes_by_cpu_and_by_memory() {
        let row = |pid, cpu_usec, rss| ProcessSample {
            pid,
            cpu_usec,
            rss,
            ..ProcessSample::default()
        };
        let rows = vec![
            row(1, 10, 1),
            row(2, 50, 2),
            row(3, 0, 900),
            row(4, 30, 3),
            row(5, 1, 800),
        ];
        let pids = |v: Vec<ProcessSample>| v.iter().map(|r| r.pid).collect::<Vec<_>>();
        assert_eq!(pids(top_n(rows.clone(), 1)), [2, 3]);
        assert_eq!(pids(top_n(rows.clone(), 2)), [2, 4, 5, 3]);
        assert_eq!(pids(top_n(rows.clone(), 9)), [2, 4, 1, 5, 3]);
        assert!(top_n(rows, 0).is_empty());
    }

    #[test]
    fn wait_status_to_exit_status() {
        assert_eq!(exit_status(0), 0);
        assert_eq!(exit_status(3 << 8), 3);
        assert_eq!(exit_status(9), 137);
        assert_eq!(exit_status(15 | 0x80), 143); // core dumped flag
    }

    #[test]
    fn summary_prefers_final_counters_and_exact_counts() {
        let mut p = JobProf::default();
        p.add(&Sample {
            mem_current: Some(100),
            mem_peak: Some(200),
            swap: Some(5),
            procs: Some(3),
            threads: Some(4),
            cpu_user_usec: Some(10),
            ..Sample::default()
        });
        p.add(&Sample {
            mem_current: Some(50),
            mem_peak: Some(250),
            swap: Some(1),
            procs: Some(1),
            threads: Some(1),
            cpu_user_usec: Some(20),
            ..Sample::default()
        });
        let finals = Finals {
            cpu_user_usec: Some(30),
            mem_peak: Some(300),
            ..Finals::default()
        };
        let counts = ProcCounts {
            procs_ever: 26,
            threads_ever: 27,
            procs_now: 0,
            procs_max: 5,
            threads_max: 6,
            lossy: false,
            ..ProcCounts::default()
        };
        let s = p.summary(7, "n", EndClass::Completed, 1000, &finals, Some(counts));
        assert_eq!(
            (
                s.cpu_user_usec,
                s.mem_peak,
                s.swap_peak,
                s.procs_max,
                s.threads_max
            ),
            (30, 300, 5, 5, 6)
        );
        assert_eq!(
            (s.procs_total, s.threads_total, s.counts_exact, s.samples),
            (Some(26), Some(27), Some(true), 2)
        );
        let s = p.summary(7, "n", EndClass::Completed, 1000, &Finals::default(), None);
        assert_eq!(
            (s.cpu_user_usec, s.mem_peak, s.procs_total),
            (20, 250, None)
        );
        // A short job that swapped between samples (none saw it): the kernel's swap peak read
        // at the end counts; it never lowers what a sample saw.
        for (sampled, kernel, want) in [(0, Some(150), 150), (5, Some(3), 5), (5, None, 5)] {
            let mut p = JobProf::default();
            p.add(&Sample {
                swap: Some(sampled),
                ..Sample::default()
            });
            let finals = Finals {
                swap_peak: kernel,
                ..Finals::default()
            };
            let s = p.summary(7, "n", EndClass::Completed, 700, &finals, None);
            assert_eq!(s.swap_peak, want, "sampled {sampled}, kernel {kernel:?}");
        }
    }
}
