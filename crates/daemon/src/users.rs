//! User and group lookups off the engine thread: a port ([`UserLookup`]) with NSS as its
//! adapter ([`Nss`]), and a [`Resolver`] that caches answers and asks NSS on a blocking thread
//! with a timeout.
//!
//! On a node whose users come from LDAP or SSSD a lookup can stall for seconds. The connection
//! task resolves what a request needs ([`Who`]: the caller's name, admin-group membership, the
//! user a request names) before it hands the request to the engine, so a stalled lookup holds
//! up only the request that needs it: after [`LOOKUP_TIMEOUT`] that one client gets a clear
//! error, and the engine never waits on NSS.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::engine::{Cred, Who};

/// How long a request waits for the user database before it is refused.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(4);
/// How long an answer (found or not) is reused.
const CACHE_FOR: Duration = Duration::from_secs(60);
/// At most this many answers are kept: a request may name any user (`run --user`, `report
/// --user`) before the engine decides whether its caller may, so a user sending ever new names
/// must not grow the daemon's memory. Expired answers go first; when all are fresh, a new one
/// is answered but not kept.
const CACHE_MAX: usize = 4096;

/// What pjw asks of the user and group databases. Calls may block.
pub trait UserLookup: Send + Sync + 'static {
    /// The name of user `uid`.
    fn user_name(&self, uid: u32) -> Option<String>;
    /// uid and primary gid of the user `name`.
    fn user(&self, name: &str) -> Option<(u32, u32)>;
    /// gid of the group `name`.
    fn group_gid(&self, name: &str) -> Option<u32>;
    /// The listed members of group `gid`.
    fn group_members(&self, gid: u32) -> Vec<String>;
}

/// The system's databases through NSS (`getpwuid`, `getpwnam`, `getgrnam`, `getgrgid`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Nss;

impl UserLookup for Nss {
    fn user_name(&self, uid: u32) -> Option<String> {
        uzers::get_user_by_uid(uid).map(|u| u.name().to_string_lossy().into_owned())
    }
    fn user(&self, name: &str) -> Option<(u32, u32)> {
        uzers::get_user_by_name(name).map(|u| (u.uid(), u.primary_group_id()))
    }
    fn group_gid(&self, name: &str) -> Option<u32> {
        uzers::get_group_by_name(name).map(|g| g.gid())
    }
    fn group_members(&self, gid: u32) -> Vec<String> {
        use uzers::os::unix::GroupExt;
        uzers::get_group_by_gid(gid)
            .map(|g| {
                g.members()
                    .iter()
                    .map(|m| m.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    UserName(u32),
    User(String),
    GroupGid(String),
    GroupMembers(u32),
}

#[derive(Clone, Debug)]
enum Answer {
    UserName(Option<String>),
    User(Option<(u32, u32)>),
    GroupGid(Option<u32>),
    GroupMembers(Vec<String>),
}

/// Cached lookups on blocking threads, bounded by a timeout. Cheap to clone (shared cache).
#[derive(Clone)]
pub struct Resolver {
    lookup: Arc<dyn UserLookup>,
    cache: Arc<Mutex<HashMap<Key, (Instant, Answer)>>>,
    timeout: Duration,
    /// The admin group as in effect now (a reload changes it here too).
    rules: tokio::sync::watch::Receiver<crate::reload::ConnRules>,
    proc_root: PathBuf,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("timeout", &self.timeout)
            .field("admin_group", &self.rules.borrow().admin_group)
            .finish()
    }
}

impl Resolver {
    /// Resolve with `lookup`, giving up on one after `timeout`; `rules` carries
    /// `[profile] admin_group` as in effect now ([`crate::engine::Engine::conn_rules`]),
    /// `proc_root` is where a caller's supplementary groups are read.
    pub fn new(
        lookup: Arc<dyn UserLookup>,
        timeout: Duration,
        rules: tokio::sync::watch::Receiver<crate::reload::ConnRules>,
        proc_root: PathBuf,
    ) -> Resolver {
        Resolver {
            lookup,
            cache: Arc::default(),
            timeout,
            rules,
            proc_root,
        }
    }

    /// A resolver whose admin group is `admin_group` for good (tests, tools).
    pub fn fixed(
        lookup: Arc<dyn UserLookup>,
        timeout: Duration,
        admin_group: Option<String>,
        proc_root: PathBuf,
    ) -> Resolver {
        let (_, rules) = tokio::sync::watch::channel(crate::reload::ConnRules { admin_group });
        Resolver::new(lookup, timeout, rules, proc_root)
    }

    /// What the engine needs to know about the caller of a request, and about the user it
    /// names (`run --user`, `register`, `report --user`); an error names what did not answer.
    pub async fn who(&self, cred: &Cred, named: Option<&str>) -> Result<Who, String> {
        let name = match self.ask(Key::UserName(cred.uid)).await? {
            Answer::UserName(n) => n.unwrap_or_else(|| cred.uid.to_string()),
            _ => cred.uid.to_string(),
        };
        let admin = cred.uid != 0 && self.in_admin_group(cred, &name).await?;
        let named = match named {
            None => None,
            // A name no user database holds is no user: not looked up, not kept (a caller's
            // megabyte names would otherwise fill the cache's 4,096 places with gigabytes).
            Some(n) if !plausible_user_name(n) => None,
            Some(n) => match self.ask(Key::User(n.to_string())).await? {
                Answer::User(u) => u,
                _ => None,
            },
        };
        Ok(Who { name, admin, named })
    }

    /// Whether the caller is in the admin group (a name or a gid): its primary group, a
    /// supplementary group of the calling process (`/proc/PID/status`), or a listed member.
    async fn in_admin_group(&self, cred: &Cred, name: &str) -> Result<bool, String> {
        // Read at every request: the group in effect now, not the one at start.
        let Some(group) = self.rules.borrow().admin_group.clone() else {
            return Ok(false);
        };
        let group = group.as_str();
        let gid = match group.parse::<u32>() {
            Ok(g) => g,
            Err(_) => match self.ask(Key::GroupGid(group.to_string())).await? {
                Answer::GroupGid(Some(g)) => g,
                _ => return Ok(false),
            },
        };
        if cred.gid == gid {
            return Ok(true);
        }
        let groups =
            std::fs::read_to_string(self.proc_root.join(cred.pid.to_string()).join("status"))
                .ok()
                .and_then(|t| pjw_kernelfs::proc_status::parse(&t).ok())
                .filter(|s| s.uid[0] == cred.uid)
                .map(|s| s.groups())
                .unwrap_or_default();
        if groups.contains(&gid) {
            return Ok(true);
        }
        Ok(match self.ask(Key::GroupMembers(gid)).await? {
            Answer::GroupMembers(m) => m.iter().any(|m| m == name),
            _ => false,
        })
    }

    /// One lookup: from the cache, else on a blocking thread, waited for at most `timeout`.
    async fn ask(&self, key: Key) -> Result<Answer, String> {
        if let Some((at, a)) = self.cache().get(&key) {
            if at.elapsed() < CACHE_FOR {
                return Ok(a.clone());
            }
        }
        let lookup = self.lookup.clone();
        let k = key.clone();
        let task = tokio::task::spawn_blocking(move || match k {
            Key::UserName(uid) => Answer::UserName(lookup.user_name(uid)),
            Key::User(name) => Answer::User(lookup.user(&name)),
            Key::GroupGid(name) => Answer::GroupGid(lookup.group_gid(&name)),
            Key::GroupMembers(gid) => Answer::GroupMembers(lookup.group_members(gid)),
        });
        match tokio::time::timeout(self.timeout, task).await {
            Ok(Ok(a)) => {
                let mut cache = self.cache();
                if cache.len() >= CACHE_MAX {
                    cache.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
                }
                if cache.len() < CACHE_MAX || cache.contains_key(&key) {
                    cache.insert(key, (Instant::now(), a.clone()));
                }
                Ok(a)
            }
            Ok(Err(e)) => Err(format!(
                "the user database lookup failed ({}): {e}",
                what(&key)
            )),
            Err(_) => {
                tracing::warn!(
                    lookup = what(&key),
                    timeout_s = self.timeout.as_secs_f64(),
                    "user database lookup timed out"
                );
                Err(format!(
                    "the user database did not answer within {} s ({}); try again later",
                    self.timeout.as_secs_f64(),
                    what(&key)
                ))
            }
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, Answer)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The longest user name looked up. Debian's `useradd` stops at 32 characters; directory
/// services allow longer ones, so the bound is generous, but it bounds what the cache holds.
pub(crate) const USER_NAME_MAX: usize = 256;

/// Whether `name` could be a user's: 1 to [`USER_NAME_MAX`] bytes, no control character and no
/// `:` (the passwd format's separator, in no name any database returns).
pub(crate) fn plausible_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= USER_NAME_MAX
        && !name.chars().any(|c| c.is_control() || c == ':')
}

/// The lookup, for messages.
fn what(key: &Key) -> String {
    match key {
        Key::UserName(uid) => format!("the name of uid {uid}"),
        Key::User(name) => format!("user {name}"),
        Key::GroupGid(name) => format!("group {name}"),
        Key::GroupMembers(gid) => format!("the members of group {gid}"),
    }
}

#[cfg(test)]
#[path = "users_tests.rs"]
mod tests;
