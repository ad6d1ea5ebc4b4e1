//! The `/proc` side of adoption: what a process's environment and cgroups say, and which
//! processes the periodic sweep has not looked at yet. The decision is
//! [`pjw_core::adopt::decide`]; the engine moves the process. The root is injectable.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use pjw_kernelfs::proc_cgroup::CgroupLine;

/// What adoption needs to know about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub pid: u32,
    pub uid: u32,
    /// Its threads now.
    pub threads: u64,
    /// Job ids from its environment, `(rule index, value)`.
    pub ids: Vec<(usize, String)>,
    /// Its `/proc/PID/cgroup`.
    pub cgroups: Vec<CgroupLine>,
    /// A manager's hook (an `[adopt] exclude_env` variable is set).
    pub hook: bool,
}

/// Reads process facts below a `/proc` root and remembers which pids the sweep has settled.
#[derive(Debug)]
pub struct Scanner {
    proc_root: PathBuf,
    rules: Vec<String>,
    exclude: Vec<String>,
    /// Pids looked at and settled (not a job process, inside a job, or adopted). A pid naming
    /// an unknown job is not settled: its job may be registered later.
    settled: HashSet<u32>,
}

impl Scanner {
    pub fn new(proc_root: &Path, rules: Vec<String>, exclude: Vec<String>) -> Scanner {
        Scanner {
            proc_root: proc_root.to_path_buf(),
            rules,
            exclude,
            settled: HashSet::new(),
        }
    }

    /// The environment rules, in order.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    /// Facts of `pid`, or None when it has no rule variable in its environment (or is gone,
    /// or is a kernel thread). The environment is read first: most processes stop there.
    pub fn facts(&self, pid: u32) -> Option<Facts> {
        let dir = self.proc_root.join(pid.to_string());
        let environ = std::fs::read(dir.join("environ")).ok()?;
        let ids = pjw_core::adopt::env_ids(&environ, &self.rules);
        if ids.is_empty() {
            return None;
        }
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let status = pjw_kernelfs::proc_status::parse(&status).ok()?;
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok()?;
        let cgroups = pjw_kernelfs::proc_cgroup::parse(&cgroup).ok()?;
        let hook = pjw_core::adopt::env_has(&environ, &self.exclude);
        Some(Facts {
            hook,
            pid,
            uid: status.uid[0],
            threads: status.threads,
            ids,
            cgroups,
        })
    }

    /// Pids that exist now and have not been settled; forgets settled pids that are gone.
    pub fn unsettled(&mut self) -> Vec<u32> {
        let Ok(rd) = std::fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let now: HashSet<u32> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .collect();
        self.settled.retain(|p| now.contains(p));
        let mut out: Vec<u32> = now
            .into_iter()
            .filter(|p| !self.settled.contains(p))
            .collect();
        out.sort_unstable();
        out
    }

    /// Remember that `pid` needs no further look from the sweep.
    pub fn settle(&mut self, pid: u32) {
        self.settled.insert(pid);
    }

    /// Forget everything settled (no job adopts now: the next sweep with a job looks at every
    /// process again, including those started meanwhile).
    pub fn reset(&mut self) {
        self.settled.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_tree(procs: &[(u32, &[u8], u32, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (pid, env, uid, cg) in procs {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("environ"), env).unwrap();
            std::fs::write(
                d.join("status"),
                format!(
                    "Name:\tx\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\nThreads:\t1\nCpus_allowed_list:\t0\n"
                ),
            )
            .unwrap();
            std::fs::write(d.join("cgroup"), cg).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("self")).unwrap();
        dir
    }

    #[test]
    fn facts_and_the_sweep_set() {
        let t = proc_tree(&[
            (10, b"PATH=/bin\0", 0, "0::/\n"),
            (11, b"SLURM_JOB_ID=5\0", 1000, "0::/user\n"),
            (12, b"", 0, "0::/\n"),
        ]);
        let mut s = Scanner::new(
            t.path(),
            vec!["SLURM_JOB_ID".into()],
            vec!["SLURM_SCRIPT_CONTEXT".into()],
        );
        assert_eq!(s.facts(10), None);
        assert_eq!(s.facts(12), None);
        assert_eq!(s.facts(99), None);
        let f = s.facts(11).unwrap();
        assert_eq!((f.uid, f.ids.clone()), (1000, vec![(0, "5".to_string())]));
        assert_eq!(f.cgroups[0].path, "/user");
        assert!(!f.hook);
        assert_eq!(s.unsettled(), vec![10, 11, 12]);
        s.settle(10);
        s.settle(12);
        assert_eq!(s.unsettled(), vec![11]);
        std::fs::remove_dir_all(t.path().join("12")).unwrap();
        s.unsettled();
        assert!(!s.settled.contains(&12), "gone pids are forgotten");
        s.reset();
        assert_eq!(s.unsettled(), vec![10, 11]);
    }
}
