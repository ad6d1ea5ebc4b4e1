//! The job table's reads and writes, and each job's side rows (starter, binding, GPUs, I/O).

use pjw_core::io_limits::JobIo;
use pjw_core::thread_bind::BindMode;
use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_core::{CpuSet, GpuSet};
use rusqlite::{params, OptionalExtension};

use crate::{
    exec_cached, insert_job_on, parse_placement, set_bind_on, set_gpus_on, set_io_on,
    set_starter_on, set_starting_on, JobRecord, StarterRecord, Store, StoreError, StoredRole,
    StoredState,
};

/// A job's time limit as stored: the limit, where it came from and the running time counted
/// (written now and then: at most a minute or so behind; see [`Store::set_times_ran`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredTimeLimit {
    pub limit: TimeLimit,
    pub source: LimitSource,
    pub ran_ms: u64,
}

impl Store {
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

    /// A job's time limit, where it came from and the running time it has counted; None: it
    /// has none. A limit that cannot be one is an error; a source word of no known kind reads
    /// as `asked` and a negative time counted as none (neither lifts the limit).
    pub fn time_limit(&self, seq: i64) -> Result<Option<StoredTimeLimit>, StoreError> {
        let row: Option<(i64, String, i64)> = self
            .conn
            .query_row(
                "SELECT limit_s, source, ran_ms FROM job_time_limit WHERE seq = ?1",
                params![seq],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(self.err())?;
        let Some((limit_s, source, ran_ms)) = row else {
            return Ok(None);
        };
        let bad = |reason: String| StoreError::BadRow {
            path: self.path.clone(),
            seq,
            reason,
        };
        let limit = u64::try_from(limit_s)
            .ok()
            .and_then(TimeLimit::from_secs)
            .ok_or_else(|| bad(format!("time limit {limit_s}")))?;
        // Where it came from only words the job's end; the limit holds whatever it says, and
        // a negative time counted is none.
        let source = LimitSource::parse(&source).unwrap_or_default();
        let ran_ms = u64::try_from(ran_ms).unwrap_or(0);
        Ok(Some(StoredTimeLimit {
            limit,
            source,
            ran_ms,
        }))
    }

    /// The running time each job's limit has counted (`(seq, ms)`), so that a restart goes on
    /// from it: one transaction for all of them.
    pub fn set_times_ran(&mut self, times: &[(i64, u64)]) -> Result<(), StoreError> {
        self.immediate(|tx| {
            for &(seq, ran_ms) in times {
                exec_cached(
                    tx,
                    "UPDATE job_time_limit SET ran_ms = ?2 WHERE seq = ?1",
                    params![seq, ran_ms as i64],
                )?;
            }
            Ok(())
        })
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
