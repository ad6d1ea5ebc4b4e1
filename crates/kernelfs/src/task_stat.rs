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

use crate::error::ParseError;
use crate::proc_stat::StatLine;

const FORMAT: &str = "/proc/PID/task/TID/stat";

/// The fields the thread balancer uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    /// Field 1.
    pub tid: Tid,
    /// Field 2: the thread's name (any bytes the thread set, up to 15: show it escaped).
    pub comm: String,
    /// Field 3: R, S, D, Z, T, t, X, I, …
    pub state: char,
    /// Fields 14 and 15, in clock ticks.
    pub utime: u64,
    /// Field 15, in clock ticks.
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
    let l = StatLine::split(FORMAT, text)?;
    Ok(TaskStat {
        tid: Tid(l.id_num("tid")?),
        comm: l.comm.to_string(),
        state: l.state()?,
        utime: l.num(14, "utime")?,
        stime: l.num(15, "stime")?,
        processor: l.num(39, "processor")?,
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
        assert_eq!(parse(&cases[1].1).unwrap().comm, "a) b (c");
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
