//! The calling process's own CPU affinity (a step of a job runs on its share of the job's CPUs:
//! `pjw run` sets it on itself before it execs, so the command and its children inherit it).

use pjw_core::CpuSet;

/// Make `cpus` the affinity of this (single-threaded) process.
pub fn set_own(cpus: &CpuSet) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set CPU_ZERO makes.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.iter() {
        if (c as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is below CPU_SETSIZE, the bit count of `set`.
            unsafe { libc::CPU_SET(c as usize, &mut set) };
        }
    }
    // SAFETY: pid 0 is this thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
