//! `pjw report` in the daemon: who may see what, and the answer built from the store.
//!
//! Reports go through the daemon rather than the client opening the database (which is
//! root-only): the caller's uid comes from `SO_PEERCRED`, so access is enforced for
//! unprivileged users without making the database readable (docs/decisions.md). The engine
//! checks access and adds what only it knows (live jobs' totals); the connection task then
//! streams the report ([`LocalReport`]): one page read from the store on a blocking thread,
//! written to the client, then the next — so what the daemon holds for a report is one page,
//! whatever the report's size, and a client that stops reading stops the reading too (until
//! the write timeout drops it).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use pjw_proto::report::{ReportState, SERIES_CHUNK};
use pjw_proto::{ErrorCode, JobReport, ProcessRow, ReportQuery, Response, SeriesPoint, ThreadRow};
use pjw_store::{
    JobFilter, JobProfile, JobRecord, JobSummary, ProcessSample, Sample, Store, StoreError,
    StoredState,
};
use tracing::warn;

mod access;

pub use access::{access, validate, Access, ReportRefusal};

/// Default number of jobs in a report.
pub const DEFAULT_LIMIT: u32 = 100;

/// A live job as the engine sees it now.
#[derive(Clone, Debug)]
pub struct LiveJob {
    pub seq: i64,
    pub state: ReportState,
    pub cpus: String,
    pub summary: JobSummary,
    /// Its steps so far (the store has them once it ends).
    pub steps: Vec<pjw_proto::StepReport>,
}

/// A stored sample as a report's series point (local and central reports alike).
pub(crate) fn point(s: &Sample) -> SeriesPoint {
    SeriesPoint {
        ts_ms: s.ts_ms,
        state: s.state,
        cpu_user_usec: s.cpu_user_usec,
        cpu_system_usec: s.cpu_system_usec,
        mem_current: s.mem_current,
        mem_peak: s.mem_peak,
        mem_anon: s.mem_anon,
        mem_file: s.mem_file,
        swap: s.swap,
        io_rbytes: s.io_rbytes,
        io_wbytes: s.io_wbytes,
        procs: s.procs,
        threads: s.threads,
        psi_cpu_some: s.psi_cpu_some,
        psi_cpu_full: s.psi_cpu_full,
        psi_mem_some: s.psi_mem_some,
        psi_mem_full: s.psi_mem_full,
        psi_io_some: s.psi_io_some,
        psi_io_full: s.psi_io_full,
        gpu_util: s.gpu_util,
        gpu_mem: s.gpu_mem,
    }
}

fn process_row(p: &ProcessSample) -> ProcessRow {
    ProcessRow {
        ts_ms: p.ts_ms,
        pid: p.pid,
        comm: p.comm.clone(),
        cpu_usec: p.cpu_usec,
        rss: p.rss,
        threads: p.threads,
    }
}

/// Threads of a job whose series a plot gets (the busiest).
pub const PLOTTED_THREADS: usize = 8;

/// A thread's report row from its totals (pure): shares of its sampled time, busy when
/// runnable at least half of it (the binder's [`crate::bind::BUSY_PERCENT`]).
pub fn thread_row(t: &pjw_store::ThreadTotals) -> ThreadRow {
    let pct = |v: u64| (t.span_usec > 0).then(|| 100.0 * v as f64 / t.span_usec as f64);
    let running = pct(t.run_usec);
    let waiting = pct(t.wait_usec);
    let sleeping = running
        .zip(waiting)
        .map(|(r, w)| (100.0 - r - w).clamp(0.0, 100.0));
    let busy = running
        .zip(waiting)
        .is_some_and(|(r, w)| r + w >= f64::from(crate::bind::BUSY_PERCENT));
    let mut cpus = pjw_core::CpuSet::new();
    for c in &t.cpus {
        cpus.insert(*c);
    }
    ThreadRow {
        tid: t.tid,
        pid: t.pid,
        comm: t.comm.clone(),
        cpu_usec: t.cpu_usec,
        cpus: cpus.to_string(),
        migrations: t.migrations,
        running_pct: running.map(|v| v.min(100.0)),
        waiting_pct: waiting.map(|v| v.min(100.0)),
        sleeping_pct: sleeping,
        busy,
        pin: t.pin.clone(),
        samples: t.samples,
        first_ms: t.first_ms,
        last_ms: t.last_ms,
        points: Vec::new(),
    }
}

/// Each thread's rows of job `seq`, with the busiest threads' series when `series` is asked.
fn thread_rows(store: &Store, seq: i64, series: bool) -> Result<Vec<ThreadRow>, StoreError> {
    let mut rows: Vec<ThreadRow> = store.thread_totals(seq)?.iter().map(thread_row).collect();
    if series {
        let mut busiest: Vec<&ThreadRow> = rows.iter().collect();
        busiest.sort_by(|a, b| {
            b.running_pct
                .unwrap_or(0.0)
                .total_cmp(&a.running_pct.unwrap_or(0.0))
                .then(b.cpu_usec.cmp(&a.cpu_usec))
        });
        let tids: Vec<u32> = busiest
            .iter()
            .take(PLOTTED_THREADS)
            .map(|r| r.tid)
            .collect();
        for s in store.thread_samples(seq, &tids)? {
            if s.span_usec == 0 {
                continue;
            }
            if let Some(r) = rows.iter_mut().find(|r| r.tid == s.tid) {
                let pct = (100.0 * s.run_usec as f64 / s.span_usec as f64).min(100.0);
                r.points.push((s.ts_ms, pct));
            }
        }
    }
    Ok(rows)
}

/// A recorded step as the report shows it.
pub(crate) fn step_report(s: pjw_store::StepRecord) -> pjw_proto::StepReport {
    pjw_proto::StepReport {
        step: s.step,
        name: s.name,
        uid: s.uid,
        cpus: s.cpus,
        pid: s.pid,
        started_ms: s.started_ms,
        ended_ms: s.ended_ms,
        exit_status: s.exit_status,
    }
}

/// A job's report from its record and summary (ended), or the live totals (pure).
pub fn job_report(
    rec: &JobRecord,
    summary: Option<&JobSummary>,
    live: Option<&LiveJob>,
    node: &str,
) -> JobReport {
    let mut r = JobReport {
        id: rec.job_id.clone(),
        name: rec.name.clone(),
        user: rec.user.clone(),
        uid: rec.uid,
        node: node.to_string(),
        state: match rec.state {
            StoredState::Queued => ReportState::Queued,
            StoredState::Starting | StoredState::Running => ReportState::Running,
            StoredState::Ended => ReportState::Ended,
        },
        end_reason: rec.end_reason.clone(),
        ncpus: rec.ncpus,
        cpus: rec.cpus.to_string(),
        mem_limit: rec.mem_limit,
        submitted_ms: rec.submitted_ms,
        started_ms: rec.started_ms,
        ended_ms: rec.ended_ms,
        ..JobReport::default()
    };
    let s = match (summary, live) {
        (Some(s), _) => {
            r.end = Some(s.end);
            r.exit_status = s.exit_status;
            r.node = s.node.clone();
            Some(s)
        }
        (None, Some(l)) => {
            r.state = l.state;
            r.cpus = l.cpus.clone();
            Some(&l.summary)
        }
        (None, None) => None,
    };
    match s {
        Some(s) => {
            r.queued_ms = s.queued_ms;
            r.running_ms = s.running_ms;
            r.backfill_ms = s.backfill_ms;
            r.frozen_ms = s.frozen_ms;
            r.freezes = s.freezes;
            r.cpu_user_usec = s.cpu_user_usec;
            r.cpu_system_usec = s.cpu_system_usec;
            r.mem_peak = s.mem_peak;
            r.swap_peak = s.swap_peak;
            r.io_rbytes = s.io_rbytes;
            r.io_wbytes = s.io_wbytes;
            r.procs_total = s.procs_total;
            r.threads_total = s.threads_total;
            r.counts_exact = s.counts_exact;
            r.procs_max = s.procs_max;
            r.threads_max = s.threads_max;
            r.samples = s.samples;
            r.gpu_util_mean = s.gpu_util_mean;
            r.gpu_util_max = s.gpu_util_max;
            r.gpu_mem_peak = s.gpu_mem_peak;
        }
        None => {
            // Ended before pjw recorded profiles: what the record tells.
            let start = rec
                .started_ms
                .unwrap_or(rec.ended_ms.unwrap_or(rec.submitted_ms));
            r.queued_ms = (start - rec.submitted_ms).max(0);
            r.running_ms = match (rec.started_ms, rec.ended_ms) {
                (Some(a), Some(b)) => (b - a).max(0),
                _ => 0,
            };
        }
    }
    r
}

/// Jobs read from the store per page.
const JOBS_PAGE: usize = 16;

/// What the engine hands the connection layer for a `report` request: an answer to stream,
/// or the one frame that refuses it.
#[derive(Debug)]
pub enum ReportAnswer {
    /// Refused before any reading (access, an invalid query): one error frame.
    Refused(Box<Response>),
    /// From this node's store, read page by page ([`LocalReport::next_frames`]).
    Local(Box<LocalReport>),
    /// From the cluster store ([`crate::central_report`]).
    Central(Box<crate::central_report::CentralReport>),
}

/// A store error as a report's internal error.
fn internal(e: pjw_store::StoreError) -> (ErrorCode, String) {
    (ErrorCode::Internal, e.to_string())
}

/// Where a local report stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cursor {
    Start,
    Jobs,
    Series { seq: i64, after: Option<i64> },
    Processes { seq: i64, after: Option<i64> },
    Threads { seq: i64 },
    Done,
}

/// A local report read in pages: each call of [`LocalReport::next_frames`] opens the store,
/// reads one page (a few jobs, or one chunk of a series or of process rows) and closes it, so a
/// report whose client does not read holds one page at most, and no read transaction (which
/// would keep the WAL from being checkpointed) while it waits. The client's socket is the
/// backpressure: the next page is read only once the last was written.
#[derive(Debug)]
pub struct LocalReport {
    db: PathBuf,
    node: String,
    io_counted: bool,
    access: Access,
    query: ReportQuery,
    live: HashMap<i64, LiveJob>,
    at: Cursor,
    /// Jobs of the last page not sent yet.
    pending: VecDeque<JobProfile>,
    /// The last job's seq read: the next page starts below it.
    before_seq: Option<i64>,
    /// No job left to read.
    exhausted: bool,
    sent: u32,
}

impl LocalReport {
    /// A report of `q` for a caller with `access`, from the store at `db` and the engine's live
    /// jobs `live`.
    pub fn new(
        db: PathBuf,
        node: String,
        io_counted: bool,
        access: Access,
        query: ReportQuery,
        live: Vec<LiveJob>,
    ) -> LocalReport {
        LocalReport {
            db,
            node,
            io_counted,
            access,
            query,
            live: live.into_iter().map(|l| (l.seq, l)).collect(),
            at: Cursor::Start,
            pending: VecDeque::new(),
            before_seq: None,
            exhausted: false,
            sent: 0,
        }
    }

    /// Whether the report is over (its last frame given).
    pub fn done(&self) -> bool {
        self.at == Cursor::Done
    }

    /// The next frames: at least one until the report is over, then none. Reads the store:
    /// call it on a blocking thread.
    pub fn next_frames(&mut self) -> Vec<Response> {
        if self.done() {
            return Vec::new();
        }
        let store = match Store::open_readonly(&self.db) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "report: cannot open the store");
                return self.fail(
                    ErrorCode::Internal,
                    format!("cannot read the profile store: {e}"),
                );
            }
        };
        loop {
            let frames = match self.step(&store) {
                Ok(f) => f,
                Err((code, msg)) => return self.fail(code, msg),
            };
            if !frames.is_empty() || self.done() {
                return frames;
            }
        }
    }

    fn fail(&mut self, code: ErrorCode, message: String) -> Vec<Response> {
        self.at = Cursor::Done;
        vec![Response::Error { code, message }]
    }

    fn filter(&self) -> JobFilter {
        let q = &self.query;
        let limit = q.limit.unwrap_or(DEFAULT_LIMIT) as usize;
        JobFilter {
            job_id: q.job.clone(),
            uid: match self.access {
                Access::All => None,
                Access::Uid(u) => Some(u),
            },
            user: q.user.clone(),
            name: q.name.clone(),
            since_ms: q.since_ms,
            state: q.state,
            limit: limit.saturating_sub(self.sent as usize).min(JOBS_PAGE),
            before_seq: self.before_seq,
        }
    }

    /// One step: frames, or none when the step only moved the cursor.
    fn step(&mut self, store: &Store) -> Result<Vec<Response>, (ErrorCode, String)> {
        match self.at {
            Cursor::Done => Ok(Vec::new()),
            Cursor::Start => self.step_start(store),
            Cursor::Jobs => self.step_job(store),
            Cursor::Series { seq, after } => self.step_series(store, seq, after),
            Cursor::Processes { seq, after } => self.step_processes(store, seq, after),
            // A job's thread rows: the top threads the sampler kept per job (a bounded page).
            Cursor::Threads { seq } => self.step_threads(store, seq),
        }
    }

    /// Before the first job: a caller who asks for another user's job is refused.
    fn step_start(&mut self, store: &Store) -> Result<Vec<Response>, (ErrorCode, String)> {
        if let (Access::Uid(uid), Some(id)) = (self.access, &self.query.job) {
            let anyone = JobFilter {
                job_id: Some(id.clone()),
                ..JobFilter::default()
            };
            let all = store.find_jobs(&anyone).map_err(internal)?;
            if !all.is_empty() && all.iter().all(|p| p.job.uid != uid) {
                return Err((
                    ErrorCode::Denied,
                    format!("job {id} belongs to another user; only its owner, root and the admin group may read its report"),
                ));
            }
        }
        self.at = Cursor::Jobs;
        Ok(Vec::new())
    }

    /// The next job's frame (a page of jobs is read when none is pending), or the end.
    fn step_job(&mut self, store: &Store) -> Result<Vec<Response>, (ErrorCode, String)> {
        let limit = self.query.limit.unwrap_or(DEFAULT_LIMIT) as usize;
        if self.pending.is_empty() && !self.exhausted && (self.sent as usize) < limit {
            let page = store.find_jobs(&self.filter()).map_err(internal)?;
            self.exhausted = page.len() < JOBS_PAGE;
            self.before_seq = page.last().map(|p| p.job.seq).or(self.before_seq);
            self.pending.extend(page);
        }
        let Some(p) = self
            .pending
            .pop_front()
            .filter(|_| (self.sent as usize) < limit)
        else {
            self.at = Cursor::Done;
            if let (Some(id), 0) = (&self.query.job, self.sent) {
                return Ok(vec![Response::Error {
                    code: ErrorCode::NotFound,
                    message: format!("no job {id} on this node"),
                }]);
            }
            return Ok(vec![Response::ReportEnd { count: self.sent }]);
        };
        let mut rep = job_report(
            &p.job,
            p.summary.as_ref(),
            self.live.get(&p.job.seq),
            &self.node,
        );
        rep.io_counted = Some(self.io_counted);
        if let Some((n, gpus)) = store.gpus(p.job.seq).map_err(internal)? {
            rep.ngpus = n;
            rep.gpus = gpus.to_string();
        }
        // A store from before I/O settings has no job_io table: nothing to show then.
        rep.io = store.io(p.job.seq).ok().flatten().map(|io| io.summary());
        rep.steps = match self.live.get(&p.job.seq) {
            Some(l) => l.steps.clone(),
            // A store from before steps has no job_steps table: none then.
            None => store
                .steps(p.job.seq)
                .unwrap_or_default()
                .into_iter()
                .map(step_report)
                .collect(),
        };
        self.sent += 1;
        self.at = self.after_job(p.job.seq, true);
        Ok(vec![Response::ReportJob(Box::new(rep))])
    }

    /// A chunk of a job's series.
    fn step_series(
        &mut self,
        store: &Store,
        seq: i64,
        after: Option<i64>,
    ) -> Result<Vec<Response>, (ErrorCode, String)> {
        let page = store
            .samples_page(seq, after, SERIES_CHUNK)
            .map_err(internal)?;
        self.at = match page.last() {
            Some(last) if page.len() == SERIES_CHUNK => Cursor::Series {
                seq,
                after: Some(last.ts_ms),
            },
            _ => self.after_job(seq, false),
        };
        if page.is_empty() {
            return Ok(Vec::new());
        }
        let points = page.iter().map(point).collect();
        Ok(vec![Response::ReportSeries { points }])
    }

    /// A page of a job's process rows.
    fn step_processes(
        &mut self,
        store: &Store,
        seq: i64,
        after: Option<i64>,
    ) -> Result<Vec<Response>, (ErrorCode, String)> {
        let page = store
            .process_samples_page(seq, after, SERIES_CHUNK)
            .map_err(internal)?;
        self.at = match page.last() {
            Some(last) => Cursor::Processes {
                seq,
                after: Some(last.ts_ms),
            },
            None => self.after_processes(seq),
        };
        if page.is_empty() {
            return Ok(Vec::new());
        }
        let rows = page.iter().map(process_row).collect();
        Ok(vec![Response::ReportProcesses { rows }])
    }

    /// A job's thread rows.
    fn step_threads(
        &mut self,
        store: &Store,
        seq: i64,
    ) -> Result<Vec<Response>, (ErrorCode, String)> {
        self.at = Cursor::Jobs;
        let rows = thread_rows(store, seq, self.query.series).map_err(internal)?;
        Ok(rows
            .chunks(SERIES_CHUNK)
            .map(|c| Response::ReportThreads { rows: c.to_vec() })
            .collect())
    }

    /// What follows a job's frame (`series_next`: its series comes first if asked) or its
    /// series: its process rows if asked, else the next job.
    fn after_job(&self, seq: i64, series_next: bool) -> Cursor {
        if series_next && self.query.series {
            Cursor::Series { seq, after: None }
        } else if self.query.processes {
            Cursor::Processes { seq, after: None }
        } else {
            self.after_processes(seq)
        }
    }

    /// What follows a job's process rows (or where they are not asked, its series): its
    /// thread rows if asked, else the next job.
    fn after_processes(&self, seq: i64) -> Cursor {
        if self.query.threads {
            Cursor::Threads { seq }
        } else {
            Cursor::Jobs
        }
    }
}

#[cfg(test)]
mod tests;
