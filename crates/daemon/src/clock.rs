//! The wall clock as a port: the engine's stored timestamps and queue deadlines (`queue_ttl`)
//! come from a [`Clock`], the system's in production and a fake that tests move by hand.
//!
//! Only the wall clock is behind it so far; waits the engine measures with `Instant` (reconnect
//! grace, re-check delays, the governor's cooldowns) still read the monotonic clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub trait Clock: Send {
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}
