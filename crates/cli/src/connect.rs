//! Reaching the daemon: how long a client waits for one that is not there yet (being restarted:
//! socket missing or refusing) instead of failing at once, shared by `pjw run` and the workload
//! managers' hooks (`pjw job register`/`end` in a prolog and epilog, where failing at once would
//! drain the node or leave a job registered).
use std::path::Path;
use std::time::{Duration, Instant};

use pjw_proto::{Client, ProtoError};

/// How long a new client waits for a daemon that is not there yet: `PJW_CONNECT_WAIT` seconds,
/// default 30.
pub fn connect_window() -> Duration {
    std::env::var("PJW_CONNECT_WAIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(30))
}

/// How long a waiting client (a queued `pjw run`, a `pjw job register` in a prolog) keeps
/// trying to reach a daemon that went away (restart): `PJW_RECONNECT_SECS`, default 60.
pub fn reconnect_window() -> Duration {
    std::env::var("PJW_RECONNECT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60))
}

/// Whether a failed connect means "no daemon right now" (worth waiting for), not a fault.
pub fn daemon_absent(e: &ProtoError) -> bool {
    matches!(e, ProtoError::Connect { source, .. }
        if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused))
}

/// Connect, waiting up to [`connect_window`] for a daemon that is absent (said once on stderr
/// unless `quiet`); any other error at once. The error names the wait when it ran out.
pub fn connect_waiting(path: &Path, quiet: bool) -> Result<Client, String> {
    let mut since: Option<Instant> = None;
    loop {
        match Client::connect(path) {
            Ok(c) => return Ok(c),
            Err(e) if daemon_absent(&e) => {
                let t = *since.get_or_insert_with(|| {
                    if !quiet {
                        eprintln!(
                            "pjw: no pjw daemon at {} yet; waiting up to {} s",
                            path.display(),
                            connect_window().as_secs()
                        );
                    }
                    Instant::now()
                });
                if t.elapsed() >= connect_window() {
                    return Err(format!(
                        "no pjw daemon came up within {} s: {e}",
                        connect_window().as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}
