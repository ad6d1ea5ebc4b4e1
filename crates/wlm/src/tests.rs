use super::*;

#[test]
fn condor_name_is_the_commands_file_name_or_none() {
    let env = Env::default();
    let ad = |cmd: &str| format!("ClusterId = 42\nProcId = 0\nCmd = \"{cmd}\"\n");
    let name = |cmd: &str| condor(&env, &ad(cmd), None).unwrap().name;
    assert_eq!(name("/home/carol/bin/sim").as_deref(), Some("sim"));
    assert_eq!(name("/home/carol/bin/"), None);
    assert_eq!(name("sim"), Some("sim".to_string()));
}

#[test]
fn sge_shepherd_reads_config_only_and_refuses_ambiguity() {
    let j =
        sge_shepherd("job_owner=alice\njob_id=12\nja_task_id=0\npe_slots=2\nh_vmem=1G\n").unwrap();
    assert_eq!(
        (j.pjw_id.as_str(), j.user.as_deref(), j.cpus, j.mem),
        ("12", Some("alice"), Some(2), Some(2 << 30))
    );
    assert_eq!(
        sge_shepherd("job_id=12\nja_task_id=3\n").unwrap().pjw_id,
        "12.3"
    );
    let name = |text: &str| sge_shepherd(text).unwrap().name;
    assert_eq!(
        name("job_id=12\njob_name=sim\njob_name=forged\n").as_deref(),
        Some("sim")
    );
    assert_eq!(name("job_id=12\njob_name=\n"), None);
    assert_eq!(name("job_id=12\n"), None);
    for bad in [
        "job_owner=alice\njob_id=12\njob_owner=root\n",
        "job_id=12\nhost_slots=1\nhost_slots=64\n",
        "job_id=12 x\n",
        "job_id=12\nja_task_id=1x\n",
        "job_owner=alice\n",
    ] {
        assert!(sge_shepherd(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn ids_become_pjw_ids() {
    for (wlm, pjw) in [
        ("42", "42"),
        ("123.pbs-server.example.org", "123.pbs-server.example.org"),
        ("77[3]", "77.3"),
        ("123[4].server", "123.4.server"),
        ("a b/c", "a_b_c"),
        ("-x", "x"),
        ("", "job"),
    ] {
        assert_eq!(pjw_id(wlm), pjw, "{wlm}");
        assert!(pjw_core::JobId::new(&pjw_id(wlm)).is_ok());
    }
    assert_eq!(pjw_id(&"9".repeat(100)).len(), 64);
}

/// Seen writing the fuzz target wlm_env (fuzz/): memory per CPU times CPUs overflowed.
#[test]
fn slurm_memory_per_cpu_times_cpus_out_of_range_is_an_error() {
    let env = env_from_lines(
        "SLURM_JOB_ID=1\nSLURM_CPUS_ON_NODE=4000000000\nSLURM_MEM_PER_CPU=1000000000\n",
    );
    assert!(matches!(slurm(&env), Err(WlmError::Bad { .. })));
}

/// Seen writing the fuzz target wlm_files (fuzz/): a blank name or an indented
/// comment became a variable.
#[test]
fn env_lines_with_blank_names_or_indented_comments_are_skipped() {
    let env = env_from_lines("  =x\n  # X=1\n Y = 2\n");
    assert_eq!(env.len(), 1, "{env:?}");
    assert_eq!(env.get("Y").map(String::as_str), Some(" 2"));
}

#[test]
fn proc_environ_blocks() {
    let env = env_from_environ(b"SLURM_JOB_ID=7\0PATH=/bin\0=odd\0NOEQUALS\0X=a=b\0");
    assert_eq!(env.get("SLURM_JOB_ID").map(String::as_str), Some("7"));
    assert_eq!(env.get("X").map(String::as_str), Some("a=b"));
    assert_eq!(env.len(), 3);
    assert_eq!(detect(&env), Some(Manager::Slurm));
}

#[test]
fn manager_names() {
    for m in Manager::ALL {
        assert_eq!(m.as_str().parse::<Manager>().unwrap(), m);
    }
    assert_eq!("OpenPBS".parse::<Manager>().unwrap(), Manager::Pbs);
    assert!("moab".parse::<Manager>().is_err());
}

#[test]
fn sizes() {
    assert_eq!(sge_size("2G"), Ok(Some(2 << 30)));
    assert_eq!(sge_size("2g"), Ok(Some(2_000_000_000)));
    // Found by the fuzzer: a value that rounds to 0 bytes is refused, not a 0-byte limit.
    assert!(sge_size(" .43").is_err());
    assert!(sge_size("0.4").is_err());
    assert_eq!(sge_size("0.6"), Ok(Some(1)));
    assert_eq!(sge_size("1.5M"), Ok(Some(1_572_864)));
    assert_eq!(sge_size("INFINITY"), Ok(None));
    assert!(sge_size("2X").is_err());
    assert_eq!(pbs_size("4gb"), Ok(4 << 30));
    assert_eq!(pbs_size("512MB"), Ok(512 << 20));
    assert_eq!(pbs_size("1048576"), Ok(1 << 20));
    assert_eq!(pbs_size("2kw"), Ok(16 << 10));
    assert!(pbs_size("gb").is_err());
    assert!(pbs_size("5parsecs").is_err());
}

#[test]
fn class_ads() {
    let ad = parse_class_ad(
        "Owner = \"al\\\"ice\"\nRequestMemory = ifthenelse(MemoryUsage =!= undefined,MemoryUsage,( ImageSize + 1023 ) / 1024)\nRequestCpus = 2\n",
    );
    assert_eq!(ad_string(&ad["owner"]).unwrap(), "al\"ice");
    assert_eq!(ad_int(&ad, "requestcpus"), Some(2));
    assert_eq!(ad_int(&ad, "requestmemory"), None);
}
