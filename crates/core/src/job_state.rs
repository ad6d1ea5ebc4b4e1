//! The words for where a job is and how it ended, typed from where they are made to where they
//! are shown: [`EndClass`] (how a job ended), [`SampleState`] (what a running job was doing when
//! sampled) and [`StateFilter`] (what `pjw report --state` asks for).
//!
//! Each has one text form, used alike on the wire (serde), in the stores' text columns and on
//! the command line; [`FromStr`] turns text back into the type with a [`CoreError::UnknownWord`]
//! that lists the valid words, so an unknown word is an error, never a guess.
//!
//! ```
//! use pjw_core::job_state::{EndClass, StateFilter};
//! assert_eq!("oom".parse::<StateFilter>(), Ok(StateFilter::Ended(EndClass::Oom)));
//! let e = "done".parse::<StateFilter>().unwrap_err();
//! assert!(e.to_string().starts_with("unknown state \"done\" (one of queued, running, completed"));
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::CoreError;

/// The error for `text`, which is none of `words`.
fn unknown(what: &'static str, text: &str, words: &[&str]) -> CoreError {
    CoreError::UnknownWord {
        what,
        text: text.to_string(),
        valid: words.join(", "),
    }
}

/// `Display` and `FromStr` for a type of words: its `as_str` is its text, its `ALL` every value;
/// text that is none of them is [`CoreError::UnknownWord`] naming `what` and listing the words.
macro_rules! words {
    ($t:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $t {
            type Err = CoreError;
            fn from_str(s: &str) -> Result<$t, CoreError> {
                <$t>::ALL
                    .into_iter()
                    .find(|c| c.as_str() == s)
                    .ok_or_else(|| unknown($what, s, &<$t>::ALL.map(<$t>::as_str)))
            }
        }
    };
}

/// How a job ended, in one word (`completed`, `killed`, `oom`, `expired`, `failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndClass {
    /// Its processes ended on their own.
    Completed,
    /// Killed by pjw or a user (`pjw kill`).
    Killed,
    /// Processes OOM-killed inside its memory limit (or at the partition limit).
    Oom,
    /// Expired in the queue, never ran.
    Expired,
    /// Ran to its time limit (`--time`) and was killed there.
    Timeout,
    /// Never ran or ended abnormally: start failed, client left the queue, start interrupted.
    Failed,
}

impl EndClass {
    /// All of them, in the order help and errors list them.
    pub const ALL: [EndClass; 6] = [
        EndClass::Completed,
        EndClass::Killed,
        EndClass::Oom,
        EndClass::Expired,
        EndClass::Timeout,
        EndClass::Failed,
    ];

    /// The word (the stored text, the wire's text).
    pub fn as_str(self) -> &'static str {
        match self {
            EndClass::Completed => "completed",
            EndClass::Killed => "killed",
            EndClass::Oom => "oom",
            EndClass::Expired => "expired",
            EndClass::Timeout => "timeout",
            EndClass::Failed => "failed",
        }
    }
}

words!(EndClass, "end class");

/// What a running job was doing when sampled (`running`, `backfill`, `frozen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleState {
    /// A primary on its own CPUs.
    Running,
    /// A backfiller on borrowed CPUs (idle class).
    Backfill,
    /// Frozen: preempted, suspended or frozen by the memory governor.
    Frozen,
}

impl SampleState {
    /// All of them.
    pub const ALL: [SampleState; 3] = [
        SampleState::Running,
        SampleState::Backfill,
        SampleState::Frozen,
    ];

    /// The word (the stored text, the wire's text).
    pub fn as_str(self) -> &'static str {
        match self {
            SampleState::Running => "running",
            SampleState::Backfill => "backfill",
            SampleState::Frozen => "frozen",
        }
    }
}

words!(SampleState, "sample state");

/// Which jobs `pjw report --state` wants: live ones queued or running, or those that ended one
/// way. Its text is one word: `queued`, `running`, or an [`EndClass`] word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateFilter {
    /// Waiting in the node queue.
    Queued,
    /// Started and not ended (also starting, backfilling, frozen or ending).
    Running,
    /// Ended this way.
    Ended(EndClass),
}

impl StateFilter {
    /// All of them, in the order help and errors list them.
    pub const ALL: [StateFilter; 8] = [
        StateFilter::Queued,
        StateFilter::Running,
        StateFilter::Ended(EndClass::Completed),
        StateFilter::Ended(EndClass::Killed),
        StateFilter::Ended(EndClass::Oom),
        StateFilter::Ended(EndClass::Expired),
        StateFilter::Ended(EndClass::Timeout),
        StateFilter::Ended(EndClass::Failed),
    ];

    /// The word.
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::Queued => "queued",
            StateFilter::Running => "running",
            StateFilter::Ended(c) => c.as_str(),
        }
    }

    /// Whether it asks for jobs still live (queued or running).
    pub fn is_live(self) -> bool {
        !matches!(self, StateFilter::Ended(_))
    }
}

words!(StateFilter, "state");

impl Serialize for StateFilter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StateFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StateFilter, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_round_trips_as_text_and_as_json() {
        for c in EndClass::ALL {
            assert_eq!(c.as_str().parse::<EndClass>(), Ok(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<EndClass>(&json).unwrap(), c);
        }
        for s in SampleState::ALL {
            assert_eq!(s.as_str().parse::<SampleState>(), Ok(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<SampleState>(&json).unwrap(), s);
        }
        for f in StateFilter::ALL {
            assert_eq!(f.as_str().parse::<StateFilter>(), Ok(f));
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
            assert_eq!(serde_json::from_str::<StateFilter>(&json).unwrap(), f);
        }
    }

    #[test]
    fn the_words_are_the_ones_clients_and_stores_already_hold() {
        let words = |v: Vec<&str>| v.join(" ");
        assert_eq!(
            words(EndClass::ALL.map(EndClass::as_str).to_vec()),
            "completed killed oom expired timeout failed"
        );
        assert_eq!(
            words(SampleState::ALL.map(SampleState::as_str).to_vec()),
            "running backfill frozen"
        );
        assert_eq!(
            words(StateFilter::ALL.map(StateFilter::as_str).to_vec()),
            "queued running completed killed oom expired timeout failed"
        );
        assert!(StateFilter::Running.is_live() && StateFilter::Queued.is_live());
        assert!(!StateFilter::Ended(EndClass::Oom).is_live());
    }

    #[test]
    fn an_unknown_word_is_an_error_listing_the_valid_ones() {
        let table: [(CoreError, &str); 3] = [
            (
                "done".parse::<StateFilter>().unwrap_err(),
                "unknown state \"done\" (one of queued, running, completed, killed, oom, expired, timeout, failed)",
            ),
            (
                "Completed".parse::<EndClass>().unwrap_err(),
                "unknown end class \"Completed\" (one of completed, killed, oom, expired, timeout, failed)",
            ),
            (
                "".parse::<SampleState>().unwrap_err(),
                "unknown sample state \"\" (one of running, backfill, frozen)",
            ),
        ];
        for (err, want) in table {
            assert_eq!(err.to_string(), want);
        }
        // The same error through serde, on one line.
        let e = serde_json::from_str::<StateFilter>("\"done\"").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown state \"done\" (one of queued"),
            "{e}"
        );
        assert!(serde_json::from_str::<EndClass>("\"ended\"").is_err());
        assert!(serde_json::from_str::<StateFilter>("7").is_err());
    }
}
