//! A job's submission and its start, each written as one transaction: the job's row with every
//! side row it has ([`Store::submit_job`]), and its CPUs, role, GPUs and state before its
//! cgroups exist ([`Store::start_job`]). Its end already is one ([`Store::finish_job`]).
//!
//! One transaction instead of one per row: a launch took about six SQLite transactions, each
//! locking the WAL and writing its frames (docs/launch-profile.md). And a failed write now
//! leaves nothing half-written: the row and its side rows are there together or not at all.

use pjw_core::io_limits::JobIo;
use pjw_core::thread_bind::BindMode;
use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_core::{CpuSet, GpuSet};
use rusqlite::{params, OptionalExtension};

use crate::{
    exec_cached, insert_job_on, set_bind_on, set_gpus_on, set_io_on, set_starter_on,
    set_starting_on, set_time_limit_on, JobRecord, StarterRecord, Store, StoreError, StoredRole,
};

/// A new job: its row and the side rows it has, written together by [`Store::submit_job`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitRecord {
    /// The row (its `seq` is ignored: the store gives one).
    pub job: JobRecord,
    /// The generated job number its id took: the store's counter moves past it, so that the
    /// number is not given again after a restart. `None`: the id was given by the caller.
    pub number: Option<u64>,
    /// Owner vs client, manager's id, /tmp: for jobs that have any.
    pub starter: Option<StarterRecord>,
    /// GPUs asked for and (a manager's choice, or empty) the ones chosen.
    pub gpus: Option<(u32, GpuSet)>,
    /// I/O weight and limits, for jobs that have any.
    pub io: Option<JobIo>,
    /// The thread binding asked for (`--bind`).
    pub bind: Option<BindMode>,
    /// Its time limit and where it came from, for jobs that have one.
    pub time_limit: Option<(TimeLimit, LimitSource)>,
}

/// A queued job about to start, written by [`Store::start_job`] before its cgroups exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartRecord {
    pub seq: i64,
    pub cpus: CpuSet,
    pub mems: CpuSet,
    pub role: StoredRole,
    pub started_ms: i64,
    /// The GPUs it starts on, with the number asked for, when it holds any.
    pub gpus: Option<(u32, GpuSet)>,
    /// Recorded `running` at once (a job whose process the daemon moves into its cgroups:
    /// recovery treats `starting` and `running` alike for it). False: `starting`, and
    /// `running` with [`Store::set_running`] once its cgroups exist (a job held by a manager
    /// without a process, which recovery keeps on an empty cgroup only when `running`).
    pub running: bool,
}

impl Store {
    /// Record a new job with its side rows in one transaction; its `seq`. On an error nothing
    /// is written.
    pub fn submit_job(&mut self, r: &SubmitRecord) -> Result<i64, StoreError> {
        self.immediate(|tx| {
            if let Some(n) = r.number {
                // Past the number taken, never back (a caller's cached counter may lag).
                exec_cached(
                    tx,
                    "INSERT INTO meta(key, value) VALUES('next_job_number', ?1)
                     ON CONFLICT(key) DO UPDATE SET value = CASE
                         WHEN CAST(value AS INTEGER) > CAST(excluded.value AS INTEGER) THEN value
                         ELSE excluded.value END",
                    params![(n + 1).to_string()],
                )?;
            }
            let seq = insert_job_on(tx, &r.job)?;
            if let Some(st) = &r.starter {
                set_starter_on(tx, seq, st)?;
            }
            if let Some((n, gpus)) = &r.gpus {
                set_gpus_on(tx, seq, *n, gpus)?;
            }
            if let Some(io) = &r.io {
                set_io_on(tx, seq, io)?;
            }
            if let Some(mode) = r.bind {
                set_bind_on(tx, seq, mode)?;
            }
            if let Some((limit, source)) = r.time_limit {
                set_time_limit_on(tx, seq, limit, source)?;
            }
            Ok(seq)
        })
    }

    /// Record a job's start (its GPUs, CPUs, role and state) in one transaction. On an error
    /// nothing is written.
    pub fn start_job(&mut self, r: &StartRecord) -> Result<(), StoreError> {
        self.immediate(|tx| {
            if let Some((n, gpus)) = &r.gpus {
                set_gpus_on(tx, r.seq, *n, gpus)?;
            }
            set_starting_on(tx, r.seq, &r.cpus, &r.mems, r.role, r.started_ms)?;
            if r.running {
                exec_cached(
                    tx,
                    "UPDATE jobs SET state = 'running' WHERE seq = ?1",
                    params![r.seq],
                )?;
            }
            Ok(())
        })
    }

    /// Run `f` in one IMMEDIATE transaction, committed when it succeeds; on an error nothing
    /// is written (the transaction rolls back when dropped).
    pub(crate) fn immediate<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite { path, source };
        let run = |conn: &mut rusqlite::Connection| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        };
        run(&mut self.conn).map_err(err)
    }

    /// The next generated job number, read without taking it ([`Store::submit_job`] with
    /// `number` takes it).
    pub fn job_number(&self) -> Result<u64, StoreError> {
        let cur: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'next_job_number'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        Ok(cur.and_then(|s| s.parse().ok()).unwrap_or(1))
    }

    /// Write transactions this handle has committed (each write method is one): what the
    /// launch path costs in the store, for tests and the launch profile.
    pub fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoredState;
    use pjw_core::sched::Placement;

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn job(id: &str) -> JobRecord {
        JobRecord {
            seq: 0,
            job_id: id.into(),
            name: "true".into(),
            uid: 1000,
            gid: 1000,
            user: "u".into(),
            ncpus: 1,
            cpus: CpuSet::new(),
            mems: CpuSet::new(),
            mem_limit: None,
            pid: Some(42),
            pid_start: Some(7),
            cgroup: format!("job-{id}"),
            argv: vec!["true".into()],
            state: StoredState::Queued,
            submitted_ms: 1,
            started_ms: None,
            ended_ms: None,
            end_reason: None,
            priority: 10,
            placement: Placement::Any,
            exclusive: false,
            role: StoredRole::Primary,
        }
    }

    fn full(id: &str, number: Option<u64>) -> SubmitRecord {
        SubmitRecord {
            job: job(id),
            number,
            starter: Some(StarterRecord {
                wlm: Some("slurm:9".into()),
                client_uid: 0,
                tmp_size: Some(1 << 20),
                tmpdir: None,
            }),
            gpus: Some((2, GpuSet::new())),
            io: Some(JobIo::parse("weight=500").unwrap()),
            bind: Some(BindMode::Cores),
            time_limit: Some((
                TimeLimit::from_secs(5400).unwrap(),
                LimitSource::NodeDefault,
            )),
        }
    }

    fn count(store: &Store, table: &str) -> i64 {
        store
            .conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_submission_with_every_side_row_is_one_commit_and_reads_back() {
        let (_d, mut store) = open();
        assert_eq!(store.job_number().unwrap(), 1);
        let before = store.commits();
        let seq = store.submit_job(&full("1", Some(1))).unwrap();
        assert_eq!(store.commits() - before, 1);
        let row = store.job(seq).unwrap().expect("the row");
        assert_eq!((row.job_id.as_str(), row.state), ("1", StoredState::Queued));
        assert_eq!(
            store.starter(seq).unwrap().unwrap().wlm.as_deref(),
            Some("slurm:9")
        );
        assert_eq!(store.gpus(seq).unwrap(), Some((2, GpuSet::new())));
        assert_eq!(store.io(seq).unwrap().unwrap().summary(), "weight=500");
        assert_eq!(store.bind(seq).unwrap(), Some(BindMode::Cores));
        let limit = store.time_limit(seq).unwrap().expect("its limit");
        assert_eq!(
            (limit.limit.secs(), limit.source, limit.ran_ms),
            (5400, LimitSource::NodeDefault, 0)
        );
        // The running time counted, written later, reads back.
        store.set_times_ran(&[(seq, 61_000)]).unwrap();
        assert_eq!(store.time_limit(seq).unwrap().unwrap().ran_ms, 61_000);
        // Cells no pjw wrote: an unknown source and a negative time still hold the limit; a
        // limit that cannot be one is an error, never no limit.
        store
            .conn
            .execute(
                "UPDATE job_time_limit SET source = 'later', ran_ms = -5 WHERE seq = ?1",
                [seq],
            )
            .unwrap();
        let odd = store.time_limit(seq).unwrap().unwrap();
        assert_eq!(
            (odd.limit.secs(), odd.source, odd.ran_ms),
            (5400, LimitSource::Asked, 0)
        );
        store
            .conn
            .execute(
                "UPDATE job_time_limit SET limit_s = 0 WHERE seq = ?1",
                [seq],
            )
            .unwrap();
        assert!(store.time_limit(seq).is_err());
        // The counter moved past the number taken, and never moves back.
        assert_eq!(store.job_number().unwrap(), 2);
        store.submit_job(&full("x", None)).unwrap();
        assert_eq!(store.job_number().unwrap(), 2);
        store.next_job_number().unwrap();
        store.submit_job(&full("y", Some(1))).unwrap();
        assert_eq!(store.job_number().unwrap(), 3);
    }

    #[test]
    fn a_start_is_one_commit_with_its_gpus_and_state() {
        let (_d, mut store) = open();
        let seq = store.submit_job(&full("1", Some(1))).unwrap();
        let cpus = CpuSet::parse_list("2-3").unwrap();
        let start = StartRecord {
            seq,
            cpus,
            mems: CpuSet::parse_list("0").unwrap(),
            role: StoredRole::Backfill,
            started_ms: 5,
            gpus: Some((2, GpuSet::parse_list("0-1").unwrap())),
            running: true,
        };
        let before = store.commits();
        store.start_job(&start).unwrap();
        assert_eq!(store.commits() - before, 1);
        let row = store.job(seq).unwrap().unwrap();
        assert_eq!(
            (row.state, row.cpus, row.role, row.started_ms),
            (StoredState::Running, cpus, StoredRole::Backfill, Some(5))
        );
        assert_eq!(
            store.gpus(seq).unwrap(),
            Some((2, GpuSet::parse_list("0-1").unwrap()))
        );
        // A held job's start stays `starting` until its cgroups exist.
        let seq2 = store.submit_job(&full("2", Some(2))).unwrap();
        store
            .start_job(&StartRecord {
                seq: seq2,
                running: false,
                gpus: None,
                ..start
            })
            .unwrap();
        assert_eq!(
            store.job(seq2).unwrap().unwrap().state,
            StoredState::Starting
        );
    }

    /// The last part of a submission fails (a trigger refuses the binding row): the job's row,
    /// its other side rows and the number counter are all as before.
    #[test]
    fn a_submission_that_fails_part_way_leaves_nothing_written() {
        let (_d, mut store) = open();
        store
            .conn
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON job_bind BEGIN SELECT RAISE(ABORT, 'no room'); END;",
            )
            .unwrap();
        let before = store.commits();
        let e = store.submit_job(&full("1", Some(1))).unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
        assert_eq!(store.commits(), before);
        for table in [
            "jobs",
            "job_starter",
            "job_gpus",
            "job_io",
            "job_bind",
            "job_time_limit",
        ] {
            assert_eq!(count(&store, table), 0, "{table}");
        }
        assert_eq!(store.job_number().unwrap(), 1);
        // Without the refused part it goes through whole.
        let seq = store
            .submit_job(&SubmitRecord {
                bind: None,
                ..full("1", Some(1))
            })
            .unwrap();
        assert!(store.job(seq).unwrap().is_some());
    }

    /// The state update of a start fails (a trigger refuses it): the GPUs written before it in
    /// the same transaction are rolled back too.
    #[test]
    fn a_start_that_fails_part_way_leaves_nothing_written() {
        let (_d, mut store) = open();
        let seq = store
            .submit_job(&SubmitRecord {
                gpus: None,
                ..full("1", Some(1))
            })
            .unwrap();
        store
            .conn
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE UPDATE OF state ON jobs BEGIN SELECT RAISE(ABORT, 'no room'); END;",
            )
            .unwrap();
        let e = store
            .start_job(&StartRecord {
                seq,
                cpus: CpuSet::parse_list("0").unwrap(),
                mems: CpuSet::parse_list("0").unwrap(),
                role: StoredRole::Primary,
                started_ms: 5,
                gpus: Some((1, GpuSet::parse_list("3").unwrap())),
                running: true,
            })
            .unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
        assert_eq!(count(&store, "job_gpus"), 0);
        let row = store.job(seq).unwrap().unwrap();
        assert_eq!((row.state, row.started_ms), (StoredState::Queued, None));
    }
}
