//! Validation of a `run` request before it is admitted: a shape that makes sense on this node,
//! text bounded, memory and tmpfs that fit, the rights some asks need, and placement.

use pjw_core::sched;
use pjw_proto::{ErrorCode, Placement, RunRequest};

use super::{refuse, Cred, Engine, Refusal, Who};

/// The least `--mem` a job may ask for: a process and the libraries it maps need more than a
/// few pages charged as they run.
pub(super) const MIN_MEM: u64 = 1 << 20;

impl Engine {
    pub(super) fn validate(&self, cred: &Cred, who: &Who, req: &RunRequest) -> Result<(), Refusal> {
        self.validate_shape(req)?;
        self.validate_gpus(req.gpus)?;
        self.io_of(cred.uid, req)?;
        validate_text(req)?;
        self.validate_fit(req)?;
        self.validate_rights(cred, who, req)?;
        self.validate_placement(req)
    }

    /// CPUs, memory and tasks that make sense on this node.
    fn validate_shape(&self, req: &RunRequest) -> Result<(), Refusal> {
        let total = self.pool.len();
        if req.cpus == 0 {
            return Err(refuse(ErrorCode::Invalid, "--cpus must be at least 1"));
        }
        if req.cpus as usize > total {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "--cpus {} is more than this node has for jobs ({total} cpus: {})",
                    req.cpus, self.pool
                ),
            ));
        }
        if req.mem == Some(0) {
            return Err(refuse(ErrorCode::Invalid, "--mem must be more than 0"));
        }
        // Below a page or so no process runs at all: the kernel kills it at its first page.
        if let Some(m) = req.mem.filter(|m| *m < MIN_MEM) {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "--mem {} is less than the least a job may ask for ({}): no process runs in it",
                    pjw_core::format_size(m),
                    pjw_core::format_size(MIN_MEM)
                ),
            ));
        }
        if let Some(t) = req.time_limit_s {
            if pjw_core::time_limit::TimeLimit::from_secs(t).is_none() {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "--time of {t} s is not between 1 s and a year ({} s)",
                        pjw_core::time_limit::MAX_SECS
                    ),
                ));
            }
        }
        if let Some(t) = req.tasks {
            if t == 0 || !req.cpus.is_multiple_of(t) {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!("--ntasks {t} does not divide the job's {} cpus", req.cpus),
                ));
            }
        }
        Ok(())
    }

    /// Memory and a job tmpfs that can fit.
    fn validate_fit(&self, req: &RunRequest) -> Result<(), Refusal> {
        if let Some(m) = req.mem {
            if m > self.mem_limit {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "--mem {} can never fit: the job partition of this node is {}",
                        pjw_core::format_size(m),
                        pjw_core::format_size(self.mem_limit)
                    ),
                ));
            }
        }
        if let Some(t) = req.tmp.or(self.cfg.tmp).filter(|t| *t > 0) {
            // A tmpfs of any size mounts; its pages come out of the node's memory. At most the
            // node's maximum (default: the job partition), and with --mem, the job's memory.
            let cap = self.cfg.tmp_max.unwrap_or(self.mem_limit);
            let cap = req.mem.map_or(cap, |m| cap.min(m));
            if t > cap {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "--tmp {} is more than this job may have ({}: {})",
                        pjw_core::format_size(t),
                        if req
                            .mem
                            .is_some_and(|m| m < self.cfg.tmp_max.unwrap_or(self.mem_limit))
                        {
                            "its --mem"
                        } else {
                            "job.tmp_max, by default the job partition"
                        },
                        pjw_core::format_size(cap)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What only some callers may ask: a priority, the whole node, more queued jobs.
    fn validate_rights(&self, cred: &Cred, who: &Who, req: &RunRequest) -> Result<(), Refusal> {
        if let Some(p) = req.priority {
            self.check_priority(cred, who, p)?;
        }
        if req.exclusive
            && self.cfg.exclusive == crate::config::ExclusiveRight::Privileged
            && !self.privileged(cred, who)
        {
            return Err(refuse(
                ErrorCode::Denied,
                "--exclusive (the whole node) is for root, workload-manager jobs and the admin group on this node (exclusive = \"privileged\")",
            ));
        }
        if cred.uid != 0 {
            let queued = self
                .jobs
                .values()
                .filter(|j| j.starter.client_uid == cred.uid && j.started.is_none())
                .count();
            if queued >= self.cfg.max_queued_per_user {
                return Err(refuse(
                    ErrorCode::Denied,
                    format!(
                        "you have {queued} jobs waiting, this node's limit per user (max_queued_per_user)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Backfill-only placement that this node allows.
    fn validate_placement(&self, req: &RunRequest) -> Result<(), Refusal> {
        if req.placement == Placement::BackfillOnly && !self.cfg.backfill {
            return Err(refuse(
                ErrorCode::Invalid,
                "backfill is disabled on this node (backfill = false)",
            ));
        }
        if req.placement == Placement::BackfillOnly && req.exclusive {
            return Err(refuse(
                ErrorCode::Invalid,
                "--exclusive and --backfill-only exclude each other",
            ));
        }
        Ok(())
    }

    pub(super) fn check_priority(&self, cred: &Cred, who: &Who, p: u8) -> Result<(), Refusal> {
        if !(sched::MIN_PRIORITY..=sched::MAX_PRIORITY).contains(&p) {
            return Err(refuse(
                ErrorCode::Invalid,
                format!("priority {p} is not in 1-16"),
            ));
        }
        if p > self.cfg.max_priority && !self.privileged(cred, who) {
            return Err(refuse(
                ErrorCode::Denied,
                format!(
                    "priority {p} is above this node's maximum for users ({})",
                    self.cfg.max_priority
                ),
            ));
        }
        Ok(())
    }

    /// Root or a member of the admin group (`[profile] admin_group`): may ask for priorities
    /// above `max_priority` and, by default, for `--exclusive`.
    pub(super) fn privileged(&self, cred: &Cred, who: &Who) -> bool {
        cred.uid == 0 || who.admin
    }
}

/// What a client sends is shown to others and logged: bounded, no control characters.
fn validate_text(req: &RunRequest) -> Result<(), Refusal> {
    if req.argv.len() > pjw_proto::MAX_ARGS {
        return Err(refuse(ErrorCode::Invalid, "too many arguments"));
    }
    if let Some(w) = &req.wlm {
        pjw_core::text::check_label(w)
            .map_err(|why| refuse(ErrorCode::Invalid, format!("wlm label {why}")))?;
    }
    if let Some(n) = &req.name {
        if n.len() > 256 {
            return Err(refuse(
                ErrorCode::Invalid,
                "--name is longer than 256 bytes",
            ));
        }
    }
    Ok(())
}
