//! The Slurm Prolog's parsers (crates/cli/src/wlm_parse.rs, included as it is: it lives in the
//! binary crate): the job's identity and CPUs from slurmd's environment (`prolog_job`,
//! `cpus_on_node`, host lists) and its memory from squeue's numbers (`parse_squeue_mem`,
//! `node_mem`). (The target keeps its old name: it began with `scontrol show job -d`, whose
//! user text the Prolog no longer reads for memory — issue 25, item 2.)
//!
//! Input: `TEXT 0x1E NODE 0x1E NAME` (see `common::parts`); TEXT is also read as an
//! environment, one `KEY=VALUE` per line.
//!
//! Properties:
//! - nothing panics (overflow checks on);
//! - `hostlist_index(list, node)`: a bare list names exactly itself, at 0; a list holds each of
//!   its comma-separated plain names, at their place;
//! - `cpus_on_node` and `prolog_job`: `Ok` only with ≥ 1 CPU, a valid job id without a
//!   namespace, and the owner of `SLURM_JOB_UID`;
//! - **numbers are checked after conversion** (issue 25, item 2): whatever squeue's line holds,
//!   `node_mem` gives None or a whole number of MiB of at least 1 MiB — never 0 bytes (which
//!   the daemon refuses, failing the Prolog and draining the node), never a fraction.
#![no_main]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../crates/cli/src/wlm_parse.rs"]
mod wlm_parse;

use libfuzzer_sys::fuzz_target;
use wlm_parse::{cpus_on_node, hostlist_index, node_mem, parse_squeue_mem, prolog_job, SqueueJob};

fuzz_target!(|data: &[u8]| {
    let p = common::parts(data, 3);
    let text = p[0].as_deref().unwrap_or("");
    let node = p[1].as_deref().unwrap_or("vm");
    let name = p[2].as_deref().unwrap_or("");

    // Host lists: the text's words and the node.
    for w in text.split_whitespace().take(64) {
        let list = w.split_once('=').map_or(w, |(_, v)| v);
        if !list.contains(['[', ']', ',']) {
            assert_eq!(hostlist_index(list, list), Some(0), "{list:?} does not hold itself");
        }
        let _ = cpus_on_node(list, list, node);
    }
    if !node.contains(['[', ']', ',']) && !node.is_empty() && node != "a" {
        assert_eq!(hostlist_index(&format!("a,{node},b"), node), Some(1));
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

    // Memory from squeue's line (the text, and the text with NAME appended to each field).
    // Asked for the job its first field names, plainly and as an array task.
    for line in [text.to_string(), text.replace('|', &format!("{name}|"))] {
        let first = line.split('|').next().unwrap_or("");
        let jobs = [
            SqueueJob {
                id: first,
                array: None,
            },
            SqueueJob {
                id: "1",
                array: first.split_once('_'),
            },
        ];
        for job in &jobs {
            if let Ok(q) = parse_squeue_mem(&line, job) {
                for cpus in [1u32, 64, u32::MAX] {
                    if let Ok(Some(b)) = node_mem(&q, cpus) {
                        assert!(b >= 1 << 20 && b % (1 << 20) == 0, "{b} bytes from {line:?}");
                    }
                }
            }
        }
    }
});
