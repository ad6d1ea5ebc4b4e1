//! File operations on a cgroup tree, on the kernel's cgroupfs or on a fake tree in a plain
//! directory.
//!
//! On cgroupfs the kernel creates a cgroup's interface files on `mkdir` and gives meaning to
//! writes (`cgroup.procs` moves a process, `cgroup.kill` kills). A plain directory does
//! neither, so [`Backend::FakeTree`] imitates the few behaviours the driver relies on (see
//! [`crate::fake_tree`]). Writes never create files in either backend: writing a file that is
//! not there fails with ENOENT, as on cgroupfs.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::CgroupError;

/// Which filesystem the driver works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// The kernel's cgroupfs (production).
    #[default]
    Kernel,
    /// A fake tree in a plain directory (tests): `mkdir` creates the interface files the kernel
    /// would, writes to `cgroup.procs`, `cgroup.kill`, `cgroup.freeze` and
    /// `cgroup.subtree_control` have their effects on the fake files, and no signal is ever sent.
    FakeTree,
}

/// What kind of hierarchy a directory is in, for [`Fs::mkdir`] on a fake tree.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DirKind<'a> {
    /// cgroup v1 with these controllers.
    V1(&'a [String]),
    /// cgroup v2 (controllers come from the parent's `cgroup.subtree_control`).
    V2,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Fs {
    pub(crate) backend: Backend,
}

fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

pub(crate) fn is_busy(e: &io::Error) -> bool {
    matches!(errno(e), Some(libc::EBUSY) | Some(libc::ENOTEMPTY))
}

impl Fs {
    /// Read a whole (small) file. cgroupfs files report size 0, so `fs::read_to_string` would
    /// stat and seek for a size hint and then probe with small reads; open, read(2) into 8 KiB
    /// until end of file (two calls for a small file), close: four syscalls per file, which
    /// is most of what the sampler costs.
    pub(crate) fn read(&self, path: &Path) -> Result<String, CgroupError> {
        use std::io::Read;
        let err = |source| CgroupError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut f = fs::File::open(path).map_err(err)?;
        // Plain read(2) calls: `read_to_end` on a File would stat and seek for a size hint.
        let mut buf = vec![0u8; 8192];
        let mut len = 0;
        loop {
            if len == buf.len() {
                buf.resize(len * 2, 0);
            }
            match f.read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        buf.truncate(len);
        String::from_utf8(buf)
            .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e.utf8_error())))
    }

    pub(crate) fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    /// Write `value` to an existing file in one write(2), as cgroupfs wants.
    pub(crate) fn write(&self, path: &Path, value: &str) -> Result<(), CgroupError> {
        tracing::debug!(path = %path.display(), value, "cgroup write");
        let res = match self.backend {
            Backend::Kernel => write_existing(path, value),
            Backend::FakeTree => fake::write(path, value),
        };
        res.map_err(|source| CgroupError::Write {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })
    }

    /// Create a cgroup directory; `Ok(true)` when this call created it, `Ok(false)` when it
    /// existed.
    pub(crate) fn mkdir(&self, path: &Path, kind: DirKind<'_>) -> Result<bool, CgroupError> {
        match fs::create_dir(path) {
            Ok(()) => {
                tracing::debug!(path = %path.display(), "cgroup created");
                if self.backend == Backend::FakeTree {
                    fake::populate(path, kind).map_err(|source| CgroupError::CreateDir {
                        path: path.to_path_buf(),
                        source,
                    })?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(false),
            Err(source) => Err(CgroupError::CreateDir {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Remove a cgroup directory (raw result: callers decide what ENOENT and EBUSY mean).
    pub(crate) fn rmdir(&self, path: &Path) -> io::Result<()> {
        let res = match self.backend {
            Backend::Kernel => fs::remove_dir(path),
            Backend::FakeTree => fake::rmdir(path),
        };
        if res.is_ok() {
            tracing::debug!(path = %path.display(), "cgroup removed");
        }
        res
    }

    /// Names of the subdirectories (child cgroups) of `path`; empty when `path` is absent.
    pub(crate) fn child_dirs(&self, path: &Path) -> Result<BTreeSet<String>, CgroupError> {
        let err = |source| CgroupError::ListDir {
            path: path.to_path_buf(),
            source,
        };
        let rd = match fs::read_dir(path) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(err(e)),
        };
        let mut out = BTreeSet::new();
        for entry in rd {
            let entry = entry.map_err(err)?;
            if entry.file_type().map_err(err)?.is_dir() {
                out.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(out)
    }

    /// SIGKILL `pid`; a process that is already gone is fine. On a fake tree no signal is sent:
    /// the pid is removed from every fake `cgroup.procs` of the machine `job_dirs[0]` is in.
    pub(crate) fn kill_pid(&self, pid: u32, job_dirs: &[PathBuf]) -> Result<(), CgroupError> {
        match self.backend {
            Backend::Kernel => {
                let Ok(raw) = libc::pid_t::try_from(pid) else {
                    return Err(CgroupError::Signal {
                        pid,
                        source: io::Error::from_raw_os_error(libc::EINVAL),
                    });
                };
                if raw <= 0 {
                    // kill(0 or negative) would signal process groups: never.
                    return Err(CgroupError::Signal {
                        pid,
                        source: io::Error::from_raw_os_error(libc::EINVAL),
                    });
                }
                tracing::debug!(pid, "sending SIGKILL");
                // SAFETY: kill(2) takes plain integers and touches no memory of ours; `raw` is a
                // positive pid read from the job's cgroup.procs, so only that process is signalled.
                let rc = unsafe { libc::kill(raw, libc::SIGKILL) };
                if rc == 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if errno(&e) == Some(libc::ESRCH) {
                    Ok(())
                } else {
                    Err(CgroupError::Signal { pid, source: e })
                }
            }
            Backend::FakeTree => {
                let Some(d) = job_dirs.first() else {
                    return Ok(());
                };
                fake::process_died(d, pid).map_err(|source| CgroupError::Write {
                    path: d.join("cgroup.procs"),
                    value: format!("(fake SIGKILL of {pid})"),
                    source,
                })
            }
        }
    }
}

/// A process pinned by a pidfd: signalled through it, it is that process or none (a pid reused
/// meanwhile is never hit).
pub(crate) struct Pinned(std::os::fd::OwnedFd);

impl Fs {
    /// Pin process `pid` (None: it is gone, or this is a fake tree, whose pids are not its own).
    pub(crate) fn pin_pid(&self, pid: u32) -> Option<Pinned> {
        if !matches!(self.backend, Backend::Kernel) {
            return None;
        }
        let raw = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor just returned by the kernel, owned here alone.
        Some(Pinned(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as libc::c_int)
        }))
    }

    /// Send `sig` to the pinned process; false: it has exited.
    pub(crate) fn signal_pinned(
        &self,
        p: &Pinned,
        pid: u32,
        sig: i32,
    ) -> Result<bool, CgroupError> {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal with a descriptor we own, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                p.0.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if errno(&e) == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(CgroupError::Signal { pid, source: e })
        }
    }
}

fn write_existing(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    // One write(2): cgroupfs parses each write separately.
    let n = f.write(value.as_bytes())?;
    if n != value.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
    }
    Ok(())
}

/// The imitation of cgroupfs on a plain directory.
pub(crate) mod fake {
    use super::*;

    fn put(path: &Path, text: &str) -> io::Result<()> {
        fs::write(path, text)
    }

    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }

    fn set_lines(path: &Path, l: &[String]) -> io::Result<()> {
        let mut s = l.join("\n");
        if !s.is_empty() {
            s.push('\n');
        }
        put(path, &s)
    }

    fn set_event(dir: &Path, key: &str, on: bool) -> io::Result<()> {
        let p = dir.join("cgroup.events");
        if !p.exists() {
            return Ok(());
        }
        let mut out = String::new();
        for l in fs::read_to_string(&p)?.lines() {
            match l.split_once(' ') {
                Some((k, _)) if k == key => out.push_str(&format!("{k} {}\n", u8::from(on))),
                _ => {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        put(&p, &out)
    }

    /// Create the interface files the kernel would.
    pub(crate) fn populate(dir: &Path, kind: DirKind<'_>) -> io::Result<()> {
        put(&dir.join("cgroup.procs"), "")?;
        match kind {
            DirKind::V1(controllers) => {
                put(&dir.join("tasks"), "")?;
                put(&dir.join("notify_on_release"), "0\n")?;
                for c in controllers {
                    match c.as_str() {
                        "cpuset" => {
                            put(&dir.join("cpuset.cpus"), "\n")?;
                            put(&dir.join("cpuset.mems"), "\n")?;
                        }
                        "memory" => {
                            put(&dir.join("memory.limit_in_bytes"), "9223372036854771712\n")?;
                            // A child inherits use_hierarchy (1 on current kernels).
                            let inherited = dir
                                .parent()
                                .and_then(|p| {
                                    fs::read_to_string(p.join("memory.use_hierarchy")).ok()
                                })
                                .unwrap_or_else(|| "1\n".into());
                            put(&dir.join("memory.use_hierarchy"), &inherited)?;
                            // Swap accounting on (the default of current kernels).
                            put(
                                &dir.join("memory.memsw.limit_in_bytes"),
                                "9223372036854771712\n",
                            )?;
                        }
                        "pids" => put(&dir.join("pids.max"), "max\n")?,
                        "freezer" => put(&dir.join("freezer.state"), "THAWED\n")?,
                        "cpu" => {
                            put(&dir.join("cpu.shares"), "1024\n")?;
                            put(&dir.join("cpu.idle"), "0\n")?;
                        }
                        "cpuacct" => put(&dir.join("cpuacct.usage"), "0\n")?,
                        "devices" => {
                            put(&dir.join("devices.allow"), "")?;
                            put(&dir.join("devices.deny"), "")?;
                        }
                        "blkio" => {
                            put(&dir.join("blkio.bfq.weight"), "100\n")?;
                            for f in ["read_bps", "write_bps", "read_iops", "write_iops"] {
                                put(&dir.join(format!("blkio.throttle.{f}_device")), "")?;
                            }
                        }
                        _ => {}
                    }
                }
            }
            DirKind::V2 => {
                let parent = dir.parent().unwrap_or(dir);
                let enabled =
                    fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
                put(&dir.join("cgroup.controllers"), &enabled)?;
                put(&dir.join("cgroup.subtree_control"), "")?;
                put(&dir.join("cgroup.threads"), "")?;
                put(&dir.join("cgroup.events"), "populated 0\nfrozen 0\n")?;
                put(&dir.join("cgroup.freeze"), "0\n")?;
                put(&dir.join("cgroup.kill"), "")?;
                for c in enabled.split_whitespace() {
                    match c {
                        "cpuset" => {
                            put(&dir.join("cpuset.cpus"), "\n")?;
                            put(&dir.join("cpuset.mems"), "\n")?;
                        }
                        "memory" => {
                            put(&dir.join("memory.max"), "max\n")?;
                            put(&dir.join("memory.high"), "max\n")?;
                        }
                        "pids" => put(&dir.join("pids.max"), "max\n")?,
                        "cpu" => {
                            put(&dir.join("cpu.max"), "max 100000\n")?;
                            put(&dir.join("cpu.weight"), "100\n")?;
                            put(&dir.join("cpu.idle"), "0\n")?;
                        }
                        "io" => {
                            put(&dir.join("io.weight"), "default 100\n")?;
                            put(&dir.join("io.max"), "")?;
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn threads_file(dir: &Path) -> PathBuf {
        let t = dir.join("cgroup.threads");
        if t.exists() {
            t
        } else {
            dir.join("tasks")
        }
    }

    /// The fake machine's directory of mounts: above the topmost cgroup holding `dir`.
    fn machine_root(dir: &Path) -> PathBuf {
        let mut top = dir.to_path_buf();
        while let Some(p) = top.parent() {
            if !p.join("cgroup.procs").exists() {
                break;
            }
            top = p.to_path_buf();
        }
        top.parent().map(Path::to_path_buf).unwrap_or(top)
    }

    /// A process died: remove it from every cgroup of the fake machine `dir` belongs to.
    pub(super) fn process_died(dir: &Path, pid: u32) -> io::Result<()> {
        fn walk(d: &Path, pid: u32) -> io::Result<()> {
            remove_pid(d, pid)?;
            for e in fs::read_dir(d)? {
                let e = e?;
                if e.file_type()?.is_dir() {
                    walk(&e.path(), pid)?;
                }
            }
            Ok(())
        }
        walk(&machine_root(dir), pid)
    }

    fn remove_pid(dir: &Path, pid: u32) -> io::Result<()> {
        let procs = dir.join("cgroup.procs");
        if !procs.exists() {
            return Ok(());
        }
        let keep: Vec<String> = lines(&procs)
            .into_iter()
            .filter(|l| l.trim() != pid.to_string())
            .collect();
        set_lines(&procs, &keep)?;
        let threads = threads_file(dir);
        if threads.exists() {
            let keep_t: Vec<String> = lines(&threads)
                .into_iter()
                .filter(|l| l.trim() != pid.to_string())
                .collect();
            set_lines(&threads, &keep_t)?;
        }
        set_event(dir, "populated", !keep.is_empty())
    }

    pub(super) fn write(path: &Path, value: &str) -> io::Result<()> {
        if !path.is_file() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let dir = path.parent().unwrap_or(Path::new("/"));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match name {
            "cgroup.procs" => {
                let pid = value.trim();
                if pid.parse::<u32>().is_err() {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                let mut l = lines(path);
                l.push(pid.to_string());
                set_lines(path, &l)?;
                let threads = threads_file(dir);
                if threads.exists() {
                    let mut t = lines(&threads);
                    t.push(pid.to_string());
                    set_lines(&threads, &t)?;
                }
                set_event(dir, "populated", true)
            }
            "cgroup.kill" => {
                if value.trim() != "1" {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                for pid in lines(&dir.join("cgroup.procs")) {
                    if let Ok(pid) = pid.trim().parse() {
                        process_died(dir, pid)?;
                    }
                }
                Ok(())
            }
            "cgroup.freeze" => {
                let on = match value.trim() {
                    "0" => false,
                    "1" => true,
                    _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
                };
                put(path, &format!("{}\n", u8::from(on)))?;
                set_event(dir, "frozen", on)
            }
            "cgroup.subtree_control" => {
                let available = fs::read_to_string(dir.join("cgroup.controllers"))?;
                let available: Vec<&str> = available.split_whitespace().collect();
                let mut enabled: BTreeSet<String> = fs::read_to_string(path)?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
                let is_root = !dir
                    .parent()
                    .is_some_and(|p| p.join("cgroup.controllers").exists());
                let has_procs = !lines(&dir.join("cgroup.procs")).is_empty();
                for w in value.split_whitespace() {
                    let (on, c) = match w.split_at(1) {
                        ("+", c) => (true, c),
                        ("-", c) => (false, c),
                        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
                    };
                    if !available.contains(&c) {
                        return Err(io::Error::from_raw_os_error(libc::ENOENT));
                    }
                    if on {
                        if has_procs && !is_root {
                            return Err(io::Error::from_raw_os_error(libc::EBUSY));
                        }
                        enabled.insert(c.to_string());
                    } else {
                        enabled.remove(c);
                    }
                }
                let v: Vec<String> = enabled.into_iter().collect();
                put(path, &format!("{}\n", v.join(" ")))
            }
            _ => put(path, value),
        }
    }

    pub(super) fn rmdir(path: &Path) -> io::Result<()> {
        if !path.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let has_children = fs::read_dir(path)?
            .filter_map(Result::ok)
            .any(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false));
        if has_children || !lines(&path.join("cgroup.procs")).is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        fs::remove_dir_all(path)
    }
}
