//! The shipper thread: local spool → PostgreSQL over a connection opened for each pass and
//! closed after it (decisions (bv)).

use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pjw_store::Store;
use tracing::{debug, info, warn};

use crate::schema::MAINTAIN_EVERY_MS;
use crate::{CentralError, Endpoint, Retention};

/// How the shipper works (`[central]`).
#[derive(Clone, Debug, PartialEq)]
pub struct ShipConfig {
    pub url: String,
    /// The password, kept apart from the URL (`[central] password_file`).
    pub password: Option<String>,
    /// Also send the samples of running jobs, every `retry` (finished jobs always go with their
    /// series).
    pub ship_samples: bool,
    /// Jobs per transaction.
    pub batch_size: usize,
    /// Wait before trying again after PostgreSQL was unreachable; with `ship_samples`, also the
    /// time between shipments of live samples. Each wait is spread by ±25 % so that nodes
    /// started together do not come together.
    pub retry: Duration,
    /// This node's name (logs, and `application_name` `pjw/<node>` in `pg_stat_activity`).
    pub node: String,
    /// How long the central store keeps rows.
    pub retention: Retention,
}

/// A number in [0, 1) from the standard library's randomly keyed hasher.
fn unit_random() -> f64 {
    let x = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `d` spread by ±`spread`/2 (a fraction of it).
fn jitter(d: Duration, spread: f64) -> Duration {
    d.mul_f64(1.0 - spread / 2.0 + spread * unit_random())
}

enum Msg {
    Wake,
    Stop,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Wake => "wake",
            Msg::Stop => "stop",
        })
    }
}

/// The shipper thread. Dropping it tells the thread to stop; [`Shipper::stop`] also waits.
#[derive(Debug)]
pub struct Shipper {
    tx: mpsc::Sender<Msg>,
    handle: Option<JoinHandle<()>>,
}

impl Shipper {
    /// Start shipping from the SQLite database at `db` (opened on the thread, with its own
    /// connection). It ships what is already spooled at once.
    pub fn spawn(db: PathBuf, cfg: ShipConfig) -> std::io::Result<Shipper> {
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("pjw-central".into())
            .spawn(move || run(db, cfg, rx))?;
        Ok(Shipper {
            tx,
            handle: Some(handle),
        })
    }

    /// A job has finished: ship it (cheap; never blocks).
    pub fn wake(&self) {
        let _ = self.tx.send(Msg::Wake);
    }

    /// Stop the thread and wait for it (after the batch in flight, which may wait on a
    /// connection timeout).
    pub fn stop(mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                warn!("the central-store shipper thread panicked");
            }
        }
    }
}

impl Drop for Shipper {
    /// Tell the thread to stop, without waiting: a daemon that exits must not hang on a
    /// PostgreSQL that does not answer. A batch cut off is rolled back by PostgreSQL and stays
    /// unshipped locally, so it is sent again later.
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

/// What the thread keeps between passes (no connection: each pass opens its own).
struct State {
    cfg: ShipConfig,
    store: Option<Store>,
    endpoint: Option<Endpoint>,
    next_maintain: Instant,
}

impl State {
    /// One pass: connect, maintain when due, ship the spool (and live samples), disconnect.
    fn pass(&mut self, db: &Path) -> Result<usize, CentralError> {
        if self.store.is_none() {
            self.store = Some(Store::open_file(db)?);
        }
        if self.endpoint.is_none() {
            let mut ep = Endpoint::new(&self.cfg.url, self.cfg.password.as_deref())?;
            ep.set_application_name(&format!("pjw/{}", self.cfg.node));
            if !ep.tls_mode().verifies() && !ep.is_local() {
                warn!(target = %ep.target(), sslmode = ep.tls_mode().as_str(),
                    "central store: the server's certificate is not verified (set sslmode=verify-full and sslrootcert in central.url)");
            }
            self.endpoint = Some(ep);
        }
        let (Some(store), Some(ep)) = (self.store.as_mut(), self.endpoint.as_ref()) else {
            return Ok(0);
        };
        let maintain = Instant::now() >= self.next_maintain;
        let live = self.cfg.ship_samples.then_some(self.cfg.node.as_str());
        let p = crate::pass(
            ep,
            &self.cfg.retention,
            store,
            self.cfg.batch_size,
            live,
            maintain,
        )?;
        if let Some(m) = p.maintained {
            if m.ran {
                info!(created = m.created, dropped = ?m.dropped, "central store maintained (partitions ahead, retention)");
            }
            self.next_maintain =
                Instant::now() + jitter(Duration::from_millis(MAINTAIN_EVERY_MS as u64), 0.5);
        }
        if live.is_some() {
            debug!(samples = p.live_samples, "live samples shipped");
        }
        let n = p.jobs;
        Ok(n)
    }
}

fn run(db: PathBuf, cfg: ShipConfig, rx: mpsc::Receiver<Msg>) {
    let target = crate::target_of(&cfg.url);
    let mut st = State {
        cfg,
        store: None,
        endpoint: None,
        next_maintain: Instant::now(),
    };
    let mut down_since: Option<Instant> = None;
    // Live samples: the first pass at a random point of the first period.
    let mut next_live = Instant::now() + st.cfg.retry.mul_f64(unit_random());
    loop {
        let pass = st.pass(&db);
        match pass {
            Ok(n) => {
                if let Some(t) = down_since.take() {
                    info!(target = %target, node = %st.cfg.node, jobs = n, down_secs = t.elapsed().as_secs(),
                        "central store reachable again; spooled jobs shipped");
                } else if n > 0 {
                    debug!(jobs = n, "jobs shipped to the central store");
                }
            }
            Err(e) => {
                let why = if e.is_connection_limit() {
                    "central store at its connection limit; finished jobs stay spooled in the local store"
                } else {
                    "central store unreachable; finished jobs stay spooled in the local store"
                };
                if down_since.is_none() {
                    warn!(target = %target, node = %st.cfg.node, error = %e, retry_secs = st.cfg.retry.as_secs_f64(), "{why}");
                    down_since = Some(Instant::now());
                } else {
                    debug!(error = %e, "central store still unreachable");
                }
                if matches!(e, CentralError::Url(_) | CentralError::Tls(_)) {
                    // The CA file may be fixed meanwhile: read it again next time.
                    st.endpoint = None;
                }
            }
        }
        let now = Instant::now();
        if st.cfg.ship_samples && next_live <= now {
            next_live = now + jitter(st.cfg.retry, 0.5);
        }
        let mut wait = st.next_maintain.saturating_duration_since(now);
        if down_since.is_some() {
            wait = wait.min(jitter(st.cfg.retry, 0.5));
        }
        if st.cfg.ship_samples {
            wait = wait.min(next_live.saturating_duration_since(now));
        }
        match rx.recv_timeout(wait) {
            Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {
                // Several jobs ending together: one pass ships them all.
                while let Ok(m) = rx.try_recv() {
                    if matches!(m, Msg::Stop) {
                        return;
                    }
                }
            }
            Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_spread() {
        let d = Duration::from_secs(60);
        for _ in 0..1000 {
            let j = jitter(d, 0.5);
            assert!(
                j >= Duration::from_secs(45) && j <= Duration::from_secs(75),
                "{j:?}"
            );
        }
        let r: Vec<f64> = (0..100).map(|_| unit_random()).collect();
        assert!(r.iter().all(|x| (0.0..1.0).contains(x)));
        assert!(r.iter().any(|x| *x != r[0]), "not random: {r:?}");
    }
}
