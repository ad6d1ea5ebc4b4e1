//! `pjw report --central`: the same report, answered from the cluster store (PostgreSQL) across
//! all nodes, with the same access rules (the engine decides [`Access`] before this runs).
//!
//! The query runs on its own thread (the `postgres` client is blocking and brings its own
//! runtime), never on the engine's. The answer is the same frame stream as a local report:
//! `ReportJob` (with `node` set to the node the job ran on), `ReportSeries`*, …, `ReportEnd`.

use pjw_central::{Central, CentralFilter, CentralJob, Endpoint, Order};
use pjw_proto::{
    ErrorCode, JobReport, ReportQuery, ReportState, Response, StateFilter, TopBy, SERIES_CHUNK,
};
use tokio::sync::mpsc;
use tracing::warn;

use crate::config::CentralConfig;
use crate::report::{point, Access, ReportRefusal, DEFAULT_LIMIT};

/// A central job as a report (pure).
pub fn job_report(j: &CentralJob) -> JobReport {
    let s = &j.summary;
    JobReport {
        id: j.job_id.clone(),
        name: j.name.clone(),
        user: j.user.clone(),
        uid: j.uid,
        node: j.node.clone(),
        state: ReportState::Ended,
        end: Some(s.end),
        end_reason: j.end_reason.clone(),
        exit_status: s.exit_status,
        ncpus: j.ncpus,
        cpus: j.cpus.clone(),
        mem_limit: j.mem_limit,
        submitted_ms: j.submitted_ms,
        started_ms: j.started_ms,
        ended_ms: j.ended_ms,
        queued_ms: s.queued_ms,
        running_ms: s.running_ms,
        backfill_ms: s.backfill_ms,
        frozen_ms: s.frozen_ms,
        freezes: s.freezes,
        cpu_user_usec: s.cpu_user_usec,
        cpu_system_usec: s.cpu_system_usec,
        mem_peak: s.mem_peak,
        swap_peak: s.swap_peak,
        io_rbytes: s.io_rbytes,
        io_wbytes: s.io_wbytes,
        procs_total: s.procs_total,
        threads_total: s.threads_total,
        procs_max: s.procs_max,
        threads_max: s.threads_max,
        samples: s.samples,
        gpu_util_mean: s.gpu_util_mean,
        gpu_util_max: s.gpu_util_max,
        gpu_mem_peak: s.gpu_mem_peak,
        ..JobReport::default()
    }
}

/// Most jobs one central report may ask for: the cluster store's client reads its answer
/// whole, so a report's size is bounded here (a local report is read in pages instead).
pub const MAX_CENTRAL_JOBS: u32 = 10_000;

/// The filter for `q` as `access` allows it; an error for what the central store cannot
/// answer (it holds finished jobs only, at most [`MAX_CENTRAL_JOBS`] per report).
pub fn filter(q: &ReportQuery, access: Access) -> Result<CentralFilter, ReportRefusal> {
    if q.limit.is_some_and(|l| l > MAX_CENTRAL_JOBS) {
        return Err(ReportRefusal::CentralLimit {
            max: MAX_CENTRAL_JOBS,
        });
    }
    let end_class = match q.state {
        Some(StateFilter::Queued | StateFilter::Running) => {
            return Err(ReportRefusal::LiveFromCentral)
        }
        Some(StateFilter::Ended(class)) => Some(class),
        None => None,
    };
    let (user, uid) = match q.user.as_deref().map(|u| (u, u.parse::<u32>())) {
        Some((_, Ok(n))) => (None, Some(n)),
        Some((u, Err(_))) => (Some(u.to_string()), None),
        None => (None, None),
    };
    let uid = match access {
        Access::All => uid,
        Access::Uid(own) => Some(own),
    };
    let order = match q.top {
        None => Order::Newest,
        Some(TopBy::Cpu) => Order::Cpu,
        Some(TopBy::Mem) => Order::Mem,
        Some(TopBy::Wait) => Order::Wait,
    };
    if let (Some(a), Some(b)) = (q.since_ms, q.until_ms) {
        if b <= a {
            return Err(ReportRefusal::UntilBeforeSince);
        }
    }
    Ok(CentralFilter {
        job_id: q.job.clone(),
        uid,
        user,
        name: q.name.clone(),
        node: q.node.clone(),
        since_ms: q.since_ms,
        until_ms: q.until_ms,
        end_class,
        order,
        limit: q.limit.unwrap_or(DEFAULT_LIMIT) as usize,
    })
}

/// A central report to stream: the connection layer starts it ([`CentralReport::start`]) once
/// a slot for central reports is free (each holds a PostgreSQL connection and a thread).
#[derive(Debug)]
pub struct CentralReport {
    pub cfg: Option<CentralConfig>,
    pub access: Access,
    pub query: ReportQuery,
}

impl CentralReport {
    /// Run the query on a thread of its own; its frames come through the returned channel,
    /// which holds one frame at a time: the thread waits for the client to take each.
    pub fn start(self) -> mpsc::Receiver<Response> {
        let (tx, rx) = mpsc::channel(1);
        spawn(self.cfg, self.access, self.query, tx);
        rx
    }
}

/// Answer a central report on a thread of its own.
fn spawn(
    cfg: Option<CentralConfig>,
    access: Access,
    q: ReportQuery,
    reply: mpsc::Sender<Response>,
) {
    let fail = |reply: &mpsc::Sender<Response>, code, message: String| {
        let _ = reply.blocking_send(Response::Error { code, message });
    };
    // Before the thread: the channel is empty, the one frame fits without waiting.
    let refuse = |reply: &mpsc::Sender<Response>, code, message: String| {
        let _ = reply.try_send(Response::Error { code, message });
    };
    let Some(cfg) = cfg else {
        return refuse(
            &reply,
            ErrorCode::Invalid,
            "this node has no central store ([central] url in its config)".into(),
        );
    };
    let f = match filter(&q, access) {
        Ok(f) => f,
        Err(r) => return refuse(&reply, r.code(), r.to_string()),
    };
    let spawned = std::thread::Builder::new()
        .name("pjw-central-report".into())
        .spawn(move || {
            let opened = Endpoint::new(&cfg.url, cfg.password.as_deref()).and_then(|mut ep| {
                ep.set_application_name("pjw/report");
                Central::open(&ep, &cfg.retention)
            });
            let mut c = match opened {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "central report: cannot connect");
                    return fail(&reply, ErrorCode::Internal, e.to_string());
                }
            };
            if let (Access::Uid(own), Some(id)) = (access, &q.job) {
                let anyone = CentralFilter {
                    job_id: Some(id.clone()),
                    ..CentralFilter::default()
                };
                match c.jobs(&anyone) {
                    Ok(all) if !all.is_empty() && all.iter().all(|j| j.uid != own) => {
                        return fail(
                            &reply,
                            ErrorCode::Denied,
                            format!("job {id} belongs to another user; only its owner, root and the admin group may read its report"),
                        );
                    }
                    Ok(_) => {}
                    Err(e) => return fail(&reply, ErrorCode::Internal, e.to_string()),
                }
            }
            let jobs = match c.jobs(&f) {
                Ok(j) => j,
                Err(e) => return fail(&reply, ErrorCode::Internal, e.to_string()),
            };
            if let (Some(id), true) = (&q.job, jobs.is_empty()) {
                return fail(
                    &reply,
                    ErrorCode::NotFound,
                    format!("no job {id} in the central store"),
                );
            }
            for j in &jobs {
                if reply
                    .blocking_send(Response::ReportJob(Box::new(job_report(j))))
                    .is_err()
                {
                    return;
                }
                if q.series {
                    match c.samples(&j.node, j.seq) {
                        Ok(samples) => {
                            for chunk in samples.chunks(SERIES_CHUNK) {
                                let points = chunk.iter().map(point).collect();
                                if reply.blocking_send(Response::ReportSeries { points }).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => return fail(&reply, ErrorCode::Internal, e.to_string()),
                    }
                }
            }
            let _ = reply.blocking_send(Response::ReportEnd {
                count: jobs.len() as u32,
            });
        });
    if let Err(e) = spawned {
        warn!(error = %e, "central report: cannot start a thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_narrows_the_filter() {
        let q = ReportQuery {
            user: Some("alice".into()),
            state: Some(StateFilter::Ended(pjw_proto::EndClass::Oom)),
            ..ReportQuery::default()
        };
        let all = filter(&q, Access::All).unwrap();
        assert_eq!(
            (all.uid, all.user.as_deref(), all.end_class, all.limit),
            (None, Some("alice"), Some(pjw_proto::EndClass::Oom), 100)
        );
        let own = filter(&ReportQuery::default(), Access::Uid(1001)).unwrap();
        assert_eq!(own.uid, Some(1001));
        let live = ReportQuery {
            state: Some(StateFilter::Running),
            ..ReportQuery::default()
        };
        assert!(filter(&live, Access::All)
            .unwrap_err()
            .to_string()
            .contains("finished jobs only"));
    }
}
