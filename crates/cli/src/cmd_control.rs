//! `pjw kill|suspend|resume|priority JOB`: requests about one job.

use pjw_proto::{Client, Request, Response};

pub fn run(req: Request) -> anyhow::Result<()> {
    let mut c = Client::connect(&pjw_proto::socket_path())?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    match c.call(&req)? {
        Response::Done { message } => {
            eprintln!("pjw: {message}");
            Ok(())
        }
        Response::Error { message, .. } => anyhow::bail!("{message}"),
        other => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
    }
}
