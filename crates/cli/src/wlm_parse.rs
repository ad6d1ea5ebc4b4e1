//! What the Slurm Prolog is told about its job, parsed (no I/O here): `scontrol show job -d`.
//! (The managers' environments and Grid Engine's spool files are parsed by `pjw-wlm`.)

use pjw_core::CpuSet;

/// A manager's job on this node, as pjw registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WlmJob {
    pub id: String,
    pub user: String,
    /// CPUs the manager gave the job on this node.
    pub cpus: u32,
    /// Memory on this node (bytes), when the manager limits it.
    pub mem: Option<u64>,
}

/// `key=value` tokens of `scontrol show job` output, in order (values keep their own `=`).
fn tokens(text: &str) -> Vec<(&str, &str)> {
    text.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .collect()
}

/// A Slurm size: a number with an optional K/M/G/T suffix, in MiB when bare (`1024`, `1G`).
fn slurm_mem(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1u64 << 10),
        'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
        'G' | 'g' => (&v[..v.len() - 1], 1 << 30),
        'T' | 't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1 << 20),
    };
    let n: f64 = num.parse().ok()?;
    (n > 0.0).then_some((n * mult as f64) as u64)
}

/// Whether Slurm host list `list` (`vm`, `n[1-4,7]`, `a,b`) names `node`.
pub fn hostlist_contains(list: &str, node: &str) -> bool {
    // Split at commas outside brackets.
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.iter().any(|p| {
        let Some((prefix, rest)) = p.split_once('[') else {
            return *p == node;
        };
        let Some(ranges) = rest.strip_suffix(']') else {
            return false;
        };
        let Some(num) = node.strip_prefix(prefix) else {
            return false;
        };
        ranges.split(',').any(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            // Zero-padded ranges (n[01-10]) name nodes with that width.
            if lo.len() > 1 && lo.starts_with('0') && num.len() != lo.len() {
                return false;
            }
            match (lo.parse::<u64>(), hi.parse::<u64>(), num.parse::<u64>()) {
                (Ok(lo), Ok(hi), Ok(n)) => lo <= n && n <= hi,
                _ => false,
            }
        })
    })
}

/// Parse `scontrol show job -d ID` for the job's share of node `node`: CPUs from the detail
/// line of this node (`Nodes=… CPU_IDs=… Mem=…`) when the job spans several nodes, else
/// `NumCPUs`; memory from that line's `Mem=` (MiB), else `MinMemoryNode`, else
/// `MinMemoryCPU` × CPUs. The user is the name in `UserId=name(uid)`.
pub fn parse_scontrol(text: &str, node: &str) -> Result<WlmJob, String> {
    let all = tokens(text);
    let first = |k: &str| all.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let id = first("JobId").ok_or("no JobId in scontrol output")?;
    let user = first("UserId")
        .map(|u| u.split('(').next().unwrap_or(u))
        .filter(|u| !u.is_empty())
        .ok_or("no UserId in scontrol output")?;
    let num = |k: &str| first(k).and_then(|v| v.parse::<u32>().ok());
    let nodes = num("NumNodes").unwrap_or(1).max(1);
    // Detail lines: each starts with Nodes= and carries CPU_IDs= and Mem=.
    let mut detail: Option<(Option<u32>, Option<u64>)> = None;
    let mut n_detail = 0;
    for line in text.lines() {
        let t = tokens(line);
        let Some((_, list)) = t.first().filter(|(k, _)| *k == "Nodes") else {
            continue;
        };
        if !t.iter().any(|(k, _)| *k == "CPU_IDs") {
            continue;
        }
        n_detail += 1;
        if detail.is_some() || !hostlist_contains(list, node) {
            continue;
        }
        let get = |k: &str| t.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let cpus = get("CPU_IDs")
            .and_then(|v| CpuSet::parse_list(v).ok())
            .map(|s| s.len() as u32);
        let mem = get("Mem").and_then(slurm_mem);
        detail = Some((cpus, mem));
    }
    let (d_cpus, d_mem) = detail.unwrap_or((None, None));
    let cpus = if nodes == 1 && n_detail <= 1 {
        num("NumCPUs").or(d_cpus)
    } else {
        d_cpus.or_else(|| num("NumCPUs").map(|c| c.div_ceil(nodes)))
    }
    .filter(|c| *c > 0)
    .ok_or_else(|| format!("no CPU count for node {node} in scontrol output"))?;
    let mem = d_mem
        .or_else(|| first("MinMemoryNode").and_then(slurm_mem))
        .or_else(|| {
            first("MinMemoryCPU")
                .and_then(slurm_mem)
                .map(|m| m * cpus as u64)
        });
    Ok(WlmJob {
        id: id.to_string(),
        user: user.to_string(),
        cpus,
        mem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scontrol show job -d 2` of Slurm 22.05 on the test machine (one node, `sbatch -n1`).
    const ONE_NODE: &str = "JobId=2 JobName=wrap
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=CONFIGURING Reason=None Dependency=(null)
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,mem=1G,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=(null)
     Nodes=vm CPU_IDs=0 Mem=1024 GRES=
   MinCPUsNode=1 MinMemoryCPU=1G MinTmpDiskNode=0
   Command=(null)
   WorkDir=/tmp
";

    const TWO_NODES: &str = "JobId=77 JobName=mpi
   UserId=bob(1001) GroupId=bob(1001) MCS_label=N/A
   NumNodes=2 NumCPUs=6 NumTasks=6 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=n[01-02] CPU_IDs=0-1 Mem=2048 GRES=
     Nodes=n03 CPU_IDs=0-3 Mem=4096 GRES=
   MinCPUsNode=1 MinMemoryNode=4G MinTmpDiskNode=0
";

    /// (scontrol output, node, Ok((id, user, cpus, mem)) or Err(part of the message))
    type Case<'a> = (
        &'a str,
        &'a str,
        Result<(&'a str, &'a str, u32, Option<u64>), &'a str>,
    );

    #[test]
    fn scontrol_table() {
        let cases: &[Case<'_>] = &[
            (ONE_NODE, "vm", Ok(("2", "alice", 1, Some(1 << 30)))),
            (TWO_NODES, "n02", Ok(("77", "bob", 2, Some(2048 << 20)))),
            (TWO_NODES, "n03", Ok(("77", "bob", 4, Some(4096 << 20)))),
            // a node the job has no detail line for: share of NumCPUs, MinMemoryNode
            (TWO_NODES, "x9", Ok(("77", "bob", 3, Some(4 << 30)))),
            (
                "JobId=5 UserId=root(0) NumNodes=1 NumCPUs=2 MinMemoryCPU=512M",
                "vm",
                Ok(("5", "root", 2, Some(1 << 30))),
            ),
            (
                "JobId=5 UserId=root(0) NumCPUs=2",
                "vm",
                Ok(("5", "root", 2, None)),
            ),
            ("", "vm", Err("no JobId")),
            ("JobId=5 NumCPUs=1", "vm", Err("no UserId")),
            (
                "JobId=5 UserId=root(0) NumCPUs=0",
                "vm",
                Err("no CPU count"),
            ),
            (
                "slurm_load_jobs error: Invalid job id specified",
                "vm",
                Err("no JobId"),
            ),
        ];
        for (text, node, want) in cases {
            let got = parse_scontrol(text, node);
            match want {
                Ok((id, user, cpus, mem)) => {
                    let j = got.unwrap_or_else(|e| panic!("{node}: {e}"));
                    assert_eq!(
                        (j.id.as_str(), j.user.as_str(), j.cpus, j.mem),
                        (*id, *user, *cpus, *mem),
                        "{node} in {text:?}"
                    );
                }
                Err(w) => {
                    let e = got.unwrap_err();
                    assert!(e.contains(w), "{e:?} should say {w:?}");
                }
            }
        }
    }

    #[test]
    fn hostlists() {
        for (list, node, want) in [
            ("vm", "vm", true),
            ("vm", "vm2", false),
            ("a,b,c", "b", true),
            ("n[1-4,7]", "n3", true),
            ("n[1-4,7]", "n7", true),
            ("n[1-4,7]", "n5", false),
            ("n[01-10]", "n05", true),
            ("n[01-10]", "n5", false),
            ("gpu[1-2],cpu[3-4]", "cpu4", true),
            ("n[1-", "n1", false),
        ] {
            assert_eq!(hostlist_contains(list, node), want, "{node} in {list}");
        }
    }
}
