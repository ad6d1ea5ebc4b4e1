//! The metrics endpoint: OpenMetrics text on `GET /metrics` (config `[metrics] listen`).
//!
//! Scrapes never block or slow the engine. A scrape sends [`Event::Metrics`] and the engine
//! answers with a [`Snapshot`] of what it holds in memory (no I/O, O(jobs)); the per-job cgroup
//! reads (CPU time, memory) and the text encoding then run on a blocking thread, off the
//! engine's single-threaded runtime. Counters and histograms the engine and the sampler feed
//! (governor actions, launch latency, sampler duration, store write errors) live in
//! [`Metrics`]: lock-free atomics, shared through an `Arc`.
//!
//! HTTP is a minimal HTTP/1.1 responder (docs/decisions.md says why): one request per
//! connection, `GET /metrics` (or `/`) answers 200, another path 404, another method 405, a
//! malformed or oversized request 400, and a client that sends nothing within 5 s is dropped.

use pjw_cgroup::Driver;
use prometheus_client::registry::Registry;
use tracing::warn;

mod counters;
mod http;
mod io;
mod jobs;
mod memory;
mod node;
mod snapshot;
mod starts;

pub use counters::{GovernorKind, Metrics};
pub use http::{bind, route, serve, wants_openmetrics, Route};
pub use memory::MemorySnap;
pub use snapshot::{JobSnap, Snapshot};

use jobs::{JobFamilies, JobLabels};

/// Render the metrics page: the snapshot, per-job cgroup reads through `driver`, and the
/// shared counters. Blocking (reads cgroup files): call it off the engine's thread. The
/// families are registered (and so shown) in this order.
pub fn render(snap: &Snapshot, metrics: &Metrics, driver: Option<&Driver>) -> String {
    let mut reg = Registry::with_prefix("pjw");
    node::register(&mut reg, snap);
    let gpus = JobFamilies::collect(&snap.jobs, driver).register_usage(&mut reg);
    io::register(&mut reg, &snap.jobs);
    if let Some(s) = &snap.starts {
        starts::register(&mut reg, s);
    }
    memory::register(&mut reg, snap.memory.as_ref(), &snap.jobs);
    gpus.register(&mut reg);
    counters::register(&mut reg, metrics, snap.store_write_errors);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &reg) {
        warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// The same page in the classic Prometheus text format (0.0.4), for clients that do not ask for
/// OpenMetrics (curl, `promtool check metrics`): counter families are named with their `_total`
/// suffix, and the OpenMetrics-only `# UNIT` and `# EOF` lines are dropped.
pub fn to_classic(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|p| line.starts_with(p));
        if let Some(prefix) = meta {
            let rest = &line[prefix.len()..];
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_proto::JobState;

    #[test]
    fn requests_are_routed() {
        let cases: &[(&[u8], Route)] = &[
            (b"GET /metrics HTTP/1.1\r\nHost: x", Route::Metrics),
            (b"GET / HTTP/1.0", Route::Metrics),
            (b"GET /metrics?x=1 HTTP/1.1", Route::Metrics),
            (b"HEAD /metrics HTTP/1.1", Route::Metrics),
            (b"GET /other HTTP/1.1", Route::NotFound),
            (b"POST /metrics HTTP/1.1", Route::MethodNotAllowed),
            (b"GET /metrics", Route::Bad),
            (b"GET metrics HTTP/1.1", Route::Bad),
            (b"GET /metrics SMTP/1.1", Route::Bad),
            (b"GET  /metrics HTTP/1.1", Route::Bad),
            (b"\xff\xfe", Route::Bad),
            (b"", Route::Bad),
        ];
        for (head, want) in cases {
            assert_eq!(&route(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn page_has_every_family_and_ends_with_eof() {
        let m = Metrics::new();
        m.launch(0.004);
        m.governor_action(GovernorKind::freeze);
        let snap = Snapshot {
            node: "cn7".into(),
            cpus: 4,
            free_cpus: 3,
            gpus: 4,
            free_gpus: 2,
            queue_len: 1,
            jobs: vec![
                JobSnap {
                    id: "7".into(),
                    user: "alice".into(),
                    state: JobState::Running,
                    cgroup: Some("job-7".into()),
                    cpu_usec: Some(2_500_000),
                    mem_bytes: Some(300 << 20),
                    gpus: pjw_core::GpuSet::parse_list("1,3").unwrap(),
                    io_rbytes: Some(4096),
                    io_wbytes: None,
                    io: pjw_core::io_limits::JobIo::parse("weight=50; 254:0 rbps=1M").unwrap(),
                    gpu_util: Some(37.5),
                    gpu_mem: Some(3 << 30),
                    oom_kills: 2,
                },
                JobSnap {
                    id: "8".into(),
                    user: "bob".into(),
                    state: JobState::Queued,
                    cgroup: None,
                    cpu_usec: None,
                    mem_bytes: None,
                    gpus: pjw_core::GpuSet::new(),
                    io_rbytes: None,
                    io_wbytes: None,
                    io: Default::default(),
                    gpu_util: None,
                    gpu_mem: None,
                    oom_kills: 0,
                },
            ],
            store_write_errors: 2,
            starts: Some(pjw_proto::StartStats {
                queue_len: 1,
                recent: pjw_proto::StartWindow {
                    window_secs: 300,
                    covered_secs: 300.0,
                    started: 30,
                    ended: 15,
                    started_per_sec: 0.1,
                    ended_per_sec: 0.05,
                    wait_mean_secs: Some(1.5),
                    wait_p50_secs: Some(0.5),
                    wait_p90_secs: Some(4.0),
                    wait_p99_secs: Some(9.0),
                    wait_max_secs: Some(9.5),
                    queue_mean: 0.75,
                    queue_max: 3,
                    freezes: 3,
                },
                total: pjw_proto::StartWindow {
                    started: 40,
                    ended: 20,
                    freezes: 4,
                    covered_secs: 1000.0,
                    ..Default::default()
                },
            }),
            memory: Some(MemorySnap {
                limit: 1 << 30,
                used: 300 << 20,
                shared: false,
                outside: true,
                node_psi_some: Some(35.5),
                partition_psi_some: Some(1.0),
            }),
        };
        let page = render(&snap, &m, None);
        for want in [
            "pjw_node_free_cpus 3",
            "pjw_node_info{node=\"cn7\",version=\"",
            "pjw_queue_length 1",
            "pjw_jobs{state=\"running\"} 1",
            "pjw_jobs{state=\"frozen\"} 0",
            "pjw_job_state{job=\"7\",user=\"alice\",state=\"running\"} 1",
            "pjw_node_gpus 4",
            "pjw_node_free_gpus 2",
            "pjw_job_gpu{job=\"7\",user=\"alice\",gpu=\"1\"} 1",
            "pjw_job_gpu{job=\"7\",user=\"alice\",gpu=\"3\"} 1",
            "pjw_job_gpu_utilisation_percent{job=\"7\",user=\"alice\"} 37.5",
            "pjw_job_gpu_memory_bytes{job=\"7\",user=\"alice\"} 3221225472",
            "pjw_job_cpu_seconds_total{job=\"7\",user=\"alice\"} 2.5",
            "pjw_job_memory_bytes{job=\"7\",user=\"alice\"} 314572800",
            "pjw_job_io_read_bytes_total{job=\"7\",user=\"alice\"} 4096",
            "pjw_job_io_weight{job=\"7\",user=\"alice\"} 50",
            "pjw_job_io_max{job=\"7\",user=\"alice\",device=\"254:0\",limit=\"rbps\"} 1048576",
            "pjw_governor_actions_total{kind=\"freeze\"} 1",
            "pjw_governor_actions_total{kind=\"thaw\"} 0",
            "pjw_launch_latency_seconds_count 1",
            "pjw_sampler_duration_seconds_count 0",
            "pjw_store_write_errors_total 2",
            "pjw_jobs_started_total 40",
            "pjw_jobs_ended_total 20",
            "pjw_job_freezes_total 4",
            "pjw_jobs_started_per_second{window=\"300s\"} 0.1",
            "pjw_job_start_wait_seconds{window=\"300s\",stat=\"p90\"} 4.0",
            "pjw_job_start_wait_seconds{window=\"300s\",stat=\"mean\"} 1.5",
            "pjw_queue_length_mean{window=\"300s\"} 0.75",
            "pjw_queue_length_max{window=\"all\"} 0",
            "pjw_job_freezes_per_second{window=\"300s\"} 0.01",
            "pjw_job_oom_kills{job=\"7\",user=\"alice\"} 2",
            "pjw_memory_partition_limit_bytes 1073741824",
            "pjw_memory_partition_used_bytes 314572800",
            "pjw_memory_pressure{source=\"shared\"} 0",
            "pjw_memory_pressure{source=\"outside\"} 1",
            "pjw_memory_psi_some_percent{scope=\"node\"} 35.5",
            "pjw_governor_actions_total{kind=\"kill\"} 0",
        ] {
            assert!(page.contains(want), "{want:?} missing from\n{page}");
        }
        // A job without a GPU reading has no GPU utilisation or memory line.
        assert!(!page.contains("pjw_job_gpu_utilisation_percent{job=\"8\""));
        assert!(!page.contains("pjw_job_gpu_memory_bytes{job=\"8\""));
        assert!(
            !page.contains("pjw_job_oom_kills{job=\"8\""),
            "none: no line"
        );
        assert!(page.ends_with("# EOF\n"));
        let classic = to_classic(&page);
        for want in [
            "# HELP pjw_store_write_errors_total Failed writes to the local store.",
            "# TYPE pjw_store_write_errors_total counter\npjw_store_write_errors_total 2",
            "# TYPE pjw_launch_latency_seconds histogram\n",
            "# TYPE pjw_node_cpus gauge\npjw_node_cpus 4",
        ] {
            assert!(classic.contains(want), "{want:?} missing from\n{classic}");
        }
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
        assert!(wants_openmetrics(
            b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
        ));
        assert!(!wants_openmetrics(b"GET /metrics HTTP/1.1\r\nAccept: */*"));
    }
}
