//! Asking workload managers whether their registered jobs still run here, off the engine's
//! thread (docs/decisions.md (cc)).
//!
//! At each lease tick the engine sends the asker the registered jobs whose manager can be asked
//! ([`AskJob`]) and returns. The asker's own thread runs one command per manager for all of its
//! jobs (`squeue` for Slurm, `qstat` for Grid Engine; [`pjw_wlm::ask`] builds them and reads
//! the answers), each with a timeout, and sends the engine one word per job. A command that
//! hangs (a stopped controller) is killed at its timeout and is no answer; a tick that finds
//! the asker still busy is dropped, so asks never pile up.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pjw_core::lease::Word;
use pjw_wlm::ask::{self, Outcome};
use pjw_wlm::Manager;
use tracing::debug;

/// Bytes of a command's output read at most (qstat lists every running job of the cluster).
const MAX_OUTPUT: u64 = 64 << 20;

/// One registered job to ask about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskJob {
    pub seq: i64,
    pub manager: Manager,
    /// The manager's job number (`4242` of `slurm:4242`).
    pub id: String,
}

/// Running a manager's command.
pub trait CommandPort: Send {
    /// Run `argv` (no shell) and wait at most `timeout`. Err: it could not be started, or did
    /// not finish in time (it is killed then).
    fn run(&self, argv: &[String], timeout: Duration) -> Result<Outcome, String>;
}

/// Commands run as child processes of the daemon, with its environment (`SLURM_CONF`,
/// `SGE_ROOT`, `SGE_CELL`, `PATH`), `[lease] command_env` over it, and `LC_ALL=C`.
#[derive(Debug, Default)]
pub struct Commands {
    pub env: Vec<(String, String)>,
}

impl CommandPort for Commands {
    fn run(&self, argv: &[String], timeout: Duration) -> Result<Outcome, String> {
        let (prog, args) = argv.split_first().ok_or("no command")?;
        let mut child = Command::new(prog)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {prog}: {e}"))?;
        // Read both pipes while it runs, so a long answer never blocks it.
        let reader = |p: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(p) = p {
                    let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
                }
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let out = reader(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = reader(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    // Our own child, by its handle.
                    if let Err(e) = child.kill().and_then(|()| child.wait().map(drop)) {
                        debug!(prog = %prog, error = %e, "cannot end a command that did not answer");
                    }
                    return Err(format!(
                        "{prog} did not answer within {} s",
                        timeout.as_secs()
                    ));
                }
                Err(e) => return Err(format!("cannot wait for {prog}: {e}")),
            }
        };
        Ok(Outcome {
            success: status.success(),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        })
    }
}

/// Ask every manager about its jobs: one command per manager (pure but for the port).
pub fn ask_all(
    port: &dyn CommandPort,
    jobs: &[AskJob],
    node: &str,
    timeout: Duration,
) -> Vec<(i64, Word)> {
    let mut by: BTreeMap<&'static str, Vec<&AskJob>> = BTreeMap::new();
    let mut words = Vec::new();
    for j in jobs {
        if !ask::is_job_number(&j.id) {
            // Not a number the manager gave: never asked, never ended by an answer.
            words.push((
                j.seq,
                Word::NoAnswer(format!("{:?} is not a job number", j.id)),
            ));
            continue;
        }
        by.entry(j.manager.as_str()).or_default().push(j);
    }
    for group in by.values() {
        let m = group[0].manager;
        let ids: Vec<&str> = group.iter().map(|j| j.id.as_str()).collect();
        let argv = match m {
            Manager::Slurm => ask::slurm_command(&ids, node),
            Manager::Sge => ask::sge_command(),
            _ => continue,
        };
        let t0 = Instant::now();
        let answer = match port.run(&argv, timeout) {
            Ok(out) => match m {
                Manager::Slurm => ask::slurm_words(&ids, &out),
                _ => ask::sge_words(&ids, node, &out),
            },
            Err(why) => ids
                .iter()
                .map(|i| (i.to_string(), Word::NoAnswer(why.clone())))
                .collect(),
        };
        debug!(
            manager = m.as_str(),
            jobs = ids.len(),
            took_ms = t0.elapsed().as_millis() as u64,
            "asked the workload manager"
        );
        for (id, w) in answer {
            for j in group.iter().filter(|j| j.id == id) {
                words.push((j.seq, w.clone()));
            }
        }
    }
    words
}

/// The asker's thread.
#[derive(Debug)]
pub struct Asker {
    tx: mpsc::Sender<Vec<AskJob>>,
}

impl Asker {
    /// Start the thread; each batch's words go to `answer`.
    pub fn spawn(
        port: impl CommandPort + 'static,
        node: String,
        timeout: Duration,
        answer: impl Fn(Vec<(i64, Word)>) + Send + 'static,
    ) -> std::io::Result<Asker> {
        let (tx, rx) = mpsc::channel::<Vec<AskJob>>();
        std::thread::Builder::new()
            .name("pjw-lease".into())
            .spawn(move || {
                while let Ok(mut jobs) = rx.recv() {
                    // Ticks that queued up while an ask ran: only the newest counts.
                    while let Ok(newer) = rx.try_recv() {
                        jobs = newer;
                    }
                    answer(ask_all(&port, &jobs, &node, timeout));
                }
            })?;
        Ok(Asker { tx })
    }

    /// A sender that only collects the batches (engine tests).
    #[cfg(test)]
    pub fn collecting() -> (Asker, mpsc::Receiver<Vec<AskJob>>) {
        let (tx, rx) = mpsc::channel();
        (Asker { tx }, rx)
    }

    /// Queue an ask; never blocks.
    pub fn ask(&self, jobs: Vec<AskJob>) {
        let _ = self.tx.send(jobs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Answers from a table; records each command line.
    struct Fake {
        answer: Result<Outcome, String>,
        ran: Mutex<Vec<String>>,
    }

    impl CommandPort for Fake {
        fn run(&self, argv: &[String], _: Duration) -> Result<Outcome, String> {
            self.ran.lock().unwrap().push(argv.join(" "));
            self.answer.clone()
        }
    }

    #[test]
    fn one_command_per_manager_and_odd_ids_never_asked() {
        let port = Fake {
            answer: Ok(Outcome {
                success: true,
                stdout: "41|RUNNING\n".into(),
                stderr: String::new(),
            }),
            ran: Mutex::new(Vec::new()),
        };
        let job = |seq, id: &str| AskJob {
            seq,
            manager: Manager::Slurm,
            id: id.into(),
        };
        let w = ask_all(
            &port,
            &[job(1, "41"), job(2, "42"), job(3, "42;rm")],
            "n1",
            Duration::from_secs(1),
        );
        assert_eq!(port.ran.lock().unwrap().len(), 1);
        assert!(port.ran.lock().unwrap()[0].contains("--jobs 41,42 "));
        let of = |s| {
            w.iter()
                .find(|(q, _)| *q == s)
                .map(|(_, w)| w.clone())
                .unwrap()
        };
        assert_eq!(of(1), Word::Running("RUNNING".into()));
        assert!(matches!(of(2), Word::Gone(_)));
        assert!(matches!(of(3), Word::NoAnswer(_)));
        // A command that could not run, or timed out: no answer for each.
        let port = Fake {
            answer: Err("squeue did not answer within 5 s".into()),
            ran: Mutex::new(Vec::new()),
        };
        let w = ask_all(&port, &[job(1, "41")], "n1", Duration::from_secs(1));
        assert_eq!(
            w,
            [(1, Word::NoAnswer("squeue did not answer within 5 s".into()))]
        );
    }

    #[test]
    fn a_hung_command_is_killed_at_its_timeout() {
        let t0 = Instant::now();
        let r = Commands::default().run(&["sleep".into(), "30".into()], Duration::from_millis(300));
        assert!(r.unwrap_err().contains("did not answer"));
        assert!(t0.elapsed() < Duration::from_secs(5));
        let c = Commands {
            env: vec![("PJW_T".into(), "x".into())],
        };
        let argv = ["sh", "-c", "echo out$PJW_T; echo err >&2; exit 3"].map(String::from);
        let r = c.run(&argv, Duration::from_secs(10)).unwrap();
        assert_eq!(
            (r.success, r.stdout.as_str(), r.stderr.as_str()),
            (false, "outx\n", "err\n")
        );
    }
}
