//! `pjw run`: ask the daemon for CPUs, wait if needed, then exec the command inside the job.
//!
//! This process stays single-threaded until it execs: the daemon moves the whole process
//! (found by `SO_PEERCRED`) into the job's cgroups, so the command starts confined from its
//! first instruction and no helper process remains in the job. A watcher outside it
//! (`run_watch`) says on stderr what memory did to the job once the command has exited.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// One line on stderr in one `write`: Rust's unbuffered stderr writes each piece of a
/// formatted line apart, and the lines of parallel `pjw run`s sharing a log interleaved.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

use pjw_proto::{Client, ErrorCode, JobTmp, Placement, ProtoError, Request, Response, RunRequest};

use crate::cli::RunArgs;
use crate::connect::{connect_window, daemon_absent, reconnect_window};

/// Exit code when pjw itself fails.
const EXIT_PJW: i32 = 125;

fn fail(msg: impl std::fmt::Display) -> i32 {
    say!("pjw: {msg}");
    EXIT_PJW
}

/// `--tmp`: a size, or 0/none for no private /tmp.
fn parse_tmp(text: &str) -> Result<u64, String> {
    match text.trim() {
        "none" | "0" => Ok(0),
        t => match pjw_core::parse_size(t) {
            Ok(n) if n < 1 << 20 => Err(format!("--tmp {t}: below 1M")),
            Ok(n) => Ok(n),
            Err(e) => Err(format!("--tmp: {e} (or 0/none)")),
        },
    }
}

pub fn run(a: RunArgs) -> i32 {
    let parsed = match parse(&a) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let path = pjw_proto::socket_path();
    // Who tells the user what memory did to the job once the command has exited.
    let watch = crate::run_watch::Watch::spawn();
    let started = match wait_for_start(&a, parsed.req.clone(), &path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    exec_in_job(&a, &parsed, started, watch)
}

/// What `pjw run` was asked, parsed and checked before the daemon is spoken to.
struct Parsed {
    /// Whether this process runs as root (a job starter).
    root: bool,
    /// The workload manager's job this run comes from (`--from-env`).
    wlm: Option<pjw_wlm::WlmJob>,
    /// Who to become before exec (root only, and only someone else).
    target: Option<crate::starter::Target>,
    /// The request sent to the daemon.
    req: RunRequest,
}

/// What the daemon said when the job started: its id, CPUs, memory nodes, /tmp, /dev/shm size,
/// variables and default variables.
type Started = (
    String,
    pjw_core::CpuSet,
    pjw_core::CpuSet,
    Option<JobTmp>,
    Option<u64>,
    Vec<(String, String)>,
    Vec<(String, String)>,
);

/// The arguments and the manager's environment as a request (Err: the exit code, the error
/// said).
fn parse(a: &RunArgs) -> Result<Parsed, i32> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let wlm = read_wlm(a)?;
    let mem = match a.mem.as_deref().map(pjw_core::parse_size).transpose() {
        Ok(m) => m.or(wlm.as_ref().and_then(|w| w.mem)),
        Err(e) => return Err(fail(format!("--mem: {e}"))),
    };
    let cpus = match job_cpus(a.cpus, a.ntasks, wlm.as_ref().and_then(|w| w.cpus)) {
        Ok(c) => c,
        Err(e) => return Err(fail(e)),
    };
    // A manager's id, in the manager's namespace where its wrapper runs as the user (LSF,
    // HTCondor, PBS: `lsf:4242`), so no id a user picks is ever the manager's; Slurm's and Grid
    // Engine's namespaces are for root's registrations, so there the id stays pjw's own.
    let job_id = a.job_id.clone().or(wlm.as_ref().map(|w| {
        let ns = w.manager.to_string();
        if pjw_core::jobid::USER_RUN_MANAGERS.contains(&ns.as_str()) {
            format!("{ns}:{}", w.pjw_id)
        } else {
            w.pjw_id.clone()
        }
    }));
    if let Some(id) = &job_id {
        if let Err(e) = pjw_core::JobId::new(id) {
            return Err(fail(e));
        }
    }
    let mut io_max = Vec::new();
    for spec in &a.io_max {
        match parse_io_max(spec) {
            Ok(m) => io_max.push(m),
            Err(e) => return Err(fail(format!("--io-max: {e}"))),
        }
    }
    let tmp = match a.tmp.as_deref().map(parse_tmp).transpose() {
        Ok(t) => t,
        Err(e) => return Err(fail(e)),
    };
    // The owner: --user, else (for root) the manager's job owner.
    let user = a
        .user
        .clone()
        .or_else(|| wlm.as_ref().filter(|_| root).and_then(|w| w.user.clone()));
    // Who to become before exec: only root drops, and only to someone else.
    let target = match (&user, root && !a.no_setuid) {
        (Some(name), true) => match crate::starter::lookup(name) {
            Ok(t) if t.uid != 0 => Some(t),
            Ok(_) => None,
            Err(e) => return Err(fail(format!("--user: {e}"))),
        },
        _ => None,
    };
    let argv: Vec<String> = a
        .command
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let placement = if a.backfill_only {
        Placement::BackfillOnly
    } else if a.primary_only {
        Placement::PrimaryOnly
    } else {
        Placement::Any
    };
    let req = RunRequest {
        gpus: a.gpus,
        bind: a.bind,
        tasks: a.ntasks,
        time_limit_s: a.time.map(|t| t.secs()),
        cpus,
        mem,
        job_id,
        name: a.name.clone().or(wlm.as_ref().and_then(|w| w.name.clone())),
        argv,
        priority: a.priority,
        placement,
        exclusive: a.exclusive,
        user,
        wlm: wlm.as_ref().map(|w| w.tag()),
        tmp,
        io_weight: a.io_weight,
        io_max,
    };
    Ok(Parsed {
        root,
        wlm,
        target,
        req,
    })
}

/// The workload manager's job this run comes from (`--from-env`: a manager, or `auto`).
fn read_wlm(a: &RunArgs) -> Result<Option<pjw_wlm::WlmJob>, i32> {
    Ok(match a.from_env.as_deref() {
        None => None,
        Some(spec) => {
            let manager = match spec {
                "auto" => None,
                m => match m.parse::<pjw_wlm::Manager>() {
                    Ok(m) => Some(m),
                    Err(e) => return Err(fail(format!("--from-env: {e}"))),
                },
            };
            match pjw_wlm::read(manager) {
                Ok(j) => Some(j),
                Err(e) => return Err(fail(format!("--from-env: {e}"))),
            }
        }
    })
}

/// Send the request and wait until the job starts, reconnecting (bounded) to a daemon that
/// restarts meanwhile. Err: the exit code, the error said.
fn wait_for_start(
    a: &RunArgs,
    mut req: RunRequest,
    path: &std::path::Path,
) -> Result<Started, i32> {
    let mut said_queued = false;
    let mut lost_since: Option<Instant> = None;
    let mut waiting_since: Option<Instant> = None;
    loop {
        let mut client = match Client::connect(path) {
            Ok(c) => c,
            // No daemon yet (restarting): a new job waits for it, bounded, saying so once.
            Err(e) if lost_since.is_none() && daemon_absent(&e) => {
                let since = *waiting_since.get_or_insert_with(|| {
                    if !a.quiet {
                        say!(
                            "pjw: no pjw daemon at {} yet; waiting up to {} s",
                            path.display(),
                            connect_window().as_secs()
                        );
                    }
                    Instant::now()
                });
                if since.elapsed() >= connect_window() {
                    return Err(fail(format!(
                        "no pjw daemon came up within {} s: {e}",
                        connect_window().as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Err(e) => match lost_since {
                Some(t) if t.elapsed() < reconnect_window() => {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Some(_) => {
                    return Err(fail(format!(
                        "the pjw daemon did not come back within {} s: {e}",
                        reconnect_window().as_secs()
                    )))
                }
                None => return Err(fail(e)),
            },
        };
        if lost_since.take().is_some() && !a.quiet {
            say!("pjw: reconnected to the daemon");
        }
        if let Err(e) = client.send(&Request::Run(req.clone())) {
            lost_since = Some(Instant::now());
            if !a.quiet {
                say!("pjw: lost the daemon ({e}); reconnecting");
            }
            continue;
        }
        let outcome = await_start(&mut client, &mut req, &mut said_queued, a.quiet);
        match outcome {
            Ok(s) => return Ok(s),
            Err(Some(msg)) => return Err(fail(msg)),
            Err(None) => {
                if lost_since.is_none() {
                    lost_since = Some(Instant::now());
                    if !a.quiet {
                        say!(
                            "pjw: lost the daemon; reconnecting for up to {} s",
                            reconnect_window().as_secs()
                        );
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The daemon's answers on one connection until the job starts. Err(None): the connection
/// was lost (or the daemon is shutting down); Err(Some): the error to say.
fn await_start(
    client: &mut Client,
    req: &mut RunRequest,
    said_queued: &mut bool,
    quiet: bool,
) -> Result<Started, Option<String>> {
    loop {
        match client.recv() {
            Ok(Response::Queued {
                job,
                position,
                reason,
            }) => {
                // Keep our seat's id across a daemon restart.
                req.job_id = Some(job.clone());
                if !*said_queued && !quiet {
                    say!("pjw: job {job} queued (position {position}): {reason}");
                    *said_queued = true;
                }
            }
            Ok(Response::Started {
                job,
                cpus,
                mems,
                tmp,
                shm,
                env,
                env_defaults,
                ..
            }) => break Ok((job, cpus, mems, tmp, shm, env, env_defaults)),
            Ok(Response::Error {
                code: ErrorCode::ShuttingDown,
                ..
            })
            | Err(ProtoError::Closed)
            | Err(ProtoError::Io(_)) => {
                break Err(None);
            }
            Ok(Response::Error { message, .. }) => break Err(Some(message)),
            Ok(other) => {
                break Err(Some(format!(
                    "unexpected answer from the daemon: {other:?}"
                )))
            }
            Err(e) => break Err(Some(e.to_string())),
        }
    }
}

/// The command, set up in the started job (its variables, /tmp, /dev/shm, its user) and exec'd:
/// returns only when exec fails, with the exit code.
fn exec_in_job(
    a: &RunArgs,
    p: &Parsed,
    started: Started,
    mut watch: Option<crate::run_watch::Watch>,
) -> i32 {
    let (root, wlm, target) = (p.root, &p.wlm, &p.target);
    let (job, cpus, _mems, tmp, shm, env, env_defaults) = started;
    // A step of the job this process is in already (the daemon said so): its share of the
    // job's CPUs, inherited by the command and its children.
    if let Some((_, step)) = env.iter().find(|(k, _)| k == "PJW_STEP_ID") {
        // What memory did is the job's to tell (its own `pjw run`, or its manager), once: a
        // step's watcher would repeat the job's counts at every step's end. Dropped, it
        // reads no id and exits.
        watch = None;
        if let Err(e) = crate::affinity::set_own(&cpus) {
            say!("pjw: step {step} of job {job}: cannot run on cpus {cpus} ({e}); it runs on all of the job's");
        }
    }
    // The watcher hears the job's id at once: this process is in the job's cgroups now, and
    // a job whose memory limit kills it before its exec is still told (review: a sub-page
    // --mem killed the client before the watcher knew the job, and nothing was said).
    if let Some(w) = watch {
        w.started(&job);
    }
    let mut cmd = std::process::Command::new(&a.command[0]);
    // The thread counts the daemon suggests, where the user did not set their own.
    let defaults =
        pjw_core::thread_env::unset_only(&env_defaults, |k| std::env::var_os(k).is_some());
    cmd.args(&a.command[1..])
        .env("PJW_JOB_ID", &job)
        .env("PJW_CPUS", cpus.to_string())
        .envs(defaults)
        .envs(env);
    if let Some(n) = a.ntasks {
        cmd.env("PJW_NTASKS", n.to_string()).env(
            "PJW_CPUS_PER_TASK",
            (cpus.len() / n as usize).max(1).to_string(),
        );
    }
    // Job starter mode: private /tmp (needs root), then become the user.
    match &tmp {
        Some(JobTmp::Private { size }) if root => {
            let (uid, gid) = target.as_ref().map_or((0, 0), |t| (t.uid, t.gid));
            let keep = wlm
                .as_ref()
                .and_then(|w| w.tmpdir.as_deref())
                .map(std::path::Path::new);
            if let Err(e) = crate::starter::private_tmp(*size, uid, gid, keep) {
                return fail(format!("job {job}: private /tmp: {e:#}"));
            }
            cmd.env("TMPDIR", "/tmp");
        }
        Some(JobTmp::Dir { dir, .. }) => {
            cmd.env("TMPDIR", dir);
        }
        _ => {}
    }
    // Its own /dev/shm and IPC namespace where it can have them; else the host's, scrubbed at
    // the end by the daemon.
    if let (Some(size), true) = (shm, root) {
        let ns = matches!(tmp, Some(JobTmp::Private { .. }));
        if let Err(e) = crate::starter::private_ipc(size, !ns) {
            say!("pjw: job {job}: no private /dev/shm and IPC, the host's are used: {e:#}");
        }
    }
    if let Some(t) = &target {
        if let Err(e) = crate::starter::drop_to(t) {
            return fail(format!("job {job}: cannot become {}: {e:#}", t.name));
        }
        cmd.envs(crate::starter::user_env(t));
    }
    let e = cmd.exec();
    let prog = a.command[0].to_string_lossy();
    // The user's own text, but it reaches a terminal: escaped as every name is.
    let prog = pjw_core::text::printable(&prog, pjw_core::text::MAX_CELL);
    if e.kind() == std::io::ErrorKind::NotFound {
        say!("pjw: {prog}: command not found");
        127
    } else {
        say!("pjw: {prog}: {e}");
        126
    }
}

/// The job's CPUs from `--cpus`, `--ntasks` and the workload manager's count: with tasks,
/// `--cpus` counts per task (Slurm's `-c`), and a manager's count is divided among them.
fn job_cpus(cpus: Option<u32>, ntasks: Option<u32>, wlm: Option<u32>) -> Result<u32, String> {
    let total = match ntasks {
        None => cpus.or(wlm).unwrap_or(1),
        Some(0) => return Err("--ntasks must be at least 1".into()),
        Some(n) => {
            let per_task = match (cpus, wlm) {
                (Some(c), _) => c,
                (None, Some(w)) if w.is_multiple_of(n) => w / n,
                (None, Some(w)) => {
                    return Err(format!(
                        "--ntasks {n} does not divide the workload manager's {w} cpus; give --cpus per task"
                    ))
                }
                (None, None) => 1,
            };
            n.checked_mul(per_task)
                .ok_or_else(|| format!("--ntasks {n} × --cpus {per_task} is too many cpus"))?
        }
    };
    if total == 0 {
        return Err("--cpus must be at least 1".into());
    }
    Ok(total)
}

/// `--io-max 'DEV key=value…'`, DEV `MAJ:MIN` or a path (resolved to its whole disk here, on
/// the node the job runs on), checked and sent as `MAJ:MIN key=value…`.
fn parse_io_max(spec: &str) -> Result<String, String> {
    let (dev, rest) = spec.trim().split_once(' ').unwrap_or((spec.trim(), ""));
    let dev = if dev.starts_with('/') {
        pjw_daemon::config::resolve_disk(std::path::Path::new(dev), std::path::Path::new("/sys"))?
            .to_string()
    } else {
        dev.to_string()
    };
    pjw_core::io_limits::IoMax::parse(&format!("{dev} {rest}"))
        .map(|m| m.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::job_cpus;

    /// (description, --cpus, --ntasks, the manager's cpus, expected or a part of the error)
    type Case = (
        &'static str,
        Option<u32>,
        Option<u32>,
        Option<u32>,
        Result<u32, &'static str>,
    );

    #[test]
    fn cpus_per_task_times_tasks() {
        let cases: &[Case] = &[
            ("nothing said: one cpu", None, None, None, Ok(1)),
            ("-c alone is the job's", Some(4), None, None, Ok(4)),
            ("the manager's count", None, None, Some(6), Ok(6)),
            ("-c wins over the manager", Some(2), None, Some(6), Ok(2)),
            ("2 tasks of 2", Some(2), Some(2), None, Ok(4)),
            ("tasks without -c: one cpu each", None, Some(3), None, Ok(3)),
            (
                "the manager's 8 cpus for 4 tasks",
                None,
                Some(4),
                Some(8),
                Ok(8),
            ),
            (
                "-c per task beside the manager",
                Some(1),
                Some(4),
                Some(8),
                Ok(4),
            ),
            (
                "3 tasks do not divide 8",
                None,
                Some(3),
                Some(8),
                Err("--ntasks 3 does not divide"),
            ),
            (
                "-c 0",
                Some(0),
                None,
                None,
                Err("--cpus must be at least 1"),
            ),
            (
                "-c 0 per task",
                Some(0),
                Some(2),
                None,
                Err("--cpus must be at least 1"),
            ),
            (
                "overflow",
                Some(u32::MAX),
                Some(2),
                None,
                Err("too many cpus"),
            ),
        ];
        for (desc, c, n, w, want) in cases {
            match (job_cpus(*c, *n, *w), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{desc}"),
                (Err(e), Err(want)) => assert!(e.contains(want), "{desc}: {e}"),
                (got, want) => panic!("{desc}: {got:?}, want {want:?}"),
            }
        }
    }
}
