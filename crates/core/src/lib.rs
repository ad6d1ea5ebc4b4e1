//! pjw-core: the pure policy core of pjw.
//!
//! Nothing here does I/O or reads a clock. It holds the data model (CPU sets, the machine's
//! topology, job ids, sizes) and the decisions made on it (which CPUs a job gets, who waits).
//! Adapters in other crates feed it facts and carry out what it decides.
//!
//! ```
//! use pjw_core::{synthetic, CpuSet};
//! let topo = synthetic::parse("package:2 core:4 pu:2").unwrap();
//! assert_eq!(topo.online(), CpuSet::parse_list("0-15").unwrap());
//! ```

pub mod adopt;
pub mod alloc;
pub mod cpuset;
pub mod error;
pub mod governor;
pub mod gpu;
pub mod gpu_alloc;
pub mod gpu_env;
pub mod io_limits;
pub mod ipc_scrub;
pub mod job_state;
pub mod jobid;
pub mod lease;
pub mod login;
pub mod pin_owner;
pub mod sched;
pub mod size;
pub mod start_stats;
pub mod step;
pub mod synthetic;
pub mod task_join;
pub mod text;
pub mod thread_bind;
pub mod thread_env;
pub mod tid;
pub mod time_limit;
pub mod topology;

pub use cpuset::{CpuSet, MAX_CPUS};
pub use error::CoreError;
pub use gpu::{DeviceNode, Gpu, GpuId, GpuSet, GpuVendor, Gpus, MAX_GPUS};
pub use job_state::{EndClass, SampleState, StateFilter};
pub use jobid::JobId;
pub use size::{format_size, parse_size};
pub use tid::Tid;
pub use topology::{DomainNode, DomainTree, Level, NumaDistances, NumaNode, Pu, Topology};
