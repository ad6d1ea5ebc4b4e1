//! The metrics endpoint's HTTP: a minimal HTTP/1.1 responder (one request per connection),
//! routing a request head, and serving scrapes off the engine thread.
//!
//! The endpoint takes no part of the daemon's descriptors beyond [`MAX_CONNECTIONS`]: a
//! connection is accepted only when one of that many slots is free, so the rest wait in the
//! kernel's listen backlog (bounded by the kernel, holding none of the daemon's descriptors),
//! and each is served within [`READ_TIMEOUT`] to read its request and [`WRITE_TIMEOUT`] to
//! take its answer, or dropped. A flood of connections can delay scrapes (the endpoint has no
//! authentication: bind it to loopback or a management network) but never starve the daemon
//! of descriptors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pjw_cgroup::Driver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::{render, to_classic, Metrics};
use crate::engine::Event;

/// Longest request head accepted.
const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read its answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Metrics connections the daemon holds at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Whether the request head asks for OpenMetrics (`Accept: application/openmetrics-text`).
pub fn wants_openmetrics(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    })
}

/// Bind the metrics listener (at startup, so a bad address fails the start).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serve scrapes forever.
pub async fn serve(
    listener: TcpListener,
    tx: mpsc::UnboundedSender<Event>,
    metrics: Arc<Metrics>,
    driver: Arc<Driver>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A free slot first: beyond the cap, connections wait in the kernel's backlog.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, peer)) => {
                let tx = tx.clone();
                let metrics = metrics.clone();
                let driver = driver.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = handle(stream, tx, metrics, driver).await {
                        debug!(%peer, error = %e, "metrics connection ended with an error");
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Metrics,
    NotFound,
    MethodNotAllowed,
    Bad,
}

/// Route a request head (the bytes up to the blank line).
pub fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::Bad;
    };
    let Some(line) = text.split("\r\n").next() else {
        return Route::Bad;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() {
        return Route::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Route::MethodNotAllowed;
    }
    let path = target.split('?').next().unwrap_or(target);
    match path {
        "/metrics" | "/" => Route::Metrics,
        _ => Route::NotFound,
    }
}

/// Read the request head: `Ok(None)` when the client sent too much or closed early.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        if !head_only {
            stream.write_all(body.as_bytes()).await?;
        }
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, answer)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read its answer",
            ))
        })
}

async fn handle(
    mut stream: TcpStream,
    tx: mpsc::UnboundedSender<Event>,
    metrics: Arc<Metrics>,
    driver: Arc<Driver>,
) -> std::io::Result<()> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) => {
            return respond(&mut stream, "400 Bad Request", TEXT, "bad request\n", false).await
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return respond(&mut stream, "408 Request Timeout", TEXT, "timeout\n", false).await
        }
    };
    let head_only = head.starts_with(b"HEAD ");
    match route(&head) {
        Route::Bad => respond(&mut stream, "400 Bad Request", TEXT, "bad request\n", false).await,
        Route::NotFound => {
            respond(
                &mut stream,
                "404 Not Found",
                TEXT,
                "not found; try /metrics\n",
                head_only,
            )
            .await
        }
        Route::MethodNotAllowed => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                TEXT,
                "only GET\n",
                false,
            )
            .await
        }
        Route::Metrics => {
            let (rtx, rrx) = oneshot::channel();
            let snap = if tx.send(Event::Metrics { reply: rtx }).is_ok() {
                rrx.await.ok()
            } else {
                None
            };
            let Some(snap) = snap else {
                return respond(
                    &mut stream,
                    "503 Service Unavailable",
                    TEXT,
                    "the pjw daemon is stopping\n",
                    false,
                )
                .await;
            };
            let open = wants_openmetrics(&head);
            let body = tokio::task::spawn_blocking(move || {
                let page = render(&snap, &metrics, Some(&driver));
                if open {
                    page
                } else {
                    to_classic(&page)
                }
            })
            .await;
            let ctype = if open {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            match body {
                Ok(body) => respond(&mut stream, "200 OK", ctype, &body, head_only).await,
                Err(e) => {
                    warn!(error = %e, "metrics rendering failed");
                    respond(
                        &mut stream,
                        "500 Internal Server Error",
                        TEXT,
                        "internal error\n",
                        false,
                    )
                    .await
                }
            }
        }
    }
}
