//! Per-thread profiles (schema 11): the top N threads of each job per sampler tick
//! (`profile.threads = N`), and their per-thread totals for `pjw report --threads`.
//!
//! One row per thread per tick, keyed `(seq, ts_ms, tid)`. Its run, wait and span times are
//! the deltas since the thread's previous reading (a thread first seen has a span of 0: it
//! counts for its CPU time, not for its shares), so the shares of a thread over the samples it
//! was among the top N are exact sums, not means of means. Written in batches by the profile
//! writer; removed with the job's other series by retention and the size cap.

use rusqlite::params;

use crate::{Store, StoreError};

/// One thread of a job at one tick.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSample {
    pub seq: i64,
    pub ts_ms: i64,
    pub tid: u32,
    /// Its process (thread group).
    pub pid: u32,
    /// Its name (`comm`, up to 15 bytes the thread set itself: show it escaped).
    pub comm: String,
    /// Time on a CPU since the thread started, microseconds.
    pub cpu_usec: u64,
    /// Since its previous reading: time on a CPU, time runnable waiting for one, and the time
    /// between the readings (microseconds). Sleeping is the rest of the span.
    pub run_usec: u64,
    pub wait_usec: u64,
    pub span_usec: u64,
    /// The CPU it last ran on.
    pub cpu: u32,
    /// CPU migrations since it started (`se.nr_migrations`); None where the kernel does not say.
    pub migrations: Option<u64>,
    /// The CPUs the binder pinned it to (kernel list format), if it did.
    pub pin: Option<String>,
}

/// One thread's totals over the samples it appeared in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTotals {
    pub tid: u32,
    pub pid: u32,
    /// Its name at its latest sample.
    pub comm: String,
    /// CPU time at its latest sample (µs).
    pub cpu_usec: u64,
    /// Summed deltas (µs): running, waiting, and the spans they are shares of.
    pub run_usec: u64,
    pub wait_usec: u64,
    pub span_usec: u64,
    /// The CPUs it was seen last running on, ascending.
    pub cpus: Vec<u32>,
    /// Migrations at its latest sample.
    pub migrations: Option<u64>,
    /// Its pin at its latest sample.
    pub pin: Option<String>,
    pub samples: u32,
    pub first_ms: i64,
    pub last_ms: i64,
}

impl Store {
    /// Write a batch of thread rows in one transaction.
    pub fn insert_thread_samples(&mut self, batch: &[ThreadSample]) -> Result<(), StoreError> {
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
                    "INSERT OR REPLACE INTO thread_samples (seq, ts_ms, tid, pid, comm, cpu_usec,
                         run_usec, wait_usec, span_usec, cpu, migrations, pin)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .map_err(err)?;
            let i = |v: u64| v.min(i64::MAX as u64) as i64;
            for t in batch {
                st.execute(params![
                    t.seq,
                    t.ts_ms,
                    t.tid,
                    t.pid,
                    t.comm,
                    i(t.cpu_usec),
                    i(t.run_usec),
                    i(t.wait_usec),
                    i(t.span_usec),
                    t.cpu,
                    t.migrations.map(i),
                    t.pin,
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Each thread of job `seq` with its totals over the samples it appeared in (one row per
    /// thread, aggregated by SQLite: the job's rows never come into memory at once), most CPU
    /// time first.
    pub fn thread_totals(&self, seq: i64) -> Result<Vec<ThreadTotals>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT t.tid, l.pid, l.comm, l.cpu_usec, t.run, t.wait, t.span, t.cpus,
                        l.migrations, l.pin, t.n, t.first, t.last
                 FROM (SELECT tid, SUM(run_usec) AS run, SUM(wait_usec) AS wait,
                              SUM(span_usec) AS span, GROUP_CONCAT(DISTINCT cpu) AS cpus,
                              COUNT(*) AS n, MIN(ts_ms) AS first, MAX(ts_ms) AS last
                       FROM thread_samples WHERE seq = ?1 GROUP BY tid) t
                 JOIN thread_samples l ON l.seq = ?1 AND l.tid = t.tid AND l.ts_ms = t.last
                 ORDER BY l.cpu_usec DESC, t.tid",
            )
            .map_err(self.err())?;
        let u = |v: i64| v.max(0) as u64;
        let rows = st
            .query_map([seq], |r| {
                let cpus: Option<String> = r.get(7)?;
                let mut cpus: Vec<u32> = cpus
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|c| c.parse().ok())
                    .collect();
                cpus.sort_unstable();
                Ok(ThreadTotals {
                    tid: r.get(0)?,
                    pid: r.get(1)?,
                    comm: r.get(2)?,
                    cpu_usec: u(r.get(3)?),
                    run_usec: u(r.get(4)?),
                    wait_usec: u(r.get(5)?),
                    span_usec: u(r.get(6)?),
                    cpus,
                    migrations: r.get::<_, Option<i64>>(8)?.map(u),
                    pin: r.get(9)?,
                    samples: r.get(10)?,
                    first_ms: r.get(11)?,
                    last_ms: r.get(12)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// The rows of threads `tids` of job `seq`, in time order (a plot's series).
    pub fn thread_samples(&self, seq: i64, tids: &[u32]) -> Result<Vec<ThreadSample>, StoreError> {
        if tids.is_empty() {
            return Ok(Vec::new());
        }
        // Thread ids are numbers: the list is built from them, never from text.
        let list: Vec<String> = tids.iter().map(u32::to_string).collect();
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT seq, ts_ms, tid, pid, comm, cpu_usec, run_usec, wait_usec, span_usec, cpu,
                        migrations, pin
                 FROM thread_samples WHERE seq = ?1 AND tid IN ({}) ORDER BY ts_ms, tid",
                list.join(",")
            ))
            .map_err(self.err())?;
        let u = |v: i64| v.max(0) as u64;
        let rows = st
            .query_map([seq], |r| {
                Ok(ThreadSample {
                    seq: r.get(0)?,
                    ts_ms: r.get(1)?,
                    tid: r.get(2)?,
                    pid: r.get(3)?,
                    comm: r.get(4)?,
                    cpu_usec: u(r.get(5)?),
                    run_usec: u(r.get(6)?),
                    wait_usec: u(r.get(7)?),
                    span_usec: u(r.get(8)?),
                    cpu: r.get(9)?,
                    migrations: r.get::<_, Option<i64>>(10)?.map(u),
                    pin: r.get(11)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ts_ms: i64, tid: u32, cpu_usec: u64, run: u64, span: u64, cpu: u32) -> ThreadSample {
        ThreadSample {
            seq: 1,
            ts_ms,
            tid,
            pid: 10,
            comm: format!("t{tid}"),
            cpu_usec,
            run_usec: run,
            wait_usec: 0,
            span_usec: span,
            cpu,
            migrations: Some(u64::from(cpu)),
            pin: (tid == 11).then(|| "1".to_string()),
        }
    }

    #[test]
    fn totals_sum_the_deltas_and_keep_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_file(&dir.path().join("pjw.db")).unwrap();
        s.insert_thread_samples(&[
            row(1000, 11, 500, 0, 0, 0),
            row(1000, 12, 10, 0, 0, 0),
            row(2000, 11, 1400, 900, 1000, 1),
            row(2000, 12, 10, 0, 1000, 0),
            row(3000, 11, 2400, 1000, 1000, 1),
        ])
        .unwrap();
        let t = s.thread_totals(1).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].tid, t[0].cpu_usec, t[0].run_usec, t[0].span_usec),
            (11, 2400, 1900, 2000)
        );
        assert_eq!((t[0].cpus.clone(), t[0].migrations), (vec![0, 1], Some(1)));
        assert_eq!((t[0].pin.as_deref(), t[0].samples), (Some("1"), 3));
        assert_eq!(
            (t[1].tid, t[1].run_usec, t[1].pin.as_deref()),
            (12, 0, None)
        );
        assert_eq!(s.thread_samples(1, &[12]).unwrap().len(), 2);
        assert!(s.thread_totals(2).unwrap().is_empty());
    }
}
