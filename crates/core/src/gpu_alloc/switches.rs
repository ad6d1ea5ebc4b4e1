//! Which of one node's free GPUs a job takes: those under the fewest PCIe switches
//! ([`crate::Gpu::switch`]), packed (docs/decisions.md (aw)).

use std::cmp::Reverse;

use crate::gpu::{GpuId, GpuSet, Gpus};

/// `n` of `ids` (one node's free GPUs, in id order) under the fewest PCIe switches, and how many
/// switches that is; a GPU of no known switch is a switch of its own. While no switch holds
/// what is still needed, the switch with the most free GPUs gives them all; then the switch
/// with the fewest free GPUs that holds the rest gives it (packing, as nodes are packed: a
/// switch with more free GPUs stays whole for a larger job). Ties go to the switch of the lowest id. With no
/// switches known this is the first `n` ids.
pub(super) fn fewest_switches(gpus: &Gpus, ids: &[GpuId], n: usize) -> (GpuSet, usize) {
    // The free GPUs of each switch, switches in order of their lowest id.
    let mut switches: Vec<Vec<GpuId>> = Vec::new();
    let mut names: Vec<Option<&str>> = Vec::new();
    for &id in ids {
        let name = gpus.get(id).and_then(|g| g.switch.as_deref());
        match names.iter().position(|s| name.is_some() && *s == name) {
            Some(i) => switches[i].push(id),
            None => {
                switches.push(vec![id]);
                names.push(name);
            }
        }
    }
    let mut set = GpuSet::new();
    let mut used = 0;
    while set.len() < n && !switches.is_empty() {
        let need = n - set.len();
        let pick = switches
            .iter()
            .enumerate()
            .filter(|(_, v)| v.len() >= need)
            .min_by_key(|(_, v)| v.len())
            .or_else(|| {
                // max_by_key keeps the last of equals; the first is wanted.
                switches
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, v)| Reverse(v.len()))
            })
            .map(|(i, _)| i);
        let Some(i) = pick else { break };
        let v = switches.remove(i);
        set = set.union(&v.iter().take(need).copied().collect());
        used += 1;
    }
    (set, used)
}
