//! Adoption: which job a process started outside pjw belongs to.
//!
//! A workload manager starts job processes that pjw did not start: tasks forked by `slurmstepd`,
//! MPI ranks launched over ssh, `qrsh -inherit` children. They carry the manager's job id in
//! their environment (`SLURM_JOB_ID`, `JOB_ID`, `PBS_JOBID`, `LSB_JOBID`). The daemon reads the
//! facts of such a process (an adapter reads `/proc`) and this module decides: move it into the
//! job registered under that id, leave it alone because it is already inside a pjw job (a child
//! of an adopted or jailed process inherits its cgroups), or leave it alone and log it because
//! no live job has that id.
//!
//! ```
//! use pjw_core::adopt::{decide, env_ids, Candidate, Target, Verdict};
//! let rules = ["SLURM_JOB_ID".to_string()];
//! let ids = env_ids(b"HOME=/root\0SLURM_JOB_ID=42\0", &rules);
//! assert_eq!(ids, vec![(0, "42".to_string())]);
//! let jobs = [Target { key: 7, id: "42", uid: 1000 }];
//! let c = Candidate { uid: 1000, ids: &ids, inside: None, hook: false };
//! assert_eq!(decide(&c, &jobs), Verdict::Adopt { key: 7, rule: 0 });
//! ```

/// Longest environment value taken as a job id (longer values are not job ids).
pub const MAX_ID_LEN: usize = 64;

/// The values of the variables named by `rules` in a NUL-separated environment block
/// (`/proc/PID/environ`), as `(rule index, value)` in rule order. A variable named twice counts
/// once (the first, as `getenv` sees it); empty values, values that are not UTF-8 and values
/// longer than [`MAX_ID_LEN`] are skipped.
pub fn env_ids(environ: &[u8], rules: &[String]) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for entry in environ.split(|&b| b == 0) {
        let Some(eq) = entry.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        let Some(rule) = rules.iter().position(|r| r.as_bytes() == name) else {
            continue;
        };
        if found.iter().any(|(r, _)| *r == rule) {
            continue;
        }
        if value.is_empty() || value.len() > MAX_ID_LEN {
            continue;
        }
        if let Ok(v) = std::str::from_utf8(value) {
            found.push((rule, v.to_string()));
        }
    }
    found.sort_by_key(|(r, _)| *r);
    found
}

/// Whether the environment block sets any of the variables in `names` (to anything). Used to
/// leave the managers' own hooks alone: Slurm's Prolog and Epilog carry the job's
/// `SLURM_JOB_ID` too, but also `SLURM_SCRIPT_CONTEXT`, and must not end up in (and be killed
/// with) the job they set up or tear down.
pub fn env_has(environ: &[u8], names: &[String]) -> bool {
    environ.split(|&b| b == 0).any(|entry| {
        entry
            .iter()
            .position(|&b| b == b'=')
            .is_some_and(|eq| names.iter().any(|n| n.as_bytes() == &entry[..eq]))
    })
}

/// A job that processes may be adopted into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// The engine's key for the job.
    pub key: i64,
    /// Its id (the workload manager's job id).
    pub id: &'a str,
    /// Its owner: only that user's processes are adopted into it.
    pub uid: u32,
}

/// What is known about a process outside pjw's control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// Its real uid.
    pub uid: u32,
    /// Job ids from its environment, `(rule index, value)` as [`env_ids`] returns them.
    pub ids: &'a [(usize, String)],
    /// The pjw job cgroup it is already in (any job of this daemon), if any.
    pub inside: Option<&'a str>,
    /// It is a workload manager's hook (an excluded variable is set, see [`env_has`]).
    pub hook: bool,
}

/// The decision about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Move it into job `key` (found by rule number `rule`).
    Adopt { key: i64, rule: usize },
    /// Already in a pjw job's cgroups (inherited from its parent, or jailed): nothing to do.
    Inside,
    /// A manager's hook (prolog, epilog): never moved.
    Hook,
    /// No rule variable in its environment: not a job process.
    NotAJob,
    /// It names a job id no live job has: left alone (and logged).
    Unknown { rule: usize, id: String },
    /// It names a live job but belongs to another user: left alone (and logged).
    WrongOwner { key: i64, uid: u32 },
}

/// Decide what to do with `c`, given the jobs that adopt. Rules are tried in order; the first
/// variable whose value names a live job decides. A process already inside a pjw job is never
/// moved (nested or jailed work stays where it is).
pub fn decide(c: &Candidate<'_>, jobs: &[Target<'_>]) -> Verdict {
    if c.inside.is_some() {
        return Verdict::Inside;
    }
    if c.hook {
        return Verdict::Hook;
    }
    let Some(first) = c.ids.first() else {
        return Verdict::NotAJob;
    };
    for (rule, id) in c.ids {
        if let Some(t) = jobs.iter().find(|t| t.id == id) {
            if t.uid != c.uid {
                return Verdict::WrongOwner {
                    key: t.key,
                    uid: c.uid,
                };
            }
            return Verdict::Adopt {
                key: t.key,
                rule: *rule,
            };
        }
    }
    Verdict::Unknown {
        rule: first.0,
        id: first.1.clone(),
    }
}

/// Rate limit for logging the same unknown id: `Some(true)` when it should be logged now.
/// `last` is when it was last logged (ms, caller's clock), `now` the time now; at most one line
/// per id per `every_ms`.
pub fn should_log(last: Option<i64>, now: i64, every_ms: i64) -> bool {
    match last {
        None => true,
        Some(l) => now - l >= every_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<String> {
        ["SLURM_JOB_ID", "JOB_ID", "PBS_JOBID", "LSB_JOBID"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// (environ, expected `(rule, value)` pairs)
    type EnvCase<'a> = (&'a [u8], &'a [(usize, &'a str)]);
    /// (uid, ids, inside, verdict)
    type DecideCase<'a> = (u32, Vec<(usize, String)>, Option<&'a str>, Verdict);

    #[test]
    fn env_ids_table() {
        let long = format!("SLURM_JOB_ID={}\0", "9".repeat(65));
        let cases: &[EnvCase<'_>] = &[
            (b"", &[]),
            (b"\0\0", &[]),
            (b"HOME=/root\0PATH=/bin\0", &[]),
            (b"SLURM_JOB_ID=42\0", &[(0, "42")]),
            // no trailing NUL (truncated read)
            (b"SLURM_JOB_ID=42", &[(0, "42")]),
            // rule order, not environment order
            (b"JOB_ID=7\0SLURM_JOB_ID=42\0", &[(0, "42"), (1, "7")]),
            // first definition wins, as getenv sees it
            (b"JOB_ID=7\0JOB_ID=8\0", &[(1, "7")]),
            // empty value, a prefix-named variable, a name without '='
            (b"JOB_ID=\0SLURM_JOB_ID_X=1\0SLURM_JOB_ID\0", &[]),
            (
                b"PBS_JOBID=12.server\0LSB_JOBID=99\0",
                &[(2, "12.server"), (3, "99")],
            ),
            // value containing '='
            (b"LSB_JOBID=a=b\0", &[(3, "a=b")]),
            (b"JOB_ID=\xff\xfe\0", &[]),
            (long.as_bytes(), &[]),
        ];
        for (env, want) in cases {
            let got = env_ids(env, &rules());
            let want: Vec<(usize, String)> =
                want.iter().map(|(r, v)| (*r, v.to_string())).collect();
            assert_eq!(got, want, "environ {:?}", String::from_utf8_lossy(env));
        }
    }

    #[test]
    fn decide_table() {
        let jobs = [
            Target {
                key: 1,
                id: "42",
                uid: 1000,
            },
            Target {
                key: 2,
                id: "7",
                uid: 0,
            },
        ];
        let ids = |v: &[(usize, &str)]| -> Vec<(usize, String)> {
            v.iter().map(|(r, s)| (*r, s.to_string())).collect()
        };
        let cases: Vec<DecideCase<'_>> = vec![
            // (hook cases are below)
            (
                1000,
                ids(&[(0, "42")]),
                None,
                Verdict::Adopt { key: 1, rule: 0 },
            ),
            (
                0,
                ids(&[(1, "7")]),
                None,
                Verdict::Adopt { key: 2, rule: 1 },
            ),
            // already in a job (its own, or another): never moved
            (1000, ids(&[(0, "42")]), Some("job-42"), Verdict::Inside),
            (1000, ids(&[(0, "42")]), Some("job-9"), Verdict::Inside),
            (1000, vec![], None, Verdict::NotAJob),
            (
                1000,
                ids(&[(0, "43")]),
                None,
                Verdict::Unknown {
                    rule: 0,
                    id: "43".into(),
                },
            ),
            // the first rule naming a live job decides, even after an unknown one
            (
                0,
                ids(&[(0, "99"), (1, "7")]),
                None,
                Verdict::Adopt { key: 2, rule: 1 },
            ),
            // another user's process naming a job is not moved into it
            (
                1001,
                ids(&[(0, "42")]),
                None,
                Verdict::WrongOwner { key: 1, uid: 1001 },
            ),
            (
                1000,
                ids(&[(1, "7")]),
                None,
                Verdict::WrongOwner { key: 2, uid: 1000 },
            ),
        ];
        for (uid, ids, inside, want) in cases {
            let c = Candidate {
                uid,
                ids: &ids,
                inside,
                hook: false,
            };
            assert_eq!(
                decide(&c, &jobs),
                want,
                "uid {uid} ids {ids:?} inside {inside:?}"
            );
        }
        // A hook naming a live job of its own user is still left alone.
        let hook_ids = ids(&[(0, "7")]);
        let c = Candidate {
            uid: 0,
            ids: &hook_ids,
            inside: None,
            hook: true,
        };
        assert_eq!(decide(&c, &jobs), Verdict::Hook);
        // No jobs: every id is unknown.
        let ids = ids(&[(0, "42")]);
        let c = Candidate {
            uid: 1000,
            ids: &ids,
            inside: None,
            hook: false,
        };
        assert!(matches!(decide(&c, &[]), Verdict::Unknown { .. }));
    }

    #[test]
    fn env_has_table() {
        let names = vec!["SLURM_SCRIPT_CONTEXT".to_string()];
        for (env, want) in [
            (
                &b"SLURM_JOB_ID=1\0SLURM_SCRIPT_CONTEXT=epilog_slurmd\0"[..],
                true,
            ),
            (b"SLURM_SCRIPT_CONTEXT=\0", true),
            (b"SLURM_SCRIPT_CONTEXT", false),
            (b"SLURM_SCRIPT_CONTEXTX=1\0", false),
            (b"", false),
        ] {
            assert_eq!(
                env_has(env, &names),
                want,
                "{:?}",
                String::from_utf8_lossy(env)
            );
        }
        assert!(!env_has(b"A=1\0", &[]));
    }

    #[test]
    fn log_rate_limit() {
        assert!(should_log(None, 0, 60_000));
        assert!(!should_log(Some(1_000), 30_000, 60_000));
        assert!(should_log(Some(1_000), 61_000, 60_000));
    }
}
