//! Root integration test of `pjw top`: a private daemon with a running job, `pjw top` in a
//! detached 80x24 tmux session on a private tmux server, read with capture-pane and driven with
//! send-keys. tmux is host-only (scripts/install-deps.sh installs it); the VM guest skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pjw_testkit::{require, require_root, Component, TestDaemon};

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
    let two = pjw_testkit::need_cpus!(2);
    // A sample every second: top's CPU % comes from two of the daemon's samples.
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!("cpus = \"{two}\"\n[profile]\ninterval = \"1s\"\n"),
    );
    let dir = d.dir().to_path_buf();
    let a = d.run_sh(&["-c", "1", "--job-id", "topjob1"], &hold(&dir, "a"));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || dir.join("a.up").exists()),
        "job did not start:\n{}",
        d.log()
    );
    let tmux = Tmux {
        sock: dir.join("tmux.sock"),
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
    // A refresh after a second sample has a CPU % for the busy job (it spins): a number, not "-".
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
