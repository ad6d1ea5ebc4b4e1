//! What the user can type: one definition of every flag (help comes from here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::run_args::RunArgs;

/// pjw, the process jail warden: every job on a node in its own exclusive set of CPUs.
#[derive(Debug, Parser)]
#[command(name = "pjw", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node daemon in the foreground.
    #[command(after_long_help = DAEMON_SIGNALS)]
    Daemon(DaemonArgs),
    /// Run a command as a job on its own CPUs (waits in the queue if they are taken).
    Run(RunArgs),
    /// Show jobs, CPUs and the node map.
    Status(StatusArgs),
    /// Kill a job (all its processes) or withdraw it from the queue.
    Kill(KillArgs),
    /// Freeze a running job; its CPUs go to other jobs until it is resumed.
    Suspend(KillArgs),
    /// Let a suspended job run again as soon as it has CPUs.
    Resume(KillArgs),
    /// Change a job's priority (1-16).
    Priority(PriorityArgs),
    /// What jobs did: CPU, memory, processes, waits and freezes; series and per-process detail.
    Report(ReportArgs),
    /// Show the machine's topology (or one from an hwloc XML file or a synthetic description).
    Topology(TopologyArgs),
    /// Replay a job trace on a topology and compare placement policies.
    Sim(SimArgs),
    /// A live view of the node: CPU map, jobs with CPU % and memory, the queue.
    Top(TopArgs),
    /// Workload-manager jobs: register one (root), end one.
    #[command(subcommand)]
    Job(JobCommand),
    /// Slurm hooks: `pjw slurm prolog` / `pjw slurm epilog` (run by slurmd as root).
    #[command(subcommand)]
    Slurm(SlurmCommand),
    /// Grid Engine hooks: `pjw sge shepherd -- sge_shepherd ARGS` (the shepherd_cmd wrapper).
    #[command(subcommand)]
    Sge(SgeCommand),
    /// Preflight a node: cgroups, PSI, swap, proc connector, directories, config, topology,
    /// workload-manager hooks and other cgroup managers; one line per check (OK, WARN, FAIL and
    /// the fix); exits 1 on any FAIL.
    Check(CheckArgs),
    /// ssh logins into jobs: run by pam_exec as root in sshd's account and session stacks, it
    /// puts a user's session in their newest running job (docs/wlm/adoption.md).
    PamAdopt(PamAdoptArgs),
    /// Man pages and shell completions, for packagers (`make install`, `make deb`).
    #[command(subcommand, hide = true)]
    Generate(GenerateCommand),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Config file [default: /etc/pjw/pjw.toml if it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The job parent to check [default: PJW_CGROUP_PARENT, else the one pjw.service uses
    /// (/run/pjw/cgroup-parent.env), else the config's].
    #[arg(long, value_name = "P", env = "PJW_CGROUP_PARENT")]
    pub cgroup_parent: Option<String>,
    /// Slurm's slurm.conf to check, with the plugstack.conf it names [default: SLURM_CONF,
    /// else /etc/slurm/slurm.conf].
    #[arg(long, value_name = "FILE", env = "SLURM_CONF")]
    pub slurm_conf: Option<PathBuf>,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Write pjw.1, pjw-SUBCOMMAND.1 and pjw.toml.5 into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL (or write it into DIR).
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(short = 'd', long, default_value_t = 1.0, value_name = "SECS")]
    pub interval: f64,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Register a workload manager's job (root only): it gets CPUs and cgroups now and its
    /// processes are adopted. With a command, this process joins the job and execs it (the job
    /// ends when its cgroup empties); without, the job is held until `pjw job end`.
    Register(RegisterArgs),
    /// End a registered job: kill what is left in it and remove its cgroups (root only).
    End(KillArgs),
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// The workload manager (slurm, sge, pbs, lsf, condor, …).
    #[arg(long, value_name = "NAME")]
    pub wlm: String,
    /// The manager's job id (becomes the pjw job id).
    #[arg(short = 'j', long, value_name = "ID")]
    pub job_id: String,
    /// The job's owner.
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: String,
    /// CPUs the manager gave the job on this node.
    #[arg(short = 'c', long, value_name = "N")]
    pub cpus: u32,
    /// Memory limit (e.g. 512M, 4G): the job's RAM, not its swap
    ///
    /// It caps the job's RAM: its processes' memory, page cache,
    /// /dev/shm and /tmp files. It does not cap swap: where the node has swap, the job may also
    /// use swap up to the node's [job] swap_max (by default no cap), slower but alive. Beyond
    /// the cap the kernel kills the job's processes (OOM), and pjw run says so when the job
    /// ends.
    #[arg(short = 'm', long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Job name.
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// The GPUs the manager chose, by its index (`0,2`; HTCondor's `CUDA0,CUDA2` with
    /// --wlm condor): the job gets exactly these (index i is pjw's GPU i) and is fenced off
    /// the others. Refused if the node lacks one or another job holds it.
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    /// A command to exec inside the job (this process joins it).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Register the job of SLURM_JOB_ID, sized by `scontrol show job -d` (the Prolog).
    Prolog,
    /// End the job of SLURM_JOB_ID (the Epilog).
    Epilog,
    /// Print `export NAME=VALUE` lines of the GPU variables pjw gives the job of SLURM_JOB_ID
    /// (the TaskProlog, run as the job's user: Slurm sets them in the task).
    TaskProlog,
}

#[derive(Debug, Subcommand)]
pub enum SgeCommand {
    /// Register the job described by ./config and ./environment, join it and exec the
    /// shepherd (the `shepherd_cmd` wrapper; run by sge_execd as root in the job's spool dir).
    Shepherd(ShepherdArgs),
}

#[derive(Debug, Args)]
pub struct ShepherdArgs {
    /// The shepherd and its arguments (`/usr/lib/gridengine/sge_shepherd "$@"`).
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// The daemon's signals, shown by `pjw daemon --help` and in pjw-daemon(1).
const DAEMON_SIGNALS: &str = "Signals:\n  \
    SIGHUP   re-read the config (systemctl reload pjw). Queue rules, limits and governor \
    thresholds apply at once; the governor, sampler and sweep intervals, [metrics] listen and \
    [central] restart their timer, listener or shipper (a metrics address that cannot be bound \
    keeps the old one); a pool, spread, socket mode, memory partition or log change waits for a \
    restart; an invalid file, or a new socket, state_dir, cgroup parent, [paths], tmp_root, \
    partition or a pool shrinking under running jobs, changes nothing. Running jobs are never \
    touched. See pjw.toml(5), RELOAD.\n  \
    SIGTERM, SIGINT   stop; running jobs keep running and are recovered at the next start.";

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Config file [default: /etc/pjw/pjw.toml if it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Socket to listen on [default: /run/pjw/pjw.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// State directory [default: /var/lib/pjw].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Parent cgroup: a path inside each hierarchy (/pjw) or self[/SUB].
    #[arg(long, value_name = "P")]
    pub cgroup_parent: Option<String>,
    /// Validate the config and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Log format: text (RFC 3339 timestamps), json, or journal (`<N>` priority prefixes, no
    /// timestamps) [default: journal when stderr is the journal (JOURNAL_STREAM) and [log]
    /// format is text, else [log] format].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<crate::logging::LogFormat>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Load an hwloc XML file (v2) instead of reading this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    pub xml: Option<PathBuf>,
    /// A synthetic machine, e.g. "package:2 numa:2 l3:2 core:4 pu:2".
    #[arg(long, value_name = "S")]
    pub synthetic: Option<String>,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// `pjw pam-adopt`: what it does comes from pam_exec's environment (`PAM_TYPE`, `PAM_USER`,
/// `PAM_SERVICE`).
#[derive(Debug, Args)]
#[command(after_long_help = PAM_ADOPT_HELP)]
pub struct PamAdoptArgs {
    /// The PAM services it acts for (repeatable); any other service's login goes on untouched.
    #[arg(long, value_name = "NAME", default_values_t = ["sshd".to_string()])]
    pub service: Vec<String>,
    /// Say nothing to the user when the session joins a job.
    #[arg(short, long)]
    pub quiet: bool,
    /// The daemon's socket. Never taken from PJW_SOCKET: the PAM environment can hold the
    /// user's own variables (pam_env's ~/.pam_environment), and this runs as root.
    #[arg(long, value_name = "PATH", default_value = pjw_proto::DEFAULT_SOCKET)]
    pub socket: std::path::PathBuf,
}

const PAM_ADOPT_HELP: &str = "\
In /etc/pam.d/sshd, the account line after `@include common-account`, the session line at the
end (after `@include common-session`, whose pam_systemd would otherwise move the session out):

    account  required  pam_exec.so stdout /usr/bin/pjw pam-adopt
    session  optional  pam_exec.so stdout /usr/bin/pjw pam-adopt

Root is never adopted and never refused. A user with running jobs lands in the newest; with
none, [adopt] login_without_job says: \"outside\" (the default) or \"refuse\".";

#[derive(Debug, Args)]
pub struct KillArgs {
    /// The job id.
    #[arg(value_name = "JOB")]
    pub job: String,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// An hwloc XML topology (repeatable; one table each).
    #[arg(long, value_name = "FILE")]
    pub xml: Vec<PathBuf>,
    /// A synthetic machine, e.g. "package:2 numa:2 l3:2 core:4 pu:2" (repeatable).
    #[arg(long, value_name = "S")]
    pub synthetic: Vec<String>,
    /// A topology corpus directory: run its 24-, 96- and 384-PU machines.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Synthetic trace as synthetic:SEED:NJOBS [default: synthetic:1:2000].
    #[arg(long, value_name = "SPEC", conflicts_with = "swf")]
    pub trace: Option<String>,
    /// A Standard Workload Format trace (sizes clamped to each machine).
    #[arg(long, value_name = "FILE")]
    pub swf: Option<PathBuf>,
    /// Policy to run (repeatable): pjw, kubelet, slurm-cyclic, slurm-block, range, pbs
    /// [default: all].
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// Offered load (share of the machine's CPU time the trace asks for) [default: 0.9 for a
    /// synthetic trace; an SWF trace is rescaled only when given].
    #[arg(long, value_name = "F")]
    pub load: Option<f64>,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
    /// Jobs with GPUs: GPU and CPU-only jobs on machines with GPUs (--xml files with GPUs,
    /// --synthetic with gpu:N, --corpus: its machine with GPUs; default: two synthetic
    /// machines) under the GPU policies pjw, pjw-require, kubelet-single-numa,
    /// kubelet-best-effort, slurm, slurm-enforce [default load: 0.7].
    #[arg(long)]
    pub gpus: bool,
    /// Run seeds SEED..SEED+N-1 and print each policy's means (with --gpus).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "gpus")]
    pub seeds: u64,
}

#[derive(Debug, Args)]
pub struct PriorityArgs {
    /// The job id.
    #[arg(value_name = "JOB")]
    pub job: String,
    /// The new priority, 1-16.
    #[arg(value_name = "N", value_parser = clap::value_parser!(u8).range(1..=16))]
    pub priority: u8,
}

/// Output format of `pjw report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
    Csv,
}

/// What `pjw report --top` ranks by (the protocol's [`pjw_proto::TopBy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TopArg {
    Cpu,
    Mem,
    Wait,
}

impl From<TopArg> for pjw_proto::TopBy {
    fn from(t: TopArg) -> pjw_proto::TopBy {
        match t {
            TopArg::Cpu => pjw_proto::TopBy::Cpu,
            TopArg::Mem => pjw_proto::TopBy::Mem,
            TopArg::Wait => pjw_proto::TopBy::Wait,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// One job (all its runs on this node).
    #[arg(short = 'J', long = "job", value_name = "ID")]
    pub job: Option<String>,
    /// Jobs of this user (root and the admin group only, for other users).
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Jobs with this name.
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// Jobs since: an RFC 3339 time, a date (YYYY-MM-DD) or a duration ago (30m, 2h, 7d).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// queued, running, completed, killed, oom, expired, timeout or failed.
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    /// Show the time series.
    #[arg(long)]
    pub series: bool,
    /// Show the per-process rows (recorded with profile.processes = N).
    #[arg(long)]
    pub processes: bool,
    /// Show each thread: its CPU time, the CPUs it ran on, migrations, its shares of time
    /// running, waiting and asleep, and its pin (recorded with profile.threads = N); with
    /// --plot, a panel of the busiest threads.
    #[arg(long)]
    pub threads: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Refresh every SECS seconds until the jobs shown have ended.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
    /// At most N jobs, newest first [default: 100].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Ask the cluster store (PostgreSQL) for finished jobs of every node.
    #[arg(long, conflicts_with_all = ["watch", "processes", "threads"])]
    pub central: bool,
    /// Jobs that ran on this node (with --central).
    #[arg(long, value_name = "NODE", requires = "central")]
    pub node: Option<String>,
    /// Jobs ended before: an RFC 3339 time, a date (YYYY-MM-DD) or a duration ago (with
    /// --central; with --since, a time range).
    #[arg(long, value_name = "WHEN", requires = "central")]
    pub until: Option<String>,
    /// The top jobs by cpu (CPU time), mem (memory peak) or wait (time queued) instead of
    /// the newest (with --central).
    #[arg(long, value_name = "WHAT", value_enum, requires = "central")]
    pub top: Option<TopArg>,
    /// Write charts of memory and CPU over the jobs' lives to FILE (.svg or .png).
    #[arg(long, value_name = "FILE", conflicts_with = "watch")]
    pub plot: Option<PathBuf>,
}
