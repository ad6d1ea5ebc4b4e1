//! Admission: checking a `run` request, making its job id and owner, recording it as queued
//! (the one path a manager's `register` shares: [`Engine::enqueue`]),
//! and telling the client its place and why it waits.

use pjw_core::io_limits::JobIo;
use pjw_core::sched::Phase;
use pjw_core::thread_bind::BindMode;
use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_core::{CpuSet, GpuSet, JobId};
use pjw_proto::{ErrorCode, Response, RunRequest};
use pjw_store::{JobRecord, StoredState, SubmitRecord};
use tokio::sync::mpsc;
use tracing::{error, info};

use super::store_writes::OnFail;
use super::{
    cgroup_name, err, refuse, sched_placement, Cred, Engine, Job, Refusal, Starter, Waiter, Who,
};
use crate::os;

/// Whether `req` claims its namespaced id from a manager's environment (`pjw run --from-env`,
/// which sends the manager's label `ns:…` beside the id) for a manager whose wrapper runs as
/// the job's user.
fn claimed_from_env(req: &RunRequest, ns: &str) -> bool {
    pjw_core::jobid::USER_RUN_MANAGERS.contains(&ns)
        && req
            .wlm
            .as_deref()
            .and_then(|w| w.split_once(':'))
            .is_some_and(|(m, _)| m == ns)
}

/// The owner: the caller, or (root only) the user it names.
fn owner_of(cred: &Cred, who: &Who, req: &RunRequest) -> Result<(u32, u32, String), Refusal> {
    Ok(match &req.user {
        None => (cred.uid, cred.gid, who.name.clone()),
        Some(name) => match who.named {
            None => return Err(refuse(ErrorCode::Invalid, format!("no such user: {name}"))),
            Some((uid, _)) if cred.uid != 0 && uid != cred.uid => {
                return Err(refuse(
                    ErrorCode::Denied,
                    format!(
                        "only root may run a job as another user ({name}); you are {}",
                        who.name
                    ),
                ));
            }
            Some((uid, gid)) => (uid, gid, name.clone()),
        },
    })
}

impl Engine {
    pub(super) fn submit(
        &mut self,
        conn: u64,
        cred: Cred,
        who: &Who,
        req: RunRequest,
        reply: mpsc::UnboundedSender<Response>,
    ) {
        // A caller inside a job runs inside it, as a step (engine/steps.rs): never a new job.
        if self.submit_step(&cred, who, &req, &reply) {
            return;
        }
        if self.retell_started(&cred, &req, &reply) {
            return;
        }
        let pid_start = os::start_time(&self.cfg.proc_root, cred.pid);
        let Some(reply) = self.rejoin_queued(conn, &cred, pid_start, req.tasks, reply) else {
            return;
        };
        let admitted = self
            .validate(&cred, who, &req)
            .and_then(|()| self.time_limit_for(&cred, who, &req))
            .and_then(|limit| {
                let (id, number) = self.job_id_of(&req)?;
                let (uid, gid, user) = owner_of(&cred, who, &req)?;
                Ok((self.id_for_owner(id, uid)?, number, uid, gid, user, limit))
            });
        let (id, number, uid, gid, user, limit) = match admitted {
            Ok(a) => a,
            Err((code, message)) => {
                let _ = reply.send(err(code, message));
                return;
            }
        };
        let (rec, starter, sides) = self.new_job_rows(
            &cred,
            &req,
            &id,
            number,
            (uid, gid, user),
            (pid_start, limit),
        );
        let Some(seq) = self.enqueue(rec, id, starter, sides, conn, reply) else {
            return;
        };
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.tasks = req.tasks;
        }
        let job = &self.jobs[&seq];
        if job.starter.client_uid != job.uid || job.starter.wlm.is_some() {
            info!(job = %job.id, user = %job.user, wlm = job.starter.wlm.as_deref().unwrap_or(""), client_uid = job.starter.client_uid, "job submitted by a job starter");
        }
        self.replan();
        self.tell_queued(seq);
        // Admission said wait: the job waits in its own cgroups (decision (cm)).
        self.preplace(seq);
    }

    /// A client whose process is already a live job's main process reconnected after a
    /// daemon crash between being moved and being told: tell it again. True: told.
    fn retell_started(
        &mut self,
        cred: &Cred,
        req: &RunRequest,
        reply: &mpsc::UnboundedSender<Response>,
    ) -> bool {
        if let Some(j) = self.jobs.values().find(|j| {
            j.started.is_some()
                && j.pid == Some(cred.pid)
                && j.starter.client_uid == cred.uid
                && !j.end.ending
        }) {
            info!(job = %j.id, pid = cred.pid, "client reconnected; job already running");
            let seq = j.seq;
            // Its tasks were not stored: the client sends them again.
            self.jobs.get_mut(&seq).expect("found above").tasks = req.tasks;
            let j = &self.jobs[&seq];
            let _ = reply.send(Response::Started {
                job: j.id.to_string(),
                cpus: j.cpus,
                mems: j.mems,
                backfill: j.phase == Phase::Backfill,
                tmp: j.tmp_reply(),
                shm: j.shm_reply(&self.cfg.ipc, self.mem_limit),
                env: Engine::gpu_env_of(&self.gpus, self.gpus_fenced, j),
                env_defaults: Engine::thread_env_of(&self.cfg, self.alloc.topology(), j),
            });
            if let Some(j) = self.jobs.get_mut(&seq) {
                j.steps.main_told = true;
            }
            return true;
        }
        false
    }

    /// A queued client reconnecting after a restart takes its place back. None: it did (the
    /// reply went to its job); else the reply, given back.
    fn rejoin_queued(
        &mut self,
        conn: u64,
        cred: &Cred,
        pid_start: Option<u64>,
        tasks: Option<u32>,
        reply: mpsc::UnboundedSender<Response>,
    ) -> Option<mpsc::UnboundedSender<Response>> {
        if let Some(j) = self.jobs.values_mut().find(|j| {
            j.started.is_none()
                && j.client.waiter.is_none()
                && j.pid == Some(cred.pid)
                && j.pid_start == pid_start
                && j.starter.client_uid == cred.uid
        }) {
            info!(job = %j.id, pid = cred.pid, "queued client reconnected; place kept");
            j.client.waiter = Some(Waiter { conn, reply });
            j.client.reconnect_by = None;
            j.tasks = tasks;
            let seq = j.seq;
            self.replan();
            self.tell_queued(seq);
            return None;
        }
        Some(reply)
    }

    /// The new job's id (given, or generated: then with the number it took).
    fn job_id_of(&mut self, req: &RunRequest) -> Result<(JobId, Option<u64>), Refusal> {
        let mut number = None;
        let id = match &req.job_id {
            Some(text) => {
                match JobId::new(text) {
                    Ok(id) => match id.namespace() {
                        None => id,
                        // LSF, HTCondor, PBS: the user's own wrapper claims the manager's id.
                        Some(ns) if claimed_from_env(req, ns) => {
                            match JobId::manager_claim(ns, id.local()) {
                                Ok(id) => id,
                                Err(e) => return Err(refuse(ErrorCode::Denied, e.to_string())),
                            }
                        }
                        // Slurm's, Grid Engine's: made by `pjw job register` (root) only.
                        Some(ns) => {
                            let by = if pjw_core::jobid::USER_RUN_MANAGERS.contains(&ns) {
                                format!("`pjw run --from-env {ns}`")
                            } else {
                                "`pjw job register`".to_string()
                            };
                            return Err(refuse(
                            ErrorCode::Denied,
                            format!("job id {id} is in the {ns} namespace: only {by} makes ids there"),
                        ));
                        }
                    },
                    Err(e) => return Err(refuse(ErrorCode::Invalid, e.to_string())),
                }
            }
            None => match self.generate_id() {
                Ok((id, n)) => {
                    number = Some(n);
                    id
                }
                Err(e) => return Err(refuse(ErrorCode::Internal, e)),
            },
        };
        Ok((id, number))
    }

    /// A manager's id that another owner's live job holds (claimed first, by mistake or to
    /// squat it) is made this owner's: the job runs all the same. Refused: an id a live job
    /// already holds.
    fn id_for_owner(&self, id: JobId, uid: u32) -> Result<JobId, Refusal> {
        let id = match self.jobs.values().find(|j| j.id == id) {
            Some(j) if id.namespace().is_some() && j.uid != uid => {
                let own = id.for_owner(uid);
                info!(job = %own, claimed = %id, held_by = %j.user, "a manager's job id another user holds: this job takes its owner's form");
                own
            }
            _ => id,
        };
        if self.jobs.values().any(|j| j.id == id) {
            return Err(refuse(
                ErrorCode::Conflict,
                format!("job id {id} is already in use by a live job"),
            ));
        }
        Ok(id)
    }

    /// The queued job's row, its starter and its side rows (with its time limit as the node's
    /// rules gave it).
    fn new_job_rows(
        &self,
        cred: &Cred,
        req: &RunRequest,
        id: &JobId,
        number: Option<u64>,
        (uid, gid, user): (u32, u32, String),
        (pid_start, time_limit): (Option<u64>, Option<(TimeLimit, LimitSource)>),
    ) -> (JobRecord, Starter, Sides) {
        let tmp_size = req.tmp.or(self.cfg.tmp).filter(|s| *s > 0);
        let name = super::steps::run_name(req, "job");
        let submitted_ms = self.clock.now_ms();
        let priority = req.priority.unwrap_or(self.cfg.default_priority);
        let cgroup = cgroup_name(id);
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
            argv: pjw_core::text::kept_argv(&req.argv, pjw_core::text::ARGV_KEPT_BYTES),
            state: StoredState::Queued,
            submitted_ms,
            started_ms: None,
            ended_ms: None,
            end_reason: None,
            priority,
            placement: sched_placement(req.placement),
            exclusive: req.exclusive,
            role: pjw_store::StoredRole::Primary,
        };
        let starter = Starter {
            client_uid: cred.uid,
            wlm: req.wlm.clone(),
            tmp_size,
            held: false,
            tmpdir: None,
        };
        let sides = Sides {
            number,
            gpus: req.gpus,
            pinned: GpuSet::new(),
            io: self.io_of(cred.uid, req).unwrap_or_default(), // checked in validate
            bind: req.bind,
            time_limit, // the node's rules applied: `time_limit_for`
        };
        (rec, starter, sides)
    }

    /// Record a new job as queued and put it in the queue with its waiting client: the one path
    /// of `run` and of a manager's `register`. Its row, the job number its id took and its side
    /// rows (starter details, GPUs, I/O, binding, for a job that has any) are one transaction: a
    /// store that refuses it is an error to the client and no job, and leaves nothing written.
    /// The job's seq, once queued.
    pub(super) fn enqueue(
        &mut self,
        rec: JobRecord,
        id: JobId,
        st: Starter,
        sides: Sides,
        conn: u64,
        reply: mpsc::UnboundedSender<Response>,
    ) -> Option<i64> {
        let mut job = self.job_from_record(&rec, id, Phase::Queued, CpuSet::new(), None);
        job.starter = st;
        let starter = (job.starter.client_uid != job.uid
            || job.starter.wlm.is_some()
            || job.starter.tmp_size.is_some())
        .then(|| job.starter_record());
        // A manager's choice of GPUs is the request: as many as it chose.
        let ngpus = if sides.pinned.is_empty() {
            sides.gpus
        } else {
            sides.pinned.len() as u32
        };
        let record = SubmitRecord {
            job: rec,
            number: sides.number,
            starter,
            gpus: (ngpus > 0).then_some((ngpus, sides.pinned)),
            io: (!sides.io.is_empty()).then(|| sides.io.clone()),
            bind: sides.bind,
            time_limit: sides.time_limit,
        };
        let seq = match self.store_write(0, "submit_job", OnFail::Refuse, |s| s.submit_job(&record))
        {
            Ok(s) => s,
            Err(e) => {
                // A generated number stays used (the next job takes the one after it): read
                // again, it could be the number of a row the store still holds live, and every
                // later submission would be refused on it. Gaps are harmless.
                error!(job = %job.id, error = %e, "cannot record job");
                let _ = reply.send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                return None;
            }
        };
        job.seq = seq;
        job.req.ngpus = ngpus as usize;
        job.req.pinned = sides.pinned;
        job.io = sides.io;
        job.bind = sides.bind;
        job.req.time_limit = sides.time_limit.map(|(limit, _)| limit);
        job.time_source = sides
            .time_limit
            .map(|(_, source)| source)
            .unwrap_or_default();
        job.client.waiter = Some(Waiter { conn, reply });
        self.jobs.insert(seq, job);
        Some(seq)
    }

    /// Say once that a job waits, with its place and why.
    pub(super) fn tell_queued(&self, seq: i64) {
        let Some(j) = self.jobs.get(&seq) else { return };
        if j.phase != Phase::Queued {
            return;
        }
        let Some(w) = &j.client.waiter else { return };
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

    pub(super) fn wait_reason(&self, j: &Job) -> String {
        if j.client.waiter.is_none() && j.started.is_none() {
            return "waiting for its client to reconnect".into();
        }
        if let Err(why) = self.memory_wait(j) {
            return why;
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

    /// The next free generated id and its number: the store's counter is read once, and the
    /// number is taken with the job's submission ([`SubmitRecord::number`]).
    pub(super) fn generate_id(&mut self) -> Result<(JobId, u64), String> {
        let mut n = match self.next_number {
            Some(n) => n,
            None => self.store.job_number().map_err(|e| e.to_string())?,
        };
        loop {
            let id = JobId::new(&n.to_string()).map_err(|e| e.to_string())?;
            self.next_number = Some(n + 1);
            if !self.jobs.values().any(|j| j.id == id) {
                return Ok((id, n));
            }
            n += 1;
        }
    }
}

/// What a new job asks for beside its row, recorded with it by [`Engine::enqueue`].
pub(super) struct Sides {
    /// The generated job number its id took; None: the id was given.
    pub number: Option<u64>,
    /// GPUs asked for (ignored when `pinned` names them).
    pub gpus: u32,
    /// The GPUs a manager chose.
    pub pinned: GpuSet,
    pub io: JobIo,
    pub bind: Option<BindMode>,
    /// How long it may run, and whether it asked for that (`--time`) or the node gave it.
    pub time_limit: Option<(TimeLimit, LimitSource)>,
}
