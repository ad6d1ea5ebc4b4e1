//! `[lease]`: asking the workload managers whether their registered jobs still run here, and
//! the lease that bounds what cannot be asked (docs/decisions.md (cc)).

use serde::Deserialize;

use super::profile::{parse_duration_ms, RawDuration};
use super::{ConfigError, Errs};

/// `[lease]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLease {
    pub check_interval: Option<RawDuration>,
    pub check_timeout: Option<RawDuration>,
    pub duration: Option<RawDuration>,
    pub node: Option<String>,
    pub command_env: Option<Vec<String>>,
}

/// The validated `[lease]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How often the managers are asked (ms); 0: never (the lease alone).
    pub check_ms: u64,
    /// How long one ask may take (ms) before it counts as no answer.
    pub timeout_ms: u64,
    /// How long a registered job lives with no word that it runs and no process (ms); None: no
    /// lease.
    pub lease_ms: Option<u64>,
    /// This node's name in the managers' eyes (Slurm's `NodeName`, Grid Engine's host); None:
    /// the host name (short).
    pub node: Option<String>,
    /// Variables set for the managers' commands beside the daemon's own environment
    /// (`SLURM_CONF`, `SGE_ROOT`, `SGE_CELL`).
    pub command_env: Vec<(String, String)>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            check_ms: 60_000,
            timeout_ms: 30_000,
            lease_ms: Some(3_600_000),
            node: None,
            command_env: Vec::new(),
        }
    }
}

/// Validate `[lease]`.
pub(super) fn parse(l: &RawLease, e: Errs) -> Result<LeaseConfig, ConfigError> {
    let d = LeaseConfig::default();
    let dur = |key: &str, v: &Option<RawDuration>, def: u64| -> Result<u64, ConfigError> {
        match v {
            None => Ok(def),
            Some(x) => parse_duration_ms(x).map_err(|r| e.at(key, r)),
        }
    };
    let check_ms = dur("lease.check_interval", &l.check_interval, d.check_ms)?;
    if check_ms != 0 && !(1000..=86_400_000).contains(&check_ms) {
        return Err(e.at(
            "lease.check_interval",
            format!("{check_ms} ms is not 0 (never ask) or between 1s and 1d"),
        ));
    }
    let timeout_ms = dur("lease.check_timeout", &l.check_timeout, d.timeout_ms)?;
    if !(1000..=600_000).contains(&timeout_ms) {
        return Err(e.at(
            "lease.check_timeout",
            format!("{timeout_ms} ms is not between 1s and 10m"),
        ));
    }
    let lease_ms = match dur("lease.duration", &l.duration, d.lease_ms.unwrap_or(0))? {
        0 => None,
        ms if ms < 10_000 => {
            return Err(e.at(
                "lease.duration",
                format!("{ms} ms is below 10s (0 means no lease)"),
            ))
        }
        ms => Some(ms),
    };
    let node = match l.node.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(n)
            if n.len() <= 255
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
        {
            Some(n.to_string())
        }
        Some(n) => {
            return Err(e.at(
                "lease.node",
                format!("{n:?} is not a host name (letters, digits, - _ .)"),
            ))
        }
    };
    let mut command_env = Vec::new();
    for v in l.command_env.iter().flatten() {
        let ok = v.split_once('=').filter(|(n, val)| {
            !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit())
                && !val.contains('\0')
        });
        match ok {
            Some((n, val)) => command_env.push((n.to_string(), val.to_string())),
            None => return Err(e.at("lease.command_env", format!("{v:?} is not NAME=VALUE"))),
        }
    }
    Ok(LeaseConfig {
        check_ms,
        timeout_ms,
        lease_ms,
        node,
        command_env,
    })
}
