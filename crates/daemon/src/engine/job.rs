//! One job as the engine holds it, from queued to ended: its fields, the client waiting for it,
//! and how its phase maps to the state shown to users and the role stored.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use inotify::WatchDescriptor;
use pjw_core::sched::{self, JobView, Phase, Request};
use pjw_core::{CpuSet, JobId};
use pjw_proto::{JobState, JobTmp, Placement, Response};
use pjw_store::{StarterRecord, StoredRole};
use tokio::sync::{mpsc, oneshot};

use crate::profile::{JobProf, ProfState};

/// The client waiting for a queued job.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) conn: u64,
    pub(super) reply: mpsc::UnboundedSender<Response>,
}

/// How a started job's end is watched for: its main process gone, its cgroup empty.
#[derive(Debug, Default)]
pub(super) struct EndWatch {
    /// Its main process exited (or it was killed): it ends once its cgroup is empty.
    pub(super) ending: bool,
    /// Who killed it, for the record.
    pub(super) killed_by: Option<String>,
    /// Who ended it (a manager's epilog), for the record.
    pub(super) ended_by: Option<String>,
    /// The whole reason, when pjw ended it for a reason of its own (its lease).
    pub(super) reason: Option<crate::profile::EndReason>,
    /// The inotify watch on its `cgroup.events`.
    pub(super) watch: Option<WatchDescriptor>,
    /// `end` requests waiting for the cgroups to be gone.
    pub(super) waiters: Vec<oneshot::Sender<Response>>,
    /// A look at its cgroup is scheduled (where no event says when it empties: cgroup v1, or
    /// the kernel could not be read); one at a time, however many callers asked.
    pub(super) recheck_pending: bool,
    /// The last delay between such looks: 20 ms after the job's end, doubling up to 1 s while
    /// leftovers keep running.
    pub(super) recheck_delay: Duration,
    /// Warned with SIGTERM at its time limit: when it is killed if it has not ended (ms).
    pub(super) kill_due_ms: Option<i64>,
}

/// What the memory governor tracks about a job.
#[derive(Debug, Default)]
pub(super) struct MemTrack {
    /// Memory charged as last sampled; its need (anon + shmem + swap), the need's growth
    /// (bytes/s), and when.
    pub(super) usage: u64,
    pub(super) need: u64,
    pub(super) growth: f64,
    pub(super) at: Option<Instant>,
    /// Its own memory PSI at the last tick, where the kernel has it.
    pub(super) stall: Option<pjw_core::governor::Stall>,
    /// Frozen by the memory governor (it keeps its CPUs), since when (wall clock, ms), and
    /// what it is expected to need when thawed.
    pub(super) frozen: bool,
    pub(super) frozen_since_ms: Option<i64>,
    pub(super) footprint: u64,
    /// When the governor last thawed it.
    pub(super) thawed_at: Option<Instant>,
    /// Throttled by the governor (`memory.high` at this many bytes).
    pub(super) throttled: bool,
    pub(super) throttle_high: Option<u64>,
    /// Why the governor throttled or froze it, for `pjw status` (its growth then).
    pub(super) why: Option<String>,
    /// Stalling on memory inside its own limit at the last tick, and for how long in all (ms).
    pub(super) self_stalled: bool,
    pub(super) self_stall_ms: i64,
    /// Processes the kernel OOM-killed in it so far (the last tick's count).
    pub(super) oom_kills: u64,
    /// The memory governor's freezes of it so far: how many, for how long in all before the
    /// present one (ms), and why the last one was (told at its end: a frozen job's reason
    /// was shown only while it lasted).
    pub(super) freezes: u32,
    pub(super) frozen_total_ms: i64,
    pub(super) froze_why: Option<String>,
    /// The governor's last step ended it: why.
    pub(super) last_step: Option<String>,
}

/// How a job came: who asked for it, for which workload manager, with what /tmp. Stored
/// beside its row (`StarterRecord`) when it differs from a plain `pjw run` by its owner.
#[derive(Debug, Default)]
pub(super) struct Starter {
    /// uid of the process that asked: root for a job starter or a manager, else the owner.
    pub(super) client_uid: u32,
    /// The workload manager's name for the job (`slurm:42`).
    pub(super) wlm: Option<String>,
    /// Size of the job's /tmp (bytes), if it has one.
    pub(super) tmp_size: Option<u64>,
    /// The per-job tmpfs the daemon mounted for an unprivileged client.
    pub(super) tmpdir: Option<PathBuf>,
    /// Registered without a process: it lives until the manager ends it, even when empty.
    pub(super) held: bool,
}

/// The client of a queued job.
#[derive(Debug, Default)]
pub(super) struct ClientLink {
    /// The waiting client while queued; None for a queued job recovered after a restart whose
    /// client has not reconnected yet (it is not planned until it does).
    pub(super) waiter: Option<Waiter>,
    /// Until when a recovered queued job waits for its client to reconnect.
    pub(super) reconnect_by: Option<Instant>,
    /// Whether the job's cgroups exist while it waits, its client in them
    /// (`engine/preplace.rs`, decision (cm)).
    pub(super) cgroups: super::preplace::QueuedCgroups,
}

/// A job, from queued to ended.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) seq: i64,
    pub(super) id: JobId,
    pub(super) name: String,
    /// The owner (the `--user` of a root client, else the client).
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) user: String,
    /// How it came: who asked, for which manager, with what /tmp.
    pub(super) starter: Starter,
    pub(super) req: Request,
    pub(super) mem: Option<u64>,
    pub(super) phase: Phase,
    /// CPUs it runs on (primary: exclusive; backfill: shared); empty while queued or frozen.
    pub(super) cpus: CpuSet,
    pub(super) mems: CpuSet,
    /// GPUs it holds (granted at start, kept until it ends).
    pub(super) gpus: pjw_core::GpuSet,
    /// Its block I/O weight and limits (applied when its cgroups are made).
    pub(super) io: pjw_core::io_limits::JobIo,
    /// The main process (the client that became the command); None for adopted cgroups.
    pub(super) pid: Option<u32>,
    pub(super) pid_start: Option<u64>,
    pub(super) cgroup: String,
    /// Whether its cgroups exist (it has started).
    pub(super) started: Option<Instant>,
    pub(super) queued_at: Instant,
    /// Why it is frozen or backfilling, for `pjw status`.
    pub(super) reason: Option<String>,
    /// The client waiting for it while queued.
    pub(super) client: ClientLink,
    /// What the memory governor tracks about it.
    pub(super) memory: MemTrack,
    /// Profile totals: time per state, latest sample, maxima, exit status.
    pub(super) prof: JobProf,
    /// The time its time limit counts, as the engine's events see it.
    pub(super) run_clock: super::time_limit::RunClock,
    /// Whether its limit is what it asked for or the node's default.
    pub(super) time_source: pjw_core::time_limit::LimitSource,
    /// How its end is watched for and who waits for it.
    pub(super) end: EndWatch,
    /// Its row lags behind memory (a write failed): written again after the next event.
    pub(super) store_dirty: bool,
    /// A freeze under way (the v1 freezer is FREEZING), and what it is for.
    pub(super) freezing: Option<super::freezing::FreezeFor>,
    /// The thread binding it asked for (`--bind`); None: the node's `[job] bind`.
    pub(super) bind: Option<pjw_core::thread_bind::BindMode>,
    /// Its steps: `pjw run`s started from inside it.
    pub(super) steps: super::steps::Steps,
    /// How many tasks share its CPUs (`--ntasks`), for its thread variables; None: not said.
    /// Not stored: a client that reconnects sends it again.
    pub(super) tasks: Option<u32>,
}

impl Job {
    /// What the client is told about its temporary space.
    pub(super) fn tmp_reply(&self) -> Option<JobTmp> {
        match (&self.starter.tmpdir, self.starter.tmp_size) {
            (Some(dir), Some(size)) => Some(JobTmp::Dir {
                dir: dir.display().to_string(),
                size,
            }),
            (None, Some(size)) if size > 0 && self.starter.client_uid == 0 => {
                Some(JobTmp::Private { size })
            }
            _ => None,
        }
    }

    /// The private /dev/shm a root client mounts (with a new IPC namespace): the job's `--mem`,
    /// else `[job] shm_size`, else the job partition; None where `[job] private_ipc` is off or
    /// the client is not root (it cannot make namespaces).
    pub(super) fn shm_reply(&self, ipc: &crate::config::JobIpc, partition: u64) -> Option<u64> {
        (ipc.private && self.starter.client_uid == 0)
            .then(|| self.mem.or(ipc.shm_size).unwrap_or(partition))
    }

    pub(super) fn starter_record(&self) -> StarterRecord {
        StarterRecord {
            wlm: self.starter.wlm.clone(),
            client_uid: self.starter.client_uid,
            tmp_size: self.starter.tmp_size,
            tmpdir: self
                .starter
                .tmpdir
                .as_ref()
                .map(|d| d.display().to_string()),
        }
    }

    pub(super) fn view(&self) -> JobView {
        JobView {
            key: self.seq,
            req: self.req,
            phase: self.phase,
            cpus: self.cpus,
            gpus: self.gpus,
        }
    }

    pub(super) fn prof_state(&self) -> ProfState {
        match self.state() {
            JobState::Queued => ProfState::Queued,
            JobState::Backfill => ProfState::Backfill,
            JobState::Frozen => ProfState::Frozen,
            JobState::Running | JobState::Ending => ProfState::Running,
        }
    }

    pub(super) fn state(&self) -> JobState {
        if self.end.ending {
            return JobState::Ending;
        }
        if self.memory.frozen {
            return JobState::Frozen;
        }
        match self.phase {
            Phase::Queued => JobState::Queued,
            Phase::Primary => JobState::Running,
            Phase::Backfill => JobState::Backfill,
            Phase::Preempted | Phase::Suspended => JobState::Frozen,
        }
    }
}

/// The role stored for a job in phase `p`.
pub(super) fn role_of(p: Phase) -> StoredRole {
    match p {
        Phase::Queued | Phase::Primary => StoredRole::Primary,
        Phase::Backfill => StoredRole::Backfill,
        Phase::Preempted => StoredRole::Preempted,
        Phase::Suspended => StoredRole::Suspended,
    }
}

pub(super) fn sched_placement(p: Placement) -> sched::Placement {
    match p {
        Placement::Any => sched::Placement::Any,
        Placement::PrimaryOnly => sched::Placement::PrimaryOnly,
        Placement::BackfillOnly => sched::Placement::BackfillOnly,
    }
}
