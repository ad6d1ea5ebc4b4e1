//! Slurm: a job from its environment (job, task, Prolog or Epilog).

use crate::{bad, count, first, get, mib, missing, Env, Manager, WlmError, WlmJob};

/// A Slurm job from its environment (job, task, Prolog or Epilog).
pub fn slurm(env: &Env) -> Result<WlmJob, WlmError> {
    let m = Manager::Slurm;
    let id =
        first(env, &["SLURM_JOB_ID", "SLURM_JOBID"]).ok_or_else(|| missing(m, "SLURM_JOB_ID"))?;
    let mut job = WlmJob::new(m, id.to_string());
    job.user = get(env, "SLURM_JOB_USER").map(String::from);
    job.name = get(env, "SLURM_JOB_NAME").map(String::from);
    job.tmpdir = get(env, "TMPDIR").map(String::from);
    job.cpus = if let Some(v) = get(env, "SLURM_CPUS_ON_NODE") {
        Some(count(m, "SLURM_CPUS_ON_NODE", v)?)
    } else if let Some(v) = get(env, "SLURM_JOB_CPUS_PER_NODE") {
        // "4(x2),2": this node's count is not said; the first node's is the batch host's.
        let head = v.split(',').next().unwrap_or(v);
        let head = head.split('(').next().unwrap_or(head);
        Some(
            count(m, "SLURM_JOB_CPUS_PER_NODE", head)
                .map_err(|_| bad(m, "SLURM_JOB_CPUS_PER_NODE", v, "expected N or N(xM),…"))?,
        )
    } else {
        None
    };
    job.mem = if let Some(v) = get(env, "SLURM_MEM_PER_NODE") {
        Some(mib(m, "SLURM_MEM_PER_NODE", v)?)
    } else if let (Some(v), Some(n)) = (get(env, "SLURM_MEM_PER_CPU"), job.cpus) {
        // Both numbers are the job's to pick: 10^9 MiB × 4·10^9 CPUs overflows u64.
        let per = mib(m, "SLURM_MEM_PER_CPU", v)?;
        Some(
            per.checked_mul(n as u64)
                .ok_or_else(|| bad(m, "SLURM_MEM_PER_CPU", v, "times the CPUs is out of range"))?,
        )
    } else {
        None
    };
    Ok(job)
}
