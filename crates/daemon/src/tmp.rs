//! Per-job temporary space for unprivileged clients: a size-limited tmpfs the daemon mounts at
//! `<tmp_root>/<job cgroup>@<seq>` (the store's number of that run of the job: a path no later
//! job takes again), owned by the job's user (mode 0700), and unmounts when the job ends — or at
//! the next start after a crash. Emptying a tmpfs walks every file a user made (400,000 empty
//! files took 2.5 s), so the removal runs on a blocking thread ([`spawn_remove`]), never on the
//! engine's; its path being the ended run's alone, no new job's tmpfs can be mounted there
//! meanwhile. (Root clients make their own private /tmp in a
//! mount namespace instead; see `pjw run`.) The pages of a tmpfs are charged to the memory
//! cgroup of the process that writes them, so a job's files count against its `--mem`.

use std::path::{Path, PathBuf};

use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};

/// Errors of mounting or removing a job's tmpfs, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum TmpError {
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mount a tmpfs on {path}: {source}")]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Mount a tmpfs of `size` bytes owned by `uid:gid` (mode 0700) at `<root>/<name>`.
pub fn mount_job_tmp(
    root: &Path,
    name: &str,
    size: u64,
    uid: u32,
    gid: u32,
) -> Result<PathBuf, TmpError> {
    use std::os::unix::fs::DirBuilderExt;
    let create = |path: &Path, source| TmpError::Create {
        path: path.to_path_buf(),
        source,
    };
    if !root.is_dir() {
        // Users must be able to reach their directory; nothing else is listed here.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(root)
            .map_err(|e| create(root, e))?;
    }
    let dir = root.join(name);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        // Left by a crash before its removal: mount over it afresh.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = unmount(&dir, UnmountFlags::DETACH);
        }
        Err(e) => return Err(create(&dir, e)),
    }
    let data = format!("size={size},mode=0700,uid={uid},gid={gid}");
    mount(
        "pjw-tmp",
        &dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_str(),
    )
    .map_err(|e| {
        let _ = std::fs::remove_dir(&dir);
        TmpError::Mount {
            path: dir.clone(),
            source: e.into(),
        }
    })?;
    Ok(dir)
}

/// Empty, shrink, unmount (lazily: a process that still has it open cannot block the job's end)
/// and remove a job's tmpfs directory. A directory that is already gone is fine.
///
/// A lazily unmounted tmpfs lives on while any process outside the job (a user's shell with its
/// working directory there) holds it, and its pages stay charged to the ended job. So its files
/// are deleted first and it is remounted at the smallest size, which frees the pages now and
/// refuses new writes; only files still open elsewhere keep theirs until closed.
pub fn remove_job_tmp(dir: &Path) -> Result<(), TmpError> {
    if !dir.exists() {
        return Ok(());
    }
    if is_tmpfs_mount(dir) {
        empty_dir(dir);
        let _ = rustix::mount::mount_remount(
            dir,
            MountFlags::NOSUID | MountFlags::NODEV,
            "size=4k,nr_inodes=1",
        );
    }
    // EINVAL: not a mount point any more (unmounted before a crash); go on to rmdir.
    let _ = unmount(dir, UnmountFlags::DETACH);
    std::fs::remove_dir(dir).map_err(|source| TmpError::Remove {
        path: dir.to_path_buf(),
        source,
    })
}

/// Whether `dir` is the root of a mount of its own (a different device than its parent).
fn is_tmpfs_mount(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::symlink_metadata(dir),
        dir.parent().map(std::fs::metadata),
    ) {
        (Ok(d), Some(Ok(p))) => d.dev() != p.dev(),
        _ => false,
    }
}

/// Delete what is in `dir` (not `dir`): the user's files in the job's tmpfs. std's
/// remove_dir_all does not follow symlinks, so a link planted there cannot send root elsewhere;
/// errors (a file vanishing meanwhile) are ignored, the unmount follows anyway.
fn empty_dir(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let _ = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
    }
}

/// The directory name of the tmpfs of run `seq` of the job whose cgroup is `cgroup`.
pub fn dir_name(cgroup: &str, seq: i64) -> String {
    format!("{cgroup}@{seq}")
}

/// [`remove_job_tmp`] on a blocking thread (inline where no runtime runs, as in unit tests),
/// logging the outcome for job `job`.
pub fn spawn_remove(dir: PathBuf, job: String) {
    let work = move || match remove_job_tmp(&dir) {
        Ok(()) => tracing::debug!(job = %job, dir = %dir.display(), "job tmpfs removed"),
        Err(e) => tracing::warn!(job = %job, error = %e, "cannot remove the job's tmpfs"),
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(work);
        }
        Err(_) => work(),
    }
}

/// Directories below `root` (job tmpfs mount points), for the sweep after a restart.
pub fn list(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}
