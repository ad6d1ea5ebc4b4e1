//! The per-job families: CPU time, memory, state and GPUs of each job.

use pjw_cgroup::Driver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::JobSnap;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct JobLabels {
    pub(super) job: String,
    pub(super) user: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobStateLabels {
    job: String,
    user: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobGpuLabels {
    job: String,
    user: String,
    gpu: String,
}

/// The per-job families of one scrape, filled from the snapshot and the cgroup reads.
pub(super) struct JobFamilies {
    cpu: Family<JobLabels, Counter<f64, AtomicU64>>,
    mem: Family<JobLabels, Gauge>,
    state: Family<JobStateLabels, Gauge>,
    gpus: GpuFamilies,
}

/// The GPU families, registered after the I/O, start and memory families.
pub(super) struct GpuFamilies {
    gpu: Family<JobGpuLabels, Gauge>,
    gpu_util: Family<JobLabels, Gauge<f64, AtomicU64>>,
    gpu_mem: Family<JobLabels, Gauge>,
}

impl JobFamilies {
    /// Every job of `jobs`, with CPU time and memory read through `driver` where the sampler
    /// has no sample of them.
    pub(super) fn collect(jobs: &[JobSnap], driver: Option<&Driver>) -> JobFamilies {
        let cpu: Family<JobLabels, Counter<f64, AtomicU64>> = Family::default();
        let mem: Family<JobLabels, Gauge> = Family::default();
        let state: Family<JobStateLabels, Gauge> = Family::default();
        let gpu: Family<JobGpuLabels, Gauge> = Family::default();
        let gpu_util: Family<JobLabels, Gauge<f64, AtomicU64>> = Family::default();
        let gpu_mem: Family<JobLabels, Gauge> = Family::default();
        for j in jobs {
            for g in j.gpus.iter() {
                gpu.get_or_create(&JobGpuLabels {
                    job: j.id.clone(),
                    user: j.user.clone(),
                    gpu: g.to_string(),
                })
                .set(1);
            }
            let labels = JobLabels {
                job: j.id.clone(),
                user: j.user.clone(),
            };
            if let Some(u) = j.gpu_util {
                gpu_util.get_or_create(&labels).set(u);
            }
            if let Some(b) = j.gpu_mem {
                gpu_mem
                    .get_or_create(&labels)
                    .set(b.min(i64::MAX as u64) as i64);
            }
            state
                .get_or_create(&JobStateLabels {
                    job: j.id.clone(),
                    user: j.user.clone(),
                    state: j.state.as_str().into(),
                })
                .set(1);
            let Some(cg) = &j.cgroup else {
                continue;
            };
            let cpu_usec = j.cpu_usec.or_else(|| {
                let c = driver?.cpu_time(cg).ok()?;
                Some(c.user_usec + c.system_usec)
            });
            let mem_bytes = j.mem_bytes.or_else(|| driver?.memory_usage(cg).ok());
            if let Some(us) = cpu_usec {
                cpu.get_or_create(&labels).inc_by(us as f64 / 1e6);
            }
            if let Some(b) = mem_bytes {
                mem.get_or_create(&labels).set(b as i64);
            }
        }
        JobFamilies {
            cpu,
            mem,
            state,
            gpus: GpuFamilies {
                gpu,
                gpu_util,
                gpu_mem,
            },
        }
    }

    /// Register CPU time, memory and state; the GPU families are left to register later.
    pub(super) fn register_usage(self, reg: &mut Registry) -> GpuFamilies {
        let JobFamilies {
            cpu,
            mem,
            state,
            gpus,
        } = self;
        reg.register_with_unit(
            "job_cpu",
            "CPU time used by the job (user + system)",
            Unit::Seconds,
            cpu,
        );
        reg.register_with_unit(
            "job_memory",
            "Memory charged to the job's cgroup",
            Unit::Bytes,
            mem,
        );
        reg.register(
            "job_state",
            "The job's state (1 for its current state)",
            state,
        );
        gpus
    }
}

impl GpuFamilies {
    pub(super) fn register(self, reg: &mut Registry) {
        let GpuFamilies {
            gpu,
            gpu_util,
            gpu_mem,
        } = self;
        reg.register(
            "job_gpu",
            "A GPU the job holds (1 per GPU; gpu is pjw's id, as in PJW_GPUS)",
            gpu,
        );
        reg.register(
            "job_gpu_utilisation_percent",
            "Mean utilisation of the job's GPUs in the latest sample (NVML)",
            gpu_util,
        );
        reg.register_with_unit(
            "job_gpu_memory",
            "GPU memory the job's GPUs use, summed, in the latest sample (NVML)",
            Unit::Bytes,
            gpu_mem,
        );
    }
}
