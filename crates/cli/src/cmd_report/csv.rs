//! The CSV views of `pjw report`: jobs, series and process rows, and thread rows; every field
//! quoted and escaped.

use super::text::io_total;
use pjw_core::text::printable;
use pjw_proto::JobReport;

/// CSV of every job's thread rows (raw units: µs, percent).
pub fn render_threads_csv(jobs: &[JobReport]) -> String {
    let mut out = String::from(
        "job,tid,pid,comm,cpu_usec,cpus,migrations,running_pct,waiting_pct,sleeping_pct,busy,pin,samples,first_ms,last_ms\n",
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_default();
    for j in jobs {
        for t in &j.threads {
            out.push_str(&csv_line(&[
                j.id.clone(),
                t.tid.to_string(),
                t.pid.to_string(),
                printable(&t.comm, 16).into_owned(),
                t.cpu_usec.to_string(),
                t.cpus.clone(),
                o(t.migrations),
                f(t.running_pct),
                f(t.waiting_pct),
                f(t.sleeping_pct),
                t.busy.to_string(),
                o(t.pin.clone()),
                t.samples.to_string(),
                t.first_ms.to_string(),
                t.last_ms.to_string(),
            ]));
        }
    }
    out
}

/// One CSV field: escaped like every cell ([`printable`], uncut), a text a spreadsheet would
/// take for a formula (`=`, `+`, `-`, `@` first, and not a number) with a `'` before it
/// (issue 25, N8: a job named `=HYPERLINK(…)` ran in the operator's spreadsheet), then quoted
/// when it must be.
pub(super) fn csv_field(s: &str) -> String {
    let s = printable(s, usize::MAX);
    let s = if s.starts_with(['=', '+', '-', '@']) && s.parse::<f64>().is_err() {
        std::borrow::Cow::Owned(format!("'{s}"))
    } else {
        s
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_line(fields: &[String]) -> String {
    let mut l = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    l.push('\n');
    l
}

fn o<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// CSV: the jobs (raw units: ms, µs, bytes); with `--series` the samples of every job instead,
/// with `--processes` the process rows.
pub fn render_csv(jobs: &[JobReport], series: bool, processes: bool) -> String {
    let mut out = String::new();
    if series {
        out.push_str("job,ts_ms,state,cpu_user_usec,cpu_system_usec,mem_current,mem_peak,mem_anon,mem_file,swap,io_rbytes,io_wbytes,procs,threads,psi_cpu_some,psi_cpu_full,psi_mem_some,psi_mem_full,psi_io_some,psi_io_full,gpu_util,gpu_mem\n");
        for j in jobs {
            for p in &j.series {
                out.push_str(&csv_line(&[
                    j.id.clone(),
                    p.ts_ms.to_string(),
                    o(p.state),
                    o(p.cpu_user_usec),
                    o(p.cpu_system_usec),
                    o(p.mem_current),
                    o(p.mem_peak),
                    o(p.mem_anon),
                    o(p.mem_file),
                    o(p.swap),
                    o(p.io_rbytes),
                    o(p.io_wbytes),
                    o(p.procs),
                    o(p.threads),
                    o(p.psi_cpu_some),
                    o(p.psi_cpu_full),
                    o(p.psi_mem_some),
                    o(p.psi_mem_full),
                    o(p.psi_io_some),
                    o(p.psi_io_full),
                    o(p.gpu_util),
                    o(p.gpu_mem),
                ]));
            }
        }
        return out;
    }
    if processes {
        out.push_str("job,ts_ms,pid,comm,cpu_usec,rss,threads\n");
        for j in jobs {
            for p in &j.processes {
                out.push_str(&csv_line(&[
                    j.id.clone(),
                    p.ts_ms.to_string(),
                    p.pid.to_string(),
                    p.comm.clone(),
                    p.cpu_usec.to_string(),
                    p.rss.to_string(),
                    p.threads.to_string(),
                ]));
            }
        }
        return out;
    }
    out.push_str("job,user,uid,name,node,state,end,exit_status,end_reason,ncpus,cpus,mem_limit,submitted_ms,started_ms,ended_ms,queued_ms,running_ms,backfill_ms,frozen_ms,freezes,cpu_user_usec,cpu_system_usec,efficiency,mem_peak,swap_peak,io_rbytes,io_wbytes,procs_total,procs_max,threads_total,threads_max,samples,gpu_util_mean,gpu_util_max,gpu_mem_peak\n");
    for j in jobs {
        out.push_str(&csv_line(&[
            j.id.clone(),
            j.user.clone(),
            j.uid.to_string(),
            j.name.clone(),
            j.node.clone(),
            j.state.to_string(),
            o(j.end),
            o(j.exit_status),
            o(j.end_reason.clone()),
            j.ncpus.to_string(),
            j.cpus.clone(),
            o(j.mem_limit),
            j.submitted_ms.to_string(),
            o(j.started_ms),
            o(j.ended_ms),
            j.queued_ms.to_string(),
            j.running_ms.to_string(),
            j.backfill_ms.to_string(),
            j.frozen_ms.to_string(),
            j.freezes.to_string(),
            j.cpu_user_usec.to_string(),
            j.cpu_system_usec.to_string(),
            o(j.efficiency().map(|e| format!("{e:.4}"))),
            j.mem_peak.to_string(),
            j.swap_peak.to_string(),
            o(io_total(j, j.io_rbytes, |v| v.to_string())),
            o(io_total(j, j.io_wbytes, |v| v.to_string())),
            o(j.procs_total),
            j.procs_max.to_string(),
            o(j.threads_total),
            j.threads_max.to_string(),
            j.samples.to_string(),
            o(j.gpu_util_mean),
            o(j.gpu_util_max),
            o(j.gpu_mem_peak),
        ]));
    }
    out
}
