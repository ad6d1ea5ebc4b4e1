//! What the daemon answers: the response enum, a job's temporary space, refusal codes.

use pjw_core::CpuSet;
use serde::{Deserialize, Serialize};

use super::{JobOutcome, JobReport, ProcessRow, SeriesPoint, StatusReport, ThreadRow};

/// What the daemon answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// Answer to [`Request::Ping`](crate::Request::Ping).
    Pong { version: u32, daemon_pid: u32 },
    /// The job waits; sent once when it is queued.
    Queued {
        job: String,
        position: u32,
        reason: String,
    },
    /// The caller is now inside the job's cgroups; exec the command. `backfill`: it runs in
    /// the idle class on CPUs other jobs hold, until it is promoted.
    Started {
        job: String,
        cpus: CpuSet,
        mems: CpuSet,
        #[serde(default)]
        backfill: bool,
        /// The job's temporary space. Root client: mount a private /tmp and /var/tmp of this
        /// many bytes in a new mount namespace. Unprivileged client: the daemon has mounted a
        /// per-job tmpfs; set TMPDIR to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tmp: Option<JobTmp>,
        /// Root client: give the job a new IPC namespace and a tmpfs of this many bytes on
        /// /dev/shm in its mount namespace (`[job] private_ipc`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shm: Option<u64>,
        /// Variables the client sets for the command: the job's GPUs (`PJW_GPUS`,
        /// `CUDA_VISIBLE_DEVICES`, ...).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<(String, String)>,
        /// Variables the client sets only where the user's environment lacks them (nor a
        /// variable the runtime reads instead: `pjw_core::thread_env::unset_only`): the thread
        /// and CPU counts and OpenMP places matching the job's CPUs and tasks (`[job]
        /// thread_env`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env_defaults: Vec<(String, String)>,
    },
    /// Answer to [`Request::Status`](crate::Request::Status).
    Status(StatusReport),
    /// The request was carried out.
    Done { message: String },
    /// The request was refused.
    Error { code: ErrorCode, message: String },
    /// A report: one job's totals; its series and process frames follow.
    ReportJob(Box<JobReport>),
    /// A report: a chunk of the series of the job in the last `ReportJob`.
    ReportSeries { points: Vec<SeriesPoint> },
    /// A report: a chunk of the per-process rows of the job in the last `ReportJob`.
    ReportProcesses { rows: Vec<ProcessRow> },
    /// A report: a chunk of the per-thread rows of the job in the last `ReportJob`.
    ReportThreads { rows: Vec<ThreadRow> },
    /// A report is complete: `count` jobs.
    ReportEnd { count: u32 },
    /// Answer to [`Request::Outcome`](crate::Request::Outcome).
    Outcome(JobOutcome),
}

/// A job's temporary space, as told to the client in [`Response::Started`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobTmp {
    /// The (root) client makes a mount namespace with a tmpfs of `size` bytes on /tmp and
    /// /var/tmp, owned by the job's user.
    Private { size: u64 },
    /// The daemon mounted a tmpfs of `size` bytes owned by the user at `dir`.
    Dir { dir: String, size: u64 },
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame could not be decoded, or the version is not spoken.
    BadRequest,
    /// The request is well-formed but cannot be met (0 CPUs, more than the node has, …).
    Invalid,
    /// The job id is in use by a live job.
    Conflict,
    /// The caller may not do this.
    Denied,
    /// No such job.
    NotFound,
    /// The daemon failed (cgroup or store error).
    Internal,
    /// The daemon is stopping; try again.
    ShuttingDown,
}
