//! Thread balancing as the engine sees it: which mode a job binds with (its `--bind`, else the
//! node's `[job] bind`), recorded beside its row; the balancing tick that hands the running
//! jobs to the binder's thread (the engine reads no `/proc` file and makes no syscall for it);
//! and the OpenMP/BLAS variables a starting job is offered.

use pjw_core::thread_bind::{self, BindMode};
use pjw_core::{thread_env, CpuSet, Topology};

use super::{Engine, Job};
use crate::bind::{BindJob, Binder, Birth, Born};
use crate::config::Config;

impl Engine {
    /// Balance the threads of running jobs through `b` at every [`super::Event::Bind`].
    pub fn set_binder(&mut self, b: Binder) {
        self.binder = Some(b);
    }

    /// Take back a recovered job's `--bind`.
    pub(super) fn restore_bind(&self, job: &mut Job) {
        if let Ok(Some(mode)) = self.store.bind(job.seq) {
            job.bind = Some(mode);
        }
    }

    /// The balancing tick: the jobs running on CPUs now (frozen and ending ones are left
    /// alone), each with its mode, go to the binder; a job at `none` is listed so that pins a
    /// reload made obsolete are given back.
    pub(super) fn bind_tick(&mut self) {
        let Some(b) = &self.binder else {
            return;
        };
        let jobs: Vec<BindJob> = self
            .jobs
            .values()
            .filter(|j| Engine::balanced(j))
            .map(|j| BindJob {
                seq: j.seq,
                cgroup: j.cgroup.clone(),
                cpus: j.cpus,
                mode: j.bind.unwrap_or(self.cfg.bind),
            })
            .collect();
        b.send(jobs);
    }

    /// Threads and processes just born and processes that just exec'd (`(tgid, tid, event)`,
    /// attributed by the process tracker): those of running jobs that bind go to the binder,
    /// which places them at once.
    pub(super) fn place_born(&mut self, born: &[(u32, u32, Birth)]) {
        let Some(b) = &self.binder else {
            return;
        };
        let mut out = Vec::new();
        for &(tgid, tid, at) in born {
            let Some(j) = self.procs.job_of(tgid).and_then(|seq| self.jobs.get(&seq)) else {
                continue;
            };
            let mode = j.bind.unwrap_or(self.cfg.bind);
            if mode == BindMode::None || !Engine::balanced(j) {
                continue;
            }
            out.push(Born {
                job: BindJob {
                    seq: j.seq,
                    cgroup: j.cgroup.clone(),
                    cpus: j.cpus,
                    mode,
                },
                tgid,
                tid,
                at,
            });
        }
        if !out.is_empty() {
            b.born(out);
        }
    }

    /// Whether job `j`'s threads are balanced now: running on CPUs, not frozen or ending.
    pub(super) fn balanced(j: &Job) -> bool {
        j.started.is_some()
            && !j.cpus.is_empty()
            && !j.end.ending
            && !j.memory.frozen
            && j.freezing.is_none()
    }

    /// What a starting job's client sets where the user did not (`thread_env`): thread and
    /// CPU counts for its CPUs (its cores with `cores`) and tasks, when it binds the OpenMP
    /// places, and with tasks Open MPI's rank mapping.
    pub(super) fn thread_env_of(cfg: &Config, topo: &Topology, j: &Job) -> Vec<(String, String)> {
        Engine::thread_env_for(cfg, topo, &j.cpus, j.bind, j.tasks)
    }

    /// The same for any CPUs of a job with its bind mode and tasks: a job's, or a step's share.
    pub(super) fn thread_env_for(
        cfg: &Config,
        topo: &Topology,
        cpus: &CpuSet,
        bind: Option<BindMode>,
        tasks: Option<u32>,
    ) -> Vec<(String, String)> {
        if !cfg.thread_env {
            return Vec::new();
        }
        let mode = bind.unwrap_or(cfg.bind);
        let n = match mode {
            BindMode::Cores => thread_bind::slots(topo, cpus, mode).len(),
            _ => cpus.len(),
        };
        let mut env = thread_env::thread_env(n, tasks, mode);
        if let Some(t) = tasks {
            env.extend(thread_env::launcher_env(
                t,
                thread_env::per_task(n, tasks),
                mode,
            ));
        }
        env
    }
}
