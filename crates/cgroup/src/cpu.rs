//! The cpu controller: the idle scheduling class for backfill jobs.
//!
//! `cpu.idle = 1` (v1 and v2, Linux 5.15+) puts every task of the cgroup in SCHED_IDLE: it only
//! runs when nothing else on the CPU wants to. Where the file does not exist, the lowest weight
//! is the fallback (`cpu.shares = 2` in v1, `cpu.weight = 1` in v2), which is close but lets the
//! job take a few percent from a busy neighbour.

use std::path::Path;

use crate::fs::Fs;
use crate::CgroupError;

/// Weight of a cgroup that holds the work of `ncpus` CPUs: `ncpus` times a process's default
/// weight (`cpu.shares` 1024 in v1, `cpu.weight` 100 in v2), within the kernel's limits.
pub(crate) fn set_weight_for_cpus(
    fs: &Fs,
    dir: &Path,
    v2: bool,
    ncpus: usize,
) -> Result<(), CgroupError> {
    let n = ncpus.max(1) as u64;
    if v2 {
        fs.write(&dir.join("cpu.weight"), &(100 * n).min(10_000).to_string())
    } else {
        fs.write(
            &dir.join("cpu.shares"),
            &(1024 * n).min(262_144).to_string(),
        )
    }
}

/// Put the job's cgroup in the idle class (`idle = true`) or back to normal.
pub(crate) fn set_idle(fs: &Fs, dir: &Path, v2: bool, idle: bool) -> Result<(), CgroupError> {
    let idle_file = dir.join("cpu.idle");
    if fs.exists(&idle_file) {
        return fs.write(&idle_file, if idle { "1" } else { "0" });
    }
    if v2 {
        fs.write(&dir.join("cpu.weight"), if idle { "1" } else { "100" })
    } else {
        fs.write(&dir.join("cpu.shares"), if idle { "2" } else { "1024" })
    }
}
