//! Job ids: what a user or a workload manager names a job, safe to use as a cgroup name.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::CoreError;

/// Longest job id accepted.
pub const MAX_JOB_ID_LEN: usize = 64;

/// A validated job id: 1–64 characters of `[A-Za-z0-9._-]`, not starting with `.` or `-`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// Validate `text` as a job id.
    pub fn new(text: &str) -> Result<JobId, CoreError> {
        let bad = |reason: &str| CoreError::BadJobId {
            text: text.to_string(),
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
        Ok(JobId(text.to_string()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
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
}
