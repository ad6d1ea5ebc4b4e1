//! Daemon configuration: a raw TOML shape, validated into [`Config`] before anything starts.
//!
//! Every key is optional; docs/config.md is the reference. Errors name the file, the key and
//! the reason. Command-line overrides are applied to the raw form and validated the same way.

use std::path::{Path, PathBuf};

use pjw_cgroup::ParentSpec;
use pjw_core::CpuSet;
use serde::Deserialize;

/// Default config file.
pub const DEFAULT_CONFIG: &str = "/etc/pjw/pjw.toml";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/pjw";

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub socket: Option<PathBuf>,
    pub socket_mode: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub cpus: Option<String>,
    pub vcpus: Option<usize>,
    pub backfill: Option<bool>,
    pub spread: Option<bool>,
    pub hard_preemption: Option<bool>,
    pub queue_ttl: Option<u64>,
    pub default_priority: Option<u8>,
    pub max_priority: Option<u8>,
    pub preempt_priority: Option<u8>,
    pub exclusive: Option<String>,
    pub max_connections_per_user: Option<usize>,
    pub max_queued_per_user: Option<usize>,
    #[serde(default)]
    pub cgroup: RawCgroup,
    #[serde(default)]
    pub job: RawJob,
    #[serde(default)]
    pub memory: RawMemory,
    #[serde(default)]
    pub paths: RawPaths,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub profile: RawProfile,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub central: RawCentral,
    #[serde(default)]
    pub adopt: RawAdopt,
}

/// `[metrics]`: the Prometheus/OpenMetrics endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: Option<String>,
}

/// `[central]`: the cluster-wide PostgreSQL store.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCentral {
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
    pub ship_samples: Option<bool>,
    pub batch_size: Option<usize>,
    pub retry_secs: Option<f64>,
}

/// The validated `[central]` section.
#[derive(Clone, PartialEq)]
pub struct CentralConfig {
    /// `postgres://user@host:port/db`.
    pub url: String,
    /// Where the password is kept apart from the URL (root's, mode 0600), and the password
    /// read from it at load.
    pub password_file: Option<PathBuf>,
    pub password: Option<String>,
    /// Also ship the samples of running jobs, every `retry` (finished jobs always go with
    /// their series).
    pub ship_samples: bool,
    /// Jobs per transaction.
    pub batch_size: usize,
    /// Wait before retrying after PostgreSQL was unreachable; with `ship_samples`, also the
    /// time between shipments of live samples.
    pub retry: std::time::Duration,
}

impl std::fmt::Debug for CentralConfig {
    /// Never prints a password (the URL's is masked, the file's is not shown).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CentralConfig")
            .field("url", &mask_password(&self.url))
            .field("password_file", &self.password_file)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ship_samples", &self.ship_samples)
            .field("batch_size", &self.batch_size)
            .field("retry", &self.retry)
            .finish()
    }
}

/// The password of a `postgres://user:password@host/db` URL, if it has one.
pub fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split(['/', '?']).next()?.rsplit_once('@')?.0;
    let pw = userinfo.split_once(':')?.1;
    (!pw.is_empty()).then_some(pw)
}

/// The URL with its password replaced by `***` (for logs and errors).
pub fn mask_password(url: &str) -> String {
    match url_password(url) {
        Some(pw) => url.replacen(&format!(":{pw}@"), ":***@", 1),
        None => url.to_string(),
    }
}

/// A file holding a secret must be root's and closed to group and others.
fn check_secret_file(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if md.uid() != 0 || md.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be owned by root with mode 0600 (it is uid {}, mode {:04o})",
            path.display(),
            md.uid(),
            md.mode() & 0o7777
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let pw = text.trim_end_matches(['\n', '\r']).to_string();
    if pw.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(pw)
}

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

/// `[adopt]`: finding processes of registered jobs that start outside their cgroups.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdopt {
    pub env: Option<Vec<String>>,
    pub exclude_env: Option<Vec<String>>,
    pub sweep_interval_ms: Option<u64>,
}

/// `[cgroup]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCgroup {
    pub parent: Option<String>,
}

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
}

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
}

/// `[paths]`: roots of the kernel filesystems (for tests and containers).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPaths {
    pub proc: Option<PathBuf>,
    pub sys: Option<PathBuf>,
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

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the file came from ("built-in defaults" when there was none).
    pub origin: String,
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub state_dir: PathBuf,
    /// CPUs pjw may hand out; `None` = every CPU the daemon may use.
    pub cpus: Option<CpuSet>,
    /// Job-CPUs run at once (primaries + backfillers); `None` = the pool's size. At most 4× the
    /// pool (checked at start, when the pool is known).
    pub vcpus: Option<usize>,
    pub backfill: bool,
    /// On a nearly idle node, give a large job an L3 / NUMA domain of its own
    /// (`pjw_core::alloc::Allocator::with_spread`).
    pub spread: bool,
    pub hard_preemption: bool,
    /// Seconds a job may wait in the queue; `None` = forever.
    pub queue_ttl: Option<u64>,
    pub default_priority: u8,
    /// The highest priority users may ask for; root, registered workload-manager jobs and
    /// `[profile] admin_group` get up to 16.
    pub max_priority: u8,
    /// The lowest priority that preempts (default: one above `max_priority`, so users cannot
    /// displace each other).
    pub preempt_priority: u8,
    /// Who may ask for `--exclusive` (the whole node).
    pub exclusive: ExclusiveRight,
    /// Open connections one user other than root may hold.
    pub max_connections_per_user: usize,
    /// Jobs one user other than root may have queued at once.
    pub max_queued_per_user: usize,
    pub cgroup_parent: ParentSpec,
    /// The job partition (bytes); `None` = all memory minus `memory_reserve`, found at start.
    pub memory_limit: Option<u64>,
    pub memory_reserve: u64,
    /// Whether the memory governor runs.
    pub governor: bool,
    /// The governor's thresholds (its `limit` is filled in at start).
    pub governor_cfg: pjw_core::governor::GovernorConfig,
    pub governor_interval_ms: u64,
    pub kill_leftovers: bool,
    pub pids_max: Option<u64>,
    /// Default size of a job's private /tmp (bytes); `None` = none unless `pjw run --tmp`.
    pub tmp: Option<u64>,
    /// The largest private /tmp a job may ask for; `None` = the job partition's size. A job
    /// with `--mem` gets at most its memory (its tmpfs pages are charged to it).
    pub tmp_max: Option<u64>,
    /// Where the daemon mounts per-job tmpfs for unprivileged clients (`<state_dir>/tmp`).
    pub tmp_root: PathBuf,
    /// `[job] swap_max`: per-job `memory.swap.max` (v2); `None` = `max`.
    pub swap_max: Option<u64>,
    /// `[job] partition`: exclusive jobs become cpuset partitions of this type (v2).
    pub partition: Option<pjw_cgroup::Partition>,
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub log_level: String,
    pub log_format: LogFormat,
    pub profile: ProfileConfig,
    /// Where `/metrics` is served; `None` = off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The cluster store; `None` = off.
    pub central: Option<CentralConfig>,
    /// Environment variables that name a registered job's id (`[adopt] env`), in order.
    pub adopt_env: Vec<String>,
    /// Processes with one of these variables set are never adopted (`[adopt] exclude_env`).
    pub adopt_exclude_env: Vec<String>,
    /// How often the adoption sweep looks at new processes (ms); 0 = never.
    pub adopt_sweep_ms: u64,
}

/// Who may ask for `--exclusive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExclusiveRight {
    /// Root, registered workload-manager jobs and `[profile] admin_group` (the default).
    Privileged,
    /// Every user.
    All,
}

/// Default `max_priority`: users' ceiling, below root's 16.
pub const DEFAULT_MAX_PRIORITY: u8 = 12;
/// Default `max_connections_per_user`: enough for a user's queued `pjw run` clients.
pub const DEFAULT_MAX_CONNECTIONS_PER_USER: usize = 256;
/// Default `max_queued_per_user`.
pub const DEFAULT_MAX_QUEUED_PER_USER: usize = 200;

/// The variables that carry a workload manager's job id, in the order they are tried.
pub const DEFAULT_ADOPT_ENV: [&str; 4] = ["SLURM_JOB_ID", "JOB_ID", "PBS_JOBID", "LSB_JOBID"];
/// Variables that mark a manager's own hook (Slurm's Prolog/Epilog), never adopted.
pub const DEFAULT_ADOPT_EXCLUDE_ENV: [&str; 1] = ["SLURM_SCRIPT_CONTEXT"];

/// A configuration error, naming file, key and reason.
#[derive(Debug, thiserror::Error)]
#[error("config {file}: {key}: {reason}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub reason: String,
}

/// Overrides from the command line (applied before validation).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub socket: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub cgroup_parent: Option<String>,
}

impl Config {
    /// Load `path` (or the default file if it exists, when `path` is None) and apply overrides.
    pub fn load(path: Option<&Path>, ov: &Overrides) -> Result<Config, ConfigError> {
        let (origin, text) = match path {
            Some(p) => {
                let t = std::fs::read_to_string(p).map_err(|e| ConfigError {
                    file: p.display().to_string(),
                    key: "(file)".into(),
                    reason: format!("cannot read: {e}"),
                })?;
                (p.display().to_string(), t)
            }
            None => match std::fs::read_to_string(DEFAULT_CONFIG) {
                Ok(t) => (DEFAULT_CONFIG.to_string(), t),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    ("built-in defaults".to_string(), String::new())
                }
                Err(e) => {
                    return Err(ConfigError {
                        file: DEFAULT_CONFIG.into(),
                        key: "(file)".into(),
                        reason: format!("cannot read: {e}"),
                    })
                }
            },
        };
        let mut cfg = Self::parse(&origin, &text, ov)?;
        cfg.load_secrets(
            path.map(Path::to_path_buf)
                .or_else(|| (origin == DEFAULT_CONFIG).then(|| PathBuf::from(DEFAULT_CONFIG))),
        )?;
        Ok(cfg)
    }

    /// Secrets: a password in `central.url` is refused when the config file can be read by
    /// group or others (any local user would learn it); `central.password_file` must be root's
    /// and mode 0600, and is read now.
    fn load_secrets(&mut self, file: Option<PathBuf>) -> Result<(), ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            file: self.origin.clone(),
            key: key.into(),
            reason,
        };
        let Some(c) = self.central.as_mut() else {
            return Ok(());
        };
        if url_password(&c.url).is_some() {
            if let Some(f) = &file {
                use std::os::unix::fs::MetadataExt;
                let mode = std::fs::metadata(f).map(|m| m.mode() & 0o7777).unwrap_or(0);
                if mode & 0o044 != 0 {
                    return Err(err(
                        "central.url",
                        format!(
                            "holds a password and this file is readable by others (mode {mode:04o}): make it 0600, or move the password to central.password_file"
                        ),
                    ));
                }
            }
        }
        if let Some(p) = c.password_file.clone() {
            c.password =
                Some(check_secret_file(&p).map_err(|why| err("central.password_file", why))?);
        }
        Ok(())
    }

    /// Parse and validate config text.
    pub fn parse(origin: &str, text: &str, ov: &Overrides) -> Result<Config, ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            file: origin.to_string(),
            key: key.to_string(),
            reason,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map(|s| key_at(text, s.start))
                .unwrap_or_else(|| "(syntax)".into());
            err(&key, e.message().to_string())
        })?;
        let socket = ov
            .socket
            .clone()
            .or(raw.socket)
            .unwrap_or_else(|| PathBuf::from(pjw_proto::DEFAULT_SOCKET));
        if socket.as_os_str().is_empty() || socket.as_os_str().len() > 100 {
            return Err(err(
                "socket",
                "must be a path of 1-100 bytes (Unix socket limit)".into(),
            ));
        }
        let socket_mode = match raw.socket_mode {
            None => 0o666,
            Some(m) => u32::from_str_radix(m.trim_start_matches("0o"), 8)
                .ok()
                .filter(|v| *v <= 0o777)
                .ok_or_else(|| {
                    err(
                        "socket_mode",
                        format!("{m:?} is not an octal mode such as \"0660\""),
                    )
                })?,
        };
        let state_dir = ov
            .state_dir
            .clone()
            .or(raw.state_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let cpus = match raw.cpus {
            None => None,
            Some(c) => {
                let s = CpuSet::parse_list(&c).map_err(|e| err("cpus", e.to_string()))?;
                if s.is_empty() {
                    return Err(err("cpus", "must name at least one cpu".into()));
                }
                Some(s)
            }
        };
        let (parent_key, parent_text) = match &ov.cgroup_parent {
            Some(p) => ("--cgroup-parent", p.clone()),
            None => (
                "cgroup.parent",
                raw.cgroup.parent.unwrap_or_else(|| "/pjw".into()),
            ),
        };
        let cgroup_parent =
            ParentSpec::parse(&parent_text).map_err(|e| err(parent_key, e.to_string()))?;
        if raw.vcpus == Some(0) {
            return Err(err("vcpus", "must be at least 1".into()));
        }
        let max_priority = raw.max_priority.unwrap_or(DEFAULT_MAX_PRIORITY);
        if !(1..=16).contains(&max_priority) {
            return Err(err(
                "max_priority",
                format!("{max_priority} is not in 1-16"),
            ));
        }
        let default_priority = raw.default_priority.unwrap_or(10.min(max_priority));
        if !(1..=16).contains(&default_priority) {
            return Err(err(
                "default_priority",
                format!("{default_priority} is not in 1-16"),
            ));
        }
        if default_priority > max_priority {
            return Err(err(
                "default_priority",
                format!("{default_priority} is above max_priority {max_priority}"),
            ));
        }
        let preempt_priority = raw
            .preempt_priority
            .unwrap_or_else(|| (max_priority + 1).min(16));
        if !(1..=16).contains(&preempt_priority) {
            return Err(err(
                "preempt_priority",
                format!("{preempt_priority} is not in 1-16"),
            ));
        }
        let exclusive = match raw.exclusive.as_deref() {
            None | Some("privileged") => ExclusiveRight::Privileged,
            Some("all") => ExclusiveRight::All,
            Some(other) => {
                return Err(err(
                    "exclusive",
                    format!("{other:?} is not \"privileged\" or \"all\""),
                ))
            }
        };
        let max_connections_per_user = raw
            .max_connections_per_user
            .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_USER);
        if !(4..=100_000).contains(&max_connections_per_user) {
            return Err(err(
                "max_connections_per_user",
                format!("{max_connections_per_user} is not in 4-100000"),
            ));
        }
        let max_queued_per_user = raw
            .max_queued_per_user
            .unwrap_or(DEFAULT_MAX_QUEUED_PER_USER);
        if !(1..=100_000).contains(&max_queued_per_user) {
            return Err(err(
                "max_queued_per_user",
                format!("{max_queued_per_user} is not in 1-100000"),
            ));
        }
        let m = &raw.memory;
        let size = |key: &str, v: &Option<String>| -> Result<Option<u64>, ConfigError> {
            v.as_deref()
                .map(|t| pjw_core::parse_size(t).map_err(|e| err(key, e.to_string())))
                .transpose()
        };
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
        let prediction_secs = m.vm_prediction.unwrap_or(defaults.prediction_secs);
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
        let governor_interval_ms = m.interval_ms.unwrap_or(1000);
        if !(100..=60_000).contains(&governor_interval_ms) {
            return Err(err(
                "memory.interval_ms",
                format!("{governor_interval_ms} is not 100-60000"),
            ));
        }
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
        };
        let pids_max = match raw.job.pids_max {
            None | Some(0) => None,
            Some(n) => Some(n),
        };
        let tmp = match raw.job.tmp.as_deref().map(str::trim) {
            None | Some("") | Some("none") | Some("0") => None,
            Some(t) => match pjw_core::parse_size(t) {
                Ok(0) => None,
                Ok(n) if n < 1 << 20 => return Err(err("job.tmp", format!("{t:?} is below 1M"))),
                Ok(n) => Some(n),
                Err(e) => return Err(err("job.tmp", format!("{e} (or \"none\")"))),
            },
        };
        let tmp_max = match raw.job.tmp_max.as_deref().map(str::trim) {
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
        let tmp_root = match raw.job.tmp_root {
            Some(p) if !p.is_absolute() => {
                return Err(err(
                    "job.tmp_root",
                    format!("{} is not an absolute path", p.display()),
                ))
            }
            Some(p) => p,
            None => state_dir.join("tmp"),
        };
        let swap_max = match raw.job.swap_max.as_deref() {
            None | Some("max") => None,
            Some(t) => {
                Some(pjw_core::parse_size(t).map_err(|e| err("job.swap_max", e.to_string()))?)
            }
        };
        let partition = match raw.job.partition.as_deref() {
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
        let log_level = raw.log.level.unwrap_or_else(|| "info".into());
        if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
            return Err(err(
                "log.level",
                format!("{log_level:?} is not one of error, warn, info, debug, trace"),
            ));
        }
        let log_format = match raw.log.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(o) => {
                return Err(err(
                    "log.format",
                    format!("{o:?} is not \"text\" or \"json\""),
                ))
            }
        };
        let p = &raw.profile;
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
            retention_ms,
            max_db_size,
            admin_group,
        };
        let metrics_listen = match raw.metrics.listen.as_deref() {
            None | Some("") => None,
            Some(a) => Some(a.parse::<std::net::SocketAddr>().map_err(|_| {
                err(
                    "metrics.listen",
                    format!("{a:?} is not an address:port like 127.0.0.1:9810"),
                )
            })?),
        };
        let c = raw.central;
        let central = match c.url {
            None => {
                if c.ship_samples.is_some() || c.batch_size.is_some() || c.retry_secs.is_some() {
                    return Err(err(
                        "central.url",
                        "missing (other [central] keys are set)".into(),
                    ));
                }
                None
            }
            Some(url) => {
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    return Err(err(
                        "central.url",
                        "must start with postgres:// or postgresql://".into(),
                    ));
                }
                let batch_size = c.batch_size.unwrap_or(100);
                if !(1..=10_000).contains(&batch_size) {
                    return Err(err(
                        "central.batch_size",
                        format!("{batch_size} is not 1-10000"),
                    ));
                }
                let retry = c.retry_secs.unwrap_or(60.0);
                if !(0.05..=86_400.0).contains(&retry) {
                    return Err(err(
                        "central.retry_secs",
                        format!("{retry} is not 0.05-86400"),
                    ));
                }
                if c.password_file.is_some() && url_password(&url).is_some() {
                    return Err(err(
                        "central.password_file",
                        "set, and central.url holds a password too: keep it in one place".into(),
                    ));
                }
                if let Some(p) = &c.password_file {
                    if !p.is_absolute() {
                        return Err(err(
                            "central.password_file",
                            format!("{} is not an absolute path", p.display()),
                        ));
                    }
                }
                Some(CentralConfig {
                    password_file: c.password_file.clone(),
                    password: None,
                    url,
                    ship_samples: c.ship_samples.unwrap_or(false),
                    batch_size,
                    retry: std::time::Duration::from_secs_f64(retry),
                })
            }
        };
        let adopt_env = raw
            .adopt
            .env
            .unwrap_or_else(|| DEFAULT_ADOPT_ENV.iter().map(|s| s.to_string()).collect());
        let adopt_exclude_env = raw.adopt.exclude_env.unwrap_or_else(|| {
            DEFAULT_ADOPT_EXCLUDE_ENV
                .iter()
                .map(|s| s.to_string())
                .collect()
        });
        for (key, list) in [
            ("adopt.env", &adopt_env),
            ("adopt.exclude_env", &adopt_exclude_env),
        ] {
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
        let adopt_sweep_ms = raw.adopt.sweep_interval_ms.unwrap_or(1000);
        if adopt_sweep_ms != 0 && !(50..=600_000).contains(&adopt_sweep_ms) {
            return Err(err(
                "adopt.sweep_interval_ms",
                format!("{adopt_sweep_ms} is not 0 (off) or 50-600000"),
            ));
        }
        Ok(Config {
            metrics_listen,
            central,
            profile,
            adopt_env,
            adopt_exclude_env,
            adopt_sweep_ms,
            origin: origin.to_string(),
            socket,
            socket_mode,
            state_dir,
            cpus,
            vcpus: raw.vcpus,
            backfill: raw.backfill.unwrap_or(true),
            spread: raw.spread.unwrap_or(true),
            hard_preemption: raw.hard_preemption.unwrap_or(true),
            queue_ttl: raw.queue_ttl.filter(|t| *t > 0),
            default_priority,
            max_priority,
            preempt_priority,
            exclusive,
            max_connections_per_user,
            max_queued_per_user,
            cgroup_parent,
            memory_limit,
            memory_reserve,
            governor: m.governor.unwrap_or(true),
            governor_cfg,
            governor_interval_ms,
            kill_leftovers: raw.job.kill_leftovers.unwrap_or(true),
            pids_max,
            tmp,
            tmp_max,
            tmp_root,
            swap_max,
            partition,
            proc_root: raw.paths.proc.unwrap_or_else(|| PathBuf::from("/proc")),
            sys_root: raw.paths.sys.unwrap_or_else(|| PathBuf::from("/sys")),
            log_level,
            log_format,
        })
    }
}

/// Name the key whose value sits at byte `offset`: `section.key (line N)`.
fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_no = text[..offset].matches('\n').count() + 1;
    let mut section = String::new();
    let mut key = String::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if i + 1 > line_no {
            break;
        }
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        }
        if i + 1 == line_no {
            if let Some((k, _)) = l.split_once('=') {
                key = k.trim().to_string();
            }
        }
    }
    match (section.is_empty(), key.is_empty()) {
        (_, true) => format!("line {line_no}"),
        (true, false) => format!("{key} (line {line_no})"),
        (false, false) => format!("{section}.{key} (line {line_no})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_and_central_keys() {
        let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
        assert_eq!((c.metrics_listen, c.central), (None, None));
        let c = Config::parse(
            "t.toml",
            "[metrics]\nlisten = \"127.0.0.1:9810\"\n[central]\nurl = \"postgres://pjw@db/pjw\"\nretry_secs = 0.5\n",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9810".parse().unwrap()));
        let central = c.central.unwrap();
        assert_eq!(
            (central.ship_samples, central.batch_size, central.retry),
            (false, 100, std::time::Duration::from_millis(500))
        );
        let bad = [
            ("[metrics]\nlisten = \"localhost\"", "metrics.listen"),
            ("[metrics]\nport = 1", "metrics.port"),
            ("[central]\nurl = \"mysql://x\"", "central.url"),
            ("[central]\nbatch_size = 5", "central.url"),
            (
                "[central]\nurl = \"postgres://h/d\"\nbatch_size = 0",
                "central.batch_size",
            ),
            (
                "[central]\nurl = \"postgres://h/d\"\nretry_secs = 0",
                "central.retry_secs",
            ),
        ];
        for (text, key) in bad {
            let e = Config::parse("t.toml", text, &Overrides::default()).unwrap_err();
            assert!(e.key.starts_with(key), "{text}: {e}");
        }
    }

    #[test]
    fn empty_config_gives_defaults() {
        let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/pjw/pjw.sock"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/pjw"));
        assert_eq!(c.cgroup_parent, ParentSpec::Absolute("/pjw".into()));
        assert!(c.kill_leftovers);
        assert_eq!(c.pids_max, None);
        assert_eq!(c.socket_mode, 0o666);
        assert_eq!(c.adopt_env, DEFAULT_ADOPT_ENV.to_vec());
        assert_eq!(c.adopt_sweep_ms, 1000);
        let c = Config::parse(
            "t.toml",
            "[adopt]\nenv = [\"MY_JOB\"]\nsweep_interval_ms = 0",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            (c.adopt_env, c.adopt_sweep_ms),
            (vec!["MY_JOB".to_string()], 0)
        );
        assert_eq!(
            (c.vcpus, c.backfill, c.hard_preemption, c.queue_ttl),
            (None, true, true, None)
        );
        assert_eq!((c.default_priority, c.max_priority), (10, 12));
        assert_eq!(c.preempt_priority, 13);
        assert_eq!(c.exclusive, ExclusiveRight::Privileged);
    }

    #[test]
    fn full_config_and_overrides() {
        let text = r#"
            socket = "/tmp/x.sock"
            socket_mode = "0660"
            cpus = "0-3"
            [cgroup]
            parent = "self/pjw"
            [job]
            kill_leftovers = false
            pids_max = 4096
            [log]
            level = "debug"
            format = "json"
        "#;
        let ov = Overrides {
            state_dir: Some("/tmp/st".into()),
            ..Default::default()
        };
        let c = Config::parse("t.toml", text, &ov).unwrap();
        assert_eq!(c.socket_mode, 0o660);
        assert_eq!(c.cpus.unwrap().to_string(), "0-3");
        assert_eq!(
            c.cgroup_parent,
            ParentSpec::SelfRelative(Some("pjw".into()))
        );
        assert!(!c.kill_leftovers);
        assert_eq!(c.pids_max, Some(4096));
        assert_eq!(c.state_dir, PathBuf::from("/tmp/st"));
        assert_eq!(c.log_format, LogFormat::Json);
    }

    #[test]
    fn profile_section() {
        let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
        assert_eq!(c.profile, ProfileConfig::default());
        assert_eq!(c.profile.interval_ms, 10_000);
        assert_eq!(c.profile.retention_ms, Some(30 * 86_400_000));
        let text = "[profile]\ninterval = 1\nprocesses = 5\nretention = \"12h\"\nmax_db_size = \"64M\"\nadmin_group = \"hpcadm\"\n";
        let c = Config::parse("t.toml", text, &Overrides::default()).unwrap();
        assert_eq!(
            c.profile,
            ProfileConfig {
                enabled: true,
                interval_ms: 1000,
                processes: 5,
                retention_ms: Some(12 * 3_600_000),
                max_db_size: Some(64 << 20),
                admin_group: Some("hpcadm".into()),
            }
        );
        let c = Config::parse(
            "t.toml",
            "[profile]\nretention = 0\nmax_db_size = \"0\"\ninterval = \"2s\"",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            (
                c.profile.retention_ms,
                c.profile.max_db_size,
                c.profile.interval_ms
            ),
            (None, None, 2000)
        );
    }

    #[test]
    fn durations() {
        let t = |s: &str| parse_duration_ms(&RawDuration::Text(s.into()));
        assert_eq!(t("500ms"), Ok(500));
        assert_eq!(t("10s"), Ok(10_000));
        assert_eq!(t("10"), Ok(10_000));
        assert_eq!(t("5m"), Ok(300_000));
        assert_eq!(t("30d"), Ok(30 * 86_400_000));
        assert!(t("").is_err());
        assert!(t("s").is_err());
        assert!(t("1y").is_err());
        assert_eq!(parse_duration_ms(&RawDuration::Secs(3)), Ok(3000));
    }

    #[test]
    fn job_tmp_size_and_root() {
        let parse = |t: &str| Config::parse("x.toml", t, &Overrides::default()).unwrap();
        let c = parse("");
        assert_eq!(c.tmp, None);
        assert_eq!(c.tmp_root, PathBuf::from("/var/lib/pjw/tmp"));
        for (text, want) in [
            ("[job]\ntmp = \"256M\"", Some(256 << 20)),
            ("[job]\ntmp = \"none\"", None),
            ("[job]\ntmp = \"0\"", None),
        ] {
            assert_eq!(parse(text).tmp, want, "{text}");
        }
        let c = parse("state_dir = \"/srv/pjw\"\n[job]\ntmp = \"1G\"");
        assert_eq!(c.tmp_root, PathBuf::from("/srv/pjw/tmp"));
        let c = parse("[job]\ntmp_root = \"/run/pjw/tmp\"");
        assert_eq!(c.tmp_root, PathBuf::from("/run/pjw/tmp"));
    }

    #[test]
    fn errors_name_file_key_and_reason() {
        let cases = [
            ("bogus = 1", "unknown field"),
            (
                "[job]\nkill_leftovers = \"yes\"",
                "job.kill_leftovers (line 2): invalid type",
            ),
            ("cpus = \"3-1\"", "cpus"),
            ("cpus = \"\"", "cpus: must name"),
            ("socket_mode = \"999\"", "socket_mode"),
            ("[cgroup]\nparent = \"relative\"", "cgroup.parent"),
            ("[log]\nlevel = \"loud\"", "log.level"),
            ("[log]\nformat = \"xml\"", "log.format"),
            ("vcpus = 0", "vcpus: must be at least 1"),
            ("[memory]\nlimit = \"lots\"", "memory.limit"),
            ("[memory]\nhigh = 1.5", "memory.high"),
            ("[memory]\nlow = 0.95", "memory.low"),
            ("[memory]\nswap_slots = 0", "memory.swap_slots"),
            ("max_priority = 17", "max_priority"),
            ("[adopt]\nenv = [\"A-B\"]", "adopt.env"),
            ("[adopt]\nenv = [\"\"]", "adopt.env"),
            ("[adopt]\nexclude_env = [\"1X\"]", "adopt.exclude_env"),
            ("[adopt]\nsweep_interval_ms = 10", "adopt.sweep_interval_ms"),
            ("[job]\ntmp = \"big\"", "job.tmp"),
            ("[job]\ntmp = \"4K\"", "job.tmp: \"4K\" is below 1M"),
            ("[job]\ntmp_root = \"rel/tmp\"", "job.tmp_root"),
            (
                "[profile]\ninterval = \"500ms\"",
                "profile.interval: 500 ms is not between 1s and 1h",
            ),
            ("[profile]\ninterval = \"ten\"", "profile.interval"),
            (
                "[profile]\nretention = \"3w\"",
                "profile.retention: \"3w\": unknown unit",
            ),
            ("[profile]\nmax_db_size = \"10k\"", "profile.max_db_size"),
            ("[profile]\nadmin_group = \"a b\"", "profile.admin_group"),
            ("[profile]\nprocesses = 5000", "profile.processes"),
            ("[profile]\nbogus = 1", "unknown field"),
            (
                "default_priority = 12\nmax_priority = 8",
                "above max_priority",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse("/etc/pjw/pjw.toml", text, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("config /etc/pjw/pjw.toml: "), "{e}");
            assert!(e.contains(want), "{text:?} gave {e:?}");
        }
    }

    #[test]
    fn passwords_are_found_and_masked() {
        assert_eq!(
            url_password("postgres://pjw:s3cret@db:5432/pjw"),
            Some("s3cret")
        );
        assert_eq!(url_password("postgres://pjw@db/pjw"), None);
        assert_eq!(url_password("postgres://db/pjw?user=a:b"), None);
        assert_eq!(
            mask_password("postgres://pjw:s3cret@db/pjw"),
            "postgres://pjw:***@db/pjw"
        );
        let c = Config::parse(
            "t.toml",
            "[central]\nurl = \"postgres://pjw:s3cret@db/pjw\"\n",
            &Overrides::default(),
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn a_password_in_a_world_readable_config_is_refused_and_a_password_file_must_be_roots_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pjw.toml");
        std::fs::write(&f, "[central]\nurl = \"postgres://pjw:s3cret@db/pjw\"\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("readable by others"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::load(Some(&f), &Overrides::default()).is_ok());

        let pw = dir.path().join("central.pass");
        std::fs::write(&pw, "s3cret\n").unwrap();
        std::fs::write(
            &f,
            format!(
                "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"{}\"\n",
                pw.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("mode 0600"), "{e}");
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        if rustix::process::geteuid().is_root() {
            let c = Config::load(Some(&f), &Overrides::default()).unwrap();
            assert_eq!(c.central.unwrap().password.as_deref(), Some("s3cret"));
        }
    }
}
