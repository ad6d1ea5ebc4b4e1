//! Root integration tests of the live figures: `pjw top` with a private daemon and a running
//! job, in a detached 80x24 tmux session on a private tmux server, read with capture-pane and
//! driven with send-keys (tmux is host-only: scripts/install-deps.sh installs it; the VM
//! guest skips); its CPU % following a job's load within 2 s with the node's default sampler
//! interval; and `pjw status` never showing fewer threads than processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pjw_testkit::{require, require_root, Component, TestDaemon};

/// The tests of this file that run busy jobs take the machine in turn: each test's daemon owns
/// the same CPUs, and one test's load must not be another's measured figure.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn machine() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// A private tmux server, killed on drop (even when the test fails).
struct Tmux {
    sock: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("run tmux (scripts/install-deps.sh installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    fn wait_screen(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let ok = TestDaemon::wait_for(Duration::from_secs(30), || {
            last = self.screen();
            f(&last)
        });
        assert!(ok, "{what}; screen:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .arg("kill-server")
            .output();
    }
}

fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "touch {d}/{tag}.up; while [ ! -e {d}/{tag}.go ]; do :; done",
        d = dir.display()
    )
}

#[test]
fn top_renders_in_80x24_sorts_and_quits_cleanly() {
    require!(Component::Root, Component::Tmux);
    let _machine = machine();
    let two = pjw_testkit::need_cpus!(2);
    // The node's default sampler interval: top's CPU % comes from figures read for it.
    let d = TestDaemon::start(&pjw_bin(), &format!("cpus = \"{two}\"\n"));
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["-c", "1", "--job-id", "topjob1"], &hold(&dir, "a"));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || dir.join("a.up").exists()),
        "job did not start:\n{}",
        d.log()
    );
    let tmux = top_in_tmux(&d);
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{pane_width}x#{pane_height}"])
            .trim(),
        "80x24"
    );
    // The job, its CPU in the node map (CPU 0 or 1 marked A, the other free), the header.
    let screen = tmux.wait_screen("top did not show the job and the CPU map", |s| {
        s.contains("topjob1")
            && s.contains("running")
            && (s.contains("    0 A.") || s.contains("    0 .A"))
            && s.contains("cpus 1/2 free")
    });
    eprintln!("pjw top in 80x24:\n{screen}");
    assert!(screen.contains("[cpu%]"), "{screen}");
    // A refresh after the first has a CPU % for the busy job (it spins): a number, not "-".
    tmux.wait_screen("no CPU % after refreshes", |s| {
        s.lines().any(|l| {
            l.contains("topjob1")
                && l.split_whitespace()
                    .nth(5)
                    .is_some_and(|p| p.parse::<u32>().is_ok())
        })
    });
    // Sort keys: memory, then memory again (reversed).
    tmux.cmd(&["send-keys", "-t", "top", "m"]);
    tmux.wait_screen("sort key m not taken", |s| s.contains("[mem]"));
    tmux.cmd(&["send-keys", "-t", "top", "m"]);
    tmux.wait_screen("sort key m again not taken", |s| s.contains("[mem rev]"));
    // q quits with status 0 and the terminal is restored (alternate screen left).
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let screen = tmux.wait_screen("top did not exit", |s| s.contains("top exited 0"));
    assert!(!screen.contains("topjob1"), "{screen}");
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim(),
        "0"
    );

    std::fs::write(dir.join("a.go"), "").unwrap();
    pjw_testkit::job::wait(a, "job topjob1").ok();
}

/// `pjw top` in an 80x24 tmux session against daemon `d`.
fn top_in_tmux(d: &TestDaemon) -> Tmux {
    let tmux = Tmux {
        sock: d.dir().join("tmux.sock"),
    };
    let cmd = format!(
        "PJW_SOCKET={} {} top; echo \"top exited $?\"; exec sleep 600",
        d.socket().display(),
        pjw_bin().display()
    );
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "80",
        "-y",
        "24",
        "sh",
        "-c",
        &cmd,
    ]);
    tmux
}

/// The CPU % `pjw top` shows for job `id` (None: not on screen, or no figure yet).
fn cpu_pct(screen: &str, id: &str) -> Option<u32> {
    screen
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == id))?
        .split_whitespace()
        .nth(5)?
        .parse()
        .ok()
}

/// How long after `since` job `id`'s CPU % on screen satisfies `ok` (polled every 50 ms, up to
/// 10 s), and the last figure seen.
fn follows(
    tmux: &Tmux,
    id: &str,
    since: Instant,
    ok: impl Fn(u32) -> bool,
) -> (Duration, Option<u32>) {
    let mut seen = None;
    while since.elapsed() < Duration::from_secs(10) {
        seen = cpu_pct(&tmux.screen(), id);
        if seen.is_some_and(&ok) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (since.elapsed(), seen)
}

/// With the node's defaults (the sampler every 10 s), a job going from idle to busy and back
/// shows it in `pjw top` within 2 s each way: its figures are read for the request, not taken
/// from the last sample. One CPU of the job's own; "busy" is over 30 % (a loaded machine's
/// other work shares that CPU), "idle" under 10 %.
#[test]
fn top_cpu_follows_a_load_change_within_2_s() {
    require!(Component::Root, Component::Tmux);
    let _machine = machine();
    let one = pjw_testkit::need_cpus!(1);
    let d = TestDaemon::start(&pjw_bin(), &format!("cpus = \"{one}\"\n"));
    let dir = d.dir().to_path_buf();
    let at = |f: &str| dir.join(f).display().to_string();
    // Idle (200 ms naps: a fork and exec of sleep each, which cost a loaded CI machine 10 % of
    // a CPU at 20 ms naps) until busy exists, busy (a shell loop, no fork) until idle exists,
    // idle again until end exists.
    let script = format!(
        "touch {up}; while [ ! -e {busy} ]; do sleep 0.2; done; while [ ! -e {idle} ]; do :; done; while [ ! -e {end} ]; do sleep 0.2; done",
        up = at("up"),
        busy = at("busy"),
        idle = at("idle"),
        end = at("end"),
    );
    let job = d.run_sh(&["-c", "1", "--job-id", "loadjob"], &script);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || dir.join("up").exists()),
        "job did not start:\n{}",
        d.log()
    );
    let tmux = top_in_tmux(&d);
    // Idle settled: a figure under 10 %.
    let (t, seen) = follows(&tmux, "loadjob", Instant::now(), |p| p < 10);
    assert!(
        seen.is_some_and(|p| p < 10),
        "idle job at {seen:?} % after {t:?}:\n{}",
        tmux.screen()
    );
    std::fs::write(dir.join("busy"), "").unwrap();
    let (up, seen_up) = follows(&tmux, "loadjob", Instant::now(), |p| p > 30);
    std::fs::write(dir.join("idle"), "").unwrap();
    let (down, seen_down) = follows(&tmux, "loadjob", Instant::now(), |p| p < 10);
    eprintln!("pjw top followed the job: idle to busy in {up:?} ({seen_up:?} %), busy to idle in {down:?} ({seen_down:?} %)");
    std::fs::write(dir.join("end"), "").unwrap();
    pjw_testkit::job::wait(job, "job loadjob").ok();
    assert!(
        seen_up.is_some_and(|p| p > 30) && up <= Duration::from_secs(2),
        "idle to busy: {seen_up:?} % after {up:?}"
    );
    assert!(
        seen_down.is_some_and(|p| p < 10) && down <= Duration::from_secs(2),
        "busy to idle: {seen_down:?} % after {down:?}"
    );
}

/// `pjw status` never shows fewer threads than processes, at any look: a shell with three
/// background sleeps (4 processes) and stress-ng with 4 CPU workers (5 processes), looked at
/// every 100 ms while they run. At least one look must see all their processes, so the
/// figures looked at are the jobs' own.
#[test]
fn status_never_shows_fewer_threads_than_processes() {
    require!(Component::Root, Component::StressNg);
    let _machine = machine();
    let two = pjw_testkit::need_cpus!(2);
    let d = TestDaemon::start(&pjw_bin(), &format!("cpus = \"{two}\"\n"));
    for (id, script, procs) in [
        ("sleeps", "sleep 5 & sleep 5 & sleep 5 & wait", 4),
        ("stress", "exec stress-ng --cpu 4 --timeout 5s --quiet", 5),
    ] {
        let job = d.run_sh(&["-c", "2", "--job-id", id], script);
        let t0 = Instant::now();
        let mut looks = Vec::new();
        while t0.elapsed() < Duration::from_secs(4) {
            let st = d.status();
            if let Some(j) = st["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|j| j["id"] == id)
            {
                looks.push((j["procs"].as_u64().unwrap(), j["threads"].as_u64().unwrap()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        pjw_testkit::job::wait(job, id).ok();
        eprintln!("{id}: (processes, threads) at each look: {looks:?}");
        assert!(
            looks.iter().any(|&(p, _)| p == procs),
            "{id}: never saw its {procs} processes: {looks:?}"
        );
        assert!(
            looks.iter().all(|&(p, t)| t >= p),
            "{id}: fewer threads than processes: {looks:?}"
        );
    }
}

#[test]
fn top_without_a_terminal_or_daemon_fails_in_one_line() {
    require_root!();
    let out = Command::new(pjw_bin())
        .arg("top")
        .env("PJW_SOCKET", "/nonexistent/pjw.sock")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
}
