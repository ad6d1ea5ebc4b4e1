//! The `/proc` side of adoption: what a process's ancestry, environment and cgroups say, and
//! what has been decided about which process. The decision is [`pjw_core::adopt::decide`]; the
//! engine moves the process. The root is injectable.
//!
//! A process is read once per (pid, start time): its verdict is remembered, and it is looked at
//! again only on an event — it execs (its environment and uid may change), its parent of a
//! known job forks it, the job it names is registered, or the kernel dropped events. The
//! periodic sweep reads only processes it has never seen, so its cost grows with new processes,
//! not with processes × sweeps. Ancestries are remembered the same way, so finding a new
//! process's lineage costs its own `stat` and its parent's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pjw_core::adopt::{Lineage, STEP_DAEMONS};
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
    /// What its ancestry says.
    pub lineage: Lineage,
}

/// What was decided about a process, until an event says to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nothing to do (not a job process, inside a job, adopted, a hook, another user's).
    Settled,
    /// It names job `id` (`ns:id`), which no live job has: looked at again when it is.
    Unknown(String),
}

/// Deepest ancestry followed.
const MAX_DEPTH: usize = 64;

/// Reads process facts below a `/proc` root and remembers what was decided per process.
#[derive(Debug)]
pub struct Scanner {
    proc_root: PathBuf,
    rules: Vec<String>,
    rule_ns: Vec<Option<&'static str>>,
    /// Executable names of the managers' own daemons whose root children are hooks.
    hook_daemons: Vec<String>,
    /// Per pid: its start time and what was decided.
    seen: HashMap<u32, (u64, Seen)>,
    /// Per pid: its start time and its lineage (ancestors included).
    lineages: HashMap<u32, (u64, Lineage)>,
}

impl Scanner {
    pub fn new(proc_root: &Path, rules: Vec<String>, hook_daemons: Vec<String>) -> Scanner {
        let rule_ns = rules
            .iter()
            .map(|r| pjw_core::adopt::var_namespace(r))
            .collect();
        Scanner {
            proc_root: proc_root.to_path_buf(),
            rules,
            rule_ns,
            hook_daemons,
            seen: HashMap::new(),
            lineages: HashMap::new(),
        }
    }

    /// The environment rules, in order.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    /// The manager namespace of each rule.
    pub fn rule_ns(&self) -> &[Option<&'static str>] {
        &self.rule_ns
    }

    fn dir(&self, pid: u32) -> PathBuf {
        self.proc_root.join(pid.to_string())
    }

    /// (ppid, start time) of `pid`.
    fn stat(&self, pid: u32) -> Option<(u32, u64)> {
        let text = std::fs::read_to_string(self.dir(pid).join("stat")).ok()?;
        let s = pjw_kernelfs::proc_stat::parse(&text).ok()?;
        Some((s.ppid, s.starttime))
    }

    /// The start time of `pid`, if it exists.
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        self.stat(pid).map(|(_, s)| s)
    }

    /// What `pid` itself is, when it is a manager's daemon running as root: its executable's
    /// name (never its argv, which any process sets) and real uid decide. Not its effective
    /// uid: slurmstepd drops that to the job's user for a while as it forks the tasks (a
    /// task joining its job from the SPANK plugin asks in that window), and only root makes a
    /// process whose real uid is 0.
    fn daemon_kind(&self, pid: u32) -> Option<Lineage> {
        let dir = self.dir(pid);
        let exe = std::fs::read_link(dir.join("exe")).ok()?;
        let name = exe.file_name()?.to_str()?;
        let name = name.strip_suffix(" (deleted)").unwrap_or(name);
        let step = STEP_DAEMONS.iter().find(|(n, _)| *n == name);
        let hook = self.hook_daemons.iter().any(|h| h == name);
        if step.is_none() && !hook {
            return None;
        }
        if os_real_uid(&dir)? != 0 {
            return None;
        }
        if let Some((_, ns)) = step {
            let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
            return Some(match pjw_core::adopt::step_job(&cmdline) {
                Some(id) => Lineage::Step {
                    ns: ns.to_string(),
                    id,
                },
                // A step daemon that names no job (starting): its children are the manager's.
                None => Lineage::Daemon,
            });
        }
        Some(Lineage::Daemon)
    }

    /// What the direct parent of `pid` is, for a task joining its job from slurmstepd (see
    /// `pjw_core::task_join`): [`Lineage::Step`] when it is a root-owned step daemon whose
    /// argv names a job, with the step its argv names (`batch`, `0`; `""` when unreadable);
    /// [`Lineage::Outside`] for anything else, a parent that could not be read, one that
    /// started after `pid` (a reused pid), or `pid` itself gone. Nothing is remembered.
    pub fn parent_step(&self, pid: u32) -> (Lineage, String) {
        let outside = (Lineage::Outside, String::new());
        let Some((ppid, start)) = self.stat(pid) else {
            return outside;
        };
        let Some((_, pstart)) = self.stat(ppid) else {
            return outside;
        };
        if ppid <= 1 || pstart > start {
            return outside;
        }
        match self.daemon_kind(ppid) {
            Some(l @ Lineage::Step { .. }) => {
                let step = std::fs::read(self.dir(ppid).join("cmdline"))
                    .ok()
                    .and_then(|c| pjw_core::adopt::step_id(&c))
                    .map(|(_, s)| s)
                    .unwrap_or_default();
                (l, step)
            }
            _ => outside,
        }
    }

    /// The lineage of `pid` (a process whose start time is `start`): the nearest root-owned
    /// manager daemon above it decides. Remembered per (pid, start time) for it and every
    /// ancestor walked.
    pub fn lineage(&mut self, pid: u32, start: u64) -> Lineage {
        let mut walked: Vec<(u32, u64)> = Vec::new();
        let (mut cur, mut cur_start) = (pid, start);
        let found = loop {
            if let Some((s, l)) = self.lineages.get(&cur) {
                if *s == cur_start {
                    break l.clone();
                }
            }
            if walked.len() >= MAX_DEPTH {
                break Lineage::Outside;
            }
            walked.push((cur, cur_start));
            let Some((ppid, _)) = self.stat(cur) else {
                break Lineage::Outside;
            };
            if ppid <= 1 {
                break Lineage::Outside;
            }
            let Some((_, pstart)) = self.stat(ppid) else {
                break Lineage::Outside;
            };
            // A parent that started after its child is not its parent (the pid was reused).
            if pstart > cur_start {
                break Lineage::Outside;
            }
            if let Some(l) = self.daemon_kind(ppid) {
                break l;
            }
            cur = ppid;
            cur_start = pstart;
        };
        for (p, s) in walked {
            self.lineages.insert(p, (s, found.clone()));
        }
        found
    }

    /// Record that `child` (started at `start`) was forked by `parent`: it inherits what is
    /// known of the parent's lineage, also when it is re-parented later (a double fork).
    /// Returns the inherited lineage when it is a job step's.
    pub fn forked(&mut self, parent: u32, child: u32) -> Option<Lineage> {
        let (pstart, l) = self.lineages.get(&parent)?;
        if !matches!(l, Lineage::Step { .. }) {
            return None;
        }
        let (pstart, l) = (*pstart, l.clone());
        // The same parent, not another process that got its pid.
        if self.start_time(parent) != Some(pstart) {
            return None;
        }
        let start = self.start_time(child)?;
        self.lineages.insert(child, (start, l.clone()));
        Some(l)
    }

    /// Facts of `pid` (started at `start`), or None when it is gone, a kernel thread, or
    /// neither a task of a step nor naming a job in its environment (nothing to decide).
    /// Its lineage is decided first (remembered); the environment is read only when the
    /// lineage leaves the decision to it.
    pub fn facts(&mut self, pid: u32, start: u64) -> Option<Facts> {
        let lineage = self.lineage(pid, start);
        let dir = self.dir(pid);
        let ids = if matches!(lineage, Lineage::Step { .. }) {
            Vec::new()
        } else {
            let environ = std::fs::read(dir.join("environ")).ok()?;
            let ids = pjw_core::adopt::env_ids(&environ, &self.rules);
            // Outside every step and naming no job (most processes): nothing more to read.
            // (A root one below a manager's daemon is a hook; a user's there, no job's: both
            // are left alone, as for None.)
            if ids.is_empty() {
                return None;
            }
            ids
        };
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let status = pjw_kernelfs::proc_status::parse(&status).ok()?;
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok()?;
        let cgroups = pjw_kernelfs::proc_cgroup::parse(&cgroup).ok()?;
        Some(Facts {
            pid,
            uid: status.uid[0],
            threads: status.threads,
            ids,
            cgroups,
            lineage,
        })
    }

    /// Pids that exist now and were never looked at (or whose pid was reused); forgets what
    /// was decided about pids that are gone.
    pub fn unseen(&mut self) -> Vec<u32> {
        self.unseen_after(None)
    }

    /// [`Scanner::unseen`], only pids above `after` (a sweep taken in turns goes on from
    /// where its last turn stopped, so each pass looks at a process at most once).
    pub fn unseen_after(&mut self, after: Option<u32>) -> Vec<u32> {
        let Ok(rd) = std::fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let now: std::collections::HashSet<u32> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .collect();
        self.seen.retain(|p, _| now.contains(p));
        self.lineages.retain(|p, _| now.contains(p));
        let mut out: Vec<u32> = now
            .into_iter()
            .filter(|p| !self.seen.contains_key(p) && after.is_none_or(|a| *p > a))
            .collect();
        out.sort_unstable();
        out
    }

    /// Remember what was decided about `pid` (started at `start`).
    pub fn remember(&mut self, pid: u32, start: u64, seen: Seen) {
        self.seen.insert(pid, (start, seen));
    }

    /// What was decided about `pid`, if it is the same process (start time `start`).
    pub fn decided(&self, pid: u32, start: u64) -> Option<&Seen> {
        self.seen
            .get(&pid)
            .filter(|(s, _)| *s == start)
            .map(|(_, v)| v)
    }

    /// Pids remembered as naming job `id` (`ns:id`, or a bare id for a rule of no manager).
    pub fn waiting_for(&self, ns: &str, id: &str) -> Vec<u32> {
        let full = format!("{ns}:{id}");
        let mut out: Vec<u32> = self
            .seen
            .iter()
            .filter(|(_, (_, v))| matches!(v, Seen::Unknown(u) if *u == full || u == id))
            .map(|(p, _)| *p)
            .collect();
        out.sort_unstable();
        out
    }

    /// Processes remembered, and how many of them name an unknown job.
    pub fn counts(&self) -> (usize, usize) {
        let unknown = self
            .seen
            .values()
            .filter(|(_, v)| matches!(v, Seen::Unknown(_)))
            .count();
        (self.seen.len(), unknown)
    }

    /// Forget every decision (no job adopts now, or the kernel dropped events): the next sweep
    /// looks at every process once again. Lineages stay: a process's ancestry does not change.
    pub fn reset(&mut self) {
        self.seen.clear();
    }
}

/// The real uid in `DIR/status`.
fn os_real_uid(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("status")).ok()?;
    pjw_kernelfs::proc_status::parse(&text)
        .ok()
        .map(|s| s.uid[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

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

    fn write_stat(dir: &Path, pid: u32, ppid: u32, start: u64) {
        std::fs::write(
            dir.join(pid.to_string()).join("stat"),
            format!("{pid} (x) S {ppid} 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
        )
        .unwrap();
    }

    #[test]
    fn facts_and_what_is_remembered() {
        let t = proc_tree(&[
            (10, b"PATH=/bin\0", 0, "0::/\n"),
            (11, b"SLURM_JOB_ID=5\0", 1000, "0::/user\n"),
            (12, b"SLURM_JOB_ID=5\nforged\0", 0, "0::/\n"),
        ]);
        for p in [10, 11, 12] {
            write_stat(t.path(), p, 1, 100 + p as u64);
        }
        let mut s = Scanner::new(t.path(), vec!["SLURM_JOB_ID".into()], vec!["slurmd".into()]);
        assert_eq!(s.rule_ns(), &[Some("slurm")]);
        assert!(
            s.facts(10, 110).is_none(),
            "no job in its environment, outside every step"
        );
        assert!(s.facts(99, 1).is_none());
        let f = s.facts(11, 111).unwrap();
        assert_eq!((f.uid, f.ids.clone()), (1000, vec![(0, "5".to_string())]));
        assert_eq!(f.cgroups[0].path, "/user");
        assert!(s.facts(12, 112).is_none(), "not a job id");
        assert_eq!(s.unseen(), vec![10, 11, 12]);
        s.remember(10, 110, Seen::Settled);
        s.remember(11, 111, Seen::Unknown("slurm:5".into()));
        assert_eq!(
            s.unseen(),
            vec![12],
            "an unknown job's process is not read again"
        );
        assert_eq!(s.waiting_for("slurm", "5"), vec![11]);
        assert_eq!(s.waiting_for("sge", "5"), Vec::<u32>::new());
        assert_eq!(s.decided(11, 111), Some(&Seen::Unknown("slurm:5".into())));
        assert_eq!(
            s.decided(11, 999),
            None,
            "another process with a reused pid"
        );
        std::fs::remove_dir_all(t.path().join("11")).unwrap();
        s.unseen();
        assert_eq!(s.counts(), (1, 0), "gone pids are forgotten");
        s.reset();
        assert_eq!(s.unseen(), vec![10, 12]);
    }

    /// Lineages of real processes: copies of `sh` named `slurmd` and `slurmstepd` (root, as
    /// this test runs) stand for the manager's daemons. Root only (reads other processes'
    /// `exe`); a skip elsewhere (recorded, not a pass).
    #[test]
    fn lineage_of_real_processes() {
        use std::process::{Command, Stdio};
        pjw_testkit::require_root!();
        let dir = tempfile::tempdir().unwrap();
        for name in ["slurmd", "slurmstepd"] {
            std::fs::copy("/bin/bash", dir.path().join(name)).unwrap();
        }
        let out = dir.path().join("pids");
        let task = dir.path().join("task.sh");
        std::fs::write(
            &task,
            format!("sleep 60 & echo task $! >> {}; wait\n", out.display()),
        )
        .unwrap();
        // slurmd ─┬─ sleep (a hook: root below slurmd)
        //         └─ slurmstepd: [42.0] ─ sleep (a task of job 42)
        let script = format!(
            "(exec -a 'slurmstepd: [42.0]' {d}/slurmstepd {t}) & sleep 60 & echo hook $! >> {o}; wait",
            o = out.display(),
            d = dir.path().display(),
            t = task.display()
        );
        let mut daemon = Command::new(dir.path().join("slurmd"))
            .args(["-c", &script])
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut pids = std::collections::HashMap::new();
        for _ in 0..200 {
            let t = std::fs::read_to_string(&out).unwrap_or_default();
            pids = t
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(k, v)| (k.to_string(), v.trim().parse::<u32>().unwrap()))
                .collect();
            if pids.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut s = Scanner::new(Path::new("/proc"), vec![], vec!["slurmd".into()]);
        let got: Vec<(String, Lineage)> = ["hook", "task"]
            .iter()
            .map(|k| {
                let pid = pids[*k];
                let start = s.start_time(pid).unwrap();
                (k.to_string(), s.lineage(pid, start))
            })
            .collect();
        let me = std::process::id();
        let mine = s.lineage(me, s.start_time(me).unwrap());
        // SAFETY: kill(2) on the process group this test made.
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(daemon.id() as i32).unwrap(),
            rustix::process::Signal::Kill,
        );
        let _ = daemon.wait();
        assert_eq!(got[0].1, Lineage::Daemon, "{got:?}");
        assert_eq!(
            got[1].1,
            Lineage::Step {
                ns: "slurm".into(),
                id: "42".into()
            },
            "{got:?}"
        );
        assert_eq!(mine, Lineage::Outside);
    }
}
