//! `pjw top`: a live view of the node, refreshed over the socket (default once a second).
//!
//! One `status` request per refresh; CPU % comes from two readings of each job's CPU time
//! (`cpu_usec`) and the time between them (100 % = one CPU busy). The daemon reads the figures
//! for the request (at most 0.5 s old, docs/decisions.md (bp)) and says when (`sampled_ms`), so
//! a job's CPU % is that of the last refresh interval; from an older daemon without
//! `sampled_ms` it is the wall time between two refreshes. The screen: a header, the
//! node map (one mark per CPU: the job holding it, lower case for a backfiller, `.` free), the
//! job table, the key help. Keys: `c` CPU %, `m` memory, `s` state, `i` id, `u` user sort (the
//! same key again reverses), `q`, Esc or Ctrl-C quit. Works in 80×24 (over ssh too: plain
//! terminal escapes, no mouse, no true colour needed).

use pjw_core::text::printable;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::Context;
use pjw_core::format_size;
use pjw_proto::{Client, JobInfo, JobState, Request, Response, StatusReport};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Row, Table};
use ratatui::Frame;

use crate::cli::TopArgs;

/// What the table is sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Cpu,
    Mem,
    State,
    Id,
    User,
}

impl SortKey {
    fn name(self) -> &'static str {
        match self {
            SortKey::Cpu => "cpu%",
            SortKey::Mem => "mem",
            SortKey::State => "state",
            SortKey::Id => "id",
            SortKey::User => "user",
        }
    }
    fn from_key(c: char) -> Option<SortKey> {
        Some(match c {
            'c' | 'C' => SortKey::Cpu,
            'm' | 'M' => SortKey::Mem,
            's' | 'S' => SortKey::State,
            'i' | 'I' => SortKey::Id,
            'u' | 'U' => SortKey::User,
            _ => return None,
        })
    }
}

/// The view's state between refreshes.
/// When a job's CPU time was read: by the daemon's sampler (ms since the epoch), or at the
/// request by an older daemon (this refresh).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stamp {
    Sampled(i64),
    Read(Instant),
}

impl Stamp {
    /// Seconds from `then` to this one; None when they are not of one kind (a daemon upgrade).
    fn secs_since(&self, then: &Stamp) -> Option<f64> {
        match (self, then) {
            (Stamp::Sampled(a), Stamp::Sampled(b)) => Some((a - b) as f64 / 1000.0),
            (Stamp::Read(a), Stamp::Read(b)) => Some(a.duration_since(*b).as_secs_f64()),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct View {
    pub sort: SortKey,
    pub reverse: bool,
    status: Option<StatusReport>,
    error: Option<String>,
    /// Per job: CPU time and when it was read.
    last: HashMap<String, (u64, Stamp)>,
    /// Per job: CPU % from the last two readings.
    cpu_pct: HashMap<String, f64>,
}

impl View {
    pub fn new() -> View {
        View {
            sort: SortKey::Cpu,
            reverse: false,
            status: None,
            error: None,
            last: HashMap::new(),
            cpu_pct: HashMap::new(),
        }
    }

    /// Take a new status, computing CPU % from the previous one.
    pub fn update(&mut self, s: StatusReport, now: Instant) {
        let mut last = HashMap::new();
        let mut pct = HashMap::new();
        for j in &s.jobs {
            let Some(us) = j.cpu_usec else { continue };
            let at = match j.sampled_ms {
                Some(ms) => Stamp::Sampled(ms),
                None => Stamp::Read(now),
            };
            if let Some((prev, then)) = self.last.get(&j.id) {
                match at.secs_since(then) {
                    Some(dt) if dt > 0.0 && us >= *prev => {
                        pct.insert(j.id.clone(), (us - prev) as f64 / 1e6 / dt * 100.0);
                    }
                    // The same sample again: the rate from the two before it still holds.
                    Some(0.0) => {
                        if let Some(p) = self.cpu_pct.get(&j.id) {
                            pct.insert(j.id.clone(), *p);
                        }
                    }
                    _ => {}
                }
            }
            last.insert(j.id.clone(), (us, at));
        }
        self.last = last;
        self.cpu_pct = pct;
        self.status = Some(s);
        self.error = None;
    }

    pub fn fail(&mut self, e: String) {
        // An error may quote what a client sent (an id): escaped like every shown text.
        self.error = Some(printable(&e, 200).into_owned());
    }

    /// A key was pressed: false means quit.
    pub fn key(&mut self, c: char) -> bool {
        if c == 'q' || c == 'Q' {
            return false;
        }
        if let Some(k) = SortKey::from_key(c) {
            if k == self.sort {
                self.reverse = !self.reverse;
            } else {
                self.sort = k;
                self.reverse = false;
            }
        }
        true
    }

    /// The jobs in display order.
    pub fn sorted(&self) -> Vec<&JobInfo> {
        let Some(s) = &self.status else {
            return Vec::new();
        };
        let mut jobs: Vec<&JobInfo> = s.jobs.iter().collect();
        let pct = |j: &JobInfo| self.cpu_pct.get(&j.id).copied().unwrap_or(0.0);
        let rank = |st: JobState| match st {
            JobState::Running => 0,
            JobState::Backfill => 1,
            JobState::Frozen => 2,
            JobState::Ending => 3,
            JobState::Queued => 4,
        };
        // Stable sorts on top of the daemon's order (running first, then the queue in order).
        match self.sort {
            SortKey::Cpu => jobs.sort_by(|a, b| pct(b).total_cmp(&pct(a))),
            SortKey::Mem => jobs.sort_by_key(|j| std::cmp::Reverse(j.mem_bytes.unwrap_or(0))),
            SortKey::State => jobs.sort_by_key(|j| rank(j.state)),
            SortKey::Id => jobs.sort_by(|a, b| natural(&a.id, &b.id)),
            SortKey::User => jobs.sort_by(|a, b| a.user.cmp(&b.user)),
        }
        if self.reverse {
            jobs.reverse();
        }
        jobs
    }

    /// Draw the whole screen.
    pub fn draw(&self, f: &mut Frame) {
        let area = f.area();
        let map = self.map_lines(area.width as usize);
        let map_h = (map.len() as u16)
            .min(area.height.saturating_sub(6) / 2)
            .max(1);
        let [head, map_area, table_area, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(map_h),
            Constraint::Min(2),
            Constraint::Length(1),
        ])
        .areas(area);
        f.render_widget(Paragraph::new(self.header()), head);
        f.render_widget(Paragraph::new(map), map_area);
        f.render_widget(self.table(), table_area);
        let help = Line::from(vec![
            Span::styled(
                " sort: c cpu  m mem  s state  i id  u user (again: reverse)   q quit",
                Style::default().add_modifier(Modifier::DIM),
            ),
            Span::raw(format!(
                "   [{}{}]",
                self.sort.name(),
                if self.reverse { " rev" } else { "" }
            )),
        ]);
        f.render_widget(Paragraph::new(help), foot);
    }

    fn header(&self) -> Line<'static> {
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let Some(s) = &self.status else {
            return Line::from(Span::styled(
                format!(
                    "pjw top: {}",
                    self.error.as_deref().unwrap_or("waiting for the daemon")
                ),
                bold,
            ));
        };
        let count = |st: JobState| s.jobs.iter().filter(|j| j.state == st).count();
        let mut spans = vec![
            Span::styled(format!("pjw top  {}", printable(&s.node, 64)), bold),
            Span::raw(format!(
                "  cpus {}/{} free  running {}  backfill {}  frozen {}  queued {}",
                s.free_cpus.len(),
                s.total_cpus,
                count(JobState::Running),
                count(JobState::Backfill),
                count(JobState::Frozen),
                count(JobState::Queued)
            )),
        ];
        if let Some(e) = &self.error {
            spans.push(Span::styled(
                format!("  ({e})"),
                Style::default().add_modifier(Modifier::REVERSED),
            ));
        }
        Line::from(spans)
    }

    /// The job holding each CPU (mark per job as in the table).
    fn marks(&self) -> HashMap<&str, char> {
        let Some(s) = &self.status else {
            return HashMap::new();
        };
        s.jobs
            .iter()
            .zip(crate::marks::job_marks(s))
            .filter_map(|(j, m)| Some((j.id.as_str(), m?)))
            .collect()
    }

    /// The node map: `CPU#  marks`, 8 CPUs per group, as many groups as fit the width.
    pub fn map_lines(&self, width: usize) -> Vec<Line<'static>> {
        let Some(s) = &self.status else {
            return vec![Line::raw("")];
        };
        let cpus: Vec<u32> = s.cpus.iter().collect();
        let holder: HashMap<u32, char> = cpus
            .iter()
            .copied()
            .zip(crate::marks::cpu_marks(s))
            .filter(|(_, m)| *m != '.')
            .collect();
        let groups_per_line = ((width.saturating_sub(6)) / 9).clamp(1, 8);
        let per_line = groups_per_line * 8;
        // The GPUs after the CPUs: `  gpu  ` and one mark per GPU, as many per line.
        let gpus = crate::marks::gpu_marks(s);
        let gpu_lines = gpus.chunks(per_line).map(|chunk| {
            let mut t = "  gpu ".to_string();
            for (i, m) in chunk.iter().enumerate() {
                if i > 0 && i % 8 == 0 {
                    t.push(' ');
                }
                t.push(*m);
            }
            Line::raw(t)
        });
        cpus.chunks(per_line)
            .map(|chunk| {
                let mut t = format!("{:>5} ", chunk[0]);
                for (i, c) in chunk.iter().enumerate() {
                    if i > 0 && i % 8 == 0 {
                        t.push(' ');
                    }
                    t.push(holder.get(c).copied().unwrap_or('.'));
                }
                Line::raw(t)
            })
            .chain(gpu_lines)
            .collect()
    }

    fn table(&self) -> Table<'static> {
        let marks = self.marks();
        // A GPUS column (after CPUS) only on a node with GPUs.
        let gpu_col = self.status.as_ref().is_some_and(|s| !s.gpus.is_empty());
        let mut names = vec![
            "", "JOB", "USER", "STATE", "CPUS", "CPU%", "MEM", "PROCS", "AGE", "NAME",
        ];
        if gpu_col {
            names.insert(5, "GPUS");
        }
        let header = Row::new(names)
            .style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED));
        let rows: Vec<Row> = self
            .sorted()
            .into_iter()
            .map(|j| {
                let pct = self
                    .cpu_pct
                    .get(&j.id)
                    .map(|p| format!("{p:.0}"))
                    .unwrap_or_else(|| "-".into());
                let mem = j.mem_bytes.map(format_size).unwrap_or_else(|| "-".into());
                let cpus = if j.cpus.is_empty() {
                    format!("({})", j.ncpus)
                } else {
                    j.cpus.to_string()
                };
                let mut cells = vec![
                    marks
                        .get(j.id.as_str())
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    printable(&j.id, 64).into_owned(),
                    printable(&j.user, 32).into_owned(),
                    j.state.as_str().to_string(),
                    cpus,
                    pct,
                    mem,
                    j.procs.to_string(),
                    age(j.age_secs),
                    printable(&j.name, 64).into_owned(),
                ];
                if gpu_col {
                    cells.insert(5, crate::marks::job_gpus(j));
                }
                Row::new(cells)
            })
            .collect();
        let mut widths = vec![
            Constraint::Length(1),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Min(4),
        ];
        if gpu_col {
            widths.insert(5, Constraint::Length(5));
        }
        Table::new(rows, widths).header(header)
    }
}

impl Default for View {
    fn default() -> Self {
        View::new()
    }
}

/// Compare ids numerically when both are numbers.
fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
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

fn fetch() -> anyhow::Result<StatusReport> {
    let path = pjw_proto::socket_path();
    let mut c = Client::connect(&path)?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    match c.call(&Request::Status)? {
        Response::Status(s) => Ok(s),
        Response::Error { message, .. } => anyhow::bail!("{message}"),
        other => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
    }
}

pub fn run(a: TopArgs) -> anyhow::Result<()> {
    if !(0.2..=3600.0).contains(&a.interval) {
        anyhow::bail!("--interval: {} is not 0.2-3600 seconds", a.interval);
    }
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("pjw top needs a terminal (use `pjw status` in scripts)");
    }
    // The first reading tells a missing daemon before the screen is taken over.
    let first = fetch()?;
    let mut view = View::new();
    view.update(first, Instant::now());
    let every = Duration::from_secs_f64(a.interval);
    // ratatui::init enters the alternate screen and raw mode, and restores the terminal on a
    // panic too; ratatui::restore undoes it on every normal way out.
    let mut term = ratatui::try_init().context("cannot set up the terminal")?;
    let res = (|| -> anyhow::Result<()> {
        let mut next = Instant::now() + every;
        loop {
            term.draw(|f| view.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                match event::read()? {
                    Event::Key(k) if k.kind != KeyEventKind::Release => {
                        let quit = match k.code {
                            KeyCode::Esc => true,
                            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                                true
                            }
                            KeyCode::Char(c) => !view.key(c),
                            _ => false,
                        };
                        if quit {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
            if Instant::now() >= next {
                match fetch() {
                    Ok(s) => view.update(s, Instant::now()),
                    Err(e) => view.fail(format!("{e:#}")),
                }
                next = Instant::now() + every;
            }
        }
    })();
    ratatui::restore();
    res
}

#[cfg(test)]
mod tests;
