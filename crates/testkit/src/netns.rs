//! Network and UTS namespaces made by a test, for a cluster of nodes on one machine.
//!
//! A [`Netns`] is held by a child process (`unshare --net --uts`, then `sleep`) that dies with
//! the thread that made it (`PR_SET_PDEATHSIG`) or when dropped; the namespace, its loopback
//! and its veth links go with it. Nothing is mounted (no `ip netns add`), and the machine's own
//! network namespace is never touched: a veth pair is made inside one test namespace with its
//! peer put straight into the other ([`Netns::link`]). Programs run inside with
//! [`Netns::command`] (`nsenter`). Needs root and Debian's `iproute2` and `util-linux`.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A network + UTS namespace with its own host name.
#[derive(Debug)]
pub struct Netns {
    holder: Child,
    hostname: String,
}

impl Netns {
    /// A new namespace pair whose host name is `hostname`, loopback up.
    pub fn new(hostname: &str) -> Netns {
        assert!(
            hostname
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "host name {hostname:?}"
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--uts", "--", "sh", "-c"])
            .arg(format!(
                "hostname {hostname} && ip link set lo up && echo up && exec sleep 86400"
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of the child; it is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut holder = cmd.spawn().expect("run unshare (util-linux)");
        // Wait until the namespace is set up (the holder says "up").
        let mut line = String::new();
        let out = holder.stdout.take().expect("holder stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
            .expect("read the namespace holder");
        assert_eq!(line.trim(), "up", "namespace {hostname} not set up");
        Netns {
            holder,
            hostname: hostname.to_string(),
        }
    }

    /// The holder's pid.
    pub fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// Its host name.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// `/proc/PID/ns/net` of the namespace.
    pub fn net_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.pid()))
    }

    /// `prog` to be run inside the namespaces (network and UTS).
    pub fn command(&self, prog: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/proc/{}/ns/net", self.pid()))
            .arg(format!("--uts=/proc/{}/ns/uts", self.pid()))
            .arg("--")
            .arg(prog);
        c
    }

    /// The `nsenter` words that put a program inside (for launchers that take a prefix).
    pub fn prefix(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/proc/{}/ns/net", self.pid()),
            format!("--uts=/proc/{}/ns/uts", self.pid()),
            "--".into(),
        ]
    }

    fn ip(&self, args: &[&str]) {
        let out = self
            .command("ip")
            .args(args)
            .output()
            .expect("run ip (iproute2)");
        assert!(
            out.status.success(),
            "ip {args:?} in {}: {}",
            self.hostname,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A veth pair between this namespace (`my_addr`, CIDR) and `other` (`their_addr`), both
    /// up; each side's interface is named after the other side's host name.
    pub fn link(&self, other: &Netns, my_addr: &str, their_addr: &str) {
        let mine = format!("v-{}", other.hostname);
        let theirs = format!("v-{}", self.hostname);
        self.ip(&[
            "link",
            "add",
            &mine,
            "type",
            "veth",
            "peer",
            "name",
            &theirs,
            "netns",
            &other.pid().to_string(),
        ]);
        self.ip(&["addr", "add", my_addr, "dev", &mine]);
        self.ip(&["link", "set", &mine, "up"]);
        other.ip(&["addr", "add", their_addr, "dev", &theirs]);
        other.ip(&["link", "set", &theirs, "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
