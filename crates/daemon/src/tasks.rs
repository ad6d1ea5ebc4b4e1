//! The daemon's tasks beside the engine, which a reload may restart: the timers of the memory
//! governor, the sampler, the adoption sweep and the thread balancing, the metrics listener and the central-store
//! shipper.
//!
//! Each runs with its [`Settings`], read from the engine's config. At start [`Tasks::start`]
//! starts them; after a reload [`Tasks::apply`] stops each one whose setting changed and starts
//! it again with the new value. Jobs are never involved: a timer only sends the engine an event,
//! the listener only reads, the shipper only reads the local store. A metrics address that
//! cannot be bound on reload keeps the old listener, and the log says why
//! (docs/decisions.md (aj)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pjw_cgroup::Driver;
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::{error, info, warn};

use crate::config::{CentralConfig, Config};
use crate::engine::{Engine, Event};
use crate::metrics::{self, Metrics};

/// What the tasks run with, as a config asks (pure).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The governor's tick (ms). It runs with the governor off too, then only counting the
    /// jobs' OOM kills for `pjw status`.
    pub governor_ms: Option<u64>,
    /// The sampler's tick (ms). It runs with profiles off too: `pjw status` answers from its
    /// last samples (decisions.md (ak)); profiles off only keeps them out of the store.
    pub sample_ms: Option<u64>,
    /// The adoption sweep's tick (ms); None: off (`sweep_interval_ms = 0` or no `[adopt] env`).
    pub sweep_ms: Option<u64>,
    /// The thread balancing tick (ms). It runs whatever `[job] bind` says: a job may ask for
    /// binding with `--bind`, and a tick with no job that binds costs the engine a walk of its
    /// jobs, nothing else.
    pub bind_ms: Option<u64>,
    /// Where `/metrics` is served; None: off.
    pub metrics: Option<SocketAddr>,
    /// The central store; None: off.
    pub central: Option<CentralConfig>,
}

impl Settings {
    pub fn of(cfg: &Config) -> Settings {
        Settings {
            governor_ms: Some(cfg.governor_interval_ms),
            sample_ms: Some(cfg.profile.interval_ms),
            // The adoption backstop; it does nothing while no registered job runs.
            sweep_ms: (cfg.adopt_sweep_ms > 0 && !cfg.adopt_env.is_empty())
                .then_some(cfg.adopt_sweep_ms),
            bind_ms: Some(cfg.bind_interval_ms),
            metrics: cfg.metrics_listen,
            central: cfg.central.clone(),
        }
    }
}

/// A timer that sends the engine one event every `every`; stopped when dropped.
#[derive(Debug)]
struct Ticker {
    every_ms: u64,
    handle: JoinHandle<()>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// The metrics listener: the address asked for and the one bound (they differ for port 0).
#[derive(Debug)]
struct Listener {
    want: SocketAddr,
    local: SocketAddr,
    handle: JoinHandle<()>,
}

impl Listener {
    /// Stop serving and wait until the socket is closed (the task and its listener dropped);
    /// scrapes already accepted finish on their own tasks.
    async fn stop(self) {
        self.handle.abort();
        let _ = self.handle.await;
    }
}

/// The timers, the metrics listener and the shipper's settings.
#[derive(Debug)]
pub struct Tasks {
    tx: UnboundedSender<Event>,
    metrics: Arc<Metrics>,
    driver: Arc<Driver>,
    governor: Option<Ticker>,
    sampler: Option<Ticker>,
    sweep: Option<Ticker>,
    bind: Option<Ticker>,
    listener: Option<Listener>,
    central: Option<CentralConfig>,
}

/// The three timers: their names in the log, their events and what a missed tick does.
#[derive(Clone, Copy, Debug)]
enum Timer {
    Governor,
    Sampler,
    Sweep,
    Bind,
}

impl Timer {
    fn name(self) -> &'static str {
        match self {
            Timer::Governor => "memory governor",
            Timer::Sampler => "sampler",
            Timer::Sweep => "adoption sweep",
            Timer::Bind => "thread balancing",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Timer::Governor => "memory.interval_ms",
            Timer::Sampler => "profile.interval",
            Timer::Sweep => "adopt.sweep_interval_ms",
            Timer::Bind => "job.bind_interval_ms",
        }
    }
    fn event(self) -> Event {
        match self {
            Timer::Governor => Event::Govern,
            Timer::Sampler => Event::Sample,
            Timer::Sweep => Event::Sweep,
            Timer::Bind => Event::Bind,
        }
    }
    /// The sampler and the balancing skip a tick missed while the engine was busy instead of
    /// bunching them.
    fn missed(self) -> MissedTickBehavior {
        match self {
            Timer::Sampler | Timer::Bind => MissedTickBehavior::Skip,
            Timer::Governor | Timer::Sweep => MissedTickBehavior::Delay,
        }
    }
}

impl Tasks {
    /// No task runs yet.
    pub fn new(tx: UnboundedSender<Event>, metrics: Arc<Metrics>, driver: Arc<Driver>) -> Tasks {
        Tasks {
            tx,
            metrics,
            driver,
            governor: None,
            sampler: None,
            sweep: None,
            bind: None,
            listener: None,
            central: None,
        }
    }

    /// Start everything `eng`'s config asks for. `listener` is the metrics listener bound
    /// before anything else started (a bad address fails the start).
    pub fn start(&mut self, eng: &mut Engine, listener: Option<TcpListener>) {
        let want = Settings::of(eng.config());
        self.set_timers(&want, false);
        self.set_central(want.central, eng, false);
        if let (Some(addr), Some(l)) = (want.metrics, listener) {
            let l = self.serve(addr, l);
            info!(listen = %l.local, "metrics served at http://{}/metrics", l.local);
            self.listener = Some(l);
        }
    }

    /// After a reload: restart each task whose setting in `eng`'s config changed. A metrics
    /// address that cannot be bound keeps the old listener (logged at error); a later reload
    /// tries again.
    pub async fn apply(&mut self, eng: &mut Engine) {
        let want = Settings::of(eng.config());
        self.set_timers(&want, true);
        self.set_central(want.central, eng, true);
        self.set_metrics(want.metrics).await;
    }

    /// What runs now.
    pub fn running(&self) -> Settings {
        Settings {
            governor_ms: self.governor.as_ref().map(|t| t.every_ms),
            sample_ms: self.sampler.as_ref().map(|t| t.every_ms),
            sweep_ms: self.sweep.as_ref().map(|t| t.every_ms),
            bind_ms: self.bind.as_ref().map(|t| t.every_ms),
            metrics: self.listener.as_ref().map(|l| l.want),
            central: self.central.clone(),
        }
    }

    /// The address the metrics listener is bound to (its port when 0 was asked for).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().map(|l| l.local)
    }

    fn set_timers(&mut self, want: &Settings, reload: bool) {
        for (timer, every) in [
            (Timer::Governor, want.governor_ms),
            (Timer::Sampler, want.sample_ms),
            (Timer::Sweep, want.sweep_ms),
            (Timer::Bind, want.bind_ms),
        ] {
            let tx = self.tx.clone();
            let slot = match timer {
                Timer::Governor => &mut self.governor,
                Timer::Sampler => &mut self.sampler,
                Timer::Sweep => &mut self.sweep,
                Timer::Bind => &mut self.bind,
            };
            if slot.as_ref().map(|t| t.every_ms) == every {
                continue;
            }
            // Dropping the old timer stops it; a tick it already sent is handled as usual.
            *slot = every.map(|ms| ticker(tx, ms, timer));
            if reload {
                match every {
                    Some(ms) => {
                        info!(
                            task = timer.name(),
                            key = timer.key(),
                            every_ms = ms,
                            "reload: timer restarted with the new interval"
                        )
                    }
                    None => info!(
                        task = timer.name(),
                        key = timer.key(),
                        "reload: timer stopped"
                    ),
                }
            }
        }
    }

    fn set_central(&mut self, want: Option<CentralConfig>, eng: &mut Engine, reload: bool) {
        if self.central == want {
            return;
        }
        // The old thread is told to stop and finishes the batch in flight on its own; a batch
        // both send is absorbed by the central store's upsert.
        drop(eng.replace_shipper(None));
        if let Some(c) = &want {
            let ship = pjw_central::ShipConfig {
                url: c.url.clone(),
                password: c.password.clone(),
                ship_samples: c.ship_samples,
                batch_size: c.batch_size,
                retry: c.retry,
                node: crate::os::hostname(&eng.config().proc_root),
                retention: c.retention,
            };
            // Its own thread and SQLite connection: shipping never runs on the engine's path.
            match pjw_central::Shipper::spawn(eng.state_path(), ship) {
                Ok(s) => {
                    eng.replace_shipper(Some(s));
                    if reload {
                        info!(target = %crate::config::mask_password(&c.url), "reload: central-store shipper restarted with the new settings");
                    }
                }
                Err(e) => warn!(error = %e, "cannot start the central-store shipper"),
            }
        } else if reload {
            info!("reload: central-store shipper stopped ([central] removed); finished jobs stay in the local store");
        }
        self.central = want;
    }

    fn serve(&self, want: SocketAddr, l: TcpListener) -> Listener {
        let local = l.local_addr().unwrap_or(want);
        let handle = tokio::spawn(metrics::serve(
            l,
            self.tx.clone(),
            self.metrics.clone(),
            self.driver.clone(),
        ));
        Listener {
            want,
            local,
            handle,
        }
    }

    /// Serve `/metrics` at `want` (None: nowhere). The new address is bound before the old
    /// listener is let go, so a failed bind changes nothing; only when the old listener itself
    /// holds the port (`0.0.0.0:9810` → `127.0.0.1:9810`) is it closed first, and opened again
    /// if the new address cannot be bound either.
    pub async fn set_metrics(&mut self, want: Option<SocketAddr>) {
        let old = self.listener.as_ref().map(|l| (l.want, l.local));
        if old.map(|(w, _)| w) == want {
            return;
        }
        let Some(addr) = want else {
            if let Some(l) = self.listener.take() {
                let was = l.local;
                l.stop().await;
                info!(was = %was, "reload: metrics no longer served (no [metrics] listen)");
            }
            return;
        };
        let mut bound = metrics::bind(addr).await;
        if let (Err(e), Some((old_want, old_local))) = (&bound, old) {
            if e.kind() == std::io::ErrorKind::AddrInUse && old_local.port() == addr.port() {
                if let Some(l) = self.listener.take() {
                    l.stop().await;
                }
                bound = metrics::bind(addr).await;
                if bound.is_err() {
                    match metrics::bind(old_want).await {
                        Ok(l) => self.listener = Some(self.serve(old_want, l)),
                        Err(e) => {
                            error!(listen = %old_want, error = %e, "reload: metrics cannot listen on the old address again either; metrics are not served until the next reload or restart")
                        }
                    }
                }
            }
        }
        match bound {
            Ok(l) => {
                if let Some(old) = self.listener.take() {
                    old.stop().await;
                }
                let l = self.serve(addr, l);
                match old {
                    Some((_, was)) => {
                        info!(listen = %l.local, was = %was, "reload: metrics now served at http://{}/metrics", l.local)
                    }
                    None => {
                        info!(listen = %l.local, "reload: metrics now served at http://{}/metrics", l.local)
                    }
                }
                self.listener = Some(l);
            }
            Err(e) => {
                let still = match self.metrics_addr() {
                    Some(a) => format!("still served at http://{a}/metrics"),
                    None => "not served".to_string(),
                };
                error!(
                    listen = %addr,
                    error = %e,
                    "reload: metrics.listen: cannot listen on {addr}: {e}; metrics are {still} (fix metrics.listen and reload again)"
                );
            }
        }
    }
}

/// Send `timer`'s event down the engine's channel every `every_ms`, until stopped or the
/// engine is gone. The first tick comes at once.
fn ticker(tx: UnboundedSender<Event>, every_ms: u64, timer: Timer) -> Ticker {
    let handle = tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_millis(every_ms));
        t.set_missed_tick_behavior(timer.missed());
        loop {
            t.tick().await;
            if tx.send(timer.event()).is_err() {
                break;
            }
        }
    });
    Ticker { every_ms, handle }
}

#[cfg(test)]
mod tests;
