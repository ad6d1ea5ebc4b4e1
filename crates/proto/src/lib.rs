//! pjw-proto: the messages between `pjw daemon` and its clients, and how they travel.
//!
//! Transport: a Unix stream socket. Each message is a frame: a 4-byte big-endian length, then
//! that many bytes of JSON. Frames are at most [`MAX_FRAME`] bytes; a longer announced length is
//! refused before anything is read. Every request is wrapped in [`RequestFrame`] with the
//! protocol [`VERSION`]; the daemon answers a frame it cannot decode with
//! [`Response::Error`] and closes the connection.
//!
//! A `run` conversation: the client sends [`Request::Run`]; the daemon answers
//! [`Response::Queued`] zero or more times (once when the job has to wait), then
//! [`Response::Started`] after it has moved the client's own process (identified by
//! `SO_PEERCRED`, never by a pid the client claims) into the job's cgroups. The client then execs
//! the command; its exit closes the connection.
//!
//! ```
//! use pjw_proto::{Request, RequestFrame, VERSION};
//! let f = RequestFrame { v: VERSION, req: Request::Status };
//! let text = serde_json::to_string(&f).unwrap();
//! assert_eq!(text, r#"{"v":1,"req":{"type":"status"}}"#);
//! ```

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use pjw_core::thread_bind::BindMode;
use pjw_core::{CpuSet, GpuSet};
use serde::{Deserialize, Serialize};

pub mod login;
pub mod report;
pub mod slurm_task;
pub mod stats;
pub mod step;
pub use login::{LoginPhase, LoginRequest};
pub use report::{
    collect_report, JobReport, ProcessRow, ReportQuery, SeriesPoint, ThreadRow, SERIES_CHUNK,
};
pub use slurm_task::SlurmTaskRequest;
pub use stats::{LeaseInfo, StartStats, StartWindow};
pub use step::{StepInfo, StepReport};

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;
/// Largest frame accepted in either direction (1 MiB).
pub const MAX_FRAME: usize = 1 << 20;
/// Longest argv accepted in a run request (count of arguments).
pub const MAX_ARGS: usize = 4096;
/// Where clients look for the daemon unless `PJW_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/pjw/pjw.sock";

/// A request with its protocol version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFrame {
    /// Protocol version ([`VERSION`]).
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
    /// Job profiles: totals, and optionally series and per-process rows (see [`report`]).
    Report(ReportQuery),
    /// Register a workload manager's job (root only): it gets CPUs and cgroups now, under the
    /// manager's job id, and its processes are adopted into them. Answered like `run`
    /// ([`Response::Queued`] while it waits, then [`Response::Started`]).
    Register(RegisterRequest),
    /// End a registered job (root only): kill what is left in it, remove its cgroups. Answered
    /// with [`Response::Done`] once its cgroups are gone.
    End { job: String },
    /// A PAM login (root only): may the user log in, and the session's process into the user's
    /// job ([`login`]). Answered with [`Response::Done`] or a refusal.
    Login(LoginRequest),
    /// What memory did to a job that runs or has just ended (owner or root): OOM kills, its
    /// limit and peak, a stall inside its own limit, the memory governor's last step. Answered
    /// at once with [`Response::Outcome`] (`pjw run` asks when its command exits).
    Outcome { job: String },
    /// A Slurm task joins its job before it execs (root only: pjw's SPANK plugin in
    /// slurmstepd's child; see [`slurm_task`]). Answered with [`Response::Started`] or an error.
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
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
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

/// The node's memory as the governor last saw it (in [`StatusReport`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryStatus {
    /// The job partition and what the jobs have charged (bytes).
    pub limit: u64,
    pub used: u64,
    /// The running jobs' predicted demand (need plus growth) and the frozen jobs' footprints.
    pub demand: u64,
    pub held: u64,
    /// Whether the governor acts on pressure (`[memory] governor`).
    pub governor: bool,
    /// Why pjw's jobs press on each other now (the governor acts), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
    /// Pressure from outside pjw's jobs now (reported, left to the node's memory managers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<String>,
    /// Memory PSI `some` avg10 (percent) of the node and of the job partition, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_psi_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_psi_some: Option<f64>,
    /// When the governor last looked (ms since the epoch).
    pub sampled_ms: i64,
}

/// What the daemon answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// Answer to [`Request::Ping`].
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
    /// Answer to [`Request::Status`].
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
    /// Answer to [`Request::Outcome`].
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

/// The state of a job as `pjw status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Holds its CPUs and runs.
    Running,
    /// Runs in the idle class on CPUs other jobs hold.
    Backfill,
    /// Frozen: suspended by its owner, preempted by a higher-priority job, or frozen by the
    /// memory governor (the reason says which).
    Frozen,
    /// Waits for CPUs.
    Queued,
    /// Its main process exited; leftovers are being killed and the cgroups removed.
    Ending,
}

impl JobState {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Backfill => "backfill",
            JobState::Frozen => "frozen",
            JobState::Queued => "queued",
            JobState::Ending => "ending",
        }
    }
}

/// One job in a [`StatusReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    pub uid: u32,
    /// CPUs held (empty while queued).
    pub cpus: CpuSet,
    /// NUMA nodes whose memory the job may use (empty while queued).
    pub mems: CpuSet,
    /// CPUs asked for.
    pub ncpus: u32,
    /// Memory limit in bytes.
    pub mem: Option<u64>,
    pub procs: u32,
    pub threads: u32,
    pub state: JobState,
    /// Why it is not simply running (queued, frozen, backfill), for people.
    #[serde(default)]
    pub reason: Option<String>,
    /// Priority 1-16.
    #[serde(default)]
    pub priority: u8,
    /// Seconds since the job started (or was queued).
    pub age_secs: u64,
    /// The job's main process.
    pub pid: Option<u32>,
    /// CPU time the job had used at `sampled_ms` (microseconds, user + system); absent while
    /// queued, or from a daemon that does not report it. `pjw top` turns two readings into CPU %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
    /// Memory charged to the job (bytes) at `sampled_ms`; absent while queued or from an older
    /// daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// When the daemon read `cpu_usec` and `mem_bytes` (ms since the epoch): for the request,
    /// within half a second of it, or by its sampler, whichever is newer (docs/decisions.md
    /// (bp)). Absent while queued or from an older daemon (whose figures were read at the
    /// request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_ms: Option<i64>,
    /// The workload manager's name for the job (`slurm:42`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wlm: Option<String>,
    /// Whole GPUs asked for (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ngpus: u32,
    /// pjw's ids of the GPUs it holds; while queued, those its workload manager chose for it
    /// (absent: none).
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub gpus: GpuSet,
    /// A started GPU job's runtime variables (`CUDA_VISIBLE_DEVICES`, `PJW_GPUS`, …), as
    /// `started.env` gives a `run` job: for the processes pjw did not start (`pjw slurm
    /// task-prolog`). Absent for a job without GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_env: Vec<(String, String)>,
    /// Its block I/O weight and limits (`weight=500; 254:0 rbps=100M`); absent when it has
    /// the kernel's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<String>,
    /// At `sampled_ms`, from NVML: the mean utilisation of its GPUs (percent) and their used
    /// memory (bytes); absent without a GPU reading (no GPUs, no NVML, or an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem: Option<u64>,
    /// A registered job's lease (absent for other jobs, and from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseInfo>,
    /// Its running steps: `pjw run`s started from inside it (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepInfo>,
    /// Processes of the job the kernel has killed for memory so far (absent: none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub oom_kills: u64,
}

/// The node as `pjw status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Host name.
    pub node: String,
    /// CPUs pjw may hand out.
    pub total_cpus: u32,
    /// The CPUs pjw may hand out, as a list.
    pub cpus: CpuSet,
    /// Of those, the free ones.
    pub free_cpus: CpuSet,
    /// Job-CPUs the node runs at once (primaries plus backfillers).
    #[serde(default)]
    pub vcpus: u32,
    /// Running (and ending) jobs first, then the queue in order.
    pub jobs: Vec<JobInfo>,
    /// The node's GPUs, pjw's ids (absent: none).
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub gpus: GpuSet,
    /// Of those, the ones no job holds.
    #[serde(default, skip_serializing_if = "GpuSet::is_empty")]
    pub free_gpus: GpuSet,
    /// cgroup mode and parent, for people.
    pub cgroup: String,
    /// Daemon version.
    pub version: String,
    /// Start-time statistics (absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<Box<StartStats>>,
    /// The job partition's memory and its pressure, as the governor last saw it (absent
    /// before its first look, or from an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
}

/// Errors of the transport and client.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("cannot connect to the pjw daemon at {path}: {source} (is `pjw daemon` running? PJW_SOCKET selects another socket)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("connection to the pjw daemon failed: {0}")]
    Io(#[from] io::Error),
    #[error("the pjw daemon closed the connection")]
    Closed,
    #[error("frame of {0} bytes is larger than the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Decode(String),
}

/// Write one frame.
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8]) -> Result<(), ProtoError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtoError::TooLarge(payload.len()));
    }
    let len = (payload.len() as u32).to_be_bytes();
    w.write_all(&len)?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Read one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(ProtoError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(ProtoError::TooLarge(n));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ProtoError::Closed
        } else {
            e.into()
        }
    })?;
    Ok(Some(buf))
}

/// Decode a request frame's payload.
pub fn decode_request(payload: &[u8]) -> Result<Request, ProtoError> {
    let f: RequestFrame =
        serde_json::from_slice(payload).map_err(|e| ProtoError::Decode(e.to_string()))?;
    if f.v != VERSION {
        return Err(ProtoError::Decode(format!(
            "protocol version {} is not supported (this daemon speaks {VERSION})",
            f.v
        )));
    }
    Ok(f.req)
}

/// Encode a request into a frame payload.
pub fn encode_request(req: &Request) -> Vec<u8> {
    // Serialising these plain types cannot fail.
    serde_json::to_vec(&RequestFrame {
        v: VERSION,
        req: req.clone(),
    })
    .unwrap_or_default()
}

/// Encode a response into a frame payload.
pub fn encode_response(resp: &Response) -> Vec<u8> {
    serde_json::to_vec(resp).unwrap_or_default()
}

/// Decode a response payload.
pub fn decode_response(payload: &[u8]) -> Result<Response, ProtoError> {
    serde_json::from_slice(payload).map_err(|e| ProtoError::Decode(e.to_string()))
}

/// The socket path clients use: `PJW_SOCKET` if set, else [`DEFAULT_SOCKET`].
pub fn socket_path() -> PathBuf {
    std::env::var_os("PJW_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// A blocking client connection (the CLI is single-threaded on purpose: the daemon moves the
/// whole client process into a job's cgroups).
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    /// The daemon's refusal, read when sending failed because it had closed the connection.
    refusal: Option<Response>,
}

impl Client {
    /// Connect to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Client, ProtoError> {
        let stream = UnixStream::connect(path).map_err(|source| ProtoError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client {
            stream,
            refusal: None,
        })
    }

    /// Limit how long a read may wait (None = forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), ProtoError> {
        self.stream.set_read_timeout(t)?;
        Ok(())
    }

    /// Send a request. A daemon that refused the connection (a user over their limit) wrote
    /// one error frame and closed it: then sending fails, and that frame is what
    /// [`Client::recv`] returns, so the user reads the daemon's reason, not "broken pipe".
    pub fn send(&mut self, req: &Request) -> Result<(), ProtoError> {
        match write_frame(&mut self.stream, &encode_request(req)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = self.stream.set_read_timeout(Some(Duration::from_secs(1)));
                match read_frame(&mut self.stream)
                    .ok()
                    .flatten()
                    .map(|p| decode_response(&p))
                {
                    Some(Ok(r @ Response::Error { .. })) => {
                        self.refusal = Some(r);
                        Ok(())
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Wait for the next response.
    pub fn recv(&mut self) -> Result<Response, ProtoError> {
        if let Some(r) = self.refusal.take() {
            return Ok(r);
        }
        match read_frame(&mut self.stream)? {
            Some(p) => decode_response(&p),
            None => Err(ProtoError::Closed),
        }
    }

    /// Send a request and wait for one response.
    pub fn call(&mut self, req: &Request) -> Result<Response, ProtoError> {
        self.send(req)?;
        self.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"{}").unwrap();
        assert_eq!(&buf[..4], &[0, 0, 0, 2]);
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"{}");
        assert!(read_frame(&mut r).unwrap().is_none());
        // An announced length over the limit is refused before reading the body.
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..]),
            Err(ProtoError::TooLarge(_))
        ));
        // A truncated frame is an error, not a hang or a panic.
        let trunc = [0u8, 0, 0, 9, b'{'];
        assert!(matches!(
            read_frame(&mut &trunc[..]),
            Err(ProtoError::Closed)
        ));
    }

    #[test]
    fn requests_decode_strictly() {
        let run = Request::Run(RunRequest {
            gpus: 2,
            bind: None,
            tasks: None,
            priority: Some(12),
            placement: Placement::BackfillOnly,
            exclusive: false,
            cpus: 2,
            mem: Some(1 << 30),
            job_id: Some("42".into()),
            name: None,
            argv: vec!["sleep".into(), "1".into()],
            user: Some("alice".into()),
            wlm: Some("pbs:1234.pbs01".into()),
            tmp: Some(0),
            io_weight: Some(500),
            io_max: vec!["254:0 rbps=10M".into()],
        });
        assert_eq!(decode_request(&encode_request(&run)).unwrap(), run);
        let bad = [
            &br#"{"v":1,"req":{"type":"launch_missiles"}}"#[..],
            br#"{"v":2,"req":{"type":"status"}}"#,
            br#"{"v":1,"req":{"type":"run","cpus":-1}}"#,
            br#"{"v":1,"req":{"type":"status"},"extra":1}"#,
            b"not json",
            b"",
        ];
        for b in bad {
            assert!(
                decode_request(b).is_err(),
                "{:?} accepted",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn register_and_end_round_trip() {
        let reg = Request::Register(RegisterRequest {
            job: "4242".into(),
            wlm: "slurm".into(),
            user: "alice".into(),
            cpus: 2,
            mem: Some(1 << 30),
            name: None,
            attach: false,
            gpus: None,
        });
        let text = String::from_utf8(encode_request(&reg)).unwrap();
        assert!(text.contains(r#""type":"register""#), "{text}");
        assert_eq!(decode_request(text.as_bytes()).unwrap(), reg);
        let end = Request::End { job: "4242".into() };
        assert_eq!(decode_request(&encode_request(&end)).unwrap(), end);
        assert!(decode_request(br#"{"v":1,"req":{"type":"register","job":"1"}}"#).is_err());
    }

    #[test]
    fn login_round_trips_and_names_no_pid() {
        let req = Request::Login(LoginRequest {
            user: "alice".into(),
            phase: LoginPhase::Session,
        });
        let text = String::from_utf8(encode_request(&req)).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"req":{"type":"login","user":"alice","phase":"session"}}"#
        );
        assert_eq!(decode_request(text.as_bytes()).unwrap(), req);
        // The process to move is never the request's to say.
        assert!(decode_request(
            br#"{"v":1,"req":{"type":"login","user":"alice","phase":"session","pid":1}}"#
        )
        .is_err());
    }

    #[test]
    fn status_json_has_the_documented_shape() {
        let s = Response::Status(StatusReport {
            node: "n1".into(),
            total_cpus: 2,
            cpus: CpuSet::parse_list("0-1").unwrap(),
            free_cpus: CpuSet::parse_list("1").unwrap(),
            vcpus: 2,
            jobs: vec![],
            gpus: GpuSet::parse_list("0-3").unwrap(),
            free_gpus: GpuSet::parse_list("1,3").unwrap(),
            cgroup: "hybrid".into(),
            version: "0.1.0".into(),
            starts: None,
            memory: None,
        });
        let v: serde_json::Value = serde_json::from_slice(&encode_response(&s)).unwrap();
        assert_eq!(v["free_cpus"], "1");
        assert_eq!(v["total_cpus"], 2);
        // GPUs are lists like CPUs.
        assert_eq!(
            (&v["gpus"], &v["free_gpus"]),
            (&"0-3".into(), &"1,3".into())
        );
    }

    #[test]
    fn job_usage_fields_are_optional_both_ways() {
        // A job entry from a daemon without usage fields still decodes.
        let old = r#"{"id":"1","name":"x","user":"u","uid":0,"cpus":"0","mems":"0","ncpus":1,
            "mem":null,"procs":1,"threads":1,"state":"running","age_secs":3,"pid":9}"#;
        let j: JobInfo = serde_json::from_str(old).unwrap();
        assert_eq!((j.cpu_usec, j.mem_bytes, j.sampled_ms), (None, None, None));
        assert_eq!((j.ngpus, j.gpus), (0, GpuSet::new()));
        let gpu = JobInfo {
            ngpus: 2,
            gpus: GpuSet::parse_list("1,3").unwrap(),
            ..j.clone()
        };
        let text = serde_json::to_string(&gpu).unwrap();
        assert!(text.contains(r#""ngpus":2,"gpus":"1,3""#), "{text}");
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), gpu);
        // With them, they round-trip; without them, they are left out of the JSON.
        let with = JobInfo {
            cpu_usec: Some(1_500_000),
            mem_bytes: Some(4096),
            sampled_ms: Some(1_700_000_000_000),
            ..j.clone()
        };
        let text = serde_json::to_string(&with).unwrap();
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), with);
        let bare = serde_json::to_string(&j).unwrap();
        assert!(
            !bare.contains("cpu_usec") && !bare.contains("sampled_ms") && !bare.contains("gpu"),
            "{bare}"
        );
        let nvml = JobInfo {
            gpu_util: Some(62.5),
            gpu_mem: Some(1 << 30),
            ..gpu
        };
        let text = serde_json::to_string(&nvml).unwrap();
        assert!(
            text.contains(r#""gpu_util":62.5,"gpu_mem":1073741824"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), nvml);
        // OOM kills show only once there are some.
        assert!(!text.contains("oom_kills"), "{text}");
        let oom = JobInfo {
            oom_kills: 3,
            ..nvml
        };
        let text = serde_json::to_string(&oom).unwrap();
        assert!(text.contains(r#""oom_kills":3"#), "{text}");
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), oom);
    }
}
