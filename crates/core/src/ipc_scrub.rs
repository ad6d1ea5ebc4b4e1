//! What a job left in the host's shared memory and SysV IPC, and which of it to remove at the
//! job's end (the precedent: systemd-logind's `RemoveIPC=`, which removes a user's IPC objects
//! when their last session ends).
//!
//! The rule, for a job of owner `uid` that ended at `until` and started at `since` (seconds):
//! nothing when `uid` is root's (0) or a system user's (below `min_uid`, as logind spares
//! system users), or the owner has another live job on the node; else every
//! object owned by `uid` whose change time lies within the job's life — SysV semaphore sets and
//! message queues, SysV shared memory segments nobody has attached (`nattch == 0`), POSIX
//! message queues (entries of /dev/mqueue), and in /dev/shm, at any depth, every entry of
//! every shape ([`entry_removable`], [`dir_removable`]):
//! - a regular file: emptied first when it has no other name (so pages a process outside the
//!   job still holds open or mapped are freed, not left charged to the ended job), then
//!   removed;
//! - a symbolic link: the link itself, never its target (nothing is ever opened through one);
//! - a FIFO or socket: the entry;
//! - a directory: walked, whoever owns it (the owner's files may sit in another user's
//!   world-writable directory), on /dev/shm's own file system only, opened relative to its
//!   parent with `O_NOFOLLOW`, so no link leads the walk anywhere; then removed itself when it
//!   is the owner's, changed within the job's life and left empty (an entry of someone else's,
//!   or one older than the job, keeps it);
//! - a tree deeper than the walk holds descriptors for ([`MAX_DEPTH`] levels): a directory of
//!   the owner's found there is moved up to the top of /dev/shm (`renameat2`, never over an
//!   existing name) and walked from there, so no depth hides anything; one of another user's
//!   is left.
//!
//! Objects older than the job (a login session's) or newer than its end (the next job's) are
//! left. Pure: the listing and the walk are the daemon's adapter's.
//!
//! ```
//! use pjw_core::ipc_scrub::{entry_removable, plan, Ended, Listing, ShmFile};
//! let q = ShmFile { name: "psm_x".into(), uid: 1000, ctime: 150, dir: false };
//! let listing = Listing { sysv: vec![], mqueues: vec![q.clone()] };
//! let job = Ended { uid: 1000, since: 100, until: 200 };
//! assert_eq!(plan(&job, 1000, &[], &listing).mqueues, vec!["psm_x".to_string()]);
//! assert!(plan(&job, 1000, &[1000], &listing).is_empty());
//! assert!(entry_removable(&job, &q));
//! ```

/// The three kinds of SysV IPC object (`/proc/sysvipc/{shm,sem,msg}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpcKind {
    Shm,
    Sem,
    Msg,
}

impl IpcKind {
    pub const ALL: [IpcKind; 3] = [IpcKind::Shm, IpcKind::Sem, IpcKind::Msg];

    /// Its file name under `/proc/sysvipc`.
    pub fn file(self) -> &'static str {
        match self {
            IpcKind::Shm => "shm",
            IpcKind::Sem => "sem",
            IpcKind::Msg => "msg",
        }
    }
}

/// One SysV IPC object, as `/proc/sysvipc` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysvObject {
    pub kind: IpcKind,
    pub id: i32,
    /// The owner (`uid` column; the creator is `cuid`).
    pub uid: u32,
    /// Processes attached (shared memory only; 0 for the others).
    pub nattch: u64,
    /// Last change (seconds since the epoch).
    pub ctime: u64,
}

/// Directory levels below /dev/shm the walk holds a descriptor for at once; a directory of
/// the owner's found deeper is moved up to the top and walked from there.
pub const MAX_DEPTH: usize = 64;

/// One entry of /dev/shm (at any depth) or /dev/mqueue, as `fstatat(AT_SYMLINK_NOFOLLOW)` saw
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmFile {
    pub name: String,
    pub uid: u32,
    /// Status change time (seconds since the epoch).
    pub ctime: u64,
    /// A directory: walked, and removed only once empty ([`dir_removable`]).
    pub dir: bool,
}

/// What the host holds, listed whole: SysV objects and POSIX message queues (the entries of the
/// host's mqueue file system, /dev/mqueue, which holds no directories). /dev/shm is a tree the
/// adapter walks, judging each entry by [`entry_removable`] and [`dir_removable`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub sysv: Vec<SysvObject>,
    pub mqueues: Vec<ShmFile>,
}

/// The job that ended: its owner and its life, in whole seconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub uid: u32,
    /// When it started (rounded down).
    pub since: u64,
    /// When it ended (rounded up).
    pub until: u64,
}

/// What to remove of the [`Listing`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub sysv: Vec<SysvObject>,
    /// Names in /dev/mqueue.
    pub mqueues: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.sysv.is_empty() && self.mqueues.is_empty()
    }
}

/// The overflow uid, `nobody`: shared by services on many nodes, never one person's.
pub const NOBODY: u32 = 65534;

/// Whether the end of a job of `uid` calls for a scrub at all: not root's, `nobody`'s nor a
/// system user's (below `min_uid`: services' semaphores have no attach count to protect them),
/// and no other job of the owner lives on the node (`live`: the owners of the jobs still
/// running).
pub fn wanted(uid: u32, min_uid: u32, live: &[u32]) -> bool {
    uid != 0 && uid != NOBODY && uid >= min_uid && !live.contains(&uid)
}

/// Whether a SysV object may be removed for `job` (also the adapter's re-check just before
/// `IPC_RMID`, on what `IPC_STAT` says then).
pub fn sysv_removable(job: &Ended, o: &SysvObject) -> bool {
    o.uid == job.uid
        && (o.kind != IpcKind::Shm || o.nattch == 0)
        && (job.since..=job.until).contains(&o.ctime)
}

/// Whether an entry other than a directory (a file, link, FIFO, socket; a message queue) may
/// be removed for `job`: the owner's, changed within the job's life (also the adapter's
/// re-check just before the removal).
pub fn entry_removable(job: &Ended, f: &ShmFile) -> bool {
    f.uid == job.uid && !f.dir && (job.since..=job.until).contains(&f.ctime)
}

/// Whether a directory of /dev/shm may be removed for `job` once the walk has emptied it of
/// what it may: the owner's, changed within the job's life as it was before the walk (removing
/// entries changes it again). It must also be empty by then; the kernel says so (`rmdir`).
pub fn dir_removable(job: &Ended, f: &ShmFile) -> bool {
    f.uid == job.uid && f.dir && (job.since..=job.until).contains(&f.ctime)
}

/// Whether a directory found deeper than [`MAX_DEPTH`] may be moved up to the top to be
/// walked from there: only the owner's (one of another user's is left where it is), changed
/// within the job's life (issue 25, N6: an older one — a login session's data — was moved out
/// of its tree and not removed, only relocated).
pub fn deep_dir_movable(job: &Ended, f: &ShmFile) -> bool {
    f.uid == job.uid && f.dir && (job.since..=job.until).contains(&f.ctime)
}

/// Which of `listing` to remove at the end of `job`, given the lowest uid scrubbed and the
/// owners of the jobs still live.
pub fn plan(job: &Ended, min_uid: u32, live: &[u32], listing: &Listing) -> Plan {
    if !wanted(job.uid, min_uid, live) {
        return Plan::default();
    }
    Plan {
        sysv: listing
            .sysv
            .iter()
            .filter(|o| sysv_removable(job, o))
            .cloned()
            .collect(),
        mqueues: listing
            .mqueues
            .iter()
            .filter(|f| entry_removable(job, f))
            .map(|f| f.name.clone())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(kind: IpcKind, id: i32, uid: u32, nattch: u64, ctime: u64) -> SysvObject {
        SysvObject {
            kind,
            id,
            uid,
            nattch,
            ctime,
        }
    }

    fn f(name: &str, uid: u32, ctime: u64, dir: bool) -> ShmFile {
        ShmFile {
            name: name.into(),
            uid,
            ctime,
            dir,
        }
    }

    #[test]
    fn the_plan_follows_the_rule_case_by_case() {
        let job = Ended {
            uid: 1000,
            since: 100,
            until: 200,
        };
        let listing = Listing {
            sysv: vec![
                o(IpcKind::Shm, 1, 1000, 0, 150), // left behind: removed
                o(IpcKind::Shm, 2, 1000, 1, 150), // still attached: kept
                o(IpcKind::Shm, 3, 1001, 0, 150), // another user's: kept
                o(IpcKind::Shm, 4, 0, 0, 150),    // root's: kept
                o(IpcKind::Sem, 5, 1000, 0, 100), // made at the start: removed
                o(IpcKind::Msg, 6, 1000, 0, 200), // made at the end: removed
                o(IpcKind::Sem, 7, 1000, 0, 99),  // older than the job: kept
                o(IpcKind::Msg, 8, 1000, 0, 201), // newer than its end: kept
                o(IpcKind::Sem, 9, 1000, 3, 150), // nattch means nothing for sem: removed
            ],
            mqueues: vec![
                f("mq-left", 1000, 150, false),  // left behind: removed
                f("mq-other", 1001, 150, false), // another user's: kept
                f("mq-old", 1000, 99, false),    // older than the job: kept
                f("mq-next", 1000, 201, false),  // newer than its end: kept
            ],
        };
        let p = plan(&job, 1000, &[1001, 0], &listing);
        let ids: Vec<i32> = p.sysv.iter().map(|o| o.id).collect();
        assert_eq!(ids, vec![1, 5, 6, 9]);
        assert_eq!(p.mqueues, vec!["mq-left".to_string()]);
    }

    /// Every shape of /dev/shm entry, by the rule (issue 25, item 8): files, links, FIFOs
    /// alike by owner and time; a directory only once walked and empty, by its time before
    /// the walk; a deep directory moved up only when it is the owner's.
    #[test]
    fn every_shape_of_dev_shm_entry() {
        let job = Ended {
            uid: 1000,
            since: 100,
            until: 200,
        };
        for (what, e, entry, dir, deep) in [
            (
                "the owner's file",
                f("a", 1000, 150, false),
                true,
                false,
                false,
            ),
            (
                "another user's file",
                f("b", 1001, 150, false),
                false,
                false,
                false,
            ),
            ("root's file", f("c", 0, 150, false), false, false, false),
            (
                "a file older than the job",
                f("e", 1000, 50, false),
                false,
                false,
                false,
            ),
            (
                "a file newer than its end",
                f("g", 1000, 250, false),
                false,
                false,
                false,
            ),
            (
                "the owner's directory",
                f("d", 1000, 150, true),
                false,
                true,
                true,
            ),
            (
                "an old directory of the owner's",
                f("o", 1000, 50, true),
                false,
                false,
                false,
            ),
            (
                "another user's directory",
                f("x", 1001, 150, true),
                false,
                false,
                false,
            ),
        ] {
            assert_eq!(entry_removable(&job, &e), entry, "{what}: entry");
            assert_eq!(dir_removable(&job, &e), dir, "{what}: directory");
            assert_eq!(deep_dir_movable(&job, &e), deep, "{what}: deep");
        }
    }

    #[test]
    fn nothing_while_the_owner_has_another_live_job_or_for_root() {
        let listing = Listing {
            sysv: vec![
                o(IpcKind::Shm, 1, 1000, 0, 150),
                o(IpcKind::Shm, 2, 0, 0, 150),
            ],
            mqueues: vec![f("q", 1000, 150, false), f("c", 0, 150, false)],
        };
        let cases: &[(&str, u32, u32, &[u32], bool)] = &[
            ("last job of the owner", 1000, 1000, &[], false),
            (
                "another job of the owner lives",
                1000,
                1000,
                &[1001, 1000],
                true,
            ),
            ("root's job, no other", 0, 1000, &[], true),
            ("root's job beside others", 0, 1000, &[1000], true),
            ("root's job, min_uid 0", 0, 0, &[], true),
            ("a system user (below min_uid)", 999, 1000, &[], true),
            ("min_uid lowered", 999, 500, &[], false),
            (
                "nobody, a service's as much as anyone's",
                NOBODY,
                1000,
                &[],
                true,
            ),
        ];
        for (what, uid, min_uid, live, empty) in cases {
            let job = Ended {
                uid: *uid,
                since: 100,
                until: 200,
            };
            let mut listing = listing.clone();
            listing.mqueues.push(f("s", *uid, 150, false));
            assert_eq!(
                plan(&job, *min_uid, live, &listing).is_empty(),
                *empty,
                "{what}"
            );
            assert_eq!(wanted(*uid, *min_uid, live), !*empty, "{what}");
        }
    }
}
