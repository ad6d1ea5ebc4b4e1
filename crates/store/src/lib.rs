//! pjw-store: the daemon's durable state, in an embedded SQLite database (WAL mode).
//!
//! The daemon writes a job here *before* it creates the job's cgroups, and marks it ended only
//! after they are gone, so after a crash the store plus the cgroup trees tell exactly which CPUs
//! are held. Times are passed in by the caller (milliseconds since the Unix epoch); the store
//! reads no clock.
//!
//! # Schema (versions 1 to 11)
//! ```sql
//! CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);   -- 'next_job_number'
//! CREATE TABLE jobs (
//!     seq          INTEGER PRIMARY KEY AUTOINCREMENT,  -- internal, never reused
//!     job_id       TEXT NOT NULL,      -- user/WLM id; unique among live jobs
//!     name         TEXT NOT NULL,
//!     uid          INTEGER NOT NULL,
//!     gid          INTEGER NOT NULL,
//!     user         TEXT NOT NULL,
//!     ncpus        INTEGER NOT NULL,   -- CPUs asked for
//!     cpus         TEXT NOT NULL,      -- kernel list format, e.g. "0-3,8"
//!     mems         TEXT NOT NULL,
//!     mem_limit    INTEGER,            -- bytes
//!     pid          INTEGER,            -- main process
//!     pid_start    INTEGER,            -- its start time (clock ticks after boot), guards pid reuse
//!     cgroup       TEXT NOT NULL,      -- leaf name below the parent in every hierarchy
//!     argv         TEXT NOT NULL,      -- JSON array
//!     state        TEXT NOT NULL,      -- 'queued' | 'starting' | 'running' | 'ended'
//!     submitted_ms INTEGER NOT NULL,
//!     started_ms   INTEGER,
//!     ended_ms     INTEGER,
//!     end_reason   TEXT                -- 'exited' | 'killed by USER' | 'ended while daemon was down' |
//!                                      -- 'start interrupted' | 'start failed: …' |
//!                                      -- 'expired in queue' | 'client left the queue';
//!                                      -- '; N process(es) OOM-killed …' is appended after OOM kills
//! );
//! CREATE UNIQUE INDEX jobs_live_id ON jobs(job_id) WHERE state <> 'ended';
//! -- version 2
//! ALTER TABLE jobs ADD COLUMN priority  INTEGER NOT NULL DEFAULT 10;     -- 1-16
//! ALTER TABLE jobs ADD COLUMN placement TEXT NOT NULL DEFAULT 'any';     -- any | primary_only | backfill_only
//! ALTER TABLE jobs ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 0;      -- takes the whole node
//! ALTER TABLE jobs ADD COLUMN role      TEXT NOT NULL DEFAULT 'primary'; -- primary | backfill | preempted | suspended
//! -- version 3: job profiles (module [`profile`]; every column in docs/store-schema.md)
//! CREATE TABLE samples (seq, ts_ms, state, cpu_user_usec, cpu_system_usec, mem_current, mem_peak,
//!     mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
//!     psi_cpu_some, psi_cpu_full, psi_mem_some, psi_mem_full, psi_io_some, psi_io_full,
//!     PRIMARY KEY (seq, ts_ms)) WITHOUT ROWID;          -- one row per job per sampler tick
//! CREATE TABLE process_samples (seq, ts_ms, pid, comm, cpu_usec, rss, threads,
//!     PRIMARY KEY (seq, ts_ms, pid)) WITHOUT ROWID;     -- top N processes (profile.processes)
//! CREATE TABLE job_summary (seq PRIMARY KEY, node, exit_status, end_class, -- completed | killed | oom | expired | failed
//!     queued_ms, running_ms, backfill_ms, frozen_ms, freezes, cpu_user_usec, cpu_system_usec,
//!     mem_peak, swap_peak, io_rbytes, io_wbytes, procs_total, threads_total, procs_max, threads_max,
//!     samples, shipped_at);                             -- shipped_at: NULL until in the central store
//! CREATE INDEX job_summary_unshipped ON job_summary(seq) WHERE shipped_at IS NULL;
//! CREATE INDEX jobs_ended ON jobs(ended_ms) WHERE state = 'ended';
//! CREATE INDEX jobs_uid ON jobs(uid, seq);
//! -- version 4
//! ALTER TABLE job_summary ADD COLUMN counts_exact INTEGER;  -- 1 exact, 0 a lower bound, NULL unknown
//! -- version 5: job starter mode and per-job /tmp (a side table: most jobs need no row)
//! CREATE TABLE job_starter (
//!     seq        INTEGER PRIMARY KEY,  -- jobs.seq
//!     wlm        TEXT,                 -- the workload manager's name for the job, 'slurm:42'
//!     client_uid INTEGER NOT NULL,     -- uid of the process that asked (root for `--user`)
//!     tmp_size   INTEGER,              -- the job's /tmp size in bytes; NULL: none
//!     tmpdir     TEXT                  -- the per-job tmpfs the daemon mounted, until removed
//! );
//! -- version 6: GPUs (a side table: only GPU jobs have a row)
//! CREATE TABLE job_gpus (
//!     seq   INTEGER PRIMARY KEY,  -- jobs.seq
//!     ngpus INTEGER NOT NULL,     -- whole GPUs asked for
//!     gpus  TEXT NOT NULL         -- the GPUs held, pjw's ids as a list ('0-1,3'); while queued '' or the manager's choice
//! );
//! -- version 7: block I/O (a side table: only jobs with an I/O weight or limit have a row)
//! CREATE TABLE job_io (
//!     seq INTEGER PRIMARY KEY,    -- jobs.seq
//!     io  TEXT NOT NULL           -- 'weight=500; 254:0 rbps=100M' (JobIo::summary)
//! );
//! -- version 8: thread binding asked for by the job (a side table: only `--bind` jobs have a row)
//! CREATE TABLE job_bind (
//!     seq  INTEGER PRIMARY KEY,   -- jobs.seq
//!     mode TEXT NOT NULL          -- 'threads' | 'cores' | 'none'
//! );
//! -- version 9: GPU utilisation and memory from NVML (NULL without GPUs or without NVML)
//! ALTER TABLE samples ADD COLUMN gpu_util REAL;              -- mean % over the job's GPUs
//! ALTER TABLE samples ADD COLUMN gpu_mem INTEGER;            -- bytes used, summed over them
//! ALTER TABLE job_summary ADD COLUMN gpu_util_mean REAL;     -- over the samples with a reading
//! ALTER TABLE job_summary ADD COLUMN gpu_util_max REAL;
//! ALTER TABLE job_summary ADD COLUMN gpu_mem_peak INTEGER;
//! -- version 10: a job's steps (`pjw run` from inside it), written when the job ends
//! CREATE TABLE job_steps (seq, step, name, uid, cpus, pid, started_ms, ended_ms, exit_status,
//!     PRIMARY KEY (seq, step)) WITHOUT ROWID;
//! -- version 11: per-thread profiles (module [`threads`]; `profile.threads = N`)
//! CREATE TABLE thread_samples (seq, ts_ms, tid, pid, comm, cpu_usec, run_usec, wait_usec,
//!     span_usec, cpu, migrations, pin,
//!     PRIMARY KEY (seq, ts_ms, tid)) WITHOUT ROWID;     -- top N threads of a job per tick
//! ```
//! A new job's row and its side rows are written in one transaction ([`Store::submit_job`]), and
//! so is its start ([`Store::start_job`]): a launch is three transactions with its end.
//! Samples are written in batches (one transaction each); a finished job's summary is written in
//! the same transaction that marks it ended ([`Store::finish_job`]); retention and the size cap
//! ([`Store::apply_retention`]) only ever remove ended jobs. A second consumer of finished jobs
//! (the central-store shipper) reads [`Store::unshipped`] and sets `shipped_at` with
//! [`Store::mark_shipped`]; with `keep_unshipped` retention leaves unshipped jobs alone.
//! A queued job is recorded with its waiting client's pid and start time, so after a daemon
//! restart the client that reconnects keeps its place.
//! Migrations are numbered and tracked with `PRAGMA user_version`; [`Store::open`] applies the
//! missing ones in one transaction each.

mod job_txn;
pub mod profile;
mod steps;
pub mod threads;

pub use job_txn::{StartRecord, SubmitRecord};
pub use steps::StepRecord;
pub use threads::{ThreadSample, ThreadTotals};

pub use profile::{
    EndClass, JobFilter, JobProfile, JobSummary, ProcessSample, Pruned, Sample, SampleState,
};

use std::path::{Path, PathBuf};

use pjw_core::io_limits::JobIo;
use pjw_core::sched::Placement;
use pjw_core::thread_bind::BindMode;
use pjw_core::{CpuSet, GpuSet};
use rusqlite::{params, Connection, OptionalExtension};

/// Current schema version.
pub const SCHEMA_VERSION: i64 = 11;

const MIGRATIONS: &[&str] = &[
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
];

/// What a job started through `pjw run --user/--from-env/--tmp` has beyond [`JobRecord`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StarterRecord {
    /// The workload manager's name for the job (`slurm:42`).
    pub wlm: Option<String>,
    /// uid of the process that asked (root in job starter mode; else the owner).
    pub client_uid: u32,
    /// Size of the job's /tmp in bytes.
    pub tmp_size: Option<u64>,
    /// The per-job tmpfs the daemon mounted (unprivileged clients), until it is removed.
    pub tmpdir: Option<String>,
}

/// Errors of the store; each names the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make {path} private (mode 0600): {source}")]
    Private {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state database {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("state database {path}: schema version {found} is newer than this pjw understands ({SCHEMA_VERSION})")]
    TooNew { path: PathBuf, found: i64 },
    #[error("state database {path}: bad value in job {seq}: {reason}")]
    BadRow {
        path: PathBuf,
        seq: i64,
        reason: String,
    },
}

/// Where a job is in its life, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredState {
    /// Waiting in the node queue.
    Queued,
    /// Recorded; cgroups being created and the process moved.
    Starting,
    /// The process is in its cgroups.
    Running,
    /// Over; CPUs free.
    Ended,
}

impl StoredState {
    fn as_str(self) -> &'static str {
        match self {
            StoredState::Queued => "queued",
            StoredState::Starting => "starting",
            StoredState::Running => "running",
            StoredState::Ended => "ended",
        }
    }
    fn parse(s: &str) -> Option<StoredState> {
        match s {
            "queued" => Some(StoredState::Queued),
            "starting" => Some(StoredState::Starting),
            "running" => Some(StoredState::Running),
            "ended" => Some(StoredState::Ended),
            _ => None,
        }
    }
}

/// A started job's role, as stored (meaningful while it runs): what recovery gives it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoredRole {
    /// On CPUs of its own (also the role recorded for a queued job).
    #[default]
    Primary,
    /// In the idle class on CPUs primaries hold.
    Backfill,
    /// Frozen because a higher-priority job took its CPUs.
    Preempted,
    /// Frozen by its owner or root.
    Suspended,
}

impl StoredRole {
    /// The text stored in `jobs.role`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoredRole::Primary => "primary",
            StoredRole::Backfill => "backfill",
            StoredRole::Preempted => "preempted",
            StoredRole::Suspended => "suspended",
        }
    }
    fn parse(s: &str) -> Option<StoredRole> {
        match s {
            "primary" => Some(StoredRole::Primary),
            "backfill" => Some(StoredRole::Backfill),
            "preempted" => Some(StoredRole::Preempted),
            "suspended" => Some(StoredRole::Suspended),
            _ => None,
        }
    }
}

/// The text stored in `jobs.placement` for `p`.
pub fn placement_str(p: Placement) -> &'static str {
    match p {
        Placement::Any => "any",
        Placement::PrimaryOnly => "primary_only",
        Placement::BackfillOnly => "backfill_only",
    }
}

fn parse_placement(s: &str) -> Option<Placement> {
    match s {
        "any" => Some(Placement::Any),
        "primary_only" => Some(Placement::PrimaryOnly),
        "backfill_only" => Some(Placement::BackfillOnly),
        _ => None,
    }
}

/// One job row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    pub seq: i64,
    pub job_id: String,
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub ncpus: u32,
    pub cpus: CpuSet,
    pub mems: CpuSet,
    pub mem_limit: Option<u64>,
    pub pid: Option<u32>,
    pub pid_start: Option<u64>,
    pub cgroup: String,
    pub argv: Vec<String>,
    pub state: StoredState,
    pub submitted_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub end_reason: Option<String>,
    pub priority: u8,
    /// Where it may run (stored as `any`, `primary_only` or `backfill_only`).
    pub placement: Placement,
    pub exclusive: bool,
    /// Its role while it runs (stored as `primary`, `backfill`, `preempted` or `suspended`).
    pub role: StoredRole,
}

/// Run one statement through the connection's statement cache. The job table's writes happen
/// on every launch and end; parsing their SQL each time was about a tenth of the daemon's CPU
/// per launch.
pub(crate) fn exec_cached(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// The job row's INSERT, on a connection or inside a transaction; its `seq`.
pub(crate) fn insert_job_on(conn: &Connection, j: &JobRecord) -> rusqlite::Result<i64> {
    let argv = serde_json::to_string(&j.argv).unwrap_or_else(|_| "[]".into());
    exec_cached(
        conn,
        "INSERT INTO jobs (job_id, name, uid, gid, user, ncpus, cpus, mems, mem_limit, pid, pid_start,
                           cgroup, argv, state, submitted_ms, started_ms, priority, placement,
                           exclusive, role)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                 ?19, ?20)",
        params![
            j.job_id,
            j.name,
            j.uid,
            j.gid,
            j.user,
            j.ncpus,
            j.cpus.to_string(),
            j.mems.to_string(),
            j.mem_limit.map(|m| m as i64),
            j.pid,
            j.pid_start.map(|p| p as i64),
            j.cgroup,
            argv,
            j.state.as_str(),
            j.submitted_ms,
            j.started_ms,
            j.priority,
            placement_str(j.placement),
            j.exclusive,
            j.role.as_str(),
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// State `starting` on `cpus` in `role` (see [`Store::set_starting`]).
pub(crate) fn set_starting_on(
    conn: &Connection,
    seq: i64,
    cpus: &CpuSet,
    mems: &CpuSet,
    role: StoredRole,
    started_ms: i64,
) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "UPDATE jobs SET state = 'starting', cpus = ?2, mems = ?3, role = ?4, started_ms = ?5 WHERE seq = ?1",
        params![seq, cpus.to_string(), mems.to_string(), role.as_str(), started_ms],
    )
    .map(drop)
}

/// A job's starter row (see [`Store::set_starter`]).
pub(crate) fn set_starter_on(
    conn: &Connection,
    seq: i64,
    s: &StarterRecord,
) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "INSERT OR REPLACE INTO job_starter (seq, wlm, client_uid, tmp_size, tmpdir)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            seq,
            s.wlm,
            s.client_uid,
            s.tmp_size.map(|b| b as i64),
            s.tmpdir
        ],
    )
    .map(drop)
}

/// A job's binding row (see [`Store::set_bind`]).
pub(crate) fn set_bind_on(conn: &Connection, seq: i64, mode: BindMode) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "INSERT OR REPLACE INTO job_bind (seq, mode) VALUES (?1, ?2)",
        params![seq, mode.name()],
    )
    .map(drop)
}

/// A job's GPU row (see [`Store::set_gpus`]).
pub(crate) fn set_gpus_on(
    conn: &Connection,
    seq: i64,
    ngpus: u32,
    gpus: &GpuSet,
) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "INSERT OR REPLACE INTO job_gpus (seq, ngpus, gpus) VALUES (?1, ?2, ?3)",
        params![seq, ngpus, gpus.to_string()],
    )
    .map(drop)
}

/// A job's I/O row (see [`Store::set_io`]).
pub(crate) fn set_io_on(conn: &Connection, seq: i64, io: &JobIo) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "INSERT OR REPLACE INTO job_io (seq, io) VALUES (?1, ?2)",
        params![seq, io.summary()],
    )
    .map(drop)
}

/// The open database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Write transactions committed through this handle (SQLite's commit hook).
    commits: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// What SQLite creates beside a database `x.db`: `x.db-wal` and `x.db-shm` (WAL mode) and
/// `x.db-journal` (rollback journal, used while a database switches to WAL).
pub const SIDECARS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Make `db` and the sidecars that exist private (mode 0600) before SQLite opens them: the
/// database is created here with mode 0600 when it does not exist, and a database or sidecar
/// left more open (by an older pjw, or a crash of one) is narrowed. SQLite creates every
/// sidecar later with the mode of the database file (unix VFS `findCreateFileMode`, whatever
/// the umask), so none of them is readable by others at any moment. No path is followed out of
/// the directory: the files are opened with `O_NOFOLLOW`.
pub fn make_private(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let private = |path: &Path, create: bool| -> Result<(), StoreError> {
        let fail = |source| StoreError::Private {
            path: path.to_path_buf(),
            source,
        };
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(create)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fail(e)),
        };
        let mode = f.metadata().map_err(fail)?.permissions().mode() & 0o7777;
        if mode != 0o600 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(fail)?;
        }
        Ok(())
    };
    private(db, true)?;
    for s in SIDECARS {
        let mut name = db.as_os_str().to_os_string();
        name.push(s);
        private(Path::new(&name), false)?;
    }
    Ok(())
}

/// A handle on `conn` that counts its commits.
fn counted(conn: Connection, path: PathBuf) -> Store {
    let commits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = commits.clone();
    conn.commit_hook(Some(move || {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        false // false: let the commit go ahead
    }));
    Store {
        conn,
        path,
        commits,
    }
}

impl Store {
    /// Open (creating if needed) `<dir>/pjw.db` and bring its schema up to date.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        Self::open_file(&dir.join("pjw.db"))
    }

    /// Open a database file directly. The file and every file SQLite keeps beside it
    /// ([`SIDECARS`]) hold job data (names, command lines): they are root's alone from the
    /// moment they exist ([`make_private`]).
    pub fn open_file(path: &Path) -> Result<Store, StoreError> {
        make_private(path)?;
        let path = path.to_path_buf();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        conn.set_prepared_statement_cache_capacity(64);
        let mut store = counted(conn, path);
        store.migrate()?;
        Ok(store)
    }

    /// Open an existing database for reading only (reports), without migrating it. Fails when
    /// its schema is not the one this build writes.
    pub fn open_readonly(path: &Path) -> Result<Store, StoreError> {
        let path = path.to_path_buf();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        // A reader (a report) reads pages and is closed again: a small page cache, so many of
        // them at once hold little.
        conn.pragma_update(None, "cache_size", -256).map_err(err)?;
        let store = counted(conn, path);
        let v = store.schema_version()?;
        if v != SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: store.path.clone(),
                found: v,
            });
        }
        Ok(store)
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
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

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.err())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Take the next generated job number (persisted, so ids are not reused after a restart).
    pub fn next_job_number(&mut self) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let cur: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'next_job_number'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        let n: u64 = cur.and_then(|s| s.parse().ok()).unwrap_or(1);
        exec_cached(
            &tx,
            "INSERT INTO meta(key, value) VALUES('next_job_number', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![(n + 1).to_string()],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(n)
    }

    /// Record a new job in the state its record says (`queued` or `starting`); returns its
    /// `seq`. Fails if a live job has the id.
    pub fn insert_job(&self, j: &JobRecord) -> Result<i64, StoreError> {
        insert_job_on(&self.conn, j).map_err(self.err())
    }

    /// A queued job is about to start on `cpus`: state `starting`.
    pub fn set_starting(
        &self,
        seq: i64,
        cpus: &CpuSet,
        mems: &CpuSet,
        role: StoredRole,
        started_ms: i64,
    ) -> Result<(), StoreError> {
        set_starting_on(&self.conn, seq, cpus, mems, role, started_ms).map_err(self.err())
    }

    /// A running job changed role (promoted, preempted, suspended, resumed) or CPUs.
    pub fn set_role(
        &self,
        seq: i64,
        role: StoredRole,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), StoreError> {
        exec_cached(
            &self.conn,
            "UPDATE jobs SET role = ?2, cpus = ?3, mems = ?4 WHERE seq = ?1",
            params![seq, role.as_str(), cpus.to_string(), mems.to_string()],
        )
        .map_err(self.err())?;
        Ok(())
    }

    /// A job's priority changed.
    pub fn set_priority(&self, seq: i64, priority: u8) -> Result<(), StoreError> {
        exec_cached(
            &self.conn,
            "UPDATE jobs SET priority = ?2 WHERE seq = ?1",
            params![seq, priority],
        )
        .map_err(self.err())?;
        Ok(())
    }

    /// Mark a job running.
    pub fn set_running(&self, seq: i64) -> Result<(), StoreError> {
        exec_cached(
            &self.conn,
            "UPDATE jobs SET state = 'running' WHERE seq = ?1",
            params![seq],
        )
        .map_err(self.err())?;
        Ok(())
    }

    /// Mark a job ended.
    pub fn set_ended(&self, seq: i64, ended_ms: i64, reason: &str) -> Result<(), StoreError> {
        exec_cached(
            &self.conn,
            "UPDATE jobs SET state = 'ended', ended_ms = ?2, end_reason = ?3 WHERE seq = ?1",
            params![seq, ended_ms, reason],
        )
        .map_err(self.err())?;
        Ok(())
    }

    /// Record a job's starter details (replacing earlier ones).
    pub fn set_starter(&self, seq: i64, s: &StarterRecord) -> Result<(), StoreError> {
        set_starter_on(&self.conn, seq, s).map_err(self.err())
    }

    /// A job's starter details, if it has any.
    pub fn starter(&self, seq: i64) -> Result<Option<StarterRecord>, StoreError> {
        self.conn
            .query_row(
                "SELECT wlm, client_uid, tmp_size, tmpdir FROM job_starter WHERE seq = ?1",
                params![seq],
                |r| {
                    Ok(StarterRecord {
                        wlm: r.get(0)?,
                        client_uid: r.get(1)?,
                        tmp_size: r.get::<_, Option<i64>>(2)?.map(|b| b as u64),
                        tmpdir: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(self.err())
    }

    /// Record the thread binding job `seq` asked for.
    pub fn set_bind(&self, seq: i64, mode: BindMode) -> Result<(), StoreError> {
        set_bind_on(&self.conn, seq, mode).map_err(self.err())
    }

    /// The thread binding job `seq` asked for; `None`: the node's default.
    pub fn bind(&self, seq: i64) -> Result<Option<BindMode>, StoreError> {
        let row: Option<String> = self
            .conn
            .query_row(
                "SELECT mode FROM job_bind WHERE seq = ?1",
                params![seq],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        match row {
            None => Ok(None),
            Some(text) => BindMode::parse(&text)
                .map(Some)
                .ok_or_else(|| StoreError::BadRow {
                    path: self.path.clone(),
                    seq,
                    reason: format!("bind mode {text:?}"),
                }),
        }
    }

    /// A GPU job's request and the GPUs it holds (written before the job starts on them).
    pub fn set_gpus(&self, seq: i64, ngpus: u32, gpus: &GpuSet) -> Result<(), StoreError> {
        set_gpus_on(&self.conn, seq, ngpus, gpus).map_err(self.err())
    }

    /// What [`Store::set_gpus`] wrote for `seq`; `None` for a job without GPUs.
    pub fn gpus(&self, seq: i64) -> Result<Option<(u32, GpuSet)>, StoreError> {
        let row: Option<(u32, String)> = self
            .conn
            .query_row(
                "SELECT ngpus, gpus FROM job_gpus WHERE seq = ?1",
                params![seq],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        match row {
            None => Ok(None),
            Some((n, text)) => GpuSet::parse_list(&text)
                .map(|g| Some((n, g)))
                .map_err(|e| StoreError::BadRow {
                    path: self.path.clone(),
                    seq,
                    reason: format!("gpus {text:?}: {e}"),
                }),
        }
    }

    /// A job's I/O weight and limits (written when it has any).
    pub fn set_io(&self, seq: i64, io: &JobIo) -> Result<(), StoreError> {
        set_io_on(&self.conn, seq, io).map_err(self.err())
    }

    /// What [`Store::set_io`] wrote for `seq`; `None` for a job with the kernel's defaults.
    pub fn io(&self, seq: i64) -> Result<Option<JobIo>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT io FROM job_io WHERE seq = ?1", params![seq], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.err())?;
        text.map(|t| {
            JobIo::parse(&t).map_err(|e| StoreError::BadRow {
                path: self.path.clone(),
                seq,
                reason: format!("io {t:?}: {e}"),
            })
        })
        .transpose()
    }

    /// Jobs not ended, oldest first.
    pub fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.query_jobs("WHERE state <> 'ended' ORDER BY seq", [])
    }

    /// A job by seq.
    pub fn job(&self, seq: i64) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.query_jobs("WHERE seq = ?1", [seq])?.into_iter().next())
    }

    /// The most recent job with this id (live or ended).
    pub fn latest_by_id(&self, job_id: &str) -> Result<Option<JobRecord>, StoreError> {
        Ok(self
            .query_jobs("WHERE job_id = ?1 ORDER BY seq DESC LIMIT 1", [job_id])?
            .into_iter()
            .next())
    }

    fn query_jobs<P: rusqlite::Params>(
        &self,
        tail: &str,
        p: P,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT seq, job_id, name, uid, gid, user, ncpus, cpus, mems, mem_limit, pid, pid_start, cgroup, argv,
                    state, submitted_ms, started_ms, ended_ms, end_reason, priority, placement, exclusive, role
             FROM jobs {tail}"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.err())?;
        type Row = (
            i64,
            String,
            String,
            u32,
            u32,
            String,
            u32,
            String,
            String,
            Option<i64>,
            Option<u32>,
            Option<i64>,
            String,
            String,
            String,
            i64,
            Option<i64>,
            Option<i64>,
            Option<String>,
        );
        type Queue = (u8, String, bool, String);
        let rows = stmt
            .query_map(p, |r| {
                let row: Row = (
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                    r.get(12)?,
                    r.get(13)?,
                    r.get(14)?,
                    r.get(15)?,
                    r.get(16)?,
                    r.get(17)?,
                    r.get(18)?,
                );
                let queue: Queue = (r.get(19)?, r.get(20)?, r.get(21)?, r.get(22)?);
                Ok::<(Row, Queue), rusqlite::Error>((row, queue))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (r, q) = row.map_err(self.err())?;
            let bad = |reason: String| StoreError::BadRow {
                path: self.path.clone(),
                seq: r.0,
                reason,
            };
            out.push(JobRecord {
                seq: r.0,
                job_id: r.1.clone(),
                name: r.2.clone(),
                uid: r.3,
                gid: r.4,
                user: r.5.clone(),
                ncpus: r.6,
                cpus: CpuSet::parse_list(&r.7).map_err(|e| bad(e.to_string()))?,
                mems: CpuSet::parse_list(&r.8).map_err(|e| bad(e.to_string()))?,
                mem_limit: r.9.map(|m| m as u64),
                pid: r.10,
                pid_start: r.11.map(|p| p as u64),
                cgroup: r.12.clone(),
                argv: serde_json::from_str(&r.13).map_err(|e| bad(format!("argv: {e}")))?,
                state: StoredState::parse(&r.14)
                    .ok_or_else(|| bad(format!("unknown state {:?}", r.14)))?,
                submitted_ms: r.15,
                started_ms: r.16,
                ended_ms: r.17,
                end_reason: r.18.clone(),
                priority: q.0,
                placement: parse_placement(&q.1)
                    .ok_or_else(|| bad(format!("unknown placement {:?}", q.1)))?,
                exclusive: q.2,
                role: StoredRole::parse(&q.3)
                    .ok_or_else(|| bad(format!("unknown role {:?}", q.3)))?,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// The database and every sidecar SQLite makes are 0600 from their creation on, and ones
    /// an older pjw left open are narrowed at the next open (issue 25, item 1: job names and
    /// command lines were read back from a 0644 `pjw.db-wal`).
    #[test]
    fn the_database_and_its_wal_files_are_private_from_creation() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        s.conn
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES ('--password=hunter2');")
            .unwrap();
        let db = dir.path().join("pjw.db");
        let wal = dir.path().join("pjw.db-wal");
        let shm = dir.path().join("pjw.db-shm");
        for p in [&db, &wal, &shm] {
            assert!(p.exists(), "{} missing", p.display());
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
        drop(s);
        // As an older pjw (or one killed with -9) left them: open to all. Opening narrows.
        use std::os::unix::fs::PermissionsExt;
        for p in [&db, &wal, &shm] {
            if !p.exists() {
                std::fs::write(p, b"").unwrap();
            }
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let journal = dir.path().join("pjw.db-journal");
        let s = Store::open(dir.path()).unwrap();
        for p in [&db, &wal, &shm] {
            assert_eq!(mode(p), 0o600, "{} after reopening", p.display());
        }
        assert!(!journal.exists());
        drop(s);
        // A sidecar that is a symlink is not followed (O_NOFOLLOW): the open fails, saying so.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _ = std::fs::remove_file(&wal);
        std::os::unix::fs::symlink(&target, &wal).unwrap();
        let Err(e) = Store::open(dir.path()) else {
            panic!("a symlinked sidecar was opened");
        };
        assert!(e.to_string().contains("cannot make"), "{e}");
        assert_eq!(mode(&target), 0o644, "the link's target was changed");
    }

    /// Two connections writing at once (the engine's and the profile writer's) never see
    /// "database is locked": a transaction that reads before it writes takes the write lock at
    /// BEGIN (IMMEDIATE), so it waits in the busy handler. A deferred one fails at once when the
    /// other connection committed after its read (SQLITE_BUSY_SNAPSHOT: no busy handler runs),
    /// which refused a `pjw run` in CI.
    #[test]
    fn read_then_write_transactions_wait_for_another_writer() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Store::open(dir.path()).unwrap();
        let b = Store::open(dir.path()).unwrap();
        let other = std::thread::spawn(move || {
            for i in 0..400 {
                b.insert_job(&job(&format!("w{i}"))).unwrap();
            }
        });
        let mut last = 0;
        for _ in 0..400 {
            let n = a.next_job_number().expect("no busy error");
            assert!(n > last);
            last = n;
        }
        other.join().unwrap();
    }

    fn job(id: &str) -> JobRecord {
        JobRecord {
            seq: 0,
            job_id: id.into(),
            name: "spin".into(),
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            ncpus: 2,
            cpus: CpuSet::parse_list("0-1").unwrap(),
            mems: CpuSet::parse_list("0").unwrap(),
            mem_limit: Some(1 << 30),
            pid: Some(4242),
            pid_start: Some(123456),
            cgroup: format!("job-{id}"),
            argv: vec!["spin".into(), "a \"quoted\"\nline\\".into(), "\u{1}".into()],
            state: StoredState::Starting,
            submitted_ms: 1000,
            started_ms: Some(1500),
            ended_ms: None,
            end_reason: None,
            priority: 10,
            placement: Placement::Any,
            exclusive: false,
            role: StoredRole::Primary,
        }
    }

    #[test]
    fn jobs_live_and_end() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        let seq = s.insert_job(&job("7")).unwrap();
        // A live id cannot be taken twice.
        assert!(s.insert_job(&job("7")).is_err());
        s.set_running(seq).unwrap();
        let live = s.live_jobs().unwrap();
        assert_eq!(live.len(), 1);
        let mut want = job("7");
        want.seq = seq;
        want.state = StoredState::Running;
        assert_eq!(live[0], want);
        s.set_ended(seq, 9000, "exited").unwrap();
        assert!(s.live_jobs().unwrap().is_empty());
        // Once ended, the id may be used again.
        let seq2 = s.insert_job(&job("7")).unwrap();
        assert_ne!(seq, seq2);
        let ended = s.job(seq).unwrap().unwrap();
        assert_eq!(ended.end_reason.as_deref(), Some("exited"));
        assert_eq!(ended.ended_ms, Some(9000));
    }

    #[test]
    fn state_survives_reopen_and_numbers_are_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = Store::open(dir.path()).unwrap();
            assert_eq!(s.next_job_number().unwrap(), 1);
            assert_eq!(s.next_job_number().unwrap(), 2);
            s.insert_job(&job("a")).unwrap();
        }
        let mut s = Store::open(dir.path()).unwrap();
        assert_eq!(s.next_job_number().unwrap(), 3);
        assert_eq!(s.live_jobs().unwrap().len(), 1);
    }

    #[test]
    fn upgrades_a_version_1_database_keeping_its_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pjw.db");
        {
            // A database as pjw 0.1 (schema 1) left it, with a running job.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(MIGRATIONS[0]).unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
            c.execute(
                "INSERT INTO jobs (job_id, name, uid, gid, user, ncpus, cpus, mems, cgroup, argv, state, submitted_ms)
                 VALUES ('old', 'sim', 1000, 1000, 'alice', 2, '0-1', '0', 'job-old', '[\"sim\"]', 'running', 5)",
                [],
            )
            .unwrap();
        }
        let s = Store::open_file(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        let live = s.live_jobs().unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].job_id, "old");
        assert_eq!(live[0].cpus.to_string(), "0-1");
        assert_eq!(
            (
                live[0].priority,
                placement_str(live[0].placement),
                live[0].exclusive,
                live[0].role.as_str()
            ),
            (10, "any", false, "primary")
        );
        s.set_role(
            live[0].seq,
            StoredRole::Backfill,
            &live[0].cpus,
            &live[0].mems,
        )
        .unwrap();
        s.set_priority(live[0].seq, 3).unwrap();
        let j = s.job(live[0].seq).unwrap().unwrap();
        assert_eq!((j.role, j.priority), (StoredRole::Backfill, 3));
    }

    #[test]
    fn roles_and_placements_round_trip_and_unknown_text_is_a_bad_row() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let mut rec = job("r1");
        for (role, placement) in [
            (StoredRole::Primary, Placement::Any),
            (StoredRole::Backfill, Placement::BackfillOnly),
            (StoredRole::Preempted, Placement::PrimaryOnly),
            (StoredRole::Suspended, Placement::Any),
        ] {
            rec.job_id = format!("{}-{}", role.as_str(), placement_str(placement));
            rec.role = role;
            rec.placement = placement;
            let seq = s.insert_job(&rec).unwrap();
            let back = s.job(seq).unwrap().unwrap();
            assert_eq!((back.role, back.placement), (role, placement));
            s.set_ended(seq, 1, "done").unwrap();
        }
        // A row whose role no pjw writes is an error naming it, not a primary by default.
        let seq = s.insert_job(&rec).unwrap();
        s.conn
            .execute("UPDATE jobs SET role = 'boss' WHERE seq = ?1", [seq])
            .unwrap();
        let e = s.job(seq).unwrap_err().to_string();
        assert!(e.contains("unknown role \"boss\""), "{e}");
        s.conn
            .execute(
                "UPDATE jobs SET role = 'primary', placement = 'anywhere' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
        let e = s.job(seq).unwrap_err().to_string();
        assert!(e.contains("unknown placement \"anywhere\""), "{e}");
    }

    #[test]
    fn a_jobs_bind_mode_is_kept_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let seq = s.insert_job(&job("b1")).unwrap();
        assert_eq!(s.bind(seq).unwrap(), None);
        s.set_bind(seq, BindMode::Cores).unwrap();
        assert_eq!(s.bind(seq).unwrap(), Some(BindMode::Cores));
        s.set_bind(seq, BindMode::None).unwrap();
        assert_eq!(s.bind(seq).unwrap(), Some(BindMode::None));
        s.conn
            .execute(
                "UPDATE job_bind SET mode = 'sideways' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
        let e = s.bind(seq).unwrap_err();
        assert!(e.to_string().contains("sideways"), "{e}");
    }

    #[test]
    fn starter_details_are_kept_beside_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let seq = s.insert_job(&job("pbs1")).unwrap();
        assert_eq!(s.starter(seq).unwrap(), None);
        let mut st = StarterRecord {
            wlm: Some("pbs:1234.pbs01".into()),
            client_uid: 0,
            tmp_size: Some(16 << 20),
            tmpdir: None,
        };
        s.set_starter(seq, &st).unwrap();
        assert_eq!(s.starter(seq).unwrap().as_ref(), Some(&st));
        st.tmpdir = Some("/var/lib/pjw/tmp/job-pbs1".into());
        s.set_starter(seq, &st).unwrap();
        assert_eq!(s.starter(seq).unwrap(), Some(st));
    }

    #[test]
    fn io_settings_are_kept_beside_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let seq = s.insert_job(&job("io1")).unwrap();
        assert_eq!(s.io(seq).unwrap(), None);
        let io = JobIo::parse("weight=50; 254:0 rbps=10M").unwrap();
        s.set_io(seq, &io).unwrap();
        assert_eq!(s.io(seq).unwrap(), Some(io));
        s.conn
            .execute("UPDATE job_io SET io = 'weight=0' WHERE seq = ?1", [seq])
            .unwrap();
        let e = s.io(seq).unwrap_err().to_string();
        assert!(e.contains("weight=0"), "{e}");
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pjw.db");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        let e = Store::open_file(&path).unwrap_err();
        assert!(e.to_string().contains("newer"), "{e}");
    }
}
