//! What `/proc` says about a caller the kernel named (its pid from `SO_PEERCRED`): the cgroups
//! it is in, and its parent. Facts the caller cannot forge; an unreadable file is an error,
//! never "outside every job". The `/proc` root is injected.

use std::path::Path;

use pjw_kernelfs::proc_cgroup::CgroupLine;

/// The cgroups of `pid` (its `/proc/PID/cgroup` lines); None when there is no such process
/// (it exited: it is in no cgroup, and what it asked for fails as a vanished client's). Any
/// other failure to read or parse is an error.
pub fn cgroups(proc_root: &Path, pid: u32) -> Result<Option<Vec<CgroupLine>>, String> {
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    pjw_kernelfs::proc_cgroup::parse(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The parent of `pid` and its start time, when it is the process that forked `pid`: alive,
/// not init (pid 1) and started no later than `pid` (a younger process with that pid reused it
/// after the parent died and `pid` was re-parented).
pub fn parent(proc_root: &Path, pid: u32) -> Option<(u32, u64)> {
    let stat = |p: u32| {
        let text = std::fs::read_to_string(proc_root.join(p.to_string()).join("stat")).ok()?;
        pjw_kernelfs::proc_stat::parse(&text).ok()
    };
    let me = stat(pid)?;
    if me.ppid <= 1 {
        return None;
    }
    let parent = stat(me.ppid)?;
    (parent.starttime <= me.starttime).then_some((me.ppid, parent.starttime))
}

/// The CPUs `pid` may run on now (its affinity, `Cpus_allowed_list`), when it can be read.
pub fn allowed_cpus(proc_root: &Path, pid: u32) -> Option<pjw_core::CpuSet> {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("status"))
        .ok()
        .and_then(|t| pjw_kernelfs::proc_status::parse(&t).ok())
        .map(|s| s.cpus_allowed_list)
}

/// The number of threads of `pid` (its `status`), 1 when that cannot be read.
pub fn threads(proc_root: &Path, pid: u32) -> u64 {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("status"))
        .ok()
        .and_then(|t| pjw_kernelfs::proc_status::parse(&t).ok())
        .map_or(1, |s| s.threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_entry(root: &Path, pid: u32, ppid: u32, start: u64, cgroup: &str) {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("stat"),
            format!("{pid} (x) S {ppid} 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
        )
        .unwrap();
        std::fs::write(d.join("cgroup"), cgroup).unwrap();
    }

    #[test]
    fn a_callers_cgroups_and_parent_from_proc() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        proc_entry(r, 10, 1, 100, "0::/sshd\n");
        proc_entry(r, 11, 10, 150, "0::/pjw/job-7\n");
        proc_entry(r, 12, 99, 150, "0::/\n"); // its parent is gone
        proc_entry(r, 13, 14, 100, "0::/\n");
        proc_entry(r, 14, 1, 120, "0::/\n"); // younger than its "child": a reused pid
        assert_eq!(cgroups(r, 11).unwrap().unwrap()[0].path, "/pjw/job-7");
        assert_eq!(cgroups(r, 99), Ok(None), "no such process");
        std::fs::create_dir_all(r.join("98/cgroup")).unwrap();
        assert!(cgroups(r, 98).is_err(), "an unreadable file is an error");
        assert_eq!(parent(r, 11), Some((10, 100)));
        assert_eq!(parent(r, 10), None, "init is no session's process");
        assert_eq!(parent(r, 12), None);
        assert_eq!(parent(r, 13), None);
    }
}
