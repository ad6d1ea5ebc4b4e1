//! HTCondor: a job from its environment and its job and machine ClassAds.

use std::collections::BTreeMap;

use crate::{get, missing, Env, Manager, WlmError, WlmJob};

/// A ClassAd file (`.job.ad`, `.machine.ad`: `Name = value` per line) as a map from the
/// lower-cased attribute name (ClassAd names ignore case) to the value's text as written.
pub fn parse_class_ad(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// A ClassAd string literal's contents (`"alice"` → `alice`), or None for another expression.
pub(crate) fn ad_string(v: &str) -> Option<String> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next()?);
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// A ClassAd integer literal, or None for another expression (`RequestMemory` is often one).
pub(crate) fn ad_int(ad: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    ad.get(key).and_then(|v| v.parse::<u64>().ok())
}

/// An HTCondor job from its environment, the text of its job ad (`$_CONDOR_JOB_AD`) and of its
/// slot's machine ad (`$_CONDOR_MACHINE_AD`) when there is one. Requests that are expressions
/// rather than numbers fall back to what the slot was given (machine ad `Cpus`, `Memory`).
pub fn condor(env: &Env, job_ad: &str, machine_ad: Option<&str>) -> Result<WlmJob, WlmError> {
    let m = Manager::Condor;
    let ad = parse_class_ad(job_ad);
    let slot = machine_ad.map(parse_class_ad).unwrap_or_default();
    let cluster = ad_int(&ad, "clusterid").ok_or_else(|| missing(m, "ClusterId in the job ad"))?;
    let proc_ = ad_int(&ad, "procid").ok_or_else(|| missing(m, "ProcId in the job ad"))?;
    let mut job = WlmJob::new(m, format!("{cluster}.{proc_}"));
    job.user = ad.get("owner").and_then(|v| ad_string(v));
    job.name = ad
        .get("jobbatchname")
        .and_then(|v| ad_string(v))
        .or_else(|| {
            // The command's file name; a `Cmd` ending in `/` names none (fuzz seed
            // regress-cmd-ends-in-slash), and an empty name is no name.
            ad.get("cmd")
                .and_then(|v| ad_string(v))
                .map(|c| c.rsplit('/').next().unwrap_or(&c).to_string())
                .filter(|c| !c.is_empty())
        });
    job.tmpdir = get(env, "_CONDOR_SCRATCH_DIR").map(String::from);
    job.cpus = ad_int(&ad, "requestcpus")
        .or_else(|| ad_int(&slot, "cpus"))
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .filter(|n| *n > 0);
    job.mem = ad_int(&ad, "requestmemory")
        .or_else(|| ad_int(&slot, "memory"))
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(1 << 20));
    Ok(job)
}
