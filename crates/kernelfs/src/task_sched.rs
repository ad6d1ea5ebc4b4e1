//! `/proc/PID/task/TID/sched` (kernels with `CONFIG_SCHED_DEBUG`, Debian's among them): the
//! scheduler's debug view of one thread. pjw reads one line, `se.nr_migrations`: how many times
//! the thread moved from one CPU to another since it started.
//!
//! The first line holds the thread's name (`comm (TID, #threads: N)`), which the thread sets
//! itself and which may hold a newline: only lines after the `----` rule under it are read, and
//! a key must fill its whole field name (a 15-byte name cannot spell one out).
//!
//! ```
//! let text = "w (7, #threads: 2)\n-------\nse.nr_migrations    :    42\nnr_switches : 9\n";
//! assert_eq!(pjw_kernelfs::task_sched::migrations(text).unwrap(), Some(42));
//! ```

use crate::error::{bad_value, ParseError};

const FORMAT: &str = "/proc/PID/task/TID/sched";

/// `se.nr_migrations`, or None where the file has no such line (another kernel's layout).
pub fn migrations(text: &str) -> Result<Option<u64>, ParseError> {
    let body = match text.find("\n-") {
        Some(i) => &text[i + 1..],
        None => return Ok(None),
    };
    for line in body.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() == "se.nr_migrations" {
            let v = value.trim();
            return v
                .parse()
                .map(Some)
                .map_err(|_| bad_value(FORMAT, "se.nr_migrations", v));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Linux 6.x, trimmed.
    const REAL: &str = "cat (9169, #threads: 1)\n\
-------------------------------------------------------------------\n\
se.exec_start                                :       4380094.888521\n\
se.sum_exec_runtime                          :             0.373829\n\
se.nr_migrations                             :                    3\n\
nr_switches                                  :                    1\n";

    #[test]
    fn table() {
        let cases: &[(&str, String, Option<u64>)] = &[
            ("real", REAL.to_string(), Some(3)),
            (
                "no such line",
                REAL.replace("se.nr_migrations", "se.other"),
                None,
            ),
            ("no rule", "se.nr_migrations : 5\n".to_string(), None),
            (
                "a name forging a line is above the rule",
                REAL.replace("cat (", "x\nse.nr_migrations : 99\n("),
                Some(3),
            ),
        ];
        for (desc, text, want) in cases {
            assert_eq!(migrations(text).unwrap(), *want, "{desc}");
        }
        assert!(migrations(&REAL.replace(":                    3", ": x")).is_err());
    }
}
