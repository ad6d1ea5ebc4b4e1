//! The engine's profile hooks: the sampler tick, recording a job's end with its summary, exit
//! statuses from process events, and answering `report` (see [`crate::profile`] and
//! [`crate::report`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pjw_core::GpuId;
use pjw_proto::ReportQuery;
use pjw_store::{JobRecord, JobSummary, ProcessSample, Sample};
use proc_connector::ProcEvent;
use tokio::sync::oneshot;
use tracing::{debug, info};

use super::{err, Cred, End, Engine, Job, Who};
use crate::bind::{ProfJob, ProfileTick};
use crate::gpu_stats::{self, GpuReading};
use crate::profile::{self, EndReason, JobProf, WriteOp, Writer};
use crate::report::{self, Access, LiveJob, ReportAnswer};

/// How long the exit status of an ended job's main process is awaited.
const LATE_EXIT_WAIT: Duration = Duration::from_secs(30);
/// How often the kernel updates the PSI averages (`PSI_FREQ`, 2 s), with a little slack for
/// timer jitter.
const PSI_UPDATE_PERIOD: Duration = Duration::from_millis(1900);
/// How often retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

impl End {
    pub(super) fn of(reason: EndReason) -> End {
        End {
            reason,
            ..End::default()
        }
    }

    /// A job that never started, and why.
    pub(super) fn not_started(why: &str) -> End {
        End::of(EndReason::NotStarted(why.to_string()))
    }
}

/// Between two updates of the kernel's PSI averages a sample carries the last ones read.
fn carry_psi(s: &mut Sample, last: &Sample) {
    s.psi_cpu_some = last.psi_cpu_some;
    s.psi_cpu_full = last.psi_cpu_full;
    s.psi_mem_some = last.psi_mem_some;
    s.psi_mem_full = last.psi_mem_full;
    s.psi_io_some = last.psi_io_some;
    s.psi_io_full = last.psi_io_full;
}

impl Engine {
    /// Record that `job` ended: its summary and `ended` in one transaction.
    pub(super) fn record_end(&mut self, job: &Job, end: End) {
        let now = self.clock.now_ms();
        let mut prof = job.prof.clone();
        prof.observe(job.prof_state(), now);
        let class = profile::end_class(&end.reason, end.killed, end.ooms, prof.exit_status);
        let summary = prof.summary(
            job.seq,
            &self.node,
            class,
            end.running_ms,
            &end.finals,
            end.counts,
        );
        if job.started.is_some() && prof.exit_status.is_none() {
            if let Some(pid) = job.pid {
                self.late_exits.insert(pid, (job.seq, Instant::now()));
            }
        }
        let text = format!("{}{}", end.reason.text(), end.memory);
        self.write_end(job.seq, now, &text, &summary);
        info!(
            job = %job.id, user = %job.user, end = class.as_str(), cpu_user_usec = summary.cpu_user_usec,
            cpu_system_usec = summary.cpu_system_usec, mem_peak = summary.mem_peak,
            queued_ms = summary.queued_ms, frozen_ms = summary.frozen_ms, samples = summary.samples,
            "job profile recorded"
        );
    }

    /// Record that a job known only from its store record ended (found at recovery).
    pub(super) fn record_end_rec(&mut self, rec: &JobRecord, reason: EndReason) {
        let now = self.clock.now_ms();
        let mut prof = JobProf::default();
        let start = rec.started_ms.unwrap_or(now);
        prof.queued_ms = (start - rec.submitted_ms).max(0);
        let class = profile::end_class(&reason, false, 0, None);
        let running = rec.started_ms.map(|s| now - s).unwrap_or(0);
        let summary = prof.summary(
            rec.seq,
            &self.node,
            class,
            running,
            &Default::default(),
            None,
        );
        self.write_end(rec.seq, now, &reason.text(), &summary);
    }

    fn write_end(&mut self, seq: i64, now: i64, reason: &str, summary: &JobSummary) {
        if self.store_end(seq, now, reason, Some(summary.clone())) {
            if let Some(s) = &self.shipper {
                s.wake();
            }
        }
    }

    /// An exit event: the exit status of a job's main process.
    pub(super) fn note_exit(&mut self, ev: &ProcEvent) {
        let ProcEvent::Exit {
            pid,
            tgid,
            exit_code,
            ..
        } = *ev
        else {
            return;
        };
        if pid != tgid {
            return;
        }
        let status = profile::exit_status(exit_code);
        if let Some(seq) = self.procs.job_of(tgid) {
            if let Some(j) = self.jobs.get_mut(&seq) {
                if j.pid == Some(tgid) {
                    j.prof.exit_status = Some(status);
                }
            }
            self.note_step_exit(seq, tgid, status);
        } else if let Some((seq, _)) = self.late_exits.remove(&tgid) {
            // The job was recorded ended before its main process's exit event arrived.
            self.store_exit_status(seq, status);
        } else if let Some((seq, rec, _)) = self.late_step_exits.remove(&tgid) {
            // Likewise a step of it (killed with the job, its event behind the job's end).
            self.record_late_step_exit(seq, rec, status);
        }
    }

    /// The sampler's tick (`profile.interval`): one sample per started job, kept as the job's
    /// last and, with profiles on, written as one batch.
    pub(super) fn sample(&mut self) {
        self.sample_pass(false);
    }

    /// The young jobs' tick (every [`profile::YOUNG_EVERY`] while a job is younger than
    /// [`profile::YOUNG_FOR`]): a sample of each such job not sampled within the last
    /// second, so a short job's series has its shape; armed again while one is left.
    pub(super) fn sample_young(&mut self) {
        self.young_armed = false;
        self.sample_pass(true);
        self.arm_young();
    }

    /// Arm the young jobs' tick if a started job is young and none is armed. Nothing to do
    /// where `profile.interval` is as short as the young jobs' step.
    pub(super) fn arm_young(&mut self) {
        if self.young_armed
            || self.cfg.profile.interval_ms <= profile::YOUNG_EVERY.as_millis() as u64
            || !self
                .jobs
                .values()
                .any(|j| j.started.is_some_and(|s| s.elapsed() < profile::YOUNG_FOR))
        {
            return;
        }
        self.young_armed = true;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(profile::YOUNG_EVERY).await;
            let _ = tx.send(super::Event::SampleYoung);
        });
    }

    /// One sample of the started jobs (only the young ones not sampled within the last second
    /// with `young_only`), kept as their last and, with profiles on, written as one batch.
    fn sample_pass(&mut self, young_only: bool) {
        let writer = self.writer.clone();
        let t0 = Instant::now();
        let now = self.clock.now_ms();
        let n_procs = self.cfg.profile.processes;
        // The kernel updates the PSI averages every 2 s (PSI_FREQ): reading them more often
        // reads the same numbers again, so between updates a sample carries the last values.
        let read_psi = self
            .last_psi_read
            .is_none_or(|t| t.elapsed() >= PSI_UPDATE_PERIOD);
        if read_psi {
            self.last_psi_read = Some(t0);
        }
        // The NVML thread's latest readings (a copy; the thread never holds the lock while it
        // reads), folded into each GPU job's sample; then it is asked for the next ones.
        let gpu_now = self.gpu_readings();
        let mut batch: Vec<Sample> = Vec::with_capacity(self.jobs.len());
        let mut jobs = 0usize;
        let mut procs = Vec::new();
        for j in self.jobs.values_mut() {
            let Some(started) = j.started else {
                continue;
            };
            if young_only
                && !profile::young_due(
                    started.elapsed(),
                    j.prof.last.as_ref().map(|s| now - s.ts_ms),
                )
            {
                continue;
            }
            let state = j.prof_state().sample_state();
            let procs_now = if self.proc_events {
                self.procs.counts(j.seq).map(|c| c.procs_now)
            } else {
                None
            };
            let mut s = profile::read_sample(
                self.driver.as_ref(),
                &j.cgroup,
                j.seq,
                state,
                now,
                procs_now,
                read_psi,
            );
            if let Some(latest) = gpu_now.as_ref().filter(|_| !j.gpus.is_empty()) {
                (s.gpu_util, s.gpu_mem) = gpu_stats::fold(&j.gpus, latest);
            }
            if !read_psi {
                if let Some(last) = &j.prof.last {
                    carry_psi(&mut s, last);
                }
            }
            j.prof.add(&s);
            jobs += 1;
            if writer.is_none() {
                continue;
            }
            if n_procs > 0 {
                if let Ok(pids) = self.driver.procs(&j.cgroup) {
                    procs.extend(profile::top_processes(
                        &self.cfg.proc_root,
                        &pids,
                        n_procs,
                        j.seq,
                        now,
                    ));
                }
            }
            batch.push(s);
        }
        if let Some(g) = &self.gpu_sampler {
            g.poke();
        }
        self.prune_late_exits();
        if let Some(writer) = writer {
            self.send_pass(&writer, batch, procs, now);
        }
        // Thread rows at the sampler's own tick only, not the young jobs' extra ones.
        if !young_only {
            self.thread_tick(now);
        }
        let took = t0.elapsed();
        self.metrics.sampler_pass(took.as_secs_f64());
        debug!(jobs, took_us = took.as_micros() as u64, "sampled");
    }

    /// Exits reported before their job was known, forgotten after [`LATE_EXIT_WAIT`].
    fn prune_late_exits(&mut self) {
        self.late_exits
            .retain(|_, (_, at)| at.elapsed() < LATE_EXIT_WAIT);
        self.late_step_exits
            .retain(|_, (_, _, at)| at.elapsed() < LATE_EXIT_WAIT);
    }

    /// A pass's samples and process rows to the writer, and the retention when it is due.
    fn send_pass(
        &mut self,
        writer: &Writer,
        batch: Vec<Sample>,
        procs: Vec<ProcessSample>,
        now: i64,
    ) {
        if !batch.is_empty() {
            writer.send(WriteOp::Samples(batch));
        }
        if !procs.is_empty() {
            writer.send(WriteOp::Processes(procs));
        }
        let due = match self.last_retention {
            Some(t) => t.elapsed() >= RETENTION_EVERY,
            None => true,
        };
        if due {
            self.last_retention = Some(Instant::now());
            writer.send(WriteOp::Retention {
                now_ms: now,
                max_age_ms: self.cfg.profile.retention_ms,
                max_bytes: self.cfg.profile.max_db_size,
                // With a central store, jobs not shipped yet are the spool: never pruned.
                keep_unshipped: self.cfg.central.is_some(),
            });
        }
    }

    /// The per-thread profile of the tick: the jobs running on CPUs go to the binder's thread,
    /// which reads their threads and hands the top N to the writer (no read here).
    fn thread_tick(&mut self, ts_ms: i64) {
        let (Some(b), Some(writer)) = (&self.binder, &self.writer) else {
            return;
        };
        let p = &self.cfg.profile;
        if p.threads == 0 {
            return;
        }
        let jobs: Vec<ProfJob> = self
            .jobs
            .values()
            .filter(|j| Engine::balanced(j))
            .map(|j| ProfJob {
                seq: j.seq,
                cgroup: j.cgroup.clone(),
                cpus: j.cpus,
                mode: j.bind.unwrap_or(self.cfg.bind),
            })
            .collect();
        if jobs.is_empty() {
            return;
        }
        b.profile(ProfileTick {
            ts_ms,
            top: p.threads,
            scan: p.threads_scan,
            // A balancing pass within one of its intervals read the same threads.
            reuse: Duration::from_millis(self.cfg.bind_interval_ms + 250),
            jobs,
            writer: writer.clone(),
        });
    }

    /// The NVML thread's latest readings, without those older than two sampler intervals (its
    /// thread is stuck in the driver: no figure rather than a stale one). None: no NVML thread.
    fn gpu_readings(&self) -> Option<BTreeMap<GpuId, GpuReading>> {
        let max_age = Duration::from_millis(2 * self.cfg.profile.interval_ms + 1000);
        self.gpu_sampler
            .as_ref()
            .map(|g| g.latest(Instant::now(), max_age))
    }

    /// One sample of started job `seq` now (no PSI), kept as its last so `status` has figures
    /// for a job that has not seen a sampler tick yet (just started, or recovered), and
    /// written (profiles on): a job's series starts at its start.
    pub(super) fn sample_now(&mut self, seq: i64) {
        let now = self.clock.now_ms();
        // The NVML thread's map is copied only for a job that has GPUs: this runs at every start.
        let gpu_now = self
            .jobs
            .get(&seq)
            .is_some_and(|j| !j.gpus.is_empty())
            .then(|| self.gpu_readings())
            .flatten();
        let Some(j) = self.jobs.get_mut(&seq).filter(|j| j.started.is_some()) else {
            return;
        };
        let procs_now = if self.proc_events {
            self.procs.counts(seq).map(|c| c.procs_now)
        } else {
            None
        };
        let state = j.prof_state().sample_state();
        let mut s = profile::read_sample(
            self.driver.as_ref(),
            &j.cgroup,
            seq,
            state,
            now,
            procs_now,
            false,
        );
        if let Some(latest) = gpu_now.as_ref().filter(|_| !j.gpus.is_empty()) {
            (s.gpu_util, s.gpu_mem) = gpu_stats::fold(&j.gpus, latest);
        }
        j.prof.add(&s);
        if let Some(w) = &self.writer {
            w.send(WriteOp::Samples(vec![s]));
        }
    }

    /// The last sample of job `j`, whose cgroup is empty and about to be removed: its final
    /// counters, written (profiles on) so its series ends at its end. Also the end's counters
    /// for its summary.
    pub(super) fn sample_end(&mut self, j: &mut Job) -> profile::Finals {
        if self.writer.is_none() {
            return profile::read_finals(self.driver.as_ref(), &j.cgroup);
        }
        let s = profile::read_sample(
            self.driver.as_ref(),
            &j.cgroup,
            j.seq,
            j.prof_state().sample_state(),
            self.clock.now_ms(),
            Some(0),
            false,
        );
        let finals = profile::Finals::of(&s);
        j.prof.add(&s);
        if let Some(w) = &self.writer {
            w.send(WriteOp::Samples(vec![s]));
        }
        finals
    }

    /// Process events are flowing (the proc connector is open): process totals are reported.
    pub fn set_proc_events(&mut self, on: bool) {
        self.proc_events = on;
    }

    /// Answer a `report` request: the access check and the live jobs' totals here; the
    /// connection task streams the rest (store reads on a blocking thread, page by page).
    pub(super) fn report(
        &mut self,
        cred: Cred,
        who: &Who,
        query: ReportQuery,
        reply: oneshot::Sender<ReportAnswer>,
    ) {
        let refused = |code, msg| ReportAnswer::Refused(Box::new(err(code, msg)));
        let admin = self.cfg.profile.admin_group.as_deref();
        let checked = report::access(&cred, who.admin, admin, who.named.map(|u| u.0), &query)
            .and_then(|a| report::validate(&query).map(|()| a));
        let access = match checked {
            Ok(a) => a,
            Err(r) => {
                let _ = reply.send(refused(r.code(), r.to_string()));
                return;
            }
        };
        if query.central {
            let _ = reply.send(ReportAnswer::Central(Box::new(
                crate::central_report::CentralReport {
                    cfg: self.cfg.central.clone(),
                    access,
                    query,
                },
            )));
            return;
        }
        // Live jobs the query can match: totals from the engine's state. For one named job the
        // counters are read now; for listings the last sample's (at most one interval old), so
        // a report of many jobs costs the engine no file reads.
        let fresh = query.job.is_some();
        let wants = |q: &Option<String>, v: &str| match q {
            None => true,
            Some(x) => x == v,
        };
        let live: Vec<LiveJob> = self
            .jobs
            .values()
            .filter(|j| match access {
                Access::All => true,
                Access::Uid(u) => j.uid == u,
            })
            .filter(|j| wants(&query.job, &j.id.to_string()) && wants(&query.name, &j.name))
            .map(|j| {
                let running_ms = j
                    .started
                    .map(|s| s.elapsed().as_millis() as i64)
                    .unwrap_or(0);
                let finals = if fresh && j.started.is_some() {
                    profile::read_finals(self.driver.as_ref(), &j.cgroup)
                } else {
                    Default::default()
                };
                let class = pjw_store::EndClass::Completed;
                LiveJob {
                    steps: Engine::step_reports(j),
                    seq: j.seq,
                    state: j.state().into(),
                    cpus: j.cpus.to_string(),
                    summary: j.prof.summary(
                        j.seq,
                        &self.node,
                        class,
                        running_ms,
                        &finals,
                        self.procs.counts(j.seq).filter(|_| self.proc_events),
                    ),
                }
            })
            .collect();
        let _ = reply.send(ReportAnswer::Local(Box::new(report::LocalReport::new(
            self.store.path().to_path_buf(),
            self.node.clone(),
            self.driver.counts_io(),
            access,
            query,
            live,
        ))));
    }
}
