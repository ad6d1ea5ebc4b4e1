//! `[log]` and `[metrics]`: where the daemon says what it does.

use serde::Deserialize;

use super::{ConfigError, Errs};

/// `[metrics]`: the Prometheus/OpenMetrics endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: Option<String>,
    pub stats_window: Option<super::RawDuration>,
}

/// Default window of the recent start-time statistics: 5 minutes.
pub const DEFAULT_STATS_WINDOW_MS: u64 = 300_000;

/// Validate `[metrics] stats_window`: 10 s to 1 day.
pub(super) fn parse_stats_window(m: &RawMetrics, e: Errs) -> Result<u64, ConfigError> {
    let ms = match &m.stats_window {
        None => DEFAULT_STATS_WINDOW_MS,
        Some(d) => super::parse_duration_ms(d).map_err(|r| e.at("metrics.stats_window", r))?,
    };
    if !(10_000..=86_400_000).contains(&ms) {
        return Err(e.at(
            "metrics.stats_window",
            format!("{ms} ms is not between 10s and 1d"),
        ));
    }
    Ok(ms)
}

/// `[log]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub level: Option<String>,
    pub format: Option<String>,
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Validate `[log]`: the level and the format.
pub(super) fn parse_log(l: &RawLog, e: Errs) -> Result<(String, LogFormat), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let log_level = l.level.clone().unwrap_or_else(|| "info".into());
    if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
        return Err(err(
            "log.level",
            format!("{log_level:?} is not one of error, warn, info, debug, trace"),
        ));
    }
    let log_format = match l.format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(o) => {
            return Err(err(
                "log.format",
                format!("{o:?} is not \"text\" or \"json\""),
            ))
        }
    };
    Ok((log_level, log_format))
}

/// Validate `[metrics]`: the address to serve on, if any.
pub(super) fn parse_metrics(
    m: &RawMetrics,
    e: Errs,
) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let metrics_listen = match m.listen.as_deref() {
        None | Some("") => None,
        Some(a) => Some(a.parse::<std::net::SocketAddr>().map_err(|_| {
            err(
                "metrics.listen",
                format!("{a:?} is not an address:port like 127.0.0.1:9810"),
            )
        })?),
    };
    Ok(metrics_listen)
}
