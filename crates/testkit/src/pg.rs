//! A private PostgreSQL server for central-store tests: `initdb` in a temporary directory as the
//! `postgres` user, `pg_ctl start` on a free loopback port (its Unix socket in the same
//! directory), stopped and removed on drop, also when the test fails. Needs the Debian
//! `postgresql` package (scripts/install-deps.sh installs it) and root (to run as `postgres`).
//!
//! [`PgOptions`] make it a server a site would run: TLS with a certificate (swapped and
//! reloaded with [`PgServer::set_tls`]), a password for TCP logins (SCRAM), a connection limit,
//! and a network namespace of the test's to listen in.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running (or stopped) private server.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    running: bool,
    opts: PgOptions,
}

/// How the server is set up (all off by default: trust on 127.0.0.1, no TLS).
#[derive(Clone, Debug, Default)]
pub struct PgOptions {
    /// Listen here instead of 127.0.0.1 (`*`: every address of its network namespace).
    pub listen: Option<String>,
    /// Run in this network namespace (`/proc/PID/ns/net` of a [`crate::netns::Netns`]); the
    /// port is then fixed (5432), as nothing else listens there.
    pub netns: Option<PathBuf>,
    /// TLS with this certificate and key (PEM files; copied into the server's directory).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// TCP logins need this password (SCRAM-SHA-256); the Unix socket stays trusted.
    pub password: Option<String>,
    /// `max_connections`.
    pub max_connections: Option<u32>,
    /// More `-c name=value` settings.
    pub settings: Vec<String>,
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
        Self::start_with(PgOptions::default())
    }

    /// [`PgServer::start`] set up as `opts` says.
    pub fn start_with(opts: PgOptions) -> PgServer {
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
        let port = if opts.netns.is_some() {
            5432
        } else {
            free_port()
        };
        let mut s = PgServer {
            bin,
            dir,
            port,
            running: false,
            opts,
        };
        let hba = match &s.opts.password {
            Some(_) => "local all all trust\nhost all all all scram-sha-256\n",
            None => "local all all trust\nhost all all all trust\n",
        };
        s.write_owned("data/pg_hba.conf", hba.as_bytes());
        if let Some((cert, key)) = s.opts.tls.clone() {
            s.set_tls(&cert, &key);
        }
        s.start_again();
        if let Some(pw) = s.opts.password.clone() {
            s.psql(&format!(
                "ALTER ROLE pjw PASSWORD '{}'",
                pw.replace('\'', "''")
            ));
        }
        s
    }

    /// Write a file below the server's directory, owned by postgres, mode 0600.
    fn write_owned(&self, rel: &str, data: &[u8]) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.dir.path().join(rel);
        std::fs::write(&p, data).expect("write a server file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ok = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot chown {}", p.display());
    }

    /// Serve this certificate and key from now on (reloaded when running: new connections
    /// get it).
    pub fn set_tls(&mut self, cert: &Path, key: &Path) {
        self.write_owned(
            "server.crt",
            &std::fs::read(cert).expect("read the certificate"),
        );
        self.write_owned("server.key", &std::fs::read(key).expect("read the key"));
        self.opts.tls = Some((cert.to_path_buf(), key.to_path_buf()));
        if self.running {
            let out = self
                .prefixed("pg_ctl")
                .args(["-D"])
                .arg(self.dir.path().join("data"))
                .arg("reload")
                .output()
                .expect("pg_ctl reload");
            assert!(out.status.success(), "pg_ctl reload failed");
            // The postmaster re-reads the files on SIGHUP; wait until it logged so.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !self.log().contains("reloading configuration files")
                && std::time::Instant::now() < until
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }

    /// A program of the server's, run as postgres (in its network namespace, if any).
    fn prefixed(&self, prog: &str) -> Command {
        match &self.opts.netns {
            None => as_postgres(&self.bin, prog),
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display()))
                    .args(["runuser", "-u", "postgres", "--"])
                    .arg(self.bin.join(prog));
                c.stdin(Stdio::null());
                c
            }
        }
    }

    /// Run SQL as pjw over the Unix socket (psql); its output. Panics when it fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .prefixed("psql")
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "pjw",
                "-h",
            ])
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-d", "postgres", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A URL through the Unix socket (trusted; reaches the server from any network namespace).
    pub fn socket_url(&self) -> String {
        let dir = self.dir.path().display().to_string().replace('/', "%2F");
        format!("postgres://pjw@{dir}:{}/postgres", self.port)
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
        let mut opts = format!(
            "-p {} -c listen_addresses={} -k {} -c fsync=off",
            self.port,
            self.opts.listen.as_deref().unwrap_or("127.0.0.1"),
            self.dir.path().display()
        );
        if self.opts.tls.is_some() {
            opts += &format!(
                " -c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key",
                d = self.dir.path().display()
            );
        }
        if let Some(n) = self.opts.max_connections {
            opts += &format!(" -c max_connections={n}");
        }
        for kv in &self.opts.settings {
            opts += &format!(" -c {kv}");
        }
        let out = self
            .prefixed("pg_ctl")
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
        let _ = self
            .prefixed("pg_ctl")
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
