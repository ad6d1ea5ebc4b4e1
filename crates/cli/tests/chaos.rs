//! Chaos on the real cgroupfs: job cycles (sizes 1..=ncpus, some queued behind others, some with
//! a priority that preempts, some backfill-only, some registered by a workload manager — the
//! attached form a Slurm/SGE starter uses and the held form a prolog uses, ended by `pjw job
//! end` — some suspended by their user and resumed later, and some asking for more CPUs than the
//! node has, refused on purpose) while the daemon is `kill -9`-ed and restarted at random points.
//! The node is checked all along (a thread, every 100 ms while the daemon answers, and after every
//! restart): no CPU in two running or ending jobs' cpusets (read from the kernel), every job
//! cgroup with running tasks confined — in the pool, with a cpuset the kernel shows (none is
//! unconfined) — and known to the daemon. At the end every client got its job's exit status
//! (only the refusals on purpose may end with pjw's own error instead), and no job cgroup is
//! left.
//!
//! `PJW_CHAOS_CYCLES` (default 100, `make chaos` runs 1000) bounds the run; `PJW_CHAOS_SEED`
//! replays one (the seed is printed first). The figures close the output on one `chaos:` line.
//! `PJW_CHAOS_INJECT=lost-status` makes one client lose its job's exit status (it talks to no
//! daemon and ends with pjw's error): the gate must then fail (scripts/chaos-selfcheck.sh).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pjw_cgroup::Driver;
use pjw_core::CpuSet;
use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// splitmix64: a seeded generator, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `1/n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

/// One client (`pjw run`, or `pjw job register` with a command) and the exit code its job
/// ends with; `id` is the job's id as `pjw status` shows it. `refused`: the test asked for what
/// the daemon must refuse (more CPUs than the node has): pjw's own error is its right end.
struct Client {
    id: String,
    code: i32,
    child: Child,
    refused: bool,
}

/// A held workload-manager job (registered without a command, as a prolog does): its
/// `pjw job register` client, then the cycle at which the test ends it with `pjw job end`.
struct Held {
    id: String,
    register: Child,
    end_at: u64,
}

/// How clients ended.
#[derive(Default, Debug)]
struct Figures {
    cycles: u64,
    kills: u64,
    lost: u64,
    doubled: u64,
    leaked: u64,
    exit_status: u64,
    /// Clients that ended with pjw's own error instead of their job's exit status: failures,
    /// but for the refusals on purpose (`refused`).
    clear_error: u64,
    refused: u64,
    other: u64,
    unconfined: u64,
    /// Looks at the node (the checking thread's and after each restart).
    node_checks: u64,
    /// Workload-manager jobs: attached (a command), held (ended by `pjw job end`).
    wlm_attached: u64,
    wlm_held: u64,
    /// `pjw job register` (held) or `pjw job end` that did not answer 0.
    wlm_failed: u64,
    /// `pjw suspend` that froze a job, and `pjw resume` that let it go.
    suspended: u64,
    resumed: u64,
    /// Resumes that found the suspended job gone because it had ended on its own (the daemon
    /// logged its end). Seen in the v1 guest, 0-3 per 100 cycles: the job's last process was
    /// already exiting when its cgroup was frozen (by a suspend, or by a preemption the suspend
    /// then found), the v1 freezer does not wait for an exiting task, and the exit completed
    /// under the freeze. The job ended with its exit status; the resume had nothing to thaw.
    resume_gone: u64,
    /// Time spent bringing the daemon back (start to its socket answering).
    restart_time: Duration,
}

/// What the checks read: the kernel's cgroups and the daemon's status, through copies that a
/// thread of its own may hold while the test restarts the daemon.
#[derive(Clone)]
struct Node {
    bin: PathBuf,
    socket: PathBuf,
    driver: Driver,
    pool: CpuSet,
}

impl Node {
    fn of(d: &TestDaemon, bin: PathBuf, pool: &CpuSet) -> Node {
        Node {
            bin,
            socket: d.socket(),
            driver: d.driver(),
            pool: *pool,
        }
    }

    /// The daemon's view: job id → state; None while it does not answer (restarting).
    fn states(&self) -> Option<BTreeMap<String, String>> {
        let out = Command::new(&self.bin)
            .args(["status", "--json"])
            .env("PJW_SOCKET", &self.socket)
            .env("PJW_CONNECT_WAIT", "0")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let mut m = BTreeMap::new();
        for j in st["jobs"].as_array().into_iter().flatten() {
            m.insert(
                j["id"].as_str().unwrap_or("").to_string(),
                j["state"].as_str().unwrap_or("").to_string(),
            );
        }
        Some(m)
    }

    /// The CPUs a job cgroup's tasks may run on, from the kernel: `cpuset.cpus.effective` (v2)
    /// or `cpuset.cpus` (v1). `None` when the cgroup has no cpuset file: gone meanwhile, or
    /// never confined.
    fn kernel_cpus(&self, job: &str) -> Option<CpuSet> {
        for (_, dir) in self.driver.job_dirs(job) {
            for f in ["cpuset.cpus.effective", "cpuset.cpus"] {
                if let Ok(t) = std::fs::read_to_string(dir.join(f)) {
                    return CpuSet::parse_list(t.trim()).ok();
                }
            }
        }
        None
    }

    /// Whether every process in job cgroup `job` is a `pjw` client (its executable is the
    /// binary under test): what a queued job's cgroups may hold while it waits. False on any
    /// error reading the kernel (the check must not pass on an error), and for none at all.
    fn only_clients(&self, job: &str) -> bool {
        let Ok(bin) = std::fs::canonicalize(&self.bin) else {
            return false;
        };
        let Ok(pids) = self.driver.procs(job) else {
            return false;
        };
        !pids.is_empty()
            && pids.iter().all(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == bin)
            })
    }

    /// A job cgroup whose tasks run now: populated and not frozen. An error reading the kernel
    /// counts as running (the check must not pass on an error).
    fn runs(&self, job: &str) -> bool {
        self.driver.is_populated(job).unwrap_or(true)
            && !self.driver.is_frozen(job).unwrap_or(false)
    }

    /// One look at the node: pairs of running or ending jobs sharing a CPU (confirmed by a
    /// second read, so a job that ended between two reads is not counted), and job cgroups
    /// whose tasks run without a cpuset the kernel shows, outside the pool, or with no job the
    /// daemon knows. False when the daemon did not answer (nothing was looked at).
    fn check(&self, f: &mut Figures, log: &mut Vec<String>) -> bool {
        let Some(st) = self.states() else {
            return false;
        };
        let mut primaries: Vec<(String, CpuSet)> = Vec::new();
        for cg in self.driver.list_jobs().unwrap_or_default() {
            if !self.runs(&cg) {
                continue;
            }
            let id = cg.strip_prefix("job-").unwrap_or(&cg).to_string();
            let cpus = match self.kernel_cpus(&cg) {
                Some(c) => c,
                // No cpuset to read while its tasks run: unconfined, unless it emptied meanwhile.
                None => {
                    if self.runs(&cg)
                        && self.kernel_cpus(&cg).is_none()
                        && self.driver.job_dirs(&cg).iter().any(|(_, d)| d.exists())
                    {
                        f.unconfined += 1;
                        log.push(format!(
                            "{cg} has running tasks and no cpuset file the kernel shows"
                        ));
                    }
                    continue;
                }
            };
            match st.get(&id).map(String::as_str) {
                // Backfillers run in the idle class on CPUs primaries hold, by design.
                Some("backfill") => {}
                Some("running") | Some("ending") => primaries.push((cg.clone(), cpus)),
                // A queued job waits in its own cgroups (decision (cm)): they may hold its
                // waiting client, the `pjw` binary itself, and nothing else.
                Some("queued") if self.only_clients(&cg) => {}
                other => {
                    // Tasks in a job cgroup the daemon does not show as running: a start, an
                    // end or a freeze may be in flight. Unconfined only if that lasts.
                    let mut state = None;
                    // The snapshot may predate the job (a client that reconnected after a
                    // restart submits again): a queued job whose cgroups hold only its waiting
                    // client is settled too, as above.
                    let settled = TestDaemon::wait_for(Duration::from_secs(10), || {
                        state = self.states().and_then(|s| s.get(&id).cloned());
                        !self.runs(&cg)
                            || matches!(state.as_deref(), Some("running" | "backfill" | "ending"))
                            || (state.as_deref() == Some("queued") && self.only_clients(&cg))
                    });
                    if !settled {
                        f.unconfined += 1;
                        log.push(format!(
                            "{cg} has running tasks; the daemon says {other:?} then {state:?}"
                        ));
                    }
                }
            }
            if !cpus.is_empty() && !cpus.is_subset(&self.pool) {
                f.unconfined += 1;
                log.push(format!(
                    "{cg} runs on {cpus}, outside the pool {}",
                    self.pool
                ));
            }
        }
        for (i, (a, ca)) in primaries.iter().enumerate() {
            for (b, cb) in &primaries[i + 1..] {
                if !ca.intersects(cb) {
                    continue;
                }
                // Confirm: both still run and still overlap (a job cgroup that emptied never
                // fills again, so both ran at the moment of the second read), and the daemon
                // still holds both as running or ending: an ending job keeps its CPUs until
                // its cgroup is empty, so one sharing them is doubled too.
                let again = |n: &str| self.kernel_cpus(n).unwrap_or_default();
                if self.runs(a) && self.runs(b) && again(a).intersects(&again(b)) {
                    let Some(st) = self.states() else { continue };
                    let holds = |n: &str| {
                        matches!(
                            st.get(n.trim_start_matches("job-")).map(String::as_str),
                            Some("running" | "ending")
                        )
                    };
                    if holds(a) && holds(b) {
                        f.doubled += 1;
                        log.push(format!("{a} ({ca}) and {b} ({cb}) share CPUs"));
                    }
                }
            }
        }
        f.node_checks += 1;
        true
    }
}

/// The checking thread: looks at the node every 100 ms while the daemon answers, until
/// stopped; what it found goes into the run's figures at the end.
struct Checker {
    stop: Arc<AtomicBool>,
    found: Arc<Mutex<(Figures, Vec<String>)>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Checker {
    fn start(node: Node) -> Checker {
        let stop = Arc::new(AtomicBool::new(false));
        let found: Arc<Mutex<(Figures, Vec<String>)>> = Arc::default();
        let (s, out) = (stop.clone(), found.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let (mut f, mut log) = (Figures::default(), Vec::new());
                node.check(&mut f, &mut log);
                let mut g = out.lock().unwrap_or_else(|e| e.into_inner());
                g.0.doubled += f.doubled;
                g.0.unconfined += f.unconfined;
                g.0.node_checks += f.node_checks;
                g.1.extend(log);
                drop(g);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Checker {
            stop,
            found,
            handle: Some(handle),
        }
    }

    /// Stop it and add what it found to `f` and `log`.
    fn finish(mut self, f: &mut Figures, log: &mut Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let mut g = self.found.lock().unwrap_or_else(|e| e.into_inner());
        f.doubled += g.0.doubled;
        f.unconfined += g.0.unconfined;
        f.node_checks += g.0.node_checks;
        log.extend(g.1.drain(..).map(|l| format!("(checking thread) {l}")));
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Every live client's job is known to the daemon (queued, running, …) or the client has
/// ended: waits within a bound, since a client reconnects after a restart.
fn clients_accounted(node: &Node, clients: &mut [Client]) -> Vec<String> {
    let mut missing = Vec::new();
    let ok = TestDaemon::wait_for(Duration::from_secs(60), || {
        let Some(st) = node.states() else {
            return false;
        };
        missing.clear();
        for c in clients.iter_mut() {
            if matches!(c.child.try_wait(), Ok(None)) && !st.contains_key(&c.id) {
                missing.push(c.id.clone());
            }
        }
        missing.is_empty()
    });
    if ok {
        Vec::new()
    } else {
        missing
    }
}

/// Sort a finished client: its job's exit code; pjw's own error (125 with a message naming
/// pjw), which only a refusal on purpose may end with; or anything else. Only the job's exit
/// status, or the refusal asked for, is a right end.
fn classify(
    id: &str,
    code: i32,
    refused: bool,
    out: &std::process::Output,
    f: &mut Figures,
    log: &mut Vec<String>,
) {
    let err = String::from_utf8_lossy(&out.stderr);
    let pjw_error = out.status.code() == Some(125) && err.contains("pjw");
    match out.status.code() {
        _ if refused && pjw_error => f.refused += 1,
        _ if refused => {
            f.other += 1;
            log.push(format!(
                "{id}: asked for more CPUs than the node has, wanted a refusal, got {:?}: {}",
                out.status,
                err.trim()
            ));
        }
        Some(got) if got == code => f.exit_status += 1,
        _ if pjw_error => {
            f.clear_error += 1;
            log.push(format!(
                "{id}: no exit status (wanted {code}), pjw's error instead: {}",
                err.trim()
            ));
        }
        _ => {
            f.other += 1;
            log.push(format!(
                "{id}: wanted exit {code}, got {:?}: {}",
                out.status,
                err.trim()
            ));
        }
    }
}

/// Reap the clients that have ended.
fn reap(clients: &mut Vec<Client>, f: &mut Figures, log: &mut Vec<String>) {
    let mut i = 0;
    while i < clients.len() {
        if matches!(clients[i].child.try_wait(), Ok(Some(_))) {
            let Client {
                id,
                code,
                child,
                refused,
            } = clients.swap_remove(i);
            let out = child.wait_with_output().expect("client output");
            classify(&id, code, refused, &out, f, log);
        } else {
            i += 1;
        }
    }
}

fn spawn(d: &TestDaemon, rng: &mut Rng, i: u64, ncpus: u64) -> Client {
    let id = format!("c{i}");
    // Distinct exit codes (1..=120; 125-127 are pjw's own).
    let code = (i % 120 + 1) as i32;
    let size = rng.range(1, ncpus);
    let sleep = rng.range(0, 30) * 10;
    let mut args = vec![
        "run".to_string(),
        "-q".into(),
        "--job-id".into(),
        id.clone(),
        "--cpus".into(),
        size.to_string(),
    ];
    if rng.one_in(4) {
        args.push("--priority".into());
        args.push(rng.range(11, 16).to_string());
    }
    if rng.one_in(8) {
        args.push("--backfill-only".into());
    }
    args.extend([
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("sleep {}.{:03}; exit {code}", sleep / 1000, sleep % 1000),
    ]);
    let child = pjw_spawn(d, &args);
    Client {
        id,
        code,
        child,
        refused: false,
    }
}

/// A client asking for more CPUs than the node has: refused on purpose, its right end is
/// pjw's error (exit 125), never a job.
fn spawn_refused(d: &TestDaemon, i: u64, ncpus: u64) -> Client {
    let id = format!("r{i}");
    let args: Vec<String> = [
        "run",
        "-q",
        "--job-id",
        &id,
        "--cpus",
        &(ncpus + 1).to_string(),
    ]
    .into_iter()
    .map(String::from)
    .chain(["--", "true"].map(String::from))
    .collect();
    Client {
        child: pjw_spawn(d, &args),
        id,
        code: 0,
        refused: true,
    }
}

/// The self-check's client (`PJW_CHAOS_INJECT=lost-status`): a job whose client can reach no
/// daemon, so it ends with pjw's error and never gets its job's exit status. The gate must
/// count it.
fn spawn_lost(d: &TestDaemon, i: u64) -> Client {
    let id = format!("lost{i}");
    let child = d
        .pjw()
        .args(["run", "-q", "--job-id", &id, "--", "sh", "-c", "exit 7"])
        .env("PJW_SOCKET", d.dir().join("no-daemon-here.sock"))
        .env("PJW_CONNECT_WAIT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pjw");
    Client {
        id,
        code: 7,
        child,
        refused: false,
    }
}

/// `pjw job register` of Slurm's job `local` for root with `cpus` CPUs.
fn register_args(local: &str, cpus: u64) -> Vec<String> {
    ["job", "register", "--wlm", "slurm", "--job-id", local]
        .into_iter()
        .chain(["--user", "root", "--cpus"])
        .map(String::from)
        .chain([cpus.to_string()])
        .collect()
}

/// A workload manager's job with a command (the starter's form): `pjw job register` joins the
/// job and execs the command, so the client's exit status is the job's.
fn spawn_wlm(d: &TestDaemon, rng: &mut Rng, i: u64, ncpus: u64) -> Client {
    let local = format!("w{i}");
    let code = (i % 120 + 1) as i32;
    let size = rng.range(1, ncpus);
    let sleep = rng.range(0, 30) * 10;
    let mut args = register_args(&local, size);
    args.extend([
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("sleep {}.{:03}; exit {code}", sleep / 1000, sleep % 1000),
    ]);
    let child = pjw_spawn(d, &args);
    Client {
        id: format!("slurm:{local}"),
        code,
        child,
        refused: false,
    }
}

/// A held workload-manager job (the prolog's form): registered without a command, ended by
/// `pjw job end` a few cycles later.
fn spawn_held(d: &TestDaemon, rng: &mut Rng, i: u64, ncpus: u64) -> Held {
    let local = format!("h{i}");
    let size = rng.range(1, ncpus);
    let register = pjw_spawn(d, &register_args(&local, size));
    Held {
        id: format!("slurm:{local}"),
        register,
        end_at: i + rng.range(1, 20),
    }
}

/// `pjw ARGS` started in the background, waiting (bounded) for a daemon that is restarting;
/// its stderr kept for the verdict.
fn pjw_spawn(d: &TestDaemon, args: &[String]) -> Child {
    d.pjw()
        .args(args)
        .env("PJW_CONNECT_WAIT", "120")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pjw")
}

/// `pjw ARGS` to its end, with the daemon possibly restarting meanwhile (bounded wait).
fn pjw_call(d: &TestDaemon, args: &[&str]) -> std::process::Output {
    d.pjw()
        .args(args)
        .env("PJW_CONNECT_WAIT", "120")
        .stdin(Stdio::null())
        .output()
        .expect("run pjw")
}

/// End the held jobs whose time has come (`now` is the cycle): each once its register client
/// has answered 0 (it had CPUs; one still queued waits for a later call), with `pjw job end`
/// answering 0.
fn end_held(
    d: &TestDaemon,
    held: &mut Vec<Held>,
    now: u64,
    f: &mut Figures,
    log: &mut Vec<String>,
) {
    let mut i = 0;
    while i < held.len() {
        if held[i].end_at > now || matches!(held[i].register.try_wait(), Ok(None)) {
            i += 1;
            continue;
        }
        let h = held.swap_remove(i);
        let out = h.register.wait_with_output().expect("register output");
        if !out.status.success() {
            f.wlm_failed += 1;
            log.push(format!(
                "{}: pjw job register (held) gave {:?}: {}",
                h.id,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let end = pjw_call(d, &["job", "end", &h.id]);
        if !end.status.success() {
            f.wlm_failed += 1;
            log.push(format!(
                "{}: pjw job end gave {:?}: {}",
                h.id,
                end.status,
                String::from_utf8_lossy(&end.stderr).trim()
            ));
        }
    }
}

/// End every held job (a queued one once it has CPUs), within a bound; one whose register
/// never answers is a lost job.
fn end_all_held(d: &TestDaemon, held: &mut Vec<Held>, f: &mut Figures, log: &mut Vec<String>) {
    let by = Instant::now() + Duration::from_secs(120);
    while !held.is_empty() && Instant::now() < by {
        end_held(d, held, u64::MAX, f, log);
        std::thread::sleep(Duration::from_millis(20));
    }
    for mut h in held.drain(..) {
        f.lost += 1;
        log.push(format!("{}: held registration never answered", h.id));
        let _ = h.register.kill();
        let _ = h.register.wait();
    }
}

/// The daemon log's last lines about job `id` (its `job=ID` field), so a surprise in the run
/// explains itself.
fn job_lines(daemon_log: &str, id: &str) -> String {
    let field = format!("job={id}");
    let mine: Vec<&str> = daemon_log
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == field))
        .collect();
    mine[mine.len().saturating_sub(16)..].join("\n")
}

/// Suspend one running `pjw run` job now and then, and resume suspended ones later; at the end
/// (`all`) resume every one. A suspend the daemon refuses (the job is queued, ending, a
/// backfiller, a manager's job) is not counted; a resume that fails is a client left waiting
/// forever, so it is logged and shows as a lost job at the end.
fn suspend_some(
    d: &TestDaemon,
    rng: &mut Rng,
    clients: &[Client],
    suspended: &mut Vec<(String, bool)>,
    all: bool,
    f: &mut Figures,
    log: &mut Vec<String>,
) {
    if !all && rng.one_in(8) && !clients.is_empty() {
        let c = &clients[rng.range(0, clients.len() as u64 - 1) as usize];
        if !c.id.starts_with("slurm:") && !suspended.iter().any(|(id, _)| *id == c.id) {
            let out = pjw_call(d, &["suspend", &c.id]);
            if out.status.success() {
                // "being frozen": the v1 freezer confirms later, and the suspension is kept
                // (recorded) only then; a daemon killed before that forgets it (docs: the
                // answer says so), and the job runs on.
                let pending = String::from_utf8_lossy(&out.stderr).contains("being frozen");
                f.suspended += 1;
                suspended.push((c.id.clone(), pending));
            }
        }
    }
    while !suspended.is_empty() && (all || rng.one_in(3)) {
        let (id, pending) =
            suspended.swap_remove(rng.range(0, suspended.len() as u64 - 1) as usize);
        let out = pjw_call(d, &["resume", &id]);
        let err = String::from_utf8_lossy(&out.stderr);
        // A suspension never confirmed may have been forgotten by a killed daemon: the job ran
        // on (and may have ended). Nothing is left waiting for this resume.
        let forgotten =
            pending && (err.contains("is not suspended") || err.contains(&format!("no job {id}")));
        if out.status.success() || forgotten {
            f.resumed += 1;
        } else if err.contains(&format!("no job {id} on this node")) {
            // Gone is fine only if it ended (its client then got its status, counted in
            // reap); a suspended job the daemon forgot would leave its client waiting.
            let lines = job_lines(&d.log(), &id);
            let ended = lines
                .lines()
                .any(|l| l.contains("job ended") || l.contains("recovered job had ended"));
            if ended {
                f.resume_gone += 1;
            } else {
                f.other += 1;
            }
            log.push(format!(
                "{id}: suspended, gone before its resume ({}); the daemon's lines on it:\n{lines}",
                if ended {
                    "it had ended"
                } else {
                    "no end logged: counted as other"
                }
            ));
        } else {
            log.push(format!(
                "{id}: pjw resume gave {:?}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if !all {
            break;
        }
    }
}

/// Resume every suspended job (suspending none), counted as [`suspend_some`] counts them.
fn resume_all(
    d: &TestDaemon,
    rng: &mut Rng,
    clients: &[Client],
    suspended: &mut Vec<(String, bool)>,
    f: &mut Figures,
    log: &mut Vec<String>,
) {
    suspend_some(d, rng, clients, suspended, true, f, log);
}

fn chaos_in(
    d: &mut TestDaemon,
    node: &Node,
    cycles: u64,
    seed: u64,
    inject_lost: bool,
) -> (Figures, Vec<String>) {
    let pool = &node.pool;
    let mut rng = Rng(seed);
    let mut f = Figures::default();
    let mut log = Vec::new();
    let ncpus = pool.len() as u64;
    let mut clients: Vec<Client> = Vec::new();
    let mut held: Vec<Held> = Vec::new();
    let mut suspended: Vec<(String, bool)> = Vec::new();
    let max_inflight = (ncpus + 3) as usize;
    let bound = Duration::from_secs(120);
    let t0 = Instant::now();
    let checker = Checker::start(node.clone());
    if inject_lost {
        clients.push(spawn_lost(d, 0));
    }
    for i in 0..cycles {
        if i > 0 && i % 100 == 0 {
            eprintln!(
                "chaos: {i} cycles in {:.0} s ({:.0} s of it restarting), {} kills",
                t0.elapsed().as_secs_f64(),
                f.restart_time.as_secs_f64(),
                f.kills
            );
        }
        let wait_from = Instant::now();
        while clients.len() >= max_inflight && wait_from.elapsed() < bound {
            reap(&mut clients, &mut f, &mut log);
            // Held jobs keep their CPUs until ended, so clients queued behind them wait for
            // that: end the ones that have CPUs early rather than stall the run.
            // Suspended jobs keep theirs too: resume them, or the run waits out its bound.
            if wait_from.elapsed() > Duration::from_secs(1) {
                end_held(d, &mut held, u64::MAX, &mut f, &mut log);
                resume_all(d, &mut rng, &clients, &mut suspended, &mut f, &mut log);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match rng.range(0, 11) {
            0 | 1 => {
                clients.push(spawn_wlm(d, &mut rng, i, ncpus));
                f.wlm_attached += 1;
            }
            2 if held.len() < 2 => {
                held.push(spawn_held(d, &mut rng, i, ncpus));
                f.wlm_held += 1;
            }
            3 if rng.one_in(3) => clients.push(spawn_refused(d, i, ncpus)),
            _ => clients.push(spawn(d, &mut rng, i, ncpus)),
        }
        f.cycles += 1;
        suspend_some(
            d,
            &mut rng,
            &clients,
            &mut suspended,
            false,
            &mut f,
            &mut log,
        );
        end_held(d, &mut held, i, &mut f, &mut log);
        std::thread::sleep(Duration::from_millis(rng.range(0, 60)));
        if rng.one_in(10) {
            d.kill9();
            f.kills += 1;
            // Clients that arrive while the daemon is down wait for it.
            let mut j = 0;
            while rng.one_in(2) && j < 2 && (i + 1) < cycles {
                j += 1;
                clients.push(spawn(d, &mut rng, cycles + f.kills * 10 + j, ncpus));
            }
            std::thread::sleep(Duration::from_millis(rng.range(0, 300)));
            let t = Instant::now();
            d.restart();
            f.restart_time += t.elapsed();
            if !node.check(&mut f, &mut log) {
                f.lost += 1;
                log.push(format!(
                    "after restart {}: the daemon does not answer",
                    f.kills
                ));
            }
            let missing = clients_accounted(node, &mut clients);
            if !missing.is_empty() {
                f.lost += missing.len() as u64;
                log.push(format!("after restart {}: jobs unknown to the daemon while their clients wait: {missing:?}", f.kills));
            }
        }
        reap(&mut clients, &mut f, &mut log);
    }
    // Let every suspended job go and end every held one: their clients can then end.
    resume_all(d, &mut rng, &clients, &mut suspended, &mut f, &mut log);
    end_all_held(d, &mut held, &mut f, &mut log);
    // Every client ends within a bound; one that does not is a lost job.
    let end = Instant::now() + Duration::from_secs(180);
    while !clients.is_empty() && Instant::now() < end {
        reap(&mut clients, &mut f, &mut log);
        std::thread::sleep(Duration::from_millis(20));
    }
    checker.finish(&mut f, &mut log);
    for mut c in clients.drain(..) {
        f.lost += 1;
        log.push(format!("{}: client still waiting at the end", c.id));
        let _ = c.child.kill();
        let _ = c.child.wait();
    }
    // No job cgroup left once all ended (the daemon removes them after the end).
    let drv = d.driver();
    TestDaemon::wait_for(Duration::from_secs(30), || {
        drv.list_jobs().map(|j| j.is_empty()).unwrap_or(false)
    });
    let left = drv.list_jobs().unwrap_or_default();
    if !left.is_empty() {
        f.leaked += left.len() as u64;
        log.push(format!("job cgroups left: {left:?}"));
    }
    (f, log)
}

#[test]
fn kill9_and_restart_at_random_lose_no_job_and_double_no_cpu() {
    require_root!();
    let pool = pjw_testkit::need_cpus!(2);
    let all = pjw_testkit::machine::allowed_cpus();
    let pool: CpuSet = all.iter().take(all.len().clamp(pool.len(), 4)).collect();
    let cycles: u64 = std::env::var("PJW_CHAOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("PJW_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("chaos: seed {seed} (PJW_CHAOS_SEED replays it), {cycles} cycles on CPUs {pool}");
    let inject_lost = std::env::var("PJW_CHAOS_INJECT").is_ok_and(|v| v == "lost-status");
    if inject_lost {
        eprintln!("chaos: PJW_CHAOS_INJECT=lost-status: one client loses its exit status; the gate must fail");
    }
    let started = Instant::now();
    let mut d = TestDaemon::start(&pjw_bin(), &format!("cpus = \"{pool}\"\n"));
    let node = Node::of(&d, pjw_bin(), &pool);
    let (f, log) = chaos_in(&mut d, &node, cycles, seed, inject_lost);
    for l in &log {
        eprintln!("chaos: {l}");
    }
    eprintln!(
        "chaos: seed {seed}, cycles {}, kills {}, lost jobs {}, doubled CPUs {}, leaked cgroups {}, unconfined {}, node checks {}, clients: exit status {}, no exit status (pjw's error) {}, refused on purpose {}, other {}, workload-manager jobs: attached {}, held {}, failed register/end {}, suspended {}, resumed {}, gone before resume {}, {:.0} s",
        f.cycles,
        f.kills,
        f.lost,
        f.doubled,
        f.leaked,
        f.unconfined,
        f.node_checks,
        f.exit_status,
        f.clear_error,
        f.refused,
        f.other,
        f.wlm_attached,
        f.wlm_held,
        f.wlm_failed,
        f.suspended,
        f.resumed,
        f.resume_gone,
        started.elapsed().as_secs_f64()
    );
    // The node was looked at while jobs ran, not only after restarts: the checks ran.
    assert!(
        f.node_checks > f.kills,
        "chaos (seed {seed}): the node was checked {} times",
        f.node_checks
    );
    // Every client gets its job's exit status; pjw's error is a right end only where the test
    // asked for a refusal.
    let bad = f.lost
        + f.doubled
        + f.leaked
        + f.clear_error
        + f.other
        + f.unconfined
        + f.wlm_failed
        + (f.suspended - f.resumed - f.resume_gone);
    assert_eq!(
        bad,
        0,
        "chaos (seed {seed}): {f:?}\n{}",
        d.log()
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
