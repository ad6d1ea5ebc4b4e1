//! A private PostgreSQL server for central-store tests: `initdb` in a temporary directory as the
//! `postgres` user, `pg_ctl start` on a free loopback port (its Unix socket in the same
//! directory), stopped and removed on drop, also when the test fails. Needs the Debian
//! `postgresql` package (scripts/install-deps.sh installs it) and root (to run as `postgres`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running (or stopped) private server.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    running: bool,
}

/// The directory of the newest installed PostgreSQL's programs.
pub fn pg_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").exists().then_some((v, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, b)| b)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn as_postgres(bin: &Path, prog: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(bin.join(prog));
    c.stdin(Stdio::null());
    c
}

impl PgServer {
    /// initdb and start. Panics with the server's words when it cannot.
    pub fn start() -> PgServer {
        let bin = pg_bin_dir()
            .expect("PostgreSQL is not installed (scripts/install-deps.sh installs postgresql)");
        let dir = tempfile::Builder::new()
            .prefix("pjw-pg")
            .tempdir()
            .expect("temp dir");
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success(), "cannot chown the PostgreSQL directory");
        let out = as_postgres(&bin, "initdb")
            .args(["-A", "trust", "-U", "pjw", "-E", "UTF8", "--no-sync", "-D"])
            .arg(dir.path().join("data"))
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut s = PgServer {
            bin,
            dir,
            port: free_port(),
            running: false,
        };
        s.start_again();
        s
    }

    /// `postgres://pjw@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgres://pjw@127.0.0.1:{}/postgres", self.port)
    }

    /// The port it listens on (the same after a restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Start the server (again) on the same port, waiting until it accepts connections.
    pub fn start_again(&mut self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let out = as_postgres(&self.bin, "pg_ctl")
            .args(["-w", "-t", "120", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-o", &opts, "start"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        self.running = true;
    }

    /// Stop the server (fast shutdown: connections are cut).
    pub fn stop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .args(["-w", "-t", "120", "-m", "fast", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.running = false;
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            self.stop();
        }
        // The TempDir removes the data directory (we are root).
    }
}
