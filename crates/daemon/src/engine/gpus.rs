//! GPUs in the engine: the node's GPUs, a job's request and grant, their store rows (so that
//! recovery never hands a GPU out twice) and the environment a GPU job gets.

use std::collections::BTreeMap;

use pjw_core::gpu_alloc::GpuPolicy;
use pjw_core::gpu_env::gpu_env;
use pjw_core::sched::{GpuNode, Phase};
use pjw_core::{GpuSet, Gpus};
use pjw_proto::ErrorCode;
use tracing::error;

use super::store_writes::OnFail;
use super::{err, refuse, Engine, Job, Refusal};
use crate::config::Config;

impl Engine {
    /// The node's GPUs (from `crate::gpus::resolve` at start; none until set), and whether the
    /// cgroup driver fences devices (`pjw_cgroup::Driver::fence_devices`).
    pub fn set_gpus(&mut self, gpus: Gpus, fenced: bool) {
        self.gpus = gpus;
        self.gpus_fenced = fenced;
    }

    /// The device nodes job `j` must not open: those of every GPU it was not given.
    pub(super) fn denied_devices(&self, j: &Job) -> Vec<(u32, u32)> {
        self.gpus
            .gpus
            .iter()
            .filter(|g| !j.gpus.contains(g.id))
            .flat_map(|g| g.devices.iter().map(|d| (d.major, d.minor)))
            .collect()
    }

    /// Fence a job that is being created: on a node with GPUs whose devices pjw fences, deny
    /// it the GPUs it was not given (a CPU-only job: all of them).
    pub(super) fn fence_job(&self, j: &Job) -> Result<(), pjw_cgroup::CgroupError> {
        if !self.gpus_fenced || self.gpus.is_empty() {
            return Ok(());
        }
        let deny = self.denied_devices(j);
        if deny.is_empty() {
            return Ok(());
        }
        self.driver.deny_devices(&j.cgroup, &deny)
    }

    /// What the queue policy needs to know of the GPUs: the node's, the reserve, and those held
    /// by ending jobs it does not see.
    pub(super) fn gpu_node<'a>(
        gpus: &'a Gpus,
        jobs: &BTreeMap<i64, Job>,
        cfg: &Config,
    ) -> GpuNode<'a> {
        let busy = jobs
            .values()
            .filter(|j| j.end.ending && j.phase != Phase::Queued)
            .fold(GpuSet::new(), |a, j| a.union(&j.gpus));
        GpuNode {
            gpus,
            policy: GpuPolicy {
                reserve_cores_per_gpu: cfg.gpus.reserve_cores_per_gpu,
            },
            busy,
        }
    }

    /// Refuse a request for more GPUs than the node has.
    pub(super) fn validate_gpus(&self, n: u32) -> Result<(), Refusal> {
        if n as usize > self.gpus.len() {
            return Err(refuse(
                ErrorCode::Invalid,
                format!(
                    "--gpus {n} is more than this node has ({} gpus)",
                    self.gpus.len()
                ),
            ));
        }
        Ok(())
    }

    /// A queued job asks for `n` GPUs: remembered, and recorded before it is planned. False
    /// (and the job is gone, its client told) when the store refuses.
    pub(super) fn record_gpu_request(&mut self, seq: i64, n: u32) -> bool {
        if n == 0 {
            return true;
        }
        let written = self.store_write(seq, "set_gpus", OnFail::Refuse, |s| {
            s.set_gpus(seq, n, &GpuSet::new())
        });
        match written {
            Ok(()) => {
                if let Some(j) = self.jobs.get_mut(&seq) {
                    j.req.ngpus = n as usize;
                }
                true
            }
            Err(e) => {
                if let Some(mut j) = self.jobs.remove(&seq) {
                    error!(job = %j.id, error = %e, "cannot record job");
                    self.store_end(seq, self.clock.now_ms(), "start failed: store", None);
                    if let Some(w) = j.waiter.take() {
                        let _ = w
                            .reply
                            .send(err(ErrorCode::Internal, format!("cannot record job: {e}")));
                    }
                }
                false
            }
        }
    }

    /// The policy granted `gpus` to the job that starts next.
    pub(super) fn grant_gpus(&mut self, seq: i64, gpus: GpuSet) -> bool {
        match self.jobs.get_mut(&seq) {
            Some(j) => {
                j.gpus = gpus;
                true
            }
            None => false,
        }
    }

    /// Before a job starts on its GPUs they are recorded (durable first, as its CPUs are).
    pub(super) fn record_gpu_grant(&mut self, seq: i64) -> Result<(), pjw_store::StoreError> {
        let Some(j) = self.jobs.get(&seq) else {
            return Ok(());
        };
        if j.gpus.is_empty() {
            return Ok(());
        }
        let (n, gpus) = (j.req.ngpus as u32, j.gpus);
        self.store_write(seq, "set_gpus", OnFail::Refuse, |s| {
            s.set_gpus(seq, n, &gpus)
        })
    }

    /// The variables a started job's client sets for its command (`gpus`: the node's).
    pub(super) fn gpu_env_of(gpus: &Gpus, fenced: bool, j: &Job) -> Vec<(String, String)> {
        gpu_env(gpus, &j.gpus, fenced)
    }

    /// Take back a recovered job's GPU request and the GPUs it holds.
    pub(super) fn restore_gpus(&self, job: &mut Job) {
        if let Ok(Some((n, gpus))) = self.store.gpus(job.seq) {
            job.req.ngpus = n as usize;
            if job.phase != Phase::Queued {
                job.gpus = gpus;
            }
        }
    }
}
