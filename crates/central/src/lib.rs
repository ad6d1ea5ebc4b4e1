//! pjw-central: the cluster-wide store of finished jobs in PostgreSQL (config `[central]`).
//!
//! Each node's daemon keeps finished jobs in its local SQLite store; `job_summary.shipped_at`
//! is NULL until the job has reached PostgreSQL, so the local store is the spool. The
//! [`Shipper`] runs on its own thread with its own SQLite connection, off the engine's path: it
//! wakes when a job ends (or after `retry` while PostgreSQL is away), sends unshipped jobs in
//! batches — summary and series — in one PostgreSQL transaction per batch, and marks them
//! shipped only after the commit. With `ship_samples` it also wakes every `retry` to send the
//! new samples of running jobs (what PostgreSQL already has is the high-water mark). Rows are upserted on their key (node,
//! job id, the node's run number), so a batch sent twice (a crash between the commit and the
//! local mark) changes nothing: nothing is lost, nothing is duplicated.
//!
//! PostgreSQL schema (created on first contact, under an advisory lock so nodes starting
//! together do not race):
//! ```sql
//! CREATE TABLE pjw_jobs (node TEXT, job_id TEXT, seq BIGINT,      -- seq: the node's run number
//!     name, user_name, uid, ncpus, cpus, mem_limit, submitted_ms, started_ms, ended_ms,
//!     end_reason, exit_status, end_class, queued_ms, running_ms, backfill_ms, frozen_ms, freezes,
//!     cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, io_rbytes, io_wbytes,
//!     procs_total, threads_total, procs_max, threads_max, samples, shipped_ms,
//!     gpu_util_mean, gpu_util_max, gpu_mem_peak,     -- NULL without GPU readings (NVML)
//!     PRIMARY KEY (node, job_id, seq));
//! CREATE TABLE pjw_samples (node, seq, ts_ms, state, cpu_user_usec, cpu_system_usec,
//!     mem_current, mem_peak, mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
//!     psi_{cpu,mem,io}_{some,full}, gpu_util, gpu_mem, PRIMARY KEY (node, seq, ts_ms));
//! ```
//! The GPU columns came later: on first contact `ALTER TABLE … ADD COLUMN IF NOT EXISTS` adds
//! them to tables an older pjw created.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pjw_store::{JobRecord, JobSummary, Sample, Store, StoreError};
use postgres::types::ToSql;
use postgres::{Client, NoTls};
use tracing::{debug, info, warn};

/// Errors of the central store.
#[derive(Debug, thiserror::Error)]
pub enum CentralError {
    #[error("central store {target}: {source}")]
    Postgres {
        /// host:port/db (never the password).
        target: String,
        source: postgres::Error,
    },
    #[error("central store url: {0}")]
    Url(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How the shipper works (`[central]`).
#[derive(Clone, Debug, PartialEq)]
pub struct ShipConfig {
    pub url: String,
    /// The password, when it is kept apart from the URL (`[central] password_file`).
    pub password: Option<String>,
    /// Also send the samples of running jobs, every `retry` (finished jobs always go with their
    /// series).
    pub ship_samples: bool,
    /// Jobs per transaction.
    pub batch_size: usize,
    /// Wait before trying again after PostgreSQL was unreachable; with `ship_samples`, also the
    /// time between shipments of live samples.
    pub retry: Duration,
    /// This node's name (for logs; the rows carry the summary's node).
    pub node: String,
}

/// A connection to the central store.
pub struct Central {
    client: Client,
    target: String,
}

impl std::fmt::Debug for Central {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Central")
            .field("target", &self.target)
            .finish()
    }
}

/// `host:port/db` of a URL, for messages (no user, no password).
fn target_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    rest.split('?').next().unwrap_or(rest).to_string()
}

fn to_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pjw_jobs (
    node TEXT NOT NULL, job_id TEXT NOT NULL, seq BIGINT NOT NULL,
    name TEXT NOT NULL, user_name TEXT NOT NULL, uid BIGINT NOT NULL,
    ncpus BIGINT NOT NULL, cpus TEXT NOT NULL, mem_limit BIGINT,
    submitted_ms BIGINT NOT NULL, started_ms BIGINT, ended_ms BIGINT, end_reason TEXT,
    exit_status BIGINT, end_class TEXT NOT NULL,
    queued_ms BIGINT NOT NULL, running_ms BIGINT NOT NULL, backfill_ms BIGINT NOT NULL,
    frozen_ms BIGINT NOT NULL, freezes BIGINT NOT NULL,
    cpu_user_usec BIGINT NOT NULL, cpu_system_usec BIGINT NOT NULL,
    mem_peak BIGINT NOT NULL, swap_peak BIGINT NOT NULL, io_rbytes BIGINT NOT NULL,
    io_wbytes BIGINT NOT NULL, procs_total BIGINT, threads_total BIGINT,
    procs_max BIGINT NOT NULL, threads_max BIGINT NOT NULL, samples BIGINT NOT NULL,
    shipped_ms BIGINT NOT NULL,
    PRIMARY KEY (node, job_id, seq)
);
CREATE INDEX IF NOT EXISTS pjw_jobs_user ON pjw_jobs (uid, ended_ms);
CREATE INDEX IF NOT EXISTS pjw_jobs_ended ON pjw_jobs (ended_ms);
CREATE TABLE IF NOT EXISTS pjw_samples (
    node TEXT NOT NULL, seq BIGINT NOT NULL, ts_ms BIGINT NOT NULL, state TEXT,
    cpu_user_usec BIGINT, cpu_system_usec BIGINT, mem_current BIGINT, mem_peak BIGINT,
    mem_anon BIGINT, mem_file BIGINT, swap BIGINT, io_rbytes BIGINT, io_wbytes BIGINT,
    procs BIGINT, threads BIGINT,
    psi_cpu_some DOUBLE PRECISION, psi_cpu_full DOUBLE PRECISION,
    psi_mem_some DOUBLE PRECISION, psi_mem_full DOUBLE PRECISION,
    psi_io_some DOUBLE PRECISION, psi_io_full DOUBLE PRECISION,
    PRIMARY KEY (node, seq, ts_ms)
);
ALTER TABLE pjw_jobs ADD COLUMN IF NOT EXISTS gpu_util_mean DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS gpu_util_max DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS gpu_mem_peak BIGINT;
ALTER TABLE pjw_samples ADD COLUMN IF NOT EXISTS gpu_util DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS gpu_mem BIGINT;";

const UPSERT_JOB: &str = "
INSERT INTO pjw_jobs (node, job_id, seq, name, user_name, uid, ncpus, cpus, mem_limit,
    submitted_ms, started_ms, ended_ms, end_reason, exit_status, end_class, queued_ms, running_ms,
    backfill_ms, frozen_ms, freezes, cpu_user_usec, cpu_system_usec, mem_peak, swap_peak,
    io_rbytes, io_wbytes, procs_total, threads_total, procs_max, threads_max, samples, shipped_ms,
    gpu_util_mean, gpu_util_max, gpu_mem_peak)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35)
ON CONFLICT (node, job_id, seq) DO UPDATE SET
    name = EXCLUDED.name, user_name = EXCLUDED.user_name, uid = EXCLUDED.uid,
    ncpus = EXCLUDED.ncpus, cpus = EXCLUDED.cpus, mem_limit = EXCLUDED.mem_limit,
    submitted_ms = EXCLUDED.submitted_ms, started_ms = EXCLUDED.started_ms,
    ended_ms = EXCLUDED.ended_ms, end_reason = EXCLUDED.end_reason,
    exit_status = EXCLUDED.exit_status, end_class = EXCLUDED.end_class,
    queued_ms = EXCLUDED.queued_ms, running_ms = EXCLUDED.running_ms,
    backfill_ms = EXCLUDED.backfill_ms, frozen_ms = EXCLUDED.frozen_ms,
    freezes = EXCLUDED.freezes, cpu_user_usec = EXCLUDED.cpu_user_usec,
    cpu_system_usec = EXCLUDED.cpu_system_usec, mem_peak = EXCLUDED.mem_peak,
    swap_peak = EXCLUDED.swap_peak, io_rbytes = EXCLUDED.io_rbytes,
    io_wbytes = EXCLUDED.io_wbytes, procs_total = EXCLUDED.procs_total,
    threads_total = EXCLUDED.threads_total, procs_max = EXCLUDED.procs_max,
    threads_max = EXCLUDED.threads_max, samples = EXCLUDED.samples,
    shipped_ms = EXCLUDED.shipped_ms, gpu_util_mean = EXCLUDED.gpu_util_mean,
    gpu_util_max = EXCLUDED.gpu_util_max, gpu_mem_peak = EXCLUDED.gpu_mem_peak";

const INSERT_SAMPLES: &str = "
INSERT INTO pjw_samples (node, seq, ts_ms, state, cpu_user_usec, cpu_system_usec, mem_current,
    mem_peak, mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads, psi_cpu_some,
    psi_cpu_full, psi_mem_some, psi_mem_full, psi_io_some, psi_io_full, gpu_util, gpu_mem)
SELECT $1, $2, * FROM unnest($3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
    $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
    $14::bigint[], $15::bigint[], $16::float8[], $17::float8[], $18::float8[], $19::float8[],
    $20::float8[], $21::float8[], $22::float8[], $23::bigint[])
ON CONFLICT (node, seq, ts_ms) DO NOTHING";

const JOB_COLS: &str = "node, job_id, seq, name, user_name, uid, ncpus, cpus, mem_limit, \
    submitted_ms, started_ms, ended_ms, end_reason, exit_status, end_class, queued_ms, running_ms, \
    backfill_ms, frozen_ms, freezes, cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, \
    io_rbytes, io_wbytes, procs_total, threads_total, procs_max, threads_max, samples, shipped_ms, \
    gpu_util_mean, gpu_util_max, gpu_mem_peak";

/// One finished job as the central store holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct CentralJob {
    pub node: String,
    pub job_id: String,
    /// The node's run number (its local `seq`).
    pub seq: i64,
    pub name: String,
    pub user: String,
    pub uid: u32,
    pub ncpus: u32,
    pub cpus: String,
    pub mem_limit: Option<u64>,
    pub submitted_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub end_reason: Option<String>,
    pub summary: JobSummary,
    pub shipped_ms: i64,
}

/// Which jobs a central query wants; every field set narrows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CentralFilter {
    pub job_id: Option<String>,
    /// Only this owner (the daemon sets it for callers who are not admins).
    pub uid: Option<u32>,
    pub user: Option<String>,
    pub name: Option<String>,
    pub node: Option<String>,
    /// Ended at or after (ms since the epoch).
    pub since_ms: Option<i64>,
    /// How it ended (`completed`, `killed`, `oom`, `expired`, `failed`).
    pub end_class: Option<String>,
    /// At most this many, newest first (0: no limit).
    pub limit: usize,
}

impl Central {
    /// Connect (5 s timeout) and make sure the schema exists.
    pub fn connect(url: &str) -> Result<Central, CentralError> {
        Self::connect_with(url, None)
    }

    /// [`Central::connect`] with a password kept apart from the URL (a root-only file).
    pub fn connect_with(url: &str, password: Option<&str>) -> Result<Central, CentralError> {
        let target = target_of(url);
        let mut cfg: postgres::Config = url
            .parse()
            .map_err(|e: postgres::Error| CentralError::Url(e.to_string()))?;
        if let Some(p) = password {
            cfg.password(p);
        }
        cfg.connect_timeout(Duration::from_secs(5));
        if cfg.get_application_name().is_none() {
            cfg.application_name("pjw");
        }
        let client = cfg
            .connect(NoTls)
            .map_err(|source| CentralError::Postgres {
                target: target.clone(),
                source,
            })?;
        let mut c = Central { client, target };
        c.ensure_schema()?;
        Ok(c)
    }

    fn err(&self) -> impl Fn(postgres::Error) -> CentralError + '_ {
        move |source| CentralError::Postgres {
            target: self.target.clone(),
            source,
        }
    }

    fn ensure_schema(&mut self) -> Result<(), CentralError> {
        let target = self.target.clone();
        let err = |source| CentralError::Postgres {
            target: target.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(err)?;
        // One node at a time creates the tables (CREATE ... IF NOT EXISTS races otherwise).
        tx.execute("SELECT pg_advisory_xact_lock(7079877)", &[])
            .map_err(err)?;
        tx.batch_execute(SCHEMA).map_err(err)?;
        tx.commit().map_err(err)
    }

    /// Upsert finished jobs (with their series when `samples` is given) in one transaction.
    pub fn ship(
        &mut self,
        jobs: &[(JobRecord, JobSummary, Vec<Sample>)],
        now_ms: i64,
    ) -> Result<(), CentralError> {
        let target = self.target.clone();
        let err = |source| CentralError::Postgres {
            target: target.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(err)?;
        let upsert = tx.prepare(UPSERT_JOB).map_err(err)?;
        let insert = tx.prepare(INSERT_SAMPLES).map_err(err)?;
        for (j, s, samples) in jobs {
            let cpus = j.cpus.to_string();
            let gpu_mem_peak = s.gpu_mem_peak.map(to_i64);
            let params: [&(dyn ToSql + Sync); 35] = [
                &s.node,
                &j.job_id,
                &j.seq,
                &j.name,
                &j.user,
                &(j.uid as i64),
                &(j.ncpus as i64),
                &cpus,
                &j.mem_limit.map(to_i64),
                &j.submitted_ms,
                &j.started_ms,
                &j.ended_ms,
                &j.end_reason,
                &s.exit_status.map(|e| e as i64),
                &s.end.as_str(),
                &s.queued_ms,
                &s.running_ms,
                &s.backfill_ms,
                &s.frozen_ms,
                &(s.freezes as i64),
                &to_i64(s.cpu_user_usec),
                &to_i64(s.cpu_system_usec),
                &to_i64(s.mem_peak),
                &to_i64(s.swap_peak),
                &to_i64(s.io_rbytes),
                &to_i64(s.io_wbytes),
                &s.procs_total.map(to_i64),
                &s.threads_total.map(to_i64),
                &(s.procs_max as i64),
                &(s.threads_max as i64),
                &(s.samples as i64),
                &now_ms,
                &s.gpu_util_mean,
                &s.gpu_util_max,
                &gpu_mem_peak,
            ];
            tx.execute(&upsert, &params).map_err(err)?;
            insert_samples(&mut tx, &insert, &s.node, j.seq, samples).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Send the samples of running jobs taken since what PostgreSQL already has of them (its
    /// newest sample per job is the high-water mark: no local bookkeeping). One transaction;
    /// the number of samples sent.
    pub fn ship_live(
        &mut self,
        node: &str,
        series: &[(i64, Vec<Sample>)],
    ) -> Result<usize, CentralError> {
        let target = self.target.clone();
        let err = |source| CentralError::Postgres {
            target: target.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(err)?;
        let insert = tx.prepare(INSERT_SAMPLES).map_err(err)?;
        let mut n = 0;
        for (seq, samples) in series {
            insert_samples(&mut tx, &insert, node, *seq, samples).map_err(err)?;
            n += samples.len();
        }
        tx.commit().map_err(err)?;
        Ok(n)
    }

    /// The newest sample time PostgreSQL holds for each of `seqs` of `node`.
    pub fn high_water(
        &mut self,
        node: &str,
        seqs: &[i64],
    ) -> Result<std::collections::HashMap<i64, i64>, CentralError> {
        let rows = self
            .client
            .query(
                "SELECT seq, max(ts_ms) FROM pjw_samples WHERE node = $1 AND seq = ANY($2)
                 GROUP BY seq",
                &[&node, &seqs],
            )
            .map_err(self.err())?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Finished jobs across all nodes matching `f`, newest first.
    pub fn jobs(&mut self, f: &CentralFilter) -> Result<Vec<CentralJob>, CentralError> {
        let mut conds: Vec<String> = Vec::new();
        let mut args: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        let mut add = |cond: &str, v: Box<dyn ToSql + Sync>| {
            args.push(v);
            conds.push(cond.replace('?', &format!("${}", args.len())));
        };
        if let Some(v) = &f.job_id {
            add("job_id = ?", Box::new(v.clone()));
        }
        if let Some(v) = f.uid {
            add("uid = ?", Box::new(v as i64));
        }
        if let Some(v) = &f.user {
            add("user_name = ?", Box::new(v.clone()));
        }
        if let Some(v) = &f.name {
            add("name = ?", Box::new(v.clone()));
        }
        if let Some(v) = &f.node {
            add("node = ?", Box::new(v.clone()));
        }
        if let Some(v) = f.since_ms {
            add("ended_ms >= ?", Box::new(v));
        }
        if let Some(v) = &f.end_class {
            add("end_class = ?", Box::new(v.clone()));
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
        let sql = format!(
            "SELECT {JOB_COLS} FROM pjw_jobs {wher} ORDER BY ended_ms DESC NULLS LAST, node, seq DESC {limit}"
        );
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(&sql, &refs).map_err(self.err())?;
        Ok(rows.iter().map(job_from_row).collect())
    }

    /// The series of job `seq` of `node`, in time order.
    pub fn samples(&mut self, node: &str, seq: i64) -> Result<Vec<Sample>, CentralError> {
        let rows = self
            .client
            .query(
                "SELECT ts_ms, state, cpu_user_usec, cpu_system_usec, mem_current, mem_peak,
                        mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
                        psi_cpu_some, psi_cpu_full, psi_mem_some, psi_mem_full, psi_io_some,
                        psi_io_full, gpu_util, gpu_mem
                 FROM pjw_samples WHERE node = $1 AND seq = $2 ORDER BY ts_ms",
                &[&node, &seq],
            )
            .map_err(self.err())?;
        let u = |r: &postgres::Row, i: usize| r.get::<_, Option<i64>>(i).map(to_u64);
        Ok(rows
            .iter()
            .map(|r| Sample {
                seq,
                ts_ms: r.get(0),
                state: r
                    .get::<_, Option<String>>(1)
                    .and_then(|s| pjw_store::SampleState::parse(&s)),
                cpu_user_usec: u(r, 2),
                cpu_system_usec: u(r, 3),
                mem_current: u(r, 4),
                mem_peak: u(r, 5),
                mem_anon: u(r, 6),
                mem_file: u(r, 7),
                swap: u(r, 8),
                io_rbytes: u(r, 9),
                io_wbytes: u(r, 10),
                procs: u(r, 11).map(|v| v.min(u32::MAX as u64) as u32),
                threads: u(r, 12).map(|v| v.min(u32::MAX as u64) as u32),
                psi_cpu_some: r.get(13),
                psi_cpu_full: r.get(14),
                psi_mem_some: r.get(15),
                psi_mem_full: r.get(16),
                psi_io_some: r.get(17),
                psi_io_full: r.get(18),
                gpu_util: r.get(19),
                gpu_mem: u(r, 20),
            })
            .collect())
    }
}

/// Insert one job's samples (one statement: an array per column), skipping those already there.
fn insert_samples(
    tx: &mut postgres::Transaction<'_>,
    insert: &postgres::Statement,
    node: &str,
    seq: i64,
    samples: &[Sample],
) -> Result<(), postgres::Error> {
    if samples.is_empty() {
        return Ok(());
    }
    let col = |f: &dyn Fn(&Sample) -> Option<u64>| -> Vec<Option<i64>> {
        samples.iter().map(|x| f(x).map(to_i64)).collect()
    };
    let fcol = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<Option<f64>> {
        samples.iter().map(f).collect()
    };
    let ts: Vec<i64> = samples.iter().map(|x| x.ts_ms).collect();
    let state: Vec<Option<String>> = samples
        .iter()
        .map(|x| x.state.map(|s| s.as_str().to_string()))
        .collect();
    let cols = [
        col(&|x| x.cpu_user_usec),
        col(&|x| x.cpu_system_usec),
        col(&|x| x.mem_current),
        col(&|x| x.mem_peak),
        col(&|x| x.mem_anon),
        col(&|x| x.mem_file),
        col(&|x| x.swap),
        col(&|x| x.io_rbytes),
        col(&|x| x.io_wbytes),
        col(&|x| x.procs.map(u64::from)),
        col(&|x| x.threads.map(u64::from)),
    ];
    let fcols = [
        fcol(&|x| x.psi_cpu_some),
        fcol(&|x| x.psi_cpu_full),
        fcol(&|x| x.psi_mem_some),
        fcol(&|x| x.psi_mem_full),
        fcol(&|x| x.psi_io_some),
        fcol(&|x| x.psi_io_full),
        fcol(&|x| x.gpu_util),
    ];
    let gpu_mem = col(&|x| x.gpu_mem);
    let node = node.to_string();
    let mut p: Vec<&(dyn ToSql + Sync)> = vec![&node, &seq, &ts, &state];
    p.extend(cols.iter().map(|c| c as &(dyn ToSql + Sync)));
    p.extend(fcols.iter().map(|c| c as &(dyn ToSql + Sync)));
    p.push(&gpu_mem);
    tx.execute(insert, &p)?;
    Ok(())
}

fn job_from_row(r: &postgres::Row) -> CentralJob {
    let u = |i: usize| to_u64(r.get::<_, i64>(i));
    let ou = |i: usize| r.get::<_, Option<i64>>(i).map(to_u64);
    let u32_ = |i: usize| u(i).min(u32::MAX as u64) as u32;
    let node: String = r.get(0);
    let seq: i64 = r.get(2);
    let end = r.get::<_, String>(14);
    let mut summary = JobSummary::new(
        seq,
        &node,
        pjw_store::EndClass::parse(&end).unwrap_or(pjw_store::EndClass::Failed),
    );
    summary.exit_status = r.get::<_, Option<i64>>(13).map(|e| e as i32);
    summary.queued_ms = r.get(15);
    summary.running_ms = r.get(16);
    summary.backfill_ms = r.get(17);
    summary.frozen_ms = r.get(18);
    summary.freezes = u32_(19);
    summary.cpu_user_usec = u(20);
    summary.cpu_system_usec = u(21);
    summary.mem_peak = u(22);
    summary.swap_peak = u(23);
    summary.io_rbytes = u(24);
    summary.io_wbytes = u(25);
    summary.procs_total = ou(26);
    summary.threads_total = ou(27);
    summary.procs_max = u32_(28);
    summary.threads_max = u32_(29);
    summary.samples = u32_(30);
    summary.shipped_at = Some(r.get(31));
    summary.gpu_util_mean = r.get(32);
    summary.gpu_util_max = r.get(33);
    summary.gpu_mem_peak = ou(34);
    CentralJob {
        node,
        job_id: r.get(1),
        seq,
        name: r.get(3),
        user: r.get(4),
        uid: u32_(5),
        ncpus: u32_(6),
        cpus: r.get(7),
        mem_limit: ou(8),
        submitted_ms: r.get(9),
        started_ms: r.get(10),
        ended_ms: r.get(11),
        end_reason: r.get(12),
        summary,
        shipped_ms: r.get(31),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Ship everything unshipped in `store`, batch by batch; the number of jobs shipped.
pub fn ship_pending(
    store: &mut Store,
    central: &mut Central,
    cfg: &ShipConfig,
) -> Result<usize, CentralError> {
    let mut total = 0;
    loop {
        let batch = store.unshipped(cfg.batch_size)?;
        if batch.is_empty() {
            return Ok(total);
        }
        let mut jobs = Vec::with_capacity(batch.len());
        let mut seqs = Vec::with_capacity(batch.len());
        for s in batch {
            seqs.push(s.seq);
            // A summary without its job record cannot be attributed; it is marked and skipped.
            let Some(j) = store.job(s.seq)? else {
                warn!(seq = s.seq, "finished job without a record; not shipped");
                continue;
            };
            let samples = store.samples(s.seq, None)?;
            jobs.push((j, s, samples));
        }
        let now = now_ms();
        central.ship(&jobs, now)?;
        // Only after PostgreSQL committed: a crash in between re-sends the batch, which the
        // upsert absorbs.
        store.mark_shipped(&seqs, now)?;
        total += seqs.len();
        debug!(jobs = seqs.len(), "batch shipped to the central store");
        if seqs.len() < cfg.batch_size {
            return Ok(total);
        }
    }
}

/// With `ship_samples`: send the new samples of this node's running jobs.
pub fn ship_live(store: &Store, central: &mut Central, node: &str) -> Result<usize, CentralError> {
    let seqs: Vec<i64> = store
        .live_jobs()?
        .iter()
        .filter(|j| j.started_ms.is_some())
        .map(|j| j.seq)
        .collect();
    if seqs.is_empty() {
        return Ok(0);
    }
    let hw = central.high_water(node, &seqs)?;
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

enum Msg {
    Wake,
    Stop,
}

/// The shipper thread. Dropping it tells the thread to stop; [`Shipper::stop`] also waits.
#[derive(Debug)]
pub struct Shipper {
    tx: mpsc::Sender<Msg>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Wake => "wake",
            Msg::Stop => "stop",
        })
    }
}

impl Shipper {
    /// Start shipping from the SQLite database at `db` (opened on the thread, with its own
    /// connection). It ships what is already spooled at once.
    pub fn spawn(db: PathBuf, cfg: ShipConfig) -> std::io::Result<Shipper> {
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("pjw-central".into())
            .spawn(move || run(db, cfg, rx))?;
        Ok(Shipper {
            tx,
            handle: Some(handle),
        })
    }

    /// A job has finished: ship it (cheap; never blocks).
    pub fn wake(&self) {
        let _ = self.tx.send(Msg::Wake);
    }
}

impl Shipper {
    /// Stop the thread and wait for it (after the batch in flight, which may wait on a
    /// connection timeout).
    pub fn stop(mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Shipper {
    /// Tell the thread to stop, without waiting: a daemon that exits must not hang on a
    /// PostgreSQL that does not answer. A batch cut off is rolled back by PostgreSQL and stays
    /// unshipped locally, so it is sent again later.
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

fn run(db: PathBuf, cfg: ShipConfig, rx: mpsc::Receiver<Msg>) {
    let mut store: Option<Store> = None;
    let mut central: Option<Central> = None;
    let mut down_since: Option<std::time::Instant> = None;
    let target = target_of(&cfg.url);
    loop {
        let pass = (|| -> Result<usize, CentralError> {
            if store.is_none() {
                store = Some(Store::open_file(&db)?);
            }
            if central.is_none() {
                central = Some(Central::connect_with(&cfg.url, cfg.password.as_deref())?);
            }
            match (store.as_mut(), central.as_mut()) {
                (Some(s), Some(c)) => {
                    let n = ship_pending(s, c, &cfg)?;
                    if cfg.ship_samples {
                        let live = ship_live(s, c, &cfg.node)?;
                        debug!(samples = live, "live samples shipped");
                    }
                    Ok(n)
                }
                _ => Ok(0),
            }
        })();
        match pass {
            Ok(n) => {
                if let Some(t) = down_since.take() {
                    info!(target = %target, node = %cfg.node, jobs = n, down_secs = t.elapsed().as_secs(),
                        "central store reachable again; spooled jobs shipped");
                } else if n > 0 {
                    debug!(jobs = n, "jobs shipped to the central store");
                }
            }
            Err(e) => {
                if down_since.is_none() {
                    warn!(target = %target, node = %cfg.node, error = %e, retry_secs = cfg.retry.as_secs_f64(),
                        "central store unreachable; finished jobs stay spooled in the local store");
                    down_since = Some(std::time::Instant::now());
                } else {
                    debug!(error = %e, "central store still unreachable");
                }
                // Reconnect next time (the connection may be broken).
                central = None;
            }
        }
        let next = if down_since.is_some() || cfg.ship_samples {
            rx.recv_timeout(cfg.retry)
        } else {
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        };
        match next {
            Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {
                // Several jobs ending together: one pass ships them all.
                while let Ok(m) = rx.try_recv() {
                    if matches!(m, Msg::Stop) {
                        return;
                    }
                }
            }
            Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_never_show_credentials() {
        let cases = [
            (
                "postgres://u:secret@db.example:5433/pjw",
                "db.example:5433/pjw",
            ),
            ("postgresql://db/pjw?sslmode=disable", "db/pjw"),
            ("postgres://a@b@h:1/d", "h:1/d"),
        ];
        for (url, want) in cases {
            assert_eq!(target_of(url), want);
        }
    }
}
