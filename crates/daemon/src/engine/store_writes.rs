//! Every store write the engine makes, on one path: a failed write is logged (job, op, error)
//! and counted in `store_write_errors`, and memory and store are kept consistent.
//!
//! A write that records what already happened in the kernel (started, moved, frozen, ended) is
//! never undone: memory keeps the truth, the job's row is marked dirty and written again after
//! later events (a timer makes one within a second) until the store takes it. A write that
//! records a request nothing has acted on yet (a new job, a priority, a suspension, a start
//! before its cgroups exist) is tried twice and then the request is refused with a clear error.
//! docs/decisions.md ("Failed store writes") says why.

use std::time::Duration;

use pjw_store::{JobSummary, StoreError};
use tracing::{debug, warn};

use super::{role_of, Engine, Event};
use crate::store_port::StorePort;

/// What a failed write means for the transition it records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnFail {
    /// It happened already: memory keeps it and the row is written again later.
    Rewrite,
    /// Nothing acted on it yet: tried once more, then the caller refuses the request.
    Refuse,
    /// A figure the caller writes again on its own later (the time a limit counted): logged
    /// and counted, nothing marked to write again.
    Later,
}

/// A write about a job no longer in memory that the store did not take yet.
#[derive(Debug)]
pub(super) enum Unrecorded {
    /// The job ended; with its summary when it has one.
    End {
        seq: i64,
        ended_ms: i64,
        reason: String,
        summary: Option<Box<JobSummary>>,
    },
    /// The exit status of an ended job's main process.
    ExitStatus { seq: i64, status: i32 },
}

/// When rows the store did not take are written again if no other event comes first.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Engine {
    /// Run one write for job `seq` (0 for none yet). A failure is logged and counted; with
    /// [`OnFail::Rewrite`] the job's row is marked for rewriting, with [`OnFail::Refuse`] the
    /// write is tried once more first and the error is the caller's to refuse with.
    pub(super) fn store_write<T>(
        &mut self,
        seq: i64,
        op: &'static str,
        on_fail: OnFail,
        mut write: impl FnMut(&mut dyn StorePort) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut res = write(self.store.as_mut());
        if res.is_err() && on_fail == OnFail::Refuse {
            res = write(self.store.as_mut());
        }
        if let Err(e) = &res {
            self.metrics.store_write_error();
            let job = self.jobs.get(&seq).map(|j| j.id.to_string());
            warn!(
                seq,
                job = job.as_deref().unwrap_or(""),
                op,
                error = %e,
                then = match on_fail {
                    OnFail::Rewrite => "kept in memory, written again later",
                    OnFail::Refuse => "request refused",
                    OnFail::Later => "written again later by its caller",
                },
                "store write failed"
            );
            if on_fail == OnFail::Rewrite {
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.store_dirty = true;
                }
                self.arm_store_retry();
            }
        }
        res
    }

    /// Record that job `seq` ended (and its summary); what the store does not take is kept
    /// and written again later.
    pub(super) fn store_end(
        &mut self,
        seq: i64,
        ended_ms: i64,
        reason: &str,
        summary: Option<JobSummary>,
    ) -> bool {
        let ok = match &summary {
            Some(sum) => self
                .store_write(seq, "finish_job", OnFail::Rewrite, |s| {
                    s.finish_job(ended_ms, reason, sum)
                })
                .is_ok(),
            None => false,
        };
        // Without its summary the job is at least marked ended (the summary is then lost).
        let ok = ok
            || self
                .store_write(seq, "set_ended", OnFail::Rewrite, |s| {
                    s.set_ended(seq, ended_ms, reason)
                })
                .is_ok();
        if !ok {
            self.unrecorded.push(Unrecorded::End {
                seq,
                ended_ms,
                reason: reason.to_string(),
                summary: summary.map(Box::new),
            });
        }
        ok
    }

    /// Record the exit status of an ended job's main process; kept for later if refused.
    pub(super) fn store_exit_status(&mut self, seq: i64, status: i32) {
        if self
            .store_write(seq, "set_exit_status", OnFail::Rewrite, |s| {
                s.set_exit_status(seq, status)
            })
            .is_err()
        {
            self.unrecorded.push(Unrecorded::ExitStatus { seq, status });
        }
    }

    /// Write again what the store did not take: dirty jobs' rows (role, CPUs, priority,
    /// running, starter details) and the ends and exit statuses of jobs gone from memory.
    /// Runs after every event; cheap when nothing is pending.
    pub(super) fn flush_store(&mut self) {
        if !self.store_backlog {
            return;
        }
        self.store_backlog = false;
        let dirty: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| j.store_dirty)
            .map(|j| j.seq)
            .collect();
        for seq in dirty {
            let Some(j) = self.jobs.get_mut(&seq) else {
                continue;
            };
            j.store_dirty = false;
            let (role, cpus, mems, priority) = (role_of(j.phase), j.cpus, j.mems, j.req.priority);
            let started = j.started.is_some();
            let starter = (j.starter.client_uid != j.uid
                || j.starter.wlm.is_some()
                || j.starter.tmp_size.is_some())
            .then(|| j.starter_record());
            let res = self.store_write(seq, "rewrite", OnFail::Rewrite, |s| {
                s.set_role(seq, role, &cpus, &mems)?;
                s.set_priority(seq, priority)?;
                if started {
                    s.set_running(seq)?;
                }
                if let Some(st) = &starter {
                    s.set_starter(seq, st)?;
                }
                Ok(())
            });
            if res.is_ok() {
                debug!(seq, "job's row written again");
            }
        }
        for u in std::mem::take(&mut self.unrecorded) {
            match u {
                Unrecorded::End {
                    seq,
                    ended_ms,
                    reason,
                    summary,
                } => {
                    if self.store_end(seq, ended_ms, &reason, summary.map(|s| *s)) {
                        if let Some(s) = &self.shipper {
                            s.wake();
                        }
                    }
                }
                Unrecorded::ExitStatus { seq, status } => self.store_exit_status(seq, status),
            }
        }
    }

    /// Make sure pending rows are written again soon, even if no other event comes.
    fn arm_store_retry(&mut self) {
        self.store_backlog = true;
        if self.store_retry_armed {
            return;
        }
        self.store_retry_armed = true;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETRY_AFTER).await;
            let _ = tx.send(Event::StoreRetry);
        });
    }

    /// The retry timer fired (the write itself happens after the event, in `flush_store`).
    pub(super) fn store_retry(&mut self) {
        self.store_retry_armed = false;
    }

    /// Writes the engine could not make, for tests and metrics.
    pub fn store_backlog(&self) -> usize {
        self.jobs.values().filter(|j| j.store_dirty).count() + self.unrecorded.len()
    }
}
