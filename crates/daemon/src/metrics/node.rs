//! The node's families: its name and version, CPUs, GPUs, queue and jobs by state.

use pjw_proto::JobState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Snapshot;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// Register the node's families of `snap`.
pub(super) fn register(reg: &mut Registry, snap: &Snapshot) {
    let gauge = |v: i64| {
        let g: Gauge = Gauge::default();
        g.set(v);
        g
    };
    let info: Family<NodeLabels, Gauge> = Family::default();
    info.get_or_create(&NodeLabels {
        node: snap.node.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .set(1);
    reg.register(
        "node_info",
        "This node's name and pjw's version (always 1)",
        info,
    );
    reg.register(
        "node_cpus",
        "CPUs pjw may hand out",
        gauge(snap.cpus as i64),
    );
    reg.register(
        "node_free_cpus",
        "CPUs no running job holds",
        gauge(snap.free_cpus as i64),
    );
    reg.register(
        "queue_length",
        "Jobs waiting for CPUs",
        gauge(snap.queue_len as i64),
    );
    reg.register(
        "node_gpus",
        "GPUs pjw may hand out",
        gauge(snap.gpus as i64),
    );
    reg.register(
        "node_free_gpus",
        "GPUs no job holds",
        gauge(snap.free_gpus as i64),
    );
    let by_state: Family<StateLabel, Gauge> = Family::default();
    for s in [
        JobState::Running,
        JobState::Backfill,
        JobState::Frozen,
        JobState::Queued,
        JobState::Ending,
    ] {
        let n = snap.jobs.iter().filter(|j| j.state == s).count();
        by_state
            .get_or_create(&StateLabel {
                state: s.as_str().into(),
            })
            .set(n as i64);
    }
    reg.register("jobs", "Jobs on the node by state", by_state);
}
