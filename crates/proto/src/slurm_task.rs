//! The request of pjw's Slurm SPANK plugin (`packaging/slurm/spank/pjw_spank.c`): a task,
//! forked by `slurmstepd` and still root, asks to be moved into its job before it execs.
//!
//! The daemon decides from the caller's `SO_PEERCRED` and its ancestry which job that is (see
//! `pjw_core::task_join`); the request names no job. It carries what only Slurm knows at that
//! point — the uid it will run the task as, and the step's CPUs per task and tasks on the node
//! (for the thread variables) — and is read only once the caller is proven to be slurmstepd's
//! root child. Answered with [`crate::Response::Started`] (the job, its CPUs, `env` to set over
//! Slurm's, `env_defaults` to set where the user has not) or [`crate::Response::Error`].
//!
//! The plugin writes this JSON itself (C, no serde), so its shape is pinned by a test:
//!
//! ```
//! use pjw_proto::{Request, RequestFrame, SlurmTaskRequest};
//! let text = r#"{"v":1,"req":{"type":"slurm_task","uid":1000,"cpus_per_task":1,"tasks":2}}"#;
//! let f: RequestFrame = serde_json::from_str(text).unwrap();
//! assert_eq!(
//!     f.req,
//!     Request::SlurmTask(SlurmTaskRequest { uid: 1000, cpus_per_task: Some(1), tasks: Some(2) })
//! );
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
}
