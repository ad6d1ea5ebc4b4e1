//! The workload managers' environments as pjw reads them (a job's `/proc/PID/environ`, which
//! its user writes, and `KEY=VALUE` files), through every manager's parser.
//!
//! Input: `ENV 0x1E SIDE 0x1E HOST` (see `common::parts`). ENV is read both as `KEY=VALUE`
//! lines (`env_from_lines`) and as a NUL-separated environ block (`env_from_environ`). SIDE is
//! the second text a parser takes: SGE's `config` (as lines), PBS's node file, HTCondor's job
//! ad (and, split again at its first blank line, the machine ad); HOST is this node's name.
//!
//! Properties: nothing panics (no arithmetic overflow either: built with overflow checks), and
//! every job a parser returns holds values within their documented bounds:
//! - `pjw_id` is a valid `pjw_core::JobId` and equals `pjw_id(job_id)`;
//! - `cpus`, when known, is at least 1; `mem`, when known, is at least 1 byte;
//! - `user`, `name`, `tmpdir`, when known, are not empty;
//! - `detect` names a manager only when that manager's own id variable is set, and the
//!   manager it names is the one whose parser `read` would use.
//!
//! - `manager_gpus` (the GPUs each manager chose) returns at most `MAX_GPUS` indices, each
//!   below `MAX_GPUS`, none twice, and never an empty list.
//!
//! `pjw_id` itself: for any text, a valid `JobId`, and applying it twice changes nothing.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use pjw_wlm::{
    condor, detect, env_from_environ, env_from_lines, lsf, manager_gpus, pbs, pjw_id, sge, slurm,
    Env, Manager, WlmError, WlmJob,
};

fn check(r: Result<WlmJob, WlmError>, m: Manager) {
    let Ok(job) = r else { return };
    assert_eq!(job.manager, m);
    assert!(
        pjw_core::JobId::new(&job.pjw_id).is_ok(),
        "{m}: pjw id {:?} is not a valid JobId",
        job.pjw_id
    );
    assert_eq!(job.pjw_id, pjw_id(&job.job_id));
    assert!(!job.job_id.trim().is_empty(), "{m}: empty job id");
    assert!(job.cpus != Some(0), "{m}: 0 CPUs");
    assert!(job.mem != Some(0), "{m}: 0 bytes of memory");
    for (what, v) in [
        ("user", &job.user),
        ("name", &job.name),
        ("tmpdir", &job.tmpdir),
    ] {
        assert!(v.as_deref() != Some(""), "{m}: empty {what}");
    }
}

fn managers(env: &Env, side: Option<&str>, host: Option<&str>) {
    let cfg = side.map(env_from_lines);
    let (job_ad, machine_ad) = match side {
        Some(s) => match s.split_once("\n\n") {
            Some((j, mach)) => (j, Some(mach)),
            None => (s, None),
        },
        None => ("", None),
    };
    if let Some(m) = detect(env) {
        let key = match m {
            Manager::Slurm => ["SLURM_JOB_ID", "SLURM_JOBID"].as_slice(),
            Manager::Sge => &["JOB_ID"],
            Manager::Pbs => &["PBS_JOBID"],
            Manager::Lsf => &["LSB_JOBID"],
            Manager::Condor => &["_CONDOR_JOB_AD"],
        };
        assert!(
            key.iter()
                .any(|k| env.get(*k).is_some_and(|v| !v.trim().is_empty())),
            "detect said {m} without its id variable"
        );
    }
    check(slurm(env), Manager::Slurm);
    check(sge(env, None), Manager::Sge);
    check(sge(env, cfg.as_ref()), Manager::Sge);
    check(pbs(env, side, host), Manager::Pbs);
    check(pbs(env, None, None), Manager::Pbs);
    check(lsf(env, host, None), Manager::Lsf);
    check(lsf(env, host, Some(1 << 30)), Manager::Lsf);
    check(condor(env, job_ad, machine_ad), Manager::Condor);
    for m in Manager::ALL {
        if let Ok(Some(ids)) = manager_gpus(m, env) {
            assert!(!ids.is_empty(), "{m}: an empty GPU list");
            assert!(ids.len() <= pjw_core::MAX_GPUS as usize, "{m}: {} GPUs", ids.len());
            for (i, id) in ids.iter().enumerate() {
                assert!(*id < pjw_core::MAX_GPUS, "{m}: GPU {id}");
                assert!(!ids[..i].contains(id), "{m}: GPU {id} twice");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let p = common::parts(data, 3);
    let text = p[0].as_deref().unwrap_or("");
    let side = p[1].as_deref();
    let host = p[2].as_deref();

    let id = pjw_id(text);
    assert!(
        pjw_core::JobId::new(&id).is_ok(),
        "pjw_id({text:?}) = {id:?}"
    );
    assert_eq!(pjw_id(&id), id, "pjw_id is not idempotent");

    managers(&env_from_lines(text), side, host);
    let env = env_from_environ(data.split(|b| *b == 0x1e).next().unwrap_or(data));
    for k in env.keys() {
        assert!(!k.is_empty() && !k.contains('\0'));
    }
    managers(&env, side, host);
});
