//! The engine's port to the job store: the reads and writes it makes, as three traits by role —
//! [`StoreReader`], [`StoreWriter`] (a job's row), [`StoreDetailWriter`] (its side rows) —
//! joined in [`StorePort`], with the SQLite [`Store`] as its adapter (a recording fake lives in
//! [`crate::test_support`]).
//!
//! Every write the engine makes goes through one path that logs, counts and keeps memory and
//! store consistent (`engine/store_writes.rs`; docs/decisions.md says how).

use std::path::Path;

use pjw_core::io_limits::JobIo;
use pjw_core::thread_bind::BindMode;
use pjw_core::{CpuSet, GpuSet};
use pjw_store::{
    JobRecord, JobSummary, StartRecord, StarterRecord, StepRecord, Store, StoreError, StoredRole,
    StoredTimeLimit, SubmitRecord,
};

/// What the engine reads back from the job store: the file, the next job number, live
/// jobs and their side rows.
pub trait StoreReader {
    /// The database file (for the profile writer, reports and logs).
    fn path(&self) -> &Path;
    /// The next generated job number, read without taking it (a submission takes it).
    fn job_number(&self) -> Result<u64, StoreError>;
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError>;
    fn starter(&self, seq: i64) -> Result<Option<StarterRecord>, StoreError>;
    fn gpus(&self, seq: i64) -> Result<Option<(u32, GpuSet)>, StoreError>;
    fn io(&self, seq: i64) -> Result<Option<JobIo>, StoreError>;
    fn bind(&self, seq: i64) -> Result<Option<BindMode>, StoreError>;
    /// A job's time limit, where it came from and the running time it counted.
    fn time_limit(&self, seq: i64) -> Result<Option<StoredTimeLimit>, StoreError>;
}

/// A job's row through its life: submitted or adopted, started, changed, ended.
pub trait StoreWriter {
    /// A new job's row with its side rows (starter, GPUs, I/O, binding) and the job number it
    /// took, in one transaction; its seq.
    fn submit_job(&mut self, r: &SubmitRecord) -> Result<i64, StoreError>;
    /// A job's row alone (a cgroup adopted at recovery).
    fn insert_job(&mut self, j: &JobRecord) -> Result<i64, StoreError>;
    /// A job's start (GPUs, CPUs, role, state) before its cgroups exist, in one transaction.
    fn start_job(&mut self, r: &StartRecord) -> Result<(), StoreError>;
    fn set_role(
        &mut self,
        seq: i64,
        role: StoredRole,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), StoreError>;
    fn set_priority(&mut self, seq: i64, priority: u8) -> Result<(), StoreError>;
    fn set_running(&mut self, seq: i64) -> Result<(), StoreError>;
    fn set_ended(&mut self, seq: i64, ended_ms: i64, reason: &str) -> Result<(), StoreError>;
    /// Mark the job ended and write its summary, in one transaction.
    fn finish_job(
        &mut self,
        ended_ms: i64,
        reason: &str,
        summary: &JobSummary,
    ) -> Result<(), StoreError>;
    fn set_exit_status(&mut self, seq: i64, status: i32) -> Result<(), StoreError>;
}

/// A job's rows beside its own: starter, GPUs, I/O, binding, steps.
pub trait StoreDetailWriter {
    fn set_starter(&mut self, seq: i64, s: &StarterRecord) -> Result<(), StoreError>;
    /// A GPU job's request and the GPUs it holds.
    fn set_gpus(&mut self, seq: i64, ngpus: u32, gpus: &GpuSet) -> Result<(), StoreError>;
    /// A job's I/O weight and limits.
    fn set_io(&mut self, seq: i64, io: &JobIo) -> Result<(), StoreError>;
    /// The thread binding a job asked for (`--bind`).
    fn set_bind(&mut self, seq: i64, mode: BindMode) -> Result<(), StoreError>;
    /// A job's steps, at its end (one transaction).
    fn record_steps(&mut self, seq: i64, steps: &[StepRecord]) -> Result<(), StoreError>;
    /// The running time jobs' limits have counted (`(seq, ms)`), kept for a restart; one
    /// transaction.
    fn set_times_ran(&mut self, times: &[(i64, u64)]) -> Result<(), StoreError>;
}

/// What the engine asks of the job store, all three roles. Implemented for every type that has
/// the parts, so generic code names one trait while a fake or an adapter implements the roles
/// apart.
pub trait StorePort: StoreReader + StoreWriter + StoreDetailWriter + Send {}

impl<T: StoreReader + StoreWriter + StoreDetailWriter + Send + ?Sized> StorePort for T {}

impl StoreReader for Store {
    fn path(&self) -> &Path {
        Store::path(self)
    }
    fn job_number(&self) -> Result<u64, StoreError> {
        Store::job_number(self)
    }
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Store::live_jobs(self)
    }
    fn starter(&self, seq: i64) -> Result<Option<StarterRecord>, StoreError> {
        Store::starter(self, seq)
    }
    fn gpus(&self, seq: i64) -> Result<Option<(u32, GpuSet)>, StoreError> {
        Store::gpus(self, seq)
    }
    fn io(&self, seq: i64) -> Result<Option<JobIo>, StoreError> {
        Store::io(self, seq)
    }
    fn bind(&self, seq: i64) -> Result<Option<BindMode>, StoreError> {
        Store::bind(self, seq)
    }
    fn time_limit(&self, seq: i64) -> Result<Option<StoredTimeLimit>, StoreError> {
        Store::time_limit(self, seq)
    }
}

impl StoreWriter for Store {
    fn submit_job(&mut self, r: &SubmitRecord) -> Result<i64, StoreError> {
        Store::submit_job(self, r)
    }
    fn insert_job(&mut self, j: &JobRecord) -> Result<i64, StoreError> {
        Store::insert_job(self, j)
    }
    fn start_job(&mut self, r: &StartRecord) -> Result<(), StoreError> {
        Store::start_job(self, r)
    }
    fn set_role(
        &mut self,
        seq: i64,
        role: StoredRole,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), StoreError> {
        Store::set_role(self, seq, role, cpus, mems)
    }
    fn set_priority(&mut self, seq: i64, priority: u8) -> Result<(), StoreError> {
        Store::set_priority(self, seq, priority)
    }
    fn set_running(&mut self, seq: i64) -> Result<(), StoreError> {
        Store::set_running(self, seq)
    }
    fn set_ended(&mut self, seq: i64, ended_ms: i64, reason: &str) -> Result<(), StoreError> {
        Store::set_ended(self, seq, ended_ms, reason)
    }
    fn finish_job(
        &mut self,
        ended_ms: i64,
        reason: &str,
        summary: &JobSummary,
    ) -> Result<(), StoreError> {
        Store::finish_job(self, ended_ms, reason, summary)
    }
    fn set_exit_status(&mut self, seq: i64, status: i32) -> Result<(), StoreError> {
        Store::set_exit_status(self, seq, status)
    }
}

impl StoreDetailWriter for Store {
    fn set_starter(&mut self, seq: i64, s: &StarterRecord) -> Result<(), StoreError> {
        Store::set_starter(self, seq, s)
    }
    fn set_gpus(&mut self, seq: i64, ngpus: u32, gpus: &GpuSet) -> Result<(), StoreError> {
        Store::set_gpus(self, seq, ngpus, gpus)
    }
    fn set_io(&mut self, seq: i64, io: &JobIo) -> Result<(), StoreError> {
        Store::set_io(self, seq, io)
    }
    fn set_bind(&mut self, seq: i64, mode: BindMode) -> Result<(), StoreError> {
        Store::set_bind(self, seq, mode)
    }
    fn record_steps(&mut self, seq: i64, steps: &[StepRecord]) -> Result<(), StoreError> {
        Store::record_steps(self, seq, steps)
    }
    fn set_times_ran(&mut self, times: &[(i64, u64)]) -> Result<(), StoreError> {
        Store::set_times_ran(self, times)
    }
}
