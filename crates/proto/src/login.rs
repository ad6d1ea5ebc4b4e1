//! Requests and fields of a job's steps and of logins joining jobs.
//!
//! A step is a `pjw run` started from inside a job: the daemon sees it is inside (from the
//! caller's pid and that pid's cgroup, never from the request) and answers with
//! [`crate::Response::Started`] for the job itself, the step's CPUs and `PJW_STEP_ID` in `env`;
//! the job lists it in [`crate::JobInfo::steps`] while it runs.
//!
//! A login is a PAM login (sshd) run through `pjw pam-adopt` from `pam_exec`: root asks, for a
//! user, whether the login may go on ([`LoginPhase::Account`]) and then to move the session's
//! process — the caller's parent, as the daemon reads it from `/proc`, never a pid the request
//! names — into that user's job ([`LoginPhase::Session`]).

use pjw_core::CpuSet;
use serde::{Deserialize, Serialize};

/// Which PAM stack asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginPhase {
    /// The account stack: may the user log in? Nothing is moved. Refused with
    /// [`crate::ErrorCode::Denied`] when the node refuses logins without a job.
    Account,
    /// The session stack: move the session's process (the caller's parent) into the user's job.
    Session,
}

/// A login of `user` (root only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// The user logging in (PAM_USER).
    pub user: String,
    pub phase: LoginPhase,
}

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
