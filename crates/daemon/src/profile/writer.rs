//! The profile store writer: a thread with its own SQLite connection, fed through a channel.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use pjw_store::{ProcessSample, Sample, Store, ThreadSample};
use tracing::{debug, warn};

/// What the writer thread does.
#[derive(Debug)]
pub enum WriteOp {
    Samples(Vec<Sample>),
    Processes(Vec<ProcessSample>),
    /// The top threads of jobs (from the binder's thread).
    Threads(Vec<ThreadSample>),
    /// Apply retention and the size cap.
    Retention {
        now_ms: i64,
        max_age_ms: Option<i64>,
        max_bytes: Option<u64>,
        keep_unshipped: bool,
    },
}

/// The store writer: a thread with its own connection to the database, fed through a channel.
/// Sending never blocks; failed writes are logged and counted ([`Writer::errors`]).
#[derive(Debug, Clone)]
pub struct Writer {
    tx: mpsc::Sender<WriteOp>,
    errors: Arc<AtomicU64>,
}

impl Writer {
    /// Open a second connection to `db` and start the thread.
    pub fn spawn(db: PathBuf) -> Result<Writer, pjw_store::StoreError> {
        let mut store = Store::open_file(&db)?;
        let (tx, rx) = mpsc::channel::<WriteOp>();
        let errors = Arc::new(AtomicU64::new(0));
        let errs = errors.clone();
        let spawned = std::thread::Builder::new()
            .name("pjw-store-writer".into())
            .spawn(move || {
                while let Ok(op) = rx.recv() {
                    // Everything already queued goes in the same transaction.
                    let mut samples = Vec::new();
                    let mut procs = Vec::new();
                    let mut threads = Vec::new();
                    let mut other = Vec::new();
                    for op in std::iter::once(op).chain(rx.try_iter()) {
                        match op {
                            WriteOp::Samples(s) => samples.extend(s),
                            WriteOp::Processes(p) => procs.extend(p),
                            WriteOp::Threads(t) => threads.extend(t),
                            o => other.push(o),
                        }
                    }
                    let fail = |what: &str, e: pjw_store::StoreError| {
                        errs.fetch_add(1, Ordering::Relaxed);
                        warn!(what, error = %e, "profile store write failed");
                    };
                    if let Err(e) = store.insert_samples(&samples) {
                        fail("samples", e);
                    }
                    if let Err(e) = store.insert_process_samples(&procs) {
                        fail("processes", e);
                    }
                    if let Err(e) = store.insert_thread_samples(&threads) {
                        fail("threads", e);
                    }
                    for o in other {
                        if let WriteOp::Retention {
                            now_ms,
                            max_age_ms,
                            max_bytes,
                            keep_unshipped,
                        } = o
                        {
                            match store.apply_retention(
                                now_ms,
                                max_age_ms,
                                max_bytes,
                                keep_unshipped,
                            ) {
                                Ok(p) if p.jobs > 0 || p.samples > 0 => {
                                    debug!(jobs = p.jobs, samples = p.samples, "retention applied")
                                }
                                Ok(_) => {}
                                Err(e) => fail("retention", e),
                            }
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the profile writer thread; samples are not stored");
        }
        Ok(Writer { tx, errors })
    }

    /// A writer whose operations land in the returned receiver (tests).
    #[cfg(test)]
    pub fn collecting() -> (Writer, mpsc::Receiver<WriteOp>) {
        let (tx, rx) = mpsc::channel();
        (
            Writer {
                tx,
                errors: Arc::new(AtomicU64::new(0)),
            },
            rx,
        )
    }

    /// Queue a write (never blocks).
    pub fn send(&self, op: WriteOp) {
        if self.tx.send(op).is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Failed writes so far (for metrics).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}
