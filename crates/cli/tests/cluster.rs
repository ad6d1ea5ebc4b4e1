//! The multi-node tier: a cluster on this machine. Four daemons are four nodes, each in its own
//! network and UTS namespace (its own host name, hence node name), with its own state directory
//! and cgroup parent below the test's cgroup; one PostgreSQL server and Debian's Prometheus run
//! in a fifth namespace (the hub), joined to each node by a veth pair the test makes. Nothing
//! leaves these namespaces; the machine's own network is not touched.
//!
//! The nodes ship over TLS (`sslmode=verify-full`, the test's CA, the password from a root-only
//! file). Jobs on every node reach PostgreSQL exactly once; `pjw report --central` lists them all
//! with their node; a node killed with SIGKILL in the middle of a shipment — once before
//! PostgreSQL committed, once after the commit and before the node marked its jobs shipped — and
//! started again loses and duplicates nothing; PostgreSQL stopped for a minute while jobs end and
//! started again loses nothing. Meanwhile Prometheus scrapes every node and shows each one's
//! metrics with its node label.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pjw_testkit::machine::one_cpu_config;
use pjw_testkit::netns::Netns;
use pjw_testkit::pg::{PgOptions, PgServer};
use pjw_testkit::tls::TestCa;
use pjw_testkit::{require, Component, TestDaemon};

const NODES: usize = 4;
const PASSWORD: &str = "cluster-s3cret";
const METRICS_PORT: u16 = 9810;

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

/// The hub's address on its link to node `i` (1-based), and the node's.
fn hub_addr(i: usize) -> String {
    format!("10.231.{i}.1")
}
fn node_addr(i: usize) -> String {
    format!("10.231.{i}.2")
}

struct Node {
    name: String,
    ns: Netns,
    daemon: TestDaemon,
}

impl Node {
    /// `pjw run -c 1 --job-id ID -- sh -c SCRIPT` from inside the node, to its end.
    fn run(&self, id: &str, script: &str) {
        let out = self
            .ns
            .command(pjw_bin())
            .env("PJW_SOCKET", self.daemon.socket())
            .args(["run", "-c", "1", "--job-id", id, "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("pjw run");
        assert!(
            out.status.success(),
            "job {id} on {}: {}{}\n--- its daemon: {}; the end of its log:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.daemon.how_ended(),
            log_tail(&self.daemon.log(), 30)
        );
    }

    /// Whether the local store has recorded job `id`'s end.
    fn ended(&self, id: &str) -> bool {
        let o = self
            .daemon
            .pjw()
            .args(["report", "-J", id, "--format", "json"])
            .output()
            .unwrap();
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"state\": \"ended\"")
    }
}

/// Prometheus in the hub, scraping every node each second.
struct Prometheus {
    child: Child,
    dir: tempfile::TempDir,
    hub_net: PathBuf,
}

impl Prometheus {
    fn start(hub: &Netns) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("pjw-prom")
            .tempdir()
            .unwrap();
        let targets: Vec<String> = (1..=NODES)
            .map(|i| format!("'{}:{METRICS_PORT}'", node_addr(i)))
            .collect();
        let cfg = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: pjw\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), cfg).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = hub
            .command("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:9090")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (Debian's prometheus package)");
        Prometheus {
            child,
            dir,
            hub_net: hub.net_path(),
        }
    }

    /// `promtool query instant` in the hub: the result vector as (labels, value).
    fn query(&self, expr: &str) -> Vec<(BTreeMap<String, String>, String)> {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.hub_net.display()))
            .args([
                "promtool",
                "query",
                "instant",
                "-o",
                "json",
                "http://127.0.0.1:9090",
                expr,
            ])
            .output()
            .expect("promtool query");
        if !out.status.success() {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        let labels = s["metric"]
                            .as_object()
                            .map(|m| {
                                m.iter()
                                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").into()))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (labels, s["value"][1].as_str().unwrap_or("").to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every job PostgreSQL holds: (node, job id) → rows, and the jobs whose series is not whole
/// (a sample lost or sent twice would show there).
fn central_rows(pg: &PgServer) -> (BTreeMap<(String, String), u32>, String) {
    let text = pg.psql(
        "SELECT node || ' ' || job_id || ' ' || count(*) FROM pjw_jobs GROUP BY node, job_id",
    );
    let rows = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            Some((
                (w.next()?.to_string(), w.next()?.to_string()),
                w.next()?.parse().ok()?,
            ))
        })
        .collect();
    let broken = pg.psql(
        "SELECT string_agg(j.node || '/' || j.job_id, ' ') FROM pjw_jobs j
         WHERE j.samples <> (SELECT count(*) FROM pjw_samples s WHERE s.node = j.node AND s.seq = j.seq)",
    );
    (rows, broken.trim().to_string())
}

/// Wait until PostgreSQL holds exactly `want` (each job once, series whole).
fn assert_exactly_once(pg: &PgServer, want: &[(String, String)], nodes: &[Node], what: &str) {
    let want: BTreeMap<(String, String), u32> = want.iter().map(|k| (k.clone(), 1)).collect();
    let mut last = (BTreeMap::new(), String::new());
    let ok = TestDaemon::wait_for(Duration::from_secs(90), || {
        last = central_rows(pg);
        last.0 == want && last.1.is_empty()
    });
    if !ok {
        for n in nodes {
            let log = n.daemon.log();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            eprintln!(
                "--- {} ---\n{}",
                n.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        panic!(
            "{what}: PostgreSQL holds {:?} (series not whole: {:?}), want {:?}",
            last.0, last.1, want
        );
    }
}

/// The shipper of `node` waits on a lock in PostgreSQL (mid-transaction).
fn shipper_blocked(pg: &PgServer, node: &str) -> bool {
    pg.psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pjw/{node}' AND wait_event_type = 'Lock'"
    ))
    .trim()
        == "1"
}

/// A session of the test's that holds a lock on `pjw_samples` until dropped.
struct PgLock(Child);

impl PgLock {
    fn take(pg: &PgServer) -> PgLock {
        // psql reading its commands from a pipe: the transaction stays open until stdin closes.
        let mut c = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pjw_testkit::pg::pg_bin_dir().unwrap().join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .arg(pg_conninfo(pg))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        let stdin = c.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "BEGIN; LOCK TABLE pjw_samples IN EXCLUSIVE MODE; SELECT 1;"
        )
        .unwrap();
        stdin.flush().unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while !pg
            .psql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'pjw_samples' AND l.mode = 'ExclusiveLock' AND l.granted")
            .trim()
            .eq("1")
        {
            assert!(Instant::now() < until, "the test's lock was not granted");
            std::thread::sleep(Duration::from_millis(50));
        }
        PgLock(c)
    }

    fn release(mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

fn pg_conninfo(pg: &PgServer) -> String {
    // The socket URL works from any network namespace.
    pg.socket_url().replace("postgres://", "postgresql://")
}

#[test]
fn a_cluster_of_four_nodes_ships_every_job_once_through_node_and_postgres_restarts() {
    require!(Component::Root, Component::Postgres, Component::Promtool);
    let started = Instant::now();
    let hub = Netns::new("pjw-hub");
    let names: Vec<String> = (1..=NODES).map(|i| format!("node{i}")).collect();
    let spaces: Vec<Netns> = names.iter().map(|n| Netns::new(n)).collect();
    for (i, ns) in spaces.iter().enumerate() {
        hub.link(
            ns,
            &format!("{}/24", hub_addr(i + 1)),
            &format!("{}/24", node_addr(i + 1)),
        );
    }
    let ca = TestCa::new("pjw-cluster-ca");
    let hub_names: Vec<String> = (1..=NODES).map(hub_addr).collect();
    let hub_refs: Vec<&str> = hub_names.iter().map(String::as_str).collect();
    let cert = ca.issue("db", &hub_refs);
    let mut pg = PgServer::start_with(PgOptions {
        listen: Some("*".into()),
        netns: Some(hub.net_path()),
        tls: Some((cert.cert.clone(), cert.key.clone())),
        password: Some(PASSWORD.into()),
        max_connections: Some(20),
        ..PgOptions::default()
    });
    // The password: root's, mode 0600 (the daemon refuses anything else).
    let secrets = tempfile::tempdir().unwrap();
    let pw_file = secrets.path().join("central.pass");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pw_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut nodes: Vec<Node> = spaces
        .into_iter()
        .enumerate()
        .map(|(i, ns)| {
            let cfg = format!(
                "{}[profile]\ninterval = \"1s\"\n[metrics]\nlisten = \"{}:{METRICS_PORT}\"\n[central]\nurl = \"postgres://pjw@{}:5432/postgres?sslmode=verify-full&sslrootcert={}\"\npassword_file = \"{}\"\nretry_secs = 0.5\nbatch_size = 5\n",
                one_cpu_config(),
                node_addr(i + 1),
                hub_addr(i + 1),
                ca.cert().display(),
                pw_file.display()
            );
            let daemon = TestDaemon::start_in(&pjw_bin(), &cfg, ns.prefix());
            Node {
                name: names[i].clone(),
                ns,
                daemon,
            }
        })
        .collect();
    // Each node is itself: its host name is its node name; state and cgroups are its own.
    for n in &nodes {
        assert_eq!(n.daemon.status()["node"], n.name.as_str());
    }
    let prom = Prometheus::start(&hub);

    // 1. Two jobs on every node (the same ids on each: the node tells them apart).
    let mut want: Vec<(String, String)> = Vec::new();
    for n in &nodes {
        for id in ["j1", "j2"] {
            n.run(id, "sleep 0.3");
            want.push((n.name.clone(), id.into()));
        }
    }
    assert_exactly_once(&pg, &want, &nodes, "jobs of every node");
    let o = nodes[0]
        .daemon
        .pjw()
        .args(["report", "--central", "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let mut seen: Vec<(String, String)> = listed
        .iter()
        .map(|j| {
            (
                j["node"].as_str().unwrap().to_string(),
                j["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let mut sorted = want.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pjw report --central from node1");
    // One node's jobs, asked by name from another node.
    let o = nodes[0]
        .daemon
        .pjw()
        .args(["report", "--central", "--node", "node3"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        table.lines().filter(|l| l.contains("node3")).count(),
        2,
        "{table}"
    );
    assert!(!table.contains("node2"), "{table}");

    // The top jobs by CPU across the cluster, and a time range that holds none of them.
    let o = nodes[3]
        .daemon
        .pjw()
        .args([
            "report",
            "--central",
            "--top",
            "cpu",
            "--limit",
            "3",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let top: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let cpu: Vec<u64> = top
        .iter()
        .map(|j| j["cpu_user_usec"].as_u64().unwrap() + j["cpu_system_usec"].as_u64().unwrap())
        .collect();
    assert_eq!(cpu.len(), 3);
    assert!(cpu.windows(2).all(|w| w[0] >= w[1]), "{cpu:?}");
    let o = nodes[3]
        .daemon
        .pjw()
        .args([
            "report",
            "--central",
            "--since",
            "2020-01-01",
            "--until",
            "2020-01-02",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
    // --node, --until and --top ask the central store only.
    let o = nodes[3]
        .daemon
        .pjw()
        .args(["report", "--top", "cpu"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // 2. node2 is killed in the middle of a shipment, twice. Its jobs run long enough to be
    // sampled (1 s), so the shipment writes samples after the job's row, in one transaction.
    // (a) Before PostgreSQL commits: its transaction waits on the test's lock, SIGKILL.
    let lock = PgLock::take(&pg);
    nodes[1].run("crash-a", "sleep 1.5");
    want.push((names[1].clone(), "crash-a".into()));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || shipper_blocked(&pg, &names[1])),
        "node2's shipper never waited on the lock:\n{}",
        nodes[1].daemon.log()
    );
    nodes[1].daemon.kill9();
    lock.release();
    // PostgreSQL rolls the dead node's transaction back: nothing of crash-a yet.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        pg.psql("SELECT count(*) FROM pjw_jobs WHERE job_id = 'crash-a'")
            .trim(),
        "0"
    );
    restart(&mut nodes[1]);
    assert_exactly_once(&pg, &want, &nodes, "after a kill before the commit");

    // (b) After PostgreSQL committed, before the node marked the jobs shipped: the test holds
    // the node's SQLite store, so the mark waits; SIGKILL; the restarted node sends the batch
    // again, which the upsert absorbs.
    let lock = PgLock::take(&pg);
    nodes[1].run("crash-b", "sleep 1.5");
    want.push((names[1].clone(), "crash-b".into()));
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || {
        shipper_blocked(&pg, &names[1])
    }));
    assert!(TestDaemon::wait_for(Duration::from_secs(30), || nodes[1].ended("crash-b")));
    let db = rusqlite::Connection::open(nodes[1].daemon.dir().join("state/pjw.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    lock.release();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(30), || pg
            .psql("SELECT count(*) FROM pjw_jobs WHERE job_id = 'crash-b'")
            .trim()
            == "1"),
        "crash-b not committed:\n{}",
        nodes[1].daemon.log()
    );
    assert_eq!(
        unshipped(&nodes[1]),
        1,
        "crash-b was marked shipped despite the lock"
    );
    nodes[1].daemon.kill9();
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);
    restart(&mut nodes[1]);
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || unshipped(&nodes[1]) == 0),
        "the restarted node2 did not ship its spool:\n{}",
        nodes[1].daemon.log()
    );
    assert_exactly_once(
        &pg,
        &want,
        &nodes,
        "after a kill between the commit and the mark",
    );

    // 3. PostgreSQL stops for a minute; a job ends on every node meanwhile.
    pg.stop();
    let down = Instant::now();
    for n in &nodes {
        n.run("while-down", "sleep 0.2");
        want.push((n.name.clone(), "while-down".into()));
    }
    // While it is away: the central report says so on one line, the nodes keep their jobs ...
    let o = nodes[2]
        .daemon
        .pjw()
        .args(["report", "--central"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("central store") && err.trim().lines().count() == 1,
        "{err}"
    );
    for n in &nodes {
        assert!(TestDaemon::wait_for(Duration::from_secs(30), || n
            .daemon
            .log()
            .contains("finished jobs stay spooled")));
    }
    // ... and Prometheus, which needs no PostgreSQL, shows every node's metrics with its node
    // label: each target's pjw_node_info names the node whose namespace it scraped, and the
    // join of the usual idiom gives every series its node.
    let mut info = Vec::new();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || {
            info = prom.query("pjw_node_info");
            info.len() == NODES
        }),
        "Prometheus has {info:?}:\n{}",
        prom.log()
    );
    for (i, n) in nodes.iter().enumerate() {
        let instance = format!("{}:{METRICS_PORT}", node_addr(i + 1));
        let row = info
            .iter()
            .find(|(l, _)| l.get("instance") == Some(&instance))
            .unwrap_or_else(|| panic!("no pjw_node_info from {instance}: {info:?}"));
        assert_eq!(row.0.get("node"), Some(&n.name), "{row:?}");
    }
    let joined = prom.query("pjw_node_cpus * on(instance) group_left(node) pjw_node_info");
    let mut labelled: Vec<String> = joined
        .iter()
        .filter_map(|(l, v)| (v == "1").then(|| l.get("node").cloned()).flatten())
        .collect();
    labelled.sort();
    assert_eq!(labelled, names, "{joined:?}");
    let up = prom.query("up == 1");
    assert_eq!(up.len(), NODES, "{up:?}");

    // PostgreSQL comes back a minute after it stopped: nothing was lost.
    std::thread::sleep(Duration::from_secs(60).saturating_sub(down.elapsed()));
    pg.start_again();
    assert_exactly_once(&pg, &want, &nodes, "after PostgreSQL was away for a minute");
    for n in &nodes {
        assert_eq!(unshipped(n), 0, "{}", n.name);
        assert!(
            n.daemon.log().contains("central store reachable again"),
            "{}",
            n.name
        );
    }
    eprintln!(
        "cluster tier: {NODES} nodes, {} jobs, {:.0} s",
        want.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Start a node's daemon again (same namespace, state and cgroup parent).
fn restart(n: &mut Node) {
    n.daemon.restart();
    assert_eq!(n.daemon.status()["node"], n.name.as_str());
}

/// The last `n` lines of a log (CI keeps only a part of a failing test's output).
fn log_tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Jobs of a node's local store not yet in PostgreSQL.
fn unshipped(n: &Node) -> usize {
    let db = rusqlite::Connection::open_with_flags(
        n.daemon.dir().join("state/pjw.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT count(*) FROM job_summary WHERE shipped_at IS NULL",
        [],
        |r| r.get::<_, i64>(0),
    )
    .unwrap_or(-1) as usize
}
