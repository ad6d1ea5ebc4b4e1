//! Root tests of job starter mode and per-job /tmp: `pjw run --user`, `--from-env`, `--tmp`,
//! against a real daemon and real cgroups (pjw-testkit), with real mounts and namespaces.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pjw_testkit::job::{run, wait};
use pjw_testkit::machine::{first_cpus, nobody};
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn jobs(status: &serde_json::Value) -> Vec<serde_json::Value> {
    status["jobs"].as_array().cloned().unwrap_or_default()
}

/// Let unprivileged clients reach the daemon's socket.
fn open_to_users(d: &TestDaemon) {
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Read the child's stdout up to a line `END`.
fn lines_until_end(c: &mut Child) -> Vec<String> {
    let out = c.stdout.take().expect("piped stdout");
    let mut r = BufReader::new(out);
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap_or(0) == 0 {
            break;
        }
        let l = l.trim_end().to_string();
        if l == "END" {
            break;
        }
        lines.push(l);
    }
    // Keep the pipe open until the job ends (the job may still write).
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

fn wait_gone(d: &TestDaemon, id: &str) {
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !jobs(&d.status())
            .iter()
            .any(|j| j["id"] == id)),
        "job {id} did not end:\n{}",
        d.log()
    );
}

fn kill_job(d: &TestDaemon, id: &str) {
    run(d.pjw().args(["kill", id])).ok();
    wait_gone(d, id);
}

/// The system's answer for a user's groups, as the reference.
/// `stat -f -c '%b*%S'` output (blocks times block size) in bytes.
fn bytes(text: &str) -> u64 {
    let (b, s) = text.split_once('*').unwrap_or_else(|| panic!("{text:?}"));
    b.trim().parse::<u64>().unwrap() * s.trim().parse::<u64>().unwrap()
}

fn groups_of(user: &str) -> String {
    let out = Command::new("id").args(["-G", user]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn root_runs_a_job_as_nobody_with_nobodys_groups_in_its_cgroup() {
    require_root!();
    let nb = nobody();
    let d = TestDaemon::start(pjw_bin(), "");
    open_to_users(&d);
    let mut c = d
        .pjw()
        .args(["run", "--user", &nb.name, "-j", "asnobody", "--"])
        .args([
            "sh",
            "-c",
            "echo user=$(id -un); echo groups=$(id -G); grep -E '^(Uid|Gid|CapEff|CapPrm):' /proc/self/status | tr -s '\\t' ' '; \
             echo home=$HOME; echo env_user=$USER; echo logname=$LOGNAME; echo cg=$(cat /proc/self/cgroup | tr '\\n' ' '); \
             echo END; exec sleep 600",
        ])
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_until_end(&mut c);
    assert_eq!(field(&lines, "user="), nb.name, "{lines:#?}");
    assert_eq!(field(&lines, "groups="), groups_of(&nb.name));
    // Real, effective, saved and filesystem ids are all nobody's; no capability is left.
    let (u, g) = (nb.uid, nb.gid);
    assert_eq!(field(&lines, "Uid:"), format!("{u} {u} {u} {u}"));
    assert_eq!(field(&lines, "Gid:"), format!("{g} {g} {g} {g}"));
    assert_eq!(field(&lines, "CapEff:"), "0000000000000000");
    assert_eq!(field(&lines, "CapPrm:"), "0000000000000000");
    assert_eq!(field(&lines, "env_user="), nb.name);
    assert_eq!(field(&lines, "logname="), nb.name);
    assert_eq!(field(&lines, "home="), nb.home.display().to_string());
    assert!(field(&lines, "cg=").contains("/job-asnobody"), "{lines:#?}");
    // The daemon records nobody as the owner; the job's process is in the job's cgroups.
    let st = d.status();
    let j = jobs(&st)
        .into_iter()
        .find(|j| j["id"] == "asnobody")
        .unwrap();
    assert_eq!(
        (j["user"].as_str(), j["uid"].as_u64()),
        (Some(nb.name.as_str()), Some(nb.uid as u64))
    );
    let procs = d.driver().procs("job-asnobody").unwrap();
    assert!(procs.contains(&c.id()), "{procs:?} lacks {}", c.id());
    // nobody may kill the job: its owner is nobody, not root who started it.
    run(d
        .pjw()
        .args(["kill", "asnobody"])
        .uid(nb.uid)
        .gid(nb.gid)
        .current_dir("/"))
    .ok();
    wait_gone(&d, "asnobody");
    wait(c, "the job asnobody (killed)").signal(libc::SIGKILL);
}

#[test]
fn only_root_may_name_another_user_and_unknown_users_are_refused() {
    require_root!();
    let nb = nobody();
    let root = pjw_testkit::machine::user_by_uid(0).expect("uid 0 in the user database");
    let d = TestDaemon::start(pjw_bin(), "");
    open_to_users(&d);
    let as_nobody =
        |args: &[&str]| run(d.pjw().args(args).uid(nb.uid).gid(nb.gid).current_dir("/"));
    let out = as_nobody(&["run", "--user", &root.name, "--", "id", "-u"]).code(125);
    let err = out.stderr();
    assert!(
        err.contains(&format!(
            "only root may run a job as another user ({})",
            root.name
        )),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Naming oneself is fine.
    let out = as_nobody(&["run", "--user", &nb.name, "--", "id", "-u"]).ok();
    assert_eq!(out.stdout().trim(), nb.uid.to_string());
    // An unknown user, from root.
    let out = run(d
        .pjw()
        .args(["run", "--user", "no-such-user-pjw", "--", "true"]))
    .code(125);
    assert!(out.stderr().contains("no such user: no-such-user-pjw"));
    // nobody's job ended with its client; the daemon drops it once it sees the cgroup empty.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || jobs(&d.status()).is_empty()),
        "jobs left:\n{}",
        d.log()
    );
}

#[test]
fn from_env_takes_id_user_cpus_and_memory_from_the_manager() {
    require_root!();
    let nb = nobody();
    // Unique to this run: the daemon adopts processes naming it node-wide.
    let id = pjw_testkit::machine::wlm_job_id(4242);
    let wlm_tmp = format!("/tmp/slurm-{id}");
    let d = TestDaemon::start(pjw_bin(), "");
    // A Slurm task's environment as slurmstepd sets it, for a job of nobody's.
    let mut c = d
        .pjw()
        .args(["run", "--from-env", "slurm", "--tmp", "16M", "--"])
        .args([
            "sh",
            "-c",
            &format!("echo user=$(id -un); echo wlmtmp=$(stat -c '%U %a' {wlm_tmp}); echo END; exec sleep 600"),
        ])
        .env("TMPDIR", &wlm_tmp)
        .env("SLURM_JOB_ID", &id)
        .env("SLURM_JOB_USER", &nb.name)
        .env("SLURM_CPUS_ON_NODE", "1")
        .env("SLURM_MEM_PER_CPU", "64")
        .env("SLURM_JOB_NAME", "wrap")
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_until_end(&mut c);
    assert_eq!(field(&lines, "user="), nb.name);
    // The manager's TMPDIR under /tmp exists again inside the private /tmp, the user's.
    assert_eq!(field(&lines, "wlmtmp="), format!("{} 700", nb.name));
    assert!(!Path::new(&wlm_tmp).exists());
    let j = jobs(&d.status())
        .into_iter()
        .find(|j| j["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no job {id}: {}", d.log()));
    assert_eq!(j["user"], nb.name.as_str());
    assert_eq!(j["ncpus"], 1);
    assert_eq!(j["mem"], 64u64 << 20);
    assert_eq!(j["name"], "wrap");
    assert_eq!(j["wlm"], format!("slurm:{id}"));
    let text = run(d.pjw().arg("status")).ok();
    assert!(text
        .stdout()
        .contains(&format!("{id}: workload manager job slurm:{id}")));
    kill_job(&d, &id);
    wait(c, format!("the job {id} (killed)")).signal(libc::SIGKILL);
    // No manager in sight: a clear error.
    let out = run(d
        .pjw()
        .args(["run", "--from-env", "--", "true"])
        .env_clear()
        .env("PJW_SOCKET", d.socket())
        .current_dir("/"))
    .code(125);
    assert!(out.stderr().contains("no workload manager job found"));
}

#[test]
fn a_root_jobs_private_tmp_is_limited_owned_by_the_user_and_leaves_the_host_alone() {
    require_root!();
    let nb = nobody();
    let d = TestDaemon::start(pjw_bin(), "");
    let marker = format!("pjw-private-tmp-{}", std::process::id());
    let script = format!(
        "echo tmpdir=$TMPDIR; echo owner=$(stat -c %U /tmp) $(stat -c %U /var/tmp 2>/dev/null || echo none); \
         echo fs=$(stat -f -c %T /tmp); echo size=$(stat -f -c '%b*%S' /tmp); \
         touch /tmp/{marker} /var/tmp/{marker}; \
         dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1 | head -1; echo dd_status=$?; \
         echo END; exec sleep 600"
    );
    let mut c = d
        .pjw()
        .args([
            "run", "--user", &nb.name, "--tmp", "16M", "-j", "tmpjob", "--", "sh", "-c",
        ])
        .arg(&script)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_until_end(&mut c);
    assert_eq!(field(&lines, "tmpdir="), "/tmp");
    // /var/tmp shares the tmpfs where the machine has a /var/tmp (the VM guest has none).
    let var_tmp = if Path::new("/var/tmp").is_dir() {
        nb.name.as_str()
    } else {
        "none"
    };
    assert_eq!(field(&lines, "owner="), format!("{} {var_tmp}", nb.name));
    assert_eq!(field(&lines, "fs="), "tmpfs");
    assert_eq!(bytes(field(&lines, "size=")), 16 << 20);
    assert!(
        lines.iter().any(|l| l.contains("No space left on device")),
        "{lines:#?}"
    );
    // The host sees none of it, while the job runs.
    assert!(!Path::new("/tmp").join(&marker).exists());
    assert!(!Path::new("/var/tmp").join(&marker).exists());
    // The job's own mount table has the tmpfs; the host's (ours) has not.
    let mine = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let on_tmp = |l: &&str| {
        let mp = l.split_whitespace().nth(4).unwrap_or("");
        (mp == "/tmp" || mp == "/var/tmp") && l.contains("pjw-tmp")
    };
    assert!(
        !mine.lines().any(|l| on_tmp(&l)),
        "a job tmpfs leaked into the host"
    );
    let theirs = std::fs::read_to_string(format!("/proc/{}/mountinfo", c.id())).unwrap();
    assert!(
        theirs.contains(" /tmp ") && theirs.contains("pjw-tmp"),
        "{theirs}"
    );
    kill_job(&d, "tmpjob");
    wait(c, "the job tmpjob (killed)").signal(libc::SIGKILL);
    assert!(!Path::new("/tmp").join(&marker).exists());
    assert!(!Path::new("/var/tmp").join(&marker).exists());
    // --tmp 0 turns it off even where the node has a default.
    let d2 = TestDaemon::start(pjw_bin(), "[job]\ntmp = \"32M\"");
    let out = run(d2
        .pjw()
        .args([
            "run",
            "--tmp",
            "0",
            "--",
            "sh",
            "-c",
            "stat -c %d:%i /tmp; echo ${TMPDIR:-unset}",
        ])
        .env_remove("TMPDIR")
        .current_dir("/"))
    .ok();
    let text = out.stdout();
    let host = std::fs::metadata("/tmp").unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [format!("{}:{}", host.dev(), host.ino()).as_str(), "unset"],
        "the job without a private /tmp sees the host's:\n{}",
        out.describe()
    );
    // The node default applies without --tmp.
    let out = run(d2
        .pjw()
        .args(["run", "--", "sh", "-c", "stat -f -c '%b*%S' /tmp"])
        .current_dir("/"))
    .ok();
    assert_eq!(bytes(out.stdout().trim()), 32 << 20, "{}", out.describe());
}

#[test]
fn an_unprivileged_jobs_tmpdir_is_a_limited_tmpfs_of_its_own_removed_at_the_end_and_after_a_crash()
{
    require_root!();
    let nb = nobody();
    let base = tempfile::Builder::new()
        .prefix("pjw-tmproot")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = base.path().join("jobs");
    let mut d = TestDaemon::start(
        pjw_bin(),
        &format!("[job]\ntmp_root = \"{}\"", root.display()),
    );
    open_to_users(&d);
    let start = |id: &str| {
        d.pjw()
            .args(["run", "--tmp", "16M", "-j", id, "--", "sh", "-c"])
            .arg(
                "echo tmpdir=$TMPDIR; echo owner=$(stat -c '%u %a' $TMPDIR); \
                 echo size=$(stat -f -c '%b*%S' $TMPDIR); \
                 dd if=/dev/zero of=$TMPDIR/fill bs=1M count=32 2>&1 | head -1; \
                 echo END; exec sleep 600",
            )
            .uid(nb.uid)
            .gid(nb.gid)
            .current_dir("/")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut c = start("usertmp");
    let lines = lines_until_end(&mut c);
    let dir = PathBuf::from(field(&lines, "tmpdir="));
    // `<tmp_root>/<job cgroup>@<run>`: no later run of the id gets the same path.
    assert_eq!(dir.parent(), Some(root.as_path()));
    assert!(
        dir.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("job-usertmp@")),
        "{}",
        dir.display()
    );
    assert_eq!(field(&lines, "owner="), format!("{} 700", nb.uid));
    assert_eq!(bytes(field(&lines, "size=")), 16 << 20);
    assert!(
        lines.iter().any(|l| l.contains("No space left on device")),
        "{lines:#?}"
    );
    // On the host: a tmpfs mount owned by the user.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(mounts.contains(&format!(" {} ", dir.display())), "{mounts}");
    assert_eq!(std::fs::metadata(&dir).unwrap().uid(), nb.uid);
    kill_job(&d, "usertmp");
    wait(c, "the job usertmp (killed)").signal(libc::SIGKILL);
    // Removed off the engine thread, just after the job's end.
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !dir.exists()),
        "{} left after the job",
        dir.display()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&format!(" {} ", dir.display())));

    // A crash: the job ends while the daemon is down; the restart removes its tmpfs.
    let mut c = start("crashtmp");
    let lines = lines_until_end(&mut c);
    let dir = PathBuf::from(field(&lines, "tmpdir="));
    assert!(dir.is_dir());
    d.kill9();
    let _ = c.kill();
    wait(c, "the job crashtmp (killed by the test)").signal(libc::SIGKILL);
    assert!(dir.exists(), "nothing removed it yet");
    d.restart();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(20), || !dir.exists()),
        "{} left after recovery:\n{}",
        dir.display(),
        d.log()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&format!(" {} ", dir.display())));
}

/// Every process's mount namespace, as `mnt:[inode]`.
fn mount_namespaces() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path().join("ns/mnt")).ok())
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn a_job_writing_2g_into_a_256m_tmp_gets_enospc_and_disturbs_no_other_job() {
    require_root!();
    let d = TestDaemon::start(pjw_bin(), "");
    // Job B keeps a file in its own /tmp and waits for a line on stdin.
    let mut b = d
        .pjw()
        .args(["run", "--tmp", "64M", "-j", "quiet", "--", "sh", "-c"])
        .arg("echo kept > /tmp/mine; echo END; read x; echo mine=$(cat /tmp/mine); echo big=$(ls /tmp/big 2>/dev/null | wc -l); echo END")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut b_out = BufReader::new(b.stdout.take().unwrap());
    let mut line = String::new();
    b_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "END");
    // Job A fills its 256M /tmp with 2 GiB.
    let a = run(d
        .pjw()
        .args(["run", "--user", &nobody().name, "--tmp", "256M", "-j", "filler", "--", "sh", "-c"])
        .arg("echo ns=$(readlink /proc/self/ns/mnt); dd if=/dev/zero of=/tmp/big bs=1M count=2048; echo dd=$?; echo used=$(du -sk /tmp/big | cut -f1)")
        .current_dir("/"))
    .ok();
    let out = a.stdout();
    let err = a.stderr();
    assert!(err.contains("No space left on device"), "{err}");
    let lines: Vec<String> = out.lines().map(String::from).collect();
    assert_ne!(field(&lines, "dd="), "0");
    let used: u64 = field(&lines, "used=").parse().unwrap();
    assert!(
        used <= 256 * 1024 && used > 200 * 1024,
        "{used} KiB written"
    );
    let ns = field(&lines, "ns=").to_string();
    wait_gone(&d, "filler");
    // The job's mount namespace, and with it its tmpfs, is gone with the job (its last process
    // may still be on its way out when the job is recorded ended: a bounded wait).
    assert!(
        TestDaemon::wait_for(Duration::from_secs(10), || !mount_namespaces()
            .contains(&ns)),
        "mount namespace {ns} of the ended job still exists"
    );
    // B's /tmp is untouched and never saw A's file.
    use std::io::Write;
    writeln!(b.stdin.as_mut().unwrap(), "go").unwrap();
    let mut rest = Vec::new();
    loop {
        let mut l = String::new();
        if b_out.read_line(&mut l).unwrap() == 0 || l.trim() == "END" {
            break;
        }
        rest.push(l.trim().to_string());
    }
    assert_eq!(field(&rest, "mine="), "kept");
    assert_eq!(field(&rest, "big="), "0");
    drop(b_out);
    wait(b, "the job quiet").ok();
}

#[test]
fn a_queued_job_for_another_user_keeps_its_place_across_a_daemon_crash() {
    require_root!();
    let nb = nobody();
    let one = first_cpus(1).expect("a CPU to run on");
    let mut d = TestDaemon::start(pjw_bin(), &format!("cpus = \"{one}\""));
    // A holds the only CPU until it reads a line.
    let mut a = d
        .pjw()
        .args(["run", "-j", "holder", "--", "sh", "-c", "echo END; read x"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lines_until_end(&mut a);
    // B, for nobody, waits behind it.
    let b = d
        .pjw()
        .args([
            "run",
            "--user",
            &nb.name,
            "-j",
            "queued-nobody",
            "--",
            "id",
            "-un",
        ])
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(TestDaemon::wait_for(Duration::from_secs(20), || jobs(
        &d.status()
    )
    .iter()
    .any(|j| j["id"] == "queued-nobody" && j["state"] == "queued")));
    d.restart();
    // Back after the restart: still queued, still nobody's (the caller was root).
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || jobs(&d.status())
            .iter()
            .any(|j| j["id"] == "queued-nobody" && j["user"] == nb.name.as_str())),
        "{}",
        d.log()
    );
    use std::io::Write;
    writeln!(a.stdin.as_mut().unwrap(), "go").unwrap();
    let out = wait(b, "the queued job of nobody");
    assert!(out.status.success(), "{}\n{}", out.describe(), d.log());
    assert_eq!(out.stdout().trim(), nb.name);
    drop(a.stdin.take());
    wait(a, "the job holder").ok();
}
