//! GPUs in the engine: the node's GPUs, a job's request and grant, their store rows (so that
//! recovery never hands a GPU out twice) and the environment a GPU job gets.

use std::collections::BTreeMap;

use pjw_core::gpu_alloc::GpuPolicy;
use pjw_core::gpu_env::gpu_env;
use pjw_core::sched::{GpuNode, Phase};
use pjw_core::{GpuSet, Gpus};
use pjw_proto::ErrorCode;

use super::{refuse, Engine, Job, Refusal};
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

    /// What the queue policy needs to know of the GPUs: the node's, the reserve, and those it
    /// must not hand out though it does not see who has them: held by ending jobs, or chosen
    /// by a workload manager for a queued job left out of this plan (held back by memory, or
    /// recovered and waiting for its client) — else another job could take a GPU the manager
    /// gave that job, which would then wait for it for good.
    pub(super) fn gpu_node<'a>(
        gpus: &'a Gpus,
        jobs: &BTreeMap<i64, Job>,
        cfg: &Config,
        in_plan: impl Fn(&Job) -> bool,
    ) -> GpuNode<'a> {
        let busy = jobs
            .values()
            .filter(|j| j.end.ending && j.phase != Phase::Queued)
            .fold(GpuSet::new(), |a, j| a.union(&j.gpus));
        let busy = jobs
            .values()
            .filter(|j| j.phase == Phase::Queued && !in_plan(j))
            .fold(busy, |a, j| a.union(&j.req.pinned));
        GpuNode {
            gpus,
            policy: GpuPolicy {
                reserve_cores_per_gpu: cfg.gpus.reserve_cores_per_gpu,
                locality: cfg.gpus.locality,
                placement: cfg.gpus.placement,
                require_wait_ms: (cfg.gpus.require_wait_secs > 0)
                    .then(|| cfg.gpus.require_wait_secs * 1000),
            },
            busy,
        }
    }

    /// The node's GPUs no job holds (ending jobs hold theirs until their cgroups are gone).
    pub(super) fn free_gpus(&self) -> GpuSet {
        self.jobs
            .values()
            .filter(|j| j.phase != Phase::Queued)
            .fold(self.gpus.all(), |a, j| a.difference(&j.gpus))
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

    /// The GPUs a workload manager chose for a job it registers, by the manager's index
    /// (`SLURM_JOB_GPUS`), as this node's GPUs: index `i` is GPU `i` (the order of `[gpus]`
    /// devices, which follow gres.conf's, or of discovery: PCI address). The list is
    /// user-influenced (docs/security.md): an index the node does not have, one named twice,
    /// or one a live job holds or waits for is refused, never replaced by another GPU.
    pub(super) fn manager_gpus(&self, wlm: &str, ids: Option<&[u32]>) -> Result<GpuSet, Refusal> {
        let Some(ids) = ids else {
            return Ok(GpuSet::new());
        };
        let have = self.gpus.len();
        let mut out = GpuSet::new();
        for &i in ids {
            if i as usize >= have {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!(
                        "{wlm} gave the job gpu {i}, but this node has {}; the manager's gpu index i is pjw's gpu i (declare [gpus] devices in the manager's order)",
                        if have == 0 {
                            "no gpus".to_string()
                        } else {
                            format!("gpus 0-{}", have - 1)
                        },
                    ),
                ));
            }
            let id = pjw_core::GpuId(i);
            if out.contains(id) {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!("{wlm} named gpu {i} twice"),
                ));
            }
            out.insert(id);
        }
        if let Some(j) = self
            .jobs
            .values()
            .find(|j| !j.end.ending && (j.gpus.intersects(&out) || j.req.pinned.intersects(&out)))
        {
            let both = out.intersection(&j.gpus.union(&j.req.pinned));
            return Err(refuse(
                ErrorCode::Conflict,
                format!("gpu {both} is held by job {} of {}", j.id, j.user),
            ));
        }
        Ok(out)
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

    /// The GPUs a job starts on, with the number it asked for, when it holds any: recorded
    /// with its start, before it runs on them (durable first, as its CPUs are).
    pub(super) fn gpu_grant(&self, seq: i64) -> Option<(u32, GpuSet)> {
        let j = self.jobs.get(&seq)?;
        (!j.gpus.is_empty()).then_some((j.req.ngpus as u32, j.gpus))
    }

    /// The variables a started job's client sets for its command (`gpus`: the node's).
    pub(super) fn gpu_env_of(gpus: &Gpus, fenced: bool, j: &Job) -> Vec<(String, String)> {
        gpu_env(gpus, &j.gpus, fenced)
    }

    /// Take back a recovered job's GPU request and the GPUs it holds (or, queued, the GPUs its
    /// manager chose for it).
    pub(super) fn restore_gpus(&self, job: &mut Job) {
        if let Ok(Some((n, gpus))) = self.store.gpus(job.seq) {
            job.req.ngpus = n as usize;
            if job.phase != Phase::Queued {
                job.gpus = gpus;
            } else {
                job.req.pinned = gpus;
            }
        }
    }
}
