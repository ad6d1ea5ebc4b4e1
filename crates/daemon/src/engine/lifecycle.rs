//! A job's life in the kernel: starting it in its cgroups, moving and freezing it, tracking its
//! main process and cgroup, and ending it once the cgroup is empty.

use std::time::{Duration, Instant};

use inotify::WatchMask;
use pjw_core::sched::Phase;
use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, Response};
use pjw_store::StartRecord;
use tracing::{debug, error, info, warn};

use super::pidfd::{spawn_pidfd_retry, spawn_pidfd_watch};
use super::store_writes::OnFail;
use super::{err, role_of, End, Engine, Event, Waiter};
use crate::cgroup_port::Killed;
use crate::os;
use crate::profile::EndReason;

/// Where a starting job was placed: its role, CPUs and memory nodes, when its process moved
/// in, and whether it was recorded running.
#[derive(Clone, Copy)]
struct Placed {
    phase: Phase,
    cpus: CpuSet,
    mems: CpuSet,
    moved_at: Instant,
    running: bool,
}

impl Engine {
    pub(super) fn start(&mut self, seq: i64, cpus: CpuSet, backfill: bool) -> bool {
        let Some(waiter) = self.take_live_waiter(seq) else {
            return false;
        };
        let pid = self.jobs[&seq].pid;
        let mems = self.alloc.topology().mems_for(&cpus);
        let phase = if backfill {
            Phase::Backfill
        } else {
            Phase::Primary
        };
        let running = pid.is_some();
        self.narrow_queued(seq, cpus, mems, backfill);
        if !self.record_start(seq, cpus, mems, phase, running, &waiter) {
            return false;
        }
        let Some(moved_at) = self.hand_off_or_place(seq, cpus, mems, backfill, pid, &waiter) else {
            return false;
        };
        let at = Placed {
            phase,
            cpus,
            mems,
            moved_at,
            running,
        };
        if !self.mount_job_tmp(seq, &waiter, &at) {
            return true;
        }
        self.finish_start(seq, waiter, at, backfill, pid)
    }

    /// The job's waiting client, taken, when the job may start: a registered job may have no
    /// process yet, every other job has its client's, still the caller's. None: it may not
    /// (a job whose client left is ended).
    fn take_live_waiter(&mut self, seq: i64) -> Option<Waiter> {
        let j = self.jobs.get(&seq)?;
        // A registered job may have no process yet; every other job has its client's.
        let pid = j.pid;
        if pid.is_none() && !j.starter.held {
            return None;
        }
        let waiter = self
            .jobs
            .get_mut(&seq)
            .and_then(|j| j.client.waiter.take())?;
        // The process must still be the caller's; one that cannot be read keeps its place.
        let Some(owner) = self.client_uid_now(seq, pid) else {
            if let Some(j) = self.jobs.get_mut(&seq) {
                j.client.waiter = Some(waiter);
            }
            return None;
        };
        let j = &self.jobs[&seq];
        if waiter.reply.is_closed() || (pid.is_some() && owner != Some(j.starter.client_uid)) {
            warn!(job = %j.id, pid = ?pid, "client process vanished before start");
            if let Some(j) = self.jobs.remove(&seq) {
                self.end_queued(&j, End::not_started("client left the queue"));
            }
            return None;
        }
        Some(waiter)
    }

    /// Durable first: after a crash from here on, recovery finds the job. False: the store
    /// refused (the client told, the job ended).
    fn record_start(
        &mut self,
        seq: i64,
        cpus: CpuSet,
        mems: CpuSet,
        phase: Phase,
        running: bool,
        waiter: &Waiter,
    ) -> bool {
        // Durable first: after a crash from here on, recovery finds the job. A store that
        // refuses refuses the start (nothing is in the kernel yet). One transaction: its GPUs,
        // CPUs, role and state. A job with a process is recorded `running` at once (recovery
        // treats `starting` and `running` alike when the job has a process); a held job stays
        // `starting` until its cgroups exist (docs/decisions.md (at)).
        let record = StartRecord {
            seq,
            cpus,
            mems,
            role: role_of(phase),
            started_ms: self.clock.now_ms(),
            gpus: self.gpu_grant(seq),
            running,
        };
        let recorded = self.store_write(seq, "start_job", OnFail::Refuse, |s| s.start_job(&record));
        let j = &self.jobs[&seq];
        if let Err(e) = recorded {
            error!(job = %j.id, error = %e, "cannot record job start");
            let _ = waiter
                .reply
                .send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
            // Its row is still live (queued): ended, so that its id is free again. The store
            // refused just now, so this end is most likely kept for a later retry.
            if let Some(j) = self.jobs.remove(&seq) {
                self.end_queued(&j, End::not_started("start failed: store"));
            }
            return false;
        }
        true
    }

    /// The job's cgroups made, fenced and its process moved in. The moment it was moved (its
    /// CPU and running time count from there); None: placing failed (the client told, the job
    /// ended).
    pub(super) fn place_job(
        &mut self,
        seq: i64,
        cpus: CpuSet,
        mems: CpuSet,
        backfill: bool,
        pid: Option<u32>,
        waiter: &Waiter,
    ) -> Option<Instant> {
        let j = &self.jobs[&seq];
        let limits = self.job_limits(j, cpus, mems);
        let cgroup = j.cgroup.clone();
        // Cgroups a queued job may have waited in hold its waiting limits and idle class: made
        // where missing without memory or task limits (v1 refuses a memory limit above the
        // waiting memory+swap one), then given the job's own in the order the kernel takes.
        let waited = j.client.cgroups != super::preplace::QueuedCgroups::None;
        let placed = match waited {
            false => self.driver.create_job(&cgroup, &limits),
            true => self
                .driver
                .create_job(&cgroup, &super::preplace::without_memory(&limits))
                .and_then(|_| self.driver.set_limits(&cgroup, &limits)),
        };
        let placed = placed
            .and_then(|_| self.fence_job(j))
            .and_then(|_| {
                if backfill || waited {
                    super::preplace::idle_where_it_can(&*self.driver, &cgroup, backfill)
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
                    super::oom_order::join(&*self.driver, &self.cfg.proc_root, j, &cgroup, p)
                }
                // A registered job without a process yet: its processes come by adoption.
                None => Ok(()),
            });
        // The job's CPU time counts from here (its process is in its cgroups): so does its
        // running time, for an efficiency that compares the same span.
        let moved_at = Instant::now();
        if let Err(e) = placed {
            self.procs.end_job(seq);
            error!(job = %j.id, error = %e, "cannot place job in its cgroups");
            if let Err(e) = self.driver.remove_job(&cgroup) {
                warn!(job = %j.id, cgroup = %cgroup, error = %e, "cannot remove the cgroups of a job that did not start");
            }
            let _ = waiter.reply.send(err(
                ErrorCode::Internal,
                format!("cannot set up the job's cgroups: {e}"),
            ));
            if let Some(j) = self.jobs.remove(&seq) {
                self.record_end(&j, End::not_started(&format!("start failed: {e}")));
            }
            return None;
        }
        Some(moved_at)
    }

    /// An unprivileged client's /tmp: a tmpfs the daemon mounts for it. False: it could not
    /// be mounted; the client is told, the job runs on and ends when it exits on the error.
    fn mount_job_tmp(&mut self, seq: i64, waiter: &Waiter, at: &Placed) -> bool {
        let Placed {
            phase,
            cpus,
            mems,
            moved_at,
            running,
        } = *at;
        let j = &self.jobs[&seq];
        if let Some(size) = j.starter.tmp_size.filter(|_| j.starter.client_uid != 0) {
            let name = crate::tmp::dir_name(&j.cgroup, seq);
            match crate::tmp::mount_job_tmp(&self.cfg.tmp_root, &name, size, j.uid, j.gid) {
                Ok(dir) => {
                    info!(job = %j.id, user = %j.user, dir = %dir.display(), size, "job tmpfs mounted");
                    let mut st = j.starter_record();
                    st.tmpdir = Some(dir.display().to_string());
                    if let Some(j) = self.jobs.get_mut(&seq) {
                        j.starter.tmpdir = Some(dir);
                    }
                    // Mounted: kept in memory if the store refuses, and written again.
                    let _ = self.store_write(seq, "set_starter", OnFail::Rewrite, |s| {
                        s.set_starter(seq, &st)
                    });
                }
                Err(e) => {
                    // The client is already in the job's cgroups: tell it, and let the job end
                    // the usual way when it exits on the error.
                    error!(job = %j.id, error = %e, "cannot mount the job's tmpfs");
                    let _ = waiter.reply.send(err(
                        ErrorCode::Internal,
                        format!("cannot set up the job's /tmp: {e}"),
                    ));
                    if !running {
                        let _ = self.store_write(seq, "set_running", OnFail::Rewrite, |s| {
                            s.set_running(seq)
                        });
                    }
                    if let Some(j) = self.jobs.get_mut(&seq) {
                        j.phase = phase;
                        j.cpus = cpus;
                        j.mems = mems;
                        j.started = Some(moved_at);
                    }
                    self.track(seq, true);
                    return false;
                }
            }
        }
        true
    }

    /// The job in its role on its CPUs, logged, counted and its client told.
    fn finish_start(
        &mut self,
        seq: i64,
        waiter: Waiter,
        at: Placed,
        backfill: bool,
        pid: Option<u32>,
    ) -> bool {
        let Placed {
            phase,
            cpus,
            mems,
            moved_at,
            running,
        } = at;
        if !self.jobs.contains_key(&seq) {
            return false;
        }
        // A held job is in its cgroups now: kept in memory if the store refuses, and written
        // again.
        if !running {
            let _ = self.store_write(seq, "set_running", OnFail::Rewrite, |s| s.set_running(seq));
        }
        let Some(j) = self.jobs.get_mut(&seq) else {
            return false;
        };
        j.phase = phase;
        j.cpus = cpus;
        j.mems = mems;
        j.started = Some(moved_at);
        j.reason = backfill.then(|| "backfill on cpus other jobs hold".to_string());
        info!(
            job = %j.id, user = %j.user, cpus = %cpus, mems = %mems, gpus = %j.gpus, pid = ?pid, role = role_of(phase).as_str(),
            wlm = j.starter.wlm.as_deref().unwrap_or(""),
            priority = j.req.priority, waited_ms = j.queued_at.elapsed().as_millis() as u64,
            "job started"
        );
        self.metrics.launch(j.queued_at.elapsed().as_secs_f64());
        self.start_stats.started(
            self.clock.now_ms(),
            j.queued_at.elapsed().as_millis().min(u128::from(u64::MAX)) as u64,
        );
        let _ = waiter.reply.send(Response::Started {
            job: j.id.to_string(),
            cpus,
            mems,
            backfill,
            tmp: j.tmp_reply(),
            shm: j.shm_reply(&self.cfg.ipc, self.mem_limit),
            env: Engine::gpu_env_of(&self.gpus, self.gpus_fenced, j),
            env_defaults: Engine::thread_env_of(&self.cfg, self.alloc.topology(), j),
        });
        // From now on a `run` from its main process is a step of it (engine/steps.rs).
        j.steps.main_told = true;
        self.track(seq, true);
        // Its first sample comes from the young jobs' tick, within a second (its first minute
        // is sampled every second), not from a read here: `status` reads fresh figures off
        // this thread anyway (`live.rs`), and a job shorter than that has its end's sample.
        self.arm_young();
        true
    }

    /// A running or frozen job moves to `cpus` in role `phase` (promotion, resume, demotion to
    /// backfill).
    pub(super) fn move_job(
        &mut self,
        seq: i64,
        cpus: CpuSet,
        phase: Phase,
        reason: Option<String>,
    ) -> bool {
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
        info!(job = %j.id, user = %j.user, cpus = %cpus, from = role_of(was).as_str(), to = role_of(phase).as_str(), "job moved");
        // Moved in the kernel already: kept in memory if the store refuses, and written again.
        let _ = self.store_write(seq, "set_role", OnFail::Rewrite, |s| {
            s.set_role(seq, role_of(phase), &cpus, &mems)
        });
        true
    }

    /// Watch a job: its main process (pidfd) and its cgroup (inotify on cgroup.events).
    pub(super) fn track(&mut self, seq: i64, main_alive: bool) {
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if let Some(watches) = self.watches.as_mut() {
            if let Some(path) = self.driver.events_path(&job.cgroup) {
                match watches.add(&path, WatchMask::MODIFY) {
                    Ok(wd) => {
                        self.by_watch.insert(wd.clone(), seq);
                        job.end.watch = Some(wd);
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

    pub(super) fn main_exited(&mut self, seq: i64) {
        let kill = self.cfg.kill_leftovers;
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if !job.end.ending {
            job.end.ending = true;
            debug!(job = %job.id, "main process exited");
            // Warned at its time limit: what it left has until the deadline to finish (a
            // wrapper script dies of the SIGTERM at once; its program writes its checkpoint).
            if kill && job.end.kill_due_ms.is_none() {
                if let Err(e) = self.kill_processes(seq) {
                    if let Some(job) = self.jobs.get(&seq) {
                        warn!(job = %job.id, error = %e, "cannot kill leftover processes");
                    }
                }
            }
        }
        self.check_empty(seq);
    }

    /// Kill every process of job `seq`: at once where the kernel can; else the kill rounds run
    /// on a blocking thread, which reports [`Event::Killed`]. Either way the job keeps its CPUs
    /// until its cgroup is seen empty.
    pub(super) fn kill_processes(&mut self, seq: i64) -> Result<(), pjw_cgroup::CgroupError> {
        let Some(job) = self.jobs.get(&seq) else {
            return Ok(());
        };
        match self.driver.kill(&job.cgroup)? {
            Killed::Done => Ok(()),
            Killed::Rounds(rounds) => {
                debug!(job = %job.id, "no cgroup.kill: kill rounds on a blocking thread");
                let cgroup = job.cgroup.clone();
                let work = move || rounds().err().map(|e| e.to_string());
                self.spawn_held(&cgroup, work, move |cgroup, error| Event::Killed {
                    seq: Some(seq),
                    cgroup,
                    error,
                });
                Ok(())
            }
        }
    }

    /// End the job if its cgroup is empty; where no event will tell us, look again shortly.
    ///
    /// A cgroup the kernel could not be read for is not empty: the job keeps its CPUs and its
    /// cgroup is looked at again (an event may never come for it).
    pub(super) fn check_empty(&mut self, seq: i64) {
        let Some(job) = self.jobs.get(&seq) else {
            return;
        };
        if job.started.is_none() {
            return;
        }
        if job.starter.held {
            debug!(job = %job.id, "held for its workload manager: kept, empty or not, until it ends the job");
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
            let reason = match (&job.end.killed_by, &job.end.ended_by, &job.end.reason) {
                (Some(by), _, _) => EndReason::KilledBy(by.clone()),
                (None, Some(by), _) => EndReason::EndedBy(by.clone()),
                (None, None, Some(r)) => r.clone(),
                (None, None, None) => EndReason::Exited,
            };
            self.finish(seq, reason);
            return;
        }
        let Some(job) = self.jobs.get_mut(&seq) else {
            return;
        };
        if (job.end.watch.is_none() || unknown) && !job.end.recheck_pending {
            let tx = self.tx.clone();
            let delay = if job.end.ending && !unknown {
                (job.end.recheck_delay * 2).clamp(Duration::from_millis(20), Duration::from_secs(1))
            } else {
                Duration::from_secs(1)
            };
            job.end.recheck_delay = delay;
            job.end.recheck_pending = true;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tx.send(Event::Recheck { seq });
            });
        }
    }

    pub(super) fn finish(&mut self, seq: i64, reason: EndReason) {
        let Some(mut job) = self.jobs.remove(&seq) else {
            return;
        };
        self.end_steps(&mut job);
        if let Some(wd) = job.end.watch.clone() {
            self.by_watch.remove(&wd);
            if let Some(w) = self.watches.as_mut() {
                // The kernel drops a watch whose cgroup went away by itself (EINVAL then).
                if let Err(e) = w.remove(wd) {
                    debug!(job = %job.id, error = %e, "inotify watch of the job's cgroup already gone");
                }
            }
        }
        let ooms = self.driver.oom_kills(&job.cgroup);
        let counts = self.procs.end_job(seq).unwrap_or_default();
        if job.started.is_some() {
            self.start_stats.ended(self.clock.now_ms());
        }
        // The last counters (CPU, the memory high-water mark, I/O) before the cgroups go: the
        // series' last sample, with profiles on.
        let mut finals = self.sample_end(&mut job);
        if finals.swap_peak.is_none() {
            // The kernel's swap peak, which no sample reads (a short job swaps between samples).
            finals.swap_peak = self.driver.memory_swap_peak(&job.cgroup).ok().flatten();
        }
        let memory = self.memory_end_note(&job, ooms, finals.mem_peak);
        let text = format!("{}{memory}", reason.text());
        self.remember_outcome(&job, ooms, finals.mem_peak, &text);
        // Emptied and removed on a blocking thread: a tmpfs of 400,000 files is a long walk.
        if let Some(dir) = &job.starter.tmpdir {
            crate::tmp::spawn_remove(dir.clone(), job.id.to_string());
        }
        // From the move into its cgroups to its last process's exit where process events tell
        // it (the CPU time's span; the engine saw the end later), else to now.
        let ended = counts
            .emptied_ns
            .filter(|_| self.proc_events)
            .map(crate::procs::instant_of_ns)
            .unwrap_or_else(Instant::now);
        let runtime_ms = job
            .started
            .map(|s| ended.saturating_duration_since(s).as_millis() as u64)
            .unwrap_or(0);
        self.scrub_ipc(&job, runtime_ms);
        self.record_steps(&job);
        self.record_end(
            &job,
            End {
                reason,
                memory,
                killed: job.end.killed_by.is_some(),
                ooms,
                running_ms: runtime_ms as i64,
                finals,
                counts: self.proc_events.then_some(counts),
            },
        );
        info!(
            job = %job.id, user = %job.user, cpus = %job.cpus, runtime_ms, reason = text.as_str(),
            processes = counts.procs_ever, threads = counts.threads_ever,
            max_processes = counts.procs_max, counts_exact = !counts.lossy, "job ended"
        );
        // Its last counters read and its end recorded: the cgroups go on a blocking thread
        // (engine/removal.rs), which answers the `end` waiters once they are gone. After the
        // record, so a crash meanwhile leaves an ended job's empty cgroups (recovery removes
        // them), never a `running` row without cgroups (which recovery would call a start
        // that never ran). A partition goes at once (its directory holds its CPUs from its
        // siblings).
        let partition = job.req.exclusive && self.partition.is_some();
        let waiters = std::mem::take(&mut job.end.waiters);
        self.remove_cgroups(&job.id, &job.cgroup, partition, waiters);
        self.replan();
    }
}
