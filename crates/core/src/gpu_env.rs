//! The environment a GPU job's runtimes read: which devices they may use, numbered as they
//! will enumerate them.
//!
//! Inside a device fence a runtime sees only the devices the job may open, and numbers them from
//! 0 in PCI order; so with `fenced` the job's GPUs are `0..n-1` per runtime (its GPUs of that
//! vendor, in PCI address order). Without a fence every GPU is visible and a GPU keeps its
//! position among the node's GPUs of its vendor. docs/decisions.md (at) says why.
//!
//! ```
//! use pjw_core::{gpu_env::gpu_env, CpuSet, Gpu, GpuId, GpuSet, GpuVendor, Gpus};
//! let g = |i| Gpu { id: GpuId(i), vendor: GpuVendor::Nvidia, pci: None, switch: None, numa: None,
//!                   cpus: CpuSet::new(), devices: vec![] };
//! let gpus = Gpus { gpus: vec![g(0), g(1), g(2)], shared: vec![] };
//! let env = gpu_env(&gpus, &GpuSet::parse_list("1-2").unwrap(), true);
//! assert!(env.contains(&("CUDA_VISIBLE_DEVICES".into(), "0,1".into())));
//! assert!(env.contains(&("PJW_GPUS".into(), "1,2".into())));
//! ```

use crate::gpu::{GpuSet, GpuVendor, Gpus};

fn list(items: impl Iterator<Item = u32>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// The variables for a job holding `granted` of `gpus`; empty when it holds none.
pub fn gpu_env(gpus: &Gpus, granted: &GpuSet, fenced: bool) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if granted.is_empty() {
        return env;
    }
    env.push(("PJW_GPUS".to_string(), list(granted.iter().map(|g| g.0))));
    env.push(("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()));
    for vendor in [GpuVendor::Nvidia, GpuVendor::Amd, GpuVendor::Intel] {
        // Positions among the node's GPUs of this vendor (ids are in PCI order).
        let of_vendor: Vec<u32> = gpus
            .gpus
            .iter()
            .filter(|g| g.vendor == vendor)
            .map(|g| g.id.0)
            .collect();
        let mine: Vec<u32> = of_vendor
            .iter()
            .enumerate()
            .filter(|(_, id)| granted.contains(crate::GpuId(**id)))
            .map(|(pos, _)| pos as u32)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let value = if fenced {
            list(0..mine.len() as u32)
        } else {
            list(mine.into_iter())
        };
        let names: &[&str] = match vendor {
            GpuVendor::Nvidia => &["CUDA_VISIBLE_DEVICES"],
            GpuVendor::Amd => &[
                "ROCR_VISIBLE_DEVICES",
                "HIP_VISIBLE_DEVICES",
                "GPU_DEVICE_ORDINAL",
            ],
            GpuVendor::Intel => &["ZE_AFFINITY_MASK"],
        };
        for n in names {
            env.push((n.to_string(), value.clone()));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuSet, Gpu, GpuId};

    fn gpus(vendors: &[GpuVendor]) -> Gpus {
        Gpus {
            gpus: vendors
                .iter()
                .enumerate()
                .map(|(i, v)| Gpu {
                    id: GpuId(i as u32),
                    vendor: *v,
                    pci: None,
                    switch: None,
                    numa: None,
                    cpus: CpuSet::new(),
                    devices: vec![],
                })
                .collect(),
            shared: vec![],
        }
    }

    fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn fenced_jobs_count_from_zero_unfenced_keep_host_positions() {
        use GpuVendor::*;
        let g = gpus(&[Nvidia, Nvidia, Nvidia, Nvidia]);
        let granted = GpuSet::parse_list("1,3").unwrap();
        let env = gpu_env(&g, &granted, true);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(get(&env, "PJW_GPUS"), Some("1,3"));
        assert_eq!(get(&env, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(get(&env, "ROCR_VISIBLE_DEVICES"), None);
        let env = gpu_env(&g, &granted, false);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("1,3"));
    }

    #[test]
    fn each_runtime_counts_only_its_vendor() {
        use GpuVendor::*;
        // Intel iGPU 0, AMD 1 and 2, NVIDIA 3.
        let g = gpus(&[Intel, Amd, Amd, Nvidia]);
        let env = gpu_env(&g, &GpuSet::parse_list("2-3").unwrap(), false);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(get(&env, "ROCR_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(get(&env, "HIP_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(get(&env, "GPU_DEVICE_ORDINAL"), Some("1"));
        assert_eq!(get(&env, "ZE_AFFINITY_MASK"), None);
        let env = gpu_env(&g, &GpuSet::parse_list("0,2").unwrap(), true);
        assert_eq!(get(&env, "ZE_AFFINITY_MASK"), Some("0"));
        assert_eq!(get(&env, "ROCR_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(get(&env, "PJW_GPUS"), Some("0,2"));
    }

    #[test]
    fn no_gpus_no_variables() {
        let g = gpus(&[GpuVendor::Nvidia]);
        assert!(gpu_env(&g, &GpuSet::new(), true).is_empty());
    }
}
