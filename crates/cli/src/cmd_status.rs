//! `pjw status`: a cpurep-style view of the node.

use pjw_core::format_size;
use pjw_proto::{Client, JobState, Request, Response, StatusReport};

use crate::cli::StatusArgs;

pub fn run(a: StatusArgs) -> anyhow::Result<()> {
    let path = pjw_proto::socket_path();
    let mut c = Client::connect(&path)?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    match c.call(&Request::Status)? {
        Response::Status(s) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", render(&s));
            }
            Ok(())
        }
        Response::Error { message, .. } => anyhow::bail!("{message}"),
        other => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
    }
}

/// Marks for jobs in the node map: A–Z, a–z, 0–9, then '#'.
fn mark(i: usize) -> char {
    const MARKS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    MARKS.get(i).map(|b| *b as char).unwrap_or('#')
}

fn age(secs: u64) -> String {
    if secs >= 86400 {
        format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600)
    } else if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

/// The text view: job table, node map, totals.
pub fn render(s: &StatusReport) -> String {
    let mut out = String::new();
    let mut rows = vec![[
        "", "JOB", "USER", "NAME", "CPUS", "MEMS", "MEM", "PROCS", "THREADS", "STATE", "AGE",
    ]
    .map(String::from)
    .to_vec()];
    let mut map: Vec<char> = Vec::new();
    let cpus: Vec<u32> = s.cpus.iter().collect();
    map.resize(cpus.len(), '.');
    let mut running = 0;
    for (i, j) in s.jobs.iter().enumerate() {
        let m = if j.state == JobState::Queued {
            ' '
        } else {
            mark(running)
        };
        if j.state != JobState::Queued {
            for c in j.cpus.iter() {
                if let Some(pos) = cpus.iter().position(|x| *x == c) {
                    map[pos] = m;
                }
            }
            running += 1;
        }
        let _ = i;
        rows.push(vec![
            m.to_string(),
            j.id.clone(),
            j.user.clone(),
            j.name.clone(),
            if j.state == JobState::Queued {
                format!("({})", j.ncpus)
            } else {
                j.cpus.to_string()
            },
            j.mems.to_string(),
            j.mem.map(format_size).unwrap_or_else(|| "-".into()),
            j.procs.to_string(),
            j.threads.to_string(),
            j.state.as_str().to_string(),
            age(j.age_secs),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    if s.jobs.is_empty() {
        out.push_str("no jobs\n");
    } else {
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(v, w)| format!("{v:<w$}"))
                .collect();
            out.push_str(line.join(" ").trim_end());
            out.push('\n');
        }
    }
    let queued = s
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Queued)
        .count();
    let map: String = map.into_iter().collect();
    out.push_str(&format!("node {} [{}]\n", s.node, map));
    out.push_str(&format!(
        "cpus {}: {} free, {} allocated; {} running, {} queued\n",
        s.cpus,
        s.free_cpus.len(),
        s.total_cpus as usize - s.free_cpus.len(),
        s.jobs.len() - queued,
        queued
    ));
    out
}
