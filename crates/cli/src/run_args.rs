//! `pjw run`'s flags, apart from the other subcommands' so that the launch front (`front.rs`,
//! the `pjw` binary) parses them without building the whole command line: one definition,
//! shared by both binaries (help, man page and completions come from the full command line, which
//! holds this as its `run` subcommand).

use clap::Args;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Number of CPUs; with --ntasks, CPUs per task [default: the workload manager's with
    /// --from-env (divided among the tasks), else 1].
    #[arg(short = 'c', long, visible_alias = "cpus-per-task", value_name = "N")]
    pub cpus: Option<u32>,
    /// Tasks (MPI ranks) the command starts, Slurm's --ntasks: the job gets tasks × --cpus
    /// CPUs; each task's thread counts are its share, and Open MPI's mpirun is told to start
    /// that many ranks, each bound to its own CPUs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ntasks: Option<u32>,
    /// Whole GPUs, with CPUs local to them; the job can open only its own GPUs' devices.
    #[arg(short = 'g', long, value_name = "N", default_value_t = 0)]
    pub gpus: u32,
    /// Block I/O weight 1-10000 (cgroup v2 io.weight; 10-1000 on v1/BFQ) [default: the
    /// node's [job] io_weight, else the kernel's 100]; above the node's default: root only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=10000))]
    pub io_weight: Option<u16>,
    /// Block I/O limit on one disk, 'DEV rbps=100M wbps=… riops=… wiops=…' (DEV: MAJ:MIN or a
    /// path on the disk); repeat per disk. Can only tighten the node's [job] io_max.
    #[arg(long, value_name = "SPEC")]
    pub io_max: Vec<String>,
    /// Memory limit (e.g. 512M, 4G): the job's RAM, not its swap
    ///
    /// It caps the job's RAM: its processes' memory, page cache,
    /// /dev/shm and /tmp files. It does not cap swap: where the node has swap, the job may also
    /// use swap up to the node's [job] swap_max (by default no cap), slower but alive. Beyond
    /// the cap the kernel kills the job's processes (OOM), and pjw run says so when the job
    /// ends.
    #[arg(short = 'm', long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// How long the job may run: Slurm's forms (MIN, MIN:SEC, H:MIN:SEC, D-H[:MIN[:SEC]]; a
    /// plain number is minutes) or 90s, 15m, 2h, 1d. pjw kills it once it has run that long
    /// (time queued, frozen or backfilling on other jobs' CPUs does not count) and says so;
    /// where the node runs the shortest jobs first (queue_order), a shorter limit starts
    /// sooner.
    #[arg(short = 't', long, value_name = "TIME", value_parser = parse_time)]
    pub time: Option<pjw_core::time_limit::TimeLimit>,
    /// Job id (else the daemon makes one).
    #[arg(short = 'j', long, value_name = "ID")]
    pub job_id: Option<String>,
    /// Job name [default: the command's name].
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// Priority 1-16 [default: the node's, normally 10]; higher runs first and may preempt.
    #[arg(short = 'p', long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=16))]
    pub priority: Option<u8>,
    /// Bind the job's busy threads: each to one CPU (threads), to one core (cores), or not
    /// (none) [default: the node's `[job] bind`].
    #[arg(long, value_name = "MODE", value_parser = parse_bind)]
    pub bind: Option<pjw_proto::BindMode>,
    /// Take the whole node.
    #[arg(long, conflicts_with = "backfill_only")]
    pub exclusive: bool,
    /// Run only as a backfiller: in the idle class, on CPUs other jobs hold.
    #[arg(long, conflicts_with = "primary_only")]
    pub backfill_only: bool,
    /// Run only on exclusive CPUs (never as a backfiller).
    #[arg(long)]
    pub primary_only: bool,
    /// Run the job as this user (root only): pjw sets the job up, then drops to the user, its
    /// group and supplementary groups, and execs.
    #[arg(short = 'u', long, value_name = "NAME")]
    pub user: Option<String>,
    /// Take the job id, user, CPUs and memory from the workload manager's environment and job
    /// files: auto, slurm, sge, pbs, lsf or condor. Options given explicitly win.
    #[arg(long, value_name = "WLM", num_args = 0..=1, default_missing_value = "auto")]
    pub from_env: Option<String>,
    /// Record the user as the job's owner but keep root (for wrappers that exec a manager's
    /// own launcher, such as sge_shepherd, which drops privileges itself).
    #[arg(long)]
    pub no_setuid: bool,
    /// Size of the job's private /tmp (e.g. 256M; 0 or none: no private /tmp) [default: the
    /// node's [job] tmp].
    #[arg(long, value_name = "SIZE")]
    pub tmp: Option<String>,
    /// Do not say on stderr that the job is queued.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

fn parse_time(text: &str) -> Result<pjw_core::time_limit::TimeLimit, String> {
    pjw_core::time_limit::TimeLimit::parse(text).map_err(|e| e.to_string())
}

fn parse_bind(text: &str) -> Result<pjw_proto::BindMode, String> {
    pjw_proto::BindMode::parse(text)
        .ok_or_else(|| format!("{text:?} is not one of threads, cores, none"))
}

/// `pjw run ARGS` parsed with the `run` subcommand's definition alone (the launch front's fast
/// path). None for any other subcommand, and for anything `run` alone does not accept (help,
/// version, a mistake): the full command line then parses it and says the same as ever.
pub fn parse_run_only<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Option<RunArgs> {
    use clap::FromArgMatches;
    let mut args = args.into_iter();
    let bin = args.next()?;
    if args.next()? != "run" {
        return None;
    }
    let cmd = RunArgs::augment_args(clap::Command::new("run").bin_name("pjw run"))
        .disable_help_flag(true)
        .disable_version_flag(true);
    let m = cmd
        .try_get_matches_from(std::iter::once(bin).chain(args))
        .ok()?;
    RunArgs::from_arg_matches(&m).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_run_only;
    use std::ffi::OsString;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    /// The fast path takes a plain `run` and leaves everything else to the full command line.
    #[test]
    fn run_alone_or_nothing() {
        let r = parse_run_only(args(&[
            "pjw",
            "run",
            "-q",
            "-c",
            "2",
            "--time",
            "1:30",
            "--",
            "/bin/true",
            "-x",
        ]))
        .expect("a plain run");
        assert!(r.quiet);
        assert_eq!(r.cpus, Some(2));
        assert_eq!(r.time.map(|t| t.secs()), Some(90));
        assert_eq!(r.command, args(&["/bin/true", "-x"]));
        let r =
            parse_run_only(args(&["pjw", "run", "sh", "--help"])).expect("the command's own flag");
        assert_eq!(r.command, args(&["sh", "--help"]));
        for other in [
            &["pjw", "status"][..],
            &["pjw"],
            &["pjw", "run"],
            &["pjw", "run", "--help"],
            &["pjw", "run", "--version"],
            &["pjw", "run", "--no-such-flag", "true"],
            &["pjw", "run", "--exclusive", "--backfill-only", "true"],
            &["pjw", "run", "--time", "0", "true"],
            &["pjw", "--version"],
        ] {
            assert!(parse_run_only(args(other)).is_none(), "{other:?}");
        }
    }
}
