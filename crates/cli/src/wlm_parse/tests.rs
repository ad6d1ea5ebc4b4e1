//! Tables of the Prolog's inputs: squeue lines, arrays, heterogeneous jobs.

use super::*;

#[test]
fn slurm_job_names_come_from_slurm_bounded_and_escaped() {
    let long = "n".repeat(300);
    let cut = format!("{}…", "n".repeat(MAX_JOB_NAME));
    let array = "JobId=124 ArrayJobId=123 ArrayTaskId=1 JobName=sweep 1\n   UserId=a(1)\n";
    // (SLURM_JOB_NAME, scontrol's text, name)
    let table: Vec<(Option<&str>, String, Option<String>)> = vec![
        (None, ONE_NODE.into(), Some("wrap".into())),
        (None, array.into(), Some("sweep 1".into())),
        (Some("from-env"), ONE_NODE.into(), Some("from-env".into())),
        (Some(""), ONE_NODE.into(), Some("wrap".into())),
        // A name with a newline is cut there; forged lines after it are not the name.
        (None, FORGED.into(), Some("a".into())),
        (None, format!("JobId=9 JobName={long}\n"), Some(cut.clone())),
        (Some(long.as_str()), String::new(), Some(cut)),
        (
            None,
            "JobId=9 JobName=a\x1b[2Jb\n".into(),
            Some("a\\u{1b}[2Jb".into()),
        ),
        (None, "JobId=9 JobName=\n   UserId=a(1)\n".into(), None),
        (None, String::new(), None),
        (
            None,
            "slurm_load_jobs error: Invalid job id specified\n".into(),
            None,
        ),
    ];
    for (env, text, want) in table {
        assert_eq!(slurm_job_name(env, &text), want, "{env:?} {text:?}");
    }
}

/// `scontrol show job -d 2` of Slurm 22.05 on the test machine (one node, `sbatch -n1`).
const ONE_NODE: &str = "JobId=2 JobName=wrap
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=CONFIGURING Reason=None Dependency=(null)
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,mem=1G,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=(null)
     Nodes=vm CPU_IDs=0 Mem=1024 GRES=
   MinCPUsNode=1 MinMemoryCPU=1G MinTmpDiskNode=0
   Command=(null)
   WorkDir=/tmp
";

/// The job name of issue 12 (`x UserId=root(0) NumCPUs=2`), and one with newlines that
/// forges whole lines, as scontrol 22.05 prints them (checked on the live Slurm).
const FORGED: &str = "JobId=2 JobName=a
   NumNodes=1 NumCPUs=2 MinMemoryNode=64G
     Nodes=vm CPU_IDs=0-1 Mem=99999 GRES=
   UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=vm CPU_IDs=0 Mem=100 GRES=
   MinCPUsNode=1 MinMemoryCPU=100M MinTmpDiskNode=0
   Comment=c
     Nodes=vm CPU_IDs=0-1 Mem=99999 GRES=
";

/// What `squeue --noconvert -h -j ID -O` [`SQUEUE_MEM_FIELDS`] printed for real jobs of
/// Slurm 22.05 on the test machine, and the memory each has on its node. A job's name is
/// not among the fields: `x MinMemoryNode=1e-9` as a name changes nothing here.
#[test]
fn the_memory_slurm_gave_whatever_the_job_s_text() {
    let mib = |n: u64| Some(n << 20);
    for (out, cpus_here, want, what) in [
        (
            "100M|1|1|cpu=1,mem=100M,node=1,billing=1|\n",
            1,
            mib(100),
            "--mem-per-cpu=100M -n1 (named `x MinMemoryNode=1e-9`)",
        ),
        (
            "300M|2|1|cpu=2,mem=300M,node=1,billing=2|\n",
            2,
            mib(300),
            "--mem=300M -n2",
        ),
        (
            "256M|2|1|cpu=2,mem=512M,node=1,billing=2|\n",
            2,
            mib(512),
            "DefMemPerCPU=256, -n2",
        ),
        (
            "768M|2|1|cpu=2,mem=1.50G,node=1,billing=2|\n",
            2,
            mib(1536),
            "--mem-per-cpu=768M -n2",
        ),
        (
            "1537M|1|1|cpu=1,mem=1537M,node=1,billing=1|",
            1,
            mib(1537),
            "--mem-per-cpu=1537M",
        ),
        (
            "0|1|1|cpu=1,mem=24005M,node=1,billing=1|",
            1,
            mib(24005),
            "--mem=0: the node's",
        ),
        (
            "0|1|1|cpu=1,mem=200M,node=1,billing=1|",
            1,
            mib(200),
            "--gpus=2 --mem-per-gpu=100M",
        ),
        ("0|1|1|cpu=1,node=1,billing=1|", 1, None, "no memory at all"),
        (
            "2048M|6|2|cpu=6,mem=4G,node=2,billing=6|",
            4,
            mib(2048),
            "--mem=2G on 2 nodes",
        ),
        (
            "1024M|6|2|cpu=6,mem=6G,node=2,billing=6|",
            4,
            mib(4096),
            "--mem-per-cpu=1G, 4 CPUs here",
        ),
        (
            "1024M|6|2|cpu=6,mem=6G,node=2,billing=6|",
            2,
            mib(2048),
            "--mem-per-cpu=1G, 2 CPUs here",
        ),
        (
            "1024M|2|2|cpu=2,mem=2G,node=2,billing=2|",
            1,
            mib(1024),
            "one CPU per node: both readings agree",
        ),
        ("1G|1|1|cpu=1,mem=1G,node=1|", 1, mib(1024), "a unit"),
    ] {
        let q = parse_squeue_mem(&format!("42|{out}"), &job42())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(node_mem(&q, cpus_here), Ok(want), "{what}: {q:?}");
    }
}

/// Numbers are checked after their conversion: what converts to less than 1 MiB (but not
/// 0), overflows, or is no number as Slurm prints one is an error, never a 0-byte limit
/// (issue 25, item 2: `MinMemoryNode=1e-9` once gave 0 and drained the node).
#[test]
fn sizes_are_checked_after_conversion() {
    for bad in [
        "1e-9|1|1|cpu=1,mem=100M|",
        "0.001K|1|1|cpu=1,mem=100M|",
        "5K|1|1|cpu=1,mem=100M|",
        "1.5M|1|1|cpu=1,mem=100M|",
        "-1|1|1|cpu=1,mem=100M|",
        "+1|1|1|cpu=1,mem=100M|",
        "NaN|1|1|cpu=1,mem=100M|",
        "inf|1|1|cpu=1,mem=100M|",
        "99999999999999999999999999P|1|1|cpu=1,mem=100M|",
        "8796093022208M|1|1|cpu=1,mem=100M|",
        "100X|1|1|cpu=1,mem=100M|",
        "100M|0|1|cpu=1,mem=100M|",
        "100M|1|0|cpu=1,mem=100M|",
        "100M|1|1|cpu=1,mem=1e-9G|",
        "100M|1|1|cpu=1,mem=0.0001M|",
        "100M|1|1|cpu=1,mem=1M,mem=2M|",
        "100M|1|1|",
        "100M|1|1|cpu=1,mem=100M",
        "100M|1|1|cpu=1|\n42|100M|1|1|cpu=1|",
        "",
    ] {
        assert!(
            parse_squeue_mem(&format!("42|{bad}"), &job42()).is_err(),
            "{bad:?} was taken"
        );
    }
    // 1 MiB is the least Slurm gives, and a per-CPU product that overflows is refused.
    let q = parse_squeue_mem("42|1M|1|1|cpu=1|", &job42()).unwrap();
    assert_eq!(node_mem(&q, 1), Ok(Some(1 << 20)));
    let q = parse_squeue_mem(
        "42|8796093022207M|4294967295|1|cpu=1,mem=8796093022207M|",
        &job42(),
    )
    .unwrap();
    assert!(node_mem(&q, u32::MAX).is_ok());
}

/// The squeue fields the Prolog reads are numbers and lists Slurm makes: none of the fields
/// that print a user's text (name, comment, paths, account…) is among them.
#[test]
fn the_prolog_asks_squeue_for_no_user_text() {
    let fields: Vec<&str> = SQUEUE_MEM_FIELDS
        .split(',')
        .map(|f| f.split(':').next().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["JobID", "MinMemory", "NumCPUs", "NumNodes", "tres-alloc"]
    );
}

fn job42() -> SqueueJob<'static> {
    SqueueJob {
        id: "42",
        array: None,
    }
}

/// Issue 25, N1, as squeue 22.05 prints them: `squeue -j 40` for the last task of an array
/// (its own number is the array's) lists every task of the array and its pending rest, and
/// `-j 50` for a het job's leader lists every component. The Prolog's job is the one line
/// that names it; the others' memory is never taken, and no line of its own is an error.
#[test]
fn squeue_s_line_of_an_array_task_or_het_component_is_told_apart() {
    let array = "40_0|100M|1|1|cpu=1,mem=100M,node=1|\n\
                     40_1|200M|1|1|cpu=1,mem=200M,node=1|\n\
                     40_3|300M|1|1|cpu=1,mem=300M,node=1|\n\
                     40_[4-9]|400M|1|1||\n";
    let task = |id, t| SqueueJob {
        id,
        array: Some(("40", t)),
    };
    for (job, want) in [
        (task("40", "3"), 300),
        (task("41", "0"), 100),
        (task("42", "1"), 200),
    ] {
        let q = parse_squeue_mem(array, &job).unwrap_or_else(|e| panic!("{job:?}: {e}"));
        assert_eq!(node_mem(&q, 1), Ok(Some(want << 20)), "{job:?}");
    }
    // A task squeue does not list, and an array's task that appears twice, are errors.
    assert!(parse_squeue_mem(array, &task("40", "2")).is_err());
    let twice = format!("{array}40_3|1M|1|1|cpu=1|\n");
    assert!(parse_squeue_mem(&twice, &task("40", "3")).is_err());
    // Without slurmd's array variables, the array's lines name no job 40.
    assert!(parse_squeue_mem(
        array,
        &SqueueJob {
            id: "40",
            array: None
        }
    )
    .is_err());
    // A line alone is the job's whatever it shows (squeue -j ID always lists ID).
    let q = parse_squeue_mem(
        "41_0|100M|1|1|cpu=1|\n",
        &SqueueJob {
            id: "41",
            array: None,
        },
    );
    assert_eq!(q.map(|q| q.min_mib), Ok(100));

    let het = "50+0|100M|1|1|cpu=1,mem=100M,node=1|\n51+1|1M|1|1|cpu=1|\n\
                   50+1|200M|2|1|cpu=2,mem=400M,node=1|\n";
    let q = parse_squeue_mem(
        het,
        &SqueueJob {
            id: "50",
            array: None,
        },
    )
    .unwrap();
    assert_eq!(node_mem(&q, 1), Ok(Some(100 << 20)));
    let q = parse_squeue_mem(
        het,
        &SqueueJob {
            id: "51",
            array: None,
        },
    )
    .unwrap();
    assert_eq!(node_mem(&q, 2), Ok(Some(400 << 20)));
}

#[test]
fn huge_counts_saturate_instead_of_overflowing() {
    // The job's own numbers (fuzz seed attack-mem-overflow).
    assert!(cpus_on_node("1(x18446744073709551615),2", "vm", "vm").is_ok());
}

#[test]
fn prolog_identity_is_slurmd_s() {
    let users = |uid: u32| match uid {
        0 => Some("root".to_string()),
        65534 => Some("nobody".to_string()),
        _ => None,
    };
    let env_of = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let base: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "2"),
        ("SLURM_JOB_UID", "65534"),
        ("SLURM_JOB_USER", "nobody"),
        ("SLURM_JOB_CPUS_PER_NODE", "1"),
        ("SLURM_NODELIST", "vm"),
    ];
    let j = prolog_job(&env_of(base), "vm", &users).unwrap();
    assert_eq!((j.id.as_str(), j.user.as_str(), j.cpus), ("2", "nobody", 1));
    assert_eq!(j.gpus, None);
    let gpu: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "3"),
        ("SLURM_JOB_UID", "0"),
        ("SLURM_JOB_CPUS_PER_NODE", "2"),
        ("SLURM_JOB_GPUS", "2,0"),
    ];
    assert_eq!(
        prolog_job(&env_of(gpu), "vm", &users).unwrap().gpus,
        Some(vec![2, 0])
    );
    let multi: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "77"),
        ("SLURM_JOB_UID", "0"),
        ("SLURM_JOB_CPUS_PER_NODE", "4(x2),2"),
        ("SLURM_JOB_NODELIST", "n[01-02],n03"),
    ];
    assert_eq!(prolog_job(&env_of(multi), "n02", &users).unwrap().cpus, 4);
    assert_eq!(prolog_job(&env_of(multi), "n03", &users).unwrap().cpus, 2);
    assert!(prolog_job(&env_of(multi), "n04", &users).is_err());
    for (bad, why) in [
        (
            &[
                ("SLURM_JOB_ID", "2"),
                ("SLURM_JOB_UID", "65534"),
                ("SLURM_JOB_USER", "root"),
                ("SLURM_JOB_CPUS_PER_NODE", "1"),
            ][..],
            "is not the user",
        ),
        (
            &[
                ("SLURM_JOB_ID", "2\nforged"),
                ("SLURM_JOB_UID", "0"),
                ("SLURM_JOB_CPUS_PER_NODE", "1"),
            ][..],
            "letters, digits",
        ),
        (
            &[("SLURM_JOB_ID", "2"), ("SLURM_JOB_CPUS_PER_NODE", "1")][..],
            "SLURM_JOB_UID is not set",
        ),
        (
            &[
                ("SLURM_JOB_ID", "2"),
                ("SLURM_JOB_UID", "7"),
                ("SLURM_JOB_CPUS_PER_NODE", "1"),
            ][..],
            "no user with uid 7",
        ),
        (
            &[
                ("SLURM_JOB_ID", "2"),
                ("SLURM_JOB_UID", "0"),
                ("SLURM_JOB_CPUS_PER_NODE", "1"),
                ("SLURM_JOB_GPUS", "0,GPU-1234"),
            ][..],
            "SLURM_JOB_GPUS = \"0,GPU-1234\": names a GPU by UUID",
        ),
    ] {
        let e = prolog_job(&env_of(bad), "vm", &users).unwrap_err();
        assert!(e.contains(why), "{e:?} should say {why:?}");
    }
}

#[test]
fn task_prolog_exports_only_plain_names_and_lists() {
    let v = |k: &str, x: &str| (k.to_string(), x.to_string());
    let out = task_prolog_exports(&[
        v("CUDA_VISIBLE_DEVICES", "0"),
        v("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        v("PJW_GPUS", "1,3"),
        v("X", "0\nexport LD_PRELOAD=/tmp/x.so"),
        v("BAD NAME", "0"),
        v("Y", "$(id)"),
        v("Z", ""),
    ]);
    assert_eq!(
        out,
        "export CUDA_VISIBLE_DEVICES=0\nexport CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport PJW_GPUS=1,3\n"
    );
}

#[test]
fn hostlist_positions() {
    for (list, node, want) in [
        ("vm", "vm", Some(0)),
        ("a,b,c", "c", Some(2)),
        ("n[1-4,7],x", "n7", Some(4)),
        ("n[1-4,7],x", "x", Some(5)),
        ("n[01-10]", "n05", Some(4)),
        ("n[01-10]", "n5", None),
        ("n[1-", "n1", None),
    ] {
        assert_eq!(hostlist_index(list, node), want, "{node} in {list}");
    }
}
