//! Open cgroup statistics files kept open between sampler ticks and re-read with `pread(2)`.
//!
//! The sampler reads about six files per job per tick. On cgroupfs (kernfs) each
//! open-read-close costs a path walk, an allocation of the open file and its seq_file buffer,
//! and their release: most of a small file's cost. A kernfs file read at offset 0 regenerates
//! its content (seq_file restarts at position 0), so one `pread(fd, buf, 0)` on a file kept
//! open gives the same fresh text in one syscall.
//!
//! Files are grouped by job so that [`StatFiles::forget_job`] closes a job's files when its
//! cgroup is removed (an open file would keep the dead cgroup's memory pinned). The number of
//! open files is capped ([`StatFiles::new`]); past the cap, reads fall back to open-read-close.
//! A read that fails on a cached file (the cgroup was removed behind pjw's back: ENODEV) drops
//! the file and tries once more with a fresh open, whose error is the one returned.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::fs::Fs;
use crate::CgroupError;

/// Per job: the files kept open, by path (a handful per job, so a short list).
type JobFiles = Vec<(PathBuf, File)>;

#[derive(Default)]
struct Inner {
    jobs: HashMap<String, JobFiles>,
    open: usize,
}

/// The cache of open statistics files, shared by the clones of a driver.
pub(crate) struct StatFiles {
    inner: Mutex<Inner>,
    max_open: usize,
}

impl std::fmt::Debug for StatFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.inner.lock().map(|i| i.open).unwrap_or(0);
        f.debug_struct("StatFiles")
            .field("open", &open)
            .field("max_open", &self.max_open)
            .finish()
    }
}

/// Read the whole file at offset 0 with `pread(2)`: one call for a small file.
fn pread_all(f: &File, path: &Path) -> Result<String, CgroupError> {
    let err = |source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                // A short read is the end: the statistics files are single-record seq_files,
                // which kernfs renders whole and copies out as far as the buffer goes, so the
                // call that would return 0 is skipped.
                if len < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf)
        .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e.utf8_error())))
}

impl StatFiles {
    /// A cache holding at most `max_open` files (0: off, every read opens the file).
    pub(crate) fn new(max_open: usize) -> StatFiles {
        StatFiles {
            inner: Mutex::new(Inner::default()),
            max_open,
        }
    }

    /// The text of `path`, a statistics file of job `job`. `keep_new`: a file not held yet is
    /// opened and kept (else it is read and closed).
    pub(crate) fn read(
        &self,
        fs: &Fs,
        job: &str,
        path: &Path,
        keep_new: bool,
    ) -> Result<String, CgroupError> {
        if self.max_open == 0 {
            return fs.read(path);
        }
        let Ok(mut inner) = self.inner.lock() else {
            return fs.read(path);
        };
        if let Some(files) = inner.jobs.get_mut(job) {
            if let Some(i) = files.iter().position(|(p, _)| p == path) {
                match pread_all(&files[i].1, path) {
                    Ok(text) => return Ok(text),
                    Err(_) => {
                        files.swap_remove(i);
                        inner.open -= 1;
                    }
                }
            }
        }
        if !keep_new || inner.open >= self.max_open {
            drop(inner);
            return fs.read(path);
        }
        let file = File::open(path).map_err(|source| CgroupError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let text = pread_all(&file, path)?;
        inner
            .jobs
            .entry(job.to_string())
            .or_default()
            .push((path.to_path_buf(), file));
        inner.open += 1;
        Ok(text)
    }

    /// Close the files of job `job` (before its cgroup is removed).
    pub(crate) fn forget_job(&self, job: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            if let Some(files) = inner.jobs.remove(job) {
                inner.open -= files.len();
            }
        }
    }

    /// Files open now.
    pub(crate) fn open_files(&self) -> usize {
        self.inner.lock().map(|i| i.open).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Backend;

    const FS: Fs = Fs {
        backend: Backend::FakeTree,
    };

    #[test]
    fn cached_reads_see_new_content_and_the_cap_holds() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FS;
        let a = dir.path().join("a.stat");
        let b = dir.path().join("b.stat");
        std::fs::write(&a, "usage 1\n").unwrap();
        std::fs::write(&b, "usage 2\n").unwrap();
        let c = StatFiles::new(1);
        assert_eq!(c.read(&fs, "job-1", &a, true).unwrap(), "usage 1\n");
        assert_eq!(c.open_files(), 1);
        // Past the cap: read, not kept.
        assert_eq!(c.read(&fs, "job-2", &b, true).unwrap(), "usage 2\n");
        assert_eq!(c.open_files(), 1);
        // Rewritten in place (as the fake tree and the kernel do): the cached fd sees it.
        std::fs::write(&a, "usage 10 and a longer line\n").unwrap();
        assert_eq!(
            c.read(&fs, "job-1", &a, true).unwrap(),
            "usage 10 and a longer line\n"
        );
        c.forget_job("job-1");
        assert_eq!(c.open_files(), 0);
        // Gone: the error names the path.
        std::fs::remove_file(&b).unwrap();
        let e = c.read(&fs, "job-2", &b, true).unwrap_err().to_string();
        assert!(e.contains("b.stat"), "{e}");
        assert_eq!(c.open_files(), 0);
    }

    #[test]
    fn a_file_larger_than_the_buffer_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FS;
        let p = dir.path().join("memory.stat");
        let text: String = (0..2000).map(|i| format!("key{i} {i}\n")).collect();
        std::fs::write(&p, &text).unwrap();
        let c = StatFiles::new(8);
        assert_eq!(c.read(&fs, "job-1", &p, true).unwrap(), text);
        assert_eq!(c.read(&fs, "job-1", &p, true).unwrap(), text);
        assert_eq!(c.open_files(), 1);
    }

    #[test]
    fn a_reader_beside_the_owner_reuses_kept_files_and_keeps_none_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FS;
        let kept = dir.path().join("cpu.stat");
        let other = dir.path().join("memory.current");
        std::fs::write(&kept, "usage_usec 5\n").unwrap();
        std::fs::write(&other, "4096\n").unwrap();
        let c = StatFiles::new(8);
        // The owner keeps one file open; the reader beside it re-reads that one...
        c.read(&fs, "job-1", &kept, true).unwrap();
        std::fs::write(&kept, "usage_usec 7\n").unwrap();
        assert_eq!(
            c.read(&fs, "job-1", &kept, false).unwrap(),
            "usage_usec 7\n"
        );
        // ...and reads another without keeping it: the owner's removal (forget_job) can never
        // race a file the reader opened.
        assert_eq!(c.read(&fs, "job-1", &other, false).unwrap(), "4096\n");
        assert_eq!(c.read(&fs, "job-2", &other, false).unwrap(), "4096\n");
        assert_eq!(c.open_files(), 1);
    }

    #[test]
    fn off_opens_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FS;
        let p = dir.path().join("cpu.stat");
        std::fs::write(&p, "usage_usec 5\n").unwrap();
        let c = StatFiles::new(0);
        assert_eq!(c.read(&fs, "job-1", &p, true).unwrap(), "usage_usec 5\n");
        assert_eq!(c.open_files(), 0);
    }
}
