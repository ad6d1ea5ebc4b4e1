//! Job ids: what a user or a workload manager names a job, safe to use as a cgroup name.
//!
//! Ids live in namespaces. pjw's own namespace holds the ids users pick (`pjw run --job-id`)
//! and the ones the daemon numbers; each workload manager has its own (`slurm:4242`,
//! `sge:12.1`), and only root's `pjw job register` makes ids there. A user cannot write an id
//! with a namespace into `run`, so no user can take (squat) an id a manager will register.

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
