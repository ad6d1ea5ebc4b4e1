//! The request of pjw's Slurm SPANK plugin (`packaging/slurm/spank/pjw_spank.c`): a task,
//! forked by `slurmstepd` and still root, asks to be moved into its job before it execs.
//!
//! The daemon decides from the caller's `SO_PEERCRED` and its ancestry which job that is (see
//! `pjw_core::task_join`); the request names no job. It carries what only Slurm knows at that
//! point — the uid it will run the task as, the step's CPUs per task and tasks on the node, and
//! which variables the task's environment already has (for the thread variables) — and is read
//! only once the caller is proven to be slurmstepd's root child. Answered with [`crate::Response::Started`] (the job, its CPUs, `env` to set over
//! Slurm's, `env_defaults` to set where the user has not) or [`crate::Response::Error`].
//!
//! The plugin writes this JSON itself (C, no serde), so its shape is pinned by a test:
//!
//! ```
//! use pjw_proto::{Request, RequestFrame, SlurmTaskRequest};
//! let text = r#"{"v":1,"req":{"type":"slurm_task","uid":1000,"cpus_per_task":1,"tasks":2,"set":["HOME","OMP_NUM_THREADS"]}}"#;
//! let f: RequestFrame = serde_json::from_str(text).unwrap();
//! let want = SlurmTaskRequest {
//!     uid: 1000,
//!     cpus_per_task: Some(1),
//!     tasks: Some(2),
//!     job_cpus_per_task: None,
//!     job_tasks: None,
//!     set: vec!["HOME".into(), "OMP_NUM_THREADS".into()],
//! };
//! assert_eq!(f.req, Request::SlurmTask(want));
//! // Without the optional fields (unknown to Slurm: null).
//! let text = r#"{"v":1,"req":{"type":"slurm_task","uid":0,"cpus_per_task":null,"tasks":null}}"#;
//! assert!(serde_json::from_str::<RequestFrame>(text).is_ok());
//! // The job's shape, for the job script's counts.
//! let text = r#"{"v":1,"req":{"type":"slurm_task","uid":0,"cpus_per_task":2,"tasks":1,"job_cpus_per_task":1,"job_tasks":2}}"#;
//! let f: RequestFrame = serde_json::from_str(text).unwrap();
//! let Request::SlurmTask(r) = f.req else { panic!() };
//! assert_eq!((r.job_cpus_per_task, r.job_tasks), (Some(1), Some(2)));
//! ```

use serde::{Deserialize, Serialize};

/// A Slurm task's join request (root only; see the module).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmTaskRequest {
    /// The uid Slurm runs the task as (`S_JOB_UID`); it must be the job's owner.
    pub uid: u32,
    /// The step's CPUs per task (`S_STEP_CPUS_PER_TASK`), for the task's thread count.
    #[serde(default)]
    pub cpus_per_task: Option<u32>,
    /// The step's tasks on this node (`S_JOB_LOCAL_TASK_COUNT`).
    #[serde(default)]
    pub tasks: Option<u32>,
    /// The job's own CPUs per task (`SLURM_CPUS_PER_TASK` of the job's environment: its `-c`,
    /// absent when not given), for the counts of a step that is the whole allocation (the job
    /// script, whose `mpirun` ranks inherit them). Only the user's own thread counts follow it.
    #[serde(default)]
    pub job_cpus_per_task: Option<u32>,
    /// The job's tasks on the script's node (the first count of `SLURM_TASKS_PER_NODE`).
    #[serde(default)]
    pub job_tasks: Option<u32>,
    /// The names of the variables the task's environment has (names of
    /// `[A-Za-z_][A-Za-z0-9_]*`), less those whose value is still the one pjw set for the
    /// enclosing job script (`PJW_THREAD_ENV`): a thread variable named here is the user's and
    /// is not given a default. At most [`MAX_SET_NAMES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
}

/// Most names a [`SlurmTaskRequest`] may list in `set`.
pub const MAX_SET_NAMES: usize = 4096;

/// Whether `name` is a variable name the plugin sends: 1–128 of `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && !b[0].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        for ok in ["OMP_NUM_THREADS", "_x", "a1"] {
            assert!(valid_env_name(ok), "{ok}");
        }
        let long = "A".repeat(129);
        for bad in ["", "1A", "A-B", "A B", "A\nB", "A=B", long.as_str()] {
            assert!(!valid_env_name(bad), "{bad:?}");
        }
    }
}
