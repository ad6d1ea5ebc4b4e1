//! pjw-daemon: the node daemon behind `pjw daemon`.
//!
//! Wiring only: load and validate the config, discover the topology, detect cgroups, open the
//! store, recover, then run the engine and the socket server on a single-threaded tokio
//! runtime. See docs/architecture.md for how the parts fit.

pub mod adopt;
pub mod bind;
pub mod caller;
pub mod central_report;
pub mod cgroup_port;
pub mod clock;
pub mod config;
pub mod engine;
pub mod gpu_stats;
pub mod gpus;
pub mod ipc_scrub;
pub mod lease;
pub mod live;
pub mod metrics;
pub mod os;
pub mod procs;
pub mod profile;
pub mod reload;
pub mod report;
pub mod server;
pub mod store_port;
pub mod tasks;
#[cfg(test)]
pub(crate) mod test_support;
pub mod tmp;
pub mod users;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use futures_util::StreamExt;
use pjw_cgroup::Driver;
use pjw_core::alloc::Allocator;
use pjw_core::cpuset::CpuSet;
use pjw_store::Store;
use tokio::sync::mpsc;
use tracing::{error, info, warn};

pub use config::{Config, ConfigError, Overrides};

/// The most job-CPUs (`vcpus`) per CPU of the pool: beyond 4 only nodes of mostly idle jobs
/// (interactive sessions, I/O waits) make sense, and the daemon warns. 512 lets a small login
/// node hold 1,000 idle sessions (2 CPUs) while a typo (an extra zero or three) is refused.
pub const MAX_VCPUS_PER_CPU: usize = 512;

/// Why the daemon could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("topology: {0}")]
    Topology(#[from] pjw_topology::TopologyError),
    #[error("cgroups: {0}")]
    Cgroup(#[from] pjw_cgroup::CgroupError),
    #[error(transparent)]
    Store(#[from] pjw_store::StoreError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot handle {signal}: {source}")]
    Signal {
        signal: &'static str,
        source: std::io::Error,
    },
    #[error("another pjw daemon holds {} (state directory in use)", path.display())]
    StateDirInUse { path: std::path::PathBuf },
    #[error("another pjw daemon is listening on {}", path.display())]
    SocketInUse { path: std::path::PathBuf },
    #[error("no CPU left for jobs: the daemon may use {daemon_cpus} and the job parent's cpuset allows none of them")]
    NoJobCpus { daemon_cpus: Box<CpuSet> },
    /// A config value that passed the file's checks but that this machine cannot honour.
    #[error("config {origin}: {key}: {reason}")]
    Unusable {
        origin: String,
        key: &'static str,
        reason: String,
    },
    /// A `[gpus]` declaration this machine does not match.
    #[error("[gpus] {key}: {reason}")]
    Gpus { key: String, reason: String },
    /// The declared GPUs together are not a usable set.
    #[error("[gpus]: {0}")]
    GpuSet(pjw_core::CoreError),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> DaemonError + '_ {
    move |source| DaemonError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Run the daemon in the foreground until SIGTERM or SIGINT; SIGHUP reloads `cfg`'s file
/// (named by its origin) with the values now in effect for socket, state dir and parent.
pub fn run(cfg: Config) -> Result<(), DaemonError> {
    let source = reload::ReloadSource::pinned(&cfg);
    run_reloadable(cfg, source)
}

/// [`run`], where SIGHUP re-reads the config from `source` ([`reload`]).
pub fn run_reloadable(cfg: Config, source: reload::ReloadSource) -> Result<(), DaemonError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    rt.block_on(run_async(cfg, source))
}

/// Hold an exclusive lock on the state directory, so two daemons never share it.
///
/// Nothing a user can open may be something the daemon needs: the directory is made 0711
/// (users reach their jobs' /tmp below it, but cannot list it) and the lock file 0600, also
/// when an older version left them more open, so no user can take the lock (flock works on
/// any open descriptor) and keep the daemon from starting.
fn lock_state_dir(dir: &Path) -> Result<std::fs::File, DaemonError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(io_err(dir))?;
    let path = dir.join("pjw.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_err(&path))?;
    // An existing file keeps its mode through open(): narrow it before locking.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io_err(&path))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| DaemonError::StateDirInUse { path: path.clone() })?;
    Ok(f)
}

fn bind_socket(path: &Path, mode: u32) -> Result<tokio::net::UnixListener, DaemonError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(DaemonError::SocketInUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io_err(path))?;
    }
    let l = tokio::net::UnixListener::bind(path).map_err(io_err(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err(path))?;
    Ok(l)
}

/// The CPUs jobs get: the configured `cpus` or else every CPU both the daemon and the job parent
/// may use. A site that reserves CPUs for the system with `AllowedCPUs=` on the jobs' slice
/// restricts the parent's cpuset, not the daemon's affinity.
fn job_pool(cfg: &Config, daemon_cpus: &CpuSet, driver: &Driver) -> Result<CpuSet, DaemonError> {
    let allowed = match driver.parent_cpus()? {
        Some(p) => {
            let both = daemon_cpus.intersection(&p);
            if &both != daemon_cpus {
                info!(parent_cpus = %p, daemon_cpus = %daemon_cpus, pool = %both, "the job parent's cpuset limits the pool");
            }
            both
        }
        None => *daemon_cpus,
    };
    if allowed.is_empty() {
        return Err(DaemonError::NoJobCpus {
            daemon_cpus: Box::new(*daemon_cpus),
        });
    }
    match &cfg.cpus {
        Some(c) => {
            let bad = c.difference(&allowed);
            if !bad.is_empty() {
                return Err(DaemonError::Unusable {
                    origin: cfg.origin.clone(),
                    key: "cpus",
                    reason: format!("{bad} are not cpus jobs may use here (allowed: {allowed})"),
                });
            }
            Ok(*c)
        }
        None => Ok(allowed),
    }
}

async fn run_async(cfg: Config, source: reload::ReloadSource) -> Result<(), DaemonError> {
    let _lock = lock_state_dir(&cfg.state_dir)?;
    let topo = pjw_topology::discover(&cfg.sys_root, &cfg.proc_root)?;
    let node_gpus = gpus::resolve(&cfg, &topo)?;
    if !node_gpus.is_empty() {
        info!(gpus = node_gpus.len(), list = %node_gpus.all(), "gpus found");
    }
    let mut driver = Driver::detect(&cfg.proc_root, &cfg.cgroup_parent)?;
    let gpus_fenced = fence_gpus(&mut driver, &node_gpus);
    let nofile = os::raise_nofile_limit();
    driver.keep_stat_files_open(os::stat_files_budget(nofile));
    if let Some(leaf) = driver.prepare_parent_for_daemon(std::process::id())? {
        info!(cgroup = %leaf.display(), "daemon runs in a leaf cgroup; job cgroups go beside it");
    }
    let pool = job_pool_or_clean_up(&cfg, &topo.allowed, &driver)?;
    let store = Store::open(&cfg.state_dir)?;
    let alloc = Allocator::new(&topo).with_spread(cfg.spread);
    // Only the daemon reads the store (reports go through the socket, docs/decisions.md): the
    // store makes the database and its WAL files 0600 from their creation on.

    let (tx, mut rx) = mpsc::unbounded_channel();
    let watches = cgroup_watches(&tx);
    let vcpus = check_vcpus(&cfg, &pool)?;
    let mem_limit = partition_memory(&cfg);
    tune_job_parent(&driver, &pool, mem_limit, &cfg.proc_root);
    // The metrics endpoint reads job cgroups with its own copy of the driver, off the engine.
    let metrics_driver = std::sync::Arc::new(driver.clone());
    let metrics_listener = match cfg.metrics_listen {
        Some(addr) => Some(
            metrics::bind(addr)
                .await
                .map_err(|e| DaemonError::Unusable {
                    origin: cfg.origin.clone(),
                    key: "metrics.listen",
                    reason: format!("cannot listen on {addr}: {e}"),
                })?,
        ),
        None => None,
    };
    let mut cfg = cfg;
    // memory.high exists only in cgroup v2.
    cfg.governor_cfg.throttle &= driver.mode() == pjw_cgroup::Mode::Unified;
    let partition = partition_root(&cfg, &driver, &pool);
    let mut eng = engine::Engine::new(
        cfg.clone(),
        driver,
        store,
        alloc,
        pool,
        vcpus,
        mem_limit,
        watches,
        tx.clone(),
    );
    if let Some(kind) = partition {
        eng.enable_partitions(kind);
    }
    // `status` figures as of the request, read on a blocking thread (docs/decisions.md (bp)).
    eng.set_live_reader(live::driver_reader(&metrics_driver));
    start_threads(
        &mut eng,
        &cfg,
        node_gpus,
        gpus_fenced,
        &metrics_driver,
        &topo,
        &tx,
    );
    eng.start_profiles()?;
    eng.recover()?;
    // The timers (governor, sampler, adoption sweep, thread balancing), the central-store shipper and the metrics
    // listener: restarted by a reload that changes their keys.
    let mut tasks = tasks::Tasks::new(tx.clone(), eng.metrics(), metrics_driver);
    let listener = bind_socket(&cfg.socket, cfg.socket_mode)?;
    info!(
        socket = %cfg.socket.display(),
        state = %eng.state_path().display(),
        config = %cfg.origin,
        cpus = %pool,
        vcpus,
        memory_limit = mem_limit,
        topology = %format!("{} pus", topo.online().len()),
        "pjw daemon ready"
    );
    spawn_server(&eng, &cfg, listener, &tx, nofile);
    tasks.start(&mut eng, metrics_listener);

    serve_until_signal(&mut eng, &mut tasks, &mut rx, &source).await?;
    info!("pjw daemon stopping; running jobs keep running and are recovered at the next start");
    eng.shutdown();
    if let Err(e) = std::fs::remove_file(&cfg.socket) {
        warn!(socket = %cfg.socket.display(), error = %e, "cannot remove the socket");
    }
    // Let answers to queued clients go out.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(())
}

/// The CPUs jobs may use; on an error, no empty parent is left behind for a daemon that never
/// ran.
fn job_pool_or_clean_up(
    cfg: &Config,
    daemon_cpus: &CpuSet,
    driver: &Driver,
) -> Result<CpuSet, DaemonError> {
    match job_pool(cfg, daemon_cpus, driver) {
        Ok(p) => Ok(p),
        Err(e) => {
            // Leave no empty parent behind for a daemon that never ran.
            if let Err(re) = driver.remove_parent_if_empty() {
                warn!(error = %re, "cannot remove the job parent");
            }
            Err(e)
        }
    }
}

/// The job partition's CPU weight (by its CPUs) and memory limit; a warning where the OOM
/// order of decision (ct) cannot be written.
fn tune_job_parent(driver: &Driver, pool: &CpuSet, mem_limit: u64, proc_root: &Path) {
    if let Err(e) = driver.set_parent_cpu_weight(pool.len()) {
        warn!(error = %e, cpus = pool.len(), "cannot set the CPU weight of the job partition");
    }
    if let Err(e) = driver.set_partition_limit(mem_limit) {
        warn!(error = %e, limit = mem_limit, "cannot set the memory limit of the job partition");
    }
    if os::has_capability(proc_root, os::CAP_SYS_RESOURCE) == Some(false)
        || os::in_initial_user_namespace(proc_root) == Some(false)
    {
        warn!("the daemon lacks CAP_SYS_RESOURCE (or runs in a user namespace): jobs with --mem cannot be put behind the others in the OOM killer's line (the kernel picks by size when the jobs fill the partition)");
    }
}

/// Exclusive jobs can be partitions only below a partition root that holds the pool: the
/// job parent made one when the config asks for partitions.
fn partition_root(cfg: &Config, driver: &Driver, pool: &CpuSet) -> Option<pjw_cgroup::Partition> {
    cfg.partition.filter(|&kind| {
        match driver.set_partition(None, pjw_cgroup::Partition::Root, Some(pool)) {
            Ok(()) => {
                info!(cpus = %pool, partition = kind.as_str(), "job parent is a cpuset partition root; exclusive jobs become partitions");
                true
            }
            Err(e) => {
                warn!(error = %e, "cpuset partitions unavailable; exclusive jobs stay plain cpusets");
                false
            }
        }
    })
}

/// The socket server, its connection limits and its user lookups, on their own task.
fn spawn_server(
    eng: &engine::Engine,
    cfg: &Config,
    listener: tokio::net::UnixListener,
    tx: &mpsc::UnboundedSender<engine::Event>,
    nofile: u64,
) {
    let limits = server::ConnLimits::new(cfg.max_connections_per_user, nofile);
    // User and group lookups (NSS may stall on LDAP or SSSD) run off the engine thread.
    // The admin group is decided here, in the connection tasks: they follow every reload.
    let users = users::Resolver::new(
        std::sync::Arc::new(users::Nss),
        users::LOOKUP_TIMEOUT,
        eng.conn_rules(),
        cfg.proc_root.clone(),
    );
    tokio::spawn(server::serve(
        listener,
        tx.clone(),
        limits,
        eng.metrics(),
        users,
    ));
}

/// The GPU device fence: the v1 devices controller where mounted, else a device program on
/// each job's cgroup2 directory; a job whose fence the kernel refuses does not start.
fn fence_gpus(driver: &mut Driver, node_gpus: &pjw_core::Gpus) -> bool {
    if node_gpus.is_empty() {
        false
    } else {
        match driver.fence_devices() {
            Some(fence) => {
                info!(by = fence.as_str(), "gpu devices fenced");
                true
            }
            None => {
                warn!("gpu devices are not fenced: neither a cgroup v1 devices controller nor a cgroup2 tree; jobs can open every gpu");
                false
            }
        }
    }
}

/// One inotify instance for every job's cgroup.events, its events sent to the engine. None:
/// inotify is unavailable (the engine re-checks instead).
fn cgroup_watches(tx: &mpsc::UnboundedSender<engine::Event>) -> Option<inotify::Watches> {
    let (watches, stream) = match inotify::Inotify::init() {
        Ok(ino) => {
            let w = ino.watches();
            match ino.into_event_stream(vec![0u8; 4096]) {
                Ok(s) => (Some(w), Some(s)),
                Err(e) => {
                    warn!(error = %e, "inotify unavailable; falling back to re-checks");
                    (None, None)
                }
            }
        }
        Err(e) => {
            warn!(error = %e, "inotify unavailable; falling back to re-checks");
            (None, None)
        }
    };
    if let Some(mut s) = stream {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(ev) => {
                        if tx.send(engine::Event::CgroupChanged { wd: ev.wd }).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "inotify read failed");
                        break;
                    }
                }
            }
        });
    }
    watches
}

/// The vCPUs the config asks for (by default one per CPU of the pool), within bounds.
fn check_vcpus(cfg: &Config, pool: &CpuSet) -> Result<usize, DaemonError> {
    let vcpus = cfg.vcpus.unwrap_or(pool.len());
    if vcpus > MAX_VCPUS_PER_CPU * pool.len() {
        return Err(DaemonError::Unusable {
            origin: cfg.origin.clone(),
            key: "vcpus",
            reason: format!(
                "{vcpus} is more than {MAX_VCPUS_PER_CPU} times the {} cpus jobs may use",
                pool.len()
            ),
        });
    }
    if vcpus > 4 * pool.len() {
        warn!(
            vcpus,
            cpus = pool.len(),
            "vcpus is more than 4 times the pool: backfillers share each CPU many ways (meant for nodes of mostly idle jobs, such as interactive sessions)"
        );
    }
    Ok(vcpus)
}

/// The job partition's memory: `memory.limit`, else the node's memory less `memory.reserve`.
fn partition_memory(cfg: &Config) -> u64 {
    match cfg.memory_limit {
        Some(l) => l,
        None => {
            let total = std::fs::read_to_string(cfg.proc_root.join("meminfo"))
                .ok()
                .and_then(|t| pjw_kernelfs::meminfo::parse_total(&t))
                .unwrap_or(u64::MAX);
            total.saturating_sub(cfg.memory_reserve).max(1 << 28)
        }
    }
}

/// The engine's helper threads: NVML, thread balancing, the lease asker, the proc connector.
fn start_threads(
    eng: &mut engine::Engine,
    cfg: &Config,
    node_gpus: pjw_core::Gpus,
    gpus_fenced: bool,
    metrics_driver: &std::sync::Arc<Driver>,
    topo: &pjw_core::Topology,
    tx: &mpsc::UnboundedSender<engine::Event>,
) {
    // GPU utilisation and memory: NVML on its own thread, loaded there (absent: one info line).
    let readable = gpu_stats::readable(&node_gpus);
    if cfg.gpus.nvml && !readable.is_empty() {
        let open = || gpu_stats::Nvml::init().map(|n| Box::new(n) as Box<dyn gpu_stats::GpuStats>);
        match gpu_stats::GpuSampler::spawn(open, readable) {
            Ok(s) => eng.set_gpu_sampler(s),
            Err(e) => warn!(error = %e, "cannot start the NVML thread; no GPU utilisation samples"),
        }
    }
    eng.set_gpus(node_gpus, gpus_fenced);
    // Thread balancing: its own thread reads /proc and calls sched_setaffinity, off the engine.
    let bind_port = bind::ProcPort {
        driver: metrics_driver.clone(),
        proc_root: cfg.proc_root.clone(),
    };
    match bind::Binder::spawn(bind_port, topo.clone()) {
        Ok(b) => eng.set_binder(b),
        Err(e) => {
            warn!(error = %e, "cannot start the thread balancing thread; threads are not bound")
        }
    }
    // Leases of registered jobs: their managers are asked on a thread of its own.
    let lease_node = cfg.lease.node.clone().unwrap_or_else(|| {
        let h = os::hostname(&cfg.proc_root);
        h.split('.').next().unwrap_or(&h).to_string()
    });
    let words_tx = tx.clone();
    match lease::Asker::spawn(
        lease::Commands {
            env: cfg.lease.command_env.clone(),
        },
        lease_node,
        std::time::Duration::from_millis(cfg.lease.timeout_ms),
        move |w| {
            let _ = words_tx.send(engine::Event::LeaseWords(w));
        },
    ) {
        Ok(a) => eng.set_asker(a),
        Err(e) => {
            warn!(error = %e, "cannot start the lease thread; workload managers are not asked (leases still expire)")
        }
    }
    // Exact process counts (and exec events for adoption) from the kernel's proc connector;
    // opened before recovery so that no event after the re-seed is missed.
    match procs::spawn_reader(tx.clone(), engine::Event::Proc) {
        Ok(()) => eng.set_proc_events(true),
        Err(e) => {
            warn!(error = %e, "process events unavailable; process counts come from samples only")
        }
    }
}

/// The engine's event loop: events handled, SIGHUP reloads, until SIGTERM or SIGINT.
async fn serve_until_signal(
    eng: &mut engine::Engine,
    tasks: &mut tasks::Tasks,
    rx: &mut mpsc::UnboundedReceiver<engine::Event>,
    source: &reload::ReloadSource,
) -> Result<(), DaemonError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| DaemonError::Signal {
            signal: "SIGTERM",
            source,
        })?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|source| DaemonError::Signal {
            signal: "SIGINT",
            source,
        })?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(
        |source| DaemonError::Signal {
            signal: "SIGHUP",
            source,
        },
    )?;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => eng.handle(ev),
                None => break,
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                if eng.reload(source) {
                    tasks.apply(eng).await;
                }
            }
        }
    }
    Ok(())
}
