//! `pjw check` on this host, as root: nothing FAILs (WARNs are for what is not fatal here, such
//! as no swap), it exits 0, and a config that leaks a secret makes it exit 1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use pjw_testkit::require_root;

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn check(args: &[&str]) -> (i32, Vec<serde_json::Value>) {
    let out = Command::new(pjw_bin())
        .arg("check")
        .arg("--json")
        .args(args)
        .env_remove("PJW_CGROUP_PARENT")
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), lines)
}

#[test]
fn pjw_check_passes_on_this_host() {
    require_root!();
    // The parent the tests use: below this process's own cgroup.
    let (code, lines) = check(&["--cgroup-parent", "self/pjw-check-test"]);
    let fails: Vec<_> = lines.iter().filter(|l| l["status"] == "FAIL").collect();
    assert!(fails.is_empty(), "FAIL lines: {fails:#?}");
    assert_eq!(code, 0);
    for name in [
        "config",
        "cgroup-mode",
        "controller-cpuset",
        "controller-memory",
        "psi",
        "topology",
    ] {
        let l = lines
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"));
        assert_ne!(l["status"], "FAIL", "{l}");
    }
    // Text form: one line per check, STATUS first.
    let out = Command::new(pjw_bin())
        .args(["check", "--cgroup-parent", "self/pjw-check-test"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), lines.len(), "{text}");
    assert!(
        text.lines()
            .all(|l| l.starts_with("OK ") || l.starts_with("WARN ")),
        "{text}"
    );
}

#[test]
fn a_secret_in_a_world_readable_config_exits_1() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pjw.toml");
    std::fs::write(&cfg, "[central]\nurl = \"postgres://pjw:hunter2@db/pjw\"\n").unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, lines) = check(&[
        "--config",
        cfg.to_str().unwrap(),
        "--cgroup-parent",
        "self/x",
    ]);
    assert_eq!(code, 1);
    let l = lines.iter().find(|l| l["name"] == "config").unwrap();
    assert_eq!(l["status"], "FAIL", "{l}");
    assert!(
        l["fix"].as_str().unwrap().contains("chmod 0600")
            || l["detail"].as_str().unwrap().contains("0600"),
        "{l}"
    );
    assert!(!l.to_string().contains("hunter2"));
}
