//! Root tests of a job's shared memory and IPC (issue 17, part 3), against a real daemon and
//! the real /dev/shm and SysV IPC of this machine: a starter-mode job's own /dev/shm (limited,
//! charged to the job, invisible to the host) and IPC namespace; the scrub of what an
//! unprivileged job leaves in the host's at its end, and what it must keep. Waits are
//! correctness bounds, never timings.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use pjw_testkit::job::{run, wait};
use pjw_testkit::machine::{nobody, unused_id};
use pjw_testkit::{require_root, skip, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

/// The child's stdout up to a line `END` (the pipe stays open while the job runs).
fn lines_until_end(c: &mut Child) -> Vec<String> {
    let mut r = BufReader::new(c.stdout.take().expect("piped stdout"));
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap_or(0) == 0 || l.trim_end() == "END" {
            break;
        }
        lines.push(l.trim_end().to_string());
    }
    std::mem::forget(r);
    lines
}

fn field<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {lines:#?}"))
        .trim()
}

/// `stat -f -c '%b*%S'` (blocks times block size) in bytes.
fn bytes(text: &str) -> u64 {
    let (b, s) = text.split_once('*').unwrap_or_else(|| panic!("{text:?}"));
    b.trim().parse::<u64>().unwrap() * s.trim().parse::<u64>().unwrap()
}

/// Memory charged to the cgroup `pid` is in: v1 `memory.usage_in_bytes` or v2
/// `memory.current`, from the pid's own /proc/PID/cgroup line.
fn memory_of(pid: u32) -> u64 {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let file = cg
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            if ctl.split(',').any(|c| c == "memory") {
                Some(format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"))
            } else {
                None
            }
        })
        .or_else(|| {
            cg.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| format!("/sys/fs/cgroup{p}/memory.current"))
                .filter(|f| Path::new(f).exists())
        })
        .unwrap_or_else(|| panic!("no memory cgroup for {pid}:\n{cg}"));
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

fn kill_job(d: &TestDaemon, id: &str) {
    run(d.pjw().args(["kill", id])).ok();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !d.status()["jobs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|j| j["id"] == id))),
        "job {id} did not end:\n{}",
        d.log()
    );
}

#[test]
fn a_starter_jobs_dev_shm_is_its_own_limited_tmpfs_charged_to_it_and_the_host_sees_nothing() {
    require_root!();
    if !Path::new("/dev/shm").is_dir() {
        skip!("this machine has no /dev/shm");
    }
    let nb = nobody();
    let d = TestDaemon::start(pjw_bin(), "[job]\nshm_size = \"16M\"");
    let marker = format!("pjw-private-shm-{}", std::process::id());
    let script = format!(
        "echo fs=$(stat -f -c %T /dev/shm); echo size=$(stat -f -c '%b*%S' /dev/shm); \
         echo mode=$(stat -c %a /dev/shm); echo ipc=$(readlink /proc/self/ns/ipc); \
         touch /dev/shm/{marker}; \
         dd if=/dev/zero of=/dev/shm/{marker}-fill bs=1M count=32 2>&1 | head -1; \
         echo END; exec sleep 600"
    );
    let mut c = d
        .pjw()
        .args(["run", "--user", &nb.name, "-j", "shmjob", "--", "sh", "-c"])
        .arg(&script)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_until_end(&mut c);
    assert_eq!(field(&lines, "fs="), "tmpfs");
    // [job] shm_size for a job without --mem.
    assert_eq!(bytes(field(&lines, "size=")), 16 << 20);
    assert_eq!(field(&lines, "mode="), "1777");
    assert!(
        lines.iter().any(|l| l.contains("No space left on device")),
        "filling /dev/shm did not hit its limit: {lines:#?}"
    );
    // Its own IPC namespace; the host's /dev/shm has no file of it.
    let ours = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    assert_ne!(field(&lines, "ipc="), ours.display().to_string());
    assert!(!Path::new("/dev/shm").join(&marker).exists());
    let mine = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mine.lines().any(|l| l.contains("pjw-shm")),
        "a job's /dev/shm leaked into the host"
    );
    let theirs = std::fs::read_to_string(format!("/proc/{}/mountinfo", c.id())).unwrap();
    assert!(
        theirs
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some("/dev/shm") && l.contains("pjw-shm")),
        "{theirs}"
    );
    // The 16 MiB written there are charged to the job's memory cgroup.
    let charged = memory_of(c.id());
    assert!(
        charged >= 16 << 20,
        "the job's cgroup holds {charged} bytes, less than its /dev/shm"
    );
    kill_job(&d, "shmjob");
    wait(c, "the job shmjob (killed)").signal(libc::SIGKILL);

    // --mem sizes it; private_ipc = false leaves the host's /dev/shm and IPC namespace.
    let out = run(d
        .pjw()
        .args([
            "run", "--mem", "48M", "--", "stat", "-f", "-c", "%b*%S", "/dev/shm",
        ])
        .current_dir("/"))
    .ok();
    assert_eq!(bytes(out.stdout().trim()), 48 << 20, "{}", out.describe());
    let off = TestDaemon::start(pjw_bin(), "[job]\nprivate_ipc = false");
    let out = run(off
        .pjw()
        .args(["run", "--", "readlink", "/proc/self/ns/ipc"])
        .current_dir("/"))
    .ok();
    assert_eq!(
        out.stdout().trim(),
        ours.display().to_string(),
        "{}",
        out.describe()
    );
}

/// `ipcmk ARGS` as `uid`: the id it made.
fn ipcmk_as(uid: u32, args: &[&str]) -> i32 {
    let out = run(Command::new("ipcmk")
        .args(args)
        .uid(uid)
        .gid(uid)
        .current_dir("/"))
    .ok();
    out.stdout()
        .rsplit(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no id from ipcmk: {}", out.describe()))
}

/// Whether `/proc/sysvipc/<kind>` lists object `id`.
fn sysv_has(kind: &str, id: i32) -> bool {
    std::fs::read_to_string(format!("/proc/sysvipc/{kind}"))
        .unwrap()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(id.to_string().as_str()))
}

/// `ipcrm` as root (cleanup), ignoring an object already gone.
fn ipcrm(flag: &str, id: i32) {
    let _ = Command::new("ipcrm")
        .args([flag, &id.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn write_as(uid: u32, path: &Path) {
    run(Command::new("sh")
        .args(["-c", &format!("echo x > {}", path.display())])
        .uid(uid)
        .gid(uid)
        .current_dir("/"))
    .ok();
}

/// Until the wall clock's second has moved past now (the kernel keeps IPC times in seconds).
fn next_second() {
    let s = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let start = s();
    while s() == start {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn what_an_unprivileged_job_leaves_in_dev_shm_and_sysv_ipc_is_removed_at_its_end_and_nothing_else()
{
    require_root!();
    if Command::new("ipcmk").arg("-V").output().is_err() {
        skip!("util-linux ipcmk is not installed");
    }
    if !Path::new("/dev/shm").is_dir() || !Path::new("/proc/sysvipc/shm").exists() {
        skip!("this machine has no /dev/shm or no SysV IPC");
    }
    // Two uids no account uses: the job's owner and a bystander.
    let owner = unused_id(62_100);
    let other = unused_id(owner + 1);
    let d = TestDaemon::start(pjw_bin(), "");
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let tag = std::process::id();
    // Before the job: the bystander's segment and file, and one of the owner's own (a login
    // session's), all older than the job.
    let other_seg = ipcmk_as(other, &["-M", "4096"]);
    let other_file = PathBuf::from(format!("/dev/shm/pjw-bystander-{tag}"));
    write_as(other, &other_file);
    let older_seg = ipcmk_as(owner, &["-M", "4096"]);
    next_second();
    let left = PathBuf::from(format!("/dev/shm/pjw-left-{tag}"));
    let script = format!(
        "ipcmk -M 4096; ipcmk -S 1; ipcmk -Q; echo x > {}",
        left.display()
    );
    let out = run(Command::new(pjw_bin())
        .args(["run", "-j", "leaver", "--", "sh", "-c", &script])
        .env("PJW_SOCKET", d.socket())
        .uid(owner)
        .gid(owner)
        .current_dir("/"))
    .ok();
    let ids: Vec<(&str, i32)> = ["shm", "sem", "msg"]
        .into_iter()
        .zip(out.stdout().lines().filter_map(|l| {
            l.rsplit(':')
                .next()
                .and_then(|n| n.trim().parse::<i32>().ok())
        }))
        .collect();
    assert_eq!(ids.len(), 3, "{}", out.describe());
    let gone = TestDaemon::wait_for(Duration::from_secs(20), || {
        !left.exists() && ids.iter().all(|(k, id)| !sysv_has(k, *id))
    });
    let still: Vec<_> = ids.iter().filter(|(k, id)| sysv_has(k, *id)).collect();
    let kept = (
        sysv_has("shm", other_seg),
        other_file.exists(),
        sysv_has("shm", older_seg),
    );
    // Clean up before asserting.
    for (k, id) in &ids {
        let flag = match *k {
            "shm" => "-m",
            "sem" => "-s",
            _ => "-q",
        };
        ipcrm(flag, *id);
    }
    ipcrm("-m", other_seg);
    ipcrm("-m", older_seg);
    let _ = std::fs::remove_file(&left);
    let _ = std::fs::remove_file(&other_file);
    assert!(
        gone,
        "left after the job's end: {still:?}, {} exists: {}\n{}",
        left.display(),
        left.exists(),
        d.log()
    );
    assert_eq!(
        kept,
        (true, true, true),
        "(bystander's segment, bystander's file, the owner's older segment) must stay"
    );
}

/// A POSIX message queue a job leaves behind is removed at its end where the host's mqueue file
/// system is mounted at /dev/mqueue (systemd mounts it: the systemd guest runs this test), and
/// a bystander's queue stays.
#[test]
fn a_message_queue_an_unprivileged_job_leaves_is_removed_at_its_end() {
    require_root!();
    let mq = Path::new("/dev/mqueue");
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some("/dev/mqueue"))
        })
        .unwrap_or(false);
    if !mounted {
        skip!("no mqueue file system at /dev/mqueue on this machine (systemd mounts it; the systemd guest runs this test)");
    }
    let wl = pjw_bin().with_file_name("pjw-wl");
    assert!(wl.exists(), "pjw-wl not built at {}", wl.display());
    let owner = unused_id(62_200);
    let other = unused_id(owner + 1);
    let d = TestDaemon::start(pjw_bin(), "");
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let tag = std::process::id();
    let (left, bystander) = (format!("pjw-left-{tag}"), format!("pjw-bystander-{tag}"));
    run(Command::new(&wl)
        .args(["mq", &bystander])
        .uid(other)
        .gid(other)
        .current_dir("/"))
    .ok();
    next_second();
    let out = run(Command::new(pjw_bin())
        .args(["run", "-j", "mq-leaver", "--"])
        .arg(&wl)
        .args(["mq", &left])
        .env("PJW_SOCKET", d.socket())
        .uid(owner)
        .gid(owner)
        .current_dir("/"));
    let made = out.describe();
    let gone = TestDaemon::wait_for(Duration::from_secs(20), || !mq.join(&left).exists());
    let kept = mq.join(&bystander).exists();
    let _ = std::fs::remove_file(mq.join(&left));
    let _ = std::fs::remove_file(mq.join(&bystander));
    assert!(
        out.status.success(),
        "the job could not make its queue: {made}"
    );
    assert!(
        gone,
        "/dev/mqueue/{left} left after the job's end\n{}",
        d.log()
    );
    assert!(
        kept,
        "the bystander's queue /dev/mqueue/{bystander} was removed"
    );
}

/// Memory charged to the daemon's job partition (its cgroup parent): v1 `memory.usage_in_bytes`
/// or v2 `memory.current`.
fn partition_memory(d: &TestDaemon) -> u64 {
    d.driver()
        .parent_dirs()
        .iter()
        .find_map(|(_, dir)| {
            ["memory.usage_in_bytes", "memory.current"]
                .iter()
                .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
                .and_then(|t| t.trim().parse().ok())
        })
        .expect("the job partition's memory")
}

/// Issue 25, item 8: what an unprivileged job leaves in the host's /dev/shm, of every shape —
/// a directory tree holding 32 MiB, a chain of directories deeper than the scrub holds
/// descriptors for, a symbolic link to a bystander's file, a FIFO, and a 32 MiB file a
/// process of the owner's outside the job holds open — is all gone at its end, and its pages
/// are no longer charged to pjw's job partition; the link's target (the bystander's file)
/// is untouched. (The scrub left directories, and with them what they held, charged to the
/// partition with no job running.)
#[test]
fn every_shape_an_unprivileged_job_leaves_in_dev_shm_is_removed_and_its_pages_freed() {
    require_root!();
    if !Path::new("/dev/shm").is_dir() {
        skip!("this machine has no /dev/shm");
    }
    let owner = unused_id(62_300);
    let other = unused_id(owner + 1);
    let d = TestDaemon::start(pjw_bin(), "");
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let tag = std::process::id();
    let shm = |n: &str| PathBuf::from(format!("/dev/shm/pjw-{n}-{tag}"));
    let bystander = shm("bystander8");
    write_as(other, &bystander);
    next_second();
    let go = d.dir().join("go-shapes");
    let script = format!(
        "set -e; t={tree}; mkdir -p $t/a/b/c; head -c 33554432 /dev/zero > $t/a/b/c/data; \
         p={chain}; i=0; while [ $i -lt 80 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p; echo x > $p/bottom; \
         ln -s {bystander} {link}; mkfifo {fifo}; head -c 33554432 /dev/zero > {held}; \
         echo END; while [ ! -e {go} ]; do sleep 0.05; done",
        tree = shm("tree").display(),
        chain = shm("chain").display(),
        bystander = bystander.display(),
        link = shm("link").display(),
        fifo = shm("fifo").display(),
        held = shm("held").display(),
        go = go.display(),
    );
    let mut job = Command::new(pjw_bin())
        .args(["run", "-j", "shapes", "--", "sh", "-c", &script])
        .env("PJW_SOCKET", d.socket())
        .uid(owner)
        .gid(owner)
        .current_dir("/")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = lines_until_end(&mut job);
    // The owner's process outside the job holds the file open.
    let mut holder = Command::new("sleep")
        .arg("600")
        .stdin(std::fs::File::open(shm("held")).expect("the job made the held file"))
        .uid(owner)
        .gid(owner)
        .spawn()
        .unwrap();
    let charged = partition_memory(&d);
    std::fs::write(&go, "").unwrap();
    wait(job, "the job that leaves things in /dev/shm").ok();
    let names = ["tree", "chain", "link", "fifo", "held"];
    let gone = TestDaemon::wait_for(Duration::from_secs(30), || {
        names
            .iter()
            .all(|n| std::fs::symlink_metadata(shm(n)).is_err())
    });
    let left: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| std::fs::symlink_metadata(shm(n)).is_ok())
        .collect();
    let held_size = std::fs::metadata(format!("/proc/{}/fd/0", holder.id()))
        .map(|m| m.len())
        .unwrap_or(u64::MAX);
    let after = partition_memory(&d);
    let kept = std::fs::read_to_string(&bystander).unwrap_or_default();
    let _ = holder.kill();
    let _ = holder.wait();
    // Clean up whatever is left before asserting.
    for n in names {
        let p = shm(n);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
    let _ = std::fs::remove_file(&bystander);
    eprintln!(
        "job partition: {} MiB charged before the job's end, {} MiB after its scrub",
        charged >> 20,
        after >> 20
    );
    assert!(
        gone,
        "left in /dev/shm after the job's end: {left:?}\n{}",
        d.log()
    );
    assert_eq!(held_size, 0, "the file held from outside kept its pages");
    assert_eq!(
        kept, "x\n",
        "the bystander's file (the link's target) was touched"
    );
    assert!(
        charged.saturating_sub(after) >= 48 << 20,
        "the job partition still holds the pages: {charged} before, {after} after"
    );
}
