//! `/proc/PID/task/TID/schedstat`: three numbers (Documentation/scheduler/sched-stats.rst):
//! time spent on a CPU (ns), time spent waiting on a runqueue (ns), and the number of
//! timeslices run on this CPU.
//!
//! ```
//! let s = pjw_kernelfs::schedstat::parse("1500000000 2000 17\n").unwrap();
//! assert_eq!((s.run_ns, s.wait_ns, s.timeslices), (1_500_000_000, 2000, 17));
//! ```

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "/proc/PID/task/TID/schedstat";

/// One thread's scheduler statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStat {
    /// Time spent running, in nanoseconds.
    pub run_ns: u64,
    /// Time spent runnable but waiting for a CPU, in nanoseconds.
    pub wait_ns: u64,
    /// Number of timeslices run.
    pub timeslices: u64,
}

/// Parse the line.
pub fn parse(text: &str) -> Result<SchedStat, ParseError> {
    let line = text.trim();
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() != 3 {
        return Err(bad_line(FORMAT, 0, line));
    }
    let num = |i: usize, name: &str| -> Result<u64, ParseError> {
        fields[i]
            .parse()
            .map_err(|_| bad_value(FORMAT, name, fields[i]))
    };
    Ok(SchedStat {
        run_ns: num(0, "run")?,
        wait_ns: num(1, "wait")?,
        timeslices: num(2, "timeslices")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, &str, (u64, u64, u64))] = &[
            (
                "typical",
                "1234567890 98765 432\n",
                (1234567890, 98765, 432),
            ),
            ("never ran", "0 0 0\n", (0, 0, 0)),
            ("large", "18446744073709551615 1 2", (u64::MAX, 1, 2)),
        ];
        for (desc, text, (run, wait, slices)) in cases {
            let s = parse(text).unwrap_or_else(|e| panic!("{desc}: {e}"));
            assert_eq!(
                (s.run_ns, s.wait_ns, s.timeslices),
                (*run, *wait, *slices),
                "{desc}"
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "1 2", "1 2 3 4", "1 x 3", "-1 2 3"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let e = parse("1 x 3").unwrap_err();
        assert!(e.to_string().contains("wait"), "{e}");
    }
}
