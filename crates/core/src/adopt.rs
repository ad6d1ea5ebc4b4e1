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
//! The environment is what the process says about itself, and a process can say anything: it
//! may drop `SLURM_JOB_ID` or set any variable. So the facts that decide first are those a user
//! cannot change — its [`Lineage`]: whether it descends from a root-owned job step daemon
//! (`slurmstepd: [4242.0]`, whose argv slurmstepd writes itself) or is a root process of the
//! manager's own daemon (slurmd's Prolog and Epilog). The environment is used only for a
//! process outside every manager's tree (an MPI rank started over ssh), and then only within
//! its manager's namespace and for the job's own user.
//!
//! ```
//! use pjw_core::adopt::{decide, env_ids, Candidate, Lineage, Target, Verdict};
//! let rules = ["SLURM_JOB_ID".to_string()];
//! let ids = env_ids(b"HOME=/root\0SLURM_JOB_ID=42\0", &rules);
//! assert_eq!(ids, vec![(0, "42".to_string())]);
//! let jobs = [Target { key: 7, ns: "slurm", id: "42", uid: 1000, registered: true }];
//! let ns = [Some("slurm")];
//! let c = Candidate { uid: 1000, ids: &ids, rule_ns: &ns, inside: None, lineage: &Lineage::Outside };
//! assert_eq!(decide(&c, &jobs), Verdict::Adopt { key: 7, rule: Some(0) });
//! // A task of slurmstepd [42.0] that dropped SLURM_JOB_ID is the job's all the same.
//! let step = Lineage::Step { ns: "slurm".into(), id: "42".into() };
//! let c = Candidate { uid: 1000, ids: &[], rule_ns: &ns, inside: None, lineage: &step };
//! assert_eq!(decide(&c, &jobs), Verdict::Adopt { key: 7, rule: None });
//! ```

/// Longest environment value taken as a job id (longer values are not job ids).
pub const MAX_ID_LEN: usize = 64;

/// The values of the variables named by `rules` in a NUL-separated environment block
/// (`/proc/PID/environ`), as `(rule index, value)` in rule order. A variable named twice counts
/// once (the first, as `getenv` sees it); a value that is not a job id (1–64 characters of
/// `[A-Za-z0-9._-]`, see [`crate::JobId`]) is skipped, so no newline, control character or
/// other text a process chose ever reaches a log line or a lookup as an id.
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
        if value.is_empty() || value.len() > MAX_ID_LEN || value.contains(&b':') {
            continue;
        }
        if let Ok(v) = std::str::from_utf8(value) {
            if crate::JobId::new(v).is_ok() {
                found.push((rule, v.to_string()));
            }
        }
    }
    found.sort_by_key(|(r, _)| *r);
    found
}

/// The manager namespace of an `[adopt] env` variable: a Slurm id names a Slurm job only, and
/// so on. `None` for a variable pjw does not know (it matches a job of any manager).
pub fn var_namespace(var: &str) -> Option<&'static str> {
    match var {
        "SLURM_JOB_ID" | "SLURM_JOBID" => Some("slurm"),
        "JOB_ID" => Some("sge"),
        "PBS_JOBID" => Some("pbs"),
        "LSB_JOBID" => Some("lsf"),
        _ => None,
    }
}

/// Job step daemons: a root process running one of these executables is a manager's step
/// daemon, and every process below it belongs to the job its argv names (see
/// [`step_job`]). `(executable name, manager namespace)`; Debian installs slurmstepd as
/// `slurmstepd-wlm` (the kernel's `exe` names the file, not the alternatives link).
pub const STEP_DAEMONS: [(&str, &str); 2] = [("slurmstepd", "slurm"), ("slurmstepd-wlm", "slurm")];

/// The job a step daemon's argv names: slurmstepd sets its argv to `slurmstepd: [JOBID.STEP]`
/// (`[4242.0]`, `[4242.batch]`, `[4242.extern]`). Only read from a process running the step
/// daemon's executable as root, so no user wrote it. None when it is not of that form or the
/// id is not a job id.
pub fn step_job(cmdline: &[u8]) -> Option<String> {
    let first = cmdline.split(|&b| b == 0).next()?;
    let text = std::str::from_utf8(first).ok()?;
    let inner = text.split_once('[')?.1.split_once(']')?.0;
    let id = inner.split('.').next()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && id.len() <= MAX_ID_LEN)
        .then(|| id.to_string())
}

/// The job and step a step daemon's argv names: `slurmstepd: [4242.batch]` is
/// `("4242", "batch")`, `[4242.0]` is `("4242", "0")`; a step daemon that names no step
/// (`[4242]`) has step `""`. A step is up to 64 of `[A-Za-z0-9_+]` (Slurm's numbers, its
/// `batch`, `extern` and `interactive`, and a heterogeneous step's `0+1`); None as for
/// [`step_job`], or for any other step text.
pub fn step_id(cmdline: &[u8]) -> Option<(String, String)> {
    let first = cmdline.split(|&b| b == 0).next()?;
    let text = std::str::from_utf8(first).ok()?;
    let inner = text.split_once('[')?.1.split_once(']')?.0;
    let (id, step) = inner.split_once('.').unwrap_or((inner, ""));
    let id_ok = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && id.len() <= MAX_ID_LEN;
    let step_ok = step.len() <= MAX_ID_LEN
        && step
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'+');
    (id_ok && step_ok).then(|| (id.to_string(), step.to_string()))
}

/// What a process's ancestry says, from facts a user cannot change (the executable and real uid
/// of its ancestors, and the argv of root-owned step daemons).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lineage {
    /// Below a root-owned step daemon of job `id` of manager `ns`: a task of that job.
    Step { ns: String, id: String },
    /// Below a root-owned manager daemon (slurmd), not in a step: its hooks (Prolog, Epilog).
    Daemon,
    /// Neither.
    Outside,
}

/// A job that processes may be adopted into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// The engine's key for the job.
    pub key: i64,
    /// Its manager (`slurm` of the tag `slurm:4242`).
    pub ns: &'a str,
    /// The manager's job id, as pjw writes it (`4242`).
    pub id: &'a str,
    /// Its owner: only that user's processes are adopted into it.
    pub uid: u32,
    /// Registered by root (`pjw job register`), not started by a user's `pjw run --from-env`.
    pub registered: bool,
}

/// What is known about a process outside pjw's control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// Its real uid.
    pub uid: u32,
    /// Job ids from its environment, `(rule index, value)` as [`env_ids`] returns them.
    pub ids: &'a [(usize, String)],
    /// The manager namespace of each rule ([`var_namespace`]), by rule index.
    pub rule_ns: &'a [Option<&'a str>],
    /// The pjw job cgroup it is already in (any job of this daemon), if any.
    pub inside: Option<&'a str>,
    /// What its ancestry says.
    pub lineage: &'a Lineage,
}

/// The decision about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Move it into job `key`: found by its ancestry (`rule` None) or by rule number `rule`.
    Adopt { key: i64, rule: Option<usize> },
    /// Already in a pjw job's cgroups (inherited from its parent, or jailed): nothing to do.
    Inside,
    /// A manager's hook: a root process below the manager's daemon, not in a step. Never moved.
    Hook,
    /// No rule variable in its environment: not a job process.
    NotAJob,
    /// It names a job id no live job has (by its ancestry, `rule` None, or by rule number
    /// `rule`): left alone (and logged), looked at again when that job is registered.
    Unknown { rule: Option<usize>, id: String },
    /// It names a live job but belongs to another user: left alone (and logged).
    WrongOwner { key: i64, uid: u32 },
}

/// Decide what to do with `c`, given the jobs that adopt. A process already inside a pjw job
/// is never moved (nested or jailed work stays where it is). Then its ancestry decides when it
/// says anything: a task of a step daemon belongs to that job whatever its environment says; a
/// root process below the manager's daemon is a hook. Only a process outside both is judged
/// by its environment: rules are tried in order, a value matches a job of the rule's manager,
/// and the job's owner's own job wins (a registered one before one a user started).
pub fn decide(c: &Candidate<'_>, jobs: &[Target<'_>]) -> Verdict {
    if c.inside.is_some() {
        return Verdict::Inside;
    }
    match c.lineage {
        Lineage::Step { ns, id } => {
            return pick(
                c.uid,
                jobs.iter().filter(|t| t.ns == ns && t.id == id),
                None,
            )
            .unwrap_or_else(|| Verdict::Unknown {
                rule: None,
                id: format!("{ns}:{id}"),
            });
        }
        Lineage::Daemon if c.uid == 0 => return Verdict::Hook,
        Lineage::Daemon | Lineage::Outside => {}
    }
    let Some(first) = c.ids.first() else {
        return Verdict::NotAJob;
    };
    for (rule, id) in c.ids {
        let ns = c.rule_ns.get(*rule).copied().flatten();
        let matching = jobs
            .iter()
            .filter(|t| t.id == id && ns.is_none_or(|n| n == t.ns));
        if let Some(v) = pick(c.uid, matching, Some(*rule)) {
            return v;
        }
    }
    Verdict::Unknown {
        rule: Some(first.0),
        id: match c.rule_ns.get(first.0).copied().flatten() {
            Some(ns) => format!("{ns}:{}", first.1),
            None => first.1.clone(),
        },
    }
}

/// Among the jobs a process names: its owner's (registered first), else the first other
/// user's as `WrongOwner`; None when there is none.
fn pick<'a>(
    uid: u32,
    matching: impl Iterator<Item = &'a Target<'a>> + Clone,
    rule: Option<usize>,
) -> Option<Verdict> {
    let own = matching
        .clone()
        .filter(|t| t.uid == uid)
        .min_by_key(|t| !t.registered);
    if let Some(t) = own {
        return Some(Verdict::Adopt { key: t.key, rule });
    }
    matching
        .into_iter()
        .next()
        .map(|t| Verdict::WrongOwner { key: t.key, uid })
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
            // value containing '=' is not a job id
            (b"LSB_JOBID=a=b\0", &[]),
            (b"JOB_ID=\xff\xfe\0", &[]),
            (long.as_bytes(), &[]),
            // not job ids: a newline (a forged log line), an ESC, a space, a namespace
            (b"SLURM_JOB_ID=1\nINFO forged\0", &[]),
            (b"SLURM_JOB_ID=1\x1b[2J\0", &[]),
            (b"SLURM_JOB_ID=1 2\0", &[]),
            (b"SLURM_JOB_ID=slurm:1\0", &[]),
        ];
        for (env, want) in cases {
            let got = env_ids(env, &rules());
            let want: Vec<(usize, String)> =
                want.iter().map(|(r, v)| (*r, v.to_string())).collect();
            assert_eq!(got, want, "environ {:?}", String::from_utf8_lossy(env));
        }
    }

    fn t<'a>(key: i64, ns: &'a str, id: &'a str, uid: u32, registered: bool) -> Target<'a> {
        Target {
            key,
            ns,
            id,
            uid,
            registered,
        }
    }

    #[test]
    fn decide_table() {
        let jobs = [
            t(1, "slurm", "42", 1000, true),
            t(2, "sge", "7", 0, true),
            // a user's `pjw run --from-env lsf` job, and a squatter's claim on slurm's 42
            t(3, "lsf", "9", 1000, false),
            t(4, "slurm", "42", 1001, false),
        ];
        let rule_ns = [Some("slurm"), Some("sge"), Some("pbs"), Some("lsf"), None];
        let ids = |v: &[(usize, &str)]| -> Vec<(usize, String)> {
            v.iter().map(|(r, s)| (*r, s.to_string())).collect()
        };
        let step = |id: &str| Lineage::Step {
            ns: "slurm".into(),
            id: id.into(),
        };
        let out = Lineage::Outside;
        type Case<'a> = (u32, Vec<(usize, String)>, Option<&'a str>, Lineage, Verdict);
        let cases: Vec<Case<'_>> = vec![
            (
                1000,
                ids(&[(0, "42")]),
                None,
                out.clone(),
                Verdict::Adopt {
                    key: 1,
                    rule: Some(0),
                },
            ),
            (
                0,
                ids(&[(1, "7")]),
                None,
                out.clone(),
                Verdict::Adopt {
                    key: 2,
                    rule: Some(1),
                },
            ),
            // already in a job (its own, or another): never moved
            (
                1000,
                ids(&[(0, "42")]),
                Some("job-42"),
                step("42"),
                Verdict::Inside,
            ),
            (1000, vec![], None, out.clone(), Verdict::NotAJob),
            (
                1000,
                ids(&[(0, "43")]),
                None,
                out.clone(),
                Verdict::Unknown {
                    rule: Some(0),
                    id: "slurm:43".into(),
                },
            ),
            // the first rule naming a live job decides, even after an unknown one
            (
                0,
                ids(&[(0, "99"), (1, "7")]),
                None,
                out.clone(),
                Verdict::Adopt {
                    key: 2,
                    rule: Some(1),
                },
            ),
            // another user's process naming a job is not moved into it
            (
                1002,
                ids(&[(0, "42")]),
                None,
                out.clone(),
                Verdict::WrongOwner { key: 1, uid: 1002 },
            ),
            (
                1000,
                ids(&[(1, "7")]),
                None,
                out.clone(),
                Verdict::WrongOwner { key: 2, uid: 1000 },
            ),
            // a Slurm id names a Slurm job only: JOB_ID=42 is sge's 42, which does not exist
            (
                1000,
                ids(&[(1, "42")]),
                None,
                out.clone(),
                Verdict::Unknown {
                    rule: Some(1),
                    id: "sge:42".into(),
                },
            ),
            // a variable pjw does not know matches any manager's job
            (
                1000,
                ids(&[(4, "9")]),
                None,
                out.clone(),
                Verdict::Adopt {
                    key: 3,
                    rule: Some(4),
                },
            ),
            // the owner's registered job wins over another user's claim on the same id
            (
                1001,
                ids(&[(0, "42")]),
                None,
                out.clone(),
                Verdict::Adopt {
                    key: 4,
                    rule: Some(0),
                },
            ),
            // a task of slurmstepd [42.x] is job 42's whatever its environment says
            (
                1000,
                vec![],
                None,
                step("42"),
                Verdict::Adopt { key: 1, rule: None },
            ),
            (
                1000,
                ids(&[(0, "77")]),
                None,
                step("42"),
                Verdict::Adopt { key: 1, rule: None },
            ),
            (
                1000,
                vec![],
                None,
                step("43"),
                Verdict::Unknown {
                    rule: None,
                    id: "slurm:43".into(),
                },
            ),
            (
                1002,
                vec![],
                None,
                step("42"),
                Verdict::WrongOwner { key: 1, uid: 1002 },
            ),
            // only root below the manager's daemon is a hook; a user there is judged as usual
            (0, ids(&[(0, "42")]), None, Lineage::Daemon, Verdict::Hook),
            (
                1000,
                ids(&[(0, "42")]),
                None,
                Lineage::Daemon,
                Verdict::Adopt {
                    key: 1,
                    rule: Some(0),
                },
            ),
        ];
        for (uid, ids, inside, lineage, want) in cases {
            let c = Candidate {
                uid,
                ids: &ids,
                rule_ns: &rule_ns,
                inside,
                lineage: &lineage,
            };
            assert_eq!(
                decide(&c, &jobs),
                want,
                "uid {uid} ids {ids:?} inside {inside:?} lineage {lineage:?}"
            );
        }
        // No jobs: every id is unknown.
        let ids = ids(&[(0, "42")]);
        let c = Candidate {
            uid: 1000,
            ids: &ids,
            rule_ns: &rule_ns,
            inside: None,
            lineage: &out,
        };
        assert!(matches!(decide(&c, &[]), Verdict::Unknown { .. }));
    }

    #[test]
    fn step_daemon_argv() {
        for (argv, want) in [
            (&b"slurmstepd: [4242.0]\0"[..], Some("4242")),
            (b"slurmstepd: [4242.batch]\0", Some("4242")),
            (b"slurmstepd: [4242.extern]", Some("4242")),
            (b"slurmstepd: [4242]\0", Some("4242")),
            (b"slurmstepd\0", None),
            (b"slurmstepd: [x\n1.0]\0", None),
            (b"slurmstepd: [.0]\0", None),
            (b"", None),
        ] {
            assert_eq!(
                step_job(argv).as_deref(),
                want,
                "{:?}",
                String::from_utf8_lossy(argv)
            );
        }
    }

    #[test]
    fn step_daemon_argv_with_its_step() {
        for (argv, want) in [
            (&b"slurmstepd: [4242.0]\0"[..], Some(("4242", "0"))),
            (b"slurmstepd: [4242.batch]\0", Some(("4242", "batch"))),
            (b"slurmstepd: [4242.extern]", Some(("4242", "extern"))),
            (b"slurmstepd: [4242]\0", Some(("4242", ""))),
            (b"slurmstepd: [4242.0+1]\0", Some(("4242", "0+1"))),
            // a step that is not Slurm's words or numbers: not a step daemon's argv
            (b"slurmstepd: [4242.0 x]\0", None),
            (b"slurmstepd: [4242.0.1]\0", None),
            (b"slurmstepd: [x.0]\0", None),
        ] {
            let got = step_id(argv);
            let got = got.as_ref().map(|(j, s)| (j.as_str(), s.as_str()));
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(argv));
        }
    }

    #[test]
    fn log_rate_limit() {
        assert!(should_log(None, 0, 60_000));
        assert!(!should_log(Some(1_000), 30_000, 60_000));
        assert!(should_log(Some(1_000), 61_000, 60_000));
    }
}
