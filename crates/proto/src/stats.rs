//! What `pjw status` adds about registered jobs' leases and the node's start-time statistics
//! (issue 27).

use serde::{Deserialize, Serialize};

/// A registered job's lease (docs/decisions.md (cc)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// When pjw last learned the job is alive (its manager said it runs here, or it had a
    /// process), ms since the epoch.
    pub renewed_ms: i64,
    /// When the lease runs out unless renewed; None: no lease (`[lease] duration = 0`).
    pub expires_ms: Option<i64>,
    /// Whether pjw asks the job's manager (Slurm, Grid Engine); false: the lease alone.
    pub asked: bool,
    /// The manager's latest answer (`runs here (RUNNING)`, `no answer: …`), and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_ms: Option<i64>,
}

/// Start-time statistics over one stretch of time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartWindow {
    /// The stretch asked for (s); 0: since the daemon started.
    pub window_secs: u64,
    /// The time the figures cover (s): the window, or less when the daemon is younger.
    pub covered_secs: f64,
    /// Jobs started, and started jobs that ended.
    pub started: u64,
    pub ended: u64,
    pub started_per_sec: f64,
    pub ended_per_sec: f64,
    /// Time from submission to start of the jobs started: mean and percentiles (s); None
    /// without a start.
    pub wait_mean_secs: Option<f64>,
    pub wait_p50_secs: Option<f64>,
    pub wait_p90_secs: Option<f64>,
    pub wait_p99_secs: Option<f64>,
    pub wait_max_secs: Option<f64>,
    /// Queue length: its mean over the time covered, and its most.
    pub queue_mean: f64,
    pub queue_max: u32,
    /// Jobs frozen (preempted, suspended, or by the memory governor).
    pub freezes: u64,
}

/// The node's start-time statistics: recent (the window) and since the daemon started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartStats {
    /// Jobs queued now.
    pub queue_len: u32,
    pub recent: StartWindow,
    pub total: StartWindow,
}
