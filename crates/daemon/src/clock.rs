//! The wall clock as a port: the engine's stored timestamps and queue deadlines (`queue_ttl`)
//! come from a [`Clock`], the system's in production and a fake that tests move by hand.
//!
//! Behind it: the wall clock, and a monotonic one for the time limits' running time (a wall
//! clock stepped forward must not end a job early). Other waits the engine measures with
//! `Instant` (reconnect grace, re-check delays, the governor's cooldowns) read the monotonic
//! clock directly.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, and a monotonic count of milliseconds.
pub trait Clock: Send {
    fn now_ms(&self) -> i64;
    /// Milliseconds on a clock that never steps (its zero is arbitrary: only differences
    /// mean anything). A fake moves it with its wall clock.
    fn mono_ms(&self) -> i64 {
        self.now_ms()
    }
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

    fn mono_ms(&self) -> i64 {
        static ZERO: OnceLock<Instant> = OnceLock::new();
        ZERO.get_or_init(Instant::now).elapsed().as_millis() as i64
    }
}
