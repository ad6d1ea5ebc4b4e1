//! `pjw report`: the query and the answer.
//!
//! The client sends [`Request::Report`](crate::Request::Report) with a [`ReportQuery`]. The
//! daemon answers with a stream of frames, so a long series never exceeds
//! [`MAX_FRAME`](crate::MAX_FRAME):
//!
//! ```text
//! ReportJob(job 1)  ReportSeries(points…)*  ReportProcesses(rows…)*  ReportThreads(rows…)*
//! ReportJob(job 2)  …
//! ReportEnd { count }
//! ```
//! or a single [`Response::Error`](crate::Response::Error) (`denied`, `not_found`, `invalid`).
//! Series and process frames belong to the `ReportJob` before them. [`collect_report`]
//! assembles the stream.
//!
//! Access: a caller sees only their own jobs; root and members of `profile.admin_group` see
//! every job. Asking for another user's job (`job`) or jobs (`user`) is refused with `denied`.

use pjw_core::job_state::{EndClass, SampleState, StateFilter};
use serde::{Deserialize, Serialize};

use crate::JobState;

/// What to report on. Every field set narrows the selection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// One job id (all its runs on this node).
    #[serde(default)]
    pub job: Option<String>,
    /// Jobs of this user (name).
    #[serde(default)]
    pub user: Option<String>,
    /// Jobs with this name.
    #[serde(default)]
    pub name: Option<String>,
    /// Jobs submitted or ended at or after this time (ms since the epoch), and live ones.
    #[serde(default)]
    pub since_ms: Option<i64>,
    /// `queued`, `running`, or how it ended: `completed`, `killed`, `oom`, `expired`, `failed`
    /// (one word on the wire; an unknown one makes the request invalid).
    #[serde(default)]
    pub state: Option<StateFilter>,
    /// Include the time series.
    #[serde(default)]
    pub series: bool,
    /// Include the per-process rows (`profile.processes`).
    #[serde(default)]
    pub processes: bool,
    /// Include each thread's totals (`profile.threads`); with `series` too, the series of the
    /// busiest threads. Sent only when set, so a daemon from before it (which refuses unknown
    /// fields) still answers other reports.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub threads: bool,
    /// At most this many jobs, newest first (default 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Ask the cluster store (PostgreSQL, `[central]`) for finished jobs of every node,
    /// instead of this node's store.
    #[serde(default)]
    pub central: bool,
    /// Jobs that ran on this node (with `central`).
    #[serde(default)]
    pub node: Option<String>,
    /// Jobs ended before this time (ms since the epoch; with `central`).
    #[serde(default)]
    pub until_ms: Option<i64>,
    /// The top jobs by `cpu` (CPU time), `mem` (memory peak) or `wait` (time queued) instead
    /// of the newest (with `central`).
    #[serde(default)]
    pub top: Option<TopBy>,
}

/// What `--top` ranks finished jobs by: one word on the wire (`cpu`, `mem` — `memory` read
/// too —, `wait`); an unknown one makes the request invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopBy {
    /// Most CPU time (user + system) first.
    Cpu,
    /// Highest memory peak first.
    #[serde(alias = "memory")]
    Mem,
    /// Longest wait in the queue first.
    Wait,
}

/// Where a reported job is: live, as `pjw status` shows it ([`JobState`]), or ended. One
/// word on the wire: `queued`, `running`, `backfill`, `frozen`, `ending` or `ended`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    /// Waits for CPUs.
    #[default]
    Queued,
    /// Holds its CPUs and runs (or is starting).
    Running,
    /// Runs in the idle class on CPUs other jobs hold.
    Backfill,
    /// Frozen (preempted, suspended, or by the memory governor).
    Frozen,
    /// Its main process exited; leftovers are being killed.
    Ending,
    /// Over: [`JobReport::end`] says how.
    Ended,
}

impl ReportState {
    /// The word.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportState::Queued => "queued",
            ReportState::Running => "running",
            ReportState::Backfill => "backfill",
            ReportState::Frozen => "frozen",
            ReportState::Ending => "ending",
            ReportState::Ended => "ended",
        }
    }
}

impl std::fmt::Display for ReportState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<JobState> for ReportState {
    fn from(s: JobState) -> ReportState {
        match s {
            JobState::Queued => ReportState::Queued,
            JobState::Running => ReportState::Running,
            JobState::Backfill => ReportState::Backfill,
            JobState::Frozen => ReportState::Frozen,
            JobState::Ending => ReportState::Ending,
        }
    }
}

/// One sample of a job's time series. Counters (CPU, I/O) are cumulative since the job
/// started; `None` where the node's kernel does not offer the value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub ts_ms: i64,
    /// `running`, `backfill` or `frozen`.
    #[serde(default)]
    pub state: Option<SampleState>,
    pub cpu_user_usec: Option<u64>,
    pub cpu_system_usec: Option<u64>,
    pub mem_current: Option<u64>,
    pub mem_peak: Option<u64>,
    pub mem_anon: Option<u64>,
    pub mem_file: Option<u64>,
    pub swap: Option<u64>,
    pub io_rbytes: Option<u64>,
    pub io_wbytes: Option<u64>,
    pub procs: Option<u32>,
    pub threads: Option<u32>,
    pub psi_cpu_some: Option<f64>,
    pub psi_cpu_full: Option<f64>,
    pub psi_mem_some: Option<f64>,
    pub psi_mem_full: Option<f64>,
    pub psi_io_some: Option<f64>,
    pub psi_io_full: Option<f64>,
    /// The job's GPUs (NVML): mean utilisation (percent) and used memory summed (bytes); absent
    /// without GPUs or without NVML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem: Option<u64>,
}

/// One process of a job at one sample (`profile.processes = N`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRow {
    pub ts_ms: i64,
    pub pid: u32,
    pub comm: String,
    pub cpu_usec: u64,
    pub rss: u64,
    pub threads: u32,
}

/// One thread of a job over the samples it was among the job's top N (`profile.threads`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadRow {
    pub tid: u32,
    pub pid: u32,
    /// Its name as the thread set it (escape it before showing it).
    pub comm: String,
    /// Time on a CPU since it started, µs.
    pub cpu_usec: u64,
    /// The CPUs it was seen running on (last CPU at each sample), kernel list format.
    pub cpus: String,
    /// CPU migrations since it started; None where the kernel does not count them.
    pub migrations: Option<u64>,
    /// Shares of its sampled time (percent): on a CPU, runnable waiting for one, asleep. None
    /// when it was seen once only.
    pub running_pct: Option<f64>,
    pub waiting_pct: Option<f64>,
    pub sleeping_pct: Option<f64>,
    /// Runnable (on a CPU or waiting) at least half of its sampled time, as the binder counts
    /// busy.
    pub busy: bool,
    /// The CPUs the binder pinned it to at its latest sample; None: not pinned.
    #[serde(default)]
    pub pin: Option<String>,
    pub samples: u32,
    pub first_ms: i64,
    pub last_ms: i64,
    /// With `series`, for the busiest threads: (time, percent of the interval on a CPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<(i64, f64)>,
}

/// What a job did: totals like MCOpt's jobreport. For a live job the totals are as of now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    pub id: String,
    pub name: String,
    pub user: String,
    pub uid: u32,
    /// The node it ran on.
    pub node: String,
    /// `queued`, `running`, `backfill`, `frozen`, `ending` or `ended`.
    pub state: ReportState,
    /// How it ended: `completed`, `killed`, `oom`, `expired`, `failed` (None while live, or
    /// for jobs ended before pjw recorded profiles).
    #[serde(default)]
    pub end: Option<EndClass>,
    /// The daemon's words for how it ended (`exited`, `killed by alice`, …).
    #[serde(default)]
    pub end_reason: Option<String>,
    /// Exit status of the main process (128 + signal when killed by one).
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// CPUs asked for, and the CPUs it held (last).
    pub ncpus: u32,
    pub cpus: String,
    /// GPUs asked for (absent: none), and pjw's ids of those it held (as in `PJW_GPUS`; while
    /// queued, those its workload manager chose).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ngpus: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gpus: String,
    pub mem_limit: Option<u64>,
    pub submitted_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// Waited in the queue; ran (wall); of which as a backfiller; of which frozen.
    pub queued_ms: i64,
    pub running_ms: i64,
    pub backfill_ms: i64,
    pub frozen_ms: i64,
    /// Times frozen.
    pub freezes: u32,
    pub cpu_user_usec: u64,
    pub cpu_system_usec: u64,
    /// Peak memory (the kernel's high-water mark) and the highest swap seen, bytes.
    pub mem_peak: u64,
    pub swap_peak: u64,
    pub io_rbytes: u64,
    pub io_wbytes: u64,
    /// Whether the node counts block I/O (cgroup v2 io controller); `false`: the I/O fields
    /// are 0 because nothing was counted. None from daemons that do not say.
    #[serde(default)]
    pub io_counted: Option<bool>,
    /// Its block I/O weight and limits (`weight=500; 254:0 rbps=100M`); None: the kernel's
    /// defaults (or a daemon that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<String>,
    /// Distinct processes / threads it ever had (exact, from process events); None when the
    /// daemon had no process events.
    pub procs_total: Option<u64>,
    pub threads_total: Option<u64>,
    /// `false`: process events were lost or the daemon restarted while the job ran, so the
    /// totals are a lower bound.
    #[serde(default)]
    pub counts_exact: Option<bool>,
    /// Most at once.
    pub procs_max: u32,
    pub threads_max: u32,
    /// Samples recorded.
    pub samples: u32,
    /// GPU utilisation (percent) over the samples that had a reading (NVML): mean and highest;
    /// the most GPU memory used at once (bytes). Absent for jobs without GPU readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_peak: Option<u64>,
    /// The series (with `series`), oldest first.
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
    /// Per-process rows (with `processes`).
    #[serde(default)]
    pub processes: Vec<ProcessRow>,
    /// Per-thread rows (with `threads`), most CPU time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadRow>,
    /// Its steps (`pjw run`s started from inside it), by number; absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::StepReport>,
}

/// The shortest running time whose CPU efficiency is shown (ms): below it the start's and
/// end's milliseconds, which no job controls, weigh more than 1 % of the figure.
pub const EFFICIENCY_MIN_MS: i64 = 1000;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl JobReport {
    /// CPU time used, in seconds.
    pub fn cpu_secs(&self) -> f64 {
        (self.cpu_user_usec + self.cpu_system_usec) as f64 / 1e6
    }

    /// CPU efficiency: CPU time ÷ (CPUs × wall time), 0-1 (more for a job that had more CPUs
    /// than it asked for, e.g. a backfiller); None before it ran and for a job that ran less
    /// than [`EFFICIENCY_MIN_MS`], where the few milliseconds of its start and end (pjw's
    /// client becoming the command, the end's detection) are a large part of the figure.
    pub fn efficiency(&self) -> Option<f64> {
        if self.running_ms < EFFICIENCY_MIN_MS || self.ncpus == 0 {
            return None;
        }
        let wall = self.running_ms as f64 / 1000.0;
        Some(self.cpu_secs() / (self.ncpus as f64 * wall))
    }

    /// Why [`JobReport::efficiency`] is None, for the text report.
    pub fn efficiency_missing(&self) -> &'static str {
        if self.ncpus == 0 || (self.started_ms.is_none() && self.running_ms == 0) {
            "not run"
        } else {
            "not shown: ran under 1 s"
        }
    }
}

/// Assemble a report stream (frames read by `next`) into jobs. Stops at `ReportEnd`; an
/// `Error` frame becomes `Err((code, message))`.
pub fn collect_report<E>(
    mut next: impl FnMut() -> Result<crate::Response, E>,
) -> Result<Result<Vec<JobReport>, (crate::ErrorCode, String)>, E> {
    let mut jobs: Vec<JobReport> = Vec::new();
    loop {
        match next()? {
            crate::Response::ReportJob(j) => jobs.push(*j),
            crate::Response::ReportSeries { points } => {
                if let Some(j) = jobs.last_mut() {
                    j.series.extend(points);
                }
            }
            crate::Response::ReportProcesses { rows } => {
                if let Some(j) = jobs.last_mut() {
                    j.processes.extend(rows);
                }
            }
            crate::Response::ReportThreads { rows } => {
                if let Some(j) = jobs.last_mut() {
                    j.threads.extend(rows);
                }
            }
            crate::Response::ReportEnd { .. } => return Ok(Ok(jobs)),
            crate::Response::Error { code, message } => return Ok(Err((code, message))),
            other => {
                return Ok(Err((
                    crate::ErrorCode::Internal,
                    format!("unexpected answer to a report request: {other:?}"),
                )))
            }
        }
    }
}

/// Points per `ReportSeries` frame (about 400 bytes of JSON each: well under `MAX_FRAME`).
pub const SERIES_CHUNK: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode_request, decode_response, encode_request, encode_response, ErrorCode, Request,
        Response,
    };

    #[test]
    fn efficiency_is_cpu_over_cpus_times_wall() {
        let mut j = JobReport {
            ncpus: 2,
            running_ms: 10_000,
            cpu_user_usec: 9_000_000,
            cpu_system_usec: 1_000_000,
            ..JobReport::default()
        };
        assert_eq!(j.cpu_secs(), 10.0);
        assert_eq!(j.efficiency(), Some(0.5));
        j.running_ms = 0;
        assert_eq!(j.efficiency(), None);
        // Under a second: the start and end weigh too much; not shown.
        j.running_ms = 999;
        assert_eq!(j.efficiency(), None);
        j.running_ms = 1000;
        assert_eq!(j.efficiency(), Some(5.0));
    }

    #[test]
    fn query_round_trips_and_is_strict() {
        let q = Request::Report(ReportQuery {
            job: Some("7".into()),
            series: true,
            limit: Some(5),
            ..ReportQuery::default()
        });
        assert_eq!(decode_request(&encode_request(&q)).unwrap(), q);
        let bad = br#"{"v":1,"req":{"type":"report","jobb":"7"}}"#;
        assert!(decode_request(bad).is_err());
        let minimal = br#"{"v":1,"req":{"type":"report"}}"#;
        assert_eq!(
            decode_request(minimal).unwrap(),
            Request::Report(ReportQuery::default())
        );
    }

    /// The typed state, end and sample state keep the exact words older clients and daemons
    /// send: a report recorded before they were typed decodes, and encodes back the same.
    #[test]
    fn typed_words_keep_the_wire_format() {
        let q = Request::Report(ReportQuery {
            state: Some(StateFilter::Ended(EndClass::Oom)),
            ..ReportQuery::default()
        });
        let text = String::from_utf8(encode_request(&q)).unwrap();
        assert!(text.contains(r#""state":"oom""#), "{text}");
        for f in StateFilter::ALL {
            let old = format!(r#"{{"v":1,"req":{{"type":"report","state":"{f}"}}}}"#);
            let Request::Report(got) = decode_request(old.as_bytes()).unwrap() else {
                panic!("{old}")
            };
            assert_eq!(got.state, Some(f));
        }
        let recorded = r#"{"id":"7","name":"n","user":"alice","uid":1000,"node":"h","state":"ended","end":"killed","end_reason":"killed by alice","exit_status":137,"ncpus":1,"cpus":"0","mem_limit":null,"submitted_ms":1,"started_ms":2,"ended_ms":3,"queued_ms":1,"running_ms":1,"backfill_ms":0,"frozen_ms":0,"freezes":0,"cpu_user_usec":0,"cpu_system_usec":0,"mem_peak":0,"swap_peak":0,"io_rbytes":0,"io_wbytes":0,"io_counted":null,"procs_total":null,"threads_total":null,"counts_exact":null,"procs_max":0,"threads_max":0,"samples":1,"series":[{"ts_ms":2,"state":"backfill","cpu_user_usec":null,"cpu_system_usec":null,"mem_current":null,"mem_peak":null,"mem_anon":null,"mem_file":null,"swap":null,"io_rbytes":null,"io_wbytes":null,"procs":null,"threads":null,"psi_cpu_some":null,"psi_cpu_full":null,"psi_mem_some":null,"psi_mem_full":null,"psi_io_some":null,"psi_io_full":null}],"processes":[]}"#;
        let j: JobReport = serde_json::from_str(recorded).unwrap();
        assert_eq!(
            (j.state, j.end, j.series[0].state),
            (
                ReportState::Ended,
                Some(EndClass::Killed),
                Some(SampleState::Backfill)
            )
        );
        assert_eq!(serde_json::to_string(&j).unwrap(), recorded);
        let words: Vec<String> = [
            ReportState::Queued,
            ReportState::Running,
            ReportState::Backfill,
            ReportState::Frozen,
            ReportState::Ending,
            ReportState::Ended,
        ]
        .iter()
        .map(|s| {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            json
        })
        .collect();
        assert_eq!(
            words.join(" "),
            r#""queued" "running" "backfill" "frozen" "ending" "ended""#
        );
        for s in [
            JobState::Queued,
            JobState::Running,
            JobState::Backfill,
            JobState::Frozen,
            JobState::Ending,
        ] {
            assert_eq!(ReportState::from(s).as_str(), s.as_str());
        }
    }

    /// An unknown state in a client's request is an invalid request naming the valid words,
    /// not a default; the decoder never panics on it.
    #[test]
    fn an_unknown_state_in_a_request_is_refused_with_the_valid_words() {
        let bad = br#"{"v":1,"req":{"type":"report","state":"done"}}"#;
        let e = decode_request(bad).unwrap_err().to_string();
        assert!(
            e.contains("unknown state \"done\" (one of queued, running, completed, killed, oom, expired, timeout, failed)"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let bad = br#"{"v":1,"req":{"type":"report","state":3}}"#;
        assert!(decode_request(bad).is_err());
        let top = |w: &str| {
            let text = format!(r#"{{"v":1,"req":{{"type":"report","central":true,"top":"{w}"}}}}"#);
            decode_request(text.as_bytes()).map(|r| match r {
                Request::Report(q) => q.top,
                _ => None,
            })
        };
        assert_eq!(top("cpu").unwrap(), Some(TopBy::Cpu));
        assert_eq!(top("memory").unwrap(), Some(TopBy::Mem));
        assert_eq!(top("wait").unwrap(), Some(TopBy::Wait));
        let e = top("io").unwrap_err().to_string();
        assert!(
            e.contains("unknown variant `io`, expected one of `cpu`, `mem`"),
            "{e}"
        );
        let q = Request::Report(ReportQuery {
            top: Some(TopBy::Mem),
            ..ReportQuery::default()
        });
        let text = String::from_utf8(encode_request(&q)).unwrap();
        assert!(text.contains(r#""top":"mem""#), "{text}");
    }

    #[test]
    fn a_stream_assembles_into_jobs() {
        let frames = vec![
            Response::ReportJob(Box::new(JobReport {
                id: "1".into(),
                ..JobReport::default()
            })),
            Response::ReportSeries {
                points: vec![SeriesPoint {
                    ts_ms: 1,
                    ..Default::default()
                }],
            },
            Response::ReportSeries {
                points: vec![SeriesPoint {
                    ts_ms: 2,
                    ..Default::default()
                }],
            },
            Response::ReportJob(Box::new(JobReport {
                id: "2".into(),
                ..JobReport::default()
            })),
            Response::ReportProcesses {
                rows: vec![ProcessRow {
                    pid: 9,
                    ..Default::default()
                }],
            },
            Response::ReportThreads {
                rows: vec![ThreadRow {
                    tid: 11,
                    busy: true,
                    points: vec![(5, 99.5)],
                    ..Default::default()
                }],
            },
            Response::ReportEnd { count: 2 },
        ];
        let mut it = frames
            .into_iter()
            .map(|f| decode_response(&encode_response(&f)).unwrap());
        let jobs = collect_report(|| Ok::<_, ()>(it.next().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[0].series.iter().map(|p| p.ts_ms).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(jobs[1].processes[0].pid, 9);
        assert_eq!(
            (
                jobs[1].threads[0].tid,
                jobs[1].threads[0].busy,
                jobs[1].threads[0].points.clone()
            ),
            (11, true, vec![(5, 99.5)])
        );
        // A query without threads says nothing of them: a daemon that refuses unknown fields
        // (one from before them) reads it.
        let q = crate::encode_request(&Request::Report(ReportQuery::default()));
        assert!(!String::from_utf8_lossy(&q).contains("threads"));
        let mut err = vec![Response::Error {
            code: ErrorCode::Denied,
            message: "no".into(),
        }]
        .into_iter();
        assert_eq!(
            collect_report(|| Ok::<_, ()>(err.next().unwrap())).unwrap(),
            Err((ErrorCode::Denied, "no".into()))
        );
    }
}
