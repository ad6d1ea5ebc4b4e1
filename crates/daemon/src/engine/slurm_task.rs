//! A Slurm task joining its job before it execs: the request of pjw's SPANK plugin
//! (`packaging/slurm/spank/pjw_spank.c`, from `slurm_spank_task_init_privileged` in the task
//! slurmstepd forked, still root). The rule is [`pjw_core::task_join::judge`]; this reads the
//! kernel's facts about the caller, moves it, and answers with the job's CPUs and the
//! variables the plugin sets in the task (its GPUs; its thread counts for the task's CPUs).

use std::collections::HashSet;
use std::time::Instant;

use pjw_core::adopt::Target;
use pjw_core::task_join::{self, Caller, Join, Place, Refusal};
use pjw_core::{thread_bind, thread_env};
use pjw_proto::{ErrorCode, Response, SlurmTaskRequest};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::{err, Cred, Engine, Job};
use crate::adopt::Seen;

impl Engine {
    /// Join the caller (`cred.pid`) to the job its parent step daemon names, if the rule allows.
    pub(super) fn slurm_task(
        &mut self,
        cred: Cred,
        req: SlurmTaskRequest,
        reply: oneshot::Sender<Response>,
    ) {
        // A user's process is refused before its /proc is read or its request looked at.
        if cred.uid != 0 {
            debug!(
                pid = cred.pid,
                uid = cred.uid,
                "slurm task join refused: not root"
            );
            let r = Refusal::NotRoot { uid: cred.uid };
            let _ = reply.send(err(ErrorCode::Denied, r.message()));
            return;
        }
        if let Some(why) = bad_set(&req.set) {
            let _ = reply.send(err(ErrorCode::Invalid, why));
            return;
        }
        let (parent, step) = self.scanner.parent_step(cred.pid);
        let place = self.place_of(cred.pid);
        let verdict = {
            let names = self.adopting_targets();
            let targets: Vec<Target<'_>> = names
                .iter()
                .map(|(key, ns, id, uid, registered)| Target {
                    key: *key,
                    ns,
                    id,
                    uid: *uid,
                    registered: *registered,
                })
                .collect();
            let caller = Caller {
                uid: cred.uid,
                parent: &parent,
                place,
                run_as: req.uid,
            };
            task_join::judge(&caller, &targets)
        };
        let key = match verdict {
            Join::Join { key } => {
                let Some(j) = self.jobs.get(&key) else { return };
                let t0 = Instant::now();
                if let Err(e) = self.join_job(j, cred.pid) {
                    warn!(job = %j.id, pid = cred.pid, error = %e, "cannot move a slurm task into its job");
                    let _ = reply.send(err(
                        ErrorCode::Internal,
                        format!("cannot move the task into job {}: {e}", j.id),
                    ));
                    return;
                }
                info!(
                    job = %j.id, user = %j.user, cpus = %j.cpus, pid = cred.pid, step = %step,
                    move_us = t0.elapsed().as_micros() as u64, "slurm task joined its job before exec"
                );
                // Its forks and exits count for the job from now on; the adoption scanner
                // need not look at it again.
                self.procs.adopt(key, cred.pid, 1);
                if let Some(start) = self.scanner.start_time(cred.pid) {
                    self.scanner.remember(cred.pid, start, Seen::Settled);
                }
                key
            }
            Join::Already { key } => key,
            Join::Refuse(r) => {
                info!(pid = cred.pid, parent = ?parent, run_as = req.uid, reason = %r.message(), "slurm task join refused");
                let code = match r {
                    Refusal::UnknownJob { .. } => ErrorCode::NotFound,
                    _ => ErrorCode::Denied,
                };
                let _ = reply.send(err(code, r.message()));
                return;
            }
        };
        let Some(j) = self.jobs.get(&key) else { return };
        let _ = reply.send(Response::Started {
            job: j.id.to_string(),
            cpus: j.cpus,
            mems: j.mems,
            backfill: false,
            tmp: None,
            shm: None,
            env: Engine::gpu_env_of(&self.gpus, self.gpus_fenced, j),
            env_defaults: self.task_thread_env(j, &step, &req),
        });
    }

    /// The live jobs that adopt processes, as (key, manager, id, owner, registered by root).
    fn adopting_targets(&self) -> Vec<(i64, String, String, u32, bool)> {
        self.jobs
            .values()
            .filter(|j| j.starter.wlm.is_some() && j.started.is_some() && !j.end.ending)
            .map(|j| {
                let (ns, id) =
                    super::wlm::target_names(j.id.as_str(), j.starter.wlm.as_deref(), j.uid);
                (j.seq, ns, id, j.uid, j.id.namespace().is_some())
            })
            .collect()
    }

    /// Which of this daemon's jobs `pid` is in now (its `/proc/PID/cgroup`). A file that cannot
    /// be read says nothing: the move that follows fails then, or the caller is gone.
    fn place_of(&self, pid: u32) -> Place {
        let path = self.cfg.proc_root.join(pid.to_string()).join("cgroup");
        let Some(lines) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| pjw_kernelfs::proc_cgroup::parse(&t).ok())
        else {
            return Place::Outside;
        };
        match self.driver.job_of(&lines) {
            None => Place::Outside,
            Some(name) => self
                .jobs
                .values()
                .find(|j| j.cgroup == name)
                .map(|j| Place::InJob(j.seq))
                .unwrap_or(Place::InGoneJob),
        }
    }

    /// The thread variables of one task of `step` in job `j` (`[job] thread_env`): counts for
    /// the task's CPUs ([`task_join::task_cpus`]; its cores with `bind = "cores"`), and the
    /// OpenMP places when the job binds and the task has the job's CPUs to itself; less those
    /// the task's environment sets itself (`req.set`, [`thread_env::unset_only`]).
    fn task_thread_env(
        &self,
        j: &Job,
        step: &str,
        req: &SlurmTaskRequest,
    ) -> Vec<(String, String)> {
        if !self.cfg.thread_env {
            return Vec::new();
        }
        let shape = task_join::TaskShape {
            cpus_per_task: req.cpus_per_task,
            tasks: req.tasks,
            job_cpus_per_task: req.job_cpus_per_task,
            job_tasks: req.job_tasks,
        };
        let mode = task_join::task_bind(j.bind.unwrap_or(self.cfg.bind), step, &shape);
        let mut n = task_join::task_cpus(j.cpus.len(), step, &shape);
        if mode == thread_bind::BindMode::Cores {
            n = n.min(thread_bind::slots(self.alloc.topology(), &j.cpus, mode).len());
        }
        let set: HashSet<&str> = req.set.iter().map(String::as_str).collect();
        // A task of its own: its counts are its CPUs' (`Some(1)`), as Slurm's tasks are told
        // apart by Slurm, not by a launcher inside.
        thread_env::task_env(n, Some(1), mode, |k| set.contains(k))
    }
}

/// Why the request's `set` is refused, if it is: too many names, or one that is no variable
/// name (shown escaped, cut short).
fn bad_set(set: &[String]) -> Option<String> {
    use pjw_proto::slurm_task::{valid_env_name, MAX_SET_NAMES};
    if set.len() > MAX_SET_NAMES {
        return Some(format!(
            "set lists {} names; at most {MAX_SET_NAMES}",
            set.len()
        ));
    }
    let bad = set.iter().find(|n| !valid_env_name(n))?;
    let shown: String = bad.escape_debug().take(80).collect();
    Some(format!("set names \"{shown}\", not a variable name"))
}
