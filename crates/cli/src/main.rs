//! `pjw-full`: the command line of the process jail warden, every subcommand. Users type
//! `pjw`: the launch front (`front.rs`) runs `pjw run` itself and execs this binary for
//! everything else (docs/decisions.md (cj)).
//!
//! Parsing what the user typed ([`cli`]) is kept apart from acting on it (the `cmd_*`
//! modules); `main` maps errors to exit codes: 0 success, 1 failure, 2 usage; `pjw run` exits
//! with its command's status, or 125 when pjw itself failed, 126 when the command cannot be
//! executed, 127 when it is not found (the conventions of `env`, `nice` and container runners).

mod affinity;
mod cells;
mod check;
mod cli;
mod cmd_control;
mod cmd_generate;
mod cmd_login;
mod cmd_report;
mod cmd_run;
mod cmd_sim;
mod cmd_sim_gpu;
mod cmd_status;
mod cmd_top;
mod cmd_topology;
mod cmd_wlm;
mod connect;
mod logging;
mod marks;
mod plot;
#[allow(dead_code)] // parse_run_only is the front's (front.rs)
mod run_args;
mod run_watch;
mod starter;
mod wlm_parse;

use clap::Parser;

fn main() {
    // Die quietly on a closed pipe (`pjw status | head`), as command-line tools do, instead of
    // panicking in println!. `pjw run` restores the default for its command anyway.
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args = cli::Cli::parse();
    let code = match args.command {
        cli::Command::Daemon(d) => cmd_daemon(d),
        cli::Command::Run(r) => cmd_run::run(r),
        cli::Command::Status(s) => report(cmd_status::run(s)),
        cli::Command::Kill(k) => report(cmd_control::run(pjw_proto::Request::Kill { job: k.job })),
        cli::Command::Suspend(k) => {
            report(cmd_control::run(pjw_proto::Request::Suspend { job: k.job }))
        }
        cli::Command::Resume(k) => {
            report(cmd_control::run(pjw_proto::Request::Resume { job: k.job }))
        }
        cli::Command::Priority(p) => report(cmd_control::run(pjw_proto::Request::Priority {
            job: p.job,
            priority: p.priority,
        })),
        cli::Command::Report(r) => report(cmd_report::run(r)),
        cli::Command::Topology(t) => report(cmd_topology::run(t)),
        cli::Command::Sim(s) => report(cmd_sim::run(s)),
        cli::Command::Top(t) => report(cmd_top::run(t)),
        cli::Command::Job(j) => cmd_wlm::job(j),
        cli::Command::Slurm(s) => cmd_wlm::slurm(s),
        cli::Command::Sge(s) => cmd_wlm::sge(s),
        cli::Command::Check(c) => match check::run(c) {
            Ok(code) => code,
            Err(e) => report(Err(e)),
        },
        cli::Command::Generate(g) => report(cmd_generate::run(g)),
        cli::Command::PamAdopt(p) => cmd_login::run(p),
    };
    std::process::exit(code);
}

fn report(r: anyhow::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("pjw: {}", one_line(&e));
            1
        }
    }
}

/// The error and its causes on one line, leaving out a cause whose text the message already
/// holds (error types that print their source would otherwise repeat it).
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.replace('\n', " ")
}

fn cmd_daemon(d: cli::DaemonArgs) -> i32 {
    // The daemon must not die on a closed pipe: `main` makes SIGPIPE fatal for the command-line
    // tools (`pjw status | head`), and the daemon inherited it, so a write to a pipe whose
    // reader left (its stderr piped to a log collector that exits) would kill the root daemon
    // without a word. A write to a closed peer is then EPIPE, an error of that write alone.
    // SAFETY: setting a signal disposition before the daemon starts any thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let ov = pjw_daemon::Overrides {
        socket: d.socket,
        state_dir: d.state_dir,
        cgroup_parent: d.cgroup_parent,
    };
    let source = pjw_daemon::reload::ReloadSource {
        path: d.config.clone(),
        overrides: ov.clone(),
    };
    let cfg = match pjw_daemon::Config::load(d.config.as_deref(), &ov) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pjw: {e}");
            return 1;
        }
    };
    if d.check_config {
        println!("config {}: ok", cfg.origin);
        return 0;
    }
    init_logging(&cfg, d.log_format);
    match pjw_daemon::run_reloadable(cfg, source) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "pjw daemon failed");
            eprintln!("pjw: {e}");
            1
        }
    }
}

/// The log format: `--log-format`, else the journal's when stderr is the journal and the
/// config asks for text, else the config's.
fn init_logging(cfg: &pjw_daemon::Config, flag: Option<logging::LogFormat>) {
    use logging::LogFormat;
    let format = flag.unwrap_or(match cfg.log_format {
        pjw_daemon::config::LogFormat::Json => LogFormat::Json,
        pjw_daemon::config::LogFormat::Text if logging::stderr_is_journal() => LogFormat::Journal,
        pjw_daemon::config::LogFormat::Text => LogFormat::Text,
    });
    logging::init(&cfg.log_level, format);
}
