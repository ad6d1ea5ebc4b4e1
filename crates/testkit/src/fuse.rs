//! A FUSE mount whose server never answers: what a user's `fusermount` of a hostile (or hung)
//! file system gives root's walks. Made here without libfuse or fusermount: `/dev/fuse` opened
//! and the mount made with its descriptor; the test holds the descriptor and never reads it, so
//! the kernel's `INIT` is never answered and every request (a `stat`, an `open`, a `statfs`)
//! into the mount blocks until the descriptor is closed (the connection is then aborted and
//! they fail). Root only. Dropping it detaches the mount and closes the descriptor.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A mount of an unanswering FUSE server on a directory.
#[derive(Debug)]
pub struct Unanswered {
    at: PathBuf,
    dev: Option<OwnedFd>,
}

impl Unanswered {
    /// Mount it on `dir` (an existing directory), owned by `uid:gid` as `fusermount` would
    /// mount a user's, with `allow_other` (which `user_allow_other` in /etc/fuse.conf gives
    /// users): without it the kernel refuses every other user, root too, before asking the
    /// server, so a walk by root would get `EACCES` at once instead of hanging. Err: the reason (no /dev/fuse, not root, no FUSE in the kernel).
    pub fn mount(dir: &Path, uid: u32, gid: u32) -> Result<Unanswered, String> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("/dev/fuse: {e}"))?;
        let dev: OwnedFd = dev.into();
        let data = format!(
            "fd={},rootmode=40000,user_id={uid},group_id={gid},allow_other",
            dev.as_raw_fd()
        );
        let c = |s: &str| CString::new(s).map_err(|e| e.to_string());
        let (src, target, fstype, data) = (
            c("pjw-unanswered")?,
            c(&dir.to_string_lossy())?,
            c("fuse")?,
            c(&data)?,
        );
        // SAFETY: valid C strings; mount(2) reads them only during the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(format!(
                "mount fuse on {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Unanswered {
            at: dir.to_path_buf(),
            dev: Some(dev),
        })
    }

    /// Whether a mount of it is still attached at its directory (by `/proc/self/mountinfo`,
    /// which asks the file system nothing).
    pub fn attached(&self) -> bool {
        let at = self.at.to_string_lossy();
        std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|t| {
            t.lines().any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.get(4).is_some_and(|p| *p == at)
                    && l.split(" - ")
                        .nth(1)
                        .is_some_and(|r| r.starts_with("fuse "))
            })
        })
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        // Closing the descriptor aborts the connection: whatever still waits in it fails.
        drop(self.dev.take());
        if !self.attached() {
            return;
        }
        if let Ok(p) = CString::new(self.at.to_string_lossy().as_bytes()) {
            // SAFETY: a valid C string.
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
        }
    }
}
