//! Workload-manager jobs in the engine: `register` and `end`, and adoption of the processes a
//! manager starts outside pjw (from exec events and the periodic sweep).

use std::time::Instant;

use pjw_core::adopt::{self, Candidate, Target, Verdict};
use pjw_core::sched::{self};
use pjw_core::{CpuSet, JobId};
use pjw_proto::{ErrorCode, Placement, RegisterRequest, Response, RunRequest};
use pjw_store::{JobRecord, StoredRole, StoredState};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info};

use super::admission::Sides;
use super::Starter;
use super::{cgroup_name, err, Cred, Engine, Event, Who};
use crate::adopt::Seen;
use crate::os;

/// At most one log line per unknown job id per minute.
const UNKNOWN_LOG_EVERY_MS: i64 = 60_000;
/// Processes one turn of the adoption sweep looks at (a few milliseconds of /proc reads).
const SWEEP_TURN: usize = 64;

impl Engine {
    /// Register a manager's job: root only; it gets CPUs through the node queue like `run`.
    pub(super) fn register(
        &mut self,
        conn: u64,
        cred: Cred,
        who: &Who,
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
        // The job lives in its manager's namespace (`slurm:4242`), where only root makes ids:
        // no user's `pjw run --job-id 4242` can take the id the manager registers.
        let wlm = req.wlm.to_ascii_lowercase();
        let local = req.job.strip_prefix(&format!("{wlm}:")).unwrap_or(&req.job);
        let id = match JobId::in_namespace(&wlm, local) {
            Ok(id) => id,
            Err(e) => {
                let _ = reply.send(err(ErrorCode::Invalid, e.to_string()));
                return;
            }
        };
        let Some((uid, gid)) = who.named else {
            let _ = reply.send(err(
                ErrorCode::Invalid,
                format!("no user {:?} on this node", req.user),
            ));
            return;
        };
        let run = manager_run_request(&req);
        if let Err((code, message)) = self.validate(&cred, who, &run) {
            let _ = reply.send(err(code, message));
            return;
        }
        let pid = req.attach.then_some(cred.pid);
        let pid_start = pid.and_then(|p| os::start_time(&self.cfg.proc_root, p));
        if let Some(seq) = self.jobs.values().find(|j| j.id == id).map(|j| j.seq) {
            // The same registration again, from a client that lost the daemon (a restart)
            // while it waited: it takes its job back. Anything else is a clash.
            let same = (uid, req.cpus, req.mem);
            if !self.reregister(seq, same, pid, pid_start, conn, &reply) {
                let _ = reply.send(err(
                    ErrorCode::Conflict,
                    format!("job id {id} is already in use by a live job"),
                ));
            }
            return;
        }
        // Checked after the repeat above: a repeated registration's GPUs are its own job's.
        let gpus = match self.manager_gpus(&wlm, req.gpus.as_deref()) {
            Ok(g) => g,
            Err((code, message)) => {
                let _ = reply.send(err(code, message));
                return;
            }
        };
        let rec = self.manager_record(&req, &id, &wlm, (uid, gid), pid, pid_start);
        let starter = Starter {
            client_uid: cred.uid,
            wlm: Some(id.to_string()),
            tmp_size: None,
            held: !req.attach,
            tmpdir: None,
        };
        let sides = Sides {
            number: None,
            gpus: 0,
            pinned: gpus,
            // The node's I/O defaults, as for `pjw run`.
            io: self.cfg.io.clone(),
            bind: None,
            time_limit: None,
        };
        let Some(seq) = self.enqueue(rec, id, starter, sides, conn, reply) else {
            return;
        };
        let job = &self.jobs[&seq];
        info!(job = %job.id, user = %job.user, cpus = req.cpus, gpus = %gpus, wlm = %wlm, attach = req.attach, "job registered");
        self.scanner_wake();
        self.replan();
        self.tell_queued(seq);
        self.examine_waiting(seq);
    }

    /// The row of a manager's job: queued, at the top priority (the manager has decided it runs),
    /// named by the manager (else `slurm job slurm:4242`), held until its process attaches.
    fn manager_record(
        &self,
        req: &RegisterRequest,
        id: &JobId,
        wlm: &str,
        (uid, gid): (u32, u32),
        pid: Option<u32>,
        pid_start: Option<u64>,
    ) -> JobRecord {
        let name = req
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("{wlm} job {id}"));
        let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        JobRecord {
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
            cgroup: cgroup_name(id),
            argv: vec![],
            state: StoredState::Queued,
            submitted_ms: self.clock.now_ms(),
            started_ms: None,
            ended_ms: None,
            end_reason: None,
            // The manager has decided this job runs: nothing pjw starts may preempt it.
            priority: sched::MAX_PRIORITY,
            placement: sched::Placement::PrimaryOnly,
            exclusive: false,
            role: StoredRole::Primary,
        }
    }

    /// A registration repeated by its client after the daemon restarted (root only, checked by
    /// the caller): the same owner, CPUs and memory (`same`), and the held form (no process)
    /// matching a held job of that id, the attached form the job whose main process is the
    /// caller. A queued one takes its place back; a started one is told its CPUs again. Whether
    /// it matched.
    fn reregister(
        &mut self,
        seq: i64,
        same: (u32, u32, Option<u64>),
        pid: Option<u32>,
        pid_start: Option<u64>,
        conn: u64,
        reply: &mpsc::UnboundedSender<Response>,
    ) -> bool {
        let gpus_fenced = self.gpus_fenced;
        let Some(j) = self.jobs.get_mut(&seq) else {
            return false;
        };
        let (uid, ncpus, mem) = same;
        let same = (j.uid, j.req.ncpus, j.mem) == (uid, ncpus as usize, mem)
            && j.starter.wlm.is_some()
            && !j.end.ending
            && match pid {
                None => j.starter.held,
                Some(p) => j.pid == Some(p) && j.pid_start == pid_start,
            };
        if !same {
            return false;
        }
        if j.started.is_some() {
            info!(job = %j.id, "registration repeated; job already running");
            let _ = reply.send(Response::Started {
                job: j.id.to_string(),
                cpus: j.cpus,
                mems: j.mems,
                backfill: false,
                tmp: j.tmp_reply(),
                shm: j.shm_reply(&self.cfg.ipc, self.mem_limit),
                env: Engine::gpu_env_of(&self.gpus, gpus_fenced, j),
                env_defaults: Engine::thread_env_of(&self.cfg, self.alloc.topology(), j),
            });
            return true;
        }
        if j.client.waiter.is_some() {
            // Its first client still waits on another connection: not a repeat.
            return false;
        }
        info!(job = %j.id, "registration repeated; queued place kept");
        j.client.waiter = Some(super::Waiter {
            conn,
            reply: reply.clone(),
        });
        j.client.reconnect_by = None;
        self.replan();
        self.tell_queued(seq);
        true
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
        // Only a job registered by root (in a manager's namespace) is ended here.
        let Some(seq) = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job && j.id.namespace().is_some() && j.starter.wlm.is_some())
            .map(|j| j.seq)
        else {
            let _ = reply.send(self.end_not_found(job));
            return;
        };
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        // The manager's name: `slurm` of `slurm:4242`.
        let by = j
            .starter
            .wlm
            .as_deref()
            .and_then(|w| w.split(':').next())
            .unwrap_or("")
            .to_string();
        if j.started.is_none() {
            let _ = reply.send(self.kill(seq, by));
            return;
        }
        info!(job = %j.id, user = %j.user, wlm = j.starter.wlm.as_deref().unwrap_or(""), "ending registered job");
        j.starter.held = false;
        j.end.ended_by = Some(by);
        j.end.waiters.push(reply);
        self.main_exited(seq);
    }

    /// The answer to `end` of an id no registered job has: a bare id that a registered job has
    /// inside its manager's namespace (`9301` while `slurm:9301` is registered: a site's hook
    /// that passes the manager's own id) is an error naming that job, so the hook fails instead
    /// of leaving the job holding its CPUs; any other id is simply not here (never registered,
    /// or ended already).
    fn end_not_found(&self, job: &str) -> Response {
        let meant: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.starter.wlm.is_some())
            .filter(|j| j.id.namespace().is_some() && j.id.local() == job)
            .map(|j| j.id.to_string())
            .collect();
        if meant.is_empty() || job.contains(':') {
            return err(
                ErrorCode::NotFound,
                format!("no registered job {job} on this node"),
            );
        }
        err(
            ErrorCode::Invalid,
            format!(
                "no registered job {job} on this node, but {} is: registered ids live in their manager's namespace (pjw job end {})",
                meant.join(" and "),
                meant[0]
            ),
        )
    }

    /// Whether any job adopts processes now (the sweep costs nothing without one).
    pub(super) fn adopting(&self) -> bool {
        !self.scanner.rules().is_empty()
            && self
                .jobs
                .values()
                .any(|j| j.starter.wlm.is_some() && j.started.is_some() && !j.end.ending)
    }

    /// No job adopted until now: what was decided about processes meanwhile is forgotten, so
    /// the next sweep looks at every process once.
    fn scanner_wake(&mut self) {
        if !self
            .jobs
            .values()
            .any(|j| j.starter.wlm.is_some() && j.started.is_some())
        {
            self.scanner.reset();
        }
    }

    /// Job `seq` can adopt now: look again at the processes remembered as naming it (an event:
    /// only those, not every process).
    pub(super) fn examine_waiting(&mut self, seq: i64) {
        let Some(j) = self.jobs.get(&seq) else { return };
        if j.started.is_none() {
            return;
        }
        let (ns, id) = target_names(j.id.as_str(), j.starter.wlm.as_deref(), j.uid);
        for pid in self.scanner.waiting_for(&ns, &id) {
            self.examine(pid, "registered");
        }
    }

    /// The periodic backstop: look at every process never looked at, at most
    /// [`SWEEP_TURN`] per turn of the engine. A node with thousands of new processes (the
    /// first sweep after a job registers looks at all of them) is swept over several turns,
    /// each queued behind what waits already, so clients' requests are served in between.
    /// `more` is the next turn of a sweep under way; the timer's tick does not start a second
    /// one meanwhile.
    pub(super) fn sweep(&mut self, more: bool) {
        if !self.adopting() {
            self.scanner.reset();
            self.sweep_from = None;
            return;
        }
        if more != self.sweep_from.is_some() {
            return;
        }
        let pids = self.scanner.unseen_after(self.sweep_from);
        let rest = pids.len() > SWEEP_TURN;
        for &pid in pids.iter().take(SWEEP_TURN) {
            self.examine(pid, "sweep");
        }
        self.sweep_from = if rest {
            pids.get(SWEEP_TURN - 1).copied()
        } else {
            None
        };
        if rest {
            let _ = self.tx.send(Event::SweepMore);
        }
    }

    /// A process outside every job forked `child`: when its parent is known as a task of a job
    /// step, the child is that job's too, even if it is re-parented before it is looked at.
    pub(super) fn on_unknown_fork(&mut self, parent: u32, child: u32) {
        if self.adopting() && self.scanner.forked(parent, child).is_some() {
            self.examine(child, "fork");
        }
    }

    /// An adopted process forked `child` before it was moved into job `seq`: the child is
    /// outside the job's cgroups, though it is the job's. Moved now (a task that forks at once
    /// and lets its parent be adopted does not leave a child behind).
    pub(super) fn on_early_fork(&mut self, seq: i64, child: u32) {
        let Some(j) = self.jobs.get(&seq) else { return };
        if j.end.ending {
            return;
        }
        match self.join_job(j, child) {
            Ok(()) => {
                info!(job = %j.id, pid = child, via = "fork", "adopted a child forked before its parent's adoption");
                self.procs.moved(child, crate::procs::monotonic_ns());
            }
            Err(e) => debug!(job = %j.id, pid = child, error = %e, "cannot adopt early child"),
        }
    }

    /// Look at one process and adopt it if it belongs to a registered job.
    pub(super) fn examine(&mut self, pid: u32, via: &'static str) {
        let Some(start) = self.scanner.start_time(pid) else {
            return;
        };
        let Some(facts) = self.scanner.facts(pid, start) else {
            self.scanner.remember(pid, start, Seen::Settled);
            return;
        };
        let inside = self.driver.job_of(&facts.cgroups);
        let names: Vec<(i64, String, String, u32, bool)> = self
            .jobs
            .values()
            .filter(|j| j.starter.wlm.is_some() && j.started.is_some() && !j.end.ending)
            .map(|j| {
                let (ns, id) = target_names(j.id.as_str(), j.starter.wlm.as_deref(), j.uid);
                (j.seq, ns, id, j.uid, j.id.namespace().is_some())
            })
            .collect();
        let targets: Vec<Target<'_>> = names
            .iter()
            .map(|(key, ns, id, uid, registered)| Target {
                key: *key,
                ns,
                id,
                uid: *uid,
                registered: *registered,
            })
            .collect();
        let c = Candidate {
            uid: facts.uid,
            ids: &facts.ids,
            rule_ns: self.scanner.rule_ns(),
            inside: inside.as_deref(),
            lineage: &facts.lineage,
        };
        let verdict = adopt::decide(&c, &targets);
        drop(targets);
        debug!(pid, uid = facts.uid, lineage = ?facts.lineage, verdict = ?verdict, via, "examined");
        let var = |rule: Option<usize>, s: &Self| match rule {
            Some(r) => s.scanner.rules().get(r).cloned().unwrap_or_default(),
            None => "ancestry".to_string(),
        };
        match verdict {
            Verdict::Adopt { key, rule } => {
                let var = var(rule, self);
                let Some(j) = self.jobs.get(&key) else { return };
                let t0 = Instant::now();
                match self.join_job(j, pid) {
                    Ok(()) => {
                        // From now on its forks and exits count for the job; forks stamped
                        // before now did not inherit its cgroups (see on_early_fork).
                        self.procs.adopt(key, pid, facts.threads);
                        self.procs.moved(pid, crate::procs::monotonic_ns());
                        info!(
                            job = %j.id, user = %j.user, cpus = %j.cpus, pid, var = %var, via,
                            move_us = t0.elapsed().as_micros() as u64, "adopted process"
                        );
                        self.scanner.remember(pid, start, Seen::Settled);
                    }
                    // It may have exited meanwhile; the next sweep looks again if not.
                    Err(e) => debug!(job = %j.id, pid, error = %e, "cannot adopt process"),
                }
            }
            Verdict::Inside | Verdict::NotAJob => self.scanner.remember(pid, start, Seen::Settled),
            Verdict::Hook => {
                debug!(pid, via, "workload-manager hook left alone");
                self.scanner.remember(pid, start, Seen::Settled);
            }
            Verdict::WrongOwner { key, uid } => {
                if let Some(j) = self.jobs.get(&key) {
                    info!(job = %j.id, pid, uid, owner = j.uid, via, "process names a job of another user; left alone");
                }
                self.scanner.remember(pid, start, Seen::Settled);
            }
            Verdict::Unknown { rule, id } => {
                let now = self.clock.now_ms();
                let last = self.unknown_logged.get(&id).copied();
                if adopt::should_log(last, now, UNKNOWN_LOG_EVERY_MS) {
                    // `id` passed the job-id check (no control character, ≤ 64 + namespace).
                    info!(pid, var = %var(rule, self), wlm_job = ?id, via, "process of an unknown job left alone");
                    if self.unknown_logged.len() > 4096 {
                        self.unknown_logged.clear();
                    }
                    self.unknown_logged.insert(id.clone(), now);
                }
                // Not read again by the sweep: looked at again when it execs or `id` is
                // registered.
                self.scanner.remember(pid, start, Seen::Unknown(id));
            }
        }
    }
}

/// The (manager, id) a job of owner `uid` is found under by adoption: from its tag
/// (`slurm:4242`) and its pjw id's part inside the namespace; a job without a tag has manager
/// "". A claimed id that another owner held first was given its owner's form
/// (`pbs:124.srv_u1001`, [`pjw_core::JobId::for_owner`]); the manager's own id is the claim
/// without that suffix, and that is what its later tasks name (`PBS_JOBID=124.srv`): so the
/// victim's tasks find the victim's job — adoption prefers the caller's own — instead of the
/// squatter's, which left them unjailed (issue 25, N3).
pub(super) fn target_names(id: &str, tag: Option<&str>, uid: u32) -> (String, String) {
    let ns = tag
        .and_then(|t| t.split_once(':'))
        .map(|(m, _)| m.to_string())
        .unwrap_or_default();
    let local = id.split_once(':').map(|(_, l)| l).unwrap_or(id);
    let own = format!("_u{uid}");
    let local = match local.strip_suffix(own.as_str()) {
        Some(claim) if !ns.is_empty() && !claim.is_empty() => untruncated(claim, tag),
        _ => local,
    };
    (ns, local.to_string())
}

/// A claim too long for its owner's form was cut to fit ([`pjw_core::JobId::for_owner`]); its
/// tag still names it whole (`pbs:<long id>`), and the tasks name it whole: take the tag's, when
/// it begins with the cut claim. Only the owner's own tasks are adopted under it (adoption
/// matches uids), so a tag can steer nothing but its owner's processes (review 4, L3).
fn untruncated<'a>(claim: &'a str, tag: Option<&'a str>) -> &'a str {
    match tag.and_then(|t| t.split_once(':')).map(|(_, l)| l) {
        Some(whole) if whole.len() > claim.len() && whole.starts_with(claim) => whole,
        _ => claim,
    }
}

/// What a registration is checked against as a `run` would be: its CPUs, memory, id and name,
/// on primary CPUs only.
fn manager_run_request(req: &RegisterRequest) -> RunRequest {
    RunRequest {
        gpus: 0,
        bind: None,
        tasks: None,
        time_limit_s: None,
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
        io_weight: None,
        io_max: vec![],
    }
}
