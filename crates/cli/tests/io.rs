//! Root tests of per-job block I/O: a job's `--io-weight` and `--io-max`, merged with the
//! node's `[job] io_weight/io_max`, are in its cgroup's files (cgroup v2 `io.weight`/`io.max`,
//! v1 `blkio.bfq.weight`/`blkio.throttle.*`) and in `pjw status`. Whether the kernel then holds
//! the job to them is measured in bench/scenarios/io.sh, not here.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use pjw_testkit::{require_root, skip, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn hold(dir: &Path, tag: &str) -> String {
    format!(
        "touch {d}/{tag}.up; while :; do sleep 1; done",
        d = dir.display()
    )
}

fn started(d: &TestDaemon, tag: &str) {
    let f = d.dir().join(format!("{tag}.up"));
    assert!(
        TestDaemon::wait_for(Duration::from_secs(60), || f.exists()),
        "job {tag} did not start:\n{}",
        d.log()
    );
}

fn stop(d: &TestDaemon, id: &str, child: Child) {
    pjw_testkit::job::run(d.pjw().args(["kill", id])).ok();
    pjw_testkit::job::wait(child, "a held job (killed)").signal(libc::SIGKILL);
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// The job's directory holding `file` (the cgroup2 tree or a v1 hierarchy), if any has it.
fn with_file(d: &TestDaemon, job: &str, file: &str) -> Option<PathBuf> {
    d.driver()
        .job_dirs(&format!("job-{job}"))
        .into_iter()
        .map(|(_, dir)| dir)
        .find(|dir| dir.join(file).exists())
}

fn status_io(d: &TestDaemon, id: &str) -> Option<String> {
    d.status()["jobs"]
        .as_array()?
        .iter()
        .find(|j| j["id"] == id)?["io"]
        .as_str()
        .map(str::to_string)
}

/// A whole disk to put limits on: the one behind /var/tmp, else the first in /sys/block.
fn a_disk() -> Result<String, String> {
    let var_tmp = pjw_daemon::config::resolve_disk(Path::new("/var/tmp"), Path::new("/sys"));
    if let Ok(d) = var_tmp {
        return Ok(d.to_string());
    }
    let first = std::fs::read_dir("/sys/block").ok().and_then(|rd| {
        rd.flatten()
            .map(|e| read(&e.path().join("dev")))
            .find(|d| !d.is_empty())
    });
    first.ok_or_else(|| {
        format!(
            "no block device: /var/tmp ({}) and /sys/block is empty",
            var_tmp.unwrap_err()
        )
    })
}

#[test]
fn a_jobs_io_weight_is_in_its_cgroup() {
    require_root!();
    let mut d = TestDaemon::start(&pjw_bin(), "");
    let j = d.run_sh(&["--io-weight", "50", "--job-id", "w"], &hold(d.dir(), "w"));
    started(&d, "w");
    // The setting outlives a daemon restart (store row job_io, restored with the job).
    d.restart();
    // v2: io.weight (blk-iocost) and io.bfq.weight (BFQ loaded); v1: BFQ's, or CFQ's weight.
    let files = [
        "io.weight",
        "io.bfq.weight",
        "blkio.bfq.weight",
        "blkio.weight",
    ];
    let found: Vec<(&str, String)> = files
        .iter()
        .filter_map(|f| with_file(&d, "w", f).map(|dir| (*f, read(&dir.join(f)))))
        .collect();
    let shown = status_io(&d, "w");
    stop(&d, "w", j);
    if found.is_empty() {
        skip!("no I/O weight file in the job's cgroups (no io/blkio controller with iocost, BFQ or CFQ)");
    }
    eprintln!("weight files: {found:?}");
    for (f, v) in &found {
        let want = if f.starts_with("io.") {
            "default 50"
        } else {
            "50"
        };
        // A v2 weight file lists per-device overrides after the default line.
        assert_eq!(v.lines().next(), Some(want), "{f}");
    }
    assert_eq!(shown.as_deref(), Some("weight=50"));
}

#[test]
fn a_jobs_io_limits_merge_with_the_nodes_and_are_in_its_cgroup() {
    require_root!();
    let disk = match a_disk() {
        Ok(d) => d,
        Err(why) => skip!("{why}"),
    };
    let d = TestDaemon::start(
        &pjw_bin(),
        &format!("[job]\nio_max = [\"{disk} rbps=40M wbps=10M\"]\n"),
    );
    // The job tightens the read limit and adds an IOPS one; the node's write limit stays.
    let spec = format!("{disk} rbps=20M riops=300");
    let j = d.run_sh(&["--io-max", &spec, "--job-id", "l"], &hold(d.dir(), "l"));
    started(&d, "l");
    let v2 = with_file(&d, "l", "io.max");
    let v1 = with_file(&d, "l", "blkio.throttle.read_bps_device");
    let got = match (&v2, &v1) {
        (Some(dir), _) => vec![read(&dir.join("io.max"))],
        (None, Some(dir)) => ["read_bps", "write_bps", "read_iops", "write_iops"]
            .iter()
            .map(|f| read(&dir.join(format!("blkio.throttle.{f}_device"))))
            .collect(),
        (None, None) => vec![],
    };
    let shown = status_io(&d, "l");
    stop(&d, "l", j);
    if got.is_empty() {
        skip!("no io.max or blkio.throttle files in the job's cgroups (no blk-throttle)");
    }
    eprintln!("limits on {disk}: {got:?}");
    if v2.is_some() {
        assert_eq!(
            got,
            [format!(
                "{disk} rbps=20971520 wbps=10485760 riops=300 wiops=max"
            )]
        );
    } else {
        // v1: one file per limit; a 0 written lifts it, so the unlimited one is empty.
        assert_eq!(
            got,
            [
                format!("{disk} 20971520"),
                format!("{disk} 10485760"),
                format!("{disk} 300"),
                String::new()
            ]
        );
    }
    assert_eq!(shown, Some(format!("{disk} rbps=20M wbps=10M riops=300")));
}
