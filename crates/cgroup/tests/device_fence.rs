//! Root test of the cgroup v2 device fence on the real kernel: a `BPF_CGROUP_DEVICE` program
//! attached to a job's cgroup2 directory (below this test's own cgroup), and a shell in the job
//! that opens four fake GPU nodes (character devices 195:0-3 made with mknod; no driver is
//! loaded for major 195, so an open the fence lets through fails with ENXIO, one it stops with
//! EPERM). It runs wherever there is a cgroup2 tree: on a hybrid host (the controller-less
//! `unified` tree: device programs need no controller) and in the pure v2 guests. Only the
//! shell this test starts joins the job; a guard kills it and removes the cgroups on failure.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use pjw_cgroup::devices::Fence;
use pjw_cgroup::{CgroupError, CpuSet, Driver, JobLimits, Mode, ParentSpec};
use pjw_testkit::{require, skip, Component};

const JOB: &str = "job-gpu";

struct Guard {
    driver: Driver,
    child: Option<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.driver.kill(JOB);
        let _ = self.driver.remove_job(JOB);
        let _ = self.driver.remove_parent_if_empty();
    }
}

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
    assert_eq!(rc, 0, "mknod {}", path.display());
}

/// What opening `path` gives this process: `ENXIO`, `EPERM`, `ok` or the error.
fn open_result(path: &Path) -> String {
    match std::fs::File::open(path) {
        Ok(_) => "ok".into(),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENXIO) => "ENXIO".into(),
            Some(libc::EPERM) => "EPERM".into(),
            _ => e.to_string(),
        },
    }
}

#[test]
fn a_device_program_on_a_jobs_cgroup2_denies_only_the_other_gpus() {
    require!(Component::Root);
    let parent = ParentSpec::parse(&pjw_testkit::test_parent(&format!(
        "pjw-devtest-{}",
        std::process::id()
    )))
    .unwrap();
    let mut driver = Driver::detect(Path::new("/proc"), &parent).unwrap();
    if !driver.fence_devices_by(Fence::BpfProgram) {
        skip!("no cgroup2 tree here (pure cgroup v1): device programs attach to cgroup2 only");
    }
    let mut g = Guard {
        driver,
        child: None,
    };
    let d = &g.driver;
    if let Err(e) = d.prepare_parent() {
        match e {
            CgroupError::SubtreeBusy { path, .. } if d.mode() == Mode::Unified => skip!(
                "this process's cgroup {} has other processes (no-internal-process rule)",
                path.display()
            ),
            e => panic!("prepare_parent: {e}"),
        }
    }
    let cpus = pjw_testkit::machine::first_cpus(1).expect("a CPU");
    let mems = d
        .parent_dirs()
        .into_iter()
        .find(|(k, _)| k == "cpuset")
        .map(|(_, p)| std::fs::read_to_string(p.join("cpuset.mems")).unwrap())
        .unwrap_or_default();
    let limits = JobLimits {
        cpus,
        mems: CpuSet::parse_list(&mems).unwrap(),
        memory_max: None,
        pids_max: None,
        swap_max: None,
        io: Default::default(),
    };
    d.create_job(JOB, &limits).unwrap();

    let dev = tempfile::Builder::new()
        .prefix("pjw-devtest")
        .tempdir()
        .unwrap();
    for i in 0..4 {
        mknod(&dev.path().join(format!("nvidia{i}")), 195, i);
    }
    // The job was given GPU 0 of four: the others' nodes are denied.
    d.deny_devices(JOB, &[(195, 1), (195, 2), (195, 3)])
        .unwrap();

    // The shell waits on stdin until it is in the job, then opens each node.
    let script = format!(
        "read go; for i in 0 1 2 3; do cat {0}/nvidia$i </dev/null 2>&1 | head -n 1 | sed \"s/^/$i /\"; done; \
         cat /dev/null && echo null ok; echo x > /dev/null && echo null write ok",
        dev.path().display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    g.child = Some(child);
    g.driver.add_process(JOB, pid).unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let out = g.child.take().unwrap().wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            if l.contains("No such device or address") {
                format!("{} ENXIO", &l[..1])
            } else if l.contains("Operation not permitted") {
                format!("{} EPERM", &l[..1])
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(
        lines,
        [
            "0 ENXIO",
            "1 EPERM",
            "2 EPERM",
            "3 EPERM",
            "null ok",
            "null write ok"
        ],
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Outside the job nothing changed: this test process opens another GPU's node past the
    // fence (ENXIO, no driver) — the program is the job's, not the machine's.
    assert_eq!(open_result(&dev.path().join("nvidia1")), "ENXIO");

    // The job's cgroup goes with its program: no descriptor holds it.
    let d = &g.driver;
    d.remove_job(JOB).unwrap();
    assert!(d.list_jobs().unwrap().is_empty());
    // A fence that cannot be put in place is an error naming the cgroup, never a silent pass.
    match d.deny_devices(JOB, &[(195, 1)]) {
        Err(e @ CgroupError::DeviceProgram { .. }) => {
            assert!(e.to_string().contains(JOB), "{e}");
        }
        other => panic!("fencing a job without a cgroup: {other:?}"),
    }
    drop(g);
}
