//! The top-level keys: the socket, the state directory, the CPU pool and the queue's rules
//! (priorities, `--exclusive`, per-user limits), and `[cgroup] parent`.

use std::path::PathBuf;

use pjw_cgroup::ParentSpec;
use pjw_core::sched::QueueOrder;
use pjw_core::CpuSet;

use super::{
    ConfigError, Errs, ExclusiveRight, Overrides, RawConfig, DEFAULT_MAX_CONNECTIONS_PER_USER,
    DEFAULT_MAX_PRIORITY, DEFAULT_MAX_QUEUED_PER_USER, DEFAULT_STATE_DIR,
};

/// The validated top-level keys.
#[derive(Clone, Debug)]
pub(super) struct Node {
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub state_dir: PathBuf,
    pub cpus: Option<CpuSet>,
    pub cgroup_parent: ParentSpec,
    pub default_priority: u8,
    pub max_priority: u8,
    pub preempt_priority: u8,
    pub exclusive: ExclusiveRight,
    pub max_connections_per_user: usize,
    pub max_queued_per_user: usize,
    pub queue_order: QueueOrder,
}

/// Validate the top-level keys (with the command line's overrides).
pub(super) fn parse(raw: &RawConfig, ov: &Overrides, e: Errs) -> Result<Node, ConfigError> {
    let (socket, socket_mode) = parse_socket(raw, ov, e)?;
    let state_dir = ov
        .state_dir
        .clone()
        .or_else(|| raw.state_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let cpus = parse_cpus(raw, e)?;
    let cgroup_parent = parse_parent(raw, ov, e)?;
    if raw.vcpus == Some(0) {
        return Err(e.at("vcpus", "must be at least 1".into()));
    }
    let (default_priority, max_priority, preempt_priority) = parse_priorities(raw, e)?;
    let exclusive = parse_exclusive(raw, e)?;
    let (max_connections_per_user, max_queued_per_user) = parse_user_limits(raw, e)?;
    let queue_order = parse_queue_order(raw, e)?;
    Ok(Node {
        socket,
        socket_mode,
        state_dir,
        cpus,
        cgroup_parent,
        default_priority,
        max_priority,
        preempt_priority,
        exclusive,
        max_connections_per_user,
        max_queued_per_user,
        queue_order,
    })
}

/// How long a job overtaken by shorter ones waits at most before it goes first
/// (`queue_max_wait`, under `queue_order = "shortest-first"`): a working day.
pub(super) const DEFAULT_QUEUE_MAX_WAIT_S: u64 = 8 * 3600;

/// `queue_order` ("submission", the default, or "shortest-first") and `queue_max_wait`
/// (seconds, 1 s to a year; below `queue_ttl`, or an overtaken job would expire before it goes
/// first: unset, it is the default or half the ttl, whichever is shorter).
fn parse_queue_order(raw: &RawConfig, e: Errs) -> Result<QueueOrder, ConfigError> {
    let ttl = raw.queue_ttl.filter(|t| *t > 0);
    let max_wait = match (raw.queue_max_wait, ttl) {
        (Some(w), _) => w,
        (None, Some(ttl)) => DEFAULT_QUEUE_MAX_WAIT_S.min(ttl / 2).max(1),
        (None, None) => DEFAULT_QUEUE_MAX_WAIT_S,
    };
    if !(1..=pjw_core::time_limit::MAX_SECS).contains(&max_wait) {
        return Err(e.at(
            "queue_max_wait",
            format!(
                "{max_wait} is not in 1-{} (seconds)",
                pjw_core::time_limit::MAX_SECS
            ),
        ));
    }
    let order = match raw.queue_order.as_deref() {
        None | Some("submission") => return Ok(QueueOrder::Submission),
        Some("shortest-first") => QueueOrder::ShortestFirst {
            max_wait_ms: max_wait as i64 * 1000,
        },
        Some(other) => {
            return Err(e.at(
                "queue_order",
                format!("{other:?} is not \"submission\" or \"shortest-first\""),
            ))
        }
    };
    if let Some(ttl) = ttl.filter(|ttl| max_wait >= *ttl) {
        return Err(e.at(
            "queue_max_wait",
            format!("{max_wait} s is not shorter than queue_ttl ({ttl} s): a job overtaken by shorter ones would expire before it goes first"),
        ));
    }
    Ok(order)
}

/// `socket` (the override first; at most 100 bytes, a Unix socket's limit) and `socket_mode`.
fn parse_socket(raw: &RawConfig, ov: &Overrides, e: Errs) -> Result<(PathBuf, u32), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let socket = ov
        .socket
        .clone()
        .or_else(|| raw.socket.clone())
        .unwrap_or_else(|| PathBuf::from(pjw_proto::DEFAULT_SOCKET));
    if socket.as_os_str().is_empty() || socket.as_os_str().len() > 100 {
        return Err(err(
            "socket",
            "must be a path of 1-100 bytes (Unix socket limit)".into(),
        ));
    }
    let socket_mode = match &raw.socket_mode {
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
    Ok((socket, socket_mode))
}

/// `cpus`: the pool, at least one CPU when given.
fn parse_cpus(raw: &RawConfig, e: Errs) -> Result<Option<CpuSet>, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let cpus = match &raw.cpus {
        None => None,
        Some(c) => {
            let s = CpuSet::parse_list(c).map_err(|e| err("cpus", e.to_string()))?;
            if s.is_empty() {
                return Err(err("cpus", "must name at least one cpu".into()));
            }
            Some(s)
        }
    };
    Ok(cpus)
}

/// `[cgroup] parent`, or `--cgroup-parent`.
fn parse_parent(raw: &RawConfig, ov: &Overrides, e: Errs) -> Result<ParentSpec, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let (parent_key, parent_text) = match &ov.cgroup_parent {
        Some(p) => ("--cgroup-parent", p.clone()),
        None => (
            "cgroup.parent",
            raw.cgroup.parent.clone().unwrap_or_else(|| "/pjw".into()),
        ),
    };
    let cgroup_parent =
        ParentSpec::parse(&parent_text).map_err(|e| err(parent_key, e.to_string()))?;
    Ok(cgroup_parent)
}

/// `default_priority`, `max_priority` and `preempt_priority`, each 1-16, the default not above
/// the maximum.
fn parse_priorities(raw: &RawConfig, e: Errs) -> Result<(u8, u8, u8), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
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
    Ok((default_priority, max_priority, preempt_priority))
}

/// `exclusive`: who may ask for a node of their own.
fn parse_exclusive(raw: &RawConfig, e: Errs) -> Result<ExclusiveRight, ConfigError> {
    match raw.exclusive.as_deref() {
        None | Some("privileged") => Ok(ExclusiveRight::Privileged),
        Some("all") => Ok(ExclusiveRight::All),
        Some(other) => Err(e.at(
            "exclusive",
            format!("{other:?} is not \"privileged\" or \"all\""),
        )),
    }
}

/// `max_connections_per_user` (4-100000) and `max_queued_per_user` (1-100000).
fn parse_user_limits(raw: &RawConfig, e: Errs) -> Result<(usize, usize), ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
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
    Ok((max_connections_per_user, max_queued_per_user))
}
