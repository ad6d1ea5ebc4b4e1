//! The job partition's memory on the metrics page, as the governor last saw it: its limit and
//! use, whose pressure there is (pjw's jobs on each other, or from outside pjw), the node's and
//! the partition's memory PSI, and each job's OOM kills.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::{JobLabels, JobSnap};

/// The governor's last look (absent before it, or with the governor off).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemorySnap {
    pub limit: u64,
    pub used: u64,
    /// pjw's jobs press on each other (the governor acts).
    pub shared: bool,
    /// Pressure from outside pjw's jobs (reported only).
    pub outside: bool,
    pub node_psi_some: Option<f64>,
    pub partition_psi_some: Option<f64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    /// `shared` or `outside`.
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabel {
    /// `node` or `partition`.
    scope: String,
}

/// Register the memory families.
pub(super) fn register(reg: &mut Registry, mem: Option<&MemorySnap>, jobs: &[JobSnap]) {
    let ooms: Family<JobLabels, Gauge> = Family::default();
    for j in jobs.iter().filter(|j| j.oom_kills > 0) {
        ooms.get_or_create(&JobLabels {
            job: j.id.clone(),
            user: j.user.clone(),
        })
        .set(j.oom_kills.min(i64::MAX as u64) as i64);
    }
    reg.register(
        "job_oom_kills",
        "Processes of the job the kernel killed for memory so far",
        ooms,
    );
    let Some(m) = mem else {
        return;
    };
    let bytes = |v: u64| {
        let g: Gauge = Gauge::default();
        g.set(v.min(i64::MAX as u64) as i64);
        g
    };
    reg.register_with_unit(
        "memory_partition_limit",
        "The job partition: memory all jobs may use together",
        Unit::Bytes,
        bytes(m.limit),
    );
    reg.register_with_unit(
        "memory_partition_used",
        "Memory charged to the jobs together, at the governor's last look",
        Unit::Bytes,
        bytes(m.used),
    );
    let pressure: Family<SourceLabel, Gauge> = Family::default();
    for (source, on) in [("shared", m.shared), ("outside", m.outside)] {
        pressure
            .get_or_create(&SourceLabel {
                source: source.into(),
            })
            .set(on as i64);
    }
    reg.register(
        "memory_pressure",
        "Memory pressure by source: pjw's jobs on each other (shared: the governor acts) or from outside pjw's jobs (outside: reported only)",
        pressure,
    );
    let psi: Family<ScopeLabel, Gauge<f64, AtomicU64>> = Family::default();
    for (scope, v) in [
        ("node", m.node_psi_some),
        ("partition", m.partition_psi_some),
    ] {
        if let Some(v) = v {
            psi.get_or_create(&ScopeLabel {
                scope: scope.into(),
            })
            .set(v);
        }
    }
    reg.register(
        "memory_psi_some_percent",
        "Memory PSI some avg10 of the node and of the job partition",
        psi,
    );
}
