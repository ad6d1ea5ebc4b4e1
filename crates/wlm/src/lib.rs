//! pjw-wlm: what a workload manager tells a job about itself — its id, owner, CPU count,
//! memory and scratch directory — for Slurm, Grid Engine, PBS/OpenPBS, LSF and HTCondor.
//!
//! Every manager has one pure function that takes the job's environment (and the text of the
//! job files the manager writes, where the environment is not enough) and returns a
//! [`WlmJob`]. Nothing here reads the process environment or a file: [`read`] does that, apart,
//! so every parser is tested on literal environments (`tests/samples/`).
//!
//! ```
//! use pjw_wlm::{env_from_lines, slurm, Manager};
//! let env = env_from_lines("SLURM_JOB_ID=42\nSLURM_JOB_USER=alice\nSLURM_CPUS_ON_NODE=4\nSLURM_MEM_PER_CPU=1024\n");
//! let job = slurm(&env).unwrap();
//! assert_eq!((job.manager, job.job_id.as_str(), job.cpus, job.mem), (Manager::Slurm, "42", Some(4), Some(4 << 30)));
//! ```
//!
//! | manager | id | user | CPUs on this node | memory | scratch |
//! |---|---|---|---|---|---|
//! | Slurm | `SLURM_JOB_ID` | `SLURM_JOB_USER` | `SLURM_CPUS_ON_NODE`, else the first of `SLURM_JOB_CPUS_PER_NODE` | `SLURM_MEM_PER_NODE`, else `SLURM_MEM_PER_CPU` × CPUs (MiB) | `TMPDIR` |
//! | Grid Engine | `JOB_ID` (`.SGE_TASK_ID` for array tasks) | `job_owner` (config), else `USER` | `host_slots` (config), else `NSLOTS` | `h_vmem` (config) × slots | `TMPDIR`, else `tmpdir` (config) |
//! | PBS / OpenPBS / Torque | `PBS_JOBID` | `USER`, `LOGNAME`, `PBS_O_LOGNAME` | `NCPUS`, else `PBS_NUM_PPN`, else this host's lines in `PBS_NODEFILE`, else `PBS_NP` | — (the hook passes `Resource_List.mem`) | `PBS_TMPDIR`, else `TMPDIR` |
//! | LSF | `LSB_JOBID` (`[LSB_JOBINDEX]` for array elements) | `USER`, `LOGNAME` | `LSB_DJOB_NUMPROC`, else this host in `LSB_MCPU_HOSTS`, else in `LSB_HOSTS` | the `RLIMIT_RSS` LSF sets from `bsub -M` | `TMPDIR` |
//! | HTCondor | `ClusterId.ProcId` (job ad) | `Owner` (job ad) | `RequestCpus` (job ad), else `Cpus` (machine ad) | `RequestMemory`, else `Memory` (MiB) | `_CONDOR_SCRATCH_DIR` |
//!
//! The GPUs a manager already chose for the job, by its own numbering: [`gpus`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub mod ask;
pub mod gpus;
pub mod read;

pub use gpus::{gpu_vars, manager_gpus, parse_gpu_list};

pub use read::read;

mod condor;
mod lsf;
mod pbs;
mod sge;
mod slurm;

#[cfg(test)]
use condor::{ad_int, ad_string};
pub use condor::{condor, parse_class_ad};
pub use lsf::lsf;
pub use pbs::{pbs, pbs_size};
pub use sge::{sge, sge_shepherd, sge_size};
pub use slurm::slurm;

/// A job's environment (or a `KEY=VALUE` file), by name.
pub type Env = BTreeMap<String, String>;

/// A workload manager pjw runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Manager {
    Slurm,
    /// Grid Engine (Son of Grid Engine, Univa/Altair GE, OGS).
    Sge,
    /// PBS Professional, OpenPBS, Torque.
    Pbs,
    /// IBM Spectrum LSF.
    Lsf,
    /// HTCondor.
    Condor,
}

impl Manager {
    /// Every manager, in the order [`detect`] tries them.
    pub const ALL: [Manager; 5] = [
        Manager::Slurm,
        Manager::Condor,
        Manager::Lsf,
        Manager::Pbs,
        Manager::Sge,
    ];

    /// The name used on the command line and in `pjw status` (`slurm`, `sge`, `pbs`, `lsf`,
    /// `condor`).
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Slurm => "slurm",
            Manager::Sge => "sge",
            Manager::Pbs => "pbs",
            Manager::Lsf => "lsf",
            Manager::Condor => "condor",
        }
    }
}

impl fmt::Display for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Manager {
    type Err = WlmError;
    fn from_str(s: &str) -> Result<Manager, WlmError> {
        match s.to_ascii_lowercase().as_str() {
            "slurm" => Ok(Manager::Slurm),
            "sge" | "gridengine" | "ge" => Ok(Manager::Sge),
            "pbs" | "openpbs" | "torque" => Ok(Manager::Pbs),
            "lsf" => Ok(Manager::Lsf),
            "condor" | "htcondor" => Ok(Manager::Condor),
            _ => Err(WlmError::UnknownManager(s.to_string())),
        }
    }
}

/// What a manager says about a job. `None` where the manager does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WlmJob {
    pub manager: Manager,
    /// The manager's own job id, as it spells it (`123.server`, `77[3]`, `12.0`).
    pub job_id: String,
    /// The same id made safe as a pjw job id (`[A-Za-z0-9._-]`, ≤ 64): `77[3]` → `77.3`.
    pub pjw_id: String,
    /// The job's owner (a user name).
    pub user: Option<String>,
    /// CPUs the job has on this node.
    pub cpus: Option<u32>,
    /// Memory the job has on this node, bytes.
    pub mem: Option<u64>,
    /// The job's name.
    pub name: Option<String>,
    /// The manager's per-job scratch directory.
    pub tmpdir: Option<String>,
}

impl WlmJob {
    fn new(manager: Manager, job_id: String) -> WlmJob {
        WlmJob {
            manager,
            pjw_id: pjw_id(&job_id),
            job_id,
            user: None,
            cpus: None,
            mem: None,
            name: None,
            tmpdir: None,
        }
    }

    /// `manager:job_id`, as recorded with the job (`slurm:42`).
    pub fn tag(&self) -> String {
        format!("{}:{}", self.manager, self.job_id)
    }
}

/// Why a job's description could not be taken from its manager.
#[derive(Debug, thiserror::Error)]
pub enum WlmError {
    #[error("unknown workload manager {0:?} (expected auto, slurm, sge, pbs, lsf or condor)")]
    UnknownManager(String),
    #[error("no workload manager job found in the environment (none of SLURM_JOB_ID, _CONDOR_JOB_AD, LSB_JOBID, PBS_JOBID, JOB_ID with SGE_ROOT is set)")]
    NoManager,
    #[error("{manager}: {what} is not set")]
    Missing { manager: Manager, what: String },
    #[error("{manager}: {what} = {value:?}: {reason}")]
    Bad {
        manager: Manager,
        what: String,
        value: String,
        reason: String,
    },
    #[error("{manager}: cannot read {path}: {source}")]
    Io {
        manager: Manager,
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn missing(manager: Manager, what: &str) -> WlmError {
    WlmError::Missing {
        manager,
        what: what.to_string(),
    }
}

pub(crate) fn bad(manager: Manager, what: &str, value: &str, reason: &str) -> WlmError {
    WlmError::Bad {
        manager,
        what: what.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// A value that is set and not empty.
pub(crate) fn get<'a>(env: &'a Env, key: &str) -> Option<&'a str> {
    env.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

pub(crate) fn first<'a>(env: &'a Env, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| get(env, k))
}

/// A positive count.
pub(crate) fn count(m: Manager, what: &str, v: &str) -> Result<u32, WlmError> {
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad(m, what, v, "not a positive whole number")),
    }
}

/// Mebibytes → bytes.
pub(crate) fn mib(m: Manager, what: &str, v: &str) -> Result<u64, WlmError> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(1 << 20))
        .ok_or_else(|| bad(m, what, v, "not a positive number of MiB"))
}

/// A manager's job id as a pjw job id: array brackets become dots (`77[3]` → `77.3`), any
/// other character pjw does not take becomes `_`, at most 64 characters, no leading `.`/`-`.
pub fn pjw_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            '[' => out.push('.'),
            ']' => {}
            c if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    let out = out.trim_start_matches(['.', '-']);
    let mut out: String = out.chars().take(pjw_core::jobid::MAX_JOB_ID_LEN).collect();
    if out.is_empty() {
        out.push_str("job");
    }
    out
}

/// Parse `KEY=VALUE` lines (an environment dump, Grid Engine's `environment` and `config`
/// files). Lines without `=` are ignored; the first `=` splits.
pub fn env_from_lines(text: &str) -> Env {
    text.lines()
        .filter_map(|l| l.split_once('='))
        // Trimmed before the checks: `  =x` has no name, ` # X=1` is a comment.
        .map(|(k, v)| (k.trim(), v))
        .filter(|(k, _)| !k.is_empty() && !k.starts_with('#'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Parse a NUL-separated environment block, as `/proc/PID/environ` holds it (for recognising a
/// process's job by its variables). Entries that are not UTF-8 are taken lossily.
pub fn env_from_environ(block: &[u8]) -> Env {
    block
        .split(|b| *b == 0)
        .filter_map(|e| {
            let e = String::from_utf8_lossy(e);
            let (k, v) = e.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Which manager's job this environment belongs to.
pub fn detect(env: &Env) -> Option<Manager> {
    Manager::ALL.into_iter().find(|m| match m {
        Manager::Slurm => first(env, &["SLURM_JOB_ID", "SLURM_JOBID"]).is_some(),
        Manager::Condor => get(env, "_CONDOR_JOB_AD").is_some(),
        Manager::Lsf => get(env, "LSB_JOBID").is_some(),
        Manager::Pbs => get(env, "PBS_JOBID").is_some(),
        Manager::Sge => {
            get(env, "JOB_ID").is_some()
                && first(env, &["SGE_ROOT", "SGE_JOB_SPOOL_DIR", "SGE_TASK_ID"]).is_some()
        }
    })
}

/// The short form of a host name (`n1.cluster` → `n1`), how managers' host lists are matched.
pub(crate) fn short(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

#[cfg(test)]
mod tests;
