//! The IPC scrub at a job's end: what its owner left in the host's /dev/shm, /dev/mqueue and
//! SysV IPC is
//! removed once their last job on the node has ended (`[job] scrub_ipc`; the rule is
//! `pjw_core::ipc_scrub`, the OS side `crate::ipc_scrub`). The decision whether to look is
//! taken here; the listing and the removals run on a blocking thread, so the engine never
//! waits on /proc or /dev/shm.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pjw_core::ipc_scrub::{wanted, Ended};
use tracing::{info, warn};

use super::job::Job;
use super::Engine;

/// Scrubs under way per owner, each with the next one asked for meanwhile.
pub(super) type Scrubs = Arc<Mutex<HashMap<u32, Option<(Ended, Vec<u32>)>>>>;

/// Ask for a scrub of `ended`: true when it is to start now (none runs for its owner); else it
/// is merged into the one to run after the current (the two lives joined, the newer owners).
pub(super) fn ask(scrubs: &Scrubs, ended: Ended, live: Vec<u32>) -> bool {
    let mut under_way = scrubs.lock().unwrap_or_else(|p| p.into_inner());
    match under_way.get_mut(&ended.uid) {
        Some(waiting) => {
            *waiting = Some(match waiting.take() {
                None => (ended, live),
                Some((was, _)) => (
                    Ended {
                        uid: ended.uid,
                        since: was.since.min(ended.since),
                        until: was.until.max(ended.until),
                    },
                    live,
                ),
            });
            false
        }
        None => {
            under_way.insert(ended.uid, None);
            true
        }
    }
}

/// The scrub of `uid` that ran is over: the one asked for meanwhile, to run now, or None
/// (then none runs for `uid` any more).
pub(super) fn next(scrubs: &Scrubs, uid: u32) -> Option<(Ended, Vec<u32>)> {
    let mut under_way = scrubs.lock().unwrap_or_else(|p| p.into_inner());
    let n = under_way.get_mut(&uid).and_then(Option::take);
    if n.is_none() {
        under_way.remove(&uid);
    }
    n
}

impl Engine {
    /// `job` has ended (it is out of the job table): scrub for its owner unless another of
    /// their jobs still runs here. Root's and system users' jobs are never scrubbed.
    pub(super) fn scrub_ipc(&self, job: &Job, running_ms: u64) {
        let Some((ended, live)) = self.scrub_for(job, running_ms) else {
            return;
        };
        let proc_root = self.cfg.proc_root.clone();
        let shm_root = self.cfg.dev_root.join("shm");
        let mq_root = self.cfg.dev_root.join("mqueue");
        let (id, user) = (job.id.to_string(), job.user.clone());
        // One scrub per owner at a time: a job end while one runs is merged into the next
        // (its life joined to the waiting one's), so a user's thousand short jobs make at most
        // two walks at a time, not a thousand (issue 25, N5).
        if !ask(&self.scrubs, ended, live.clone()) {
            return;
        }
        let scrubs = self.scrubs.clone();
        tokio::task::spawn_blocking(move || {
            let (mut ended, mut live) = (ended, live);
            loop {
                let done = crate::tmp::at_low_priority(|| {
                    crate::ipc_scrub::scrub(&proc_root, &shm_root, &mq_root, &ended, &live)
                });
                for e in &done.errors {
                    warn!(job = %id, user = %user, error = %e, "cannot remove an IPC object the job left");
                }
                for (path, owner) in &done.cut {
                    warn!(job = %id, user = %user, tree = %path, owner, "a /dev/shm tree of more than {} entries was cut short; what the job's owner left below it stays", crate::ipc_scrub::MAX_SUBTREE_ENTRIES);
                }
                if done.sysv + done.files + done.mqueues > 0 {
                    info!(job = %id, user = %user, sysv = done.sysv, shm_files = done.files, mqueues = done.mqueues, "removed what the job left in /dev/shm, /dev/mqueue and SysV IPC");
                }
                match next(&scrubs, ended.uid) {
                    Some(n) => (ended, live) = n,
                    None => return,
                }
            }
        });
    }

    /// Whether to scrub after `job` (ended, out of the table, after `running_ms` of running),
    /// and for what: its owner and life in wall seconds, and the owners of the jobs still
    /// running.
    pub(super) fn scrub_for(&self, job: &Job, running_ms: u64) -> Option<(Ended, Vec<u32>)> {
        // A job that never started ran nothing that could leave anything.
        if !self.cfg.ipc.scrub || job.started.is_none() {
            return None;
        }
        let live: Vec<u32> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some())
            .map(|j| j.uid)
            .collect();
        if !wanted(job.uid, self.cfg.ipc.scrub_min_uid, &live) {
            return None;
        }
        let now_ms = self.clock.now_ms().max(0) as u64;
        let ended = Ended {
            uid: job.uid,
            since: now_ms.saturating_sub(running_ms) / 1000,
            until: now_ms.div_ceil(1000),
        };
        Some((ended, live))
    }
}
