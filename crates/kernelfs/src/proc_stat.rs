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
    /// Fields 14 and 15, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Field 20.
    pub num_threads: u64,
    /// Field 22: start time after boot, in clock ticks.
    pub starttime: u64,
    /// Field 24: resident set size, in pages.
    pub rss_pages: u64,
}

/// Parse the line.
pub fn parse(text: &str) -> Result<ProcStat, ParseError> {
    let text = text.trim_end();
    let bad = |field: &str| bad_value(FORMAT, field, text);
    let open = text.find('(').ok_or_else(|| bad("comm"))?;
    let close = text.rfind(')').ok_or_else(|| bad("comm"))?;
    if close < open {
        return Err(bad("comm"));
    }
    let pid = text[..open].trim().parse().map_err(|_| bad("pid"))?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3.
    let field = |n: usize, name: &str| -> Result<&str, ParseError> {
        rest.get(n - 3).copied().ok_or_else(|| bad(name))
    };
    let num = |n: usize, name: &str| -> Result<u64, ParseError> {
        let s = field(n, name)?;
        s.parse().map_err(|_| bad_value(FORMAT, name, s))
    };
    let state_s = field(3, "state")?;
    let mut chars = state_s.chars();
    let state = match (chars.next(), chars.next()) {
        (Some(c), None) => c,
        _ => return Err(bad_value(FORMAT, "state", state_s)),
    };
    let ppid_s = field(4, "ppid")?;
    Ok(ProcStat {
        pid,
        comm,
        state,
        ppid: ppid_s
            .parse()
            .map_err(|_| bad_value(FORMAT, "ppid", ppid_s))?,
        utime: num(14, "utime")?,
        stime: num(15, "stime")?,
        num_threads: num(20, "num_threads")?,
        starttime: num(22, "starttime")?,
        rss_pages: num(24, "rss")?,
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
