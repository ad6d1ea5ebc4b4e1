//! `pjw run`'s watcher: the line the user must hear after the command ends — that pjw killed it
//! at its time limit (`--time`); how many of
//! its processes the kernel killed for memory, at which limit, its peak, and the command that
//! shows the report; or that the memory governor killed it, and why; or that it stalled long
//! inside its own `--mem`.
//!
//! `pjw run` execs the command (it is the job's main process, with the command's exit status,
//! and no shepherd stays in the job), so the watcher is a process of its own: forked twice before
//! the request (outside the job's cgroups, and no child of the command, which may wait for its
//! children), told the job's id through a pipe just before the exec, it waits on a pidfd for the
//! command to exit, asks the daemon (`outcome`) and writes to the same stderr. It holds nothing
//! else open, ignores the terminal's interrupt (a Ctrl-C'd job is still reported), and exits
//! within seconds; when anything fails, the job runs unwatched and nothing is said.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use pjw_core::format_size;
use pjw_proto::{Client, JobOutcome, Request, Response};

/// How long the watcher waits for the daemon's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The `pjw run` side: where the job's id goes once it has started, and the middle process,
/// reaped when this is dropped (before the exec: the command must not inherit a child).
pub struct Watch {
    to_watcher: Option<OwnedFd>,
    middle: libc::pid_t,
}

impl Watch {
    /// Start the watcher; None when it cannot be (the job then runs unwatched). Call while this
    /// process is single-threaded (it forks).
    pub fn spawn() -> Option<Watch> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just created and are owned here alone.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        // A pidfd on this process (it stays the same process through the exec): taken before
        // the fork, so it cannot name another process later.
        // SAFETY: pidfd_open with our own pid and no flags.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, me, 0) };
        if pidfd < 0 {
            return None;
        }
        // SAFETY: a new descriptor owned here alone.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as libc::c_int) };
        // SAFETY: this process is single-threaded (see cmd_run), so the child may run any code.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => {
                drop(wr);
                // The middle process: fork the watcher and exit, so the watcher is nobody's
                // child in the job and the command has no extra child to wait for.
                // SAFETY: still single-threaded.
                match unsafe { libc::fork() } {
                    0 => watch(rd, pidfd),
                    // SAFETY: _exit ends the middle process without running anything else.
                    _ => unsafe { libc::_exit(0) },
                }
            }
            // Not reaped here: it forks the watcher and exits while the request goes to the
            // daemon, and is reaped when the Watch is dropped (off the launch's critical path).
            middle => {
                drop(rd);
                drop(pidfd);
                Some(Watch {
                    to_watcher: Some(wr),
                    middle,
                })
            }
        }
    }

    /// The job started as `job`: tell the watcher (the pipe closes at the exec anyway).
    pub fn started(mut self, job: &str) {
        if let Some(fd) = self.to_watcher.take() {
            let _ = std::fs::File::from(fd).write_all(format!("{job}\n").as_bytes());
        }
    }
}

impl Drop for Watch {
    /// Reap the middle process (it exits as soon as it has forked the watcher).
    fn drop(&mut self) {
        let mut status = 0;
        // SAFETY: waiting for our own child, which exits at once; EINTR is retried.
        while unsafe { libc::waitpid(self.middle, &mut status, 0) } < 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
    }
}

/// The watcher: wait for the job's id, then for the command's exit, then ask and tell.
fn watch(from_run: OwnedFd, pidfd: OwnedFd) -> ! {
    // SAFETY: setting dispositions of this single-threaded process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    keep_only_stderr(&[from_run.as_raw_fd(), pidfd.as_raw_fd()]);
    let socket = pjw_proto::socket_path();
    blank_environment();
    let mut id = String::new();
    let _ = std::fs::File::from(from_run)
        .take(4096)
        .read_to_string(&mut id);
    let job = id.lines().next().unwrap_or("").trim().to_string();
    if !job.is_empty() {
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; -1: until the command exits.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {}
        if let Some(o) = ask(&socket, &job) {
            let lines = tell(&o);
            if !lines.is_empty() {
                let _ = std::io::stderr().write_all(lines.as_bytes());
            }
        }
    }
    // SAFETY: _exit ends the watcher without running the parent's exit handlers twice.
    unsafe { libc::_exit(0) }
}

/// Point stdin and stdout at /dev/null and close every descriptor but stderr and `keep`: the
/// watcher must not hold the user's pipes open (a reader of the job's output would wait).
fn keep_only_stderr(keep: &[libc::c_int]) {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 of a valid descriptor onto 0 and 1.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    let fds: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing descriptors this process inherited and does not use; the one
            // read_dir had open is closed already (the iterator was collected and dropped).
            unsafe { libc::close(fd) };
        }
    }
}

/// Blank this process's copy of its environment (what `/proc/PID/environ` shows): the watcher
/// carries `pjw run`'s variables, and one naming a workload manager's job (`LSB_JOBID=…`) would
/// make the daemon adopt the watcher into that job, where the end of the job would kill it
/// before it could speak. It reads nothing from the environment after this.
fn blank_environment() {
    extern "C" {
        static environ: *const *mut libc::c_char;
    }
    // SAFETY: single-threaded; `environ` is libc's NULL-terminated array of NUL-terminated
    // strings, each written over with NULs within its own length.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let s = *p;
            let n = libc::strlen(s);
            std::ptr::write_bytes(s, 0, n);
            p = p.add(1);
        }
    }
}

/// Ask the daemon at `socket` what memory did to `job`.
fn ask(socket: &std::path::Path, job: &str) -> Option<JobOutcome> {
    let mut c = Client::connect(socket).ok()?;
    c.set_read_timeout(Some(ASK_TIMEOUT)).ok()?;
    match c.call(&Request::Outcome { job: job.into() }).ok()? {
        Response::Outcome(o) => Some(o),
        _ => None,
    }
}

/// Seconds of stall inside its own limit worth telling the user about.
const STALL_WORTH_TELLING: u64 = 5;

/// What the user is told about `o` (pure): empty when memory did nothing worth saying.
pub fn tell(o: &JobOutcome) -> String {
    let job = pjw_core::text::printable(&o.job, 128);
    let mut out = String::new();
    if let Some(g) = &o.governor {
        out.push_str(&format!("pjw: job {job} was killed by {g}\n"));
    } else if let Some(f) = &o.frozen {
        // Said while it lasted only in `pjw status`: its user hears it once the job is over.
        let f = pjw_core::text::printable(f, 512);
        out.push_str(&format!("pjw: job {job} was {f}\n"));
    }
    if let Some(limit) = o
        .ended
        .as_deref()
        .and_then(|e| e.strip_prefix("killed at its time limit ("))
        .and_then(|e| e.split(')').next())
    {
        let (limit, whose) = match limit.strip_suffix(", the node's default") {
            Some(l) => (l, "the node's default limit: ask for one with --time"),
            None => (limit, "--time"),
        };
        let limit = pjw_core::text::printable(limit, 32);
        out.push_str(&format!(
            "pjw: job {job} was ended at its time limit ({limit} of running time, {whose})\n"
        ));
    }
    if o.oom_kills > 0 {
        let limit = match o.mem {
            Some(m) if o.oom_at_partition => format!(
                "the node's job partition ({}; the job's own {} limit (--mem) was not reached: the jobs together filled the partition)",
                format_size(o.partition),
                format_size(m)
            ),
            Some(m) => format!("the job's {} limit (--mem)", format_size(m)),
            None => format!(
                "the node's job partition ({}; the job had no --mem)",
                format_size(o.partition)
            ),
        };
        let peak = o
            .mem_peak
            .map(|p| format!("; its memory peaked at {}", format_size(p)))
            .unwrap_or_default();
        out.push_str(&format!(
            "pjw: job {job}: the kernel killed {} process(es) for memory (OOM) at {limit}{peak}; `pjw report --job {job}` shows the job\n",
            o.oom_kills
        ));
    }
    if o.own_stall_secs >= STALL_WORTH_TELLING {
        if let Some(m) = o.mem {
            out.push_str(&format!(
                "pjw: job {job} stalled on memory inside its {} limit for {} s; a larger --mem may make it faster\n",
                format_size(m),
                o.own_stall_secs
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_told_the_job_ran_out_of_time() {
        let o = JobOutcome {
            job: "42".into(),
            ended: Some("killed at its time limit (0:01:30)".into()),
            ..JobOutcome::default()
        };
        assert_eq!(
            tell(&o),
            "pjw: job 42 was ended at its time limit (0:01:30 of running time, --time)\n"
        );
        let node = JobOutcome {
            ended: Some("killed at its time limit (2:00:00, the node's default)".into()),
            ..o.clone()
        };
        assert_eq!(
            tell(&node),
            "pjw: job 42 was ended at its time limit (2:00:00 of running time, the node's default limit: ask for one with --time)\n"
        );
        let killed = JobOutcome {
            ended: Some("killed by alice".into()),
            ..o
        };
        assert_eq!(tell(&killed), "");
    }

    #[test]
    fn the_user_is_told_what_memory_did() {
        let base = JobOutcome {
            job: "42".into(),
            partition: 8 << 30,
            ..JobOutcome::default()
        };
        let cases = [
            ("nothing", base.clone(), ""),
            (
                "OOM at its own limit",
                JobOutcome {
                    oom_kills: 15,
                    mem: Some(64 << 20),
                    mem_peak: Some(64 << 20),
                    ..base.clone()
                },
                "pjw: job 42: the kernel killed 15 process(es) for memory (OOM) at the job's 64M limit (--mem); its memory peaked at 64M; `pjw report --job 42` shows the job\n",
            ),
            (
                "OOM at the partition",
                JobOutcome {
                    oom_kills: 1,
                    ..base.clone()
                },
                "pjw: job 42: the kernel killed 1 process(es) for memory (OOM) at the node's job partition (8G; the job had no --mem); `pjw report --job 42` shows the job\n",
            ),
            (
                // The acceptance run: a -m 1800M job killed when another job filled the
                // partition was told it hit its own limit.
                "OOM at the partition of a job with --mem it never reached",
                JobOutcome {
                    oom_kills: 1,
                    mem: Some(1800 << 20),
                    mem_peak: Some(1700 << 20),
                    oom_at_partition: true,
                    ..base.clone()
                },
                "pjw: job 42: the kernel killed 1 process(es) for memory (OOM) at the node's job partition (8G; the job's own 1.8G limit (--mem) was not reached: the jobs together filled the partition); its memory peaked at 1.7G; `pjw report --job 42` shows the job\n",
            ),
            (
                "frozen by the governor, then thawed: told at the end",
                JobOutcome {
                    frozen: Some("frozen 23 s by the memory governor (1 time): it grew 50M/s into the memory the jobs share".into()),
                    ..base.clone()
                },
                "pjw: job 42 was frozen 23 s by the memory governor (1 time): it grew 50M/s into the memory the jobs share\n",
            ),
            (
                "the governor's last step",
                JobOutcome {
                    governor: Some("the memory governor: frozen 600 s".into()),
                    ..base.clone()
                },
                "pjw: job 42 was killed by the memory governor: frozen 600 s\n",
            ),
            (
                "a long stall in its own limit",
                JobOutcome {
                    mem: Some(64 << 20),
                    own_stall_secs: 30,
                    ..base.clone()
                },
                "pjw: job 42 stalled on memory inside its 64M limit for 30 s; a larger --mem may make it faster\n",
            ),
            (
                "a short one is not worth a line",
                JobOutcome {
                    mem: Some(64 << 20),
                    own_stall_secs: 2,
                    ..base.clone()
                },
                "",
            ),
        ];
        for (what, o, want) in cases {
            assert_eq!(tell(&o), want, "{what}");
        }
    }

    #[test]
    fn a_job_id_with_terminal_escapes_is_shown_harmless() {
        let o = JobOutcome {
            job: "x\u{1b}[2J".into(),
            oom_kills: 1,
            ..JobOutcome::default()
        };
        assert!(!tell(&o).contains('\u{1b}'), "{}", tell(&o));
    }
}
