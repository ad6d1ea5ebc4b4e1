//! The engine: the one owner of the daemon's state.
//!
//! Connections, pidfd watchers, timers and the inotify reader never touch state; they send
//! [`Event`]s down one channel and the engine handles them in order. That keeps every decision
//! (who gets which CPUs) serial and makes crash recovery a matter of rebuilding this one struct.
//!
//! Who runs where is decided by the pure node-queue policy ([`pjw_core::sched::plan`]): after
//! every change the engine hands it a snapshot of the jobs and carries out the actions it
//! returns — start a job as a primary or a backfiller, promote, preempt, resume, expire.
//!
//! A job's life: `Submit` → recorded as `queued` → started: recorded as `starting`, cgroups
//! created (idle class for a backfiller), the client's process moved in, recorded as `running`,
//! a pidfd watcher armed, an inotify watch put on its `cgroup.events` → `MainExited` (the pidfd
//! fired): leftovers killed → `populated 0` seen on `cgroup.events` → cgroups removed, recorded
//! as `ended`, the queue re-planned.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inotify::{WatchDescriptor, WatchMask, Watches};
use pjw_cgroup::{Driver, JobLimits};
use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::governor::{self, GovernorConfig, MemAction, MemJob, MemSnapshot};
use pjw_core::sched::{self, Action, JobView, Phase, QueuePolicy, Request};
use pjw_core::{CpuSet, JobId};
use pjw_proto::{
    ErrorCode, JobInfo, JobState, JobTmp, Placement, RegisterRequest, Response, RunRequest,
    StatusReport,
};
use pjw_store::{JobRecord, StarterRecord, Store, StoredState};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

mod reload;
mod wlm;

use crate::adopt::Scanner;
use crate::config::Config;
use crate::os;
use crate::procs::{ProcCounts, ProcMsg, ProcTracker, Unknown};
use crate::profile::{self, Finals, JobProf, ProfState, Writer};

/// Who is asking (from `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
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
        req: RunRequest,
        reply: mpsc::UnboundedSender<Response>,
    },
    /// A `status` request.
    Status { reply: oneshot::Sender<Response> },
    /// A request about one job.
    Control {
        cred: Cred,
        job: String,
        what: Control,
        reply: oneshot::Sender<Response>,
    },
    /// A connection closed; if it was waiting in the queue, it leaves the queue.
    ClientGone { conn: u64 },
    /// The main process of job `seq` exited (its pidfd became readable).
    MainExited { seq: i64 },
    /// `cgroup.events` of a watched job changed.
    CgroupChanged { wd: WatchDescriptor },
    /// Re-check whether job `seq` is empty (only where no `cgroup.events` exists: pure v1).
    Recheck { seq: i64 },
    /// A timer: look at the queue again (TTL expiry, clients that never reconnected).
    Tick { generation: u64 },
    /// The memory governor's tick: sample memory and PSI, freeze or thaw.
    Govern,
    /// A `register` request from a workload manager's prolog or job starter (root only).
    Register {
        conn: u64,
        cred: Cred,
        req: RegisterRequest,
        reply: mpsc::UnboundedSender<Response>,
    },
    /// The adoption sweep's timer: look at processes started since the last sweep.
    Sweep,
    /// Process events from the kernel's proc connector (see [`crate::procs`]).
    Proc(ProcMsg),
    /// The sampler's tick (`profile.interval`): sample every started job.
    Sample,
    /// A metrics scrape: answer with an in-memory snapshot (no I/O).
    Metrics {
        reply: oneshot::Sender<crate::metrics::Snapshot>,
    },
    /// A `report` request: the engine checks access and answers with frames on `reply`
    /// (the store is read on a blocking thread, never in the engine).
    Report {
        cred: Cred,
        query: pjw_proto::ReportQuery,
        reply: mpsc::UnboundedSender<Response>,
    },
}

/// The client waiting for a queued job.
#[derive(Debug)]
struct Waiter {
    conn: u64,
    reply: mpsc::UnboundedSender<Response>,
}

/// A job, from queued to ended.
#[derive(Debug)]
struct Job {
    seq: i64,
    id: JobId,
    name: String,
    /// The owner (the `--user` of a root client, else the client).
    uid: u32,
    gid: u32,
    user: String,
    /// uid of the process that asked: root in job starter mode, else `uid`.
    client_uid: u32,
    /// The workload manager's name for the job (`slurm:42`).
    wlm: Option<String>,
    /// Size of the job's /tmp (bytes), if it has one.
    tmp_size: Option<u64>,
    /// The per-job tmpfs the daemon mounted for an unprivileged client.
    tmpdir: Option<PathBuf>,
    req: Request,
    mem: Option<u64>,
    phase: Phase,
    /// CPUs it runs on (primary: exclusive; backfill: shared); empty while queued or frozen.
    cpus: CpuSet,
    mems: CpuSet,
    /// The main process (the client that became the command); None for adopted cgroups.
    pid: Option<u32>,
    pid_start: Option<u64>,
    cgroup: String,
    /// Whether its cgroups exist (it has started).
    started: Option<Instant>,
    queued_at: Instant,
    ending: bool,
    killed_by: Option<String>,
    /// Why it is frozen or backfilling, for `pjw status`.
    reason: Option<String>,
    watch: Option<WatchDescriptor>,
    /// The waiting client while queued; None for a queued job recovered after a restart whose
    /// client has not reconnected yet (it is not planned until it does).
    waiter: Option<Waiter>,
    /// Until when a recovered queued job waits for its client to reconnect.
    reconnect_by: Option<Instant>,
    /// Memory as last sampled, its growth (bytes/s) and when.
    mem_usage: u64,
    mem_growth: f64,
    mem_at: Option<Instant>,
    /// Frozen by the memory governor (it keeps its CPUs), and what it used then.
    mem_frozen: bool,
    footprint: u64,
    /// When the governor last thawed it.
    thawed_at: Option<Instant>,
    /// Throttled by the governor (`memory.high`).
    throttled: bool,
    /// Profile totals: time per state, latest sample, maxima, exit status.
    prof: JobProf,
    /// Registered without a process: it lives until the manager ends it, even when empty.
    held: bool,
    /// Who ended it (a manager's epilog), for the record.
    ended_by: Option<String>,
    /// `end` requests waiting for the cgroups to be gone.
    end_waiters: Vec<oneshot::Sender<Response>>,
    /// A look at its cgroup is scheduled (where no event says when it empties: cgroup v1, or
    /// the kernel could not be read); one at a time, however many callers asked.
    recheck_pending: bool,
    /// The last delay between such looks: 20 ms after the job's end, doubling up to 1 s while
    /// leftovers keep running.
    recheck_delay: Duration,
}

impl Job {
    /// What the client is told about its temporary space.
    fn tmp_reply(&self) -> Option<JobTmp> {
        match (&self.tmpdir, self.tmp_size) {
            (Some(dir), Some(size)) => Some(JobTmp::Dir {
                dir: dir.display().to_string(),
                size,
            }),
            (None, Some(size)) if size > 0 && self.client_uid == 0 => {
                Some(JobTmp::Private { size })
            }
            _ => None,
        }
    }

    fn starter_record(&self) -> StarterRecord {
        StarterRecord {
            wlm: self.wlm.clone(),
            client_uid: self.client_uid,
            tmp_size: self.tmp_size,
            tmpdir: self.tmpdir.as_ref().map(|d| d.display().to_string()),
        }
    }

    fn view(&self) -> JobView {
        JobView {
            key: self.seq,
            req: self.req,
            phase: self.phase,
            cpus: self.cpus,
        }
    }

    fn prof_state(&self) -> ProfState {
        match self.state() {
            JobState::Queued => ProfState::Queued,
            JobState::Backfill => ProfState::Backfill,
            JobState::Frozen => ProfState::Frozen,
            JobState::Running | JobState::Ending => ProfState::Running,
        }
    }

    fn state(&self) -> JobState {
        if self.ending {
            return JobState::Ending;
        }
        if self.mem_frozen {
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

fn role_name(p: Phase) -> &'static str {
    match p {
        Phase::Queued | Phase::Primary => "primary",
        Phase::Backfill => "backfill",
        Phase::Preempted => "preempted",
        Phase::Suspended => "suspended",
    }
}

fn placement_name(p: Placement) -> &'static str {
    match p {
        Placement::Any => "any",
        Placement::PrimaryOnly => "primary_only",
        Placement::BackfillOnly => "backfill_only",
    }
}

fn placement_from(s: &str) -> Placement {
    match s {
        "primary_only" => Placement::PrimaryOnly,
        "backfill_only" => Placement::BackfillOnly,
        _ => Placement::Any,
    }
}

fn sched_placement(p: Placement) -> sched::Placement {
    match p {
        Placement::Any => sched::Placement::Any,
        Placement::PrimaryOnly => sched::Placement::PrimaryOnly,
        Placement::BackfillOnly => sched::Placement::BackfillOnly,
    }
}

/// How long a queued job recovered after a restart waits for its client to come back.
const RECONNECT_GRACE: Duration = Duration::from_secs(120);

/// The daemon's state.
pub struct Engine {
    cfg: Config,
    driver: Driver,
    store: Store,
    alloc: Allocator,
    /// Reused working memory of the allocator: no heap allocation per decision.
    scratch: Scratch,
    /// CPUs pjw may hand out.
    pool: CpuSet,
    policy: QueuePolicy,
    jobs: BTreeMap<i64, Job>,
    watches: Option<Watches>,
    by_watch: HashMap<WatchDescriptor, i64>,
    tx: mpsc::UnboundedSender<Event>,
    node: String,
    /// The timer that counts (older ones are ignored).
    tick_generation: u64,
    /// The memory governor's settings, with the partition limit; None when it is off.
    governor: Option<GovernorConfig>,
    /// The partition limit (bytes), for admission by `--mem`.
    mem_limit: u64,
    last_thaw_ms: Option<i64>,
    /// `pswpin` of /proc/vmstat at the last governor tick, and when.
    last_swap_in: Option<(u64, Instant)>,
    /// Adoption: the /proc reader and when each unknown job id was last logged.
    scanner: Scanner,
    unknown_logged: HashMap<String, i64>,
    /// Which job every jailed process belongs to; exact process and thread counts.
    procs: ProcTracker,
    /// The profile store writer (its own thread and connection); None when profiles are off.
    writer: Option<Writer>,
    /// Main processes of ended jobs whose exit status had not arrived yet: pid → (seq, when).
    late_exits: HashMap<u32, (i64, Instant)>,
    /// When retention last ran.
    last_retention: Option<Instant>,
    /// When the sampler last read the jobs' PSI files.
    last_psi_read: Option<Instant>,
    /// The last sampler tick: how long it took and how many jobs it sampled (for metrics).
    last_sample: Option<(Duration, usize)>,
    /// Whether process events arrive (the proc connector is open): only then are the
    /// tracker's totals reported.
    proc_events: bool,
    /// Partition type for exclusive jobs, when the parent could be made a partition root.
    partition: Option<pjw_cgroup::Partition>,
    /// Counters and histograms for the metrics endpoint.
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// The central-store shipper (`[central]`), woken when a job's summary is recorded.
    shipper: Option<pjw_central::Shipper>,
}

/// How a job ended, for [`Engine::record_end`].
#[derive(Debug, Default)]
struct End {
    reason: String,
    killed: bool,
    ooms: u64,
    running_ms: i64,
    finals: Finals,
    counts: Option<ProcCounts>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why a request is refused, before it becomes a [`Response::Error`].
type Refusal = (ErrorCode, String);

fn refuse(code: ErrorCode, message: impl Into<String>) -> Refusal {
    (code, message.into())
}

fn err(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

// The sampler, job summaries and `report`: engine methods kept in their own file.
#[path = "engine_profile.rs"]
mod engine_profile;

/// Name of a job's cgroup below the parent.
pub fn cgroup_name(id: &JobId) -> String {
    format!("job-{id}")
}

impl Engine {
    /// Build the engine. `watches` is the inotify handle whose events the caller turns into
    /// [`Event::CgroupChanged`]; None where there are no `cgroup.events` files. `vcpus` must
    /// already be checked against the pool.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Config,
        driver: Driver,
        store: Store,
        alloc: Allocator,
        pool: CpuSet,
        vcpus: usize,
        mem_limit: u64,
        watches: Option<Watches>,
        tx: mpsc::UnboundedSender<Event>,
    ) -> Engine {
        let node = os::hostname(&cfg.proc_root);
        let policy = QueuePolicy {
            vcpus,
            backfill: cfg.backfill,
            hard_preemption: cfg.hard_preemption,
            preempt_min_priority: cfg.preempt_priority,
            queue_ttl_ms: cfg.queue_ttl.map(|s| s as i64 * 1000),
        };
        let governor = cfg.governor.then_some(GovernorConfig {
            limit: mem_limit,
            ..cfg.governor_cfg
        });
        let scanner = Scanner::new(
            &cfg.proc_root,
            cfg.adopt_env.clone(),
            cfg.adopt_hook_daemons.clone(),
        );
        Engine {
            scanner,
            unknown_logged: HashMap::new(),
            governor,
            mem_limit,
            last_thaw_ms: None,
            last_swap_in: None,
            cfg,
            driver,
            store,
            alloc,
            scratch: Scratch::new(),
            pool,
            policy,
            jobs: BTreeMap::new(),
            watches,
            by_watch: HashMap::new(),
            tx,
            node,
            tick_generation: 0,
            procs: ProcTracker::new(),
            writer: None,
            late_exits: HashMap::new(),
            last_retention: None,
            last_psi_read: None,
            last_sample: None,
            proc_events: false,
            partition: None,
            metrics: Default::default(),
            shipper: None,
        }
    }

    /// Ship finished jobs to the central store with `s` (woken at every job end).
    pub fn set_shipper(&mut self, s: pjw_central::Shipper) {
        self.shipper = Some(s);
    }

    /// The counters and histograms this engine feeds (for the metrics endpoint).
    pub fn metrics(&self) -> std::sync::Arc<crate::metrics::Metrics> {
        self.metrics.clone()
    }

    /// What a metrics scrape needs from the engine: in-memory state only, O(jobs).
    pub fn metrics_snapshot(&self) -> crate::metrics::Snapshot {
        crate::metrics::Snapshot {
            cpus: self.pool.len() as u32,
            free_cpus: self.free().len() as u32,
            queue_len: self
                .jobs
                .values()
                .filter(|j| j.phase == Phase::Queued)
                .count() as u32,
            jobs: self
                .jobs
                .values()
                .map(|j| crate::metrics::JobSnap {
                    id: j.id.to_string(),
                    user: j.user.clone(),
                    state: j.state(),
                    cgroup: j.started.map(|_| j.cgroup.clone()),
                    // The sampler's latest sample; the scrape reads the cgroup without one.
                    cpu_usec: j
                        .prof
                        .last
                        .as_ref()
                        .and_then(|s| Some(s.cpu_user_usec? + s.cpu_system_usec.unwrap_or(0))),
                    mem_bytes: j.prof.last.as_ref().and_then(|s| s.mem_current),
                })
                .collect(),
            store_write_errors: self.writer.as_ref().map_or(0, |w| w.errors()),
        }
    }

    /// Start the profile writer (a second connection to the store, on its own thread).
    pub fn start_profiles(&mut self) -> Result<(), String> {
        if !self.cfg.profile.enabled {
            return Ok(());
        }
        let w = Writer::spawn(self.store.path().to_path_buf()).map_err(|e| e.to_string())?;
        self.writer = Some(w);
        Ok(())
    }

    /// The profile writer's failed writes so far (for metrics).
    pub fn store_write_errors(&self) -> u64 {
        self.writer.as_ref().map(Writer::errors).unwrap_or(0)
    }

    /// CPUs held by primaries.
    fn free(&self) -> CpuSet {
        let held = self
            .jobs
            .values()
            .filter(|j| j.phase == Phase::Primary)
            .fold(CpuSet::new(), |acc, j| acc.union(&j.cpus));
        self.pool.difference(&held)
    }

    /// Handle one event.
    pub fn handle(&mut self, ev: Event) {
        self.handle_event(ev);
        // Time per state comes from the transitions, which only happen in events.
        let now = now_ms();
        for j in self.jobs.values_mut() {
            let st = j.prof_state();
            j.prof.observe(st, now);
        }
    }

    fn handle_event(&mut self, ev: Event) {
        match ev {
            Event::Submit {
                conn,
                cred,
                req,
                reply,
            } => self.submit(conn, cred, req, reply),
            Event::Status { reply } => {
                let _ = reply.send(Response::Status(self.status()));
            }
            Event::Control {
                cred,
                job,
                what,
                reply,
            } => {
                if what == Control::End {
                    self.end(cred, &job, reply);
                } else {
                    let r = self.control(cred, &job, what);
                    let _ = reply.send(r);
                }
            }
            Event::ClientGone { conn } => {
                let gone = self
                    .jobs
                    .values()
                    .find(|j| j.waiter.as_ref().is_some_and(|w| w.conn == conn))
                    .map(|j| j.seq);
                if let Some(seq) = gone {
                    if let Some(j) = self.jobs.remove(&seq) {
                        info!(job = %j.id, user = %j.user, "queued client left; job withdrawn");
                        self.record_end(&j, End::reason("client left the queue"));
                    }
                    self.replan();
                }
            }
            Event::MainExited { seq } => self.main_exited(seq),
            Event::CgroupChanged { wd } => {
                if let Some(seq) = self.by_watch.get(&wd).copied() {
                    self.check_empty(seq);
                }
            }
            Event::Recheck { seq } => {
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.recheck_pending = false;
                }
                self.check_empty(seq)
            }
            Event::Govern => self.govern(),
            Event::Register {
                conn,
                cred,
                req,
                reply,
            } => self.register(conn, cred, req, reply),
            Event::Sweep => self.sweep(),
            Event::Proc(msg) => self.proc_events(msg),
            Event::Sample => self.sample(),
            Event::Metrics { reply } => {
                let _ = reply.send(self.metrics_snapshot());
            }
            Event::Report { cred, query, reply } => self.report(cred, query, reply),
            Event::Tick { generation } => {
                if generation == self.tick_generation {
                    self.drop_unclaimed();
                    self.replan();
                }
            }
        }
    }

    // ---- submission ----------------------------------------------------------------------

    fn submit(
        &mut self,
        conn: u64,
        cred: Cred,
        req: RunRequest,
        reply: mpsc::UnboundedSender<Response>,
    ) {
        // A client whose process is already a live job's main process reconnected after a
        // daemon crash between being moved and being told: tell it again.
        if let Some(j) = self.jobs.values().find(|j| {
            j.started.is_some() && j.pid == Some(cred.pid) && j.client_uid == cred.uid && !j.ending
        }) {
            info!(job = %j.id, pid = cred.pid, "client reconnected; job already running");
            let _ = reply.send(Response::Started {
                job: j.id.to_string(),
                cpus: j.cpus,
                mems: j.mems,
                backfill: j.phase == Phase::Backfill,
                tmp: j.tmp_reply(),
            });
            return;
        }
        // A queued client reconnecting after a restart takes its place back.
        let pid_start = os::start_time(&self.cfg.proc_root, cred.pid);
        if let Some(j) = self.jobs.values_mut().find(|j| {
            j.started.is_none()
                && j.waiter.is_none()
                && j.pid == Some(cred.pid)
                && j.pid_start == pid_start
                && j.client_uid == cred.uid
        }) {
            info!(job = %j.id, pid = cred.pid, "queued client reconnected; place kept");
            j.waiter = Some(Waiter { conn, reply });
            j.reconnect_by = None;
            let seq = j.seq;
            self.replan();
            self.tell_queued(seq);
            return;
        }
        if let Err((code, message)) = self.validate(&cred, &req) {
            let _ = reply.send(err(code, message));
            return;
        }
        let id = match &req.job_id {
            Some(text) => match JobId::new(text) {
                // A manager's namespace is made by `pjw job register` (root) only.
                Ok(id) if id.namespace().is_some() => {
                    let _ = reply.send(err(
                        ErrorCode::Denied,
                        format!(
                            "job id {id} is in the {} namespace: only `pjw job register` makes ids there",
                            id.namespace().unwrap_or_default()
                        ),
                    ));
                    return;
                }
                Ok(id) => id,
                Err(e) => {
                    let _ = reply.send(err(ErrorCode::Invalid, e.to_string()));
                    return;
                }
            },
            None => match self.generate_id() {
                Ok(id) => id,
                Err(e) => {
                    let _ = reply.send(err(ErrorCode::Internal, e));
                    return;
                }
            },
        };
        if self.jobs.values().any(|j| j.id == id) {
            let _ = reply.send(err(
                ErrorCode::Conflict,
                format!("job id {id} is already in use by a live job"),
            ));
            return;
        }
        // The owner: the caller, or (root only) the user it names.
        let (uid, gid, user) = match &req.user {
            None => (cred.uid, cred.gid, os::user_name(cred.uid)),
            Some(name) => match os::lookup_user(name) {
                None => {
                    let _ = reply.send(err(ErrorCode::Invalid, format!("no such user: {name}")));
                    return;
                }
                Some((uid, _)) if cred.uid != 0 && uid != cred.uid => {
                    let _ = reply.send(err(
                        ErrorCode::Denied,
                        format!(
                            "only root may run a job as another user ({name}); you are {}",
                            os::user_name(cred.uid)
                        ),
                    ));
                    return;
                }
                Some((uid, gid)) => (uid, gid, name.clone()),
            },
        };
        let tmp_size = req.tmp.or(self.cfg.tmp).filter(|s| *s > 0);
        let name = req
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                req.argv
                    .first()
                    .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                    .unwrap_or_else(|| "job".into())
            });
        let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        let submitted_ms = now_ms();
        let priority = req.priority.unwrap_or(self.cfg.default_priority);
        let cgroup = cgroup_name(&id);
        let rec = JobRecord {
            seq: 0,
            job_id: id.to_string(),
            name: name.clone(),
            uid,
            gid,
            user: user.clone(),
            ncpus: req.cpus,
            cpus: CpuSet::new(),
            mems: CpuSet::new(),
            mem_limit: req.mem,
            pid: Some(cred.pid),
            pid_start,
            cgroup: cgroup.clone(),
            argv: req.argv.clone(),
            state: StoredState::Queued,
            submitted_ms,
            started_ms: None,
            ended_ms: None,
            end_reason: None,
            priority,
            placement: placement_name(req.placement).into(),
            exclusive: req.exclusive,
            role: "primary".into(),
        };
        let seq = match self.store.insert_job(&rec) {
            Ok(s) => s,
            Err(e) => {
                error!(job = %id, error = %e, "cannot record job");
                let _ = reply.send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                return;
            }
        };
        let rec = JobRecord { seq, ..rec };
        let mut job = self.job_from_record(&rec, id, Phase::Queued, CpuSet::new(), None);
        job.client_uid = cred.uid;
        job.wlm = req.wlm.clone();
        job.tmp_size = tmp_size;
        if job.client_uid != job.uid || job.wlm.is_some() || job.tmp_size.is_some() {
            if let Err(e) = self.store.set_starter(seq, &job.starter_record()) {
                error!(job = %job.id, error = %e, "cannot record job");
                let _ = self.store.set_ended(seq, now_ms(), "start failed: store");
                let _ = reply.send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                return;
            }
        }
        if job.client_uid != job.uid || job.wlm.is_some() {
            info!(job = %job.id, user = %job.user, wlm = job.wlm.as_deref().unwrap_or(""), client_uid = job.client_uid, "job submitted by a job starter");
        }
        job.waiter = Some(Waiter { conn, reply });
        self.jobs.insert(seq, job);
        self.replan();
        self.tell_queued(seq);
    }

    fn validate(&self, cred: &Cred, req: &RunRequest) -> Result<(), Refusal> {
        let total = self.pool.len();
        if req.cpus == 0 {
            return Err(refuse(ErrorCode::Invalid, "--cpus must be at least 1"));
        }
        if req.cpus as usize > total {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "--cpus {} is more than this node has for jobs ({total} cpus: {})",
                    req.cpus, self.pool
                ),
            ));
        }
        if req.mem == Some(0) {
            return Err(refuse(ErrorCode::Invalid, "--mem must be more than 0"));
        }
        if req.argv.len() > pjw_proto::MAX_ARGS {
            return Err(refuse(ErrorCode::Invalid, "too many arguments"));
        }
        // What a client sends is shown to others and logged: bounded, no control characters.
        if let Some(w) = &req.wlm {
            pjw_core::text::check_label(w)
                .map_err(|why| refuse(ErrorCode::Invalid, format!("wlm label {why}")))?;
        }
        if let Some(n) = &req.name {
            if n.len() > 256 {
                return Err(refuse(
                    ErrorCode::Invalid,
                    "--name is longer than 256 bytes",
                ));
            }
        }
        if let Some(m) = req.mem {
            if m > self.mem_limit {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "--mem {} can never fit: the job partition of this node is {}",
                        pjw_core::format_size(m),
                        pjw_core::format_size(self.mem_limit)
                    ),
                ));
            }
        }
        if let Some(t) = req.tmp.or(self.cfg.tmp).filter(|t| *t > 0) {
            // A tmpfs of any size mounts; its pages come out of the node's memory. At most the
            // node's maximum (default: the job partition), and with --mem, the job's memory.
            let cap = self.cfg.tmp_max.unwrap_or(self.mem_limit);
            let cap = req.mem.map_or(cap, |m| cap.min(m));
            if t > cap {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "--tmp {} is more than this job may have ({}: {})",
                        pjw_core::format_size(t),
                        if req
                            .mem
                            .is_some_and(|m| m < self.cfg.tmp_max.unwrap_or(self.mem_limit))
                        {
                            "its --mem"
                        } else {
                            "job.tmp_max, by default the job partition"
                        },
                        pjw_core::format_size(cap)
                    ),
                ));
            }
        }
        if let Some(p) = req.priority {
            self.check_priority(cred, p)?;
        }
        if req.exclusive
            && self.cfg.exclusive == crate::config::ExclusiveRight::Privileged
            && !self.privileged(cred)
        {
            return Err(refuse(
                ErrorCode::Denied,
                "--exclusive (the whole node) is for root, workload-manager jobs and the admin group on this node (exclusive = \"privileged\")",
            ));
        }
        if cred.uid != 0 {
            let queued = self
                .jobs
                .values()
                .filter(|j| j.client_uid == cred.uid && j.started.is_none())
                .count();
            if queued >= self.cfg.max_queued_per_user {
                return Err(refuse(
                    ErrorCode::Denied,
                    format!(
                        "you have {queued} jobs waiting, this node's limit per user (max_queued_per_user)"
                    ),
                ));
            }
        }
        if req.placement == Placement::BackfillOnly && !self.cfg.backfill {
            return Err(refuse(
                ErrorCode::Invalid,
                "backfill is disabled on this node (backfill = false)",
            ));
        }
        if req.placement == Placement::BackfillOnly && req.exclusive {
            return Err(refuse(
                ErrorCode::Invalid,
                "--exclusive and --backfill-only exclude each other",
            ));
        }
        Ok(())
    }

    fn check_priority(&self, cred: &Cred, p: u8) -> Result<(), Refusal> {
        if !(sched::MIN_PRIORITY..=sched::MAX_PRIORITY).contains(&p) {
            return Err(refuse(
                ErrorCode::Invalid,
                format!("priority {p} is not in 1-16"),
            ));
        }
        if p > self.cfg.max_priority && !self.privileged(cred) {
            return Err(refuse(
                ErrorCode::Denied,
                format!(
                    "priority {p} is above this node's maximum for users ({})",
                    self.cfg.max_priority
                ),
            ));
        }
        Ok(())
    }

    /// Root or a member of the admin group (`[profile] admin_group`): may ask for priorities
    /// above `max_priority` and, by default, for `--exclusive`.
    fn privileged(&self, cred: &Cred) -> bool {
        cred.uid == 0
            || crate::report::in_admin_group(
                cred,
                self.cfg.profile.admin_group.as_deref(),
                &self.cfg.proc_root,
            )
    }

    /// Say once that a job waits, with its place and why.
    fn tell_queued(&self, seq: i64) {
        let Some(j) = self.jobs.get(&seq) else { return };
        if j.phase != Phase::Queued {
            return;
        }
        let Some(w) = &j.waiter else { return };
        let position = self
            .queue_order()
            .iter()
            .position(|s| *s == seq)
            .map(|p| p as u32 + 1)
            .unwrap_or(0);
        let reason = self.wait_reason(j);
        info!(job = %j.id, user = %j.user, cpus = j.req.ncpus, position, "job queued");
        let _ = w.reply.send(Response::Queued {
            job: j.id.to_string(),
            position,
            reason,
        });
    }

    /// Queued jobs in the order they will be served.
    fn queue_order(&self) -> Vec<i64> {
        let mut q: Vec<&Job> = self
            .jobs
            .values()
            .filter(|j| j.phase == Phase::Queued)
            .collect();
        q.sort_by_key(|j| (std::cmp::Reverse(j.req.priority), j.req.submitted_ms, j.seq));
        q.into_iter().map(|j| j.seq).collect()
    }

    fn wait_reason(&self, j: &Job) -> String {
        if j.waiter.is_none() && j.started.is_none() {
            return "waiting for its client to reconnect".into();
        }
        if self.jobs.values().any(|x| x.mem_frozen) {
            return "waiting for memory (the governor has frozen jobs)".into();
        }
        if let Some(m) = j.mem {
            let held = self.mem_promised();
            if held + m > self.mem_limit {
                return format!(
                    "waiting for memory ({} requested, {} of {} promised)",
                    pjw_core::format_size(m),
                    pjw_core::format_size(held),
                    pjw_core::format_size(self.mem_limit)
                );
            }
        }
        let order = self.queue_order();
        match order.first() {
            Some(first) if *first != j.seq => {
                let head = &self.jobs[first];
                format!("behind job {} in the queue", head.id)
            }
            _ if j.req.exclusive => "waiting for the whole node".into(),
            _ => {
                let running: usize = self
                    .jobs
                    .values()
                    .filter(|x| matches!(x.phase, Phase::Primary | Phase::Backfill))
                    .map(|x| x.cpus.len())
                    .sum();
                if running + j.req.ncpus > self.policy.vcpus && self.free().len() >= j.req.ncpus {
                    format!(
                        "waiting for job slots ({running} of {} vcpus in use)",
                        self.policy.vcpus
                    )
                } else {
                    format!(
                        "waiting for {} cpus ({} of {} free)",
                        j.req.ncpus,
                        self.free().len(),
                        self.pool.len()
                    )
                }
            }
        }
    }

    fn generate_id(&mut self) -> Result<JobId, String> {
        loop {
            let n = self.store.next_job_number().map_err(|e| e.to_string())?;
            let id = JobId::new(&n.to_string()).map_err(|e| e.to_string())?;
            if !self.jobs.values().any(|j| j.id == id) {
                return Ok(id);
            }
        }
    }

    // ---- planning ------------------------------------------------------------------------

    /// Ask the policy what changes now and carry it out, until nothing does.
    fn replan(&mut self) {
        // A failed start removes the job; plan again so the next one gets its chance. A queued
        // job that memory holds back is left out of the next plan, so the CPUs it was planned
        // on go to jobs that memory admits instead of idling (it starts when memory frees).
        let mut held: Vec<i64> = Vec::new();
        for _ in 0..64 {
            let views: Vec<JobView> = self
                .jobs
                .values()
                // Not a job that is ending, nor a recovered queued job whose client has not come
                // back, nor one memory holds back.
                .filter(|j| !j.ending && (j.phase != Phase::Queued || j.waiter.is_some()))
                .filter(|j| !held.contains(&j.seq))
                .map(Job::view)
                .collect();
            // An ending job keeps its CPUs until its cgroup is empty (its leftovers may run on,
            // with `kill_leftovers = false`); the policy does not see it, so they are not in
            // the pool it plans with.
            let pool = self
                .jobs
                .values()
                .filter(|j| j.ending && j.phase == Phase::Primary)
                .fold(self.pool, |p, j| p.difference(&j.cpus));
            let actions = sched::plan(
                &self.policy,
                &self.alloc,
                &mut self.scratch,
                &pool,
                &views,
                now_ms(),
            );
            if actions.is_empty() {
                break;
            }
            // A start that memory does not admit is dropped, and so are the preemptions planned
            // to make room for it.
            let held_back: Vec<i64> = actions
                .iter()
                .filter_map(|a| match a {
                    Action::StartPrimary { key, .. } | Action::StartBackfill { key, .. } => {
                        Some(*key)
                    }
                    _ => None,
                })
                .filter(|k| !self.memory_admits(*k))
                .collect();
            let mut failed = !held_back.is_empty();
            held.extend(&held_back);
            for a in actions {
                let skip = match a {
                    Action::StartPrimary { key, .. } | Action::StartBackfill { key, .. } => {
                        held_back.contains(&key)
                    }
                    Action::Preempt { by, .. } => held_back.contains(&by),
                    _ => false,
                };
                if skip {
                    continue;
                }
                if !self.apply(a) {
                    failed = true;
                }
            }
            if !failed {
                break;
            }
        }
        self.arm_timer();
    }

    /// Memory promised to started jobs by their `--mem`.
    fn mem_promised(&self) -> u64 {
        self.jobs
            .values()
            .filter(|j| j.started.is_some())
            .filter_map(|j| j.mem)
            .sum()
    }

    /// Whether a queued job may start as far as memory goes: no job is frozen for memory, and
    /// its `--mem` fits in the partition next to the `--mem` of the jobs that hold memory.
    fn memory_admits(&self, key: i64) -> bool {
        if self.jobs.values().any(|j| j.mem_frozen) {
            return false;
        }
        let Some(want) = self.jobs.get(&key).and_then(|j| j.mem) else {
            return true;
        };
        let held = self.mem_promised();
        held.saturating_add(want) <= self.mem_limit
    }

    /// Carry out one action; false when it could not be done (the job is gone).
    fn apply(&mut self, a: Action) -> bool {
        match a {
            Action::StartPrimary { key, cpus } => self.start(key, cpus, false),
            Action::StartBackfill { key, cpus } => self.start(key, cpus, true),
            Action::Promote { key, cpus } => self.move_job(key, cpus, Phase::Primary, None),
            Action::Resume { key, cpus } => self.move_job(key, cpus, Phase::Primary, None),
            Action::Preempt {
                key,
                by,
                to_backfill,
            } => {
                let by_id = self
                    .jobs
                    .get(&by)
                    .map(|j| j.id.to_string())
                    .unwrap_or_default();
                let reason = Some(format!("preempted by job {by_id}"));
                if to_backfill {
                    let cpus = self.jobs.get(&key).map(|j| j.cpus).unwrap_or_default();
                    self.move_job(key, cpus, Phase::Backfill, reason)
                } else {
                    self.freeze_job(key, Phase::Preempted, reason)
                }
            }
            Action::Expire { key } => {
                if let Some(j) = self.jobs.remove(&key) {
                    let waited = j.queued_at.elapsed().as_secs();
                    info!(job = %j.id, user = %j.user, waited_s = waited, "job expired in the queue");
                    self.record_end(&j, End::reason("expired in queue"));
                    if let Some(w) = j.waiter {
                        let _ = w.reply.send(err(
                            ErrorCode::Invalid,
                            format!(
                                "job {} expired after waiting {waited} s in the queue (queue_ttl)",
                                j.id
                            ),
                        ));
                    }
                }
                true
            }
        }
    }

    /// Wake up when the next queued job would expire or a recovered client's grace ends.
    fn arm_timer(&mut self) {
        let now = now_ms();
        let mut next: Option<Duration> = None;
        let mut consider = |d: Duration| next = Some(next.map_or(d, |n: Duration| n.min(d)));
        if let Some(ttl) = self.policy.queue_ttl_ms {
            for j in self.jobs.values().filter(|j| j.phase == Phase::Queued) {
                let left = (j.req.submitted_ms + ttl - now).max(0) as u64 + 1;
                consider(Duration::from_millis(left));
            }
        }
        for j in self.jobs.values() {
            if let Some(by) = j.reconnect_by {
                consider(by.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
            }
        }
        if let Some(d) = next {
            self.tick_generation += 1;
            let generation = self.tick_generation;
            let tx = self.tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = tx.send(Event::Tick { generation });
            });
        }
    }

    /// Recovered queued jobs whose client did not come back in time are dropped.
    fn drop_unclaimed(&mut self) {
        let now = Instant::now();
        let gone: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.reconnect_by.is_some_and(|b| b <= now))
            .map(|j| j.seq)
            .collect();
        for seq in gone {
            if let Some(j) = self.jobs.remove(&seq) {
                info!(job = %j.id, "queued client did not reconnect; job withdrawn");
                self.record_end(&j, End::reason("client left the queue"));
            }
        }
    }

    // ---- starting and moving jobs --------------------------------------------------------

    fn start(&mut self, seq: i64, cpus: CpuSet, backfill: bool) -> bool {
        let Some(j) = self.jobs.get(&seq) else {
            return false;
        };
        // A registered job may have no process yet; every other job has its client's.
        let pid = j.pid;
        if pid.is_none() && !j.held {
            return false;
        }
        let Some(waiter) = self.jobs.get_mut(&seq).and_then(|j| j.waiter.take()) else {
            return false;
        };
        let j = &self.jobs[&seq];
        // The process must still be the caller's.
        if waiter.reply.is_closed()
            || pid.is_some_and(|p| os::process_uid(&self.cfg.proc_root, p) != Some(j.client_uid))
        {
            warn!(job = %j.id, pid = ?pid, "client process vanished before start");
            if let Some(j) = self.jobs.remove(&seq) {
                self.record_end(&j, End::reason("client left the queue"));
            }
            return false;
        }
        let mems = self.alloc.topology().mems_for(&cpus);
        let phase = if backfill {
            Phase::Backfill
        } else {
            Phase::Primary
        };
        // Durable first: after a crash from here on, recovery finds the job.
        if let Err(e) = self
            .store
            .set_starting(seq, &cpus, &mems, role_name(phase), now_ms())
        {
            error!(job = %j.id, error = %e, "cannot record job start");
            let _ = waiter
                .reply
                .send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
            self.jobs.remove(&seq);
            return false;
        }
        let limits = JobLimits {
            cpus,
            mems,
            memory_max: j.mem,
            pids_max: self.cfg.pids_max,
            swap_max: self.cfg.swap_max,
        };
        let cgroup = j.cgroup.clone();
        let placed = self
            .driver
            .create_job(&cgroup, &limits)
            .and_then(|_| {
                if backfill {
                    self.driver.set_idle(&cgroup, true)
                } else {
                    Ok(())
                }
            })
            .map(|_| {
                if !j.req.exclusive {
                    return;
                }
                if let Some(kind) = self.partition {
                    // Its own scheduling domain: nothing else is balanced onto its CPUs.
                    match self.driver.set_partition(Some(&cgroup), kind, None) {
                        Ok(()) => info!(job = %j.id, cpus = %cpus, partition = kind.as_str(), "exclusive job is a cpuset partition"),
                        Err(e) => warn!(job = %j.id, error = %e, "exclusive job stays a plain cpuset"),
                    }
                }
            })
            .and_then(|_| match pid {
                // Known before the process can fork: its children are the job's.
                Some(p) => {
                    self.procs.start_job(seq, p);
                    self.driver.add_process(&cgroup, p)
                }
                // A registered job without a process yet: its processes come by adoption.
                None => Ok(()),
            });
        if let Err(e) = placed {
            self.procs.end_job(seq);
            error!(job = %j.id, error = %e, "cannot place job in its cgroups");
            let _ = self.driver.remove_job(&cgroup);
            let _ = waiter.reply.send(err(
                ErrorCode::Internal,
                format!("cannot set up the job's cgroups: {e}"),
            ));
            if let Some(j) = self.jobs.remove(&seq) {
                self.record_end(&j, End::reason(&format!("start failed: {e}")));
            }
            return false;
        }
        // An unprivileged client's /tmp: a tmpfs the daemon mounts for it.
        if let Some(size) = j.tmp_size.filter(|_| j.client_uid != 0) {
            match crate::tmp::mount_job_tmp(&self.cfg.tmp_root, &cgroup, size, j.uid, j.gid) {
                Ok(dir) => {
                    info!(job = %j.id, user = %j.user, dir = %dir.display(), size, "job tmpfs mounted");
                    let mut st = j.starter_record();
                    st.tmpdir = Some(dir.display().to_string());
                    if let Err(e) = self.store.set_starter(seq, &st) {
                        warn!(job = %j.id, error = %e, "cannot record the job's tmpfs");
                    }
                    if let Some(j) = self.jobs.get_mut(&seq) {
                        j.tmpdir = Some(dir);
                    }
                }
                Err(e) => {
                    // The client is already in the job's cgroups: tell it, and let the job end
                    // the usual way when it exits on the error.
                    error!(job = %j.id, error = %e, "cannot mount the job's tmpfs");
                    let _ = waiter.reply.send(err(
                        ErrorCode::Internal,
                        format!("cannot set up the job's /tmp: {e}"),
                    ));
                    let _ = self.store.set_running(seq);
                    if let Some(j) = self.jobs.get_mut(&seq) {
                        j.phase = phase;
                        j.cpus = cpus;
                        j.mems = mems;
                        j.started = Some(Instant::now());
                    }
                    self.track(seq, true);
                    return true;
                }
            }
        }
        let Some(j) = self.jobs.get(&seq) else {
            return false;
        };
        if let Err(e) = self.store.set_running(seq) {
            warn!(job = %j.id, error = %e, "cannot mark job running in the store");
        }
        let Some(j) = self.jobs.get_mut(&seq) else {
            return false;
        };
        j.phase = phase;
        j.cpus = cpus;
        j.mems = mems;
        j.started = Some(Instant::now());
        j.reason = backfill.then(|| "backfill on cpus other jobs hold".to_string());
        info!(
            job = %j.id, user = %j.user, cpus = %cpus, mems = %mems, pid = ?pid, role = role_name(phase),
            wlm = j.wlm.as_deref().unwrap_or(""),
            priority = j.req.priority, waited_ms = j.queued_at.elapsed().as_millis() as u64,
            "job started"
        );
        self.metrics.launch(j.queued_at.elapsed().as_secs_f64());
        let _ = waiter.reply.send(Response::Started {
            job: j.id.to_string(),
            cpus,
            mems,
            backfill,
            tmp: j.tmp_reply(),
        });
        self.track(seq, true);
        true
    }

    /// A running or frozen job moves to `cpus` in role `phase` (promotion, resume, demotion to
    /// backfill).
    fn move_job(&mut self, seq: i64, cpus: CpuSet, phase: Phase, reason: Option<String>) -> bool {
        let Some(j) = self.jobs.get(&seq) else {
            return false;
        };
        let mems = self.alloc.topology().mems_for(&cpus);
        let was = j.phase;
        let cg = j.cgroup.clone();
        let res = (|| {
            // Order matters for the neighbours: a job leaving the idle class goes to its own CPUs
            // first; a job entering it is made idle before it shares CPUs.
            if phase == Phase::Backfill {
                self.driver.set_idle(&cg, true)?;
                self.driver.set_cpus(&cg, &cpus, &mems)?;
            } else {
                self.driver.set_cpus(&cg, &cpus, &mems)?;
                self.driver.set_idle(&cg, false)?;
            }
            if matches!(was, Phase::Preempted | Phase::Suspended) {
                self.driver.freeze(&cg, false)?;
            }
            Ok::<(), pjw_cgroup::CgroupError>(())
        })();
        let Some(j) = self.jobs.get_mut(&seq) else {
            return false;
        };
        if let Err(e) = res {
            warn!(job = %j.id, error = %e, "cannot move job");
            return true;
        }
        j.phase = phase;
        j.cpus = cpus;
        j.mems = mems;
        j.reason = reason.or_else(|| {
            (phase == Phase::Backfill).then(|| "backfill on cpus other jobs hold".into())
        });
        let _ = self.store.set_role(seq, role_name(phase), &cpus, &mems);
        info!(job = %j.id, user = %j.user, cpus = %cpus, from = role_name(was), to = role_name(phase), "job moved");
        true
    }

    /// Freeze a running job; it gives up its CPUs.
    fn freeze_job(&mut self, seq: i64, phase: Phase, reason: Option<String>) -> bool {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return false;
        };
        if let Err(e) = self.driver.freeze(&j.cgroup, true) {
            warn!(job = %j.id, error = %e, "cannot freeze job");
            return true;
        }
        // Frozen now for another reason (preempted, suspended): no longer the governor's to thaw.
        j.mem_frozen = false;
        j.phase = phase;
        j.cpus = CpuSet::new();
        j.reason = reason;
        let _ = self.store.set_role(seq, role_name(phase), &j.cpus, &j.mems);
        info!(job = %j.id, user = %j.user, role = role_name(phase), reason = j.reason.as_deref().unwrap_or(""), "job frozen");
        true
    }

    /// Watch a job: its main process (pidfd) and its cgroup (inotify on cgroup.events).
    fn track(&mut self, seq: i64, main_alive: bool) {
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if let Some(watches) = self.watches.as_mut() {
            if let Some(path) = self.driver.events_path(&job.cgroup) {
                match watches.add(&path, WatchMask::MODIFY) {
                    Ok(wd) => {
                        self.by_watch.insert(wd.clone(), seq);
                        job.watch = Some(wd);
                    }
                    Err(e) => {
                        warn!(job = %job.id, path = %path.display(), error = %e, "cannot watch cgroup.events")
                    }
                }
            }
        }
        match (main_alive, job.pid) {
            (true, Some(pid)) => match os::pidfd_open(pid) {
                Ok(fd) => spawn_pidfd_watch(fd, seq, self.tx.clone()),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {
                    debug!(seq, pid, "main process already gone");
                    self.main_exited(seq);
                }
                // Out of descriptors or memory is not "the process is gone": keep trying.
                Err(e) => {
                    warn!(job = %job.id, pid, error = %e, "cannot watch the main process yet; trying again");
                    spawn_pidfd_retry(
                        pid,
                        job.pid_start,
                        self.cfg.proc_root.clone(),
                        seq,
                        self.tx.clone(),
                    );
                }
            },
            (false, Some(_)) => self.main_exited(seq),
            // Adopted cgroup without a known main process: it ends when it empties.
            (_, None) => self.check_empty(seq),
        }
    }

    // ---- control -------------------------------------------------------------------------

    fn control(&mut self, cred: Cred, job: &str, what: Control) -> Response {
        let Some(seq) = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job)
            .map(|j| j.seq)
        else {
            return err(ErrorCode::NotFound, format!("no job {job} on this node"));
        };
        let j = &self.jobs[&seq];
        if cred.uid != 0 && cred.uid != j.uid {
            return err(
                ErrorCode::Denied,
                format!("job {job} belongs to {}", j.user),
            );
        }
        let by = os::user_name(cred.uid);
        match what {
            // Handled by `end` (it answers later); never reaches here.
            Control::End => err(ErrorCode::Invalid, "end is answered elsewhere"),
            Control::Kill => self.kill(seq, by),
            Control::Suspend => {
                if j.ending {
                    return err(ErrorCode::Invalid, format!("job {job} is ending"));
                }
                match j.phase {
                    Phase::Queued => err(
                        ErrorCode::Invalid,
                        format!("job {job} is queued; kill it to withdraw it"),
                    ),
                    Phase::Suspended => err(
                        ErrorCode::Invalid,
                        format!("job {job} is already suspended"),
                    ),
                    Phase::Preempted => {
                        // Frozen already; it now stays frozen until resumed.
                        if let Some(j) = self.jobs.get_mut(&seq) {
                            j.phase = Phase::Suspended;
                            j.reason = Some(format!("suspended by {by}"));
                            let _ = self.store.set_role(seq, "suspended", &j.cpus, &j.mems);
                        }
                        Response::Done {
                            message: format!("job {job} suspended"),
                        }
                    }
                    Phase::Primary | Phase::Backfill => {
                        if let Some(j) = self.jobs.get_mut(&seq) {
                            j.mem_frozen = false;
                        }
                        self.freeze_job(seq, Phase::Suspended, Some(format!("suspended by {by}")));
                        self.replan();
                        Response::Done {
                            message: format!("job {job} suspended; its cpus went to others"),
                        }
                    }
                }
            }
            Control::Resume => {
                if j.phase != Phase::Suspended {
                    return err(ErrorCode::Invalid, format!("job {job} is not suspended"));
                }
                if let Some(j) = self.jobs.get_mut(&seq) {
                    // It competes for CPUs like a preempted job and is thawed when it has them.
                    j.phase = Phase::Preempted;
                    j.reason = Some("resumed; waiting for cpus".into());
                }
                self.replan();
                let resumed = self
                    .jobs
                    .get(&seq)
                    .is_some_and(|j| j.phase != Phase::Preempted);
                Response::Done {
                    message: if resumed {
                        format!("job {job} resumed")
                    } else {
                        format!("job {job} will resume when cpus are free")
                    },
                }
            }
            Control::Priority(p) => {
                if let Err((code, message)) = self.check_priority(&cred, p) {
                    return err(code, message);
                }
                if let Some(j) = self.jobs.get_mut(&seq) {
                    info!(job = %j.id, from = j.req.priority, to = p, by = %by, "priority changed");
                    j.req.priority = p;
                }
                let _ = self.store.set_priority(seq, p);
                self.replan();
                Response::Done {
                    message: format!("job {job} now has priority {p}"),
                }
            }
        }
    }

    /// Kill a running job or withdraw a queued one.
    fn kill(&mut self, seq: i64, by: String) -> Response {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return err(ErrorCode::NotFound, "no such job");
        };
        let job = j.id.to_string();
        if j.started.is_none() {
            let j = self.jobs.remove(&seq);
            if let Some(j) = j {
                info!(job = %j.id, user = %j.user, by = %by, "queued job withdrawn");
                let mut end = End::reason(&format!("killed by {by}"));
                end.killed = true;
                self.record_end(&j, end);
                if let Some(w) = j.waiter {
                    let _ = w.reply.send(err(
                        ErrorCode::Invalid,
                        format!("job {job} was killed while queued"),
                    ));
                }
            }
            self.replan();
            return Response::Done {
                message: format!("job {job} withdrawn from the queue"),
            };
        }
        info!(job = %j.id, user = %j.user, by = %by, "killing job");
        j.killed_by = Some(by);
        j.held = false;
        if let Err(e) = self.driver.kill(&j.cgroup) {
            return err(ErrorCode::Internal, format!("cannot kill job {job}: {e}"));
        }
        self.check_empty(seq);
        Response::Done {
            message: format!("job {job} killed"),
        }
    }

    // ---- ending --------------------------------------------------------------------------

    fn main_exited(&mut self, seq: i64) {
        let kill = self.cfg.kill_leftovers;
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if !job.ending {
            job.ending = true;
            debug!(job = %job.id, "main process exited");
            if kill {
                if let Err(e) = self.driver.kill(&job.cgroup) {
                    warn!(job = %job.id, error = %e, "cannot kill leftover processes");
                }
            }
        }
        self.check_empty(seq);
    }

    /// End the job if its cgroup is empty; where no event will tell us, look again shortly.
    ///
    /// A cgroup the kernel could not be read for is not empty: the job keeps its CPUs and its
    /// cgroup is looked at again (an event may never come for it).
    fn check_empty(&mut self, seq: i64) {
        let Some(job) = self.jobs.get(&seq) else {
            return;
        };
        if job.started.is_none() || job.held {
            return;
        }
        // Only the kernel saying "empty" ends a job; a failed read is not an answer (a job
        // ended on a read error would hand its CPUs out while it runs). A job cgroup that no
        // longer exists holds no process: the driver says so (Ok(false)), not an error.
        let (populated, unknown) = match self.driver.is_populated(&job.cgroup) {
            Ok(p) => (p, false),
            Err(e) => {
                warn!(job = %job.id, error = %e, "cannot tell whether the job's cgroup is empty; it keeps its CPUs, looking again in 1 s");
                self.metrics.kernel_read_error();
                (true, true)
            }
        };
        if !populated {
            let reason = match (&job.killed_by, &job.ended_by) {
                (Some(by), _) => format!("killed by {by}"),
                (None, Some(by)) => format!("ended by {by}"),
                (None, None) => "exited".to_string(),
            };
            self.finish(seq, &reason);
            return;
        }
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if (job.watch.is_none() || unknown) && !job.recheck_pending {
            let tx = self.tx.clone();
            let delay = if job.ending && !unknown {
                (job.recheck_delay * 2).clamp(Duration::from_millis(20), Duration::from_secs(1))
            } else {
                Duration::from_secs(1)
            };
            job.recheck_delay = delay;
            job.recheck_pending = true;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tx.send(Event::Recheck { seq });
            });
        }
    }

    fn finish(&mut self, seq: i64, reason: &str) {
        let Some(job) = self.jobs.remove(&seq) else {
            return;
        };
        if let Some(wd) = job.watch.clone() {
            self.by_watch.remove(&wd);
            if let Some(w) = self.watches.as_mut() {
                let _ = w.remove(wd);
            }
        }
        let ooms = self.driver.oom_kills(&job.cgroup);
        let reason = if ooms > 0 {
            let inside = if job.mem.is_some() {
                "inside its own memory limit"
            } else {
                "at the node's job partition"
            };
            warn!(job = %job.id, user = %job.user, oom_kills = ooms, "job had processes killed for memory {inside}");
            format!("{reason}; {ooms} process(es) OOM-killed {inside}")
        } else {
            reason.to_string()
        };
        let reason = reason.as_str();
        let counts = self.procs.end_job(seq).unwrap_or_default();
        // The last counters (CPU, the memory high-water mark, I/O) before the cgroups go.
        let finals = profile::read_finals(&self.driver, &job.cgroup);
        if let Err(e) = self.driver.remove_job(&job.cgroup) {
            warn!(job = %job.id, error = %e, "cannot remove job cgroups");
        }
        if let Some(dir) = &job.tmpdir {
            match crate::tmp::remove_job_tmp(dir) {
                Ok(()) => debug!(job = %job.id, dir = %dir.display(), "job tmpfs removed"),
                Err(e) => warn!(job = %job.id, error = %e, "cannot remove the job's tmpfs"),
            }
        }
        let runtime_ms = job
            .started
            .map(|s| s.elapsed().as_millis() as u64)
            .unwrap_or(0);
        self.record_end(
            &job,
            End {
                reason: reason.to_string(),
                killed: job.killed_by.is_some(),
                ooms,
                running_ms: runtime_ms as i64,
                finals,
                counts: self.proc_events.then_some(counts),
            },
        );
        info!(
            job = %job.id, user = %job.user, cpus = %job.cpus, runtime_ms, reason,
            processes = counts.procs_ever, threads = counts.threads_ever,
            max_processes = counts.procs_max, counts_exact = !counts.lossy, "job ended"
        );
        for w in job.end_waiters {
            let _ = w.send(Response::Done {
                message: format!("job {} ended; its cgroups are gone", job.id),
            });
        }
        self.replan();
    }

    // ---- recovery ------------------------------------------------------------------------

    /// Rebuild the state after a (re)start from the store and the cgroup trees. Jobs that ended
    /// meanwhile are closed, leftover empty cgroups removed, and populated cgroups the store does
    /// not know are kept (with the CPUs their cpuset holds) until they empty: no CPU is ever
    /// given to two jobs. Frozen jobs stay frozen; queued jobs keep their place for their
    /// clients to reconnect.
    pub fn recover(&mut self) -> Result<(), String> {
        let live = self.store.live_jobs().map_err(|e| e.to_string())?;
        let mut known = Vec::new();
        for rec in live {
            known.push(rec.cgroup.clone());
            let Ok(id) = JobId::new(&rec.job_id) else {
                continue;
            };
            if rec.state == StoredState::Queued {
                self.recover_queued(rec, id);
                continue;
            }
            // Registered by a manager without a process: it lives until the manager ends it.
            let held = rec.pid.is_none()
                && matches!(self.store.starter(rec.seq), Ok(Some(st)) if st.wlm.is_some());
            // A cgroup that cannot be read may hold processes: kept, so its CPUs stay taken.
            let populated = self.driver.is_populated(&rec.cgroup).unwrap_or_else(|e| {
                warn!(job = %rec.job_id, error = %e, "cannot tell whether the job's cgroup is empty; kept");
                true
            });
            // A held job lives on empty; one that never got its cgroups ("starting") does not.
            let keep = populated || (held && rec.state == StoredState::Running);
            if !keep {
                let _ = self.driver.remove_job(&rec.cgroup);
                let reason = if rec.state == StoredState::Starting {
                    "start interrupted"
                } else {
                    "ended while daemon was down"
                };
                self.record_end_rec(&rec, reason);
                info!(job = %rec.job_id, reason, "recovered job had ended");
                continue;
            }
            let phase = match rec.role.as_str() {
                "backfill" => Phase::Backfill,
                "preempted" => Phase::Preempted,
                "suspended" => Phase::Suspended,
                _ => Phase::Primary,
            };
            let cpus = if matches!(phase, Phase::Preempted | Phase::Suspended) {
                CpuSet::new()
            } else {
                match self.driver.job_cpus(&rec.cgroup) {
                    Ok(c) if !c.is_empty() => {
                        if c != rec.cpus {
                            warn!(job = %rec.job_id, stored = %rec.cpus, cgroup = %c, "cpuset differs from the store; the cgroup wins");
                        }
                        c
                    }
                    _ => rec.cpus,
                }
            };
            if rec.state == StoredState::Starting {
                let _ = self.store.set_running(rec.seq);
            }
            let main_alive = rec
                .pid
                .is_some_and(|p| os::process_alive(&self.cfg.proc_root, p, rec.pid_start));
            let started = Instant::now()
                .checked_sub(Duration::from_millis(
                    (now_ms() - rec.started_ms.unwrap_or(rec.submitted_ms)).max(0) as u64,
                ))
                .unwrap_or_else(Instant::now);
            let mut job = self.job_from_record(&rec, id, phase, cpus, Some(started));
            self.restore_starter(&mut job);
            job.held = held;
            // A running job that is frozen was frozen by the memory governor: it stays frozen
            // until the governor finds room for it, with what it uses now as its footprint.
            if matches!(phase, Phase::Primary | Phase::Backfill)
                && self.driver.is_frozen(&rec.cgroup).unwrap_or(false)
            {
                job.mem_frozen = true;
                job.footprint = self.driver.memory_usage(&rec.cgroup).unwrap_or(0);
            }
            info!(
                job = %job.id, user = %job.user, cpus = %job.cpus, role = role_name(phase), main_alive,
                memory_frozen = job.mem_frozen, "recovered running job"
            );
            let seq = job.seq;
            self.jobs.insert(seq, job);
            self.track(seq, main_alive);
        }
        // Per-job tmpfs whose job is gone (ended while the daemon was down, or never started).
        let keep: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.tmpdir.is_some())
            .map(|j| j.cgroup.clone())
            .collect();
        for name in crate::tmp::list(&self.cfg.tmp_root) {
            if keep.contains(&name) {
                continue;
            }
            let dir = self.cfg.tmp_root.join(&name);
            match crate::tmp::remove_job_tmp(&dir) {
                Ok(()) => info!(dir = %dir.display(), "removed the tmpfs of a job that ended"),
                Err(e) => warn!(error = %e, "cannot remove a leftover job tmpfs"),
            }
        }
        // Cgroups below the parent that the store does not know.
        for name in self.driver.list_jobs().map_err(|e| e.to_string())? {
            if known.contains(&name) {
                continue;
            }
            // Unreadable: adopted like a populated one (its CPUs stay taken until it empties).
            let populated = self.driver.is_populated(&name).unwrap_or_else(|e| {
                warn!(cgroup = %name, error = %e, "cannot tell whether a leftover cgroup is empty; adopted");
                true
            });
            if !populated {
                match self.driver.remove_job(&name) {
                    Ok(()) => info!(cgroup = %name, "removed empty leftover cgroup"),
                    Err(e) => warn!(cgroup = %name, error = %e, "cannot remove leftover cgroup"),
                }
                continue;
            }
            self.adopt(name)?;
        }
        // Process counts start again from what is alive now (a lower bound).
        self.reseed_procs();
        self.replan();
        Ok(())
    }

    fn recover_queued(&mut self, rec: JobRecord, id: JobId) {
        let alive = rec
            .pid
            .is_some_and(|p| os::process_alive(&self.cfg.proc_root, p, rec.pid_start));
        if !alive {
            self.record_end_rec(&rec, "client left the queue");
            return;
        }
        let mut job = self.job_from_record(&rec, id, Phase::Queued, CpuSet::new(), None);
        self.restore_starter(&mut job);
        job.reconnect_by = Some(Instant::now() + RECONNECT_GRACE);
        info!(job = %job.id, user = %job.user, "recovered queued job; waiting for its client");
        self.jobs.insert(job.seq, job);
    }

    /// Take back a recovered job's starter details (owner vs client, WLM id, /tmp).
    fn restore_starter(&self, job: &mut Job) {
        if let Ok(Some(st)) = self.store.starter(job.seq) {
            job.client_uid = st.client_uid;
            job.wlm = st.wlm;
            job.tmp_size = st.tmp_size;
            job.tmpdir = st.tmpdir.map(PathBuf::from);
        }
    }

    fn job_from_record(
        &self,
        rec: &JobRecord,
        id: JobId,
        phase: Phase,
        cpus: CpuSet,
        started: Option<Instant>,
    ) -> Job {
        Job {
            seq: rec.seq,
            id,
            name: rec.name.clone(),
            uid: rec.uid,
            gid: rec.gid,
            user: rec.user.clone(),
            client_uid: rec.uid,
            wlm: None,
            tmp_size: None,
            tmpdir: None,
            req: Request {
                ncpus: rec.ncpus as usize,
                priority: rec.priority,
                placement: sched_placement(placement_from(&rec.placement)),
                exclusive: rec.exclusive,
                submitted_ms: rec.submitted_ms,
            },
            mem: rec.mem_limit,
            phase,
            cpus,
            mems: if cpus.is_empty() {
                rec.mems
            } else {
                self.alloc.topology().mems_for(&cpus)
            },
            pid: rec.pid,
            pid_start: rec.pid_start,
            cgroup: rec.cgroup.clone(),
            started,
            queued_at: Instant::now(),
            ending: false,
            killed_by: None,
            reason: match phase {
                Phase::Preempted => Some("preempted".into()),
                Phase::Suspended => Some("suspended".into()),
                _ => None,
            },
            watch: None,
            waiter: None,
            reconnect_by: None,
            mem_usage: 0,
            mem_growth: 0.0,
            mem_at: None,
            mem_frozen: false,
            footprint: 0,
            thawed_at: None,
            throttled: false,
            // Time queued before a restart, from the record.
            prof: JobProf::with_queued(
                rec.started_ms
                    .map(|s| (s - rec.submitted_ms).max(0))
                    .unwrap_or(0),
            ),
            held: false,
            ended_by: None,
            end_waiters: Vec::new(),
            recheck_pending: false,
            recheck_delay: Duration::ZERO,
        }
    }

    /// Keep a populated job cgroup the store did not know, with the CPUs its cpuset holds.
    fn adopt(&mut self, name: String) -> Result<(), String> {
        let cpus = self.driver.job_cpus(&name).unwrap_or_default();
        let id_text = name.strip_prefix("job-").unwrap_or(&name);
        let Ok(id) = JobId::new(id_text) else {
            warn!(cgroup = %name, "populated cgroup with an unusable name left alone");
            return Ok(());
        };
        let mems = self.alloc.topology().mems_for(&cpus);
        let rec = JobRecord {
            seq: 0,
            job_id: id.to_string(),
            name: "(adopted)".into(),
            uid: 0,
            gid: 0,
            user: "?".into(),
            ncpus: cpus.len() as u32,
            cpus,
            mems,
            mem_limit: None,
            pid: None,
            pid_start: None,
            cgroup: name,
            argv: vec![],
            state: StoredState::Running,
            submitted_ms: now_ms(),
            started_ms: Some(now_ms()),
            ended_ms: None,
            end_reason: None,
            priority: sched::MAX_PRIORITY,
            placement: "any".into(),
            exclusive: false,
            role: "primary".into(),
        };
        let seq = self.store.insert_job(&rec).map_err(|e| e.to_string())?;
        warn!(job = %id, cpus = %cpus, "adopted a populated job cgroup the store did not know");
        let rec = JobRecord { seq, ..rec };
        // Adopted jobs get the top priority: nobody may preempt work pjw knows nothing about.
        let job = self.job_from_record(&rec, id, Phase::Primary, cpus, Some(Instant::now()));
        self.jobs.insert(seq, job);
        self.track(seq, false);
        Ok(())
    }

    // ---- process events ------------------------------------------------------------------

    fn proc_events(&mut self, msg: ProcMsg) {
        match msg {
            ProcMsg::Events(events) => {
                for ev in &events {
                    self.note_exit(ev);
                    match self.procs.apply(ev) {
                        Some(Unknown::Exec { pid, tgid }) => self.on_unknown_exec(pid, tgid),
                        Some(Unknown::Fork { parent, child }) => {
                            self.on_unknown_fork(parent, child)
                        }
                        Some(Unknown::EarlyFork { job, child }) => self.on_early_fork(job, child),
                        None => {}
                    }
                }
            }
            ProcMsg::Overrun => {
                self.reseed_procs();
                // Events were lost: every process is looked at once more by the next sweep.
                self.scanner.reset();
            }
        }
    }

    /// A process outside every job called exec: adopt it if it belongs to a registered job.
    fn on_unknown_exec(&mut self, _pid: u32, tgid: u32) {
        if self.adopting() {
            self.examine(tgid, "exec");
        }
    }

    /// Re-learn every started job's processes from its `cgroup.procs`.
    fn reseed_procs(&mut self) {
        for j in self.jobs.values().filter(|j| j.started.is_some()) {
            match self.driver.procs(&j.cgroup) {
                Ok(pids) => self.procs.reseed(j.seq, &pids),
                Err(e) => debug!(job = %j.id, error = %e, "cannot list job processes"),
            }
        }
    }

    /// Let exclusive jobs be cpuset partitions of type `kind` (the parent is one already).
    pub fn enable_partitions(&mut self, kind: pjw_cgroup::Partition) {
        self.partition = Some(kind);
    }

    /// Process and thread counts of a running job.
    pub fn proc_counts(&self, seq: i64) -> Option<ProcCounts> {
        self.procs.counts(seq)
    }

    // ---- status --------------------------------------------------------------------------

    /// The node's state for `pjw status`: running jobs, then the queue in order.
    pub fn status(&self) -> StatusReport {
        let info = |j: &Job| {
            let (procs, threads) = if j.started.is_some() {
                (
                    self.driver
                        .procs(&j.cgroup)
                        .map(|p| p.len() as u32)
                        .unwrap_or(0),
                    self.driver
                        .thread_count(&j.cgroup)
                        .map(|t| t as u32)
                        .unwrap_or(0),
                )
            } else {
                (0, 0)
            };
            JobInfo {
                id: j.id.to_string(),
                name: j.name.clone(),
                user: j.user.clone(),
                uid: j.uid,
                cpus: j.cpus,
                mems: if j.cpus.is_empty() {
                    CpuSet::new()
                } else {
                    j.mems
                },
                ncpus: j.req.ncpus as u32,
                mem: j.mem,
                procs,
                threads,
                state: j.state(),
                reason: if j.phase == Phase::Queued {
                    Some(self.wait_reason(j))
                } else if j.mem_frozen {
                    Some("frozen by the memory governor (memory pressure)".into())
                } else {
                    j.reason.clone()
                },
                priority: j.req.priority,
                age_secs: j.started.unwrap_or(j.queued_at).elapsed().as_secs(),
                pid: j.pid,
                // Two small cgroup reads per started job, like procs and threads above: fresher
                // than the sampler's last sample, so `pjw top` can refresh every second.
                cpu_usec: j
                    .started
                    .and_then(|_| self.driver.cpu_time(&j.cgroup).ok())
                    .map(|c| c.user_usec + c.system_usec),
                mem_bytes: j
                    .started
                    .and_then(|_| self.driver.memory_usage(&j.cgroup).ok()),
                wlm: j.wlm.clone(),
            }
        };
        let mut jobs: Vec<JobInfo> = self
            .jobs
            .values()
            .filter(|j| j.phase != Phase::Queued)
            .map(info)
            .collect();
        jobs.extend(
            self.queue_order()
                .iter()
                .filter_map(|s| self.jobs.get(s))
                .map(info),
        );
        StatusReport {
            node: self.node.clone(),
            total_cpus: self.pool.len() as u32,
            cpus: self.pool,
            free_cpus: self.free(),
            vcpus: self.policy.vcpus as u32,
            jobs,
            cgroup: self.driver.describe(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    // ---- memory governor -----------------------------------------------------------------

    /// Sample memory and PSI, then freeze or thaw what the governor says.
    fn govern(&mut self) {
        let Some(cfg) = self.governor else { return };
        let now = Instant::now();
        let cooldown = Duration::from_millis(cfg.thaw_cooldown_ms as u64);
        let mut jobs = Vec::new();
        for j in self.jobs.values_mut() {
            let runs = matches!(j.phase, Phase::Primary | Phase::Backfill);
            if j.started.is_none() || j.ending || !runs {
                continue;
            }
            let Ok(usage) = self.driver.memory_usage(&j.cgroup) else {
                continue;
            };
            if let Some(at) = j.mem_at {
                let dt = now.duration_since(at).as_secs_f64();
                if dt > 0.0 && !j.mem_frozen {
                    let rate = (usage as f64 - j.mem_usage as f64) / dt;
                    j.mem_growth = 0.5 * j.mem_growth + 0.5 * rate;
                }
            }
            j.mem_usage = usage;
            j.mem_at = Some(now);
            // Long after a thaw its pages are back: count what it uses, not what it used.
            if !j.mem_frozen
                && j.thawed_at
                    .is_some_and(|t| now.duration_since(t) > 5 * cooldown)
            {
                j.footprint = 0;
            }
            jobs.push(MemJob {
                key: j.seq,
                priority: j.req.priority,
                submitted_ms: j.req.submitted_ms,
                usage,
                growth: if j.mem_frozen { 0.0 } else { j.mem_growth },
                frozen: j.mem_frozen,
                throttled: j.throttled,
                footprint: j.footprint,
            });
        }
        let node = std::fs::read_to_string(self.cfg.proc_root.join("pressure/memory"))
            .ok()
            .and_then(|t| pjw_kernelfs::psi::parse(&t).ok());
        let part = self.driver.memory_pressure(None);
        // The worst job, too: one job stalling on memory is pressure even when the node is calm.
        let worst_job = self
            .jobs
            .values()
            .filter(|j| j.started.is_some() && !j.ending && !j.mem_frozen)
            .filter_map(|j| self.driver.memory_pressure(Some(&j.cgroup)))
            .fold(None, |acc: Option<pjw_kernelfs::psi::Psi>, p| match acc {
                Some(a) if a.some.avg10 >= p.some.avg10 => Some(a),
                _ => Some(p),
            });
        let available = std::fs::read_to_string(self.cfg.proc_root.join("meminfo"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("MemAvailable:")
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                })
            })
            .map(|kb| kb * 1024);
        let swap_in = std::fs::read_to_string(self.cfg.proc_root.join("vmstat"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("pswpin ")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
            });
        let swap_in_rate = match (swap_in, self.last_swap_in) {
            (Some(now_count), Some((then, at))) => {
                let dt = now.duration_since(at).as_secs_f64();
                if dt > 0.0 {
                    now_count.saturating_sub(then) as f64 / dt
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        self.last_swap_in = swap_in.map(|c| (c, now));
        let some =
            |p: &Option<pjw_kernelfs::psi::Psi>| p.as_ref().map(|p| p.some.avg10).unwrap_or(0.0);
        let full = |p: &Option<pjw_kernelfs::psi::Psi>| {
            p.as_ref()
                .and_then(|p| p.full)
                .map(|f| f.avg10)
                .unwrap_or(0.0)
        };
        let snap = MemSnapshot {
            now_ms: now_ms(),
            psi_some: some(&node).max(some(&part)).max(some(&worst_job)),
            psi_full: full(&node).max(full(&part)).max(full(&worst_job)),
            available,
            swap_in_rate,
            last_thaw_ms: self.last_thaw_ms,
            thawing: self
                .jobs
                .values()
                .filter(|j| j.thawed_at.is_some_and(|t| t.elapsed() < cooldown))
                .count(),
            jobs,
        };
        let mut thawed = false;
        for a in governor::govern(&cfg, &snap) {
            match a {
                MemAction::Throttle { key, high } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    match self.driver.set_memory_high(&j.cgroup, Some(high)) {
                        Ok(()) => {
                            self.metrics
                                .governor_action(crate::metrics::GovernorKind::throttle);
                            j.throttled = true;
                            info!(job = %j.id, user = %j.user, high, growth = j.mem_growth as i64, "memory pressure: job throttled");
                        }
                        Err(e) => warn!(job = %j.id, error = %e, "cannot throttle job"),
                    }
                }
                MemAction::Unthrottle { key } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    if self.driver.set_memory_high(&j.cgroup, None).is_ok() {
                        self.metrics
                            .governor_action(crate::metrics::GovernorKind::unthrottle);
                        j.throttled = false;
                        info!(job = %j.id, "memory pressure gone: throttle lifted");
                    }
                }
                MemAction::Freeze { key } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    match self.driver.freeze(&j.cgroup, true) {
                        Ok(()) => {
                            self.metrics
                                .governor_action(crate::metrics::GovernorKind::freeze);
                            j.mem_frozen = true;
                            let predicted =
                                j.mem_usage as f64 + j.mem_growth.max(0.0) * cfg.prediction_secs;
                            j.footprint = (predicted as u64).max(j.footprint);
                            info!(
                                job = %j.id, user = %j.user, usage = j.mem_usage, growth = j.mem_growth as i64,
                                psi_some = snap.psi_some, "memory pressure: job frozen"
                            );
                        }
                        Err(e) => warn!(job = %j.id, error = %e, "cannot freeze job"),
                    }
                }
                MemAction::Thaw { key } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    match self.driver.freeze(&j.cgroup, false) {
                        Ok(()) => {
                            self.metrics
                                .governor_action(crate::metrics::GovernorKind::thaw);
                            j.mem_frozen = false;
                            j.thawed_at = Some(now);
                            j.mem_growth = 0.0;
                            self.last_thaw_ms = Some(now_ms());
                            thawed = true;
                            info!(job = %j.id, user = %j.user, footprint = j.footprint, "memory is free again: job thawed");
                        }
                        Err(e) => warn!(job = %j.id, error = %e, "cannot thaw job"),
                    }
                }
            }
        }
        if thawed && !self.jobs.values().any(|j| j.mem_frozen) {
            // Memory is free again: held-back jobs may start.
            self.replan();
        }
    }

    /// Tell every queued client the daemon is stopping (they reconnect and are served after
    /// the restart; their place is kept in the store). Running jobs keep running; with none
    /// left, the parent cgroups are removed so a stopped daemon leaves no empty cgroups behind.
    pub fn shutdown(&mut self) {
        for j in self.jobs.values_mut() {
            if let Some(w) = j.waiter.take() {
                let _ = w
                    .reply
                    .send(err(ErrorCode::ShuttingDown, "the pjw daemon is stopping"));
            }
        }
        if self.jobs.values().all(|j| j.started.is_none()) {
            if let Err(e) = self.driver.remove_parent_if_empty() {
                warn!(error = %e, "cannot remove the parent cgroups");
            }
        }
    }

    /// The state database (for logs).
    pub fn state_path(&self) -> PathBuf {
        self.store.path().to_path_buf()
    }
}

/// Wait for the process behind `fd` to exit, then report it.
fn spawn_pidfd_watch(fd: OwnedFd, seq: i64, tx: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        wait_pidfd(fd, seq).await;
        let _ = tx.send(Event::MainExited { seq });
    });
}

/// Wait until the process behind `fd` exits: on the reactor, or — when the fd cannot be
/// registered (out of memory) — by looking at a duplicate every half second. An error is never
/// taken for "exited".
async fn wait_pidfd(fd: OwnedFd, seq: i64) {
    let spare = fd.try_clone().ok();
    // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it is a valid open descriptor
    // that nobody else can close or replace while the AsyncFd owns it.
    match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
        Ok(afd) => {
            let _ = afd.readable().await;
        }
        Err(e) => {
            warn!(seq, error = %e, "cannot register the pidfd; polling it instead");
            let Some(fd) = spare else {
                // Not even a duplicate: fall back to the cgroup (the job ends when it empties).
                warn!(
                    seq,
                    "no pidfd to poll; the job ends when its cgroup empties"
                );
                std::future::pending::<()>().await;
                return;
            };
            loop {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                if matches!(rustix::event::poll(&mut fds, 0), Ok(n) if n > 0) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// `pidfd_open` failed for a reason other than "no such process" (EMFILE, ENOMEM): try again
/// with backoff until it works or the process is gone; a pid reused meanwhile (another start
/// time) means the main process is gone.
fn spawn_pidfd_retry(
    pid: u32,
    start: Option<u64>,
    proc_root: std::path::PathBuf,
    seq: i64,
    tx: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(100);
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
            match os::pidfd_open(pid) {
                Ok(fd) => {
                    if start.is_some() && os::start_time(&proc_root, pid) != start {
                        break; // the pid now names another process
                    }
                    wait_pidfd(fd, seq).await;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => break,
                Err(e) => debug!(seq, pid, error = %e, "pidfd_open failed again"),
            }
        }
        let _ = tx.send(Event::MainExited { seq });
    });
}
