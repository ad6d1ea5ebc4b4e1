//! `pjw`: the launch front of the process jail warden.
//!
//! `pjw run` is the launch path: its start is part of every job's. So this binary holds only
//! what `pjw run` needs (its flags, the request, the watcher, the exec) and runs it; every other
//! subcommand, and any `run` its flags alone do not accept (help, version, a mistake), is the
//! full command line's: this process execs `pjw-full` with the same arguments (the same pid,
//! so `pjw daemon` is still the process its caller started). docs/decisions.md (cj) has the
//! figures; exit codes are as `pjw-full`'s (see main.rs).

// The launch path's modules, shared with `pjw-full` (which uses all of their items).
#[allow(dead_code)]
mod affinity;
mod cmd_run;
#[allow(dead_code)]
mod connect;
mod run_args;
#[allow(dead_code)]
mod run_watch;
#[allow(dead_code)]
mod starter;

/// Where `cmd_run` finds its flags in both binaries.
mod cli {
    pub use crate::run_args::RunArgs;
}

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The full command line's file name.
const FULL: &str = "pjw-full";

fn main() {
    // As pjw-full does: die quietly on a closed pipe; `pjw run` restores the default for its
    // command anyway.
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if let Some(r) = run_args::parse_run_only(std::env::args_os()) {
        std::process::exit(cmd_run::run(r));
    }
    std::process::exit(exec_full());
}

/// Exec `pjw-full` with this process's arguments; returns only when that fails, with the exit
/// code.
fn exec_full() -> i32 {
    let Some(full) = full_binary() else {
        eprintln!("pjw: cannot find {FULL} beside this pjw or in ../lib/pjw (a broken install?)");
        return 1;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "pjw".into());
    let e = std::process::Command::new(&full)
        .arg0(arg0)
        .args(args)
        .exec();
    eprintln!("pjw: cannot run {}: {e}", full.display());
    1
}

/// `pjw-full` beside this binary (a build tree) or in `../lib/pjw` (an install: /usr/bin/pjw
/// and /usr/lib/pjw/pjw-full), found from this binary's own path, never from the
/// environment: root runs `pjw` (job starters, PAM), so no caller may pick what it execs.
fn full_binary() -> Option<PathBuf> {
    full_binary_of(&std::env::current_exe().ok()?)
}

/// `pjw-full` for the front at `exe`: beside it, else in `../lib/pjw`.
fn full_binary_of(exe: &std::path::Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [dir.join(FULL), dir.join("../lib/pjw").join(FULL)]
        .into_iter()
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::{full_binary_of, FULL};

    /// A build tree has pjw-full beside pjw; an install has it in ../lib/pjw; with neither
    /// there is nothing to exec (and a directory of that name is not a binary).
    #[test]
    fn pjw_full_is_found_beside_or_in_lib_pjw() {
        let t = tempfile::tempdir().unwrap();
        let bin = t.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let front = bin.join("pjw");
        assert_eq!(full_binary_of(&front), None);
        std::fs::create_dir_all(bin.join(FULL)).unwrap();
        assert_eq!(full_binary_of(&front), None, "a directory is no binary");
        let lib = t.path().join("lib/pjw");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join(FULL), b"").unwrap();
        assert_eq!(
            full_binary_of(&front),
            Some(bin.join("../lib/pjw").join(FULL))
        );
        std::fs::remove_dir(bin.join(FULL)).unwrap();
        std::fs::write(bin.join(FULL), b"").unwrap();
        assert_eq!(
            full_binary_of(&front),
            Some(bin.join(FULL)),
            "beside it comes first"
        );
    }
}
