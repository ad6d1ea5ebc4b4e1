//! The central store's schema: numbered migrations, time partitions and retention.
//!
//! `pjw_schema` holds the applied migrations. A database without it is version 0 (empty) or,
//! when `pjw_jobs` exists, version 1 (the tables of pjw before this table existed: plain
//! `pjw_jobs` and `pjw_samples`). Migrations run on first contact under an advisory lock, so
//! nodes starting together neither race nor run one twice:
//!
//! 1. The plain tables (and their GPU columns, for tables older still).
//! 2. Time partitions: `pjw_jobs` by `ended_ms` in weeks (Monday 00:00 UTC), `pjw_samples` by
//!    `ts_ms` in days (UTC), with the indexes of the cluster queries; the rows of the plain
//!    tables still inside the retention are copied over, the plain tables dropped.
//!
//! Partitions are named after their first day (`pjw_jobs_w20261123`, `pjw_samples_d20261126`).
//! [`maintain`] creates those of the next days ahead of time and drops those wholly older than
//! the retention; a row that finds no partition (a node shipping jobs spooled for a week) makes
//! the writer create it and try again ([`ensure_partitions`]).

use std::collections::BTreeSet;

use postgres::{Client, GenericClient, Transaction};

pub const DAY_MS: i64 = 86_400_000;
const WEEK_MS: i64 = 7 * DAY_MS;
/// 1970-01-05, the first Monday after the epoch, in days.
const FIRST_MONDAY_DAYS: i64 = 4;
/// The advisory lock key of schema changes (migrations, partitions, retention).
pub const SCHEMA_LOCK: i64 = 7_079_877;
/// The newest migration.
pub const LATEST: i32 = 2;
/// How long a maintenance pass done by any node counts for the others.
pub const MAINTAIN_EVERY_MS: i64 = 3_600_000;

/// The two partitioned tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    Jobs,
    Samples,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Jobs => "pjw_jobs",
            Table::Samples => "pjw_samples",
        }
    }

    /// Each partition's width.
    pub fn width_ms(self) -> i64 {
        match self {
            Table::Jobs => WEEK_MS,
            Table::Samples => DAY_MS,
        }
    }

    /// The start of the partition holding `t` (ms since the epoch). Pure.
    pub fn start_of(self, t: i64) -> i64 {
        match self {
            Table::Samples => t.div_euclid(DAY_MS) * DAY_MS,
            Table::Jobs => {
                let off = FIRST_MONDAY_DAYS * DAY_MS;
                (t - off).div_euclid(WEEK_MS) * WEEK_MS + off
            }
        }
    }

    /// The name of the partition starting at `start`. Pure.
    pub fn partition_name(self, start: i64) -> String {
        let day = chrono::DateTime::from_timestamp_millis(start)
            .map(|d| d.format("%Y%m%d").to_string())
            .unwrap_or_else(|| format!("x{start}"));
        match self {
            Table::Jobs => format!("pjw_jobs_w{day}"),
            Table::Samples => format!("pjw_samples_d{day}"),
        }
    }

    /// The start of a partition from its name (None for tables pjw did not name). Pure.
    pub fn start_from_name(self, name: &str) -> Option<i64> {
        let prefix = match self {
            Table::Jobs => "pjw_jobs_w",
            Table::Samples => "pjw_samples_d",
        };
        let day = name.strip_prefix(prefix)?;
        let d = chrono::NaiveDate::parse_from_str(day, "%Y%m%d").ok()?;
        let start = d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
        (self.start_of(start) == start).then_some(start)
    }

    /// The starts of the partitions that `[from, to]` touches. Pure.
    pub fn starts_between(self, from: i64, to: i64) -> Vec<i64> {
        let mut s = self.start_of(from);
        let mut out = Vec::new();
        while s <= to {
            out.push(s);
            s += self.width_ms();
        }
        out
    }
}

/// How long the central store keeps rows (`[central] jobs_retention_days`,
/// `samples_retention_days`): whole partitions are dropped once all their rows are older.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub jobs_days: u32,
    pub samples_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            jobs_days: 400,
            samples_days: 30,
        }
    }
}

impl Retention {
    /// Rows older than this are not kept (ms since the epoch). Pure.
    pub fn cutoff(&self, table: Table, now_ms: i64) -> i64 {
        let days = match table {
            Table::Jobs => self.jobs_days,
            Table::Samples => self.samples_days,
        };
        now_ms - days as i64 * DAY_MS
    }

    /// Whether a partition starting at `start` is wholly older than the retention. Pure.
    pub fn expired(&self, table: Table, start: i64, now_ms: i64) -> bool {
        start + table.width_ms() <= self.cutoff(table, now_ms)
    }
}

const JOB_COLUMNS: &str = "
    node TEXT NOT NULL, job_id TEXT NOT NULL, seq BIGINT NOT NULL,
    name TEXT NOT NULL, user_name TEXT NOT NULL, uid BIGINT NOT NULL,
    ncpus BIGINT NOT NULL, cpus TEXT NOT NULL, mem_limit BIGINT,
    submitted_ms BIGINT NOT NULL, started_ms BIGINT, ended_ms BIGINT NOT NULL, end_reason TEXT,
    exit_status BIGINT, end_class TEXT NOT NULL,
    queued_ms BIGINT NOT NULL, running_ms BIGINT NOT NULL, backfill_ms BIGINT NOT NULL,
    frozen_ms BIGINT NOT NULL, freezes BIGINT NOT NULL,
    cpu_user_usec BIGINT NOT NULL, cpu_system_usec BIGINT NOT NULL,
    mem_peak BIGINT NOT NULL, swap_peak BIGINT NOT NULL, io_rbytes BIGINT NOT NULL,
    io_wbytes BIGINT NOT NULL, procs_total BIGINT, threads_total BIGINT,
    procs_max BIGINT NOT NULL, threads_max BIGINT NOT NULL, samples BIGINT NOT NULL,
    shipped_ms BIGINT NOT NULL,
    gpu_util_mean DOUBLE PRECISION, gpu_util_max DOUBLE PRECISION, gpu_mem_peak BIGINT";

const SAMPLE_COLUMNS: &str = "
    node TEXT NOT NULL, seq BIGINT NOT NULL, ts_ms BIGINT NOT NULL, state TEXT,
    cpu_user_usec BIGINT, cpu_system_usec BIGINT, mem_current BIGINT, mem_peak BIGINT,
    mem_anon BIGINT, mem_file BIGINT, swap BIGINT, io_rbytes BIGINT, io_wbytes BIGINT,
    procs BIGINT, threads BIGINT,
    psi_cpu_some DOUBLE PRECISION, psi_cpu_full DOUBLE PRECISION,
    psi_mem_some DOUBLE PRECISION, psi_mem_full DOUBLE PRECISION,
    psi_io_some DOUBLE PRECISION, psi_io_full DOUBLE PRECISION,
    gpu_util DOUBLE PRECISION, gpu_mem BIGINT";

/// Migration 1: the plain tables as pjw made them before partitions.
const MIGRATION_1: &str = "
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

/// Migration 2, first part: the plain tables step aside, the partitioned ones take their names.
fn migration_2_tables() -> String {
    format!(
        "
ALTER TABLE pjw_jobs RENAME TO pjw_jobs_v1;
ALTER INDEX pjw_jobs_pkey RENAME TO pjw_jobs_v1_pkey;
ALTER INDEX IF EXISTS pjw_jobs_user RENAME TO pjw_jobs_v1_user;
ALTER INDEX IF EXISTS pjw_jobs_ended RENAME TO pjw_jobs_v1_ended;
ALTER TABLE pjw_samples RENAME TO pjw_samples_v1;
ALTER INDEX pjw_samples_pkey RENAME TO pjw_samples_v1_pkey;
CREATE TABLE pjw_jobs ({JOB_COLUMNS},
    PRIMARY KEY (node, job_id, seq, ended_ms)) PARTITION BY RANGE (ended_ms);
CREATE INDEX pjw_jobs_ended ON pjw_jobs (ended_ms);
CREATE INDEX pjw_jobs_user ON pjw_jobs (user_name, ended_ms);
CREATE INDEX pjw_jobs_uid ON pjw_jobs (uid, ended_ms);
CREATE INDEX pjw_jobs_node ON pjw_jobs (node, ended_ms);
CREATE INDEX pjw_jobs_job ON pjw_jobs (job_id);
CREATE INDEX pjw_jobs_cpu ON pjw_jobs ((cpu_user_usec + cpu_system_usec));
CREATE INDEX pjw_jobs_mem ON pjw_jobs (mem_peak);
CREATE INDEX pjw_jobs_wait ON pjw_jobs (queued_ms);
CREATE TABLE pjw_samples ({SAMPLE_COLUMNS},
    PRIMARY KEY (node, seq, ts_ms)) PARTITION BY RANGE (ts_ms);
CREATE TABLE IF NOT EXISTS pjw_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);"
    )
}

/// Migration 2, last part: the rows still inside the retention move over.
const MIGRATION_2_COPY: &str = "
INSERT INTO pjw_jobs SELECT node, job_id, seq, name, user_name, uid, ncpus, cpus, mem_limit,
    submitted_ms, started_ms, coalesce(ended_ms, submitted_ms), end_reason, exit_status,
    end_class, queued_ms, running_ms, backfill_ms, frozen_ms, freezes, cpu_user_usec,
    cpu_system_usec, mem_peak, swap_peak, io_rbytes, io_wbytes, procs_total, threads_total,
    procs_max, threads_max, samples, shipped_ms, gpu_util_mean, gpu_util_max, gpu_mem_peak
    FROM pjw_jobs_v1 WHERE coalesce(ended_ms, submitted_ms) >= $1;
";
const MIGRATION_2_COPY_SAMPLES: &str = "
INSERT INTO pjw_samples SELECT node, seq, ts_ms, state, cpu_user_usec, cpu_system_usec,
    mem_current, mem_peak, mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
    psi_cpu_some, psi_cpu_full, psi_mem_some, psi_mem_full, psi_io_some, psi_io_full, gpu_util,
    gpu_mem FROM pjw_samples_v1 WHERE ts_ms >= $1;
";

/// The schema version of the database (0: empty).
pub fn version<C: GenericClient>(c: &mut C) -> Result<i32, postgres::Error> {
    let has = |c: &mut C, t: &str| -> Result<bool, postgres::Error> {
        Ok(c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&t])?
            .get(0))
    };
    if has(c, "pjw_schema")? {
        let v: Option<i32> = c
            .query_one("SELECT max(version) FROM pjw_schema", &[])?
            .get(0);
        return Ok(v.unwrap_or(0));
    }
    Ok(if has(c, "pjw_jobs")? { 1 } else { 0 })
}

/// What a migration did, for the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    pub from: i32,
    pub to: i32,
    /// Rows of the plain tables copied into the partitioned ones.
    pub jobs_copied: u64,
    pub samples_copied: u64,
}

/// Bring the schema to [`LATEST`] (in one transaction, under the schema lock).
pub fn migrate(
    client: &mut Client,
    retention: &Retention,
    now_ms: i64,
) -> Result<Migrated, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let from = version(&mut tx)?;
    let mut done = Migrated {
        from,
        to: from,
        ..Migrated::default()
    };
    if from >= LATEST {
        tx.commit()?;
        return Ok(done);
    }
    // Tables of an older pjw may lack the GPU columns: migration 1 adds them (it is idempotent).
    tx.batch_execute(MIGRATION_1)?;
    if from < 2 {
        tx.batch_execute(&migration_2_tables())?;
        let cut_jobs = retention.cutoff(Table::Jobs, now_ms);
        let cut_samples = retention.cutoff(Table::Samples, now_ms);
        for (table, src, col, cut) in [
            (
                Table::Jobs,
                "pjw_jobs_v1",
                "coalesce(ended_ms, submitted_ms)",
                cut_jobs,
            ),
            (Table::Samples, "pjw_samples_v1", "ts_ms", cut_samples),
        ] {
            let r = tx.query_one(
                &format!("SELECT min({col}), max({col}) FROM {src} WHERE {col} >= $1"),
                &[&cut],
            )?;
            if let (Some(lo), Some(hi)) = (r.get::<_, Option<i64>>(0), r.get::<_, Option<i64>>(1)) {
                create_partitions(&mut tx, table, &table.starts_between(lo, hi))?;
            }
        }
        done.jobs_copied = tx.execute(MIGRATION_2_COPY, &[&cut_jobs])?;
        done.samples_copied = tx.execute(MIGRATION_2_COPY_SAMPLES, &[&cut_samples])?;
        tx.batch_execute(
            "DROP TABLE pjw_jobs_v1; DROP TABLE pjw_samples_v1;
             CREATE TABLE IF NOT EXISTS pjw_schema (version INT PRIMARY KEY, applied_ms BIGINT NOT NULL);",
        )?;
    }
    for v in 1..=LATEST {
        tx.execute(
            "INSERT INTO pjw_schema (version, applied_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&v, &now_ms],
        )?;
    }
    // Partitions for now and the next days.
    for table in [Table::Jobs, Table::Samples] {
        create_partitions(&mut tx, table, &ahead(table, now_ms))?;
    }
    tx.commit()?;
    done.to = LATEST;
    Ok(done)
}

/// The partitions that should exist ahead of writes at `now_ms`: from yesterday to two days on.
pub fn ahead(table: Table, now_ms: i64) -> Vec<i64> {
    table.starts_between(now_ms - DAY_MS, now_ms + 2 * DAY_MS)
}

/// Create the partitions starting at `starts` that do not exist yet (the caller holds the
/// schema lock, or takes it here in its transaction).
pub fn create_partitions(
    tx: &mut Transaction<'_>,
    table: Table,
    starts: &[i64],
) -> Result<usize, postgres::Error> {
    let mut n = 0;
    for &s in starts {
        let name = table.partition_name(s);
        let exists: bool = tx
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])?
            .get(0);
        if exists {
            continue;
        }
        tx.batch_execute(&format!(
            "CREATE TABLE {name} PARTITION OF {} FOR VALUES FROM ({s}) TO ({})",
            table.name(),
            s + table.width_ms()
        ))?;
        n += 1;
    }
    Ok(n)
}

/// Make sure the partitions for these rows' times exist (after a write found none).
pub fn ensure_partitions(
    client: &mut Client,
    needed: &BTreeSet<(Table, i64)>,
) -> Result<usize, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let mut n = 0;
    for table in [Table::Jobs, Table::Samples] {
        let starts: Vec<i64> = needed
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, s)| *s)
            .collect();
        n += create_partitions(&mut tx, table, &starts)?;
    }
    tx.commit()?;
    Ok(n)
}

/// What a maintenance pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Maintained {
    /// False when another node holds the lock or did it within the hour.
    pub ran: bool,
    pub created: usize,
    /// The partitions dropped (older than the retention).
    pub dropped: Vec<String>,
}

/// Create the partitions of the next days and drop those older than the retention; at most
/// once an hour across the cluster (`pjw_meta.maintained_ms`), by one node at a time.
pub fn maintain(
    client: &mut Client,
    retention: &Retention,
    now_ms: i64,
    force: bool,
) -> Result<Maintained, postgres::Error> {
    let mut tx = client.transaction()?;
    let got: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?
        .get(0);
    if !got {
        return Ok(Maintained::default());
    }
    let last: Option<i64> = tx
        .query_opt(
            "SELECT value FROM pjw_meta WHERE key = 'maintained_ms'",
            &[],
        )?
        .map(|r| r.get(0));
    if !force && last.is_some_and(|t| now_ms - t < MAINTAIN_EVERY_MS && t <= now_ms) {
        return Ok(Maintained::default());
    }
    let mut done = Maintained {
        ran: true,
        ..Maintained::default()
    };
    for table in [Table::Jobs, Table::Samples] {
        done.created += create_partitions(&mut tx, table, &ahead(table, now_ms))?;
        for name in partitions(&mut tx, table)? {
            let Some(start) = table.start_from_name(&name) else {
                continue;
            };
            if retention.expired(table, start, now_ms) {
                tx.batch_execute(&format!("DROP TABLE {name}"))?;
                done.dropped.push(name);
            }
        }
    }
    tx.execute(
        "INSERT INTO pjw_meta (key, value) VALUES ('maintained_ms', $1)
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&now_ms],
    )?;
    tx.commit()?;
    Ok(done)
}

/// The partitions of `table`, by name.
pub fn partitions<C: GenericClient>(
    c: &mut C,
    table: Table,
) -> Result<Vec<String>, postgres::Error> {
    let rows = c.query(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = to_regclass($1) ORDER BY 1",
        &[&table.name()],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOV_26_2026: i64 = 1_795_651_200_000; // 2026-11-26 00:00 UTC, a Thursday

    #[test]
    fn partitions_are_days_and_weeks_from_monday_utc() {
        let t = NOV_26_2026 + 13 * 3_600_000;
        assert_eq!(Table::Samples.start_of(t), NOV_26_2026);
        assert_eq!(
            Table::Samples.partition_name(NOV_26_2026),
            "pjw_samples_d20261126"
        );
        let monday = NOV_26_2026 - 3 * DAY_MS;
        assert_eq!(Table::Jobs.start_of(t), monday);
        assert_eq!(Table::Jobs.partition_name(monday), "pjw_jobs_w20261123");
        assert_eq!(Table::Jobs.start_of(monday), monday);
        assert_eq!(Table::Jobs.start_of(monday - 1), monday - WEEK_MS);
        // Before the epoch too (a clock gone wrong must still find a partition).
        assert_eq!(Table::Samples.start_of(-1), -DAY_MS);
        for table in [Table::Jobs, Table::Samples] {
            let s = table.start_of(t);
            assert_eq!(table.start_from_name(&table.partition_name(s)), Some(s));
        }
        assert_eq!(
            Table::Jobs.start_from_name("pjw_jobs_w20261126"),
            None,
            "not a Monday"
        );
        assert_eq!(Table::Jobs.start_from_name("pjw_jobs_old"), None);
        assert_eq!(Table::Samples.start_from_name("pjw_jobs_w20261123"), None);
    }

    #[test]
    fn ranges_touch_every_partition_once() {
        let d = NOV_26_2026;
        assert_eq!(
            Table::Samples.starts_between(d + 5, d + 2 * DAY_MS),
            [d, d + DAY_MS, d + 2 * DAY_MS]
        );
        assert_eq!(Table::Samples.starts_between(d + 5, d + 6), [d]);
        assert_eq!(ahead(Table::Samples, d + 1).len(), 4);
        assert_eq!(ahead(Table::Jobs, d + 1).len(), 1);
    }

    #[test]
    fn retention_drops_only_wholly_old_partitions() {
        let r = Retention {
            jobs_days: 14,
            samples_days: 2,
        };
        let now = NOV_26_2026 + 3_600_000;
        let table = [
            (Table::Samples, NOV_26_2026 - 3 * DAY_MS, true),
            // Ends 1 h after the cutoff: some rows are still young.
            (Table::Samples, NOV_26_2026 - 2 * DAY_MS, false),
            (Table::Samples, NOV_26_2026, false),
            (Table::Jobs, Table::Jobs.start_of(now) - 3 * WEEK_MS, true),
            (Table::Jobs, Table::Jobs.start_of(now) - 2 * WEEK_MS, false),
        ];
        for (t, start, want) in table {
            assert_eq!(r.expired(t, start, now), want, "{t:?} {start}");
        }
    }
}
