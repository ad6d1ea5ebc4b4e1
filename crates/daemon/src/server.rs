//! The socket layer: accept, decode, dispatch to the engine, write answers.
//!
//! It never touches state. Each connection is its own task, so a slow or silent client holds
//! up nobody; the first request must arrive within [`FIRST_REQUEST_TIMEOUT`]. A frame that does
//! not decode gets an error answer and the connection is closed.

use std::time::Duration;

use pjw_proto::{
    decode_request, encode_response, ErrorCode, Request, Response, MAX_FRAME, VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::engine::{Control, Cred, Event};

/// How long a new connection may take to send its request.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Accept connections forever.
pub async fn serve(listener: UnixListener, tx: mpsc::UnboundedSender<Event>) {
    let mut next_conn: u64 = 1;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let conn = next_conn;
                next_conn += 1;
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, conn, tx).await {
                        debug!(conn, error = %e, "connection ended with an error");
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
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

async fn write(stream: &mut UnixStream, resp: &Response) -> std::io::Result<()> {
    let payload = encode_response(resp);
    stream
        .write_all(&(payload.len() as u32).to_be_bytes())
        .await?;
    stream.write_all(&payload).await?;
    stream.flush().await
}

async fn handle(
    mut stream: UnixStream,
    conn: u64,
    tx: mpsc::UnboundedSender<Event>,
) -> std::io::Result<()> {
    let cred = stream.peer_cred()?;
    let cred = Cred {
        pid: cred.pid().unwrap_or(0).max(0) as u32,
        uid: cred.uid(),
        gid: cred.gid(),
    };
    let payload = match tokio::time::timeout(FIRST_REQUEST_TIMEOUT, read_frame(&mut stream)).await {
        Err(_) => {
            let _ = write(
                &mut stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: "no request within 10 s".into(),
                },
            )
            .await;
            return Ok(());
        }
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(p))) => p,
        Ok(Err(e)) => {
            let _ = write(
                &mut stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: format!("bad frame: {e}"),
                },
            )
            .await;
            return Ok(());
        }
    };
    let req = match decode_request(&payload) {
        Ok(r) => r,
        Err(e) => {
            debug!(conn, uid = cred.uid, error = %e, "bad request");
            let msg = format!("bad request: {e}");
            let msg: String = msg.chars().take(300).collect();
            return write(
                &mut stream,
                &Response::Error {
                    code: ErrorCode::BadRequest,
                    message: msg,
                },
            )
            .await;
        }
    };
    match req {
        Request::Ping => {
            write(
                &mut stream,
                &Response::Pong {
                    version: VERSION,
                    daemon_pid: std::process::id(),
                },
            )
            .await
        }
        Request::Status => {
            let (rtx, rrx) = oneshot::channel();
            if tx.send(Event::Status { reply: rtx }).is_err() {
                return write(&mut stream, &shutting_down()).await;
            }
            let resp = rrx.await.unwrap_or_else(|_| shutting_down());
            write(&mut stream, &resp).await
        }
        Request::Kill { job } => control(&mut stream, &tx, cred, job, Control::Kill).await,
        Request::Suspend { job } => control(&mut stream, &tx, cred, job, Control::Suspend).await,
        Request::Resume { job } => control(&mut stream, &tx, cred, job, Control::Resume).await,
        Request::Priority { job, priority } => {
            control(&mut stream, &tx, cred, job, Control::Priority(priority)).await
        }
        Request::Report(query) => {
            let (rtx, mut rrx) = mpsc::unbounded_channel();
            if tx
                .send(Event::Report {
                    cred,
                    query,
                    reply: rtx,
                })
                .is_err()
            {
                return write(&mut stream, &shutting_down()).await;
            }
            // Frames until the end (or an error); a client that goes away ends it.
            while let Some(resp) = rrx.recv().await {
                let last = matches!(resp, Response::ReportEnd { .. } | Response::Error { .. });
                write(&mut stream, &resp).await?;
                if last {
                    break;
                }
            }
            Ok(())
        }
        Request::End { job } => control(&mut stream, &tx, cred, job, Control::End).await,
        Request::Run(run) => {
            if cred.pid == 0 {
                return write(&mut stream, &no_pid()).await;
            }
            let (rtx, rrx) = mpsc::unbounded_channel();
            let ev = Event::Submit {
                conn,
                cred,
                req: run,
                reply: rtx,
            };
            wait_for_start(&mut stream, &tx, conn, ev, rrx).await
        }
        Request::Register(reg) => {
            if cred.pid == 0 {
                return write(&mut stream, &no_pid()).await;
            }
            let (rtx, rrx) = mpsc::unbounded_channel();
            let ev = Event::Register {
                conn,
                cred,
                req: reg,
                reply: rtx,
            };
            wait_for_start(&mut stream, &tx, conn, ev, rrx).await
        }
    }
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
    cred: Cred,
    job: String,
    what: Control,
) -> std::io::Result<()> {
    let (rtx, rrx) = oneshot::channel();
    if tx
        .send(Event::Control {
            cred,
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

fn shutting_down() -> Response {
    Response::Error {
        code: ErrorCode::ShuttingDown,
        message: "the pjw daemon is stopping".into(),
    }
}
