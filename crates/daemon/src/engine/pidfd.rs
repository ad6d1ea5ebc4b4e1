//! Watching a job's main process: a pidfd on the reactor, polled where it cannot be
//! registered, retried where it cannot be opened; an error is never taken for "exited".

use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Event;
use crate::os;

/// Wait for the process behind `fd` to exit, then report it.
pub(super) fn spawn_pidfd_watch(fd: OwnedFd, seq: i64, tx: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        wait_pidfd(fd, seq).await;
        let _ = tx.send(Event::MainExited { seq });
    });
}

/// Wait until the process behind `fd` exits: on the reactor, or — when the fd cannot be
/// registered (out of memory) — by looking at a duplicate every half second. An error is never
/// taken for "exited".
pub(super) async fn wait_pidfd(fd: OwnedFd, seq: i64) {
    let spare = fd.try_clone().ok();
    // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it is a valid open descriptor
    // that nobody else can close or replace while the AsyncFd owns it.
    match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
        Ok(afd) => {
            if let Err(e) = afd.readable().await {
                // The reactor is going away (the daemon stops): not an exit. The job's
                // cgroup emptying still ends it.
                warn!(seq, error = %e, "pidfd watch failed; the job ends when its cgroup empties");
                std::future::pending::<()>().await;
            }
        }
        Err(e) => {
            warn!(seq, error = %e, "cannot register the pidfd; polling it instead");
            let Some(fd) = spare else {
                // Not even a duplicate: fall back to the cgroup (the job ends when it empties).
                warn!(
                    seq,
                    "no pidfd to poll; the job ends when its cgroup empties"
                );
                std::future::pending::<()>().await;
                return;
            };
            loop {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                if matches!(rustix::event::poll(&mut fds, 0), Ok(n) if n > 0) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// `pidfd_open` failed for a reason other than "no such process" (EMFILE, ENOMEM): try again
/// with backoff until it works or the process is gone; a pid reused meanwhile (another start
/// time) means the main process is gone.
pub(super) fn spawn_pidfd_retry(
    pid: u32,
    start: Option<u64>,
    proc_root: std::path::PathBuf,
    seq: i64,
    tx: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(100);
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
            match os::pidfd_open(pid) {
                Ok(fd) => {
                    if start.is_some() && os::start_time(&proc_root, pid) != start {
                        break; // the pid now names another process
                    }
                    wait_pidfd(fd, seq).await;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => break,
                Err(e) => debug!(seq, pid, error = %e, "pidfd_open failed again"),
            }
        }
        let _ = tx.send(Event::MainExited { seq });
    });
}
