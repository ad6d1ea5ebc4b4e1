//! Per-job block I/O on the metrics page: bytes read and written (the sampler's latest sample,
//! where the node counts I/O: cgroup v2 io), and the job's I/O weight and limits when it has any.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{JobLabels, JobSnap};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    job: String,
    user: String,
    /// `MAJ:MIN`
    device: String,
    /// `rbps`, `wbps`, `riops` or `wiops`
    limit: String,
}

/// Register the I/O families for `jobs`.
pub(super) fn register(reg: &mut Registry, jobs: &[JobSnap]) {
    let read: Family<JobLabels, Counter> = Family::default();
    let written: Family<JobLabels, Counter> = Family::default();
    let weight: Family<JobLabels, Gauge> = Family::default();
    let max: Family<LimitLabels, Gauge> = Family::default();
    for j in jobs {
        let labels = JobLabels {
            job: j.id.clone(),
            user: j.user.clone(),
        };
        if let Some(b) = j.io_rbytes {
            read.get_or_create(&labels).inc_by(b);
        }
        if let Some(b) = j.io_wbytes {
            written.get_or_create(&labels).inc_by(b);
        }
        if let Some(w) = j.io.weight {
            weight.get_or_create(&labels).set(w.get() as i64);
        }
        for m in &j.io.max {
            for (k, v) in m.rates.fields() {
                if let Some(v) = v {
                    max.get_or_create(&LimitLabels {
                        job: j.id.clone(),
                        user: j.user.clone(),
                        device: m.dev.to_string(),
                        limit: k.into(),
                    })
                    .set(v.min(i64::MAX as u64) as i64);
                }
            }
        }
    }
    reg.register_with_unit(
        "job_io_read",
        "Bytes the job read from block devices (cgroup v2 io.stat; absent where not counted)",
        Unit::Bytes,
        read,
    );
    reg.register_with_unit(
        "job_io_written",
        "Bytes the job wrote to block devices (cgroup v2 io.stat; absent where not counted)",
        Unit::Bytes,
        written,
    );
    reg.register(
        "job_io_weight",
        "The job's block I/O weight (1-10000; 10-1000 on cgroup v1/BFQ), when set",
        weight,
    );
    reg.register(
        "job_io_max",
        "The job's block I/O limit per device: bytes/s (rbps, wbps) or operations/s (riops, wiops)",
        max,
    );
}
