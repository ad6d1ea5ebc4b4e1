//! The GPUs a workload manager already chose for a job, as the manager numbers them.
//!
//! | manager | variable | form |
//! |---|---|---|
//! | Slurm | `SLURM_JOB_GPUS` (Prolog, Epilog and the job) | `0,2`: the gres index, the device's position among the node's gres.conf `File=` devices |
//! | Grid Engine (Altair/Univa RSMAP) | `SGE_HGR_gpu` | `0 2` (Son of Grid Engine has none) |
//! | PBS / OpenPBS (cgroups hook) | `CUDA_VISIBLE_DEVICES` | `0,2` |
//! | LSF | `CUDA_VISIBLE_DEVICES` | `0,2` |
//! | HTCondor | `_CONDOR_AssignedGPUs` | `CUDA0,CUDA2` (or `OCL…`) |
//!
//! These values reach pjw from environments a job's user can write to (a PBS hook reading the
//! job's variables, `qsub -v`), so they are parsed as hostile: at most [`MAX_GPU_ITEMS`]
//! whole numbers below [`pjw_core::MAX_GPUS`], no duplicates, nothing else. A UUID (`GPU-…`,
//! `MIG-…`) is refused with a clear error, never guessed at. Which pjw GPU an index names is
//! the daemon's business: index `i` is pjw's GPU `i` (docs/wlm.md).

use crate::{bad, get, Env, Manager, WlmError};

/// The most GPUs a list may name.
pub const MAX_GPU_ITEMS: usize = pjw_core::MAX_GPUS as usize;

/// The variables that say which GPUs `m` gave the job, first found wins.
pub fn gpu_vars(m: Manager) -> &'static [&'static str] {
    match m {
        Manager::Slurm => &["SLURM_JOB_GPUS"],
        Manager::Sge => &["SGE_HGR_gpu"],
        Manager::Pbs | Manager::Lsf => &["CUDA_VISIBLE_DEVICES"],
        Manager::Condor => &["_CONDOR_AssignedGPUs"],
    }
}

/// The GPUs `m` gave the job, by the manager's index, in the order it lists them; `None` when
/// it says nothing (no variable, an empty one, or Slurm's `NoDevFiles`).
pub fn manager_gpus(m: Manager, env: &Env) -> Result<Option<Vec<u32>>, WlmError> {
    for var in gpu_vars(m) {
        if let Some(v) = get(env, var) {
            if v == "NoDevFiles" {
                return Ok(None);
            }
            return parse_gpu_list(m, var, v).map(Some);
        }
    }
    Ok(None)
}

/// A list of GPU indices as `m` writes it in `what`: separated by commas or white space;
/// HTCondor's `CUDA`/`OCL` prefixes are taken off.
pub fn parse_gpu_list(m: Manager, what: &str, value: &str) -> Result<Vec<u32>, WlmError> {
    let fail = |reason: &str| bad(m, what, value, reason);
    if value.len() > 4096 {
        return Err(bad(m, what, "…", "longer than 4096 bytes"));
    }
    let mut out: Vec<u32> = Vec::new();
    for item in value
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|s| !s.is_empty())
    {
        let num = match m {
            Manager::Condor => item
                .strip_prefix("CUDA")
                .or_else(|| item.strip_prefix("OCL"))
                .unwrap_or(item),
            _ => item,
        };
        if num.starts_with("GPU-") || num.starts_with("MIG-") {
            return Err(fail(
                "names a GPU by UUID; pjw maps GPU indices only (see docs/wlm.md)",
            ));
        }
        if num.is_empty() || num.len() > 3 || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(&format!("{item:?} is not a GPU index")));
        }
        let n: u32 = num.parse().map_err(|_| fail("not a GPU index"))?;
        if n >= pjw_core::MAX_GPUS {
            return Err(fail(&format!(
                "GPU {n} is past the {} pjw handles",
                pjw_core::MAX_GPUS
            )));
        }
        if out.contains(&n) {
            return Err(fail(&format!("GPU {n} is named twice")));
        }
        if out.len() == MAX_GPU_ITEMS {
            return Err(fail(&format!("more than {MAX_GPU_ITEMS} GPUs")));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(fail("names no GPU"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env_from_lines;

    #[test]
    fn each_manager_says_its_gpus_its_own_way() {
        for (m, text, want) in [
            (Manager::Slurm, "SLURM_JOB_GPUS=0,2\n", Some(vec![0, 2])),
            (
                Manager::Slurm,
                "SLURM_JOB_GPUS=3\nCUDA_VISIBLE_DEVICES=0\n",
                Some(vec![3]),
            ),
            // Inside a step, CUDA_VISIBLE_DEVICES is renumbered by the step's fence: not read.
            (Manager::Slurm, "CUDA_VISIBLE_DEVICES=0\n", None),
            (Manager::Slurm, "SLURM_JOB_GPUS=\n", None),
            (Manager::Sge, "SGE_HGR_gpu=1 3\n", Some(vec![1, 3])),
            (Manager::Pbs, "CUDA_VISIBLE_DEVICES=1,0\n", Some(vec![1, 0])),
            (Manager::Lsf, "CUDA_VISIBLE_DEVICES=NoDevFiles\n", None),
            (
                Manager::Condor,
                "_CONDOR_AssignedGPUs=CUDA0,CUDA3\n",
                Some(vec![0, 3]),
            ),
            (
                Manager::Condor,
                "_CONDOR_AssignedGPUs=OCL1\n",
                Some(vec![1]),
            ),
            (Manager::Condor, "", None),
        ] {
            let got = manager_gpus(m, &env_from_lines(text)).unwrap();
            assert_eq!(got, want, "{m}: {text:?}");
        }
    }

    #[test]
    fn hostile_lists_are_refused_with_a_reason() {
        for (m, value, why) in [
            (Manager::Slurm, "0,0", "named twice"),
            (Manager::Slurm, "64", "past the 64"),
            (Manager::Slurm, "4294967296", "is not a GPU index"),
            (Manager::Slurm, "-1", "is not a GPU index"),
            (Manager::Slurm, "0-3", "is not a GPU index"),
            (Manager::Slurm, "1;rm -rf /", "is not a GPU index"),
            (Manager::Slurm, "+1", "is not a GPU index"),
            (Manager::Slurm, ",,", "names no GPU"),
            (
                Manager::Pbs,
                "GPU-5e1f0c1a-1b2c-3d4e-5f60-718293a4b5c6",
                "by UUID",
            ),
            (Manager::Lsf, "MIG-0", "by UUID"),
            (Manager::Slurm, "CUDA0", "is not a GPU index"),
            (Manager::Condor, "CUDAx", "is not a GPU index"),
        ] {
            let e = parse_gpu_list(m, "X", value).unwrap_err().to_string();
            assert!(e.contains(why), "{m} {value:?}: {e} (wanted {why:?})");
        }
        let long = "0,".repeat(3000);
        let e = parse_gpu_list(Manager::Slurm, "X", &long)
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than 4096 bytes"), "{e}");
        let all: Vec<String> = (0..64).map(|i| i.to_string()).collect();
        assert_eq!(
            parse_gpu_list(Manager::Slurm, "X", &all.join(","))
                .unwrap()
                .len(),
            64
        );
    }
}
