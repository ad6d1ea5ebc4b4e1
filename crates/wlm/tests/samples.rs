//! Every parser on the environments and job files the managers really write (tests/samples/):
//! Slurm and Grid Engine samples were captured on this machine's Slurm 22.05 and Son of Grid
//! Engine 8.1.9; PBS, LSF and HTCondor ones are written from their documentation.

use std::path::Path;

use pjw_wlm::{
    condor, detect, env_from_lines, lsf, pbs, read::read_with, sge, slurm, Env, Manager, WlmJob,
};

fn sample(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/samples")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn env(name: &str) -> Env {
    env_from_lines(&sample(name))
}

/// (what, parsed, manager, id, pjw id, user, cpus, mem, tmpdir)
type Row = (
    &'static str,
    WlmJob,
    Manager,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<u32>,
    Option<u64>,
    Option<&'static str>,
);

#[test]
fn every_sample_parses_to_the_job_it_describes() {
    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    let sge_env = env("sge-shepherd.environment");
    let rows: Vec<Row> = vec![
        (
            "slurm task prolog",
            slurm(&env("slurm-taskprolog.env")).unwrap(),
            Manager::Slurm,
            "2",
            "2",
            Some("root"),
            Some(1),
            Some(1024 * M),
            None,
        ),
        (
            "slurm prolog (no memory said)",
            slurm(&env("slurm-prolog.env")).unwrap(),
            Manager::Slurm,
            "2",
            "2",
            Some("root"),
            Some(1),
            None,
            None,
        ),
        (
            "slurm epilog",
            slurm(&env("slurm-epilog.env")).unwrap(),
            Manager::Slurm,
            "2",
            "2",
            Some("root"),
            Some(1),
            None,
            None,
        ),
        (
            "sge prolog env only",
            sge(&env("sge-prolog.env"), None).unwrap(),
            Manager::Sge,
            "1",
            "1",
            Some("root"),
            Some(1),
            None,
            None,
        ),
        (
            "sge shepherd files",
            sge(&sge_env, Some(&env("sge-shepherd.config"))).unwrap(),
            Manager::Sge,
            "1",
            "1",
            Some("root"),
            Some(1),
            None,
            Some("/tmp/1.1.all.q"),
        ),
        (
            "sge pe array task, h_vmem per slot",
            sge(&Env::new(), Some(&env("sge-pe-array.config"))).unwrap(),
            Manager::Sge,
            "17.5",
            "17.5",
            Some("erin"),
            Some(4),
            Some(8 * G),
            Some("/tmp/1.1.all.q"),
        ),
        (
            "pbs pro",
            pbs(
                &env("pbs-pro-job.env"),
                Some(&sample("pbs-pro.nodefile")),
                Some("node07"),
            )
            .unwrap(),
            Manager::Pbs,
            "1234.pbs01",
            "1234.pbs01",
            Some("alice"),
            Some(4),
            None,
            Some("/var/tmp/pbs.1234.pbs01"),
        ),
        (
            "torque",
            pbs(&env("torque-job.env"), None, None).unwrap(),
            Manager::Pbs,
            "5678.torque-head",
            "5678.torque-head",
            Some("dave"),
            Some(8),
            None,
            None,
        ),
        (
            "lsf",
            lsf(&env("lsf-job.env"), Some("node07"), Some(3 * G)).unwrap(),
            Manager::Lsf,
            "4711",
            "4711",
            Some("bob"),
            Some(4),
            Some(3 * G),
            Some("/tmp/1700000000.4711"),
        ),
        (
            "lsf array element",
            lsf(
                &env("lsf-array-element.env"),
                Some("node08.example.org"),
                None,
            )
            .unwrap(),
            Manager::Lsf,
            "4712[3]",
            "4712.3",
            Some("bob"),
            Some(1),
            None,
            None,
        ),
        (
            "condor",
            condor(
                &env("condor-job.env"),
                &sample("condor-job.ad"),
                Some(&sample("condor-slot.machine.ad")),
            )
            .unwrap(),
            Manager::Condor,
            "42.0",
            "42.0",
            Some("carol"),
            Some(2),
            Some(2048 * M),
            Some("/var/lib/condor/execute/dir_31337"),
        ),
        (
            "condor memory request is an expression: the slot's",
            condor(
                &env("condor-job.env"),
                &sample("condor-default-memory-job.ad"),
                Some(&sample("condor-slot.machine.ad")),
            )
            .unwrap(),
            Manager::Condor,
            "43.7",
            "43.7",
            Some("carol"),
            Some(1),
            Some(1536 * M),
            Some("/var/lib/condor/execute/dir_31337"),
        ),
    ];
    for (what, job, m, id, pjw, user, cpus, mem, tmpdir) in rows {
        assert_eq!(job.manager, m, "{what}");
        assert_eq!(job.job_id, id, "{what}");
        assert_eq!(job.pjw_id, pjw, "{what}");
        assert_eq!(job.user.as_deref(), user, "{what}");
        assert_eq!(job.cpus, cpus, "{what}");
        assert_eq!(job.mem, mem, "{what}");
        assert_eq!(job.tmpdir.as_deref(), tmpdir, "{what}");
    }
}

#[test]
fn the_manager_is_detected_from_its_environment() {
    for (file, m) in [
        ("slurm-taskprolog.env", Some(Manager::Slurm)),
        ("slurm-epilog.env", Some(Manager::Slurm)),
        ("sge-prolog.env", Some(Manager::Sge)),
        ("sge-shepherd.environment", Some(Manager::Sge)),
        ("pbs-pro-job.env", Some(Manager::Pbs)),
        ("torque-job.env", Some(Manager::Pbs)),
        ("lsf-job.env", Some(Manager::Lsf)),
        ("condor-job.env", Some(Manager::Condor)),
        ("pbs-pro.nodefile", None),
    ] {
        assert_eq!(detect(&env(file)), m, "{file}");
    }
    // JOB_ID alone is too common a name to mean Grid Engine.
    assert_eq!(detect(&env_from_lines("JOB_ID=3\n")), None);
}

#[test]
fn bad_values_are_refused_with_the_variable_named() {
    let cases: Vec<(Result<WlmJob, pjw_wlm::WlmError>, &str)> = vec![
        (
            slurm(&env_from_lines("SLURM_JOB_ID=1\nSLURM_CPUS_ON_NODE=zero\n")),
            "SLURM_CPUS_ON_NODE",
        ),
        (
            slurm(&env_from_lines("SLURM_JOB_ID=1\nSLURM_CPUS_ON_NODE=0\n")),
            "SLURM_CPUS_ON_NODE",
        ),
        (
            slurm(&env_from_lines(
                "SLURM_JOB_ID=1\nSLURM_JOB_CPUS_PER_NODE=x(2)\n",
            )),
            "SLURM_JOB_CPUS_PER_NODE",
        ),
        (
            slurm(&env_from_lines("SLURM_JOB_ID=1\nSLURM_MEM_PER_NODE=-5\n")),
            "SLURM_MEM_PER_NODE",
        ),
        (slurm(&env_from_lines("SLURM_JOB_USER=a\n")), "SLURM_JOB_ID"),
        (
            sge(&env_from_lines("JOB_ID=1\nNSLOTS=many\n"), None),
            "NSLOTS",
        ),
        (
            sge(
                &env_from_lines("JOB_ID=1\n"),
                Some(&env_from_lines("h_vmem=2X\n")),
            ),
            "h_vmem",
        ),
        (sge(&Env::new(), None), "JOB_ID"),
        (
            pbs(&env_from_lines("PBS_JOBID=1.s\nNCPUS=-1\n"), None, None),
            "NCPUS",
        ),
        (
            lsf(
                &env_from_lines("LSB_JOBID=1\nLSB_MCPU_HOSTS=a 1 b\n"),
                None,
                None,
            ),
            "LSB_MCPU_HOSTS",
        ),
        (
            condor(&Env::new(), "Owner = \"x\"\nProcId = 0\n", None),
            "ClusterId",
        ),
    ];
    for (r, var) in cases {
        let e = r.expect_err(var).to_string();
        assert!(e.contains(var), "{e} does not name {var}");
    }
}

#[test]
fn slurm_cpus_per_node_lists_and_memory_per_node() {
    let j = slurm(&env_from_lines(
        "SLURM_JOB_ID=9\nSLURM_JOB_CPUS_PER_NODE=4(x2),2\nSLURM_MEM_PER_NODE=3000\n",
    ))
    .unwrap();
    assert_eq!((j.cpus, j.mem), (Some(4), Some(3000 << 20)));
}

#[test]
fn the_reader_finds_the_managers_files() {
    let dir = tempfile::tempdir().unwrap();
    // HTCondor: the job ad and machine ad named by the environment.
    std::fs::write(dir.path().join(".job.ad"), sample("condor-job.ad")).unwrap();
    std::fs::write(
        dir.path().join(".machine.ad"),
        sample("condor-slot.machine.ad"),
    )
    .unwrap();
    let mut e = env("condor-job.env");
    e.insert(
        "_CONDOR_JOB_AD".into(),
        dir.path().join(".job.ad").display().to_string(),
    );
    e.insert(
        "_CONDOR_MACHINE_AD".into(),
        dir.path().join(".machine.ad").display().to_string(),
    );
    let j = read_with(None, &e, dir.path()).unwrap();
    assert_eq!(
        (j.manager, j.job_id.as_str(), j.cpus),
        (Manager::Condor, "42.0", Some(2))
    );
    // A missing job ad is an error naming the file.
    e.insert("_CONDOR_JOB_AD".into(), "/nonexistent/.job.ad".into());
    let err = read_with(Some(Manager::Condor), &e, dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/.job.ad"), "{err}");
    // Grid Engine under shepherd_cmd: no variables, `environment` and `config` in the directory.
    std::fs::write(
        dir.path().join("environment"),
        sample("sge-shepherd.environment"),
    )
    .unwrap();
    std::fs::write(dir.path().join("config"), sample("sge-shepherd.config")).unwrap();
    let j = read_with(None, &Env::new(), dir.path()).unwrap();
    assert_eq!(
        (j.manager, j.job_id.as_str(), j.user.as_deref(), j.cpus),
        (Manager::Sge, "1", Some("root"), Some(1))
    );
    // PBS: this host's lines in the node file.
    let nodefile = dir.path().join("nodefile");
    let host = pjw_wlm::read::hostname().unwrap();
    std::fs::write(&nodefile, format!("{host}\n{host}\nother-node\n{host}\n")).unwrap();
    let e = env_from_lines(&format!(
        "PBS_JOBID=7.s\nUSER=alice\nPBS_NODEFILE={}\n",
        nodefile.display()
    ));
    let j = read_with(Some(Manager::Pbs), &e, dir.path()).unwrap();
    assert_eq!(j.cpus, Some(3));
    // Nothing at all.
    let empty = tempfile::tempdir().unwrap();
    assert!(read_with(None, &Env::new(), empty.path()).is_err());
}
