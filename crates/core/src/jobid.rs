//! Job ids: what a user or a workload manager names a job, safe to use as a cgroup name.
//!
//! Ids live in namespaces. pjw's own namespace holds the ids users pick (`pjw run --job-id`)
//! and the ones the daemon numbers; each workload manager has its own (`slurm:4242`,
//! `sge:12.1`, `lsf:4242`, `condor:77.0`, `pbs:124.srv`), so no id a user picks is ever a
//! manager's. Where the manager's root hook registers its jobs (Slurm, Grid Engine), only root's
//! `pjw job register` makes ids in its namespace. Where the manager's wrapper runs as the job's
//! user (LSF's job starter, HTCondor's job wrapper, the command PBS's launch hook puts in front
//! of the job: [`USER_RUN_MANAGERS`]), the user's own `pjw run --from-env` claims the id
//! ([`JobId::manager_claim`]); nothing verifies a claim, so a claim that another owner's live
//! job holds is made the claimant's own with [`JobId::for_owner`] (`lsf:4242_u1001`): a user
//! who claims a victim's id first takes nothing from the victim, whose job runs all the same.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::CoreError;

/// Longest job id accepted (the part after the namespace).
pub const MAX_JOB_ID_LEN: usize = 64;

/// Longest namespace (a workload manager's name) accepted.
pub const MAX_NAMESPACE_LEN: usize = 16;

/// A validated job id: an optional namespace of 1–16 characters of `[a-z0-9_]` and a `:`, then
/// 1–64 characters of `[A-Za-z0-9._-]`, not starting with `.` or `-`. No control character,
/// space or `/` can be in one: it is safe in a cgroup name, a path and a log line.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// Validate `text` as a job id, with or without a namespace (`4242`, `slurm:4242`).
    pub fn new(text: &str) -> Result<JobId, CoreError> {
        match text.split_once(':') {
            Some((ns, local)) => JobId::in_namespace(ns, local),
            None => {
                check_local(text)?;
                Ok(JobId(text.to_string()))
            }
        }
    }

    /// The id `local` in namespace `ns` (`slurm`, `4242` → `slurm:4242`).
    pub fn in_namespace(ns: &str, local: &str) -> Result<JobId, CoreError> {
        let bad = |reason: &str| CoreError::BadJobId {
            text: format!("{ns}:{local}"),
            reason: reason.to_string(),
        };
        if ns.is_empty() || ns.len() > MAX_NAMESPACE_LEN {
            return Err(bad("the namespace must have 1 to 16 characters"));
        }
        if !ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(bad(
                "a namespace has only lower-case letters, digits and '_'",
            ));
        }
        check_local(local)?;
        Ok(JobId(format!("{ns}:{local}")))
    }

    /// The namespace (`slurm` of `slurm:4242`); None for pjw's own ids.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once(':').map(|(ns, _)| ns)
    }

    /// The id inside its namespace (`4242` of `slurm:4242`).
    pub fn local(&self) -> &str {
        self.0.split_once(':').map(|(_, l)| l).unwrap_or(&self.0)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Managers whose wrappers run as the job's user (`pjw run --from-env` from LSF's job starter,
/// HTCondor's job wrapper, the PBS launch hook's command): their ids are claimed by users, not
/// registered by root.
pub const USER_RUN_MANAGERS: [&str; 3] = ["lsf", "condor", "pbs"];

impl JobId {
    /// The id a user's `pjw run --from-env` claims for job `local` of manager `ns`, one of
    /// [`USER_RUN_MANAGERS`], as pjw writes the manager's id (`4242`, `4242.3` for an array
    /// element, `77.0`, `124.srv`, `124.3.srv`): it starts with a digit and holds no `_`, so no
    /// claim can be the form [`JobId::for_owner`] makes. Err for another namespace or form.
    pub fn manager_claim(ns: &str, local: &str) -> Result<JobId, CoreError> {
        let bad = |reason: &str| CoreError::BadJobId {
            text: format!("{ns}:{}", local.escape_debug()),
            reason: reason.to_string(),
        };
        if !USER_RUN_MANAGERS.contains(&ns) {
            return Err(bad(
                "only root's `pjw job register` makes ids in this manager's namespace",
            ));
        }
        let id = JobId::in_namespace(ns, local)?;
        if !local.starts_with(|c: char| c.is_ascii_digit()) || local.contains('_') {
            return Err(bad(
                "not a job id as the manager writes it (a number first, no '_')",
            ));
        }
        if ns != "pbs" && !local.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(bad(
                "not a job id as the manager writes it (digits and '.')",
            ));
        }
        Ok(id)
    }

    /// This claimed id made `uid`'s own: `ns:local_u<uid>` (the local part cut to fit), for a
    /// claim another owner's live job holds. No claim has this form (claims hold no `_`).
    pub fn for_owner(&self, uid: u32) -> JobId {
        let suffix = format!("_u{uid}");
        let local: String = self
            .local()
            .chars()
            .take(MAX_JOB_ID_LEN - suffix.len())
            .collect();
        let ns = self.namespace().unwrap_or_default();
        let text = if ns.is_empty() {
            format!("{local}{suffix}")
        } else {
            format!("{ns}:{local}{suffix}")
        };
        JobId(text)
    }
}

/// Check an id without its namespace.
fn check_local(text: &str) -> Result<(), CoreError> {
    let bad = |reason: &str| CoreError::BadJobId {
        // The text may be anything a client sent: shown escaped and bounded.
        text: text
            .chars()
            .take(80)
            .collect::<String>()
            .escape_debug()
            .to_string(),
        reason: reason.to_string(),
    };
    if text.is_empty() {
        return Err(bad("empty"));
    }
    if text.len() > MAX_JOB_ID_LEN {
        return Err(bad("longer than 64 characters"));
    }
    if text.starts_with('.') || text.starts_with('-') {
        return Err(bad("must not start with '.' or '-'"));
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(bad("only letters, digits, '.', '_' and '-' are allowed"));
    }
    Ok(())
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for JobId {
    type Error = CoreError;
    fn try_from(s: String) -> Result<JobId, CoreError> {
        JobId::new(&s)
    }
}

impl From<JobId> for String {
    fn from(j: JobId) -> String {
        j.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids() {
        for ok in ["1", "12345", "job.7", "a_b-c", "12345.batch"] {
            assert!(JobId::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".x", "-x", "a/b", "..", "a b", "ü", &"x".repeat(65)] {
            assert!(JobId::new(bad).is_err(), "{bad:?}");
        }
    }

    /// Issue 25, item 5: LSF, HTCondor and PBS ids are claimed in their own namespaces, in
    /// the manager's own form; a claim another owner holds becomes the claimant's, in a form
    /// no claim can take.
    #[test]
    fn manager_claims_and_owners() {
        for (ns, local) in [
            ("lsf", "4242"),
            ("lsf", "4242.3"),
            ("condor", "77.0"),
            ("pbs", "124.srv"),
            ("pbs", "124.3.pbs-01.example.org"),
        ] {
            let id = JobId::manager_claim(ns, local).unwrap();
            assert_eq!(id.as_str(), format!("{ns}:{local}"));
            let own = id.for_owner(1001);
            assert_eq!(own.as_str(), format!("{ns}:{local}_u1001"));
            assert!(JobId::new(own.as_str()).is_ok());
            assert!(
                JobId::manager_claim(ns, own.local()).is_err(),
                "{own} can be claimed"
            );
        }
        for (ns, local) in [
            ("slurm", "4242"),
            ("sge", "1"),
            ("lsf", "4242_u1001"),
            ("lsf", "x4242"),
            ("lsf", "4242.srv"),
            ("condor", "77_0"),
            ("pbs", "srv.124"),
            ("pbs", "124.srv_u1"),
            ("lsf", ""),
            ("lsf", "1\n"),
        ] {
            assert!(JobId::manager_claim(ns, local).is_err(), "{ns}:{local:?}");
        }
        // A long claim is cut to fit its owner's suffix, and stays a valid id.
        let long = JobId::manager_claim("pbs", &format!("1.{}", "a".repeat(62))).unwrap();
        let own = long.for_owner(u32::MAX);
        assert_eq!(own.local().len(), MAX_JOB_ID_LEN);
        assert!(JobId::new(own.as_str()).is_ok());
    }

    #[test]
    fn namespaces() {
        let j = JobId::new("slurm:4242").unwrap();
        assert_eq!((j.namespace(), j.local()), (Some("slurm"), "4242"));
        assert_eq!(
            JobId::in_namespace("sge", "12.1").unwrap().as_str(),
            "sge:12.1"
        );
        let own = JobId::new("4242").unwrap();
        assert_eq!((own.namespace(), own.local()), (None, "4242"));
        assert_ne!(own, j, "a user's 4242 is not slurm's 4242");
        for bad in [
            ":1",
            "slurm:",
            "Slurm:1",
            "a:b:c",
            "slurm:1\n",
            "slurm:1\nforged",
            "x\u{1b}[2J",
            &format!("{}:1", "s".repeat(17)),
        ] {
            assert!(JobId::new(bad).is_err(), "{bad:?}");
        }
    }
}
