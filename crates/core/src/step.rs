//! Steps: a `pjw run` started by a process that is already inside a job runs inside that job,
//! as one of its steps, never as a job of its own.
//!
//! The daemon finds the job from facts the caller cannot forge (its pid from `SO_PEERCRED` and
//! that pid's cgroup); this module decides, purely, which of the job's CPUs a step of `k` CPUs
//! runs on ([`step_cpus`]). A step stays in its job's cgroups (so under the job's cpuset,
//! memory limit and every other limit, and it ends with the job); its CPUs are an affinity
//! inside the job's set, so two steps of a 4-CPU job that ask for 2 each run side by side on
//! different CPUs. No step waits: when the job's CPUs are all taken by live steps, a new step
//! shares the ones the fewest steps use.
//!
//! ```
//! use pjw_core::{alloc::Allocator, step::step_cpus, synthetic, CpuSet};
//! let topo = synthetic::parse("package:1 core:4 pu:1").unwrap();
//! let alloc = Allocator::new(&topo);
//! let job = CpuSet::parse_list("0-3").unwrap();
//! let first = step_cpus(&alloc, &job, &[], 2).unwrap();
//! let second = step_cpus(&alloc, &job, &[first], 2).unwrap();
//! assert!(!first.intersects(&second));
//! assert!(step_cpus(&alloc, &job, &[], 5).is_err());
//! ```

use crate::alloc::Allocator;
use crate::CpuSet;

/// Why a step cannot have the CPUs it asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// No CPU asked for.
    #[error("a step needs at least 1 cpu")]
    NoCpus,
    /// More CPUs than the job holds.
    #[error("the job has {job} cpus; a step of it can have at most {job}, not {asked}")]
    MoreThanTheJob { asked: usize, job: usize },
}

/// The CPUs of a new step of `k` CPUs in a job that holds `job`, whose live steps hold `held`.
///
/// All of the job's CPUs when `k` is their number. Otherwise the CPUs the fewest live steps
/// use: every CPU of a less used level, and the rest from the next level as the allocator
/// places a job (whole cores, one cache, one NUMA node first) — so steps fill the job side by
/// side before any two share a CPU. Deterministic; an error when `k` is 0 or more than the job
/// has.
pub fn step_cpus(
    alloc: &Allocator,
    job: &CpuSet,
    held: &[CpuSet],
    k: usize,
) -> Result<CpuSet, StepError> {
    if k == 0 {
        return Err(StepError::NoCpus);
    }
    if k > job.len() {
        return Err(StepError::MoreThanTheJob {
            asked: k,
            job: job.len(),
        });
    }
    if k == job.len() {
        return Ok(*job);
    }
    let load = |cpu: u32| held.iter().filter(|s| s.contains(cpu)).count();
    let mut levels: Vec<usize> = job.iter().map(load).collect();
    levels.sort_unstable();
    levels.dedup();
    let at_most =
        |l: usize| CpuSet::from_cpus(job.iter().filter(|&c| load(c) <= l)).unwrap_or_default();
    // The least level L whose CPUs used at most L times are enough.
    let level = levels
        .iter()
        .copied()
        .find(|&l| at_most(l).len() >= k)
        .unwrap_or_else(|| levels.last().copied().unwrap_or(0));
    // Every CPU used less than that, and the rest from those used exactly that often.
    let below = match level {
        0 => CpuSet::new(),
        l => at_most(l - 1),
    };
    let rest = k - below.len();
    let candidates = at_most(level).difference(&below);
    let picked = alloc
        .allocate(&candidates, rest)
        .unwrap_or_else(|| first_n(&candidates, rest));
    Ok(below.union(&picked))
}

/// The `n` lowest CPUs of `set` (where the allocator does not know them: a machine whose
/// topology lacks a CPU the job holds).
fn first_n(set: &CpuSet, n: usize) -> CpuSet {
    CpuSet::from_cpus(set.iter().take(n)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    /// What a case says: a description, the live steps' CPUs, the CPUs asked for, the answer.
    type Case<'a> = (&'a str, &'a [&'a str], usize, Result<&'a str, StepError>);

    #[test]
    fn steps_fill_the_job_side_by_side_then_share_the_least_used() {
        // Two cores of two threads each, and a job on all four PUs.
        let topo = synthetic::parse("package:1 core:2 pu:2").unwrap();
        let alloc = Allocator::new(&topo);
        let job = set("0-3");
        let cases: &[Case] = &[
            ("the whole job", &[], 4, Ok("0-3")),
            ("a whole core first", &[], 2, Ok("0-1")),
            ("the other core beside a live step", &["0-1"], 2, Ok("2-3")),
            ("one cpu beside a live step", &["0-1"], 1, Ok("2")),
            (
                "every cpu used once: share the least used",
                &["0-1", "2-3"],
                1,
                Ok("0"),
            ),
            (
                "a cpu used once before one used twice",
                &["0-1", "0", "2-3"],
                1,
                Ok("1"),
            ),
            (
                "the free cpu, then a used one of its core",
                &["0-2"],
                2,
                Ok("2-3"),
            ),
            (
                "more than the job",
                &[],
                5,
                Err(StepError::MoreThanTheJob { asked: 5, job: 4 }),
            ),
            ("none", &[], 0, Err(StepError::NoCpus)),
        ];
        for (what, held, k, want) in cases {
            let held: Vec<CpuSet> = held.iter().map(|s| set(s)).collect();
            let got = step_cpus(&alloc, &job, &held, *k);
            let want = want.clone().map(set);
            assert_eq!(got, want, "{what}");
            if let Ok(g) = got {
                assert!(g.is_subset(&job) && g.len() == *k, "{what}: {g}");
            }
        }
    }

    #[test]
    fn a_job_on_cpus_the_topology_lacks_still_gets_its_steps() {
        let topo = synthetic::parse("package:1 core:2 pu:1").unwrap();
        let alloc = Allocator::new(&topo);
        // CPUs 8-9 are not in this topology: the lowest are taken.
        let got = step_cpus(&alloc, &set("8-9"), &[], 1).unwrap();
        assert_eq!(got, set("8"));
    }
}
