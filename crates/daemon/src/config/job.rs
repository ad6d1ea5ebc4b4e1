//! `[job]`: what every job gets: leftover killing, pids and swap limits, its private /tmp, and
//! the partition type of exclusive jobs, how its threads are bound and how often they are
//! balanced, whether its OpenMP/BLAS thread variables are set, and its /dev/shm and IPC.

use std::path::{Path, PathBuf};

use pjw_core::time_limit::{NodeLimits, TimeLimit};
use serde::Deserialize;

use super::{ConfigError, Errs};

/// `[job]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    pub kill_leftovers: Option<bool>,
    pub pids_max: Option<u64>,
    pub tmp: Option<String>,
    pub tmp_max: Option<String>,
    pub tmp_root: Option<PathBuf>,
    pub swap_max: Option<String>,
    pub partition: Option<String>,
    pub bind: Option<String>,
    pub io_weight: Option<u64>,
    pub io_max: Option<Vec<String>>,
    pub bind_interval_ms: Option<u64>,
    pub thread_env: Option<bool>,
    pub private_ipc: Option<bool>,
    pub shm_size: Option<String>,
    pub scrub_ipc: Option<bool>,
    pub scrub_min_uid: Option<u32>,
    pub kill_wait: Option<u64>,
    pub default_time: Option<String>,
    pub max_time: Option<String>,
}

/// `[job] private_ipc`, `shm_size`, `scrub_ipc`: a job's own /dev/shm and IPC namespace
/// (starter mode), and the scrub of what a job left in the host's at its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobIpc {
    /// A root client gives the job a tmpfs on /dev/shm and a new IPC namespace.
    pub private: bool,
    /// Its size for a job without `--mem`; `None` = the job partition.
    pub shm_size: Option<u64>,
    /// Remove what a job's owner left in the host's /dev/shm and SysV IPC at its last job's end.
    pub scrub: bool,
    /// Users below this uid (system users: services) are never scrubbed; root never is.
    pub scrub_min_uid: u32,
}

/// The validated `[job]` section.
#[derive(Clone, Debug)]
pub(super) struct Job {
    pub kill_leftovers: bool,
    pub pids_max: Option<u64>,
    pub tmp: Option<u64>,
    pub tmp_max: Option<u64>,
    pub tmp_root: PathBuf,
    pub swap_max: Option<u64>,
    pub partition: Option<pjw_cgroup::Partition>,
    pub bind: pjw_core::thread_bind::BindMode,
    pub bind_interval_ms: u64,
    pub thread_env: bool,
    pub ipc: JobIpc,
    pub kill_wait_s: u64,
    pub time_limits: NodeLimits,
}

/// Seconds between the SIGTERM and the SIGKILL of a job at its time limit (Slurm's KillWait).
pub const DEFAULT_KILL_WAIT_S: u64 = 30;

/// Validate `[job]`; a job's /tmp lives below `state_dir` unless `tmp_root` says otherwise.
pub(super) fn parse(j: RawJob, state_dir: &Path, e: Errs) -> Result<Job, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let pids_max = match j.pids_max {
        None | Some(0) => None,
        Some(n) => Some(n),
    };
    let (tmp, tmp_max, tmp_root) = parse_tmp(&j, state_dir, e)?;
    let swap_max = match j.swap_max.as_deref() {
        None | Some("max") => None,
        Some(t) => Some(pjw_core::parse_size(t).map_err(|e| err("job.swap_max", e.to_string()))?),
    };
    let partition = match j.partition.as_deref() {
        None | Some("none") => None,
        Some("root") => Some(pjw_cgroup::Partition::Root),
        Some("isolated") => Some(pjw_cgroup::Partition::Isolated),
        Some(other) => {
            return Err(err(
                "job.partition",
                format!("{other:?} is not one of none, root, isolated"),
            ))
        }
    };
    let (bind, bind_interval_ms) = parse_bind(&j, e)?;
    let ipc = parse_ipc(&j, e)?;
    let kill_wait_s = j.kill_wait.unwrap_or(DEFAULT_KILL_WAIT_S);
    if kill_wait_s > 3600 {
        return Err(err(
            "job.kill_wait",
            format!("{kill_wait_s} is more than 3600 (seconds)"),
        ));
    }
    let time_limits = parse_time_limits(&j, e)?;
    Ok(Job {
        kill_leftovers: j.kill_leftovers.unwrap_or(true),
        pids_max,
        tmp,
        tmp_max,
        tmp_root,
        swap_max,
        partition,
        bind,
        bind_interval_ms,
        thread_env: j.thread_env.unwrap_or(true),
        ipc,
        kill_wait_s,
        time_limits,
    })
}

/// The node's time limits: `default_time` for a job that asks for none, `max_time` the most a
/// user may ask for (Slurm's forms: `MIN`, `H:MIN:SEC`, `D-H`, … or `2h`); the default no
/// longer than the maximum.
fn parse_time_limits(j: &RawJob, e: Errs) -> Result<NodeLimits, ConfigError> {
    let limit = |key: &str, text: &Option<String>| -> Result<Option<TimeLimit>, ConfigError> {
        text.as_deref()
            .map(|t| TimeLimit::parse(t).map_err(|why| e.at(key, why.to_string())))
            .transpose()
    };
    let limits = NodeLimits {
        default: limit("job.default_time", &j.default_time)?,
        max: limit("job.max_time", &j.max_time)?,
    };
    if let (Some(d), Some(m)) = (limits.default, limits.max) {
        if d > m {
            return Err(e.at(
                "job.default_time",
                format!("{d} is more than job.max_time ({m})"),
            ));
        }
    }
    Ok(limits)
}

/// A job's /tmp: its size (`tmp`, none below 1M), the most a job may ask (`tmp_max`) and where
/// it lives (`tmp_root`, absolute; below `state_dir` by default).
fn parse_tmp(
    j: &RawJob,
    state_dir: &Path,
    e: Errs,
) -> Result<(Option<u64>, Option<u64>, PathBuf), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let tmp = match j.tmp.as_deref().map(str::trim) {
        None | Some("") | Some("none") | Some("0") => None,
        Some(t) => match pjw_core::parse_size(t) {
            Ok(0) => None,
            Ok(n) if n < 1 << 20 => return Err(err("job.tmp", format!("{t:?} is below 1M"))),
            Ok(n) => Some(n),
            Err(e) => return Err(err("job.tmp", format!("{e} (or \"none\")"))),
        },
    };
    let tmp_max = match j.tmp_max.as_deref().map(str::trim) {
        None => None,
        Some(t) => match pjw_core::parse_size(t) {
            Ok(n) if n >= 1 << 20 => Some(n),
            Ok(_) => return Err(err("job.tmp_max", format!("{t:?} is below 1M"))),
            Err(e) => return Err(err("job.tmp_max", e.to_string())),
        },
    };
    if let (Some(t), Some(m)) = (tmp, tmp_max) {
        if t > m {
            return Err(err(
                "job.tmp",
                format!("{} is above job.tmp_max", pjw_core::format_size(t)),
            ));
        }
    }
    let tmp_root = match &j.tmp_root {
        Some(p) if !p.is_absolute() => {
            return Err(err(
                "job.tmp_root",
                format!("{} is not an absolute path", p.display()),
            ))
        }
        Some(p) => p.clone(),
        None => state_dir.join("tmp"),
    };
    Ok((tmp, tmp_max, tmp_root))
}

/// Thread binding: the mode (`bind`) and how often the binder looks (`bind_interval_ms`, at
/// least 100).
fn parse_bind(j: &RawJob, e: Errs) -> Result<(pjw_core::thread_bind::BindMode, u64), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let bind = match j.bind.as_deref() {
        None => pjw_core::thread_bind::BindMode::default(),
        Some(t) => pjw_core::thread_bind::BindMode::parse(t).ok_or_else(|| {
            err(
                "job.bind",
                format!("{t:?} is not one of threads, cores, none"),
            )
        })?,
    };
    let bind_interval_ms = match j.bind_interval_ms {
        None => 1000,
        Some(n) if n < 100 => {
            return Err(err(
                "job.bind_interval_ms",
                format!("{n} is below 100 (ms)"),
            ))
        }
        Some(n) => n,
    };
    Ok((bind, bind_interval_ms))
}

/// A job's IPC: its own namespace, the size of its /dev/shm, the scrub at its end.
fn parse_ipc(j: &RawJob, e: Errs) -> Result<JobIpc, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let shm_size = match j.shm_size.as_deref().map(str::trim) {
        None => None,
        Some(t) => match pjw_core::parse_size(t) {
            Ok(n) if n >= 1 << 20 => Some(n),
            Ok(_) => return Err(err("job.shm_size", format!("{t:?} is below 1M"))),
            Err(e) => return Err(err("job.shm_size", e.to_string())),
        },
    };
    Ok(JobIpc {
        private: j.private_ipc.unwrap_or(true),
        shm_size,
        scrub: j.scrub_ipc.unwrap_or(true),
        scrub_min_uid: j.scrub_min_uid.unwrap_or(1000),
    })
}
