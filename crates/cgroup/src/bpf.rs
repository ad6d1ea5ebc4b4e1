//! The bpf(2) calls of the cgroup v2 device fence: load a [`DeviceProgram`] and attach it to a
//! cgroup2 directory with `BPF_F_ALLOW_MULTI`, beside the programs systemd (or anyone above)
//! attached.
//!
//! No file descriptor outlives the call: the attachment holds its own reference to the
//! program, and the kernel drops both when the cgroup is removed (or, with a daemon killed and
//! restarted, stays exactly as long as the job's cgroup does). So there is no detach: a job's
//! program goes with its cgroup.
//!
//! The raw syscall, not libbpf: two commands with fixed-layout attributes; libbpf-sys would
//! build the C library (and libelf, zlib) into every static binary for this
//! (docs/decisions.md).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::device_prog::DeviceProgram;
use crate::CgroupError;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The `BPF_PROG_LOAD` part of `union bpf_attr` (up to `expected_attach_type`, Linux 4.17;
/// the kernel zero-fills the rest).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The `BPF_PROG_ATTACH` part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised #[repr(C)] prefix of `union bpf_attr` of the size
    // passed; every pointer inside it points to memory that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn err(dir: &Path, step: &'static str, source: io::Error, detail: String) -> CgroupError {
    CgroupError::DeviceProgram {
        path: dir.to_path_buf(),
        step,
        source,
        detail,
    }
}

/// Load `prog` (with the verifier's log on failure, for the error).
fn load(dir: &Path, prog: &DeviceProgram) -> Result<OwnedFd, CgroupError> {
    let insns = prog.to_bytes();
    let license = b"GPL\0";
    let mut name = [0u8; 16];
    name[..13].copy_from_slice(b"pjw_gpu_fence");
    let attr = |log: &mut Vec<u8>| ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: prog.insns().len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: u32::from(!log.is_empty()),
        log_size: log.len() as u32,
        log_buf: if log.is_empty() {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        prog_name: name,
        ..Default::default()
    };
    let owned = |fd: libc::c_long| {
        // SAFETY: BPF_PROG_LOAD returned a new file descriptor that nothing else owns.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    };
    let mut no_log = Vec::new();
    let mut e = match sys_bpf(BPF_PROG_LOAD, &mut attr(&mut no_log)) {
        Ok(fd) => return Ok(owned(fd)),
        Err(e) => e,
    };
    // Kernels before 5.11 charge programs to RLIMIT_MEMLOCK (64 KiB by default on some
    // distributions: 16 programs). The daemon's own limit only (jobs do not inherit it): raise
    // it as far as the kernel lets this process, once, and try again.
    if e.raw_os_error() == Some(libc::EPERM) && raise_memlock() {
        match sys_bpf(BPF_PROG_LOAD, &mut attr(&mut no_log)) {
            Ok(fd) => return Ok(owned(fd)),
            Err(again) => e = again,
        }
    }
    let detail = match e.raw_os_error() {
        Some(libc::EPERM) => "; loading BPF programs needs root (CAP_SYS_ADMIN or CAP_BPF), and kernels before 5.11 count them against RLIMIT_MEMLOCK".to_string(),
        Some(libc::EINVAL) | Some(libc::EACCES) => {
            // Once more with the verifier's log, to say why.
            let mut log = vec![0u8; 64 * 1024];
            if let Ok(fd) = sys_bpf(BPF_PROG_LOAD, &mut attr(&mut log)) {
                return Ok(owned(fd));
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(4).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            if tail.is_empty() {
                "; does this kernel have CONFIG_CGROUP_BPF?".to_string()
            } else {
                format!("; verifier: {}", tail.join(" | "))
            }
        }
        Some(libc::ENOSYS) => "; this kernel has no bpf(2)".to_string(),
        _ => String::new(),
    };
    Err(err(dir, "load", e, detail))
}

/// Raise this process's RLIMIT_MEMLOCK to unlimited (root may), else to its hard limit. True
/// when the limit went up.
fn raise_memlock() -> bool {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut cur) } != 0 {
        return false;
    }
    for want in [libc::RLIM_INFINITY, cur.rlim_max] {
        if want == cur.rlim_cur {
            continue;
        }
        let new = libc::rlimit {
            rlim_cur: want,
            rlim_max: want.max(cur.rlim_max),
        };
        // SAFETY: setrlimit reads the struct we pass; it changes only this process's limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &new) } == 0 {
            tracing::info!(limit = want, "RLIMIT_MEMLOCK raised for device programs");
            return true;
        }
    }
    false
}

/// Deny the job whose cgroup2 directory is `dir` what `prog` denies: load it and attach it
/// there with `BPF_F_ALLOW_MULTI`. Attaching the same fence twice adds a second program that
/// answers the same.
pub(crate) fn attach(dir: &Path, prog: &DeviceProgram) -> Result<(), CgroupError> {
    // O_RDONLY | O_DIRECTORY (std adds O_CLOEXEC): the fd BPF_PROG_ATTACH takes for a cgroup.
    let cgroup = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map_err(|e| err(dir, "open", e, String::new()))?;
    let prog_fd = load(dir, prog)?;
    let mut attr = ProgAttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog_fd.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    sys_bpf(BPF_PROG_ATTACH, &mut attr).map_err(|e| {
        let detail = if e.raw_os_error() == Some(libc::EPERM) {
            "; a cgroup above may hold a device program attached without BPF_F_ALLOW_MULTI, which forbids programs below it".to_string()
        } else {
            String::new()
        };
        err(dir, "attach", e, detail)
    })?;
    tracing::debug!(cgroup = %dir.display(), insns = prog.insns().len(), "device program attached");
    Ok(())
}
