//! `/proc/PID/stat`: one line of space-separated fields (see proc(5)).
//!
//! Field 2, `comm`, is in parentheses and may itself contain spaces and parentheses
//! (`(my (odd) cmd)`), so it runs from the first `(` to the LAST `)`.

use crate::error::{bad_value, ParseError};

const FORMAT: &str = "/proc/PID/stat";

/// The fields pjw uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 1.
    pub pid: u32,
    /// Field 2, without the parentheses.
    pub comm: String,
    /// Field 3: R, S, D, Z, T, t, X, I, …
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 14: time in user mode, in clock ticks.
    pub utime: u64,
    /// Field 15: time in the kernel, in clock ticks.
    pub stime: u64,
    /// Field 20.
    pub num_threads: u64,
    /// Field 22: start time after boot, in clock ticks.
    pub starttime: u64,
    /// Field 24: resident set size, in pages.
    pub rss_pages: u64,
}

/// The fields of one stat line (`/proc/PID/stat` or `/proc/PID/task/TID/stat`, one format),
/// split around `comm`; shared by this module and [`crate::task_stat`].
pub(crate) struct StatLine<'a> {
    format: &'static str,
    text: &'a str,
    /// Field 1, as text.
    pub id: &'a str,
    /// Field 2, without the parentheses.
    pub comm: &'a str,
    /// Fields 3 onwards.
    rest: Vec<&'a str>,
}

impl<'a> StatLine<'a> {
    pub fn split(format: &'static str, text: &'a str) -> Result<StatLine<'a>, ParseError> {
        let text = text.trim_end();
        let bad = |field: &str| bad_value(format, field, text);
        let open = text.find('(').ok_or_else(|| bad("comm"))?;
        let close = text.rfind(')').ok_or_else(|| bad("comm"))?;
        if close < open {
            return Err(bad("comm"));
        }
        Ok(StatLine {
            format,
            text,
            id: text[..open].trim(),
            comm: &text[open + 1..close],
            rest: text[close + 1..].split_whitespace().collect(),
        })
    }

    /// Field `n` (1-based, as proc(5) numbers them; `n` ≥ 3).
    pub fn field(&self, n: usize, name: &str) -> Result<&'a str, ParseError> {
        self.rest
            .get(n - 3)
            .copied()
            .ok_or_else(|| bad_value(self.format, name, self.text))
    }

    /// Field `n` as a number of type `T`.
    pub fn num<T: std::str::FromStr>(&self, n: usize, name: &str) -> Result<T, ParseError> {
        let s = self.field(n, name)?;
        s.parse().map_err(|_| bad_value(self.format, name, s))
    }

    /// Field 1 as a number.
    pub fn id_num<T: std::str::FromStr>(&self, name: &str) -> Result<T, ParseError> {
        self.id
            .parse()
            .map_err(|_| bad_value(self.format, name, self.text))
    }

    /// Field 3: one character.
    pub fn state(&self) -> Result<char, ParseError> {
        let s = self.field(3, "state")?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(bad_value(self.format, "state", s)),
        }
    }
}

/// Parse the line.
pub fn parse(text: &str) -> Result<ProcStat, ParseError> {
    let l = StatLine::split(FORMAT, text)?;
    Ok(ProcStat {
        pid: l.id_num("pid")?,
        comm: l.comm.to_string(),
        state: l.state()?,
        ppid: l.num(4, "ppid")?,
        utime: l.num(14, "utime")?,
        stime: l.num(15, "stime")?,
        num_threads: l.num(20, "num_threads")?,
        starttime: l.num(22, "starttime")?,
        rss_pages: l.num(24, "rss")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLEEP: &str = "4242 (sleep) S 4200 4242 4200 0 -1 4194560 98 0 0 0 3 5 0 0 20 0 1 0 987654 5578752 130 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn parses_plain_line() {
        let s = parse(SLEEP).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "sleep");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 4200);
        assert_eq!(s.utime, 3);
        assert_eq!(s.stime, 5);
        assert_eq!(s.num_threads, 1);
        assert_eq!(s.starttime, 987654);
        assert_eq!(s.rss_pages, 130);
    }

    #[test]
    fn comm_with_spaces_and_parentheses() {
        let line = SLEEP.replace("(sleep)", "(my (odd)) cmd)");
        let s = parse(&line).unwrap();
        assert_eq!(s.comm, "my (odd)) cmd");
        assert_eq!(s.state, 'S');
        assert_eq!(s.starttime, 987654);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("12 (x) S 1 2").is_err());
        assert!(parse("12 x S 1").is_err());
        let e = parse(&SLEEP.replace(" 987654 ", " nope ")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
