//! The counters and histograms the engine and the sampler feed, shared through an `Arc`.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// What the governor did.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum GovernorKind {
    throttle,
    unthrottle,
    freeze,
    thaw,
    /// The last step: a job frozen longer than `memory.frozen_max` killed.
    kill,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: GovernorKind,
}

/// Counters and histograms fed by the engine and the sampler.
#[derive(Debug)]
pub struct Metrics {
    governor_actions: Family<KindLabel, Counter>,
    launch_latency: Histogram,
    sampler_duration: Histogram,
    store_write_errors: Counter,
    kernel_read_errors: Counter,
    connections_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            governor_actions: Family::default(),
            // 1 ms to ~16 s.
            launch_latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            // 0.1 ms to ~0.8 s.
            sampler_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            store_write_errors: Counter::default(),
            kernel_read_errors: Counter::default(),
            connections_refused: Counter::default(),
        };
        // Every kind shows, with 0, from the first scrape.
        for kind in [
            GovernorKind::throttle,
            GovernorKind::unthrottle,
            GovernorKind::freeze,
            GovernorKind::thaw,
            GovernorKind::kill,
        ] {
            let _ = m.governor_actions.get_or_create(&KindLabel { kind });
        }
        m
    }

    /// The governor acted.
    pub fn governor_action(&self, kind: GovernorKind) {
        self.governor_actions
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// A job started, `secs` after it was submitted.
    pub fn launch(&self, secs: f64) {
        self.launch_latency.observe(secs);
    }

    /// One sampler pass took `secs`.
    pub fn sampler_pass(&self, secs: f64) {
        self.sampler_duration.observe(secs);
    }

    /// A write to the local store failed.
    pub fn store_write_error(&self) {
        self.store_write_errors.inc();
    }

    /// Failed writes the engine counted so far.
    pub fn store_write_errors(&self) -> u64 {
        self.store_write_errors.get()
    }

    /// Reading a job's state from the kernel failed (and was not taken as an answer).
    pub fn kernel_read_error(&self) {
        self.kernel_read_errors.inc();
    }

    /// A connection was refused (a user over their limit, or the daemon out of descriptors).
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }
}

/// Register the shared counters; `store_write_errors` is the profile writer's count, added to
/// the engine's own.
pub(super) fn register(reg: &mut Registry, metrics: &Metrics, store_write_errors: u64) {
    reg.register(
        "governor_actions",
        "Memory governor actions by kind",
        metrics.governor_actions.clone(),
    );
    reg.register_with_unit(
        "launch_latency",
        "Time from a job's submission to its start",
        Unit::Seconds,
        metrics.launch_latency.clone(),
    );
    reg.register_with_unit(
        "sampler_duration",
        "Time one sampler pass over all jobs took",
        Unit::Seconds,
        metrics.sampler_duration.clone(),
    );
    let errors = metrics.store_write_errors.clone();
    // The profile writer counts its failures; the engine's own are counted here.
    let total: Counter = Counter::default();
    total.inc_by(errors.get() + store_write_errors);
    reg.register(
        "store_write_errors",
        "Failed writes to the local store",
        total,
    );
    reg.register(
        "kernel_read_errors",
        "Reads of a job's state from the kernel that failed and were retried",
        metrics.kernel_read_errors.clone(),
    );
    reg.register(
        "connections_refused",
        "Client connections refused: a user over their limit or no descriptor left",
        metrics.connections_refused.clone(),
    );
}
