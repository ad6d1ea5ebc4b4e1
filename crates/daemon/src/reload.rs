//! Live reload (SIGHUP, `systemctl reload pjw`): what a new config may change while jobs run.
//!
//! The daemon re-reads its file with the same command-line overrides ([`ReloadSource`]) and the
//! same validation as at start. [`plan`] (pure) compares the running config with the new one:
//! - **fixed** keys (where things already are: socket, state directory, cgroup parent, the
//!   kernel filesystem roots, tmp_root, cpuset partitions) refuse the whole reload, and so does a
//!   pool (`cpus`) that would no longer hold the CPUs of running jobs; the old config is kept;
//! - **restart-only** keys (set up once at start and holding state: the pool, spread, the socket's
//!   mode and connection limit, the memory partition, whether the governor and the sampler run at
//!   all, log settings) keep their old value until the next restart, said in the log; the rest of
//!   the reload applies;
//! - every other key takes effect at once; running jobs are not touched. The engine takes the
//!   rules (vcpus, backfill, preemption, queue TTL, priorities, exclusive, per-user queue limit,
//!   job limits, /tmp, /dev/shm and the IPC scrub, thread binding, governor thresholds, profile retention and size, admin group, adoption
//!   rules); the daemon's tasks ([`crate::tasks`]) restart what runs on a timer or a listener
//!   (governor, sampler and sweep intervals, the metrics listener, the central-store shipper).
//!
//! ```
//! use pjw_daemon::{reload, Config, Overrides};
//! let old = Config::parse("a", "vcpus = 4", &Overrides::default()).unwrap();
//! let new = Config::parse("a", "vcpus = 8", &Overrides::default()).unwrap();
//! let pool = "0-3".parse().unwrap();
//! let plan = reload::plan(&old, &new, &pool, &Default::default()).unwrap();
//! assert_eq!(plan.changed, ["vcpus"]);
//! assert_eq!(plan.config.vcpus, Some(8));
//! ```

use std::path::PathBuf;

use pjw_core::CpuSet;

use crate::config::{Config, ConfigError, Overrides};

/// Where the running config came from: the file (None: the default file if it exists) and the
/// command line's overrides, applied again on every reload.
#[derive(Clone, Debug, Default)]
pub struct ReloadSource {
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
}

impl ReloadSource {
    /// The file `cfg` was read from, with its socket, state directory and cgroup parent pinned
    /// to the values now in effect (for callers that do not keep their overrides).
    pub fn pinned(cfg: &Config) -> ReloadSource {
        ReloadSource {
            path: (cfg.origin != "built-in defaults").then(|| PathBuf::from(&cfg.origin)),
            overrides: Overrides {
                socket: Some(cfg.socket.clone()),
                state_dir: Some(cfg.state_dir.clone()),
                cgroup_parent: Some(cfg.cgroup_parent.to_string()),
            },
        }
    }

    /// Read and validate the config again.
    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.path.as_deref(), &self.overrides)
    }
}

/// The rules of the config that the connection layer ([`crate::server`], [`crate::users`])
/// enforces itself, before a request reaches the engine: today the admin group (it decides in
/// the connection task, off the engine thread, whether a caller is an admin). The engine
/// publishes them at start and after every reload; the connection layer reads the latest at
/// each request, so a key [`plan`] calls live is live in every layer that holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnRules {
    /// `[profile] admin_group`.
    pub admin_group: Option<String>,
}

impl ConnRules {
    /// The connection layer's rules in `cfg`.
    pub fn of(cfg: &Config) -> ConnRules {
        ConnRules {
            admin_group: cfg.profile.admin_group.clone(),
        }
    }
}

/// What a reload does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The config to run with from now on (restart-only keys keep their old values).
    pub config: Config,
    /// Keys that change now.
    pub changed: Vec<&'static str>,
    /// Keys that changed in the file but apply only at the next restart.
    pub at_restart: Vec<&'static str>,
}

/// Why a reload is refused whole (the old config stays).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadRefusal {
    /// Keys that say where things already are (each `key (old -> new)`).
    #[error("{} cannot change while the daemon runs (restart it: systemctl restart pjw; jobs keep running)", keys.join(", "))]
    Fixed { keys: Vec<String> },
    /// A pool that would no longer hold running jobs' CPUs.
    #[error("cpus = {cpus} would take CPUs {lost} from running jobs (the pool cannot shrink under them)")]
    PoolShrink {
        cpus: Box<CpuSet>,
        lost: Box<CpuSet>,
    },
    /// More vCPUs than the pool can hold.
    #[error(
        "vcpus: {vcpus} is more than {} times the {pool} cpus jobs may use",
        crate::MAX_VCPUS_PER_CPU
    )]
    Vcpus { vcpus: usize, pool: usize },
}

/// Compare the running config with a new, valid one. `pool` is the CPUs jobs may get now and
/// `running` the CPUs running jobs hold. Err: why the reload is refused (nothing changes).
pub fn plan(
    old: &Config,
    new: &Config,
    pool: &CpuSet,
    running: &CpuSet,
) -> Result<Plan, ReloadRefusal> {
    refuse_fixed(old, new)?;
    refuse_pool_shrink(new, running)?;
    let (mut cfg, at_restart) = keep_restart_keys(old, new);
    check_vcpus(&cfg, pool)?;
    let changed = live_changes(old, &cfg);
    cfg.origin = new.origin.clone();
    Ok(Plan {
        config: cfg,
        changed,
        at_restart,
    })
}

fn differ<T: PartialEq>(a: &T, b: &T) -> bool {
    a != b
}

/// Where things already are: changing them needs a restart, and a reload that asks for it
/// is refused whole, so the admin sees that the file and the daemon disagree.
fn refuse_fixed(old: &Config, new: &Config) -> Result<(), ReloadRefusal> {
    let mut fixed = Vec::new();
    macro_rules! fixed {
        ($key:literal, $($f:ident).+) => {
            if differ(&old.$($f).+, &new.$($f).+) {
                fixed.push(format!("{} ({:?} -> {:?})", $key, old.$($f).+, new.$($f).+));
            }
        };
    }
    fixed!("socket", socket);
    fixed!("state_dir", state_dir);
    fixed!("cgroup.parent", cgroup_parent);
    fixed!("paths.proc", proc_root);
    fixed!("paths.sys", sys_root);
    fixed!("paths.dev", dev_root);
    fixed!("job.tmp_root", tmp_root);
    fixed!("job.partition", partition);
    if !fixed.is_empty() {
        return Err(ReloadRefusal::Fixed { keys: fixed });
    }
    Ok(())
}

/// The pool cannot shrink under running jobs.
fn refuse_pool_shrink(new: &Config, running: &CpuSet) -> Result<(), ReloadRefusal> {
    if let Some(cpus) = &new.cpus {
        let lost = running.difference(cpus);
        if !lost.is_empty() {
            return Err(ReloadRefusal::PoolShrink {
                cpus: Box::new(*cpus),
                lost: Box::new(lost),
            });
        }
    }
    Ok(())
}

/// `new` with every restart-only key back at its `old` value, and the keys that were put back.
fn keep_restart_keys(old: &Config, new: &Config) -> (Config, Vec<&'static str>) {
    let mut cfg = new.clone();
    let mut at_restart = Vec::new();
    macro_rules! at_restart {
        ($key:literal, $($f:ident).+) => {
            if differ(&old.$($f).+, &new.$($f).+) {
                at_restart.push($key);
                cfg.$($f).+ = old.$($f).+.clone();
            }
        };
    }
    at_restart!("cpus", cpus);
    at_restart!("spread", spread);
    at_restart!("socket_mode", socket_mode);
    at_restart!("max_connections_per_user", max_connections_per_user);
    at_restart!("memory.limit", memory_limit);
    at_restart!("memory.reserve", memory_reserve);
    // Turning the governor off could leave the jobs it froze frozen for good, and the sampler
    // needs its writer thread: both start or stop with the daemon. Their intervals are live.
    at_restart!("memory.governor", governor);
    at_restart!("profile.enabled", profile.enabled);
    at_restart!("gpus", gpus);
    at_restart!("log.level", log_level);
    at_restart!("log.format", log_format);
    // The lease thread and the start-time statistics are set up once, at start.
    at_restart!("lease.check_timeout", lease.timeout_ms);
    at_restart!("lease.node", lease.node);
    at_restart!("lease.command_env", lease.command_env);
    at_restart!("metrics.stats_window", stats_window_ms);
    (cfg, at_restart)
}

/// The vCPU count the pool can hold.
fn check_vcpus(cfg: &Config, pool: &CpuSet) -> Result<(), ReloadRefusal> {
    let vcpus = cfg.vcpus.unwrap_or(pool.len());
    if vcpus > crate::MAX_VCPUS_PER_CPU * pool.len() {
        return Err(ReloadRefusal::Vcpus {
            vcpus,
            pool: pool.len(),
        });
    }
    Ok(())
}

/// The live keys whose value changes from `old` to `cfg`.
fn live_changes(old: &Config, cfg: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    macro_rules! live {
        ($key:literal, $($f:ident).+) => {
            if differ(&old.$($f).+, &cfg.$($f).+) {
                changed.push($key);
            }
        };
    }
    live!("vcpus", vcpus);
    live!("backfill", backfill);
    live!("hard_preemption", hard_preemption);
    live!("queue_ttl", queue_ttl);
    live!("queue_order", queue_order);
    live!("default_priority", default_priority);
    live!("max_priority", max_priority);
    live!("preempt_priority", preempt_priority);
    live!("exclusive", exclusive);
    live!("max_queued_per_user", max_queued_per_user);
    live!("job.kill_leftovers", kill_leftovers);
    live!("job.kill_wait", kill_wait_s);
    live!("job.default_time", time_limits.default);
    live!("job.max_time", time_limits.max);
    live!("job.pids_max", pids_max);
    live!("job.swap_max", swap_max);
    live!("job.tmp", tmp);
    live!("job.tmp_max", tmp_max);
    live!("job.bind", bind);
    live!("job.io_weight/io_max", io);
    live!("job.bind_interval_ms", bind_interval_ms);
    live!("job.thread_env", thread_env);
    live!("job.private_ipc/shm_size/scrub_ipc/scrub_min_uid", ipc);
    live!("memory (governor thresholds)", governor_cfg);
    live!("memory.interval_ms", governor_interval_ms);
    live!("profile.interval", profile.interval_ms);
    live!("profile.processes", profile.processes);
    live!("profile.retention", profile.retention_ms);
    live!("profile.max_db_size", profile.max_db_size);
    live!("profile.admin_group", profile.admin_group);
    live!("profile.threads", profile.threads);
    live!("profile.threads_scan", profile.threads_scan);
    live!("lease.check_interval", lease.check_ms);
    live!("lease.duration", lease.lease_ms);
    live!("adopt.env", adopt_env);
    live!("adopt.hook_daemons", adopt_hook_daemons);
    live!("adopt.sweep_interval_ms", adopt_sweep_ms);
    live!("adopt.login_without_job", login_without_job);
    live!("metrics.listen", metrics_listen);
    live!("central", central);
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::parse("pjw.toml", text, &Overrides::default()).unwrap()
    }
    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn live_keys_change_and_restart_only_keys_keep_their_old_value() {
        let old = cfg("vcpus = 4\nspread = true\n[memory]\nhigh = 0.9\ninterval_ms = 1000\n");
        let new = cfg("vcpus = 8\nspread = false\nmax_priority = 8\ndefault_priority = 5\n[memory]\nhigh = 0.8\ninterval_ms = 500\ngovernor = false\n[metrics]\nlisten = \"127.0.0.1:9810\"\n[log]\nlevel = \"debug\"\n");
        let p = plan(&old, &new, &set("0-3"), &set("0-1")).unwrap();
        assert_eq!(p.config.vcpus, Some(8));
        assert_eq!(p.config.max_priority, 8);
        assert_eq!(p.config.governor_cfg.high, 0.8);
        assert_eq!(p.config.governor_interval_ms, 500);
        assert_eq!(
            p.config.metrics_listen,
            Some("127.0.0.1:9810".parse().unwrap())
        );
        assert!(p.changed.contains(&"vcpus") && p.changed.contains(&"max_priority"));
        assert!(p.changed.contains(&"memory (governor thresholds)"));
        assert!(p.changed.contains(&"memory.interval_ms") && p.changed.contains(&"metrics.listen"));
        // Restart-only: the old value stays.
        assert_eq!(p.at_restart, ["spread", "memory.governor", "log.level"]);
        assert!(p.config.spread && p.config.governor);
        assert_eq!(p.config.log_level, old.log_level);
    }

    #[test]
    fn gpu_placement_changes_at_restart_like_the_rest_of_gpus() {
        let old = cfg("[gpus]\nlocality = \"prefer\"\n");
        let new = cfg("[gpus]\nplacement = \"fewest-stranded\"\n");
        let p = plan(&old, &new, &set("0-3"), &set("0-1")).unwrap();
        assert_eq!(p.at_restart, ["gpus"]);
        assert_eq!(p.config.gpus.placement, old.gpus.placement);
    }

    /// Every key issue 15 names, one row each: live keys are in `changed` and the plan's
    /// config is the new file's (nothing kept back); refused ones name the key and change
    /// nothing.
    #[test]
    fn every_key_the_issue_names_is_live_or_refused() {
        #[derive(Debug, PartialEq)]
        enum Want {
            Live,
            Refused,
        }
        use Want::*;
        const METRICS_A: &str = "[metrics]\nlisten = \"127.0.0.1:9810\"\n";
        const CENTRAL_A: &str =
            "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"/etc/pjw/a\"\n";
        #[rustfmt::skip]
        let rows: &[(&str, &str, &str, Want)] = &[
            // key, old file, new file, want; the running job holds CPUs 2-3 of the pool 0-3.
            ("vcpus", "vcpus = 4\n", "vcpus = 12\n", Live),
            ("default_priority", "", "default_priority = 5\n", Live),
            ("max_priority", "", "max_priority = 14\n", Live),
            ("preempt_priority", "", "preempt_priority = 16\n", Live),
            ("queue_ttl", "", "queue_ttl = 600\n", Live),
            ("queue_order", "", "queue_order = \"shortest-first\"\n", Live),
            ("queue_order", "queue_order = \"shortest-first\"\n", "queue_order = \"shortest-first\"\nqueue_max_wait = 60\n", Live),
            ("backfill", "", "backfill = false\n", Live),
            ("memory (governor thresholds)", "", "[memory]\nhigh = 0.8\nlow = 0.6\n", Live),
            ("memory (governor thresholds)", "", "[memory]\npsi_some = 20\n", Live),
            ("memory.interval_ms", "", "[memory]\ninterval_ms = 250\n", Live),
            ("profile.interval", "", "[profile]\ninterval = \"1s\"\n", Live),
            ("profile.retention", "", "[profile]\nretention = \"2d\"\n", Live),
            ("adopt.env", "", "[adopt]\nenv = [\"MY_JOB_ID\"]\n", Live),
            ("adopt.hook_daemons", "", "[adopt]\nhook_daemons = [\"slurmd\"]\n", Live),
            ("adopt.sweep_interval_ms", "", "[adopt]\nsweep_interval_ms = 0\n", Live),
            ("adopt.login_without_job", "", "[adopt]\nlogin_without_job = \"refuse\"\n", Live),
            ("metrics.listen", "", METRICS_A, Live),
            ("metrics.listen", METRICS_A, "[metrics]\nlisten = \"127.0.0.1:9811\"\n", Live),
            ("metrics.listen", METRICS_A, "", Live),
            ("central", "", CENTRAL_A, Live),
            ("central", CENTRAL_A, "", Live),
            // Only the password's file differs (the password itself is read after parsing).
            ("central", CENTRAL_A, "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"/etc/pjw/b\"\n", Live),
            ("central", CENTRAL_A, "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"/etc/pjw/a\"\nbatch_size = 10\n", Live),
            ("cpus", "cpus = \"0-3\"\n", "cpus = \"0-1\"\n", Refused),
            ("cgroup.parent", "", "[cgroup]\nparent = \"/elsewhere\"\n", Refused),
            ("state_dir", "", "state_dir = \"/srv/pjw\"\n", Refused),
        ];
        for (key, old_text, new_text, want) in rows {
            let (old, new) = (cfg(old_text), cfg(new_text));
            match plan(&old, &new, &set("0-3"), &set("2-3")) {
                Ok(p) => {
                    assert_eq!(*want, Live, "{key}: {new_text:?} was not refused");
                    assert!(p.changed.contains(key), "{key}: changed = {:?}", p.changed);
                    assert!(
                        p.at_restart.is_empty(),
                        "{key}: at restart {:?}",
                        p.at_restart
                    );
                    // Nothing kept back: the plan runs with the new file as it is.
                    assert_eq!(format!("{:?}", p.config), format!("{new:?}"), "{key}");
                    assert_eq!(p.config.central, new.central, "{key}");
                }
                Err(why) => {
                    let why = why.to_string();
                    assert_eq!(*want, Refused, "{key}: refused: {why}");
                    assert!(why.starts_with(key), "{key}: {why}");
                }
            }
        }
    }

    #[test]
    fn fixed_keys_refuse_the_whole_reload() {
        let old = cfg("state_dir = \"/var/lib/pjw\"\n[cgroup]\nparent = \"/pjw\"\n");
        for (text, key) in [
            ("state_dir = \"/srv/pjw\"\n[cgroup]\nparent = \"/pjw\"\n", "state_dir"),
            ("state_dir = \"/var/lib/pjw\"\n[cgroup]\nparent = \"/other\"\n", "cgroup.parent"),
            ("state_dir = \"/var/lib/pjw\"\nsocket = \"/tmp/x.sock\"\n[cgroup]\nparent = \"/pjw\"\n", "socket"),
        ] {
            let e = plan(&old, &cfg(text), &set("0-3"), &CpuSet::default())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(key), "{key}: {e}");
            assert!(e.contains("cannot change while the daemon runs"), "{e}");
        }
    }

    #[test]
    fn the_pool_cannot_shrink_under_running_jobs() {
        let old = cfg("cpus = \"0-3\"\n");
        let e = plan(&old, &cfg("cpus = \"0-1\"\n"), &set("0-3"), &set("2"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("would take CPUs 2 from running jobs"), "{e}");
        // Not under a running job: the new pool waits for a restart.
        let p = plan(&old, &cfg("cpus = \"0-1\"\n"), &set("0-3"), &set("0-1")).unwrap();
        assert_eq!(p.at_restart, ["cpus"]);
        assert_eq!(p.config.cpus, Some(set("0-3")));
    }

    #[test]
    fn too_many_vcpus_for_the_pool_are_refused() {
        let e = plan(
            &cfg(""),
            &cfg("vcpus = 5000\n"),
            &set("0-3"),
            &CpuSet::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("vcpus: 5000 is more than 512 times"), "{e}");
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let p = plan(
            &cfg("vcpus = 3\n"),
            &cfg("vcpus = 3\n"),
            &set("0-3"),
            &CpuSet::default(),
        )
        .unwrap();
        assert!(p.changed.is_empty() && p.at_restart.is_empty());
    }
}
