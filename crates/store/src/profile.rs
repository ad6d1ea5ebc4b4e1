//! Job profiles (schema 3): the time series the daemon's sampler records for every running job,
//! the optional per-process detail, and the summary a job gets when it ends.
//!
//! Tables (see docs/store-schema.md for every column):
//! - `samples`: one row per job per sampler tick, keyed `(seq, ts_ms)`.
//! - `process_samples`: the top-N processes of a job per tick (`profile.processes = N`).
//! - `job_summary`: one row per finished job, written in the same transaction that marks the
//!   job ended ([`Store::finish_job`](crate::Store::finish_job)). Its `shipped_at` column is the central store's marker:
//!   NULL until the job (summary and series) is in PostgreSQL.
//!
//! Writes come in batches, one transaction per batch ([`Store::insert_samples`](crate::Store::insert_samples)). Retention
//! ([`Store::apply_retention`](crate::Store::apply_retention)) removes ended jobs older than `profile.retention` and, above
//! `profile.max_db_size`, the series of the oldest ended jobs first.

use rusqlite::{params, Row};

use crate::{exec_cached, JobRecord};

pub use pjw_core::job_state::{EndClass, SampleState, StateFilter};

/// One sample of one job. Counters (`cpu_*`, `io_*`) are cumulative since the job started;
/// gauges are the value at `ts_ms`. `None`: the kernel does not offer the file here (e.g. no
/// PSI in a v1 hierarchy, no swap accounting).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The job (`jobs.seq`).
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    pub state: Option<SampleState>,
    /// CPU time, microseconds.
    pub cpu_user_usec: Option<u64>,
    pub cpu_system_usec: Option<u64>,
    /// Memory charged now (`memory.current` / `memory.usage_in_bytes`), bytes.
    pub mem_current: Option<u64>,
    /// Highest memory charged so far (`memory.peak` / `memory.max_usage_in_bytes`), bytes.
    pub mem_peak: Option<u64>,
    pub mem_anon: Option<u64>,
    pub mem_file: Option<u64>,
    /// Swap used now, bytes.
    pub swap: Option<u64>,
    /// Bytes read from and written to block devices.
    pub io_rbytes: Option<u64>,
    pub io_wbytes: Option<u64>,
    /// Processes and threads in the job now.
    pub procs: Option<u32>,
    pub threads: Option<u32>,
    /// PSI `avg10` (percent), some/full, for cpu, memory and io.
    pub psi_cpu_some: Option<f64>,
    pub psi_cpu_full: Option<f64>,
    pub psi_mem_some: Option<f64>,
    pub psi_mem_full: Option<f64>,
    pub psi_io_some: Option<f64>,
    pub psi_io_full: Option<f64>,
    /// The job's GPUs (NVML, schema 9): the mean utilisation (percent) of those with a reading,
    /// and the sum of their used memory (bytes). None: the job holds no GPU, or NVML is absent
    /// or had no reading of any of them.
    pub gpu_util: Option<f64>,
    pub gpu_mem: Option<u64>,
}

/// One process of a job at one tick (`profile.processes = N`: the top N by CPU and memory).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessSample {
    pub seq: i64,
    pub ts_ms: i64,
    pub pid: u32,
    /// `comm` (executable name, at most 15 bytes).
    pub comm: String,
    /// CPU time since the process started (user + system), microseconds.
    pub cpu_usec: u64,
    /// Resident memory, bytes.
    pub rss: u64,
    pub threads: u32,
}

/// What a finished job did, in one row.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSummary {
    pub seq: i64,
    /// The node it ran on (hostname), so rows shipped to a central store stay attributable.
    pub node: String,
    /// Exit status of the main process (`128 + signal` when killed by a signal); None when
    /// unknown (it never ran, or the daemon could not see it).
    pub exit_status: Option<i32>,
    pub end: EndClass,
    /// Milliseconds spent queued, running (start to end, wall), of which as a backfiller, and
    /// frozen (preempted, suspended or by the memory governor).
    pub queued_ms: i64,
    pub running_ms: i64,
    pub backfill_ms: i64,
    pub frozen_ms: i64,
    /// How many times it was frozen.
    pub freezes: u32,
    pub cpu_user_usec: u64,
    pub cpu_system_usec: u64,
    /// Peak memory (exact, from the kernel's high-water mark) and peak swap, bytes.
    pub mem_peak: u64,
    pub swap_peak: u64,
    pub io_rbytes: u64,
    pub io_wbytes: u64,
    /// Distinct processes and threads it ever had (exact: process events); None without them.
    pub procs_total: Option<u64>,
    pub threads_total: Option<u64>,
    /// Whether those totals are exact (`false`: events were lost or the daemon restarted while
    /// the job ran, so they are a lower bound); None without them.
    pub counts_exact: Option<bool>,
    /// Most processes and threads at once (sampled, or exact with process events).
    pub procs_max: u32,
    pub threads_max: u32,
    /// Samples taken.
    pub samples: u32,
    /// GPU utilisation (percent) over the samples that had one: mean and highest; peak GPU
    /// memory used (bytes). None: no sample had a GPU reading (schema 9).
    pub gpu_util_mean: Option<f64>,
    pub gpu_util_max: Option<f64>,
    pub gpu_mem_peak: Option<u64>,
    /// When it was shipped to the central store (ms since epoch); None: not yet.
    pub shipped_at: Option<i64>,
}

impl JobSummary {
    /// An empty summary for job `seq` (a job that never ran).
    pub fn new(seq: i64, node: &str, end: EndClass) -> JobSummary {
        JobSummary {
            seq,
            node: node.to_string(),
            exit_status: None,
            end,
            queued_ms: 0,
            running_ms: 0,
            backfill_ms: 0,
            frozen_ms: 0,
            freezes: 0,
            cpu_user_usec: 0,
            cpu_system_usec: 0,
            mem_peak: 0,
            swap_peak: 0,
            io_rbytes: 0,
            io_wbytes: 0,
            procs_total: None,
            threads_total: None,
            counts_exact: None,
            procs_max: 0,
            threads_max: 0,
            samples: 0,
            gpu_util_mean: None,
            gpu_util_max: None,
            gpu_mem_peak: None,
            shipped_at: None,
        }
    }
}

/// Which jobs a query wants. Every field set narrows it (AND).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// The job id (`jobs.job_id`); with several runs of one id, all of them.
    pub job_id: Option<String>,
    /// Only this owner (uid). Access control: the daemon sets it for non-admin callers.
    pub uid: Option<u32>,
    /// Only this user name.
    pub user: Option<String>,
    /// Only this job name.
    pub name: Option<String>,
    /// Submitted at or after (ms since epoch), or still live.
    pub since_ms: Option<i64>,
    /// Queued, running (live states) or ended one way.
    pub state: Option<StateFilter>,
    /// At most this many, newest first (0: no limit).
    pub limit: usize,
    /// Only jobs older than this one (`seq` below it): the next page of a listing read in
    /// pages, so that no reader holds a listing whole nor a read transaction while it waits.
    pub before_seq: Option<i64>,
}

/// A job as a report wants it: its record and, once ended, its summary.
#[derive(Clone, Debug, PartialEq)]
pub struct JobProfile {
    pub job: JobRecord,
    pub summary: Option<JobSummary>,
}

/// What retention removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Ended jobs removed entirely (record, summary, series).
    pub jobs: u64,
    /// Sample rows removed (with their jobs, or to stay under the size cap).
    pub samples: u64,
}

const SAMPLE_COLS: &str = "seq, ts_ms, state, cpu_user_usec, cpu_system_usec, mem_current, mem_peak, mem_anon, \
     mem_file, swap, io_rbytes, io_wbytes, procs, threads, psi_cpu_some, psi_cpu_full, psi_mem_some, \
     psi_mem_full, psi_io_some, psi_io_full, gpu_util, gpu_mem";

const SUMMARY_COLS: &str = "seq, node, exit_status, end_class, queued_ms, running_ms, backfill_ms, frozen_ms, \
     freezes, cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, io_rbytes, io_wbytes, procs_total, \
     threads_total, procs_max, threads_max, samples, shipped_at, counts_exact, gpu_util_mean, gpu_util_max, \
     gpu_mem_peak";

fn opt_u64(v: Option<u64>) -> Option<i64> {
    v.map(|x| x.min(i64::MAX as u64) as i64)
}

fn get_u64(r: &Row, i: usize) -> rusqlite::Result<Option<u64>> {
    Ok(r.get::<_, Option<i64>>(i)?.map(|v| v.max(0) as u64))
}

/// A stored word as its type; an unknown word is an error reading the row, never taken as a
/// value (`failed`, no state).
fn word<T: std::str::FromStr<Err = pjw_core::CoreError>>(
    i: usize,
    text: &str,
) -> rusqlite::Result<T> {
    text.parse().map_err(|e: pjw_core::CoreError| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn sample_from_row(r: &Row) -> rusqlite::Result<Sample> {
    Ok(Sample {
        seq: r.get(0)?,
        ts_ms: r.get(1)?,
        state: r
            .get::<_, Option<String>>(2)?
            .map(|s| word(2, &s))
            .transpose()?,
        cpu_user_usec: get_u64(r, 3)?,
        cpu_system_usec: get_u64(r, 4)?,
        mem_current: get_u64(r, 5)?,
        mem_peak: get_u64(r, 6)?,
        mem_anon: get_u64(r, 7)?,
        mem_file: get_u64(r, 8)?,
        swap: get_u64(r, 9)?,
        io_rbytes: get_u64(r, 10)?,
        io_wbytes: get_u64(r, 11)?,
        procs: r.get(12)?,
        threads: r.get(13)?,
        psi_cpu_some: r.get(14)?,
        psi_cpu_full: r.get(15)?,
        psi_mem_some: r.get(16)?,
        psi_mem_full: r.get(17)?,
        psi_io_some: r.get(18)?,
        psi_io_full: r.get(19)?,
        gpu_util: r.get(20)?,
        gpu_mem: get_u64(r, 21)?,
    })
}

fn summary_from_row(r: &Row, off: usize) -> rusqlite::Result<Option<JobSummary>> {
    let Some(seq) = r.get::<_, Option<i64>>(off)? else {
        return Ok(None);
    };
    let end: String = r.get(off + 3)?;
    Ok(Some(JobSummary {
        seq,
        node: r.get(off + 1)?,
        exit_status: r.get(off + 2)?,
        end: word(off + 3, &end)?,
        queued_ms: r.get(off + 4)?,
        running_ms: r.get(off + 5)?,
        backfill_ms: r.get(off + 6)?,
        frozen_ms: r.get(off + 7)?,
        freezes: r.get(off + 8)?,
        cpu_user_usec: get_u64(r, off + 9)?.unwrap_or(0),
        cpu_system_usec: get_u64(r, off + 10)?.unwrap_or(0),
        mem_peak: get_u64(r, off + 11)?.unwrap_or(0),
        swap_peak: get_u64(r, off + 12)?.unwrap_or(0),
        io_rbytes: get_u64(r, off + 13)?.unwrap_or(0),
        io_wbytes: get_u64(r, off + 14)?.unwrap_or(0),
        procs_total: get_u64(r, off + 15)?,
        threads_total: get_u64(r, off + 16)?,
        procs_max: r.get(off + 17)?,
        threads_max: r.get(off + 18)?,
        samples: r.get(off + 19)?,
        shipped_at: r.get(off + 20)?,
        counts_exact: r.get(off + 21)?,
        gpu_util_mean: r.get(off + 22)?,
        gpu_util_max: r.get(off + 23)?,
        gpu_mem_peak: get_u64(r, off + 24)?,
    }))
}

fn insert_summary(tx: &rusqlite::Connection, s: &JobSummary) -> rusqlite::Result<()> {
    exec_cached(
        tx,
        &format!(
            "INSERT OR REPLACE INTO job_summary ({SUMMARY_COLS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)"
        ),
        params![
            s.seq,
            s.node,
            s.exit_status,
            s.end.as_str(),
            s.queued_ms,
            s.running_ms,
            s.backfill_ms,
            s.frozen_ms,
            s.freezes,
            opt_u64(Some(s.cpu_user_usec)),
            opt_u64(Some(s.cpu_system_usec)),
            opt_u64(Some(s.mem_peak)),
            opt_u64(Some(s.swap_peak)),
            opt_u64(Some(s.io_rbytes)),
            opt_u64(Some(s.io_wbytes)),
            opt_u64(s.procs_total),
            opt_u64(s.threads_total),
            s.procs_max,
            s.threads_max,
            s.samples,
            s.shipped_at,
            s.counts_exact,
            s.gpu_util_mean,
            s.gpu_util_max,
            opt_u64(s.gpu_mem_peak),
        ],
    )?;
    Ok(())
}

mod read;
mod write;

#[cfg(test)]
mod tests;
