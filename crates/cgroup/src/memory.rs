//! The memory controller: `memory.limit_in_bytes` (v1) or `memory.max` (v2).

use std::path::Path;

use crate::fs::Fs;
use crate::CgroupError;

/// Set the limit, when there is one.
pub(crate) fn apply(fs: &Fs, dir: &Path, v2: bool, max: Option<u64>) -> Result<(), CgroupError> {
    let Some(max) = max else { return Ok(()) };
    let file = if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    fs.write(&dir.join(file), &max.to_string())
}
