//! Root test of the GPU device fence: four fake NVIDIA GPUs — character devices 195:0-3 made
//! with mknod in a temp dir and declared in `[gpus]` — and jobs that try to open each of them.
//! No driver is loaded for major 195, so a device the fence lets through fails with ENXIO ("No
//! such device or address"); one it stops fails with EPERM. On this hybrid host the fence is the
//! v1 `devices` controller; in the pure cgroup v2 guest (vm/) it is a `BPF_CGROUP_DEVICE`
//! program on each job's cgroup.
//! And a `kill -9` of the daemon while a GPU job runs: after the restart its GPUs are not
//! handed out again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Four fake NVIDIA GPUs in a temp dir, and the `[[gpus.device]]` lines declaring them.
fn fake_gpus() -> (tempfile::TempDir, String) {
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
    (dev, config)
}

#[test]
fn a_job_given_one_of_four_gpus_can_open_only_its_own() {
    require_root!();
    let v1 = Path::new("/sys/fs/cgroup/devices/devices.deny").exists();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let v2 = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"));
    if !v1 && !v2 {
        skip!("neither a cgroup v1 devices controller nor a cgroup2 tree: no device fence here");
    }
    let (dev, config) = fake_gpus();
    let d = TestDaemon::start(pjw_bin(), &config);
    // The daemon says which fence it uses: the v1 controller where mounted, else the program.
    let by = if v1 {
        "v1 devices controller"
    } else {
        "cgroup v2 device program"
    };
    assert!(
        TestDaemon::wait_for(Duration::from_secs(10), || d.log().contains(by)),
        "the daemon does not say it fences by the {by}: {}",
        d.log()
    );

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

fn wait_line(p: &Path) -> String {
    let mut text = String::new();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || {
            text = std::fs::read_to_string(p).unwrap_or_default();
            text.ends_with('\n')
        }),
        "{} never written",
        p.display()
    );
    text.trim().to_string()
}

fn state_of(d: &TestDaemon, id: &str) -> Option<String> {
    d.status()["jobs"]
        .as_array()?
        .iter()
        .find(|j| j["id"] == id)
        .and_then(|j| j["state"].as_str().map(str::to_string))
}

#[test]
fn after_a_kill_9_of_the_daemon_a_running_jobs_gpus_are_not_handed_out_again() {
    require_root!();
    let cpus = pjw_testkit::need_cpus!(2);
    // Fencing is not the point here: on a pure v2 node this runs unfenced.
    let (_dev, gpus) = fake_gpus();
    let mut d = TestDaemon::start(pjw_bin(), &format!("cpus = \"{cpus}\"\n{gpus}"));
    let dir = d.dir().to_path_buf();
    let hold = |tag: &str| {
        format!(
            "echo \"$PJW_GPUS\" > {d}/{tag}.gpus; while [ ! -e {d}/{tag}.go ]; do sleep 0.02; done",
            d = dir.display()
        )
    };
    let a = d.run_sh(&["--gpus", "3", "--cpus", "1", "--job-id", "a"], &hold("a"));
    let held = pjw_core::GpuSet::parse_list(&wait_line(&dir.join("a.gpus"))).unwrap();
    assert_eq!(held.len(), 3);

    d.kill9();
    d.restart();

    // One GPU is free: a 1-GPU job gets exactly that one.
    let c = d.run_sh(
        &["--gpus", "1", "--cpus", "1", "--job-id", "c"],
        &format!("echo \"$PJW_GPUS\" > {}/c.gpus", dir.display()),
    );
    let got = pjw_core::GpuSet::parse_list(&wait_line(&dir.join("c.gpus"))).unwrap();
    pjw_testkit::job::wait(c, "c").ok();
    assert_eq!(got.len(), 1);
    assert!(
        !got.intersects(&held),
        "gpu {got} of the recovered job {held} handed out again"
    );
    // The report names the GPU the job held (pjw's id), the status the one the recovered job
    // holds.
    let o = d
        .pjw()
        .args(["report", "-J", "c", "--format", "json"])
        .output()
        .unwrap();
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(
        (&rep[0]["ngpus"], &rep[0]["gpus"]),
        (&1.into(), &got.to_string().into()),
        "{rep:#}"
    );
    let st = d.status();
    let a_gpus = st["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|j| j["id"] == "a"))
        .map(|j| j["gpus"].clone());
    assert_eq!(a_gpus, Some(held.to_string().into()), "{st:#}");

    // A 2-GPU job waits until the recovered job ends, then gets two of its GPUs.
    let b = d.run_sh(
        &["--gpus", "2", "--cpus", "1", "--job-id", "b"],
        &format!("echo \"$PJW_GPUS\" > {}/b.gpus", dir.display()),
    );
    assert!(TestDaemon::wait_for(Duration::from_secs(20), || state_of(
        &d, "b"
    )
    .as_deref()
        == Some("queued")));
    assert!(!dir.join("b.gpus").exists());
    std::fs::write(dir.join("a.go"), "").unwrap();
    let got = pjw_core::GpuSet::parse_list(&wait_line(&dir.join("b.gpus"))).unwrap();
    assert_eq!(got.len(), 2);
    pjw_testkit::job::wait(b, "b").ok();
    pjw_testkit::job::wait(a, "a").ok();
}
