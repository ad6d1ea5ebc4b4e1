//! The v1 freezer controller: `freezer.state` THAWED / FREEZING / FROZEN.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::fs::Fs;
use crate::CgroupError;

/// How long [`set`] waits for FREEZING to become FROZEN.
const FREEZE_WAIT: Duration = Duration::from_secs(2);

/// The current state, trimmed (`THAWED`, `FREEZING`, `FROZEN`).
pub(crate) fn state(fs: &Fs, dir: &Path) -> Result<String, CgroupError> {
    Ok(fs.read(&dir.join("freezer.state"))?.trim().to_string())
}

/// Freeze (and wait briefly until every task is frozen) or thaw.
pub(crate) fn set(fs: &Fs, dir: &Path, frozen: bool) -> Result<(), CgroupError> {
    if !frozen {
        return fs.write(&dir.join("freezer.state"), "THAWED");
    }
    if begin(fs, dir)? {
        return Ok(());
    }
    wait(fs, dir)
}

/// Ask for FROZEN; true when the kernel says FROZEN at once, false while it is FREEZING.
pub(crate) fn begin(fs: &Fs, dir: &Path) -> Result<bool, CgroupError> {
    fs.write(&dir.join("freezer.state"), "FROZEN")?;
    Ok(state(fs, dir)? == "FROZEN")
}

/// Wait (up to 2 s, polling every 5 ms) until FREEZING has become FROZEN. Blocks.
pub(crate) fn wait(fs: &Fs, dir: &Path) -> Result<(), CgroupError> {
    let start = Instant::now();
    loop {
        let s = state(fs, dir)?;
        if s == "FROZEN" {
            return Ok(());
        }
        if start.elapsed() > FREEZE_WAIT {
            return Err(CgroupError::FreezeTimeout {
                path: dir.join("freezer.state"),
                state: s,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
