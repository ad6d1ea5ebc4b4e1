//! The marks `pjw status` and `pjw top` give jobs and the node map they draw with them: one
//! function for both, so the two views name a job by the same letter.
//!
//! A job that holds CPUs (running, backfilling or ending) gets the next of A–Z, 0–9, then `#`
//! for all others, in the order of the report. Lower case is kept for the map: a backfiller's
//! mark shows in lower case on a CPU no primary holds. (`status` once used a–z after Z, so its
//! 27th job's `a` could not be told from a backfilling `A`, and it marked only holding states
//! while `top` marked every job with CPUs, frozen ones too: the two disagreed.)

use pjw_proto::{JobState, StatusReport};

const MARKS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Whether a job in this state holds its CPUs (and so gets a mark).
fn holds(state: JobState) -> bool {
    matches!(
        state,
        JobState::Running | JobState::Backfill | JobState::Ending
    )
}

/// Each job's mark, in the order of `s.jobs`; `None` for a job that holds no CPUs.
pub fn job_marks(s: &StatusReport) -> Vec<Option<char>> {
    let mut next = 0;
    s.jobs
        .iter()
        .map(|j| {
            if !holds(j.state) || j.cpus.is_empty() {
                return None;
            }
            let m = MARKS.get(next).map(|b| *b as char).unwrap_or('#');
            next += 1;
            Some(m)
        })
        .collect()
}

/// The node map: one char per CPU of `s.cpus`, in order: the mark of the primary holding it,
/// else a backfiller's mark in lower case, else `.`.
pub fn cpu_marks(s: &StatusReport) -> Vec<char> {
    let cpus: Vec<u32> = s.cpus.iter().collect();
    let mut map = vec!['.'; cpus.len()];
    for (j, m) in s.jobs.iter().zip(job_marks(s)) {
        let Some(m) = m else { continue };
        for c in j.cpus.iter() {
            let Some(pos) = cpus.iter().position(|x| *x == c) else {
                continue;
            };
            if j.state == JobState::Backfill {
                if map[pos] == '.' {
                    map[pos] = m.to_ascii_lowercase();
                }
            } else {
                map[pos] = m;
            }
        }
    }
    map
}

/// The GPU line of the node map: one char per GPU of `s.gpus`, in order: the mark of the job
/// holding it (the same letter as its CPUs), else `.` (empty on a node without GPUs).
pub fn gpu_marks(s: &StatusReport) -> Vec<char> {
    let gpus: Vec<pjw_core::GpuId> = s.gpus.iter().collect();
    let mut map = vec!['.'; gpus.len()];
    for (j, m) in s.jobs.iter().zip(job_marks(s)) {
        let Some(m) = m else { continue };
        for g in j.gpus.iter() {
            if let Some(pos) = gpus.iter().position(|x| *x == g) {
                map[pos] = m;
            }
        }
    }
    map
}

/// A job's GPUs for a table: its list, `(N)` while it waits for N unchosen GPUs, else `-`.
pub fn job_gpus(j: &pjw_proto::JobInfo) -> String {
    if !j.gpus.is_empty() {
        j.gpus.to_string()
    } else if j.ngpus > 0 {
        format!("({})", j.ngpus)
    } else {
        "-".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_core::CpuSet;
    use pjw_proto::JobInfo;

    fn job(id: &str, cpus: &str, state: JobState) -> JobInfo {
        JobInfo {
            id: id.into(),
            name: id.into(),
            user: "u".into(),
            uid: 1000,
            cpus: CpuSet::parse_list(cpus).unwrap(),
            mems: CpuSet::new(),
            ncpus: 1,
            mem: None,
            procs: 1,
            threads: 1,
            state,
            reason: None,
            priority: 10,
            age_secs: 0,
            pid: None,
            cpu_usec: None,
            mem_bytes: None,
            sampled_ms: None,
            wlm: None,
            ngpus: 0,
            gpus: Default::default(),
            gpu_env: Vec::new(),
            io: None,
            gpu_util: None,
            gpu_mem: None,
            lease: None,
            steps: vec![],
            oom_kills: 0,
            time_limit_s: None,
            time_left_s: None,
            time_limit_default: false,
        }
    }

    fn report(cpus: &str, jobs: Vec<JobInfo>) -> StatusReport {
        let cpus = CpuSet::parse_list(cpus).unwrap();
        StatusReport {
            node: "n".into(),
            total_cpus: cpus.len() as u32,
            cpus,
            free_cpus: CpuSet::new(),
            vcpus: cpus.len() as u32,
            jobs,
            gpus: Default::default(),
            free_gpus: Default::default(),
            cgroup: String::new(),
            version: String::new(),
            starts: None,
            memory: None,
            cut: None,
        }
    }

    #[test]
    fn only_jobs_holding_cpus_get_marks_and_a_frozen_one_takes_no_letter() {
        let s = report(
            "0-3",
            vec![
                job("a", "0", JobState::Running),
                job("f", "1", JobState::Frozen),
                job("q", "", JobState::Queued),
                job("b", "2", JobState::Running),
                job("e", "3", JobState::Ending),
            ],
        );
        assert_eq!(job_marks(&s), [Some('A'), None, None, Some('B'), Some('C')]);
        assert_eq!(cpu_marks(&s), ['A', '.', 'B', 'C']);
    }

    #[test]
    fn after_26_jobs_digits_then_hash_never_lower_case() {
        let n = 40;
        let cpus = format!("0-{}", n - 1);
        let jobs = (0..n)
            .map(|i| job(&format!("j{i}"), &i.to_string(), JobState::Running))
            .collect();
        let s = report(&cpus, jobs);
        let m: String = job_marks(&s).into_iter().map(|m| m.unwrap()).collect();
        assert_eq!(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789####");
        assert!(!m.chars().any(|c| c.is_ascii_lowercase()));
    }

    #[test]
    fn a_backfiller_shows_in_lower_case_only_where_no_primary_holds_the_cpu() {
        let s = report(
            "0-2",
            vec![
                job("p", "0", JobState::Running),
                job("b", "0-1", JobState::Backfill),
            ],
        );
        assert_eq!(cpu_marks(&s), ['A', 'b', '.']);
    }
}
