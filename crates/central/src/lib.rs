//! pjw-central: the cluster-wide store of finished jobs in PostgreSQL (config `[central]`).
//!
//! Each node's daemon keeps finished jobs in its local SQLite store; `job_summary.shipped_at`
//! is NULL until the job has reached PostgreSQL, so the local store is the spool. The
//! [`Shipper`] runs on its own thread with its own SQLite connection, off the engine's path: it
//! wakes when a job ends (or after `retry` while PostgreSQL is away), opens a connection, sends
//! unshipped jobs in batches — summary and series — in one PostgreSQL transaction per batch,
//! marks them shipped only after the commit, and closes the connection (short-lived
//! connections: 2,000 nodes hold none between passes; decisions (bv)). With `ship_samples` it
//! also wakes every `retry` to send the new samples of running jobs (what PostgreSQL already
//! has is the high-water mark). Rows are upserted on their key (node, job id, the node's run
//! number, end time), so a batch sent twice (a crash between the commit and the local mark)
//! changes nothing: nothing is lost, nothing is duplicated.
//!
//! The connection ([`Endpoint`]) takes libpq's `sslmode` and `sslrootcert` in the URL and
//! speaks TLS through rustls (decisions (bt)); the password comes from the root-only
//! `password_file`.
//!
//! PostgreSQL schema (migrations in [`schema`], run on first contact under an advisory lock):
//! ```sql
//! CREATE TABLE pjw_jobs (node TEXT, job_id TEXT, seq BIGINT,      -- seq: the node's run number
//!     name, user_name, uid, ncpus, cpus, mem_limit, submitted_ms, started_ms,
//!     ended_ms NOT NULL,                                          -- or submitted_ms
//!     end_reason, exit_status, end_class, queued_ms, running_ms, backfill_ms, frozen_ms, freezes,
//!     cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, io_rbytes, io_wbytes,
//!     procs_total, threads_total, procs_max, threads_max, samples, shipped_ms,
//!     gpu_util_mean, gpu_util_max, gpu_mem_peak,     -- NULL without GPU readings (NVML)
//!     PRIMARY KEY (node, job_id, seq, ended_ms)) PARTITION BY RANGE (ended_ms); -- weeks
//! -- indexes: (ended_ms), (user_name, ended_ms), (uid, ended_ms), (node, ended_ms), (job_id),
//! --          ((cpu_user_usec + cpu_system_usec)), (mem_peak), (queued_ms)
//! CREATE TABLE pjw_samples (node, seq, ts_ms, state, cpu_user_usec, cpu_system_usec,
//!     mem_current, mem_peak, mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
//!     psi_{cpu,mem,io}_{some,full}, gpu_util, gpu_mem,
//!     PRIMARY KEY (node, seq, ts_ms)) PARTITION BY RANGE (ts_ms);              -- days
//! CREATE TABLE pjw_schema (version INT PRIMARY KEY, applied_ms BIGINT);
//! CREATE TABLE pjw_meta (key TEXT PRIMARY KEY, value BIGINT);   -- maintained_ms
//! ```
//!
//! ```no_run
//! let ep = pjw_central::Endpoint::new(
//!     "postgres://pjw@db:5432/pjw?sslmode=verify-full&sslrootcert=/etc/pjw/ca.pem",
//!     Some("secret"),
//! )?;
//! let mut c = pjw_central::Central::open(&ep, &pjw_central::Retention::default())?;
//! let top = c.jobs(&pjw_central::CentralFilter {
//!     order: pjw_central::Order::Cpu,
//!     limit: 10,
//!     ..Default::default()
//! })?;
//! # Ok::<(), pjw_central::CentralError>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pjw_store::{JobRecord, JobSummary, Sample, Store, StoreError};
use postgres::Client;
use tracing::{debug, info, warn};

pub mod endpoint;
pub mod query;
pub mod schema;
mod shipper;
mod tls;
pub mod write;

pub use endpoint::{target_of, Endpoint, TlsMode};
pub use query::{CentralFilter, CentralJob, Order};
pub use schema::{Maintained, Retention};
pub use shipper::{ShipConfig, Shipper};

/// Errors of the central store.
#[derive(Debug, thiserror::Error)]
pub enum CentralError {
    #[error("central store {target}: {}", describe(source))]
    Postgres {
        /// host:port/db (never the password).
        target: String,
        source: postgres::Error,
    },
    #[error("central store url: {0}")]
    Url(String),
    #[error("central store tls: {0}")]
    Tls(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored word no type knows (an end class, a sample state): an error, never a guess.
    #[error("central store {target}: bad value in job {seq} of node {node}: {source}")]
    BadRow {
        target: String,
        node: String,
        seq: i64,
        source: pjw_core::CoreError,
    },
}

/// A PostgreSQL error with its causes ("db error: ERROR: password authentication failed …",
/// "error performing TLS handshake: invalid peer certificate: UnknownIssuer"), on one line.
pub fn describe(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text.replace(['\n', '\r'], " ")
}

impl CentralError {
    /// PostgreSQL's SQLSTATE, when the server answered with one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            CentralError::Postgres { source, .. } => source.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// PostgreSQL is at its connection limit (`too many connections`, SQLSTATE 53300).
    pub fn is_connection_limit(&self) -> bool {
        self.sqlstate() == Some("53300")
    }
}

/// The targets whose schema this process has seen at the latest version (checked once per
/// process and target, not at every short-lived connection).
static SCHEMA_SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn schema_seen(target: &str) -> bool {
    SCHEMA_SEEN
        .lock()
        .map(|s| s.as_ref().is_some_and(|s| s.contains(target)))
        .unwrap_or(false)
}

fn set_schema_seen(target: &str, seen: bool) {
    if let Ok(mut s) = SCHEMA_SEEN.lock() {
        let set = s.get_or_insert_with(HashSet::new);
        if seen {
            set.insert(target.to_string());
        } else {
            set.remove(target);
        }
    }
}

/// A connection to the central store.
pub struct Central {
    client: Client,
    target: String,
    retention: Retention,
}

impl std::fmt::Debug for Central {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Central")
            .field("target", &self.target)
            .finish()
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Central {
    /// Connect (5 s timeout unless the URL says otherwise) and make sure the schema is the
    /// latest (once per process).
    pub fn open(ep: &Endpoint, retention: &Retention) -> Result<Central, CentralError> {
        let client = ep.client()?;
        let mut c = Central {
            client,
            target: ep.target().to_string(),
            retention: *retention,
        };
        if !schema_seen(&c.target) {
            let m = schema::migrate(&mut c.client, retention, now_ms()).map_err(c.err())?;
            if m.from != m.to {
                info!(target = %c.target, from = m.from, to = m.to, jobs_copied = m.jobs_copied,
                    samples_copied = m.samples_copied, "central store schema migrated");
            }
            set_schema_seen(&c.target, true);
        }
        Ok(c)
    }

    /// [`Central::open`] of a URL with the default retention (tests, tools).
    pub fn connect(url: &str) -> Result<Central, CentralError> {
        Self::connect_with(url, None)
    }

    /// [`Central::connect`] with a password kept apart from the URL (a root-only file).
    pub fn connect_with(url: &str, password: Option<&str>) -> Result<Central, CentralError> {
        Self::open(&Endpoint::new(url, password)?, &Retention::default())
    }

    fn err(&self) -> impl Fn(postgres::Error) -> CentralError + '_ {
        move |source| {
            // A schema dropped under us is looked at again on the next connection.
            if source.code().map(|c| c.code()) == Some("42P01") {
                set_schema_seen(&self.target, false);
            }
            CentralError::Postgres {
                target: self.target.clone(),
                source,
            }
        }
    }

    fn bad_row(&self, node: String, seq: i64) -> impl FnOnce(pjw_core::CoreError) -> CentralError {
        let target = self.target.clone();
        move |source| CentralError::BadRow {
            target,
            node,
            seq,
            source,
        }
    }

    /// The raw client (tests and the load generator's measurements).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Upsert finished jobs (with their series) in one transaction; the sample rows sent.
    /// A row that finds no partition makes it create the partitions and try once more.
    pub fn ship(
        &mut self,
        jobs: &[(JobRecord, JobSummary, Vec<Sample>)],
        now_ms: i64,
    ) -> Result<usize, CentralError> {
        self.with_partitions(
            || write::partitions_needed(jobs, &[]),
            |c| {
                let mut tx = c.client.transaction()?;
                let n = write::write_jobs(&mut tx, jobs, &c.retention, now_ms)?;
                tx.commit()?;
                Ok(n)
            },
        )
    }

    /// Send the samples of running jobs taken since what PostgreSQL already has of them (its
    /// newest sample per job is the high-water mark: no local bookkeeping). One transaction;
    /// the number of samples sent.
    pub fn ship_live(
        &mut self,
        node: &str,
        series: &[(i64, Vec<Sample>)],
    ) -> Result<usize, CentralError> {
        let s: Vec<write::Series<'_>> = series
            .iter()
            .map(|(seq, samples)| write::Series {
                node,
                seq: *seq,
                samples,
            })
            .collect();
        let now = now_ms();
        self.with_partitions(
            || write::partitions_needed(&[], &s),
            |c| {
                let mut tx = c.client.transaction()?;
                let n = write::write_samples(&mut tx, &s, &c.retention, now)?;
                tx.commit()?;
                Ok(n)
            },
        )
    }

    /// Run `write`; when a row found no partition (SQLSTATE 23514 on a partitioned insert),
    /// create the partitions `needed` names and run it once more.
    fn with_partitions<T>(
        &mut self,
        needed: impl Fn() -> std::collections::BTreeSet<(schema::Table, i64)>,
        mut write: impl FnMut(&mut Central) -> Result<T, postgres::Error>,
    ) -> Result<T, CentralError> {
        match write(self) {
            Err(e) if is_missing_partition(&e) => {
                let want = needed();
                let made =
                    schema::ensure_partitions(&mut self.client, &want).map_err(self.err())?;
                debug!(target = %self.target, partitions = made, "central store partitions created for late rows");
                write(self).map_err(self.err())
            }
            other => other.map_err(self.err()),
        }
    }

    /// The newest sample time PostgreSQL holds for each of `seqs` of `node`, looking no
    /// further back than `since_ms` (the oldest start among them: the partitions before it are
    /// not searched).
    pub fn high_water(
        &mut self,
        node: &str,
        seqs: &[i64],
        since_ms: i64,
    ) -> Result<HashMap<i64, i64>, CentralError> {
        let rows = self
            .client
            .query(
                "SELECT seq, max(ts_ms) FROM pjw_samples
                 WHERE node = $1 AND seq = ANY($2) AND ts_ms >= $3 GROUP BY seq",
                &[&node, &seqs, &since_ms],
            )
            .map_err(self.err())?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Finished jobs across all nodes matching `f`.
    pub fn jobs(&mut self, f: &CentralFilter) -> Result<Vec<CentralJob>, CentralError> {
        let (sql, args) = query::jobs_sql(f);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            args.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(&sql, &refs).map_err(self.err())?;
        rows.iter()
            .map(|r| query::job_from_row(r).map_err(self.bad_row(r.get(0), r.get(2))))
            .collect()
    }

    /// The series of job `seq` of `node`, in time order.
    pub fn samples(&mut self, node: &str, seq: i64) -> Result<Vec<Sample>, CentralError> {
        let rows = self
            .client
            .query(query::SAMPLE_SQL, &[&node, &seq])
            .map_err(self.err())?;
        rows.iter()
            .map(|r| query::sample_from_row(seq, r).map_err(self.bad_row(node.to_string(), seq)))
            .collect()
    }

    /// Partitions ahead, retention behind (at most hourly across the cluster unless `force`).
    pub fn maintain(&mut self, now_ms: i64, force: bool) -> Result<Maintained, CentralError> {
        let retention = self.retention;
        schema::maintain(&mut self.client, &retention, now_ms, force).map_err(self.err())
    }
}

fn is_missing_partition(e: &postgres::Error) -> bool {
    e.code().map(|c| c.code()) == Some("23514")
        && e.as_db_error()
            .is_some_and(|d| d.message().contains("no partition"))
}

/// Where finished jobs wait to be shipped: the node's SQLite store ([`Store`]), or the load
/// generator's simulated nodes (crates/central/examples/central_load.rs), which so run the
/// shipper's own passes.
pub trait Spool {
    /// Finished jobs not yet shipped, oldest first, at most `limit`.
    fn unshipped(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError>;
    fn job(&self, seq: i64) -> Result<Option<JobRecord>, StoreError>;
    /// A job's samples, from `since_ms` on.
    fn samples(&self, seq: i64, since_ms: Option<i64>) -> Result<Vec<Sample>, StoreError>;
    fn mark_shipped(&mut self, seqs: &[i64], at_ms: i64) -> Result<(), StoreError>;
    /// Jobs queued or running.
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError>;
}

impl Spool for Store {
    fn unshipped(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        Store::unshipped(self, limit)
    }
    fn job(&self, seq: i64) -> Result<Option<JobRecord>, StoreError> {
        Store::job(self, seq)
    }
    fn samples(&self, seq: i64, since_ms: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        Store::samples(self, seq, since_ms)
    }
    fn mark_shipped(&mut self, seqs: &[i64], at_ms: i64) -> Result<(), StoreError> {
        Store::mark_shipped(self, seqs, at_ms)
    }
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Store::live_jobs(self)
    }
}

/// Ship everything unshipped in `store`, batch by batch; the number of jobs shipped.
pub fn ship_pending(
    store: &mut impl Spool,
    central: &mut Central,
    batch_size: usize,
) -> Result<usize, CentralError> {
    ship_pending_from(store, central, batch_size, None)
}

/// [`ship_pending`]; with `live_node` (the node ships live samples, `ship_samples`), a finished
/// job's series is sent from what PostgreSQL already holds of it on (one high-water query per
/// batch), not whole again.
pub fn ship_pending_from(
    store: &mut impl Spool,
    central: &mut Central,
    batch_size: usize,
    live_node: Option<&str>,
) -> Result<usize, CentralError> {
    let mut total = 0;
    loop {
        let batch = store.unshipped(batch_size)?;
        if batch.is_empty() {
            return Ok(total);
        }
        let mut found = Vec::with_capacity(batch.len());
        let mut seqs = Vec::with_capacity(batch.len());
        for s in batch {
            seqs.push(s.seq);
            // A summary without its job record cannot be attributed; it is marked and skipped.
            let Some(j) = store.job(s.seq)? else {
                warn!(seq = s.seq, "finished job without a record; not shipped");
                continue;
            };
            found.push((j, s));
        }
        let hw = match (
            live_node,
            found.iter().map(|(j, _)| write::filed_ms(j)).min(),
        ) {
            (Some(node), Some(_)) => {
                let oldest = found
                    .iter()
                    .map(|(j, _)| j.started_ms.unwrap_or(j.submitted_ms))
                    .min()
                    .unwrap_or(0);
                let with: Vec<i64> = found.iter().map(|(j, _)| j.seq).collect();
                central.high_water(node, &with, oldest)?
            }
            _ => HashMap::new(),
        };
        let mut jobs = Vec::with_capacity(found.len());
        for (j, s) in found {
            let samples = store.samples(j.seq, hw.get(&j.seq).map(|t| t + 1))?;
            jobs.push((j, s, samples));
        }
        let now = now_ms();
        central.ship(&jobs, now)?;
        // Only after PostgreSQL committed: a crash in between re-sends the batch, which the
        // upsert absorbs.
        store.mark_shipped(&seqs, now)?;
        total += seqs.len();
        debug!(jobs = seqs.len(), "batch shipped to the central store");
        if seqs.len() < batch_size {
            return Ok(total);
        }
    }
}

/// What one shipping pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Finished jobs shipped.
    pub jobs: usize,
    /// Live samples shipped (`ship_samples`).
    pub live_samples: usize,
    /// The maintenance it ran (when due).
    pub maintained: Option<Maintained>,
}

/// One shipping pass, as the shipper thread runs it: open a connection, maintain the schema
/// when `maintain` (partitions ahead, retention), ship the spool in batches, with `node` set
/// send the samples of running jobs, and close the connection.
pub fn pass(
    ep: &Endpoint,
    retention: &Retention,
    spool: &mut impl Spool,
    batch_size: usize,
    live_node: Option<&str>,
    maintain: bool,
) -> Result<Pass, CentralError> {
    let mut c = Central::open(ep, retention)?;
    let mut done = Pass::default();
    if maintain {
        done.maintained = Some(c.maintain(now_ms(), false)?);
    }
    done.jobs = ship_pending_from(spool, &mut c, batch_size, live_node)?;
    if let Some(node) = live_node {
        done.live_samples = ship_live(spool, &mut c, node)?;
    }
    Ok(done)
}

/// With `ship_samples`: send the new samples of this node's running jobs.
pub fn ship_live(
    store: &impl Spool,
    central: &mut Central,
    node: &str,
) -> Result<usize, CentralError> {
    let live: Vec<(i64, i64)> = store
        .live_jobs()?
        .iter()
        .filter_map(|j| j.started_ms.map(|t| (j.seq, t)))
        .collect();
    let Some(oldest) = live.iter().map(|(_, t)| *t).min() else {
        return Ok(0);
    };
    let seqs: Vec<i64> = live.iter().map(|(s, _)| *s).collect();
    let hw = central.high_water(node, &seqs, oldest)?;
    let mut series = Vec::new();
    for seq in seqs {
        let since = hw.get(&seq).map(|t| t + 1);
        let s = store.samples(seq, since)?;
        if !s.is_empty() {
            series.push((seq, s));
        }
    }
    central.ship_live(node, &series)
}
