//! `[memory]`: the job partition's size and the memory governor's thresholds.

use serde::Deserialize;

use super::{ConfigError, Errs};

/// `[memory]`: the job partition and the governor.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemory {
    pub limit: Option<String>,
    pub reserve: Option<String>,
    pub governor: Option<bool>,
    pub high: Option<f64>,
    pub low: Option<f64>,
    pub psi_some: Option<f64>,
    pub psi_full: Option<f64>,
    pub vm_prediction: Option<f64>,
    pub swap_slots: Option<usize>,
    pub interval_ms: Option<u64>,
    pub throttle: Option<bool>,
    pub min_available: Option<String>,
    pub swap_in_max: Option<f64>,
    pub frozen_max: Option<super::profile::RawDuration>,
}

/// The validated `[memory]` section.
#[derive(Clone, Debug)]
pub(super) struct Memory {
    pub limit: Option<u64>,
    pub reserve: u64,
    pub governor: bool,
    pub governor_cfg: pjw_core::governor::GovernorConfig,
    pub interval_ms: u64,
}

/// Validate `[memory]`.
pub(super) fn parse(m: &RawMemory, e: Errs) -> Result<Memory, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let size = |key: &str, v: &Option<String>| super::size(e, key, v);
    let memory_limit = size("memory.limit", &m.limit)?;
    if memory_limit == Some(0) {
        return Err(err("memory.limit", "must be more than 0".into()));
    }
    let memory_reserve = size("memory.reserve", &m.reserve)?.unwrap_or(1 << 30);
    let share = |key: &str, v: Option<f64>, d: f64| -> Result<f64, ConfigError> {
        let v = v.unwrap_or(d);
        if !(0.05..=1.0).contains(&v) {
            return Err(err(key, format!("{v} is not a share between 0.05 and 1")));
        }
        Ok(v)
    };
    let pct = |key: &str, v: Option<f64>, d: f64| -> Result<f64, ConfigError> {
        let v = v.unwrap_or(d);
        if !(0.0..=100.0).contains(&v) {
            return Err(err(key, format!("{v} is not a percentage")));
        }
        Ok(v)
    };
    let defaults = pjw_core::governor::GovernorConfig::default();
    let high = share("memory.high", m.high, defaults.high)?;
    let low = share("memory.low", m.low, defaults.low)?;
    if low >= high {
        return Err(err(
            "memory.low",
            format!("{low} must be below memory.high ({high})"),
        ));
    }
    let governor_interval_ms = m.interval_ms.unwrap_or(1000);
    if !(100..=60_000).contains(&governor_interval_ms) {
        return Err(err(
            "memory.interval_ms",
            format!("{governor_interval_ms} is not 100-60000"),
        ));
    }
    // Three ticks ahead unless set: what growth can add before the governor has looked
    // again and acted (3 s at the default 1 s tick).
    let prediction_secs = m
        .vm_prediction
        .unwrap_or(3.0 * governor_interval_ms as f64 / 1000.0);
    if !(0.0..=600.0).contains(&prediction_secs) {
        return Err(err(
            "memory.vm_prediction",
            format!("{prediction_secs} is not 0-600 seconds"),
        ));
    }
    let swap_slots = m.swap_slots.unwrap_or(1);
    if swap_slots == 0 {
        return Err(err("memory.swap_slots", "must be at least 1".into()));
    }
    let frozen_max_ms = match &m.frozen_max {
        None => defaults.frozen_max_ms,
        Some(d) => match super::profile::parse_duration_ms(d) {
            Ok(0) => None,
            Ok(ms) if ms < 1000 => {
                return Err(err(
                    "memory.frozen_max",
                    format!("{ms} ms is below 1s (0 means no bound)"),
                ))
            }
            Ok(ms) => Some(ms.min(i64::MAX as u64) as i64),
            Err(e) => return Err(err("memory.frozen_max", e)),
        },
    };
    let governor_cfg = pjw_core::governor::GovernorConfig {
        limit: u64::MAX,
        high,
        low,
        psi_some: pct("memory.psi_some", m.psi_some, defaults.psi_some)?,
        psi_full: pct("memory.psi_full", m.psi_full, defaults.psi_full)?,
        prediction_secs,
        swap_slots,
        thaw_cooldown_ms: (2 * governor_interval_ms) as i64,
        min_available: size("memory.min_available", &m.min_available)?
            .unwrap_or(defaults.min_available),
        swap_in_max: match m.swap_in_max {
            Some(v) if v < 0.0 => {
                return Err(err("memory.swap_in_max", format!("{v} is negative")))
            }
            Some(v) => v,
            None => defaults.swap_in_max,
        },
        // Where the kernel can (cgroup v2); the daemon turns it off on v1 at start.
        throttle: m.throttle.unwrap_or(true),
        frozen_max_ms,
    };
    Ok(Memory {
        limit: memory_limit,
        reserve: memory_reserve,
        governor: m.governor.unwrap_or(true),
        governor_cfg,
        interval_ms: governor_interval_ms,
    })
}
