//! The start-time statistics' families (issue 27).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowLabel {
    window: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowStatLabel {
    window: String,
    stat: String,
}

/// The start-time statistics' families (issue 27): counters since start, and per window
/// (`window="300s"` for the recent one, `window="all"` since the daemon started) the rates,
/// the wait from submission to start (mean, percentiles, maximum), the queue length's mean and
/// most, and freezes per second.
pub(super) fn register(reg: &mut Registry, s: &pjw_proto::StartStats) {
    let counter = |v: u64| {
        let c: Counter = Counter::default();
        c.inc_by(v);
        c
    };
    reg.register(
        "jobs_started",
        "Jobs started since the daemon started",
        counter(s.total.started),
    );
    reg.register(
        "jobs_ended",
        "Started jobs that ended since the daemon started",
        counter(s.total.ended),
    );
    reg.register(
        "job_freezes",
        "Jobs frozen (preempted, suspended, memory governor) since the daemon started",
        counter(s.total.freezes),
    );
    let started: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let ended: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let freezes: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let queue_mean: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let queue_max: Family<WindowLabel, Gauge> = Family::default();
    let wait: Family<WindowStatLabel, Gauge<f64, AtomicU64>> = Family::default();
    for w in [&s.recent, &s.total] {
        let window = if w.window_secs == 0 {
            "all".to_string()
        } else {
            format!("{}s", w.window_secs)
        };
        let l = WindowLabel {
            window: window.clone(),
        };
        started.get_or_create(&l).set(w.started_per_sec);
        ended.get_or_create(&l).set(w.ended_per_sec);
        let per_sec = if w.covered_secs > 0.0 {
            w.freezes as f64 / w.covered_secs
        } else {
            0.0
        };
        freezes.get_or_create(&l).set(per_sec);
        queue_mean.get_or_create(&l).set(w.queue_mean);
        queue_max.get_or_create(&l).set(i64::from(w.queue_max));
        for (stat, v) in [
            ("mean", w.wait_mean_secs),
            ("p50", w.wait_p50_secs),
            ("p90", w.wait_p90_secs),
            ("p99", w.wait_p99_secs),
            ("max", w.wait_max_secs),
        ] {
            if let Some(v) = v {
                wait.get_or_create(&WindowStatLabel {
                    window: window.clone(),
                    stat: stat.into(),
                })
                .set(v);
            }
        }
    }
    reg.register(
        "jobs_started_per_second",
        "Jobs started per second over the window",
        started,
    );
    reg.register(
        "jobs_ended_per_second",
        "Started jobs that ended, per second over the window",
        ended,
    );
    reg.register(
        "job_freezes_per_second",
        "Jobs frozen per second over the window",
        freezes,
    );
    reg.register_with_unit(
        "job_start_wait",
        "Time from a job's submission to its start over the window: mean, percentiles (within 10%), max",
        Unit::Seconds,
        wait,
    );
    reg.register(
        "queue_length_mean",
        "Jobs waiting for CPUs, time-weighted mean over the window",
        queue_mean,
    );
    reg.register(
        "queue_length_max",
        "Most jobs waiting for CPUs at once over the window",
        queue_max,
    );
}
