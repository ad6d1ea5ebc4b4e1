//! LSF: a job from its environment, this host's name and the `RLIMIT_RSS` LSF sets.

use crate::{bad, count, first, get, missing, short, Env, Manager, WlmError, WlmJob};

/// An LSF job from its environment, with this host's name and the soft `RLIMIT_RSS` of the
/// process (where LSF puts `bsub -M` unless it enforces the limit itself), when finite.
pub fn lsf(env: &Env, host: Option<&str>, rss_limit: Option<u64>) -> Result<WlmJob, WlmError> {
    let m = Manager::Lsf;
    let id = get(env, "LSB_JOBID").ok_or_else(|| missing(m, "LSB_JOBID"))?;
    let full = match get(env, "LSB_JOBINDEX").filter(|i| *i != "0") {
        Some(i) => format!("{id}[{i}]"),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = first(env, &["USER", "LOGNAME"]).map(String::from);
    job.name = get(env, "LSB_JOBNAME").map(String::from);
    job.tmpdir = get(env, "TMPDIR").map(String::from);
    job.cpus = if let Some(v) = get(env, "LSB_DJOB_NUMPROC") {
        Some(count(m, "LSB_DJOB_NUMPROC", v)?)
    } else if let Some(v) = get(env, "LSB_MCPU_HOSTS") {
        // "hostA 4 hostB 2": pairs of host and slots.
        let words: Vec<&str> = v.split_whitespace().collect();
        if !words.len().is_multiple_of(2) {
            return Err(bad(
                m,
                "LSB_MCPU_HOSTS",
                v,
                "expected pairs of host and slots",
            ));
        }
        let mine = words
            .chunks(2)
            .find(|p| host.is_some_and(|h| short(p[0]) == short(h)))
            .or_else(|| words.chunks(2).next());
        match mine {
            Some(p) => Some(count(m, "LSB_MCPU_HOSTS", p[1])?),
            None => None,
        }
    } else if let (Some(v), Some(h)) = (get(env, "LSB_HOSTS"), host) {
        let n = v
            .split_whitespace()
            .filter(|w| short(w) == short(h))
            .count() as u32;
        (n > 0).then_some(n)
    } else {
        None
    };
    job.mem = rss_limit.filter(|b| *b > 0);
    Ok(job)
}
