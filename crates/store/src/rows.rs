//! The job row: its stored state, role and placement as text, the record, and its writes on a
//! connection (used by [`Store`](crate::Store)'s methods and by the transactions of
//! `job_txn.rs`).

use pjw_core::io_limits::JobIo;
use pjw_core::sched::Placement;
use pjw_core::thread_bind::BindMode;
use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_core::{CpuSet, GpuSet};
use rusqlite::{params, Connection};

use crate::StarterRecord;

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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoredState::Queued => "queued",
            StoredState::Starting => "starting",
            StoredState::Running => "running",
            StoredState::Ended => "ended",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<StoredState> {
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
    pub(crate) fn parse(s: &str) -> Option<StoredRole> {
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

pub(crate) fn parse_placement(s: &str) -> Option<Placement> {
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

/// A job's time-limit row (see [`Store::time_limit`]).
pub(crate) fn set_time_limit_on(
    conn: &Connection,
    seq: i64,
    limit: TimeLimit,
    source: LimitSource,
) -> rusqlite::Result<()> {
    exec_cached(
        conn,
        "INSERT OR REPLACE INTO job_time_limit (seq, limit_s, source, ran_ms) VALUES (?1, ?2, ?3, 0)",
        params![seq, limit.secs() as i64, source.as_str()],
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
