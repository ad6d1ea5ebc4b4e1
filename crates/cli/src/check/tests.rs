//! `pjw check` on fake trees (facts gathered below temp roots) and on literal facts.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pjw_cgroup::fake_tree::FakeSpec;
use pjw_cgroup::{Backend, Mode};

use super::facts::{self, gather, Request, Roots};
use super::rules::{evaluate, Line, Status};

struct Fake {
    dir: tempfile::TempDir,
    proc_root: std::path::PathBuf,
    cgroup2: Option<std::path::PathBuf>,
}

fn machine(mode: Mode) -> Fake {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeSpec::new(mode).build(&dir.path().join("m")).unwrap();
    Fake {
        proc_root: m.proc_root.clone(),
        cgroup2: m.mount_point("unified").map(Path::to_path_buf),
        dir,
    }
}

fn roots(f: &Fake) -> Roots {
    let etc = f.dir.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    Roots {
        etc,
        run: f.dir.path().join("run"),
        backend: Backend::FakeTree,
        commands: false,
        hooks_dir: "/usr/lib/pjw".into(),
        slurm_conf: None,
    }
}

/// A config pointing at the fake /proc, written with `mode`.
fn config(f: &Fake, extra: &str, mode: u32) -> std::path::PathBuf {
    let p = f.dir.path().join("pjw.toml");
    let text = format!(
        "{extra}\n[paths]\nproc = \"{}\"\nsys = \"{}\"\n",
        f.proc_root.display(),
        f.dir.path().join("sys").display()
    );
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn check(f: &Fake, cfg: &Path, parent: &str) -> Vec<Line> {
    let req = Request {
        config: Some(cfg.to_path_buf()),
        cgroup_parent: Some(parent.into()),
        socket: None,
    };
    evaluate(&gather(&roots(f), &req))
}

fn line<'a>(lines: &'a [Line], name: &str) -> &'a Line {
    lines
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no {name} line in {lines:#?}"))
}

#[test]
fn a_v2_parent_without_cpuset_in_subtree_control_fails_naming_cpuset_and_the_fix() {
    let f = machine(Mode::Unified);
    let parent = f.cgroup2.as_ref().unwrap().join("pjw");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(
        parent.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(
        parent.join("cgroup.subtree_control"),
        "cpu io memory pids\n",
    )
    .unwrap();
    let cfg = config(&f, "", 0o600);
    let lines = check(&f, &cfg, "/pjw");
    assert_eq!(line(&lines, "cgroup-mode").status, Status::Ok, "{lines:#?}");
    let l = line(&lines, "controller-cpuset");
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.detail.contains("cpuset is not enabled in"), "{l:?}");
    assert!(
        l.fix.contains(&format!(
            "echo +cpuset > {}/cgroup.subtree_control",
            parent.display()
        )),
        "{l:?}"
    );
    assert!(
        l.render().starts_with("FAIL  controller-cpuset"),
        "{}",
        l.render()
    );
    for ok in [
        "controller-cpu",
        "controller-memory",
        "controller-pids",
        "controller-io",
    ] {
        assert_eq!(line(&lines, ok).status, Status::Ok, "{ok}");
    }
}

#[test]
fn a_v2_parent_with_every_controller_or_not_made_yet_passes() {
    let f = machine(Mode::Unified);
    let cfg = config(&f, "", 0o600);
    // Not made yet: the controllers are available at the root, the daemon enables them.
    let lines = check(&f, &cfg, "/pjw");
    let l = line(&lines, "controller-cpuset");
    assert_eq!(l.status, Status::Ok, "{l:?}");
    assert!(l.detail.contains("available"), "{l:?}");
    let parent = f.cgroup2.as_ref().unwrap().join("pjw");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(
        parent.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(
        parent.join("cgroup.subtree_control"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    let lines = check(&f, &cfg, "/pjw");
    for c in ["cpuset", "cpu", "memory", "pids", "io"] {
        assert_eq!(
            line(&lines, &format!("controller-{c}")).status,
            Status::Ok,
            "{c}"
        );
    }
}

#[test]
fn a_controller_not_delegated_to_the_parent_fails_and_io_only_warns() {
    let f = machine(Mode::Unified);
    let parent = f.cgroup2.as_ref().unwrap().join("scope");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(parent.join("cgroup.controllers"), "cpuset cpu pids\n").unwrap();
    std::fs::write(parent.join("cgroup.subtree_control"), "cpuset cpu pids\n").unwrap();
    let cfg = config(&f, "", 0o600);
    let lines = check(&f, &cfg, "/scope/jobs");
    let mem = line(&lines, "controller-memory");
    assert_eq!(mem.status, Status::Fail, "{mem:?}");
    assert!(mem.detail.contains("not delegated"), "{mem:?}");
    assert_eq!(line(&lines, "controller-io").status, Status::Warn);
    assert_eq!(line(&lines, "controller-cpuset").status, Status::Ok);
}

#[test]
fn hybrid_and_v1_need_the_v1_hierarchies() {
    for mode in [Mode::Hybrid, Mode::Legacy] {
        let f = machine(mode);
        let cfg = config(&f, "", 0o600);
        let lines = check(&f, &cfg, "/pjw");
        let m = line(&lines, "cgroup-mode");
        assert_eq!(m.status, Status::Ok, "{m:?}");
        assert!(
            m.detail
                .starts_with(if mode == Mode::Hybrid { "hybrid" } else { "v1" }),
            "{m:?}"
        );
        for c in ["cpuset", "cpu", "memory", "pids"] {
            assert_eq!(
                line(&lines, &format!("controller-{c}")).status,
                Status::Ok,
                "{mode} {c}"
            );
        }
    }
}

#[test]
fn a_password_in_the_config_fails_whatever_its_mode() {
    let f = machine(Mode::Unified);
    let cfg = config(
        &f,
        "[central]\nurl = \"postgres://pjw:secret@db/pjw\"\n",
        0o644,
    );
    let lines = check(&f, &cfg, "/pjw");
    let l = line(&lines, "config");
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.detail.contains("central.url"), "{l:?}");
    assert!(!l.detail.contains("secret"), "the password leaked: {l:?}");
    // 0600 is not enough: the password belongs in central.password_file alone.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let l = line(&check(&f, &cfg, "/pjw"), "config").clone();
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.detail.contains("central.password_file"), "{l:?}");
    assert!(!l.detail.contains("secret"), "the password leaked: {l:?}");
}

#[test]
fn an_invalid_config_fails_and_the_other_checks_still_run() {
    let f = machine(Mode::Hybrid);
    let cfg = config(&f, "vcpus = 0\n", 0o600);
    let lines = check(&f, &cfg, "/pjw");
    let l = line(&lines, "config");
    assert_eq!(l.status, Status::Fail);
    assert!(l.detail.contains("vcpus"), "{l:?}");
    assert!(lines.iter().any(|l| l.name == "psi"));
}

#[test]
fn slurm_wired_to_pjw_with_task_cgroup_fights_it() {
    let f = machine(Mode::Hybrid);
    let cfg = config(&f, "", 0o600);
    let etc = roots(&f).etc;
    std::fs::create_dir_all(etc.join("slurm")).unwrap();
    std::fs::write(
        etc.join("slurm/slurm.conf"),
        "Prolog=/usr/lib/pjw/slurm/pjw-prolog.sh\nEpilog=/usr/lib/pjw/slurm/pjw-epilog.sh # end\nTaskPlugin=task/affinity,task/cgroup\n",
    )
    .unwrap();
    let lines = check(&f, &cfg, "/pjw");
    assert_eq!(line(&lines, "wlm-slurm").status, Status::Ok);
    let t = line(&lines, "slurm-task-plugin");
    assert_eq!(t.status, Status::Fail, "{t:?}");
    assert!(t.fix.contains("task/none"));
    std::fs::write(etc.join("slurm/slurm.conf"), "TaskPlugin=task/none\n").unwrap();
    let lines = check(&f, &cfg, "/pjw");
    assert_eq!(line(&lines, "wlm-slurm").status, Status::Warn);
    assert_eq!(line(&lines, "slurm-task-plugin").status, Status::Ok);
}

/// The plugin stack as Slurm reads it: slurm.conf's `PlugStackConfig`, its `include` glob, and
/// the plugin's shared object on disk; `--slurm-conf` (SLURM_CONF) points at a slurm.conf
/// outside /etc.
#[test]
fn slurm_tasks_path_from_plugstack_and_its_includes() {
    let f = machine(Mode::Hybrid);
    let cfg = config(&f, "socket = \"/run/pjw/pjw.sock\"\n", 0o600);
    let conf_dir = f.dir.path().join("slurmconf");
    std::fs::create_dir_all(conf_dir.join("plugstack.d")).unwrap();
    let so = f.dir.path().join("pjw_spank.so");
    std::fs::write(
        conf_dir.join("slurm.conf"),
        "Prolog=/p/pjw-prolog.sh\nEpilog=/p/pjw-epilog.sh\nPlugStackConfig=stack.conf\n",
    )
    .unwrap();
    std::fs::write(
        conf_dir.join("stack.conf"),
        "optional other.so\ninclude plugstack.d/*.conf\n",
    )
    .unwrap();
    let mut r = roots(&f);
    r.slurm_conf = Some(conf_dir.join("slurm.conf"));
    let req = Request {
        config: Some(cfg),
        cgroup_parent: Some("/pjw".into()),
        socket: None,
    };
    let tasks = |r: &Roots| line(&evaluate(&gather(r, &req)), "slurm-tasks").clone();
    let l = tasks(&r);
    assert_eq!(l.status, Status::Warn, "{l:?}");
    assert!(l.detail.contains("adoption only"), "{l:?}");
    // In an included file; the shared object missing first, then there.
    std::fs::write(
        conf_dir.join("plugstack.d/pjw.conf"),
        format!("required {} # pjw\n", so.display()),
    )
    .unwrap();
    std::fs::write(conf_dir.join("plugstack.d/pjw.conf.off"), "junk\n").unwrap();
    let l = tasks(&r);
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.detail.contains("does not exist"), "{l:?}");
    std::fs::write(&so, "").unwrap();
    let l = tasks(&r);
    assert_eq!(l.status, Status::Ok, "{l:?}");
    assert!(
        l.detail.contains("required") && l.detail.contains("plugstack.d/pjw.conf"),
        "{l:?}"
    );
    // Not where the daemon listens.
    let other = Request {
        socket: Some("/tmp/other.sock".into()),
        ..req.clone()
    };
    let l = line(&evaluate(&gather(&r, &other)), "slurm-tasks").clone();
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.fix.contains("socket=/tmp/other.sock"), "{l:?}");
    // A plugin stack Slurm would refuse.
    std::fs::write(conf_dir.join("stack.conf"), "requird x.so\n").unwrap();
    assert_eq!(tasks(&r).status, Status::Warn);
}

#[test]
fn directories_and_pjw_scope_env_file() {
    let f = machine(Mode::Hybrid);
    let state = f.dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = config(
        &f,
        &format!(
            "state_dir = \"{}\"\nsocket = \"{}/nope/s.sock\"\n",
            state.display(),
            f.dir.path().display()
        ),
        0o600,
    );
    let lines = check(&f, &cfg, "/pjw");
    let s = line(&lines, "state-dir");
    // Owned by root (the tests run as root) or not: either way a FAIL.
    assert_eq!(s.status, Status::Fail, "{s:?}");
    assert_eq!(line(&lines, "socket-dir").status, Status::Warn);
    // pjw-scope's file names the parent when nothing else does.
    assert_eq!(
        facts::parse_env_file("PJW_CGROUP_PARENT=/pjw.slice/pjw-jobs.scope/jobs\n").as_deref(),
        Some("/pjw.slice/pjw-jobs.scope/jobs")
    );
    let run = roots(&f).run.join("pjw");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("cgroup-parent.env"),
        "PJW_CGROUP_PARENT=self/jobs\n",
    )
    .unwrap();
    let req = Request {
        config: Some(cfg),
        cgroup_parent: None,
        socket: None,
    };
    let lines = evaluate(&gather(&roots(&f), &req));
    assert!(
        line(&lines, "cgroup-mode")
            .detail
            .contains("parent self/jobs of this process"),
        "{lines:#?}"
    );
}

#[test]
fn systemd_allowed_cpus_narrower_than_the_pool_fails() {
    let f = machine(Mode::Unified);
    let cfg = config(&f, "cpus = \"0-3\"\n", 0o600);
    let req = Request {
        config: Some(cfg),
        cgroup_parent: Some("/pjw".into()),
        socket: None,
    };
    let mut facts = gather(&roots(&f), &req);
    facts.slice_allowed_cpus = Some("2-3".parse().unwrap());
    let lines = evaluate(&facts);
    let l = line(&lines, "systemd-slice");
    assert_eq!(l.status, Status::Fail, "{l:?}");
    assert!(l.detail.contains("0-1"), "{l:?}");
    facts.slice_allowed_cpus = Some("0-7".parse().unwrap());
    assert_eq!(line(&evaluate(&facts), "systemd-slice").status, Status::Ok);
}
