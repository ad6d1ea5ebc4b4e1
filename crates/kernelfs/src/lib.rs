//! pjw-kernelfs: parsers for the kernel's text formats (cgroup files, /proc, PSI).
//!
//! Every format has a pure `parse(&str)` function: no syscalls, no file reads. Callers read the
//! file (from whatever root they were given) and hand the text over, so every parser is tested
//! on literal text. All parsers fail with one error type, [`ParseError`], which carries the
//! offending text.
//!
//! ```
//! use pjw_kernelfs::{cgroup_events, proc_cgroup};
//! let ev = cgroup_events::parse("populated 1\nfrozen 0\n").unwrap();
//! assert!(ev.populated);
//! let lines = proc_cgroup::parse("4:memory:/a\n0::/\n").unwrap();
//! assert!(lines[1].is_v2());
//! ```

// Issue 29's lints, on where they pass (decisions (cg)); the workspace takes them once every
// crate does.
#![warn(missing_docs)]
#![warn(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

pub mod cgroup_events;
pub mod cpu_stat;
pub mod error;
pub mod io_stat;
pub mod meminfo;
pub mod memory_stat;
pub mod mountinfo;
pub mod proc_cgroup;
pub mod proc_stat;
pub mod proc_status;
pub mod psi;
pub mod schedstat;
pub mod sysvipc;
pub mod task_sched;
pub mod task_stat;

pub use error::ParseError;
