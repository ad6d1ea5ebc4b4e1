//! The load of a big cluster on one PostgreSQL (bench/scenarios/central.sh runs it).
//!
//! `--nodes` simulated nodes (2,000), each with about `--jobs` running jobs (16; each node's
//! count drawn between half and one and a half of it) sampled every `--interval` seconds (10, the
//! default `[profile] interval`), jobs lasting `--job-mean` seconds on average (between half and
//! one and a half of it), ship to PostgreSQL through pjw's own shipping pass
//! ([`pjw_central::pass`]: a short-lived connection, migrations checked once, batches of
//! `--batch` jobs as multi-row upserts, the close) over the simulated nodes' spools
//! ([`pjw_central::Spool`]). `--mode finished` is the default config (a job's whole series goes
//! when it ends); `--mode live` is `ship_samples = true` (every node every `--retry` seconds,
//! jittered, as the shipper does). `--workers` threads run the passes when they fall due; a pass
//! that starts late shows as lag, and passes due but not started as backlog.
//!
//! Without `--url` it starts its own PostgreSQL (pjw-testkit's, with fsync on, TLS with a
//! certificate of its own CA and a password for TCP logins, `max_connections` 100) and ships
//! over `sslmode=verify-full`. It first files `--history-days` days of finished jobs at the
//! cluster's rate (SQL `generate_series`, not the shipping path) so the cluster queries run
//! against a table of that size, then runs for `--duration` seconds, then times the cluster
//! queries of `pjw report --central` (pjw-central's own `jobs`), then shows retention at work
//! (old partitions filled, maintenance run, sizes before and after).
//!
//! Output: `key=value` lines on stdout (bench/scenarios/central.sh reads them); progress on
//! stderr.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pjw_central::{Central, CentralFilter, Endpoint, Order, Retention, Spool};
use pjw_core::CpuSet;
use pjw_store::{EndClass, JobRecord, JobSummary, Sample, StoreError};

const DAY: i64 = 86_400_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A small deterministic generator (xorshift64*): no dependency for a simulation.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [a·(1-s), a·(1+s)].
    fn around(&mut self, a: f64, s: f64) -> f64 {
        a * (1.0 - s + 2.0 * s * self.unit())
    }
}

#[derive(Clone, Debug)]
struct Args {
    url: Option<String>,
    password_file: Option<String>,
    nodes: usize,
    jobs: f64,
    interval_s: f64,
    job_mean_s: f64,
    duration_s: f64,
    mode_live: bool,
    retry_s: f64,
    workers: usize,
    batch: usize,
    history_days: u32,
    max_connections: u32,
    seed: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        url: None,
        password_file: None,
        nodes: 2000,
        jobs: 16.0,
        interval_s: 10.0,
        job_mean_s: 7200.0,
        duration_s: 300.0,
        mode_live: false,
        retry_s: 60.0,
        workers: 64,
        batch: 100,
        history_days: 7,
        max_connections: 100,
        seed: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || {
            it.next().unwrap_or_else(|| {
                eprintln!("central_load: {k} needs a value");
                std::process::exit(2)
            })
        };
        let num = |s: String| -> f64 {
            s.parse().unwrap_or_else(|_| {
                eprintln!("central_load: {s:?} is not a number");
                std::process::exit(2)
            })
        };
        match k.as_str() {
            "--url" => a.url = Some(v()),
            "--password-file" => a.password_file = Some(v()),
            "--nodes" => a.nodes = num(v()) as usize,
            "--jobs" => a.jobs = num(v()),
            "--interval" => a.interval_s = num(v()),
            "--job-mean" => a.job_mean_s = num(v()),
            "--duration" => a.duration_s = num(v()),
            "--mode" => {
                a.mode_live = match v().as_str() {
                    "live" => true,
                    "finished" => false,
                    m => {
                        eprintln!("central_load: --mode {m:?} is not finished or live");
                        std::process::exit(2)
                    }
                }
            }
            "--retry" => a.retry_s = num(v()),
            "--workers" => a.workers = num(v()) as usize,
            "--batch" => a.batch = num(v()) as usize,
            "--history-days" => a.history_days = num(v()) as u32,
            "--max-connections" => a.max_connections = num(v()) as u32,
            "--seed" => a.seed = num(v()) as u64,
            "-h" | "--help" => {
                eprintln!("see the header of crates/central/examples/central_load.rs");
                std::process::exit(0)
            }
            other => {
                eprintln!("central_load: unknown argument {other:?}");
                std::process::exit(2)
            }
        }
    }
    a
}

/// A job of a simulated node.
#[derive(Clone, Debug)]
struct SimJob {
    rec: JobRecord,
    end_ms: i64,
    cpu_frac: f64,
    mem: u64,
    /// Finished and waiting to be shipped.
    done: bool,
}

/// What every node adds to the totals (shared, cheap).
#[derive(Debug, Default)]
struct Totals {
    sample_rows: AtomicU64,
    jobs: AtomicU64,
    passes: AtomicU64,
    errors: AtomicU64,
    limit_errors: AtomicU64,
}

/// A simulated node: its running jobs and its spool.
#[derive(Debug)]
struct SimNode {
    name: String,
    rng: Rng,
    next_seq: i64,
    jobs: Vec<SimJob>,
    interval_ms: i64,
    job_mean_ms: f64,
    /// Ship latencies (job end → commit), ms.
    latencies: Vec<i64>,
    next_live: i64,
    /// With live samples: what was taken before this moment counts as shipped before the run
    /// (a steady state, not every running job's whole past at the first pass).
    shipped_before: Option<i64>,
}

const USERS: u64 = 500;

impl SimNode {
    fn new(i: usize, a: &Args, now: i64) -> SimNode {
        let mut rng = Rng(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1));
        for _ in 0..4 {
            rng.next();
        }
        let running = rng.around(a.jobs, 0.5).round().max(1.0) as usize;
        let mut n = SimNode {
            name: format!("cn{i:04}"),
            rng,
            next_seq: 1,
            jobs: Vec::new(),
            interval_ms: (a.interval_s * 1000.0) as i64,
            job_mean_ms: a.job_mean_s * 1000.0,
            latencies: Vec::new(),
            next_live: now + (a.retry_s * 1000.0 * (i as f64 / a.nodes as f64)) as i64,
            shipped_before: a.mode_live.then_some(now),
        };
        // In a steady state already: each job is somewhere in its life.
        for _ in 0..running {
            let dur = n.rng.around(n.job_mean_ms, 0.5) as i64;
            let age = (n.rng.unit() * dur as f64) as i64;
            n.start_job(now - age, dur);
        }
        n
    }

    fn start_job(&mut self, start: i64, dur: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let user = self.rng.next() % USERS;
        let queued = (self.rng.unit().powi(3) * 3_600_000.0) as i64;
        let rec = JobRecord {
            seq,
            job_id: format!("{}.{}", self.name, seq),
            name: format!("sim{}", self.rng.next() % 50),
            uid: 10_000 + user as u32,
            gid: 10_000,
            user: format!("user{user}"),
            ncpus: 1 + (self.rng.next() % 8) as u32,
            cpus: CpuSet::parse_list("0-3").unwrap(),
            mems: CpuSet::parse_list("0").unwrap(),
            mem_limit: Some(8 << 30),
            pid: None,
            pid_start: None,
            cgroup: String::new(),
            argv: vec![],
            state: pjw_store::StoredState::Running,
            submitted_ms: start - queued,
            started_ms: Some(start),
            ended_ms: None,
            end_reason: None,
            priority: 10,
            placement: pjw_core::sched::Placement::Any,
            exclusive: false,
            role: pjw_store::StoredRole::Primary,
        };
        let cpu_frac = self.rng.unit();
        let mem = (self.rng.unit() * 16.0 * (1u64 << 30) as f64) as u64;
        self.jobs.push(SimJob {
            rec,
            end_ms: start + dur,
            cpu_frac,
            mem,
            done: false,
        });
    }

    /// Jobs whose end has come are finished (and replaced by new ones).
    fn advance(&mut self, now: i64) {
        let ended: Vec<i64> = self
            .jobs
            .iter()
            .filter(|j| !j.done && j.end_ms <= now)
            .map(|j| j.end_ms)
            .collect();
        for j in self.jobs.iter_mut().filter(|j| !j.done && j.end_ms <= now) {
            j.done = true;
            j.rec.ended_ms = Some(j.end_ms);
            j.rec.end_reason = Some("exited".into());
            j.rec.state = pjw_store::StoredState::Ended;
        }
        for end in ended {
            let dur = self.rng.around(self.job_mean_ms, 0.5) as i64;
            self.start_job(end, dur);
        }
    }

    fn next_end(&self) -> i64 {
        self.jobs
            .iter()
            .filter(|j| !j.done)
            .map(|j| j.end_ms)
            .min()
            .unwrap_or(i64::MAX)
    }

    fn series(&self, j: &SimJob, since: Option<i64>, until: i64) -> Vec<Sample> {
        let start = j.rec.started_ms.unwrap_or(0);
        let first = start + self.interval_ms;
        let mut t = match since {
            Some(s) if s > first => {
                first + (s - first + self.interval_ms - 1) / self.interval_ms * self.interval_ms
            }
            _ => first,
        };
        let mut out = Vec::new();
        while t <= until.min(j.end_ms) {
            let secs = (t - start) as u64 / 1000;
            out.push(Sample {
                seq: j.rec.seq,
                ts_ms: t,
                state: Some(pjw_store::SampleState::Running),
                cpu_user_usec: Some((secs as f64 * j.cpu_frac * 1e6) as u64 * j.rec.ncpus as u64),
                cpu_system_usec: Some(secs * 20_000),
                mem_current: Some(j.mem),
                mem_peak: Some(j.mem),
                mem_anon: Some(j.mem * 3 / 4),
                mem_file: Some(j.mem / 4),
                swap: Some(0),
                io_rbytes: Some(secs * 4096),
                io_wbytes: Some(secs * 8192),
                procs: Some(j.rec.ncpus),
                threads: Some(j.rec.ncpus * 2),
                psi_cpu_some: Some(0.5),
                psi_cpu_full: Some(0.0),
                psi_mem_some: Some(0.0),
                psi_mem_full: Some(0.0),
                psi_io_some: Some(0.1),
                psi_io_full: Some(0.0),
                gpu_util: None,
                gpu_mem: None,
            });
            t += self.interval_ms;
        }
        out
    }

    fn summary(&self, j: &SimJob) -> JobSummary {
        let mut s = JobSummary::new(j.rec.seq, &self.name, EndClass::Completed);
        let start = j.rec.started_ms.unwrap_or(0);
        let secs = (j.end_ms - start).max(0) as u64 / 1000;
        s.exit_status = Some(0);
        s.queued_ms = start - j.rec.submitted_ms;
        s.running_ms = j.end_ms - start;
        s.cpu_user_usec = (secs as f64 * j.cpu_frac * 1e6) as u64 * j.rec.ncpus as u64;
        s.cpu_system_usec = secs * 20_000;
        s.mem_peak = j.mem;
        s.io_rbytes = secs * 4096;
        s.io_wbytes = secs * 8192;
        s.procs_max = j.rec.ncpus;
        s.threads_max = j.rec.ncpus * 2;
        s.samples = ((j.end_ms - start - self.interval_ms) / self.interval_ms + 1).max(0) as u32;
        s
    }
}

impl Spool for SimNode {
    fn unshipped(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        Ok(self
            .jobs
            .iter()
            .filter(|j| j.done)
            .take(limit)
            .map(|j| self.summary(j))
            .collect())
    }
    fn job(&self, seq: i64) -> Result<Option<JobRecord>, StoreError> {
        Ok(self
            .jobs
            .iter()
            .find(|j| j.rec.seq == seq)
            .map(|j| j.rec.clone()))
    }
    fn samples(&self, seq: i64, since_ms: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        let now = now_ms();
        let since_ms = match (since_ms, self.shipped_before) {
            (Some(s), Some(b)) => Some(s.max(b)),
            (s, b) => s.or(b),
        };
        Ok(self
            .jobs
            .iter()
            .find(|j| j.rec.seq == seq)
            .map(|j| self.series(j, since_ms, now))
            .unwrap_or_default())
    }
    fn mark_shipped(&mut self, seqs: &[i64], _at_ms: i64) -> Result<(), StoreError> {
        // Called right after PostgreSQL's commit: the job's end to here is its ship latency.
        let now = now_ms();
        let mut lat = Vec::new();
        self.jobs.retain(|j| {
            let gone = j.done && seqs.contains(&j.rec.seq);
            if gone {
                lat.push(now - j.end_ms);
            }
            !gone
        });
        self.latencies.extend(lat);
        Ok(())
    }
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Ok(self
            .jobs
            .iter()
            .filter(|j| !j.done)
            .map(|j| j.rec.clone())
            .collect())
    }
}

/// Passes falling due: (due ms, node).
type Due = Arc<(Mutex<BinaryHeap<Reverse<(i64, usize)>>>, Condvar)>;

fn pct(v: &mut [i64], p: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// CPU seconds of every process of `uid` (with their reaped children's).
fn cpu_of_uid(uid: u32) -> f64 {
    let hz = 100.0;
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(status) = std::fs::read_to_string(p.join("status")) else {
            continue;
        };
        let owner = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|u| u.parse::<u32>().ok());
        if owner != Some(uid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue;
        };
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<f64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        // After the ")": state is [0], utime [11], stime [12], cutime [13], cstime [14].
        if f.len() > 14 {
            total += (f[11] + f[12] + f[13] + f[14]) / hz;
        }
    }
    total
}

fn postgres_uid() -> Option<u32> {
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres")).then(|| f.get(2)?.parse().ok())?
        })
}

/// Set by SIGINT or SIGTERM: stop, drop the private server, exit 130.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

fn out(k: &str, v: impl std::fmt::Display) {
    println!("{k}={v}");
}

fn main() {
    let a = parse_args();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    run(&a);
    if interrupted() {
        std::process::exit(130);
    }
}

fn run(a: &Args) {
    // A private server unless one is named.
    let ca;
    let _pg;
    let (url, password) = match &a.url {
        Some(u) => (
            u.clone(),
            a.password_file.as_ref().map(|f| {
                std::fs::read_to_string(f)
                    .expect("read the password file")
                    .trim_end()
                    .to_string()
            }),
        ),
        None => {
            ca = pjw_testkit::tls::TestCa::new("pjw-bench-ca");
            let cert = ca.issue("db", &["127.0.0.1", "localhost"]);
            let pg = pjw_testkit::pg::PgServer::start_with(pjw_testkit::pg::PgOptions {
                tls: Some((cert.cert.clone(), cert.key.clone())),
                password: Some("bench-s3cret".into()),
                max_connections: Some(a.max_connections),
                settings: vec!["fsync=on".into()],
                ..Default::default()
            });
            let url = format!(
                "postgres://pjw@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={}",
                pg.port(),
                ca.cert().display()
            );
            _pg = pg;
            (url, Some("bench-s3cret".to_string()))
        }
    };
    let ep = Endpoint::new(&url, password.as_deref()).expect("endpoint");
    let retention = Retention::default();
    let mut admin = Central::open(&ep, &retention).expect("connect");
    let max_conn: i64 = admin
        .client()
        .query_one("SELECT current_setting('max_connections')::bigint", &[])
        .unwrap()
        .get(0);
    let now0 = now_ms();
    let jobs_per_day = (a.nodes as f64 * a.jobs * 86_400.0 / a.job_mean_s) as i64;
    out("nodes", a.nodes);
    out("jobs_per_node", a.jobs);
    out("interval_s", a.interval_s);
    out("job_mean_s", a.job_mean_s);
    out("mode", if a.mode_live { "live" } else { "finished" });
    out("retry_s", a.retry_s);
    out("workers", a.workers);
    out("max_connections", max_conn);
    out("sslmode", ep.tls_mode().as_str());
    out(
        "offered_rows_per_s",
        format!("{:.0}", a.nodes as f64 * a.jobs / a.interval_s),
    );
    out("jobs_per_day", jobs_per_day);

    // History: `--history-days` of finished jobs at the cluster's rate.
    if a.history_days > 0 {
        let t = Instant::now();
        fill_history(&mut admin, a, now0, jobs_per_day);
        if interrupted() {
            return;
        }
        out("history_jobs", jobs_per_day * a.history_days as i64);
        out(
            "history_fill_s",
            format!("{:.1}", t.elapsed().as_secs_f64()),
        );
    }

    // The nodes (in a steady state from now on) and their first passes.
    let start_ms = now_ms();
    let nodes: Arc<Vec<Mutex<SimNode>>> = Arc::new(
        (0..a.nodes)
            .map(|i| Mutex::new(SimNode::new(i, a, start_ms)))
            .collect(),
    );
    // Each node's next pass, published for the backlog count (a pass late or still running
    // more than a second after it fell due).
    let due_at: Arc<Vec<std::sync::atomic::AtomicI64>> = Arc::new(
        (0..a.nodes)
            .map(|_| std::sync::atomic::AtomicI64::new(i64::MAX))
            .collect(),
    );
    let due: Due = Arc::new((Mutex::new(BinaryHeap::new()), Condvar::new()));
    {
        let mut h = due.0.lock().unwrap();
        for (i, n) in nodes.iter().enumerate() {
            let n = n.lock().unwrap();
            let next = if a.mode_live {
                n.next_end().min(n.next_live)
            } else {
                n.next_end()
            };
            due_at[i].store(next, Ordering::Relaxed);
            h.push(Reverse((next, i)));
        }
    }
    let totals = Arc::new(Totals::default());
    let lags = Arc::new(Mutex::new(Vec::<i64>::new()));
    let durations = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let end_at = Instant::now() + Duration::from_secs_f64(a.duration_s);
    let pg_uid = postgres_uid();
    let pg_cpu0 = pg_uid.map(cpu_of_uid).unwrap_or(0.0);
    let wal0: i64 = admin
        .client()
        .query_one("SELECT wal_bytes::bigint FROM pg_stat_wal", &[])
        .map(|r| r.get(0))
        .unwrap_or(0);
    let t0 = Instant::now();

    // Workers: each takes the earliest pass that is due.
    let mut handles = Vec::new();
    for _ in 0..a.workers {
        let due_at = due_at.clone();
        let (nodes, due, totals, lags, durations, stop, ep, a) = (
            nodes.clone(),
            due.clone(),
            totals.clone(),
            lags.clone(),
            durations.clone(),
            stop.clone(),
            ep.clone(),
            a.clone(),
        );
        let mut ep = ep;
        handles.push(std::thread::spawn(move || loop {
            let (when, i) = {
                let (lock, cv) = &*due;
                let mut h = lock.lock().unwrap();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let now = now_ms();
                    match h.peek() {
                        Some(Reverse((t, _))) if *t <= now => break,
                        Some(Reverse((t, _))) => {
                            let wait = Duration::from_millis((*t - now).clamp(1, 200) as u64);
                            h = cv.wait_timeout(h, wait).unwrap().0;
                        }
                        None => h = cv.wait_timeout(h, Duration::from_millis(200)).unwrap().0,
                    }
                }
                h.pop().unwrap().0
            };
            let started = now_ms();
            lags.lock().unwrap().push(started - when);
            let mut n = nodes[i].lock().unwrap();
            n.advance(started);
            ep.set_application_name(&format!("pjw/{}", n.name));
            let live = a.mode_live.then(|| n.name.clone());
            let t = Instant::now();
            let res = pjw_central::pass(&ep, &retention, &mut *n, a.batch, live.as_deref(), false);
            durations
                .lock()
                .unwrap()
                .push(t.elapsed().as_millis() as i64);
            totals.passes.fetch_add(1, Ordering::Relaxed);
            let retry_ms = (a.retry_s * 1000.0) as i64;
            let next = match res {
                Ok(p) => {
                    totals.jobs.fetch_add(p.jobs as u64, Ordering::Relaxed);
                    totals
                        .sample_rows
                        .fetch_add(p.live_samples as u64, Ordering::Relaxed);
                    if a.mode_live && n.next_live <= started {
                        n.next_live = started + n.rng.around(retry_ms as f64, 0.25) as i64;
                    }
                    if a.mode_live {
                        n.next_end().min(n.next_live)
                    } else {
                        n.next_end()
                    }
                }
                Err(e) => {
                    totals.errors.fetch_add(1, Ordering::Relaxed);
                    if e.is_connection_limit() {
                        totals.limit_errors.fetch_add(1, Ordering::Relaxed);
                    } else {
                        eprintln!("central_load: {}: {e}", n.name);
                    }
                    started + n.rng.around(retry_ms as f64, 0.25) as i64
                }
            };
            drop(n);
            due_at[i].store(next, Ordering::Relaxed);
            let (lock, cv) = &*due;
            lock.lock().unwrap().push(Reverse((next, i)));
            cv.notify_one();
        }));
    }

    // Watch: connections in use, backlog (passes due but not started), rows in PostgreSQL.
    let mut conn_samples = Vec::new();
    let mut backlog = Vec::new();
    let mut rows_series = Vec::new();
    let mut last_print = Instant::now();
    while Instant::now() < end_at && !interrupted() {
        std::thread::sleep(Duration::from_millis(250));
        let conns: i64 = admin
            .client()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pjw/cn%'",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap_or(-1);
        conn_samples.push(conns);
        let now = now_ms();
        let overdue = due_at
            .iter()
            .filter(|t| t.load(Ordering::Relaxed) < now - 1000)
            .count();
        backlog.push((t0.elapsed().as_secs_f64(), overdue));
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            let n: i64 = admin
                .client()
                .query_one("SELECT count(*) FROM pjw_samples", &[])
                .map(|r| r.get(0))
                .unwrap_or(0);
            rows_series.push((t0.elapsed().as_secs_f64(), n));
            eprintln!(
                "central_load: {:>4.0} s: {} sample rows, {} jobs, {} passes, {} overdue, {} connections",
                t0.elapsed().as_secs_f64(),
                n,
                totals.jobs.load(Ordering::Relaxed),
                totals.passes.load(Ordering::Relaxed),
                overdue,
                conns
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    due.1.notify_all();
    for h in handles {
        let _ = h.join();
    }
    if interrupted() {
        return;
    }
    let secs = t0.elapsed().as_secs_f64();
    let pg_cpu = pg_uid.map(cpu_of_uid).unwrap_or(0.0) - pg_cpu0;
    let wal1: i64 = admin
        .client()
        .query_one("SELECT wal_bytes::bigint FROM pg_stat_wal", &[])
        .map(|r| r.get(0))
        .unwrap_or(0);
    let rows: i64 = admin
        .client()
        .query_one("SELECT count(*) FROM pjw_samples", &[])
        .unwrap()
        .get(0);
    // Rows/s in PostgreSQL over the run's second half (the first may still fill up).
    let half: Vec<&(f64, i64)> = rows_series
        .iter()
        .filter(|(t, _)| *t >= secs / 2.0)
        .collect();
    let rate_2nd = match (half.first(), half.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / (b.0 - a.0),
        _ => 0.0,
    };
    let first = rows_series.first().copied().unwrap_or((0.0, 0));
    let rate_all = match rows_series.last() {
        Some(b) if b.0 > first.0 => (b.1 - first.1) as f64 / (b.0 - first.0),
        _ => 0.0,
    };
    out("duration_s", format!("{secs:.0}"));
    out("sample_rows", rows);
    out("rows_per_s", format!("{rate_all:.0}"));
    out("rows_per_s_second_half", format!("{rate_2nd:.0}"));
    out("jobs_shipped", totals.jobs.load(Ordering::Relaxed));
    out("passes", totals.passes.load(Ordering::Relaxed));
    out("errors", totals.errors.load(Ordering::Relaxed));
    out(
        "connection_limit_refusals",
        totals.limit_errors.load(Ordering::Relaxed),
    );
    let mut cs = conn_samples.clone();
    out("connections_max", cs.iter().copied().max().unwrap_or(0));
    out("connections_p99", pct(&mut cs, 0.99));
    out(
        "connections_mean",
        format!(
            "{:.2}",
            conn_samples.iter().sum::<i64>() as f64 / conn_samples.len().max(1) as f64
        ),
    );
    // Backlog: passes overdue by more than 1 s, mean of the first and last thirds.
    let third = |lo: f64, hi: f64| -> f64 {
        let v: Vec<usize> = backlog
            .iter()
            .filter(|(t, _)| *t >= lo * secs && *t < hi * secs)
            .map(|(_, n)| *n)
            .collect();
        v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
    };
    out(
        "backlog_first_third",
        format!("{:.2}", third(0.0, 1.0 / 3.0)),
    );
    out(
        "backlog_last_third",
        format!("{:.2}", third(2.0 / 3.0, 1.01)),
    );
    out(
        "backlog_max",
        backlog.iter().map(|(_, n)| *n).max().unwrap_or(0),
    );
    let mut l = lags.lock().unwrap().clone();
    out("pass_lag_p50_ms", pct(&mut l, 0.5));
    out("pass_lag_p99_ms", pct(&mut l, 0.99));
    let mut d = durations.lock().unwrap().clone();
    out("pass_ms_p50", pct(&mut d, 0.5));
    out("pass_ms_p99", pct(&mut d, 0.99));
    out("pass_ms_max", d.iter().copied().max().unwrap_or(0));
    let mut lat: Vec<i64> = nodes
        .iter()
        .flat_map(|n| n.lock().unwrap().latencies.clone())
        .collect();
    out("ship_latency_jobs", lat.len());
    out("ship_latency_p50_ms", pct(&mut lat, 0.5));
    out("ship_latency_p99_ms", pct(&mut lat, 0.99));
    out(
        "ship_latency_max_ms",
        lat.iter().copied().max().unwrap_or(0),
    );
    out("postgres_cpu_s", format!("{pg_cpu:.1}"));
    out("postgres_cpu_share", format!("{:.3}", pg_cpu / secs));
    out(
        "wal_bytes_per_s",
        format!("{:.0}", (wal1 - wal0) as f64 / secs),
    );

    sizes(&mut admin, "before_retention");
    queries(&mut admin, now_ms(), a.nodes);
    retention_demo(&mut admin, &ep, now_ms());
    sizes(&mut admin, "after_retention");
}

/// `--history-days` of finished jobs (one INSERT … SELECT generate_series per day).
fn fill_history(c: &mut Central, a: &Args, now: i64, per_day: i64) {
    use pjw_central::schema::{ensure_partitions, Table};
    let mut need = std::collections::BTreeSet::new();
    for d in 0..=a.history_days as i64 {
        need.insert((Table::Jobs, Table::Jobs.start_of(now - d * DAY)));
    }
    ensure_partitions(c.client(), &need).expect("partitions");
    for d in 1..=a.history_days as i64 {
        if interrupted() {
            return;
        }
        let day0 = now - d * DAY;
        let sql = format!(
            "INSERT INTO pjw_jobs SELECT
               'cn' || lpad((g % {nodes})::text, 4, '0'), 'h' || g || '.' || {d}, -(g + {d} * 100000000),
               'sim' || (g % 50), 'user' || (g % {users}), 10000 + (g % {users}), 1 + g % 8, '0-3', 8589934592,
               {day0} + g::bigint * {DAY} / {per_day} - 600000 - (g % 3600) * 1000,
               {day0} + g::bigint * {DAY} / {per_day} - 600000,
               {day0} + g::bigint * {DAY} / {per_day}, 'exited', 0, 'completed',
               600000 + (g % 3600) * 1000, 600000, 0, 0, 0,
               (random() * 3.6e10)::bigint, (random() * 1e9)::bigint, (random() * 1.7e10)::bigint, 0,
               0, 0, NULL, NULL, 4, 8, 60, {day0}, NULL, NULL, NULL
             FROM generate_series(0, {per_day} - 1) g",
            nodes = a.nodes,
            users = USERS,
        );
        c.client().batch_execute(&sql).expect("fill history");
        eprintln!("central_load: history day -{d} filed ({per_day} jobs)");
    }
    c.client()
        .batch_execute("ANALYZE pjw_jobs")
        .expect("analyze");
}

/// Sizes of the tables (heap, indexes, TOAST) over their partitions, and bytes per row.
fn sizes(c: &mut Central, when: &str) {
    for t in ["pjw_jobs", "pjw_samples"] {
        let r = c
            .client()
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint, count(*)
                 FROM pg_inherits i WHERE i.inhparent = to_regclass($1)",
                &[&t],
            )
            .unwrap();
        let bytes: i64 = r.get(0);
        let parts: i64 = r.get(1);
        let rows: i64 = c
            .client()
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .unwrap()
            .get(0);
        out(&format!("{t}_bytes_{when}"), bytes);
        out(&format!("{t}_rows_{when}"), rows);
        out(&format!("{t}_partitions_{when}"), parts);
        if rows > 0 {
            out(&format!("{t}_bytes_per_row_{when}"), bytes / rows);
        }
    }
}

/// The cluster queries of `pjw report --central`, each run 5 times: median and max ms.
fn queries(c: &mut Central, now: i64, nodes: usize) {
    let week = Some(now - 7 * DAY);
    let day = Some(now - DAY);
    let cases: Vec<(&str, CentralFilter)> = vec![
        (
            "user",
            CentralFilter {
                user: Some("user17".into()),
                limit: 100,
                ..Default::default()
            },
        ),
        (
            "node",
            CentralFilter {
                node: Some(format!("cn{:04}", nodes / 2)),
                limit: 100,
                ..Default::default()
            },
        ),
        (
            "range_1h",
            CentralFilter {
                since_ms: Some(now - 2 * DAY),
                until_ms: Some(now - 2 * DAY + 3_600_000),
                limit: 100,
                ..Default::default()
            },
        ),
        (
            "newest",
            CentralFilter {
                limit: 100,
                ..Default::default()
            },
        ),
        (
            "top_cpu_week",
            CentralFilter {
                since_ms: week,
                order: Order::Cpu,
                limit: 20,
                ..Default::default()
            },
        ),
        (
            "top_mem_day",
            CentralFilter {
                since_ms: day,
                order: Order::Mem,
                limit: 20,
                ..Default::default()
            },
        ),
        (
            "top_wait_day",
            CentralFilter {
                since_ms: day,
                order: Order::Wait,
                limit: 20,
                ..Default::default()
            },
        ),
        (
            "user_top_cpu_week",
            CentralFilter {
                user: Some("user17".into()),
                since_ms: week,
                order: Order::Cpu,
                limit: 20,
                ..Default::default()
            },
        ),
    ];
    let mut worst = 0.0f64;
    // The issue's questions: a user, a node, a time range, the newest, the top by CPU, memory,
    // wait across the cluster (a user's own top is extra).
    let mut asked = 0.0f64;
    for (name, f) in cases {
        let mut ms = Vec::new();
        let mut n = 0;
        for _ in 0..5 {
            let t = Instant::now();
            n = c.jobs(&f).expect("query").len();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        worst = worst.max(ms[4]);
        if name != "user_top_cpu_week" {
            asked = asked.max(ms[4]);
        }
        out(&format!("query_{name}_ms_median"), format!("{:.1}", ms[2]));
        out(&format!("query_{name}_ms_max"), format!("{:.1}", ms[4]));
        out(&format!("query_{name}_rows"), n);
    }
    out("query_worst_ms", format!("{worst:.1}"));
    out("query_cluster_worst_ms", format!("{asked:.1}"));
}

/// Retention at work: three sample partitions and one job partition older than the retention
/// are filled, maintenance drops them.
fn retention_demo(c: &mut Central, ep: &Endpoint, now: i64) {
    use pjw_central::schema::{ensure_partitions, Table};
    let r = Retention::default();
    let mut need = std::collections::BTreeSet::new();
    let old_samples: Vec<i64> = (1..=3)
        .map(|k| Table::Samples.start_of(now - (r.samples_days as i64 + k) * DAY))
        .collect();
    let old_jobs = Table::Jobs.start_of(now - (r.jobs_days as i64 + 8) * DAY);
    for s in &old_samples {
        need.insert((Table::Samples, *s));
    }
    need.insert((Table::Jobs, old_jobs));
    ensure_partitions(c.client(), &need).unwrap();
    for s in &old_samples {
        c.client()
            .batch_execute(&format!(
                "INSERT INTO pjw_samples (node, seq, ts_ms) SELECT 'old', g, {s} + g FROM generate_series(1, 10000) g"
            ))
            .unwrap();
    }
    let mut c2 = Central::open(ep, &r).unwrap();
    let m = c2.maintain(now, true).unwrap();
    out("retention_dropped_partitions", m.dropped.len());
    out("retention_dropped", m.dropped.join(","));
    let left: i64 = c
        .client()
        .query_one("SELECT count(*) FROM pjw_samples WHERE node = 'old'", &[])
        .unwrap()
        .get(0);
    out("retention_old_rows_left", left);
}
