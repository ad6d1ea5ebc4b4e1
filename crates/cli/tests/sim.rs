//! `pjw sim` end to end: tables and JSON from a synthetic machine, and its usage errors.

use std::process::Command;

fn pjw(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pjw"))
        .args(args)
        .output()
        .expect("run pjw")
}

const MACHINE: &str = "package:2 numa:1 core:4 pu:2";

#[test]
fn json_has_a_row_per_policy() {
    let out = pjw(&[
        "sim",
        "--synthetic",
        MACHINE,
        "--trace",
        "synthetic:3:200",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v[0];
    assert_eq!(t["pus"], 16);
    assert_eq!(t["trace"], "synthetic:3:200");
    let rows = t["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "pjw",
            "pjw-pack",
            "kubelet",
            "slurm-cyclic",
            "slurm-block",
            "range",
            "pbs"
        ]
    );
    for r in rows {
        assert_eq!(r["placed"], 200, "{r}");
        assert!(r["mean_numa"].as_f64().unwrap() >= 1.0);
        assert!(r["decisions"].as_u64().unwrap() >= 200);
        assert_eq!(r["fragmentation"][0][0], 4);
    }
}

#[test]
fn table_and_policy_selection() {
    let out = pjw(&[
        "sim",
        "--synthetic",
        MACHINE,
        "--trace",
        "synthetic:1:100",
        "--policy",
        "pjw",
        "--policy",
        "range",
        "--load",
        "0.5",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("synthetic \"package:2 numa:1 core:4 pu:2\": 16 PUs"));
    assert!(lines[1].starts_with("policy"));
    assert!(lines[2].starts_with("pjw "));
    assert!(lines[3].starts_with("range "));
}

#[test]
fn usage_errors_are_one_line() {
    for (args, want) in [
        (
            vec!["sim", "--synthetic", MACHINE, "--policy", "fifo"],
            "pjw: unknown policy \"fifo\"",
        ),
        (
            vec!["sim", "--synthetic", MACHINE, "--trace", "synthetic:1"],
            "pjw: invalid trace \"synthetic:1\"",
        ),
    ] {
        let out = pjw(&args);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with(want), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
}

#[test]
fn swf_trace_runs() {
    let dir = std::env::temp_dir().join(format!("pjw-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.swf");
    std::fs::write(
        &f,
        "; tiny\n1 0 0 30 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1\n2 5 0 30 12 -1 -1 12 -1 -1 1 1 1 -1 1 -1 -1 -1\n",
    )
    .unwrap();
    let out = pjw(&[
        "sim",
        "--synthetic",
        MACHINE,
        "--swf",
        f.to_str().unwrap(),
        "--json",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["rows"][0]["placed"], 2);
}

#[test]
fn gpus_json_has_a_row_per_gpu_policy_on_the_corpus_gpu_machine() {
    let xml = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/topologies/power8gpudistances.xml"
    );
    let out = pjw(&[
        "sim",
        "--gpus",
        "--xml",
        xml,
        "--synthetic",
        "package:2 numa:1 core:4 gpu:2",
        "--trace",
        "synthetic:2:200",
        "--seeds",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    let head = v[0]["machine"].as_str().unwrap();
    assert!(
        head.starts_with("power8gpudistances.xml: 16 PUs, 2 NUMA nodes, 4 GPUs"),
        "{head}"
    );
    assert!(head.contains("means over seeds 2-3"), "{head}");
    for m in v.as_array().unwrap() {
        let rows = m["rows"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "pjw",
                "pjw-stranded",
                "pjw-require",
                "kubelet-single-numa",
                "kubelet-best-effort",
                "slurm",
                "slurm-enforce"
            ]
        );
        let pjw = &rows[0];
        assert_eq!(pjw["placed"], 200.0, "{pjw}");
        let local = pjw["local"].as_f64().unwrap();
        assert!(local > 0.5 && local <= 1.0, "{pjw}");
    }
}

#[test]
fn gpus_usage_errors() {
    for (args, want) in [
        (
            vec!["sim", "--gpus", "--synthetic", "package:2 core:2"],
            "has no GPUs",
        ),
        (
            vec![
                "sim",
                "--gpus",
                "--synthetic",
                "numa:2 gpu:1",
                "--policy",
                "range",
            ],
            "unknown GPU policy",
        ),
        (vec!["sim", "--seeds", "2"], "--gpus"),
    ] {
        let out = pjw(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
