//! The memory governor: pressure lands on the job that causes it. Pure: the daemon samples
//! memory and PSI, passes a [`MemSnapshot`], and carries out the [`MemAction`]s of the
//! [`Decision`]; the [`Assessment`] (whose pressure, who stalls in its own limit) goes to
//! status, metrics and the log.
//!
//! **Attribution.** The governor answers only the pressure pjw's jobs put on each other in the
//! memory they share (the job partition):
//! - a job's **need** is what only swap can take from it (anon + shmem + swap); its **growth**
//!   is the smoothed rate of its need, and its **demand** its need — or, just after a thaw, the
//!   larger footprint it had when frozen — plus its growth over the prediction horizon (MCOpt's
//!   growth prediction: act before the cliff). A job at its own limit (`--mem`) grows only into
//!   its own swap: its demand on the shared memory stops at its limit.
//! - **shared pressure** is the running jobs' demand above `high` × the partition, or a job
//!   below its own limit stalling on memory (its own memory PSI) while the partition is nearly
//!   full (the partition's reclaim is what stalls it), or fast swap-in while it is nearly full.
//! - a job **stalling inside its own limit** (at ≥ 90 % of its `--mem`, its PSI high) is that
//!   job's business: reported, never acted on, and no reason to act on anyone else.
//! - **outside pressure** (the node's memory PSI beyond the partition's, or the node's
//!   available memory low while the partition has room) is reported and left to the node's
//!   own memory managers.
//!
//! **Reservations.** A job's `--mem` is a reservation, admitted against the partition: what
//! it uses inside it was promised, so it is never the one throttled or frozen; the jobs without
//! one use what the reservations leave, and are.
//!
//! **The ladder**, for the jobs without a reservation that grow into the shared memory
//! (fastest first; when none grows, the one holding the most above its fair share of what the
//! reservations leave): throttle (`memory.high` at its
//! usage, cgroup v2), then — if it keeps growing or stalls against the throttle — freeze; a job
//! frozen longer than `frozen_max` gets the last step ([`MemAction::LastStep`]: requeue or kill,
//! the daemon's choice). Never the last running job: one job always makes progress. Throttles
//! are lifted when there is room again; frozen jobs are thawed, highest priority first, longest
//! frozen among equals, when the need they had fits under `low` × the partition next to the
//! running jobs' demand and no job stalls on shared memory: at most `swap_slots` at a time, each
//! after the previous has had `thaw_cooldown` to swap its pages back in.
//!
//! **Admission** ([`admits`]): a job that fits the memory left starts while others are frozen;
//! one whose size is unknown (no `--mem`) waits while jobs are frozen or the partition is under
//! shared pressure, since it would add to it.

/// Growth (bytes/s) below this is noise, not growth (page-cache and allocator jitter).
pub const GROWTH_NOISE: f64 = (1u64 << 20) as f64;

/// A job using this share of its own limit is at it: its stalls are its own.
pub const AT_OWN_LIMIT: f64 = 0.9;

/// Tunables (validated by the daemon's config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GovernorConfig {
    /// Bytes the jobs of the node may use together (the partition).
    pub limit: u64,
    /// Shared pressure when the running jobs' demand passes this share of the limit.
    pub high: f64,
    /// Thaw (and lift throttles) only when demand after it stays under this share.
    pub low: f64,
    /// Memory PSI `some` avg10 (percent) that counts as stalling.
    pub psi_some: f64,
    /// Memory PSI `full` avg10 (percent) that counts as stalling.
    pub psi_full: f64,
    /// Seconds of growth to add to a job's need (0 = no prediction).
    pub prediction_secs: f64,
    /// Thaws at a time.
    pub swap_slots: usize,
    /// Milliseconds between two thaws.
    pub thaw_cooldown_ms: i64,
    /// Node memory available (bytes) below which the node is short.
    pub min_available: u64,
    /// Swap-in rate (pages per second) above which a nearly full partition is under pressure.
    pub swap_in_max: f64,
    /// Whether jobs can be throttled (`memory.high`, cgroup v2) before they are frozen.
    pub throttle: bool,
    /// How long a job may stay frozen before the last step (ms); None: as long as it takes.
    pub frozen_max_ms: Option<i64>,
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
            frozen_max_ms: Some(10 * 60 * 1000),
        }
    }
}

/// Memory PSI avg10 (percent) of one cgroup or of the node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stall {
    pub some: f64,
    pub full: f64,
}

impl Stall {
    /// At or above the thresholds.
    pub fn high(&self, cfg: &GovernorConfig) -> bool {
        self.some >= cfg.psi_some || self.full >= cfg.psi_full
    }

    /// Below half the thresholds.
    fn calm(&self, cfg: &GovernorConfig) -> bool {
        self.some < cfg.psi_some / 2.0 && self.full < cfg.psi_full / 2.0
    }
}

/// A job as the governor sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemJob {
    pub key: i64,
    pub priority: u8,
    /// Memory charged to it now (bytes, page cache included).
    pub usage: u64,
    /// What only swap can take from it: anon + shmem + swap (bytes).
    pub need: u64,
    /// The growth of its need (bytes per second, smoothed; negative when shrinking).
    pub growth: f64,
    /// Its own limit (`--mem`), if it has one.
    pub own_limit: Option<u64>,
    /// Its own memory PSI, where the kernel has it.
    pub stall: Option<Stall>,
    /// Frozen by the governor, and since when (ms).
    pub frozen: bool,
    pub frozen_since_ms: Option<i64>,
    /// Throttled by the governor (`memory.high` set).
    pub throttled: bool,
    /// Its need when it was last frozen: what it will want back. 0 for a job never frozen.
    pub footprint: u64,
}

/// One tick's facts.
#[derive(Clone, Debug, PartialEq)]
pub struct MemSnapshot {
    pub now_ms: i64,
    /// Memory PSI of the node (`/proc/pressure/memory`) and of the partition (its cgroup's
    /// `memory.pressure`), where the kernel has them.
    pub node: Option<Stall>,
    pub partition: Option<Stall>,
    /// The node's available memory (bytes), if known.
    pub available: Option<u64>,
    /// Pages swapped in per second since the last tick.
    pub swap_in_rate: f64,
    /// When the governor last thawed a job.
    pub last_thaw_ms: Option<i64>,
    /// Jobs thawed within the cooldown (still swapping in).
    pub thawing: usize,
    /// Running jobs and the governor's frozen ones.
    pub jobs: Vec<MemJob>,
}

/// Why pjw's jobs press on each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// Their predicted demand passes `high` × the partition.
    Demand,
    /// A job below its own limit stalls on memory while the partition is nearly full.
    Stalls,
    /// Pages are swapped in fast while the partition is nearly full.
    SwapIn,
}

/// Pressure from outside pjw's jobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outside {
    /// The node's memory PSI beyond the partition's (`attributed`: the partition's PSI was
    /// known and subtracted; else the node's alone, which may include pjw's own jobs).
    Stall { stall: Stall, attributed: bool },
    /// The node's available memory is low while the partition has room.
    LowAvailable { available: u64 },
}

/// What the governor makes of a snapshot (for status, metrics and the log too).
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    /// pjw's jobs press on each other: the governor acts.
    pub shared: Option<Shared>,
    /// Pressure from outside pjw's jobs: reported only.
    pub outside: Option<Outside>,
    /// The running jobs' predicted demand and the frozen jobs' footprints (bytes).
    pub demand: u64,
    pub held: u64,
    /// Memory charged to all jobs together (bytes).
    pub usage: u64,
    /// Jobs stalling on memory inside their own limit (their own business).
    pub self_stalled: Vec<i64>,
    /// Jobs growing into the shared memory, fastest first.
    pub growers: Vec<i64>,
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
    /// Frozen longer than `frozen_max`: requeue it where it allows that, else kill it.
    LastStep {
        key: i64,
    },
}

/// A tick's assessment and actions.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub assessment: Assessment,
    pub actions: Vec<MemAction>,
}

fn at_own_limit(j: &MemJob) -> bool {
    j.own_limit
        .is_some_and(|l| j.usage as f64 >= AT_OWN_LIMIT * l as f64)
}

/// Whether `j` holds a reservation: its `--mem`, admitted against the partition next to the
/// other jobs' (`mem_promised`). What it uses and grows into inside it was promised at its
/// start, and its demand stops there: it is never the job frozen or throttled for pressure on
/// the memory the jobs share — the jobs without one, which use what the reservations leave,
/// are. (Found running real software: a job growing inside its own `--mem` was frozen once
/// the sum passed `high`, which also held back admission; and a job holding its promise was
/// frozen, as the largest, for a grower the sampler had not seen grow yet.)
fn reserved(j: &MemJob) -> bool {
    j.own_limit.is_some()
}

fn stalls(cfg: &GovernorConfig, j: &MemJob) -> bool {
    j.stall.is_some_and(|s| s.high(cfg))
}

/// Whether `j` grows into the shared memory: running, growing beyond noise, and not at its
/// own limit (there it grows only into its own swap).
pub fn grows(j: &MemJob) -> bool {
    !j.frozen && j.growth >= GROWTH_NOISE && !at_own_limit(j)
}

/// Whether `j` stalls on memory inside its own limit.
pub fn self_stalled(cfg: &GovernorConfig, j: &MemJob) -> bool {
    !j.frozen && at_own_limit(j) && stalls(cfg, j)
}

/// Whether `j` stalls on memory it shares with the other jobs (not at its own limit, not held
/// by a throttle of the governor's).
fn shared_stall(cfg: &GovernorConfig, j: &MemJob) -> bool {
    !j.frozen && !j.throttled && !at_own_limit(j) && stalls(cfg, j)
}

/// What a running job will want soon (bytes, as f64): its need — or, just after a thaw, the
/// footprint it had when frozen — plus its predicted growth, at most its own limit.
fn demand(cfg: &GovernorConfig, j: &MemJob) -> f64 {
    let grow = if grows(j) {
        j.growth * cfg.prediction_secs
    } else {
        0.0
    };
    let d = j.need.max(j.footprint) as f64 + grow;
    match j.own_limit {
        Some(l) => d.min(l as f64),
        None => d,
    }
}

/// The predicted growth part of a running job's demand (what a throttle takes away).
fn growth_part(cfg: &GovernorConfig, j: &MemJob) -> f64 {
    let whole = demand(cfg, j);
    (whole - (j.need.max(j.footprint) as f64).min(whole)).max(0.0)
}

/// Whose pressure this is (pure; also what status and metrics show).
pub fn assess(cfg: &GovernorConfig, snap: &MemSnapshot) -> Assessment {
    let limit = cfg.limit as f64;
    let running = || snap.jobs.iter().filter(|j| !j.frozen);
    let demand_total: f64 = running().map(|j| demand(cfg, j)).sum();
    let held: u64 = snap
        .jobs
        .iter()
        .filter(|j| j.frozen)
        .map(|j| j.footprint.max(j.need))
        .sum();
    let usage: u64 = snap.jobs.iter().map(|j| j.usage).sum();
    let nearly_full = usage as f64 >= cfg.high * limit;
    let shared = if demand_total > cfg.high * limit {
        Some(Shared::Demand)
    } else if nearly_full && snap.thawing == 0 && running().any(|j| shared_stall(cfg, j)) {
        Some(Shared::Stalls)
    } else if nearly_full && snap.thawing == 0 && snap.swap_in_rate > cfg.swap_in_max {
        Some(Shared::SwapIn)
    } else {
        None
    };
    let outside_stall = snap.node.map(|n| match snap.partition {
        Some(p) => (
            Stall {
                some: (n.some - p.some).max(0.0),
                full: (n.full - p.full).max(0.0),
            },
            true,
        ),
        None => (n, false),
    });
    let outside = match outside_stall {
        Some((stall, attributed)) if stall.high(cfg) => Some(Outside::Stall { stall, attributed }),
        _ => match snap.available {
            Some(a) if a < cfg.min_available && !nearly_full => {
                Some(Outside::LowAvailable { available: a })
            }
            _ => None,
        },
    };
    let mut growers: Vec<&MemJob> = running().filter(|j| grows(j)).collect();
    growers.sort_by(|a, b| {
        b.growth
            .total_cmp(&a.growth)
            .then(b.need.cmp(&a.need))
            .then(b.key.cmp(&a.key))
    });
    Assessment {
        shared,
        outside,
        demand: demand_total as u64,
        held,
        usage,
        self_stalled: running()
            .filter(|j| self_stalled(cfg, j))
            .map(|j| j.key)
            .collect(),
        growers: growers.iter().map(|j| j.key).collect(),
    }
}

/// Decide this tick's throttles, freezes, thaws and last steps.
pub fn govern(cfg: &GovernorConfig, snap: &MemSnapshot) -> Decision {
    let assessment = assess(cfg, snap);
    let mut actions = Vec::new();
    let limit = cfg.limit as f64;
    let running: Vec<&MemJob> = snap.jobs.iter().filter(|j| !j.frozen).collect();
    let mut total: f64 = running.iter().map(|j| demand(cfg, j)).sum();
    let mut left = running.len();

    if let Some(why) = assessment.shared {
        // Whom: the growers without a reservation, fastest first; when none grows, the jobs
        // without one holding the most above their fair share of what the reservations leave.
        // Never a job inside its own `--mem` (its reservation), nor one at or under its share
        // that does not grow.
        let reserved_mem: f64 = running
            .iter()
            .filter(|j| reserved(j))
            .filter_map(|j| j.own_limit)
            .map(|l| l as f64)
            .sum();
        let unreserved = running.iter().filter(|j| !reserved(j)).count();
        let fair = (limit - reserved_mem).max(0.0) / unreserved.max(1) as f64;
        let mut targets: Vec<&MemJob> = assessment
            .growers
            .iter()
            .filter_map(|k| running.iter().find(|j| j.key == *k).copied())
            .filter(|j| !reserved(j))
            .collect();
        if targets.is_empty() {
            let mut over: Vec<&MemJob> = running
                .iter()
                .filter(|j| !reserved(j) && j.need as f64 > fair)
                .copied()
                .collect();
            over.sort_by(|a, b| b.need.cmp(&a.need).then(b.key.cmp(&a.key)));
            targets = over;
        }
        for t in targets {
            if left <= 1 {
                break;
            }
            if cfg.throttle && !t.throttled {
                actions.push(MemAction::Throttle {
                    key: t.key,
                    high: t.usage,
                });
                total -= growth_part(cfg, t);
            } else {
                actions.push(MemAction::Freeze { key: t.key });
                total -= demand(cfg, t);
                left -= 1;
            }
            // Demand: act until the rest fits; stalls and swap-in: one step per tick.
            if why != Shared::Demand || total <= cfg.high * limit {
                break;
            }
        }
    } else {
        // No shared pressure. A throttled job is let go where it has room to grow; one that
        // still pushes against its throttle without room is frozen (it would only thrash).
        for t in running.iter().filter(|j| j.throttled) {
            let room = total + t.growth.max(0.0) * cfg.prediction_secs <= cfg.low * limit;
            if room {
                actions.push(MemAction::Unthrottle { key: t.key });
            } else if (grows(t) || stalls(cfg, t)) && left > 1 {
                actions.push(MemAction::Freeze { key: t.key });
                total -= demand(cfg, t);
                left -= 1;
            }
        }
        thaw(cfg, snap, total, &mut actions);
    }

    // The last step for jobs frozen too long (not one thawed this tick).
    if let Some(max) = cfg.frozen_max_ms {
        for j in snap.jobs.iter().filter(|j| j.frozen) {
            let thawed = actions.contains(&MemAction::Thaw { key: j.key });
            if !thawed && j.frozen_since_ms.is_some_and(|s| snap.now_ms - s >= max) {
                actions.push(MemAction::LastStep { key: j.key });
            }
        }
    }
    Decision {
        assessment,
        actions,
    }
}

/// Thaw, one slot at a time, when it is safe: no job stalls on shared memory, the cooldown
/// has passed, and the frozen job's need fits under `low` next to the running jobs' demand.
fn thaw(cfg: &GovernorConfig, snap: &MemSnapshot, mut total: f64, out: &mut Vec<MemAction>) {
    let cooled = snap
        .last_thaw_ms
        .is_none_or(|t| snap.now_ms - t >= cfg.thaw_cooldown_ms);
    let calm = snap
        .jobs
        .iter()
        .filter(|j| !j.frozen && !j.throttled && !at_own_limit(j))
        .all(|j| j.stall.is_none_or(|s| s.calm(cfg)));
    if !cooled || !calm || snap.thawing >= cfg.swap_slots {
        return;
    }
    let mut frozen: Vec<&MemJob> = snap.jobs.iter().filter(|j| j.frozen).collect();
    frozen.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.frozen_since_ms.cmp(&b.frozen_since_ms))
            .then(a.key.cmp(&b.key))
    });
    let slots = cfg.swap_slots - snap.thawing;
    for j in frozen.into_iter().take(slots) {
        let want = j.footprint.max(j.need) as f64;
        // With nothing running, a frozen job is always thawed: it can only make progress.
        if total + want <= cfg.low * cfg.limit as f64 || total == 0.0 {
            out.push(MemAction::Thaw { key: j.key });
            total += want;
        } else {
            break;
        }
    }
}

/// Whether memory lets a queued job start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    Start,
    /// It waits: the jobs frozen for memory need what is left, or the partition is under
    /// shared pressure, and the job's size (`--mem`) is unknown or does not fit.
    Wait {
        /// Bytes left under `high` × the partition next to the running jobs' demand and the
        /// frozen jobs' footprints.
        left: u64,
    },
}

/// Memory admission of a job asking for `want` bytes (its `--mem`; None: unknown), given this
/// tick's assessment and how many jobs the governor holds frozen. With nothing frozen and no
/// shared pressure every job starts (its `--mem` against the promises is checked apart);
/// otherwise only a job whose `--mem` fits what is left under `high` next to the running jobs'
/// demand and the frozen jobs' footprints — it cannot add to the pressure beyond its limit.
pub fn admits(cfg: &GovernorConfig, a: &Assessment, frozen: usize, want: Option<u64>) -> Admission {
    if frozen == 0 && a.shared.is_none() {
        return Admission::Start;
    }
    let room = cfg.high * cfg.limit as f64 - a.demand as f64 - a.held as f64;
    let left = room.max(0.0) as u64;
    match want {
        Some(w) if (w as f64) <= room => Admission::Start,
        _ => Admission::Wait { left },
    }
}

/// A job's smoothed growth (bytes/s) after a new sample: half the previous average, half
/// the rate since the last sample (`dt_secs` apart). No time elapsed keeps the average.
pub fn smoothed_growth(prev_growth: f64, prev: u64, now: u64, dt_secs: f64) -> f64 {
    if dt_secs <= 0.0 {
        return prev_growth;
    }
    let rate = (now as f64 - prev as f64) / dt_secs;
    0.5 * prev_growth + 0.5 * rate
}

/// Whether a thawed job's footprint (what it needed when frozen) is forgotten: long after a
/// thaw (five thaw cooldowns) its pages are back, so what it needs now counts.
pub fn footprint_expired(since_thaw_ms: i64, thaw_cooldown_ms: i64) -> bool {
    since_thaw_ms > 5 * thaw_cooldown_ms
}

/// What a job frozen now will want back: its need now, never less than an earlier footprint.
/// Not its predicted growth: a thawed job that grows again is the grower again, and frozen
/// again, while an over-estimate would keep it frozen while it would fit.
pub fn frozen_footprint(need: u64, footprint: u64) -> u64 {
    need.max(footprint)
}

#[cfg(test)]
mod tests;
