//! Logins: which job an ssh session (any PAM login the site wires to `pjw pam-adopt`) joins.
//!
//! pam_slurm_adopt's rule, for pjw's jobs: root is never adopted and never refused; a user with
//! one running job on the node lands in it; with several, in the newest (the latest started,
//! pam_slurm_adopt's `action_unknown=newest`); with none, what the node says
//! ([`WithoutJob`]: refuse the login, or leave the session outside every job). A job that is
//! frozen (suspended, preempted, or frozen by the memory governor) or ending is not one to
//! land in: a shell moved into a frozen cgroup would hang until it thaws.
//!
//! ```
//! use pjw_core::login::{decide, LoginJob, Verdict, WithoutJob};
//! let jobs = [
//!     LoginJob { key: 1, uid: 1001, started_ms: 10, runnable: true },
//!     LoginJob { key: 2, uid: 1001, started_ms: 20, runnable: true },
//!     LoginJob { key: 3, uid: 1002, started_ms: 30, runnable: true },
//! ];
//! assert_eq!(decide(1001, &jobs, WithoutJob::Refuse), Verdict::Join { key: 2, of: 2 });
//! assert_eq!(decide(1003, &jobs, WithoutJob::Refuse), Verdict::Refuse);
//! assert_eq!(decide(0, &jobs, WithoutJob::Refuse), Verdict::Root);
//! ```

/// What happens to a login of a user who has no running job on the node (`[adopt]
/// login_without_job`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WithoutJob {
    /// The login goes on, outside every job (the session is the user's own, as without pjw).
    #[default]
    Outside,
    /// The login is refused (pam_slurm_adopt's `action_no_jobs=deny`).
    Refuse,
}

impl WithoutJob {
    /// The config word: `outside` or `refuse`.
    pub fn as_str(self) -> &'static str {
        match self {
            WithoutJob::Outside => "outside",
            WithoutJob::Refuse => "refuse",
        }
    }
}

/// A job on the node, as the login rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginJob {
    /// The engine's key for the job.
    pub key: i64,
    /// Its owner.
    pub uid: u32,
    /// When it started (ms since the epoch): the newest is the latest.
    pub started_ms: i64,
    /// Started, not frozen, not ending: a session can run in it.
    pub runnable: bool,
}

/// The decision about one login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Root: never adopted, never refused.
    Root,
    /// The session joins job `key`, the newest of the user's `of` runnable jobs.
    Join { key: i64, of: usize },
    /// No runnable job, and the node leaves such sessions outside every job.
    Outside,
    /// No runnable job, and the node refuses such logins.
    Refuse,
}

/// Decide where a login of `uid` goes, given the node's jobs.
pub fn decide(uid: u32, jobs: &[LoginJob], without: WithoutJob) -> Verdict {
    if uid == 0 {
        return Verdict::Root;
    }
    let mine = jobs.iter().filter(|j| j.uid == uid && j.runnable);
    let of = mine.clone().count();
    // The newest; of two started in the same millisecond, the later registered (higher key).
    match mine.max_by_key(|j| (j.started_ms, j.key)) {
        Some(j) => Verdict::Join { key: j.key, of },
        None => match without {
            WithoutJob::Outside => Verdict::Outside,
            WithoutJob::Refuse => Verdict::Refuse,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: i64, uid: u32, started_ms: i64, runnable: bool) -> LoginJob {
        LoginJob {
            key,
            uid,
            started_ms,
            runnable,
        }
    }

    #[test]
    fn the_login_rule_as_a_table() {
        use Verdict::{Join, Root};
        use WithoutJob::{Outside as Out, Refuse as Deny};
        let node = [
            job(1, 1001, 100, true),
            job(2, 1001, 300, true),
            job(3, 1001, 500, false), // frozen or ending: not one to land in
            job(4, 1002, 400, true),
            job(5, 1003, 200, false),
            job(6, 1004, 700, true),
            job(7, 1004, 700, true),
        ];
        let cases: &[(&str, u32, WithoutJob, Verdict)] = &[
            ("root, even with jobs of its own", 0, Deny, Root),
            ("one job", 1002, Deny, Join { key: 4, of: 1 }),
            (
                "several: the newest runnable",
                1001,
                Out,
                Join { key: 2, of: 2 },
            ),
            ("only a frozen job, refused", 1003, Deny, Verdict::Refuse),
            (
                "only a frozen job, left outside",
                1003,
                Out,
                Verdict::Outside,
            ),
            ("no job, refused", 1009, Deny, Verdict::Refuse),
            ("no job, left outside", 1009, Out, Verdict::Outside),
            (
                "started in the same ms: the later one",
                1004,
                Out,
                Join { key: 7, of: 2 },
            ),
            (
                "another user's jobs never count",
                1005,
                Out,
                Verdict::Outside,
            ),
        ];
        for (what, uid, without, want) in cases {
            assert_eq!(decide(*uid, &node, *without), *want, "{what}");
        }
        assert_eq!(decide(1001, &[], Out), Verdict::Outside);
    }
}
