//! `pjw report`: what jobs did, like MCOpt's jobreport — totals, and with `--series` the time
//! series, with `--processes` the per-process rows; as a table, JSON or CSV.
//!
//! The daemon answers (it knows the caller from `SO_PEERCRED` and shows users only their own
//! jobs); this module only asks and renders. Rendering is pure (`render_*`), with the time
//! zone passed in, so it is tested on literal text.

use pjw_core::text::{printable, MAX_CELL};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context};
use chrono::{DateTime, FixedOffset, Offset, TimeZone};
use pjw_core::format_size;
use pjw_proto::{collect_report, Client, JobReport, ReportQuery, Request};

use crate::cli::{ReportArgs, ReportFormat};

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let query = ReportQuery {
        job: a.job.clone(),
        user: a.user.clone(),
        name: a.name.clone(),
        since_ms: a
            .since
            .as_deref()
            .map(|s| parse_since(s, now_ms))
            .transpose()?,
        state: a.state.clone(),
        // A plot needs the series.
        series: a.series || a.plot.is_some(),
        processes: a.processes,
        // With --plot, --threads adds a panel of the busiest threads.
        threads: a.threads,
        limit: a.limit,
        central: a.central,
        node: a.node.clone(),
        until_ms: a
            .until
            .as_deref()
            .map(|s| parse_since(s, now_ms))
            .transpose()?,
        top: a.top.clone(),
    };
    let tz = chrono::Local::now().offset().fix();
    if let Some(path) = &a.plot {
        let jobs = fetch(&query)?;
        crate::plot::write(&jobs, path)?;
        let n = jobs.iter().filter(|j| !j.series.is_empty()).count();
        println!("wrote {} ({n} job(s))", path.display());
        return Ok(());
    }
    loop {
        let jobs = fetch(&query)?;
        let text = match a.format {
            ReportFormat::Table if a.threads => {
                let mut t = render_table(&jobs, a.series, a.processes, &tz);
                for j in &jobs {
                    t.push_str(&render_threads(j, &tz));
                }
                t
            }
            ReportFormat::Table => render_table(&jobs, a.series, a.processes, &tz),
            ReportFormat::Json => {
                pjw_core::text::json(&serde_json::to_string_pretty(&jobs)?).into_owned() + "\n"
            }
            ReportFormat::Csv if a.threads && !a.series && !a.processes => {
                render_threads_csv(&jobs)
            }
            ReportFormat::Csv => render_csv(&jobs, a.series, a.processes),
        };
        let Some(secs) = a.watch else {
            print!("{text}");
            return Ok(());
        };
        // Clear the screen, then the report; stop once every job shown has ended.
        let mut out = std::io::stdout().lock();
        write!(out, "\x1b[H\x1b[2J{text}")?;
        out.flush()?;
        if !jobs.is_empty() && jobs.iter().all(|j| j.state == "ended") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(secs.max(1)));
    }
}

fn fetch(q: &ReportQuery) -> anyhow::Result<Vec<JobReport>> {
    let mut c = Client::connect(&pjw_proto::socket_path())?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    c.send(&Request::Report(q.clone()))?;
    match collect_report(|| c.recv())? {
        Ok(jobs) => Ok(jobs),
        Err((_, message)) => bail!("{message}"),
    }
}

/// `--since`: an RFC 3339 time (`2026-11-22T05:00:00+01:00`), a date (`2026-11-22`, local
/// midnight), or a duration ago (`90m`, `2h`, `7d`).
pub fn parse_since(s: &str, now_ms: i64) -> anyhow::Result<i64> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        let midnight = d.and_hms_opt(0, 0, 0).context("bad date")?;
        if let Some(t) = chrono::Local.from_local_datetime(&midnight).earliest() {
            return Ok(t.timestamp_millis());
        }
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let mult: i64 = match unit {
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    match n.parse::<i64>() {
        Ok(n) if mult > 0 => Ok(now_ms - n * mult),
        _ => bail!(
            "--since {s:?}: expected an RFC 3339 time, a date (YYYY-MM-DD) or a duration ago (30m, 2h, 7d)"
        ),
    }
}

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
fn io_total(j: &JobReport, v: u64, f: fn(u64) -> String) -> Option<String> {
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
    let mut s = j.state.clone();
    if let Some(e) = &j.end {
        s.push_str(", ");
        s.push_str(e);
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
                .map(|r| r.get(i).map(|c| c.chars().count()).unwrap_or(0))
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
                let _ = write!(line, "{c:<width$}  ", width = w[i]);
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
            format!("{} ({} times)", dur(j.frozen_ms), j.freezes),
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
            j.state.clone(),
            opt(j.end.clone()),
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
            opt(p.state.clone()),
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

/// One CSV field: escaped like every cell ([`printable`], uncut), a text a spreadsheet would
/// take for a formula (`=`, `+`, `-`, `@` first, and not a number) with a `'` before it
/// (issue 25, N8: a job named `=HYPERLINK(…)` ran in the operator's spreadsheet), then quoted
/// when it must be.
fn csv_field(s: &str) -> String {
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
                    o(p.state.clone()),
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
            j.state.clone(),
            o(j.end.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_proto::{ProcessRow, SeriesPoint};

    const MIB: u64 = 1 << 20;

    fn utc() -> FixedOffset {
        FixedOffset::east_opt(0).unwrap()
    }

    /// 2026-11-22T05:00:00Z
    const T0: i64 = 1_795_323_600_000;

    fn job() -> JobReport {
        JobReport {
            id: "12".into(),
            name: "steps".into(),
            user: "alice".into(),
            uid: 1000,
            node: "n1".into(),
            state: "ended".into(),
            end: Some("completed".into()),
            end_reason: Some("exited".into()),
            exit_status: Some(0),
            ncpus: 2,
            cpus: "0-1".into(),
            ngpus: 0,
            gpus: String::new(),
            mem_limit: None,
            submitted_ms: T0,
            started_ms: Some(T0 + 1_000),
            ended_ms: Some(T0 + 11_000),
            queued_ms: 1_000,
            running_ms: 10_000,
            backfill_ms: 0,
            frozen_ms: 2_000,
            freezes: 1,
            cpu_user_usec: 4_000_000,
            cpu_system_usec: 1_000_000,
            mem_peak: 300 * MIB,
            swap_peak: 0,
            io_rbytes: 4096,
            io_wbytes: 512,
            io_counted: Some(true),
            io: Some("weight=50; 254:0 rbps=10M".into()),
            counts_exact: Some(true),
            procs_total: Some(26),
            threads_total: Some(26),
            procs_max: 2,
            threads_max: 2,
            samples: 3,
            gpu_util_mean: None,
            gpu_util_max: None,
            gpu_mem_peak: None,
            threads: Vec::new(),
            series: vec![
                SeriesPoint {
                    ts_ms: T0 + 2_000,
                    state: Some("running".into()),
                    cpu_user_usec: Some(500_000),
                    cpu_system_usec: Some(0),
                    mem_current: Some(100 * MIB),
                    procs: Some(1),
                    ..SeriesPoint::default()
                },
                SeriesPoint {
                    ts_ms: T0 + 4_000,
                    state: Some("running".into()),
                    cpu_user_usec: Some(2_000_000),
                    cpu_system_usec: Some(500_000),
                    mem_current: Some(200 * MIB),
                    mem_peak: Some(200 * MIB),
                    procs: Some(2),
                    psi_cpu_some: Some(1.5),
                    ..SeriesPoint::default()
                },
            ],
            processes: vec![ProcessRow {
                ts_ms: T0 + 4_000,
                pid: 77,
                comm: "pjw-wl".into(),
                cpu_usec: 2_500_000,
                rss: 200 * MIB,
                threads: 1,
            }],
            steps: vec![],
        }
    }

    #[test]
    fn one_job_in_detail() {
        let want = "\
Job 12 (steps) of alice on n1: ended, completed (exit 0)
  CPUs            2 (0-1)
  Submitted       2026-11-22T05:00:00+00:00
  Started         2026-11-22T05:00:01+00:00
  Ended           2026-11-22T05:00:11+00:00
  Waited in queue 0:00:01
  Ran (wall)      0:00:10
    as backfill   0:00:00
    frozen        0:00:02 (1 times)
  CPU time        5.00 s (user 4.00 s, system 1.00 s)
  CPU efficiency  25.0%
  Peak memory     300M (limit none)
  Peak swap       0B
  I/O             read 4K, written 512B
  Processes       26 total, 2 at most
  Threads         26 total, 2 at most
  Samples         3
  I/O settings    weight=50; 254:0 rbps=10M
  Reason          exited
";
        assert_eq!(render_table(&[job()], false, false, &utc()), want);
    }

    #[test]
    fn threads_busy_apart_from_sleepers_with_names_escaped() {
        let tz = FixedOffset::east_opt(0).unwrap();
        let mut j = job();
        let row = |tid, comm: &str, busy, run| pjw_proto::ThreadRow {
            tid,
            pid: 100,
            comm: comm.into(),
            cpu_usec: 2_500_000,
            cpus: "0-1".into(),
            migrations: Some(3),
            running_pct: Some(run),
            waiting_pct: Some(1.0),
            sleeping_pct: Some(99.0 - run),
            busy,
            pin: busy.then(|| "1".to_string()),
            samples: 4,
            first_ms: T0,
            last_ms: T0 + 3_000,
            points: Vec::new(),
        };
        j.threads = vec![
            row(101, "busy-0", true, 97.0),
            row(102, "\x1b[2Jevil\n", false, 0.5),
        ];
        let text = render_threads(&j, &tz);
        let (busy, sleeping) = text.split_once("Sleeping threads").unwrap();
        assert!(busy.contains("Busy threads of job 12 (1)"), "{text}");
        assert!(
            busy.lines().any(|l| l.starts_with("101 ")
                && l.contains("busy-0")
                && l.contains("2.50")
                && l.contains("97%")
                && l.contains("0-1")),
            "{text}"
        );
        assert!(
            sleeping.contains("102 ") && sleeping.contains("\\u{1b}[2Jevil\\u{a}"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "{text:?}");
        let csv = render_threads_csv(&[j]);
        assert!(
            csv.contains("\n12,101,100,busy-0,2500000,0-1,3,97.0,1.0,2.0,true,1,4,"),
            "{csv}"
        );
        assert!(!csv.contains('\x1b'), "{csv:?}");
    }

    #[test]
    fn a_job_with_steps_lists_them_after_its_rows() {
        let step = |n: u32, ended: Option<i64>, exit: Option<i32>| pjw_proto::StepReport {
            step: n,
            name: if n == 0 {
                "mpirun\x1b[2J".into()
            } else {
                "post".into()
            },
            uid: 1000,
            cpus: pjw_core::CpuSet::parse_list("0").unwrap(),
            pid: 4100 + n,
            started_ms: T0 + 2_000,
            ended_ms: ended,
            exit_status: exit,
        };
        let mut j = job();
        j.steps = vec![step(0, Some(T0 + 5_500), Some(0)), step(1, None, None)];
        let text = render_table(&[j], false, false, &utc());
        let tail: Vec<&str> = text.lines().rev().take(4).collect();
        assert_eq!(
            tail,
            vec![
                "    step 1 post: cpus 0, pid 4101, started 2026-11-22T05:00:02+00:00, running, exit -",
                "    step 0 mpirun\\u{1b}[2J: cpus 0, pid 4100, started 2026-11-22T05:00:02+00:00, 0:00:03, exit 0",
                "  Steps           2",
                "  Reason          exited",
            ],
            "{text}"
        );
    }

    #[test]
    fn series_and_processes() {
        let text = render_table(&[job()], true, true, &utc());
        let tail = text.split_once("\nSeries").unwrap().1;
        let want = " of job 12 (2 samples)
TIME                       STATE    CPU   MEM   PEAK  ANON  FILE  SWAP  READ  WRITE  PROCS  THREADS  PSI_CPU  PSI_MEM  PSI_IO
2026-11-22T05:00:02+00:00  running  -     100M  -     -     -     -     -     -      1      -        -        -        -
2026-11-22T05:00:04+00:00  running  1.00  200M  200M  -     -     -     -     -      2      -        1.50     -        -

Processes of job 12
TIME                       PID  COMM    CPU_S  RSS   THREADS
2026-11-22T05:00:04+00:00  77   pjw-wl  2.50   200M  1
";
        assert_eq!(tail, want);
    }

    #[test]
    fn several_jobs_in_a_list() {
        let mut b = job();
        b.id = "13".into();
        b.state = "running".into();
        b.end = None;
        b.exit_status = None;
        b.procs_total = None;
        let want = "\
JOB  USER   NAME   NODE  STATE    END        EXIT  SUBMITTED                  CPUS  WAIT     WALL     CPU_S  EFF    MEM_PEAK  SWAP  READ  WRITE  PROCS  THREADS  FROZEN
12   alice  steps  n1    ended    completed  0     2026-11-22T05:00:00+00:00  2     0:00:01  0:00:10  5.0    25.0%  300M      0B    4K    512B   26/2   26/2     0:00:02
13   alice  steps  n1    running  -          -     2026-11-22T05:00:00+00:00  2     0:00:01  0:00:10  5.0    25.0%  300M      0B    4K    512B   -/2    26/2     0:00:02
";
        assert_eq!(
            render_table(&[job(), b.clone()], false, false, &utc()),
            want
        );
        // Counts that are a lower bound say so.
        let mut lossy = job();
        lossy.counts_exact = Some(false);
        let text = render_job(&lossy, &utc());
        assert!(
            text.contains("  Processes       at least 26 total, 2 at most\n"),
            "{text}"
        );
        // A GPU job says its GPUs under its CPUs; a job without none.
        let mut g = job();
        g.ngpus = 2;
        g.gpus = "1,3".into();
        let text = render_job(&g, &utc());
        assert!(
            text.contains("(0-1)\n  GPUs            2 (1,3)\n"),
            "{text}"
        );
        assert!(!render_job(&job(), &utc()).contains("GPU"));
        // With NVML readings: utilisation and memory after the memory rows, and in the CSV.
        g.gpu_util_mean = Some(62.5);
        g.gpu_util_max = Some(97.0);
        g.gpu_mem_peak = Some(6 << 30);
        let text = render_job(&g, &utc());
        assert!(
            text.contains(
                "  Peak swap       0B\n  GPU utilisation 62.5% mean, 97.0% at most\n  GPU memory      6G at most\n"
            ),
            "{text}"
        );
        let csv = render_csv(&[g], false, false);
        assert!(csv.ends_with(",3,62.5,97,6442450944\n"), "{csv}");
        // A node that does not count I/O says so instead of showing 0.
        b.io_counted = Some(false);
        let text = render_table(&[b.clone()], false, false, &utc());
        assert!(
            text.contains(
                "  I/O             not counted on this node (needs the cgroup v2 io controller)\n"
            ),
            "{text}"
        );
        let list = render_list(&[b.clone()], &utc());
        assert!(
            list.lines().nth(1).unwrap().contains("  -     -      -/2"),
            "{list}"
        );
        let csv = render_csv(&[b], false, false);
        assert!(csv.contains(",0,,,,2,"), "{csv}");
        assert_eq!(render_table(&[], false, false, &utc()), "no jobs\n");
    }

    #[test]
    fn csv_views() {
        let mut j = job();
        j.end_reason = Some("killed by \"bob\", at last".into());
        let csv = render_csv(&[j.clone()], false, false);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            "12,alice,1000,steps,n1,ended,completed,0,\"killed by \"\"bob\"\", at last\",2,0-1,,1795323600000,1795323601000,1795323611000,1000,10000,0,2000,1,4000000,1000000,0.2500,314572800,0,4096,512,26,2,26,2,3,,,"
        );
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count() - 1); // one quoted comma
        let s = render_csv(&[j.clone()], true, false);
        assert_eq!(
            s.lines().nth(2).unwrap(),
            "12,1795323604000,running,2000000,500000,209715200,209715200,,,,,,2,,1.5,,,,,,,"
        );
        let p = render_csv(&[j], false, true);
        assert_eq!(
            p.lines().nth(1).unwrap(),
            "12,1795323604000,77,pjw-wl,2500000,209715200,1"
        );
    }

    /// Issue 25, N8: a job name a spreadsheet would run as a formula is written as text;
    /// numbers, negative ones too, are left as they are.
    #[test]
    fn csv_fields_are_never_formulas() {
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("+cmd"), "'+cmd");
        assert_eq!(csv_field("-1"), "-1");
        assert_eq!(csv_field("-2.5"), "-2.5");
        assert_eq!(csv_field("solver"), "solver");
    }

    #[test]
    fn since_forms() {
        let now = T0;
        assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(parse_since("30m", now).unwrap(), now - 1_800_000);
        assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(parse_since("2026-11-22T06:00:00+01:00", now).unwrap(), T0);
        assert!(parse_since("2026-11-22", now).is_ok());
        for bad in ["", "yesterday", "5y", "-3h"] {
            let e = parse_since(bad, now).unwrap_err().to_string();
            assert!(e.contains("--since"), "{bad}: {e}");
        }
    }
}
