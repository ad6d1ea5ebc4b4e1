//! Root test of the GPU device fence on cgroup v1 (the `devices` controller): four fake NVIDIA
//! GPUs — character devices 195:0-3 made with mknod in a temp dir and declared in `[gpus]` — and
//! jobs that try to open each of them. No driver is loaded for major 195, so a device the fence
//! lets through fails with ENXIO ("No such device or address"); one it stops fails with EPERM.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use pjw_testkit::{require_root, skip, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

/// Make character device `path` with number `major:minor`.
fn mknod(path: &Path, major: u32, minor: u32) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mknod only creates a file in our own temp dir.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// What opening each fake GPU gave inside a job: `(gpu, "ENXIO" | "EPERM" | other)`, and the
/// job's `CUDA_VISIBLE_DEVICES` and `PJW_GPUS`.
fn probe(d: &TestDaemon, dev: &Path, args: &[&str]) -> (Vec<String>, String) {
    // `cat` reports the open error with strerror: stable text, whatever the shell.
    let script = format!(
        "for i in 0 1 2 3; do cat {0}/nvidia$i </dev/null 2>&1 | head -n 1 | sed \"s/^/$i /\"; done; \
         echo \"env ${{CUDA_VISIBLE_DEVICES-unset}} ${{PJW_GPUS-unset}}\"",
        dev.display()
    );
    let out = d.run_sh(args, &script).wait_with_output().expect("pjw run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pjw run {args:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut opens = Vec::new();
    let mut env = String::new();
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("env ") {
            env = e.to_string();
        } else if let Some((i, msg)) = line.split_once(' ') {
            let what = if msg.contains("No such device or address") {
                "ENXIO"
            } else if msg.contains("Operation not permitted") {
                "EPERM"
            } else {
                msg
            };
            opens.push(format!("{i} {what}"));
        }
    }
    (opens, env)
}

#[test]
fn a_job_given_one_of_four_gpus_can_open_only_its_own() {
    require_root!();
    if !Path::new("/sys/fs/cgroup/devices/devices.deny").exists() {
        skip!("no cgroup v1 devices controller (pure cgroup v2: the BPF device program is not implemented yet)");
    }
    let dev = tempfile::Builder::new()
        .prefix("pjw-gpu-dev")
        .tempdir()
        .expect("temp dir");
    let mut config = String::new();
    for i in 0..4 {
        let p = dev.path().join(format!("nvidia{i}"));
        mknod(&p, 195, i);
        config += &format!(
            "[[gpus.device]]\nfile = \"{}\"\nvendor = \"nvidia\"\n",
            p.display()
        );
    }
    let d = TestDaemon::start(pjw_bin(), &config);

    let (opens, env) = probe(&d, dev.path(), &["--gpus", "1"]);
    assert_eq!(env, "0 0", "CUDA_VISIBLE_DEVICES and PJW_GPUS");
    assert_eq!(
        opens,
        ["0 ENXIO", "1 EPERM", "2 EPERM", "3 EPERM"],
        "{}",
        d.log()
    );

    // A CPU-only job on the node opens none of them.
    let (opens, env) = probe(&d, dev.path(), &[]);
    assert_eq!(env, "unset unset");
    assert_eq!(opens, ["0 EPERM", "1 EPERM", "2 EPERM", "3 EPERM"]);
}
