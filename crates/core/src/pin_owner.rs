//! Whose affinity a thread of a binding job has, and which CPUs that leaves pjw.
//!
//! Runtimes pin threads themselves: libgomp under `OMP_PROC_BIND` pins each OpenMP thread to
//! its place, Open MPI binds each rank to its cores, `hwloc-bind` and `taskset` bind a command.
//! Such a pin is a decision made with knowledge pjw lacks (which rank shares memory with
//! which), so the binder keeps its hands off it (docs/decisions.md (bf)). A thread's current
//! affinity tells, with what pjw remembers having set on it ([`owner`]):
//! - the whole job set, or wider: **free** — pjw may pin it;
//! - exactly what pjw last set on it: **pjw's**;
//! - a thread pjw never set, whose affinity is a pin pjw set on another thread of the job: it
//!   **inherited pjw's pin** from the thread that made it (a new thread or process starts
//!   with its creator's affinity), and pjw places it like a free one;
//! - anything else narrower than the job set: **a runtime's** — left where it is, and its CPUs
//!   are kept out of pjw's own placements while others are left ([`open_slots`]).
//!
//! ```
//! use pjw_core::pin_owner::{owner, Owner};
//! use pjw_core::CpuSet;
//! let s = |t: &str| CpuSet::parse_list(t).unwrap();
//! let job = s("0-3");
//! assert_eq!(owner(&job, &s("0-3"), None, &[]), Owner::Free);
//! assert_eq!(owner(&job, &s("2"), Some(&s("2")), &[]), Owner::Pjw);
//! assert_eq!(owner(&job, &s("1"), None, &[s("1")]), Owner::Inherited);
//! assert_eq!(owner(&job, &s("1"), None, &[]), Owner::Runtime);
//! ```

use crate::thread_bind::{pin_set, slots, BindMode};
use crate::{CpuSet, Topology};

/// Whose a thread's current affinity is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The whole job set or more: nobody's; pjw may pin the thread.
    Free,
    /// What pjw last set on this thread.
    Pjw,
    /// A pin pjw set on another thread of the job, taken over from the thread that made it.
    Inherited,
    /// Narrower than the job set and not pjw's: a runtime's (or the user's) pin.
    Runtime,
}

/// The owner of `current`, the affinity of a thread of a job holding `job`: `ours` is what pjw
/// last set on this thread (None: nothing, or the thread is new), `pjw_pins` the pins pjw holds
/// on the job's other threads.
pub fn owner(job: &CpuSet, current: &CpuSet, ours: Option<&CpuSet>, pjw_pins: &[CpuSet]) -> Owner {
    // Within the job and narrower than it, or it is nobody's pin.
    if !current.is_subset(job) || current == job {
        return Owner::Free;
    }
    match ours {
        Some(set) if set == current => Owner::Pjw,
        // pjw set something else since: someone pinned it after pjw did.
        Some(_) => Owner::Runtime,
        None if pjw_pins.contains(current) => Owner::Inherited,
        None => Owner::Runtime,
    }
}

/// The slots of `job` in `mode` ([`slots`]) for `wanted` threads of pjw's: those whose pin
/// sets miss `reserved` (the CPUs of runtime pins), so pjw's pins do not land on threads a
/// runtime placed — while they have room for all `wanted`. With fewer open slots than that,
/// every slot: crowding pjw's threads onto the few free CPUs would leave the runtime's alone
/// on theirs (3 of pjw's on one CPU beside 1 of libgomp's on the other).
pub fn open_slots(
    topo: &Topology,
    job: &CpuSet,
    mode: BindMode,
    reserved: &CpuSet,
    wanted: usize,
) -> CpuSet {
    let all = slots(topo, job, mode);
    let open: CpuSet = all
        .iter()
        .filter(|&s| !pin_set(topo, job, mode, s).intersects(reserved))
        .collect();
    if open.is_empty() || open.len() < wanted {
        all
    } else {
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    /// (description, job, current, ours, pins pjw holds on the threads it could inherit from,
    /// owner)
    type OwnerCase = (
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
        &'static [&'static str],
        Owner,
    );

    #[test]
    fn owner_table() {
        let cases: &[OwnerCase] = &[
            ("the whole job set", "0-3", "0-3", None, &[], Owner::Free),
            (
                "wider than the job (a set that shrank)",
                "0-1",
                "0-3",
                Some("1"),
                &[],
                Owner::Free,
            ),
            (
                "outside the job: not a pin of its cpus",
                "0-1",
                "2",
                None,
                &[],
                Owner::Free,
            ),
            (
                "freed by pjw: the whole set",
                "0-3",
                "0-3",
                Some("0-3"),
                &[],
                Owner::Free,
            ),
            ("pjw's own pin", "0-3", "2", Some("2"), &[], Owner::Pjw),
            (
                "pjw's cores pin",
                "0-3",
                "2-3",
                Some("2-3"),
                &[],
                Owner::Pjw,
            ),
            (
                "pjw pinned it to 2, something moved it to 1",
                "0-3",
                "1",
                Some("2"),
                &[],
                Owner::Runtime,
            ),
            (
                "pjw freed it, something pinned it",
                "0-3",
                "1",
                Some("0-3"),
                &[],
                Owner::Runtime,
            ),
            (
                "libgomp's place for a thread pjw never touched",
                "0-3",
                "1",
                None,
                &["2"],
                Owner::Runtime,
            ),
            (
                "Open MPI's two-cpu rank binding",
                "0-3",
                "2-3",
                None,
                &[],
                Owner::Runtime,
            ),
            (
                "a new thread with its pinned creator's cpu",
                "0-3",
                "2",
                None,
                &["0", "2"],
                Owner::Inherited,
            ),
        ];
        for (desc, job, current, ours, pins, want) in cases {
            let ours = ours.map(set);
            let pins: Vec<CpuSet> = pins.iter().map(|p| set(p)).collect();
            assert_eq!(
                owner(&set(job), &set(current), ours.as_ref(), &pins),
                *want,
                "{desc}"
            );
        }
    }

    /// (description, topology, job, mode, reserved, threads wanted, open slots)
    type SlotCase = (
        &'static str,
        &'static str,
        &'static str,
        BindMode,
        &'static str,
        usize,
        &'static str,
    );

    #[test]
    fn open_slots_table() {
        let cases: &[SlotCase] = &[
            (
                "nothing reserved: every slot",
                "core:4",
                "0-3",
                BindMode::Threads,
                "",
                2,
                "0-3",
            ),
            (
                "OpenMP holds 0 and 1: pjw places its 2 on 2 and 3",
                "core:4",
                "0-3",
                BindMode::Threads,
                "0-1",
                2,
                "2-3",
            ),
            (
                "3 of pjw's for the 2 open slots: every slot",
                "core:4",
                "0-3",
                BindMode::Threads,
                "0-1",
                3,
                "0-3",
            ),
            (
                "runtime pins cover the job: every slot",
                "core:4",
                "0-3",
                BindMode::Threads,
                "0-3",
                1,
                "0-3",
            ),
            (
                "cores mode: a core with one reserved thread is taken",
                "core:4 pu:2",
                "0-7",
                BindMode::Cores,
                "3",
                3,
                "0,4,6",
            ),
            (
                "a reserved cpu outside the job changes nothing",
                "core:4",
                "0-1",
                BindMode::Threads,
                "3",
                2,
                "0-1",
            ),
        ];
        for (desc, topo, job, mode, reserved, wanted, want) in cases {
            let topo = synthetic::parse(topo).unwrap();
            assert_eq!(
                open_slots(&topo, &set(job), *mode, &set(reserved), *wanted),
                set(want),
                "{desc}"
            );
        }
    }
}
