//! Logins: an ssh session (a PAM login wired to `pjw pam-adopt` through `pam_exec`) joins its
//! user's job, as pam_slurm_adopt puts it in the job's extern step.
//!
//! Only root asks (pam_exec runs as root in sshd's privileged process). The account phase only
//! says whether the login may go on; the session phase moves the session's process into the
//! job, and everything the session starts — the shell and its children — inherits that. The
//! process moved is the caller's parent as `/proc` says (pam_exec's caller: sshd's privileged
//! process, which forks the session's processes after the session stack ran), never a pid from
//! the request. Which job: [`pjw_core::login::decide`] (the newest running job of the user;
//! none: `[adopt] login_without_job`). A process already inside a job is never moved out of
//! it. See docs/decisions.md (bb) and docs/wlm/adoption.md.

use pjw_core::login::{self, LoginJob, Verdict, WithoutJob};
use pjw_core::sched::Phase;
use pjw_proto::{ErrorCode, LoginPhase, LoginRequest, Response};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::{err, Cred, Engine, Who};

impl Engine {
    pub(super) fn login(
        &mut self,
        cred: Cred,
        who: &Who,
        req: LoginRequest,
        reply: oneshot::Sender<Response>,
    ) {
        let _ = reply.send(self.login_answer(cred, who, &req));
    }

    fn login_answer(&mut self, cred: Cred, who: &Who, req: &LoginRequest) -> Response {
        if cred.uid != 0 {
            warn!(
                uid = cred.uid,
                pid = cred.pid,
                "a login request from a user other than root refused"
            );
            return err(
                ErrorCode::Denied,
                "only root asks for logins (pam_exec in the PAM stack runs `pjw pam-adopt` as root)",
            );
        }
        let user = pjw_core::text::printable(&req.user, 64).into_owned();
        let Some((uid, _)) = who.named else {
            return err(ErrorCode::Invalid, format!("no user {user} on this node"));
        };
        let now_ms = self.clock.now_ms();
        let jobs: Vec<LoginJob> = self
            .jobs
            .values()
            .map(|j| LoginJob {
                key: j.seq,
                uid: j.uid,
                // Recovered jobs count from their recovery; ties go to the later submitted.
                started_ms: j
                    .started
                    .map_or(i64::MIN, |s| now_ms - s.elapsed().as_millis() as i64),
                runnable: j.started.is_some()
                    && !j.end.ending
                    && !j.memory.frozen
                    && matches!(j.phase, Phase::Primary | Phase::Backfill),
            })
            .collect();
        let without = self.cfg.login_without_job;
        match (login::decide(uid, &jobs, without), req.phase) {
            (Verdict::Root, _) => Response::Done {
                message: "root: never adopted, never refused".into(),
            },
            (Verdict::Refuse, phase) => {
                info!(user = %user, uid, phase = ?phase, "login refused: no running job");
                err(
                    ErrorCode::Denied,
                    format!(
                        "{user} has no running job on this node (adopt.login_without_job = \"{}\")",
                        WithoutJob::Refuse.as_str()
                    ),
                )
            }
            (Verdict::Outside, _) => Response::Done {
                message: format!(
                    "{user} has no running job on this node: the session stays outside every job"
                ),
            },
            (Verdict::Join { key, of }, LoginPhase::Account) => Response::Done {
                message: format!(
                    "{user} may log in: the session joins job {} (the newest of {of})",
                    self.jobs[&key].id
                ),
            },
            (Verdict::Join { key, of }, LoginPhase::Session) => {
                self.join_session(cred, key, of, &user)
            }
        }
    }

    /// Move the session's process (the caller's parent) into job `key`.
    fn join_session(&mut self, cred: Cred, key: i64, of: usize, user: &str) -> Response {
        let Some((pid, _start)) = crate::caller::parent(&self.cfg.proc_root, cred.pid) else {
            return err(
                ErrorCode::Invalid,
                "the caller has no parent to move (pam_exec must run `pjw pam-adopt` itself, not through a shell that exits)",
            );
        };
        if pid == std::process::id() {
            return err(ErrorCode::Invalid, "the daemon is no session");
        }
        let inside = match self.job_of_caller(pid) {
            Ok(s) => s,
            Err((code, message)) => return err(code, message),
        };
        let j = &self.jobs[&key];
        match inside {
            Some(s) if s == key => {
                return Response::Done {
                    message: format!("the session is in job {} already", j.id),
                }
            }
            Some(s) => {
                let other = &self.jobs[&s];
                warn!(job = %other.id, pid, user = %user, "a login from inside a job stays in it");
                return err(
                    ErrorCode::Denied,
                    format!("the session's process is inside job {}, and a process inside a job never leaves it", other.id),
                );
            }
            None => {}
        }
        match self.join_job(j, pid) {
            Ok(()) => {
                let threads = crate::caller::threads(&self.cfg.proc_root, pid);
                self.procs.adopt(key, pid, threads);
                self.procs.moved(pid, crate::procs::monotonic_ns());
                info!(job = %j.id, user = %user, pid, cpus = %j.cpus, jobs_of_user = of, "login joined job");
                Response::Done {
                    message: format!(
                        "the session joined job {} (the newest of {of} on cpus {})",
                        j.id, j.cpus
                    ),
                }
            }
            Err(e) => {
                warn!(job = %j.id, pid, error = %e, "cannot move a login into its job");
                err(
                    ErrorCode::Internal,
                    format!("cannot move the session into job {}: {e}", j.id),
                )
            }
        }
    }
}
