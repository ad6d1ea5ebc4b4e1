//! The scrub's tests: listings, the rule applied, the /dev/shm walk on temp trees.

use super::shm::walk_shm_within;
use super::*;
use pjw_core::ipc_scrub::MAX_DEPTH;
use std::os::unix::fs::symlink;

/// A fake /proc and /dev/mqueue: the listing reads both; a queue is removed through the
/// directory's descriptor, and only when the re-check still allows it.
#[test]
fn lists_a_fake_root_and_removes_only_the_owners_queues() {
    let t = tempfile::tempdir().unwrap();
    let proc_root = t.path().join("proc");
    let shm = t.path().join("shm");
    let mq = t.path().join("mqueue");
    std::fs::create_dir_all(proc_root.join("sysvipc")).unwrap();
    std::fs::create_dir_all(&shm).unwrap();
    std::fs::write(
            proc_root.join("sysvipc/sem"),
            "key semid perms nsems uid gid cuid cgid otime ctime\n0 7 600 1 4242 4242 4242 4242 0 120\n",
        )
        .unwrap();
    std::fs::create_dir(&mq).unwrap();
    std::fs::write(mq.join("queue"), "").unwrap();
    let owner = owner();
    chown(&mq.join("queue"), owner);
    let l = read_listing(&proc_root, &mq);
    assert_eq!(l.mqueues.len(), 1);
    assert_eq!(
        (l.mqueues[0].name.as_str(), l.mqueues[0].uid),
        ("queue", owner)
    );
    // No mqueue file system mounted: nothing listed, no error.
    assert!(read_listing(&proc_root, &t.path().join("none"))
        .mqueues
        .is_empty());
    assert_eq!(l.sysv.len(), 1);
    assert_eq!((l.sysv[0].id, l.sysv[0].uid), (7, 4242));
    let job = Ended {
        uid: owner,
        since: 0,
        until: u64::MAX,
    };
    // Another owner in the plan's name: the re-check keeps the queue.
    let other = Ended {
        uid: owner + 1,
        ..job
    };
    let plan = Plan {
        sysv: vec![],
        mqueues: vec!["queue".into()],
    };
    assert_eq!(apply(&plan, &mq, &other).mqueues, 0);
    assert!(mq.join("queue").exists());
    let done = scrub(&proc_root, &shm, &mq, &job, &[]);
    assert_eq!((done.mqueues, done.errors.len()), (1, 0), "{done:?}");
    assert!(!mq.join("queue").exists());
}

/// The job's owner (as root, the tests' machines: a uid no account uses; root's entries
/// are never a job's).
use std::os::unix::fs::PermissionsExt;

fn owner() -> u32 {
    let me = rustix::process::getuid().as_raw();
    if me == 0 {
        4243
    } else {
        me
    }
}

fn chown(p: &Path, uid: u32) {
    if rustix::process::getuid().as_raw() == 0 {
        std::os::unix::fs::lchown(p, Some(uid), None).unwrap();
    }
}

/// Issue 25, item 8: every shape the owner leaves in /dev/shm goes — files at the top and
/// in directories (the owner's or another user's), directories once empty, links (never
/// their targets), a file held open elsewhere (emptied, so its pages are freed), a tree
/// deeper than the walk holds descriptors for — and nothing of anyone else's.
#[test]
fn the_walk_removes_every_shape_the_owner_left_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let shm = t.path().join("shm");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&shm).unwrap();
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::write(outside.join("file"), "keep").unwrap();
    let owner = owner();
    let me = rustix::process::getuid().as_raw();
    let other = if me == 0 { 4244 } else { me };
    let mine = |p: &Path| chown(p, owner);
    // Files and links at the top.
    std::fs::write(shm.join("left"), "x").unwrap();
    symlink(outside.join("file"), shm.join("link")).unwrap();
    symlink(outside.join("dir"), shm.join("dirlink")).unwrap();
    // A directory tree of the owner's.
    std::fs::create_dir_all(shm.join("adir/sub")).unwrap();
    std::fs::write(shm.join("adir/inner"), "x").unwrap();
    std::fs::write(shm.join("adir/sub/deep"), "x").unwrap();
    // The owner's file in another user's world-writable directory.
    std::fs::create_dir(shm.join("others")).unwrap();
    std::fs::write(shm.join("others/mine"), "x").unwrap();
    std::fs::write(shm.join("others/theirs"), "x").unwrap();
    std::fs::write(shm.join("theirs"), "x").unwrap();
    // A file held open (and written) from outside: emptied, then removed.
    let held_path = shm.join("held");
    std::fs::write(&held_path, vec![7u8; 1 << 16]).unwrap();
    let held = std::fs::File::open(&held_path).unwrap();
    // A chain deeper than the walk holds descriptors for, a file at its bottom.
    let mut deep = shm.join("chain");
    let mut chain = Vec::new();
    for _ in 0..MAX_DEPTH + 6 {
        chain.push(deep.clone());
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    chain.push(deep.clone());
    std::fs::write(deep.join("bottom"), "x").unwrap();
    for n in [
        "left",
        "link",
        "dirlink",
        "adir",
        "adir/sub",
        "adir/inner",
        "adir/sub/deep",
        "others/mine",
        "held",
    ] {
        mine(&shm.join(n));
    }
    for d in &chain {
        mine(d);
    }
    mine(&deep.join("bottom"));
    for n in ["others", "others/theirs", "theirs"] {
        chown(&shm.join(n), other);
    }
    // World-writable, as /tmp is: the only kind of another's directory the owner could
    // have written in (a private one is not entered).
    std::fs::set_permissions(shm.join("others"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let job = Ended {
        uid: owner,
        since: 0,
        until: u64::MAX,
    };
    let w = walk_shm(&shm, &job);
    assert!(w.errors.is_empty(), "{w:?}");
    let mut left: Vec<String> = std::fs::read_dir(&shm)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    if me == 0 {
        assert_eq!(left, ["others", "theirs"], "{w:?}");
        let inside: Vec<String> = std::fs::read_dir(shm.join("others"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(inside, ["theirs"]);
    } else {
        // Not root: every entry is the owner's.
        assert!(left.is_empty(), "{left:?}");
    }
    // Targets of links untouched; the held file's pages are gone.
    assert_eq!(
        std::fs::read_to_string(outside.join("file")).unwrap(),
        "keep"
    );
    assert!(outside.join("dir").is_dir());
    assert_eq!(
        held.metadata().unwrap().len(),
        0,
        "the held file was not emptied"
    );
    // Another owner's job removes nothing.
    std::fs::write(shm.join("again"), "x").unwrap();
    mine(&shm.join("again"));
    let w = walk_shm(
        &shm,
        &Ended {
            uid: owner + 7,
            ..job
        },
    );
    assert_eq!(w.removed, 0, "{w:?}");
    assert!(shm.join("again").exists());
}
/// Issue 25, N4: a FUSE mount in /dev/shm whose server never answers (a user's
/// `fusermount`) is never entered: the walk asks /dev/shm's file system only (a `stat` of
/// the mount point once hung the scrub's thread for good), finishes, and removes the rest.
/// Root only (the mount); the walk runs on a thread of its own so a regression fails in
/// 30 s instead of hanging the test.
#[test]
fn a_fuse_mount_that_never_answers_is_not_entered() {
    if rustix::process::getuid().as_raw() != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse to mount FUSE");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let shm = t.path().join("shm");
    std::fs::create_dir_all(shm.join("mnt")).unwrap();
    std::fs::write(shm.join("left"), "x").unwrap();
    std::fs::create_dir_all(shm.join("adir")).unwrap();
    std::fs::write(shm.join("adir/inner"), "x").unwrap();
    for n in ["mnt", "left", "adir", "adir/inner"] {
        chown(&shm.join(n), owner());
    }
    let fuse = pjw_testkit::fuse::Unanswered::mount(&shm.join("mnt"), owner(), owner())
        .expect("mount FUSE");
    let job = Ended {
        uid: owner(),
        since: 0,
        until: u64::MAX,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let root = shm.clone();
    std::thread::spawn(move || {
        let _ = tx.send(walk_shm(&root, &job));
    });
    let w = rx.recv_timeout(std::time::Duration::from_secs(30));
    let attached = fuse.attached();
    drop(fuse);
    let w = w.expect("the walk hung on the FUSE mount");
    assert!(attached, "the mount went away by itself");
    assert!(
        !shm.join("left").exists() && !shm.join("adir").exists(),
        "{w:?}"
    );
}
/// Issue 25, N5: another user's private tree (mode 0700) is never entered, and a tree open
/// to all that is bigger than the bound per top entry is cut short and said, while the
/// owner's own leftovers — looked at first — are removed whatever the other trees hold.
#[test]
fn a_planted_tree_neither_uses_up_the_budget_nor_is_walked_when_private() {
    let t = tempfile::tempdir().unwrap();
    let shm = t.path().join("shm");
    std::fs::create_dir_all(shm.join("private/sub")).unwrap();
    std::fs::create_dir_all(shm.join("open")).unwrap();
    for i in 0..40 {
        std::fs::write(shm.join(format!("private/sub/f{i}")), "x").unwrap();
        std::fs::write(shm.join(format!("open/f{i}")), "x").unwrap();
    }
    std::fs::write(shm.join("mine"), "x").unwrap();
    std::fs::create_dir(shm.join("mydir")).unwrap();
    std::fs::write(shm.join("mydir/inner"), "x").unwrap();
    let me = rustix::process::getuid().as_raw();
    let other = if me == 0 { 4244 } else { me };
    for n in ["private", "private/sub", "open"] {
        chown(&shm.join(n), other);
    }
    std::fs::set_permissions(shm.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(shm.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    for n in ["mine", "mydir", "mydir/inner"] {
        chown(&shm.join(n), owner());
    }
    let job = Ended {
        uid: owner(),
        since: 0,
        until: u64::MAX,
    };
    // 50 entries in all, 10 below one top entry.
    let w = walk_shm_within(&shm, &job, 50, 10);
    assert!(
        !shm.join("mine").exists() && !shm.join("mydir").exists(),
        "{w:?}"
    );
    if me == 0 {
        // Not entered: none of its 41 entries counted; the open one cut at 10.
        assert!(w.seen < 50, "{w:?}");
        assert_eq!(w.cut.len(), 1, "{w:?}");
        assert!(w.cut[0].0.contains("open") && w.cut[0].1 == other, "{w:?}");
    }
}
/// Issue 25, N6: the owner's directories deeper than the walk holds descriptors for, but
/// older than the job (a login session's data), are not moved up out of their tree: the
/// tree is left as it was, with nothing relocated to the top.
#[test]
fn an_old_deep_tree_is_not_moved_out_of_its_place() {
    let t = tempfile::tempdir().unwrap();
    let shm = t.path().join("shm");
    let mut deep = shm.join("old");
    let mut chain = Vec::new();
    for _ in 0..MAX_DEPTH + 6 {
        chain.push(deep.clone());
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    chain.push(deep.clone());
    for d in &chain {
        chown(d, owner());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A job that started after the tree was made.
    let job = Ended {
        uid: owner(),
        since: now + 10,
        until: now + 20,
    };
    let w = walk_shm(&shm, &job);
    let top: Vec<String> = std::fs::read_dir(&shm)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(top, ["old"], "{w:?}");
    assert!(deep.is_dir(), "the bottom of the tree moved: {w:?}");
}
