//! `[adopt]`: how the processes of registered jobs that start outside their cgroups are found.

use pjw_core::login::WithoutJob;
use serde::Deserialize;

use super::{ConfigError, Errs};

/// `[adopt]`: finding processes of registered jobs that start outside their cgroups.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdopt {
    pub env: Option<Vec<String>>,
    /// Removed: an environment variable is no fact (any process sets it); an error says so.
    pub exclude_env: Option<Vec<String>>,
    pub hook_daemons: Option<Vec<String>>,
    pub sweep_interval_ms: Option<u64>,
    /// `outside` or `refuse`: a login of a user with no running job ([`WithoutJob`]).
    pub login_without_job: Option<String>,
}

/// The variables that carry a workload manager's job id, in the order they are tried.
pub const DEFAULT_ADOPT_ENV: [&str; 4] = ["SLURM_JOB_ID", "JOB_ID", "PBS_JOBID", "LSB_JOBID"];
/// The managers' daemons whose root children are their hooks (Slurm's Prolog and Epilog run
/// as root children of slurmd), never adopted. Debian's slurmd is `slurmd-wlm` (the kernel's
/// `exe` names the file the alternatives link points to).
pub const DEFAULT_ADOPT_HOOK_DAEMONS: [&str; 2] = ["slurmd", "slurmd-wlm"];

/// The validated `[adopt]` section.
#[derive(Clone, Debug)]
pub(super) struct Adopt {
    pub env: Vec<String>,
    pub hook_daemons: Vec<String>,
    pub sweep_ms: u64,
    pub login_without_job: WithoutJob,
}

/// Validate `[adopt]`.
pub(super) fn parse(a: RawAdopt, e: Errs) -> Result<Adopt, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let adopt_env = a
        .env
        .unwrap_or_else(|| DEFAULT_ADOPT_ENV.iter().map(|s| s.to_string()).collect());
    if a.exclude_env.is_some() {
        return Err(err(
            "adopt.exclude_env",
            "was removed: any process can set an environment variable, so a hook is now \
             known by its ancestry (a root process below one of [adopt] hook_daemons)"
                .to_string(),
        ));
    }
    let adopt_hook_daemons = a.hook_daemons.unwrap_or_else(|| {
        DEFAULT_ADOPT_HOOK_DAEMONS
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    for v in &adopt_hook_daemons {
        let ok = !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !ok {
            return Err(err(
                "adopt.hook_daemons",
                format!("{v:?} is not an executable's file name"),
            ));
        }
    }
    for (key, list) in [("adopt.env", &adopt_env)] {
        for v in list {
            let ok = !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !v.as_bytes()[0].is_ascii_digit();
            if !ok {
                return Err(err(
                    key,
                    format!("{v:?} is not an environment variable name"),
                ));
            }
        }
    }
    let adopt_sweep_ms = a.sweep_interval_ms.unwrap_or(1000);
    if adopt_sweep_ms != 0 && !(50..=600_000).contains(&adopt_sweep_ms) {
        return Err(err(
            "adopt.sweep_interval_ms",
            format!("{adopt_sweep_ms} is not 0 (off) or 50-600000"),
        ));
    }
    let login_without_job = match a.login_without_job.as_deref() {
        None | Some("outside") => WithoutJob::Outside,
        Some("refuse") => WithoutJob::Refuse,
        Some(other) => {
            return Err(err(
                "adopt.login_without_job",
                format!("{other:?} is not \"outside\" or \"refuse\""),
            ))
        }
    };
    Ok(Adopt {
        login_without_job,
        env: adopt_env,
        hook_daemons: adopt_hook_daemons,
        sweep_ms: adopt_sweep_ms,
    })
}
