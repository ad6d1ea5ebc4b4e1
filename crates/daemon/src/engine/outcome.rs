//! `outcome`: what memory did to a job, for its owner's `pjw run` (which asks when its command
//! exits) — OOM kills, the limit that applied, the peak, a stall inside its own limit, the
//! governor's last step. A live job is answered from what the engine holds (its OOM count and
//! peak read now, one file each); a job that has just ended from a short memory of recent ends,
//! bounded per user ([`PER_USER`]) and in time ([`KEEP`]), so no user can grow it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use pjw_core::format_size;
use pjw_proto::{ErrorCode, JobOutcome, Response};

use super::{err, Cred, Engine, Job};

/// Recent ends kept per user.
pub(super) const PER_USER: usize = 64;
/// How long an end is kept: long enough for a client to ask after its command exits.
pub(super) const KEEP: Duration = Duration::from_secs(300);

/// Outcomes of recently ended jobs, per owner.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    by_uid: BTreeMap<u32, VecDeque<(Instant, JobOutcome)>>,
}

impl Outcomes {
    /// Keep `o` of a job of `uid`, dropping that user's oldest beyond the bound and every
    /// user's expired ones.
    pub(super) fn add(&mut self, uid: u32, o: JobOutcome, now: Instant) {
        self.by_uid.retain(|_, q| {
            q.retain(|(at, _)| now.duration_since(*at) < KEEP);
            !q.is_empty()
        });
        let q = self.by_uid.entry(uid).or_default();
        // A job id may come again (a manager's id reused): the newer end wins.
        q.retain(|(_, x)| x.job != o.job);
        if q.len() >= PER_USER {
            q.pop_front();
        }
        q.push_back((now, o));
    }

    /// The kept outcome of `job`, and its owner.
    fn get(&self, job: &str, now: Instant) -> Option<(u32, &JobOutcome)> {
        self.by_uid.iter().find_map(|(uid, q)| {
            q.iter()
                .rev()
                .find(|(at, o)| o.job == job && now.duration_since(*at) < KEEP)
                .map(|(_, o)| (*uid, o))
        })
    }

    /// Ends kept in all (for the bound's test).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_uid.values().map(VecDeque::len).sum()
    }
}

impl Engine {
    /// What memory did to `job` so far; `peak` and `ended` as known.
    fn outcome_of(&self, j: &Job, peak: Option<u64>, ended: Option<String>) -> JobOutcome {
        JobOutcome {
            job: j.id.to_string(),
            oom_kills: j.memory.oom_kills,
            mem: j.mem,
            partition: self.mem_limit,
            mem_peak: peak,
            oom_at_partition: self.oom_at_partition(j, j.memory.oom_kills),
            frozen: self.frozen_note(j),
            own_stall_secs: (j.memory.self_stall_ms / 1000).max(0) as u64,
            governor: j.memory.last_step.clone(),
            ended,
        }
    }

    /// What the memory governor's freezes did to job `j` (None: it froze it never): how long
    /// in all, how many times, and why the last time — `frozen 23 s by the memory governor (1
    /// time): it grew …`.
    pub(super) fn frozen_note(&self, j: &Job) -> Option<String> {
        let m = &j.memory;
        if m.freezes == 0 {
            return None;
        }
        let now = match (m.frozen, m.frozen_since_ms) {
            (true, Some(s)) => (self.clock.now_ms() - s).max(0),
            _ => 0,
        };
        let secs = (m.frozen_total_ms + now + 500) / 1000;
        let why = m
            .froze_why
            .as_deref()
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        Some(format!(
            "frozen {secs} s by the memory governor ({} time{}){why}",
            m.freezes,
            if m.freezes == 1 { "" } else { "s" }
        ))
    }

    /// Whether `ooms` kills in job `j` came from the job partition though it has a limit of
    /// its own: its own was never reached (the acceptance run: a `-m 1800M` job killed when
    /// another filled the partition was told it hit its own limit). Where that cannot be told,
    /// its own limit, as before.
    pub(super) fn oom_at_partition(&self, j: &Job, ooms: u64) -> bool {
        ooms > 0 && j.mem.is_some() && self.driver.oom_at_own_limit(&j.cgroup) == Some(false)
    }

    /// Where `ooms` kills in job `j` happened, for the log and its end: its own limit, or the
    /// node's job partition.
    pub(super) fn oom_limit_text(&self, j: &Job, ooms: u64) -> String {
        match j.mem {
            Some(m) if !self.oom_at_partition(j, ooms) => {
                format!("its own {} limit", format_size(m))
            }
            Some(m) => format!(
                "the node's {} job partition (its own {} limit was not reached)",
                format_size(self.mem_limit),
                format_size(m)
            ),
            None => format!("the node's {} job partition", format_size(self.mem_limit)),
        }
    }

    /// Answer `outcome` for `job`: its owner or root only.
    pub(super) fn outcome(&mut self, cred: Cred, job: &str) -> Response {
        let live = self
            .jobs
            .values()
            .find(|j| j.id.as_str() == job)
            .map(|j| j.seq);
        if let Some(seq) = live {
            let j = &self.jobs[&seq];
            if cred.uid != 0 && cred.uid != j.uid {
                return err(
                    ErrorCode::Denied,
                    format!("job {job} belongs to {}", j.user),
                );
            }
            // Its command has exited (that is when a client asks): count its OOM kills now.
            let (ooms, peak) = match j.started {
                Some(_) => (
                    Some(self.driver.oom_kills(&j.cgroup)),
                    self.driver.memory_peak(&j.cgroup).ok(),
                ),
                None => (None, None),
            };
            if let Some(n) = ooms {
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.memory.oom_kills = j.memory.oom_kills.max(n);
                }
            }
            // Still ending: why pjw ended it, where it did (its time limit, its lease).
            let j = &self.jobs[&seq];
            let ended = j.end.reason.as_ref().map(crate::profile::EndReason::text);
            return Response::Outcome(self.outcome_of(j, peak, ended));
        }
        match self.outcomes.get(job, Instant::now()) {
            Some((uid, o)) if cred.uid == 0 || cred.uid == uid => Response::Outcome(o.clone()),
            Some(_) => err(ErrorCode::Denied, format!("job {job} is not yours")),
            None => err(
                ErrorCode::NotFound,
                format!(
                    "no job {job} on this node (or it ended more than {} s ago)",
                    KEEP.as_secs()
                ),
            ),
        }
    }

    /// What memory did to `job`, to follow its end reason (each part after `; `): its OOM kills
    /// (how many, at which limit, its peak) and a long stall inside its own limit. Logged when
    /// there were OOM kills.
    pub(super) fn memory_end_note(&self, job: &Job, ooms: u64, peak: Option<u64>) -> String {
        let mut out = String::new();
        if ooms > 0 {
            let limit = self.oom_limit_text(job, ooms);
            let peak = peak
                .map(|p| format!(" (peak {})", format_size(p)))
                .unwrap_or_default();
            tracing::warn!(job = %job.id, user = %job.user, oom_kills = ooms, "job had processes killed for memory at {limit}{peak}");
            out.push_str(&format!("; {ooms} process(es) OOM-killed at {limit}{peak}"));
        }
        if let Some(f) = self.frozen_note(job) {
            out.push_str(&format!("; {f}"));
        }
        let stalled = job.memory.self_stall_ms / 1000;
        if stalled > 0 {
            out.push_str(&format!(
                "; stalled on memory inside its own {} limit for {stalled} s",
                job.mem.map(format_size).unwrap_or_default()
            ));
        }
        out
    }

    /// Keep what memory did to `job`, which ends now with `reason`.
    pub(super) fn remember_outcome(
        &mut self,
        job: &Job,
        ooms: u64,
        peak: Option<u64>,
        reason: &str,
    ) {
        let mut o = self.outcome_of(job, peak, Some(reason.to_string()));
        o.oom_kills = o.oom_kills.max(ooms);
        self.outcomes.add(job.uid, o, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(job: &str) -> JobOutcome {
        JobOutcome {
            job: job.into(),
            ..JobOutcome::default()
        }
    }

    #[test]
    fn recent_ends_are_bounded_per_user_and_in_time() {
        let mut k = Outcomes::default();
        let t0 = Instant::now();
        for i in 0..(PER_USER + 10) {
            k.add(1000, o(&format!("a{i}")), t0);
        }
        k.add(1001, o("b"), t0);
        assert_eq!(
            k.len(),
            PER_USER + 1,
            "one user's flood keeps only its own last ends"
        );
        assert!(k.get("a0", t0).is_none(), "the oldest went first");
        assert_eq!(k.get("b", t0).map(|(u, _)| u), Some(1001));
        assert_eq!(k.get("a73", t0).map(|(u, _)| u), Some(1000));
        // Expired ends are dropped at the next add and never answered.
        let later = t0 + KEEP + Duration::from_secs(1);
        assert!(k.get("b", later).is_none());
        k.add(1002, o("c"), later);
        assert_eq!(k.len(), 1);
    }
}
