//! Thin adapters to the process world: pidfds, /proc facts, user names. Roots are injected.

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

/// Real uid of `pid` (from /proc/PID/status).
pub fn process_uid(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    pjw_kernelfs::proc_status::parse(&text)
        .ok()
        .map(|s| s.uid[0])
}

/// Whether the process (pid, start time) still exists.
pub fn process_alive(proc_root: &Path, pid: u32, start: Option<u64>) -> bool {
    match (start_time(proc_root, pid), start) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The node's host name.
pub fn hostname(proc_root: &Path) -> String {
    std::fs::read_to_string(proc_root.join("sys/kernel/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// User name of `uid`, or the number.
pub fn user_name(uid: u32) -> String {
    uzers::get_user_by_uid(uid)
        .map(|u| u.name().to_string_lossy().into_owned())
        .unwrap_or_else(|| uid.to_string())
}

/// uid and primary gid of the user `name`.
pub fn lookup_user(name: &str) -> Option<(u32, u32)> {
    uzers::get_user_by_name(name).map(|u| (u.uid(), u.primary_group_id()))
}
