//! Job starter mode: what `pjw run` does as root between `started` and exec — give the job a
//! private /tmp, /dev/shm and IPC namespace in its own mount namespace, then become the job's
//! user.
//!
//! Both happen in the client, after the daemon has moved it into the job's cgroups, so the
//! tmpfs pages are charged to the job and nothing runs as the user outside the job. The
//! process is single-threaded here (required for `unshare(CLONE_NEWNS)` and for `setuid` to
//! cover the whole process).

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use uzers::os::unix::UserExt;

/// The user a job runs as.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Look a user up by name.
pub fn lookup(name: &str) -> Result<Target> {
    let u = uzers::get_user_by_name(name).ok_or_else(|| anyhow!("no such user: {name}"))?;
    Ok(Target {
        name: name.to_string(),
        uid: u.uid(),
        gid: u.primary_group_id(),
        home: u.home_dir().to_path_buf(),
    })
}

fn check(rc: libc::c_int, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error()).context(what.to_string())
    }
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| anyhow!("{} has a NUL byte", p.display()))
}

fn mount(
    src: &str,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<()> {
    let src_c = CString::new(src)?;
    let target_c = cpath(target)?;
    let fstype_c = fstype.map(CString::new).transpose()?;
    let data_c = data.map(CString::new).transpose()?;
    // SAFETY: every pointer is a NUL-terminated string we own for the duration of the call, or
    // null where mount(2) allows it (fstype and data for a bind or propagation change).
    let rc = unsafe {
        libc::mount(
            src_c.as_ptr(),
            target_c.as_ptr(),
            fstype_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            data_c
                .as_ref()
                .map_or(std::ptr::null(), |c| c.as_ptr().cast()),
        )
    };
    check(rc, &format!("mount {src} on {}", target.display()))
}

/// Give this process its own mount namespace with one tmpfs of `size` bytes, owned by
/// `uid:gid`, on /tmp and /var/tmp (they share the size). Mounts are made slaves first, so
/// nothing mounted here propagates back to the host; the tmpfs disappears with the last
/// process of the namespace, i.e. with the job.
///
/// `keep`: a directory the workload manager made for the job under /tmp or /var/tmp (its
/// `TMPDIR`, e.g. Grid Engine's `/tmp/1.1.all.q`); it is made again inside the private /tmp,
/// owned by the user, so the manager's environment still points somewhere that exists.
pub fn private_tmp(size: u64, uid: u32, gid: u32, keep: Option<&Path>) -> Result<()> {
    own_mount_ns("the private /tmp")?;
    let data = format!("size={size},mode=0755,uid=0,gid=0");
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    let var_tmp = Path::new("/var/tmp");
    if !var_tmp.is_dir() {
        let data = format!("size={size},mode=1777,uid={uid},gid={gid}");
        mount(
            "pjw-tmp",
            Path::new("/tmp"),
            Some("tmpfs"),
            flags,
            Some(&data),
        )?;
        return remake(keep, uid, gid);
    }
    // One tmpfs, staged on /var/tmp, with a directory for each of /tmp and /var/tmp.
    mount("pjw-tmp", var_tmp, Some("tmpfs"), flags, Some(&data))?;
    for sub in ["tmp", "var-tmp"] {
        let d = var_tmp.join(sub);
        std::fs::create_dir(&d).with_context(|| format!("mkdir {}", d.display()))?;
        let dc = cpath(&d)?;
        // SAFETY: chown/chmod on a NUL-terminated path we own.
        check(unsafe { libc::chown(dc.as_ptr(), uid, gid) }, "chown")?;
        // SAFETY: as above.
        check(unsafe { libc::chmod(dc.as_ptr(), 0o1777) }, "chmod")?;
    }
    mount("/var/tmp/tmp", Path::new("/tmp"), None, libc::MS_BIND, None)?;
    // Over its own staging mount: the tmpfs's root is hidden, its two directories are not.
    mount("/var/tmp/var-tmp", var_tmp, None, libc::MS_BIND, None)?;
    remake(keep, uid, gid)
}

/// A mount namespace of this process's own, whose mounts are slaves of the host's: nothing
/// mounted here propagates back.
fn own_mount_ns(what: &str) -> Result<()> {
    // SAFETY: unshare with CLONE_NEWNS only changes this (single-threaded) process's namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNS) };
    check(rc, &format!("unshare(CLONE_NEWNS) for {what}"))?;
    mount(
        "none",
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_SLAVE,
        None,
    )
    .context("making mounts private to the job")
}

/// Give this process a new IPC namespace (its own SysV objects and POSIX message queues) and a
/// tmpfs of `size` bytes on /dev/shm (mode 1777, nosuid, nodev), in the job's mount namespace —
/// a new one when `new_ns` (the job has no private /tmp). This process is in the job's cgroups
/// already, and a tmpfs page is charged to the memory cgroup of the task that first touches it,
/// so what the job writes there counts against its `--mem`; the tmpfs goes with the namespace's
/// last process. A node without /dev/shm gets only the IPC namespace.
pub fn private_ipc(size: u64, new_ns: bool) -> Result<()> {
    // SAFETY: unshare with CLONE_NEWIPC only changes this (single-threaded) process's namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWIPC) };
    check(rc, "unshare(CLONE_NEWIPC)")?;
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return Ok(());
    }
    if new_ns {
        own_mount_ns("the private /dev/shm")?;
    }
    let data = format!("size={size},mode=1777");
    mount(
        "pjw-shm",
        shm,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
}

/// Make the manager's job directory again inside the private /tmp (mode 0700, the user's).
fn remake(keep: Option<&Path>, uid: u32, gid: u32) -> Result<()> {
    let Some(dir) = keep else { return Ok(()) };
    let inside = |root: &str| dir.starts_with(root) && dir != Path::new(root);
    if !(inside("/tmp") || inside("/var/tmp"))
        || dir
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let dc = cpath(dir)?;
    // SAFETY: chown/chmod on a NUL-terminated path we own.
    check(unsafe { libc::chown(dc.as_ptr(), uid, gid) }, "chown")?;
    // SAFETY: as above.
    check(unsafe { libc::chmod(dc.as_ptr(), 0o700) }, "chmod")
}

/// Become `t`: supplementary groups (initgroups), group, then user; then check that root
/// cannot be regained.
pub fn drop_to(t: &Target) -> Result<()> {
    let name = CString::new(t.name.as_str())?;
    // SAFETY: initgroups reads the NUL-terminated name and sets this process's groups.
    let rc = unsafe { libc::initgroups(name.as_ptr(), t.gid as libc::gid_t) };
    check(rc, "initgroups")?;
    // SAFETY: setgid/setuid on this single-threaded process; errors are checked.
    check(unsafe { libc::setgid(t.gid) }, "setgid")?;
    // SAFETY: as above.
    check(unsafe { libc::setuid(t.uid) }, "setuid")?;
    if t.uid != 0 {
        // SAFETY: querying and (trying to) change our own ids.
        let (ruid, euid, back) = unsafe { (libc::getuid(), libc::geteuid(), libc::setuid(0)) };
        if ruid != t.uid || euid != t.uid || back == 0 {
            bail!("dropping privileges to {} did not hold", t.name);
        }
    }
    Ok(())
}

/// The environment a job run as `t` gets on top of the caller's.
pub fn user_env(t: &Target) -> Vec<(&'static str, OsString)> {
    vec![
        ("HOME", t.home.clone().into_os_string()),
        ("USER", t.name.clone().into()),
        ("LOGNAME", t.name.clone().into()),
    ]
}
