//! PBS Professional / OpenPBS / Torque: a job from its environment and `$PBS_NODEFILE`, and
//! PBS's sizes.

use crate::{count, first, get, missing, short, Env, Manager, WlmError, WlmJob};

/// A PBS Professional / OpenPBS / Torque job from its environment, with the text of
/// `$PBS_NODEFILE` (one line per MPI process slot) and this host's name when known.
pub fn pbs(env: &Env, nodefile: Option<&str>, host: Option<&str>) -> Result<WlmJob, WlmError> {
    let m = Manager::Pbs;
    let id = get(env, "PBS_JOBID").ok_or_else(|| missing(m, "PBS_JOBID"))?;
    let mut job = WlmJob::new(m, id.to_string());
    job.user = first(env, &["USER", "LOGNAME", "PBS_O_LOGNAME"]).map(String::from);
    job.name = get(env, "PBS_JOBNAME").map(String::from);
    job.tmpdir = first(env, &["PBS_TMPDIR", "TMPDIR"]).map(String::from);
    job.cpus = if let Some(v) = get(env, "NCPUS") {
        Some(count(m, "NCPUS", v)?)
    } else if let Some(v) = get(env, "PBS_NUM_PPN") {
        Some(count(m, "PBS_NUM_PPN", v)?)
    } else if let (Some(text), Some(h)) = (nodefile, host) {
        let n = text.lines().filter(|l| short(l.trim()) == short(h)).count() as u32;
        (n > 0).then_some(n)
    } else if let Some(v) = get(env, "PBS_NP") {
        Some(count(m, "PBS_NP", v)?)
    } else {
        None
    };
    Ok(job)
}

/// A PBS size (`4gb`, `512mb`, `100kb`, `1048576b`, `2w` words of 8 bytes; units are powers
/// of 1024, a bare number is bytes), as `Resource_List.mem` prints it.
pub fn pbs_size(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: u64 = num.parse().map_err(|_| "not a number".to_string())?;
    let mult: u64 = match unit {
        "" | "b" => 1,
        "w" => 8,
        "kb" | "k" => 1 << 10,
        "kw" => 8 << 10,
        "mb" | "m" => 1 << 20,
        "mw" => 8 << 20,
        "gb" | "g" => 1 << 30,
        "gw" => 8 << 30,
        "tb" | "t" => 1 << 40,
        "tw" => 8 << 40,
        _ => return Err("unknown unit (expected b, kb, mb, gb, tb or w)".into()),
    };
    v.checked_mul(mult)
        .ok_or_else(|| "out of range".to_string())
}
