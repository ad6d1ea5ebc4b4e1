//! Job profiles (schema 3): the time series the daemon's sampler records for every running job,
//! the optional per-process detail, and the summary a job gets when it ends.
//!
//! Tables (see docs/store-schema.md for every column):
//! - `samples`: one row per job per sampler tick, keyed `(seq, ts_ms)`.
//! - `process_samples`: the top-N processes of a job per tick (`profile.processes = N`).
//! - `job_summary`: one row per finished job, written in the same transaction that marks the
//!   job ended ([`Store::finish_job`]). Its `shipped_at` column is the central store's marker:
//!   NULL until the job (summary and series) is in PostgreSQL.
//!
//! Writes come in batches, one transaction per batch ([`Store::insert_samples`]). Retention
//! ([`Store::apply_retention`]) removes ended jobs older than `profile.retention` and, above
//! `profile.max_db_size`, the series of the oldest ended jobs first.

use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use crate::{exec_cached, JobRecord, Store, StoreError};

/// What a running job was doing when sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SampleState {
    /// A primary on its own CPUs.
    Running,
    /// A backfiller on borrowed CPUs (idle class).
    Backfill,
    /// Frozen: preempted, suspended or frozen by the memory governor.
    Frozen,
}

impl SampleState {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            SampleState::Running => "running",
            SampleState::Backfill => "backfill",
            SampleState::Frozen => "frozen",
        }
    }
    /// From the stored text.
    pub fn parse(s: &str) -> Option<SampleState> {
        match s {
            "running" => Some(SampleState::Running),
            "backfill" => Some(SampleState::Backfill),
            "frozen" => Some(SampleState::Frozen),
            _ => None,
        }
    }
}

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

/// How a job ended, in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndClass {
    /// Its processes ended on their own.
    Completed,
    /// Killed by pjw or a user (`pjw kill`).
    Killed,
    /// Processes OOM-killed inside its memory limit (or at the partition limit).
    Oom,
    /// Expired in the queue, never ran.
    Expired,
    /// Never ran or ended abnormally: start failed, client left the queue, start interrupted.
    Failed,
}

impl EndClass {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            EndClass::Completed => "completed",
            EndClass::Killed => "killed",
            EndClass::Oom => "oom",
            EndClass::Expired => "expired",
            EndClass::Failed => "failed",
        }
    }
    /// From the stored text.
    pub fn parse(s: &str) -> Option<EndClass> {
        match s {
            "completed" => Some(EndClass::Completed),
            "killed" => Some(EndClass::Killed),
            "oom" => Some(EndClass::Oom),
            "expired" => Some(EndClass::Expired),
            "failed" => Some(EndClass::Failed),
            _ => None,
        }
    }
    /// All of them, for `--state` help and validation.
    pub const ALL: [EndClass; 5] = [
        EndClass::Completed,
        EndClass::Killed,
        EndClass::Oom,
        EndClass::Expired,
        EndClass::Failed,
    ];
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
    /// `queued`, `running` (live states) or an [`EndClass`] word.
    pub state: Option<String>,
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

fn sample_from_row(r: &Row) -> rusqlite::Result<Sample> {
    Ok(Sample {
        seq: r.get(0)?,
        ts_ms: r.get(1)?,
        state: r
            .get::<_, Option<String>>(2)?
            .and_then(|s| SampleState::parse(&s)),
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
        end: EndClass::parse(&end).unwrap_or(EndClass::Failed),
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

impl Store {
    /// Write a batch of samples in one transaction. A second sample of a job at the same
    /// millisecond replaces the first.
    pub fn insert_samples(&mut self, batch: &[Sample]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        {
            let mut st = tx
                .prepare_cached(&format!(
                    "INSERT OR REPLACE INTO samples ({SAMPLE_COLS})
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)"
                ))
                .map_err(err)?;
            for s in batch {
                st.execute(params![
                    s.seq,
                    s.ts_ms,
                    s.state.map(SampleState::as_str),
                    opt_u64(s.cpu_user_usec),
                    opt_u64(s.cpu_system_usec),
                    opt_u64(s.mem_current),
                    opt_u64(s.mem_peak),
                    opt_u64(s.mem_anon),
                    opt_u64(s.mem_file),
                    opt_u64(s.swap),
                    opt_u64(s.io_rbytes),
                    opt_u64(s.io_wbytes),
                    s.procs,
                    s.threads,
                    s.psi_cpu_some,
                    s.psi_cpu_full,
                    s.psi_mem_some,
                    s.psi_mem_full,
                    s.psi_io_some,
                    s.psi_io_full,
                    s.gpu_util,
                    opt_u64(s.gpu_mem),
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Write a batch of per-process rows in one transaction.
    pub fn insert_process_samples(&mut self, batch: &[ProcessSample]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO process_samples (seq, ts_ms, pid, comm, cpu_usec, rss, threads)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(err)?;
            for p in batch {
                st.execute(params![
                    p.seq,
                    p.ts_ms,
                    p.pid,
                    p.comm,
                    opt_u64(Some(p.cpu_usec)),
                    opt_u64(Some(p.rss)),
                    p.threads
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Record a finished job: its summary, and `jobs.state = 'ended'` with the reason, in one
    /// transaction (a report never sees an ended job without its summary).
    pub fn finish_job(
        &mut self,
        ended_ms: i64,
        reason: &str,
        summary: &JobSummary,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        exec_cached(
            &tx,
            "UPDATE jobs SET state = 'ended', ended_ms = ?2, end_reason = ?3 WHERE seq = ?1",
            params![summary.seq, ended_ms, reason],
        )
        .map_err(err)?;
        insert_summary(&tx, summary).map_err(err)?;
        tx.commit().map_err(err)
    }

    /// Fill in the exit status of a finished job (it can arrive just after the job was recorded
    /// ended) and, for a job recorded `completed`, turn a non-zero status into `failed`.
    pub fn set_exit_status(&mut self, seq: i64, status: i32) -> Result<(), StoreError> {
        exec_cached(
            &self.conn,
                "UPDATE job_summary SET exit_status = ?2,
                     end_class = CASE WHEN end_class = 'completed' AND ?2 <> 0 THEN 'failed' ELSE end_class END
                 WHERE seq = ?1 AND exit_status IS NULL",
                params![seq, status],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// The summary of a finished job.
    pub fn summary(&self, seq: i64) -> Result<Option<JobSummary>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {SUMMARY_COLS} FROM job_summary WHERE seq = ?1"),
                [seq],
                |r| summary_from_row(r, 0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(self.err())
    }

    /// A job's samples in time order, from `since_ms` on (all with None).
    pub fn samples(&self, seq: i64, since_ms: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SAMPLE_COLS} FROM samples WHERE seq = ?1 AND ts_ms >= ?2 ORDER BY ts_ms"
            ))
            .map_err(self.err())?;
        let rows = st
            .query_map(params![seq, since_ms.unwrap_or(i64::MIN)], sample_from_row)
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// At most `limit` of a job's samples after `after_ms` (all when None), in time order: a
    /// page of a series read in pages.
    pub fn samples_page(
        &self,
        seq: i64,
        after_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Sample>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SAMPLE_COLS} FROM samples WHERE seq = ?1 AND ts_ms > ?2 ORDER BY ts_ms LIMIT ?3"
            ))
            .map_err(self.err())?;
        let rows = st
            .query_map(
                params![seq, after_ms.unwrap_or(i64::MIN), limit as i64],
                sample_from_row,
            )
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// A job's per-process rows of the next ticks after `after_ms` (all when None), whole ticks
    /// only, about `limit` rows (more only when one tick has more), in the order of
    /// [`Store::process_samples`]: a page of them read in pages.
    pub fn process_samples_page(
        &self,
        seq: i64,
        after_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<ProcessSample>, StoreError> {
        let after = after_ms.unwrap_or(i64::MIN);
        // The last tick of the page: the one of the limit-th row (a tick is never cut).
        let last: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT MAX(ts_ms) FROM (SELECT ts_ms FROM process_samples
                 WHERE seq = ?1 AND ts_ms > ?2 ORDER BY ts_ms LIMIT ?3)",
            )
            .and_then(|mut st| st.query_row(params![seq, after, limit.max(1) as i64], |r| r.get(0)))
            .map_err(self.err())?;
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT seq, ts_ms, pid, comm, cpu_usec, rss, threads FROM process_samples
                 WHERE seq = ?1 AND ts_ms > ?2 AND ts_ms <= ?3 ORDER BY ts_ms, cpu_usec DESC, pid",
            )
            .map_err(self.err())?;
        let rows = st
            .query_map(params![seq, after, last], |r| {
                Ok(ProcessSample {
                    seq: r.get(0)?,
                    ts_ms: r.get(1)?,
                    pid: r.get(2)?,
                    comm: r.get(3)?,
                    cpu_usec: get_u64(r, 4)?.unwrap_or(0),
                    rss: get_u64(r, 5)?.unwrap_or(0),
                    threads: r.get(6)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// A job's per-process rows, in time order, largest CPU first within a tick.
    pub fn process_samples(&self, seq: i64) -> Result<Vec<ProcessSample>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT seq, ts_ms, pid, comm, cpu_usec, rss, threads FROM process_samples
                 WHERE seq = ?1 ORDER BY ts_ms, cpu_usec DESC, pid",
            )
            .map_err(self.err())?;
        let rows = st
            .query_map([seq], |r| {
                Ok(ProcessSample {
                    seq: r.get(0)?,
                    ts_ms: r.get(1)?,
                    pid: r.get(2)?,
                    comm: r.get(3)?,
                    cpu_usec: get_u64(r, 4)?.unwrap_or(0),
                    rss: get_u64(r, 5)?.unwrap_or(0),
                    threads: r.get(6)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// Jobs matching `f`, newest first, each with its summary once ended.
    pub fn find_jobs(&self, f: &JobFilter) -> Result<Vec<JobProfile>, StoreError> {
        let mut conds = Vec::new();
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        use rusqlite::types::Value;
        if let Some(id) = &f.job_id {
            args.push(Value::Text(id.clone()));
            conds.push(format!("j.job_id = ?{}", args.len()));
        }
        if let Some(uid) = f.uid {
            args.push(Value::Integer(uid as i64));
            conds.push(format!("j.uid = ?{}", args.len()));
        }
        if let Some(user) = &f.user {
            args.push(Value::Text(user.clone()));
            conds.push(format!("j.user = ?{}", args.len()));
        }
        if let Some(name) = &f.name {
            args.push(Value::Text(name.clone()));
            conds.push(format!("j.name = ?{}", args.len()));
        }
        if let Some(before) = f.before_seq {
            args.push(Value::Integer(before));
            conds.push(format!("j.seq < ?{}", args.len()));
        }
        if let Some(since) = f.since_ms {
            args.push(Value::Integer(since));
            conds.push(format!(
                "(j.submitted_ms >= ?{n} OR j.ended_ms >= ?{n} OR j.state <> 'ended')",
                n = args.len()
            ));
        }
        if let Some(state) = &f.state {
            if state == "running" {
                conds.push("j.state IN ('starting', 'running')".to_string());
            } else {
                args.push(Value::Text(state.clone()));
                let n = args.len();
                conds.push(if state == "queued" {
                    format!("j.state = ?{n}")
                } else {
                    format!("s.end_class = ?{n}")
                });
            }
        }
        let wher = if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conds.join(" AND "))
        };
        let limit = if f.limit > 0 {
            format!("LIMIT {}", f.limit)
        } else {
            String::new()
        };
        let scols = SUMMARY_COLS
            .split(", ")
            .map(|c| format!("s.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT j.seq, {scols} FROM jobs j LEFT JOIN job_summary s ON s.seq = j.seq
             {wher} ORDER BY j.seq DESC {limit}"
        );
        let mut st = self.conn.prepare(&sql).map_err(self.err())?;
        let rows = st
            .query_map(params_from_iter(args), |r| {
                Ok((r.get::<_, i64>(0)?, summary_from_row(r, 1)?))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, summary) = row.map_err(self.err())?;
            if let Some(job) = self.job(seq)? {
                out.push(JobProfile { job, summary });
            }
        }
        Ok(out)
    }

    /// Finished jobs not yet in the central store, oldest first (for the shipper).
    pub fn unshipped(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY_COLS} FROM job_summary WHERE shipped_at IS NULL ORDER BY seq LIMIT ?1"
            ))
            .map_err(self.err())?;
        let rows = st
            .query_map([limit as i64], |r| summary_from_row(r, 0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            out.extend(r.map_err(self.err())?);
        }
        Ok(out)
    }

    /// Mark finished jobs as shipped to the central store at `at_ms`.
    pub fn mark_shipped(&mut self, seqs: &[i64], at_ms: i64) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        for s in seqs {
            tx.execute(
                "UPDATE job_summary SET shipped_at = ?2 WHERE seq = ?1",
                params![s, at_ms],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Bytes the database's pages hold (page count less free pages, times the page size).
    pub fn used_bytes(&self) -> Result<u64, StoreError> {
        let q = |p: &str| -> Result<i64, StoreError> {
            self.conn
                .pragma_query_value(None, p, |r| r.get(0))
                .map_err(self.err())
        };
        let pages = q("page_count")? - q("freelist_count")?;
        Ok((pages.max(0) as u64) * q("page_size")?.max(0) as u64)
    }

    /// Retention: remove ended jobs (record, summary, series) that ended before
    /// `now_ms - max_age_ms`; then, while the database holds more than `max_bytes`, remove the
    /// series of the oldest ended jobs (their records and summaries stay). With
    /// `keep_unshipped`, jobs not yet in the central store are never touched. Live jobs are
    /// never touched.
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        max_age_ms: Option<i64>,
        max_bytes: Option<u64>,
        keep_unshipped: bool,
    ) -> Result<Pruned, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let guard = if keep_unshipped {
            "AND NOT EXISTS (SELECT 1 FROM job_summary s WHERE s.seq = jobs.seq AND s.shipped_at IS NULL)"
        } else {
            ""
        };
        let mut pruned = Pruned::default();
        if let Some(age) = max_age_ms {
            let cutoff = now_ms.saturating_sub(age);
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(err)?;
            let old = format!(
                "SELECT seq FROM jobs WHERE state = 'ended' AND COALESCE(ended_ms, submitted_ms) < ?1 {guard}"
            );
            pruned.samples += tx
                .execute(
                    &format!("DELETE FROM samples WHERE seq IN ({old})"),
                    [cutoff],
                )
                .map_err(err)? as u64;
            tx.execute(
                &format!("DELETE FROM process_samples WHERE seq IN ({old})"),
                [cutoff],
            )
            .map_err(err)?;
            tx.execute(
                &format!("DELETE FROM thread_samples WHERE seq IN ({old})"),
                [cutoff],
            )
            .map_err(err)?;
            tx.execute(
                &format!("DELETE FROM job_summary WHERE seq IN ({old})"),
                [cutoff],
            )
            .map_err(err)?;
            for side in ["job_gpus", "job_io", "job_bind", "job_steps"] {
                tx.execute(
                    &format!("DELETE FROM {side} WHERE seq IN ({old})"),
                    [cutoff],
                )
                .map_err(err)?;
            }
            pruned.jobs += tx
                .execute(&format!("DELETE FROM jobs WHERE seq IN ({old})"), [cutoff])
                .map_err(err)? as u64;
            tx.commit().map_err(err)?;
        }
        if let Some(cap) = max_bytes {
            // Oldest ended jobs' series first, one job per transaction.
            while self.used_bytes()? > cap {
                let victims: Vec<i64> = {
                    let mut st = self
                        .conn
                        .prepare(&format!(
                            "SELECT seq FROM jobs WHERE state = 'ended' {guard}
                               AND (EXISTS (SELECT 1 FROM samples x WHERE x.seq = jobs.seq)
                                 OR EXISTS (SELECT 1 FROM process_samples p WHERE p.seq = jobs.seq)
                                 OR EXISTS (SELECT 1 FROM thread_samples t WHERE t.seq = jobs.seq))
                             ORDER BY seq LIMIT 1"
                        ))
                        .map_err(err)?;
                    let rows = st.query_map([], |r| r.get(0)).map_err(err)?;
                    rows.collect::<Result<_, _>>().map_err(err)?
                };
                if victims.is_empty() {
                    break;
                }
                let tx = self
                    .conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(err)?;
                for v in &victims {
                    pruned.samples += tx
                        .execute("DELETE FROM samples WHERE seq = ?1", [v])
                        .map_err(err)? as u64;
                    tx.execute("DELETE FROM process_samples WHERE seq = ?1", [v])
                        .map_err(err)?;
                    tx.execute("DELETE FROM thread_samples WHERE seq = ?1", [v])
                        .map_err(err)?;
                }
                tx.commit().map_err(err)?;
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoredState;
    use pjw_core::CpuSet;

    fn job(id: &str, user: &str, uid: u32, name: &str, submitted_ms: i64) -> JobRecord {
        JobRecord {
            seq: 0,
            job_id: id.into(),
            name: name.into(),
            uid,
            gid: uid,
            user: user.into(),
            ncpus: 1,
            cpus: CpuSet::parse_list("0").unwrap(),
            mems: CpuSet::parse_list("0").unwrap(),
            mem_limit: None,
            pid: Some(1),
            pid_start: Some(1),
            cgroup: format!("job-{id}"),
            argv: vec!["x".into()],
            state: StoredState::Running,
            submitted_ms,
            started_ms: Some(submitted_ms),
            ended_ms: None,
            end_reason: None,
            priority: 10,
            placement: pjw_core::sched::Placement::Any,
            exclusive: false,
            role: crate::StoredRole::Primary,
        }
    }

    fn samples(seq: i64, n: i64) -> Vec<Sample> {
        (0..n)
            .map(|i| Sample {
                seq,
                ts_ms: 1000 * i,
                state: Some(SampleState::Running),
                cpu_user_usec: Some(i as u64 * 1000),
                mem_current: Some(1 << 20),
                psi_cpu_some: Some(0.5),
                ..Sample::default()
            })
            .collect()
    }

    /// Three users' jobs, two ended (completed, oom), one running.
    fn fill(s: &mut Store) -> (i64, i64, i64) {
        let a = s
            .insert_job(&job("1", "alice", 1000, "sim", 1_000))
            .unwrap();
        let b = s.insert_job(&job("2", "bob", 1001, "sim", 2_000)).unwrap();
        let c = s
            .insert_job(&job("3", "alice", 1000, "post", 3_000))
            .unwrap();
        for seq in [a, b, c] {
            s.insert_samples(&samples(seq, 5)).unwrap();
        }
        s.finish_job(
            5_000,
            "exited",
            &JobSummary::new(a, "n1", EndClass::Completed),
        )
        .unwrap();
        s.finish_job(
            6_000,
            "exited; 1 OOM",
            &JobSummary::new(b, "n1", EndClass::Oom),
        )
        .unwrap();
        (a, b, c)
    }

    #[test]
    fn filters_narrow_the_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let (a, b, c) = fill(&mut s);
        let seqs = |f: JobFilter| -> Vec<i64> {
            s.find_jobs(&f).unwrap().iter().map(|p| p.job.seq).collect()
        };
        let table: Vec<(JobFilter, Vec<i64>)> = vec![
            (JobFilter::default(), vec![c, b, a]),
            (
                JobFilter {
                    uid: Some(1000),
                    ..Default::default()
                },
                vec![c, a],
            ),
            (
                JobFilter {
                    user: Some("bob".into()),
                    ..Default::default()
                },
                vec![b],
            ),
            (
                JobFilter {
                    name: Some("sim".into()),
                    ..Default::default()
                },
                vec![b, a],
            ),
            (
                JobFilter {
                    job_id: Some("3".into()),
                    ..Default::default()
                },
                vec![c],
            ),
            (
                JobFilter {
                    state: Some("oom".into()),
                    ..Default::default()
                },
                vec![b],
            ),
            (
                JobFilter {
                    state: Some("running".into()),
                    ..Default::default()
                },
                vec![c],
            ),
            (
                JobFilter {
                    state: Some("completed".into()),
                    uid: Some(1001),
                    ..Default::default()
                },
                vec![],
            ),
            // Since 5.5 s: b ended after, c is live; a ended before.
            (
                JobFilter {
                    since_ms: Some(5_500),
                    ..Default::default()
                },
                vec![c, b],
            ),
            (
                JobFilter {
                    limit: 1,
                    ..Default::default()
                },
                vec![c],
            ),
        ];
        for (f, want) in table {
            assert_eq!(seqs(f.clone()), want, "{f:?}");
        }
        let p = s
            .find_jobs(&JobFilter {
                job_id: Some("2".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(p[0].summary.as_ref().unwrap().end, EndClass::Oom);
        assert_eq!(p[0].job.end_reason.as_deref(), Some("exited; 1 OOM"));
        assert_eq!(s.samples(a, Some(3000)).unwrap().len(), 2);
    }

    #[test]
    fn process_rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let seq = s.insert_job(&job("1", "alice", 1000, "sim", 0)).unwrap();
        let rows = vec![
            ProcessSample {
                seq,
                ts_ms: 5,
                pid: 10,
                comm: "a".into(),
                cpu_usec: 1,
                rss: 2,
                threads: 1,
            },
            ProcessSample {
                seq,
                ts_ms: 5,
                pid: 11,
                comm: "b".into(),
                cpu_usec: 9,
                rss: 2,
                threads: 3,
            },
        ];
        s.insert_process_samples(&rows).unwrap();
        let got = s.process_samples(seq).unwrap();
        assert_eq!(got, vec![rows[1].clone(), rows[0].clone()]);
    }

    /// Reports read in pages (issue 25, item 7): jobs by seq, samples by time, process rows by
    /// whole ticks; the pages put together are the whole, in order.
    #[test]
    fn pages_put_together_are_the_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let (a, b, c) = fill(&mut s);
        let page = |before| {
            s.find_jobs(&JobFilter {
                limit: 2,
                before_seq: before,
                ..Default::default()
            })
            .unwrap()
            .iter()
            .map(|p| p.job.seq)
            .collect::<Vec<_>>()
        };
        assert_eq!(page(None), vec![c, b]);
        assert_eq!(page(Some(b)), vec![a]);
        assert_eq!(page(Some(a)), Vec::<i64>::new());
        let whole: Vec<i64> = s
            .samples(a, None)
            .unwrap()
            .iter()
            .map(|x| x.ts_ms)
            .collect();
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let p = s.samples_page(a, after, 2).unwrap();
            if p.is_empty() {
                break;
            }
            assert!(p.len() <= 2);
            after = p.last().map(|x| x.ts_ms);
            paged.extend(p.iter().map(|x| x.ts_ms));
        }
        assert_eq!(paged, whole);
        // Process rows: 3 ticks of 2, 1 and 3 rows; pages of about 2 rows never cut a tick.
        let row = |ts_ms, pid, cpu_usec| ProcessSample {
            seq: b,
            ts_ms,
            pid,
            comm: "p".into(),
            cpu_usec,
            rss: 0,
            threads: 1,
        };
        s.insert_process_samples(&[
            row(10, 1, 5),
            row(10, 2, 9),
            row(20, 1, 1),
            row(30, 1, 1),
            row(30, 2, 3),
            row(30, 3, 2),
        ])
        .unwrap();
        let whole = s.process_samples(b).unwrap();
        let mut paged: Vec<ProcessSample> = Vec::new();
        let mut ticks = Vec::new();
        let mut after = None;
        loop {
            let p = s.process_samples_page(b, after, 2).unwrap();
            if p.is_empty() {
                break;
            }
            ticks.push(p.iter().map(|r| r.ts_ms).collect::<Vec<_>>());
            after = p.last().map(|r| r.ts_ms);
            paged.extend(p);
        }
        assert_eq!(paged, whole);
        assert_eq!(ticks, vec![vec![10, 10], vec![20, 30, 30, 30]]);
    }

    #[test]
    fn retention_removes_old_ended_jobs_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let (a, b, c) = fill(&mut s);
        // a ended at 5 s, b at 6 s. At 10 s with 4.5 s retention, a goes.
        let p = s.apply_retention(10_000, Some(4_500), None, false).unwrap();
        assert_eq!(
            p,
            Pruned {
                jobs: 1,
                samples: 5
            }
        );
        assert!(s.job(a).unwrap().is_none());
        assert!(s.summary(a).unwrap().is_none());
        assert!(s.samples(a, None).unwrap().is_empty());
        assert!(s.job(b).unwrap().is_some());
        // The live job stays whatever its age.
        let p = s.apply_retention(1_000_000, Some(1), None, true).unwrap();
        // b is not shipped yet: kept.
        assert_eq!(p, Pruned::default());
        assert_eq!(
            s.unshipped(10)
                .unwrap()
                .iter()
                .map(|x| x.seq)
                .collect::<Vec<_>>(),
            vec![b]
        );
        s.mark_shipped(&[b], 7_000).unwrap();
        assert!(s.unshipped(10).unwrap().is_empty());
        assert_eq!(s.summary(b).unwrap().unwrap().shipped_at, Some(7_000));
        let p = s.apply_retention(1_000_000, Some(1), None, true).unwrap();
        assert_eq!(p.jobs, 1);
        assert!(s.job(c).unwrap().is_some());
        assert_eq!(s.samples(c, None).unwrap().len(), 5);
    }

    #[test]
    fn size_cap_drops_series_of_oldest_ended_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let mut ended = Vec::new();
        for i in 0..6 {
            let seq = s
                .insert_job(&job(&i.to_string(), "alice", 1000, "sim", i))
                .unwrap();
            s.insert_samples(&samples(seq, 2000)).unwrap();
            s.finish_job(
                i + 1,
                "exited",
                &JobSummary::new(seq, "n1", EndClass::Completed),
            )
            .unwrap();
            ended.push(seq);
        }
        let live = s
            .insert_job(&job("live", "alice", 1000, "sim", 99))
            .unwrap();
        s.insert_samples(&samples(live, 2000)).unwrap();
        let before = s.used_bytes().unwrap();
        let cap = before / 2;
        let p = s.apply_retention(100, None, Some(cap), false).unwrap();
        assert!(
            s.used_bytes().unwrap() <= cap,
            "{} > {cap}",
            s.used_bytes().unwrap()
        );
        assert!(p.samples > 0 && p.jobs == 0);
        // Oldest first: the first job lost its series, the newest ended one kept it; records and
        // summaries stay; the live job is untouched.
        assert!(s.samples(ended[0], None).unwrap().is_empty());
        assert_eq!(s.samples(ended[5], None).unwrap().len(), 2000);
        assert!(s.summary(ended[0]).unwrap().is_some());
        assert_eq!(s.samples(live, None).unwrap().len(), 2000);
    }
}
