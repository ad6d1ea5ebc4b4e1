//! A job's steps: `pjw run`s started from inside it.
//!
//! The daemon sees that a `run` comes from inside a job (from the caller's pid and that pid's
//! cgroup, never from the request) and answers with [`crate::Response::Started`] for the job
//! itself, the step's CPUs and `PJW_STEP_ID` in `env`; the job lists its running steps in
//! [`crate::JobInfo::steps`], and its report every step it had ([`crate::JobReport::steps`]).

use pjw_core::CpuSet;
use serde::{Deserialize, Serialize};

/// A running step of a job, in [`crate::JobInfo::steps`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// Its number in the job, from 0.
    pub step: u32,
    /// Its process (the `pjw run` that became the command).
    pub pid: u32,
    /// The uid of that process.
    pub uid: u32,
    /// Its name (`--name`, else the command's file name).
    pub name: String,
    /// The CPUs of its job it runs on (an affinity inside the job's cpuset).
    pub cpus: CpuSet,
    /// Seconds since it started.
    pub age_secs: u64,
}

/// A step in a job's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// Its number in the job, from 0.
    pub step: u32,
    pub name: String,
    /// The uid of its process.
    pub uid: u32,
    /// The CPUs of its job it ran on.
    pub cpus: CpuSet,
    pub pid: u32,
    pub started_ms: i64,
    /// None while it runs (or when it ran past its job's end unrecorded).
    #[serde(default)]
    pub ended_ms: Option<i64>,
    /// Its process's exit status (128 + signal when killed by one), when known.
    #[serde(default)]
    pub exit_status: Option<i32>,
}
