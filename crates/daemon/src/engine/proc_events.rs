//! Process events from the proc connector: the per-job process tracker and what an unknown
//! process's exec means.

use tracing::debug;

use super::Engine;
use proc_connector::ProcEvent;

use crate::bind::Birth;
use crate::procs::{ProcMsg, Unknown};

impl Engine {
    pub(super) fn proc_events(&mut self, msg: ProcMsg) {
        match msg {
            ProcMsg::Events(events) => {
                let mut born = Vec::new();
                for ev in &events {
                    self.note_exit(ev);
                    match *ev {
                        ProcEvent::Fork {
                            parent_pid,
                            child_pid,
                            child_tgid,
                            timestamp_ns,
                            ..
                        } => born.push((
                            child_tgid,
                            child_pid,
                            Birth::Fork {
                                by: parent_pid,
                                at_ns: timestamp_ns,
                            },
                        )),
                        ProcEvent::Exec { tgid, .. } => {
                            born.push((tgid, tgid, Birth::Exec));
                            self.mark_after_exec(tgid);
                        }
                        _ => {}
                    }
                    match self.procs.apply(ev) {
                        Some(Unknown::Exec { pid, tgid }) => self.on_unknown_exec(pid, tgid),
                        Some(Unknown::Fork { parent, child }) => {
                            self.on_unknown_fork(parent, child)
                        }
                        Some(Unknown::EarlyFork { job, child }) => self.on_early_fork(job, child),
                        None => {}
                    }
                }
                self.place_born(&born);
            }
            ProcMsg::Overrun => {
                self.reseed_procs();
                // Events were lost: every process is looked at once more by the next sweep.
                self.scanner.reset();
            }
        }
    }

    /// A process outside every job called exec: adopt it if it belongs to a registered job.
    pub(super) fn on_unknown_exec(&mut self, _pid: u32, tgid: u32) {
        if self.adopting() {
            self.examine(tgid, "exec");
        }
    }

    /// Re-learn every started job's processes from its `cgroup.procs`.
    pub(super) fn reseed_procs(&mut self) {
        for j in self.jobs.values().filter(|j| j.started.is_some()) {
            match self.driver.procs(&j.cgroup) {
                Ok(pids) => self.procs.reseed(j.seq, &pids),
                Err(e) => debug!(job = %j.id, error = %e, "cannot list job processes"),
            }
        }
    }
}
