//! The engine's inputs: who asks ([`Cred`]), what about a job ([`Control`]) and every
//! [`Event`] the connections, watchers and timers send down the engine's one channel.

use inotify::WatchDescriptor;
use pjw_proto::{LoginRequest, RegisterRequest, Response, RunRequest, SlurmTaskRequest};
use tokio::sync::{mpsc, oneshot};

use crate::procs::ProcMsg;

/// Who is asking (from `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What the connection task resolved about the caller before handing its request over, off the
/// engine thread (user and group lookups may stall on LDAP or SSSD; see [`crate::users`]): the
/// engine never looks a user up itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    /// The caller's user name (its uid as text when it has none).
    pub name: String,
    /// Whether the caller is in `[profile] admin_group`.
    pub admin: bool,
    /// The user the request names (`run --user`, `register`, `report --user`): uid and primary
    /// gid; None when it names none or no such user exists.
    pub named: Option<(u32, u32)>,
}

/// A request about one job (kill, suspend, resume, priority).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    Kill,
    Suspend,
    Resume,
    Priority(u8),
    /// End a registered job (root only); answered once its cgroups are gone.
    End,
}

/// Everything the engine reacts to.
#[derive(Debug)]
pub enum Event {
    /// A `run` request. Answers go to `reply` (Queued, then Started or Error).
    Submit {
        conn: u64,
        cred: Cred,
        who: Who,
        req: RunRequest,
        reply: mpsc::UnboundedSender<Response>,
    },
    /// A `status` request.
    Status { reply: oneshot::Sender<Response> },
    /// A live pass (see [`crate::live`]) read these jobs' figures, on a blocking thread.
    LiveRead {
        readings: Vec<(i64, crate::live::Reading)>,
    },
    /// The running live pass takes longer than [`crate::live::WAIT`].
    LiveLate,
    /// A request about one job.
    Control {
        cred: Cred,
        who: Who,
        job: String,
        what: Control,
        reply: oneshot::Sender<Response>,
    },
    /// A connection closed; if it was waiting in the queue, it leaves the queue.
    ClientGone { conn: u64 },
    /// The main process of job `seq` exited (its pidfd became readable).
    MainExited { seq: i64 },
    /// The process of step `step` of job `seq` exited (its pidfd became readable).
    StepExited { seq: i64, step: u32 },
    /// A PAM login (`pjw pam-adopt`, root only): may the user log in, and its session into
    /// the user's job.
    Login {
        cred: Cred,
        who: Who,
        req: LoginRequest,
        reply: oneshot::Sender<Response>,
    },
    /// `cgroup.events` of a watched job changed.
    CgroupChanged { wd: WatchDescriptor },
    /// Re-check whether job `seq` is empty (only where no `cgroup.events` exists: pure v1).
    Recheck { seq: i64 },
    /// The kill rounds of job `seq` (no `cgroup.kill`) in cgroup `cgroup`, run on a blocking
    /// thread, are over; `error` says what failed. No `seq`: what stayed in a withdrawn queued
    /// job's cgroups.
    Killed {
        seq: Option<i64>,
        cgroup: String,
        error: Option<String>,
    },
    /// Signal `sig` was sent to the processes of job `seq` (cgroup `cgroup`) on a blocking
    /// thread; `error` says what the kernel refused.
    Signalled {
        seq: i64,
        cgroup: String,
        sig: i32,
        error: Option<String>,
    },
    /// The cgroups of an ended job (`cgroup`, its name), removed on a blocking thread, are
    /// gone; `error` says what could not be removed.
    CgroupsRemoved {
        cgroup: String,
        error: Option<String>,
    },
    /// The v1 freezer's wait for FROZEN of job `seq`, on a blocking thread, is over; `error`
    /// says the freeze did not happen.
    Frozen { seq: i64, error: Option<String> },
    /// A timer: look at the queue again (TTL expiry, clients that never reconnected).
    Tick { generation: u64 },
    /// A timer: look again at the cgroups of withdrawn queued jobs whose client was still in
    /// them (`engine/preplace.rs`).
    Vacate,
    /// A timer: write again what the store did not take (see `engine/store_writes.rs`).
    StoreRetry,
    /// The memory governor's tick: sample memory and PSI, freeze or thaw.
    Govern,
    /// An `outcome` request: what memory did to a job (owner or root).
    Outcome {
        cred: Cred,
        job: String,
        reply: oneshot::Sender<Response>,
    },
    /// A `register` request from a workload manager's prolog or job starter (root only).
    Register {
        conn: u64,
        cred: Cred,
        who: Who,
        req: RegisterRequest,
        reply: mpsc::UnboundedSender<Response>,
    },
    /// A Slurm task asks to join its job before it execs (pjw's SPANK plugin; see
    /// `engine/slurm_task.rs`). Answered with `Started` or an error.
    SlurmTask {
        cred: Cred,
        req: SlurmTaskRequest,
        reply: oneshot::Sender<Response>,
    },
    /// The adoption sweep's timer: look at processes started since the last sweep.
    Sweep,
    /// The next turn of a sweep that had more processes to look at than one turn takes.
    SweepMore,
    /// Process events from the kernel's proc connector (see [`crate::procs`]).
    Proc(ProcMsg),
    /// The sampler's tick (`profile.interval`): sample every started job.
    Sample,
    /// The young jobs' tick: sample the jobs in their first minute (see
    /// [`crate::profile::YOUNG_FOR`]).
    SampleYoung,
    /// The thread balancing tick (`[job] bind_interval_ms`): hand the running jobs to the
    /// binder.
    Bind,
    /// The lease tick (`[lease] check_interval`): renew, end or ask about registered jobs.
    LeaseTick,
    /// The workload managers' words about registered jobs (from the asker's thread).
    LeaseWords(Vec<(i64, pjw_core::lease::Word)>),
    /// A metrics scrape: answer with an in-memory snapshot (no I/O).
    Metrics {
        reply: oneshot::Sender<crate::metrics::Snapshot>,
    },
    /// A `report` request: the engine checks access and answers with frames on `reply`
    /// (the store is read on a blocking thread, never in the engine).
    Report {
        cred: Cred,
        who: Who,
        query: pjw_proto::ReportQuery,
        /// The report to stream, or its refusal: the connection task streams it.
        reply: oneshot::Sender<crate::report::ReportAnswer>,
    },
}
