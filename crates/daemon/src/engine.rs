//! The engine: the one owner of the daemon's state.
//!
//! Connections, pidfd watchers and the inotify reader never touch state; they send [`Event`]s
//! down one channel and the engine handles them in order. That keeps every decision (who gets
//! which CPUs) serial and makes crash recovery a matter of rebuilding this one struct.
//!
//! A job's life: `Submit` → (queued) → started: stored as `starting`, cgroups created, the
//! client's process moved in, stored as `running`, a pidfd watcher armed, an inotify watch put on
//! its `cgroup.events` → `MainExited` (the pidfd fired): leftovers killed → `populated 0` seen
//! on `cgroup.events` → cgroups removed, stored as `ended`, CPUs free, the queue dispatched.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inotify::{WatchDescriptor, WatchMask, Watches};
use pjw_cgroup::{Driver, JobLimits};
use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::{CpuSet, JobId};
use pjw_proto::{ErrorCode, JobInfo, JobState, Response, RunRequest, StatusReport};
use pjw_store::{JobRecord, Store, StoredState};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::config::Config;
use crate::os;

/// Who is asking (from `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
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
    /// A `kill` request.
    Kill {
        cred: Cred,
        job: String,
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
}

/// A job holding CPUs.
#[derive(Debug)]
struct Job {
    seq: i64,
    id: JobId,
    name: String,
    uid: u32,
    user: String,
    ncpus: u32,
    cpus: CpuSet,
    mems: CpuSet,
    mem: Option<u64>,
    pid: Option<u32>,
    cgroup: String,
    started: Instant,
    ending: bool,
    /// Who killed it with `pjw kill`, for the record.
    killed_by: Option<String>,
    watch: Option<WatchDescriptor>,
}

/// A request waiting for CPUs.
#[derive(Debug)]
struct Waiting {
    conn: u64,
    cred: Cred,
    id: JobId,
    req: RunRequest,
    reply: mpsc::UnboundedSender<Response>,
    since: Instant,
    user: String,
}

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
    jobs: BTreeMap<i64, Job>,
    queue: VecDeque<Waiting>,
    watches: Option<Watches>,
    by_watch: HashMap<WatchDescriptor, i64>,
    tx: mpsc::UnboundedSender<Event>,
    node: String,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("jobs", &self.jobs.len())
            .field("queued", &self.queue.len())
            .finish()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn err(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

/// Name of a job's cgroup below the parent.
pub fn cgroup_name(id: &JobId) -> String {
    format!("job-{id}")
}

impl Engine {
    /// Build the engine. `watches` is the inotify handle whose events the caller turns into
    /// [`Event::CgroupChanged`]; None where there are no `cgroup.events` files.
    pub fn new(
        cfg: Config,
        driver: Driver,
        store: Store,
        alloc: Allocator,
        pool: CpuSet,
        watches: Option<Watches>,
        tx: mpsc::UnboundedSender<Event>,
    ) -> Engine {
        let node = os::hostname(&cfg.proc_root);
        Engine {
            cfg,
            driver,
            store,
            alloc,
            scratch: Scratch::new(),
            pool,
            jobs: BTreeMap::new(),
            queue: VecDeque::new(),
            watches,
            by_watch: HashMap::new(),
            tx,
            node,
        }
    }

    /// CPUs held by jobs.
    fn used(&self) -> CpuSet {
        self.jobs
            .values()
            .fold(CpuSet::new(), |acc, j| acc.union(&j.cpus))
    }

    fn free(&self) -> CpuSet {
        self.pool.difference(&self.used())
    }

    /// CPUs for a job of `n`, from the free ones, if they are there.
    fn allocate(&mut self, n: usize) -> Option<CpuSet> {
        let free = self.free();
        self.alloc.allocate_with(&mut self.scratch, &free, n)
    }

    /// Handle one event.
    pub fn handle(&mut self, ev: Event) {
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
            Event::Kill { cred, job, reply } => {
                let _ = reply.send(self.kill(cred, &job));
            }
            Event::ClientGone { conn } => {
                if let Some(pos) = self.queue.iter().position(|w| w.conn == conn) {
                    let w = self.queue.remove(pos);
                    if let Some(w) = w {
                        info!(job = %w.id, user = %w.user, "queued client left; job withdrawn");
                    }
                    self.dispatch();
                }
            }
            Event::MainExited { seq } => self.main_exited(seq),
            Event::CgroupChanged { wd } => {
                if let Some(seq) = self.by_watch.get(&wd).copied() {
                    self.check_empty(seq);
                }
            }
            Event::Recheck { seq } => self.check_empty(seq),
        }
    }

    // ---- submission and start ------------------------------------------------------------

    fn submit(
        &mut self,
        conn: u64,
        cred: Cred,
        req: RunRequest,
        reply: mpsc::UnboundedSender<Response>,
    ) {
        // A client whose process is already a live job's main process reconnected after a
        // daemon crash between being moved and being told: tell it again.
        if let Some(j) = self
            .jobs
            .values()
            .find(|j| j.pid == Some(cred.pid) && j.uid == cred.uid && !j.ending)
        {
            info!(job = %j.id, pid = cred.pid, "client reconnected; job already running");
            let _ = reply.send(Response::Started {
                job: j.id.to_string(),
                cpus: j.cpus,
                mems: j.mems,
            });
            return;
        }
        let total = self
            .pool
            .intersection(&self.alloc.topology().online())
            .len();
        if req.cpus == 0 {
            let _ = reply.send(err(ErrorCode::Invalid, "--cpus must be at least 1"));
            return;
        }
        if req.cpus as usize > total {
            let _ = reply.send(err(
                ErrorCode::Invalid,
                format!(
                    "--cpus {} is more than this node has for jobs ({total} cpus: {})",
                    req.cpus, self.pool
                ),
            ));
            return;
        }
        if req.mem == Some(0) {
            let _ = reply.send(err(ErrorCode::Invalid, "--mem must be more than 0"));
            return;
        }
        if req.argv.len() > pjw_proto::MAX_ARGS {
            let _ = reply.send(err(ErrorCode::Invalid, "too many arguments"));
            return;
        }
        let id = match &req.job_id {
            Some(text) => match JobId::new(text) {
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
        if self.id_in_use(&id) {
            let _ = reply.send(err(
                ErrorCode::Conflict,
                format!("job id {id} is already in use by a live job"),
            ));
            return;
        }
        let user = os::user_name(cred.uid);
        let w = Waiting {
            conn,
            cred,
            id,
            req,
            reply,
            since: Instant::now(),
            user,
        };
        if self.queue.is_empty() {
            if let Some(cpus) = self.allocate(w.req.cpus as usize) {
                self.start(w, cpus);
                return;
            }
        }
        let position = self.queue.len() as u32 + 1;
        let reason = format!(
            "waiting for {} cpus ({} of {} free)",
            w.req.cpus,
            self.free().len(),
            self.pool.len()
        );
        info!(job = %w.id, user = %w.user, cpus = w.req.cpus, position, "job queued");
        let _ = w.reply.send(Response::Queued {
            job: w.id.to_string(),
            position,
            reason,
        });
        self.queue.push_back(w);
    }

    fn id_in_use(&self, id: &JobId) -> bool {
        self.jobs.values().any(|j| &j.id == id) || self.queue.iter().any(|w| &w.id == id)
    }

    fn generate_id(&mut self) -> Result<JobId, String> {
        loop {
            let n = self.store.next_job_number().map_err(|e| e.to_string())?;
            let id = JobId::new(&n.to_string()).map_err(|e| e.to_string())?;
            if !self.id_in_use(&id) {
                return Ok(id);
            }
        }
    }

    /// Start queued jobs in FIFO order while the head fits.
    fn dispatch(&mut self) {
        while let Some(head) = self.queue.front() {
            let Some(cpus) = self.allocate(head.req.cpus as usize) else {
                break;
            };
            let Some(w) = self.queue.pop_front() else {
                break;
            };
            if w.reply.is_closed() {
                continue;
            }
            self.start(w, cpus);
        }
    }

    fn start(&mut self, w: Waiting, cpus: CpuSet) {
        let pid = w.cred.pid;
        // The process must still be the caller's.
        if os::process_uid(&self.cfg.proc_root, pid) != Some(w.cred.uid) {
            warn!(job = %w.id, pid, "client process vanished before start");
            let _ = w
                .reply
                .send(err(ErrorCode::Invalid, "client process is gone"));
            return;
        }
        let mems = self.alloc.topology().mems_for(&cpus);
        let cgroup = cgroup_name(&w.id);
        let name = w
            .req
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                w.req
                    .argv
                    .first()
                    .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                    .unwrap_or_else(|| "job".into())
            });
        let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        let rec = JobRecord {
            seq: 0,
            job_id: w.id.to_string(),
            name: name.clone(),
            uid: w.cred.uid,
            gid: w.cred.gid,
            user: w.user.clone(),
            ncpus: w.req.cpus,
            cpus,
            mems,
            mem_limit: w.req.mem,
            pid: Some(pid),
            pid_start: os::start_time(&self.cfg.proc_root, pid),
            cgroup: cgroup.clone(),
            argv: w.req.argv.clone(),
            state: StoredState::Starting,
            submitted_ms: now_ms() - w.since.elapsed().as_millis() as i64,
            started_ms: Some(now_ms()),
            ended_ms: None,
            end_reason: None,
        };
        // Durable first: after a crash from here on, recovery finds the job.
        let seq = match self.store.insert_job(&rec) {
            Ok(s) => s,
            Err(e) => {
                error!(job = %w.id, error = %e, "cannot record job");
                let _ = w
                    .reply
                    .send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                return;
            }
        };
        let limits = JobLimits {
            cpus,
            mems,
            memory_max: w.req.mem,
            pids_max: self.cfg.pids_max,
        };
        let placed = self
            .driver
            .create_job(&cgroup, &limits)
            .and_then(|_| self.driver.add_process(&cgroup, pid));
        if let Err(e) = placed {
            error!(job = %w.id, error = %e, "cannot place job in its cgroups");
            let _ = self.driver.remove_job(&cgroup);
            let _ = self
                .store
                .set_ended(seq, now_ms(), &format!("start failed: {e}"));
            let _ = w.reply.send(err(
                ErrorCode::Internal,
                format!("cannot set up the job's cgroups: {e}"),
            ));
            return;
        }
        if let Err(e) = self.store.set_running(seq) {
            warn!(job = %w.id, error = %e, "cannot mark job running in the store");
        }
        let job = Job {
            seq,
            id: w.id.clone(),
            name,
            uid: w.cred.uid,
            user: w.user.clone(),
            ncpus: w.req.cpus,
            cpus,
            mems,
            mem: w.req.mem,
            pid: Some(pid),
            cgroup,
            started: Instant::now(),
            ending: false,
            killed_by: None,
            watch: None,
        };
        info!(job = %job.id, user = %job.user, cpus = %cpus, mems = %mems, pid, waited_ms = w.since.elapsed().as_millis() as u64, "job started");
        let _ = w.reply.send(Response::Started {
            job: job.id.to_string(),
            cpus,
            mems,
        });
        self.track(job, true);
    }

    /// Watch a job: its main process (pidfd) and its cgroup (inotify on cgroup.events).
    fn track(&mut self, mut job: Job, main_alive: bool) {
        let seq = job.seq;
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
        let pid = job.pid;
        self.jobs.insert(seq, job);
        match (main_alive, pid) {
            (true, Some(pid)) => match os::pidfd_open(pid) {
                Ok(fd) => spawn_pidfd_watch(fd, seq, self.tx.clone()),
                Err(e) => {
                    debug!(seq, pid, error = %e, "pidfd_open failed; main process already gone");
                    self.main_exited(seq);
                }
            },
            (false, Some(_)) => self.main_exited(seq),
            // Adopted cgroup without a known main process: it ends when it empties.
            (_, None) => self.check_empty(seq),
        }
    }

    /// Kill a running job or withdraw a queued one; only its owner or root may.
    fn kill(&mut self, cred: Cred, job: &str) -> Response {
        if let Some(pos) = self.queue.iter().position(|w| w.id.as_str() == job) {
            if cred.uid != 0 && cred.uid != self.queue[pos].cred.uid {
                return err(
                    ErrorCode::Denied,
                    format!("job {job} belongs to {}", self.queue[pos].user),
                );
            }
            if let Some(w) = self.queue.remove(pos) {
                info!(job = %w.id, user = %w.user, by = cred.uid, "queued job withdrawn");
                let _ = w.reply.send(err(
                    ErrorCode::Invalid,
                    format!("job {job} was killed while queued"),
                ));
            }
            self.dispatch();
            return Response::Done {
                message: format!("job {job} withdrawn from the queue"),
            };
        }
        let Some(seq) = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job)
            .map(|j| j.seq)
        else {
            return err(ErrorCode::NotFound, format!("no job {job} on this node"));
        };
        let by = os::user_name(cred.uid);
        let Some(j) = self.jobs.get_mut(&seq) else {
            return err(ErrorCode::NotFound, format!("no job {job} on this node"));
        };
        if cred.uid != 0 && cred.uid != j.uid {
            return err(
                ErrorCode::Denied,
                format!("job {job} belongs to {}", j.user),
            );
        }
        info!(job = %j.id, user = %j.user, by = %by, "killing job");
        j.killed_by = Some(by);
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
    fn check_empty(&mut self, seq: i64) {
        let Some(job) = self.jobs.get(&seq) else {
            return;
        };
        let populated = self.driver.is_populated(&job.cgroup).unwrap_or(false);
        if !populated {
            let reason = match &job.killed_by {
                Some(by) => format!("killed by {by}"),
                None => "exited".to_string(),
            };
            self.finish(seq, &reason);
        } else if job.watch.is_none() {
            let tx = self.tx.clone();
            let delay = if job.ending {
                Duration::from_millis(20)
            } else {
                Duration::from_secs(1)
            };
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
        if let Some(wd) = job.watch {
            self.by_watch.remove(&wd);
            if let Some(w) = self.watches.as_mut() {
                let _ = w.remove(wd);
            }
        }
        if let Err(e) = self.driver.remove_job(&job.cgroup) {
            warn!(job = %job.id, error = %e, "cannot remove job cgroups");
        }
        if let Err(e) = self.store.set_ended(seq, now_ms(), reason) {
            warn!(job = %job.id, error = %e, "cannot mark job ended in the store");
        }
        info!(job = %job.id, user = %job.user, cpus = %job.cpus, runtime_ms = job.started.elapsed().as_millis() as u64, reason, "job ended");
        self.dispatch();
    }

    // ---- recovery ------------------------------------------------------------------------

    /// Rebuild the state after a (re)start from the store and the cgroup trees. Jobs that ended
    /// meanwhile are closed, leftover empty cgroups removed, and populated cgroups the store does
    /// not know are kept (with the CPUs their cpuset holds) until they empty: no CPU is ever
    /// given to two jobs.
    pub fn recover(&mut self) -> Result<(), String> {
        let live = self.store.live_jobs().map_err(|e| e.to_string())?;
        let mut known = Vec::new();
        for rec in live {
            known.push(rec.cgroup.clone());
            let populated = self.driver.is_populated(&rec.cgroup).unwrap_or(false);
            if !populated {
                let _ = self.driver.remove_job(&rec.cgroup);
                let reason = if rec.state == StoredState::Starting {
                    "start interrupted"
                } else {
                    "ended while daemon was down"
                };
                let _ = self.store.set_ended(rec.seq, now_ms(), reason);
                info!(job = %rec.job_id, reason, "recovered job had ended");
                continue;
            }
            let cpus = match self.driver.job_cpus(&rec.cgroup) {
                Ok(c) if !c.is_empty() => {
                    if c != rec.cpus {
                        warn!(job = %rec.job_id, stored = %rec.cpus, cgroup = %c, "cpuset differs from the store; the cgroup wins");
                    }
                    c
                }
                _ => rec.cpus,
            };
            if rec.state == StoredState::Starting {
                let _ = self.store.set_running(rec.seq);
            }
            let Ok(id) = JobId::new(&rec.job_id) else {
                continue;
            };
            let main_alive = rec
                .pid
                .is_some_and(|p| os::process_alive(&self.cfg.proc_root, p, rec.pid_start));
            let started = Instant::now()
                .checked_sub(Duration::from_millis(
                    (now_ms() - rec.started_ms.unwrap_or(rec.submitted_ms)).max(0) as u64,
                ))
                .unwrap_or_else(Instant::now);
            let job = Job {
                seq: rec.seq,
                id,
                name: rec.name,
                uid: rec.uid,
                user: rec.user,
                ncpus: rec.ncpus,
                cpus,
                mems: rec.mems,
                mem: rec.mem_limit,
                pid: rec.pid,
                cgroup: rec.cgroup,
                started,
                ending: false,
                killed_by: None,
                watch: None,
            };
            info!(job = %job.id, user = %job.user, cpus = %job.cpus, main_alive, "recovered running job");
            self.track(job, main_alive);
        }
        // Cgroups below the parent that the store does not know.
        for name in self.driver.list_jobs().map_err(|e| e.to_string())? {
            if known.contains(&name) {
                continue;
            }
            if !self.driver.is_populated(&name).unwrap_or(false) {
                match self.driver.remove_job(&name) {
                    Ok(()) => info!(cgroup = %name, "removed empty leftover cgroup"),
                    Err(e) => warn!(cgroup = %name, error = %e, "cannot remove leftover cgroup"),
                }
                continue;
            }
            let cpus = self.driver.job_cpus(&name).unwrap_or_default();
            let id_text = name.strip_prefix("job-").unwrap_or(&name);
            let Ok(id) = JobId::new(id_text) else {
                warn!(cgroup = %name, "populated cgroup with an unusable name left alone");
                continue;
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
                cgroup: name.clone(),
                argv: vec![],
                state: StoredState::Starting,
                submitted_ms: now_ms(),
                started_ms: Some(now_ms()),
                ended_ms: None,
                end_reason: None,
            };
            let seq = self.store.insert_job(&rec).map_err(|e| e.to_string())?;
            let _ = self.store.set_running(seq);
            warn!(job = %id, cpus = %cpus, "adopted a populated job cgroup the store did not know");
            let job = Job {
                seq,
                id,
                name: rec.name,
                uid: 0,
                user: rec.user,
                ncpus: rec.ncpus,
                cpus,
                mems,
                mem: None,
                pid: None,
                cgroup: name,
                started: Instant::now(),
                ending: false,
                killed_by: None,
                watch: None,
            };
            self.track(job, false);
        }
        Ok(())
    }

    // ---- status --------------------------------------------------------------------------

    /// The node's state for `pjw status`.
    pub fn status(&self) -> StatusReport {
        let mut jobs = Vec::new();
        for j in self.jobs.values() {
            let procs = self
                .driver
                .procs(&j.cgroup)
                .map(|p| p.len() as u32)
                .unwrap_or(0);
            let threads = self
                .driver
                .thread_count(&j.cgroup)
                .map(|t| t as u32)
                .unwrap_or(0);
            jobs.push(JobInfo {
                id: j.id.to_string(),
                name: j.name.clone(),
                user: j.user.clone(),
                uid: j.uid,
                cpus: j.cpus,
                mems: j.mems,
                ncpus: j.ncpus,
                mem: j.mem,
                procs,
                threads,
                state: if j.ending {
                    JobState::Ending
                } else {
                    JobState::Running
                },
                age_secs: j.started.elapsed().as_secs(),
                pid: j.pid,
            });
        }
        for w in &self.queue {
            jobs.push(JobInfo {
                id: w.id.to_string(),
                name: w.req.name.clone().unwrap_or_else(|| {
                    w.req
                        .argv
                        .first()
                        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                        .unwrap_or_default()
                }),
                user: w.user.clone(),
                uid: w.cred.uid,
                cpus: CpuSet::new(),
                mems: CpuSet::new(),
                ncpus: w.req.cpus,
                mem: w.req.mem,
                procs: 0,
                threads: 0,
                state: JobState::Queued,
                age_secs: w.since.elapsed().as_secs(),
                pid: Some(w.cred.pid),
            });
        }
        StatusReport {
            node: self.node.clone(),
            total_cpus: self.pool.len() as u32,
            cpus: self.pool,
            free_cpus: self.free(),
            jobs,
            cgroup: self.driver.describe(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// Tell every queued client the daemon is stopping (they reconnect and are served after
    /// the restart). Running jobs keep running; with none left, the parent cgroups are removed
    /// so a stopped daemon leaves no empty cgroups behind.
    pub fn shutdown(&mut self) {
        for w in self.queue.drain(..) {
            let _ = w
                .reply
                .send(err(ErrorCode::ShuttingDown, "the pjw daemon is stopping"));
        }
        if self.jobs.is_empty() {
            if let Err(e) = self.driver.remove_parent_if_empty() {
                warn!(error = %e, "cannot remove the parent cgroups");
            }
        }
    }

    /// The state directory (for logs).
    pub fn state_path(&self) -> PathBuf {
        self.store.path().to_path_buf()
    }
}

/// Wait for the process behind `fd` to exit, then report it.
fn spawn_pidfd_watch(fd: OwnedFd, seq: i64, tx: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it is a valid open descriptor
        // that nobody else can close or replace while the AsyncFd owns it.
        let registered =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
        match registered {
            Ok(afd) => {
                let _ = afd.readable().await;
            }
            Err(e) => {
                warn!(seq, error = %e, "cannot register pidfd; treating main process as exited")
            }
        }
        let _ = tx.send(Event::MainExited { seq });
    });
}
