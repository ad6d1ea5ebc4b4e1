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

fn missing(manager: Manager, what: &str) -> WlmError {
    WlmError::Missing {
        manager,
        what: what.to_string(),
    }
}

fn bad(manager: Manager, what: &str, value: &str, reason: &str) -> WlmError {
    WlmError::Bad {
        manager,
        what: what.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// A value that is set and not empty.
fn get<'a>(env: &'a Env, key: &str) -> Option<&'a str> {
    env.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

fn first<'a>(env: &'a Env, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| get(env, k))
}

/// A positive count.
fn count(m: Manager, what: &str, v: &str) -> Result<u32, WlmError> {
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad(m, what, v, "not a positive whole number")),
    }
}

/// Mebibytes → bytes.
fn mib(m: Manager, what: &str, v: &str) -> Result<u64, WlmError> {
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

// ---- Slurm -------------------------------------------------------------------------------------

/// A Slurm job from its environment (job, task, Prolog or Epilog).
pub fn slurm(env: &Env) -> Result<WlmJob, WlmError> {
    let m = Manager::Slurm;
    let id =
        first(env, &["SLURM_JOB_ID", "SLURM_JOBID"]).ok_or_else(|| missing(m, "SLURM_JOB_ID"))?;
    let mut job = WlmJob::new(m, id.to_string());
    job.user = get(env, "SLURM_JOB_USER").map(String::from);
    job.name = get(env, "SLURM_JOB_NAME").map(String::from);
    job.tmpdir = get(env, "TMPDIR").map(String::from);
    job.cpus = if let Some(v) = get(env, "SLURM_CPUS_ON_NODE") {
        Some(count(m, "SLURM_CPUS_ON_NODE", v)?)
    } else if let Some(v) = get(env, "SLURM_JOB_CPUS_PER_NODE") {
        // "4(x2),2": this node's count is not said; the first node's is the batch host's.
        let head = v.split(',').next().unwrap_or(v);
        let head = head.split('(').next().unwrap_or(head);
        Some(
            count(m, "SLURM_JOB_CPUS_PER_NODE", head)
                .map_err(|_| bad(m, "SLURM_JOB_CPUS_PER_NODE", v, "expected N or N(xM),…"))?,
        )
    } else {
        None
    };
    job.mem = if let Some(v) = get(env, "SLURM_MEM_PER_NODE") {
        Some(mib(m, "SLURM_MEM_PER_NODE", v)?)
    } else if let (Some(v), Some(n)) = (get(env, "SLURM_MEM_PER_CPU"), job.cpus) {
        // Both numbers are the job's to pick: 10^9 MiB × 4·10^9 CPUs overflows u64.
        let per = mib(m, "SLURM_MEM_PER_CPU", v)?;
        Some(
            per.checked_mul(n as u64)
                .ok_or_else(|| bad(m, "SLURM_MEM_PER_CPU", v, "times the CPUs is out of range"))?,
        )
    } else {
        None
    };
    Ok(job)
}

// ---- Grid Engine -------------------------------------------------------------------------------

/// A Grid Engine size (`2G`, `512M`, `1.5g`, `INFINITY`): upper-case units are powers of 1024,
/// lower-case ones powers of 1000, as in `sge_types(1)`. `None` for INFINITY / UNDEFINED.
pub fn sge_size(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("infinity") || t.eq_ignore_ascii_case("undefined") || t.is_empty() {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "K" => 1024.0,
        "m" => 1e6,
        "M" => (1u64 << 20) as f64,
        "g" => 1e9,
        "G" => (1u64 << 30) as f64,
        "t" => 1e12,
        "T" => (1u64 << 40) as f64,
        _ => return Err("unknown unit (expected k, K, m, M, g, G, t, T)".into()),
    };
    let v: f64 = num.parse().map_err(|_| "not a number".to_string())?;
    let bytes = (v * mult).round();
    // Below one byte once rounded (".43" bytes) is no limit a job can run in, not a 0-byte one.
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err("out of range".into());
    }
    Ok(Some(bytes as u64))
}

/// A Grid Engine job from its environment (the job's, or the `environment` file in the
/// shepherd's directory) and the shepherd's `config` file, parsed with [`env_from_lines`].
pub fn sge(env: &Env, config: Option<&Env>) -> Result<WlmJob, WlmError> {
    let m = Manager::Sge;
    let empty = Env::new();
    let cfg = config.unwrap_or(&empty);
    let id = get(env, "JOB_ID")
        .or_else(|| get(cfg, "job_id"))
        .ok_or_else(|| missing(m, "JOB_ID"))?;
    let task = get(env, "SGE_TASK_ID")
        .filter(|t| t.chars().all(|c| c.is_ascii_digit()))
        .or_else(|| get(cfg, "ja_task_id").filter(|t| *t != "0"));
    let full = match task {
        Some(t) => format!("{id}.{t}"),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = get(cfg, "job_owner")
        .or_else(|| get(env, "USER"))
        .map(String::from);
    job.name = get(env, "JOB_NAME")
        .or_else(|| get(cfg, "job_name"))
        .map(String::from);
    job.tmpdir = get(env, "TMPDIR")
        .or_else(|| get(cfg, "tmpdir"))
        .map(String::from);
    job.cpus = if let Some(v) = get(cfg, "host_slots") {
        Some(count(m, "host_slots", v)?)
    } else if let Some(v) = get(env, "NSLOTS") {
        Some(count(m, "NSLOTS", v)?)
    } else if let Some(v) = get(cfg, "pe_slots") {
        Some(count(m, "pe_slots", v)?)
    } else {
        None
    };
    if let Some(v) = get(cfg, "h_vmem") {
        // h_vmem is per slot; the shepherd multiplies it by the slots on this host.
        let per = sge_size(v).map_err(|r| bad(m, "h_vmem", v, &r))?;
        job.mem = per.map(|b| b.saturating_mul(job.cpus.unwrap_or(1) as u64));
    }
    Ok(job)
}

/// The job a root-run Grid Engine shepherd wrapper registers, from the text of the `config`
/// file sge_execd writes into the job's spool directory — and from nothing else: `environment`
/// holds the user's own `qsub -v` variables (`NSLOTS`, `USER`, even `JOB_ID`), which must not
/// size or name a job root registers. A key read here that the file holds twice (a value with
/// a newline could add a line) makes it refuse: the file is ambiguous.
pub fn sge_shepherd(config: &str) -> Result<WlmJob, WlmError> {
    let m = Manager::Sge;
    let used = [
        "job_id",
        "ja_task_id",
        "job_owner",
        "host_slots",
        "pe_slots",
        "h_vmem",
    ];
    let mut cfg = Env::new();
    for line in config.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if used.contains(&k) && cfg.insert(k.to_string(), v.to_string()).is_some() {
            return Err(bad(
                m,
                k,
                v,
                "set twice in config: refusing an ambiguous file",
            ));
        }
    }
    let id = get(&cfg, "job_id").ok_or_else(|| missing(m, "job_id in config"))?;
    if !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(m, "job_id", id, "not a Grid Engine job number"));
    }
    let full = match get(&cfg, "ja_task_id").filter(|t| *t != "0") {
        Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => format!("{id}.{t}"),
        Some(t) => return Err(bad(m, "ja_task_id", t, "not a task number")),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = get(&cfg, "job_owner").map(String::from);
    job.cpus = match (get(&cfg, "host_slots"), get(&cfg, "pe_slots")) {
        (Some(v), _) => Some(count(m, "host_slots", v)?),
        (None, Some(v)) => Some(count(m, "pe_slots", v)?),
        (None, None) => Some(1),
    };
    if let Some(v) = get(&cfg, "h_vmem") {
        let per = sge_size(v).map_err(|r| bad(m, "h_vmem", v, &r))?;
        job.mem = per.map(|b| b.saturating_mul(job.cpus.unwrap_or(1) as u64));
    }
    // The name is shown, never believed: the first `job_name` (one the user's text forged
    // later cannot replace it), none when empty.
    job.name = config
        .lines()
        .find_map(|l| l.strip_prefix("job_name="))
        .filter(|n| !n.trim().is_empty())
        .map(String::from);
    Ok(job)
}

// ---- PBS ---------------------------------------------------------------------------------------

/// The short form of a host name (`n1.cluster` → `n1`), how managers' host lists are matched.
fn short(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// A PBS Professional / OpenPBS / Torque job from its environment, with the text of
/// `$PBS_NODEFILE` (one line per MPI process slot) and this host's name when known.
pub fn pbs(env: &Env, nodefile: Option<&str>, host: Option<&str>) -> Result<WlmJob, WlmError> {
    let m = Manager::Pbs;
    let id = get(env, "PBS_JOBID").ok_or_else(|| missing(m, "PBS_JOBID"))?;
    let mut job = WlmJob::new(m, id.to_string());
    job.user = first(env, &["USER", "LOGNAME", "PBS_O_LOGNAME"]).map(String::from);
    job.name = get(env, "PBS_JOBNAME").map(String::from);
    job.tmpdir = first(env, &["PBS_TMPDIR", "TMPDIR"]).map(String::from);
    job.cpus = if let Some(v) = get(env, "NCPUS") {
        Some(count(m, "NCPUS", v)?)
    } else if let Some(v) = get(env, "PBS_NUM_PPN") {
        Some(count(m, "PBS_NUM_PPN", v)?)
    } else if let (Some(text), Some(h)) = (nodefile, host) {
        let n = text.lines().filter(|l| short(l.trim()) == short(h)).count() as u32;
        (n > 0).then_some(n)
    } else if let Some(v) = get(env, "PBS_NP") {
        Some(count(m, "PBS_NP", v)?)
    } else {
        None
    };
    Ok(job)
}

/// A PBS size (`4gb`, `512mb`, `100kb`, `1048576b`, `2w` words of 8 bytes; units are powers
/// of 1024, a bare number is bytes), as `Resource_List.mem` prints it.
pub fn pbs_size(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: u64 = num.parse().map_err(|_| "not a number".to_string())?;
    let mult: u64 = match unit {
        "" | "b" => 1,
        "w" => 8,
        "kb" | "k" => 1 << 10,
        "kw" => 8 << 10,
        "mb" | "m" => 1 << 20,
        "mw" => 8 << 20,
        "gb" | "g" => 1 << 30,
        "gw" => 8 << 30,
        "tb" | "t" => 1 << 40,
        "tw" => 8 << 40,
        _ => return Err("unknown unit (expected b, kb, mb, gb, tb or w)".into()),
    };
    v.checked_mul(mult)
        .ok_or_else(|| "out of range".to_string())
}

// ---- LSF ---------------------------------------------------------------------------------------

/// An LSF job from its environment, with this host's name and the soft `RLIMIT_RSS` of the
/// process (where LSF puts `bsub -M` unless it enforces the limit itself), when finite.
pub fn lsf(env: &Env, host: Option<&str>, rss_limit: Option<u64>) -> Result<WlmJob, WlmError> {
    let m = Manager::Lsf;
    let id = get(env, "LSB_JOBID").ok_or_else(|| missing(m, "LSB_JOBID"))?;
    let full = match get(env, "LSB_JOBINDEX").filter(|i| *i != "0") {
        Some(i) => format!("{id}[{i}]"),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = first(env, &["USER", "LOGNAME"]).map(String::from);
    job.name = get(env, "LSB_JOBNAME").map(String::from);
    job.tmpdir = get(env, "TMPDIR").map(String::from);
    job.cpus = if let Some(v) = get(env, "LSB_DJOB_NUMPROC") {
        Some(count(m, "LSB_DJOB_NUMPROC", v)?)
    } else if let Some(v) = get(env, "LSB_MCPU_HOSTS") {
        // "hostA 4 hostB 2": pairs of host and slots.
        let words: Vec<&str> = v.split_whitespace().collect();
        if !words.len().is_multiple_of(2) {
            return Err(bad(
                m,
                "LSB_MCPU_HOSTS",
                v,
                "expected pairs of host and slots",
            ));
        }
        let mine = words
            .chunks(2)
            .find(|p| host.is_some_and(|h| short(p[0]) == short(h)))
            .or_else(|| words.chunks(2).next());
        match mine {
            Some(p) => Some(count(m, "LSB_MCPU_HOSTS", p[1])?),
            None => None,
        }
    } else if let (Some(v), Some(h)) = (get(env, "LSB_HOSTS"), host) {
        let n = v
            .split_whitespace()
            .filter(|w| short(w) == short(h))
            .count() as u32;
        (n > 0).then_some(n)
    } else {
        None
    };
    job.mem = rss_limit.filter(|b| *b > 0);
    Ok(job)
}

// ---- HTCondor ----------------------------------------------------------------------------------

/// A ClassAd file (`.job.ad`, `.machine.ad`: `Name = value` per line) as a map from the
/// lower-cased attribute name (ClassAd names ignore case) to the value's text as written.
pub fn parse_class_ad(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// A ClassAd string literal's contents (`"alice"` → `alice`), or None for another expression.
fn ad_string(v: &str) -> Option<String> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next()?);
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// A ClassAd integer literal, or None for another expression (`RequestMemory` is often one).
fn ad_int(ad: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    ad.get(key).and_then(|v| v.parse::<u64>().ok())
}

/// An HTCondor job from its environment, the text of its job ad (`$_CONDOR_JOB_AD`) and of its
/// slot's machine ad (`$_CONDOR_MACHINE_AD`) when there is one. Requests that are expressions
/// rather than numbers fall back to what the slot was given (machine ad `Cpus`, `Memory`).
pub fn condor(env: &Env, job_ad: &str, machine_ad: Option<&str>) -> Result<WlmJob, WlmError> {
    let m = Manager::Condor;
    let ad = parse_class_ad(job_ad);
    let slot = machine_ad.map(parse_class_ad).unwrap_or_default();
    let cluster = ad_int(&ad, "clusterid").ok_or_else(|| missing(m, "ClusterId in the job ad"))?;
    let proc_ = ad_int(&ad, "procid").ok_or_else(|| missing(m, "ProcId in the job ad"))?;
    let mut job = WlmJob::new(m, format!("{cluster}.{proc_}"));
    job.user = ad.get("owner").and_then(|v| ad_string(v));
    job.name = ad
        .get("jobbatchname")
        .and_then(|v| ad_string(v))
        .or_else(|| {
            // The command's file name; a `Cmd` ending in `/` names none (fuzz seed
            // regress-cmd-ends-in-slash), and an empty name is no name.
            ad.get("cmd")
                .and_then(|v| ad_string(v))
                .map(|c| c.rsplit('/').next().unwrap_or(&c).to_string())
                .filter(|c| !c.is_empty())
        });
    job.tmpdir = get(env, "_CONDOR_SCRATCH_DIR").map(String::from);
    job.cpus = ad_int(&ad, "requestcpus")
        .or_else(|| ad_int(&slot, "cpus"))
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .filter(|n| *n > 0);
    job.mem = ad_int(&ad, "requestmemory")
        .or_else(|| ad_int(&slot, "memory"))
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(1 << 20));
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condor_name_is_the_commands_file_name_or_none() {
        let env = Env::default();
        let ad = |cmd: &str| format!("ClusterId = 42\nProcId = 0\nCmd = \"{cmd}\"\n");
        let name = |cmd: &str| condor(&env, &ad(cmd), None).unwrap().name;
        assert_eq!(name("/home/carol/bin/sim").as_deref(), Some("sim"));
        assert_eq!(name("/home/carol/bin/"), None);
        assert_eq!(name("sim"), Some("sim".to_string()));
    }

    #[test]
    fn sge_shepherd_reads_config_only_and_refuses_ambiguity() {
        let j = sge_shepherd("job_owner=alice\njob_id=12\nja_task_id=0\npe_slots=2\nh_vmem=1G\n")
            .unwrap();
        assert_eq!(
            (j.pjw_id.as_str(), j.user.as_deref(), j.cpus, j.mem),
            ("12", Some("alice"), Some(2), Some(2 << 30))
        );
        assert_eq!(
            sge_shepherd("job_id=12\nja_task_id=3\n").unwrap().pjw_id,
            "12.3"
        );
        let name = |text: &str| sge_shepherd(text).unwrap().name;
        assert_eq!(
            name("job_id=12\njob_name=sim\njob_name=forged\n").as_deref(),
            Some("sim")
        );
        assert_eq!(name("job_id=12\njob_name=\n"), None);
        assert_eq!(name("job_id=12\n"), None);
        for bad in [
            "job_owner=alice\njob_id=12\njob_owner=root\n",
            "job_id=12\nhost_slots=1\nhost_slots=64\n",
            "job_id=12 x\n",
            "job_id=12\nja_task_id=1x\n",
            "job_owner=alice\n",
        ] {
            assert!(sge_shepherd(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_become_pjw_ids() {
        for (wlm, pjw) in [
            ("42", "42"),
            ("123.pbs-server.example.org", "123.pbs-server.example.org"),
            ("77[3]", "77.3"),
            ("123[4].server", "123.4.server"),
            ("a b/c", "a_b_c"),
            ("-x", "x"),
            ("", "job"),
        ] {
            assert_eq!(pjw_id(wlm), pjw, "{wlm}");
            assert!(pjw_core::JobId::new(&pjw_id(wlm)).is_ok());
        }
        assert_eq!(pjw_id(&"9".repeat(100)).len(), 64);
    }

    /// Seen writing the fuzz target wlm_env (fuzz/): memory per CPU times CPUs overflowed.
    #[test]
    fn slurm_memory_per_cpu_times_cpus_out_of_range_is_an_error() {
        let env = env_from_lines(
            "SLURM_JOB_ID=1\nSLURM_CPUS_ON_NODE=4000000000\nSLURM_MEM_PER_CPU=1000000000\n",
        );
        assert!(matches!(slurm(&env), Err(WlmError::Bad { .. })));
    }

    /// Seen writing the fuzz target wlm_files (fuzz/): a blank name or an indented
    /// comment became a variable.
    #[test]
    fn env_lines_with_blank_names_or_indented_comments_are_skipped() {
        let env = env_from_lines("  =x\n  # X=1\n Y = 2\n");
        assert_eq!(env.len(), 1, "{env:?}");
        assert_eq!(env.get("Y").map(String::as_str), Some(" 2"));
    }

    #[test]
    fn proc_environ_blocks() {
        let env = env_from_environ(b"SLURM_JOB_ID=7\0PATH=/bin\0=odd\0NOEQUALS\0X=a=b\0");
        assert_eq!(env.get("SLURM_JOB_ID").map(String::as_str), Some("7"));
        assert_eq!(env.get("X").map(String::as_str), Some("a=b"));
        assert_eq!(env.len(), 3);
        assert_eq!(detect(&env), Some(Manager::Slurm));
    }

    #[test]
    fn manager_names() {
        for m in Manager::ALL {
            assert_eq!(m.as_str().parse::<Manager>().unwrap(), m);
        }
        assert_eq!("OpenPBS".parse::<Manager>().unwrap(), Manager::Pbs);
        assert!("moab".parse::<Manager>().is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(sge_size("2G"), Ok(Some(2 << 30)));
        assert_eq!(sge_size("2g"), Ok(Some(2_000_000_000)));
        // Found by the fuzzer: a value that rounds to 0 bytes is refused, not a 0-byte limit.
        assert!(sge_size(" .43").is_err());
        assert!(sge_size("0.4").is_err());
        assert_eq!(sge_size("0.6"), Ok(Some(1)));
        assert_eq!(sge_size("1.5M"), Ok(Some(1_572_864)));
        assert_eq!(sge_size("INFINITY"), Ok(None));
        assert!(sge_size("2X").is_err());
        assert_eq!(pbs_size("4gb"), Ok(4 << 30));
        assert_eq!(pbs_size("512MB"), Ok(512 << 20));
        assert_eq!(pbs_size("1048576"), Ok(1 << 20));
        assert_eq!(pbs_size("2kw"), Ok(16 << 10));
        assert!(pbs_size("gb").is_err());
        assert!(pbs_size("5parsecs").is_err());
    }

    #[test]
    fn class_ads() {
        let ad = parse_class_ad(
            "Owner = \"al\\\"ice\"\nRequestMemory = ifthenelse(MemoryUsage =!= undefined,MemoryUsage,( ImageSize + 1023 ) / 1024)\nRequestCpus = 2\n",
        );
        assert_eq!(ad_string(&ad["owner"]).unwrap(), "al\"ice");
        assert_eq!(ad_int(&ad, "requestcpus"), Some(2));
        assert_eq!(ad_int(&ad, "requestmemory"), None);
    }
}
