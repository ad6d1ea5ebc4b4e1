//! Profile writes: sample and process batches, a job's end with its summary, the central
//! store's shipped marks, and retention.

use rusqlite::params;

use super::*;
use crate::{Store, StoreError};

/// Ended jobs a user keeps when the store is over `profile.max_db_size`, before anyone's
/// series go: beyond it, that user's oldest go whole (one user's flood of short jobs, rows
/// without series, would otherwise make retention drop every other user's series).
pub const ROWS_PER_USER: u64 = 10_000;
/// Jobs removed per transaction when a user is over [`ROWS_PER_USER`].
const FLOOD_BATCH: u64 = 500;

/// The tables of a job's side rows, removed with its row.
const SIDE_TABLES: [&str; 5] = [
    "job_gpus",
    "job_io",
    "job_bind",
    "job_steps",
    "job_time_limit",
];

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
    /// `now_ms - max_age_ms`; then, while the database holds more than `max_bytes`, first the
    /// oldest ended jobs of a user holding more than [`ROWS_PER_USER`] of them (whole), then the
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
        self.apply_retention_with(now_ms, max_age_ms, max_bytes, keep_unshipped, ROWS_PER_USER)
    }

    /// [`Store::apply_retention`] with the rows a user keeps above the cap as `rows_per_user`.
    pub fn apply_retention_with(
        &mut self,
        now_ms: i64,
        max_age_ms: Option<i64>,
        max_bytes: Option<u64>,
        keep_unshipped: bool,
        rows_per_user: u64,
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
            self.delete_ended_before(now_ms.saturating_sub(age), guard, &mut pruned)?;
        }
        if let Some(cap) = max_bytes {
            // One user's flood of jobs goes before anyone's series (review F3): their oldest
            // ended jobs beyond `rows_per_user`, whole, in batches.
            while self.used_bytes()? > cap {
                let Some((uid, over)) = self.user_over(rows_per_user, guard)? else {
                    break;
                };
                pruned.jobs += self.delete_oldest_of(uid, over.min(FLOOD_BATCH), guard)?;
            }
            // Then the oldest ended jobs' series, one job per transaction.
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

    /// Remove ended jobs (those retention may touch, `guard`) that ended before `cutoff`
    /// whole: series, summary, side rows, record; counted in `pruned`.
    fn delete_ended_before(
        &mut self,
        cutoff: i64,
        guard: &str,
        pruned: &mut Pruned,
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
        for side in SIDE_TABLES {
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
        Ok(())
    }

    /// The user holding the most ended jobs (those retention may touch, `guard`), and how many
    /// beyond `limit`; None when nobody holds more.
    fn user_over(&self, limit: u64, guard: &str) -> Result<Option<(u32, u64)>, StoreError> {
        let top: Option<(u32, u64)> = self
            .conn
            .query_row(
                &format!(
                    "SELECT uid, COUNT(*) AS n FROM jobs WHERE state = 'ended' {guard}
                     GROUP BY uid ORDER BY n DESC LIMIT 1"
                ),
                [],
                |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?.max(0) as u64)),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(self.err())?;
        Ok(top
            .filter(|(_, n)| *n > limit)
            .map(|(uid, n)| (uid, n - limit)))
    }

    /// Remove the `n` oldest ended jobs of `uid` (those retention may touch, `guard`) whole:
    /// series, summary, side rows, record. How many went.
    fn delete_oldest_of(&mut self, uid: u32, n: u64, guard: &str) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let pick = format!(
            "SELECT seq FROM jobs WHERE state = 'ended' AND uid = ?1 {guard} ORDER BY seq LIMIT ?2"
        );
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let n = n.min(i64::MAX as u64) as i64;
        for table in [
            "samples",
            "process_samples",
            "thread_samples",
            "job_summary",
        ]
        .into_iter()
        .chain(SIDE_TABLES)
        {
            tx.execute(
                &format!("DELETE FROM {table} WHERE seq IN ({pick})"),
                params![uid, n],
            )
            .map_err(err)?;
        }
        let gone = tx
            .execute(
                &format!("DELETE FROM jobs WHERE seq IN ({pick})"),
                params![uid, n],
            )
            .map_err(err)? as u64;
        tx.commit().map_err(err)?;
        Ok(gone)
    }
}
