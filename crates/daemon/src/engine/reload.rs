//! Applying a reloaded config to the running engine (SIGHUP); what may change is decided in
//! [`crate::reload::plan`]. Running jobs are not touched: new limits and rules apply to what
//! is planned, admitted and started from now on. The timers, the metrics listener and the
//! central-store shipper follow the new config in [`crate::tasks`], after this.

use pjw_core::sched::QueuePolicy;
use pjw_core::CpuSet;
use tracing::{error, info, warn};

use super::Engine;
use crate::adopt::Scanner;
use crate::config::Config;
use crate::reload::{self, ReloadSource};

impl Engine {
    /// Re-read the config from `source` and apply what may change live; true when it was
    /// applied (the caller then brings the daemon's tasks in line with [`Engine::config`]). An
    /// invalid file, or one that changes what cannot change, leaves everything as it was
    /// (logged at error) and gives false.
    pub fn reload(&mut self, source: &ReloadSource) -> bool {
        let mut new = match source.load() {
            Ok(c) => c,
            Err(e) => {
                error!(error = %e, "reload refused: the config is invalid; nothing changed");
                return false;
            }
        };
        // As at start: memory.high exists only in cgroup v2.
        new.governor_cfg.throttle &= self.driver.mode() == pjw_cgroup::Mode::Unified;
        let running = self
            .jobs
            .values()
            .fold(CpuSet::default(), |acc, j| acc.union(&j.cpus));
        let plan = match reload::plan(&self.cfg, &new, &self.pool, &running) {
            Ok(p) => p,
            Err(why) => {
                error!(config = %new.origin, reason = %why, "reload refused; the old config stays");
                return false;
            }
        };
        for key in &plan.at_restart {
            warn!(config = %new.origin, key, "reload: this key changes only at the next restart; the old value stays");
        }
        let cfg = plan.config;
        self.policy = QueuePolicy {
            vcpus: cfg.vcpus.unwrap_or(self.pool.len()),
            backfill: cfg.backfill,
            hard_preemption: cfg.hard_preemption,
            preempt_min_priority: cfg.preempt_priority,
            queue_ttl_ms: cfg.queue_ttl.map(|s| s as i64 * 1000),
            order: cfg.queue_order,
        };
        if let Some(g) = self.governor.as_mut() {
            *g = pjw_core::governor::GovernorConfig {
                limit: g.limit,
                ..cfg.governor_cfg
            };
        }
        if cfg.adopt_env != self.cfg.adopt_env
            || cfg.adopt_hook_daemons != self.cfg.adopt_hook_daemons
        {
            self.scanner = Scanner::new(
                &cfg.proc_root,
                cfg.adopt_env.clone(),
                cfg.adopt_hook_daemons.clone(),
            );
        }
        self.cfg = cfg;
        // The layers outside the engine that hold a rule follow the same reload.
        self.conn_rules
            .send_replace(crate::reload::ConnRules::of(&self.cfg));
        info!(
            config = %self.cfg.origin,
            changed = %plan.changed.join(","),
            vcpus = self.policy.vcpus,
            "config reloaded"
        );
        // More vcpus or a looser rule may let queued jobs start now.
        self.replan();
        true
    }

    /// The config in effect (after a reload, the keys it changed).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Ship finished jobs with `s` from now on, or with none; the old shipper is given back
    /// (dropping it tells its thread to stop after the batch in flight).
    pub fn replace_shipper(
        &mut self,
        s: Option<pjw_central::Shipper>,
    ) -> Option<pjw_central::Shipper> {
        std::mem::replace(&mut self.shipper, s)
    }
}
