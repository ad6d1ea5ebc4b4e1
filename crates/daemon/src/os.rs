//! Thin adapters to the process world: pidfds, /proc facts. Roots are injected. (User names
//! are looked up off the engine thread: [`crate::users`].)

use std::os::fd::OwnedFd;
use std::path::Path;

/// Open a pidfd for `pid` (non-blocking), to learn of its exit without polling.
pub fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pid 0"))?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)
        .map_err(std::io::Error::from)
}

/// Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat), the pair
/// (pid, start time) names a process across pid reuse.
pub fn start_time(proc_root: &Path, pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    pjw_kernelfs::proc_stat::parse(&text)
        .ok()
        .map(|s| s.starttime)
}

/// Real uid of `pid` (from the `Uid` line of /proc/PID/status; None: unreadable or malformed).
pub fn process_uid(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    pjw_kernelfs::proc_status::parse_uids(&text)
        .ok()
        .map(|uid| uid[0])
}

/// The real uid of process `pid`, telling a process that is gone (`Ok(None)`: no such
/// process) from one that could not be read (`Err`: EMFILE, ENOMEM, an unparsable file), which
/// is no fact about it.
pub fn process_uid_checked(proc_root: &Path, pid: u32) -> std::io::Result<Option<u32>> {
    let text = match std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(e) => return Err(e),
    };
    pjw_kernelfs::proc_status::parse_uids(&text)
        .map(|uid| Some(uid[0]))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// Whether the process (pid, start time) still exists.
pub fn process_alive(proc_root: &Path, pid: u32, start: Option<u64>) -> bool {
    match (start_time(proc_root, pid), start) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// `pid`'s `oom_score_adj`; None when it cannot be read (gone, or unparsable).
pub fn oom_score_adj(proc_root: &Path, pid: u32) -> Option<i16> {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("oom_score_adj"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Set `pid`'s `oom_score_adj` (-1000..=1000). Written by root with `CAP_SYS_RESOURCE`, it is
/// also the least the process may set itself back to; below 0 it needs that right.
pub fn set_oom_score_adj(proc_root: &Path, pid: u32, value: i16) -> std::io::Result<()> {
    use std::io::Write;
    // Never created (O_CREAT): only a process's own file is written.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(proc_root.join(pid.to_string()).join("oom_score_adj"))?
        .write_all(value.to_string().as_bytes())
}

/// Whether this process holds capability `cap` (its bit in `CapEff` of /proc/self/status);
/// None when that cannot be read.
pub fn has_capability(proc_root: &Path, cap: u32) -> Option<bool> {
    let text = std::fs::read_to_string(proc_root.join("self/status")).ok()?;
    let hex = text.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let bits = u64::from_str_radix(hex, 16).ok()?;
    Some(cap < 64 && bits & (1 << cap) != 0)
}

/// Whether this process runs in the machine's own user namespace (`/proc/self/uid_map` maps
/// every uid to itself): a capability held in another one does not count where the kernel asks
/// for it in the initial one (`capable()`); None when that cannot be read.
pub fn in_initial_user_namespace(proc_root: &Path) -> Option<bool> {
    let map = std::fs::read_to_string(proc_root.join("self/uid_map")).ok()?;
    let words: Vec<&str> = map.split_whitespace().collect();
    Some(words == ["0", "0", "4294967295"])
}

/// `CAP_SYS_RESOURCE`: with it, an `oom_score_adj` this process writes is also the floor.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// The node's host name.
pub fn hostname(proc_root: &Path) -> String {
    std::fs::read_to_string(proc_root.join("sys/kernel/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Raise the soft open-file limit to the hard one and return the soft limit now in force.
/// The sampler keeps each job's statistics files open (a handful per job), so a node with
/// thousands of jobs needs more than the usual soft limit of 1024.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if lim.current.is_some() && lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return lim.maximum.unwrap_or(u64::MAX);
        }
    }
    soft
}

/// How many statistics files the sampler may keep open under an open-file limit of `nofile`:
/// half of it, the other half for sockets, pidfds, inotify and the store; at most 65,536.
pub fn stat_files_budget(nofile: u64) -> usize {
    (nofile / 2).min(65_536) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_files_budget_leaves_half_and_is_capped() {
        for (nofile, want) in [(1024, 512), (0, 0), (1 << 20, 65_536), (u64::MAX, 65_536)] {
            assert_eq!(stat_files_budget(nofile), want, "nofile {nofile}");
        }
    }
}
