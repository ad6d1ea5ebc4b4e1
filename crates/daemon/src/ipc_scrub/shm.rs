//! The /dev/shm walk: every shape of entry at any depth, depth first with a descriptor per
//! level, directories too deep moved up, bounded in all and per top entry; each removal
//! re-checked against the rule.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use pjw_core::ipc_scrub::{
    deep_dir_movable, dir_removable, entry_removable, Ended, ShmFile, MAX_DEPTH,
};
use rustix::fs::{AtFlags, FileType, OFlags};

use super::open_dir;

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
pub(super) struct Seen {
    pub(super) file: ShmFile,
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
pub(super) fn seen_at(dir: &OwnedFd, name: &str) -> Option<Seen> {
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
                if let Err(e) = rustix::fs::ftruncate(&fd, 0) {
                    tracing::debug!(name = ?name, error = %e, "cannot truncate a /dev/shm entry before removing it");
                }
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
pub(super) fn walk_shm_within(
    shm_root: &Path,
    job: &Ended,
    max_entries: usize,
    max_subtree: usize,
) -> Walked {
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
