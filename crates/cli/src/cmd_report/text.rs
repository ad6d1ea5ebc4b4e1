//! The text views of `pjw report`: one job, the list, the table and a job's series,
//! process and thread rows.

use chrono::{FixedOffset, TimeZone};
use pjw_core::format_size;
use pjw_core::text::{printable, MAX_CELL};
use pjw_proto::JobReport;
use std::fmt::Write as _;

fn time(ms: Option<i64>, tz: &FixedOffset) -> String {
    match ms.and_then(|m| tz.timestamp_millis_opt(m).single()) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%:z").to_string(),
        None => "-".into(),
    }
}

/// H:MM:SS (with days when long).
fn dur(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s >= 86400 {
        format!(
            "{}d{:02}:{:02}:{:02}",
            s / 86400,
            s % 86400 / 3600,
            s % 3600 / 60,
            s % 60
        )
    } else {
        format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
    }
}

fn size(b: u64) -> String {
    if b < 1024 {
        format!("{b}B")
    } else {
        format_size(b)
    }
}

fn io(j: &JobReport) -> String {
    if j.io_counted == Some(false) {
        "not counted on this node (needs the cgroup v2 io controller)".into()
    } else {
        format!("read {}, written {}", size(j.io_rbytes), size(j.io_wbytes))
    }
}

/// An I/O total for the list and CSV views: empty ("-") when the node does not count I/O.
pub(super) fn io_total(j: &JobReport, v: u64, f: fn(u64) -> String) -> Option<String> {
    (j.io_counted != Some(false)).then(|| f(v))
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

fn eff(j: &JobReport) -> String {
    j.efficiency()
        .map(|e| format!("{:.1}%", e * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// The efficiency line of the text report: the figure, or why there is none.
fn eff_line(j: &JobReport) -> String {
    j.efficiency()
        .map(|e| format!("{:.1}%", e * 100.0))
        .unwrap_or_else(|| format!("- ({})", j.efficiency_missing()))
}

fn outcome(j: &JobReport) -> String {
    let mut s = j.state.to_string();
    if let Some(e) = j.end {
        s.push_str(", ");
        s.push_str(e.as_str());
    }
    if let Some(x) = j.exit_status {
        s.push_str(&format!(" (exit {x})"));
    }
    s
}

/// Aligned columns, left-aligned text. Every cell goes through the one escaping function
/// ([`printable`]) here, at the sink: a field a view forgets to escape (a process name, once)
/// still reaches no terminal raw.
fn columns(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| printable(c, MAX_CELL).into_owned())
                .collect()
        })
        .collect();
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let w: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map(|c| crate::cells::width(c)).unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                let _ = write!(line, "{}  ", crate::cells::pad(c, w[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One job, jobreport style.
pub fn render_job(j: &JobReport, tz: &FixedOffset) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Job {} ({}) of {} on {}: {}",
        printable(&j.id, 64),
        printable(&j.name, 64),
        printable(&j.user, 32),
        printable(&j.node, 64),
        outcome(j)
    );
    for (k, v) in job_rows(j, tz) {
        let _ = writeln!(o, "  {k:<16}{}", printable(&v, MAX_CELL));
    }
    step_lines(&mut o, j, tz);
    o
}

/// A job's rows in [`render_job`]: label and value.
fn job_rows(j: &JobReport, tz: &FixedOffset) -> Vec<(&'static str, String)> {
    let at_least = if j.counts_exact == Some(false) {
        "at least "
    } else {
        ""
    };
    let total = |t: Option<u64>| {
        t.map(|n| format!("{at_least}{n} total, "))
            .unwrap_or_default()
    };
    let rows: Vec<(&'static str, String)> = vec![
        (
            "CPUs",
            format!(
                "{} ({})",
                j.ncpus,
                if j.cpus.is_empty() { "-" } else { &j.cpus }
            ),
        ),
        ("Submitted", time(Some(j.submitted_ms), tz)),
        ("Started", time(j.started_ms, tz)),
        ("Ended", time(j.ended_ms, tz)),
        ("Waited in queue", dur(j.queued_ms)),
        ("Ran (wall)", dur(j.running_ms)),
        ("  as backfill", dur(j.backfill_ms)),
        (
            "  frozen",
            format!(
                "{} ({} time{})",
                dur(j.frozen_ms),
                j.freezes,
                if j.freezes == 1 { "" } else { "s" }
            ),
        ),
        (
            "CPU time",
            format!(
                "{:.2} s (user {:.2} s, system {:.2} s)",
                j.cpu_secs(),
                j.cpu_user_usec as f64 / 1e6,
                j.cpu_system_usec as f64 / 1e6
            ),
        ),
        ("CPU efficiency", eff_line(j)),
        (
            "Peak memory",
            format!(
                "{} (limit {})",
                size(j.mem_peak),
                j.mem_limit.map(size).unwrap_or_else(|| "none".into())
            ),
        ),
        ("Peak swap", size(j.swap_peak)),
        ("I/O", io(j)),
        (
            "Processes",
            format!("{}{} at most", total(j.procs_total), j.procs_max),
        ),
        (
            "Threads",
            format!("{}{} at most", total(j.threads_total), j.threads_max),
        ),
        ("Samples", j.samples.to_string()),
    ];
    let mut rows: Vec<(&'static str, String)> = rows;
    if j.ngpus > 0 {
        let held = if j.gpus.is_empty() { "-" } else { &j.gpus };
        rows.insert(1, ("GPUs", format!("{} ({held})", j.ngpus)));
    }
    // GPU readings (NVML), only for jobs that have them: after the memory rows.
    let at = rows
        .iter()
        .position(|r| r.0 == "Peak swap")
        .map_or(rows.len(), |i| i + 1);
    if let Some(mem) = j.gpu_mem_peak {
        rows.insert(at, ("GPU memory", format!("{} at most", size(mem))));
    }
    if let (Some(mean), Some(max)) = (j.gpu_util_mean, j.gpu_util_max) {
        rows.insert(
            at,
            (
                "GPU utilisation",
                format!("{mean:.1}% mean, {max:.1}% at most"),
            ),
        );
    }
    if let Some(io) = &j.io {
        rows.push(("I/O settings", printable(io, 200).into_owned()));
    }
    if let Some(r) = &j.end_reason {
        rows.push(("Reason", printable(r, 200).into_owned()));
    }
    if !j.steps.is_empty() {
        rows.push(("Steps", j.steps.len().to_string()));
    }
    rows
}

/// A job's steps, one line each, below its rows.
fn step_lines(o: &mut String, j: &JobReport, tz: &FixedOffset) {
    for st in &j.steps {
        let ran = st
            .ended_ms
            .map(|e| dur(e - st.started_ms))
            .unwrap_or_else(|| "running".into());
        let _ = writeln!(
            o,
            "    step {} {}: cpus {}, pid {}, started {}, {ran}, exit {}",
            st.step,
            printable(&st.name, 64),
            st.cpus,
            st.pid,
            time(Some(st.started_ms), tz),
            opt(st.exit_status)
        );
    }
}

/// Several jobs, one row each.
pub fn render_list(jobs: &[JobReport], tz: &FixedOffset) -> String {
    let mut rows = vec![[
        "JOB",
        "USER",
        "NAME",
        "NODE",
        "STATE",
        "END",
        "EXIT",
        "SUBMITTED",
        "CPUS",
        "WAIT",
        "WALL",
        "CPU_S",
        "EFF",
        "MEM_PEAK",
        "SWAP",
        "READ",
        "WRITE",
        "PROCS",
        "THREADS",
        "FROZEN",
    ]
    .map(String::from)
    .to_vec()];
    for j in jobs {
        rows.push(vec![
            printable(&j.id, 64).into_owned(),
            printable(&j.user, 32).into_owned(),
            printable(&j.name, 64).into_owned(),
            printable(&j.node, 64).into_owned(),
            j.state.to_string(),
            opt(j.end),
            opt(j.exit_status),
            time(Some(j.submitted_ms), tz),
            j.ncpus.to_string(),
            dur(j.queued_ms),
            dur(j.running_ms),
            format!("{:.1}", j.cpu_secs()),
            eff(j),
            size(j.mem_peak),
            size(j.swap_peak),
            opt(io_total(j, j.io_rbytes, size)),
            opt(io_total(j, j.io_wbytes, size)),
            format!("{}/{}", opt(j.procs_total), j.procs_max),
            format!("{}/{}", opt(j.threads_total), j.threads_max),
            dur(j.frozen_ms),
        ]);
    }
    columns(&rows)
}

/// The time series of one job: CPU use between samples (in CPUs), memory, I/O, tasks, PSI.
pub fn render_series(j: &JobReport, tz: &FixedOffset) -> String {
    let mut rows = vec![[
        "TIME", "STATE", "CPU", "MEM", "PEAK", "ANON", "FILE", "SWAP", "READ", "WRITE", "PROCS",
        "THREADS", "PSI_CPU", "PSI_MEM", "PSI_IO",
    ]
    .map(String::from)
    .to_vec()];
    let mut prev: Option<(i64, u64)> = None;
    for p in &j.series {
        let cpu_total = p.cpu_user_usec.zip(p.cpu_system_usec).map(|(u, s)| u + s);
        let cpu = match (prev, cpu_total) {
            (Some((t0, c0)), Some(c)) if p.ts_ms > t0 => {
                format!(
                    "{:.2}",
                    c.saturating_sub(c0) as f64 / 1000.0 / (p.ts_ms - t0) as f64
                )
            }
            _ => "-".into(),
        };
        if let Some(c) = cpu_total {
            prev = Some((p.ts_ms, c));
        }
        let psi = |s: Option<f64>| s.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        let sz = |v: Option<u64>| v.map(size).unwrap_or_else(|| "-".into());
        rows.push(vec![
            time(Some(p.ts_ms), tz),
            opt(p.state),
            cpu,
            sz(p.mem_current),
            sz(p.mem_peak),
            sz(p.mem_anon),
            sz(p.mem_file),
            sz(p.swap),
            sz(p.io_rbytes),
            sz(p.io_wbytes),
            opt(p.procs),
            opt(p.threads),
            psi(p.psi_cpu_some),
            psi(p.psi_mem_some),
            psi(p.psi_io_some),
        ]);
    }
    columns(&rows)
}

/// The per-process rows of one job.
pub fn render_processes(j: &JobReport, tz: &FixedOffset) -> String {
    let mut rows = vec![["TIME", "PID", "COMM", "CPU_S", "RSS", "THREADS"]
        .map(String::from)
        .to_vec()];
    for p in &j.processes {
        rows.push(vec![
            time(Some(p.ts_ms), tz),
            p.pid.to_string(),
            p.comm.clone(),
            format!("{:.2}", p.cpu_usec as f64 / 1e6),
            size(p.rss),
            p.threads.to_string(),
        ]);
    }
    columns(&rows)
}

/// A share in percent, or `-` when unknown.
fn pct(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}%")).unwrap_or_else(|| "-".into())
}

/// The thread rows of one job: the busy threads (runnable at least half of their sampled time)
/// first, the sleepers apart; names escaped.
pub fn render_threads(j: &JobReport, tz: &FixedOffset) -> String {
    let mut o = String::new();
    let head = [
        "TID", "PID", "NAME", "CPU_S", "RUN", "WAIT", "SLEEP", "CPUS", "MIGR", "PIN", "LAST",
    ];
    for (busy, title) in [(true, "Busy threads"), (false, "Sleeping threads")] {
        let mine: Vec<_> = j.threads.iter().filter(|t| t.busy == busy).collect();
        let _ = write!(
            o,
            "\n{title} of job {} ({})\n",
            printable(&j.id, 64),
            mine.len()
        );
        if mine.is_empty() {
            continue;
        }
        let mut rows = vec![head.map(String::from).to_vec()];
        for t in mine {
            rows.push(vec![
                t.tid.to_string(),
                t.pid.to_string(),
                printable(&t.comm, 16).into_owned(),
                format!("{:.2}", t.cpu_usec as f64 / 1e6),
                pct(t.running_pct),
                pct(t.waiting_pct),
                pct(t.sleeping_pct),
                t.cpus.clone(),
                t.migrations
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| "-".into()),
                t.pin.clone().unwrap_or_else(|| "-".into()),
                time(Some(t.last_ms), tz),
            ]);
        }
        o.push_str(&columns(&rows));
    }
    if j.threads.is_empty() {
        o.push_str("no thread rows (recorded with [profile] threads = N while the job runs)\n");
    }
    o
}

/// The table view: one job in detail, or a list; then series and processes per job.
pub fn render_table(jobs: &[JobReport], series: bool, processes: bool, tz: &FixedOffset) -> String {
    if jobs.is_empty() {
        return "no jobs\n".into();
    }
    let mut o = if jobs.len() == 1 {
        render_job(&jobs[0], tz)
    } else {
        render_list(jobs, tz)
    };
    for j in jobs {
        if series {
            let _ = write!(
                o,
                "\nSeries of job {} ({} samples)\n",
                printable(&j.id, 64),
                j.series.len()
            );
            o.push_str(&render_series(j, tz));
        }
        if processes {
            let _ = write!(o, "\nProcesses of job {}\n", printable(&j.id, 64));
            o.push_str(&render_processes(j, tz));
        }
    }
    o
}
