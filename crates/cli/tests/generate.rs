//! Man pages and completions come from the binary's own clap definition (`pjw generate`):
//! they render, and bash completes subcommands from them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn pjw_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw")))
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

#[test]
fn man_pages_are_generated_and_pjw_run_renders() {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new(pjw_bin())
        .args(["generate", "man"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    for page in [
        "pjw.1",
        "pjw-run.1",
        "pjw-status.1",
        "pjw-report.1",
        "pjw-daemon.1",
        "pjw.toml.5",
    ] {
        assert!(dir.path().join(page).is_file(), "{page} missing");
    }
    // The hidden generator has no page of its own.
    assert!(!dir.path().join("pjw-generate.1").exists());
    if !on_path("man") {
        if pjw_testkit::skip::in_vm_guest() {
            pjw_testkit::skip!("no man in this guest; the host tier renders the pages");
        }
        panic!("man is missing on this host, and make test provides it (scripts/install-deps.sh installs man-db)");
    }
    for (page, want) in [
        ("pjw-run.1", "--backfill-only"),
        ("pjw.toml.5", "vcpus"),
        ("pjw-daemon.1", "SIGHUP"),
    ] {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.path().join(page))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "man -l {page}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(want), "man -l {page} lacks {want}:\n{text}");
    }
}

/// Drive bash's completion function as bash does on TAB: COMP_WORDS and COMP_CWORD set, the
/// function called, COMPREPLY printed.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    bash_complete_with(script, words, "_pjw", &[])
}

fn bash_complete_with(
    script: &Path,
    words: &[&str],
    func: &str,
    env: &[(&str, String)],
) -> Vec<String> {
    let words_q: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = words.join(" ");
    let prog = format!(
        "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{line}'\nCOMP_POINT=${{#COMP_LINE}}\n\
         {func} pjw '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        words_q.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        if words.len() > 1 { words[words.len() - 2] } else { "" },
    );
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(&prog);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_pjw_r_to_run_report_resume() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(pjw_bin())
            .args(["generate", "completions", shell, "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for f in ["pjw.bash", "_pjw", "pjw.fish"] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let mut got = bash_complete(&dir.path().join("pjw.bash"), &["pjw", "r"]);
    got.sort();
    assert_eq!(got, ["report", "resume", "run"]);
    // Options of a subcommand too.
    let got = bash_complete(&dir.path().join("pjw.bash"), &["pjw", "run", "--backf"]);
    assert_eq!(got, ["--backfill-only"]);
}

#[test]
fn bash_completes_job_ids_from_the_daemon() {
    pjw_testkit::require_root!();
    let d = pjw_testkit::TestDaemon::start(pjw_bin(), "");
    let mut job = d.run_sh(&["--job-id", "comp-42"], "sleep 60");
    assert!(pjw_testkit::TestDaemon::wait_for(
        std::time::Duration::from_secs(30),
        || d.status()["jobs"].as_array().is_some_and(|j| !j.is_empty())
    ));
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(pjw_bin())
        .args(["generate", "completions", "bash", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let bin_dir = pjw_bin().parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let env = [
        ("PATH", path),
        ("PJW_SOCKET", d.socket().display().to_string()),
    ];
    let script = dir.path().join("pjw.bash");
    let got = bash_complete_with(&script, &["pjw", "kill", "comp"], "_pjw_with_jobs", &env);
    assert_eq!(got, ["comp-42"]);
    // Elsewhere the generated completion is unchanged.
    let mut got = bash_complete_with(&script, &["pjw", "r"], "_pjw_with_jobs", &env);
    got.sort();
    assert_eq!(got, ["report", "resume", "run"]);
    d.pjw().args(["kill", "comp-42"]).output().unwrap();
    let _ = job.wait();
}

/// A `pjw` that answers `status --json` with two jobs, as the daemon prints it (pretty JSON; a
/// job name holding an `"id": "…"` look-alike that must not be taken for an id).
fn fake_pjw(dir: &Path) -> String {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = r#"#!/bin/sh
[ "$1 $2" = "status --json" ] || exit 2
cat <<'J'
{
  "node": "n1",
  "jobs": [
    {
      "id": "alpha-1",
      "name": "x \"id\": \"evil\",",
      "state": "running"
    },
    {
      "id": "beta-2",
      "state": "queued"
    }
  ]
}
J
"#;
    let p = bin.join("pjw");
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn generate_completions(dir: &Path) {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(pjw_bin())
            .args(["generate", "completions", shell, "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
    }
}

/// Where a job id goes, in the words typed so far: kill, suspend, resume, priority, job end and
/// report -J/--job; and where none goes (the priority's value), none is offered.
const JOB_ID_CASES: &[(&str, &[&str])] = &[
    ("pjw kill ", &["alpha-1", "beta-2"]),
    ("pjw suspend al", &["alpha-1"]),
    ("pjw resume ", &["alpha-1", "beta-2"]),
    ("pjw priority ", &["alpha-1", "beta-2"]),
    ("pjw job end b", &["beta-2"]),
    ("pjw report -J ", &["alpha-1", "beta-2"]),
    ("pjw report --job ", &["alpha-1", "beta-2"]),
];

#[test]
fn the_scripts_of_every_shell_hook_job_ids_in() {
    let dir = tempfile::tempdir().unwrap();
    generate_completions(dir.path());
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let bash = read("pjw.bash");
    assert!(bash.contains("complete -F _pjw_with_jobs"), "{bash}");
    let zsh = read("_pjw");
    // kill, suspend, resume, priority, job end, report -J and --job.
    assert_eq!(zsh.matches(":_pjw_job_ids' \\").count(), 7, "{zsh}");
    assert!(!zsh.contains("':job -- The job id:_default'"), "{zsh}");
    assert!(zsh.contains("_pjw_job_ids() {"), "{zsh}");
    let fish = read("pjw.fish");
    assert!(
        fish.contains("complete -c pjw -n __fish_pjw_wants_job_id -f -a '(__fish_pjw_job_ids)'"),
        "{fish}"
    );
    assert!(
        fish.lines()
            .any(|l| l.contains("-s J -l job") && l.ends_with("-a '(__fish_pjw_job_ids)'")),
        "{fish}"
    );
}

#[test]
fn bash_completes_job_ids_from_pjw_status() {
    let dir = tempfile::tempdir().unwrap();
    generate_completions(dir.path());
    let env = [("PATH", fake_pjw(dir.path()))];
    let script = dir.path().join("pjw.bash");
    for (line, want) in JOB_ID_CASES {
        let mut words: Vec<&str> = line.split(' ').collect();
        if line.ends_with(' ') {
            words.pop();
            words.push("");
        }
        let got = bash_complete_with(&script, &words, "_pjw_with_jobs", &env);
        assert_eq!(got, *want, "{line:?}");
    }
    // --job=ID: bash splits the word at the =.
    let got = bash_complete_with(
        &script,
        &["pjw", "report", "--job", "=", "a"],
        "_pjw_with_jobs",
        &env,
    );
    assert_eq!(got, ["alpha-1"]);
}

/// Ask zsh itself: an interactive zsh on a pseudo-terminal (zsh/zpty) with the generated `_pjw`
/// in its fpath gets the words and a TAB; what compadd is offered is printed
/// (tests/fixtures/zsh-capture.zsh).
fn zsh_complete(dir: &Path, path: &str, line: &str) -> Vec<String> {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zsh-capture.zsh");
    let out = Command::new("timeout")
        .arg("60")
        .arg("zsh")
        .arg("-f")
        .arg(&capture)
        .arg(dir)
        .arg(line)
        .env("PATH", path)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zsh {line:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    got.sort();
    got
}

#[test]
fn zsh_completes_job_ids_from_pjw_status() {
    pjw_testkit::require!(pjw_testkit::Component::Zsh);
    let dir = tempfile::tempdir().unwrap();
    generate_completions(dir.path());
    let path = fake_pjw(dir.path());
    for (line, want) in JOB_ID_CASES {
        assert_eq!(zsh_complete(dir.path(), &path, line), *want, "{line:?}");
    }
    assert_eq!(
        zsh_complete(dir.path(), &path, "pjw report --job="),
        ["alpha-1", "beta-2"]
    );
    // Subcommands as before.
    assert_eq!(
        zsh_complete(dir.path(), &path, "pjw r"),
        ["report", "resume", "run"]
    );
}

#[test]
fn fish_completes_job_ids_from_pjw_status() {
    pjw_testkit::require!(pjw_testkit::Component::Fish);
    let dir = tempfile::tempdir().unwrap();
    generate_completions(dir.path());
    let path = fake_pjw(dir.path());
    let fish = |line: &str| -> Vec<String> {
        let out = Command::new("fish")
            .arg("--no-config")
            .arg("-c")
            .arg(format!(
                "source {}; complete -C '{line}'",
                dir.path().join("pjw.fish").display()
            ))
            .env("PATH", &path)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fish {line:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Each line is the candidate, a tab and its description.
        let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect();
        got.sort();
        got
    };
    for (line, want) in JOB_ID_CASES {
        assert_eq!(fish(line), *want, "{line:?}");
    }
    // No job id where the priority's value goes.
    assert!(!fish("pjw priority alpha-1 ").contains(&"beta-2".to_string()));
    assert_eq!(fish("pjw r"), ["report", "resume", "run"]);
}
