//! CPU time of a cgroup: v2 `cpu.stat` (`usage_usec`, `user_usec`, `system_usec`, …; present
//! in every cgroup2 directory, even without the cpu controller) and the v1 single-number files
//! `cpuacct.usage_user` / `cpuacct.usage_sys` (nanoseconds).
//!
//! ```text
//! usage_usec 10071546885
//! user_usec 8367373731
//! system_usec 1704173154
//! nr_periods 0
//! ```

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "cpu.stat";

/// CPU time in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// Time in user mode.
    pub user_usec: u64,
    /// Time in the kernel.
    pub system_usec: u64,
}

/// Parse v2 `cpu.stat`. `user_usec` and `system_usec` are required; other keys are ignored.
pub fn parse(text: &str) -> Result<CpuStat, ParseError> {
    let (mut user, mut system) = (None, None);
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut w = line.split_whitespace();
        let (Some(k), Some(v), None) = (w.next(), w.next(), w.next()) else {
            return Err(bad_line(FORMAT, i, line));
        };
        let slot = match k {
            "user_usec" => &mut user,
            "system_usec" => &mut system,
            _ => continue,
        };
        *slot = Some(v.parse::<u64>().map_err(|_| bad_value(FORMAT, k, v))?);
    }
    Ok(CpuStat {
        user_usec: user.ok_or(ParseError::MissingField {
            format: FORMAT,
            field: "user_usec",
        })?,
        system_usec: system.ok_or(ParseError::MissingField {
            format: FORMAT,
            field: "system_usec",
        })?,
    })
}

/// Parse a file that holds one unsigned number (`cpuacct.usage_user`, `memory.peak`,
/// `memory.max_usage_in_bytes`, `pids.current`, `memory.swap.current`, …).
pub fn parse_u64(format: &'static str, text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse().map_err(|_| bad_value(format, "value", t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v2_cpu_stat() {
        let s = parse(
            "usage_usec 10071546885\nuser_usec 8367373731\nsystem_usec 1704173154\nnice_usec 0\n\
             core_sched.force_idle_usec 0\nnr_periods 0\n",
        )
        .unwrap();
        assert_eq!(
            s,
            CpuStat {
                user_usec: 8367373731,
                system_usec: 1704173154
            }
        );
    }

    #[test]
    fn rejects_garbage() {
        let table = [
            "",
            "usage_usec 5\n",
            "user_usec 1\n",
            "user_usec x\nsystem_usec 1\n",
            "user_usec 1 2\nsystem_usec 1\n",
            "user_usec -1\nsystem_usec 1\n",
        ];
        for t in table {
            assert!(parse(t).is_err(), "{t:?}");
        }
    }

    #[test]
    fn single_numbers() {
        assert_eq!(parse_u64("memory.peak", "314572800\n").unwrap(), 314572800);
        assert_eq!(parse_u64("pids.current", "26").unwrap(), 26);
        let e = parse_u64("memory.peak", "max\n").unwrap_err();
        assert!(e.to_string().contains("max"), "{e}");
        assert!(parse_u64("x", "").is_err());
    }
}
