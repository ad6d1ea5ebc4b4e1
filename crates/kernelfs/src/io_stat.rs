//! Bytes a cgroup read from and wrote to block devices, summed over devices: v2 `io.stat` and
//! the v1 blkio files (`blkio.throttle.io_service_bytes`, `blkio.io_service_bytes`).
//!
//! ```text
//! 8:0 rbytes=90112 wbytes=4096 rios=3 wios=1 dbytes=0 dios=0        (v2 io.stat)
//!
//! 8:0 Read 90112                                                    (v1 blkio)
//! 8:0 Write 4096
//! 8:0 Total 94208
//! Total 94208
//! ```

use crate::error::{bad_line, bad_value, ParseError};

/// Bytes read and written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoBytes {
    pub rbytes: u64,
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

/// Parse a v1 blkio bytes file: `MAJ:MIN Op N` lines (Read, Write, Sync, Async, Discard,
/// Total) and a final `Total N`.
pub fn parse_blkio(text: &str) -> Result<IoBytes, ParseError> {
    const FORMAT: &str = "blkio";
    let mut out = IoBytes::default();
    for (i, line) in text.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [] => {}
            ["Total", v] => {
                v.parse::<u64>()
                    .map_err(|_| bad_value(FORMAT, "Total", v))?;
            }
            [dev, op, v] if dev.contains(':') => {
                let n = v.parse::<u64>().map_err(|_| bad_value(FORMAT, op, v))?;
                match *op {
                    "Read" => out.rbytes += n,
                    "Write" => out.wbytes += n,
                    _ => {}
                }
            }
            _ => return Err(bad_line(FORMAT, i, line)),
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
    fn v1_sums_devices() {
        let s = parse_blkio(
            "8:0 Read 90112\n8:0 Write 4096\n8:0 Sync 4096\n8:0 Async 90112\n8:0 Discard 0\n\
             8:0 Total 94208\n8:16 Read 8\n8:16 Write 0\nTotal 94216\n",
        )
        .unwrap();
        assert_eq!(
            s,
            IoBytes {
                rbytes: 90120,
                wbytes: 4096
            }
        );
        assert_eq!(parse_blkio("Total 0\n").unwrap(), IoBytes::default());
    }

    #[test]
    fn rejects_garbage() {
        for t in ["rbytes=1\n", "8:0 rbytes\n", "8:0 rbytes=-1\n"] {
            assert!(parse(t).is_err(), "{t:?}");
        }
        for t in ["8:0 Read\n", "Read 5\n", "8:0 Write x\n", "Total x\n"] {
            assert!(parse_blkio(t).is_err(), "{t:?}");
        }
    }
}
