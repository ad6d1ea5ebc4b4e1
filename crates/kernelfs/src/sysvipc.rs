//! `/proc/sysvipc/{shm,sem,msg}`: the host's SysV IPC objects, one per line under a header
//! naming the columns (for the IPC scrub at a job's end, `pjw_core::ipc_scrub`).
//!
//! ```
//! use pjw_core::ipc_scrub::IpcKind;
//! let text = "key semid perms nsems uid gid cuid cgid otime ctime\n0 7 600 1 1000 1000 1000 1000 0 120\n";
//! let objects = pjw_kernelfs::sysvipc::parse(IpcKind::Sem, text);
//! assert_eq!((objects[0].id, objects[0].uid, objects[0].ctime), (7, 1000, 120));
//! ```

use pjw_core::ipc_scrub::{IpcKind, SysvObject};

/// The column naming the object's id.
fn id_column(kind: IpcKind) -> &'static str {
    match kind {
        IpcKind::Shm => "shmid",
        IpcKind::Sem => "semid",
        IpcKind::Msg => "msqid",
    }
}

/// Parse one `/proc/sysvipc/{shm,sem,msg}` file: a header naming the columns, one object per
/// line. Columns are found by name (their order and number differ between kinds and kernels);
/// lines that do not parse are skipped.
pub fn parse(kind: IpcKind, text: &str) -> Vec<SysvObject> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(id), Some(uid), Some(ctime)) = (at(id_column(kind)), at("uid"), at("ctime")) else {
        return Vec::new();
    };
    let nattch = at("nattch");
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(SysvObject {
                kind,
                id: f.get(id)?.parse().ok()?,
                uid: f.get(uid)?.parse().ok()?,
                nattch: match nattch {
                    Some(n) => f.get(n)?.parse().ok()?,
                    None => 0,
                },
                ctime: f.get(ctime)?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHM: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0          3  1600                  4096  9001  9001      0  1000  1000  1000  1000          0          0       150                     0                     0
         0          4  1600                  4096  9002  9002      1  1000  1000  1000  1000        160          0       150                  4096                     0
   1234567          5   600                  4096  9003  9003      0  1001  1001  1001  1001          0          0       150                     0                     0
";
    const SEM: &str =
        "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime
         0          7   600          1  1000  1000  1000  1000          0        120
";
    const MSG: &str = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime
         0          9   600           0          0     0     0     0     0     0     0          0          0        130
";

    fn o(kind: IpcKind, id: i32, uid: u32, nattch: u64, ctime: u64) -> SysvObject {
        SysvObject {
            kind,
            id,
            uid,
            nattch,
            ctime,
        }
    }

    #[test]
    fn parses_the_three_kernel_files_by_column_name() {
        assert_eq!(
            parse(IpcKind::Shm, SHM),
            vec![
                o(IpcKind::Shm, 3, 1000, 0, 150),
                o(IpcKind::Shm, 4, 1000, 1, 150),
                o(IpcKind::Shm, 5, 1001, 0, 150)
            ]
        );
        assert_eq!(
            parse(IpcKind::Sem, SEM),
            vec![o(IpcKind::Sem, 7, 1000, 0, 120)]
        );
        assert_eq!(
            parse(IpcKind::Msg, MSG),
            vec![o(IpcKind::Msg, 9, 0, 0, 130)]
        );
        assert!(parse(IpcKind::Shm, "").is_empty());
        assert!(parse(IpcKind::Shm, "garbage\n1 2 3\n").is_empty());
        // A line cut short is skipped, the others kept.
        let cut = format!("{SHM}         0         11  1600\n");
        assert_eq!(parse(IpcKind::Shm, &cut).len(), 3);
    }
}
