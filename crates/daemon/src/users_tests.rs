//! A stalled user lookup holds up only the request that needs it: the engine answers other
//! clients meanwhile, and the stalled one gets a clear error after the timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use pjw_proto::{Placement, Response, RunRequest};
use tokio::sync::{mpsc, oneshot};

use super::{Resolver, UserLookup};
use crate::engine::{Cred, Event};
use crate::test_support::TestEngine;

/// The uid whose lookup stalls.
const STALLED: u32 = 2000;

/// A user database where looking up uid [`STALLED`] blocks until the test releases it; it says
/// when such a lookup has begun.
struct StallingLookup {
    entered: mpsc::UnboundedSender<()>,
    release: Mutex<std_mpsc::Receiver<()>>,
    calls: AtomicUsize,
}

impl UserLookup for StallingLookup {
    fn user_name(&self, uid: u32) -> Option<String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if uid == STALLED {
            let _ = self.entered.send(());
            let _ = self
                .release
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv();
        }
        Some(format!("user{uid}"))
    }
    fn user(&self, _name: &str) -> Option<(u32, u32)> {
        None
    }
    fn group_gid(&self, _name: &str) -> Option<u32> {
        None
    }
    fn group_members(&self, _gid: u32) -> Vec<String> {
        vec![]
    }
}

struct Stall {
    lookup: Arc<StallingLookup>,
    entered: mpsc::UnboundedReceiver<()>,
    release: std_mpsc::Sender<()>,
}

fn stall() -> Stall {
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let (release, release_rx) = std_mpsc::channel();
    Stall {
        lookup: Arc::new(StallingLookup {
            entered: entered_tx,
            release: Mutex::new(release_rx),
            calls: AtomicUsize::new(0),
        }),
        entered,
        release,
    }
}

fn cred(pid: u32, uid: u32) -> Cred {
    Cred { pid, uid, gid: uid }
}

#[tokio::test(flavor = "current_thread")]
async fn other_clients_are_answered_while_a_user_lookup_is_stalled() {
    let mut t = TestEngine::new();
    let mut s = stall();
    let users = Resolver::fixed(
        s.lookup.clone(),
        Duration::from_secs(3600),
        None,
        t.proc_root(),
    );

    // Client A's request needs the stalled lookup: its connection task waits on it.
    let a_users = users.clone();
    let a = tokio::spawn(async move { a_users.who(&cred(4242, STALLED), None).await });
    s.entered.recv().await.expect("A's lookup began");

    // Client B asks for the status and launches a job; both are answered.
    let mut order = Vec::new();
    let (rtx, rrx) = oneshot::channel();
    t.engine.handle(Event::Status { reply: rtx });
    assert!(matches!(rrx.await, Ok(Response::Status(_))));
    order.push(if a.is_finished() {
        "status after A"
    } else {
        "status while A waits"
    });

    let b = cred(std::process::id(), 1000);
    t.fake_process(b.pid, b.uid);
    let who = users.who(&b, None).await.expect("B's lookup");
    assert_eq!(who.name, "user1000");
    let (reply, mut answers) = mpsc::unbounded_channel();
    t.engine.handle(Event::Submit {
        conn: 2,
        cred: b,
        who,
        req: RunRequest {
            gpus: 0,
            bind: None,
            tasks: None,
            time_limit_s: None,
            cpus: 1,
            mem: None,
            job_id: Some("b1".into()),
            name: None,
            argv: vec!["true".into()],
            priority: None,
            placement: Placement::Any,
            exclusive: false,
            user: None,
            wlm: None,
            tmp: None,
            io_weight: None,
            io_max: vec![],
        },
        reply,
    });
    let started = answers.recv().await.expect("an answer for B");
    assert!(
        matches!(&started, Response::Started { job, .. } if job == "b1"),
        "{started:?}"
    );
    order.push(if a.is_finished() {
        "launch after A"
    } else {
        "launch while A waits"
    });

    // Now A's lookup answers, and A is served.
    s.release.send(()).expect("release A");
    let who = a.await.expect("A's task").expect("A's lookup");
    assert_eq!(who.name, format!("user{STALLED}"));
    order.push("A answered");

    assert_eq!(
        order,
        ["status while A waits", "launch while A waits", "A answered"]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_lookup_that_does_not_answer_is_a_clear_error_for_that_request_only() {
    let t = TestEngine::new();
    let mut s = stall();
    let users = Resolver::fixed(
        s.lookup.clone(),
        Duration::from_millis(50),
        None,
        t.proc_root(),
    );

    let e = users
        .who(&cred(4242, STALLED), None)
        .await
        .expect_err("the stalled lookup gives up");
    assert!(
        e.contains("the user database did not answer within 0.05 s (the name of uid 2000)"),
        "{e}"
    );
    s.entered.recv().await.expect("the lookup had begun");
    // Another caller is answered (with a timeout no busy machine reaches: this is not about
    // time), and answers are cached: a second ask makes no lookup.
    let users = Resolver::fixed(
        s.lookup.clone(),
        Duration::from_secs(3600),
        None,
        t.proc_root(),
    );
    assert_eq!(
        users.who(&cred(7, 1000), None).await.unwrap().name,
        "user1000"
    );
    let calls = s.lookup.calls.load(Ordering::SeqCst);
    assert_eq!(
        users.who(&cred(7, 1000), None).await.unwrap().name,
        "user1000"
    );
    assert_eq!(s.lookup.calls.load(Ordering::SeqCst), calls);
    // Let the stalled thread finish so the runtime can stop.
    s.release.send(()).expect("release");
}

#[tokio::test(flavor = "current_thread")]
async fn the_admin_group_is_found_by_gid_and_root_needs_no_group() {
    let s = stall();
    let users = Resolver::fixed(
        s.lookup.clone(),
        Duration::from_secs(5),
        Some("4242".into()),
        "/nonexistent".into(),
    );
    assert!(users.who(&cred(7, 4242), None).await.unwrap().admin);
    assert!(!users.who(&cred(7, 4243), None).await.unwrap().admin);
    assert!(!users.who(&cred(7, 0), None).await.unwrap().admin);
}

/// A user database that knows nobody, and counts its calls.
#[derive(Default)]
struct Nobody(AtomicUsize);

impl UserLookup for Nobody {
    fn user_name(&self, uid: u32) -> Option<String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Some(format!("user{uid}"))
    }
    fn user(&self, _name: &str) -> Option<(u32, u32)> {
        self.0.fetch_add(1, Ordering::SeqCst);
        None
    }
    fn group_gid(&self, _name: &str) -> Option<u32> {
        None
    }
    fn group_members(&self, _gid: u32) -> Vec<String> {
        vec![]
    }
}

#[tokio::test(flavor = "current_thread")]
async fn names_a_caller_sends_cannot_grow_the_cache_without_bound() {
    let lookup = Arc::new(Nobody::default());
    let r = Resolver::fixed(
        lookup.clone(),
        Duration::from_secs(5),
        None,
        std::path::PathBuf::from("/nonexistent"),
    );
    let cred = Cred {
        pid: 1,
        uid: 1000,
        gid: 1000,
    };
    for i in 0..super::CACHE_MAX + 100 {
        let who = r.who(&cred, Some(&format!("u{i}"))).await.unwrap();
        assert_eq!(who.named, None);
    }
    assert_eq!(
        r.cache().len(),
        super::CACHE_MAX,
        "the cache is full, not over"
    );
    // The caller's own name is still served from the cache: one lookup for it in all.
    let before = lookup.0.load(Ordering::SeqCst);
    r.who(&cred, None).await.unwrap();
    assert_eq!(
        lookup.0.load(Ordering::SeqCst),
        before,
        "the caller's name came from the cache"
    );
    // A name not kept is looked up again, and answered.
    let again = r.who(&cred, Some("u-new")).await.unwrap();
    assert_eq!(again.named, None);
    assert_eq!(lookup.0.load(Ordering::SeqCst), before + 1);
}

/// Review F5, as the attack: a user names ever new megabyte-long "users" (`run --user`,
/// `report --user`, `login`), each looked up before the engine refuses it. None is looked up
/// or kept: the cache's 4,096 places cannot hold gigabytes. A real name still is.
#[tokio::test(flavor = "current_thread")]
async fn names_no_user_database_holds_are_not_looked_up_or_kept() {
    let lookup = Arc::new(Nobody::default());
    let r = Resolver::fixed(
        lookup.clone(),
        Duration::from_secs(5),
        None,
        std::path::PathBuf::from("/nonexistent"),
    );
    let cred = Cred {
        pid: 1,
        uid: 1000,
        gid: 1000,
    };
    r.who(&cred, None).await.unwrap();
    let before = lookup.0.load(Ordering::SeqCst);
    let cached = r.cache().len();
    let long = "x".repeat(1 << 20);
    for (i, name) in [
        format!("{long}1"),
        format!("{long}2"),
        "x".repeat(super::USER_NAME_MAX + 1),
        String::new(),
        "a\nb".into(),
        "a:b".into(),
    ]
    .iter()
    .enumerate()
    {
        let who = r.who(&cred, Some(name)).await.unwrap();
        assert_eq!(who.named, None, "name {i}");
    }
    assert_eq!(lookup.0.load(Ordering::SeqCst), before, "nothing looked up");
    assert_eq!(r.cache().len(), cached, "nothing kept");
    // The check ran beside a lookup that does happen: a name of the longest length is asked.
    r.who(&cred, Some(&"x".repeat(super::USER_NAME_MAX)))
        .await
        .unwrap();
    assert_eq!(lookup.0.load(Ordering::SeqCst), before + 1);
}

/// Issue 25, item 4: `[profile] admin_group` is live on reload in the connection layer too,
/// where admin rights are decided (the resolver follows the engine's published rules): a
/// removed admin is one no more at the next request, a new group's member is one at once.
#[tokio::test(flavor = "current_thread")]
async fn the_admin_group_follows_a_reload_in_the_connection_layer() {
    use crate::reload::ReloadSource;
    let mut te = TestEngine::new();
    let r = Resolver::new(
        Arc::new(Nobody::default()),
        Duration::from_secs(5),
        te.engine.conn_rules(),
        std::path::PathBuf::from("/nonexistent"),
    );
    let admin = Cred {
        pid: 1,
        uid: 4343,
        gid: 4343,
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pjw.toml");
    let base = format!(
        "[paths]\nproc = {:?}\ndev = {:?}\n[job]\ntmp_root = {:?}\n[memory]\ngovernor = false\n",
        te.proc_root(),
        te.engine.config().dev_root,
        te.engine.config().tmp_root,
    );
    let source = ReloadSource {
        path: Some(file.clone()),
        overrides: Default::default(),
    };
    let is_admin = |who: crate::engine::Who| who.admin;
    assert!(
        !is_admin(r.who(&admin, None).await.unwrap()),
        "admin with no group"
    );
    for (group, want) in [("4343", true), ("4444", false), ("4343", true)] {
        std::fs::write(
            &file,
            format!("{base}[profile]\nenabled = false\nadmin_group = \"{group}\"\n"),
        )
        .unwrap();
        assert!(te.engine.reload(&source), "reload to group {group}");
        assert_eq!(
            is_admin(r.who(&admin, None).await.unwrap()),
            want,
            "after a reload to admin_group = {group}"
        );
    }
    // Removed altogether: no admin rights left.
    std::fs::write(&file, format!("{base}[profile]\nenabled = false\n")).unwrap();
    assert!(te.engine.reload(&source));
    assert!(
        !is_admin(r.who(&admin, None).await.unwrap()),
        "admin after removal"
    );
}
