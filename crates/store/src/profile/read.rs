//! Profile reads: a job's summary, its series and process rows (whole or by page), the jobs a
//! report filter selects, and the jobs not shipped to the central store yet.

use rusqlite::{params, params_from_iter, OptionalExtension};

use super::*;
use crate::{Store, StoreError, StoredState};

impl Store {
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
        match f.state {
            None => {}
            Some(StateFilter::Running) => conds.push(format!(
                "j.state IN ('{}', '{}')",
                StoredState::Starting.as_str(),
                StoredState::Running.as_str()
            )),
            Some(StateFilter::Queued) => {
                args.push(Value::Text(StoredState::Queued.as_str().to_string()));
                conds.push(format!("j.state = ?{}", args.len()));
            }
            Some(StateFilter::Ended(class)) => {
                args.push(Value::Text(class.as_str().to_string()));
                conds.push(format!("s.end_class = ?{}", args.len()));
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
}
