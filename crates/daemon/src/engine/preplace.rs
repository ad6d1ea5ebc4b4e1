//! A queued job waits in its own cgroups (decision (cm)): when admission says wait, the job's
//! cgroups are made at once, on the CPUs its client may already use, in the idle class and
//! under its limits tightened for waiting ([`WAITING_MEM`], [`WAITING_PIDS`]: a client that
//! does not block takes nothing from running jobs), and the waiting client is moved into them.
//! Its start then writes the job's own limits on its CPUs (and leaves the idle class for a
//! primary start): no mkdir and no move, so no RCU grace period of the cgroup move on the
//! hand-off from one job to the next.
//!
//! A queued job that leaves the queue (killed, expired, its client gone, not reclaimed after a
//! restart) has its cgroups removed, at once or once its client has left them; a client that
//! stays after it was told is killed after [`LINGER`]. A failed pre-placement is only a
//! warning: the job starts the way it always did (cgroups made and client moved at its start).

use std::time::{Duration, Instant};

use tokio::time::Instant as TokioInstant;

use pjw_cgroup::JobLimits;
use pjw_core::CpuSet;
use tracing::{debug, info, warn};

use super::{Engine, Event, Job, Waiter};
use crate::cgroup_port::Killed;

/// The memory a queued job's cgroups allow while it waits (less where the job asked for less):
/// its client is blocked on its socket and has nothing to allocate, and what a client that is
/// not blocked allocated there, charged to the job partition, no governor would see (review F4).
pub(super) const WAITING_MEM: u64 = 64 << 20;
/// The tasks a queued job's cgroups allow while it waits (fewer where the node allows fewer):
/// its client is one single-threaded process.
pub(super) const WAITING_PIDS: u64 = 16;

/// How long a withdrawn queued job's client may stay in its cgroups after it was told: then
/// what is left in them is killed, so no process outlives its job's cgroups.
pub(super) const LINGER: Duration = Duration::from_secs(5);

/// Whether a queued job's cgroups exist while it waits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum QueuedCgroups {
    /// None made: it is placed when it starts.
    #[default]
    None,
    /// Made with its limits, its client in them: its start narrows the cpuset only.
    Ready,
    /// Narrowed to the CPUs it starts on (its start under way): placed already.
    Narrowed,
    /// They may exist (a pre-placement that failed half-way, a queued job recovered after a
    /// restart): its start makes and moves as for a job without them (both are idempotent);
    /// leaving the queue removes them.
    Unsure,
}

/// Cgroups of withdrawn queued jobs whose client had not left them yet, looked at again
/// until they are empty and removed.
#[derive(Debug, Default)]
pub(super) struct Vacating {
    /// The cgroups still being vacated.
    pub(super) left: Vec<Withdrawn>,
    /// A look is scheduled ([`Event::Vacate`]).
    armed: bool,
    /// The delay before the next look: from 20 ms, doubling up to 1 s.
    delay: Duration,
}

/// The cgroups of a job that left the queue while its client was still in them.
#[derive(Debug)]
pub(super) struct Withdrawn {
    /// The job's cgroup name.
    cgroup: String,
    /// Its job id, for the log.
    job: String,
    /// Since when (tokio's clock: tests move it).
    since: TokioInstant,
    /// Whether what was left in it has been killed.
    killed: bool,
}

impl Vacating {
    /// Whether cgroup `name` is still being vacated: a new job of that name neither waits in
    /// it nor starts until it is gone (the old client's process must not join the new job).
    pub(super) fn holds(&self, name: &str) -> bool {
        self.left.iter().any(|w| w.cgroup == name)
    }
}

/// `limits` without memory, swap or task limits: what makes missing cgroups of a job that may
/// have waited in its own without touching the waiting limits, which `set_limits` replaces in
/// the order the kernel takes.
pub(super) fn without_memory(limits: &JobLimits) -> JobLimits {
    JobLimits {
        memory_max: None,
        swap_max: None,
        pids_max: None,
        ..limits.clone()
    }
}

/// Put job cgroup `name` in (or take it out of) the idle class where the node has the cpu
/// controller; a node without one has no idle class to use, and that is no failure of the
/// job's placement (its start must not fail for it).
pub(super) fn idle_where_it_can(
    driver: &dyn crate::cgroup_port::CgroupPort,
    name: &str,
    idle: bool,
) -> Result<(), pjw_cgroup::CgroupError> {
    match driver.set_idle(name, idle) {
        Err(pjw_cgroup::CgroupError::MissingController { .. }) => {
            debug!(cgroup = name, "no cpu controller: no idle class");
            Ok(())
        }
        r => r,
    }
}

impl Engine {
    /// Make queued job `seq`'s cgroups and move its waiting client into them. Nothing when
    /// the job is not waiting with a client of its own, or where a waiting cgroup could take
    /// something from other jobs: a cpuset partition (an exclusive job's CPUs) or GPUs the
    /// job will be granted later. A failure leaves the job to be placed at its start.
    pub(super) fn preplace(&mut self, seq: i64) {
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        let Some(pid) = j.pid else { return };
        if j.started.is_some()
            || j.phase != pjw_core::sched::Phase::Queued
            || j.client.waiter.is_none()
            || j.client.cgroups != QueuedCgroups::None
            || j.starter.held
        {
            return;
        }
        if self.name_held(&j.cgroup) {
            debug!(job = %j.id, "queued job placed at its start (the old cgroups of its name are being removed or signalled)");
            return;
        }
        if self.partition.is_some() || (self.gpus_fenced && j.req.ngpus > 0) {
            debug!(job = %j.id, "queued job placed at its start (cpuset partitions or GPUs to fence)");
            return;
        }
        let Some(cpus) = self.queued_cpus(j, pid) else {
            debug!(job = %j.id, pid, "queued job placed at its start (its client's CPUs are not the pool's, or it is not the caller's)");
            return;
        };
        let limits = self.waiting_limits(j, cpus);
        let cgroup = j.cgroup.clone();
        // In the idle class while it waits: a client that does not block takes only cycles
        // nobody wants, not the CPUs of a running job (review F4).
        let placed = self
            .driver
            .create_job(&cgroup, &limits)
            .and_then(|_| idle_where_it_can(&*self.driver, &cgroup, true))
            .and_then(|_| self.fence_job(j))
            .and_then(|_| {
                super::oom_order::join(&*self.driver, &self.cfg.proc_root, j, &cgroup, pid)
            });
        let state = match placed {
            Ok(()) => {
                debug!(job = %j.id, pid, cpus = %cpus, "queued job waits in its cgroups");
                QueuedCgroups::Ready
            }
            Err(e) => {
                warn!(job = %j.id, error = %e, "cannot make the queued job's cgroups; they are made when it starts");
                match self.driver.remove_job(&cgroup) {
                    Ok(()) => QueuedCgroups::None,
                    Err(e) => {
                        debug!(job = %j.id, error = %e, "a queued job's half-made cgroups stay until it starts or leaves the queue");
                        QueuedCgroups::Unsure
                    }
                }
            }
        };
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.client.cgroups = state;
        }
    }

    /// Job `j`'s cgroup limits on `cpus` and `mems`: its memory, the node's pids and swap
    /// limits, its I/O.
    pub(super) fn job_limits(&self, j: &Job, cpus: CpuSet, mems: CpuSet) -> JobLimits {
        JobLimits {
            cpus,
            mems,
            memory_max: j.mem,
            pids_max: self.cfg.pids_max,
            swap_max: self.cfg.swap_max,
            io: j.io.clone(),
        }
    }

    /// Job `j`'s limits while it waits on `cpus`: its own, with memory and tasks at most
    /// [`WAITING_MEM`] and [`WAITING_PIDS`]; its start gives it its own.
    fn waiting_limits(&self, j: &Job, cpus: CpuSet) -> JobLimits {
        let limits = self.job_limits(j, cpus, self.alloc.topology().mems_for(&cpus));
        JobLimits {
            memory_max: Some(
                limits
                    .memory_max
                    .map_or(WAITING_MEM, |m| m.min(WAITING_MEM)),
            ),
            pids_max: Some(
                limits
                    .pids_max
                    .map_or(WAITING_PIDS, |p| p.min(WAITING_PIDS)),
            ),
            ..limits
        }
    }

    /// The CPUs a queued job's client waits on: those of the pool its process may run on
    /// now, so that waiting in the job's cgroups widens nothing. None: its process is not the
    /// caller's any more, cannot be read, or may run on none of the pool.
    fn queued_cpus(&self, j: &Job, pid: u32) -> Option<CpuSet> {
        let path = self.cfg.proc_root.join(pid.to_string()).join("status");
        let text = std::fs::read_to_string(path).ok()?;
        let status = pjw_kernelfs::proc_status::parse(&text).ok()?;
        if status.uid[0] != j.starter.client_uid {
            return None;
        }
        let cpus = status.cpus_allowed_list.intersection(&self.pool);
        (!cpus.is_empty()).then_some(cpus)
    }

    /// A job that waited in its cgroups (in the idle class, under its waiting limits) given
    /// its own limits on `cpus`, and for a primary start taken out of the idle class after it
    /// is on its own CPUs (a backfill start stays in it): then [`QueuedCgroups::Narrowed`], and
    /// its start only records and answers. Else it is placed the usual way (it had no cgroups, or a write failed: then
    /// with a warning). Called before the start is recorded: a crash between the two leaves a
    /// job the store calls queued, never a running one on the wide waiting cpuset.
    pub(super) fn narrow_queued(&mut self, seq: i64, cpus: CpuSet, mems: CpuSet, backfill: bool) {
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        if j.client.cgroups != QueuedCgroups::Ready {
            return;
        }
        let cgroup = j.cgroup.clone();
        let limits = self.job_limits(j, cpus, mems);
        let narrowed = (|| {
            self.driver.set_limits(&cgroup, &limits)?;
            if !backfill {
                idle_where_it_can(&*self.driver, &cgroup, false)?;
            }
            Ok::<(), pjw_cgroup::CgroupError>(())
        })();
        let state = match narrowed {
            Ok(()) => QueuedCgroups::Narrowed,
            Err(e) => {
                warn!(job = %j.id, error = %e, "cannot narrow the queued job's cgroups; placing it as a new job");
                QueuedCgroups::Unsure
            }
        };
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.client.cgroups = state;
        }
    }

    /// The job's process in its cgroups on its CPUs: already, for a job narrowed by
    /// [`Engine::narrow_queued`] (its process counted from here), else made and moved by
    /// [`Engine::place_job`]. The moment it was placed; None: placing failed (the client told,
    /// the job ended, cgroups its client waited in removed once it leaves them).
    pub(super) fn hand_off_or_place(
        &mut self,
        seq: i64,
        cpus: CpuSet,
        mems: CpuSet,
        backfill: bool,
        pid: Option<u32>,
        waiter: &Waiter,
    ) -> Option<Instant> {
        let j = self.jobs.get(&seq)?;
        if j.client.cgroups == QueuedCgroups::Narrowed {
            if let Some(p) = pid {
                self.procs.start_job(seq, p);
            }
            debug!(job = %j.id, cpus = %cpus, "queued job handed its cpus in its own cgroups");
            return Some(Instant::now());
        }
        let waited_in =
            (j.client.cgroups != QueuedCgroups::None).then(|| (j.cgroup.clone(), j.id.to_string()));
        let placed = self.place_job(seq, cpus, mems, backfill, pid, waiter);
        if let (None, Some((cgroup, id))) = (placed, waited_in) {
            self.vacate(&cgroup, &id);
        }
        placed
    }

    /// A queued job left the queue (removed from the table): its end recorded, and the cgroups
    /// it waited in removed, at once or once empty.
    pub(super) fn end_queued(&mut self, j: &Job, end: super::End) {
        self.record_end(j, end);
        self.withdraw_cgroups(j);
    }

    /// A queued job left the queue: the cgroups it waited in go, at once or once empty.
    pub(super) fn withdraw_cgroups(&mut self, j: &Job) {
        if j.started.is_none() && j.client.cgroups != QueuedCgroups::None {
            self.vacate(&j.cgroup, j.id.as_str());
        }
    }

    /// Remove job cgroup `cgroup` (job `job`), which no job holds any more: now if it is empty
    /// or missing, else once its processes have left (or been killed after [`LINGER`]).
    pub(super) fn vacate(&mut self, cgroup: &str, job: &str) {
        match self.driver.remove_job(cgroup) {
            Ok(()) => debug!(job, cgroup, "cgroups of a job that left the queue removed"),
            Err(e) => {
                debug!(job, cgroup, error = %e, "the cgroups of a job that left the queue go once its client has left them");
                self.vacating.left.push(Withdrawn {
                    cgroup: cgroup.to_string(),
                    job: job.to_string(),
                    since: TokioInstant::now(),
                    killed: false,
                });
                self.arm_vacate(true);
            }
        }
    }

    /// Look again at the cgroups left by withdrawn queued jobs: removed once empty; what
    /// stays past [`LINGER`] is killed. A cgroup that cannot be read is looked at again.
    pub(super) fn vacate_tick(&mut self) {
        self.vacating.armed = false;
        let left = std::mem::take(&mut self.vacating.left);
        let before = left.len();
        for Withdrawn {
            cgroup,
            job,
            since,
            killed,
        } in left
        {
            let populated = self.driver.is_populated(&cgroup).unwrap_or(true);
            if !populated {
                match self.driver.remove_job(&cgroup) {
                    Ok(()) => {
                        info!(job = %job, cgroup = %cgroup, "cgroups of a job that left the queue removed");
                        continue;
                    }
                    Err(e) => {
                        debug!(job = %job, error = %e, "cannot remove a withdrawn job's cgroups yet")
                    }
                }
            }
            let killed =
                killed || (populated && since.elapsed() >= LINGER && self.kill_left(&cgroup, &job));
            self.vacating.left.push(Withdrawn {
                cgroup,
                job,
                since,
                killed,
            });
        }
        if !self.vacating.left.is_empty() {
            self.arm_vacate(false);
        }
        // A queued job of a name just freed may start now.
        if self.vacating.left.len() < before {
            self.replan();
        }
    }

    /// Kill what stayed in a withdrawn job's cgroups. True: the kill was sent (rounds where
    /// the kernel has no `cgroup.kill` run on a blocking thread).
    fn kill_left(&mut self, cgroup: &str, job: &str) -> bool {
        warn!(
            job,
            cgroup,
            linger_s = LINGER.as_secs(),
            "processes stayed in the cgroups of a job that left the queue; killed"
        );
        match self.driver.kill(cgroup) {
            Ok(Killed::Done) => true,
            Ok(Killed::Rounds(rounds)) => {
                // Held like a job's rounds: they list the cgroup by name, which may be freed
                // (removed once empty) before they are done.
                let work = move || rounds().err().map(|e| e.to_string());
                self.spawn_held(cgroup, work, |cgroup, error| Event::Killed {
                    seq: None,
                    cgroup,
                    error,
                });
                true
            }
            Err(e) => {
                warn!(job, error = %e, "cannot kill what stayed in a withdrawn job's cgroups");
                false
            }
        }
    }

    /// Schedule the next look at the vacating cgroups (`fresh`: one was just added, look soon).
    fn arm_vacate(&mut self, fresh: bool) {
        let v = &mut self.vacating;
        v.delay = if fresh && !v.armed {
            Duration::from_millis(20)
        } else {
            (v.delay * 2).clamp(Duration::from_millis(20), Duration::from_secs(1))
        };
        if v.armed {
            return;
        }
        v.armed = true;
        let (tx, delay) = (self.tx.clone(), v.delay);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(Event::Vacate);
        });
    }
}
