//! `pjw pam-adopt`: the PAM side of ssh adoption, run by `pam_exec` as root in sshd's account
//! and session stacks (docs/wlm/adoption.md). pam_exec says what is going on in the
//! environment: `PAM_TYPE` (`account`, `open_session`, `close_session`), `PAM_USER`,
//! `PAM_SERVICE`. The daemon decides (`[adopt] login_without_job`) and, in the session stack,
//! moves the session's process — this command's parent, which it reads from `/proc` itself —
//! into the user's newest running job.
//!
//! Exit status (pam_exec turns anything but 0 into a PAM failure): 0 the login goes on (in a
//! job, or outside; also when the service is not one of `--service`, for root, and when no
//! daemon answers: pjw never locks a node's users out because it is down); 1 the node refuses
//! the login, or the command is used where it means nothing (an `auth` or `password` stack: it
//! never says yes to a password); in the session stack 1 also when the move failed (the
//! documented `optional` line lets the login go on, outside).

use std::time::Duration;

use pjw_proto::{Client, ErrorCode, LoginPhase, LoginRequest, Request, Response};

use crate::cli::PamAdoptArgs;

/// How long a login waits for the daemon before it goes on without it.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

pub fn run(a: PamAdoptArgs) -> i32 {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let phase = match var("PAM_TYPE").as_deref() {
        Some("account") => LoginPhase::Account,
        Some("open_session") => LoginPhase::Session,
        Some("close_session") => return 0,
        Some(other) => {
            eprintln!("pjw pam-adopt: PAM_TYPE {other} is not handled: use it in the account and session stacks only");
            return 1;
        }
        None => {
            eprintln!("pjw pam-adopt: no PAM_TYPE: run it from pam_exec in sshd's account and session stacks");
            return 1;
        }
    };
    let Some(user) = var("PAM_USER") else {
        eprintln!("pjw pam-adopt: no PAM_USER");
        return 1;
    };
    let service = var("PAM_SERVICE").unwrap_or_default();
    if !a.service.contains(&service) {
        return 0;
    }
    // Root may always log in, whatever the daemon says or whether it answers.
    if uzers::get_user_by_name(&user).is_some_and(|u| u.uid() == 0) {
        return 0;
    }
    let req = Request::Login(LoginRequest {
        user: user.clone(),
        phase,
    });
    // Root's daemon only: a socket a user made (were the path ever theirs) is no daemon.
    if let Err(why) = roots_socket(&a.socket) {
        eprintln!("pjw pam-adopt: {user}: {why}; the login goes on outside every job");
        return 0;
    }
    let answer = Client::connect(&a.socket).and_then(|mut c| {
        c.set_read_timeout(Some(ANSWER_WITHIN))?;
        c.call(&req)
    });
    match answer {
        Ok(Response::Done { message }) => {
            if phase == LoginPhase::Session && !a.quiet {
                println!("pjw: {message}");
            }
            0
        }
        Ok(Response::Error {
            code: ErrorCode::Denied,
            message,
        }) => {
            println!("pjw: login refused: {message}");
            eprintln!("pjw pam-adopt: {user}: {message}");
            1
        }
        Ok(Response::Error { message, .. }) => {
            eprintln!("pjw pam-adopt: {user}: {message}");
            // The account stack lets the login go on; a session that could not join its job
            // fails its (optional) line and goes on outside.
            i32::from(phase == LoginPhase::Session)
        }
        Ok(other) => {
            eprintln!("pjw pam-adopt: unexpected answer from the daemon: {other:?}");
            i32::from(phase == LoginPhase::Session)
        }
        Err(e) => {
            eprintln!("pjw pam-adopt: {user}: {e}; the login goes on outside every job");
            0
        }
    }
}

/// Whether `path` is a socket root owns (not followed if a link): the daemon's, not one a user
/// made to answer for it.
fn roots_socket(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(path)
        .map_err(|e| format!("no daemon at {}: {e}", path.display()))?;
    if !m.file_type().is_socket() || m.uid() != 0 {
        return Err(format!(
            "{} is not root's socket: not asking it",
            path.display()
        ));
    }
    Ok(())
}
