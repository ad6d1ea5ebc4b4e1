//! Block I/O: a job's weight and per-device limits (cgroup v2 `io`, v1 `blkio`).
//!
//! | setting | cgroup v2 (`io`)                         | cgroup v1 (`blkio`)                           |
//! |---------|------------------------------------------|-----------------------------------------------|
//! | weight  | `io.weight` (`default N`, 1-10000) and `io.bfq.weight` (10-1000) where present | `blkio.bfq.weight`, else `blkio.weight` (10-1000) |
//! | limits  | `io.max` (one line per device)           | `blkio.throttle.{read,write}_{bps,iops}_device` |
//!
//! A weight only acts on devices whose scheduler weighs cgroups (BFQ; v2 `io.weight` also with
//! `io.cost` switched on); v1 throttling does not see buffered writes (they are written back
//! later, by the flusher, outside the job's cgroup). See docs/config.md.

use std::path::Path;

use pjw_core::io_limits::JobIo;

use crate::fs::Fs;
use crate::CgroupError;

/// Which file took the weight, or `None` when the cgroup has no weight file (no BFQ, no
/// io.weight): the caller says so instead of pretending.
pub(crate) fn apply(
    fs: &Fs,
    dir: &Path,
    v2: bool,
    io: &JobIo,
) -> Result<Option<&'static str>, CgroupError> {
    let mut weight_file = None;
    if let Some(w) = io.weight {
        let candidates: &[(&'static str, String)] = if v2 {
            &[
                ("io.weight", format!("default {}", w.get())),
                ("io.bfq.weight", w.v1().to_string()),
            ]
        } else {
            &[
                ("blkio.bfq.weight", w.v1().to_string()),
                ("blkio.weight", w.v1().to_string()),
            ]
        };
        for (file, value) in candidates {
            let path = dir.join(file);
            if fs.exists(&path) {
                fs.write(&path, value)?;
                weight_file.get_or_insert(*file);
                if !v2 {
                    break; // v1: one weight file (BFQ's, or CFQ's on old kernels)
                }
            }
        }
    }
    for m in &io.max {
        if v2 {
            fs.write(&dir.join("io.max"), &m.v2_line())?;
        } else {
            for (file, line) in m.v1_lines() {
                fs.write(&dir.join(file), &line)?;
            }
        }
    }
    Ok(weight_file)
}
