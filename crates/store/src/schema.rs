//! The schema: its version and the numbered migrations that build it (documented at the top
//! of the crate), applied in one transaction each when the store opens.

use crate::{Store, StoreError};

/// Current schema version.
pub const SCHEMA_VERSION: i64 = 13;

pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: jobs and meta.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
     CREATE TABLE jobs (
         seq          INTEGER PRIMARY KEY AUTOINCREMENT,
         job_id       TEXT NOT NULL,
         name         TEXT NOT NULL,
         uid          INTEGER NOT NULL,
         gid          INTEGER NOT NULL,
         user         TEXT NOT NULL,
         ncpus        INTEGER NOT NULL,
         cpus         TEXT NOT NULL,
         mems         TEXT NOT NULL,
         mem_limit    INTEGER,
         pid          INTEGER,
         pid_start    INTEGER,
         cgroup       TEXT NOT NULL,
         argv         TEXT NOT NULL,
         state        TEXT NOT NULL,
         submitted_ms INTEGER NOT NULL,
         started_ms   INTEGER,
         ended_ms     INTEGER,
         end_reason   TEXT
     );
     CREATE UNIQUE INDEX jobs_live_id ON jobs(job_id) WHERE state <> 'ended';",
    // 2: the node queue: priority, placement, whole-node jobs, and the role of a running job.
    "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 10;
     ALTER TABLE jobs ADD COLUMN placement TEXT NOT NULL DEFAULT 'any';
     ALTER TABLE jobs ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE jobs ADD COLUMN role TEXT NOT NULL DEFAULT 'primary';",
    // 3: job profiles: samples, per-process detail, the summary of a finished job.
    "CREATE TABLE samples (
         seq             INTEGER NOT NULL,
         ts_ms           INTEGER NOT NULL,
         state           TEXT,
         cpu_user_usec   INTEGER,
         cpu_system_usec INTEGER,
         mem_current     INTEGER,
         mem_peak        INTEGER,
         mem_anon        INTEGER,
         mem_file        INTEGER,
         swap            INTEGER,
         io_rbytes       INTEGER,
         io_wbytes       INTEGER,
         procs           INTEGER,
         threads         INTEGER,
         psi_cpu_some    REAL,
         psi_cpu_full    REAL,
         psi_mem_some    REAL,
         psi_mem_full    REAL,
         psi_io_some     REAL,
         psi_io_full     REAL,
         PRIMARY KEY (seq, ts_ms)
     ) WITHOUT ROWID;
     CREATE TABLE process_samples (
         seq      INTEGER NOT NULL,
         ts_ms    INTEGER NOT NULL,
         pid      INTEGER NOT NULL,
         comm     TEXT NOT NULL,
         cpu_usec INTEGER NOT NULL,
         rss      INTEGER NOT NULL,
         threads  INTEGER NOT NULL,
         PRIMARY KEY (seq, ts_ms, pid)
     ) WITHOUT ROWID;
     CREATE TABLE job_summary (
         seq             INTEGER PRIMARY KEY,
         node            TEXT NOT NULL,
         exit_status     INTEGER,
         end_class       TEXT NOT NULL,
         queued_ms       INTEGER NOT NULL DEFAULT 0,
         running_ms      INTEGER NOT NULL DEFAULT 0,
         backfill_ms     INTEGER NOT NULL DEFAULT 0,
         frozen_ms       INTEGER NOT NULL DEFAULT 0,
         freezes         INTEGER NOT NULL DEFAULT 0,
         cpu_user_usec   INTEGER NOT NULL DEFAULT 0,
         cpu_system_usec INTEGER NOT NULL DEFAULT 0,
         mem_peak        INTEGER NOT NULL DEFAULT 0,
         swap_peak       INTEGER NOT NULL DEFAULT 0,
         io_rbytes       INTEGER NOT NULL DEFAULT 0,
         io_wbytes       INTEGER NOT NULL DEFAULT 0,
         procs_total     INTEGER,
         threads_total   INTEGER,
         procs_max       INTEGER NOT NULL DEFAULT 0,
         threads_max     INTEGER NOT NULL DEFAULT 0,
         samples         INTEGER NOT NULL DEFAULT 0,
         shipped_at      INTEGER
     );
     CREATE INDEX job_summary_unshipped ON job_summary(seq) WHERE shipped_at IS NULL;
     CREATE INDEX jobs_ended ON jobs(ended_ms) WHERE state = 'ended';
     CREATE INDEX jobs_uid ON jobs(uid, seq);",
    // 4: whether a finished job's process counts are exact (no process events lost).
    "ALTER TABLE job_summary ADD COLUMN counts_exact INTEGER;",
    // 5: job starter mode (owner other than the caller, the WLM's id) and per-job /tmp.
    "CREATE TABLE job_starter (
         seq        INTEGER PRIMARY KEY,
         wlm        TEXT,
         client_uid INTEGER NOT NULL,
         tmp_size   INTEGER,
         tmpdir     TEXT
     );",
    // 6: the GPUs a job asked for and holds (recovery must never hand one out twice).
    "CREATE TABLE job_gpus (
         seq   INTEGER PRIMARY KEY,
         ngpus INTEGER NOT NULL,
         gpus  TEXT NOT NULL
     );",
    // 7: a job's block I/O weight and limits, as pjw_core::io_limits::JobIo::summary writes them.
    "CREATE TABLE job_io (
         seq INTEGER PRIMARY KEY,
         io  TEXT NOT NULL
     );",
    // 8: the thread binding a job asked for (`pjw run --bind`), over the node's default.
    "CREATE TABLE job_bind (
         seq  INTEGER PRIMARY KEY,
         mode TEXT NOT NULL
     );",
    // 9: per-job GPU utilisation and memory, sampled through NVML (nullable: most jobs and
    // most nodes have none).
    "ALTER TABLE samples ADD COLUMN gpu_util REAL;
     ALTER TABLE samples ADD COLUMN gpu_mem INTEGER;
     ALTER TABLE job_summary ADD COLUMN gpu_util_mean REAL;
     ALTER TABLE job_summary ADD COLUMN gpu_util_max REAL;
     ALTER TABLE job_summary ADD COLUMN gpu_mem_peak INTEGER;",
    // 10: a job's steps (`pjw run` from inside it; module `steps`).
    "CREATE TABLE job_steps (
         seq         INTEGER NOT NULL,
         step        INTEGER NOT NULL,
         name        TEXT NOT NULL,
         uid         INTEGER NOT NULL,
         cpus        TEXT NOT NULL,
         pid         INTEGER NOT NULL,
         started_ms  INTEGER NOT NULL,
         ended_ms    INTEGER,
         exit_status INTEGER,
         PRIMARY KEY (seq, step)
     ) WITHOUT ROWID;",
    // 11: per-thread profiles: the top N threads of each job per tick (`profile.threads`).
    "CREATE TABLE thread_samples (
         seq        INTEGER NOT NULL,
         ts_ms      INTEGER NOT NULL,
         tid        INTEGER NOT NULL,
         pid        INTEGER NOT NULL,
         comm       TEXT NOT NULL,
         cpu_usec   INTEGER NOT NULL,
         run_usec   INTEGER NOT NULL,
         wait_usec  INTEGER NOT NULL,
         span_usec  INTEGER NOT NULL,
         cpu        INTEGER NOT NULL,
         migrations INTEGER,
         pin        TEXT,
         PRIMARY KEY (seq, ts_ms, tid)
     ) WITHOUT ROWID;",
    // 12: a job's time limit (`pjw run --time`), seconds: a side table, only jobs with one.
    "CREATE TABLE job_time_limit (
         seq    INTEGER PRIMARY KEY,
         limit_s INTEGER NOT NULL
     );",
    // 13: where a job's limit came from (`asked` or `node-default`), and the running time it
    // has counted, written now and then so that a restart goes on from it.
    "ALTER TABLE job_time_limit ADD COLUMN source TEXT NOT NULL DEFAULT 'asked';
     ALTER TABLE job_time_limit ADD COLUMN ran_ms INTEGER NOT NULL DEFAULT 0;",
];

impl Store {
    /// Apply the migrations the database lacks; refuse a database newer than this pjw.
    pub(crate) fn migrate(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let v: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(err)?;
        if v > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: v,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(v as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(err)?;
            tx.execute_batch(sql).map_err(err)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(err)?;
            tx.commit().map_err(err)?;
        }
        Ok(())
    }
}
