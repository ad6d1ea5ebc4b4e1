//! `pjw kill JOB`

use pjw_proto::{Client, Request, Response};

use crate::cli::KillArgs;

pub fn run(a: KillArgs) -> anyhow::Result<()> {
    let mut c = Client::connect(&pjw_proto::socket_path())?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    match c.call(&Request::Kill { job: a.job })? {
        Response::Done { message } => {
            eprintln!("pjw: {message}");
            Ok(())
        }
        Response::Error { message, .. } => anyhow::bail!("{message}"),
        other => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
    }
}
