//! Bytes a cgroup read from and wrote to block devices, summed over devices: v2 `io.stat`.
//!
//! ```text
//! 8:0 rbytes=90112 wbytes=4096 rios=3 wios=1 dbytes=0 dios=0
//! ```

use crate::error::{bad_line, bad_value, ParseError};

/// Bytes read and written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoBytes {
    /// Bytes read.
    pub rbytes: u64,
    /// Bytes written.
    pub wbytes: u64,
}

/// Parse v2 `io.stat` (empty when the cgroup did no I/O).
pub fn parse(text: &str) -> Result<IoBytes, ParseError> {
    const FORMAT: &str = "io.stat";
    let mut out = IoBytes::default();
    for (i, line) in text.lines().enumerate() {
        let mut w = line.split_whitespace();
        let Some(dev) = w.next() else { continue };
        if !dev.contains(':') {
            return Err(bad_line(FORMAT, i, line));
        }
        for kv in w {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad_line(FORMAT, i, line))?;
            let slot = match k {
                "rbytes" => &mut out.rbytes,
                "wbytes" => &mut out.wbytes,
                _ => continue,
            };
            *slot += v.parse::<u64>().map_err(|_| bad_value(FORMAT, k, v))?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_sums_devices() {
        let s = parse(
            "8:0 rbytes=90112 wbytes=4096 rios=3 wios=1 dbytes=0 dios=0\n\
             253:1 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n",
        )
        .unwrap();
        assert_eq!(
            s,
            IoBytes {
                rbytes: 90122,
                wbytes: 4116
            }
        );
        assert_eq!(parse("").unwrap(), IoBytes::default());
    }

    #[test]
    fn rejects_garbage() {
        for t in ["rbytes=1\n", "8:0 rbytes\n", "8:0 rbytes=-1\n"] {
            assert!(parse(t).is_err(), "{t:?}");
        }
    }
}
