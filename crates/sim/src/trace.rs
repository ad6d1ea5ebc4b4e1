//! Job traces for the simulator: synthetic ones from a seed, and the Standard Workload Format.
//!
//! ```
//! use pjw_sim::trace;
//! let swf = "; a comment\n1 0 5 60 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1\n";
//! let jobs = trace::parse_swf(swf, 16).unwrap();
//! assert_eq!((jobs[0].run, jobs[0].cpus), (60_000, 4));
//! ```

use super::{Job, SimError};

/// A small deterministic PRNG (SplitMix64), so traces depend only on their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-uniform in `[lo, hi]` (both > 0).
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }
}

/// Shortest and longest synthetic run times, milliseconds.
pub const RUN_MS: (f64, f64) = (1_000.0, 3_600_000.0);

/// `njobs` synthetic jobs for a machine of `cpus` CPUs at offered load `load` (the expected
/// share of CPU time the trace asks for while it arrives).
///
/// Sizes are log-uniform over `1..=max(1, cpus / 2)` (rounded down, so a third of the jobs or
/// more ask for 1-3 CPUs); run times log-uniform over [`RUN_MS`]; arrivals a Poisson process
/// whose rate is set from the generated jobs so that `Σ cpus·run / (span · cpus) ≈ load`.
pub fn synthetic(seed: u64, njobs: usize, cpus: usize, load: f64) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    let max = (cpus / 2).max(1);
    let mut jobs: Vec<Job> = (0..njobs)
        .map(|_| {
            let n = (rng.log_uniform(1.0, max as f64 + 1.0).floor() as usize).clamp(1, max);
            let run = rng.log_uniform(RUN_MS.0, RUN_MS.1).round().max(1.0) as u64;
            Job {
                submit: 0,
                run,
                cpus: n,
            }
        })
        .collect();
    let work: f64 = jobs.iter().map(|j| j.cpus as f64 * j.run as f64).sum();
    let load = if load > 0.0 { load } else { 1.0 };
    // Mean gap so that work / (njobs · gap · cpus) = load.
    let gap = work / (njobs.max(1) as f64 * cpus.max(1) as f64 * load);
    let mut t = 0.0f64;
    for j in &mut jobs {
        j.submit = t.round() as u64;
        t += -gap * (1.0 - rng.unit()).ln();
    }
    jobs
}

/// Offered load of `jobs` on `cpus` CPUs: `Σ cpus·run / (last submit · cpus)`.
pub fn offered_load(jobs: &[Job], cpus: usize) -> f64 {
    let span = jobs.iter().map(|j| j.submit).max().unwrap_or(0).max(1) as f64;
    let work: f64 = jobs.iter().map(|j| j.cpus as f64 * j.run as f64).sum();
    work / (span * cpus.max(1) as f64)
}

/// Stretch or compress the gaps between submit times so that the offered load becomes `load`.
pub fn scale_to_load(jobs: &mut [Job], cpus: usize, load: f64) {
    let now = offered_load(jobs, cpus);
    if load <= 0.0 || now <= 0.0 {
        return;
    }
    let f = now / load;
    for j in jobs {
        j.submit = (j.submit as f64 * f).round() as u64;
    }
}

/// Parse a Standard Workload Format trace for a machine of `cpus` CPUs.
///
/// Each line holds 18 whitespace-separated fields; `;` starts a comment (the header). Used:
/// submit time (field 2, seconds), run time (field 4, seconds), allocated processors (field 5),
/// or requested processors (field 8) when field 5 is missing (-1). Jobs without a run time or a
/// size are skipped; sizes are clamped to `1..=cpus`; a run time of 0 becomes 1 ms. Jobs come
/// back sorted by submit time, the first at time 0.
pub fn parse_swf(text: &str, cpus: usize) -> Result<Vec<Job>, SimError> {
    let mut jobs = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let line = k + 1;
        let body = raw.split(';').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let fields: Vec<&str> = body.split_whitespace().collect();
        if fields.len() < 18 {
            return Err(SimError::BadSwf {
                line,
                reason: format!("expected 18 fields, found {}", fields.len()),
            });
        }
        let num = |i: usize| -> Result<f64, SimError> {
            fields[i].parse::<f64>().map_err(|_| SimError::BadSwf {
                line,
                reason: format!("field {} is not a number: {:?}", i + 1, fields[i]),
            })
        };
        let (submit, run, alloc, req) = (num(1)?, num(3)?, num(4)?, num(7)?);
        let size = if alloc > 0.0 { alloc } else { req };
        if submit < 0.0 || run < 0.0 || size <= 0.0 {
            continue;
        }
        jobs.push(Job {
            submit: (submit * 1000.0).round() as u64,
            run: ((run * 1000.0).round() as u64).max(1),
            cpus: (size.round() as usize).clamp(1, cpus.max(1)),
        });
    }
    jobs.sort_by_key(|j| j.submit);
    if let Some(t0) = jobs.first().map(|j| j.submit) {
        for j in &mut jobs {
            j.submit -= t0;
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_deterministic_and_in_range() {
        let a = synthetic(3, 500, 96, 0.8);
        assert_eq!(a, synthetic(3, 500, 96, 0.8));
        assert_ne!(a, synthetic(4, 500, 96, 0.8));
        assert!(a.iter().all(|j| (1..=48).contains(&j.cpus) && j.run >= 1));
        assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
        let small = a.iter().filter(|j| j.cpus <= 4).count();
        assert!(small > 150, "{small} small jobs");
        let l = offered_load(&a, 96);
        assert!((0.6..1.0).contains(&l), "load {l}");
    }
}
