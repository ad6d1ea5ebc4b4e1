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
use pjw_proto::JobState;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use tracing::warn;

mod http;
mod io;
mod memory;

pub use http::{bind, route, serve, wants_openmetrics, Route};
pub use memory::MemorySnap;

/// What the governor did.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum GovernorKind {
    throttle,
    unthrottle,
    freeze,
    thaw,
    /// The last step: a job frozen longer than `memory.frozen_max` killed.
    kill,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: GovernorKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: String,
    user: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobStateLabels {
    job: String,
    user: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobGpuLabels {
    job: String,
    user: String,
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// Counters and histograms fed by the engine and the sampler.
#[derive(Debug)]
pub struct Metrics {
    governor_actions: Family<KindLabel, Counter>,
    launch_latency: Histogram,
    sampler_duration: Histogram,
    store_write_errors: Counter,
    kernel_read_errors: Counter,
    connections_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            governor_actions: Family::default(),
            // 1 ms to ~16 s.
            launch_latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            // 0.1 ms to ~0.8 s.
            sampler_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            store_write_errors: Counter::default(),
            kernel_read_errors: Counter::default(),
            connections_refused: Counter::default(),
        };
        // Every kind shows, with 0, from the first scrape.
        for kind in [
            GovernorKind::throttle,
            GovernorKind::unthrottle,
            GovernorKind::freeze,
            GovernorKind::thaw,
            GovernorKind::kill,
        ] {
            let _ = m.governor_actions.get_or_create(&KindLabel { kind });
        }
        m
    }

    /// The governor acted.
    pub fn governor_action(&self, kind: GovernorKind) {
        self.governor_actions
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// A job started, `secs` after it was submitted.
    pub fn launch(&self, secs: f64) {
        self.launch_latency.observe(secs);
    }

    /// One sampler pass took `secs`.
    pub fn sampler_pass(&self, secs: f64) {
        self.sampler_duration.observe(secs);
    }

    /// A write to the local store failed.
    pub fn store_write_error(&self) {
        self.store_write_errors.inc();
    }

    /// Failed writes the engine counted so far.
    pub fn store_write_errors(&self) -> u64 {
        self.store_write_errors.get()
    }

    /// Reading a job's state from the kernel failed (and was not taken as an answer).
    pub fn kernel_read_error(&self) {
        self.kernel_read_errors.inc();
    }

    /// A connection was refused (a user over their limit, or the daemon out of descriptors).
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }
}

/// One job as the engine holds it.
#[derive(Clone, Debug)]
pub struct JobSnap {
    pub id: String,
    pub user: String,
    pub state: JobState,
    /// Its cgroup name when it has started (the scrape reads CPU and memory there when the
    /// sampler has no sample of it yet, or is off).
    pub cgroup: Option<String>,
    /// From the sampler's latest sample: CPU time (µs) and memory (bytes).
    pub cpu_usec: Option<u64>,
    pub mem_bytes: Option<u64>,
    /// pjw's ids of the GPUs it holds.
    pub gpus: pjw_core::GpuSet,
    /// From the latest sample: bytes read and written (where the node counts I/O).
    pub io_rbytes: Option<u64>,
    pub io_wbytes: Option<u64>,
    /// Its I/O weight and limits.
    pub io: pjw_core::io_limits::JobIo,
    /// From the latest sample (NVML): mean utilisation of its GPUs (percent) and their used
    /// memory (bytes); None without a reading.
    pub gpu_util: Option<f64>,
    pub gpu_mem: Option<u64>,
    /// Processes the kernel OOM-killed in it so far.
    pub oom_kills: u64,
}

/// The engine's answer to a scrape: in-memory state only.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The node's name (its host name), for `pjw_node_info`: a cluster's Prometheus joins
    /// every other series of a target on it.
    pub node: String,
    pub cpus: u32,
    pub free_cpus: u32,
    /// The node's GPUs, and those no job holds.
    pub gpus: u32,
    pub free_gpus: u32,
    pub queue_len: u32,
    pub jobs: Vec<JobSnap>,
    /// Failed writes to the local store (the profile writer's count).
    pub store_write_errors: u64,
    /// Start-time statistics (the engine's; None in tests that do not need them).
    pub starts: Option<pjw_proto::StartStats>,
    /// The job partition's memory as the governor last saw it.
    pub memory: Option<MemorySnap>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowLabel {
    window: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowStatLabel {
    window: String,
    stat: String,
}

/// The start-time statistics' families (issue 27): counters since start, and per window
/// (`window="300s"` for the recent one, `window="all"` since the daemon started) the rates,
/// the wait from submission to start (mean, percentiles, maximum), the queue length's mean and
/// most, and freezes per second.
fn register_starts(reg: &mut Registry, s: &pjw_proto::StartStats) {
    let counter = |v: u64| {
        let c: Counter = Counter::default();
        c.inc_by(v);
        c
    };
    reg.register(
        "jobs_started",
        "Jobs started since the daemon started",
        counter(s.total.started),
    );
    reg.register(
        "jobs_ended",
        "Started jobs that ended since the daemon started",
        counter(s.total.ended),
    );
    reg.register(
        "job_freezes",
        "Jobs frozen (preempted, suspended, memory governor) since the daemon started",
        counter(s.total.freezes),
    );
    let started: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let ended: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let freezes: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let queue_mean: Family<WindowLabel, Gauge<f64, AtomicU64>> = Family::default();
    let queue_max: Family<WindowLabel, Gauge> = Family::default();
    let wait: Family<WindowStatLabel, Gauge<f64, AtomicU64>> = Family::default();
    for w in [&s.recent, &s.total] {
        let window = if w.window_secs == 0 {
            "all".to_string()
        } else {
            format!("{}s", w.window_secs)
        };
        let l = WindowLabel {
            window: window.clone(),
        };
        started.get_or_create(&l).set(w.started_per_sec);
        ended.get_or_create(&l).set(w.ended_per_sec);
        let per_sec = if w.covered_secs > 0.0 {
            w.freezes as f64 / w.covered_secs
        } else {
            0.0
        };
        freezes.get_or_create(&l).set(per_sec);
        queue_mean.get_or_create(&l).set(w.queue_mean);
        queue_max.get_or_create(&l).set(i64::from(w.queue_max));
        for (stat, v) in [
            ("mean", w.wait_mean_secs),
            ("p50", w.wait_p50_secs),
            ("p90", w.wait_p90_secs),
            ("p99", w.wait_p99_secs),
            ("max", w.wait_max_secs),
        ] {
            if let Some(v) = v {
                wait.get_or_create(&WindowStatLabel {
                    window: window.clone(),
                    stat: stat.into(),
                })
                .set(v);
            }
        }
    }
    reg.register(
        "jobs_started_per_second",
        "Jobs started per second over the window",
        started,
    );
    reg.register(
        "jobs_ended_per_second",
        "Started jobs that ended, per second over the window",
        ended,
    );
    reg.register(
        "job_freezes_per_second",
        "Jobs frozen per second over the window",
        freezes,
    );
    reg.register_with_unit(
        "job_start_wait",
        "Time from a job's submission to its start over the window: mean, percentiles (within 10%), max",
        Unit::Seconds,
        wait,
    );
    reg.register(
        "queue_length_mean",
        "Jobs waiting for CPUs, time-weighted mean over the window",
        queue_mean,
    );
    reg.register(
        "queue_length_max",
        "Most jobs waiting for CPUs at once over the window",
        queue_max,
    );
}

/// Render the metrics page: the snapshot, per-job cgroup reads through `driver`, and the
/// shared counters. Blocking (reads cgroup files): call it off the engine's thread.
pub fn render(snap: &Snapshot, metrics: &Metrics, driver: Option<&Driver>) -> String {
    let mut reg = Registry::with_prefix("pjw");
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

    let cpu: Family<JobLabels, Counter<f64, AtomicU64>> = Family::default();
    let mem: Family<JobLabels, Gauge> = Family::default();
    let state: Family<JobStateLabels, Gauge> = Family::default();
    let gpu: Family<JobGpuLabels, Gauge> = Family::default();
    let gpu_util: Family<JobLabels, Gauge<f64, AtomicU64>> = Family::default();
    let gpu_mem: Family<JobLabels, Gauge> = Family::default();
    for j in &snap.jobs {
        for g in j.gpus.iter() {
            gpu.get_or_create(&JobGpuLabels {
                job: j.id.clone(),
                user: j.user.clone(),
                gpu: g.to_string(),
            })
            .set(1);
        }
        let labels = JobLabels {
            job: j.id.clone(),
            user: j.user.clone(),
        };
        if let Some(u) = j.gpu_util {
            gpu_util.get_or_create(&labels).set(u);
        }
        if let Some(b) = j.gpu_mem {
            gpu_mem
                .get_or_create(&labels)
                .set(b.min(i64::MAX as u64) as i64);
        }
        state
            .get_or_create(&JobStateLabels {
                job: j.id.clone(),
                user: j.user.clone(),
                state: j.state.as_str().into(),
            })
            .set(1);
        let Some(cg) = &j.cgroup else {
            continue;
        };
        let cpu_usec = j.cpu_usec.or_else(|| {
            let c = driver?.cpu_time(cg).ok()?;
            Some(c.user_usec + c.system_usec)
        });
        let mem_bytes = j.mem_bytes.or_else(|| driver?.memory_usage(cg).ok());
        if let Some(us) = cpu_usec {
            cpu.get_or_create(&labels).inc_by(us as f64 / 1e6);
        }
        if let Some(b) = mem_bytes {
            mem.get_or_create(&labels).set(b as i64);
        }
    }
    reg.register_with_unit(
        "job_cpu",
        "CPU time used by the job (user + system)",
        Unit::Seconds,
        cpu,
    );
    reg.register_with_unit(
        "job_memory",
        "Memory charged to the job's cgroup",
        Unit::Bytes,
        mem,
    );
    reg.register(
        "job_state",
        "The job's state (1 for its current state)",
        state,
    );
    io::register(&mut reg, &snap.jobs);
    if let Some(s) = &snap.starts {
        register_starts(&mut reg, s);
    }
    memory::register(&mut reg, snap.memory.as_ref(), &snap.jobs);
    reg.register(
        "job_gpu",
        "A GPU the job holds (1 per GPU; gpu is pjw's id, as in PJW_GPUS)",
        gpu,
    );
    reg.register(
        "job_gpu_utilisation_percent",
        "Mean utilisation of the job's GPUs in the latest sample (NVML)",
        gpu_util,
    );
    reg.register_with_unit(
        "job_gpu_memory",
        "GPU memory the job's GPUs use, summed, in the latest sample (NVML)",
        Unit::Bytes,
        gpu_mem,
    );
    reg.register(
        "governor_actions",
        "Memory governor actions by kind",
        metrics.governor_actions.clone(),
    );
    reg.register_with_unit(
        "launch_latency",
        "Time from a job's submission to its start",
        Unit::Seconds,
        metrics.launch_latency.clone(),
    );
    reg.register_with_unit(
        "sampler_duration",
        "Time one sampler pass over all jobs took",
        Unit::Seconds,
        metrics.sampler_duration.clone(),
    );
    let errors = metrics.store_write_errors.clone();
    // The profile writer counts its failures; the engine's own are counted here.
    let total: Counter = Counter::default();
    total.inc_by(errors.get() + snap.store_write_errors);
    reg.register(
        "store_write_errors",
        "Failed writes to the local store",
        total,
    );
    reg.register(
        "kernel_read_errors",
        "Reads of a job's state from the kernel that failed and were retried",
        metrics.kernel_read_errors.clone(),
    );
    reg.register(
        "connections_refused",
        "Client connections refused: a user over their limit or no descriptor left",
        metrics.connections_refused.clone(),
    );
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
