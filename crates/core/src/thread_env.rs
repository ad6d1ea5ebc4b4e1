//! The thread-count variables OpenMP and BLAS runtimes read, set to match a job's CPUs.
//!
//! A runtime that is not told starts one thread per CPU it sees in `/proc/cpuinfo` or
//! `sysconf`, not per CPU of the job, so a 2-CPU job on a 64-CPU node starts 64 threads. The
//! daemon sends these as defaults ([`thread_env`]); the client sets each one only when the
//! user's environment does not have it ([`unset_only`]).
//!
//! ```
//! use pjw_core::thread_bind::BindMode;
//! use pjw_core::thread_env::{thread_env, unset_only};
//! let env = thread_env(4, BindMode::Cores);
//! assert!(env.contains(&("OMP_NUM_THREADS".into(), "4".into())));
//! assert!(env.contains(&("OMP_PLACES".into(), "cores".into())));
//! let kept = unset_only(&env, |k| k == "OMP_NUM_THREADS");
//! assert!(!kept.iter().any(|(k, _)| k == "OMP_NUM_THREADS"));
//! ```

use crate::thread_bind::BindMode;

/// The variables giving `threads` threads (the job's CPUs, or its cores with `cores`); with a
/// bind mode other than `none` also OMP_PLACES (`threads` or `cores`) and OMP_PROC_BIND=close,
/// so an OpenMP runtime places its threads as pjw would. Empty for 0 threads.
pub fn thread_env(threads: usize, mode: BindMode) -> Vec<(String, String)> {
    if threads == 0 {
        return Vec::new();
    }
    let n = threads.to_string();
    let mut env: Vec<(String, String)> =
        ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
            .iter()
            .map(|k| (k.to_string(), n.clone()))
            .collect();
    if mode != BindMode::None {
        env.push(("OMP_PLACES".into(), mode.name().into()));
        env.push(("OMP_PROC_BIND".into(), "close".into()));
    }
    env
}

/// The entries of `defaults` whose name `is_set` says the user has not set.
pub fn unset_only(
    defaults: &[(String, String)],
    is_set: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    defaults
        .iter()
        .filter(|(k, _)| !is_set(k))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// (description, threads, mode, expected variables)
    type Case = (
        &'static str,
        usize,
        BindMode,
        &'static [(&'static str, &'static str)],
    );

    #[test]
    fn table() {
        let cases: &[Case] = &[
            (
                "threads mode: counts, places threads, close",
                2,
                BindMode::Threads,
                &[
                    ("OMP_NUM_THREADS", "2"),
                    ("OPENBLAS_NUM_THREADS", "2"),
                    ("MKL_NUM_THREADS", "2"),
                    ("OMP_PLACES", "threads"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "cores mode: places cores",
                8,
                BindMode::Cores,
                &[
                    ("OMP_NUM_THREADS", "8"),
                    ("OPENBLAS_NUM_THREADS", "8"),
                    ("MKL_NUM_THREADS", "8"),
                    ("OMP_PLACES", "cores"),
                    ("OMP_PROC_BIND", "close"),
                ],
            ),
            (
                "no binding: counts only, the runtime does not bind",
                3,
                BindMode::None,
                &[
                    ("OMP_NUM_THREADS", "3"),
                    ("OPENBLAS_NUM_THREADS", "3"),
                    ("MKL_NUM_THREADS", "3"),
                ],
            ),
            ("no cpus: nothing", 0, BindMode::Threads, &[]),
        ];
        for (desc, n, mode, want) in cases {
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(thread_env(*n, *mode), want, "{desc}");
        }
    }

    #[test]
    fn the_users_own_values_win() {
        let env = thread_env(2, BindMode::Threads);
        assert_eq!(unset_only(&env, |_| false), env);
        assert!(unset_only(&env, |_| true).is_empty());
        let kept = unset_only(&env, |k| k == "OMP_NUM_THREADS" || k == "OMP_PLACES");
        assert_eq!(
            names(&kept),
            ["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_PROC_BIND"]
        );
    }
}
