//! What a client asks: the request frame and the requests with their own types (run,
//! register, the memory outcome of a job).

use pjw_core::thread_bind::BindMode;
use serde::{Deserialize, Serialize};

use super::{is_zero, is_zero_u64, LoginRequest, ReportQuery, SlurmTaskRequest};

/// A request with its protocol version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFrame {
    /// Protocol version ([`VERSION`](crate::VERSION)).
    pub v: u32,
    /// The request.
    pub req: Request,
}

/// What a client can ask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Liveness and version check.
    Ping,
    /// Run the calling process as a job (it is moved into the job's cgroups).
    Run(RunRequest),
    /// The node's jobs and CPUs.
    Status,
    /// Kill a job (every process in it) or withdraw it from the queue. Owner or root only.
    Kill { job: String },
    /// Freeze a running job; its CPUs go to others until it is resumed. Owner or root only.
    Suspend { job: String },
    /// Let a suspended job run again (as soon as it has CPUs). Owner or root only.
    Resume { job: String },
    /// Change a job's priority (1-16). Owner (up to the configured maximum) or root.
    Priority { job: String, priority: u8 },
    /// Job profiles: totals, and optionally series and per-process rows (see [`report`](crate::report)).
    Report(ReportQuery),
    /// Register a workload manager's job (root only): it gets CPUs and cgroups now, under the
    /// manager's job id, and its processes are adopted into them. Answered like `run`
    /// ([`Response::Queued`](crate::Response::Queued) while it waits, then [`Response::Started`](crate::Response::Started)).
    Register(RegisterRequest),
    /// End a registered job (root only): kill what is left in it, remove its cgroups. Answered
    /// with [`Response::Done`](crate::Response::Done) once its cgroups are gone.
    End { job: String },
    /// A PAM login (root only): may the user log in, and the session's process into the user's
    /// job ([`login`](crate::login)). Answered with [`Response::Done`](crate::Response::Done) or a refusal.
    Login(LoginRequest),
    /// What memory did to a job that runs or has just ended (owner or root): OOM kills, its
    /// limit and peak, a stall inside its own limit, the memory governor's last step. Answered
    /// at once with [`Response::Outcome`](crate::Response::Outcome) (`pjw run` asks when its command exits).
    Outcome { job: String },
    /// A Slurm task joins its job before it execs (root only: pjw's SPANK plugin in
    /// slurmstepd's child; see [`slurm_task`](crate::slurm_task)). Answered with [`Response::Started`](crate::Response::Started) or an error.
    SlurmTask(SlurmTaskRequest),
}

/// A workload manager's job, registered by its prolog or job starter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The manager's job id; the pjw job id.
    pub job: String,
    /// Which manager (`slurm`, `sge`, `pbs`, `lsf`, `condor`, or another word).
    pub wlm: String,
    /// The job's owner (a user name on this node).
    pub user: String,
    /// CPUs the manager gave the job on this node (≥ 1).
    pub cpus: u32,
    /// Memory limit in bytes.
    #[serde(default)]
    pub mem: Option<u64>,
    /// A name for people.
    #[serde(default)]
    pub name: Option<String>,
    /// `true`: the calling process joins the job and is its main process (the job ends when
    /// its cgroup empties, like `run`). `false`: the job has no process yet and is held until
    /// [`Request::End`].
    #[serde(default)]
    pub attach: bool,
    /// The GPUs the manager chose for the job on this node, by the manager's index (Slurm's
    /// `SLURM_JOB_GPUS`): the daemon maps index `i` to its GPU `i`, refuses an index the node
    /// does not have, and gives the job exactly those. Absent: no GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<u32>>,
}

/// Where a job may run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// On exclusive CPUs when free, else as a backfiller when the node allows it.
    #[default]
    Any,
    /// Only on exclusive CPUs.
    PrimaryOnly,
    /// Only as a backfiller (idle class, on CPUs other jobs hold).
    BackfillOnly,
}

/// A job request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Number of CPUs wanted (≥ 1).
    pub cpus: u32,
    /// Memory limit in bytes.
    #[serde(default)]
    pub mem: Option<u64>,
    /// Job id to use (a workload manager's), else the daemon makes one.
    #[serde(default)]
    pub job_id: Option<String>,
    /// A name for people (defaults to the command's file name).
    #[serde(default)]
    pub name: Option<String>,
    /// The command the client will exec, for the record.
    #[serde(default)]
    pub argv: Vec<String>,
    /// Priority 1-16 (default: the daemon's configured default).
    #[serde(default)]
    pub priority: Option<u8>,
    /// Where the job may run.
    #[serde(default)]
    pub placement: Placement,
    /// Take the whole node.
    #[serde(default)]
    pub exclusive: bool,
    /// Run the job as this user (job starter mode). Only root may name another user than
    /// itself; the client drops its privileges to that user before it execs.
    #[serde(default)]
    pub user: Option<String>,
    /// The workload manager's name for the job, `manager:id` (`slurm:42`, `pbs:1234.pbs01`).
    #[serde(default)]
    pub wlm: Option<String>,
    /// Size of the job's private /tmp in bytes; None: the node's default (`[job] tmp`); 0: none.
    #[serde(default)]
    pub tmp: Option<u64>,
    /// Whole GPUs wanted (0: none; not sent then, so older daemons still take the request).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: u32,
    /// Block I/O weight 1-10000 (`--io-weight`); None: the node's default (`[job] io_weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_weight: Option<u16>,
    /// Block I/O limits (`--io-max`), `MAJ:MIN rbps=… wbps=… riops=… wiops=…` each; they can
    /// only tighten the node's `[job] io_max`. The daemon parses and validates them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub io_max: Vec<String>,
    /// How the job's busy threads are bound (`--bind`); None: the node's `[job] bind` (not
    /// sent then, so older daemons still take the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<BindMode>,
    /// How many tasks (MPI ranks) share the job's CPUs (`--ntasks`): each task's thread
    /// variables count its share, and an MPI launcher is told the ranks. None: not said (not
    /// sent then, so older daemons still take the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    /// How long the job may run, seconds (`--time`): the daemon ends it there, and may run
    /// shorter jobs first (`queue_order`). None: no limit (not sent then, so older daemons
    /// still take the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
}

/// What memory did to one job ([`Request::Outcome`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    pub job: String,
    /// Processes of the job the kernel killed for memory.
    pub oom_kills: u64,
    /// The job's own limit (`--mem`), bytes; None: the node's job partition was its limit.
    pub mem: Option<u64>,
    /// The node's job partition, bytes.
    pub partition: u64,
    /// The most memory it had charged (bytes), where known.
    pub mem_peak: Option<u64>,
    /// Its OOM kills came from the node's job partition: it has a limit of its own (`mem`),
    /// never reached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oom_at_partition: bool,
    /// What the memory governor's freezes did to it, said for people (absent: never frozen):
    /// `frozen 23 s by the memory governor (1 time): it grew …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<String>,
    /// Seconds it stalled on memory inside its own limit (the governor's ticks that saw it).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub own_stall_secs: u64,
    /// Set when the memory governor ended the job (its last step), saying why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
    /// How it ended, once it has (the daemon's end reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}
