//! Steps: a `pjw run` from a process that is already inside a job runs inside that job.
//!
//! Which job a caller is in comes from facts it cannot forge: its pid (`SO_PEERCRED`) and that
//! pid's cgroup (`/proc/PID/cgroup`), looked up among this daemon's job cgroups — never from
//! anything in the request. Such a `run` never becomes a job of its own (it would leave its
//! job's CPUs, limits and end): it is a step of the job. It stays in the job's cgroups (so the
//! job's cpuset, memory limit, pids limit, device fence and freezer hold it, and the job's end
//! kills it); its CPUs are `k` of the job's, chosen by [`pjw_core::step::step_cpus`], which the
//! client makes its affinity before it execs; its number is in `PJW_STEP_ID`. The job lists its
//! running steps in `status`; their records go to the store when the job ends. See
//! docs/decisions.md (ba).

use std::time::Instant;

use pjw_core::sched::Phase;
use pjw_core::step::step_cpus;
use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, JobTmp, Response, RunRequest, StepInfo, StepReport};
use pjw_store::StepRecord;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::pidfd::wait_pidfd;
use super::{err, refuse, Cred, Engine, Event, Job, Refusal, Who};
use crate::os;

/// Steps a job keeps a record of after they ended, for the store (more are only counted).
const ENDED_KEPT: usize = 1024;

/// One step of a job.
#[derive(Debug)]
pub(super) struct Step {
    /// Its number in the job, from 0.
    pub(super) n: u32,
    pub(super) pid: u32,
    pub(super) uid: u32,
    pub(super) name: String,
    pub(super) cpus: CpuSet,
    pub(super) started: Instant,
    pub(super) started_ms: i64,
    /// When it ended (ms since the epoch) and its exit status, once known.
    pub(super) ended_ms: Option<i64>,
    pub(super) exit_status: Option<i32>,
}

impl Step {
    fn record(&self) -> StepRecord {
        StepRecord {
            step: self.n,
            name: self.name.clone(),
            uid: self.uid,
            cpus: self.cpus,
            pid: self.pid,
            started_ms: self.started_ms,
            ended_ms: self.ended_ms,
            exit_status: self.exit_status,
        }
    }
}

/// A job's steps.
#[derive(Debug, Default)]
pub(super) struct Steps {
    /// The next step's number.
    pub(super) next: u32,
    /// Running steps.
    pub(super) live: Vec<Step>,
    /// Ended steps, the first [`ENDED_KEPT`] of them, for the store at the job's end.
    pub(super) ended: Vec<Step>,
    /// This daemon told the job's main process `Started` (a later `run` from that process is
    /// a step; before, it is a client that lost a crashed daemon and asks again).
    pub(super) main_told: bool,
}

impl Steps {
    /// How many live steps one job may have: enough for one per CPU several times over; each
    /// holds a pidfd in the daemon.
    fn limit(job_cpus: usize) -> usize {
        64 + 8 * job_cpus
    }
}

impl Engine {
    /// A `run` from a process inside one of this daemon's jobs becomes a step of that job:
    /// answered here (true). False: the caller is outside every job (or is the job's main
    /// process asking again after a daemon restart) and the request is a job's.
    pub(super) fn submit_step(
        &mut self,
        cred: &Cred,
        who: &Who,
        req: &RunRequest,
        reply: &mpsc::UnboundedSender<Response>,
    ) -> bool {
        let seq = match self.job_of_caller(cred.pid) {
            Ok(None) => return false,
            Ok(Some(seq)) => seq,
            Err((code, message)) => {
                let _ = reply.send(err(code, message));
                return true;
            }
        };
        let j = &self.jobs[&seq];
        if self.asks_again(j, cred) {
            return false;
        }
        let cpus = match self.step_request(cred, who, req, j) {
            Ok(c) => c,
            Err((code, message)) => {
                info!(job = %j.id, pid = cred.pid, uid = cred.uid, reason = %message, "step refused");
                let _ = reply.send(err(code, message));
                return true;
            }
        };
        let fd = match os::pidfd_open(cred.pid) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = reply.send(err(
                    ErrorCode::Internal,
                    format!("cannot watch the calling process: {e}"),
                ));
                return true;
            }
        };
        let name = run_name(req, "step");
        let mems = self.alloc.topology().mems_for(&cpus);
        let now_ms = self.clock.now_ms();
        let Some(j) = self.jobs.get_mut(&seq) else {
            return true;
        };
        // A step's process that execs another `pjw run` (`pjw run -- pjw run -c 1 -- cmd`):
        // the earlier step became this one.
        while let Some(i) = j.steps.live.iter().position(|s| s.pid == cred.pid) {
            let mut old = j.steps.live.remove(i);
            old.ended_ms = Some(now_ms);
            info!(job = %j.id, step = old.n, pid = old.pid, "step ran pjw run again: ended, a new step follows");
            if j.steps.ended.len() < ENDED_KEPT {
                j.steps.ended.push(old);
            }
        }
        let n = j.steps.next;
        j.steps.next += 1;
        j.steps.live.push(Step {
            n,
            pid: cred.pid,
            uid: cred.uid,
            name: name.clone(),
            cpus,
            started: Instant::now(),
            started_ms: now_ms,
            ended_ms: None,
            exit_status: None,
        });
        let tx = self.tx.clone();
        tokio::spawn(async move {
            wait_pidfd(fd, seq).await;
            let _ = tx.send(Event::StepExited { seq, step: n });
        });
        let j = &self.jobs[&seq];
        info!(job = %j.id, user = %j.user, step = n, pid = cred.pid, uid = cred.uid, cpus = %cpus, name = %name, "step started");
        let mut env = Engine::gpu_env_of(&self.gpus, self.gpus_fenced, j);
        env.push(("PJW_STEP_ID".into(), n.to_string()));
        let _ = reply.send(Response::Started {
            job: j.id.to_string(),
            cpus,
            mems,
            backfill: j.phase == Phase::Backfill,
            // Already in the job's mount and IPC namespaces, or in the host's: never new ones.
            // An unprivileged job's daemon-mounted /tmp is named again for TMPDIR.
            tmp: j.tmp_reply().filter(|t| matches!(t, JobTmp::Dir { .. })),
            shm: None,
            env,
            env_defaults: self.step_thread_env(j, &cpus, req.tasks),
        });
        true
    }

    /// Whether `cred` is `j`'s main process asking again for the start this daemon has not
    /// told it (a client that lost a crashed daemon): only as the uid it asked with, and only
    /// while the job is not ending — what `retell_started` answers. Anything else from that
    /// process (a job starter's process after its `setuid`, which runs `pjw run` again after a
    /// restart; or a job being ended) is inside the job: a step or refused, never a new job
    /// that would move it out (review F1).
    fn asks_again(&self, j: &Job, cred: &Cred) -> bool {
        j.pid == Some(cred.pid)
            && !j.steps.main_told
            && cred.uid == j.starter.client_uid
            && !j.end.ending
    }

    /// The job the calling process `pid` is in, by its cgroup: None when it is in none of this
    /// daemon's jobs; an error when that cannot be told (its cgroups unreadable) or names a
    /// job cgroup this daemon does not know — never a job of its own then.
    pub(super) fn job_of_caller(&self, pid: u32) -> Result<Option<i64>, Refusal> {
        let lines = crate::caller::cgroups(&self.cfg.proc_root, pid).map_err(|e| {
            refuse(
                ErrorCode::Internal,
                format!("cannot tell which cgroups the calling process is in: {e}"),
            )
        })?;
        let Some(name) = lines.and_then(|l| self.driver.job_of(&l)) else {
            return Ok(None);
        };
        // A queued job's own client waits in its cgroups (decision (cm)): reconnecting after
        // a restart, it is that job's client, not a step.
        if self
            .jobs
            .values()
            .any(|j| j.cgroup == name && j.started.is_none() && j.pid == Some(pid))
        {
            return Ok(None);
        }
        match self.jobs.values().find(|j| j.cgroup == name && j.started.is_some()) {
            Some(j) => Ok(Some(j.seq)),
            None => Err(refuse(
                ErrorCode::Denied,
                format!("the calling process is in job cgroup {name}, which this daemon does not run; a process inside a job cannot start a job of its own"),
            )),
        }
    }

    /// The process at the caller's pid is the caller's: the pid was read when it connected, and
    /// one another user's job took meanwhile (reused within the first request's 10 s) must not
    /// make the caller's run a step of that job — its /tmp path, GPU variables and step slots
    /// (round-4 review, L2). As the launch path checks before it moves a client.
    fn step_process_is_the_callers(&self, cred: &Cred, inside: &str) -> Result<(), Refusal> {
        match os::process_uid(&self.cfg.proc_root, cred.pid) {
            Some(uid) if uid == cred.uid => Ok(()),
            _ => Err(refuse(
                ErrorCode::Denied,
                format!(
                    "{inside}: the calling process (pid {}) is not the caller's",
                    cred.pid
                ),
            )),
        }
    }

    /// What a step of `j` asks for, checked: its CPUs among the job's.
    fn step_request(
        &self,
        cred: &Cred,
        who: &Who,
        req: &RunRequest,
        j: &Job,
    ) -> Result<CpuSet, Refusal> {
        let inside = format!("this `pjw run` runs inside job {} (as a step of it)", j.id);
        step_job_runs(j, &inside)?;
        step_caller(cred, who, req, &inside)?;
        self.step_process_is_the_callers(cred, &inside)?;
        step_fits(req, j, &inside)?;
        self.user_steps_fit(cred, &inside)?;
        self.step_cpus_for(cred, req, j, &inside)
    }

    /// A user's running steps, over all the node's jobs, are bounded as one job's are on a
    /// job of every CPU: each is a pidfd and a line of every `status` answer (review F2: a
    /// user's thousands of steps over many jobs made that answer too big for everyone).
    fn user_steps_fit(&self, cred: &Cred, inside: &str) -> Result<(), Refusal> {
        let held: usize = self
            .jobs
            .values()
            .map(|j| j.steps.live.iter().filter(|s| s.uid == cred.uid).count())
            .sum();
        let limit = Steps::limit(self.pool.len());
        if held >= limit {
            return Err(refuse(
                ErrorCode::Denied,
                format!(
                    "{inside}: uid {} has {held} steps running on this node, the limit per user",
                    cred.uid
                ),
            ));
        }
        Ok(())
    }

    /// The CPUs of the step `req` of `j`, among those its caller may run on.
    fn step_cpus_for(
        &self,
        cred: &Cred,
        req: &RunRequest,
        j: &Job,
        inside: &str,
    ) -> Result<CpuSet, Refusal> {
        let k = req.cpus as usize;
        // Within the job's CPUs the caller may run on, when they are enough: a step's own
        // child (or an MPI rank pinned by its launcher) gets a share of its own CPUs. Else
        // the job's. The caller's affinity only narrows the choice inside the job's cpuset.
        let mine = crate::caller::allowed_cpus(&self.cfg.proc_root, cred.pid)
            .map(|a| a.intersection(&j.cpus))
            .filter(|m| m.len() >= k && k > 0)
            .unwrap_or(j.cpus);
        // The caller's own earlier step (it execs `pjw run` again) holds nothing any more.
        let held: Vec<CpuSet> = j
            .steps
            .live
            .iter()
            .filter(|s| s.pid != cred.pid)
            .map(|s| s.cpus)
            .collect();
        if k > j.cpus.len() {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "{inside}: the job has {} cpus; a step of it can have at most {}, not {k}",
                    j.cpus.len(),
                    j.cpus.len()
                ),
            ));
        }
        step_cpus(&self.alloc, &mine, &held, k)
            .map_err(|e| refuse(ErrorCode::Invalid, format!("{inside}: {e}")))
    }

    /// The thread counts a step's client sets where the user did not: as for a job, for the
    /// step's CPUs and its own `--ntasks`.
    fn step_thread_env(&self, j: &Job, cpus: &CpuSet, tasks: Option<u32>) -> Vec<(String, String)> {
        Engine::thread_env_for(&self.cfg, self.alloc.topology(), cpus, j.bind, tasks)
    }

    /// Step `n` of job `seq` exited (its pidfd fired).
    pub(super) fn step_exited(&mut self, seq: i64, n: u32) {
        let now_ms = self.clock.now_ms();
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        let Some(i) = j.steps.live.iter().position(|s| s.n == n) else {
            return;
        };
        let mut step = j.steps.live.remove(i);
        step.ended_ms = Some(now_ms);
        info!(job = %j.id, step = n, pid = step.pid, exit_status = ?step.exit_status, runtime_ms = step.started.elapsed().as_millis() as u64, "step ended");
        if j.steps.ended.len() < ENDED_KEPT {
            j.steps.ended.push(step);
        }
    }

    /// The exit status of process `tgid` of job `seq` (from its exit event): a step's own,
    /// also when its pidfd told of the exit first.
    pub(super) fn note_step_exit(&mut self, seq: i64, tgid: u32, status: i32) {
        if let Some(j) = self.jobs.get_mut(&seq) {
            let ended = j.steps.ended.iter_mut().rev().take(8);
            if let Some(s) = j
                .steps
                .live
                .iter_mut()
                .chain(ended)
                .find(|s| s.pid == tgid && s.exit_status.is_none())
            {
                s.exit_status = Some(status);
            }
        }
    }

    /// The running steps of `j`, for `status`.
    pub(super) fn step_infos(j: &Job) -> Vec<StepInfo> {
        j.steps
            .live
            .iter()
            .map(|s| StepInfo {
                step: s.n,
                pid: s.pid,
                uid: s.uid,
                name: s.name.clone(),
                cpus: s.cpus,
                age_secs: s.started.elapsed().as_secs(),
            })
            .collect()
    }

    /// Every step of `j` so far (ended, then running), for a report of the live job.
    pub(super) fn step_reports(j: &Job) -> Vec<StepReport> {
        let mut all: Vec<StepReport> = j
            .steps
            .ended
            .iter()
            .chain(&j.steps.live)
            .map(|s| crate::report::step_report(s.record()))
            .collect();
        all.sort_by_key(|s| s.step);
        all
    }

    /// Write the steps of the ended job `j` to the store (one transaction; none for a job
    /// without steps). Lost when the store refuses: logged and counted, the job's report then
    /// lacks them. A step whose exit status has not arrived yet (its exit event comes after its
    /// job's end, as on a slow machine) gets it written when it does.
    pub(super) fn record_steps(&mut self, j: &Job) {
        if j.steps.ended.is_empty() {
            return;
        }
        let recs: Vec<StepRecord> = j.steps.ended.iter().map(Step::record).collect();
        for r in recs.iter().filter(|r| r.exit_status.is_none()) {
            self.late_step_exits
                .insert(r.pid, (j.seq, r.clone(), Instant::now()));
        }
        if j.steps.next as usize > recs.len() {
            info!(job = %j.id, steps = j.steps.next, recorded = recs.len(), "only the first steps of the job are recorded");
        }
        if let Err(e) = self.store.record_steps(j.seq, &recs) {
            self.metrics.store_write_error();
            warn!(job = %j.id, steps = recs.len(), error = %e, "cannot record the job's steps; its report lacks them");
        }
    }

    /// The exit status of a step of an ended job, come after its job's record: written over
    /// its row.
    pub(super) fn record_late_step_exit(&mut self, seq: i64, mut rec: StepRecord, status: i32) {
        rec.exit_status = Some(status);
        if let Err(e) = self.store.record_steps(seq, std::slice::from_ref(&rec)) {
            self.metrics.store_write_error();
            warn!(seq, step = rec.step, error = %e, "cannot record a step's late exit status");
        }
    }

    /// At the end of `j`: its steps still running ended with it.
    pub(super) fn end_steps(&self, j: &mut Job) {
        let now_ms = self.clock.now_ms();
        if !j.steps.live.is_empty() {
            info!(job = %j.id, steps = j.steps.live.len(), "steps ended with their job");
        }
        for mut s in j.steps.live.drain(..) {
            s.ended_ms = Some(now_ms);
            if j.steps.ended.len() < ENDED_KEPT {
                j.steps.ended.push(s);
            }
        }
    }
}

/// A job's or step's name: `--name`, else the command's file name, else `fallback`; bounded,
/// no control characters.
pub(super) fn run_name(req: &RunRequest, fallback: &str) -> String {
    let name = req
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            req.argv
                .first()
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                .unwrap_or_else(|| fallback.into())
        });
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// A step of `j` needs the job running on its CPUs.
fn step_job_runs(j: &Job, inside: &str) -> Result<(), Refusal> {
    if j.end.ending {
        return Err(refuse(
            ErrorCode::Invalid,
            format!("{inside}, which is ending"),
        ));
    }
    if j.cpus.is_empty() || matches!(j.phase, Phase::Preempted | Phase::Suspended) {
        return Err(refuse(
            ErrorCode::Invalid,
            format!("{inside}, which holds no cpus now"),
        ));
    }
    Ok(())
}

/// A step runs as its caller.
fn step_caller(cred: &Cred, who: &Who, req: &RunRequest, inside: &str) -> Result<(), Refusal> {
    if let (Some(name), Some((uid, _))) = (&req.user, who.named) {
        if uid != cred.uid {
            return Err(refuse(
                ErrorCode::Denied,
                format!("{inside}: a step runs as its caller, not as {name}"),
            ));
        }
    } else if let Some(name) = &req.user {
        return Err(refuse(ErrorCode::Invalid, format!("no such user: {name}")));
    }
    Ok(())
}

/// What the step asks for fits in its job: memory, GPUs, arguments, name, steps, tasks.
fn step_fits(req: &RunRequest, j: &Job, inside: &str) -> Result<(), Refusal> {
    if req.exclusive {
        return Err(refuse(
            ErrorCode::Invalid,
            format!("{inside}: --exclusive (the whole node) is for jobs, not steps"),
        ));
    }
    if req.time_limit_s.is_some() {
        // Not ignored: a user who asked for a limit must not believe one is kept.
        return Err(refuse(
            ErrorCode::Invalid,
            format!("{inside}: --time is for jobs, not steps (a step ends with its job)"),
        ));
    }
    if let (Some(m), Some(limit)) = (req.mem, j.mem) {
        if m > limit {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "{inside}, whose memory limit is {}: a step cannot have --mem {}",
                    pjw_core::format_size(limit),
                    pjw_core::format_size(m)
                ),
            ));
        }
    }
    if req.gpus as usize > j.gpus.len() {
        return Err(refuse(
            ErrorCode::Invalid,
            format!(
                "{inside}, which has {} gpus: a step cannot have --gpus {}",
                j.gpus.len(),
                req.gpus
            ),
        ));
    }
    if req.argv.len() > pjw_proto::MAX_ARGS {
        return Err(refuse(ErrorCode::Invalid, "too many arguments"));
    }
    if req.name.as_ref().is_some_and(|n| n.len() > 256) {
        return Err(refuse(
            ErrorCode::Invalid,
            "--name is longer than 256 bytes",
        ));
    }
    if j.steps.live.len() >= Steps::limit(j.cpus.len()) {
        return Err(refuse(
            ErrorCode::Denied,
            format!(
                "{inside}, which has {} steps running, its limit",
                j.steps.live.len()
            ),
        ));
    }
    if let Some(t) = req.tasks {
        if t == 0 || !req.cpus.is_multiple_of(t) {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "{inside}: --ntasks {t} does not divide the step's {} cpus",
                    req.cpus
                ),
            ));
        }
    }
    Ok(())
}
