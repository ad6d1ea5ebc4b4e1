//! A job's steps: the `pjw run`s started from inside it (schema version 10, `job_steps`),
//! written when the job ends ([`Store::record_steps`], one transaction) and read by the report
//! ([`Store::steps`]). Retention removes them with their job.

use pjw_core::CpuSet;
use rusqlite::params;

use crate::{Store, StoreError};

/// One step of a job, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// Its number in the job, from 0.
    pub step: u32,
    pub name: String,
    /// The uid of its process.
    pub uid: u32,
    pub cpus: CpuSet,
    pub pid: u32,
    pub started_ms: i64,
    /// None: it had not ended when the record was written.
    pub ended_ms: Option<i64>,
    /// Its process's exit status (128 + signal when killed by one), when known.
    pub exit_status: Option<i32>,
}

impl Store {
    /// Record steps of job `seq` (again: a step recorded before is replaced) in one
    /// transaction.
    pub fn record_steps(&mut self, seq: i64, steps: &[StepRecord]) -> Result<(), StoreError> {
        self.immediate(|tx| {
            for s in steps {
                crate::exec_cached(
                    tx,
                    "INSERT OR REPLACE INTO job_steps
                         (seq, step, name, uid, cpus, pid, started_ms, ended_ms, exit_status)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        seq,
                        s.step,
                        s.name,
                        s.uid,
                        s.cpus.to_string(),
                        s.pid,
                        s.started_ms,
                        s.ended_ms,
                        s.exit_status
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// The recorded steps of job `seq`, by number.
    pub fn steps(&self, seq: i64) -> Result<Vec<StepRecord>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, name, uid, cpus, pid, started_ms, ended_ms, exit_status
                 FROM job_steps WHERE seq = ?1 ORDER BY step",
            )
            .map_err(self.err())?;
        let rows = st
            .query_map(params![seq], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, u32>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, u32>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                    r.get::<_, Option<i32>>(7)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (step, name, uid, cpus, pid, started_ms, ended_ms, exit_status) =
                row.map_err(self.err())?;
            let cpus = CpuSet::parse_list(&cpus).map_err(|e| StoreError::BadRow {
                path: self.path.clone(),
                seq,
                reason: format!("step {step} cpus {cpus:?}: {e}"),
            })?;
            out.push(StepRecord {
                step,
                name,
                uid,
                cpus,
                pid,
                started_ms,
                ended_ms,
                exit_status,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_in_order_and_go_with_their_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("pjw.db")).unwrap();
        let step = |n: u32, ended: Option<i64>| StepRecord {
            step: n,
            name: format!("s{n}"),
            uid: 1000,
            cpus: CpuSet::parse_list("2-3").unwrap(),
            pid: 4000 + n,
            started_ms: 10,
            ended_ms: ended,
            exit_status: ended.map(|_| 7),
        };
        s.record_steps(5, &[step(1, Some(20)), step(0, None)])
            .unwrap();
        assert_eq!(s.steps(5).unwrap(), vec![step(0, None), step(1, Some(20))]);
        // Written again at the end: replaced, not doubled.
        s.record_steps(5, &[step(0, Some(30))]).unwrap();
        assert_eq!(
            s.steps(5).unwrap(),
            vec![step(0, Some(30)), step(1, Some(20))]
        );
        assert!(s.steps(6).unwrap().is_empty());
    }
}
