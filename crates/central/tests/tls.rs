//! TLS to the central store against a real PostgreSQL server with its own certificate (from a
//! CA the test makes with openssl) and a password for TCP logins: `sslmode=verify-full` with
//! the site's CA connects, encrypted; a server with a certificate from another CA, or one made
//! out to another host, is refused before any password or row is sent; `verify-ca` takes the
//! latter; a wrong password is refused. Then a shipper sends a job over the verified link.

use std::time::Duration;

use pjw_central::{Central, CentralFilter, Endpoint, Retention, ShipConfig, Shipper};
use pjw_testkit::pg::{PgOptions, PgServer};
use pjw_testkit::tls::TestCa;
use pjw_testkit::{require, Component, TestDaemon};

fn url(port: u16, mode: &str, ca: &std::path::Path) -> String {
    format!(
        "postgres://pjw@127.0.0.1:{port}/postgres?sslmode={mode}&sslrootcert={}",
        ca.display()
    )
}

fn encrypted(c: &mut Central) -> bool {
    c.client()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn verified_tls_connects_and_a_wrong_certificate_is_refused() {
    require!(Component::Root, Component::Postgres);
    let site = TestCa::new("pjw-site-ca");
    let other = TestCa::new("pjw-other-ca");
    let good = site.issue("db", &["127.0.0.1", "localhost"]);
    let misnamed = site.issue("elsewhere", &["db.elsewhere.example"]);
    let forged = other.issue("forged", &["127.0.0.1", "localhost"]);
    let mut pg = PgServer::start_with(PgOptions {
        tls: Some((good.cert.clone(), good.key.clone())),
        password: Some("s3cret".into()),
        ..PgOptions::default()
    });
    let port = pg.port();
    let open = |u: &str, pw: Option<&str>| {
        Endpoint::new(u, pw).and_then(|ep| Central::open(&ep, &Retention::default()))
    };

    // The site's CA vouches for the server's name: connected, encrypted.
    let full = url(port, "verify-full", &site.cert());
    let mut c = open(&full, Some("s3cret")).expect("verify-full with the site's CA");
    assert!(encrypted(&mut c));
    drop(c);
    // The wrong password, or none, is refused by the server.
    for pw in [Some("guess"), None] {
        let e = open(&full, pw).unwrap_err().to_string();
        assert!(e.contains("password"), "{pw:?}: {e}");
    }
    // Trusting another CA only: the server is not believed.
    let e = open(&url(port, "verify-full", &other.cert()), Some("s3cret"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("certificate"), "{e}");

    // The server now shows a certificate of another CA (an impostor): refused.
    pg.set_tls(&forged.cert, &forged.key);
    for mode in ["verify-full", "verify-ca"] {
        let e = open(&url(port, mode, &site.cert()), Some("s3cret"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("certificate") && e.contains("UnknownIssuer"),
            "{mode}: {e}"
        );
    }
    // prefer/require without a CA encrypt but do not authenticate (libpq's meaning).
    let plain_require = format!("postgres://pjw@127.0.0.1:{port}/postgres?sslmode=require");
    assert!(encrypted(
        &mut open(&plain_require, Some("s3cret")).unwrap()
    ));

    // A certificate of the site's CA made out to another host: verify-full refuses, verify-ca
    // (the chain only) takes it.
    pg.set_tls(&misnamed.cert, &misnamed.key);
    let e = open(&full, Some("s3cret")).unwrap_err().to_string();
    assert!(e.contains("not valid for name"), "{e}");
    let mut c = open(&url(port, "verify-ca", &site.cert()), Some("s3cret")).unwrap();
    assert!(encrypted(&mut c));
    drop(c);

    // Back to the real certificate: a shipper sends a job over the verified link, with the
    // password it was given (the daemon reads it from the root-only file).
    pg.set_tls(&good.cert, &good.key);
    let dir = tempfile::tempdir().unwrap();
    let mut store = pjw_store::Store::open(dir.path()).unwrap();
    let seq = finished_job(&mut store);
    let shipper = Shipper::spawn(
        store.path().to_path_buf(),
        ShipConfig {
            url: full.clone(),
            password: Some("s3cret".into()),
            ship_samples: false,
            batch_size: 10,
            retry: Duration::from_millis(200),
            node: "tls-node".into(),
            retention: Retention::default(),
        },
    )
    .unwrap();
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || store
            .unshipped(10)
            .unwrap()
            .is_empty()),
        "not shipped over TLS:\n{}",
        pg.log()
    );
    shipper.stop();
    let mut c = open(&full, Some("s3cret")).unwrap();
    let jobs = c.jobs(&CentralFilter::default()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].node.as_str(), jobs[0].seq), ("tls-node", seq));
}

/// A finished job in a local store, ended a minute ago.
fn finished_job(store: &mut pjw_store::Store) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let rec = pjw_store::JobRecord {
        seq: 0,
        job_id: "tls1".into(),
        name: "tls1".into(),
        uid: 1001,
        gid: 1001,
        user: "alice".into(),
        ncpus: 1,
        cpus: pjw_core::CpuSet::parse_list("0").unwrap(),
        mems: pjw_core::CpuSet::parse_list("0").unwrap(),
        mem_limit: None,
        pid: Some(1),
        pid_start: Some(1),
        cgroup: "job-tls1".into(),
        argv: vec!["true".into()],
        state: pjw_store::StoredState::Queued,
        submitted_ms: now - 120_000,
        started_ms: None,
        ended_ms: None,
        end_reason: None,
        priority: 10,
        placement: pjw_core::sched::Placement::Any,
        exclusive: false,
        role: pjw_store::StoredRole::Primary,
    };
    let seq = store.insert_job(&rec).unwrap();
    store
        .set_starting(
            seq,
            &rec.cpus,
            &rec.mems,
            pjw_store::StoredRole::Primary,
            now - 110_000,
        )
        .unwrap();
    store.set_running(seq).unwrap();
    let s = pjw_store::JobSummary::new(seq, "tls-node", pjw_store::EndClass::Completed);
    store.finish_job(now - 60_000, "exited", &s).unwrap();
    seq
}
