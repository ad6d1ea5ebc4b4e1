//! `pjw status`: a cpurep-style view of the node.

use pjw_core::format_size;
use pjw_core::text::printable;
use pjw_core::time_limit::TimeLimit;
use pjw_proto::{Client, JobState, Request, Response, StatusReport};

use crate::cells;
use crate::cli::StatusArgs;

pub fn run(a: StatusArgs) -> anyhow::Result<()> {
    let path = pjw_proto::socket_path();
    let mut c = Client::connect(&path)?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    match c.call(&Request::Status)? {
        Response::Status(s) => {
            if a.json {
                // Every control character a JSON string may hold, escaped (pjw_core::text).
                println!(
                    "{}",
                    pjw_core::text::json(&serde_json::to_string_pretty(&s)?)
                );
            } else {
                let now_ms = chrono::Utc::now().timestamp_millis();
                print!(
                    "{}{}{}{}",
                    render(&s),
                    render_leases(&s, now_ms),
                    render_starts(&s),
                    render_cut(&s)
                );
            }
            Ok(())
        }
        Response::Error { message, .. } => anyhow::bail!("{message}"),
        other => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
    }
}

/// What the daemon left out to fit its answer in one frame (empty: nothing).
fn render_cut(s: &StatusReport) -> String {
    match s.cut {
        Some(c) => format!(
            "not listed: {} running steps and the last {} jobs (the answer was cut to fit the protocol's frame)\n",
            c.steps, c.jobs
        ),
        None => String::new(),
    }
}

/// A span of milliseconds for people: `42 s`, `12 min`, `3 h 5 min`.
fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", s / 60)
    } else {
        format!("{} h {} min", s / 3600, s % 3600 / 60)
    }
}

/// Each registered job's lease (issue 27): when it was last renewed, when it runs out, and
/// what its manager said last.
pub fn render_leases(s: &StatusReport, now_ms: i64) -> String {
    let mut out = String::new();
    for j in &s.jobs {
        let Some(l) = &j.lease else { continue };
        let expiry = match l.expires_ms {
            Some(e) if e > now_ms => format!("runs out in {}", span(e - now_ms)),
            Some(_) => "runs out now".into(),
            None => "no lease".into(),
        };
        let manager =
            j.id.split_once(':')
                .map(|(m, _)| m)
                .unwrap_or("its manager");
        let word = match (&l.word, l.word_ms, l.asked) {
            (Some(w), Some(at), _) => format!(
                "; {}: {} ({} ago)",
                printable(manager, 16),
                printable(w, 200),
                span(now_ms - at)
            ),
            (_, _, true) => format!("; {} not asked yet", printable(manager, 16)),
            _ => format!(
                "; {} is not asked (the lease alone)",
                printable(manager, 16)
            ),
        };
        out.push_str(&format!(
            "lease {}: renewed {} ago, {expiry}{word}\n",
            printable(&j.id, 64),
            span(now_ms - l.renewed_ms),
        ));
    }
    out
}

/// The start-time statistics (issue 27): over the recent window and since the daemon started.
pub fn render_starts(s: &StatusReport) -> String {
    let Some(st) = &s.starts else {
        return String::new();
    };
    let secs = |v: Option<f64>| match v {
        Some(x) if x < 10.0 => format!("{x:.2}s"),
        Some(x) => format!("{x:.0}s"),
        None => "-".into(),
    };
    let mut out = String::new();
    for w in [&st.recent, &st.total] {
        let label = if w.window_secs == 0 {
            "since start".to_string()
        } else {
            format!("last {}", span(w.window_secs as i64 * 1000))
        };
        out.push_str(&format!(
            "starts {label}: {} started ({:.3}/s), {} ended ({:.3}/s); wait to start mean {} p50 {} p90 {} p99 {} max {}; queue mean {:.1} max {}; {} freezes\n",
            w.started,
            w.started_per_sec,
            w.ended,
            w.ended_per_sec,
            secs(w.wait_mean_secs),
            secs(w.wait_p50_secs),
            secs(w.wait_p90_secs),
            secs(w.wait_p99_secs),
            secs(w.wait_max_secs),
            w.queue_mean,
            w.queue_max,
            w.freezes,
        ));
    }
    out
}

/// The job partition's line: use, demand, and whose pressure there is.
fn memory_line(m: &pjw_proto::MemoryStatus) -> String {
    let mut line = format!(
        "memory {} of {} used by jobs; demand {}, {} held by frozen jobs",
        format_size(m.used),
        format_size(m.limit),
        format_size(m.demand),
        format_size(m.held)
    );
    match (&m.shared, &m.outside) {
        (None, None) => line.push_str("; no pressure"),
        (shared, outside) => {
            if let Some(why) = shared {
                let act = if m.governor {
                    "the governor acts"
                } else {
                    "the governor is off"
                };
                line.push_str(&format!("; pressure among pjw's jobs ({act}): {why}"));
            }
            if let Some(why) = outside {
                line.push_str(&format!(
                    "; pressure from outside pjw's jobs (left to the node's memory managers): {why}"
                ));
            }
        }
    }
    line.push('\n');
    line
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

/// The text view: job table, node map, totals. Primaries mark their CPUs in the node map with
/// their letter; a backfiller is shown in lower case where no primary holds the CPU.
pub fn render(s: &StatusReport) -> String {
    let mut out = String::new();
    let header = [
        "", "JOB", "USER", "NAME", "PRI", "CPUS", "MEMS", "MEM", "PROCS", "THREADS", "STATE", "AGE",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    // A GPUS column only on a node with GPUs.
    let gpu_col = !s.gpus.is_empty();
    if gpu_col {
        rows[0].insert(7, "GPUS".into());
    }
    let map = crate::marks::cpu_marks(s);
    let mut reasons = Vec::new();
    for (j, m) in s.jobs.iter().zip(crate::marks::job_marks(s)) {
        let m = m.unwrap_or(' ');
        job_notes(j, &mut reasons);
        rows.push(job_row(j, m, gpu_col));
    }
    if s.jobs.is_empty() {
        out.push_str("no jobs\n");
    } else {
        out.push_str(&table(&rows));
        for r in reasons {
            out.push_str(&format!("  {r}\n"));
        }
    }
    out.push_str(&totals(s, map, gpu_col));
    out
}

/// A job's lines below the table: its manager's job, why it waits, OOM kills, I/O, steps.
fn job_notes(j: &pjw_proto::JobInfo, reasons: &mut Vec<String>) {
    // Ids, names and labels come from users: shown bounded and with control characters
    // escaped, so no job can move another user's terminal (pjw_core::text).
    if let Some(w) = &j.wlm {
        reasons.push(format!(
            "{}: workload manager job {}",
            j.id,
            printable(w, 128)
        ));
    }
    if let Some(r) = &j.reason {
        reasons.push(format!("{}: {}", j.id, printable(r, 320)));
    }
    if j.oom_kills > 0 {
        reasons.push(format!(
            "{}: {} process(es) killed for memory (OOM) at its {} limit",
            j.id,
            j.oom_kills,
            j.mem
                .map_or_else(|| "job partition".to_string(), format_size)
        ));
    }
    if let Some(io) = &j.io {
        reasons.push(format!("{}: I/O {}", j.id, printable(io, 200)));
    }
    if let Some(limit) = j.time_limit_s.and_then(TimeLimit::from_secs) {
        let left = match j.time_left_s {
            Some(s) => format!(", {} left", clock(s)),
            None => String::new(),
        };
        let whose = if j.time_limit_default {
            " (the node's default)"
        } else {
            ""
        };
        reasons.push(format!("{}: time limit {limit}{whose}{left}", j.id));
    }
    for s in &j.steps {
        reasons.push(format!(
            "{}: step {} {} on cpus {}, pid {}, {}",
            j.id,
            s.step,
            printable(&s.name, 64),
            s.cpus,
            s.pid,
            age(s.age_secs)
        ));
    }
}

/// `H:MM:SS` of `secs` (`D-HH:MM:SS` from a day on), as a time limit is shown.
fn clock(secs: u64) -> String {
    TimeLimit::from_secs(secs).map_or_else(|| "0:00:00".into(), |t| t.to_string())
}

/// A job's row of the table (`m`: its letter in the node map).
fn job_row(j: &pjw_proto::JobInfo, m: char, gpu_col: bool) -> Vec<String> {
    let mut row = vec![
        m.to_string(),
        printable(&j.id, 64).into_owned(),
        printable(&j.user, 32).into_owned(),
        printable(&j.name, 64).into_owned(),
        j.priority.to_string(),
        if j.cpus.is_empty() {
            format!("({})", j.ncpus)
        } else {
            j.cpus.to_string()
        },
        if j.mems.is_empty() {
            "-".into()
        } else {
            j.mems.to_string()
        },
        j.mem.map(format_size).unwrap_or_else(|| "-".into()),
        j.procs.to_string(),
        j.threads.to_string(),
        j.state.as_str().to_string(),
        age(j.age_secs),
    ];
    if gpu_col {
        row.insert(7, crate::marks::job_gpus(j));
    }
    row
}

/// The rows as aligned lines. Every cell goes through the one escaping function, at the sink
/// (pjw_core::text).
fn table(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| printable(c, pjw_core::text::MAX_CELL).into_owned())
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| cells::width(&r[c])).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(v, w)| cells::pad(v, *w))
            .collect();
        out.push_str(line.join(" ").trim_end());
        out.push('\n');
    }
    out
}

/// The node map, the GPU map and the CPU and memory totals.
fn totals(s: &StatusReport, map: Vec<char>, gpu_col: bool) -> String {
    let mut out = String::new();
    let count = |st: JobState| s.jobs.iter().filter(|j| j.state == st).count();
    let map: String = map.into_iter().collect();
    out.push_str(&format!("node {} [{}]\n", printable(&s.node, 64), map));
    if gpu_col {
        let gmap: String = crate::marks::gpu_marks(s).into_iter().collect();
        out.push_str(&format!(
            "gpus {} [{}]: {} free\n",
            s.gpus,
            gmap,
            s.free_gpus.len()
        ));
    }
    let slots: usize = s
        .jobs
        .iter()
        .filter(|j| {
            matches!(
                j.state,
                JobState::Running | JobState::Backfill | JobState::Ending
            )
        })
        .map(|j| j.cpus.len())
        .sum();
    out.push_str(&format!(
        "cpus {}: {} free, {} allocated; vcpus {} of {} in use; {} running, {} backfill, {} frozen, {} queued\n",
        s.cpus,
        s.free_cpus.len(),
        s.total_cpus as usize - s.free_cpus.len(),
        slots,
        s.vcpus,
        count(JobState::Running) + count(JobState::Ending),
        count(JobState::Backfill),
        count(JobState::Frozen),
        count(JobState::Queued),
    ));
    if let Some(m) = &s.memory {
        out.push_str(&memory_line(m));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_core::{CpuSet, GpuSet};
    use pjw_proto::JobInfo;

    fn job(id: &str, cpus: &str, state: JobState, gpus: &str, ngpus: u32) -> JobInfo {
        JobInfo {
            id: id.into(),
            name: "x".into(),
            user: "u".into(),
            uid: 1000,
            cpus: CpuSet::parse_list(cpus).unwrap(),
            mems: CpuSet::new(),
            ncpus: 1,
            mem: None,
            procs: 1,
            threads: 1,
            state,
            reason: None,
            priority: 10,
            age_secs: 1,
            pid: None,
            cpu_usec: None,
            mem_bytes: None,
            sampled_ms: None,
            wlm: None,
            ngpus,
            gpus: GpuSet::parse_list(gpus).unwrap(),
            gpu_env: Vec::new(),
            io: None,
            gpu_util: None,
            gpu_mem: None,
            lease: None,
            steps: vec![],
            oom_kills: 0,
            time_limit_s: None,
            time_left_s: None,
            time_limit_default: false,
        }
    }

    fn report(gpus: &str, jobs: Vec<JobInfo>) -> StatusReport {
        StatusReport {
            node: "n".into(),
            total_cpus: 4,
            cpus: CpuSet::parse_list("0-3").unwrap(),
            free_cpus: CpuSet::parse_list("2-3").unwrap(),
            vcpus: 4,
            jobs,
            gpus: GpuSet::parse_list(gpus).unwrap(),
            free_gpus: GpuSet::parse_list(gpus).unwrap(),
            cgroup: "v1".into(),
            version: "0".into(),
            starts: None,
            memory: None,
            cut: None,
        }
    }

    #[test]
    fn a_cut_answer_says_what_it_left_out() {
        let mut s = report("", vec![]);
        assert_eq!(render_cut(&s), "");
        s.cut = Some(pjw_proto::StatusCut {
            steps: 4608,
            jobs: 12,
        });
        assert_eq!(
            render_cut(&s),
            "not listed: 4608 running steps and the last 12 jobs (the answer was cut to fit the protocol's frame)\n"
        );
    }

    #[test]
    fn gpus_show_per_job_and_on_a_line_of_the_node_map() {
        let mut r = report(
            "0-3",
            vec![
                job("a", "0", JobState::Running, "3", 1),
                job("b", "1", JobState::Running, "", 0),
                job("c", "", JobState::Queued, "", 2),
                job("slurm:7", "", JobState::Queued, "1", 1),
            ],
        );
        r.free_gpus = GpuSet::parse_list("0-2").unwrap();
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains(" GPUS "), "{text}");
        let col = lines[0].find("GPUS").unwrap();
        let cell = |l: &str| l[col..].split_whitespace().next().unwrap_or("").to_string();
        assert_eq!(
            lines[1..5].iter().map(|l| cell(l)).collect::<Vec<_>>(),
            ["3", "-", "(2)", "1"],
            "{text}"
        );
        assert!(
            text.contains("node n [AB..]\ngpus 0-3 [...A]: 3 free\n"),
            "{text}"
        );
        // No GPUs on the node: no column, no line.
        let text = render(&report("", vec![job("a", "0", JobState::Running, "", 0)]));
        assert!(!text.contains("GPUS") && !text.contains("gpus "), "{text}");
    }

    #[test]
    fn leases_and_start_statistics_are_told() {
        let mut r = report("", vec![job("slurm:7", "0", JobState::Running, "", 0)]);
        r.jobs[0].lease = Some(pjw_proto::LeaseInfo {
            renewed_ms: 1_000_000,
            expires_ms: Some(1_000_000 + 3_600_000),
            asked: true,
            word: Some("no answer: squeue did not answer within 30 s\x1b[2J".into()),
            word_ms: Some(1_050_000),
        });
        let text = render_leases(&r, 1_060_000);
        assert_eq!(
            text,
            "lease slurm:7: renewed 60 s ago, runs out in 59 min; slurm: no answer: squeue did not answer within 30 s\\u{1b}[2J (10 s ago)\n"
        );
        r.starts = Some(Box::new(pjw_proto::StartStats {
            queue_len: 0,
            recent: pjw_proto::StartWindow {
                window_secs: 300,
                started: 3,
                started_per_sec: 0.01,
                wait_mean_secs: Some(1.5),
                wait_p50_secs: Some(0.25),
                ..Default::default()
            },
            total: Default::default(),
        }));
        let text = render_starts(&r);
        assert!(text.starts_with("starts last 5 min: 3 started (0.010/s), 0 ended (0.000/s); wait to start mean 1.50s p50 0.25s p90 - "), "{text}");
        assert!(text.contains("\nstarts since start: 0 started"), "{text}");
    }

    #[test]
    fn a_time_limit_and_the_time_left_are_told() {
        let r = report(
            "",
            vec![
                JobInfo {
                    time_limit_s: Some(7200),
                    time_left_s: Some(3599),
                    ..job("a", "0", JobState::Running, "", 0)
                },
                JobInfo {
                    time_limit_s: Some(90_000),
                    ..job("b", "", JobState::Queued, "", 0)
                },
                JobInfo {
                    time_limit_s: Some(120),
                    time_left_s: Some(60),
                    time_limit_default: true,
                    ..job("c", "1", JobState::Running, "", 0)
                },
            ],
        );
        let text = render(&r);
        assert!(
            text.contains("  c: time limit 0:02:00 (the node's default), 0:01:00 left\n"),
            "{text}"
        );
        assert!(
            text.contains("  a: time limit 2:00:00, 0:59:59 left\n"),
            "{text}"
        );
        assert!(text.contains("  b: time limit 1-01:00:00\n"), "{text}");
    }

    #[test]
    fn memory_shows_whose_pressure_it_is_and_oom_kills_per_job() {
        let mut r = report(
            "",
            vec![JobInfo {
                oom_kills: 3,
                mem: Some(64 << 20),
                ..job("a", "0", JobState::Running, "", 0)
            }],
        );
        r.memory = Some(pjw_proto::MemoryStatus {
            limit: 1 << 30,
            used: 300 << 20,
            demand: 320 << 20,
            held: 0,
            governor: true,
            shared: None,
            outside: Some(
                "the node stalls on memory beyond pjw's job partition (PSI some 35.0%, full 2.0%)"
                    .into(),
            ),
            node_psi_some: Some(35.0),
            partition_psi_some: Some(0.0),
            sampled_ms: 0,
        });
        let text = render(&r);
        assert!(
            text.contains("  a: 3 process(es) killed for memory (OOM) at its 64M limit\n"),
            "{text}"
        );
        assert!(
            text.ends_with("memory 300M of 1G used by jobs; demand 320M, 0 held by frozen jobs; pressure from outside pjw's jobs (left to the node's memory managers): the node stalls on memory beyond pjw's job partition (PSI some 35.0%, full 2.0%)\n"),
            "{text}"
        );
        r.memory.as_mut().unwrap().outside = None;
        assert!(render(&r).ends_with("0 held by frozen jobs; no pressure\n"));
    }
}
