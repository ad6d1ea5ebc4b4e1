//! Reports on the socket: each user's turns (and the cluster store's), and a report's frames
//! streamed as the client reads them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pjw_proto::{ErrorCode, Response};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::engine::{Cred, Event};
use crate::report::ReportAnswer;
use crate::users::Resolver;

use super::{lookup_failed, shutting_down, write};

/// Reports of one user (other than root) read at a time; the user's further reports wait.
pub const REPORTS_PER_USER: usize = 4;

/// Reports from the cluster store read at a time on this node (each holds a PostgreSQL
/// connection, a thread and its answer): one of them kept for root, the others shared by users,
/// [`CENTRAL_PER_USER`] of them at most per user.
pub const CENTRAL_REPORTS: usize = 4;

/// Cluster-store reports of one user (other than root) at a time (issue 25, N7: one user's 4
/// slow-read central reports held every slot, root's too).
pub const CENTRAL_PER_USER: usize = 1;

/// Per-uid semaphores of `permits` each.
type PerUid = Arc<Mutex<HashMap<u32, Arc<Semaphore>>>>;

/// Turns for reports: per user, and for the cluster store.
#[derive(Clone, Debug)]
pub struct ReportSlots {
    by_uid: PerUid,
    central_by_uid: PerUid,
    central: Arc<Semaphore>,
    central_root: Arc<Semaphore>,
}

impl Default for ReportSlots {
    fn default() -> Self {
        ReportSlots {
            by_uid: Arc::default(),
            central_by_uid: Arc::default(),
            central: Arc::new(Semaphore::new(CENTRAL_REPORTS - 1)),
            central_root: Arc::new(Semaphore::new(1)),
        }
    }
}

/// `uid`'s semaphore of `permits` in `m`, made when it has none.
fn of_uid(m: &PerUid, uid: u32, permits: usize) -> Arc<Semaphore> {
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    // Users with no report under way or waiting hold no entry.
    m.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < permits);
    m.entry(uid)
        .or_insert_with(|| Arc::new(Semaphore::new(permits)))
        .clone()
}

impl ReportSlots {
    /// Wait for one of `uid`'s turns (root needs none).
    async fn user(&self, uid: u32) -> Option<OwnedSemaphorePermit> {
        if uid == 0 {
            return None;
        }
        of_uid(&self.by_uid, uid, REPORTS_PER_USER)
            .acquire_owned()
            .await
            .ok()
    }

    /// Wait for a cluster-store report's turn: root's own slot for root; for a user, first
    /// their own turn (one at a time), then one of the slots users share.
    pub(super) async fn central(&self, uid: u32) -> Vec<OwnedSemaphorePermit> {
        if uid == 0 {
            return self
                .central_root
                .clone()
                .acquire_owned()
                .await
                .into_iter()
                .collect();
        }
        let mut held = Vec::new();
        held.extend(
            of_uid(&self.central_by_uid, uid, CENTRAL_PER_USER)
                .acquire_owned()
                .await
                .ok(),
        );
        held.extend(self.central.clone().acquire_owned().await.ok());
        held
    }
}

/// Stream a report's frames as the client reads them: a local one page by page (each read on
/// a blocking thread, the next only once the last is written), a central one frame by frame
/// from its thread. Waits first for one of the caller's report turns.
async fn stream_report(
    stream: &mut UnixStream,
    answer: ReportAnswer,
    uid: u32,
    slots: &ReportSlots,
) -> std::io::Result<()> {
    match answer {
        ReportAnswer::Refused(r) => write(stream, &r).await,
        ReportAnswer::Local(mut rep) => {
            let _turn = slots.user(uid).await;
            loop {
                let (back, frames) = match tokio::task::spawn_blocking(move || {
                    let f = rep.next_frames();
                    (rep, f)
                })
                .await
                {
                    Ok(x) => x,
                    Err(e) => {
                        let failed = Response::Error {
                            code: ErrorCode::Internal,
                            message: format!("the report failed: {e}"),
                        };
                        return write(stream, &failed).await;
                    }
                };
                rep = back;
                for f in &frames {
                    write(stream, f).await?;
                }
                if frames.is_empty() || rep.done() {
                    return Ok(());
                }
            }
        }
        ReportAnswer::Central(c) => {
            let _turn = slots.user(uid).await;
            let _central = slots.central(uid).await;
            let mut rx = c.start();
            while let Some(resp) = rx.recv().await {
                let last = matches!(resp, Response::ReportEnd { .. } | Response::Error { .. });
                write(stream, &resp).await?;
                if last {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// A `report`: a user named by name is looked up here; the engine answers with frames until
/// the end (or an error), streamed to the client.
pub(super) async fn report(
    stream: &mut UnixStream,
    tx: &mpsc::UnboundedSender<Event>,
    users: &Resolver,
    cred: Cred,
    query: pjw_proto::ReportQuery,
    reports: &ReportSlots,
) -> std::io::Result<()> {
    // A user named by name is looked up here; by number it needs no lookup.
    let named = query.user.as_deref().filter(|u| u.parse::<u32>().is_err());
    let who = match users.who(&cred, named).await {
        Ok(w) => w,
        Err(msg) => return write(stream, &lookup_failed(msg)).await,
    };
    let (rtx, rrx) = oneshot::channel();
    if tx
        .send(Event::Report {
            cred,
            who,
            query,
            reply: rtx,
        })
        .is_err()
    {
        return write(stream, &shutting_down()).await;
    }
    // Frames until the end (or an error); a client that goes away, or does not read
    // within the write timeout, ends it.
    match rrx.await {
        Ok(answer) => stream_report(stream, answer, cred.uid, reports).await,
        Err(_) => write(stream, &shutting_down()).await,
    }
}
