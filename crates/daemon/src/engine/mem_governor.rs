//! The memory governor's adapter: every tick it reads each running job's memory (charged, its
//! need, its own PSI, its OOM kills) and the node's and the partition's pressure, hands a
//! snapshot to the pure [`pjw_core::governor`] rule, keeps its assessment for status, metrics
//! and admission, and carries out the throttles, freezes, thaws and last steps it returns.

use std::time::{Duration, Instant};

use pjw_core::format_size;
use pjw_core::governor::GovernorConfig;
use pjw_core::governor::{self, Assessment, MemAction, MemJob, MemSnapshot, Stall};
use pjw_core::sched::Phase;
use pjw_kernelfs::psi::Psi;
use tracing::{info, warn};

use super::freezing::FreezeFor;
use super::Engine;

/// What the governor saw at its last tick: for `pjw status`, metrics and admission.
#[derive(Clone, Debug)]
pub(super) struct MemView {
    pub(super) assessment: Assessment,
    /// Memory PSI of the node and of the job partition, where the kernel has them.
    pub(super) node: Option<Stall>,
    pub(super) partition: Option<Stall>,
    /// When (wall clock, ms).
    pub(super) at_ms: i64,
}

fn stall(p: Option<Psi>) -> Option<Stall> {
    p.map(|p| Stall {
        some: p.some.avg10,
        full: p.full.map_or(0.0, |f| f.avg10),
    })
}

impl Engine {
    /// The governor's tick: sample, decide, act. With the governor off only the OOM kills of
    /// running jobs are counted (for `pjw status`).
    pub(super) fn govern(&mut self) {
        let now = Instant::now();
        let dt_ms = self
            .mem_tick_at
            .map_or(0, |t| now.duration_since(t).as_millis() as i64);
        self.mem_tick_at = Some(now);
        let Some(cfg) = self.governor else {
            self.count_ooms();
            return;
        };
        let snap = self.mem_snapshot(&cfg, now);
        let decision = governor::govern(&cfg, &snap);
        self.note_assessment(&decision.assessment, &snap, dt_ms);
        let frozen_before = self.jobs.values().filter(|j| j.memory.frozen).count();
        let shared_before = self.shared_pressure();
        self.mem_view = Some(MemView {
            assessment: decision.assessment.clone(),
            node: snap.node,
            partition: snap.partition,
            at_ms: snap.now_ms,
        });
        for a in decision.actions {
            self.mem_act(&cfg, a, &decision.assessment, now);
        }
        // Admission follows what the governor sees: replan when it may admit more now.
        let frozen_after = self.jobs.values().filter(|j| j.memory.frozen).count();
        let queued = self.jobs.values().any(|j| j.phase == Phase::Queued);
        if queued && (frozen_after < frozen_before || (shared_before && !self.shared_pressure())) {
            self.replan();
        }
    }

    /// Whether the last tick saw pjw's jobs press on each other.
    pub(super) fn shared_pressure(&self) -> bool {
        self.mem_view
            .as_ref()
            .is_some_and(|v| v.assessment.shared.is_some())
    }

    /// Count each running job's OOM kills, saying so in the log when there are new ones.
    fn count_ooms(&mut self) {
        let seqs: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some() && !j.end.ending)
            .map(|j| j.seq)
            .collect();
        for seq in seqs {
            let n = self.driver.oom_kills(&self.jobs[&seq].cgroup);
            self.note_ooms(seq, n);
        }
    }

    /// Job `seq` has had `n` processes OOM-killed so far: log the new ones.
    fn note_ooms(&mut self, seq: i64, n: u64) {
        let Some(j) = self.jobs.get(&seq) else {
            return;
        };
        if n > j.memory.oom_kills {
            let at = self.oom_limit_text(j, n);
            warn!(
                job = %j.id, user = %j.user, oom_kills = n,
                "the kernel killed {} process(es) of the job for memory at {at}",
                n - j.memory.oom_kills
            );
        }
        if let Some(j) = self.jobs.get_mut(&seq) {
            j.memory.oom_kills = n;
        }
    }

    /// Read every running job's memory and the node's, as one snapshot.
    fn mem_snapshot(&mut self, cfg: &GovernorConfig, now: Instant) -> MemSnapshot {
        let cooldown = Duration::from_millis(cfg.thaw_cooldown_ms as u64);
        let seqs: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| {
                j.started.is_some()
                    && !j.end.ending
                    && matches!(j.phase, Phase::Primary | Phase::Backfill)
            })
            .map(|j| j.seq)
            .collect();
        let mut jobs = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let cg = self.jobs[&seq].cgroup.clone();
            // A failed read is not a fact: the job is left out of this tick.
            let Ok(usage) = self.driver.memory_usage(&cg) else {
                continue;
            };
            let need = self
                .driver
                .memory_breakdown(&cg)
                .map(|b| b.need())
                .unwrap_or(usage);
            let own_stall = stall(self.driver.memory_pressure(Some(&cg)));
            let ooms = self.driver.oom_kills(&cg);
            self.note_ooms(seq, ooms);
            let j = self.jobs.get_mut(&seq).expect("listed above");
            let m = &mut j.memory;
            // Growth from the second look on (the first only sets where it starts).
            if let (false, Some(at)) = (m.frozen, m.at) {
                let dt = now.duration_since(at).as_secs_f64();
                m.growth = governor::smoothed_growth(m.growth, m.need, need, dt);
            }
            m.usage = usage;
            m.need = need;
            m.at = Some(now);
            m.stall = own_stall;
            // Long after a thaw its pages are back: count what it needs, not what it needed.
            if !m.frozen
                && m.thawed_at.is_some_and(|t| {
                    let since = now.duration_since(t).as_millis() as i64;
                    governor::footprint_expired(since, cfg.thaw_cooldown_ms)
                })
            {
                m.footprint = 0;
            }
            jobs.push(MemJob {
                key: j.seq,
                priority: j.req.priority,
                usage,
                need,
                growth: if m.frozen { 0.0 } else { m.growth },
                own_limit: j.mem,
                stall: m.stall,
                frozen: m.frozen,
                frozen_since_ms: m.frozen_since_ms,
                throttled: m.throttled,
                footprint: m.footprint,
            });
        }
        let (available, swap_in) = self.node_memory();
        let swap_in_rate = match (swap_in, self.last_swap_in) {
            (Some(count), Some((then, at))) => {
                let dt = now.duration_since(at).as_secs_f64();
                if dt > 0.0 {
                    count.saturating_sub(then) as f64 / dt
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        self.last_swap_in = swap_in.map(|c| (c, now));
        let node = std::fs::read_to_string(self.cfg.proc_root.join("pressure/memory"))
            .ok()
            .and_then(|t| pjw_kernelfs::psi::parse(&t).ok());
        MemSnapshot {
            now_ms: self.clock.now_ms(),
            node: stall(node),
            partition: stall(self.driver.memory_pressure(None)),
            available,
            swap_in_rate,
            last_thaw_ms: self.last_thaw_ms,
            thawing: self
                .jobs
                .values()
                .filter(|j| j.memory.thawed_at.is_some_and(|t| t.elapsed() < cooldown))
                .count(),
            jobs,
        }
    }

    /// The node's `MemAvailable` (bytes) and `pswpin` count, where they can be read.
    fn node_memory(&self) -> (Option<u64>, Option<u64>) {
        let field = |file: &str, key: &str| {
            std::fs::read_to_string(self.cfg.proc_root.join(file))
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        l.strip_prefix(key).and_then(|v| {
                            v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
                        })
                    })
                })
        };
        (
            field("meminfo", "MemAvailable:").map(|kb| kb * 1024),
            field("vmstat", "pswpin "),
        )
    }

    /// Keep what the assessment says about each job (a stall inside its own limit) and log
    /// when whose pressure it is changes.
    fn note_assessment(&mut self, a: &Assessment, snap: &MemSnapshot, dt_ms: i64) {
        for j in self.jobs.values_mut() {
            let stalled = a.self_stalled.contains(&j.seq);
            if stalled && !j.memory.self_stalled {
                let limit = j.mem.map(format_size).unwrap_or_default();
                info!(
                    job = %j.id, user = %j.user, limit = %limit,
                    psi_some = j.memory.stall.map_or(0.0, |s| s.some),
                    "job stalls on memory inside its own limit: its own business, nobody else is frozen for it"
                );
            }
            if stalled {
                j.memory.self_stall_ms += dt_ms;
            }
            j.memory.self_stalled = stalled;
        }
        let before = self.mem_view.as_ref().map(|v| &v.assessment);
        let outside_before = before.and_then(|b| b.outside).is_some();
        match (a.outside, outside_before) {
            (Some(o), false) => warn!(
                outside = %super::mem_status::outside_text(&o),
                node_psi_some = snap.node.map_or(0.0, |s| s.some),
                partition_psi_some = snap.partition.map_or(0.0, |s| s.some),
                available = snap.available.unwrap_or(0),
                "memory pressure from outside pjw's jobs: left to the node's memory managers; no job is frozen for it"
            ),
            (None, true) => info!("memory pressure from outside pjw's jobs is gone"),
            _ => {}
        }
        let shared_before = before.and_then(|b| b.shared);
        if a.shared != shared_before {
            match a.shared {
                Some(s) => info!(
                    why = %super::mem_status::shared_text(s), demand = a.demand,
                    limit = self.mem_limit, "pjw's jobs press on each other's memory"
                ),
                None => info!("the job partition has room again"),
            }
        }
    }

    /// Carry out one of the governor's actions.
    fn mem_act(&mut self, cfg: &GovernorConfig, a: MemAction, asm: &Assessment, now: Instant) {
        match a {
            MemAction::Throttle { key, high } => {
                let why = self.culprit_text(key, asm);
                let Some(j) = self.jobs.get_mut(&key) else {
                    return;
                };
                match self.driver.set_memory_high(&j.cgroup, Some(high)) {
                    Ok(()) => {
                        self.metrics
                            .governor_action(crate::metrics::GovernorKind::throttle);
                        j.memory.throttled = true;
                        j.memory.throttle_high = Some(high);
                        j.memory.why = Some(why.clone());
                        info!(job = %j.id, user = %j.user, high, growth = j.memory.growth as i64, why = %why, "memory pressure: job throttled");
                    }
                    Err(e) => warn!(job = %j.id, error = %e, "cannot throttle job"),
                }
            }
            MemAction::Unthrottle { key } => {
                let Some(j) = self.jobs.get_mut(&key) else {
                    return;
                };
                if self.driver.set_memory_high(&j.cgroup, None).is_ok() {
                    self.metrics
                        .governor_action(crate::metrics::GovernorKind::unthrottle);
                    j.memory.throttled = false;
                    j.memory.throttle_high = None;
                    if !j.memory.frozen {
                        j.memory.why = None;
                    }
                    info!(job = %j.id, "memory has room again: throttle lifted");
                }
            }
            MemAction::Freeze { key } => {
                let why = self.culprit_text(key, asm);
                // Not twice: a freeze still under way is left to finish.
                let Some(j) = self.jobs.get_mut(&key).filter(|j| j.freezing.is_none()) else {
                    return;
                };
                j.memory.why = Some(why);
                // Frozen now, or once the v1 freezer confirms it (`Event::Frozen`); a
                // failed freeze is logged and the job runs on.
                if let Ok(true) = self.begin_freeze(key, FreezeFor::Memory) {
                    self.memory_frozen(key);
                }
            }
            MemAction::Thaw { key } => {
                let Some(j) = self.jobs.get_mut(&key) else {
                    return;
                };
                match self.driver.freeze(&j.cgroup, false) {
                    Ok(()) => {
                        self.metrics
                            .governor_action(crate::metrics::GovernorKind::thaw);
                        j.memory.frozen = false;
                        if let Some(since) = j.memory.frozen_since_ms.take() {
                            j.memory.frozen_total_ms += (self.clock.now_ms() - since).max(0);
                        }
                        j.memory.thawed_at = Some(now);
                        j.memory.growth = 0.0;
                        if !j.memory.throttled {
                            j.memory.why = None;
                        }
                        self.last_thaw_ms = Some(self.clock.now_ms());
                        info!(job = %j.id, user = %j.user, footprint = j.memory.footprint, "memory is free again: job thawed");
                    }
                    Err(e) => warn!(job = %j.id, error = %e, "cannot thaw job"),
                }
            }
            MemAction::LastStep { key } => self.memory_last_step(cfg, key),
        }
    }

    /// Why job `key` is the one the governor acts on, for status and the log.
    fn culprit_text(&self, key: i64, asm: &Assessment) -> String {
        let Some(j) = self.jobs.get(&key) else {
            return String::new();
        };
        let limit = format_size(self.mem_limit);
        if asm.growers.contains(&key) {
            format!(
                "it grew {}/s into the memory the jobs share (their demand {} passed the {} high mark of the {limit} partition)",
                format_size(j.memory.growth.max(0.0) as u64),
                format_size(asm.demand),
                format_size(self.governor.map_or(self.mem_limit, |g| (g.high * self.mem_limit as f64) as u64))
            )
        } else {
            // Said as it is: the pressure that made the governor act (the acceptance run saw
            // "while jobs stall on it" where the jobs' demand had passed `high`).
            let pressure = match asm.shared {
                Some(governor::Shared::Demand) | None => format!(
                    "while the jobs' demand ({}) passes the partition's high mark",
                    format_size(asm.demand)
                ),
                Some(governor::Shared::Stalls) => "while jobs stall on it".to_string(),
                Some(governor::Shared::SwapIn) => {
                    "while jobs swap their pages back in fast".to_string()
                }
            };
            format!(
                "it holds {} of the {limit} partition, more than its share of what the reservations (--mem) leave, {pressure}",
                format_size(j.memory.need)
            )
        }
    }

    /// Job `seq` is frozen for memory: it keeps its CPUs; what it will need again is noted.
    pub(super) fn memory_frozen(&mut self, seq: i64) {
        let now_ms = self.clock.now_ms();
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        self.metrics
            .governor_action(crate::metrics::GovernorKind::freeze);
        j.memory.frozen = true;
        j.memory.frozen_since_ms = Some(now_ms);
        j.memory.footprint = governor::frozen_footprint(j.memory.need, j.memory.footprint);
        j.memory.freezes += 1;
        j.memory.froze_why = j.memory.why.clone();
        info!(
            job = %j.id, user = %j.user, usage = j.memory.usage, need = j.memory.need,
            growth = j.memory.growth as i64, why = j.memory.why.as_deref().unwrap_or(""),
            "memory pressure: job frozen"
        );
    }

    /// The last step for a job frozen longer than `frozen_max`: it is killed, saying why.
    /// (Requeueing needs someone to run the command again; see docs/decisions.md (bh).)
    fn memory_last_step(&mut self, cfg: &GovernorConfig, seq: i64) {
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        if j.memory.last_step.is_some() {
            return;
        }
        let frozen_s = j
            .memory
            .frozen_since_ms
            .map_or(0, |s| (self.clock.now_ms() - s).max(0) / 1000);
        let max = cfg.frozen_max_ms.unwrap_or(0) / 1000;
        let why = format!(
            "the memory governor: frozen {frozen_s} s, past memory.frozen_max ({max} s), because {}",
            j.memory.why.as_deref().unwrap_or("memory was short")
        );
        warn!(job = %j.id, user = %j.user, frozen_s, "memory pressure: job frozen too long, killed (the governor's last step)");
        j.memory.last_step = Some(why.clone());
        self.metrics
            .governor_action(crate::metrics::GovernorKind::kill);
        let _ = self.kill(seq, why);
    }
}
