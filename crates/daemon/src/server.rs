//! The socket layer: accept, decode, dispatch to the engine, write answers.
//!
//! It never touches state. Each connection is its own task, so a slow or silent client holds
//! up nobody; the first request must arrive within [`FIRST_REQUEST_TIMEOUT`]. A frame that does
//! not decode gets an error answer and the connection is closed.
//!
//! Every local user may connect, so no user may hold what the daemon needs: a user other than
//! root holds at most [`ConnLimits::per_user`] connections, and all of them together at most
//! [`ConnLimits::non_root_total`], so descriptors are always left for root and for the jobs'
//! pidfds and files. A connection over a limit is answered with one error frame and closed at
//! once (counted in the metrics, logged once per user per minute); root is never refused.
//!
//! Nothing a connection asks for is held whole: every frame is written within
//! [`WRITE_TIMEOUT`] or the connection is dropped, and a report is streamed page by page as the
//! client reads it ([`crate::report::LocalReport`]), at most [`REPORTS_PER_USER`] of one user's
//! at a time (the others wait for their turn holding nothing but their connection), and at most
//! [`CENTRAL_REPORTS`] cluster-store reports at a time on the node (one kept for root, at most
//! [`CENTRAL_PER_USER`] of one user's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pjw_proto::{
    decode_request, encode_response, ErrorCode, Request, Response, MAX_FRAME, VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::engine::{Control, Cred, Event};
use crate::users::Resolver;

mod reports;

use reports::report;
pub use reports::{ReportSlots, CENTRAL_PER_USER, CENTRAL_REPORTS, REPORTS_PER_USER};

/// How long a new connection may take to send its request.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one frame may take to be written: a client that does not read its answer for
/// this long is dropped (and what its answer held with it).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Limits on what users other than root may hold open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections of one user.
    pub per_user: usize,
    /// Open connections of all users but root together.
    pub non_root_total: usize,
}

impl ConnLimits {
    /// Limits for a daemon allowed `nofile` descriptors: a quarter of them for users' connections
    /// (the rest: the sampler's open statistics files, pidfds, inotify, the store, root).
    pub fn new(per_user: usize, nofile: u64) -> ConnLimits {
        let quarter = (nofile / 4).min(1 << 20) as usize;
        ConnLimits {
            per_user,
            non_root_total: quarter.max(per_user.min(64)),
        }
    }
}

/// Open connections per uid (root is not counted).
#[derive(Debug, Default)]
struct Open {
    by_uid: HashMap<u32, usize>,
    total: usize,
}

/// One counted connection; dropping it (the connection's task ends) gives the slot back.
#[derive(Debug)]
struct Slot {
    open: Arc<Mutex<Open>>,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = o.by_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                o.by_uid.remove(&self.uid);
            }
        }
        o.total = o.total.saturating_sub(1);
    }
}

/// Take a slot for `uid`, or say which limit it is over. Root needs none.
fn take_slot(
    open: &Arc<Mutex<Open>>,
    uid: u32,
    limits: ConnLimits,
) -> Result<Option<Slot>, String> {
    if uid == 0 {
        return Ok(None);
    }
    let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
    let mine = o.by_uid.get(&uid).copied().unwrap_or(0);
    if mine >= limits.per_user {
        return Err(format!(
            "too many connections: you hold {mine}, this node's limit per user (max_connections_per_user)"
        ));
    }
    if o.total >= limits.non_root_total {
        return Err("the pjw daemon has no connection left for users; try again later".into());
    }
    *o.by_uid.entry(uid).or_insert(0) += 1;
    o.total += 1;
    Ok(Some(Slot {
        open: open.clone(),
        uid,
    }))
}

/// Accept connections forever.
pub async fn serve(
    listener: UnixListener,
    tx: mpsc::UnboundedSender<Event>,
    limits: ConnLimits,
    metrics: Arc<crate::metrics::Metrics>,
    users: Resolver,
) {
    let mut next_conn: u64 = 1;
    let open = Arc::new(Mutex::new(Open::default()));
    let reports = ReportSlots::default();
    // When each refused uid (and accept errors, under u32::MAX) was last logged, and how many
    // refusals since: one line per minute, not one per connection.
    let mut logged: HashMap<u32, (Instant, u64)> = HashMap::new();
    let mut note = |key: u32, what: &dyn Fn(u64)| {
        let now = Instant::now();
        let e = logged
            .entry(key)
            .or_insert((now - Duration::from_secs(3600), 0));
        e.1 += 1;
        if now.duration_since(e.0) >= Duration::from_secs(60) {
            what(e.1);
            *e = (now, 0);
        }
        if logged.len() > 4096 {
            logged.retain(|_, (t, _)| now.duration_since(*t) < Duration::from_secs(60));
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let uid = match stream.peer_cred() {
                    Ok(c) => c.uid(),
                    Err(e) => {
                        debug!(error = %e, "no peer credentials; connection closed");
                        continue;
                    }
                };
                let slot = match take_slot(&open, uid, limits) {
                    Ok(s) => s,
                    Err(msg) => {
                        metrics.connection_refused();
                        note(uid, &|n| {
                            warn!(uid, refused = n, "connections refused: {msg}");
                        });
                        refuse_now(&stream, &msg);
                        continue;
                    }
                };
                let conn = next_conn;
                next_conn += 1;
                let tx = tx.clone();
                let users = users.clone();
                let reports = reports.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = handle(stream, conn, tx, users, reports).await {
                        debug!(conn, error = %e, "connection ended with an error");
                    }
                });
            }
            Err(e) => {
                // Out of descriptors: the limits above keep users from causing it; say so
                // once a minute, not once per try.
                note(u32::MAX, &|n| warn!(error = %e, times = n, "accept failed"));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Write one error frame without waiting (a refused client gets a reason, if its buffer has
/// room) and let the connection close.
fn refuse_now(stream: &UnixStream, msg: &str) {
    let payload = encode_response(&Response::Error {
        code: ErrorCode::Denied,
        message: msg.to_string(),
    });
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    let _ = stream.try_write(&frame);
}

async fn read_frame(stream: &mut UnixStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes is over the limit"),
        ));
    }
    let mut buf = vec![0u8; n];
    stream.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Write one frame within [`WRITE_TIMEOUT`]; a client that does not take it meanwhile is an
/// error (the connection ends).
async fn write(stream: &mut UnixStream, resp: &Response) -> std::io::Result<()> {
    let mut payload = encode_response(resp);
    if payload.len() > MAX_FRAME {
        payload = encode_response(&within_frame(resp, payload.len()));
    }
    let frame = async {
        stream
            .write_all(&(payload.len() as u32).to_be_bytes())
            .await?;
        stream.write_all(&payload).await?;
        stream.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, frame).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the client did not read its answer within {} s",
                WRITE_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// An answer over the frame every client refuses (review F2: many users' steps and queued
/// jobs made `status` fail for everyone, the Slurm task prolog among them): `status` cut to
/// fit, saying what it left out; any other answer a clear error instead of a frame no client
/// reads.
fn within_frame(resp: &Response, bytes: usize) -> Response {
    match resp {
        Response::Status(s) => {
            let mut s = s.clone();
            s.cut_to_fit(|s| encode_response(&Response::Status(s.clone())).len() <= MAX_FRAME);
            warn!(bytes, cut = ?s.cut, "status answer over the frame: cut to fit");
            Response::Status(s)
        }
        _ => {
            warn!(bytes, "answer over the frame: an error instead");
            Response::Error {
                code: ErrorCode::Invalid,
                message: format!(
                    "the answer is {bytes} bytes, more than the protocol's frame of {MAX_FRAME}: ask for less"
                ),
            }
        }
    }
}

async fn handle(
    mut stream: UnixStream,
    conn: u64,
    tx: mpsc::UnboundedSender<Event>,
    users: Resolver,
    reports: ReportSlots,
) -> std::io::Result<()> {
    let cred = stream.peer_cred()?;
    let cred = Cred {
        pid: cred.pid().unwrap_or(0).max(0) as u32,
        uid: cred.uid(),
        gid: cred.gid(),
    };
    let Some(req) = read_request(&mut stream, conn, cred).await? else {
        return Ok(());
    };
    dispatch(&mut stream, conn, cred, req, &tx, &users, &reports).await
}

/// The connection's one request, within [`FIRST_REQUEST_TIMEOUT`]. None: there is none (the
/// client left, or was told why its frame or request is bad).
async fn read_request(
    stream: &mut UnixStream,
    conn: u64,
    cred: Cred,
) -> std::io::Result<Option<Request>> {
    let payload = match tokio::time::timeout(FIRST_REQUEST_TIMEOUT, read_frame(stream)).await {
        Err(_) => {
            let _ = write(
                stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: "no request within 10 s".into(),
                },
            )
            .await;
            return Ok(None);
        }
        Ok(Ok(None)) => return Ok(None),
        Ok(Ok(Some(p))) => p,
        Ok(Err(e)) => {
            let _ = write(
                stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: format!("bad frame: {e}"),
                },
            )
            .await;
            return Ok(None);
        }
    };
    let req = match decode_request(&payload) {
        Ok(r) => r,
        Err(e) => {
            debug!(conn, uid = cred.uid, error = %e, "bad request");
            let msg = format!("bad request: {e}");
            let msg: String = msg.chars().take(300).collect();
            write(
                stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: msg,
                },
            )
            .await?;
            return Ok(None);
        }
    };
    Ok(Some(req))
}

/// Answer a request: hand it to the engine (after a user lookup where it names one) and relay
/// the answers.
async fn dispatch(
    stream: &mut UnixStream,
    conn: u64,
    cred: Cred,
    req: Request,
    tx: &mpsc::UnboundedSender<Event>,
    users: &Resolver,
    reports: &ReportSlots,
) -> std::io::Result<()> {
    match req {
        Request::Ping => {
            write(
                stream,
                &Response::Pong {
                    version: VERSION,
                    daemon_pid: std::process::id(),
                },
            )
            .await
        }
        Request::Status => ask(stream, tx, |reply| Event::Status { reply }).await,
        Request::Kill { job } => control(stream, tx, users, cred, job, Control::Kill).await,
        Request::Suspend { job } => control(stream, tx, users, cred, job, Control::Suspend).await,
        Request::Resume { job } => control(stream, tx, users, cred, job, Control::Resume).await,
        Request::Priority { job, priority } => {
            control(stream, tx, users, cred, job, Control::Priority(priority)).await
        }
        Request::Report(query) => report(stream, tx, users, cred, query, reports).await,
        Request::End { job } => control(stream, tx, users, cred, job, Control::End).await,
        Request::Login(login) => {
            if cred.pid == 0 {
                return write(stream, &no_pid()).await;
            }
            let who = match users.who(&cred, Some(&login.user)).await {
                Ok(w) => w,
                Err(msg) => return write(stream, &lookup_failed(msg)).await,
            };
            ask(stream, tx, |reply| Event::Login {
                cred,
                who,
                req: login,
                reply,
            })
            .await
        }
        Request::Outcome { job } => {
            ask(stream, tx, |reply| Event::Outcome { cred, job, reply }).await
        }
        Request::Run(run) => {
            if cred.pid == 0 {
                return write(stream, &no_pid()).await;
            }
            let who = match users.who(&cred, run.user.as_deref()).await {
                Ok(w) => w,
                Err(msg) => return write(stream, &lookup_failed(msg)).await,
            };
            let (rtx, rrx) = mpsc::unbounded_channel();
            let ev = Event::Submit {
                conn,
                cred,
                who,
                req: run,
                reply: rtx,
            };
            wait_for_start(stream, tx, conn, ev, rrx).await
        }
        Request::SlurmTask(req) => {
            if cred.pid == 0 {
                return write(stream, &no_pid()).await;
            }
            ask(stream, tx, |reply| Event::SlurmTask { cred, req, reply }).await
        }
        Request::Register(reg) => {
            if cred.pid == 0 {
                return write(stream, &no_pid()).await;
            }
            let who = match users.who(&cred, Some(&reg.user)).await {
                Ok(w) => w,
                Err(msg) => return write(stream, &lookup_failed(msg)).await,
            };
            let (rtx, rrx) = mpsc::unbounded_channel();
            let ev = Event::Register {
                conn,
                cred,
                who,
                req: reg,
                reply: rtx,
            };
            wait_for_start(stream, tx, conn, ev, rrx).await
        }
    }
}

/// Hand the engine an event that answers once, and write its answer (or that the daemon is
/// shutting down).
async fn ask(
    stream: &mut UnixStream,
    tx: &mpsc::UnboundedSender<Event>,
    event: impl FnOnce(oneshot::Sender<Response>) -> Event,
) -> std::io::Result<()> {
    let (rtx, rrx) = oneshot::channel();
    if tx.send(event(rtx)).is_err() {
        return write(stream, &shutting_down()).await;
    }
    let resp = rrx.await.unwrap_or_else(|_| shutting_down());
    write(stream, &resp).await
}

fn no_pid() -> Response {
    Response::Error {
        code: ErrorCode::Denied,
        message: "cannot identify the calling process".into(),
    }
}

/// Hand a `run` or `register` to the engine and relay its answers (`Queued`, then `Started`
/// or an error) until the last one; a client that goes away while waiting leaves the queue.
async fn wait_for_start(
    stream: &mut UnixStream,
    tx: &mpsc::UnboundedSender<Event>,
    conn: u64,
    ev: Event,
    mut rrx: mpsc::UnboundedReceiver<Response>,
) -> std::io::Result<()> {
    if tx.send(ev).is_err() {
        return write(stream, &shutting_down()).await;
    }
    let mut scratch = [0u8; 256];
    loop {
        tokio::select! {
            resp = rrx.recv() => {
                let Some(resp) = resp else {
                    let _ = write(stream, &shutting_down()).await;
                    break;
                };
                let last = !matches!(resp, Response::Queued { .. });
                if write(stream, &resp).await.is_err() {
                    let _ = tx.send(Event::ClientGone { conn });
                    break;
                }
                if last {
                    break;
                }
            }
            n = stream.read(&mut scratch) => {
                // The client says nothing more after its request: EOF or an error
                // means it is gone (Ctrl-C while queued).
                if matches!(n, Ok(0) | Err(_)) {
                    let _ = tx.send(Event::ClientGone { conn });
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Pass a request about one job to the engine and write its answer.
async fn control(
    stream: &mut UnixStream,
    tx: &mpsc::UnboundedSender<Event>,
    users: &Resolver,
    cred: Cred,
    job: String,
    what: Control,
) -> std::io::Result<()> {
    let who = match users.who(&cred, None).await {
        Ok(w) => w,
        Err(msg) => return write(stream, &lookup_failed(msg)).await,
    };
    let (rtx, rrx) = oneshot::channel();
    if tx
        .send(Event::Control {
            cred,
            who,
            job,
            what,
            reply: rtx,
        })
        .is_err()
    {
        return write(stream, &shutting_down()).await;
    }
    let resp = rrx.await.unwrap_or_else(|_| shutting_down());
    write(stream, &resp).await
}

/// The user database did not answer for this request (the others are served meanwhile).
fn lookup_failed(msg: String) -> Response {
    Response::Error {
        code: ErrorCode::Internal,
        message: msg,
    }
}

fn shutting_down() -> Response {
    Response::Error {
        code: ErrorCode::ShuttingDown,
        message: "the pjw daemon is stopping".into(),
    }
}

#[cfg(test)]
mod tests;
