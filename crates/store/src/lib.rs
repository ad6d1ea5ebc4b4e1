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
//! -- version 12: a job's time limit (a side table: only `--time` jobs have a row)
//! CREATE TABLE job_time_limit (
//!     seq     INTEGER PRIMARY KEY, -- jobs.seq
//!     limit_s INTEGER NOT NULL     -- seconds of running time (frozen time not counted)
//! );
//! -- version 13: where the limit came from, and the running time counted (kept across a restart)
//! ALTER TABLE job_time_limit ADD COLUMN source TEXT NOT NULL DEFAULT 'asked'; -- or 'node-default'
//! ALTER TABLE job_time_limit ADD COLUMN ran_ms INTEGER NOT NULL DEFAULT 0;    -- at least a minute old
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
mod jobs;
pub mod profile;
mod rows;
mod schema;
mod steps;
pub mod threads;

pub use job_txn::{StartRecord, SubmitRecord};
pub use jobs::StoredTimeLimit;
pub(crate) use rows::{
    exec_cached, insert_job_on, parse_placement, set_bind_on, set_gpus_on, set_io_on,
    set_starter_on, set_starting_on, set_time_limit_on,
};
pub use rows::{placement_str, JobRecord, StoredRole, StoredState};
pub use schema::SCHEMA_VERSION;
pub use steps::StepRecord;
pub use threads::{ThreadSample, ThreadTotals};

pub use profile::{
    EndClass, JobFilter, JobProfile, JobSummary, ProcessSample, Pruned, Sample, SampleState,
    StateFilter,
};

use std::path::{Path, PathBuf};

use rusqlite::Connection;

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
/// the directory: the files are opened with `O_NOFOLLOW`, and one that is a link is refused.
///
/// The files that exist are looked at through `O_PATH` descriptors only. This runs again for
/// every connection the daemon opens (the profile writer's, the central shipper's) while its
/// others hold SQLite's POSIX locks on the same files, and closing any ordinary descriptor of a
/// file drops every such lock of the process: an outside reader (an admin's `sqlite3`) then
/// took itself for the first user of the `-shm` file and truncated it under the daemon's
/// mapping (the daemon died of SIGBUS). Closing an `O_PATH` descriptor drops no lock.
pub fn make_private(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Private { path, source }
    };
    // A new database: made with mode 0600, and nobody can hold a lock on it yet.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(db)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(db)(e)),
    }
    narrow(db, true).map_err(fail(db))?;
    for s in SIDECARS {
        let mut name = db.as_os_str().to_os_string();
        name.push(s);
        let path = Path::new(&name);
        narrow(path, false).map_err(fail(path))?;
    }
    Ok(())
}

/// Give the regular file at `path` mode 0600 if it has another, through an `O_PATH`
/// descriptor (see [`make_private`]); a missing file is fine unless `must_exist`.
fn narrow(path: &Path, must_exist: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a link or another kind is never followed)",
        ));
    }
    if meta.permissions().mode() & 0o7777 != 0o600 {
        // chmod through the descriptor's /proc link: the file it names, never a path again.
        std::fs::set_permissions(
            format!("/proc/self/fd/{}", f.as_raw_fd()),
            std::fs::Permissions::from_mode(0o600),
        )?;
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
}

#[cfg(test)]
mod tests;
