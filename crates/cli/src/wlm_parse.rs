//! What the Slurm Prolog is told about its job, parsed (no I/O here): slurmd's environment for
//! the Prolog and `scontrol show job -d`. (The managers' environments and Grid Engine's spool
//! files are parsed by `pjw-wlm`.)
//!
//! `scontrol show job` prints user-chosen text unquoted: the job name (which may hold spaces,
//! `Key=value` text and newlines), the comment, the paths. No text parser can tell a forged
//! `UserId=root(0)` or a whole forged line from a real one. So the job's identity and CPUs come
//! from what slurmd gives the Prolog ([`prolog_job`]: `SLURM_JOB_UID`, `SLURM_JOB_CPUS_PER_NODE`,
//! the node list), and only the memory from scontrol, read so that forged text can lower the
//! job's own limit but never raise it ([`scontrol_mem`]).

/// A manager's job on this node, as pjw registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WlmJob {
    pub id: String,
    pub user: String,
    /// CPUs the manager gave the job on this node.
    pub cpus: u32,
    /// Memory on this node (bytes), when the manager limits it.
    pub mem: Option<u64>,
    /// The GPUs the manager chose, by its index (`SLURM_JOB_GPUS`); `None`: no GPUs.
    pub gpus: Option<Vec<u32>>,
}

/// `export NAME=VALUE` lines for Slurm's TaskProlog, which slurmstepd reads from its stdout:
/// only names and values of `[A-Za-z0-9_,.:-]` (GPU lists, `PCI_BUS_ID`), so nothing the daemon
/// sends can smuggle another line or a shell word; anything else is left out.
pub fn task_prolog_exports(vars: &[(String, String)]) -> String {
    let safe = |s: &str, extra: &str| {
        !s.is_empty()
            && s.len() <= 4096
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(c))
    };
    vars.iter()
        .filter(|(k, v)| safe(k, "") && safe(v, ",.:-"))
        .map(|(k, v)| format!("export {k}={v}\n"))
        .collect()
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

/// The parts of a Slurm host list, split at commas outside brackets (`n[1-2,5],x` →
/// `n[1-2,5]`, `x`).
fn hostlist_parts(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
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
    parts
}

/// Whether Slurm host list `list` (`vm`, `n[1-4,7]`, `a,b`) names `node`.
pub fn hostlist_contains(list: &str, node: &str) -> bool {
    let parts = hostlist_parts(list);
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

/// The position of `node` in Slurm host list `list`, expanded in order (`n[1-3],x` → n1, n2,
/// n3, x). None when it is not there or the list is malformed or longer than 100,000 names.
pub fn hostlist_index(list: &str, node: &str) -> Option<usize> {
    let parts = hostlist_parts(list);
    let mut index = 0usize;
    for p in parts {
        let Some((prefix, rest)) = p.split_once('[') else {
            if p == node {
                return Some(index);
            }
            index += 1;
            continue;
        };
        let ranges = rest.strip_suffix(']')?;
        for r in ranges.split(',') {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let (a, b) = (lo.parse::<u64>().ok()?, hi.parse::<u64>().ok()?);
            if b < a || b - a > 100_000 || index > 100_000 {
                return None;
            }
            for n in a..=b {
                let name = format!("{prefix}{n:0width$}", width = lo.len());
                if name == node {
                    return Some(index);
                }
                index += 1;
            }
        }
    }
    None
}

/// This node's CPU count from `SLURM_JOB_CPUS_PER_NODE` (`4(x2),2`: counts in node-list order,
/// `(xN)` repeating one N times) and the job's node list.
pub fn cpus_on_node(per_node: &str, nodelist: &str, node: &str) -> Result<u32, String> {
    let at = hostlist_index(nodelist, node)
        .ok_or_else(|| format!("node {node:?} is not in the job's node list {nodelist:?}"))?;
    let mut seen = 0usize;
    for part in per_node.split(',') {
        let (n, times) = match part.split_once("(x") {
            Some((n, t)) => (n, t.strip_suffix(')').unwrap_or("")),
            None => (part, "1"),
        };
        let n: u32 = n
            .parse()
            .map_err(|_| format!("SLURM_JOB_CPUS_PER_NODE {per_node:?}: not N or N(xM),…"))?;
        let times: usize = times
            .parse()
            .map_err(|_| format!("SLURM_JOB_CPUS_PER_NODE {per_node:?}: not N or N(xM),…"))?;
        if at < seen.saturating_add(times) {
            return (n > 0)
                .then_some(n)
                .ok_or_else(|| "no CPUs on this node".to_string());
        }
        seen = seen.saturating_add(times);
    }
    Err(format!(
        "SLURM_JOB_CPUS_PER_NODE {per_node:?} has no count for node {node} (#{at})"
    ))
}

/// The job's memory on node `node` (bytes) from `scontrol show job -d`, for a job with `cpus`
/// CPUs here: the `Mem=` of this node's detail line (`     Nodes=… CPU_IDs=… Mem=… GRES=`),
/// `MinMemoryNode` or `MinMemoryCPU` × `cpus` (slurmd's answer holds the detail line and one
/// of the two others, and they agree). User text can forge any of these (a job name, with or
/// without newlines), but not remove the real one slurmd's answer holds: the smallest of every
/// candidate of every kind is taken — never one kind in preference to another, or a forged
/// `MinMemoryNode=4G` in a job name would outrank the real `MinMemoryCPU=1G` (found by the
/// scontrol fuzz target) — so forged text can only lower the job's own limit. None when
/// scontrol names no memory.
pub fn scontrol_mem(text: &str, node: &str, cpus: u32) -> Option<u64> {
    let mut detail: Option<u64> = None;
    let mut per_node: Option<u64> = None;
    let mut per_cpu: Option<u64> = None;
    let min = |slot: &mut Option<u64>, v: Option<u64>| {
        if let Some(v) = v {
            *slot = Some(slot.map_or(v, |s| s.min(v)));
        }
    };
    for line in text.lines() {
        let t = tokens(line);
        if let Some((_, list)) = t.first().filter(|(k, _)| *k == "Nodes") {
            if t.iter().any(|(k, _)| *k == "CPU_IDs") && hostlist_contains(list, node) {
                // The smallest of the line's `Mem=`s, not the first: text a user wrote on the
                // line (a job name) can only come before the real one (fuzz seed
                // regress-name-mem-on-detail-line).
                for (_, v) in t.iter().filter(|(k, _)| *k == "Mem") {
                    min(&mut detail, slurm_mem(v));
                }
            }
        }
        for (k, v) in &t {
            match *k {
                "MinMemoryNode" => min(&mut per_node, slurm_mem(v)),
                // Both numbers are the job's: saturate rather than overflow.
                "MinMemoryCPU" => min(
                    &mut per_cpu,
                    slurm_mem(v).map(|m| m.saturating_mul(cpus as u64)),
                ),
                _ => {}
            }
        }
    }
    [detail, per_node, per_cpu].into_iter().flatten().min()
}

/// Longest job name taken from a manager (characters); the daemon bounds names again.
pub const MAX_JOB_NAME: usize = 128;

/// The job's name for pjw: Slurm's own (`SLURM_JOB_NAME` where slurmd sets it for the Prolog,
/// else the `JobName=` of `scontrol show job`), bounded to [`MAX_JOB_NAME`] characters with
/// control characters escaped (`pjw_core::text::printable`). scontrol prints the name unquoted
/// as the last field of its first line (`JobId=N [ArrayJobId=… ArrayTaskId=…] JobName=NAME`):
/// the name is the rest of that line, so one holding a newline is cut there — it is shown, never
/// believed, so a forged line after it only shortens it. None: no name, or an empty one.
pub fn slurm_job_name(env_name: Option<&str>, scontrol: &str) -> Option<String> {
    let raw = match env_name.filter(|n| !n.is_empty()) {
        Some(n) => n,
        None => {
            let first = scontrol.lines().next()?;
            let at = first.find("JobName=")?;
            first[at + "JobName=".len()..].trim_end_matches('\r')
        }
    };
    job_name(raw)
}

/// A manager's name for a job as pjw registers it: bounded to [`MAX_JOB_NAME`] characters,
/// control characters escaped; None when empty.
pub fn job_name(raw: &str) -> Option<String> {
    (!raw.trim().is_empty()).then(|| pjw_core::text::printable(raw, MAX_JOB_NAME).into_owned())
}

/// What slurmd tells the Prolog about its job, from the Prolog's environment (slurmd sets it;
/// the job's user has no say in it): id `SLURM_JOB_ID`, owner `SLURM_JOB_UID` (named through
/// `user_of`, and `SLURM_JOB_USER` must agree), CPUs on this node from
/// `SLURM_JOB_CPUS_PER_NODE` and `SLURM_JOB_NODELIST`/`SLURM_NODELIST`. The memory is filled in
/// from scontrol by the caller.
pub fn prolog_job(
    env: &dyn Fn(&str) -> Option<String>,
    node: &str,
    user_of: &dyn Fn(u32) -> Option<String>,
) -> Result<WlmJob, String> {
    let need = |k: &str| {
        env(k)
            .filter(|v| !v.is_empty())
            .ok_or(format!("{k} is not set (not run by slurmd?)"))
    };
    let id = need("SLURM_JOB_ID")?;
    pjw_core::JobId::new(&id).map_err(|e| e.to_string())?;
    if id.contains(':') {
        return Err(format!("SLURM_JOB_ID {id:?} is not a Slurm job id"));
    }
    let uid_text = need("SLURM_JOB_UID")?;
    let uid: u32 = uid_text
        .parse()
        .map_err(|_| format!("SLURM_JOB_UID {uid_text:?} is not a uid"))?;
    let user = user_of(uid).ok_or_else(|| format!("no user with uid {uid} on this node"))?;
    if let Some(named) = env("SLURM_JOB_USER").filter(|v| !v.is_empty()) {
        if named != user {
            return Err(format!(
                "SLURM_JOB_USER {named:?} is not the user of SLURM_JOB_UID {uid} ({user})"
            ));
        }
    }
    let per_node = need("SLURM_JOB_CPUS_PER_NODE")?;
    let nodelist = env("SLURM_JOB_NODELIST")
        .or_else(|| env("SLURM_NODELIST"))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| node.to_string());
    let cpus = cpus_on_node(&per_node, &nodelist, node)?;
    // The GPUs slurmd's gres plugin chose: their gres index (position among the node's
    // gres.conf devices). Checked here for form; the daemon checks them against the node.
    let gpus = env("SLURM_JOB_GPUS")
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            pjw_wlm::parse_gpu_list(pjw_wlm::Manager::Slurm, "SLURM_JOB_GPUS", v.trim())
                .map_err(|e| e.to_string())
        })
        .transpose()?;
    Ok(WlmJob {
        id,
        user,
        cpus,
        mem: None,
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_job_names_come_from_slurm_bounded_and_escaped() {
        let long = "n".repeat(300);
        let cut = format!("{}…", "n".repeat(MAX_JOB_NAME));
        let array = "JobId=124 ArrayJobId=123 ArrayTaskId=1 JobName=sweep 1\n   UserId=a(1)\n";
        // (SLURM_JOB_NAME, scontrol's text, name)
        let table: Vec<(Option<&str>, String, Option<String>)> = vec![
            (None, ONE_NODE.into(), Some("wrap".into())),
            (None, array.into(), Some("sweep 1".into())),
            (Some("from-env"), ONE_NODE.into(), Some("from-env".into())),
            (Some(""), ONE_NODE.into(), Some("wrap".into())),
            // A name with a newline is cut there; forged lines after it are not the name.
            (None, FORGED.into(), Some("a".into())),
            (None, format!("JobId=9 JobName={long}\n"), Some(cut.clone())),
            (Some(long.as_str()), String::new(), Some(cut)),
            (
                None,
                "JobId=9 JobName=a\x1b[2Jb\n".into(),
                Some("a\\u{1b}[2Jb".into()),
            ),
            (None, "JobId=9 JobName=\n   UserId=a(1)\n".into(), None),
            (None, String::new(), None),
            (
                None,
                "slurm_load_jobs error: Invalid job id specified\n".into(),
                None,
            ),
        ];
        for (env, text, want) in table {
            assert_eq!(slurm_job_name(env, &text), want, "{env:?} {text:?}");
        }
    }

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

    /// The job name of issue 12 (`x UserId=root(0) NumCPUs=2`), and one with newlines that
    /// forges whole lines, as scontrol 22.05 prints them (checked on the live Slurm).
    const FORGED: &str = "JobId=2 JobName=a
   NumNodes=1 NumCPUs=2 MinMemoryNode=64G
     Nodes=vm CPU_IDs=0-1 Mem=99999 GRES=
   UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=vm CPU_IDs=0 Mem=100 GRES=
   MinCPUsNode=1 MinMemoryCPU=100M MinTmpDiskNode=0
   Comment=c
     Nodes=vm CPU_IDs=0-1 Mem=99999 GRES=
";

    #[test]
    fn huge_numbers_in_the_job_s_text_saturate_instead_of_overflowing() {
        // Both are the job's numbers (fuzz seed attack-mem-overflow).
        let text = "JobId=2 MinMemoryCPU=17179869184T\n";
        assert_eq!(scontrol_mem(text, "vm", u32::MAX), Some(u64::MAX));
        assert!(cpus_on_node("1(x18446744073709551615),2", "vm", "vm").is_ok());
    }

    #[test]
    fn scontrol_memory_cannot_be_raised_by_user_text() {
        assert_eq!(scontrol_mem(ONE_NODE, "vm", 1), Some(1 << 30));
        assert_eq!(scontrol_mem(TWO_NODES, "n02", 2), Some(2048 << 20));
        assert_eq!(scontrol_mem(TWO_NODES, "n03", 4), Some(4096 << 20));
        assert_eq!(scontrol_mem(TWO_NODES, "x9", 3), Some(4 << 30));
        assert_eq!(
            scontrol_mem("JobId=5 NumCPUs=2 MinMemoryCPU=512M", "vm", 2),
            Some(1 << 30)
        );
        assert_eq!(scontrol_mem("JobId=5 NumCPUs=2", "vm", 2), None);
        assert_eq!(
            scontrol_mem(FORGED, "vm", 1),
            Some(100 << 20),
            "the real line's 100 MiB"
        );
        let named = "JobId=1 JobName=x UserId=root(0) NumCPUs=2 MinMemoryNode=1T\n   UserId=nobody(65534)\n     Nodes=vm CPU_IDs=0 Mem=100 GRES=\n";
        assert_eq!(scontrol_mem(named, "vm", 1), Some(100 << 20));
        // A job name cannot make one kind outrank another: the real MinMemoryCPU stands.
        let other_kind = "JobId=1 JobName=x MinMemoryNode=4G\n   NumCPUs=1 MinMemoryCPU=1G\n";
        assert_eq!(scontrol_mem(other_kind, "vm", 1), Some(1 << 30));
        assert_eq!(scontrol_mem(other_kind, "vm", 8), Some(4 << 30));
        // A name on a node's detail line, holding a detail of its own before the real one.
        let on_detail = "JobId=1\n   Nodes=n03 CPU_IDs=0-3 JobName=x Nodes=n03 CPU_IDs=0-63 Mem=1T y CPU_IDs=0-1 Mem=2048\n";
        assert_eq!(scontrol_mem(on_detail, "n03", 4), Some(2048 << 20));
    }

    #[test]
    fn prolog_identity_is_slurmd_s() {
        let users = |uid: u32| match uid {
            0 => Some("root".to_string()),
            65534 => Some("nobody".to_string()),
            _ => None,
        };
        let env_of = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let base: &[(&str, &str)] = &[
            ("SLURM_JOB_ID", "2"),
            ("SLURM_JOB_UID", "65534"),
            ("SLURM_JOB_USER", "nobody"),
            ("SLURM_JOB_CPUS_PER_NODE", "1"),
            ("SLURM_NODELIST", "vm"),
        ];
        let j = prolog_job(&env_of(base), "vm", &users).unwrap();
        assert_eq!((j.id.as_str(), j.user.as_str(), j.cpus), ("2", "nobody", 1));
        assert_eq!(j.gpus, None);
        let gpu: &[(&str, &str)] = &[
            ("SLURM_JOB_ID", "3"),
            ("SLURM_JOB_UID", "0"),
            ("SLURM_JOB_CPUS_PER_NODE", "2"),
            ("SLURM_JOB_GPUS", "2,0"),
        ];
        assert_eq!(
            prolog_job(&env_of(gpu), "vm", &users).unwrap().gpus,
            Some(vec![2, 0])
        );
        let multi: &[(&str, &str)] = &[
            ("SLURM_JOB_ID", "77"),
            ("SLURM_JOB_UID", "0"),
            ("SLURM_JOB_CPUS_PER_NODE", "4(x2),2"),
            ("SLURM_JOB_NODELIST", "n[01-02],n03"),
        ];
        assert_eq!(prolog_job(&env_of(multi), "n02", &users).unwrap().cpus, 4);
        assert_eq!(prolog_job(&env_of(multi), "n03", &users).unwrap().cpus, 2);
        assert!(prolog_job(&env_of(multi), "n04", &users).is_err());
        for (bad, why) in [
            (
                &[
                    ("SLURM_JOB_ID", "2"),
                    ("SLURM_JOB_UID", "65534"),
                    ("SLURM_JOB_USER", "root"),
                    ("SLURM_JOB_CPUS_PER_NODE", "1"),
                ][..],
                "is not the user",
            ),
            (
                &[
                    ("SLURM_JOB_ID", "2\nforged"),
                    ("SLURM_JOB_UID", "0"),
                    ("SLURM_JOB_CPUS_PER_NODE", "1"),
                ][..],
                "letters, digits",
            ),
            (
                &[("SLURM_JOB_ID", "2"), ("SLURM_JOB_CPUS_PER_NODE", "1")][..],
                "SLURM_JOB_UID is not set",
            ),
            (
                &[
                    ("SLURM_JOB_ID", "2"),
                    ("SLURM_JOB_UID", "7"),
                    ("SLURM_JOB_CPUS_PER_NODE", "1"),
                ][..],
                "no user with uid 7",
            ),
            (
                &[
                    ("SLURM_JOB_ID", "2"),
                    ("SLURM_JOB_UID", "0"),
                    ("SLURM_JOB_CPUS_PER_NODE", "1"),
                    ("SLURM_JOB_GPUS", "0,GPU-1234"),
                ][..],
                "SLURM_JOB_GPUS = \"0,GPU-1234\": names a GPU by UUID",
            ),
        ] {
            let e = prolog_job(&env_of(bad), "vm", &users).unwrap_err();
            assert!(e.contains(why), "{e:?} should say {why:?}");
        }
    }

    #[test]
    fn task_prolog_exports_only_plain_names_and_lists() {
        let v = |k: &str, x: &str| (k.to_string(), x.to_string());
        let out = task_prolog_exports(&[
            v("CUDA_VISIBLE_DEVICES", "0"),
            v("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            v("PJW_GPUS", "1,3"),
            v("X", "0\nexport LD_PRELOAD=/tmp/x.so"),
            v("BAD NAME", "0"),
            v("Y", "$(id)"),
            v("Z", ""),
        ]);
        assert_eq!(
            out,
            "export CUDA_VISIBLE_DEVICES=0\nexport CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport PJW_GPUS=1,3\n"
        );
    }

    #[test]
    fn hostlist_positions() {
        for (list, node, want) in [
            ("vm", "vm", Some(0)),
            ("a,b,c", "c", Some(2)),
            ("n[1-4,7],x", "n7", Some(4)),
            ("n[1-4,7],x", "x", Some(5)),
            ("n[01-10]", "n05", Some(4)),
            ("n[01-10]", "n5", None),
            ("n[1-", "n1", None),
        ] {
            assert_eq!(hostlist_index(list, node), want, "{node} in {list}");
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
