//! The cpuset controller (`cpuset.cpus`, `cpuset.mems`; same files in v1 and v2).

use std::path::Path;

use pjw_core::CpuSet;

use crate::fs::Fs;
use crate::CgroupError;

/// Place the job: CPUs first, then memory nodes (v1 needs both before a task can join).
pub(crate) fn apply(fs: &Fs, dir: &Path, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
    fs.write(&dir.join("cpuset.cpus"), &cpus.to_string())?;
    fs.write(&dir.join("cpuset.mems"), &mems.to_string())
}

/// Write `kind` to `cpuset.cpus.partition` and read back what the kernel made of it. An invalid
/// partition (`root invalid (reason)`) is set back to `member`, and the reason returned.
pub(crate) fn set_partition(fs: &Fs, dir: &Path, kind: &str) -> Result<(), CgroupError> {
    let path = dir.join("cpuset.cpus.partition");
    fs.write(&path, kind)?;
    let got = fs.read(&path)?;
    let got = got.trim();
    if got == kind {
        return Ok(());
    }
    if let Err(e) = fs.write(&path, "member") {
        tracing::warn!(path = %path.display(), error = %e, "cannot turn an invalid cpuset partition back into a member");
    }
    Err(CgroupError::PartitionInvalid {
        path,
        reason: got.to_string(),
    })
}

/// Read a cpuset file (`cpuset.cpus`, `cpuset.mems`, `cpuset.effective_cpus`, …).
pub(crate) fn read(fs: &Fs, dir: &Path, file: &str) -> Result<CpuSet, CgroupError> {
    let path = dir.join(file);
    let text = fs.read(&path)?;
    CpuSet::parse_list(&text).map_err(|_| CgroupError::BadContent {
        path,
        text: text.trim().to_string(),
    })
}

/// v1 cpuset children start with empty `cpus` and `mems`; give a new level its parent's.
/// A level that already has both is left alone.
pub(crate) fn inherit_v1(fs: &Fs, parent: &Path, child: &Path) -> Result<(), CgroupError> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if read(fs, child, file)?.is_empty() {
            let value = read(fs, parent, file)?;
            fs.write(&child.join(file), &value.to_string())?;
        }
    }
    Ok(())
}
