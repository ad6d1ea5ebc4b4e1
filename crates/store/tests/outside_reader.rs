//! The daemon's store survives a reader from outside — an admin's `sqlite3` on the database, a
//! test's read-only connection — after the daemon opened more connections of its own (the
//! profile writer's, the central shipper's).
//!
//! Found as a daemon killed by SIGBUS in the cluster tier: opening another connection closed
//! plain descriptors of `pjw.db` and `pjw.db-shm` (the permission check), and closing any
//! descriptor of a file drops every POSIX lock the process holds on it — SQLite's among them.
//! Each outside reader then found no lock on the `-shm` file's dead-man byte, took itself for
//! the first user, truncated the file the daemon had mapped and rebuilt it: a daemon write in
//! between touched a page past the end. The test asserts the lock itself (the crash is a race).

use std::path::Path;
use std::process::Command;

use pjw_store::Store;

/// SQLite's dead-man-switch byte in a `-shm` file (unix VFS: `UNIX_SHM_DMS`, 120 + 8).
const SHM_DMS: i64 = 128;

/// Whether another process holds a lock on the dead-man byte of `shm`: asked from a forked
/// child (F_GETLK never reports the asking process's own locks).
fn dead_man_held_by_us(shm: &Path) -> bool {
    let path = std::ffi::CString::new(shm.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the child calls only async-signal-safe functions (open, fcntl, _exit) before it
    // exits; the parent waits for it.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: see above; `path` is a valid C string, `lock` plain data.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDWR);
                let mut lock: libc::flock = std::mem::zeroed();
                lock.l_type = libc::F_WRLCK as i16;
                lock.l_whence = libc::SEEK_SET as i16;
                lock.l_start = SHM_DMS;
                lock.l_len = 1;
                let held = fd >= 0
                    && libc::fcntl(fd, libc::F_GETLK, &mut lock) == 0
                    && lock.l_type != libc::F_UNLCK as i16;
                libc::_exit(if held { 0 } else { 1 });
            }
        }
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        child => {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
    }
}

#[test]
fn a_reader_from_outside_after_a_second_connection_leaves_the_daemons_store_working() {
    // Run again as the outside reader (a process of its own), by the lines below.
    if let Some(db) = std::env::var_os("PJW_OUTSIDE_READER_DB") {
        return outside_reader(Path::new(&db));
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pjw.db");
    let shm = dir.path().join("pjw.db-shm");
    let mut daemon = Store::open_file(&db).unwrap();
    daemon.next_job_number().unwrap();
    assert!(
        dead_man_held_by_us(&shm),
        "SQLite's lock is there to begin with"
    );
    // The profile writer's and the shipper's connections.
    let _writer = Store::open_file(&db).unwrap();
    let _shipper = Store::open_file(&db).unwrap();
    assert!(
        dead_man_held_by_us(&shm),
        "opening more connections dropped this process's lock on the -shm file"
    );
    // An admin's reader, in another process: this test again, as the reader.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_reader_from_outside_after_a_second_connection_leaves_the_daemons_store_working",
            "--quiet",
        ])
        .env("PJW_OUTSIDE_READER_DB", &db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The daemon's next writes (a SIGBUS here, before the fix, when they met a truncation).
    for _ in 0..3 {
        daemon.next_job_number().unwrap();
    }
}

/// The outside reader: a read-only connection that counts the schema's tables.
fn outside_reader(db: &Path) {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert!(n > 0);
}
