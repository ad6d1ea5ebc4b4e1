//! How messages travel: length-prefixed JSON frames on a Unix stream socket, and the blocking
//! client.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Request, RequestFrame, Response, DEFAULT_SOCKET, MAX_FRAME, VERSION};

/// Errors of the transport and client.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("cannot connect to the pjw daemon at {path}: {source} (is `pjw daemon` running? PJW_SOCKET selects another socket)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("connection to the pjw daemon failed: {0}")]
    Io(#[from] io::Error),
    #[error("the pjw daemon closed the connection")]
    Closed,
    #[error("frame of {0} bytes is larger than the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Decode(String),
}

/// Write one frame.
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8]) -> Result<(), ProtoError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtoError::TooLarge(payload.len()));
    }
    let len = (payload.len() as u32).to_be_bytes();
    w.write_all(&len)?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Read one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(ProtoError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(ProtoError::TooLarge(n));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ProtoError::Closed
        } else {
            e.into()
        }
    })?;
    Ok(Some(buf))
}

/// Decode a request frame's payload.
pub fn decode_request(payload: &[u8]) -> Result<Request, ProtoError> {
    let f: RequestFrame =
        serde_json::from_slice(payload).map_err(|e| ProtoError::Decode(e.to_string()))?;
    if f.v != VERSION {
        return Err(ProtoError::Decode(format!(
            "protocol version {} is not supported (this daemon speaks {VERSION})",
            f.v
        )));
    }
    Ok(f.req)
}

/// Encode a request into a frame payload.
pub fn encode_request(req: &Request) -> Vec<u8> {
    // Serialising these plain types cannot fail.
    serde_json::to_vec(&RequestFrame {
        v: VERSION,
        req: req.clone(),
    })
    .unwrap_or_default()
}

/// Encode a response into a frame payload.
pub fn encode_response(resp: &Response) -> Vec<u8> {
    serde_json::to_vec(resp).unwrap_or_default()
}

/// Decode a response payload.
pub fn decode_response(payload: &[u8]) -> Result<Response, ProtoError> {
    serde_json::from_slice(payload).map_err(|e| ProtoError::Decode(e.to_string()))
}

/// The socket path clients use: `PJW_SOCKET` if set, else [`DEFAULT_SOCKET`].
pub fn socket_path() -> PathBuf {
    std::env::var_os("PJW_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// A blocking client connection (the CLI is single-threaded on purpose: the daemon moves the
/// whole client process into a job's cgroups).
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    /// The daemon's refusal, read when sending failed because it had closed the connection.
    refusal: Option<Response>,
}

impl Client {
    /// Connect to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Client, ProtoError> {
        let stream = UnixStream::connect(path).map_err(|source| ProtoError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client {
            stream,
            refusal: None,
        })
    }

    /// Limit how long a read may wait (None = forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), ProtoError> {
        self.stream.set_read_timeout(t)?;
        Ok(())
    }

    /// Send a request. A daemon that refused the connection (a user over their limit) wrote
    /// one error frame and closed it: then sending fails, and that frame is what
    /// [`Client::recv`] returns, so the user reads the daemon's reason, not "broken pipe".
    pub fn send(&mut self, req: &Request) -> Result<(), ProtoError> {
        match write_frame(&mut self.stream, &encode_request(req)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = self.stream.set_read_timeout(Some(Duration::from_secs(1)));
                match read_frame(&mut self.stream)
                    .ok()
                    .flatten()
                    .map(|p| decode_response(&p))
                {
                    Some(Ok(r @ Response::Error { .. })) => {
                        self.refusal = Some(r);
                        Ok(())
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Wait for the next response.
    pub fn recv(&mut self) -> Result<Response, ProtoError> {
        if let Some(r) = self.refusal.take() {
            return Ok(r);
        }
        match read_frame(&mut self.stream)? {
            Some(p) => decode_response(&p),
            None => Err(ProtoError::Closed),
        }
    }

    /// Send a request and wait for one response.
    pub fn call(&mut self, req: &Request) -> Result<Response, ProtoError> {
        self.send(req)?;
        self.recv()
    }
}
