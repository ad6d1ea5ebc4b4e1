//! What the memory governor tells people: why a job is throttled, frozen or stalling, until
//! when, why a queued job waits for memory and for how long at most, and the node's memory
//! line of `pjw status` and the metrics — all from its last tick, no cgroup read.

use pjw_core::format_size;
use pjw_core::governor::{self, Admission, Outside, Shared};
use pjw_proto::MemoryStatus;

use super::{Engine, Job};

/// Seconds as people read them: `45s`, `9m48s`, `2h3m`.
fn secs_text(s: i64) -> String {
    let s = s.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Why pjw's jobs press on each other.
pub(super) fn shared_text(s: Shared) -> &'static str {
    match s {
        Shared::Demand => "the jobs' predicted demand passes memory.high of the job partition",
        Shared::Stalls => "jobs stall on memory in the nearly full job partition",
        Shared::SwapIn => "pages are swapped in fast while the job partition is nearly full",
    }
}

/// Pressure from outside pjw's jobs.
pub(super) fn outside_text(o: &Outside) -> String {
    match o {
        Outside::Stall { stall, attributed } => format!(
            "the node stalls on memory {} (PSI some {:.1}%, full {:.1}%)",
            if *attributed {
                "beyond pjw's job partition"
            } else {
                "(this node has no cgroup PSI to tell whose)"
            },
            stall.some,
            stall.full
        ),
        Outside::LowAvailable { available } => format!(
            "the node has {} available while pjw's job partition has room",
            format_size(*available)
        ),
    }
}

impl Engine {
    /// The memory governor's line about a started job, if it has one: frozen (why and until
    /// when), throttled (why), or stalling inside its own limit.
    pub(super) fn memory_reason(&self, j: &Job) -> Option<String> {
        let m = &j.memory;
        let why = m.why.as_deref().unwrap_or("memory was short");
        if m.frozen {
            let since = m
                .frozen_since_ms
                .map_or(0, |s| (self.clock.now_ms() - s).max(0) / 1000);
            let bound = match self.governor.and_then(|g| g.frozen_max_ms) {
                Some(max) => format!(
                    ", or killed in {} (memory.frozen_max {})",
                    secs_text(max / 1000 - since),
                    secs_text(max / 1000)
                ),
                None => String::new(),
            };
            return Some(format!(
                "frozen by the memory governor for {}: {why}; thawed when its {} fit the partition again{bound}",
                secs_text(since),
                format_size(m.footprint.max(m.need))
            ));
        }
        if m.throttled {
            return Some(format!(
                "throttled by the memory governor at {} (memory.high): {why}; lifted when the partition has room",
                format_size(m.throttle_high.unwrap_or(m.usage))
            ));
        }
        if m.self_stalled {
            return Some(format!(
                "stalling on memory inside its own {} limit (memory PSI some {:.0}%): its own business; it may need a larger --mem",
                j.mem.map(format_size).unwrap_or_default(),
                m.stall.map_or(0.0, |s| s.some)
            ));
        }
        None
    }

    /// Whether a reservation of `m` bytes (`--mem`) fits next to the others and to what the
    /// jobs without one hold now (their need at the governor's last look; a frozen one's
    /// footprint). The governor never acts on a job inside its reservation (decision (cs)), so
    /// one admitted past what the others hold would make them the ones frozen for it (review:
    /// `--mem` as large as the partition, admitted beside others' 60 %, got them all frozen).
    fn reservation_fits(&self, m: u64) -> Result<(), String> {
        let promised = self.mem_promised();
        let unreserved: u64 = self
            .jobs
            .values()
            .filter(|x| x.started.is_some() && !x.end.ending && x.mem.is_none())
            .map(|x| {
                x.memory.need.max(if x.memory.frozen {
                    x.memory.footprint
                } else {
                    0
                })
            })
            .sum();
        if promised.saturating_add(unreserved).saturating_add(m) > self.mem_limit {
            return Err(format!(
                "waiting for memory ({} requested; {} promised to jobs with --mem and {} held by jobs without, of {})",
                format_size(m),
                format_size(promised),
                format_size(unreserved),
                format_size(self.mem_limit)
            ));
        }
        Ok(())
    }

    /// Whether memory lets queued job `j` start now: its `--mem` against the promises, then
    /// the governor's admission (jobs frozen for memory, shared pressure). `Err` says why it
    /// waits and until when at most.
    pub(super) fn memory_wait(&self, j: &Job) -> Result<(), String> {
        if let Some(m) = j.mem {
            let held = self.mem_promised();
            if held.saturating_add(m) > self.mem_limit {
                return Err(format!(
                    "waiting for memory ({} requested, {} of {} promised)",
                    format_size(m),
                    format_size(held),
                    format_size(self.mem_limit)
                ));
            }
        }
        let (Some(cfg), Some(view)) = (self.governor, self.mem_view.as_ref()) else {
            return Ok(());
        };
        let frozen: Vec<&Job> = self.jobs.values().filter(|x| x.memory.frozen).collect();
        match governor::admits(&cfg, &view.assessment, frozen.len(), j.mem) {
            Admission::Start => j.mem.map_or(Ok(()), |m| self.reservation_fits(m)),
            Admission::Wait { left } => {
                let what = match j.mem {
                    Some(m) => format!("{} requested, {} left", format_size(m), format_size(left)),
                    None => format!("size unknown (no --mem), {} left", format_size(left)),
                };
                let cause = if frozen.is_empty() {
                    "pjw's jobs press on each other's memory".to_string()
                } else {
                    format!("{} job(s) frozen for memory come first", frozen.len())
                };
                // The bound: the earliest last step of a frozen job, where there is one.
                let now = self.clock.now_ms();
                let bound = cfg
                    .frozen_max_ms
                    .and_then(|max| {
                        frozen
                            .iter()
                            .filter_map(|x| x.memory.frozen_since_ms)
                            .map(|s| s + max - now)
                            .min()
                    })
                    .map(|ms| format!("; at most {} more", secs_text(ms / 1000 + 1)))
                    .unwrap_or_else(|| {
                        "; until memory frees (no memory.frozen_max bound)".to_string()
                    });
                Err(format!("waiting for memory ({what}): {cause}{bound}"))
            }
        }
    }

    /// The node's memory for `pjw status`: the governor's last look.
    pub(super) fn memory_status(&self) -> Option<MemoryStatus> {
        let v = self.mem_view.as_ref()?;
        let a = &v.assessment;
        Some(MemoryStatus {
            limit: self.mem_limit,
            used: a.usage,
            demand: a.demand,
            held: a.held,
            governor: self.governor.is_some(),
            shared: a.shared.map(|s| shared_text(s).to_string()),
            outside: a.outside.as_ref().map(outside_text),
            node_psi_some: v.node.map(|s| s.some),
            partition_psi_some: v.partition.map(|s| s.some),
            sampled_ms: v.at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::secs_text;

    #[test]
    fn seconds_read_as_people_read_them() {
        for (s, want) in [
            (-3, "0s"),
            (45, "45s"),
            (588, "9m48s"),
            (600, "10m00s"),
            (7380, "2h03m"),
        ] {
            assert_eq!(secs_text(s), want);
        }
    }
}
