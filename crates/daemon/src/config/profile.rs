//! `[profile]`: the job sampler and the profile store (interval, retention, size cap, admin
//! group), and durations as written in the file.

use serde::Deserialize;

use super::{ConfigError, Errs};

/// A duration: a number of seconds or text with a unit (`500ms`, `10s`, `5m`, `2h`, `30d`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    Secs(u64),
    Text(String),
}

/// `[profile]`: the job sampler and the profile store.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub enabled: Option<bool>,
    pub interval: Option<RawDuration>,
    pub processes: Option<usize>,
    pub threads: Option<usize>,
    pub threads_scan: Option<usize>,
    pub retention: Option<RawDuration>,
    pub max_db_size: Option<String>,
    pub admin_group: Option<String>,
}

/// The validated `[profile]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileConfig {
    /// Whether running jobs are sampled.
    pub enabled: bool,
    /// Milliseconds between samples (1 s to 1 h; default 10 s).
    pub interval_ms: u64,
    /// Per-process detail: the top N processes of each job per sample (0: off).
    pub processes: usize,
    /// Per-thread detail: the top N threads of each job per sample (0: off; default 4).
    pub threads: usize,
    /// Threads of one job read per sample at most, to find its top N (default 1024).
    pub threads_scan: usize,
    /// How long ended jobs are kept (ms); None: forever.
    pub retention_ms: Option<i64>,
    /// The database's size cap (bytes); None: no cap.
    pub max_db_size: Option<u64>,
    /// Members of this group (name or gid) may read every user's reports, like root.
    pub admin_group: Option<String>,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            enabled: true,
            interval_ms: 10_000,
            processes: 0,
            threads: 4,
            threads_scan: 1024,
            retention_ms: Some(30 * 86_400_000),
            max_db_size: Some(1 << 30),
            admin_group: None,
        }
    }
}

/// Parse a duration into milliseconds: seconds as a number, or `N` with a unit `ms`, `s`, `m`,
/// `h`, `d` (pure).
pub fn parse_duration_ms(d: &RawDuration) -> Result<u64, String> {
    match d {
        RawDuration::Secs(s) => s
            .checked_mul(1000)
            .ok_or_else(|| format!("{s} seconds is too long")),
        RawDuration::Text(t) => {
            let t = t.trim();
            let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let (num, unit) = t.split_at(split);
            let n: u64 = num.parse().map_err(|_| {
                format!("{t:?} is not a duration such as \"10s\", \"5m\" or \"30d\"")
            })?;
            let mult = match unit.trim() {
                "ms" => 1,
                "" | "s" => 1000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                u => return Err(format!("{t:?}: unknown unit {u:?} (use ms, s, m, h or d)")),
            };
            n.checked_mul(mult)
                .ok_or_else(|| format!("{t:?} is too long"))
        }
    }
}

/// Validate `[profile]`.
pub(super) fn parse(p: &RawProfile, e: Errs) -> Result<ProfileConfig, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let size = |key: &str, v: &Option<String>| super::size(e, key, v);
    let pd = ProfileConfig::default();
    let interval_ms = match &p.interval {
        None => pd.interval_ms,
        Some(d) => parse_duration_ms(d).map_err(|e| err("profile.interval", e))?,
    };
    if !(1000..=3_600_000).contains(&interval_ms) {
        return Err(err(
            "profile.interval",
            format!("{interval_ms} ms is not between 1s and 1h"),
        ));
    }
    let retention_ms = match &p.retention {
        None => pd.retention_ms,
        Some(d) => match parse_duration_ms(d).map_err(|e| err("profile.retention", e))? {
            0 => None,
            ms => Some(ms.min(i64::MAX as u64) as i64),
        },
    };
    let max_db_size = match size("profile.max_db_size", &p.max_db_size)? {
        None => pd.max_db_size,
        Some(0) => None,
        Some(b) if b < (1 << 20) => {
            return Err(err(
                "profile.max_db_size",
                format!("{b} bytes is below the 1M minimum (0 means no cap)"),
            ))
        }
        Some(b) => Some(b),
    };
    let processes = p.processes.unwrap_or(0);
    if processes > 1000 {
        return Err(err(
            "profile.processes",
            format!("{processes} is more than 1000"),
        ));
    }
    let threads = p.threads.unwrap_or(pd.threads);
    if threads > 256 {
        return Err(err(
            "profile.threads",
            format!("{threads} is more than 256"),
        ));
    }
    let threads_scan = p.threads_scan.unwrap_or(pd.threads_scan);
    if !(1..=100_000).contains(&threads_scan) {
        return Err(err(
            "profile.threads_scan",
            format!("{threads_scan} is not between 1 and 100000"),
        ));
    }
    let admin_group = match p.admin_group.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(g)
            if g.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
        {
            Some(g.to_string())
        }
        Some(g) => {
            return Err(err(
                "profile.admin_group",
                format!("{g:?} is not a group name or gid"),
            ))
        }
    };
    let profile = ProfileConfig {
        enabled: p.enabled.unwrap_or(true),
        interval_ms,
        processes,
        threads,
        threads_scan,
        retention_ms,
        max_db_size,
        admin_group,
    };
    Ok(profile)
}
