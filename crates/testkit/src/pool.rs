//! A test daemon's CPUs as the daemon reports them (`pjw status --json`), so tests name the CPUs
//! the daemon actually hands out instead of assuming "0" or "0-1".

use pjw_core::CpuSet;

use crate::TestDaemon;

impl TestDaemon {
    /// The CPUs this daemon may hand out (its pool), from `pjw status --json`.
    pub fn pool(&self) -> CpuSet {
        let st = self.status();
        let text = st["cpus"]
            .as_str()
            .unwrap_or_else(|| panic!("no cpus list in pjw status --json: {st}"));
        CpuSet::parse_list(text).unwrap_or_else(|e| panic!("cpus {text:?}: {e}"))
    }

    /// `pjw run ARGS -- sh -c SCRIPT` to its end (stdin from /dev/null), output captured; check
    /// the status with [`JobOutput::ok`](crate::JobOutput::ok) or `.code(n)`.
    pub fn run_sh_output(&self, args: &[&str], script: &str) -> crate::JobOutput {
        let mut c = self.pjw();
        c.arg("run").args(args).args(["--", "sh", "-c", script]);
        crate::job::run(&mut c)
    }
}
