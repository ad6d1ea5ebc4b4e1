//! `/proc/PID/task/TID/stat`: one thread's line, in the format of `/proc/PID/stat` (proc(5)).
//!
//! The thread balancer reads the state, the CPU time (utime + stime, in clock ticks) and field
//! 39, `processor`, the CPU the thread last ran on. Field 2, `comm`, may contain spaces and
//! parentheses, so the fields after it are split from the LAST `)`.
//!
//! ```
//! let line = "77 (a) b (c) R 70 70 70 0 -1 0 0 0 0 0 11 4 0 0 20 0 3 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0";
//! let t = pjw_kernelfs::task_stat::parse(line).unwrap();
//! assert_eq!((t.tid.0, t.state, t.cpu_ticks(), t.processor), (77, 'R', 15, 3));
//! ```

use pjw_core::Tid;

use crate::error::{bad_value, ParseError};

const FORMAT: &str = "/proc/PID/task/TID/stat";

/// The fields the thread balancer uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    /// Field 1.
    pub tid: Tid,
    /// Field 3: R, S, D, Z, T, t, X, I, …
    pub state: char,
    /// Fields 14 and 15, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Field 39: the CPU the thread last ran on.
    pub processor: u32,
}

impl TaskStat {
    /// User plus system time, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }
}

/// Parse the line.
pub fn parse(text: &str) -> Result<TaskStat, ParseError> {
    let text = text.trim_end();
    let bad = |field: &str| bad_value(FORMAT, field, text);
    let open = text.find('(').ok_or_else(|| bad("comm"))?;
    let close = text.rfind(')').ok_or_else(|| bad("comm"))?;
    if close < open {
        return Err(bad("comm"));
    }
    let tid = text[..open].trim().parse().map_err(|_| bad("tid"))?;
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
    let proc_s = field(39, "processor")?;
    Ok(TaskStat {
        tid: Tid(tid),
        state,
        utime: num(14, "utime")?,
        stime: num(15, "stime")?,
        processor: proc_s
            .parse()
            .map_err(|_| bad_value(FORMAT, "processor", proc_s))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real line from a busy thread (Linux 6.x, 52 fields), processor = 1.
    const BUSY: &str = "4243 (worker) R 4200 4242 4200 0 -1 4194368 12 0 0 0 930 70 0 0 20 0 3 0 987660 22609920 402 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 -1 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn table() {
        // (description, line, tid, state, utime, stime, processor)
        let cases: &[(&str, String, u32, char, u64, u64, u32)] = &[
            ("busy thread", BUSY.to_string(), 4243, 'R', 930, 70, 1),
            (
                "comm with spaces and parentheses",
                BUSY.replace("(worker)", "(a) b (c)"),
                4243,
                'R',
                930,
                70,
                1,
            ),
            (
                "comm that looks like fields",
                BUSY.replace("(worker)", "(x) S 1 2 3 (y)"),
                4243,
                'R',
                930,
                70,
                1,
            ),
            (
                "sleeper on cpu 7",
                BUSY.replace(" R ", " S ").replace(" -1 1 0 ", " -1 7 0 "),
                4243,
                'S',
                930,
                70,
                7,
            ),
        ];
        for (desc, line, tid, state, utime, stime, cpu) in cases {
            let t = parse(line).unwrap_or_else(|e| panic!("{desc}: {e}"));
            assert_eq!(t.tid, Tid(*tid), "{desc}");
            assert_eq!(t.state, *state, "{desc}");
            assert_eq!((t.utime, t.stime), (*utime, *stime), "{desc}");
            assert_eq!(t.cpu_ticks(), utime + stime, "{desc}");
            assert_eq!(t.processor, *cpu, "{desc}");
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("12 x R 1").is_err());
        // Too short to have field 39.
        assert!(parse("12 (x) R 1 2 3 4 5 6 7 8 9 10 11 12").is_err());
        let e = parse(&BUSY.replace(" -1 1 0 ", " -1 cpu 0 ")).unwrap_err();
        assert!(e.to_string().contains("processor"), "{e}");
        let e = parse(&BUSY.replace(" 930 ", " x ")).unwrap_err();
        assert!(e.to_string().contains("utime"), "{e}");
        assert!(parse(&BUSY.replace("4243 (", "t (")).is_err());
    }
}
