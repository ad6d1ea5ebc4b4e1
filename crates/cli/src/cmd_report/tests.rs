//! Golden text and CSV of the report views.

use super::csv::*;
use super::text::*;
use super::*;
use chrono::FixedOffset;
use pjw_proto::{EndClass, ProcessRow, SampleState, SeriesPoint};

const MIB: u64 = 1 << 20;

fn utc() -> FixedOffset {
    FixedOffset::east_opt(0).unwrap()
}

/// 2026-11-22T05:00:00Z
const T0: i64 = 1_795_323_600_000;

fn job() -> JobReport {
    JobReport {
        id: "12".into(),
        name: "steps".into(),
        user: "alice".into(),
        uid: 1000,
        node: "n1".into(),
        state: ReportState::Ended,
        end: Some(EndClass::Completed),
        end_reason: Some("exited".into()),
        exit_status: Some(0),
        ncpus: 2,
        cpus: "0-1".into(),
        ngpus: 0,
        gpus: String::new(),
        mem_limit: None,
        submitted_ms: T0,
        started_ms: Some(T0 + 1_000),
        ended_ms: Some(T0 + 11_000),
        queued_ms: 1_000,
        running_ms: 10_000,
        backfill_ms: 0,
        frozen_ms: 2_000,
        freezes: 1,
        cpu_user_usec: 4_000_000,
        cpu_system_usec: 1_000_000,
        mem_peak: 300 * MIB,
        swap_peak: 0,
        io_rbytes: 4096,
        io_wbytes: 512,
        io_counted: Some(true),
        io: Some("weight=50; 254:0 rbps=10M".into()),
        counts_exact: Some(true),
        procs_total: Some(26),
        threads_total: Some(26),
        procs_max: 2,
        threads_max: 2,
        samples: 3,
        gpu_util_mean: None,
        gpu_util_max: None,
        gpu_mem_peak: None,
        threads: Vec::new(),
        series: vec![
            SeriesPoint {
                ts_ms: T0 + 2_000,
                state: Some(SampleState::Running),
                cpu_user_usec: Some(500_000),
                cpu_system_usec: Some(0),
                mem_current: Some(100 * MIB),
                procs: Some(1),
                ..SeriesPoint::default()
            },
            SeriesPoint {
                ts_ms: T0 + 4_000,
                state: Some(SampleState::Running),
                cpu_user_usec: Some(2_000_000),
                cpu_system_usec: Some(500_000),
                mem_current: Some(200 * MIB),
                mem_peak: Some(200 * MIB),
                procs: Some(2),
                psi_cpu_some: Some(1.5),
                ..SeriesPoint::default()
            },
        ],
        processes: vec![ProcessRow {
            ts_ms: T0 + 4_000,
            pid: 77,
            comm: "pjw-wl".into(),
            cpu_usec: 2_500_000,
            rss: 200 * MIB,
            threads: 1,
        }],
        steps: vec![],
    }
}

#[test]
fn one_job_in_detail() {
    let want = "\
Job 12 (steps) of alice on n1: ended, completed (exit 0)
  CPUs            2 (0-1)
  Submitted       2026-11-22T05:00:00+00:00
  Started         2026-11-22T05:00:01+00:00
  Ended           2026-11-22T05:00:11+00:00
  Waited in queue 0:00:01
  Ran (wall)      0:00:10
    as backfill   0:00:00
    frozen        0:00:02 (1 time)
  CPU time        5.00 s (user 4.00 s, system 1.00 s)
  CPU efficiency  25.0%
  Peak memory     300M (limit none)
  Peak swap       0B
  I/O             read 4K, written 512B
  Processes       26 total, 2 at most
  Threads         26 total, 2 at most
  Samples         3
  I/O settings    weight=50; 254:0 rbps=10M
  Reason          exited
";
    assert_eq!(render_table(&[job()], false, false, &utc()), want);
}

#[test]
fn threads_busy_apart_from_sleepers_with_names_escaped() {
    let tz = FixedOffset::east_opt(0).unwrap();
    let mut j = job();
    let row = |tid, comm: &str, busy, run| pjw_proto::ThreadRow {
        tid,
        pid: 100,
        comm: comm.into(),
        cpu_usec: 2_500_000,
        cpus: "0-1".into(),
        migrations: Some(3),
        running_pct: Some(run),
        waiting_pct: Some(1.0),
        sleeping_pct: Some(99.0 - run),
        busy,
        pin: busy.then(|| "1".to_string()),
        samples: 4,
        first_ms: T0,
        last_ms: T0 + 3_000,
        points: Vec::new(),
    };
    j.threads = vec![
        row(101, "busy-0", true, 97.0),
        row(102, "\x1b[2Jevil\n", false, 0.5),
    ];
    let text = render_threads(&j, &tz);
    let (busy, sleeping) = text.split_once("Sleeping threads").unwrap();
    assert!(busy.contains("Busy threads of job 12 (1)"), "{text}");
    assert!(
        busy.lines().any(|l| l.starts_with("101 ")
            && l.contains("busy-0")
            && l.contains("2.50")
            && l.contains("97%")
            && l.contains("0-1")),
        "{text}"
    );
    assert!(
        sleeping.contains("102 ") && sleeping.contains("\\u{1b}[2Jevil\\u{a}"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
    let csv = render_threads_csv(&[j]);
    assert!(
        csv.contains("\n12,101,100,busy-0,2500000,0-1,3,97.0,1.0,2.0,true,1,4,"),
        "{csv}"
    );
    assert!(!csv.contains('\x1b'), "{csv:?}");
}

#[test]
fn a_job_with_steps_lists_them_after_its_rows() {
    let step = |n: u32, ended: Option<i64>, exit: Option<i32>| pjw_proto::StepReport {
        step: n,
        name: if n == 0 {
            "mpirun\x1b[2J".into()
        } else {
            "post".into()
        },
        uid: 1000,
        cpus: pjw_core::CpuSet::parse_list("0").unwrap(),
        pid: 4100 + n,
        started_ms: T0 + 2_000,
        ended_ms: ended,
        exit_status: exit,
    };
    let mut j = job();
    j.steps = vec![step(0, Some(T0 + 5_500), Some(0)), step(1, None, None)];
    let text = render_table(&[j], false, false, &utc());
    let tail: Vec<&str> = text.lines().rev().take(4).collect();
    assert_eq!(
            tail,
            vec![
                "    step 1 post: cpus 0, pid 4101, started 2026-11-22T05:00:02+00:00, running, exit -",
                "    step 0 mpirun\\u{1b}[2J: cpus 0, pid 4100, started 2026-11-22T05:00:02+00:00, 0:00:03, exit 0",
                "  Steps           2",
                "  Reason          exited",
            ],
            "{text}"
        );
}

#[test]
fn series_and_processes() {
    let text = render_table(&[job()], true, true, &utc());
    let tail = text.split_once("\nSeries").unwrap().1;
    let want = " of job 12 (2 samples)
TIME                       STATE    CPU   MEM   PEAK  ANON  FILE  SWAP  READ  WRITE  PROCS  THREADS  PSI_CPU  PSI_MEM  PSI_IO
2026-11-22T05:00:02+00:00  running  -     100M  -     -     -     -     -     -      1      -        -        -        -
2026-11-22T05:00:04+00:00  running  1.00  200M  200M  -     -     -     -     -      2      -        1.50     -        -

Processes of job 12
TIME                       PID  COMM    CPU_S  RSS   THREADS
2026-11-22T05:00:04+00:00  77   pjw-wl  2.50   200M  1
";
    assert_eq!(tail, want);
}

#[test]
fn several_jobs_in_a_list() {
    let mut b = job();
    b.id = "13".into();
    b.state = ReportState::Running;
    b.end = None;
    b.exit_status = None;
    b.procs_total = None;
    let want = "\
JOB  USER   NAME   NODE  STATE    END        EXIT  SUBMITTED                  CPUS  WAIT     WALL     CPU_S  EFF    MEM_PEAK  SWAP  READ  WRITE  PROCS  THREADS  FROZEN
12   alice  steps  n1    ended    completed  0     2026-11-22T05:00:00+00:00  2     0:00:01  0:00:10  5.0    25.0%  300M      0B    4K    512B   26/2   26/2     0:00:02
13   alice  steps  n1    running  -          -     2026-11-22T05:00:00+00:00  2     0:00:01  0:00:10  5.0    25.0%  300M      0B    4K    512B   -/2    26/2     0:00:02
";
    assert_eq!(
        render_table(&[job(), b.clone()], false, false, &utc()),
        want
    );
    // Counts that are a lower bound say so.
    let mut lossy = job();
    lossy.counts_exact = Some(false);
    let text = render_job(&lossy, &utc());
    assert!(
        text.contains("  Processes       at least 26 total, 2 at most\n"),
        "{text}"
    );
    // A GPU job says its GPUs under its CPUs; a job without none.
    let mut g = job();
    g.ngpus = 2;
    g.gpus = "1,3".into();
    let text = render_job(&g, &utc());
    assert!(
        text.contains("(0-1)\n  GPUs            2 (1,3)\n"),
        "{text}"
    );
    assert!(!render_job(&job(), &utc()).contains("GPU"));
    // With NVML readings: utilisation and memory after the memory rows, and in the CSV.
    g.gpu_util_mean = Some(62.5);
    g.gpu_util_max = Some(97.0);
    g.gpu_mem_peak = Some(6 << 30);
    let text = render_job(&g, &utc());
    assert!(
            text.contains(
                "  Peak swap       0B\n  GPU utilisation 62.5% mean, 97.0% at most\n  GPU memory      6G at most\n"
            ),
            "{text}"
        );
    let csv = render_csv(&[g], false, false);
    assert!(csv.ends_with(",3,62.5,97,6442450944\n"), "{csv}");
    // A node that does not count I/O says so instead of showing 0.
    b.io_counted = Some(false);
    let text = render_table(&[b.clone()], false, false, &utc());
    assert!(
        text.contains(
            "  I/O             not counted on this node (needs the cgroup v2 io controller)\n"
        ),
        "{text}"
    );
    let list = render_list(&[b.clone()], &utc());
    assert!(
        list.lines().nth(1).unwrap().contains("  -     -      -/2"),
        "{list}"
    );
    let csv = render_csv(&[b], false, false);
    assert!(csv.contains(",0,,,,2,"), "{csv}");
    assert_eq!(render_table(&[], false, false, &utc()), "no jobs\n");
}

#[test]
fn csv_views() {
    let mut j = job();
    j.end_reason = Some("killed by \"bob\", at last".into());
    let csv = render_csv(&[j.clone()], false, false);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
            lines[1],
            "12,alice,1000,steps,n1,ended,completed,0,\"killed by \"\"bob\"\", at last\",2,0-1,,1795323600000,1795323601000,1795323611000,1000,10000,0,2000,1,4000000,1000000,0.2500,314572800,0,4096,512,26,2,26,2,3,,,"
        );
    assert_eq!(lines[0].split(',').count(), lines[1].split(',').count() - 1); // one quoted comma
    let s = render_csv(&[j.clone()], true, false);
    assert_eq!(
        s.lines().nth(2).unwrap(),
        "12,1795323604000,running,2000000,500000,209715200,209715200,,,,,,2,,1.5,,,,,,,"
    );
    let p = render_csv(&[j], false, true);
    assert_eq!(
        p.lines().nth(1).unwrap(),
        "12,1795323604000,77,pjw-wl,2500000,209715200,1"
    );
}

/// Issue 25, N8: a job name a spreadsheet would run as a formula is written as text;
/// numbers, negative ones too, are left as they are.
#[test]
fn csv_fields_are_never_formulas() {
    assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
    assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
    assert_eq!(csv_field("+cmd"), "'+cmd");
    assert_eq!(csv_field("-1"), "-1");
    assert_eq!(csv_field("-2.5"), "-2.5");
    assert_eq!(csv_field("solver"), "solver");
}

#[test]
fn since_forms() {
    let now = T0;
    assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
    assert_eq!(parse_since("30m", now).unwrap(), now - 1_800_000);
    assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400_000);
    assert_eq!(parse_since("2026-11-22T06:00:00+01:00", now).unwrap(), T0);
    assert!(parse_since("2026-11-22", now).is_ok());
    for bad in ["", "yesterday", "5y", "-3h"] {
        let e = parse_since(bad, now).unwrap_err().to_string();
        assert!(e.contains("--since"), "{bad}: {e}");
    }
}
