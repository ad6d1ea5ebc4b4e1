//! What the user can type: one definition of every flag (help comes from here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    Daemon(DaemonArgs),
    /// Run a command as a job on its own CPUs (waits in the queue if they are taken).
    Run(RunArgs),
    /// Show jobs, CPUs and the node map.
    Status(StatusArgs),
    /// Kill a job (all its processes) or withdraw it from the queue.
    Kill(KillArgs),
    /// Show the machine's topology (or one from an hwloc XML file or a synthetic description).
    Topology(TopologyArgs),
}

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
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Number of CPUs.
    #[arg(short = 'c', long, default_value_t = 1, value_name = "N")]
    pub cpus: u32,
    /// Memory limit (e.g. 512M, 4G).
    #[arg(short = 'm', long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Job id (else the daemon makes one).
    #[arg(short = 'j', long, value_name = "ID")]
    pub job_id: Option<String>,
    /// Job name [default: the command's name].
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// Do not say on stderr that the job is queued.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
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

#[derive(Debug, Args)]
pub struct KillArgs {
    /// The job id.
    #[arg(value_name = "JOB")]
    pub job: String,
}
