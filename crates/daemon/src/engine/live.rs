//! `status` requests and the live passes that keep their figures fresh (see [`crate::live`]):
//! the engine decides when a pass is due and keeps its readings; the reads run on a blocking
//! thread.

use std::collections::HashMap;
use std::time::Instant;

use pjw_proto::Response;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::{Engine, Event, Job};
use crate::live::{self, Reader, Reading};

/// A job's figures as `status` tells them: CPU time, memory, tasks, and when they were read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Figures {
    pub(super) ts_ms: i64,
    pub(super) cpu_usec: Option<u64>,
    pub(super) mem_bytes: Option<u64>,
    pub(super) tasks: Option<u64>,
}

/// The live passes' state.
#[derive(Default)]
pub(super) struct Live {
    /// The reader (None: no live passes; `status` answers from the samples).
    reader: Option<Reader>,
    /// Each started job's latest reading (wall time of the read, ms).
    figures: HashMap<i64, Figures>,
    /// When the last pass ended.
    done_at: Option<Instant>,
    /// A pass is running.
    in_flight: bool,
    /// The running pass took longer than [`live::WAIT`]: requests are not held for it.
    late: bool,
    /// Requests waiting for the running pass.
    waiting: Vec<oneshot::Sender<Response>>,
    /// Passes done (for tests and logs).
    passes: u64,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("reader", &self.reader.is_some())
            .field("jobs", &self.figures.len())
            .field("in_flight", &self.in_flight)
            .field("passes", &self.passes)
            .finish()
    }
}

impl Engine {
    /// Read live figures with `reader` (on a blocking thread) for `status` requests.
    pub fn set_live_reader(&mut self, reader: Reader) {
        self.live.reader = Some(reader);
    }

    /// A `status` request: answered now when the last pass is fresh (or there is nothing to
    /// read), else after the pass it starts or joins.
    pub(super) fn status_request(&mut self, reply: oneshot::Sender<Response>) {
        let fresh = self.live.done_at.is_some_and(|t| t.elapsed() < live::FRESH);
        let nothing = !self.jobs.values().any(|j| j.started.is_some());
        if self.live.reader.is_none() || fresh || nothing || self.live.late {
            let _ = reply.send(Response::Status(self.status()));
            return;
        }
        self.live.waiting.push(reply);
        if !self.live.in_flight {
            self.start_live_pass();
        }
    }

    fn start_live_pass(&mut self) {
        let Some(reader) = self.live.reader.clone() else {
            return;
        };
        let jobs: Vec<(i64, String)> = self
            .jobs
            .values()
            .filter(|j| j.started.is_some())
            .map(|j| (j.seq, j.cgroup.clone()))
            .collect();
        self.live.in_flight = true;
        self.live.late = false;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut task = tokio::task::spawn_blocking(move || live::pass(&reader, jobs));
            let readings = match tokio::time::timeout(live::WAIT, &mut task).await {
                Ok(r) => r,
                Err(_) => {
                    let _ = tx.send(Event::LiveLate);
                    task.await
                }
            };
            let readings = readings.unwrap_or_else(|e| {
                warn!(error = %e, "live figures: the reading thread failed");
                Vec::new()
            });
            let _ = tx.send(Event::LiveRead { readings });
        });
    }

    /// A pass ended: keep its readings (of jobs still started), answer who waited.
    pub(super) fn live_read(&mut self, readings: Vec<(i64, Reading)>) {
        let now_ms = self.clock.now_ms();
        let n = readings.len();
        self.live.figures.clear();
        for (seq, r) in readings {
            // A job whose CPU time could not be read (its cgroup going away) keeps its sample's
            // figures: `sampled_ms` must be the time of the `cpu_usec` shown.
            if r.cpu_usec.is_none() || self.jobs.get(&seq).is_none_or(|j| j.started.is_none()) {
                continue;
            }
            let age = r.at.elapsed().as_millis() as i64;
            self.live.figures.insert(
                seq,
                Figures {
                    ts_ms: now_ms - age,
                    cpu_usec: r.cpu_usec,
                    mem_bytes: r.mem_bytes,
                    tasks: r.tasks,
                },
            );
        }
        self.live.done_at = Some(Instant::now());
        self.live.in_flight = false;
        if self.live.late {
            warn!(
                jobs = n,
                "live figures: a pass took longer than {} s",
                live::WAIT.as_secs()
            );
        }
        self.live.late = false;
        self.live.passes += 1;
        debug!(jobs = n, "live figures read");
        self.answer_waiting();
    }

    /// The running pass is late: answer who waited from what the engine has.
    pub(super) fn live_late(&mut self) {
        self.live.late = true;
        self.answer_waiting();
    }

    fn answer_waiting(&mut self) {
        if self.live.waiting.is_empty() {
            return;
        }
        let status = self.status();
        for w in self.live.waiting.drain(..) {
            let _ = w.send(Response::Status(status.clone()));
        }
    }

    /// Job `j`'s freshest figures: the live pass's or the sampler's last sample, whichever is
    /// newer; None while it has neither (queued, or not read yet).
    pub(super) fn figures(&self, j: &Job) -> Option<Figures> {
        j.started?;
        let sampled = j.prof.last.as_ref().map(|s| Figures {
            ts_ms: s.ts_ms,
            cpu_usec: s.cpu_user_usec.map(|u| u + s.cpu_system_usec.unwrap_or(0)),
            mem_bytes: s.mem_current,
            tasks: s.threads.map(u64::from),
        });
        let live = self.live.figures.get(&j.seq).copied();
        match (live, sampled) {
            (Some(l), Some(s)) if s.ts_ms > l.ts_ms => Some(s),
            (Some(l), _) => Some(l),
            (None, s) => s,
        }
    }

    /// Live passes done so far.
    #[cfg(test)]
    pub(crate) fn live_passes(&self) -> u64 {
        self.live.passes
    }
}
