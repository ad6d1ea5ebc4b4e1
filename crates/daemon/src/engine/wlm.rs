//! Workload-manager jobs in the engine: `register` and `end`, and adoption of the processes a
//! manager starts outside pjw (from exec events and the periodic sweep).

use std::time::Instant;

use pjw_core::adopt::{self, Candidate, Target, Verdict};
use pjw_core::sched::{self, Phase};
use pjw_core::{CpuSet, JobId};
use pjw_proto::{ErrorCode, Placement, RegisterRequest, Response, RunRequest};
use pjw_store::{JobRecord, StarterRecord, StoredState};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info};

use super::{cgroup_name, err, now_ms, Cred, Engine, Waiter};
use crate::os;

/// At most one log line per unknown job id per minute.
const UNKNOWN_LOG_EVERY_MS: i64 = 60_000;

impl Engine {
    /// Register a manager's job: root only; it gets CPUs through the node queue like `run`.
    pub(super) fn register(
        &mut self,
        conn: u64,
        cred: Cred,
        req: RegisterRequest,
        reply: mpsc::UnboundedSender<Response>,
    ) {
        if cred.uid != 0 {
            let _ = reply.send(err(
                ErrorCode::Denied,
                "only root registers workload-manager jobs",
            ));
            return;
        }
        let id = match JobId::new(&req.job) {
            Ok(id) => id,
            Err(e) => {
                let _ = reply.send(err(ErrorCode::Invalid, e.to_string()));
                return;
            }
        };
        let wlm: String = req
            .wlm
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .take(16)
            .collect();
        if wlm.is_empty() {
            let _ = reply.send(err(
                ErrorCode::Invalid,
                "the workload manager's name is empty",
            ));
            return;
        }
        let Some((uid, gid)) = os::lookup_user(&req.user) else {
            let _ = reply.send(err(
                ErrorCode::Invalid,
                format!("no user {:?} on this node", req.user),
            ));
            return;
        };
        let run = RunRequest {
            cpus: req.cpus,
            mem: req.mem,
            job_id: Some(req.job.clone()),
            name: req.name.clone(),
            argv: vec![],
            priority: None,
            placement: Placement::PrimaryOnly,
            exclusive: false,
            user: None,
            wlm: None,
            tmp: None,
        };
        if let Err((code, message)) = self.validate(&cred, &run) {
            let _ = reply.send(err(code, message));
            return;
        }
        if self.jobs.values().any(|j| j.id == id) {
            let _ = reply.send(err(
                ErrorCode::Conflict,
                format!("job id {id} is already in use by a live job"),
            ));
            return;
        }
        let pid = req.attach.then_some(cred.pid);
        let pid_start = pid.and_then(|p| os::start_time(&self.cfg.proc_root, p));
        let name = req
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("{wlm} job {id}"));
        let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        let rec = JobRecord {
            seq: 0,
            job_id: id.to_string(),
            name,
            uid,
            gid,
            user: req.user.clone(),
            ncpus: req.cpus,
            cpus: CpuSet::new(),
            mems: CpuSet::new(),
            mem_limit: req.mem,
            pid,
            pid_start,
            cgroup: cgroup_name(&id),
            argv: vec![],
            state: StoredState::Queued,
            submitted_ms: now_ms(),
            started_ms: None,
            ended_ms: None,
            end_reason: None,
            // The manager has decided this job runs: nothing pjw starts may preempt it.
            priority: sched::MAX_PRIORITY,
            placement: "primary_only".into(),
            exclusive: false,
            role: "primary".into(),
        };
        let starter = StarterRecord {
            wlm: Some(format!("{wlm}:{id}")),
            client_uid: cred.uid,
            tmp_size: None,
            tmpdir: None,
        };
        let seq = match self
            .store
            .insert_job(&rec)
            .and_then(|seq| self.store.set_starter(seq, &starter).map(|_| seq))
        {
            Ok(s) => s,
            Err(e) => {
                error!(job = %id, error = %e, "cannot record job");
                let _ = reply.send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                return;
            }
        };
        let rec = JobRecord { seq, ..rec };
        let mut job = self.job_from_record(&rec, id, Phase::Queued, CpuSet::new(), None);
        job.waiter = Some(Waiter { conn, reply });
        job.wlm = starter.wlm;
        job.held = !req.attach;
        job.client_uid = cred.uid;
        info!(job = %job.id, user = %job.user, cpus = req.cpus, wlm = %wlm, attach = req.attach, "job registered");
        self.jobs.insert(seq, job);
        self.scanner_wake();
        self.replan();
        self.tell_queued(seq);
    }

    /// End a registered job: kill what is left, answer once its cgroups are gone.
    pub(super) fn end(&mut self, cred: Cred, job: &str, reply: oneshot::Sender<Response>) {
        if cred.uid != 0 {
            let _ = reply.send(err(
                ErrorCode::Denied,
                "only root ends workload-manager jobs",
            ));
            return;
        }
        let Some(seq) = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job && j.wlm.is_some())
            .map(|j| j.seq)
        else {
            let _ = reply.send(err(
                ErrorCode::NotFound,
                format!("no registered job {job} on this node"),
            ));
            return;
        };
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        // The manager's name: `slurm` of `slurm:4242`.
        let by = j
            .wlm
            .as_deref()
            .and_then(|w| w.split(':').next())
            .unwrap_or("")
            .to_string();
        if j.started.is_none() {
            let _ = reply.send(self.kill(seq, by));
            return;
        }
        info!(job = %j.id, user = %j.user, wlm = j.wlm.as_deref().unwrap_or(""), "ending registered job");
        j.held = false;
        j.ended_by = Some(by);
        j.end_waiters.push(reply);
        self.main_exited(seq);
    }

    /// Whether any job adopts processes now (the sweep costs nothing without one).
    pub(super) fn adopting(&self) -> bool {
        !self.scanner.rules().is_empty()
            && self
                .jobs
                .values()
                .any(|j| j.wlm.is_some() && j.started.is_some() && !j.ending)
    }

    /// A job was registered: the next sweep looks at every process again.
    fn scanner_wake(&mut self) {
        if !self
            .jobs
            .values()
            .any(|j| j.wlm.is_some() && j.started.is_some())
        {
            self.scanner.reset();
        }
    }

    /// The periodic backstop: look at every process not settled yet.
    pub(super) fn sweep(&mut self) {
        if !self.adopting() {
            self.scanner.reset();
            return;
        }
        for pid in self.scanner.unsettled() {
            self.examine(pid, "sweep");
        }
    }

    /// Look at one process and adopt it if it belongs to a registered job.
    pub(super) fn examine(&mut self, pid: u32, via: &'static str) {
        let Some(facts) = self.scanner.facts(pid) else {
            self.scanner.settle(pid);
            return;
        };
        let inside = self.driver.job_of(&facts.cgroups);
        let targets: Vec<Target<'_>> = self
            .jobs
            .values()
            .filter(|j| j.wlm.is_some() && j.started.is_some() && !j.ending)
            .map(|j| Target {
                key: j.seq,
                id: j.id.as_str(),
                uid: j.uid,
            })
            .collect();
        let c = Candidate {
            uid: facts.uid,
            ids: &facts.ids,
            inside: inside.as_deref(),
            hook: facts.hook,
        };
        let verdict = adopt::decide(&c, &targets);
        drop(targets);
        match verdict {
            Verdict::Adopt { key, rule } => {
                let Some(j) = self.jobs.get(&key) else { return };
                let var = self.scanner.rules().get(rule).cloned().unwrap_or_default();
                let t0 = Instant::now();
                match self.driver.add_process(&j.cgroup, pid) {
                    Ok(()) => {
                        // From now on its forks and exits count for the job.
                        self.procs.adopt(key, pid, facts.threads);
                        info!(
                            job = %j.id, user = %j.user, cpus = %j.cpus, pid, var = %var, via,
                            move_us = t0.elapsed().as_micros() as u64, "adopted process"
                        );
                        self.scanner.settle(pid);
                    }
                    // It may have exited meanwhile; the next sweep looks again if not.
                    Err(e) => debug!(job = %j.id, pid, error = %e, "cannot adopt process"),
                }
            }
            Verdict::Inside | Verdict::NotAJob => self.scanner.settle(pid),
            Verdict::Hook => {
                debug!(pid, via, "workload-manager hook left alone");
                self.scanner.settle(pid);
            }
            Verdict::WrongOwner { key, uid } => {
                if let Some(j) = self.jobs.get(&key) {
                    info!(job = %j.id, pid, uid, owner = j.uid, via, "process names a job of another user; left alone");
                }
                self.scanner.settle(pid);
            }
            Verdict::Unknown { rule, id } => {
                let now = now_ms();
                let last = self.unknown_logged.get(&id).copied();
                if adopt::should_log(last, now, UNKNOWN_LOG_EVERY_MS) {
                    let var = self.scanner.rules().get(rule).cloned().unwrap_or_default();
                    info!(pid, var = %var, wlm_job = %id, via, "process of an unknown job left alone");
                    if self.unknown_logged.len() > 4096 {
                        self.unknown_logged.clear();
                    }
                    self.unknown_logged.insert(id, now);
                }
            }
        }
    }
}
