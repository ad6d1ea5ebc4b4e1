//! A job's time limit (`pjw run --time`): how long it may run, parsed from what HPC users
//! type (Slurm's forms and plain suffixes), shown as Slurm shows it.

use std::fmt;

use crate::CoreError;

/// The longest limit a job may ask for: a year. Longer is a mistake, not a plan.
pub const MAX_SECS: u64 = 366 * 24 * 3600;

/// How long a job may run, in whole seconds (1 s to [`MAX_SECS`]). What counts is the daemon's
/// to say (pjw: time on CPUs of its own, not queued, frozen or backfilling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeLimit(u64);

impl TimeLimit {
    /// A limit of `secs` seconds; None outside 1 s to [`MAX_SECS`].
    pub fn from_secs(secs: u64) -> Option<TimeLimit> {
        (1..=MAX_SECS).contains(&secs).then_some(TimeLimit(secs))
    }

    pub fn secs(self) -> u64 {
        self.0
    }

    pub fn millis(self) -> u64 {
        self.0 * 1000
    }

    /// Slurm's forms — `MIN`, `MIN:SEC`, `H:MIN:SEC`, `D-H`, `D-H:MIN`, `D-H:MIN:SEC` (a plain
    /// number is minutes, as in `sbatch --time`) — or a number with a unit: `90s`, `15m`,
    /// `2h`, `1d`.
    pub fn parse(text: &str) -> Result<TimeLimit, CoreError> {
        let bad = |reason: &str| CoreError::BadTimeLimit {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let t = text.trim();
        let secs = if let Some((num, unit)) = split_unit(t) {
            let n = number(num).ok_or_else(|| bad("not a whole number"))?;
            n.checked_mul(unit).ok_or_else(|| bad("too long"))?
        } else {
            slurm_form(t).ok_or_else(|| {
                bad("expected MIN, MIN:SEC, H:MIN:SEC, D-H[:MIN[:SEC]] or a number with s, m, h or d")
            })?
        };
        if secs == 0 {
            return Err(bad("a job needs at least a second"));
        }
        TimeLimit::from_secs(secs).ok_or_else(|| bad("longer than a year"))
    }
}

/// `90s` → ("90", 1); None when the text does not end in a unit letter.
fn split_unit(t: &str) -> Option<(&str, u64)> {
    let unit = match t.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    Some((&t[..t.len() - 1], unit))
}

/// Digits only (no sign, no spaces), at most a year's worth of any unit.
fn number(t: &str) -> Option<u64> {
    if t.is_empty() || t.len() > 12 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// Slurm's `--time` forms, in seconds.
fn slurm_form(t: &str) -> Option<u64> {
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (Some(number(d)?), rest),
        None => (None, t),
    };
    let parts: Vec<u64> = rest.split(':').map(number).collect::<Option<_>>()?;
    let (h, m, s) = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        (_, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        _ => return None,
    };
    days.unwrap_or(0)
        .checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m.checked_mul(60)?)?
        .checked_add(s)
}

/// Where a job's limit came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LimitSource {
    /// The job asked for it (`pjw run --time`).
    #[default]
    Asked,
    /// The node gave it to a job that asked for none (`[job] default_time`, or `max_time`
    /// where the node sets no default: Slurm's DefaultTime and MaxTime).
    NodeDefault,
}

impl LimitSource {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitSource::Asked => "asked",
            LimitSource::NodeDefault => "node-default",
        }
    }

    /// From the stored word; None for any other.
    pub fn parse(text: &str) -> Option<LimitSource> {
        match text {
            "asked" => Some(LimitSource::Asked),
            "node-default" => Some(LimitSource::NodeDefault),
            _ => None,
        }
    }
}

/// The node's rules for limits (`[job] default_time`, `max_time`): a job that asks for none
/// gets the default (the maximum where no default is set); one that asks for more than the
/// maximum is refused, unless an administrator asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeLimits {
    pub default: Option<TimeLimit>,
    pub max: Option<TimeLimit>,
}

/// A job asked for more than the node's maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AboveMax {
    pub asked: TimeLimit,
    pub max: TimeLimit,
}

impl NodeLimits {
    /// The limit a job gets (pure): what it `asked`, held to the maximum unless the asker is
    /// `privileged`, or the node's default; None: no limit.
    pub fn limit_for(
        self,
        asked: Option<TimeLimit>,
        privileged: bool,
    ) -> Result<Option<(TimeLimit, LimitSource)>, AboveMax> {
        match (asked, self.max) {
            (Some(asked), Some(max)) if asked > max && !privileged => Err(AboveMax { asked, max }),
            (Some(asked), _) => Ok(Some((asked, LimitSource::Asked))),
            (None, _) => Ok(self
                .default
                .or(self.max)
                .map(|d| (d, LimitSource::NodeDefault))),
        }
    }
}

impl fmt::Display for TimeLimit {
    /// `H:MM:SS`, with `D-` in front from a day on (as Slurm shows limits).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (d, rest) = (self.0 / 86_400, self.0 % 86_400);
        let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
        if d > 0 {
            write!(f, "{d}-{h:02}:{m:02}:{s:02}")
        } else {
            write!(f, "{h}:{m:02}:{s:02}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(t: &str) -> u64 {
        TimeLimit::parse(t)
            .unwrap_or_else(|e| panic!("{t}: {e}"))
            .secs()
    }

    #[test]
    fn slurm_forms_and_units() {
        assert_eq!(secs("30"), 1800, "a plain number is minutes, as in sbatch");
        assert_eq!(secs("5:30"), 330);
        assert_eq!(secs("1:30:00"), 5400);
        assert_eq!(secs("2-12"), 2 * 86_400 + 12 * 3600);
        assert_eq!(secs("1-0:30"), 86_400 + 1800);
        assert_eq!(secs("1-00:00:01"), 86_401);
        assert_eq!(secs("90s"), 90);
        assert_eq!(secs("15m"), 900);
        assert_eq!(secs("2h"), 7200);
        assert_eq!(secs("1d"), 86_400);
        assert_eq!(secs(" 3s "), 3);
    }

    #[test]
    fn nonsense_zero_and_too_long_are_refused() {
        for t in [
            "",
            "0",
            "0s",
            "-5",
            "+5",
            "1.5h",
            "1:2:3:4",
            "1-",
            "-1",
            "a",
            "5 m",
            "1-2-3",
            "99999999999999",
            "367d",
            "9999999999999s",
            "1:-1",
        ] {
            assert!(TimeLimit::parse(t).is_err(), "{t:?} was taken");
        }
        assert_eq!(secs("366d"), MAX_SECS);
    }

    #[test]
    fn the_node_default_fills_in_and_its_maximum_holds_users() {
        let l = |t: &str| TimeLimit::parse(t).unwrap();
        let none = NodeLimits::default();
        assert_eq!(none.limit_for(None, false), Ok(None));
        assert_eq!(
            none.limit_for(Some(l("1h")), false),
            Ok(Some((l("1h"), LimitSource::Asked)))
        );
        let node = NodeLimits {
            default: Some(l("2h")),
            max: Some(l("1d")),
        };
        assert_eq!(
            node.limit_for(None, false),
            Ok(Some((l("2h"), LimitSource::NodeDefault)))
        );
        assert_eq!(
            node.limit_for(Some(l("1d")), false),
            Ok(Some((l("1d"), LimitSource::Asked))),
            "the maximum itself may be asked for"
        );
        assert_eq!(
            node.limit_for(Some(l("1-00:00:01")), false),
            Err(AboveMax {
                asked: l("1-00:00:01"),
                max: l("1d")
            })
        );
        assert_eq!(
            node.limit_for(Some(l("2d")), true),
            Ok(Some((l("2d"), LimitSource::Asked))),
            "an administrator may ask for more"
        );
        // No default: the maximum is the default (Slurm's MaxTime).
        let max_only = NodeLimits {
            default: None,
            max: Some(l("4h")),
        };
        assert_eq!(
            max_only.limit_for(None, false),
            Ok(Some((l("4h"), LimitSource::NodeDefault)))
        );
        for s in [LimitSource::Asked, LimitSource::NodeDefault] {
            assert_eq!(LimitSource::parse(s.as_str()), Some(s));
        }
        assert_eq!(LimitSource::parse("user"), None);
    }

    #[test]
    fn shown_as_slurm_shows_it() {
        assert_eq!(TimeLimit::parse("90s").unwrap().to_string(), "0:01:30");
        assert_eq!(
            TimeLimit::parse("10:00:00").unwrap().to_string(),
            "10:00:00"
        );
        assert_eq!(
            TimeLimit::parse("1-2:03:04").unwrap().to_string(),
            "1-02:03:04"
        );
    }
}
