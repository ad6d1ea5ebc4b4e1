//! Logins joining jobs.
//!
//! A login is a PAM login (sshd) run through `pjw pam-adopt` from `pam_exec`: root asks, for a
//! user, whether the login may go on ([`LoginPhase::Account`]) and then to move the session's
//! process — the caller's parent, as the daemon reads it from `/proc`, never a pid the request
//! names — into that user's job ([`LoginPhase::Session`]).

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
