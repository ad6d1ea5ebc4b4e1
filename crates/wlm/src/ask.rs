//! Asking a workload manager whether its jobs still run on this node (leases, docs/decisions.md
//! (cc)): the command lines and the readers of their answers (pure; the daemon runs them).
//!
//! Only fields no user controls are asked for and read: Slurm's job number and state enum
//! (`squeue -o '%A|%T'`), filtered to this node by Slurm itself (`-w NODE`); Grid Engine's
//! `qstat -xml`, whose job names are XML-escaped text inside elements pjw never reads. A job
//! name that prints `COMPLETED` or a forged line cannot make a job look ended: a line that is
//! not exactly an asked number and a known state makes the whole answer unreadable, and an
//! unreadable answer is no answer ([`Word::NoAnswer`]), which never ends a job.

use pjw_core::lease::Word;

use crate::Manager;

/// What a command did: whether it exited 0, and what it printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// The managers pjw asks; the others are bounded by the lease alone.
pub fn askable(m: Manager) -> bool {
    matches!(m, Manager::Slurm | Manager::Sge)
}

/// Slurm's states of a job that still occupies this node.
const SLURM_HERE: &[&str] = &[
    "RUNNING",
    "COMPLETING",
    "CONFIGURING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESIZING",
];

/// Slurm's states of a job that does not run here (ended, or waiting to run again).
const SLURM_GONE: &[&str] = &[
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "PENDING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
    "REVOKED",
];

/// A Slurm or Grid Engine job number: digits only (what pjw asks about; anything else is not
/// asked).
pub fn is_job_number(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

/// `squeue` for job numbers `ids` on node `node`: every state (finished jobs Slurm still
/// remembers included), only jobs on this node, the job number and the state.
pub fn slurm_command(ids: &[&str], node: &str) -> Vec<String> {
    [
        "squeue",
        "--noheader",
        "--states=all",
        "--nodelist",
        node,
        "--jobs",
        &ids.join(","),
        "--format",
        "%A|%T",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// One line of a tool's error output, bounded and printable (for status and the log).
fn said(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    pjw_core::text::printable(line, 160).into_owned()
}

/// Every asked job gets the same word.
fn all(ids: &[&str], w: Word) -> Vec<(String, Word)> {
    ids.iter().map(|i| (i.to_string(), w.clone())).collect()
}

/// Read `squeue`'s answer about `ids` (asked with [`slurm_command`]).
pub fn slurm_words(ids: &[&str], out: &Outcome) -> Vec<(String, Word)> {
    if !out.success {
        // One unknown number is an error ("Invalid job id specified"); several are an empty
        // answer. Both mean Slurm does not know the job.
        if ids.len() == 1 && out.stderr.contains("Invalid job id specified") {
            return all(ids, Word::Gone("unknown to slurm".into()));
        }
        let why = said(&out.stderr);
        let why = if why.is_empty() {
            "squeue failed".into()
        } else {
            why
        };
        return all(ids, Word::NoAnswer(why));
    }
    let mut states: Vec<(&str, &str)> = Vec::new();
    for line in out.stdout.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = line.trim().split_once('|').filter(|(id, st)| {
            ids.contains(id) && st.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        });
        match parsed {
            Some(p) => states.push(p),
            None => {
                return all(
                    ids,
                    Word::NoAnswer(format!("cannot read squeue's line {:?}", said(line))),
                )
            }
        }
    }
    ids.iter()
        .map(|id| {
            let w = match states.iter().find(|(i, _)| i == id).map(|(_, s)| *s) {
                None => Word::Gone("not on this node (slurm has no such job here)".into()),
                Some(s) if SLURM_HERE.contains(&s) => Word::Running(s.into()),
                Some(s) if SLURM_GONE.contains(&s) => Word::Gone(s.into()),
                Some(s) => Word::NoAnswer(format!("unknown slurm state {s}")),
            };
            (id.to_string(), w)
        })
        .collect()
}

/// `qstat` for every user's running and suspended jobs, as XML.
pub fn sge_command() -> Vec<String> {
    ["qstat", "-u", "*", "-s", "rs", "-xml"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Read `qstat -xml`'s answer (asked with [`sge_command`]) about `ids` on host `node` (short
/// name): a job listed in a queue instance on this host (`QUEUE@HOST`) runs here; one not listed
/// there is gone from it.
pub fn sge_words(ids: &[&str], node: &str, out: &Outcome) -> Vec<(String, Word)> {
    if !out.success {
        let why = said(&out.stderr);
        let why = if why.is_empty() {
            "qstat failed".into()
        } else {
            why
        };
        return all(ids, Word::NoAnswer(why));
    }
    let doc = match roxmltree::Document::parse(&out.stdout) {
        Ok(d) => d,
        Err(e) => return all(ids, Word::NoAnswer(format!("cannot read qstat's XML: {e}"))),
    };
    if doc.root_element().tag_name().name() != "job_info" {
        return all(ids, Word::NoAnswer("qstat's XML is not a job_info".into()));
    }
    let text = |n: roxmltree::Node, tag: &str| {
        n.children()
            .find(|c| c.has_tag_name(tag))
            .and_then(|c| c.text())
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    // (number, state letters, host) of every job listed.
    let mut here: Vec<(String, String)> = Vec::new();
    for j in doc.descendants().filter(|n| n.has_tag_name("job_list")) {
        let num = text(j, "JB_job_number");
        let queue = text(j, "queue_name");
        let host = queue.split_once('@').map(|(_, h)| h).unwrap_or("");
        let short = host.split('.').next().unwrap_or("");
        if short == node.split('.').next().unwrap_or(node) {
            here.push((num, text(j, "state")));
        }
    }
    ids.iter()
        .map(|id| {
            let w = match here.iter().find(|(n, _)| n == id) {
                Some((_, st)) => Word::Running(format!("state {}", said(st))),
                None => Word::Gone("not running on this host (qstat)".into()),
            };
            (id.to_string(), w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(stdout: &str) -> Outcome {
        Outcome {
            success: true,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    fn failed(stderr: &str) -> Outcome {
        Outcome {
            success: false,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    fn words(v: Vec<(String, Word)>) -> Vec<Word> {
        v.into_iter().map(|(_, w)| w).collect()
    }

    #[test]
    fn slurm_answers() {
        use Word::*;
        let ids = ["41", "42", "43"];
        // What Slurm 22.05 printed on this project's live Slurm (a running and a finished job;
        // 43 unknown or elsewhere).
        assert_eq!(
            words(slurm_words(&ids, &ok("41|RUNNING\n42|COMPLETED\n"))),
            [
                Running("RUNNING".into()),
                Gone("COMPLETED".into()),
                Gone("not on this node (slurm has no such job here)".into())
            ]
        );
        assert_eq!(
            words(slurm_words(
                &["9"],
                &failed("slurm_load_jobs error: Invalid job id specified\n")
            )),
            [Gone("unknown to slurm".into())]
        );
        // The controller down, or stopped (the daemon's timeout): no answer.
        let down =
            failed("slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
        assert!(words(slurm_words(&ids, &down))
            .iter()
            .all(|w| matches!(w, NoAnswer(m) if m.contains("Unable to contact"))));
        // Several unknown numbers with an error: not read as gone.
        assert!(matches!(
            &words(slurm_words(
                &["1", "2"],
                &failed("slurm_load_jobs error: Invalid job id specified")
            ))[0],
            NoAnswer(_)
        ));
        // A node name Slurm does not know (the wrong cluster, or `[lease] node` wrong): no answer,
        // not every job gone.
        assert!(matches!(
            &words(slurm_words(
                &ids,
                &failed("squeue: error: Invalid node name x")
            ))[0],
            NoAnswer(_)
        ));
        // Unknown states and unreadable lines are no answer, for every job.
        assert!(matches!(
            &words(slurm_words(&["41"], &ok("41|NEW_STATE\n")))[0],
            NoAnswer(_)
        ));
        for bad in [
            "41|RUNNING|x\n",
            "41 RUNNING\n",
            "7|COMPLETED\n",
            "41|completed\n",
            "41|RUNNING\n42|COMPLETED x\n",
        ] {
            assert!(
                words(slurm_words(&ids, &ok(bad)))
                    .iter()
                    .all(|w| matches!(w, NoAnswer(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            slurm_command(&["41", "42"], "node1").join(" "),
            "squeue --noheader --states=all --nodelist node1 --jobs 41,42 --format %A|%T"
        );
        assert!(
            is_job_number("4242")
                && !is_job_number("42_1")
                && !is_job_number("")
                && !is_job_number("-1")
        );
    }

    /// Son of Grid Engine 8.1.9 (Debian 12), `qstat -u '*' -s rs -xml` on this project's live
    /// cell, with job 10 named `x<JB_job_number>7<queue_name>all.q` by its owner (qsub refuses
    /// `/` and `@` in names; qstat writes `<` as `%lt;`), and a second job added by hand on
    /// another host.
    const QSTAT: &str = r#"<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>10</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>x%lt;JB_job_number&gt;7%lt;queue_name&gt;all.q</JB_name>
      <JB_owner>nobody</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-11-26T22:39:58</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="running">
      <JB_job_number>9</JB_job_number>
      <JB_name>x</JB_name>
      <state>r</state>
      <queue_name>all.q@node2.example.org</queue_name>
      <slots>1</slots>
    </job_list>
  </queue_info>
  <job_info>
  </job_info>
</job_info>
"#;

    #[test]
    fn grid_engine_answers() {
        use Word::*;
        let w = words(sge_words(&["10", "7", "9"], "vm", &ok(QSTAT)));
        assert_eq!(w[0], Running("state r".into()));
        // 7 appears only inside a job name (text, never an element): not a job here.
        assert!(matches!(&w[1], Gone(_)), "{w:?}");
        // 9 runs on another host.
        assert!(matches!(&w[2], Gone(_)), "{w:?}");
        // A name qstat does not escape (`&`) breaks the XML: no answer, never gone.
        let broken = QSTAT.replace("<JB_name>x</JB_name>", "<JB_name>a&b</JB_name>");
        let w = words(sge_words(&["10", "9"], "vm", &ok(&broken)));
        assert!(w.iter().all(|w| matches!(w, NoAnswer(_))), "{w:?}");
        let w = words(sge_words(&["7"], "vm", &ok("<job_info><oops")));
        assert!(matches!(&w[0], NoAnswer(_)));
        let down = failed("error: commlib error: can't connect");
        let w = words(sge_words(&["7"], "vm", &down));
        assert!(matches!(&w[0], NoAnswer(m) if m.contains("commlib")));
        assert!(askable(Manager::Slurm) && askable(Manager::Sge) && !askable(Manager::Pbs));
    }
}
