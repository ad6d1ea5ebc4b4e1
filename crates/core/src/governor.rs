//! The memory governor: freeze jobs before the node's job partition thrashes or runs out, thaw
//! them one at a time when it is safe. Pure: the daemon samples memory and PSI, passes a
//! [`MemSnapshot`], and carries out the [`MemAction`]s.
//!
//! Every tick (`[memory] interval_ms` of the daemon's config):
//! 1. The **demand** of each running job is its memory now plus its growth over the prediction
//!    horizon (`vm_prediction`), so the governor acts before the cliff, not after it.
//! 2. **Pressure** is demand above `high` × the partition limit, memory PSI (`some`/`full`
//!    avg10, the worst of node, partition and jobs) above its threshold, the node's available
//!    memory below `min_available`, or swap-in faster than `swap_in_max` while no job is being
//!    thawed. Under pressure the governor first **throttles** the fastest-growing job (where the
//!    kernel can: `memory.high` on cgroup v2), and if that is not enough by the next tick it freezes
//!    running jobs — lowest priority first, youngest among equals — until the remaining demand
//!    fits under `high`, but never the last running job: one job always makes progress (in the
//!    worst case against swap, but alone).
//! 3. Without pressure, frozen jobs are **thawed** — highest priority first, oldest among equals
//!    — when the footprint they had when frozen fits under `low` × the limit next to the running
//!    jobs' demand and memory PSI is low; at most `swap_slots` at a time, each after the
//!    previous thaw has had `thaw_cooldown` to swap its pages back in.
//!
//! The daemon holds new jobs back while any job is frozen for memory.

/// Tunables (validated by the daemon's config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GovernorConfig {
    /// Bytes the jobs of the node may use together (the partition).
    pub limit: u64,
    /// Freeze when demand passes this share of the limit.
    pub high: f64,
    /// Thaw only when demand after the thaw stays under this share.
    pub low: f64,
    /// Memory PSI `some` avg10 (percent) that counts as pressure.
    pub psi_some: f64,
    /// Memory PSI `full` avg10 (percent) that counts as pressure.
    pub psi_full: f64,
    /// Seconds of growth to add to a job's memory (0 = no prediction).
    pub prediction_secs: f64,
    /// Thaws at a time.
    pub swap_slots: usize,
    /// Milliseconds between two thaws.
    pub thaw_cooldown_ms: i64,
    /// Node memory available (bytes) below which the node is under pressure.
    pub min_available: u64,
    /// Swap-in rate (pages per second) above which the node is under pressure.
    pub swap_in_max: f64,
    /// Whether jobs can be throttled (`memory.high`, cgroup v2) before they are frozen.
    pub throttle: bool,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        GovernorConfig {
            limit: u64::MAX,
            high: 0.90,
            low: 0.75,
            psi_some: 40.0,
            psi_full: 10.0,
            prediction_secs: 3.0,
            swap_slots: 1,
            thaw_cooldown_ms: 2000,
            min_available: 256 << 20,
            swap_in_max: 10_000.0,
            throttle: false,
        }
    }
}

/// A job as the governor sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemJob {
    pub key: i64,
    pub priority: u8,
    pub submitted_ms: i64,
    /// Memory charged to it now (bytes).
    pub usage: u64,
    /// Its growth (bytes per second, from the last samples; negative when shrinking).
    pub growth: f64,
    /// Frozen by the governor.
    pub frozen: bool,
    /// Throttled by the governor (`memory.high` set).
    pub throttled: bool,
    /// What it wanted when it was last frozen (its memory plus predicted growth): what it will
    /// want back. 0 for a job never frozen.
    pub footprint: u64,
}

/// One tick's facts.
#[derive(Clone, Debug, PartialEq)]
pub struct MemSnapshot {
    pub now_ms: i64,
    /// Memory PSI avg10 (percent), the worse of node and partition.
    pub psi_some: f64,
    pub psi_full: f64,
    /// When the governor last thawed a job.
    pub last_thaw_ms: Option<i64>,
    /// Jobs thawed within the cooldown (still swapping in).
    pub thawing: usize,
    /// The node's available memory (bytes), if known.
    pub available: Option<u64>,
    /// Pages swapped in per second since the last tick.
    pub swap_in_rate: f64,
    /// Jobs that may be frozen or thawed by the governor (running jobs and its own frozen ones).
    pub jobs: Vec<MemJob>,
}

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemAction {
    /// Hold the job's memory at `high` bytes (reclaim instead of growth).
    Throttle {
        key: i64,
        high: u64,
    },
    /// Lift the throttle.
    Unthrottle {
        key: i64,
    },
    Freeze {
        key: i64,
    },
    Thaw {
        key: i64,
    },
}

/// What a running job will want soon: its memory now — or, just after a thaw, the footprint it
/// had when frozen, since its swapped-out pages come back — plus its predicted growth.
fn demand(cfg: &GovernorConfig, j: &MemJob) -> f64 {
    j.usage.max(j.footprint) as f64 + j.growth.max(0.0) * cfg.prediction_secs
}

/// Decide this tick's freezes and thaws.
pub fn govern(cfg: &GovernorConfig, snap: &MemSnapshot) -> Vec<MemAction> {
    let mut out = Vec::new();
    let limit = cfg.limit as f64;
    let mut running: Vec<&MemJob> = snap.jobs.iter().filter(|j| !j.frozen).collect();
    let mut total: f64 = running.iter().map(|j| demand(cfg, j)).sum();
    let psi_high = snap.psi_some >= cfg.psi_some
        || snap.psi_full >= cfg.psi_full
        || snap.available.is_some_and(|a| a < cfg.min_available)
        || (snap.thawing == 0 && snap.swap_in_rate > cfg.swap_in_max);

    if total > cfg.high * limit || psi_high {
        // First step: throttle the fastest-growing job, once; freezing follows if that did not
        // relieve the pressure by the next tick.
        if cfg.throttle && !running.iter().any(|j| j.throttled) {
            let fastest = running.iter().filter(|j| j.growth > 0.0).max_by(|a, b| {
                a.growth
                    .partial_cmp(&b.growth)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            if let Some(j) = fastest {
                return vec![MemAction::Throttle {
                    key: j.key,
                    high: j.usage,
                }];
            }
        }
        // Victims: lowest priority, youngest first.
        running.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.submitted_ms.cmp(&a.submitted_ms))
                .then(b.key.cmp(&a.key))
        });
        let mut left = running.len();
        for v in running {
            let over = total > cfg.high * limit;
            // PSI alone (demand fits) frees one job per tick; demand frees until it fits.
            if left <= 1 || (!over && !psi_high) {
                break;
            }
            out.push(MemAction::Freeze { key: v.key });
            total -= demand(cfg, v);
            left -= 1;
            if !over {
                break;
            }
        }
        return out;
    }

    // No pressure: lift throttles first.
    for j in snap.jobs.iter().filter(|j| j.throttled && !j.frozen) {
        out.push(MemAction::Unthrottle { key: j.key });
    }

    // Thaw, one slot at a time, when it is safe.
    let cooled = snap
        .last_thaw_ms
        .is_none_or(|t| snap.now_ms - t >= cfg.thaw_cooldown_ms);
    let calm = snap.psi_some < cfg.psi_some / 2.0 && snap.psi_full < cfg.psi_full / 2.0;
    if !cooled || !calm || snap.thawing >= cfg.swap_slots {
        return out;
    }
    let mut frozen: Vec<&MemJob> = snap.jobs.iter().filter(|j| j.frozen).collect();
    frozen.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.submitted_ms.cmp(&b.submitted_ms))
            .then(a.key.cmp(&b.key))
    });
    let slots = cfg.swap_slots - snap.thawing;
    for j in frozen.into_iter().take(slots) {
        let want = j.footprint.max(j.usage) as f64;
        // With nothing running, a frozen job is always thawed: it can only make progress.
        if total + want <= cfg.low * limit || total == 0.0 {
            out.push(MemAction::Thaw { key: j.key });
            total += want;
        } else {
            break;
        }
    }
    out
}

/// A job's smoothed memory growth (bytes/s) after a new sample: half the previous average, half
/// the rate since the last sample (`dt_secs` apart). No time elapsed keeps the average.
pub fn smoothed_growth(prev_growth: f64, prev_usage: u64, usage: u64, dt_secs: f64) -> f64 {
    if dt_secs <= 0.0 {
        return prev_growth;
    }
    let rate = (usage as f64 - prev_usage as f64) / dt_secs;
    0.5 * prev_growth + 0.5 * rate
}

/// Whether a thawed job's footprint (what it was expected to need when frozen) is forgotten:
/// long after a thaw (five thaw cooldowns) its pages are back, so what it uses counts.
pub fn footprint_expired(since_thaw_ms: i64, thaw_cooldown_ms: i64) -> bool {
    since_thaw_ms > 5 * thaw_cooldown_ms
}

/// What a job frozen now is expected to need when thawed: its usage plus its growth over the
/// prediction window (shrinking counts as none), and never less than its earlier footprint.
pub fn predicted_footprint(cfg: &GovernorConfig, usage: u64, growth: f64, footprint: u64) -> u64 {
    let predicted = usage as f64 + growth.max(0.0) * cfg.prediction_secs;
    (predicted as u64).max(footprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_half_the_old_average_and_half_the_new_rate() {
        // (previous growth, previous usage, usage, seconds apart, expected)
        let table = [
            (0.0, 100, 300, 2.0, 50.0),
            (100.0, 100, 300, 2.0, 100.0),
            (100.0, 300, 100, 1.0, -50.0),
            (80.0, 100, 900, 0.0, 80.0),
            (80.0, 100, 900, -1.0, 80.0),
        ];
        for (g, before, now, dt, want) in table {
            assert_eq!(
                smoothed_growth(g, before, now, dt),
                want,
                "{g} {before} {now} {dt}"
            );
        }
    }

    #[test]
    fn footprint_is_forgotten_after_five_cooldowns() {
        assert!(!footprint_expired(0, 2000));
        assert!(!footprint_expired(10_000, 2000));
        assert!(footprint_expired(10_001, 2000));
    }

    #[test]
    fn predicted_footprint_adds_growth_and_keeps_the_larger() {
        let cfg = GovernorConfig {
            prediction_secs: 10.0,
            ..GovernorConfig::default()
        };
        assert_eq!(predicted_footprint(&cfg, 1000, 50.0, 0), 1500);
        assert_eq!(predicted_footprint(&cfg, 1000, -50.0, 0), 1000);
        assert_eq!(predicted_footprint(&cfg, 1000, 50.0, 4000), 4000);
    }

    const MIB: u64 = 1 << 20;

    fn cfg() -> GovernorConfig {
        GovernorConfig {
            limit: 1024 * MIB,
            prediction_secs: 2.0,
            ..GovernorConfig::default()
        }
    }

    fn j(
        key: i64,
        priority: u8,
        at: i64,
        usage_mib: u64,
        growth_mib_s: f64,
        frozen: bool,
    ) -> MemJob {
        MemJob {
            key,
            priority,
            submitted_ms: at,
            usage: usage_mib * MIB,
            growth: growth_mib_s * MIB as f64,
            frozen,
            throttled: false,
            footprint: if frozen { usage_mib * MIB } else { 0 },
        }
    }

    fn snap(jobs: Vec<MemJob>) -> MemSnapshot {
        MemSnapshot {
            now_ms: 10_000,
            psi_some: 0.0,
            psi_full: 0.0,
            last_thaw_ms: None,
            thawing: 0,
            available: None,
            swap_in_rate: 0.0,
            jobs,
        }
    }

    #[test]
    fn decisions() {
        use MemAction::*;
        let cases: Vec<(&str, GovernorConfig, MemSnapshot, Vec<MemAction>)> = vec![
            (
                "room to spare: nothing",
                cfg(),
                snap(vec![
                    j(1, 10, 0, 200, 0.0, false),
                    j(2, 10, 1, 200, 0.0, false),
                ]),
                vec![],
            ),
            (
                "predicted growth crosses the line: the youngest is frozen before the cliff",
                cfg(),
                snap(vec![
                    j(1, 10, 0, 300, 100.0, false),
                    j(2, 10, 1, 300, 100.0, false),
                ]),
                vec![Freeze { key: 2 }],
            ),
            (
                "four growing jobs: freeze until the rest fits, lowest priority first",
                cfg(),
                snap(vec![
                    j(1, 10, 0, 250, 100.0, false),
                    j(2, 12, 1, 250, 100.0, false),
                    j(3, 10, 2, 250, 100.0, false),
                    j(4, 10, 3, 250, 100.0, false),
                ]),
                vec![Freeze { key: 4 }, Freeze { key: 3 }],
            ),
            (
                "the last running job is never frozen",
                cfg(),
                snap(vec![j(1, 10, 0, 1000, 50.0, false)]),
                vec![],
            ),
            (
                "high PSI with demand that fits: one job per tick",
                cfg(),
                MemSnapshot {
                    psi_some: 60.0,
                    ..snap(vec![
                        j(1, 10, 0, 100, 0.0, false),
                        j(2, 10, 1, 100, 0.0, false),
                        j(3, 10, 2, 100, 0.0, false),
                    ])
                },
                vec![Freeze { key: 3 }],
            ),
            (
                "room again: the oldest of the highest priority is thawed",
                cfg(),
                snap(vec![
                    j(1, 10, 0, 100, 0.0, false),
                    j(2, 10, 1, 500, 0.0, true),
                    j(3, 10, 2, 500, 0.0, true),
                ]),
                vec![Thaw { key: 2 }],
            ),
            (
                "not enough room for its footprint: stays frozen",
                cfg(),
                snap(vec![
                    j(1, 10, 0, 400, 0.0, false),
                    j(2, 10, 1, 500, 0.0, true),
                ]),
                vec![],
            ),
            (
                "nothing running: the frozen job is thawed whatever its size",
                cfg(),
                snap(vec![j(2, 10, 1, 2000, 0.0, true)]),
                vec![Thaw { key: 2 }],
            ),
            (
                "within the cooldown of the last thaw: wait",
                cfg(),
                MemSnapshot {
                    last_thaw_ms: Some(9_000),
                    ..snap(vec![j(2, 10, 1, 100, 0.0, true)])
                },
                vec![],
            ),
            (
                "pressure still elevated: wait",
                cfg(),
                MemSnapshot {
                    psi_some: 25.0,
                    ..snap(vec![j(2, 10, 1, 100, 0.0, true)])
                },
                vec![],
            ),
            (
                "a just-thawed job counts with its footprint, so the next one waits",
                cfg(),
                snap(vec![
                    MemJob {
                        footprint: 600 * MIB,
                        ..j(1, 10, 0, 50, 0.0, false)
                    },
                    j(2, 10, 1, 300, 0.0, true),
                ]),
                vec![],
            ),
            (
                "low available memory is pressure",
                cfg(),
                MemSnapshot {
                    available: Some(100 * MIB),
                    ..snap(vec![
                        j(1, 10, 0, 100, 0.0, false),
                        j(2, 10, 1, 100, 0.0, false),
                    ])
                },
                vec![Freeze { key: 2 }],
            ),
            (
                "fast swap-in is pressure",
                cfg(),
                MemSnapshot {
                    swap_in_rate: 50_000.0,
                    ..snap(vec![
                        j(1, 10, 0, 100, 0.0, false),
                        j(2, 10, 1, 100, 0.0, false),
                    ])
                },
                vec![Freeze { key: 2 }],
            ),
            (
                "swap-in of a thawing job is expected",
                cfg(),
                MemSnapshot {
                    swap_in_rate: 50_000.0,
                    thawing: 1,
                    ..snap(vec![
                        j(1, 10, 0, 100, 0.0, false),
                        j(2, 10, 1, 100, 0.0, false),
                    ])
                },
                vec![],
            ),
            (
                "with throttling: the fastest grower is throttled first",
                GovernorConfig {
                    throttle: true,
                    ..cfg()
                },
                snap(vec![
                    j(1, 10, 0, 300, 50.0, false),
                    j(2, 10, 1, 300, 150.0, false),
                ]),
                vec![Throttle {
                    key: 2,
                    high: 300 * MIB,
                }],
            ),
            (
                "a throttle that did not help: freeze",
                GovernorConfig {
                    throttle: true,
                    ..cfg()
                },
                snap(vec![
                    j(1, 10, 0, 300, 150.0, false),
                    MemJob {
                        throttled: true,
                        ..j(2, 10, 1, 400, 100.0, false)
                    },
                ]),
                vec![Freeze { key: 2 }],
            ),
            (
                "pressure gone: throttles are lifted",
                GovernorConfig {
                    throttle: true,
                    ..cfg()
                },
                snap(vec![MemJob {
                    throttled: true,
                    ..j(2, 10, 1, 300, 0.0, false)
                }]),
                vec![Unthrottle { key: 2 }],
            ),
            (
                "two swap slots: two thaws",
                GovernorConfig {
                    swap_slots: 2,
                    ..cfg()
                },
                snap(vec![
                    j(2, 10, 1, 100, 0.0, true),
                    j(3, 10, 2, 100, 0.0, true),
                ]),
                vec![Thaw { key: 2 }, Thaw { key: 3 }],
            ),
        ];
        for (what, c, s, want) in cases {
            assert_eq!(govern(&c, &s), want, "{what}");
        }
    }
}
