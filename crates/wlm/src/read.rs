//! The one place that reads: the process environment, the manager's job files, the host name
//! and `RLIMIT_RSS`, handed to the pure parsers of the crate root.
//!
//! | manager | files read |
//! |---|---|
//! | Slurm | none |
//! | Grid Engine | `environment` in the current directory when `JOB_ID` is not in the environment (the `shepherd_cmd` case); `config` from `$SGE_JOB_SPOOL_DIR`, else the current directory, when it exists |
//! | PBS | `$PBS_NODEFILE` when set |
//! | LSF | none (`RLIMIT_RSS` of this process) |
//! | HTCondor | `$_CONDOR_JOB_AD` (required), `$_CONDOR_MACHINE_AD` when set |

use std::path::{Path, PathBuf};

use crate::{condor, detect, env_from_lines, lsf, pbs, sge, slurm, Env, Manager, WlmError, WlmJob};

fn read_file(m: Manager, path: &Path) -> Result<String, WlmError> {
    std::fs::read_to_string(path).map_err(|source| WlmError::Io {
        manager: m,
        path: path.to_path_buf(),
        source,
    })
}

fn read_optional(m: Manager, path: &Path) -> Result<Option<String>, WlmError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(WlmError::Io {
            manager: m,
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// This process's environment (values that are not UTF-8 are taken lossily).
pub fn process_env() -> Env {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// This host's name (from the kernel).
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The soft `RLIMIT_RSS` of this process, when finite.
pub fn rss_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own; RLIMIT_RSS is a valid resource.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_RSS, &mut r) };
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Describe the job this process runs in: `manager` None means detect it from the
/// environment. `dir` is where Grid Engine's shepherd files are looked for when
/// `$SGE_JOB_SPOOL_DIR` is not set (the current directory for `pjw run`).
pub fn read(manager: Option<Manager>) -> Result<WlmJob, WlmError> {
    read_with(manager, &process_env(), Path::new("."))
}

/// [`read`] with the environment and the shepherd directory given.
pub fn read_with(manager: Option<Manager>, env: &Env, dir: &Path) -> Result<WlmJob, WlmError> {
    let m = match manager {
        Some(m) => m,
        None => detect(env)
            .or_else(|| dir.join("environment").is_file().then_some(Manager::Sge))
            .ok_or(WlmError::NoManager)?,
    };
    match m {
        Manager::Slurm => slurm(env),
        Manager::Sge => {
            let mut env = env.clone();
            if !env.contains_key("JOB_ID") {
                // Under shepherd_cmd the environment is empty; the job's is a file.
                let text = read_file(m, &dir.join("environment"))?;
                env.extend(env_from_lines(&text));
            }
            let cfg_dir = env
                .get("SGE_JOB_SPOOL_DIR")
                .map(PathBuf::from)
                .filter(|d| d.join("config").is_file())
                .unwrap_or_else(|| dir.to_path_buf());
            let cfg = read_optional(m, &cfg_dir.join("config"))?.map(|t| env_from_lines(&t));
            sge(&env, cfg.as_ref())
        }
        Manager::Pbs => {
            let nodefile = match env.get("PBS_NODEFILE") {
                Some(p) if !p.is_empty() => read_optional(m, Path::new(p))?,
                _ => None,
            };
            pbs(env, nodefile.as_deref(), hostname().as_deref())
        }
        Manager::Lsf => lsf(env, hostname().as_deref(), rss_limit()),
        Manager::Condor => {
            let path = env
                .get("_CONDOR_JOB_AD")
                .filter(|p| !p.is_empty())
                .ok_or_else(|| crate::missing(m, "_CONDOR_JOB_AD"))?;
            let job_ad = read_file(m, Path::new(path))?;
            let machine_ad = match env.get("_CONDOR_MACHINE_AD") {
                Some(p) if !p.is_empty() => read_optional(m, Path::new(p))?,
                _ => None,
            };
            condor(env, &job_ad, machine_ad.as_deref())
        }
    }
}
