use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pjw_cgroup::fake_tree::FakeSpec;
use pjw_cgroup::{Backend, Driver, Mode, ParentSpec};
use tokio::sync::mpsc;

use super::*;
use crate::config::Overrides;
use crate::reload::ReloadSource;
use crate::test_support::TestEngine;

fn cfg(text: &str) -> Config {
    Config::parse("pjw.toml", text, &Overrides::default()).unwrap()
}

#[test]
fn settings_follow_the_config() {
    let s = Settings::of(&cfg(""));
    assert_eq!(
        (s.governor_ms, s.sample_ms, s.sweep_ms, s.metrics),
        (Some(1000), Some(10_000), Some(1000), None)
    );
    let s = Settings::of(&cfg(
        "[memory]\ngovernor = false\n[profile]\nenabled = false\n[adopt]\nsweep_interval_ms = 0\n",
    ));
    // The sampler runs with profiles off too: status answers from its samples; the
    // governor's tick with the governor off too: it counts the jobs' OOM kills for status.
    assert_eq!(
        (s.governor_ms, s.sample_ms, s.sweep_ms),
        (Some(1000), Some(10_000), None)
    );
    // No variable names a job: nothing to sweep for.
    assert_eq!(Settings::of(&cfg("[adopt]\nenv = []\n")).sweep_ms, None);
    let s = Settings::of(&cfg(
        "[memory]\ninterval_ms = 250\n[profile]\ninterval = \"2s\"\n[metrics]\nlisten = \"127.0.0.1:9810\"\n",
    ));
    assert_eq!((s.governor_ms, s.sample_ms), (Some(250), Some(2000)));
    assert_eq!(s.metrics, Some("127.0.0.1:9810".parse().unwrap()));
    // Thread balancing ticks whatever [job] bind says (a job may ask with --bind).
    assert_eq!(Settings::of(&cfg("")).bind_ms, Some(1000));
    assert_eq!(
        Settings::of(&cfg("[job]\nbind_interval_ms = 300\n")).bind_ms,
        Some(300)
    );
}

/// Tasks on a channel of their own, serving metrics from a driver on a fake tree.
fn tasks() -> (
    Tasks,
    mpsc::UnboundedReceiver<Event>,
    tempfile::TempDir,
    pjw_cgroup::fake_tree::FakeMachine,
) {
    let dir = tempfile::tempdir().unwrap();
    let machine = FakeSpec::new(Mode::Unified).build(dir.path()).unwrap();
    let driver = Driver::detect_with(
        &machine.proc_root,
        &ParentSpec::parse("/pjw").unwrap(),
        Backend::FakeTree,
    )
    .unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let t = Tasks::new(tx, Arc::new(Metrics::new()), Arc::new(driver));
    (t, rx, dir, machine)
}

/// Events of the governor's timer that arrive within `within`.
async fn govern_ticks(rx: &mut mpsc::UnboundedReceiver<Event>, within: Duration) -> usize {
    let end = tokio::time::Instant::now() + within;
    let mut n = 0;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, rx.recv()).await {
        if matches!(ev, Event::Govern) {
            n += 1;
        }
    }
    n
}

/// On tokio's paused clock: time moves only when every task waits, so the counts are exact.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_timer_restarts_with_its_new_interval_and_stops_when_off() {
    let (mut t, mut rx, _dir, _m) = tasks();
    let mut want = Settings::of(&cfg(
        "[memory]\ninterval_ms = 60000\n[profile]\nenabled = false\n[adopt]\nenv = []\n",
    ));
    t.set_timers(&want, false);
    // The first tick comes at once, the next in a minute.
    assert_eq!(govern_ticks(&mut rx, Duration::from_millis(300)).await, 1);
    want.governor_ms = Some(20);
    t.set_timers(&want, true);
    assert_eq!(t.running().governor_ms, Some(20));
    // At once, then every 20 ms: 0, 20, …, 480 ms.
    assert_eq!(govern_ticks(&mut rx, Duration::from_millis(490)).await, 25);
    want.governor_ms = None;
    t.set_timers(&want, true);
    assert_eq!(t.running().governor_ms, None);
    // What the old timer sent before it stopped may still be queued.
    while rx.try_recv().is_ok() {}
    assert_eq!(govern_ticks(&mut rx, Duration::from_millis(200)).await, 0);
}

async fn answers(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_ok()
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A port nothing listens on (bound once and let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "current_thread")]
async fn the_metrics_listener_moves_and_a_failed_bind_keeps_the_old_one() {
    let (mut t, _rx, _dir, _m) = tasks();
    let first = loopback(free_port());
    t.set_metrics(Some(first)).await;
    assert_eq!(t.metrics_addr(), Some(first));
    assert!(answers(first).await);

    // Taken by someone else: the old listener stays, and keeps answering.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    t.set_metrics(Some(busy)).await;
    assert_eq!(t.running().metrics, Some(first));
    assert!(answers(first).await);

    // A free address: served there, the old port closed.
    let second = loopback(free_port());
    t.set_metrics(Some(second)).await;
    assert_eq!(t.metrics_addr(), Some(second));
    assert!(answers(second).await);
    assert!(!answers(first).await, "the old port still answers");

    // The same port on another address: the old listener gives it up first.
    let port = free_port();
    t.set_metrics(Some(SocketAddr::from(([0, 0, 0, 0], port))))
        .await;
    assert!(answers(loopback(port)).await);
    t.set_metrics(Some(loopback(port))).await;
    assert_eq!(t.metrics_addr(), Some(loopback(port)));
    assert!(answers(loopback(port)).await);

    // Off.
    t.set_metrics(None).await;
    assert_eq!(t.metrics_addr(), None);
    assert!(!answers(loopback(port)).await);
    drop(taken);
}

/// The whole reload on an engine: the file changes the sweep's interval, turns metrics on and
/// adds a central store; the engine takes the new config and the tasks follow it.
#[tokio::test(flavor = "current_thread")]
async fn a_reload_restarts_the_tasks_whose_keys_changed() {
    let mut te = TestEngine::new();
    let (mut t, _rx, _dir, _m) = tasks();
    t.start(&mut te.engine, None);
    let before = t.running();
    assert_eq!(
        (before.governor_ms, before.sample_ms),
        (Some(1000), Some(10_000))
    );
    assert_eq!(before.sweep_ms, Some(1000));
    assert_eq!(before.bind_ms, Some(1000));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pjw.toml");
    let base = format!(
        "[paths]\nproc = {:?}\ndev = {:?}\n[job]\nbind_interval_ms = 400\ntmp_root = {:?}\n[memory]\ngovernor = false\n[profile]\nenabled = false\n",
        te.proc_root(),
        te.engine.config().dev_root,
        te.engine.config().tmp_root,
    );
    let port = free_port();
    std::fs::write(
        &file,
        format!(
            "{base}[adopt]\nsweep_interval_ms = 50\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n[central]\nurl = \"postgres://pjw@127.0.0.1:1/pjw\"\nretry_secs = 60\n"
        ),
    )
    .unwrap();
    let source = ReloadSource {
        path: Some(file.clone()),
        overrides: Overrides::default(),
    };
    assert!(te.engine.reload(&source));
    t.apply(&mut te.engine).await;
    let after = t.running();
    assert_eq!(after.sweep_ms, Some(50));
    assert_eq!(after.bind_ms, Some(400));
    assert_eq!(after.metrics, Some(loopback(port)));
    assert!(answers(loopback(port)).await);
    assert!(after.central.is_some());
    assert!(
        te.engine.replace_shipper(None).is_some(),
        "no shipper started"
    );

    // An invalid file changes nothing, the tasks neither.
    std::fs::write(&file, format!("{base}vcpus = 0\n")).unwrap();
    assert!(!te.engine.reload(&source));
    assert_eq!(t.running().sweep_ms, Some(50));
}
