//! `pjw report --plot FILE.svg|FILE.png`: charts of jobs' memory and CPU over their lives.
//!
//! One panel per metric, stacked: memory in MiB, CPU in % of one CPU (from the CPU time between
//! two samples), both over the time since each job started in seconds, so several jobs line up
//! at their start and compare directly; each job has its own colour and a legend entry (job id,
//! and node when the jobs come from several nodes). Drawn with plotters: the SVG backend, or the
//! bitmap backend with the PNG encoder. Text is laid out with ab_glyph and an embedded DejaVu
//! Sans (assets/, Bitstream Vera licence), so no system font library or font file is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::{bail, Context};
use pjw_proto::JobReport;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Chart size in pixels (SVG user units).
pub const SIZE: (u32, u32) = (1000, 720);

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The embedded file is a valid TrueType font; a failure would only lose text.
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

/// Colours that stay apart on white and in grey print.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The colour of the `i`-th job.
pub fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// One job's plotted points: (seconds since start, value).
#[derive(Debug, Default, PartialEq)]
pub struct Lines {
    pub label: String,
    pub mem_mib: Vec<(f64, f64)>,
    pub cpu_pct: Vec<(f64, f64)>,
}

/// The points of every job that has samples (pure).
pub fn lines(jobs: &[JobReport]) -> Vec<Lines> {
    let several_nodes = jobs.windows(2).any(|w| w[0].node != w[1].node);
    jobs.iter()
        .filter(|j| !j.series.is_empty())
        .map(|j| {
            let t0 = j.started_ms.unwrap_or(j.series[0].ts_ms);
            let t = |ms: i64| (ms - t0) as f64 / 1000.0;
            let mem_mib = j
                .series
                .iter()
                .filter_map(|p| Some((t(p.ts_ms), p.mem_current? as f64 / (1 << 20) as f64)))
                .collect();
            let cpu = |p: &pjw_proto::SeriesPoint| {
                Some(p.cpu_user_usec? + p.cpu_system_usec.unwrap_or(0))
            };
            let cpu_pct = j
                .series
                .windows(2)
                .filter_map(|w| {
                    let (a, b) = (cpu(&w[0])?, cpu(&w[1])?);
                    let dt_ms = w[1].ts_ms - w[0].ts_ms;
                    (dt_ms > 0 && b >= a).then(|| {
                        (
                            t(w[1].ts_ms),
                            (b - a) as f64 / 1000.0 / dt_ms as f64 * 100.0,
                        )
                    })
                })
                .collect();
            let label = if several_nodes {
                format!(
                    "job {} ({})",
                    pjw_core::text::printable(&j.id, 64),
                    pjw_core::text::printable(&j.node, 64)
                )
            } else {
                format!("job {}", pjw_core::text::printable(&j.id, 64))
            };
            Lines {
                label,
                mem_mib,
                cpu_pct,
            }
        })
        .collect()
}

fn upper(v: impl Iterator<Item = f64>) -> f64 {
    let m = v.fold(0.0f64, f64::max);
    if m <= 0.0 {
        1.0
    } else {
        m * 1.1
    }
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    x_max: f64,
    data: &[(String, &[(f64, f64)])],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let y_max = upper(data.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("cannot draw the chart: {e}"))?;
    chart
        .configure_mesh()
        .x_desc("time since job start (s)")
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| anyhow::anyhow!("cannot draw the axes: {e}"))?;
    for (i, (label, points)) in data.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("cannot draw a series: {e}"))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("cannot draw the legend: {e}"))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, jobs: &[Lines]) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("cannot draw: {e}"))?;
    let x_max = upper(
        jobs.iter()
            .flat_map(|l| l.mem_mib.iter().chain(&l.cpu_pct).map(|(x, _)| *x)),
    ) / 1.1;
    let x_max = x_max.max(1.0);
    let panels = root.split_evenly((2, 1));
    let mem: Vec<(String, &[(f64, f64)])> = jobs
        .iter()
        .map(|l| (l.label.clone(), l.mem_mib.as_slice()))
        .collect();
    panel(&panels[0], "Memory", "memory (MiB)", x_max, &mem)?;
    let cpu: Vec<(String, &[(f64, f64)])> = jobs
        .iter()
        .map(|l| (l.label.clone(), l.cpu_pct.as_slice()))
        .collect();
    panel(&panels[1], "CPU", "CPU (% of one CPU)", x_max, &cpu)?;
    root.present()
        .map_err(|e| anyhow::anyhow!("cannot write the chart: {e}"))?;
    Ok(())
}

fn plotted(jobs: &[JobReport]) -> anyhow::Result<Vec<Lines>> {
    let l = lines(jobs);
    if l.is_empty() {
        bail!("nothing to plot: no samples for these jobs (a job shorter than one sampler interval, or profiles off)");
    }
    Ok(l)
}

/// The chart as SVG text.
pub fn render_svg(jobs: &[JobReport]) -> anyhow::Result<String> {
    register_font();
    let l = plotted(jobs)?;
    let mut out = String::new();
    draw(
        SVGBackend::with_string(&mut out, SIZE).into_drawing_area(),
        &l,
    )?;
    Ok(out)
}

/// Write the chart to `path`: SVG or PNG by its extension.
pub fn write(jobs: &[JobReport], path: &Path) -> anyhow::Result<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => {
            let svg = render_svg(jobs)?;
            std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
        }
        Some("png") => {
            register_font();
            let l = plotted(jobs)?;
            // The bitmap backend reports a failed write only as a generic error: check first.
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            draw(BitMapBackend::new(path, SIZE).into_drawing_area(), &l)
        }
        _ => bail!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_proto::SeriesPoint;

    /// A job growing to 300 MiB in three steps (two samples per step), using one CPU.
    pub fn steps_job(id: &str, node: &str) -> JobReport {
        let series = (0..6)
            .map(|i| SeriesPoint {
                ts_ms: 10_000 + i * 1000,
                mem_current: Some((((i as u64 / 2) + 1) * 100) << 20),
                cpu_user_usec: Some(i as u64 * 1_000_000),
                ..SeriesPoint::default()
            })
            .collect();
        JobReport {
            id: id.into(),
            node: node.into(),
            started_ms: Some(10_000),
            series,
            ..JobReport::default()
        }
    }

    #[test]
    fn points_are_relative_to_the_start_in_mib_and_percent() {
        let l = lines(&[steps_job("1", "n1")]);
        assert_eq!(l[0].label, "job 1");
        assert_eq!(
            l[0].mem_mib.iter().map(|p| p.1).collect::<Vec<_>>(),
            [100.0, 100.0, 200.0, 200.0, 300.0, 300.0]
        );
        assert_eq!(l[0].mem_mib[5].0, 5.0);
        assert!(l[0].cpu_pct.iter().all(|p| (p.1 - 100.0).abs() < 1e-9));
        let two = lines(&[steps_job("1", "n1"), steps_job("2", "n2")]);
        assert_eq!(two[1].label, "job 2 (n2)");
    }

    #[test]
    fn svg_parses_and_shows_the_three_steps() {
        let svg = render_svg(&[steps_job("1", "n1"), steps_job("2", "n1")]).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("valid SVG");
        let ys = super::tests_support::series_ys(&doc, colour(0));
        assert_eq!(super::tests_support::plateaus(&ys[0]).len(), 3, "{ys:?}");
        for want in [
            "memory (MiB)",
            "CPU (% of one CPU)",
            "time since job start (s)",
            "job 2",
        ] {
            assert!(svg.contains(want), "{want} missing");
        }
    }

    #[test]
    fn nothing_to_plot_and_bad_names_are_errors() {
        let empty = JobReport::default();
        assert!(render_svg(&[empty])
            .unwrap_err()
            .to_string()
            .contains("nothing to plot"));
        let e = write(&[steps_job("1", "n")], Path::new("/tmp/x.jpg")).unwrap_err();
        assert!(e.to_string().contains(".svg or .png"));
    }
}

/// Helpers shared by the unit tests and kept small enough to mirror in integration tests.
#[cfg(test)]
pub mod tests_support {
    use plotters::style::RGBColor;

    /// The y pixel values of every polyline stroked in `c` with more than two points
    /// (series, not legend samples), in document order: memory panel first.
    pub fn series_ys(doc: &roxmltree::Document, c: RGBColor) -> Vec<Vec<f64>> {
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

    /// Runs of equal values: the levels of a step line.
    pub fn plateaus(ys: &[f64]) -> Vec<f64> {
        let mut out: Vec<f64> = Vec::new();
        for y in ys {
            if out.last().is_none_or(|l| (l - y).abs() > 0.5) {
                out.push(*y);
            }
        }
        out
    }
}
