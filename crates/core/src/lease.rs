//! Leases of the jobs a workload manager registers (docs/decisions.md (cc)).
//!
//! A registered job holds its CPUs until its manager's Epilog says `end`. When that never comes
//! (slurmd killed, a node rebooted mid-job, an execd lost) pjw asks the manager whether the job
//! still runs on this node, and a lease bounds what cannot be asked. This module is the pure
//! rule; the daemon asks and acts.
//!
//! - A [`Word`] is what one ask got: the job runs here, the job is gone (a definite answer: the
//!   manager knows it ended, or runs it elsewhere, or does not know it at all), or no answer
//!   (the manager did not answer, answered an error, or said something pjw cannot read).
//! - The lease is renewed whenever pjw learns the job is alive: the manager says it runs here,
//!   or the job has a process at a check. It runs out `lease` after its last renewal.
//! - A job ends only on a `Gone` word or an expired lease. `NoAnswer` never ends a job and never
//!   renews it: a controller that is down for longer than the lease ends only the jobs that
//!   also had no process all that time (a held job whose Epilog never came).
//!
//! ```
//! use pjw_core::lease::{judge, Verdict, Word};
//! // The manager says the job is gone: it ends at once.
//! let v = judge(0, 5_000, Some(60_000), false, Some(&Word::Gone("COMPLETED".into())));
//! assert_eq!(v, Verdict::End(pjw_core::lease::Why::Gone("COMPLETED".into())));
//! // No answer within the lease: kept, not renewed.
//! let v = judge(0, 5_000, Some(60_000), false, Some(&Word::NoAnswer("timeout".into())));
//! assert_eq!(v, Verdict::Keep { renewed_ms: 0 });
//! ```

/// What one ask of the manager got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// The job runs on this node (its state, e.g. `RUNNING`).
    Running(String),
    /// Definitely not running here any more: why (its state, or "unknown to slurm").
    Gone(String),
    /// No answer that can be trusted: why (timeout, an error, output pjw cannot read).
    NoAnswer(String),
}

impl Word {
    /// A short text for status and logs.
    pub fn text(&self) -> String {
        match self {
            Word::Running(s) => format!("runs here ({s})"),
            Word::Gone(s) => format!("gone ({s})"),
            Word::NoAnswer(s) => format!("no answer: {s}"),
        }
    }
}

/// Why a job ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The manager says it is gone from this node.
    Gone(String),
    /// Its lease ran out: no word that it runs and no process since `renewed_ms`.
    Expired { renewed_ms: i64 },
}

/// What to do with a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It goes on; its lease was last renewed at `renewed_ms`.
    Keep {
        renewed_ms: i64,
    },
    End(Why),
}

/// Judge one registered job at `now_ms` (pure). `renewed_ms`: its lease's last renewal;
/// `lease_ms`: how long a lease lasts (None: no lease: only the manager's word ends it);
/// `has_procs`: the job has a process now; `word`: the manager's latest answer, if one came
/// since the last judgement.
pub fn judge(
    renewed_ms: i64,
    now_ms: i64,
    lease_ms: Option<u64>,
    has_procs: bool,
    word: Option<&Word>,
) -> Verdict {
    if let Some(Word::Gone(why)) = word {
        return Verdict::End(Why::Gone(why.clone()));
    }
    if has_procs || matches!(word, Some(Word::Running(_))) {
        return Verdict::Keep { renewed_ms: now_ms };
    }
    match lease_ms {
        Some(l) if now_ms.saturating_sub(renewed_ms) >= l.min(i64::MAX as u64) as i64 => {
            Verdict::End(Why::Expired { renewed_ms })
        }
        _ => Verdict::Keep { renewed_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let run = Word::Running("RUNNING".into());
        let gone = Word::Gone("COMPLETED".into());
        let none = Word::NoAnswer("timeout".into());
        let keep = |r| Verdict::Keep { renewed_ms: r };
        let expired = |r| Verdict::End(Why::Expired { renewed_ms: r });
        // (description, renewed, now, lease, has processes, word, verdict)
        type Case<'a> = (
            &'a str,
            i64,
            i64,
            Option<u64>,
            bool,
            Option<&'a Word>,
            Verdict,
        );
        let cases: &[Case] = &[
            (
                "runs here: renewed",
                0,
                10,
                Some(5),
                false,
                Some(&run),
                keep(10),
            ),
            (
                "gone: ends, lease or not",
                0,
                1,
                Some(100),
                true,
                Some(&gone),
                Verdict::End(Why::Gone("COMPLETED".into())),
            ),
            (
                "gone without a lease",
                0,
                1,
                None,
                false,
                Some(&gone),
                Verdict::End(Why::Gone("COMPLETED".into())),
            ),
            (
                "no answer, lease left: kept, not renewed",
                0,
                50,
                Some(100),
                false,
                Some(&none),
                keep(0),
            ),
            (
                "no answer, processes: renewed",
                0,
                500,
                Some(100),
                true,
                Some(&none),
                keep(500),
            ),
            (
                "no answer, no process, lease out: ends",
                0,
                100,
                Some(100),
                false,
                Some(&none),
                expired(0),
            ),
            (
                "not asked, no process, lease out: ends",
                20,
                200,
                Some(100),
                false,
                None,
                expired(20),
            ),
            (
                "not asked, no process, no lease: kept",
                20,
                9_999_999,
                None,
                false,
                None,
                keep(20),
            ),
            (
                "not asked, processes: renewed",
                20,
                200,
                Some(100),
                true,
                None,
                keep(200),
            ),
            (
                "a huge lease never overflows",
                0,
                i64::MAX - 1,
                Some(u64::MAX),
                false,
                None,
                keep(0),
            ),
        ];
        for (desc, renewed, now, lease, procs, word, want) in cases {
            assert_eq!(
                &judge(*renewed, *now, *lease, *procs, *word),
                want,
                "{desc}"
            );
        }
    }
}
