//! The binder's thread: passes, births and profile ticks from the engine, off its thread.

use std::sync::mpsc;
use std::time::Instant;

use pjw_core::Topology;

use super::threads::{self, ThreadProfiler};
use super::{Balancer, BindJob, BindPort, Born, PassReport, ProfileTick};

/// What the engine sends the binder's thread.
#[derive(Debug)]
pub enum BindMsg {
    /// A balancing pass over these jobs.
    Pass(Vec<BindJob>),
    /// Threads just born in jobs that bind.
    Born(Vec<Born>),
    /// A sampler tick: profile the jobs' top threads.
    Profile(ProfileTick),
}

/// The binder's thread: the engine sends it job snapshots; it runs a pass for each.
#[derive(Debug)]
pub struct Binder {
    tx: mpsc::Sender<BindMsg>,
}

impl Binder {
    /// Start the thread balancing through `port`.
    pub fn spawn(port: impl BindPort + Sync + 'static, topo: Topology) -> std::io::Result<Binder> {
        let (tx, rx) = mpsc::channel::<BindMsg>();
        std::thread::Builder::new()
            .name("pjw-bind".into())
            .spawn(move || {
                let mut b = Balancer::new(topo);
                let mut prof = ThreadProfiler::default();
                while let Ok(msg) = rx.recv() {
                    match msg {
                        BindMsg::Pass(mut jobs) => {
                            // Passes that queued up while one ran: only the newest counts.
                            let mut born = Vec::new();
                            let mut ticks = Vec::new();
                            while let Ok(more) = rx.try_recv() {
                                match more {
                                    BindMsg::Pass(newer) => jobs = newer,
                                    BindMsg::Born(b) => born.extend(b),
                                    BindMsg::Profile(t) => ticks.push(t),
                                }
                            }
                            // What the pass reads is kept for the thread profile that follows.
                            let rec = threads::Recorder::new(&port);
                            let at = Instant::now();
                            b.pass(&rec, &jobs, at);
                            prof.remember(rec.take(), at);
                            for t in ticks {
                                prof.tick(&port, t, &|j, tid| b.pin_of(j, tid));
                            }
                            // Births queued behind the pass: a process the pass listed first
                            // waits for its fork event (the forking thread decides whether it
                            // was born on a pin of pjw's, at the fork's time: pins the pass
                            // just changed are remembered with theirs), so the order is safe;
                            // placed before the pass, a thread would be measured over the
                            // microseconds between them and taken for busy.
                            let mut r = PassReport::default();
                            for t in &born {
                                b.place_born(&port, t, Instant::now(), &mut r);
                            }
                        }
                        BindMsg::Born(born) => {
                            let mut r = PassReport::default();
                            for t in &born {
                                b.place_born(&port, t, Instant::now(), &mut r);
                            }
                        }
                        BindMsg::Profile(t) => prof.tick(&port, t, &|j, tid| b.pin_of(j, tid)),
                    }
                }
            })?;
        Ok(Binder { tx })
    }

    /// A sender that only collects the snapshots (engine tests).
    #[cfg(test)]
    pub fn collecting() -> (Binder, mpsc::Receiver<BindMsg>) {
        let (tx, rx) = mpsc::channel();
        (Binder { tx }, rx)
    }

    /// Queue a pass over `jobs`; never blocks.
    pub fn send(&self, jobs: Vec<BindJob>) {
        let _ = self.tx.send(BindMsg::Pass(jobs));
    }

    /// Queue a thread profile tick; never blocks.
    pub fn profile(&self, tick: ProfileTick) {
        let _ = self.tx.send(BindMsg::Profile(tick));
    }

    /// Queue the placement of threads just born; never blocks.
    pub fn born(&self, born: Vec<Born>) {
        let _ = self.tx.send(BindMsg::Born(born));
    }
}
