//! The Slurm Prolog's parsers (crates/cli/src/wlm_parse.rs, included as it is: it lives in the
//! binary crate): the job's identity and CPUs from slurmd's environment (`prolog_job`,
//! `cpus_on_node`, host lists) and its memory from `scontrol show job -d`, whose job name,
//! comment and paths are the job's user's.
//!
//! Input: `TEXT 0x1E NODE 0x1E NAME` (see `common::parts`); TEXT is also read as an
//! environment, one `KEY=VALUE` per line.
//!
//! Properties:
//! - nothing panics (overflow checks on);
//! - `hostlist_contains(list, node)`: a bare list names exactly itself; a list holds each of its
//!   comma-separated plain names; `hostlist_index` finds only names the list holds;
//! - `cpus_on_node` and `prolog_job`: `Ok` only with ≥ 1 CPU, a valid job id without a
//!   namespace, and the owner of `SLURM_JOB_UID`;
//! - **a job name cannot raise the memory** (issue 12, item 2): with NAME (newline-free, as
//!   `sbatch -J` takes it) put at the front of the `JobName=` value, `scontrol_mem` gives at
//!   most what it gave without it.
#![no_main]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../crates/cli/src/wlm_parse.rs"]
mod wlm_parse;

use libfuzzer_sys::fuzz_target;
use wlm_parse::{cpus_on_node, hostlist_contains, hostlist_index, prolog_job, scontrol_mem};

fuzz_target!(|data: &[u8]| {
    let p = common::parts(data, 3);
    let text = p[0].as_deref().unwrap_or("");
    let node = p[1].as_deref().unwrap_or("vm");
    let name = p[2].as_deref().unwrap_or("");

    // Host lists: the text's words and the node.
    for w in text.split_whitespace().take(64) {
        let list = w.split_once('=').map_or(w, |(_, v)| v);
        let _ = hostlist_contains(list, node);
        if hostlist_index(list, node).is_some() {
            assert!(hostlist_contains(list, node), "{list:?} indexes {node:?} but does not hold it");
        }
        if !list.contains(['[', ']', ',']) {
            assert!(hostlist_contains(list, list), "{list:?} does not hold itself");
        }
        let _ = cpus_on_node(list, list, node);
    }
    if !node.contains(['[', ']', ',']) && !node.is_empty() {
        assert!(hostlist_contains(&format!("a,{node},b"), node));
    }

    // The Prolog's identity from an environment.
    let env = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    let user_of = |uid: u32| Some(format!("u{uid}"));
    if let Ok(job) = prolog_job(&env, node, &user_of) {
        assert!(job.cpus >= 1);
        assert!(pjw_core::JobId::new(&job.id).is_ok() && !job.id.contains(':'), "{:?}", job.id);
        let uid: u32 = env("SLURM_JOB_UID").unwrap().parse().unwrap();
        assert_eq!(job.user, format!("u{uid}"));
    }

    // Memory, and a hostile job name.
    for cpus in [1u32, 64, u32::MAX] {
        let plain = scontrol_mem(text, node, cpus);
        let name: String = name.chars().filter(|c| *c != '\n' && *c != '\r').collect();
        if name.is_empty() {
            continue;
        }
        let Some(at) = text.find("JobName=") else {
            continue;
        };
        let at = at + "JobName=".len();
        let forged = format!("{}{name}{}", &text[..at], &text[at..]);
        let got = scontrol_mem(&forged, node, cpus);
        assert!(
            got.unwrap_or(u64::MAX) <= plain.unwrap_or(u64::MAX),
            "a job name raised the memory: {got:?} > {plain:?}"
        );
    }
});
