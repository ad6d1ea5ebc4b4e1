//! Live figures for `pjw status` and `pjw top`: each job's CPU time, memory and tasks as of
//! the moment of asking (within [`FRESH`]), read off the engine thread.
//!
//! A `status` request that finds the last pass older than [`FRESH`] starts one: the engine
//! hands the started jobs' cgroup names to a blocking thread, which reads three small files per
//! job (`cpu.stat` or cpuacct, memory usage, `pids.current`) with a copy of the driver that
//! re-reads the files the sampler keeps open and keeps none of its own
//! ([`pjw_cgroup::Driver::reader_beside_owner`]); the readings come back as an event, the
//! engine keeps them and answers every request that waited for that pass. Requests arriving
//! while a pass runs wait for it; those within [`FRESH`] of its end are answered at once. So a
//! node costs at most two passes a second however many terminals run `pjw top`, none while
//! nobody asks, and the engine thread reads no file for it (docs/decisions.md (bp)).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// How old the last pass may be for a request to be answered from it.
pub const FRESH: Duration = Duration::from_millis(500);

/// How long requests wait for a pass before they are answered from what the engine has (a
/// read hung in the kernel); the pass's readings are still taken when it returns.
pub const WAIT: Duration = Duration::from_secs(2);

/// One job's figures from one pass (None: the file could not be read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// When it was read.
    pub at: Instant,
    /// CPU time used (µs, user + system).
    pub cpu_usec: Option<u64>,
    /// Memory charged (bytes).
    pub mem_bytes: Option<u64>,
    /// Tasks (threads) in the job (`pids.current`).
    pub tasks: Option<u64>,
}

/// Reads one job's figures by its cgroup name; runs on a blocking thread.
pub type Reader = Arc<dyn Fn(&str) -> Reading + Send + Sync>;

/// The reader over a real driver: three reads per job, none per process.
pub fn driver_reader(driver: &pjw_cgroup::Driver) -> Reader {
    let d = driver.reader_beside_owner();
    Arc::new(move |cgroup: &str| Reading {
        cpu_usec: d.cpu_time(cgroup).ok().map(|c| c.user_usec + c.system_usec),
        mem_bytes: d.memory_usage(cgroup).ok(),
        tasks: d.pids_current(cgroup).ok().flatten(),
        at: Instant::now(),
    })
}

/// Read every job of `jobs` (sequence, cgroup name) with `reader`.
pub fn pass(reader: &Reader, jobs: Vec<(i64, String)>) -> Vec<(i64, Reading)> {
    jobs.into_iter()
        .map(|(seq, cgroup)| (seq, reader(&cgroup)))
        .collect()
}
