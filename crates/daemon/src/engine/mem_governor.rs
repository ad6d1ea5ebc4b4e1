//! The memory governor's adapter: it reads memory and PSI, hands a snapshot to the pure
//! [`pjw_core::governor`] policy, and applies the freezes, thaws and throttles it returns.

use std::time::{Duration, Instant};

use pjw_core::governor::{self, MemAction, MemJob, MemSnapshot};
use pjw_core::sched::Phase;
use tracing::{info, warn};

use super::freezing::FreezeFor;
use super::Engine;

impl Engine {
    /// Sample memory and PSI, then freeze or thaw what the governor says.
    pub(super) fn govern(&mut self) {
        let Some(cfg) = self.governor else { return };
        let now = Instant::now();
        let cooldown = Duration::from_millis(cfg.thaw_cooldown_ms as u64);
        let mut jobs = Vec::new();
        for j in self.jobs.values_mut() {
            let runs = matches!(j.phase, Phase::Primary | Phase::Backfill);
            if j.started.is_none() || j.end.ending || !runs {
                continue;
            }
            let Ok(usage) = self.driver.memory_usage(&j.cgroup) else {
                continue;
            };
            if let Some(at) = j.memory.at.filter(|_| !j.memory.frozen) {
                let dt = now.duration_since(at).as_secs_f64();
                j.memory.growth =
                    governor::smoothed_growth(j.memory.growth, j.memory.usage, usage, dt);
            }
            j.memory.usage = usage;
            j.memory.at = Some(now);
            // Long after a thaw its pages are back: count what it uses, not what it used.
            if !j.memory.frozen
                && j.memory.thawed_at.is_some_and(|t| {
                    let since = now.duration_since(t).as_millis() as i64;
                    governor::footprint_expired(since, cfg.thaw_cooldown_ms)
                })
            {
                j.memory.footprint = 0;
            }
            jobs.push(MemJob {
                key: j.seq,
                priority: j.req.priority,
                submitted_ms: j.req.submitted_ms,
                usage,
                growth: if j.memory.frozen {
                    0.0
                } else {
                    j.memory.growth
                },
                frozen: j.memory.frozen,
                throttled: j.memory.throttled,
                footprint: j.memory.footprint,
            });
        }
        let node = std::fs::read_to_string(self.cfg.proc_root.join("pressure/memory"))
            .ok()
            .and_then(|t| pjw_kernelfs::psi::parse(&t).ok());
        let part = self.driver.memory_pressure(None);
        // The worst job, too: one job stalling on memory is pressure even when the node is calm.
        let worst_job = self
            .jobs
            .values()
            .filter(|j| j.started.is_some() && !j.end.ending && !j.memory.frozen)
            .filter_map(|j| self.driver.memory_pressure(Some(&j.cgroup)))
            .fold(None, |acc: Option<pjw_kernelfs::psi::Psi>, p| match acc {
                Some(a) if a.some.avg10 >= p.some.avg10 => Some(a),
                _ => Some(p),
            });
        let available = std::fs::read_to_string(self.cfg.proc_root.join("meminfo"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("MemAvailable:")
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                })
            })
            .map(|kb| kb * 1024);
        let swap_in = std::fs::read_to_string(self.cfg.proc_root.join("vmstat"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("pswpin ")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
            });
        let swap_in_rate = match (swap_in, self.last_swap_in) {
            (Some(now_count), Some((then, at))) => {
                let dt = now.duration_since(at).as_secs_f64();
                if dt > 0.0 {
                    now_count.saturating_sub(then) as f64 / dt
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        self.last_swap_in = swap_in.map(|c| (c, now));
        let some =
            |p: &Option<pjw_kernelfs::psi::Psi>| p.as_ref().map(|p| p.some.avg10).unwrap_or(0.0);
        let full = |p: &Option<pjw_kernelfs::psi::Psi>| {
            p.as_ref()
                .and_then(|p| p.full)
                .map(|f| f.avg10)
                .unwrap_or(0.0)
        };
        let snap = MemSnapshot {
            now_ms: self.clock.now_ms(),
            psi_some: some(&node).max(some(&part)).max(some(&worst_job)),
            psi_full: full(&node).max(full(&part)).max(full(&worst_job)),
            available,
            swap_in_rate,
            last_thaw_ms: self.last_thaw_ms,
            thawing: self
                .jobs
                .values()
                .filter(|j| j.memory.thawed_at.is_some_and(|t| t.elapsed() < cooldown))
                .count(),
            jobs,
        };
        let mut thawed = false;
        for a in governor::govern(&cfg, &snap) {
            match a {
                MemAction::Throttle { key, high } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    match self.driver.set_memory_high(&j.cgroup, Some(high)) {
                        Ok(()) => {
                            self.metrics
                                .governor_action(crate::metrics::GovernorKind::throttle);
                            j.memory.throttled = true;
                            info!(job = %j.id, user = %j.user, high, growth = j.memory.growth as i64, "memory pressure: job throttled");
                        }
                        Err(e) => warn!(job = %j.id, error = %e, "cannot throttle job"),
                    }
                }
                MemAction::Unthrottle { key } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    if self.driver.set_memory_high(&j.cgroup, None).is_ok() {
                        self.metrics
                            .governor_action(crate::metrics::GovernorKind::unthrottle);
                        j.memory.throttled = false;
                        info!(job = %j.id, "memory pressure gone: throttle lifted");
                    }
                }
                MemAction::Freeze { key } => {
                    // Not twice: a freeze still under way is left to finish.
                    if self.jobs.get(&key).is_none_or(|j| j.freezing.is_some()) {
                        continue;
                    }
                    // Frozen now, or once the v1 freezer confirms it (`Event::Frozen`); a
                    // failed freeze is logged and the job runs on.
                    if let Ok(true) = self.begin_freeze(key, FreezeFor::Memory) {
                        self.memory_frozen(key, Some(snap.psi_some));
                    }
                }
                MemAction::Thaw { key } => {
                    let Some(j) = self.jobs.get_mut(&key) else {
                        continue;
                    };
                    match self.driver.freeze(&j.cgroup, false) {
                        Ok(()) => {
                            self.metrics
                                .governor_action(crate::metrics::GovernorKind::thaw);
                            j.memory.frozen = false;
                            j.memory.thawed_at = Some(now);
                            j.memory.growth = 0.0;
                            self.last_thaw_ms = Some(self.clock.now_ms());
                            thawed = true;
                            info!(job = %j.id, user = %j.user, footprint = j.memory.footprint, "memory is free again: job thawed");
                        }
                        Err(e) => warn!(job = %j.id, error = %e, "cannot thaw job"),
                    }
                }
            }
        }
        if thawed && !self.jobs.values().any(|j| j.memory.frozen) {
            // Memory is free again: held-back jobs may start.
            self.replan();
        }
    }

    /// Job `seq` is frozen for memory: it keeps its CPUs; what it will need again is predicted.
    pub(super) fn memory_frozen(&mut self, seq: i64, psi_some: Option<f64>) {
        let Some(cfg) = self.governor else { return };
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        self.metrics
            .governor_action(crate::metrics::GovernorKind::freeze);
        j.memory.frozen = true;
        j.memory.footprint = governor::predicted_footprint(
            &cfg,
            j.memory.usage,
            j.memory.growth,
            j.memory.footprint,
        );
        info!(
            job = %j.id, user = %j.user, usage = j.memory.usage, growth = j.memory.growth as i64,
            psi_some, "memory pressure: job frozen"
        );
    }
}
