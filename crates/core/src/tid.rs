//! `Tid`: a kernel thread id (the `TID` of `/proc/PID/task/TID`).
//!
//! ```
//! use pjw_core::Tid;
//! assert_eq!(Tid(42).to_string(), "42");
//! ```

use std::fmt;

/// A thread id as the kernel numbers it (a PID for the main thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub u32);

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
