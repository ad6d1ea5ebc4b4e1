//! The OS side of the IPC scrub at a job's end (the rule is `pjw_core::ipc_scrub`): list the
//! host's SysV objects (`<proc>/sysvipc/{shm,sem,msg}`), the entries of `<dev>/shm` and the
//! POSIX message queues of `<dev>/mqueue` (the host's mqueue file system, where it is mounted —
//! systemd mounts it; without the mount nothing lists them and they are left), and remove what
//! the plan names. Runs on a blocking thread, never on the engine's.
//!
//! Every removal is checked again just before it: a SysV object by `IPC_STAT` (owner, attach
//! count, change time), a /dev/mqueue entry by `fstatat(AT_SYMLINK_NOFOLLOW)` on the
//! directory's descriptor, a /dev/shm entry by an `O_PATH` open with `RESOLVE_NO_XDEV` and
//! `fstat` (a mount point — a user's FUSE mount — is never asked anything), then removed with `unlinkat` on the same descriptor (on the
//! mqueue file system that is `mq_unlink`) — no path is resolved again and no symlink is
//! followed (a link the user planted is itself removed, never its target).
//!
//! /dev/shm is walked as a tree ([`walk_shm`]): each directory the owner could have written in
//! (its own, or open to its group or to all) is opened relative to its parent's descriptor with
//! `openat2` (`O_DIRECTORY`, no link, no mount crossed) and checked to be the entry just seen
//! on /dev/shm's own file system; a regular file with no other name is emptied through a
//! descriptor opened the same way (`O_NOFOLLOW | O_NONBLOCK`, checked to be that file) before
//! its removal, so pages a process outside the job holds are freed; at most
//! [`MAX_DEPTH`] descriptors are held, an owner's directory deeper than that is moved up to
//! the top and walked from there. At most [`MAX_ENTRIES`] entries are looked at per scrub, and
//! [`MAX_SUBTREE_ENTRIES`] below one top entry, the owner's own top entries first.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use pjw_core::ipc_scrub::{
    entry_removable, sysv_removable, Ended, IpcKind, Listing, Plan, ShmFile, SysvObject,
};
use rustix::fs::{AtFlags, Mode, OFlags};

/// What one scrub removed, and what it could not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scrubbed {
    pub sysv: usize,
    pub files: usize,
    pub mqueues: usize,
    /// Failures, each naming the object or path.
    pub errors: Vec<String>,
    /// /dev/shm trees cut short (quoted path, owner): see [`MAX_SUBTREE_ENTRIES`].
    pub cut: Vec<(String, u32)>,
}

/// Read the host's SysV objects and message queues (/dev/shm is walked instead: [`walk_shm`]).
/// A file or directory that cannot be read contributes nothing (a kernel without SysV IPC, a
/// node without the mqueue file system mounted).
pub fn read_listing(proc_root: &Path, mq_root: &Path) -> Listing {
    let mut sysv = Vec::new();
    for kind in IpcKind::ALL {
        let path = proc_root.join("sysvipc").join(kind.file());
        if let Ok(text) = std::fs::read_to_string(&path) {
            sysv.extend(pjw_kernelfs::sysvipc::parse(kind, &text));
        }
    }
    let mqueues = open_dir(mq_root).map(|d| list_dir(&d)).unwrap_or_default();
    Listing { sysv, mqueues }
}

fn open_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// What `name` below `dir` is, without entering a mount a user stacked there ([`seen_at`]; the
/// round-4 review, L4: a plain `statat` here would have).
fn stat_entry(dir: &OwnedFd, name: &str) -> Option<ShmFile> {
    seen_at(dir, name).map(|s| s.file)
}

fn list_dir(dir: &OwnedFd) -> Vec<ShmFile> {
    let Ok(fd) = rustix::io::dup(dir) else {
        return Vec::new();
    };
    let Ok(mut rd) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = rd.read() {
        let Ok(name) = e.file_name().to_str() else {
            continue;
        };
        if name == "." || name == ".." {
            continue;
        }
        if let Some(f) = stat_entry(dir, name) {
            out.push(f);
        }
    }
    out
}

/// List, plan and remove for `job`, given the owners of the jobs still live (the engine has
/// checked `wanted` already; `min_uid` 0 here lets the plan decide on the rest).
pub fn scrub(
    proc_root: &Path,
    shm_root: &Path,
    mq_root: &Path,
    job: &Ended,
    live: &[u32],
) -> Scrubbed {
    let listing = read_listing(proc_root, mq_root);
    let plan = pjw_core::ipc_scrub::plan(job, 0, live, &listing);
    let mut done = apply(&plan, mq_root, job);
    if pjw_core::ipc_scrub::wanted(job.uid, 0, live) {
        let mut shm = walk_shm(shm_root, job);
        done.files = shm.removed;
        done.errors.append(&mut shm.errors);
        done.cut = shm.cut;
    }
    done
}

/// Remove what `plan` names, each checked again against the rule first.
pub fn apply(plan: &Plan, mq_root: &Path, job: &Ended) -> Scrubbed {
    let mut done = Scrubbed::default();
    for o in &plan.sysv {
        match remove_sysv(o, job) {
            Ok(true) => done.sysv += 1,
            Ok(false) => {}
            Err(e) => done.errors.push(format!("{} {}: {e}", o.kind.file(), o.id)),
        }
    }
    done.mqueues = remove_entries(mq_root, &plan.mqueues, job, &mut done.errors);
    done
}

/// Remove the entries `names` of directory `root` that the rule still allows, through one
/// descriptor of the directory; how many went. Failures join `errors`.
fn remove_entries(root: &Path, names: &[String], job: &Ended, errors: &mut Vec<String>) -> usize {
    if names.is_empty() {
        return 0;
    }
    let dir = match open_dir(root) {
        Ok(d) => d,
        Err(e) => {
            errors.push(format!("{}: {}", root.display(), std::io::Error::from(e)));
            return 0;
        }
    };
    let mut removed = 0;
    for name in names {
        // Looked at again through the same descriptor: still the owner's, still no directory.
        let Some(now) = stat_entry(&dir, name) else {
            continue;
        };
        if !entry_removable(job, &now) {
            continue;
        }
        match rustix::fs::unlinkat(dir.as_fd(), name.as_str(), AtFlags::empty()) {
            Ok(()) => removed += 1,
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                // Debug-quoted: the name is the user's and may hold a newline (a forged log
                // line otherwise).
                let path: PathBuf = root.join(name);
                errors.push(format!("{path:?}: {}", std::io::Error::from(e)));
            }
        }
    }
    removed
}

mod shm;

pub(crate) use shm::list_names;
use shm::seen_at;
pub use shm::{walk_shm, Walked, MAX_ENTRIES, MAX_SUBTREE_ENTRIES};

/// `IPC_STAT` the object, check it against the rule again, then `IPC_RMID` it. `Ok(false)`:
/// gone already, or no longer removable.
fn remove_sysv(o: &SysvObject, job: &Ended) -> std::io::Result<bool> {
    let Some(now) = stat_sysv(o.kind, o.id) else {
        return Ok(false);
    };
    if !sysv_removable(job, &now) {
        return Ok(false);
    }
    // SAFETY: IPC_RMID takes no buffer (null is allowed for all three); the id is an int.
    let rc = unsafe {
        match o.kind {
            IpcKind::Shm => libc::shmctl(o.id, libc::IPC_RMID, std::ptr::null_mut()),
            IpcKind::Sem => libc::semctl(o.id, 0, libc::IPC_RMID),
            IpcKind::Msg => libc::msgctl(o.id, libc::IPC_RMID, std::ptr::null_mut()),
        }
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // Removed meanwhile.
        Some(libc::EINVAL) | Some(libc::EIDRM) => Ok(false),
        _ => Err(e),
    }
}

/// What the kernel says of one object now; None if it is gone.
fn stat_sysv(kind: IpcKind, id: i32) -> Option<SysvObject> {
    let (uid, nattch, ctime) = match kind {
        IpcKind::Shm => {
            // SAFETY: shmid_ds is plain data; IPC_STAT fills it or fails.
            let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
            // SAFETY: a valid pointer to a buffer of the right type.
            if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } != 0 {
                return None;
            }
            (ds.shm_perm.uid, ds.shm_nattch as u64, ds.shm_ctime)
        }
        IpcKind::Sem => {
            // SAFETY: semid_ds is plain data; IPC_STAT fills it or fails.
            let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
            // SAFETY: semctl's fourth argument is `union semun`, whose `buf` member is this
            // pointer; passed as a variadic pointer, as glibc reads it.
            if unsafe { libc::semctl(id, 0, libc::IPC_STAT, &mut ds as *mut libc::semid_ds) } != 0 {
                return None;
            }
            (ds.sem_perm.uid, 0, ds.sem_ctime)
        }
        IpcKind::Msg => {
            // SAFETY: msqid_ds is plain data; IPC_STAT fills it or fails.
            let mut ds: libc::msqid_ds = unsafe { std::mem::zeroed() };
            // SAFETY: a valid pointer to a buffer of the right type.
            if unsafe { libc::msgctl(id, libc::IPC_STAT, &mut ds) } != 0 {
                return None;
            }
            (ds.msg_perm.uid, 0, ds.msg_ctime)
        }
    };
    Some(SysvObject {
        kind,
        id,
        uid,
        nattch,
        ctime: ctime.max(0) as u64,
    })
}

#[cfg(test)]
mod tests;
