//! The thread and CPU-count variables runtimes read, set to match a job's CPUs and tasks.
//!
//! Which variable pjw sets depends on how the runtime sizes itself when it is not told
//! (docs/decisions.md (ap), (bd)):
//! - **It reads its affinity mask** (OpenMP in libgomp, LLVM's and Intel's runtimes; OpenBLAS;
//!   MKL, through its OpenMP runtime). pjw confines a job from its first instruction, so such a
//!   runtime already sees the job's CPUs — and, under a launcher that binds its ranks (Open
//!   MPI's `mpirun` binds each rank to a core), only its rank's CPUs. A count set by pjw would
//!   override that narrower, better answer (2 ranks × 2 threads on 2 CPUs). So these counts are
//!   set only when the job says how many tasks share its CPUs (`--ntasks`): each then runs
//!   CPUs ÷ tasks threads. In `cores` mode the count (the job's cores) is set anyway: no runtime
//!   derives "one thread per core" from its mask.
//! - **It counts the node** (NumExpr reads `sysconf`; Python's `os.cpu_count()`; Julia's
//!   `Sys.CPU_THREADS`): told always, the job's CPUs (per task with tasks).
//! - **Its default is one thread** (Julia): its thread count only with tasks.
//!
//! Launchers: a job of tasks (`pjw run --ntasks`) also tells Open MPI (4.x) how many ranks it
//! holds and that each rank takes its share of CPUs as hardware threads (`OMPI_MCA_*`,
//! [`launcher_env`]), so a plain `mpirun` starts one rank per task, each bound to its own CPUs.
//!
//! A user's own setting always wins, and so does a variable the runtime reads in its place:
//! `OPENBLAS_NUM_THREADS` is not set when the user set `OMP_NUM_THREADS`, which OpenBLAS falls
//! back on ([`unset_only`]). The daemon computes the defaults ([`thread_env`]); whoever starts
//! the command drops those the environment overrides. [`task_env`] does both for a caller that
//! has the environment at hand (a Slurm task's, in the daemon).
//!
//! ```
//! use pjw_core::thread_bind::BindMode;
//! use pjw_core::thread_env::{task_env, thread_env};
//! let has = |env: &[(String, String)], k: &str| env.iter().any(|(n, _)| n == k);
//! // Without tasks: OpenMP counts its mask itself; Python and NumExpr are told.
//! let env = thread_env(2, None, BindMode::None);
//! assert!(!has(&env, "OMP_NUM_THREADS"));
//! assert!(env.contains(&("PYTHON_CPU_COUNT".into(), "2".into())));
//! // 2 tasks on 4 CPUs: 2 threads each; the user's OMP_NUM_THREADS also keeps OpenBLAS's away.
//! let env = task_env(4, Some(2), BindMode::None, |k| k == "OMP_NUM_THREADS");
//! assert!(!has(&env, "OMP_NUM_THREADS") && !has(&env, "OPENBLAS_NUM_THREADS"));
//! assert!(env.contains(&("JULIA_NUM_THREADS".into(), "2".into())));
//! ```

use crate::thread_bind::BindMode;

/// When a variable is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// Only when tasks are known (the runtime reads its affinity mask, or defaults to one
    /// thread); in `cores` mode also without them, for the runtimes that read the mask.
    Tasks { reads_mask: bool },
    /// Always (the runtime counts the node's CPUs).
    Always,
}

/// A runtime's variable: its name, when pjw sets it, and the variables the runtime reads in
/// its place (a user's setting of any of them keeps pjw's away).
struct Var {
    name: &'static str,
    when: When,
    instead: &'static [&'static str],
}

/// The count variables, in the order they are set.
const COUNTS: &[Var] = &[
    Var {
        name: "OMP_NUM_THREADS",
        when: When::Tasks { reads_mask: true },
        instead: &[],
    },
    // OpenBLAS reads OPENBLAS_NUM_THREADS, then GOTO_NUM_THREADS, then OMP_NUM_THREADS.
    Var {
        name: "OPENBLAS_NUM_THREADS",
        when: When::Tasks { reads_mask: true },
        instead: &["GOTO_NUM_THREADS", "OMP_NUM_THREADS"],
    },
    Var {
        name: "MKL_NUM_THREADS",
        when: When::Tasks { reads_mask: true },
        instead: &["OMP_NUM_THREADS"],
    },
    // NumExpr sizes its pool from sysconf (the node), capped at 8; it falls back on
    // OMP_NUM_THREADS.
    Var {
        name: "NUMEXPR_NUM_THREADS",
        when: When::Always,
        instead: &["OMP_NUM_THREADS"],
    },
    // Julia runs one thread unless told; `-t auto` and its BLAS size from Sys.CPU_THREADS,
    // which counts the node unless JULIA_CPU_THREADS says otherwise.
    Var {
        name: "JULIA_NUM_THREADS",
        when: When::Tasks { reads_mask: false },
        instead: &[],
    },
    Var {
        name: "JULIA_CPU_THREADS",
        when: When::Always,
        instead: &[],
    },
    // Python 3.13: overrides os.cpu_count() and os.process_cpu_count().
    Var {
        name: "PYTHON_CPU_COUNT",
        when: When::Always,
        instead: &[],
    },
];

/// Variables whose presence keeps pjw's OpenMP placement away: the user places threads.
const PLACES_INSTEAD: &[&str] = &["GOMP_CPU_AFFINITY", "KMP_AFFINITY"];

/// Each task's share of `cpus` CPUs among `tasks` (all of them when not said), at least 1.
pub fn per_task(cpus: usize, tasks: Option<u32>) -> usize {
    tasks.map_or(cpus, |t| (cpus / t.max(1) as usize).max(1))
}

/// The defaults for a job (or a task) with `cpus` CPUs — its cores in `cores` mode — shared by
/// `tasks` tasks (None: not said; the command may be a launcher that binds its ranks itself),
/// bound in `mode`: the count variables as the module describes, and the OpenMP places when
/// the job binds. Empty for 0 CPUs.
pub fn thread_env(cpus: usize, tasks: Option<u32>, mode: BindMode) -> Vec<(String, String)> {
    if cpus == 0 {
        return Vec::new();
    }
    let n = per_task(cpus, tasks).to_string();
    let mut env: Vec<(String, String)> = COUNTS
        .iter()
        .filter(|v| match v.when {
            When::Always => true,
            When::Tasks { reads_mask } => {
                tasks.is_some() || (reads_mask && mode == BindMode::Cores)
            }
        })
        .map(|v| (v.name.to_string(), n.clone()))
        .collect();
    if mode != BindMode::None {
        env.push(("OMP_PLACES".into(), mode.name().into()));
        env.push(("OMP_PROC_BIND".into(), "close".into()));
    }
    env
}

/// What a launcher inside a job of `tasks` tasks of `per_task` CPUs each (its cores in `cores`
/// mode) is told: Open MPI 4's rank mapping — that many slots (a plain `mpirun` starts one rank
/// per task; more needs `--oversubscribe`), each rank mapped to `per_task` processing elements
/// and bound to them, counted as hardware threads (pjw's CPUs are hardware threads, so a task
/// of 2 CPUs on an SMT node is one core's 2 threads, not 2 cores). For `pjw run --ntasks`; not
/// for a workload manager's task, whose launcher is the manager's.
pub fn launcher_env(tasks: u32, per_task: usize, mode: BindMode) -> Vec<(String, String)> {
    // In cores mode a task's share counts cores: each rank takes whole cores.
    let hwthreads = if mode == BindMode::Cores { "0" } else { "1" };
    vec![
        ("OMPI_MCA_orte_set_default_slots".into(), tasks.to_string()),
        (
            "OMPI_MCA_rmaps_base_mapping_policy".into(),
            format!("slot:PE={per_task}"),
        ),
        (
            "OMPI_MCA_hwloc_base_use_hwthreads_as_cpus".into(),
            hwthreads.into(),
        ),
    ]
}

/// The entries of `defaults` the environment does not override: `is_set(name)` says whether
/// the environment has a variable. An entry is dropped when its own name is set, or one the
/// runtime reads in its place (`OMP_NUM_THREADS` for OpenBLAS, MKL and NumExpr;
/// `GOMP_CPU_AFFINITY` or `KMP_AFFINITY` for the OpenMP places).
pub fn unset_only(
    defaults: &[(String, String)],
    is_set: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let overridden = |name: &str| {
        if is_set(name) {
            return true;
        }
        let instead: &[&str] = match name {
            "OMP_PLACES" | "OMP_PROC_BIND" => PLACES_INSTEAD,
            _ => COUNTS
                .iter()
                .find(|v| v.name == name)
                .map_or(&[], |v| v.instead),
        };
        instead.iter().any(|k| is_set(k))
    };
    defaults
        .iter()
        .filter(|(k, _)| !overridden(k))
        .cloned()
        .collect()
}

/// The variables to give a task (or a job) with `cpus` CPUs shared by `tasks` tasks, bound in
/// `mode`, whose environment already has the variables `is_set` names: [`thread_env`] less
/// what the environment overrides ([`unset_only`]). For a workload manager's task started on
/// its own CPUs, `cpus` is that task's CPU count and `tasks` is `Some(1)`.
pub fn task_env(
    cpus: usize,
    tasks: Option<u32>,
    mode: BindMode,
    is_set: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    unset_only(&thread_env(cpus, tasks, mode), is_set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// (description, cpus, tasks, mode, expected variables)
    type Case = (
        &'static str,
        usize,
        Option<u32>,
        BindMode,
        &'static [(&'static str, &'static str)],
    );

    #[test]
    fn table() {
        let cases: &[Case] = &[
            (
                "no tasks, no binding: OpenMP and the BLAS count their mask themselves",
                2,
                None,
                BindMode::None,
                &[
                    ("NUMEXPR_NUM_THREADS", "2"),
                    ("JULIA_CPU_THREADS", "2"),
                    ("PYTHON_CPU_COUNT", "2"),
                ],
            ),
            (
                "a 1-CPU job: Python and NumExpr say 1",
                1,
                None,
                BindMode::None,
                &[
                    ("NUMEXPR_NUM_THREADS", "1"),
                    ("JULIA_CPU_THREADS", "1"),
                    ("PYTHON_CPU_COUNT", "1"),
                ],
            ),
            (
                "no tasks, threads mode: places threads, close; still no OpenMP count",
                2,
                None,
                BindMode::Threads,
                &[
                    ("NUMEXPR_NUM_THREADS", "2"),
                    ("JULIA_CPU_THREADS", "2"),
                    ("PYTHON_CPU_COUNT", "2"),
                    ("OMP_PLACES", "threads"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "no tasks, cores mode: one thread per core is a count no mask gives",
                8,
                None,
                BindMode::Cores,
                &[
                    ("OMP_NUM_THREADS", "8"),
                    ("OPENBLAS_NUM_THREADS", "8"),
                    ("MKL_NUM_THREADS", "8"),
                    ("NUMEXPR_NUM_THREADS", "8"),
                    ("JULIA_CPU_THREADS", "8"),
                    ("PYTHON_CPU_COUNT", "8"),
                    ("OMP_PLACES", "cores"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "2 tasks of 2 CPUs: every count per task",
                4,
                Some(2),
                BindMode::None,
                &[
                    ("OMP_NUM_THREADS", "2"),
                    ("OPENBLAS_NUM_THREADS", "2"),
                    ("MKL_NUM_THREADS", "2"),
                    ("NUMEXPR_NUM_THREADS", "2"),
                    ("JULIA_NUM_THREADS", "2"),
                    ("JULIA_CPU_THREADS", "2"),
                    ("PYTHON_CPU_COUNT", "2"),
                ],
            ),
            (
                "one task (a workload manager's task on its own CPUs)",
                3,
                Some(1),
                BindMode::Threads,
                &[
                    ("OMP_NUM_THREADS", "3"),
                    ("OPENBLAS_NUM_THREADS", "3"),
                    ("MKL_NUM_THREADS", "3"),
                    ("NUMEXPR_NUM_THREADS", "3"),
                    ("JULIA_NUM_THREADS", "3"),
                    ("JULIA_CPU_THREADS", "3"),
                    ("PYTHON_CPU_COUNT", "3"),
                    ("OMP_PLACES", "threads"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "tasks in cores mode: a task's share of cores",
                4,
                Some(2),
                BindMode::Cores,
                &[
                    ("OMP_NUM_THREADS", "2"),
                    ("OPENBLAS_NUM_THREADS", "2"),
                    ("MKL_NUM_THREADS", "2"),
                    ("NUMEXPR_NUM_THREADS", "2"),
                    ("JULIA_NUM_THREADS", "2"),
                    ("JULIA_CPU_THREADS", "2"),
                    ("PYTHON_CPU_COUNT", "2"),
                    ("OMP_PLACES", "cores"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "more tasks than CPUs: one thread each, never zero",
                2,
                Some(3),
                BindMode::None,
                &[
                    ("OMP_NUM_THREADS", "1"),
                    ("OPENBLAS_NUM_THREADS", "1"),
                    ("MKL_NUM_THREADS", "1"),
                    ("NUMEXPR_NUM_THREADS", "1"),
                    ("JULIA_NUM_THREADS", "1"),
                    ("JULIA_CPU_THREADS", "1"),
                    ("PYTHON_CPU_COUNT", "1"),
                ],
            ),
            (
                "zero tasks reads as one",
                2,
                Some(0),
                BindMode::None,
                &[
                    ("OMP_NUM_THREADS", "2"),
                    ("OPENBLAS_NUM_THREADS", "2"),
                    ("MKL_NUM_THREADS", "2"),
                    ("NUMEXPR_NUM_THREADS", "2"),
                    ("JULIA_NUM_THREADS", "2"),
                    ("JULIA_CPU_THREADS", "2"),
                    ("PYTHON_CPU_COUNT", "2"),
                ],
            ),
            ("no cpus: nothing", 0, Some(2), BindMode::Threads, &[]),
        ];
        for (desc, n, tasks, mode, want) in cases {
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(thread_env(*n, *tasks, *mode), want, "{desc}");
        }
    }

    #[test]
    fn open_mpi_is_told_the_tasks_and_their_share() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // 2 tasks of 2 cpus: 2 slots, each rank bound to 2 hardware threads.
        assert_eq!(
            launcher_env(2, 2, BindMode::None),
            pairs(&[
                ("OMPI_MCA_orte_set_default_slots", "2"),
                ("OMPI_MCA_rmaps_base_mapping_policy", "slot:PE=2"),
                ("OMPI_MCA_hwloc_base_use_hwthreads_as_cpus", "1"),
            ])
        );
        // In cores mode a share counts cores.
        assert_eq!(
            launcher_env(3, 1, BindMode::Cores),
            pairs(&[
                ("OMPI_MCA_orte_set_default_slots", "3"),
                ("OMPI_MCA_rmaps_base_mapping_policy", "slot:PE=1"),
                ("OMPI_MCA_hwloc_base_use_hwthreads_as_cpus", "0"),
            ])
        );
        assert_eq!(
            (
                per_task(4, Some(2)),
                per_task(2, Some(3)),
                per_task(5, None)
            ),
            (2, 1, 5)
        );
    }

    #[test]
    fn the_users_own_values_win() {
        let env = thread_env(2, Some(1), BindMode::Threads);
        assert_eq!(unset_only(&env, |_| false), env);
        assert!(unset_only(&env, |_| true).is_empty());
        let kept = unset_only(&env, |k| k == "PYTHON_CPU_COUNT" || k == "OMP_PLACES");
        assert!(!names(&kept).contains(&"PYTHON_CPU_COUNT"));
        assert!(!names(&kept).contains(&"OMP_PLACES"));
        assert!(names(&kept).contains(&"OMP_PROC_BIND"));
        assert_eq!(kept.len(), env.len() - 2);
    }

    /// (description, variables the user set, pjw's variables dropped besides those)
    type Fallback = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    );

    #[test]
    fn a_variable_the_runtime_reads_instead_wins_too() {
        let cases: &[Fallback] = &[
            (
                "OMP_NUM_THREADS=1 (MPI-only ranks): OpenBLAS, MKL and NumExpr follow it",
                &["OMP_NUM_THREADS"],
                &[
                    "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS",
                ],
            ),
            (
                "GOTO_NUM_THREADS is OpenBLAS's older name",
                &["GOTO_NUM_THREADS"],
                &["OPENBLAS_NUM_THREADS"],
            ),
            (
                "GOMP_CPU_AFFINITY: the user places OpenMP threads",
                &["GOMP_CPU_AFFINITY"],
                &["OMP_PLACES", "OMP_PROC_BIND"],
            ),
            (
                "KMP_AFFINITY: the same for Intel's runtime",
                &["KMP_AFFINITY"],
                &["OMP_PLACES", "OMP_PROC_BIND"],
            ),
            (
                "MKL_NUM_THREADS alone keeps only MKL's",
                &["MKL_NUM_THREADS"],
                &[],
            ),
            (
                "an Open MPI mapping of the user's own",
                &["OMPI_MCA_rmaps_base_mapping_policy"],
                &[],
            ),
        ];
        let mut all = thread_env(4, Some(2), BindMode::Threads);
        all.extend(launcher_env(2, 2, BindMode::Threads));
        for (desc, set, dropped) in cases {
            let kept = unset_only(&all, |k| set.contains(&k));
            let want: Vec<(String, String)> = all
                .iter()
                .filter(|(k, _)| !set.contains(&k.as_str()) && !dropped.contains(&k.as_str()))
                .cloned()
                .collect();
            assert_eq!(kept, want, "{desc}");
        }
    }
}
