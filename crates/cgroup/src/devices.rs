//! The v1 `devices` controller: which character devices a job may not open.
//!
//! A job cgroup starts with its parent's rules (on a default machine: every device allowed).
//! pjw adds one `devices.deny` exception per device node the job must not open — the GPUs it was
//! not given — and leaves everything else (its own GPUs, the shared control nodes, `/dev/null`,
//! ttys) as it was. Exact `major:minor` entries, never a wildcard: in a default-allow cgroup a
//! later `devices.allow` removes only an exception that matches exactly, so `c 195:* rwm` could
//! not be opened up again for the job's own GPU.
//!
//! ```
//! assert_eq!(pjw_cgroup::devices::deny_lines(&[(195, 1), (226, 129)]),
//!            ["c 195:1 rwm", "c 226:129 rwm"]);
//! ```

use std::path::Path;

use crate::error::CgroupError;
use crate::fs::Fs;

/// The `devices.deny` lines for character devices `devs` (major, minor).
pub fn deny_lines(devs: &[(u32, u32)]) -> Vec<String> {
    devs.iter()
        .map(|(major, minor)| format!("c {major}:{minor} rwm"))
        .collect()
}

/// Deny `devs` in the v1 devices cgroup `dir`, one write per device (the kernel takes one rule
/// per write).
pub(crate) fn deny_v1(fs: &Fs, dir: &Path, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
    let file = dir.join("devices.deny");
    for line in deny_lines(devs) {
        fs.write(&file, &line)?;
    }
    Ok(())
}
