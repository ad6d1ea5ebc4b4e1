//! What the Slurm Prolog is told about its job, parsed (no I/O here): slurmd's environment for
//! the Prolog and `squeue`'s numbers for its memory. (The managers' environments and Grid Engine's spool
//! files are parsed by `pjw-wlm`.)
//!
//! `scontrol show job` prints user-chosen text unquoted: the job name (which may hold spaces,
//! `Key=value` text and newlines), the comment, the paths. No text parser can tell a forged
//! `UserId=root(0)` or a whole forged line from a real one. So the job's identity and CPUs come
//! from what slurmd gives the Prolog ([`prolog_job`]: `SLURM_JOB_UID`, `SLURM_JOB_CPUS_PER_NODE`,
//! the node list), and the memory, which slurmd does not give, from `squeue` fields that hold
//! numbers Slurm makes and no user text ([`SQUEUE_MEM_FIELDS`], [`node_mem`]): whatever a job's
//! name holds, its real memory is registered.

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

/// The fields the Prolog asks `squeue` for (`squeue --noconvert -h -j ID -O …`): the job's id
/// as squeue prints it (`42`, an array task's `40_2`, a heterogeneous component's `41+1`: `-j`
/// also lists every task of an array and every component of a het job whose base id is ID, so
/// the Prolog's own line is told by it), the job's memory as Slurm holds it (`MinMemory`, per
/// node or per CPU — squeue drops which), its CPUs and nodes in all, and its allocated
/// trackable resources (`cpu=2,mem=1536M,node=1`). Every one of them is a number or a list
/// Slurm makes; none holds text a user wrote.
pub const SQUEUE_MEM_FIELDS: &str = "JobID:0|,MinMemory:0|,NumCPUs:0|,NumNodes:0|,tres-alloc:0|";

/// Which job the Prolog runs for, as squeue names it: slurmd's `SLURM_JOB_ID` (the job's own
/// number) and, for a task of a job array, `SLURM_ARRAY_JOB_ID` and `SLURM_ARRAY_TASK_ID`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqueueJob<'a> {
    pub id: &'a str,
    pub array: Option<(&'a str, &'a str)>,
}

impl SqueueJob<'_> {
    /// Whether squeue's `JobID` text names this job: its number itself; an array task's
    /// `ARRAY_TASK` as slurmd gave them; a het component's `LEADER+OFFSET` whose sum is its
    /// number (Slurm numbers a het job's components from the leader's).
    fn is(&self, shown: &str) -> bool {
        if shown == self.id {
            return true;
        }
        if let Some((a, t)) = self.array {
            return shown.split_once('_') == Some((a, t));
        }
        let num = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse::<u64>().ok())
                .flatten()
        };
        match shown.split_once('+') {
            Some((l, o)) => match (num(l), num(o), num(self.id)) {
                (Some(l), Some(o), Some(id)) => l.checked_add(o) == Some(id),
                _ => false,
            },
            None => false,
        }
    }
}

/// A job's memory as `squeue` prints it ([`SQUEUE_MEM_FIELDS`]), converted and checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SqueueMem {
    /// `MinMemory` in MiB: per node or per CPU; 0 when the job asked for none of either (the
    /// whole node's, `--mem=0`, or per GPU, `--mem-per-gpu`).
    pub min_mib: u64,
    /// CPUs of the job, all nodes together.
    pub cpus: u64,
    /// Nodes of the job.
    pub nodes: u64,
    /// The memory in the job's allocated resources (`mem=` of `tres-alloc`), MiB, all nodes
    /// together; squeue rounds it to two decimals of its unit (`1.50G`). None when not there.
    pub tres_mib: Option<f64>,
}

/// The number of MiB in a Slurm size, checked after conversion: digits with an optional
/// decimal part when `decimals`, then an optional unit of `KMGTP` (MiB when bare, as Slurm
/// prints memory). The result must be finite and a whole number of KiB at least; below 1 MiB
/// only 0 itself is taken (Slurm's memory is counted in MiB: `1e-9`, `0.001K` or `5K` are no
/// size it prints, and once they were a 0-byte limit that drained the node).
fn slurm_mib(text: &str, decimals: bool) -> Result<f64, String> {
    let t = text.trim();
    let bad = |why: &str| format!("{t:?}: {why}");
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        Some(_) => (t, 'M'),
        None => return Err(bad("empty")),
    };
    let per_mib: f64 = match unit {
        'K' => 1.0 / 1024.0,
        'M' => 1.0,
        'G' => 1024.0,
        'T' => 1024.0 * 1024.0,
        'P' => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad("unknown unit (Slurm prints K, M, G, T or P)")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (!decimals && num.contains('.')) {
        return Err(bad("not a number as Slurm prints one"));
    }
    if int.len() + frac.len() > 30 {
        return Err(bad("too many digits"));
    }
    let n: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let mib = n * per_mib;
    // Checked after the conversion: a size is 0 (none) or at least 1 MiB, and fits in bytes.
    if !mib.is_finite() || mib >= (1u64 << 43) as f64 {
        return Err(bad("out of range"));
    }
    if mib != 0.0 && mib < 1.0 {
        return Err(bad("below 1 MiB, which Slurm never gives"));
    }
    Ok(mib)
}

/// Parse what `squeue --noconvert -h -j ID -O` [`SQUEUE_MEM_FIELDS`] printed: lines of five
/// `|`-ended fields, of which exactly one is `job`'s (issue 25, N1: `-j` lists a job array's
/// every task, and a het job's every component, and taking only "one line" failed the Prolog
/// of an array's last task and drained the node). Anything else is an error naming it.
pub fn parse_squeue_mem(text: &str, job: &SqueueJob) -> Result<SqueueMem, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut mine = Vec::new();
    for line in &lines {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        let [shown, min, cpus, nodes, tres, ""] = f[..] else {
            return Err(format!(
                "squeue printed {line:?}, not JobID|MinMemory|NumCPUs|NumNodes|tres-alloc|"
            ));
        };
        if job.is(shown) {
            mine.push([min, cpus, nodes, tres]);
        }
    }
    let [min, cpus, nodes, tres] = match mine[..] {
        [one] => one,
        // `-j ID` always lists ID's own record: a line alone is the job's, however shown.
        [] if lines.len() == 1 => {
            let f: Vec<&str> = lines[0].split('|').map(str::trim).collect();
            [f[1], f[2], f[3], f[4]]
        }
        [] => {
            return Err(format!(
                "squeue printed no line of job {}: {text:?}",
                job.id
            ))
        }
        _ => {
            return Err(format!(
                "squeue printed job {} more than once: {text:?}",
                job.id
            ))
        }
    };
    let count = |what: &str, v: &str| -> Result<u64, String> {
        match v.parse::<u64>() {
            Ok(n) if n >= 1 && v.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(format!("squeue {what} {v:?} is not a count")),
        }
    };
    let min_mib = slurm_mib(min, false).map_err(|e| format!("squeue MinMemory {e}"))?;
    let tres_mib = match tres
        .split(',')
        .filter_map(|kv| kv.strip_prefix("mem="))
        .collect::<Vec<_>>()[..]
    {
        [] => None,
        [m] => Some(slurm_mib(m, true).map_err(|e| format!("squeue tres-alloc mem {e}"))?)
            .filter(|m| *m > 0.0),
        _ => return Err(format!("squeue tres-alloc {tres:?} names mem twice")),
    };
    Ok(SqueueMem {
        min_mib: min_mib as u64,
        cpus: count("NumCPUs", cpus)?,
        nodes: count("NumNodes", nodes)?,
        tres_mib,
    })
}

/// The job's memory on this node (bytes), where it has `cpus_here` CPUs: `MinMemory` per node,
/// or per CPU × `cpus_here` — whichever Slurm meant, told apart by the job's allocated memory
/// (per node: `MinMemory` × nodes; per CPU: × CPUs; the nearer one). Without an allocated
/// memory the per-node reading (the smaller) is taken. A job that asked for neither
/// (`MinMemory` 0: `--mem=0`, `--mem-per-gpu`) gets its allocated memory's share per node.
/// None when Slurm gave the job no memory at all. Nothing here can come from a user's text.
pub fn node_mem(q: &SqueueMem, cpus_here: u32) -> Result<Option<u64>, String> {
    let mib = if q.min_mib == 0 {
        match q.tres_mib {
            None => return Ok(None),
            Some(t) => (t / q.nodes as f64).round().max(1.0) as u64,
        }
    } else {
        let per_node = q.min_mib;
        let per_cpu = q.min_mib.checked_mul(cpus_here as u64);
        let by_node = q.min_mib as f64 * q.nodes as f64;
        let by_cpu = q.min_mib as f64 * q.cpus as f64;
        match (q.tres_mib, per_cpu) {
            (Some(t), Some(pc)) if (by_cpu - t).abs() < (by_node - t).abs() => pc,
            (_, _) => per_node,
        }
    };
    mib.checked_mul(1 << 20)
        .map(Some)
        .ok_or_else(|| format!("{mib} MiB is out of range"))
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
/// from squeue by the caller ([`node_mem`]).
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
mod tests;
