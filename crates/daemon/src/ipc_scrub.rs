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
    deep_dir_movable, dir_removable, entry_removable, sysv_removable, Ended, IpcKind, Listing,
    Plan, ShmFile, SysvObject, MAX_DEPTH,
};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

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

fn stat_entry(dir: &OwnedFd, name: &str) -> Option<ShmFile> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    Some(ShmFile {
        name: name.to_string(),
        uid: st.st_uid,
        // u64 or i64 by target; a time before 1970 is not a job's.
        #[allow(clippy::unnecessary_cast)]
        ctime: st.st_ctime as u64,
        dir: FileType::from_raw_mode(st.st_mode) == FileType::Directory,
    })
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

/// Entries the /dev/shm walk looks at per scrub, at most: a bound on the time one user's tree
/// can take (what is beyond it is left, and said).
pub const MAX_ENTRIES: usize = 1_000_000;

/// Entries the walk looks at below one entry of /dev/shm's top, at most (issue 25, N5): one
/// user's huge world-writable tree is cut short there — and said — instead of using up the
/// whole scrub's budget, so it cannot keep everyone else's leftovers from being scrubbed.
pub const MAX_SUBTREE_ENTRIES: usize = 100_000;

/// What the /dev/shm walk did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Walked {
    /// Entries removed (files, links, FIFOs, sockets, directories).
    pub removed: usize,
    /// Entries looked at.
    pub seen: usize,
    /// Failures, each naming the entry.
    pub errors: Vec<String>,
    /// Trees of /dev/shm's top cut short at [`MAX_SUBTREE_ENTRIES`] (quoted paths, owners).
    pub cut: Vec<(String, u32)>,
}

/// An entry as the walk saw it: the rule's view and what identifies it on the file system.
#[derive(Clone, Debug)]
struct Seen {
    file: ShmFile,
    dev: u64,
    ino: u64,
    nlink: u64,
    kind: FileType,
    mode: u32,
}

/// What `name` below `dir` is, asked of /dev/shm's file system only: opened `O_PATH` (no
/// file system is asked anything by that) with `openat2`'s `RESOLVE_NO_XDEV`, so a mount point
/// — a user's FUSE mount that never answers would hang a `stat` of it for good (issue 25, N4) —
/// is `EXDEV`, None here, never entered; then `fstat` of that descriptor.
fn seen_at(dir: &OwnedFd, name: &str) -> Option<Seen> {
    let fd = crate::tmp::open_here(dir, name, OFlags::PATH).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let kind = FileType::from_raw_mode(st.st_mode);
    // Field types differ by target.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some(Seen {
        file: ShmFile {
            name: name.to_string(),
            uid: st.st_uid,
            ctime: st.st_ctime as u64,
            dir: kind == FileType::Directory,
        },
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        nlink: st.st_nlink as u64,
        kind,
        mode: st.st_mode as u32,
    })
}

/// One directory being walked: its descriptor, its entries' names (read when it was opened),
/// how far the walk is, and (below the top) its name in its parent and what it was before.
struct Frame {
    dir: OwnedFd,
    names: Vec<String>,
    next: usize,
    entry: Option<Seen>,
}

fn frame(dir: OwnedFd, entry: Option<Seen>) -> Frame {
    let names = list_names(&dir);
    Frame {
        dir,
        names,
        next: 0,
        entry,
    }
}

pub(crate) fn list_names(dir: &OwnedFd) -> Vec<String> {
    let Ok(fd) = rustix::io::dup(dir) else {
        return Vec::new();
    };
    let Ok(mut rd) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = rd.read() {
        match e.file_name().to_str() {
            Ok("." | "..") | Err(_) => {}
            Ok(n) => out.push(n.to_string()),
        }
    }
    out
}

/// Open `name` below `parent` as the directory `seen` saw: never through a link, on the same
/// file system, the same inode.
fn open_subdir(parent: &OwnedFd, name: &str, seen: &Seen) -> Option<OwnedFd> {
    let fd = crate::tmp::open_here(parent, name, OFlags::RDONLY | OFlags::DIRECTORY).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    ((st.st_dev as u64, st.st_ino as u64) == (seen.dev, seen.ino)).then_some(fd)
}

/// Remove the non-directory entry `name` of `dir` if the rule still allows it: a regular file
/// with no other name is emptied first (its pages are freed even where a process outside the
/// job still holds it). `Ok(true)`: removed.
fn remove_entry(dir: &OwnedFd, name: &str, job: &Ended) -> rustix::io::Result<bool> {
    let Some(now) = seen_at(dir, name) else {
        return Ok(false);
    };
    if !entry_removable(job, &now.file) {
        return Ok(false);
    }
    if now.kind == FileType::RegularFile && now.nlink == 1 {
        // O_NONBLOCK: a FIFO swapped in meanwhile does not block the open (and is not
        // truncated: the descriptor must be the regular file just seen).
        if let Ok(fd) = crate::tmp::open_here(
            dir,
            name,
            OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        ) {
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            let same = rustix::fs::fstat(&fd).is_ok_and(|st| {
                (st.st_dev as u64, st.st_ino as u64) == (now.dev, now.ino)
                    && FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            });
            if same {
                let _ = rustix::fs::ftruncate(&fd, 0);
            }
        }
    }
    match rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Walk /dev/shm (`shm_root`) and remove what the rule allows for `job`, at any depth and of
/// every shape (see the module and `pjw_core::ipc_scrub`).
pub fn walk_shm(shm_root: &Path, job: &Ended) -> Walked {
    walk_shm_within(shm_root, job, MAX_ENTRIES, MAX_SUBTREE_ENTRIES)
}

/// [`walk_shm`] with its bounds: `max_entries` in all, `max_subtree` below one top entry.
fn walk_shm_within(shm_root: &Path, job: &Ended, max_entries: usize, max_subtree: usize) -> Walked {
    let Ok(root) = open_dir(shm_root) else {
        return Walked::default();
    };
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let Ok(dev) = rustix::fs::fstat(&root).map(|st| st.st_dev as u64) else {
        return Walked::default();
    };
    let mut walk = Walk {
        shm_root,
        job,
        dev,
        max_entries,
        max_subtree,
        w: Walked::default(),
        moved: Vec::new(),
        moves: 0,
    };
    let mut walked_moves = 0usize;
    let mut tops: Option<Vec<String>> = None;
    loop {
        let Ok(top) = rustix::io::dup(&root) else {
            break;
        };
        let mut first = frame(top, None);
        if let Some(names) = tops.take() {
            first.names = names;
        }
        owners_first(&mut first, job);
        walk.pass(first);
        // Walk what was moved up in this pass, from the top; until nothing more is moved.
        let pending: Vec<String> = walk.moved[walked_moves..]
            .iter()
            .map(|m| m.file.name.clone())
            .collect();
        walked_moves = walk.moved.len();
        if pending.is_empty() || walk.w.seen >= max_entries {
            break;
        }
        tops = Some(pending);
    }
    let mut w = walk.w;
    if w.seen >= max_entries {
        w.errors.push(format!(
            "{}: more than {max_entries} entries; the rest is left for the next scrub",
            shm_root.display()
        ));
    }
    w
}

/// One walk of /dev/shm for a job's owner: its bounds and what it has done so far.
struct Walk<'a> {
    shm_root: &'a Path,
    job: &'a Ended,
    /// /dev/shm's file system: entries on another (mounted here) are not entered.
    dev: u64,
    max_entries: usize,
    max_subtree: usize,
    w: Walked,
    /// Directories moved up from below MAX_DEPTH, with what they were before the move.
    moved: Vec<Seen>,
    /// Directories moved up so far (each under a name of its own).
    moves: usize,
}

impl Walk<'_> {
    /// One pass from the top frame `first`, depth first: files removed as the rule allows,
    /// directories entered where the owner could have written, removed once left, and those
    /// too deep moved up for the next pass.
    fn pass(&mut self, first: Frame) {
        let shm_root = self.shm_root;
        let quote = |path: &[&str], name: &str| quote_path(shm_root, path, name);
        // The entry `name` in the directory on top of the walk, quoted for a message.
        let quote_here = |path: &[String], name: &str| {
            let p: Vec<&str> = path.iter().map(String::as_str).collect();
            quote_path(shm_root, &p, name)
        };
        let mut sub_seen = 0usize;
        let mut stack: Vec<Frame> = vec![first];
        // The names leading to the frame on top, for messages.
        let mut path: Vec<String> = Vec::new();
        while let Some(top) = stack.last_mut() {
            let cut = !path.is_empty() && sub_seen >= self.max_subtree;
            if top.next >= top.names.len() || self.w.seen >= self.max_entries || cut {
                let done = stack.pop().expect("a frame");
                let name = path.pop();
                if cut && path.is_empty() {
                    if let (Some(n), Some(e)) = (&name, &done.entry) {
                        self.w.cut.push((quote(&[], n), e.file.uid));
                    }
                }
                if path.is_empty() {
                    sub_seen = 0;
                }
                if let (Some(entry), Some(parent), Some(name)) = (done.entry, stack.last(), name) {
                    drop(done.dir);
                    remove_walked_dir(
                        parent,
                        &name,
                        &entry,
                        &self.moved,
                        self.job,
                        &mut self.w,
                        &|n| quote_here(&path, n),
                    );
                }
                continue;
            }
            let name = top.names[top.next].clone();
            top.next += 1;
            self.w.seen += 1;
            if !path.is_empty() {
                sub_seen += 1;
            }
            let Some(seen) = seen_at(&top.dir, &name) else {
                continue;
            };
            if !seen.file.dir {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                match remove_entry(&top.dir, &name, self.job) {
                    Ok(true) => self.w.removed += 1,
                    Ok(false) => {}
                    Err(e) => self.w.errors.push(format!(
                        "{}: {}",
                        quote(&p, &name),
                        std::io::Error::from(e)
                    )),
                }
                continue;
            }
            if seen.dev != self.dev {
                continue; // another file system mounted here: not /dev/shm's
            }
            // Only a directory the owner could have written in is entered: its own, or one
            // open to its group or to all (issue 25, N5: another user's private tree of a
            // million entries was walked at every job end of every user).
            if seen.file.uid != self.job.uid && seen.mode & 0o022 == 0 {
                continue;
            }
            if stack.len() > MAX_DEPTH {
                // Too deep to hold a descriptor more: an owner's directory goes up to the top
                // (under a name of its own, never over another) and is walked from there.
                if deep_dir_movable(self.job, &seen.file) && self.moves < self.max_entries {
                    move_up(
                        &stack,
                        &name,
                        seen,
                        self.job,
                        &mut self.moves,
                        &mut self.moved,
                        &mut self.w,
                        &|n| quote_here(&path, n),
                    );
                }
                continue;
            }
            let parent = &stack.last().expect("a frame").dir;
            if let Some(fd) = open_subdir(parent, &name, &seen) {
                path.push(name);
                stack.push(frame(fd, Some(seen)));
            }
        }
    }
}

/// The owner's own entries first, then the rest (others' directories the owner may have
/// written in): a tree another user planted cannot use up the budget before the owner's
/// leftovers are looked at (issue 25, N5).
fn owners_first(first: &mut Frame, job: &Ended) {
    let owners: Vec<bool> = first
        .names
        .iter()
        .map(|n| seen_at(&first.dir, n).is_some_and(|s| s.file.uid == job.uid))
        .collect();
    let mut order: Vec<(bool, String)> = owners
        .into_iter()
        .map(|o| !o)
        .zip(std::mem::take(&mut first.names))
        .collect();
    order.sort_by_key(|(other, _)| *other);
    first.names = order.into_iter().map(|(_, n)| n).collect();
}

/// A directory the walk has left: removed if the rule allows it, judged by what it was before
/// the walk changed it (`moved`: directories moved up, as they were).
fn remove_walked_dir(
    parent: &Frame,
    name: &str,
    entry: &Seen,
    moved: &[Seen],
    job: &Ended,
    w: &mut Walked,
    quote: &dyn Fn(&str) -> String,
) {
    let was = moved
        .iter()
        .find(|m| m.ino == entry.ino && m.dev == entry.dev)
        .map_or(&entry.file, |m| &m.file);
    if dir_removable(job, was) {
        match rustix::fs::unlinkat(parent.dir.as_fd(), name, AtFlags::REMOVEDIR) {
            Ok(()) => w.removed += 1,
            Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::NOENT) => {}
            Err(e) => {
                w.errors
                    .push(format!("{}: {}", quote(name), std::io::Error::from(e)));
            }
        }
    }
}

/// Too deep to hold a descriptor more: an owner's directory goes up to the top (under a name
/// of its own, never over another) and is walked from there; recorded in `moved` as it was.
#[allow(clippy::too_many_arguments)]
fn move_up(
    stack: &[Frame],
    name: &str,
    seen: Seen,
    job: &Ended,
    moves: &mut usize,
    moved: &mut Vec<Seen>,
    w: &mut Walked,
    quote: &dyn Fn(&str) -> String,
) {
    let to = format!(".pjw-scrub-{}-{}-{}", job.uid, std::process::id(), *moves);
    let top_fd = stack.first().map(|f| &f.dir).expect("the top frame");
    let parent = &stack.last().expect("a frame").dir;
    let noreplace = rustix::fs::RenameFlags::NOREPLACE;
    if rustix::fs::renameat_with(parent, name, top_fd, to.as_str(), noreplace).is_ok() {
        *moves += 1;
        // The rename goes by name: what it moved must be the directory just
        // seen. Another one the owner swapped in meanwhile (it may be another
        // user's, which that user could not have moved) is put back and left
        // (issue 25, N6).
        let same =
            seen_at(top_fd, &to).is_some_and(|now| (now.dev, now.ino) == (seen.dev, seen.ino));
        if !same {
            if let Err(e) = rustix::fs::renameat_with(top_fd, to.as_str(), parent, name, noreplace)
            {
                w.errors.push(format!(
                    "{}: swapped during the scrub, cannot put it back from {to}: {}",
                    quote(name),
                    std::io::Error::from(e)
                ));
            }
            return;
        }
        moved.push(Seen {
            file: ShmFile {
                name: to,
                ..seen.file.clone()
            },
            ..seen
        });
    }
}

/// `path` and `name` below `shm_root`, Debug-quoted: the names are the user's and may hold a
/// newline.
fn quote_path(shm_root: &Path, path: &[&str], name: &str) -> String {
    let mut p: PathBuf = shm_root.to_path_buf();
    p.extend(path.iter().copied());
    p.push(name);
    format!("{p:?}")
}

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
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake /proc and /dev/mqueue: the listing reads both; a queue is removed through the
    /// directory's descriptor, and only when the re-check still allows it.
    #[test]
    fn lists_a_fake_root_and_removes_only_the_owners_queues() {
        let t = tempfile::tempdir().unwrap();
        let proc_root = t.path().join("proc");
        let shm = t.path().join("shm");
        let mq = t.path().join("mqueue");
        std::fs::create_dir_all(proc_root.join("sysvipc")).unwrap();
        std::fs::create_dir_all(&shm).unwrap();
        std::fs::write(
            proc_root.join("sysvipc/sem"),
            "key semid perms nsems uid gid cuid cgid otime ctime\n0 7 600 1 4242 4242 4242 4242 0 120\n",
        )
        .unwrap();
        std::fs::create_dir(&mq).unwrap();
        std::fs::write(mq.join("queue"), "").unwrap();
        let owner = owner();
        chown(&mq.join("queue"), owner);
        let l = read_listing(&proc_root, &mq);
        assert_eq!(l.mqueues.len(), 1);
        assert_eq!(
            (l.mqueues[0].name.as_str(), l.mqueues[0].uid),
            ("queue", owner)
        );
        // No mqueue file system mounted: nothing listed, no error.
        assert!(read_listing(&proc_root, &t.path().join("none"))
            .mqueues
            .is_empty());
        assert_eq!(l.sysv.len(), 1);
        assert_eq!((l.sysv[0].id, l.sysv[0].uid), (7, 4242));
        let job = Ended {
            uid: owner,
            since: 0,
            until: u64::MAX,
        };
        // Another owner in the plan's name: the re-check keeps the queue.
        let other = Ended {
            uid: owner + 1,
            ..job
        };
        let plan = Plan {
            sysv: vec![],
            mqueues: vec!["queue".into()],
        };
        assert_eq!(apply(&plan, &mq, &other).mqueues, 0);
        assert!(mq.join("queue").exists());
        let done = scrub(&proc_root, &shm, &mq, &job, &[]);
        assert_eq!((done.mqueues, done.errors.len()), (1, 0), "{done:?}");
        assert!(!mq.join("queue").exists());
    }

    /// The job's owner (as root, the tests' machines: a uid no account uses; root's entries
    /// are never a job's).
    use std::os::unix::fs::PermissionsExt;

    fn owner() -> u32 {
        let me = rustix::process::getuid().as_raw();
        if me == 0 {
            4243
        } else {
            me
        }
    }

    fn chown(p: &Path, uid: u32) {
        if rustix::process::getuid().as_raw() == 0 {
            std::os::unix::fs::lchown(p, Some(uid), None).unwrap();
        }
    }

    /// Issue 25, item 8: every shape the owner leaves in /dev/shm goes — files at the top and
    /// in directories (the owner's or another user's), directories once empty, links (never
    /// their targets), a file held open elsewhere (emptied, so its pages are freed), a tree
    /// deeper than the walk holds descriptors for — and nothing of anyone else's.
    #[test]
    fn the_walk_removes_every_shape_the_owner_left_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let shm = t.path().join("shm");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&shm).unwrap();
        std::fs::create_dir_all(outside.join("dir")).unwrap();
        std::fs::write(outside.join("file"), "keep").unwrap();
        let owner = owner();
        let me = rustix::process::getuid().as_raw();
        let other = if me == 0 { 4244 } else { me };
        let mine = |p: &Path| chown(p, owner);
        // Files and links at the top.
        std::fs::write(shm.join("left"), "x").unwrap();
        symlink(outside.join("file"), shm.join("link")).unwrap();
        symlink(outside.join("dir"), shm.join("dirlink")).unwrap();
        // A directory tree of the owner's.
        std::fs::create_dir_all(shm.join("adir/sub")).unwrap();
        std::fs::write(shm.join("adir/inner"), "x").unwrap();
        std::fs::write(shm.join("adir/sub/deep"), "x").unwrap();
        // The owner's file in another user's world-writable directory.
        std::fs::create_dir(shm.join("others")).unwrap();
        std::fs::write(shm.join("others/mine"), "x").unwrap();
        std::fs::write(shm.join("others/theirs"), "x").unwrap();
        std::fs::write(shm.join("theirs"), "x").unwrap();
        // A file held open (and written) from outside: emptied, then removed.
        let held_path = shm.join("held");
        std::fs::write(&held_path, vec![7u8; 1 << 16]).unwrap();
        let held = std::fs::File::open(&held_path).unwrap();
        // A chain deeper than the walk holds descriptors for, a file at its bottom.
        let mut deep = shm.join("chain");
        let mut chain = Vec::new();
        for _ in 0..MAX_DEPTH + 6 {
            chain.push(deep.clone());
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        chain.push(deep.clone());
        std::fs::write(deep.join("bottom"), "x").unwrap();
        for n in [
            "left",
            "link",
            "dirlink",
            "adir",
            "adir/sub",
            "adir/inner",
            "adir/sub/deep",
            "others/mine",
            "held",
        ] {
            mine(&shm.join(n));
        }
        for d in &chain {
            mine(d);
        }
        mine(&deep.join("bottom"));
        for n in ["others", "others/theirs", "theirs"] {
            chown(&shm.join(n), other);
        }
        // World-writable, as /tmp is: the only kind of another's directory the owner could
        // have written in (a private one is not entered).
        std::fs::set_permissions(shm.join("others"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        let job = Ended {
            uid: owner,
            since: 0,
            until: u64::MAX,
        };
        let w = walk_shm(&shm, &job);
        assert!(w.errors.is_empty(), "{w:?}");
        let mut left: Vec<String> = std::fs::read_dir(&shm)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        if me == 0 {
            assert_eq!(left, ["others", "theirs"], "{w:?}");
            let inside: Vec<String> = std::fs::read_dir(shm.join("others"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(inside, ["theirs"]);
        } else {
            // Not root: every entry is the owner's.
            assert!(left.is_empty(), "{left:?}");
        }
        // Targets of links untouched; the held file's pages are gone.
        assert_eq!(
            std::fs::read_to_string(outside.join("file")).unwrap(),
            "keep"
        );
        assert!(outside.join("dir").is_dir());
        assert_eq!(
            held.metadata().unwrap().len(),
            0,
            "the held file was not emptied"
        );
        // Another owner's job removes nothing.
        std::fs::write(shm.join("again"), "x").unwrap();
        mine(&shm.join("again"));
        let w = walk_shm(
            &shm,
            &Ended {
                uid: owner + 7,
                ..job
            },
        );
        assert_eq!(w.removed, 0, "{w:?}");
        assert!(shm.join("again").exists());
    }
    /// Issue 25, N4: a FUSE mount in /dev/shm whose server never answers (a user's
    /// `fusermount`) is never entered: the walk asks /dev/shm's file system only (a `stat` of
    /// the mount point once hung the scrub's thread for good), finishes, and removes the rest.
    /// Root only (the mount); the walk runs on a thread of its own so a regression fails in
    /// 30 s instead of hanging the test.
    #[test]
    fn a_fuse_mount_that_never_answers_is_not_entered() {
        if rustix::process::getuid().as_raw() != 0 || !Path::new("/dev/fuse").exists() {
            eprintln!("skipped: needs root and /dev/fuse to mount FUSE");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let shm = t.path().join("shm");
        std::fs::create_dir_all(shm.join("mnt")).unwrap();
        std::fs::write(shm.join("left"), "x").unwrap();
        std::fs::create_dir_all(shm.join("adir")).unwrap();
        std::fs::write(shm.join("adir/inner"), "x").unwrap();
        for n in ["mnt", "left", "adir", "adir/inner"] {
            chown(&shm.join(n), owner());
        }
        let fuse = pjw_testkit::fuse::Unanswered::mount(&shm.join("mnt"), owner(), owner())
            .expect("mount FUSE");
        let job = Ended {
            uid: owner(),
            since: 0,
            until: u64::MAX,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let root = shm.clone();
        std::thread::spawn(move || {
            let _ = tx.send(walk_shm(&root, &job));
        });
        let w = rx.recv_timeout(std::time::Duration::from_secs(30));
        let attached = fuse.attached();
        drop(fuse);
        let w = w.expect("the walk hung on the FUSE mount");
        assert!(attached, "the mount went away by itself");
        assert!(
            !shm.join("left").exists() && !shm.join("adir").exists(),
            "{w:?}"
        );
    }
    /// Issue 25, N5: another user's private tree (mode 0700) is never entered, and a tree open
    /// to all that is bigger than the bound per top entry is cut short and said, while the
    /// owner's own leftovers — looked at first — are removed whatever the other trees hold.
    #[test]
    fn a_planted_tree_neither_uses_up_the_budget_nor_is_walked_when_private() {
        let t = tempfile::tempdir().unwrap();
        let shm = t.path().join("shm");
        std::fs::create_dir_all(shm.join("private/sub")).unwrap();
        std::fs::create_dir_all(shm.join("open")).unwrap();
        for i in 0..40 {
            std::fs::write(shm.join(format!("private/sub/f{i}")), "x").unwrap();
            std::fs::write(shm.join(format!("open/f{i}")), "x").unwrap();
        }
        std::fs::write(shm.join("mine"), "x").unwrap();
        std::fs::create_dir(shm.join("mydir")).unwrap();
        std::fs::write(shm.join("mydir/inner"), "x").unwrap();
        let me = rustix::process::getuid().as_raw();
        let other = if me == 0 { 4244 } else { me };
        for n in ["private", "private/sub", "open"] {
            chown(&shm.join(n), other);
        }
        std::fs::set_permissions(shm.join("private"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        std::fs::set_permissions(shm.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        for n in ["mine", "mydir", "mydir/inner"] {
            chown(&shm.join(n), owner());
        }
        let job = Ended {
            uid: owner(),
            since: 0,
            until: u64::MAX,
        };
        // 50 entries in all, 10 below one top entry.
        let w = walk_shm_within(&shm, &job, 50, 10);
        assert!(
            !shm.join("mine").exists() && !shm.join("mydir").exists(),
            "{w:?}"
        );
        if me == 0 {
            // Not entered: none of its 41 entries counted; the open one cut at 10.
            assert!(w.seen < 50, "{w:?}");
            assert_eq!(w.cut.len(), 1, "{w:?}");
            assert!(w.cut[0].0.contains("open") && w.cut[0].1 == other, "{w:?}");
        }
    }
    /// Issue 25, N6: the owner's directories deeper than the walk holds descriptors for, but
    /// older than the job (a login session's data), are not moved up out of their tree: the
    /// tree is left as it was, with nothing relocated to the top.
    #[test]
    fn an_old_deep_tree_is_not_moved_out_of_its_place() {
        let t = tempfile::tempdir().unwrap();
        let shm = t.path().join("shm");
        let mut deep = shm.join("old");
        let mut chain = Vec::new();
        for _ in 0..MAX_DEPTH + 6 {
            chain.push(deep.clone());
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        chain.push(deep.clone());
        for d in &chain {
            chown(d, owner());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // A job that started after the tree was made.
        let job = Ended {
            uid: owner(),
            since: now + 10,
            until: now + 20,
        };
        let w = walk_shm(&shm, &job);
        let top: Vec<String> = std::fs::read_dir(&shm)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(top, ["old"], "{w:?}");
        assert!(deep.is_dir(), "the bottom of the tree moved: {w:?}");
    }
}
