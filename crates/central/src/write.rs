//! Writing to the central store: batches as multi-row inserts, one statement per table per
//! batch (an array per column through `unnest`), upserted so that a batch sent twice changes
//! nothing (decisions (bu)).

use std::collections::BTreeSet;

use pjw_store::{JobRecord, JobSummary, Sample};
use postgres::types::ToSql;
use postgres::Transaction;

use crate::schema::{Retention, Table};

/// Rows per sample statement (bounds the size of one message).
const SAMPLE_CHUNK: usize = 20_000;

pub(crate) fn to_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

const UPSERT_JOBS: &str = "
INSERT INTO pjw_jobs (node, job_id, seq, name, user_name, uid, ncpus, cpus, mem_limit,
    submitted_ms, started_ms, ended_ms, end_reason, exit_status, end_class, queued_ms, running_ms,
    backfill_ms, frozen_ms, freezes, cpu_user_usec, cpu_system_usec, mem_peak, swap_peak,
    io_rbytes, io_wbytes, procs_total, threads_total, procs_max, threads_max, samples, shipped_ms,
    gpu_util_mean, gpu_util_max, gpu_mem_peak)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[],
    $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
    $13::text[], $14::bigint[], $15::text[], $16::bigint[], $17::bigint[], $18::bigint[],
    $19::bigint[], $20::bigint[], $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[],
    $25::bigint[], $26::bigint[], $27::bigint[], $28::bigint[], $29::bigint[], $30::bigint[],
    $31::bigint[], $32::bigint[], $33::float8[], $34::float8[], $35::bigint[])
ON CONFLICT (node, job_id, seq, ended_ms) DO UPDATE SET
    name = EXCLUDED.name, user_name = EXCLUDED.user_name, uid = EXCLUDED.uid,
    ncpus = EXCLUDED.ncpus, cpus = EXCLUDED.cpus, mem_limit = EXCLUDED.mem_limit,
    submitted_ms = EXCLUDED.submitted_ms, started_ms = EXCLUDED.started_ms,
    end_reason = EXCLUDED.end_reason,
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
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[],
    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
    $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::float8[], $17::float8[],
    $18::float8[], $19::float8[], $20::float8[], $21::float8[], $22::float8[], $23::bigint[])
ON CONFLICT (node, seq, ts_ms) DO NOTHING";

/// The time a finished job is filed under (its partition key): its end, or its submission for
/// a job that has no end time.
pub fn filed_ms(j: &JobRecord) -> i64 {
    j.ended_ms.unwrap_or(j.submitted_ms)
}

/// One job's samples, with the node and run number they belong to.
#[derive(Debug)]
pub struct Series<'a> {
    pub node: &'a str,
    pub seq: i64,
    pub samples: &'a [Sample],
}

/// The partitions these rows go to (for [`crate::schema::ensure_partitions`]). Pure.
pub fn partitions_needed(
    jobs: &[(JobRecord, JobSummary, Vec<Sample>)],
    live: &[Series<'_>],
) -> BTreeSet<(Table, i64)> {
    let mut out = BTreeSet::new();
    for (j, _, samples) in jobs {
        out.insert((Table::Jobs, Table::Jobs.start_of(filed_ms(j))));
        for s in samples {
            out.insert((Table::Samples, Table::Samples.start_of(s.ts_ms)));
        }
    }
    for s in live.iter().flat_map(|x| x.samples) {
        out.insert((Table::Samples, Table::Samples.start_of(s.ts_ms)));
    }
    out
}

/// Upsert finished jobs and insert their series: one statement for the jobs, one per
/// [`SAMPLE_CHUNK`] samples. Rows older than the retention are left out (they would be
/// dropped at the next maintenance). The number of sample rows sent.
pub fn write_jobs(
    tx: &mut Transaction<'_>,
    jobs: &[(JobRecord, JobSummary, Vec<Sample>)],
    retention: &Retention,
    now_ms: i64,
) -> Result<usize, postgres::Error> {
    let job_cut = retention.cutoff(Table::Jobs, now_ms);
    let kept: Vec<&(JobRecord, JobSummary, Vec<Sample>)> = jobs
        .iter()
        .filter(|(j, _, _)| filed_ms(j) >= job_cut)
        .collect();
    if !kept.is_empty() {
        upsert_jobs(tx, &kept, now_ms)?;
    }
    let series: Vec<Series<'_>> = kept
        .iter()
        .map(|(j, s, samples)| Series {
            node: &s.node,
            seq: j.seq,
            samples,
        })
        .collect();
    write_samples(tx, &series, retention, now_ms)
}

fn upsert_jobs(
    tx: &mut Transaction<'_>,
    jobs: &[&(JobRecord, JobSummary, Vec<Sample>)],
    now_ms: i64,
) -> Result<(), postgres::Error> {
    let js = || jobs.iter().map(|(j, s, _)| (j, s));
    let text = |f: &dyn Fn(&JobRecord, &JobSummary) -> String| -> Vec<String> {
        js().map(|(j, s)| f(j, s)).collect()
    };
    let otext = |f: &dyn Fn(&JobRecord, &JobSummary) -> Option<String>| -> Vec<Option<String>> {
        js().map(|(j, s)| f(j, s)).collect()
    };
    let int = |f: &dyn Fn(&JobRecord, &JobSummary) -> i64| -> Vec<i64> {
        js().map(|(j, s)| f(j, s)).collect()
    };
    let oint = |f: &dyn Fn(&JobRecord, &JobSummary) -> Option<i64>| -> Vec<Option<i64>> {
        js().map(|(j, s)| f(j, s)).collect()
    };
    let ofloat = |f: &dyn Fn(&JobRecord, &JobSummary) -> Option<f64>| -> Vec<Option<f64>> {
        js().map(|(j, s)| f(j, s)).collect()
    };
    let node = text(&|_, s| s.node.clone());
    let job_id = text(&|j, _| j.job_id.clone());
    let seq = int(&|j, _| j.seq);
    let name = text(&|j, _| j.name.clone());
    let user = text(&|j, _| j.user.clone());
    let uid = int(&|j, _| j.uid as i64);
    let ncpus = int(&|j, _| j.ncpus as i64);
    let cpus = text(&|j, _| j.cpus.to_string());
    let mem_limit = oint(&|j, _| j.mem_limit.map(to_i64));
    let submitted = int(&|j, _| j.submitted_ms);
    let started = oint(&|j, _| j.started_ms);
    let ended = int(&|j, _| filed_ms(j));
    let end_reason = otext(&|j, _| j.end_reason.clone());
    let exit = oint(&|_, s| s.exit_status.map(|e| e as i64));
    let end_class = text(&|_, s| s.end.as_str().to_string());
    let queued = int(&|_, s| s.queued_ms);
    let running = int(&|_, s| s.running_ms);
    let backfill = int(&|_, s| s.backfill_ms);
    let frozen = int(&|_, s| s.frozen_ms);
    let freezes = int(&|_, s| s.freezes as i64);
    let cpu_user = int(&|_, s| to_i64(s.cpu_user_usec));
    let cpu_sys = int(&|_, s| to_i64(s.cpu_system_usec));
    let mem_peak = int(&|_, s| to_i64(s.mem_peak));
    let swap_peak = int(&|_, s| to_i64(s.swap_peak));
    let io_r = int(&|_, s| to_i64(s.io_rbytes));
    let io_w = int(&|_, s| to_i64(s.io_wbytes));
    let procs_total = oint(&|_, s| s.procs_total.map(to_i64));
    let threads_total = oint(&|_, s| s.threads_total.map(to_i64));
    let procs_max = int(&|_, s| s.procs_max as i64);
    let threads_max = int(&|_, s| s.threads_max as i64);
    let samples = int(&|_, s| s.samples as i64);
    let shipped = int(&|_, _| now_ms);
    let gpu_mean = ofloat(&|_, s| s.gpu_util_mean);
    let gpu_max = ofloat(&|_, s| s.gpu_util_max);
    let gpu_mem = oint(&|_, s| s.gpu_mem_peak.map(to_i64));
    let params: [&(dyn ToSql + Sync); 35] = [
        &node,
        &job_id,
        &seq,
        &name,
        &user,
        &uid,
        &ncpus,
        &cpus,
        &mem_limit,
        &submitted,
        &started,
        &ended,
        &end_reason,
        &exit,
        &end_class,
        &queued,
        &running,
        &backfill,
        &frozen,
        &freezes,
        &cpu_user,
        &cpu_sys,
        &mem_peak,
        &swap_peak,
        &io_r,
        &io_w,
        &procs_total,
        &threads_total,
        &procs_max,
        &threads_max,
        &samples,
        &shipped,
        &gpu_mean,
        &gpu_max,
        &gpu_mem,
    ];
    tx.execute(UPSERT_JOBS, &params)?;
    Ok(())
}

/// Insert samples of several jobs, skipping those already there and those older than the
/// retention; the number of rows sent.
pub fn write_samples(
    tx: &mut Transaction<'_>,
    series: &[Series<'_>],
    retention: &Retention,
    now_ms: i64,
) -> Result<usize, postgres::Error> {
    let cut = retention.cutoff(Table::Samples, now_ms);
    let rows: Vec<(&str, i64, &Sample)> = series
        .iter()
        .flat_map(|x| x.samples.iter().map(move |s| (x.node, x.seq, s)))
        .filter(|(_, _, s)| s.ts_ms >= cut)
        .collect();
    for chunk in rows.chunks(SAMPLE_CHUNK) {
        insert_sample_rows(tx, chunk)?;
    }
    Ok(rows.len())
}

fn insert_sample_rows(
    tx: &mut Transaction<'_>,
    rows: &[(&str, i64, &Sample)],
) -> Result<(), postgres::Error> {
    let col = |f: &dyn Fn(&Sample) -> Option<u64>| -> Vec<Option<i64>> {
        rows.iter().map(|(_, _, x)| f(x).map(to_i64)).collect()
    };
    let fcol = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<Option<f64>> {
        rows.iter().map(|(_, _, x)| f(x)).collect()
    };
    let node: Vec<&str> = rows.iter().map(|(n, _, _)| *n).collect();
    let seq: Vec<i64> = rows.iter().map(|(_, q, _)| *q).collect();
    let ts: Vec<i64> = rows.iter().map(|(_, _, x)| x.ts_ms).collect();
    let state: Vec<Option<&str>> = rows
        .iter()
        .map(|(_, _, x)| x.state.map(|s| s.as_str()))
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
    let mut p: Vec<&(dyn ToSql + Sync)> = vec![&node, &seq, &ts, &state];
    p.extend(cols.iter().map(|c| c as &(dyn ToSql + Sync)));
    p.extend(fcols.iter().map(|c| c as &(dyn ToSql + Sync)));
    p.push(&gpu_mem);
    tx.execute(INSERT_SAMPLES, &p)?;
    Ok(())
}
