//! The Slurm Prolog's parsers of `scontrol show job -d` (crates/cli/src/wlm_parse.rs, included
//! as it is: it lives in the binary crate). The job name, comment and similar fields in that
//! text are the job's user's.
//!
//! Input: `TEXT 0x1E NODE 0x1E NAME` (see `common::parts`).
//!
//! Properties:
//! - nothing panics (overflow checks on);
//! - `hostlist_contains(list, node)`: a bare list names exactly itself; a list holds each of its
//!   comma-separated plain names;
//! - `parse_scontrol`: `Ok` only with a non-empty id and user without white space, and ≥ 1 CPU;
//! - **a job name cannot steer it** (issue 12, item 2): with NAME (newline-free, as `sbatch -J`
//!   takes it) put at the front of the `JobName=` value, the result is the same job — or an
//!   error, never another owner, more CPUs or more memory.
#![no_main]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../crates/cli/src/wlm_parse.rs"]
mod wlm_parse;

use libfuzzer_sys::fuzz_target;
use wlm_parse::{hostlist_contains, parse_scontrol};

fuzz_target!(|data: &[u8]| {
    let p = common::parts(data, 3);
    let text = p[0].as_deref().unwrap_or("");
    let node = p[1].as_deref().unwrap_or("vm");
    let name = p[2].as_deref().unwrap_or("");

    // Host lists: the text's words and the node.
    for w in text.split_whitespace().take(64) {
        let list = w.split_once('=').map_or(w, |(_, v)| v);
        let _ = hostlist_contains(list, node);
        if !list.contains(['[', ']', ',']) {
            assert!(
                hostlist_contains(list, list),
                "{list:?} does not hold itself"
            );
        }
    }
    if !node.contains(['[', ']', ',']) && !node.is_empty() {
        assert!(hostlist_contains(&format!("a,{node},b"), node));
    }

    let plain = parse_scontrol(text, node);
    if let Ok(job) = &plain {
        assert!(!job.id.is_empty() && !job.id.contains(char::is_whitespace));
        assert!(!job.user.is_empty() && !job.user.contains(char::is_whitespace));
        assert!(job.cpus >= 1);
    }

    // The same text with a hostile job name.
    let name: String = name.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    if name.is_empty() {
        return;
    }
    let Some(at) = text.find("JobName=") else {
        return;
    };
    let at = at + "JobName=".len();
    let forged = format!("{}{name}{}", &text[..at], &text[at..]);
    if let (Ok(real), Ok(got)) = (&plain, parse_scontrol(&forged, node)) {
        assert_eq!(got.id, real.id, "a job name changed the job id");
        assert_eq!(got.user, real.user, "a job name changed the owner");
        assert!(got.cpus <= real.cpus, "a job name gave more CPUs");
        assert!(
            got.mem.unwrap_or(u64::MAX) <= real.mem.unwrap_or(u64::MAX),
            "a job name gave more memory"
        );
    }
});
