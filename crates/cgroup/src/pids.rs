//! The pids controller: `pids.max` (same file in v1 and v2).

use std::path::Path;

use crate::fs::Fs;
use crate::CgroupError;

/// Set a job's task limit again (`None`: `max`, no limit), from a queued job's waiting one.
pub(crate) fn reset(fs: &Fs, dir: &Path, max: Option<u64>) -> Result<(), CgroupError> {
    let value = max.map_or_else(|| "max".to_string(), |m| m.to_string());
    fs.write(&dir.join("pids.max"), &value)
}

/// Set the task limit, when there is one.
pub(crate) fn apply(fs: &Fs, dir: &Path, max: Option<u64>) -> Result<(), CgroupError> {
    match max {
        Some(max) => fs.write(&dir.join("pids.max"), &max.to_string()),
        None => Ok(()),
    }
}
