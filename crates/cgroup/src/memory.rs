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

/// `memory.swap.max` (cgroup v2): the limit, or `max`. Skipped where the kernel has no swap
/// accounting (no such file).
pub(crate) fn apply_swap_max(fs: &Fs, dir: &Path, max: Option<u64>) -> Result<(), CgroupError> {
    let path = dir.join("memory.swap.max");
    if !fs.exists(&path) {
        return Ok(());
    }
    let value = max.map_or_else(|| "max".to_string(), |m| m.to_string());
    fs.write(&path, &value)
}

/// v1's swap limit: `memory.memsw.limit_in_bytes` caps memory and swap together, so a job
/// with a memory limit `mem` gets `mem + swap` there (its memory limit keeps its meaning, swap
/// is capped at `swap`). Without a memory limit v1 cannot cap swap alone: nothing is written
/// (`Ok(false)`), and neither where the kernel does not account swap (no such file).
/// `Ok(true)` when the limit was written.
pub(crate) fn apply_memsw_v1(
    fs: &Fs,
    dir: &Path,
    mem: Option<u64>,
    swap: Option<u64>,
) -> Result<bool, CgroupError> {
    let (Some(mem), Some(swap)) = (mem, swap) else {
        return Ok(false);
    };
    let path = dir.join("memory.memsw.limit_in_bytes");
    if !fs.exists(&path) {
        return Ok(false);
    }
    fs.write(&path, &mem.saturating_add(swap).to_string())?;
    Ok(true)
}

/// Set a job's memory limits again, to `mem` and `swap` (`None`: no limit), from whatever they
/// were (a queued job's waiting limits): unlike [`apply`] at creation, `None` writes the
/// kernel's "no limit". v1 needs `memsw >= limit` at every step: memsw is lifted first, then
/// the limit written, then memsw set (where the kernel accounts swap).
pub(crate) fn reset(
    fs: &Fs,
    dir: &Path,
    v2: bool,
    mem: Option<u64>,
    swap: Option<u64>,
) -> Result<(), CgroupError> {
    let value = |v: Option<u64>, none: &str| v.map_or_else(|| none.to_string(), |b| b.to_string());
    if v2 {
        fs.write(&dir.join("memory.max"), &value(mem, "max"))?;
        return apply_swap_max(fs, dir, swap);
    }
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    let accounted = fs.exists(&memsw);
    if accounted {
        fs.write(&memsw, "-1")?;
    }
    fs.write(&dir.join("memory.limit_in_bytes"), &value(mem, "-1"))?;
    if accounted {
        apply_memsw_v1(fs, dir, mem, swap)?;
    }
    Ok(())
}

/// v1 before Linux 5.x: a memory cgroup whose `memory.use_hierarchy` is 0 does not charge its
/// children, so the job partition's limit on the parent would not cover the jobs. Switch it on
/// for a parent level (possible while it has no children; the kernel refuses when its own
/// parent is hierarchical already, where it is on anyway). Current kernels always show 1.
pub(crate) fn use_hierarchy_v1(fs: &Fs, dir: &Path) {
    let path = dir.join("memory.use_hierarchy");
    match fs.read(&path) {
        Ok(t) if t.trim() == "0" => {
            if let Err(e) = fs.write(&path, "1") {
                tracing::warn!(error = %e, "the memory limit of the job partition will not cover the jobs (memory.use_hierarchy is 0)");
            }
        }
        _ => {}
    }
}

/// The file holding a cgroup's charged memory.
pub(crate) fn usage_path(dir: &Path, v2: bool) -> std::path::PathBuf {
    dir.join(if v2 {
        "memory.current"
    } else {
        "memory.usage_in_bytes"
    })
}

/// Parse the charged memory read from `path`.
pub(crate) fn parse_usage(path: std::path::PathBuf, text: &str) -> Result<u64, CgroupError> {
    text.trim().parse().map_err(|_| CgroupError::BadContent {
        path,
        text: text.trim().to_string(),
    })
}

/// How far below its limit a v1 cgroup's peak may stay and still have reached it: a charge
/// that fails asks for up to a huge page (2 MiB) at once, so the peak can stop that short.
const PEAK_SLACK: u64 = 2 << 20;

/// Whether the cgroup's own memory limit was ever reached (so an OOM kill in it may be its
/// own limit's rather than an ancestor's, the job partition's): `oom` in `memory.events` (v2:
/// counted where the limit that failed the charge is); on v1 `memory.failcnt` or
/// `memory.memsw.failcnt` (the counter over its limit), or a peak at the limit — kernels since
/// 6.x count no failures on v1 (a job OOM-killed at its own 50 MiB showed `failcnt` 0 and
/// `max_usage_in_bytes` 52428800 on 6.18, and was told it was the partition). On v1 this is
/// "ever reached", page cache included, as `failcnt` was on older kernels: a job that filled
/// its limit with cache and is later killed when the partition fills is told its own limit.
/// None when it cannot be read.
pub(crate) fn own_limit_hit(fs: &Fs, dir: &Path, v2: bool) -> Option<bool> {
    if v2 {
        let text = fs.read(&dir.join("memory.events")).ok()?;
        return text.lines().find_map(|l| {
            l.strip_prefix("oom ")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|n| n > 0)
        });
    }
    // memory+swap is charged first: where its limit is the memory limit (`swap_max = 0`) it is
    // the counter that fails at the job's own limit.
    let count = |f: &str| {
        fs.read(&dir.join(f))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    let mem = count("memory.failcnt")?;
    let failed = mem > 0 || count("memory.memsw.failcnt").is_some_and(|n| n > 0);
    // A limit v1 shows as "unlimited" is far above any machine's memory.
    let at_limit = |peak: &str, limit: &str| match (count(peak), count(limit)) {
        (Some(p), Some(l)) if l < 1 << 62 => p.saturating_add(PEAK_SLACK) >= l,
        _ => false,
    };
    Some(
        failed
            || at_limit("memory.max_usage_in_bytes", "memory.limit_in_bytes")
            || at_limit(
                "memory.memsw.max_usage_in_bytes",
                "memory.memsw.limit_in_bytes",
            ),
    )
}

/// Processes the kernel OOM-killed in the cgroup: `oom_kill` in `memory.oom_control` (v1) or
/// `memory.events` (v2). 0 when the kernel does not count them.
pub(crate) fn oom_kills(fs: &Fs, dir: &Path, v2: bool) -> u64 {
    let file = if v2 {
        "memory.events"
    } else {
        "memory.oom_control"
    };
    fs.read(&dir.join(file))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}
