//! Block I/O in the engine: a job's weight and limits from its request and the node's
//! `[job] io_weight/io_max`, who may ask for what, and their store row (so that `pjw status`
//! after a restart and `pjw report` still show them).

use pjw_core::io_limits::{IoMax, IoWeight, JobIo};
use pjw_proto::{ErrorCode, RunRequest};

use super::{refuse, Engine, Job, Refusal};

impl Engine {
    /// The I/O settings job `req` gets, asked by uid `client_uid`. A weight above the node's
    /// default (`[job] io_weight`, else the kernel's 100) takes I/O from other jobs: root only.
    /// `--io-max` entries can only tighten the node's limits (per device, per field).
    pub(super) fn io_of(&self, client_uid: u32, req: &RunRequest) -> Result<JobIo, Refusal> {
        let bad = |e: pjw_core::CoreError| refuse(ErrorCode::Invalid, e.to_string());
        let weight = match req.io_weight {
            None => self.cfg.io.weight,
            Some(w) => {
                let w = IoWeight::new(w as u64).map_err(bad)?;
                let default = self.cfg.io.weight.unwrap_or(IoWeight::DEFAULT);
                if client_uid != 0 && w > default {
                    return Err(refuse(
                        ErrorCode::Denied,
                        format!("--io-weight {w} is above this node's default ({default}): only root may raise a job's I/O weight"),
                    ));
                }
                Some(w)
            }
        };
        if req.io_max.len() > 16 {
            return Err(refuse(ErrorCode::Invalid, "more than 16 --io-max devices"));
        }
        let mut asked: Vec<IoMax> = Vec::new();
        for text in &req.io_max {
            let m = IoMax::parse(text).map_err(bad)?;
            if asked.iter().any(|a| a.dev == m.dev) {
                return Err(refuse(
                    ErrorCode::Invalid,
                    format!("--io-max: device {} given twice", m.dev),
                ));
            }
            asked.push(m);
        }
        Ok(JobIo {
            weight,
            max: JobIo::merge_max(&self.cfg.io.max, &asked),
        })
    }

    /// Take back a recovered job's I/O settings.
    pub(super) fn restore_io(&self, job: &mut Job) {
        if let Ok(Some(io)) = self.store.io(job.seq) {
            job.io = io;
        }
    }
}

/// The job's I/O settings for `pjw status`, when it has any.
pub(super) fn io_info(j: &Job) -> Option<String> {
    (!j.io.is_empty()).then(|| j.io.summary())
}
