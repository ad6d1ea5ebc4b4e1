//! Stopping a job: killing every process (`cgroup.kill`, else freeze and signal, else rounds)
//! and freezing or thawing it (cgroup2's `cgroup.freeze` or the v1 freezer).

use std::path::PathBuf;
use std::time::Duration;

use crate::{freezer, parent, unified, CgroupError, Driver, Layout};

/// How long [`Driver::kill`] keeps signalling when there is no freezer.
const KILL_ROUNDS: usize = 20;

/// The most pidfds [`Driver::signal`] holds at once.
const SIGNAL_BATCH: usize = 1024;

impl Driver {
    /// Kill every process of the job (cgroup.kill where available; else freeze + SIGKILL each).
    pub fn kill(&self, name: &str) -> Result<(), CgroupError> {
        if self.kill_at_once(name)? {
            return Ok(());
        }
        self.kill_rounds(name)
    }

    /// The part of [`Driver::kill`] that never waits: `cgroup.kill` where it exists, or
    /// nothing to kill. False: processes are left and only [`Driver::kill_rounds`] kills them.
    pub fn kill_at_once(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        if let Some(v2) = self.v2() {
            if unified::kill(&self.fs, &v2.job(name))? {
                return Ok(true);
            }
        }
        // Nothing left (the usual case when a job's main process ends): no freeze and thaw.
        Ok(self.legacy_procs(name)?.is_empty())
    }

    /// Send `sig` to every process of the job (SIGTERM: the warning before a kill); how many
    /// were signalled. Each process is pinned by a pidfd before the job's processes are listed
    /// again, and signalled only if it is still listed: a pid that left the job and was reused
    /// outside it is never hit. At most [`SIGNAL_BATCH`] pidfds are open at a time (a job of
    /// many processes cannot take the daemon's descriptors), and a process the kernel refuses to
    /// signal does not stop the others (the first such error is returned after the pass).
    /// Processes born meanwhile are not signalled (the kill after it takes them). On a fake
    /// tree nothing is sent.
    pub fn signal(&self, name: &str, sig: i32) -> Result<usize, CgroupError> {
        parent::validate_job_name(name)?;
        let listed = self.legacy_procs(name)?;
        let (mut sent, mut first_err) = (0, None);
        for batch in listed.chunks(SIGNAL_BATCH) {
            let pinned: Vec<(u32, crate::fs::Pinned)> = batch
                .iter()
                .filter_map(|&pid| self.fs.pin_pid(pid).map(|p| (pid, p)))
                .collect();
            if pinned.is_empty() {
                continue;
            }
            let still: std::collections::BTreeSet<u32> =
                self.legacy_procs(name)?.into_iter().collect();
            for (pid, p) in pinned.iter().filter(|(pid, _)| still.contains(pid)) {
                match self.fs.signal_pinned(p, *pid, sig) {
                    Ok(true) => sent += 1,
                    Ok(false) => {}
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        first_err.map_or(Ok(sent), Err)
    }

    /// Every process in any of the job's cgroups, as `is_populated` counts them.
    fn legacy_procs(&self, name: &str) -> Result<Vec<u32>, CgroupError> {
        match self.v2() {
            Some(_) => self.procs(name),
            None => self.v1_procs_everywhere(name),
        }
    }

    /// The part of [`Driver::kill`] that waits, where there is no `cgroup.kill`: freeze (the v1
    /// freezer waits up to 2 s for FROZEN), SIGKILL every process, thaw; without a freezer, up
    /// to 20 rounds 10 ms apart. Blocks: the daemon runs it on a blocking thread.
    pub fn kill_rounds(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        let procs = |d: &Driver| d.legacy_procs(name);
        if procs(self)?.is_empty() {
            return Ok(());
        }
        // No cgroup.kill: freeze so nothing forks, SIGKILL each process, thaw so they die.
        let frozen = match self.freeze(name, true) {
            Ok(()) => true,
            Err(CgroupError::Unsupported { .. }) => false,
            Err(e) => {
                // The v1 freezer may be left FREEZING (a task that would not stop in time):
                // thaw it, or the processes already frozen would never act on the SIGKILL.
                tracing::warn!(job = name, error = %e, "cannot freeze before killing, killing anyway");
                if let Err(e) = self.freeze(name, false) {
                    tracing::warn!(job = name, error = %e, "cannot thaw after a failed freeze");
                }
                false
            }
        };
        let dirs: Vec<PathBuf> = self.job_dirs(name).into_iter().map(|(_, d)| d).collect();
        let rounds = if frozen { 1 } else { KILL_ROUNDS };
        let mut result = Ok(());
        for _ in 0..rounds {
            let pids = procs(self)?;
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                if let Err(e) = self.fs.kill_pid(pid, &dirs) {
                    result = Err(e);
                }
            }
            if !frozen {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if frozen {
            self.freeze(name, false)?;
        }
        result
    }

    /// Freeze / thaw the job (cgroup.freeze, or the v1 freezer).
    ///
    /// cgroup.freeze returns at once (watch `frozen` in cgroup.events, or [`Driver::is_frozen`]);
    /// the v1 freezer is polled briefly until FROZEN.
    pub fn freeze(&self, name: &str, frozen: bool) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        match &self.layout {
            Layout::Unified { v2 } | Layout::Hybrid { v2, .. } => {
                unified::freeze(&self.fs, &v2.job(name), frozen)
            }
            Layout::Legacy { .. } => match self.v1_with("freezer") {
                Some(h) => freezer::set(&self.fs, &h.job(name), frozen),
                None => Err(CgroupError::Unsupported {
                    what: "freezing",
                    mode: "legacy",
                    reason: "the v1 freezer is not mounted",
                }),
            },
        }
    }

    /// The part of [`Driver::freeze`] (freezing) that never waits: true when the job is frozen
    /// (`cgroup.freeze`, which the kernel completes by itself, or a v1 freezer that says FROZEN
    /// at once); false while the v1 freezer is FREEZING, for [`Driver::freeze_wait`].
    pub fn freeze_begin(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match &self.layout {
            Layout::Unified { v2 } | Layout::Hybrid { v2, .. } => {
                unified::freeze(&self.fs, &v2.job(name), true).map(|()| true)
            }
            Layout::Legacy { .. } => match self.v1_with("freezer") {
                Some(h) => freezer::begin(&self.fs, &h.job(name)),
                None => Err(CgroupError::Unsupported {
                    what: "freezing",
                    mode: "legacy",
                    reason: "the v1 freezer is not mounted",
                }),
            },
        }
    }

    /// Wait (up to 2 s) until the v1 freezer says FROZEN after [`Driver::freeze_begin`];
    /// an error when it does not (the freezer is left FREEZING: thaw it). Blocks.
    pub fn freeze_wait(&self, name: &str) -> Result<(), CgroupError> {
        parent::validate_job_name(name)?;
        match (&self.layout, self.v1_with("freezer")) {
            (Layout::Legacy { .. }, Some(h)) => freezer::wait(&self.fs, &h.job(name)),
            _ => Ok(()),
        }
    }

    /// Whether the job is (completely) frozen.
    pub fn is_frozen(&self, name: &str) -> Result<bool, CgroupError> {
        parent::validate_job_name(name)?;
        match (self.v2(), self.v1_with("freezer")) {
            (Some(v2), _) => Ok(unified::events(&self.fs, &v2.job(name))?.frozen == Some(true)),
            (None, Some(h)) => Ok(freezer::state(&self.fs, &h.job(name))? == "FROZEN"),
            (None, None) => Ok(false),
        }
    }
}
