//! `pjw report`: what jobs did, like MCOpt's jobreport — totals, and with `--series` the time
//! series, with `--processes` the per-process rows; as a table, JSON or CSV.
//!
//! The daemon answers (it knows the caller from `SO_PEERCRED` and shows users only their own
//! jobs); this module only asks and renders. Rendering is pure (`render_*`), with the time
//! zone passed in, so it is tested on literal text.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context};
use chrono::{DateTime, Offset, TimeZone};
use pjw_proto::{
    collect_report, Client, JobReport, ReportQuery, ReportState, Request, StateFilter,
};

use crate::cli::{ReportArgs, ReportFormat};

mod csv;
mod text;

pub use csv::{render_csv, render_threads_csv};
pub use text::{render_table, render_threads};

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
        // Parsed here, so a word the daemon would refuse is refused before asking it, on one
        // line that lists the valid ones.
        state: a
            .state
            .as_deref()
            .map(str::parse::<StateFilter>)
            .transpose()?,
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
        top: a.top.map(Into::into),
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
        if !jobs.is_empty() && jobs.iter().all(|j| j.state == ReportState::Ended) {
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

#[cfg(test)]
mod tests;
