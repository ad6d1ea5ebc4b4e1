//! cgroup v2 core files: `cgroup.subtree_control`, `cgroup.kill`, `cgroup.freeze`,
//! `cgroup.events`, `cgroup.controllers`.

use std::path::Path;

use crate::fs::{is_busy, Fs};
use crate::CgroupError;

/// Controllers listed in a space-separated file (`cgroup.controllers`, `subtree_control`).
pub(crate) fn read_list(fs: &Fs, path: &Path) -> Result<Vec<String>, CgroupError> {
    Ok(fs
        .read(path)?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The `+c` words to write to `subtree_control` to enable `want` (pure).
///
/// Returns (to enable, wanted but not available here).
pub(crate) fn plan_enable(
    want: &[String],
    available: &[String],
    enabled: &[String],
) -> (Vec<String>, Vec<String>) {
    let mut add = Vec::new();
    let mut missing = Vec::new();
    for c in want {
        if !available.contains(c) {
            missing.push(c.clone());
        } else if !enabled.contains(c) {
            add.push(c.clone());
        }
    }
    (add, missing)
}

/// Enable `want` for the children of `dir`. A controller `dir` does not have is skipped with a
/// warning, except cpuset, which is an error. EBUSY (no-internal-process rule) gets its own
/// error naming the cgroup.
pub(crate) fn enable_controllers(fs: &Fs, dir: &Path, want: &[String]) -> Result<(), CgroupError> {
    let available = read_list(fs, &dir.join("cgroup.controllers"))?;
    let enabled = read_list(fs, &dir.join("cgroup.subtree_control"))?;
    let (add, missing) = plan_enable(want, &available, &enabled);
    for c in &missing {
        if c == "cpuset" {
            return Err(CgroupError::MissingController {
                controller: c.clone(),
                where_: Some(dir.to_path_buf()),
            });
        }
        tracing::warn!(cgroup = %dir.display(), controller = %c, "controller not available, skipped");
    }
    if add.is_empty() {
        return Ok(());
    }
    let value = add
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    match fs.write(&dir.join("cgroup.subtree_control"), &value) {
        Err(CgroupError::Write { source, .. }) if is_busy(&source) => {
            Err(CgroupError::SubtreeBusy {
                path: dir.to_path_buf(),
                value,
            })
        }
        other => other,
    }
}

/// `cgroup.freeze`.
pub(crate) fn freeze(fs: &Fs, dir: &Path, frozen: bool) -> Result<(), CgroupError> {
    fs.write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

/// `cgroup.kill`, when the kernel has it (Linux 5.14+). `Ok(false)` when it does not.
pub(crate) fn kill(fs: &Fs, dir: &Path) -> Result<bool, CgroupError> {
    let path = dir.join("cgroup.kill");
    if !fs.exists(&path) {
        return Ok(false);
    }
    fs.write(&path, "1")?;
    Ok(true)
}

/// `cgroup.events`, parsed.
pub(crate) fn events(
    fs: &Fs,
    dir: &Path,
) -> Result<pjw_kernelfs::cgroup_events::CgroupEvents, CgroupError> {
    let path = dir.join("cgroup.events");
    let text = fs.read(&path)?;
    pjw_kernelfs::cgroup_events::parse(&text).map_err(|source| CgroupError::Parse { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn plans_only_what_is_missing() {
        let (add, missing) = plan_enable(
            &v("cpuset memory pids cpu"),
            &v("cpuset cpu io memory"),
            &v("cpu"),
        );
        assert_eq!(add, v("cpuset memory"));
        assert_eq!(missing, v("pids"));
        let (add, missing) = plan_enable(&v("cpu"), &v("cpu"), &v("cpu"));
        assert!(add.is_empty() && missing.is_empty());
    }
}
