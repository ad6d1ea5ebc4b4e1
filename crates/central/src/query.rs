//! Questions asked of the whole cluster: finished jobs by owner, user, node, name, end, time
//! range, newest first or the top ones by CPU time, memory peak or wait. The SQL is built here
//! (pure); each filter has an index (crate::schema, migration 2) and a time range prunes the
//! partitions.

use pjw_core::{CoreError, EndClass};
use pjw_store::{JobSummary, Sample};
use postgres::types::ToSql;

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

/// How the jobs of a central query are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Newest end first.
    #[default]
    Newest,
    /// Most CPU time (user + system) first.
    Cpu,
    /// Highest memory peak first.
    Mem,
    /// Longest wait in the queue first.
    Wait,
}

impl Order {
    /// `cpu`, `mem` or `wait` (what `pjw report --top` takes).
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "cpu" => Some(Order::Cpu),
            "mem" | "memory" => Some(Order::Mem),
            "wait" => Some(Order::Wait),
            _ => None,
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Order::Newest => "ended_ms DESC, node, seq DESC",
            Order::Cpu => "(cpu_user_usec + cpu_system_usec) DESC, ended_ms DESC",
            Order::Mem => "mem_peak DESC, ended_ms DESC",
            Order::Wait => "queued_ms DESC, ended_ms DESC",
        }
    }
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
    /// Ended before (ms since the epoch).
    pub until_ms: Option<i64>,
    /// How it ended.
    pub end_class: Option<EndClass>,
    pub order: Order,
    /// At most this many (0: no limit).
    pub limit: usize,
}

pub(crate) const JOB_COLS: &str =
    "node, job_id, seq, name, user_name, uid, ncpus, cpus, mem_limit, \
    submitted_ms, started_ms, ended_ms, end_reason, exit_status, end_class, queued_ms, running_ms, \
    backfill_ms, frozen_ms, freezes, cpu_user_usec, cpu_system_usec, mem_peak, swap_peak, \
    io_rbytes, io_wbytes, procs_total, threads_total, procs_max, threads_max, samples, shipped_ms, \
    gpu_util_mean, gpu_util_max, gpu_mem_peak";

/// The SQL and its arguments for `f`. Pure.
pub fn jobs_sql(f: &CentralFilter) -> (String, Vec<Box<dyn ToSql + Sync>>) {
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
    if let Some(v) = f.until_ms {
        add("ended_ms < ?", Box::new(v));
    }
    if let Some(v) = f.end_class {
        add("end_class = ?", Box::new(v.as_str()));
    }
    let wher = if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    };
    let limit = if f.limit > 0 {
        format!(" LIMIT {}", f.limit)
    } else {
        String::new()
    };
    (
        format!(
            "SELECT {JOB_COLS} FROM pjw_jobs{wher} ORDER BY {}{limit}",
            f.order.sql()
        ),
        args,
    )
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

/// A job row; an unknown end class is an error (the caller names the row).
pub(crate) fn job_from_row(r: &postgres::Row) -> Result<CentralJob, CoreError> {
    let u = |i: usize| to_u64(r.get::<_, i64>(i));
    let ou = |i: usize| r.get::<_, Option<i64>>(i).map(to_u64);
    let u32_ = |i: usize| u(i).min(u32::MAX as u64) as u32;
    let node: String = r.get(0);
    let seq: i64 = r.get(2);
    let end = r.get::<_, String>(14);
    let mut summary = JobSummary::new(seq, &node, end.parse()?);
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
    Ok(CentralJob {
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
        ended_ms: Some(r.get(11)),
        end_reason: r.get(12),
        summary,
        shipped_ms: r.get(31),
    })
}

pub(crate) const SAMPLE_SQL: &str = "SELECT ts_ms, state, cpu_user_usec, cpu_system_usec,
    mem_current, mem_peak, mem_anon, mem_file, swap, io_rbytes, io_wbytes, procs, threads,
    psi_cpu_some, psi_cpu_full, psi_mem_some, psi_mem_full, psi_io_some, psi_io_full, gpu_util,
    gpu_mem FROM pjw_samples WHERE node = $1 AND seq = $2 ORDER BY ts_ms";

/// A sample row; an unknown state is an error (the caller names the row).
pub(crate) fn sample_from_row(seq: i64, r: &postgres::Row) -> Result<Sample, CoreError> {
    let u = |r: &postgres::Row, i: usize| r.get::<_, Option<i64>>(i).map(to_u64);
    Ok(Sample {
        seq,
        ts_ms: r.get(0),
        state: r
            .get::<_, Option<String>>(1)
            .map(|s| s.parse())
            .transpose()?,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_numbered_conditions_and_orders() {
        let cases = [
            (CentralFilter::default(), "FROM pjw_jobs ORDER BY ended_ms DESC, node, seq DESC", 0),
            (
                CentralFilter {
                    uid: Some(1001),
                    node: Some("n3".into()),
                    since_ms: Some(5),
                    until_ms: Some(9),
                    order: Order::Cpu,
                    limit: 20,
                    ..Default::default()
                },
                "WHERE uid = $1 AND node = $2 AND ended_ms >= $3 AND ended_ms < $4 ORDER BY (cpu_user_usec + cpu_system_usec) DESC, ended_ms DESC LIMIT 20",
                4,
            ),
            (
                CentralFilter {
                    user: Some("alice".into()),
                    order: Order::Wait,
                    ..Default::default()
                },
                "WHERE user_name = $1 ORDER BY queued_ms DESC",
                1,
            ),
            (
                CentralFilter {
                    end_class: Some(EndClass::Oom),
                    order: Order::Mem,
                    ..Default::default()
                },
                "WHERE end_class = $1 ORDER BY mem_peak DESC",
                1,
            ),
        ];
        for (f, want, nargs) in cases {
            let (sql, args) = jobs_sql(&f);
            assert!(sql.contains(want), "{f:?}: {sql}");
            assert_eq!(args.len(), nargs, "{sql}");
        }
        assert_eq!(Order::parse("mem"), Some(Order::Mem));
        assert_eq!(Order::parse("io"), None);
    }
}
