//! Root integration test of `pjw report --plot`: two real jobs that grow their memory in three
//! steps, sampled every second, charted as SVG and PNG. The SVG must parse and its memory lines
//! must show three equal steps in order; the PNG must decode at the chart's size with both
//! jobs' colours drawn.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use pjw_testkit::{require_root, TestDaemon};

fn pjw_bin() -> PathBuf {
    pjw_testkit::pjw_bin(env!("CARGO_BIN_EXE_pjw"))
}

fn wl() -> PathBuf {
    pjw_bin().with_file_name("pjw-wl")
}

/// The colours of the first two jobs (crates/cli/src/plot.rs `COLOURS`).
const JOB0: (u8, u8, u8) = (0x1f, 0x77, 0xb4);
const JOB1: (u8, u8, u8) = (0xd6, 0x27, 0x28);

fn report(d: &TestDaemon, args: &[&str]) -> Output {
    d.pjw().arg("report").args(args).output().unwrap()
}

/// y pixels of the series polylines stroked in `c` (more than two points), memory first.
fn series_ys(svg: &str, c: (u8, u8, u8)) -> Vec<Vec<f64>> {
    let doc = roxmltree::Document::parse(svg).expect("valid SVG");
    assert!(doc.root_element().has_tag_name("svg"));
    let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex))
        })
        .filter_map(|n| {
            let ys: Vec<f64> = n
                .attribute("points")?
                .split_whitespace()
                .filter_map(|p| p.split(',').nth(1)?.parse().ok())
                .collect();
            (ys.len() > 2).then_some(ys)
        })
        .collect()
}

/// Levels held for at least two samples (within `tol` pixels), in order.
fn plateaus(ys: &[f64], tol: f64) -> Vec<f64> {
    let mut runs: Vec<(f64, usize)> = Vec::new();
    for &y in ys {
        match runs.last_mut() {
            Some((level, n)) if (*level - y).abs() <= tol => *n += 1,
            _ => runs.push((y, 1)),
        }
    }
    runs.into_iter()
        .filter(|(_, n)| *n >= 2)
        .map(|(l, _)| l)
        .collect()
}

/// Three levels going up (pixel y going down) in equal steps.
fn three_equal_steps(levels: &[f64]) -> bool {
    if levels.len() < 3 {
        return false;
    }
    let l = &levels[levels.len() - 3..];
    let (a, b) = (l[0] - l[1], l[1] - l[2]);
    a > 0.0 && b > 0.0 && (a - b).abs() < 0.15 * (a + b)
}

#[test]
fn plots_show_the_memory_steps_of_several_jobs_as_svg_and_png() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), "[profile]\ninterval = \"1s\"\n");
    let dir = d.dir().to_path_buf();
    // 300 MiB and 150 MiB, three steps each, every step held 2.5 s (two or more samples).
    for (id, mib) in [("plot1", "300"), ("plot2", "150")] {
        let out = pjw_testkit::job::run(
            d.pjw()
                .args(["run", "-c", "1", "-j", id, "-n", "plotsteps", "--"])
                .arg(wl())
                .args(["steps", mib, "3", "0", "2500"]),
        );
        assert!(out.status.success(), "{}\n{}", out.describe(), d.log());
    }
    // The client ends before the daemon records the job's end, and samples reach the store
    // through the writer thread: wait (bounded) until each job is recorded ended with every
    // sample its summary counts, as profile.rs does.
    for id in ["plot1", "plot2"] {
        let mut last = String::new();
        let complete = TestDaemon::wait_for(Duration::from_secs(20), || {
            let o = report(&d, &["-J", id, "--series", "--format", "json"]);
            last = String::from_utf8_lossy(&o.stdout).into_owned();
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            let j = &j[0];
            !j["end"].is_null()
                && j["series"].as_array().map(|s| s.len() as u64) == j["samples"].as_u64()
        });
        assert!(complete, "job {id} not recorded whole: {last}\n{}", d.log());
    }

    let svg_path = dir.join("jobs.svg");
    let o = report(
        &d,
        &["--name", "plotsteps", "--plot", svg_path.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("(2 job(s))"));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    for want in [
        "memory (MiB)",
        "CPU (% of one CPU)",
        "time since job start (s)",
        "job plot1",
        "job plot2",
    ] {
        assert!(svg.contains(want), "{want} missing from the SVG");
    }
    // Newest first: plot2 (150 MiB) has the first colour, plot1 (300 MiB) the second. Each
    // one's memory line steps up three times in equal steps; plot1's top is higher (smaller y).
    let m2 = &series_ys(&svg, JOB0)[0];
    let m1 = &series_ys(&svg, JOB1)[0];
    let (p1, p2) = (plateaus(m1, 3.0), plateaus(m2, 3.0));
    assert!(three_equal_steps(&p1), "plot1 steps: {p1:?} from {m1:?}");
    assert!(three_equal_steps(&p2), "plot2 steps: {p2:?} from {m2:?}");
    let top = |p: &[f64]| p.iter().copied().fold(f64::MAX, f64::min);
    assert!(top(&p1) < top(&p2));
    // Both panels have a line per job.
    assert_eq!(series_ys(&svg, JOB0).len(), 2);
    assert_eq!(series_ys(&svg, JOB1).len(), 2);

    let png_path = dir.join("one.png");
    let o = report(&d, &["-J", "plot1", "--plot", png_path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&png_path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let dec = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = dec.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    assert_eq!((info.width, info.height), (1240, 720));
    let px = info.color_type.samples();
    let drawn = buf[..info.buffer_size()]
        .chunks(px)
        .filter(|p| p.len() >= 3 && (p[0], p[1], p[2]) == JOB0)
        .count();
    assert!(drawn > 200, "only {drawn} pixels of the job's colour");

    // A name that is neither .svg nor .png is refused in one line.
    let o = report(&d, &["-J", "plot1", "--plot", "/tmp/chart.jpg"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(".svg or .png") && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// With the node's defaults (`profile.interval` 10 s), a job of 12 s busy on one CPU has a
/// series of its shape (a sample at its start, every second in its first minute, one at its
/// end), and its plot's CPU panel is drawn: a line of more than two points near 100 %.
#[test]
fn a_12_s_job_has_a_series_and_a_cpu_line_with_the_default_interval() {
    require_root!();
    let d = TestDaemon::start(&pjw_bin(), "");
    let dir = d.dir().to_path_buf();
    let out = pjw_testkit::job::run(
        d.pjw()
            .args(["run", "-c", "1", "-j", "short12", "--", "sh", "-c"])
            .arg(format!(
                "timeout 12 {} spin-forever; exit 0",
                wl().display()
            )),
    );
    assert!(out.status.success(), "{}\n{}", out.describe(), d.log());
    let mut j = serde_json::Value::Null;
    let complete = TestDaemon::wait_for(Duration::from_secs(20), || {
        let o = report(&d, &["-J", "short12", "--series", "--format", "json"]);
        j = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_default()[0].clone();
        !j["end"].is_null()
            && j["series"].as_array().map(|s| s.len() as u64) == j["samples"].as_u64()
    });
    assert!(
        complete,
        "job short12 not recorded whole: {j:#}\n{}",
        d.log()
    );
    let points = j["series"].as_array().unwrap().len();
    eprintln!("a 12 s job with the default interval: {points} series points");
    assert!(points >= 3, "{points} points: {j:#}");
    let svg_path = dir.join("short12.svg");
    let o = report(&d, &["-J", "short12", "--plot", svg_path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    // Memory, then CPU: both panels have the job's line.
    let lines = series_ys(&svg, JOB0);
    assert_eq!(lines.len(), 2, "the job's lines in the panels: {lines:?}");
    let cpu = &lines[1];
    assert!(cpu.len() >= 3, "CPU line of {} points", cpu.len());
}
