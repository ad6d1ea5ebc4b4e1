//! How a job ended: the typed [`EndReason`] with its stored text, the class derived from it,
//! and the exit status from a wait status.
//!
//! The engine builds the reason where the job ends (a kill, a manager's end, the lease, an
//! expiry, a failed start, recovery) and carries it to [`end_class`] and to the store, which
//! gets its [`EndReason::text`] (with what memory did appended); nothing formats a reason and
//! parses it back. [`EndReason::parse`] reads a stored text, older versions' included.

use pjw_core::time_limit::{LimitSource, TimeLimit};
use pjw_store::EndClass;

/// Why a job ended, as the daemon records it (typed; its stored text is [`EndReason::text`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EndReason {
    /// Its main process exited, or its cgroup emptied.
    #[default]
    Exited,
    /// Killed by a user (`pjw kill`) or by pjw, named.
    KilledBy(String),
    /// Ended by the workload manager that registered it (its epilog: `pjw job end`), named.
    EndedBy(String),
    /// Withdrawn from the queue after `queue_ttl`.
    Expired(String),
    /// Its processes were gone when the daemon came back.
    EndedWhileDown,
    /// It never started: the start failed, the client left the queue, … (the text says).
    NotStarted(String),
    /// A registered job pjw ended for its lease: its manager said it is gone, or the lease ran
    /// out.
    Lease(LeaseEnd),
    /// pjw killed it when it had run as long as its time limit: the one it asked for
    /// (`--time`) or the node's default.
    TimeLimit(TimeLimit, LimitSource),
}

/// Why a registered job's lease ended it (the text after `lease: `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Its manager (named) said it is gone, in this state (`COMPLETED`, `FAILED`, …).
    Gone { manager: String, state: String },
    /// No word from its manager that it runs, and no process, for `silent_s` seconds: pjw
    /// killed what was left.
    Expired { manager: String, silent_s: i64 },
    /// A stored text of no other form (read back, never made by the engine).
    Other(String),
}

impl LeaseEnd {
    const EXPIRED: (&'static str, &'static str, &'static str) = (
        "expired (no word from ",
        " that it runs, and no process, for ",
        " s)",
    );

    /// The text after `lease: `.
    pub fn text(&self) -> String {
        let (a, b, c) = LeaseEnd::EXPIRED;
        match self {
            LeaseEnd::Gone { manager, state } => format!("{manager} says {state}"),
            LeaseEnd::Expired { manager, silent_s } => format!("{a}{manager}{b}{silent_s}{c}"),
            LeaseEnd::Other(t) => t.clone(),
        }
    }

    /// From the text after `lease: ` (stored texts only).
    fn parse(text: &str) -> LeaseEnd {
        let (a, b, c) = LeaseEnd::EXPIRED;
        let expired = text
            .strip_prefix(a)
            .and_then(|t| t.strip_suffix(c))
            .and_then(|t| t.rsplit_once(b))
            .and_then(|(m, secs)| Some((m, secs.parse().ok()?)));
        if let Some((manager, silent_s)) = expired {
            return LeaseEnd::Expired {
                manager: manager.to_string(),
                silent_s,
            };
        }
        match text.split_once(" says ") {
            Some((manager, state)) => LeaseEnd::Gone {
                manager: manager.to_string(),
                state: state.to_string(),
            },
            None => LeaseEnd::Other(text.to_string()),
        }
    }
}

/// The stored text of [`EndReason::TimeLimit`], around the limit.
const TIME_LIMIT: (&str, &str) = ("killed at its time limit (", ")");
/// After the limit, inside the brackets, when the limit was the node's default.
const NODE_DEFAULT: &str = ", the node's default";

impl EndReason {
    /// The typed reason of a stored text (texts of older versions included); what memory did
    /// to the job, appended after "; ", is not part of it.
    pub fn parse(text: &str) -> EndReason {
        let text = text.split("; ").next().unwrap_or(text);
        let limit = text
            .strip_prefix(TIME_LIMIT.0)
            .and_then(|t| t.strip_suffix(TIME_LIMIT.1))
            .map(|t| match t.strip_suffix(NODE_DEFAULT) {
                Some(t) => (t, LimitSource::NodeDefault),
                None => (t, LimitSource::Asked),
            })
            .and_then(|(t, source)| Some((TimeLimit::parse(t).ok()?, source)));
        if let Some((limit, source)) = limit {
            EndReason::TimeLimit(limit, source)
        } else if text == "exited" {
            EndReason::Exited
        } else if let Some(by) = text.strip_prefix("killed by ") {
            EndReason::KilledBy(by.to_string())
        } else if let Some(by) = text.strip_prefix("ended by ") {
            EndReason::EndedBy(by.to_string())
        } else if text.starts_with("expired") {
            EndReason::Expired(text.to_string())
        } else if let Some(why) = text.strip_prefix("lease: ") {
            EndReason::Lease(LeaseEnd::parse(why))
        } else if text == "ended while daemon was down" {
            EndReason::EndedWhileDown
        } else {
            EndReason::NotStarted(text.to_string())
        }
    }

    /// The stored text.
    pub fn text(&self) -> String {
        match self {
            EndReason::Exited => "exited".into(),
            EndReason::KilledBy(by) => format!("killed by {by}"),
            EndReason::EndedBy(by) => format!("ended by {by}"),
            EndReason::Expired(t) | EndReason::NotStarted(t) => t.clone(),
            EndReason::EndedWhileDown => "ended while daemon was down".into(),
            EndReason::Lease(why) => format!("lease: {}", why.text()),
            EndReason::TimeLimit(t, source) => {
                let from = match source {
                    LimitSource::Asked => "",
                    LimitSource::NodeDefault => NODE_DEFAULT,
                };
                format!("{}{t}{from}{}", TIME_LIMIT.0, TIME_LIMIT.1)
            }
        }
    }
}

/// How a job ended, in one word (pure). `reason`: why, as its source said; `killed`: a user or
/// pjw killed it; `ooms`: processes the kernel OOM-killed in it. A job its workload manager
/// ended (its epilog) ended normally: its exit status, when known, says whether it failed.
pub fn end_class(
    reason: &EndReason,
    killed: bool,
    ooms: u64,
    exit_status: Option<i32>,
) -> EndClass {
    let by_status = |s: Option<i32>| match s {
        Some(s) if s != 0 => EndClass::Failed,
        _ => EndClass::Completed,
    };
    match reason {
        EndReason::TimeLimit(..) => EndClass::Timeout,
        EndReason::KilledBy(_) => EndClass::Killed,
        _ if killed => EndClass::Killed,
        _ if ooms > 0 => EndClass::Oom,
        EndReason::Expired(_) => EndClass::Expired,
        EndReason::Exited | EndReason::EndedWhileDown | EndReason::EndedBy(_) => {
            by_status(exit_status)
        }
        EndReason::NotStarted(_) => EndClass::Failed,
        // Its lease ran out: pjw killed what was left. Its manager said it ended: as an
        // Epilog's end.
        EndReason::Lease(LeaseEnd::Expired { .. }) => EndClass::Killed,
        EndReason::Lease(LeaseEnd::Gone { .. } | LeaseEnd::Other(_)) => by_status(exit_status),
    }
}

/// The shell-style exit status from the kernel's wait status (`exit_code` of a proc-connector
/// exit event): the exit code, or 128 + the signal that killed it (pure).
pub fn exit_status(wait_status: u32) -> i32 {
    let sig = wait_status & 0x7f;
    if sig != 0 {
        128 + sig as i32
    } else {
        ((wait_status >> 8) & 0xff) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job killed at its time limit is a timeout, killed flag or not, with what memory did
    /// appended after its text; a job that merely mentions a limit in a user's kill is not.
    #[test]
    fn a_time_limit_end_is_a_timeout_and_keeps_its_text() {
        let limit = TimeLimit::parse("90s").unwrap();
        let end = EndReason::TimeLimit(limit, LimitSource::Asked);
        assert_eq!(end.text(), "killed at its time limit (0:01:30)");
        assert_eq!(EndReason::parse(&end.text()), end);
        assert_eq!(
            EndReason::parse("killed at its time limit (1-00:00:00); 2 processes oom-killed"),
            EndReason::TimeLimit(TimeLimit::parse("1d").unwrap(), LimitSource::Asked)
        );
        // The node's default says so, and reads back as such.
        let node = EndReason::TimeLimit(limit, LimitSource::NodeDefault);
        assert_eq!(
            node.text(),
            "killed at its time limit (0:01:30, the node's default)"
        );
        assert_eq!(EndReason::parse(&node.text()), node);
        assert_eq!(end_class(&node, true, 0, None), EndClass::Timeout);
        assert_eq!(end_class(&end, true, 0, Some(137)), EndClass::Timeout);
        assert_eq!(end_class(&end, false, 3, None), EndClass::Timeout);
        let by_user = EndReason::parse("killed by alice (time limit (0:01:30))");
        assert_eq!(end_class(&by_user, true, 0, None), EndClass::Killed);
        assert_eq!(
            EndReason::parse("killed at its time limit (soon)"),
            EndReason::NotStarted("killed at its time limit (soon)".into()),
            "a text whose limit does not parse is not a time limit"
        );
    }
}
