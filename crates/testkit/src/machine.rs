//! What this machine offers a test, derived instead of written into it: the CPUs a daemon may
//! hand out (this process's allowed CPUs, which a test daemon inherits as its pool) and the
//! users the system knows (name, uid, gid, home from the user database). The suite then runs
//! on 1, 2, 4 or 16 CPUs and on any user database; a test that needs more CPUs than the
//! machine has says so with [`need_cpus!`](crate::need_cpus), counted as a skip.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

use pjw_core::CpuSet;

/// The CPUs this process may run on (`Cpus_allowed_list` in /proc/self/status, within the
/// online CPUs): the pool of a [`TestDaemon`](crate::TestDaemon) without `cpus =`.
pub fn allowed_cpus() -> CpuSet {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| CpuSet::parse_list(v.trim()).ok())
        .unwrap_or_default();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|v| CpuSet::parse_list(v.trim()).ok());
    match online {
        Some(o) if !o.is_empty() => allowed.intersection(&o),
        _ => allowed,
    }
}

/// The first `n` CPUs this process may use, or `None` when it may use fewer.
pub fn first_cpus(n: usize) -> Option<CpuSet> {
    let all = allowed_cpus();
    (all.len() >= n).then(|| all.iter().take(n).collect())
}

/// Record a skip (and return) unless this machine lets the test use at least `n` CPUs;
/// evaluates to the first `n` of them.
#[macro_export]
macro_rules! need_cpus {
    ($n:expr) => {
        match $crate::machine::first_cpus($n) {
            Some(c) => c,
            None => $crate::skip!(
                "needs at least {} CPUs; this machine lets the test use {} ({})",
                $n,
                $crate::machine::allowed_cpus().len(),
                $crate::machine::allowed_cpus()
            ),
        }
    };
}

/// A user of the system's user database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    pub home: PathBuf,
}

fn from_passwd(pw: &libc::passwd) -> User {
    // SAFETY: getpwnam_r/getpwuid_r filled `pw` with NUL-terminated strings in our buffer,
    // which outlives this call.
    let s = |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    User {
        name: s(pw.pw_name),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
        home: PathBuf::from(s(pw.pw_dir)),
    }
}

/// Look a user up by name.
pub fn user_by_name(name: &str) -> Option<User> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid out-parameter for getpwnam_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer's length is passed.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut res,
        )
    };
    (rc == 0 && !res.is_null()).then(|| from_passwd(&pw))
}

/// Look a user up by uid.
pub fn user_by_uid(uid: u32) -> Option<User> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer's length is passed.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut res) };
    (rc == 0 && !res.is_null()).then(|| from_passwd(&pw))
}

/// The name of group `gid`, if the group database has it.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: a zeroed group is a valid out-parameter for getgrgid_r.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer's length is passed.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut res) };
    if rc != 0 || res.is_null() {
        return None;
    }
    // SAFETY: getgrgid_r filled gr_name with a NUL-terminated string in `buf`.
    Some(
        unsafe { CStr::from_ptr(gr.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The unprivileged user the tests run jobs as: `nobody`, which every Debian system and every
/// test guest has (its uid, group and home are read from the user database, not assumed).
pub fn nobody() -> User {
    user_by_name("nobody").expect("the user database has no nobody (every Debian system has)")
}

/// The user running the tests.
pub fn me() -> User {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    user_by_uid(uid).unwrap_or_else(|| panic!("uid {uid} is not in the user database"))
}

/// An id from `from` upward that names no user and no group here: a uid or gid "without a
/// passwd entry", for tests that need one (the user database differs between machines).
pub fn unused_id(from: u32) -> u32 {
    (from..u32::MAX)
        .find(|&id| user_by_uid(id).is_none() && group_name(id).is_none())
        .expect("an unused id")
}

/// The daemon configuration line giving it one CPU (the first this process may use).
pub fn one_cpu_config() -> String {
    let one = first_cpus(1).expect("a CPU this process may use");
    format!("cpus = \"{one}\"\n")
}

/// A workload-manager job id for a test, unique to this test process: `<tag><pid>`.
///
/// A daemon adopts any process on the node whose environment names one of its registered jobs
/// (SLURM_JOB_ID=…, JOB_ID=…), so two test runs on one machine (several worktrees, or the same
/// executable run twice) that used the same fixed id would adopt — and at their job's end kill —
/// each other's processes.
pub fn wlm_job_id(tag: u32) -> String {
    format!("{tag}{}", std::process::id())
}

/// The uid of test user `name`, created when missing: `useradd --system` on the host; in a
/// test guest without it (busybox), a line in the guest's own /etc/passwd and /etc/group.
pub fn test_user(name: &str) -> u32 {
    let id = |n: &str| {
        std::process::Command::new("id")
            .args(["-u", n])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
    };
    if let Some(uid) = id(name) {
        return uid;
    }
    let o = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(name)
        .output();
    match o {
        // Another test may have created it meanwhile (exit 9: exists).
        Ok(o) => assert!(
            o.status.success() || o.status.code() == Some(9),
            "useradd {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) if crate::in_vm_guest() => {
            // One at a time, and looked up again under the lock: tests run on threads, and two
            // that both found the name missing, or the same free uid, made users that shared
            // one (busybox's `id` takes no number, so every uid looked free).
            static GUEST_USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let _one = GUEST_USERS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(uid) = id(name) {
                return uid;
            }
            let uid = unused_id(61_500);
            for (f, line) in [
                (
                    "/etc/passwd",
                    format!("{name}:x:{uid}:{uid}::/:/sbin/nologin\n"),
                ),
                ("/etc/group", format!("{name}:x:{uid}:\n")),
            ] {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(f)
                    .and_then(|mut h| h.write_all(line.as_bytes()))
                    .unwrap_or_else(|e| panic!("{f}: {e}"));
            }
        }
        Err(e) => panic!("useradd {name}: {e}"),
    }
    id(name).expect("test user exists")
}
