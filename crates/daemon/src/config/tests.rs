//! Tests of config parsing: defaults, every section, errors naming file, key and reason.
use super::*;

#[test]
fn metrics_and_central_keys() {
    let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    assert_eq!((c.metrics_listen, c.central), (None, None));
    let c = Config::parse(
        "t.toml",
        "[metrics]\nlisten = \"127.0.0.1:9810\"\n[central]\nurl = \"postgres://pjw@db/pjw\"\nretry_secs = 0.5\n",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.metrics_listen, Some("127.0.0.1:9810".parse().unwrap()));
    let central = c.central.unwrap();
    assert_eq!(
        (central.ship_samples, central.batch_size, central.retry),
        (false, 100, std::time::Duration::from_millis(500))
    );
    assert_eq!(
        (central.retention.jobs_days, central.retention.samples_days),
        (400, 30)
    );
    let bad = [
        ("[metrics]\nlisten = \"localhost\"", "metrics.listen"),
        ("[metrics]\nport = 1", "metrics.port"),
        ("[central]\nurl = \"mysql://x\"", "central.url"),
        ("[central]\nbatch_size = 5", "central.url"),
        (
            "[central]\nurl = \"postgres://h/d\"\nbatch_size = 0",
            "central.batch_size",
        ),
        (
            "[central]\nurl = \"postgres://h/d?sslmode=verify-full\"",
            "central.url: sslmode=verify-full needs sslrootcert",
        ),
        (
            "[central]\nurl = \"postgres://h/d?sslmode=on\"",
            "central.url: sslmode=\"on\" is not one of",
        ),
        (
            "[central]\nurl = \"postgres://h/d\"\nsamples_retention_days = 0",
            "central.samples_retention_days: 0 is not 1-36500",
        ),
        (
            "[central]\nurl = \"postgres://h/d\"\nretry_secs = 0",
            "central.retry_secs",
        ),
    ];
    for (text, want) in bad {
        let e = Config::parse("t.toml", text, &Overrides::default()).unwrap_err();
        // `key` or `key: reason`.
        let (key, reason) = want.split_once(": ").unwrap_or((want, ""));
        assert!(e.key.starts_with(key), "{text}: {e}");
        assert!(e.to_string().contains(reason), "{text}: {e}");
    }
}

#[test]
fn empty_config_gives_defaults() {
    let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    assert_eq!(c.socket, PathBuf::from("/run/pjw/pjw.sock"));
    assert_eq!(c.state_dir, PathBuf::from("/var/lib/pjw"));
    assert_eq!(c.cgroup_parent, ParentSpec::Absolute("/pjw".into()));
    assert!(c.kill_leftovers);
    assert_eq!(c.pids_max, None);
    assert_eq!(c.socket_mode, 0o666);
    assert_eq!(c.adopt_env, DEFAULT_ADOPT_ENV.to_vec());
    assert_eq!(c.adopt_sweep_ms, 1000);
    let c = Config::parse(
        "t.toml",
        "[adopt]\nenv = [\"MY_JOB\"]\nsweep_interval_ms = 0",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        (c.adopt_env, c.adopt_sweep_ms),
        (vec!["MY_JOB".to_string()], 0)
    );
    assert_eq!(
        (c.vcpus, c.backfill, c.hard_preemption, c.queue_ttl),
        (None, true, true, None)
    );
    assert_eq!((c.default_priority, c.max_priority), (10, 12));
    assert_eq!(c.preempt_priority, 13);
    assert_eq!(c.exclusive, ExclusiveRight::Privileged);
}

#[test]
fn full_config_and_overrides() {
    let text = r#"
        socket = "/tmp/x.sock"
        socket_mode = "0660"
        cpus = "0-3"
        [cgroup]
        parent = "self/pjw"
        [job]
        kill_leftovers = false
        pids_max = 4096
        [log]
        level = "debug"
        format = "json"
    "#;
    let ov = Overrides {
        state_dir: Some("/tmp/st".into()),
        ..Default::default()
    };
    let c = Config::parse("t.toml", text, &ov).unwrap();
    assert_eq!(c.socket_mode, 0o660);
    assert_eq!(c.cpus.unwrap().to_string(), "0-3");
    assert_eq!(
        c.cgroup_parent,
        ParentSpec::SelfRelative(Some("pjw".into()))
    );
    assert!(!c.kill_leftovers);
    assert_eq!(c.pids_max, Some(4096));
    assert_eq!(c.state_dir, PathBuf::from("/tmp/st"));
    assert_eq!(c.log_format, LogFormat::Json);
}

#[test]
fn profile_section() {
    let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    assert_eq!(c.profile, ProfileConfig::default());
    assert_eq!(c.profile.interval_ms, 10_000);
    assert_eq!(c.profile.retention_ms, Some(30 * 86_400_000));
    let text = "[profile]\ninterval = 1\nprocesses = 5\nthreads = 8\nthreads_scan = 64\nretention = \"12h\"\nmax_db_size = \"64M\"\nadmin_group = \"hpcadm\"\n";
    let c = Config::parse("t.toml", text, &Overrides::default()).unwrap();
    assert_eq!(
        c.profile,
        ProfileConfig {
            enabled: true,
            interval_ms: 1000,
            processes: 5,
            threads: 8,
            threads_scan: 64,
            retention_ms: Some(12 * 3_600_000),
            max_db_size: Some(64 << 20),
            admin_group: Some("hpcadm".into()),
        }
    );
    let c = Config::parse(
        "t.toml",
        "[profile]\nretention = 0\nmax_db_size = \"0\"\ninterval = \"2s\"",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        (
            c.profile.retention_ms,
            c.profile.max_db_size,
            c.profile.interval_ms
        ),
        (None, None, 2000)
    );
}

#[test]
fn durations() {
    let t = |s: &str| parse_duration_ms(&RawDuration::Text(s.into()));
    assert_eq!(t("500ms"), Ok(500));
    assert_eq!(t("10s"), Ok(10_000));
    assert_eq!(t("10"), Ok(10_000));
    assert_eq!(t("5m"), Ok(300_000));
    assert_eq!(t("30d"), Ok(30 * 86_400_000));
    assert!(t("").is_err());
    assert!(t("s").is_err());
    assert!(t("1y").is_err());
    assert_eq!(parse_duration_ms(&RawDuration::Secs(3)), Ok(3000));
}

#[test]
fn job_tmp_size_and_root() {
    let parse = |t: &str| Config::parse("x.toml", t, &Overrides::default()).unwrap();
    let c = parse("");
    assert_eq!(c.tmp, None);
    assert_eq!(c.tmp_root, PathBuf::from("/var/lib/pjw/tmp"));
    for (text, want) in [
        ("[job]\ntmp = \"256M\"", Some(256 << 20)),
        ("[job]\ntmp = \"none\"", None),
        ("[job]\ntmp = \"0\"", None),
    ] {
        assert_eq!(parse(text).tmp, want, "{text}");
    }
    let c = parse("state_dir = \"/srv/pjw\"\n[job]\ntmp = \"1G\"");
    assert_eq!(c.tmp_root, PathBuf::from("/srv/pjw/tmp"));
    let c = parse("[job]\ntmp_root = \"/run/pjw/tmp\"");
    assert_eq!(c.tmp_root, PathBuf::from("/run/pjw/tmp"));
}

#[test]
fn errors_name_file_key_and_reason() {
    let cases = [
        ("bogus = 1", "unknown field"),
        (
            "[job]\nkill_leftovers = \"yes\"",
            "job.kill_leftovers (line 2): invalid type",
        ),
        ("cpus = \"3-1\"", "cpus"),
        ("cpus = \"\"", "cpus: must name"),
        ("socket_mode = \"999\"", "socket_mode"),
        ("[cgroup]\nparent = \"relative\"", "cgroup.parent"),
        ("[log]\nlevel = \"loud\"", "log.level"),
        ("[log]\nformat = \"xml\"", "log.format"),
        ("vcpus = 0", "vcpus: must be at least 1"),
        ("[memory]\nlimit = \"lots\"", "memory.limit"),
        ("[memory]\nhigh = 1.5", "memory.high"),
        ("[memory]\nlow = 0.95", "memory.low"),
        ("[memory]\nswap_slots = 0", "memory.swap_slots"),
        (
            "[memory]\nfrozen_max = \"500ms\"",
            "memory.frozen_max: 500 ms is below 1s (0 means no bound)",
        ),
        ("[memory]\nfrozen_max = \"soon\"", "memory.frozen_max"),
        ("max_priority = 17", "max_priority"),
        ("[adopt]\nenv = [\"A-B\"]", "adopt.env"),
        ("[adopt]\nenv = [\"\"]", "adopt.env"),
        ("[adopt]\nexclude_env = [\"X\"]", "adopt.exclude_env"),
        ("[adopt]\nhook_daemons = [\"a/b\"]", "adopt.hook_daemons"),
        ("[adopt]\nsweep_interval_ms = 10", "adopt.sweep_interval_ms"),
        ("[job]\ntmp = \"big\"", "job.tmp"),
        ("[job]\ntmp = \"4K\"", "job.tmp: \"4K\" is below 1M"),
        ("[job]\ntmp_root = \"rel/tmp\"", "job.tmp_root"),
        (
            "[profile]\ninterval = \"500ms\"",
            "profile.interval: 500 ms is not between 1s and 1h",
        ),
        ("[profile]\ninterval = \"ten\"", "profile.interval"),
        (
            "[profile]\nretention = \"3w\"",
            "profile.retention: \"3w\": unknown unit",
        ),
        ("[profile]\nmax_db_size = \"10k\"", "profile.max_db_size"),
        ("[profile]\nadmin_group = \"a b\"", "profile.admin_group"),
        ("[profile]\nprocesses = 5000", "profile.processes"),
        (
            "[profile]\nthreads = 300",
            "profile.threads: 300 is more than 256",
        ),
        ("[profile]\nthreads_scan = 0", "profile.threads_scan"),
        ("[profile]\nbogus = 1", "unknown field"),
        (
            "default_priority = 12\nmax_priority = 8",
            "above max_priority",
        ),
        (
            "queue_order = \"sjf\"",
            "queue_order: \"sjf\" is not \"submission\" or \"shortest-first\"",
        ),
        (
            "queue_max_wait = 0",
            "queue_max_wait: 0 is not in 1-31622400",
        ),
        (
            "[job]\nkill_wait = 3601",
            "job.kill_wait: 3601 is more than 3600",
        ),
        ("[job]\ndefault_time = \"forever\"", "job.default_time: "),
        ("[job]\nmax_time = \"0\"", "job.max_time: "),
        (
            "[job]\ndefault_time = \"2h\"\nmax_time = \"1h\"",
            "job.default_time: 2:00:00 is more than job.max_time (1:00:00)",
        ),
    ];
    for (text, want) in cases {
        let e = Config::parse("/etc/pjw/pjw.toml", text, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config /etc/pjw/pjw.toml: "), "{e}");
        assert!(e.contains(want), "{text:?} gave {e:?}");
    }
}

#[test]
fn passwords_are_found_and_masked() {
    assert_eq!(
        url_password("postgres://pjw:s3cret@db:5432/pjw"),
        Some("s3cret")
    );
    assert_eq!(url_password("postgres://pjw@db/pjw"), None);
    assert_eq!(url_password("postgres://db/pjw?user=a:b"), None);
    assert_eq!(
        mask_password("postgres://pjw:s3cret@db/pjw"),
        "postgres://pjw:***@db/pjw"
    );
    let e = Config::parse(
        "t.toml",
        "[central]\nurl = \"postgres://pjw:s3cret@db/pjw\"\n",
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(!format!("{e:?} {e}").contains("s3cret"));
}

#[test]
fn a_password_in_the_url_is_refused_and_a_password_file_must_be_roots_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pjw.toml");
    // A password in the URL is refused whatever the file's mode: only the root-only file.
    std::fs::write(&f, "[central]\nurl = \"postgres://pjw:s3cret@db/pjw\"\n").unwrap();
    for mode in [0o644, 0o600] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("central.password_file"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    let pw = dir.path().join("central.pass");
    std::fs::write(&pw, "s3cret\n").unwrap();
    std::fs::write(
        &f,
        format!(
            "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"{}\"\n",
            pw.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("mode 0600"), "{e}");
}

/// The positive half: root's own password file of mode 0600 is read. Root only (the file must
/// be root's), so it is its own test and a skip elsewhere, not a pass.
#[test]
fn a_password_file_of_roots_with_mode_0600_is_read() {
    use std::os::unix::fs::PermissionsExt;
    pjw_testkit::require_root!();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pjw.toml");
    let pw = dir.path().join("central.pass");
    std::fs::write(&pw, "s3cret\n").unwrap();
    std::fs::write(
        &f,
        format!(
            "[central]\nurl = \"postgres://pjw@db/pjw\"\npassword_file = \"{}\"\n",
            pw.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::load(Some(&f), &Overrides::default()).unwrap();
    assert_eq!(c.central.unwrap().password.as_deref(), Some("s3cret"));
}

#[test]
fn the_sites_ca_file_is_read_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pjw.toml");
    let ca = dir.path().join("site-ca.pem");
    let url = format!(
        "[central]\nurl = \"postgres://pjw@db/pjw?sslmode=verify-full&sslrootcert={}\"\n",
        ca.display()
    );
    std::fs::write(&f, &url).unwrap();
    let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
    assert_eq!(e.key, "central.url", "{e}");
    assert!(e.to_string().contains("site-ca.pem"), "{e}");
    // A file with no certificate in it is refused too.
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let e = Config::load(Some(&f), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
}

#[test]
fn job_bind_mode() {
    use pjw_core::thread_bind::BindMode;
    let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    assert_eq!(c.bind, BindMode::None);
    for (text, want) in [
        ("threads", BindMode::Threads),
        ("cores", BindMode::Cores),
        ("none", BindMode::None),
    ] {
        let toml = format!("[job]\nbind = \"{text}\"\n");
        let c = Config::parse("t.toml", &toml, &Overrides::default()).unwrap();
        assert_eq!(c.bind, want, "{text}");
    }
    for bad in ["\"thread\"", "\"\"", "\"Cores\"", "1"] {
        let toml = format!("[job]\nbind = {bad}\n");
        let e = Config::parse("t.toml", &toml, &Overrides::default()).unwrap_err();
        assert!(e.key.starts_with("job.bind"), "{bad}: {e}");
    }
    let e = Config::parse("t.toml", "[job]\nbind = \"cpus\"\n", &Overrides::default()).unwrap_err();
    assert!(
        e.to_string().contains("not one of threads, cores, none"),
        "{e}"
    );
    // A reload may change it at once (the binder gives the pins of jobs now at `none` back).
    let old = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    let new = Config::parse("t.toml", "[job]\nbind = \"threads\"", &Overrides::default()).unwrap();
    let plan =
        crate::reload::plan(&old, &new, &"0-3".parse().unwrap(), &Default::default()).unwrap();
    assert_eq!(plan.changed, ["job.bind"]);
}

#[test]
fn job_bind_interval_and_thread_env() {
    let c = Config::parse("t.toml", "", &Overrides::default()).unwrap();
    assert_eq!((c.bind_interval_ms, c.thread_env), (1000, true));
    let c = Config::parse(
        "t.toml",
        "[job]\nbind_interval_ms = 250\nthread_env = false\n",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!((c.bind_interval_ms, c.thread_env), (250, false));
    let e = Config::parse(
        "t.toml",
        "[job]\nbind_interval_ms = 10\n",
        &Overrides::default(),
    )
    .unwrap_err();
    assert_eq!(e.key, "job.bind_interval_ms", "{e}");
    assert!(e.to_string().contains("below 100"), "{e}");
}

#[test]
fn the_governors_horizon_follows_its_tick_and_a_freeze_is_bounded() {
    let c = |t: &str| Config::parse("pjw.toml", t, &Overrides::default()).unwrap();
    // (config, prediction seconds, frozen_max ms)
    let cases = [
        ("", 3.0, Some(600_000)),
        ("[memory]\ninterval_ms = 250\n", 0.75, Some(600_000)),
        (
            "[memory]\ninterval_ms = 250\nvm_prediction = 2\n",
            2.0,
            Some(600_000),
        ),
        ("[memory]\nfrozen_max = \"90s\"\n", 3.0, Some(90_000)),
        ("[memory]\nfrozen_max = 0\n", 3.0, None),
    ];
    for (text, secs, max) in cases {
        let g = c(text).governor_cfg;
        assert_eq!(
            (g.prediction_secs, g.frozen_max_ms),
            (secs, max),
            "{text:?}"
        );
    }
}

#[test]
fn queue_order_defaults_to_submission_and_takes_shortest_first_with_its_wait() {
    use pjw_core::sched::QueueOrder;
    let parse = |text: &str| Config::parse("t", text, &Overrides::default()).unwrap();
    assert_eq!(parse("").queue_order, QueueOrder::Submission);
    assert_eq!(
        parse("queue_order = \"shortest-first\"").queue_order,
        QueueOrder::ShortestFirst {
            max_wait_ms: 8 * 3600 * 1000
        }
    );
    assert_eq!(
        parse("queue_order = \"shortest-first\"\nqueue_max_wait = 600").queue_order,
        QueueOrder::ShortestFirst {
            max_wait_ms: 600_000
        }
    );
    // With a queue ttl, an overtaken job goes first at half of it (before it would expire).
    assert_eq!(
        parse("queue_order = \"shortest-first\"\nqueue_ttl = 3600").queue_order,
        QueueOrder::ShortestFirst {
            max_wait_ms: 1_800_000
        }
    );
}
