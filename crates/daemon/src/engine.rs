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
//! fired): leftovers killed → `populated 0` seen on `cgroup.events` → its last counters read,
//! recorded as `ended`, the queue re-planned (its CPUs go to the next job), its cgroups removed
//! on a blocking thread ([`removal`]).
//!
//! This file holds the engine's state and dispatches events; each concern has its own module:
//! [`events`] (inputs), [`job`] (one job), [`admission`] (`run`), [`planning`] (the queue
//! policy's actions), [`lifecycle`] (start, move, track, end) with [`pidfd`] (the main
//! process watcher) and [`freezing`] (freezes, waited for off the engine thread), [`removal`] (an ended job's cgroups, removed off it), [`control`] (kill, suspend, resume, priority), [`recovery`] (restart),
//! [`mem_governor`] (the memory governor's reads and writes), [`profile_hooks`] (sampler, job
//! summaries, `report`), [`proc_events`] (the process tracker), [`binding`] (thread balancing), [`wlm`] (workload-manager
//! jobs and adoption), [`status`] (`pjw status`, metrics) with [`live`] (its fresh figures).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use inotify::{WatchDescriptor, Watches};
use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::governor::GovernorConfig;
use pjw_core::sched::QueuePolicy;
use pjw_core::{CpuSet, JobId};
use pjw_proto::{ErrorCode, Response};
use tokio::sync::mpsc;
use tracing::warn;

use crate::adopt::Scanner;
use crate::cgroup_port::CgroupPort;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::os;
use crate::procs::{ProcCounts, ProcTracker};
use crate::profile::{EndReason, Finals, Writer};
use crate::store_port::StorePort;

mod admission;
#[cfg(test)]
mod bind_tests;
mod binding;
mod control;
#[cfg(test)]
mod event_tests;
mod events;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod freeze_tests;
mod freezing;
#[cfg(test)]
mod gpu_tests;
mod gpus;
mod io;
#[cfg(test)]
mod io_tests;
mod ipc;
#[cfg(test)]
mod ipc_tests;
mod job;
mod lease;
#[cfg(test)]
mod lease_tests;
mod lifecycle;
mod live;
#[cfg(test)]
mod live_tests;
mod login;
mod mem_governor;
mod mem_status;
#[cfg(test)]
mod mem_tests;
mod oom_order;
mod outcome;
mod pidfd;
mod planning;
mod preplace;
#[cfg(test)]
mod preplace_tests;
mod proc_events;
mod profile_hooks;
mod recovery;
mod reload;
mod removal;
#[cfg(test)]
mod removal_tests;
mod signalling;
mod slurm_task;
#[cfg(test)]
mod slurm_task_tests;
mod status;
#[cfg(test)]
mod step_tests;
mod steps;
#[cfg(test)]
mod store_tests;
mod store_writes;
#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod tick_tests;
mod time_limit;
#[cfg(test)]
mod time_limit_tests;
mod validation;
mod wlm;
#[cfg(test)]
mod wlm_tests;

pub use events::{Control, Cred, Event, Who};
use job::{role_of, sched_placement, Job, Starter, Waiter};

/// The daemon's state.
pub struct Engine {
    cfg: Config,
    driver: Box<dyn CgroupPort>,
    store: Box<dyn StorePort>,
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
    /// When to plan again for a start put off because its client could not be read.
    start_retry: Option<Instant>,
    /// The memory governor's settings, with the partition limit; None when it is off.
    governor: Option<GovernorConfig>,
    /// The partition limit (bytes), for admission by `--mem`.
    mem_limit: u64,
    last_thaw_ms: Option<i64>,
    /// `pswpin` of /proc/vmstat at the last governor tick, and when.
    last_swap_in: Option<(u64, Instant)>,
    /// When the governor's tick last ran, and what it saw (status, metrics, admission).
    mem_tick_at: Option<Instant>,
    mem_view: Option<mem_governor::MemView>,
    /// What memory did to recently ended jobs, for `outcome` requests.
    outcomes: outcome::Outcomes,
    /// Adoption: the /proc reader and when each unknown job id was last logged.
    scanner: Scanner,
    /// A sweep in turns: the last pid its previous turn looked at (None: no sweep under way).
    sweep_from: Option<u32>,
    unknown_logged: HashMap<String, i64>,
    /// /dev/shm scrubs under way, per owner, each with the one asked for meanwhile (merged):
    /// at most one walk per owner at a time (issue 25, N5).
    scrubs: ipc::Scrubs,
    /// Which job every jailed process belongs to; exact process and thread counts.
    procs: ProcTracker,
    /// The profile store writer (its own thread and connection); None when profiles are off.
    writer: Option<Writer>,
    /// Main processes of ended jobs whose exit status had not arrived yet: pid → (seq, when).
    late_exits: HashMap<u32, (i64, Instant)>,
    /// Steps of ended jobs recorded before their process's exit status arrived: pid → (seq,
    /// its record, when).
    late_step_exits: HashMap<u32, (i64, pjw_store::StepRecord, Instant)>,
    /// When retention last ran.
    last_retention: Option<Instant>,
    /// When the sampler last read the jobs' PSI files.
    last_psi_read: Option<Instant>,
    /// Whether process events arrive (the proc connector is open): only then are the
    /// tracker's totals reported.
    proc_events: bool,
    /// Partition type for exclusive jobs, when the parent could be made a partition root.
    partition: Option<pjw_cgroup::Partition>,
    /// Counters and histograms for the metrics endpoint.
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// The central-store shipper (`[central]`), woken when a job's summary is recorded.
    shipper: Option<pjw_central::Shipper>,
    /// Ends and exit statuses of jobs gone from memory that the store did not take yet.
    unrecorded: Vec<store_writes::Unrecorded>,
    /// Something waits to be written again (a dirty job or an unrecorded write).
    store_backlog: bool,
    /// A [`Event::StoreRetry`] timer is running.
    store_retry_armed: bool,
    /// The wall clock (stored timestamps, queue deadlines).
    clock: Box<dyn Clock>,
    /// The node's GPUs ([`Engine::set_gpus`]).
    gpus: pjw_core::Gpus,
    /// Whether jobs are fenced off the GPUs they were not given (v1 devices controller).
    gpus_fenced: bool,
    /// The NVML thread's latest GPU readings ([`Engine::set_gpu_sampler`]); None: no NVML
    /// sampling (`[gpus] nvml = false`, or no NVIDIA GPU with a PCI address).
    gpu_sampler: Option<crate::gpu_stats::GpuSampler>,
    /// The thread balancer's thread ([`Engine::set_binder`]); None: no balancing.
    binder: Option<crate::bind::Binder>,
    /// The next generated job number: read from the store once, taken with each job's
    /// submission (in the same transaction as its row).
    next_number: Option<u64>,
    /// The rules the connection layer enforces before a request reaches the engine (the admin
    /// group), as in effect now: published again by every reload, so a reload that changes one
    /// changes it in that layer too ([`Engine::conn_rules`]).
    conn_rules: tokio::sync::watch::Sender<crate::reload::ConnRules>,
    /// Registered jobs' leases, and the thread that asks their managers (`engine/lease.rs`).
    leases: HashMap<i64, lease::JobLease>,
    asker: Option<crate::lease::Asker>,
    /// A [`Event::LeaseTick`] timer is running.
    lease_armed: bool,
    /// Start-time statistics: starts and ends per second, waits to start, queue, freezes.
    start_stats: pjw_core::start_stats::StartStats,
    /// Ended jobs' cgroups being removed on a blocking thread, by cgroup name: no job of that
    /// name starts until they are gone (`engine/removal.rs`).
    removing: HashMap<String, removal::Pending>,
    /// Job cgroup names with signals on their way off the engine's thread (a time limit's
    /// SIGTERM, kill rounds), how many each: no job of that name waits in its cgroups or starts
    /// until they report (`engine/signalling.rs`).
    signalling: HashMap<String, usize>,
    /// Live figures for `status` (`live.rs`): passes off the engine thread, their readings.
    live: live::Live,
    /// The young jobs' sampling tick is armed ([`Event::SampleYoung`]).
    young_armed: bool,
    /// Cgroups of withdrawn queued jobs that their client had not left yet
    /// (`engine/preplace.rs`).
    vacating: preplace::Vacating,
}

/// How a job ended, for [`Engine::record_end`].
#[derive(Debug, Default)]
struct End {
    /// Why, as its source said.
    reason: EndReason,
    /// What memory did to it, after the reason in the stored text (`; ` before each part).
    memory: String,
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
        driver: impl CgroupPort + 'static,
        store: impl StorePort + 'static,
        alloc: Allocator,
        pool: CpuSet,
        vcpus: usize,
        mem_limit: u64,
        watches: Option<Watches>,
        tx: mpsc::UnboundedSender<Event>,
    ) -> Engine {
        let node = os::hostname(&cfg.proc_root);
        let cfg_window_ms = cfg.stats_window_ms;
        let policy = QueuePolicy {
            vcpus,
            backfill: cfg.backfill,
            hard_preemption: cfg.hard_preemption,
            preempt_min_priority: cfg.preempt_priority,
            queue_ttl_ms: cfg.queue_ttl.map(|s| s as i64 * 1000),
            order: cfg.queue_order,
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
        let (conn_rules, _) = tokio::sync::watch::channel(crate::reload::ConnRules::of(&cfg));
        Engine {
            conn_rules,
            scanner,
            sweep_from: None,
            unknown_logged: HashMap::new(),
            scrubs: ipc::Scrubs::default(),
            governor,
            mem_limit,
            last_thaw_ms: None,
            last_swap_in: None,
            mem_tick_at: None,
            mem_view: None,
            outcomes: outcome::Outcomes::default(),
            cfg,
            driver: Box::new(driver),
            store: Box::new(store),
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
            start_retry: None,
            procs: ProcTracker::new(),
            writer: None,
            late_exits: HashMap::new(),
            late_step_exits: HashMap::new(),
            last_retention: None,
            last_psi_read: None,
            proc_events: false,
            partition: None,
            metrics: Default::default(),
            shipper: None,
            unrecorded: Vec::new(),
            store_backlog: false,
            store_retry_armed: false,
            clock: Box::new(SystemClock),
            gpus: pjw_core::Gpus::none(),
            gpus_fenced: false,
            gpu_sampler: None,
            binder: None,
            next_number: None,
            leases: HashMap::new(),
            removing: HashMap::new(),
            signalling: HashMap::new(),
            asker: None,
            lease_armed: false,
            start_stats: pjw_core::start_stats::StartStats::new(
                cfg_window_ms,
                crate::clock::SystemClock.now_ms(),
            ),
            live: live::Live::default(),
            young_armed: false,
            vacating: preplace::Vacating::default(),
        }
    }

    /// Read the wall clock from `clock` (tests move a fake one by hand).
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Engine {
        self.clock = Box::new(clock);
        self.start_stats =
            pjw_core::start_stats::StartStats::new(self.cfg.stats_window_ms, self.clock.now_ms());
        self
    }

    /// Ship finished jobs to the central store with `s` (woken at every job end).
    pub fn set_shipper(&mut self, s: pjw_central::Shipper) {
        self.shipper = Some(s);
    }

    /// The connection layer's rules as in effect now, following every reload.
    pub fn conn_rules(&self) -> tokio::sync::watch::Receiver<crate::reload::ConnRules> {
        self.conn_rules.subscribe()
    }

    /// The counters and histograms this engine feeds (for the metrics endpoint).
    pub fn metrics(&self) -> std::sync::Arc<crate::metrics::Metrics> {
        self.metrics.clone()
    }

    /// Start the profile writer (a second connection to the store, on its own thread).
    pub fn start_profiles(&mut self) -> Result<(), crate::DaemonError> {
        if !self.cfg.profile.enabled {
            return Ok(());
        }
        let w = Writer::spawn(self.store.path().to_path_buf())?;
        self.writer = Some(w);
        Ok(())
    }

    /// Fold the NVML thread's latest readings into GPU jobs' samples (and poke it each tick).
    pub fn set_gpu_sampler(&mut self, s: crate::gpu_stats::GpuSampler) {
        self.gpu_sampler = Some(s);
    }

    /// The profile writer's failed writes so far (for metrics).
    /// The store sequence of the job `id`, for tests outside the engine's modules.
    #[cfg(test)]
    pub(crate) fn seq_of(&self, id: &str) -> Option<i64> {
        self.jobs
            .values()
            .find(|j| j.id.to_string() == id)
            .map(|j| j.seq)
    }

    pub fn store_write_errors(&self) -> u64 {
        self.writer.as_ref().map(Writer::errors).unwrap_or(0) + self.metrics.store_write_errors()
    }

    /// Handle one event.
    pub fn handle(&mut self, ev: Event) {
        self.handle_event(ev);
        self.flush_store();
        // Time per state comes from the transitions, which only happen in events; so do the
        // queue's length and the freezes of the start-time statistics.
        let now = self.clock.now_ms();
        let (mut queued, mut leased) = (0u32, false);
        for j in self.jobs.values_mut() {
            let st = j.prof_state();
            let froze = j.prof.freezes;
            j.prof.observe(st, now);
            if j.prof.freezes > froze {
                self.start_stats.froze(now);
            }
            queued += u32::from(st == crate::profile::ProfState::Queued);
            leased |= Engine::leased(j);
        }
        self.observe_run_clocks();
        if queued != self.start_stats.queue_len() {
            self.start_stats.queue(now, queued);
        }
        if leased && !self.lease_armed {
            self.arm_lease();
        }
    }

    fn handle_event(&mut self, ev: Event) {
        match ev {
            Event::Submit {
                conn,
                cred,
                who,
                req,
                reply,
            } => self.submit(conn, cred, &who, req, reply),
            Event::Status { reply } => self.status_request(reply),
            Event::LiveRead { readings } => self.live_read(readings),
            Event::LiveLate => self.live_late(),
            Event::Control {
                cred,
                who,
                job,
                what,
                reply,
            } => {
                if what == Control::End {
                    self.end(cred, &job, reply);
                } else {
                    let r = self.control(cred, &who, &job, what);
                    let _ = reply.send(r);
                }
            }
            Event::ClientGone { conn } => self.client_gone(conn),
            Event::MainExited { seq } => self.main_exited(seq),
            Event::StepExited { seq, step } => self.step_exited(seq, step),
            Event::Login {
                cred,
                who,
                req,
                reply,
            } => self.login(cred, &who, req, reply),
            Event::CgroupChanged { wd } => {
                if let Some(seq) = self.by_watch.get(&wd).copied() {
                    self.check_empty(seq);
                }
            }
            Event::Recheck { seq } => {
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.end.recheck_pending = false;
                }
                self.check_empty(seq)
            }
            ev @ (Event::Killed { .. } | Event::Signalled { .. }) => self.pass_reported(ev),
            Event::Vacate => self.vacate_tick(),
            Event::Frozen { seq, error } => self.freeze_done(seq, error),
            Event::CgroupsRemoved { cgroup, error } => self.cgroups_removed(&cgroup, error),
            Event::Govern => {
                self.govern();
                // A limit whose timer was armed before a freeze or thaw moved it; a warning
                // sent now gets its own timer for the kill.
                self.enforce_time_limits();
                self.arm_timer();
            }
            Event::Outcome { cred, job, reply } => {
                let _ = reply.send(self.outcome(cred, &job));
            }
            Event::Register {
                conn,
                cred,
                who,
                req,
                reply,
            } => self.register(conn, cred, &who, req, reply),
            Event::SlurmTask { cred, req, reply } => self.slurm_task(cred, req, reply),
            Event::Sweep => self.sweep(false),
            Event::SweepMore => self.sweep(true),
            Event::Proc(msg) => self.proc_events(msg),
            Event::Sample => self.sample(),
            Event::SampleYoung => self.sample_young(),
            Event::Bind => self.bind_tick(),
            Event::LeaseTick => self.lease_tick(),
            Event::LeaseWords(words) => self.lease_words(words),
            Event::Metrics { reply } => {
                let _ = reply.send(self.metrics_snapshot());
            }
            Event::Report {
                cred,
                who,
                query,
                reply,
            } => self.report(cred, &who, query, reply),
            Event::StoreRetry => self.store_retry(),
            Event::Tick { generation } => {
                if generation == self.tick_generation {
                    self.start_retry = None;
                    self.drop_unclaimed();
                    self.enforce_time_limits();
                    self.replan();
                }
            }
        }
    }

    /// Let exclusive jobs be cpuset partitions of type `kind` (the parent is one already).
    pub fn enable_partitions(&mut self, kind: pjw_cgroup::Partition) {
        self.partition = Some(kind);
    }

    /// Tell every queued client the daemon is stopping (they reconnect and are served after
    /// the restart; their place is kept in the store). Running jobs keep running, the time
    /// their limits counted written (a restart or an upgrade gives none back); with none
    /// left, the parent cgroups are removed so a stopped daemon leaves no empty cgroups behind.
    pub fn shutdown(&mut self) {
        self.save_all_run_clocks();
        for j in self.jobs.values_mut() {
            if let Some(w) = j.client.waiter.take() {
                let _ = w
                    .reply
                    .send(err(ErrorCode::ShuttingDown, "the pjw daemon is stopping"));
            }
        }
        self.finish_removals();
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
