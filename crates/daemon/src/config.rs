//! Daemon configuration: a raw TOML shape, validated into [`Config`] before anything starts.
//!
//! Every key is optional; docs/config.md is the reference. Errors name the file, the key and
//! the reason. Command-line overrides are applied to the raw form and validated the same way.

use std::path::{Path, PathBuf};

use pjw_cgroup::ParentSpec;
use pjw_core::CpuSet;
use serde::Deserialize;

mod adopt;
mod central;
mod gpu;
mod io;
mod job;
mod lease;

pub use io::resolve_disk;

mod memory;
mod node;
mod output;
mod profile;
#[cfg(test)]
mod tests;

pub use adopt::{RawAdopt, DEFAULT_ADOPT_ENV, DEFAULT_ADOPT_HOOK_DAEMONS};
pub use central::{mask_password, url_password, CentralConfig, RawCentral};
pub use gpu::{DeclaredGpu, GpuConfig, RawGpuDevice, RawGpus};
pub use job::{JobIpc, RawJob};
pub use lease::{LeaseConfig, RawLease};
pub use memory::RawMemory;
pub use output::{LogFormat, RawLog, RawMetrics};
pub use profile::{parse_duration_ms, ProfileConfig, RawDuration, RawProfile};

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
    pub queue_order: Option<String>,
    pub queue_max_wait: Option<u64>,
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
    #[serde(default)]
    pub gpus: RawGpus,
    #[serde(default)]
    pub lease: RawLease,
}

/// `[cgroup]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCgroup {
    pub parent: Option<String>,
}

/// `[paths]`: roots of the kernel filesystems (for tests and containers).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPaths {
    pub proc: Option<PathBuf>,
    pub sys: Option<PathBuf>,
    pub dev: Option<PathBuf>,
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
    /// The order jobs of one priority start in (`queue_order`, `queue_max_wait`).
    pub queue_order: pjw_core::sched::QueueOrder,
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
    /// `[job] kill_wait`: seconds between the SIGTERM and the SIGKILL of a job at its time
    /// limit (0: SIGKILL at once).
    pub kill_wait_s: u64,
    /// `[job] default_time` and `max_time`: the limit of a job that asks for none, and the
    /// most a user may ask for (jobs a workload manager started keep its limits).
    pub time_limits: pjw_core::time_limit::NodeLimits,
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
    /// `[job] bind`: how a job's busy threads are bound unless it asks otherwise (`--bind`).
    pub bind: pjw_core::thread_bind::BindMode,
    /// `[job] io_weight` and `[job] io_max`: every job's I/O weight and limits (devices
    /// resolved to whole disks at load); a job's `--io-max` can only tighten them.
    pub io: pjw_core::io_limits::JobIo,
    /// `[job] bind_interval_ms`: the thread balancing pass's interval.
    pub bind_interval_ms: u64,
    /// `[job] thread_env`: send the thread and CPU counts of the job's CPUs and tasks
    /// (`pjw_core::thread_env`).
    pub thread_env: bool,
    /// `[job] private_ipc`, `shm_size`, `scrub_ipc`.
    pub ipc: JobIpc,
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    /// Where the device nodes are (`[paths] dev`), for GPU discovery.
    pub dev_root: PathBuf,
    /// `[gpus]`.
    pub gpus: GpuConfig,
    pub log_level: String,
    pub log_format: LogFormat,
    pub profile: ProfileConfig,
    /// Where `/metrics` is served; `None` = off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The cluster store; `None` = off.
    pub central: Option<CentralConfig>,
    /// Environment variables that name a registered job's id (`[adopt] env`), in order.
    pub adopt_env: Vec<String>,
    /// Executable names of the managers' daemons whose root children are their hooks, never
    /// adopted (`[adopt] hook_daemons`).
    pub adopt_hook_daemons: Vec<String>,
    /// How often the adoption sweep looks at new processes (ms); 0 = never.
    pub adopt_sweep_ms: u64,
    /// Registered jobs' leases: asking their managers (`[lease]`).
    pub lease: LeaseConfig,
    /// The window of the recent start-time statistics (`[metrics] stats_window`, ms).
    pub stats_window_ms: u64,
    /// What a PAM login (`pjw pam-adopt`) of a user with no running job gets (`[adopt]
    /// login_without_job`).
    pub login_without_job: pjw_core::login::WithoutJob,
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

/// Makes the errors of one file: each names the file, the key and the reason.
#[derive(Clone, Copy, Debug)]
struct Errs<'a>(&'a str);

impl Errs<'_> {
    fn at(&self, key: &str, reason: String) -> ConfigError {
        ConfigError {
            file: self.0.to_string(),
            key: key.to_string(),
            reason,
        }
    }
}

/// A size such as `4G`, if set.
fn size(e: Errs, key: &str, v: &Option<String>) -> Result<Option<u64>, ConfigError> {
    v.as_deref()
        .map(|t| pjw_core::parse_size(t).map_err(|x| e.at(key, x.to_string())))
        .transpose()
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

    /// Parse and validate config text: each section by its own parser, in file order.
    pub fn parse(origin: &str, text: &str, ov: &Overrides) -> Result<Config, ConfigError> {
        let e = Errs(origin);
        let raw: RawConfig = toml::from_str(text).map_err(|x| {
            let key = x
                .span()
                .map(|s| key_at(text, s.start))
                .unwrap_or_else(|| "(syntax)".into());
            e.at(&key, x.message().to_string())
        })?;
        let node = node::parse(&raw, ov, e)?;
        let memory = memory::parse(&raw.memory, e)?;
        let sys_root = raw
            .paths
            .sys
            .clone()
            .unwrap_or_else(|| PathBuf::from("/sys"));
        let io = io::parse(
            raw.job.io_weight,
            raw.job.io_max.as_deref().unwrap_or_default(),
            &sys_root,
            e,
        )?;
        let job = job::parse(raw.job, &node.state_dir, e)?;
        let (log_level, log_format) = output::parse_log(&raw.log, e)?;
        let profile = profile::parse(&raw.profile, e)?;
        let metrics_listen = output::parse_metrics(&raw.metrics, e)?;
        let central = central::parse(raw.central, e)?;
        let adopt = adopt::parse(raw.adopt, e)?;
        let gpus = gpu::parse(raw.gpus, e)?;
        let lease = lease::parse(&raw.lease, e)?;
        let stats_window_ms = output::parse_stats_window(&raw.metrics, e)?;
        Ok(Config {
            lease,
            stats_window_ms,
            gpus,
            dev_root: raw.paths.dev.unwrap_or_else(|| PathBuf::from("/dev")),
            metrics_listen,
            central,
            profile,
            adopt_env: adopt.env,
            adopt_hook_daemons: adopt.hook_daemons,
            adopt_sweep_ms: adopt.sweep_ms,
            login_without_job: adopt.login_without_job,
            origin: origin.to_string(),
            socket: node.socket,
            socket_mode: node.socket_mode,
            state_dir: node.state_dir,
            cpus: node.cpus,
            vcpus: raw.vcpus,
            backfill: raw.backfill.unwrap_or(true),
            spread: raw.spread.unwrap_or(true),
            hard_preemption: raw.hard_preemption.unwrap_or(true),
            queue_ttl: raw.queue_ttl.filter(|t| *t > 0),
            queue_order: node.queue_order,
            default_priority: node.default_priority,
            max_priority: node.max_priority,
            preempt_priority: node.preempt_priority,
            exclusive: node.exclusive,
            max_connections_per_user: node.max_connections_per_user,
            max_queued_per_user: node.max_queued_per_user,
            cgroup_parent: node.cgroup_parent,
            memory_limit: memory.limit,
            memory_reserve: memory.reserve,
            governor: memory.governor,
            governor_cfg: memory.governor_cfg,
            governor_interval_ms: memory.interval_ms,
            kill_leftovers: job.kill_leftovers,
            kill_wait_s: job.kill_wait_s,
            time_limits: job.time_limits,
            pids_max: job.pids_max,
            tmp: job.tmp,
            tmp_max: job.tmp_max,
            tmp_root: job.tmp_root,
            swap_max: job.swap_max,
            partition: job.partition,
            bind: job.bind,
            ipc: job.ipc,
            io,
            bind_interval_ms: job.bind_interval_ms,
            thread_env: job.thread_env,
            proc_root: raw.paths.proc.unwrap_or_else(|| PathBuf::from("/proc")),
            sys_root,
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
