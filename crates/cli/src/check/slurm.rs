//! `pjw check` under Slurm: which path the node's tasks take into their jail (pjw's SPANK plugin
//! before exec, or adoption after it) and the slurm.conf settings that fight pjw. Pure: the
//! texts come from [`super::facts`]; `parse_*` are tested on literal text.

use super::facts::SlurmFacts;
use super::rules::{Line, Status};

/// The file name of pjw's SPANK plugin (`make spank`).
pub const PLUGIN: &str = "pjw_spank.so";

/// One entry of a plugstack.conf: `required|optional PATH [ARGS…]`, or `include GLOB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlugLine {
    Plugin {
        required: bool,
        path: String,
        args: Vec<String>,
    },
    Include(String),
}

/// The entries of a plugstack.conf text (comments and blank lines skipped; a line that is
/// neither is an error naming its number, as Slurm refuses it).
pub fn parse_plugstack(text: &str) -> Result<Vec<PlugLine>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let mut w = l.split_whitespace();
        let first = w.next().unwrap_or("");
        match first {
            "required" | "optional" => {
                let Some(path) = w.next() else {
                    return Err(format!("line {}: no plugin path", n + 1));
                };
                out.push(PlugLine::Plugin {
                    required: first == "required",
                    path: path.to_string(),
                    args: w.map(str::to_string).collect(),
                });
            }
            "include" => match w.next() {
                Some(g) => out.push(PlugLine::Include(g.to_string())),
                None => return Err(format!("line {}: include of nothing", n + 1)),
            },
            _ => {
                return Err(format!(
                    "line {}: {first:?} is not required, optional or include",
                    n + 1
                ))
            }
        }
    }
    Ok(out)
}

/// The value of `key` in a slurm.conf text (keys are case-insensitive; the last one counts).
pub fn conf_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().to_string())
}

/// A pjw plugin entry found in the plugin stack, with what was read about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PjwPlugin {
    /// The plugstack file it is in.
    pub source: String,
    pub required: bool,
    pub path: String,
    pub args: Vec<String>,
    /// Whether the shared object exists.
    pub exists: bool,
}

/// The socket a plugin entry talks to (`socket=`, else the default).
fn plugin_socket(p: &PjwPlugin) -> String {
    p.args
        .iter()
        .find_map(|a| a.strip_prefix("socket="))
        .unwrap_or(pjw_proto::DEFAULT_SOCKET)
        .to_string()
}

/// The Slurm lines of `pjw check`.
pub fn lines(s: &SlurmFacts, hooks_dir: &str) -> Vec<Line> {
    let (path, text) = (&s.conf_path, &s.conf);
    let get = |k: &str| conf_value(text, k).unwrap_or_default();
    let mut out = Vec::new();
    let (prolog, epilog) = (get("Prolog"), get("Epilog"));
    let wired = prolog.contains("pjw") && epilog.contains("pjw");
    // A setting that fights pjw FAILs on a node wired to pjw, WARNs on one that is not (yet).
    let fights = if wired { Status::Fail } else { Status::Warn };
    out.push(if wired {
        Line::ok("wlm-slurm", format!("{path}: Prolog={prolog} Epilog={epilog}"))
    } else {
        Line::new(
            Status::Warn,
            "wlm-slurm",
            format!("{path}: Prolog/Epilog do not run pjw's hooks (Prolog={prolog:?}, Epilog={epilog:?}): Slurm jobs are not jailed"),
            format!("Prolog={hooks_dir}/slurm/pjw-prolog.sh, Epilog={hooks_dir}/slurm/pjw-epilog.sh, PrologFlags=Alloc (packaging/slurm/slurm.conf)"),
        )
    });
    let task = get("TaskPlugin");
    out.push(
        if task.contains("task/cgroup") || task.contains("task/affinity") {
            Line::new(
                fights,
                "slurm-task-plugin",
                format!(
                    "TaskPlugin={task}: Slurm binds tasks to CPUs itself, fighting pjw's cpusets"
                ),
                "TaskPlugin=task/none (packaging/slurm/slurm.conf)",
            )
        } else {
            Line::ok(
                "slurm-task-plugin",
                format!(
                    "TaskPlugin={}",
                    if task.is_empty() {
                        "(default: task/none)"
                    } else {
                        &task
                    }
                ),
            )
        },
    );
    // Slurm 22.05's default ProctrackType is proctrack/cgroup.
    let proctrack = get("ProctrackType");
    let proctrack_shown = if proctrack.is_empty() {
        "(default: proctrack/cgroup)".to_string()
    } else {
        proctrack.clone()
    };
    out.push(if proctrack.is_empty() || proctrack.contains("proctrack/cgroup") {
        Line::new(
            fights,
            "slurm-proctrack",
            format!("ProctrackType={proctrack_shown}: Slurm keeps every task in cgroups of its own, and pjw moving it into the job's takes it out of Slurm's (or Slurm moves it back)"),
            "ProctrackType=proctrack/linuxproc (packaging/slurm/slurm.conf)",
        )
    } else {
        Line::ok("slurm-proctrack", format!("ProctrackType={proctrack_shown}"))
    });
    let gather = get("JobAcctGatherType");
    if gather.contains("jobacct_gather/cgroup") {
        out.push(Line::new(
            fights,
            "slurm-acct-gather",
            format!("JobAcctGatherType={gather}: Slurm moves each task into accounting cgroups of its own (cpuacct, memory), out of the job's pjw memory cgroup"),
            "JobAcctGatherType=jobacct_gather/linux (packaging/slurm/slurm.conf)",
        ));
    }
    let flags = get("PrologFlags").to_ascii_lowercase();
    let alloc = flags
        .split(',')
        .any(|f| matches!(f.trim(), "alloc" | "contain"));
    out.push(if alloc {
        Line::ok("slurm-prolog-flags", format!("PrologFlags={}", get("PrologFlags")))
    } else {
        Line::new(
            Status::Warn,
            "slurm-prolog-flags",
            format!("PrologFlags={:?} has no Alloc: the Prolog runs at a job's first step on the node, so an salloc shell or an ssh session there finds no pjw job", get("PrologFlags")),
            "PrologFlags=Alloc (packaging/slurm/slurm.conf)",
        )
    });
    out.push(spank_line(s, hooks_dir, wired));
    out
}

/// Which path the node's tasks take into their jail.
fn spank_line(s: &SlurmFacts, hooks_dir: &str, wired: bool) -> Line {
    let name = "slurm-tasks";
    let fix_add = format!(
        "add `required {hooks_dir}/slurm/{PLUGIN}` to {} (packaging/slurm/plugstack.conf)",
        s.plugstack_path
    );
    let plugins = match &s.plugstack {
        Err(e) => {
            return Line::new(
                Status::Warn,
                name,
                format!("{}: {e}", s.plugstack_path),
                "fix plugstack.conf: Slurm refuses to start steps with it",
            )
        }
        Ok(p) => p,
    };
    let Some(p) = plugins.first() else {
        return Line::new(
            if wired { Status::Warn } else { Status::Ok },
            name,
            format!("adoption only: no {PLUGIN} in {}: tasks start outside their jail and are moved 10-130 ms after exec (OpenMP and MPI size themselves to the whole node)", s.plugstack_path),
            fix_add,
        );
    };
    if plugins.len() > 1 {
        return Line::new(
            Status::Warn,
            name,
            format!(
                "{PLUGIN} is in the plugin stack {} times ({} and {}): each task would join twice",
                plugins.len(),
                plugins[0].source,
                plugins[1].source
            ),
            "keep one line",
        );
    }
    let mode = if p.required { "required" } else { "optional" };
    if !p.exists {
        return Line::new(
            if p.required { Status::Fail } else { Status::Warn },
            name,
            format!("{} ({mode}, in {}) does not exist: {}", p.path, p.source, if p.required { "Slurm refuses every step" } else { "tasks are adopted after exec" }),
            format!("install it (make install, or the pjw package) or fix the path: {hooks_dir}/slurm/{PLUGIN}"),
        );
    }
    let sock = plugin_socket(p);
    if sock != s.daemon_socket {
        return Line::new(
            if p.required {
                Status::Fail
            } else {
                Status::Warn
            },
            name,
            format!(
                "{} asks the daemon at {sock}, but it listens at {}: {}",
                p.path,
                s.daemon_socket,
                if p.required {
                    "every task fails to join and fails"
                } else {
                    "tasks are adopted after exec"
                }
            ),
            format!("socket={} on the plugstack line", s.daemon_socket),
        );
    }
    let what = if p.required {
        "a task that cannot join fails rather than run unjailed"
    } else {
        "a task that cannot join runs and is adopted after exec"
    };
    Line::ok(
        name,
        format!(
            "SPANK plugin ({mode}, {} in {}): tasks join their pjw job before exec; {what}",
            p.path, p.source
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugstack_text() {
        let text = "# a comment\n\nrequired /usr/lib/pjw/slurm/pjw_spank.so socket=/run/x.sock timeout=5\n  optional  other.so # trailing\ninclude /etc/slurm/plugstack.conf.d/*\n";
        assert_eq!(
            parse_plugstack(text).unwrap(),
            vec![
                PlugLine::Plugin {
                    required: true,
                    path: "/usr/lib/pjw/slurm/pjw_spank.so".into(),
                    args: vec!["socket=/run/x.sock".into(), "timeout=5".into()],
                },
                PlugLine::Plugin {
                    required: false,
                    path: "other.so".into(),
                    args: vec![],
                },
                PlugLine::Include("/etc/slurm/plugstack.conf.d/*".into()),
            ]
        );
        for bad in ["requird x.so", "required", "include"] {
            assert!(parse_plugstack(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slurm_conf_values() {
        let t = "TaskPlugin=task/affinity # c\nprologflags = Alloc,X11\nTaskPlugin=task/none\n";
        assert_eq!(conf_value(t, "PrologFlags").as_deref(), Some("Alloc,X11"));
        assert_eq!(conf_value(t, "TaskPlugin").as_deref(), Some("task/none"));
        assert_eq!(conf_value(t, "Prolog"), None);
    }

    const WIRED: &str = "Prolog=/p/pjw-prolog.sh\nEpilog=/p/pjw-epilog.sh\nPrologFlags=Alloc\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n";

    fn facts(conf: &str, plugins: Vec<PjwPlugin>) -> SlurmFacts {
        SlurmFacts {
            conf_path: "/etc/slurm/slurm.conf".into(),
            conf: conf.into(),
            plugstack_path: "/etc/slurm/plugstack.conf".into(),
            plugstack: Ok(plugins),
            daemon_socket: "/run/pjw/pjw.sock".into(),
        }
    }

    fn plugin(required: bool, exists: bool, args: &[&str]) -> PjwPlugin {
        PjwPlugin {
            source: "/etc/slurm/plugstack.conf".into(),
            required,
            path: "/usr/lib/pjw/slurm/pjw_spank.so".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            exists,
        }
    }

    fn get<'a>(lines: &'a [Line], name: &str) -> &'a Line {
        lines
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
    }

    #[test]
    fn which_path_tasks_take() {
        // (what, plugins, expected status, a word of the detail)
        let cases = [
            (
                "no plugin: adoption only",
                vec![],
                Status::Warn,
                "adoption only",
            ),
            (
                "required",
                vec![plugin(true, true, &[])],
                Status::Ok,
                "required",
            ),
            (
                "optional",
                vec![plugin(false, true, &[])],
                Status::Ok,
                "adopted after exec",
            ),
            (
                "required and missing",
                vec![plugin(true, false, &[])],
                Status::Fail,
                "does not exist",
            ),
            (
                "optional and missing",
                vec![plugin(false, false, &[])],
                Status::Warn,
                "does not exist",
            ),
            (
                "another socket, required",
                vec![plugin(true, true, &["socket=/x.sock"])],
                Status::Fail,
                "/x.sock",
            ),
            (
                "the daemon's socket named",
                vec![plugin(true, true, &["socket=/run/pjw/pjw.sock"])],
                Status::Ok,
                "before exec",
            ),
            (
                "twice",
                vec![plugin(true, true, &[]), plugin(true, true, &[])],
                Status::Warn,
                "2 times",
            ),
        ];
        for (what, plugins, want, word) in cases {
            let lines = lines(&facts(WIRED, plugins), "/usr/lib/pjw");
            let l = get(&lines, "slurm-tasks");
            assert_eq!(l.status, want, "{what}: {l:?}");
            assert!(l.detail.contains(word), "{what}: {l:?}");
        }
        let mut f = facts(WIRED, vec![]);
        f.plugstack = Err("line 3: \"x\" is not required, optional or include".into());
        assert_eq!(
            get(&lines(&f, "/usr/lib/pjw"), "slurm-tasks").status,
            Status::Warn
        );
    }

    #[test]
    fn settings_that_fight_pjw() {
        // (slurm.conf, check, status on a wired node)
        let cases = [
            (
                "TaskPlugin=task/affinity,task/cgroup",
                "slurm-task-plugin",
                Status::Fail,
            ),
            (
                "ProctrackType=proctrack/cgroup",
                "slurm-proctrack",
                Status::Fail,
            ),
            (
                "JobAcctGatherType=jobacct_gather/cgroup",
                "slurm-acct-gather",
                Status::Fail,
            ),
            ("PrologFlags=X11", "slurm-prolog-flags", Status::Warn),
            ("PrologFlags=Contain", "slurm-prolog-flags", Status::Ok),
        ];
        for (setting, name, want) in cases {
            let conf = format!("{WIRED}{setting}\n");
            let lines = lines(&facts(&conf, vec![plugin(true, true, &[])]), "/usr/lib/pjw");
            assert_eq!(get(&lines, name).status, want, "{setting}: {lines:?}");
        }
        // No ProctrackType: Slurm's default is proctrack/cgroup.
        let conf = WIRED.replace("ProctrackType=proctrack/linuxproc\n", "");
        let l = lines(&facts(&conf, vec![]), "/usr/lib/pjw");
        assert_eq!(get(&l, "slurm-proctrack").status, Status::Fail, "{l:?}");
        // The recommended settings: nothing fights.
        let l = lines(&facts(WIRED, vec![plugin(true, true, &[])]), "/usr/lib/pjw");
        assert!(l.iter().all(|l| l.status == Status::Ok), "{l:?}");
        // Not wired to pjw: a fighting setting only warns.
        let l = lines(
            &facts(
                "TaskPlugin=task/cgroup\nProctrackType=proctrack/cgroup\n",
                vec![],
            ),
            "/usr/lib/pjw",
        );
        assert!(l.iter().all(|l| l.status != Status::Fail), "{l:?}");
    }
}
