//! Workload-manager hooks: `pjw job register|end`, `pjw slurm prolog|epilog`,
//! `pjw sge shepherd`. They run as root from the manager's daemons (slurmd, sge_execd) and
//! find the pjw daemon through `PJW_SOCKET` like every client.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use pjw_core::CpuSet;
use pjw_proto::{ErrorCode, ProtoError, RegisterRequest, Request, Response};

use crate::cli::{JobCommand, RegisterArgs, SgeCommand, SlurmCommand};
use crate::wlm_parse::{self, WlmJob};

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("pjw: {msg}");
    1
}

/// What a registered job got: its CPUs and pjw's GPUs (`PJW_GPUS`; empty for none).
struct Got {
    cpus: CpuSet,
    gpus: String,
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cpus {}", self.cpus)?;
        if !self.gpus.is_empty() {
            write!(f, " and gpus {}", self.gpus)?;
        }
        Ok(())
    }
}

/// Register `job`; waits while it is queued. Returns what it got. A daemon that goes away
/// meanwhile (a restart) is waited for, and the same registration sent again: the daemon gives
/// the job back its place (or tells its CPUs again if it started meanwhile). A prolog that
/// failed here would fail the job and, under Slurm, drain the node.
fn register(
    wlm: &str,
    job: &WlmJob,
    name: Option<String>,
    attach: bool,
) -> Result<Got, (Option<ErrorCode>, String)> {
    let req = RegisterRequest {
        job: job.id.clone(),
        wlm: wlm.to_string(),
        user: job.user.clone(),
        cpus: job.cpus,
        mem: job.mem,
        name,
        attach,
        gpus: job.gpus.clone(),
    };
    let path = pjw_proto::socket_path();
    let mut said = false;
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let mut c = crate::connect::connect_waiting(&path, false).map_err(|e| (None, e))?;
        let lost = match c.send(&Request::Register(req.clone())) {
            Err(e) => e.to_string(),
            Ok(()) => loop {
                match c.recv() {
                    Ok(Response::Queued {
                        job,
                        position,
                        reason,
                    }) if !said => {
                        // One write: parallel registrations may share a log.
                        let line =
                            format!("pjw: job {job} queued (position {position}): {reason}\n");
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                        said = true;
                    }
                    Ok(Response::Queued { .. }) => {}
                    Ok(Response::Started { cpus, env, .. }) => {
                        let gpus = env
                            .into_iter()
                            .find(|(k, _)| k == "PJW_GPUS")
                            .map(|(_, v)| v)
                            .unwrap_or_default();
                        return Ok(Got { cpus, gpus });
                    }
                    Ok(Response::Error {
                        code: ErrorCode::ShuttingDown,
                        message,
                    }) => break message,
                    Ok(Response::Error { code, message }) => return Err((Some(code), message)),
                    Ok(other) => return Err((None, format!("unexpected answer: {other:?}"))),
                    Err(e @ (ProtoError::Closed | ProtoError::Io(_))) => break e.to_string(),
                    Err(e) => return Err((None, e.to_string())),
                }
            },
        };
        let since = *lost_since.get_or_insert_with(|| {
            eprintln!(
                "pjw: lost the daemon ({lost}); registering again for up to {} s",
                crate::connect::reconnect_window().as_secs()
            );
            std::time::Instant::now()
        });
        if since.elapsed() >= crate::connect::reconnect_window() {
            return Err((
                None,
                format!(
                    "the pjw daemon did not come back within {} s: {lost}",
                    crate::connect::reconnect_window().as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// End registered job `id`; a job pjw does not know is not an error (never registered, or
/// already ended).
fn end(id: &str) -> i32 {
    // An epilog that finds the daemon restarting waits for it too: failing would leave the job
    // registered until the daemon finds its processes gone.
    let mut c = match crate::connect::connect_waiting(&pjw_proto::socket_path(), false) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // Ending waits for the job's processes to be killed and its cgroups removed.
    if let Err(e) = c.set_read_timeout(Some(Duration::from_secs(120))) {
        return fail(e);
    }
    match c.call(&Request::End {
        job: id.to_string(),
    }) {
        Ok(Response::Done { message }) => {
            eprintln!("pjw: {message}");
            0
        }
        Ok(Response::Error {
            code: ErrorCode::NotFound,
            message,
        }) => {
            eprintln!("pjw: {message}; nothing to end");
            0
        }
        Ok(Response::Error { message, .. }) => fail(message),
        Ok(other) => fail(format!("unexpected answer: {other:?}")),
        Err(e) => fail(e),
    }
}

fn exec(command: &[std::ffi::OsString]) -> i32 {
    let e = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    let prog = command[0].to_string_lossy();
    if e.kind() == std::io::ErrorKind::NotFound {
        eprintln!("pjw: {prog}: command not found");
        127
    } else {
        eprintln!("pjw: {prog}: {e}");
        126
    }
}

pub fn job(c: JobCommand) -> i32 {
    match c {
        JobCommand::Register(a) => job_register(a),
        JobCommand::End(k) => end(&k.job),
    }
}

fn job_register(a: RegisterArgs) -> i32 {
    let mem = match a.mem.as_deref().map(pjw_core::parse_size).transpose() {
        Ok(m) => m,
        Err(e) => return fail(format!("--mem: {e}")),
    };
    if a.cpus == 0 {
        return fail("--cpus must be at least 1");
    }
    if let Err(e) = pjw_core::JobId::new(&a.job_id) {
        return fail(e);
    }
    // The GPUs the manager chose, by its index: user-influenced text (a hook may pass a job's
    // variable), parsed as hostile; the daemon checks them against the node.
    let gpus = match a.gpus.as_deref() {
        None => None,
        Some(text) => {
            let m = a.wlm.parse().unwrap_or(pjw_wlm::Manager::Slurm);
            match pjw_wlm::parse_gpu_list(m, "--gpus", text) {
                Ok(g) => Some(g),
                Err(e) => return fail(e),
            }
        }
    };
    let job = WlmJob {
        id: a.job_id,
        user: a.user,
        cpus: a.cpus,
        mem,
        gpus,
    };
    let attach = !a.command.is_empty();
    match register(&a.wlm, &job, a.name, attach) {
        Ok(_) if attach => exec(&a.command),
        Ok(got) => {
            let ns = a.wlm.to_ascii_lowercase();
            let local = job.id.strip_prefix(&format!("{ns}:")).unwrap_or(&job.id);
            println!("job {ns}:{local} registered on {got}");
            0
        }
        Err((_, msg)) if attach => {
            eprintln!("pjw: {msg}");
            125
        }
        Err((_, msg)) => fail(msg),
    }
}

fn env_job_id(var: &str) -> Result<String, String> {
    let id = std::env::var(var).map_err(|_| format!("{var} is not set (not run by slurmd?)"))?;
    pjw_core::JobId::new(&id).map_err(|e| e.to_string())?;
    Ok(id)
}

/// Slurm's command `name`: `$NAME` (`SQUEUE`), else /usr/bin/NAME (slurmd gives its Prolog
/// no PATH).
fn slurm_command(name: &str) -> std::ffi::OsString {
    if let Some(p) = std::env::var_os(name.to_ascii_uppercase()) {
        return p;
    }
    let usr = Path::new("/usr/bin").join(name);
    if usr.exists() {
        return usr.into();
    }
    name.into()
}

/// The job's memory on this node, from `squeue`'s numbers (no user text: a job name such as
/// `x MinMemoryNode=1e-9` cannot change it).
fn slurm_job_mem(id: &str, cpus_here: u32) -> Result<Option<u64>, String> {
    let (a, t) = (
        std::env::var("SLURM_ARRAY_JOB_ID").unwrap_or_default(),
        std::env::var("SLURM_ARRAY_TASK_ID").unwrap_or_default(),
    );
    let job = wlm_parse::SqueueJob {
        id,
        array: (!a.is_empty() && !t.is_empty()).then_some((a.as_str(), t.as_str())),
    };
    let out = std::process::Command::new(slurm_command("squeue"))
        .args([
            "--noconvert",
            "-h",
            "-j",
            id,
            "-O",
            wlm_parse::SQUEUE_MEM_FIELDS,
        ])
        .output()
        .map_err(|e| format!("cannot run squeue: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "squeue -j {id} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let q = wlm_parse::parse_squeue_mem(&String::from_utf8_lossy(&out.stdout), &job)?;
    wlm_parse::node_mem(&q, cpus_here)
}

pub fn slurm(c: SlurmCommand) -> i32 {
    match c {
        SlurmCommand::Prolog => {
            let node = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            });
            // Who and how many CPUs: from slurmd's environment for the Prolog, never from
            // scontrol's text, which prints the user's job name unquoted; the memory from
            // squeue's numbers.
            let env = |k: &str| std::env::var(k).ok();
            let mut job = match wlm_parse::prolog_job(&env, &node, &user_name) {
                Ok(j) => j,
                Err(e) => return fail(e),
            };
            let id = job.id.clone();
            job.mem = match slurm_job_mem(&id, job.cpus) {
                Ok(m) => m,
                Err(e) => return fail(format!("slurm job {id}: its memory: {e}")),
            };
            // The name only (shown, never believed) from scontrol's text, where slurmd gave
            // none; a name is no reason to fail the Prolog.
            let text = match std::env::var("SLURM_JOB_NAME")
                .ok()
                .filter(|n| !n.is_empty())
            {
                Some(_) => String::new(),
                None => std::process::Command::new(slurm_command("scontrol"))
                    .args(["show", "job", "-d", &id])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default(),
            };
            let name =
                wlm_parse::slurm_job_name(std::env::var("SLURM_JOB_NAME").ok().as_deref(), &text);
            match register("slurm", &job, name, false) {
                Ok(got) => {
                    eprintln!("pjw: slurm job {id} of {} registered on {got}", job.user);
                    0
                }
                Err((_, msg)) => fail(format!("slurm job {id}: {msg}")),
            }
        }
        SlurmCommand::Epilog => match env_job_id("SLURM_JOB_ID") {
            Ok(id) => end(&format!("slurm:{id}")),
            Err(e) => fail(e),
        },
        SlurmCommand::TaskProlog => task_prolog(),
    }
}

/// The TaskProlog: the GPU variables pjw gives job `slurm:SLURM_JOB_ID`, as `export` lines
/// slurmstepd sets in the task. Slurm's own `CUDA_VISIBLE_DEVICES` is its gres index, which
/// names no device inside pjw's fence (decisions.md (ai)). Never fails the task: a problem is
/// said on stderr and nothing is exported.
fn task_prolog() -> i32 {
    let id = match env_job_id("SLURM_JOB_ID") {
        Ok(id) => format!("slurm:{id}"),
        Err(e) => {
            eprintln!("pjw: {e}");
            return 0;
        }
    };
    let status = pjw_proto::Client::connect(&pjw_proto::socket_path())
        .map_err(|e| e.to_string())
        .and_then(|mut c| c.call(&Request::Status).map_err(|e| e.to_string()));
    let report = match status {
        Ok(Response::Status(s)) => s,
        Ok(other) => {
            eprintln!("pjw: task prolog: unexpected answer {other:?}");
            return 0;
        }
        Err(e) => {
            eprintln!("pjw: task prolog: {e}");
            return 0;
        }
    };
    if let Some(j) = report.jobs.iter().find(|j| j.id == id) {
        print!("{}", wlm_parse::task_prolog_exports(&j.gpu_env));
    }
    0
}

/// The name of user `uid` on this node.
fn user_name(uid: u32) -> Option<String> {
    uzers::get_user_by_uid(uid).and_then(|u| u.name().to_str().map(String::from))
}

pub fn sge(c: SgeCommand) -> i32 {
    match c {
        SgeCommand::Shepherd(a) => {
            // execd gives the wrapper no job variables: the job is ./config, which execd
            // writes (./environment holds the user's own `qsub -v` variables: not read).
            let text = match std::fs::read_to_string("config") {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("pjw: grid engine job: cannot read ./config: {e}");
                    return 125;
                }
            };
            // Grid Engine's name for the job, bounded and escaped as Slurm's.
            let name = pjw_wlm::sge_shepherd(&text)
                .ok()
                .and_then(|w| w.name)
                .and_then(|n| wlm_parse::job_name(&n));
            let job = match pjw_wlm::sge_shepherd(&text) {
                Ok(w) => match (w.user, w.cpus) {
                    (Some(user), cpus) => WlmJob {
                        id: w.pjw_id,
                        user,
                        cpus: cpus.unwrap_or(1).max(1),
                        mem: w.mem,
                        gpus: None,
                    },
                    (None, _) => {
                        eprintln!(
                            "pjw: grid engine job {}: no job_owner in ./config",
                            w.job_id
                        );
                        return 125;
                    }
                },
                Err(e) => {
                    eprintln!("pjw: grid engine job: {e}");
                    return 125;
                }
            };
            match register("sge", &job, name, true) {
                Ok(_) => exec(&a.command),
                // Another task of a job already registered (a `qrsh -inherit` slave): its
                // processes carry JOB_ID and are adopted into that job.
                Err((Some(ErrorCode::Conflict), msg)) => {
                    eprintln!("pjw: {msg}; starting the shepherd outside it (adoption applies)");
                    exec(&a.command)
                }
                Err((_, msg)) => {
                    eprintln!("pjw: grid engine job {}: {msg}", job.id);
                    125
                }
            }
        }
    }
}
