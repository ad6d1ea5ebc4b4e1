//! What a job used, read from its cgroup files: one function per controller file, parsed by
//! pjw-kernelfs. The sampler calls these once per job per tick, so the cost grows with jobs,
//! not with their processes.
//!
//! | what | cgroup v2 (hybrid: the controller-less tree) | cgroup v1 |
//! |---|---|---|
//! | CPU user/system | `cpu.stat` (every cgroup2 directory has it) | `cpuacct.usage_user`, `cpuacct.usage_sys` (ns) |
//! | memory peak | `memory.peak` | `memory.max_usage_in_bytes` |
//! | swap peak | `memory.swap.peak` (Linux 6.5+) | `memory.memsw.max_usage_in_bytes` − `memory.max_usage_in_bytes` − one charge batch (a lower bound) |
//! | anon/file/shmem/swap | `memory.stat` `anon`/`file`/`shmem`, `memory.swap.current` | `memory.stat` `total_rss`/`total_cache`/`total_shmem`/`total_swap` |
//! | I/O bytes | `io.stat` (io controller) | — (see [`Driver::counts_io`]) |
//! | tasks | `pids.current` | `pids.current` |
//! | pressure | `cpu.pressure`, `memory.pressure`, `io.pressure` | — |

use std::path::Path;

use pjw_kernelfs::cpu_stat::{self, CpuStat};
use pjw_kernelfs::io_stat::{self, IoBytes};
use pjw_kernelfs::psi::{self, Psi};

use crate::detect::Hierarchy;
use crate::{parent, CgroupError, Driver};

/// A PSI resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Cpu,
    Memory,
    Io,
}

impl Resource {
    fn file(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu.pressure",
            Resource::Memory => "memory.pressure",
            Resource::Io => "io.pressure",
        }
    }
}

/// Memory by kind, bytes. `swap` is None where the kernel does not account swap. `shmem`
/// (tmpfs, /dev/shm, SysV shared memory) is part of `file`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryBreakdown {
    pub anon: u64,
    pub file: u64,
    pub shmem: u64,
    pub swap: Option<u64>,
}

impl MemoryBreakdown {
    /// What only swap can take from the job: anonymous memory, shared memory and what is in
    /// swap already (page cache can be dropped for free).
    pub fn need(&self) -> u64 {
        self.anon
            .saturating_add(self.shmem)
            .saturating_add(self.swap.unwrap_or(0))
    }
}

/// Interpret `memory.stat` (pure): v2 `anon`/`file`, v1 the hierarchical `total_*` keys.
pub fn memory_breakdown(stat: &pjw_kernelfs::memory_stat::MemoryStat, v2: bool) -> MemoryBreakdown {
    if v2 {
        MemoryBreakdown {
            anon: stat.get("anon").unwrap_or(0),
            file: stat.get("file").unwrap_or(0),
            shmem: stat.get("shmem").unwrap_or(0),
            swap: None,
        }
    } else {
        MemoryBreakdown {
            anon: stat.get("total_rss").or(stat.get("rss")).unwrap_or(0),
            file: stat.get("total_cache").or(stat.get("cache")).unwrap_or(0),
            shmem: stat.get("total_shmem").or(stat.get("shmem")).unwrap_or(0),
            swap: stat.get("total_swap").or(stat.get("swap")),
        }
    }
}

impl Driver {
    /// Keep up to `max_open` statistics files open between reads and re-read them with one
    /// `pread(2)` each (see `statcache`); 0 turns it off. Shared by this driver's clones. The
    /// daemon turns it on for the sampler, within its open-file limit.
    pub fn keep_stat_files_open(&mut self, max_open: usize) {
        self.stat_files = std::sync::Arc::new(crate::statcache::StatFiles::new(max_open));
    }

    /// Statistics files kept open now.
    pub fn open_stat_files(&self) -> usize {
        self.stat_files.open_files()
    }

    /// A copy for reading statistics on a thread beside the one that creates and removes
    /// jobs: it re-reads the files the owner keeps open, and opens, reads and closes the others
    /// without keeping them (a job removed meanwhile keeps no file open).
    pub fn reader_beside_owner(&self) -> Driver {
        Driver {
            stat_keep_new: false,
            ..self.clone()
        }
    }

    /// The text of a statistics file of job `name`, through the open-file cache.
    pub(crate) fn read_stat(&self, name: &str, path: &Path) -> Result<String, CgroupError> {
        self.stat_files
            .read(&self.fs, name, path, self.stat_keep_new)
    }

    fn read_stat_u64(
        &self,
        name: &str,
        path: &Path,
        format: &'static str,
    ) -> Result<u64, CgroupError> {
        let text = self.read_stat(name, path)?;
        cpu_stat::parse_u64(format, &text).map_err(|source| CgroupError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    fn job_dir_checked(
        &self,
        h: &Hierarchy,
        name: &str,
    ) -> Result<std::path::PathBuf, CgroupError> {
        parent::validate_job_name(name)?;
        Ok(h.job(name))
    }

    /// CPU time of job `name`: `cpu.stat` in the cgroup2 tree, else v1 cpuacct.
    pub fn cpu_time(&self, name: &str) -> Result<CpuStat, CgroupError> {
        if let Some(v2) = self.v2() {
            let path = self.job_dir_checked(v2, name)?.join("cpu.stat");
            let text = self.read_stat(name, &path)?;
            return cpu_stat::parse(&text).map_err(|source| CgroupError::Parse { path, source });
        }
        let h = self
            .v1_with("cpuacct")
            .ok_or(CgroupError::MissingController {
                controller: "cpuacct".into(),
                where_: None,
            })?;
        let dir = self.job_dir_checked(h, name)?;
        let user =
            self.read_stat_u64(name, &dir.join("cpuacct.usage_user"), "cpuacct.usage_user")?;
        let sys = self.read_stat_u64(name, &dir.join("cpuacct.usage_sys"), "cpuacct.usage_sys")?;
        Ok(CpuStat {
            user_usec: user / 1000,
            system_usec: sys / 1000,
        })
    }

    /// The most memory job `name` ever had charged (bytes): the kernel's high-water mark
    /// (`memory.peak` / `memory.max_usage_in_bytes`), exact between samples too.
    pub fn memory_peak(&self, name: &str) -> Result<u64, CgroupError> {
        let h = self.memory_hierarchy()?;
        let dir = self.job_dir_checked(h, name)?;
        if h.v2 {
            self.read_stat_u64(name, &dir.join("memory.peak"), "memory.peak")
        } else {
            self.read_stat_u64(
                name,
                &dir.join("memory.max_usage_in_bytes"),
                "memory.max_usage_in_bytes",
            )
        }
    }

    /// The most swap job `name` had (bytes): `memory.swap.peak` (cgroup v2, Linux 6.5+); on
    /// v1 the memory+swap high-water mark less the memory one and less one charge batch, a
    /// lower bound (the two peaks need not fall together; and v1 charges memory+swap first, so a
    /// batch refused at the memory limit still raised the memory+swap mark: every job that hit
    /// its limit showed 256 KiB of swap on a node without swap). `Ok(None)` where the kernel
    /// keeps neither.
    pub fn memory_swap_peak(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        let h = self.memory_hierarchy()?;
        let dir = self.job_dir_checked(h, name)?;
        if h.v2 {
            let path = dir.join("memory.swap.peak");
            if !self.fs.exists(&path) {
                return Ok(None);
            }
            return self
                .read_stat_u64(name, &path, "memory.swap.peak")
                .map(Some);
        }
        let memsw = dir.join("memory.memsw.max_usage_in_bytes");
        if !self.fs.exists(&memsw) {
            return Ok(None);
        }
        let both = self.read_stat_u64(name, &memsw, "memory.memsw.max_usage_in_bytes")?;
        let mem = self.read_stat_u64(
            name,
            &dir.join("memory.max_usage_in_bytes"),
            "memory.max_usage_in_bytes",
        )?;
        Ok(Some(
            both.saturating_sub(mem).saturating_sub(charge_batch()),
        ))
    }

    /// Job `name`'s memory by kind (`memory.stat`, plus `memory.swap.current` in v2).
    pub fn memory_breakdown(&self, name: &str) -> Result<MemoryBreakdown, CgroupError> {
        let h = self.memory_hierarchy()?;
        let dir = self.job_dir_checked(h, name)?;
        let path = dir.join("memory.stat");
        let text = self.read_stat(name, &path)?;
        let stat = pjw_kernelfs::memory_stat::parse(&text)
            .map_err(|source| CgroupError::Parse { path, source })?;
        let mut b = memory_breakdown(&stat, h.v2);
        if h.v2 {
            b.swap = self
                .read_stat_u64(
                    name,
                    &dir.join("memory.swap.current"),
                    "memory.swap.current",
                )
                .ok();
        }
        Ok(b)
    }

    /// Whether this node counts a job's block I/O: only with the cgroup v2 io controller. The
    /// v1 blkio files count only on devices where blk-throttle was switched on (a rule set on
    /// some cgroup, which changes the whole device), so they would read 0 for a job that did
    /// I/O; pjw does not use them and reports I/O as not counted instead.
    pub fn counts_io(&self) -> bool {
        self.hierarchies().any(|h| h.v2 && h.has("io"))
    }

    /// Bytes job `name` read and wrote (`io.stat`); `Ok(None)` where I/O is not counted
    /// ([`Driver::counts_io`]).
    pub fn io_bytes(&self, name: &str) -> Result<Option<IoBytes>, CgroupError> {
        let Some(h) = self.hierarchies().find(|h| h.v2 && h.has("io")) else {
            return Ok(None);
        };
        let path = self.job_dir_checked(h, name)?.join("io.stat");
        let text = self.read_stat(name, &path)?;
        io_stat::parse(&text)
            .map(Some)
            .map_err(|source| CgroupError::Parse { path, source })
    }

    /// Tasks (threads) in job `name` now: `pids.current` (O(1), unlike counting
    /// `cgroup.threads`); `Ok(None)` without the pids controller.
    pub fn pids_current(&self, name: &str) -> Result<Option<u64>, CgroupError> {
        let Some(h) = self.hierarchies().find(|h| h.has("pids")) else {
            return Ok(None);
        };
        let path = self.job_dir_checked(h, name)?.join("pids.current");
        self.read_stat_u64(name, &path, "pids.current").map(Some)
    }

    /// Pressure (PSI) of job `name` for `what`, from the cgroup2 tree; None in legacy mode or
    /// where the kernel has PSI off.
    pub fn pressure(&self, name: &str, what: Resource) -> Option<Psi> {
        let v2 = self.v2()?;
        let dir = self.job_dir_checked(v2, name).ok()?;
        let text = self.read_stat(name, &dir.join(what.file())).ok()?;
        psi::parse(&text).ok()
    }
}

/// The most one refused charge can raise the memory+swap mark by: a charge batch (v1
/// `MEMCG_CHARGE_BATCH`, 64 pages) or a transparent huge page (2 MiB), whichever is larger.
fn charge_batch() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (64 * if page > 0 { page as u64 } else { 4096 }).max(2 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_kernelfs::memory_stat;

    #[test]
    fn breakdown_v1_and_v2() {
        let v2 = memory_stat::parse("anon 300\nfile 20\nkernel 5\nshmem 7\n").unwrap();
        let b = memory_breakdown(&v2, true);
        assert_eq!(
            b,
            MemoryBreakdown {
                anon: 300,
                file: 20,
                shmem: 7,
                swap: None
            }
        );
        assert_eq!(b.need(), 307, "anon + shmem; the page cache is not needed");
        let v1 = memory_stat::parse(
            "cache 1\nrss 2\nswap 0\ntotal_cache 10\ntotal_rss 20\ntotal_swap 30\ntotal_shmem 4\n",
        )
        .unwrap();
        let b = memory_breakdown(&v1, false);
        assert_eq!(
            b,
            MemoryBreakdown {
                anon: 20,
                file: 10,
                shmem: 4,
                swap: Some(30)
            }
        );
        assert_eq!(b.need(), 54, "anon + shmem + swap");
        let v1_noswap = memory_stat::parse("cache 1\nrss 2\n").unwrap();
        assert_eq!(
            memory_breakdown(&v1_noswap, false),
            MemoryBreakdown {
                anon: 2,
                file: 1,
                shmem: 0,
                swap: None
            }
        );
    }
}
