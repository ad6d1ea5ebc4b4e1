//! A Slurm task joining its job before it execs: the rule the daemon applies to a request from
//! pjw's SPANK plugin (`packaging/slurm/spank/pjw_spank.c`).
//!
//! `slurmstepd` forks each task, and in that child, still root and before the user's program is
//! exec'd, Slurm calls the plugin's `slurm_spank_task_init_privileged`; the plugin asks the daemon
//! to move *its own process* (the caller of the socket, `SO_PEERCRED`) into the job's cgroups.
//! What decides is what the kernel says about the caller, never what the request says: its uid
//! must be 0, and its **direct parent** must be a root-owned step daemon whose argv (which
//! slurmstepd writes itself) names a job ([`crate::adopt::Lineage::Step`]); that job must be a
//! registered, running `slurm:ID` job. The one thing taken from the request is the uid Slurm will
//! run the task as (`S_JOB_UID`: no kernel fact says it yet, the task is still root), and only
//! from a caller already proven to be Slurm's own root child of slurmstepd; it must be the
//! job's owner, so that a stale registration never takes another user's task. The job and
//! owner match is [`crate::adopt::decide`]'s, the same as for adoption by ancestry.
//!
//! ```
//! use pjw_core::adopt::{Lineage, Target};
//! use pjw_core::task_join::{judge, Caller, Join, Place, Refusal};
//! let jobs = [Target { key: 7, ns: "slurm", id: "42", uid: 1000, registered: true }];
//! let step = Lineage::Step { ns: "slurm".into(), id: "42".into() };
//! let task = Caller { uid: 0, parent: &step, place: Place::Outside, run_as: 1000 };
//! assert_eq!(judge(&task, &jobs), Join::Join { key: 7 });
//! // The same request from the user's own process is refused before anything else is read.
//! let user = Caller { uid: 1000, ..task };
//! assert_eq!(judge(&user, &jobs), Join::Refuse(Refusal::NotRoot { uid: 1000 }));
//! ```

use crate::adopt::{decide, Candidate, Lineage, Target, Verdict};
use crate::thread_bind::BindMode;

/// Where the caller is now, as the daemon's cgroups say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In no job of this daemon.
    Outside,
    /// In the cgroups of live job `key`.
    InJob(i64),
    /// In a job cgroup of this daemon that no live job has (one being removed).
    InGoneJob,
}

/// What is known about the caller of a join request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller<'a> {
    /// Its uid (`SO_PEERCRED`).
    pub uid: u32,
    /// What its direct parent is: a root step daemon naming a job gives
    /// [`Lineage::Step`]; anything else (a user's process, a root process that is not a step
    /// daemon, a parent that could not be read) is not a task's parent.
    pub parent: &'a Lineage,
    /// Where it is now.
    pub place: Place,
    /// The uid Slurm runs the task as (the plugin's `S_JOB_UID`).
    pub run_as: u32,
}

/// Why a join is refused; [`Refusal::message`] is what the plugin logs on the task's stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The caller is not root: only slurmstepd's child, before it drops privileges, joins.
    NotRoot { uid: u32 },
    /// Its parent is not a root step daemon naming a job.
    NotATask,
    /// Its step daemon names job `id` (`slurm:42`), which is not registered and running here.
    UnknownJob { id: String },
    /// Job `key` belongs to another user than the one Slurm runs the task as.
    WrongOwner { key: i64, run_as: u32, owner: u32 },
    /// It is in another job's cgroups already.
    InAnotherJob,
}

impl Refusal {
    /// One line for people (no text a user chose: ids passed the job-id check).
    pub fn message(&self) -> String {
        match self {
            Refusal::NotRoot { uid } => format!(
                "only slurmstepd's task (root, before it drops privileges) joins a job this way; uid {uid} is refused"
            ),
            Refusal::NotATask => {
                "the caller's parent is not a root slurmstepd naming a job step".to_string()
            }
            Refusal::UnknownJob { id } => {
                format!("job {id} is not registered and running on this node (Prolog with pjw-prolog.sh and PrologFlags=Alloc?)")
            }
            Refusal::WrongOwner { run_as, owner, .. } => format!(
                "the task runs as uid {run_as} but the registered job belongs to uid {owner}"
            ),
            Refusal::InAnotherJob => "the task is in another pjw job already".to_string(),
        }
    }
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Join {
    /// Move the caller into job `key`.
    Join { key: i64 },
    /// It is in job `key` already (a repeated request): answer as for a join.
    Already { key: i64 },
    /// Refuse, and say why.
    Refuse(Refusal),
}

/// Decide a join request. `jobs` are the live jobs that adopt (only root-registered ones count
/// here: a user's `pjw run --from-env` job never takes a Slurm task). The checks go in this
/// order, and each reads nothing the previous one did not let through: root caller, then its
/// parent, then the job and its owner ([`decide`], as for a task found by its ancestry), then
/// where it is now.
pub fn judge(c: &Caller<'_>, jobs: &[Target<'_>]) -> Join {
    if c.uid != 0 {
        return Join::Refuse(Refusal::NotRoot { uid: c.uid });
    }
    if !matches!(c.parent, Lineage::Step { .. }) {
        return Join::Refuse(Refusal::NotATask);
    }
    let registered: Vec<Target<'_>> = jobs.iter().filter(|t| t.registered).copied().collect();
    let task = Candidate {
        uid: c.run_as,
        ids: &[],
        rule_ns: &[],
        inside: None,
        lineage: c.parent,
    };
    match decide(&task, &registered) {
        Verdict::Adopt { key, .. } => match c.place {
            Place::Outside => Join::Join { key },
            Place::InJob(k) if k == key => Join::Already { key },
            Place::InJob(_) | Place::InGoneJob => Join::Refuse(Refusal::InAnotherJob),
        },
        Verdict::Unknown { id, .. } => Join::Refuse(Refusal::UnknownJob { id }),
        Verdict::WrongOwner { key, uid } => Join::Refuse(Refusal::WrongOwner {
            key,
            run_as: uid,
            owner: registered
                .iter()
                .find(|t| t.key == key)
                .map(|t| t.uid)
                .unwrap_or(u32::MAX),
        }),
        Verdict::Inside | Verdict::Hook | Verdict::NotAJob => Join::Refuse(Refusal::NotATask),
    }
}

/// Steps whose one task is the whole allocation on the node: the job script (`batch`), the
/// `salloc` shell of `use_interactive_step` (`interactive`), and a step daemon naming no step.
fn whole_allocation(step: &str) -> bool {
    matches!(step, "batch" | "interactive" | "")
}

/// What Slurm says of a task's step and of its job, for the task's thread counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskShape {
    /// The step's CPUs per task (`srun -c N`; `S_STEP_CPUS_PER_TASK`).
    pub cpus_per_task: Option<u32>,
    /// The step's tasks on this node (`S_JOB_LOCAL_TASK_COUNT`).
    pub tasks: Option<u32>,
    /// The job's own CPUs per task (its `-c`: `SLURM_CPUS_PER_TASK`, absent when not given).
    pub job_cpus_per_task: Option<u32>,
    /// The job's tasks on the script's node (`SLURM_TASKS_PER_NODE`'s first count).
    pub job_tasks: Option<u32>,
}

/// How many CPUs one task of step `step` runs its threads on, for its thread variables, in a job
/// holding `job_cpus` CPUs on this node (at most that; 0 only for a job without CPUs):
/// - a task of a step: Slurm's CPUs per task (`srun -c N`; what `task/affinity` would bind it
///   to), else the job's CPUs shared among the step's tasks on this node (at least one each);
/// - a whole-allocation step (the job script): the job's own CPUs per task (`sbatch -c N`),
///   else its CPUs shared among its tasks here, else all of them. A script of `-n2 -c1` is
///   told 1 although it has 2 CPUs: what it runs with them is its tasks (`mpirun`'s ranks
///   inherit its variables, and 2 threads in each of 2 ranks would put 4 threads on 2 CPUs),
///   as Slurm sites set `OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK`; a one-task job (`sbatch -c8`,
///   `--exclusive`) gets all it has.
pub fn task_cpus(job_cpus: usize, step: &str, shape: &TaskShape) -> usize {
    if job_cpus == 0 {
        return 0;
    }
    let (cpt, tasks) = if whole_allocation(step) {
        (shape.job_cpus_per_task, shape.job_tasks)
    } else {
        (shape.cpus_per_task, shape.tasks)
    };
    if let Some(c) = cpt.filter(|c| *c > 0) {
        return (c as usize).min(job_cpus);
    }
    match tasks.filter(|t| *t > 0) {
        Some(t) => (job_cpus / t as usize).max(1),
        None => job_cpus,
    }
}

/// The bind mode a task's OpenMP places follow: the job's, unless several tasks share the
/// job's CPUs on this node — the tasks of a step, or the ranks a job script of several tasks
/// starts — when each would place its threads on the same first CPUs of the set
/// (`OMP_PROC_BIND=close`); then none, and the count alone is set.
pub fn task_bind(mode: BindMode, step: &str, shape: &TaskShape) -> BindMode {
    let tasks = if whole_allocation(step) {
        shape.job_tasks
    } else {
        shape.tasks
    };
    if tasks.is_some_and(|t| t > 1) {
        BindMode::None
    } else {
        mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: i64, id: &'static str, uid: u32, registered: bool) -> Target<'static> {
        Target {
            key,
            ns: "slurm",
            id,
            uid,
            registered,
        }
    }

    fn step(id: &str) -> Lineage {
        Lineage::Step {
            ns: "slurm".into(),
            id: id.into(),
        }
    }

    #[test]
    fn judge_table() {
        let jobs = [
            t(1, "42", 1000, true),
            t(2, "43", 1001, true),
            // a user's `pjw run --from-env` claim on Slurm's 44: never joined by a task
            t(3, "44", 1000, false),
        ];
        let s42 = step("42");
        let (s44, s99) = (step("44"), step("99"));
        let outside = Lineage::Outside;
        let daemon = Lineage::Daemon;
        type Case<'a> = (&'a str, u32, &'a Lineage, Place, u32, Join);
        let cases: Vec<Case<'_>> = vec![
            (
                "slurmstepd's root child, its job's owner",
                0,
                &s42,
                Place::Outside,
                1000,
                Join::Join { key: 1 },
            ),
            (
                "a user's process (the task after exec, or any other)",
                1000,
                &s42,
                Place::Outside,
                1000,
                Join::Refuse(Refusal::NotRoot { uid: 1000 }),
            ),
            (
                "root, but its parent is no step daemon (a forged argv on another binary)",
                0,
                &outside,
                Place::Outside,
                1000,
                Join::Refuse(Refusal::NotATask),
            ),
            (
                "root below slurmd, not in a step (the Prolog)",
                0,
                &daemon,
                Place::Outside,
                1000,
                Join::Refuse(Refusal::NotATask),
            ),
            (
                "a step of a job pjw does not run",
                0,
                &s99,
                Place::Outside,
                1000,
                Join::Refuse(Refusal::UnknownJob {
                    id: "slurm:99".into(),
                }),
            ),
            (
                "a task run as another user than the registered job's owner",
                0,
                &s42,
                Place::Outside,
                1001,
                Join::Refuse(Refusal::WrongOwner {
                    key: 1,
                    run_as: 1001,
                    owner: 1000,
                }),
            ),
            (
                "only a user's unregistered claim on that id",
                0,
                &s44,
                Place::Outside,
                1000,
                Join::Refuse(Refusal::UnknownJob {
                    id: "slurm:44".into(),
                }),
            ),
            (
                "asked again: already in its job",
                0,
                &s42,
                Place::InJob(1),
                1000,
                Join::Already { key: 1 },
            ),
            (
                "in another job's cgroups",
                0,
                &s42,
                Place::InJob(2),
                1000,
                Join::Refuse(Refusal::InAnotherJob),
            ),
            (
                "in the cgroups of a job being removed",
                0,
                &s42,
                Place::InGoneJob,
                1000,
                Join::Refuse(Refusal::InAnotherJob),
            ),
        ];
        for (what, uid, parent, place, run_as, want) in cases {
            let c = Caller {
                uid,
                parent,
                place,
                run_as,
            };
            assert_eq!(judge(&c, &jobs), want, "{what}");
        }
        assert_eq!(
            judge(
                &Caller {
                    uid: 0,
                    parent: &s42,
                    place: Place::Outside,
                    run_as: 1000
                },
                &[]
            ),
            Join::Refuse(Refusal::UnknownJob {
                id: "slurm:42".into()
            }),
            "no jobs at all"
        );
    }

    #[test]
    fn refusals_say_why_in_one_line() {
        for r in [
            Refusal::NotRoot { uid: 5 },
            Refusal::NotATask,
            Refusal::UnknownJob {
                id: "slurm:1".into(),
            },
            Refusal::WrongOwner {
                key: 1,
                run_as: 2,
                owner: 3,
            },
            Refusal::InAnotherJob,
        ] {
            let m = r.message();
            assert!(!m.is_empty() && !m.contains('\n'), "{r:?}: {m:?}");
        }
    }

    #[test]
    fn task_cpus_table() {
        // (what, job cpus, step, step's cpus per task, step's tasks, job's -c, job's tasks here,
        // expected)
        type Case = (
            &'static str,
            usize,
            &'static str,
            Option<u32>,
            Option<u32>,
            Option<u32>,
            Option<u32>,
            usize,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("sbatch -c1: the script", 1, "batch", Some(1), Some(1), Some(1), Some(1), 1),
            ("sbatch -c2: the script", 2, "batch", Some(2), Some(1), Some(2), Some(1), 2),
            ("sbatch -n2 -c1: the script's ranks get 1 each", 2, "batch", Some(2), Some(1), Some(1), Some(2), 1),
            ("sbatch -n4 (no -c): the node's CPUs shared by its tasks", 4, "batch", Some(4), Some(1), None, Some(4), 1),
            ("sbatch --exclusive, one task: all of them", 4, "batch", Some(4), Some(1), None, Some(1), 4),
            ("an older plugin (no job figures): all of them", 4, "batch", Some(1), Some(1), None, None, 4),
            ("a job -c above its CPUs here", 2, "batch", None, None, Some(8), Some(1), 2),
            ("srun -c1", 1, "0", Some(1), Some(1), Some(1), Some(1), 1),
            ("srun -c2", 2, "0", Some(2), Some(1), None, None, 2),
            ("srun -n4 -c1 in a 4-CPU job", 4, "3", Some(1), Some(4), None, Some(4), 1),
            ("srun -n1 in a 4-CPU job: Slurm gives the step 1", 4, "0", Some(1), Some(1), None, Some(4), 1),
            ("cpus per task above the job's", 2, "0", Some(8), Some(1), None, None, 2),
            ("no cpus per task: the job shared by its tasks", 4, "0", None, Some(2), None, None, 2),
            ("more tasks than CPUs: one each", 2, "0", Some(0), Some(8), None, None, 1),
            ("nothing known: the job's", 3, "1", None, None, None, None, 3),
            ("salloc's interactive step", 2, "interactive", Some(1), Some(1), None, Some(1), 2),
            ("no CPUs", 0, "0", Some(1), Some(1), None, None, 0),
        ];
        for (what, cpus, step, cpt, tasks, jcpt, jtasks, want) in cases {
            let shape = TaskShape {
                cpus_per_task: *cpt,
                tasks: *tasks,
                job_cpus_per_task: *jcpt,
                job_tasks: *jtasks,
            };
            assert_eq!(task_cpus(*cpus, step, &shape), *want, "{what}");
        }
    }

    #[test]
    fn tasks_sharing_the_job_set_do_not_place_threads() {
        let step = |tasks| TaskShape {
            tasks,
            ..TaskShape::default()
        };
        let job = |job_tasks| TaskShape {
            job_tasks,
            ..TaskShape::default()
        };
        use BindMode::*;
        assert_eq!(task_bind(Threads, "0", &step(Some(2))), None);
        assert_eq!(task_bind(Threads, "0", &step(Some(1))), Threads);
        assert_eq!(task_bind(Cores, "batch", &job(Some(1))), Cores);
        assert_eq!(task_bind(Cores, "0", &step(Option::None)), Cores);
        // A script of two tasks: its ranks would each place threads on the set's first CPUs.
        assert_eq!(task_bind(Threads, "batch", &job(Some(2))), None);
        // A step's own figure decides for a step, not the job's.
        assert_eq!(task_bind(Threads, "0", &job(Some(2))), Threads);
    }
}
