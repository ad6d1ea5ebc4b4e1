//! Grid Engine: a job from its environment and the shepherd's `config` file, the job a root-run
//! shepherd wrapper registers, and Grid Engine's sizes.

use crate::{bad, count, get, missing, Env, Manager, WlmError, WlmJob};

/// A Grid Engine size (`2G`, `512M`, `1.5g`, `INFINITY`): upper-case units are powers of 1024,
/// lower-case ones powers of 1000, as in `sge_types(1)`. `None` for INFINITY / UNDEFINED.
pub fn sge_size(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("infinity") || t.eq_ignore_ascii_case("undefined") || t.is_empty() {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "K" => 1024.0,
        "m" => 1e6,
        "M" => (1u64 << 20) as f64,
        "g" => 1e9,
        "G" => (1u64 << 30) as f64,
        "t" => 1e12,
        "T" => (1u64 << 40) as f64,
        _ => return Err("unknown unit (expected k, K, m, M, g, G, t, T)".into()),
    };
    let v: f64 = num.parse().map_err(|_| "not a number".to_string())?;
    let bytes = (v * mult).round();
    // Below one byte once rounded (".43" bytes) is no limit a job can run in, not a 0-byte one.
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err("out of range".into());
    }
    Ok(Some(bytes as u64))
}

/// A Grid Engine job from its environment (the job's, or the `environment` file in the
/// shepherd's directory) and the shepherd's `config` file, parsed with [`crate::env_from_lines`].
pub fn sge(env: &Env, config: Option<&Env>) -> Result<WlmJob, WlmError> {
    let m = Manager::Sge;
    let empty = Env::new();
    let cfg = config.unwrap_or(&empty);
    let id = get(env, "JOB_ID")
        .or_else(|| get(cfg, "job_id"))
        .ok_or_else(|| missing(m, "JOB_ID"))?;
    let task = get(env, "SGE_TASK_ID")
        .filter(|t| t.chars().all(|c| c.is_ascii_digit()))
        .or_else(|| get(cfg, "ja_task_id").filter(|t| *t != "0"));
    let full = match task {
        Some(t) => format!("{id}.{t}"),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = get(cfg, "job_owner")
        .or_else(|| get(env, "USER"))
        .map(String::from);
    job.name = get(env, "JOB_NAME")
        .or_else(|| get(cfg, "job_name"))
        .map(String::from);
    job.tmpdir = get(env, "TMPDIR")
        .or_else(|| get(cfg, "tmpdir"))
        .map(String::from);
    job.cpus = if let Some(v) = get(cfg, "host_slots") {
        Some(count(m, "host_slots", v)?)
    } else if let Some(v) = get(env, "NSLOTS") {
        Some(count(m, "NSLOTS", v)?)
    } else if let Some(v) = get(cfg, "pe_slots") {
        Some(count(m, "pe_slots", v)?)
    } else {
        None
    };
    if let Some(v) = get(cfg, "h_vmem") {
        // h_vmem is per slot; the shepherd multiplies it by the slots on this host.
        let per = sge_size(v).map_err(|r| bad(m, "h_vmem", v, &r))?;
        job.mem = per.map(|b| b.saturating_mul(job.cpus.unwrap_or(1) as u64));
    }
    Ok(job)
}

/// The job a root-run Grid Engine shepherd wrapper registers, from the text of the `config`
/// file sge_execd writes into the job's spool directory — and from nothing else: `environment`
/// holds the user's own `qsub -v` variables (`NSLOTS`, `USER`, even `JOB_ID`), which must not
/// size or name a job root registers. A key read here that the file holds twice (a value with
/// a newline could add a line) makes it refuse: the file is ambiguous.
pub fn sge_shepherd(config: &str) -> Result<WlmJob, WlmError> {
    let m = Manager::Sge;
    let used = [
        "job_id",
        "ja_task_id",
        "job_owner",
        "host_slots",
        "pe_slots",
        "h_vmem",
    ];
    let mut cfg = Env::new();
    for line in config.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if used.contains(&k) && cfg.insert(k.to_string(), v.to_string()).is_some() {
            return Err(bad(
                m,
                k,
                v,
                "set twice in config: refusing an ambiguous file",
            ));
        }
    }
    let id = get(&cfg, "job_id").ok_or_else(|| missing(m, "job_id in config"))?;
    if !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(m, "job_id", id, "not a Grid Engine job number"));
    }
    let full = match get(&cfg, "ja_task_id").filter(|t| *t != "0") {
        Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => format!("{id}.{t}"),
        Some(t) => return Err(bad(m, "ja_task_id", t, "not a task number")),
        None => id.to_string(),
    };
    let mut job = WlmJob::new(m, full);
    job.user = get(&cfg, "job_owner").map(String::from);
    job.cpus = match (get(&cfg, "host_slots"), get(&cfg, "pe_slots")) {
        (Some(v), _) => Some(count(m, "host_slots", v)?),
        (None, Some(v)) => Some(count(m, "pe_slots", v)?),
        (None, None) => Some(1),
    };
    if let Some(v) = get(&cfg, "h_vmem") {
        let per = sge_size(v).map_err(|r| bad(m, "h_vmem", v, &r))?;
        job.mem = per.map(|b| b.saturating_mul(job.cpus.unwrap_or(1) as u64));
    }
    // The name is shown, never believed: the first `job_name` (one the user's text forged
    // later cannot replace it), none when empty.
    job.name = config
        .lines()
        .find_map(|l| l.strip_prefix("job_name="))
        .filter(|n| !n.trim().is_empty())
        .map(String::from);
    Ok(job)
}
