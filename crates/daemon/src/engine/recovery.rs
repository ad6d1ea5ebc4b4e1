//! Recovery after a (re)start: rebuilding the jobs from the store and the cgroup trees, and
//! adopting populated cgroups the store does not know.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pjw_core::sched::{self, Phase, Request};
use pjw_core::{CpuSet, JobId};
use pjw_store::{JobRecord, StoredRole, StoredState};
use tracing::{info, warn};

use super::job::{ClientLink, EndWatch, MemTrack, Starter};
use super::store_writes::OnFail;
use super::{role_of, Engine, Job};
use crate::profile::{EndReason, JobProf};
use crate::{os, DaemonError};

/// How long a queued job recovered after a restart waits for its client to come back.
const RECONNECT_GRACE: Duration = Duration::from_secs(120);

impl Engine {
    /// Rebuild the state after a (re)start from the store and the cgroup trees. Jobs that ended
    /// meanwhile are closed, leftover empty cgroups removed, and populated cgroups the store does
    /// not know are kept (with the CPUs their cpuset holds) until they empty: no CPU is ever
    /// given to two jobs. Frozen jobs stay frozen; queued jobs keep their place for their
    /// clients to reconnect.
    pub fn recover(&mut self) -> Result<(), DaemonError> {
        let live = self.store.live_jobs()?;
        let known: Vec<String> = live.iter().map(|rec| rec.cgroup.clone()).collect();
        // The job cgroups that exist, read once when needed (None: could not be read).
        let mut existing: Option<Option<Vec<String>>> = None;
        for rec in live {
            self.recover_stored(rec, &mut existing);
        }
        self.remove_stale_tmpfs();
        self.adopt_unknown(&known)?;
        // Process counts start again from what is alive now (a lower bound).
        self.reseed_procs();
        // Figures for `status` until the sampler's first tick (and a point in each series).
        let started: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some())
            .map(|j| j.seq)
            .collect();
        for seq in started {
            self.sample_now(seq);
        }
        self.arm_young();
        // Time limits count from here (decisions.md (co)).
        self.observe_run_clocks();
        self.replan();
        Ok(())
    }

    /// One job the store holds as live: queued again, ended, or running again.
    fn recover_stored(&mut self, rec: JobRecord, existing: &mut Option<Option<Vec<String>>>) {
        let Ok(id) = JobId::new(&rec.job_id) else {
            return;
        };
        if rec.state == StoredState::Queued {
            self.recover_queued(rec, id);
            return;
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
            self.recover_ended(&rec, existing);
            return;
        }
        self.recover_running(rec, id, held);
    }

    /// A stored job whose cgroup is gone or empty: it ended (or never started) while the
    /// daemon was down.
    fn recover_ended(&mut self, rec: &JobRecord, existing: &mut Option<Option<Vec<String>>>) {
        // A start is recorded `running` before its cgroups are made (decision (at)): a
        // row whose cgroups do not exist never ran its command. Unknown when the list
        // cannot be read: then it counts as having run, as before.
        let never_made = rec.state == StoredState::Running
            && rec.pid.is_some()
            && existing
                .get_or_insert_with(|| self.driver.list_jobs().ok())
                .as_ref()
                .is_some_and(|l| !l.contains(&rec.cgroup));
        if let Err(e) = self.driver.remove_job(&rec.cgroup) {
            warn!(job = %rec.job_id, cgroup = %rec.cgroup, error = %e, "cannot remove the ended job's cgroups");
        }
        let reason = if rec.state == StoredState::Starting || never_made {
            EndReason::NotStarted("start interrupted".into())
        } else {
            EndReason::EndedWhileDown
        };
        let text = reason.text();
        self.record_end_rec(rec, reason);
        info!(job = %rec.job_id, reason = text.as_str(), "recovered job had ended");
    }

    /// A stored job that still runs (or is held): back in the table, its CPUs, role and
    /// memory state from its cgroup.
    fn recover_running(&mut self, rec: JobRecord, id: JobId, held: bool) {
        let phase = match rec.role {
            StoredRole::Backfill => Phase::Backfill,
            StoredRole::Preempted => Phase::Preempted,
            StoredRole::Suspended => Phase::Suspended,
            StoredRole::Primary => Phase::Primary,
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
        let main_alive = rec
            .pid
            .is_some_and(|p| os::process_alive(&self.cfg.proc_root, p, rec.pid_start));
        let started = Instant::now()
            .checked_sub(Duration::from_millis(
                (self.clock.now_ms() - rec.started_ms.unwrap_or(rec.submitted_ms)).max(0) as u64,
            ))
            .unwrap_or_else(Instant::now);
        let mut job = self.job_from_record(&rec, id, phase, cpus, Some(started));
        self.restore_starter(&mut job);
        job.starter.held = held;
        // A running job that is frozen was frozen by the memory governor: it stays frozen
        // until the governor finds room for it, with what it uses now as its footprint.
        if matches!(phase, Phase::Primary | Phase::Backfill)
            && self.driver.is_frozen(&rec.cgroup).unwrap_or(false)
        {
            job.memory.frozen = true;
            job.memory.frozen_since_ms = Some(self.clock.now_ms());
            job.memory.why = Some("it was frozen for memory before the daemon restarted".into());
            job.memory.footprint = self.driver.memory_usage(&rec.cgroup).unwrap_or(0);
        }
        // A throttle the governor set before the restart is not remembered: lifted, so no
        // job stays held at an old memory.high (the governor throttles again if it must).
        if self.governor.is_some_and(|g| g.throttle) {
            if let Err(e) = self.driver.set_memory_high(&rec.cgroup, None) {
                warn!(job = %job.id, error = %e, "cannot lift a throttle left from before the restart");
            }
        }
        info!(
            job = %job.id, user = %job.user, cpus = %job.cpus, role = role_of(phase).as_str(), main_alive,
            memory_frozen = job.memory.frozen, "recovered running job"
        );
        let seq = job.seq;
        self.jobs.insert(seq, job);
        if rec.state == StoredState::Starting {
            // Its cgroups exist: kept running if the store refuses, and written again.
            let _ = self.store_write(seq, "set_running", OnFail::Rewrite, |s| s.set_running(seq));
        }
        self.track(seq, main_alive);
    }

    /// Per-job tmpfs whose job is gone (ended while the daemon was down, or never started).
    fn remove_stale_tmpfs(&mut self) {
        let keep: Vec<PathBuf> = self
            .jobs
            .values()
            .filter_map(|j| j.starter.tmpdir.clone())
            .collect();
        for name in crate::tmp::list(&self.cfg.tmp_root) {
            let dir = self.cfg.tmp_root.join(&name);
            if keep.contains(&dir) {
                continue;
            }
            // Off the engine thread, like every tmpfs removal (a long walk).
            info!(dir = %dir.display(), "removing the tmpfs of a job that ended");
            crate::tmp::spawn_remove(dir, name);
        }
    }

    /// Cgroups below the parent that the store does not know: removed when empty, else adopted.
    fn adopt_unknown(&mut self, known: &[String]) -> Result<(), DaemonError> {
        for name in self.driver.list_jobs()? {
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
        Ok(())
    }

    pub(super) fn recover_queued(&mut self, rec: JobRecord, id: JobId) {
        let alive = rec
            .pid
            .is_some_and(|p| os::process_alive(&self.cfg.proc_root, p, rec.pid_start));
        // A manager's registration without a process (a prolog's) has no pid to look at: it
        // waits for its client to register again, as a queued client reconnects.
        let held = rec.pid.is_none()
            && matches!(self.store.starter(rec.seq), Ok(Some(st)) if st.wlm.is_some());
        if !alive && !held {
            self.record_end_rec(&rec, EndReason::NotStarted("client left the queue".into()));
            // It may have waited in its own cgroups (decision (cm)): removed, or once empty.
            self.vacate(&rec.cgroup, &rec.job_id);
            return;
        }
        let mut job = self.job_from_record(&rec, id, Phase::Queued, CpuSet::new(), None);
        self.restore_starter(&mut job);
        job.starter.held = held;
        // Its client may wait in its cgroups, made before the restart: not a running job
        // (the store says queued), started by making and moving as before, removed if it
        // leaves the queue.
        if rec.pid.is_some() {
            job.client.cgroups = super::preplace::QueuedCgroups::Unsure;
        }
        job.client.reconnect_by = Some(Instant::now() + RECONNECT_GRACE);
        info!(job = %job.id, user = %job.user, "recovered queued job; waiting for its client");
        self.jobs.insert(job.seq, job);
    }

    /// Take back a recovered job's starter details (owner vs client, WLM id, /tmp).
    pub(super) fn restore_starter(&self, job: &mut Job) {
        if let Ok(Some(st)) = self.store.starter(job.seq) {
            job.starter.client_uid = st.client_uid;
            job.starter.wlm = st.wlm;
            job.starter.tmp_size = st.tmp_size;
            job.starter.tmpdir = st.tmpdir.map(PathBuf::from);
        }
        self.restore_gpus(job);
        self.restore_io(job);
        self.restore_bind(job);
        self.restore_time_limit(job);
    }

    /// Take back a recovered job's time limit, and the running time it had counted when last
    /// written (at most a minute or so behind: a restart never ends a job early, and gives it
    /// at most that much more). A row that cannot be read gives it the node's default limit,
    /// if the node has one (said): an unreadable row never lifts the node's rule.
    fn restore_time_limit(&self, job: &mut Job) {
        match self.store.time_limit(job.seq) {
            Ok(None) => {}
            Ok(Some(t)) => {
                job.req.time_limit = Some(t.limit);
                job.time_source = t.source;
                job.run_clock = super::time_limit::RunClock::resumed(t.ran_ms);
            }
            Err(e) => match self.cfg.time_limits.limit_for(None, false) {
                Ok(Some((limit, source))) => {
                    warn!(job = %job.id, error = %e, limit = %limit, "cannot read the job's time limit: it gets the node's default");
                    job.req.time_limit = Some(limit);
                    job.time_source = source;
                }
                _ => {
                    warn!(job = %job.id, error = %e, "cannot read the job's time limit: it runs without one (the node sets no default)")
                }
            },
        }
    }

    pub(super) fn job_from_record(
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
            starter: Starter {
                client_uid: rec.uid,
                ..Starter::default()
            },
            req: Request {
                ncpus: rec.ncpus as usize,
                ngpus: 0,
                pinned: pjw_core::GpuSet::new(),
                priority: rec.priority,
                placement: rec.placement,
                exclusive: rec.exclusive,
                submitted_ms: rec.submitted_ms,
                time_limit: None,
            },
            mem: rec.mem_limit,
            phase,
            cpus,
            gpus: pjw_core::GpuSet::new(),
            io: Default::default(),
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
            reason: match phase {
                Phase::Preempted => Some("preempted".into()),
                Phase::Suspended => Some("suspended".into()),
                _ => None,
            },
            client: ClientLink::default(),
            memory: MemTrack::default(),
            // Time queued before a restart, from the record.
            prof: JobProf::with_queued(
                rec.started_ms
                    .map(|s| (s - rec.submitted_ms).max(0))
                    .unwrap_or(0),
            ),
            // Its time limit's clock: from the time counted when last written, once its row
            // is read (`restore_time_limit`, decisions.md (cp)); from here without one.
            run_clock: Default::default(),
            time_source: Default::default(),
            end: EndWatch::default(),
            store_dirty: false,
            freezing: None,
            bind: None,
            steps: Default::default(),
            tasks: None,
        }
    }

    /// Keep a populated job cgroup the store did not know, with the CPUs its cpuset holds.
    pub(super) fn adopt(&mut self, name: String) -> Result<(), DaemonError> {
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
            submitted_ms: self.clock.now_ms(),
            started_ms: Some(self.clock.now_ms()),
            ended_ms: None,
            end_reason: None,
            priority: sched::MAX_PRIORITY,
            placement: sched::Placement::Any,
            exclusive: false,
            role: StoredRole::Primary,
        };
        let seq = self.store_write(0, "insert_job", OnFail::Refuse, |s| s.insert_job(&rec))?;
        warn!(job = %id, cpus = %cpus, "adopted a populated job cgroup the store did not know");
        let rec = JobRecord { seq, ..rec };
        // Adopted jobs get the top priority: nobody may preempt work pjw knows nothing about.
        let job = self.job_from_record(&rec, id, Phase::Primary, cpus, Some(Instant::now()));
        self.jobs.insert(seq, job);
        self.track(seq, false);
        Ok(())
    }
}
