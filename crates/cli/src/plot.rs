//! `pjw report --plot FILE.svg|FILE.png`: charts of jobs' memory and CPU over their lives.
//!
//! One panel per metric, stacked: memory in MiB, CPU in % of one CPU (from the CPU time between
//! two samples), both over the time since each job started in seconds, so several jobs line up
//! at their start and compare directly; each job has its own line style (8 colours, then
//! dashed and dotted: 24 apart) and a row in the legend, a column of its own right of the
//! panels, so no number of jobs covers a line (past the rows that fit, the last says how many
//! more there are); the label is the job id, and the node when the jobs come from several
//! nodes. Drawn with plotters: the SVG backend, or the
//! bitmap backend with the PNG encoder. Text is laid out with ab_glyph and an embedded DejaVu
//! Sans (assets/, Bitstream Vera licence), so no system font library or font file is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::{bail, Context};
use pjw_proto::JobReport;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Chart size in pixels (SVG user units): the panels and, right of them, the legend.
pub const SIZE: (u32, u32) = (1240, 720);

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

/// How a job's line is drawn: its colour, then, past the colours, dashes and dots, so up to
/// [`STYLES`] jobs are told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
}

/// Distinct line styles: colours × dash patterns.
pub const STYLES: usize = 3 * COLOURS.len();

/// The line style of the `i`-th job.
pub fn dash(i: usize) -> Dash {
    match (i % STYLES) / COLOURS.len() {
        0 => Dash::Solid,
        1 => Dash::Dashed,
        _ => Dash::Dotted,
    }
}

/// Width of the legend column right of the panels (pixels).
const LEGEND_W: u32 = 240;
/// Height of one legend row.
const LEGEND_ROW: i32 = 18;
/// Longest label shown in the legend (characters).
const LEGEND_LABEL: usize = 26;

/// The legend's rows for `labels` when `rows` fit (pure): every label, or the first
/// `rows - 1` and a last row saying how many more there are.
pub fn legend_rows(labels: &[String], rows: usize) -> (Vec<String>, Option<String>) {
    if labels.len() <= rows {
        return (labels.to_vec(), None);
    }
    let shown = rows.saturating_sub(1);
    let more = labels.len() - shown;
    (
        labels[..shown].to_vec(),
        Some(format!("… and {more} more jobs")),
    )
}

/// One job's plotted points: (seconds since start, value).
#[derive(Debug, Default, PartialEq)]
pub struct Lines {
    pub label: String,
    pub mem_mib: Vec<(f64, f64)>,
    pub cpu_pct: Vec<(f64, f64)>,
    /// The job's busiest threads (a report with threads): label and % of one CPU.
    pub threads: Vec<(String, Vec<(f64, f64)>)>,
}

/// The points of every job that has samples (pure).
pub fn lines(jobs: &[JobReport]) -> Vec<Lines> {
    let several_nodes = jobs.windows(2).any(|w| w[0].node != w[1].node);
    let several_jobs = jobs
        .iter()
        .filter(|j| j.threads.iter().any(|t| !t.points.is_empty()))
        .count()
        > 1;
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
            let threads = j
                .threads
                .iter()
                .filter(|th| !th.points.is_empty())
                .map(|th| {
                    let name = pjw_core::text::printable(&th.comm, 16);
                    let pts = th.points.iter().map(|(ts, pct)| (t(*ts), *pct)).collect();
                    let label = if several_jobs {
                        format!("{} tid {} ({name})", j.id, th.tid)
                    } else {
                        format!("tid {} ({name})", th.tid)
                    };
                    (label, pts)
                })
                .collect();
            Lines {
                label,
                mem_mib,
                cpu_pct,
                threads,
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
    data: &[&[(f64, f64)]],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let y_max = upper(data.iter().flat_map(|p| p.iter().map(|(_, y)| *y)));
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
    let series_err = |e| anyhow::anyhow!("cannot draw a series: {e}");
    for (i, points) in data.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        let points = points.iter().copied();
        match dash(i) {
            Dash::Solid => chart
                .draw_series(LineSeries::new(points, style))
                .map(|_| ())
                .map_err(series_err)?,
            Dash::Dashed => chart
                .draw_series(DashedLineSeries::new(points, 9, 5, style))
                .map(|_| ())
                .map_err(series_err)?,
            Dash::Dotted => chart
                .draw_series(DashedLineSeries::new(points, 2, 4, style))
                .map(|_| ())
                .map_err(series_err)?,
        }
    }
    Ok(())
}

/// The legend in its own column, outside the panels: one row per job with its line style,
/// as many as fit, then how many more there are.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e| anyhow::anyhow!("cannot draw the legend: {e}");
    let font = ("sans-serif", 14).into_font();
    let (_, h) = area.dim_in_pixel();
    let top = 40;
    area.draw(&Text::new(title, (8, 16), ("sans-serif", 16).into_font()))
        .map_err(err)?;
    let rows = ((h as i32 - top - 8) / LEGEND_ROW).max(1) as usize;
    let (shown, more) = legend_rows(labels, rows);
    for (i, label) in shown.iter().enumerate() {
        let y = top + i as i32 * LEGEND_ROW;
        let style = colour(i).stroke_width(3);
        let sample = vec![(8, y), (40, y)];
        match dash(i) {
            Dash::Solid => area.draw(&PathElement::new(sample, style)).map_err(err)?,
            Dash::Dashed => area
                .draw(&DashedPathElement::new(sample, 9, 5, style))
                .map_err(err)?,
            Dash::Dotted => area
                .draw(&DashedPathElement::new(sample, 2, 4, style))
                .map_err(err)?,
        }
        let text = pjw_core::text::printable(label, LEGEND_LABEL);
        area.draw(&Text::new(text.into_owned(), (48, y - 7), font.clone()))
            .map_err(err)?;
    }
    if let Some(m) = more {
        let y = top + shown.len() as i32 * LEGEND_ROW;
        area.draw(&Text::new(m, (8, y - 7), font.clone()))
            .map_err(err)?;
    }
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
    let (w, _) = root.dim_in_pixel();
    let (charts, side) = root.split_horizontally(w.saturating_sub(LEGEND_W));
    // A third panel for the busiest threads where the report has them, with its own legend
    // below the jobs'.
    let threads: Vec<&[(f64, f64)]> = jobs
        .iter()
        .flat_map(|l| l.threads.iter().map(|(_, p)| p.as_slice()))
        .collect();
    let panels = charts.split_evenly((if threads.is_empty() { 2 } else { 3 }, 1));
    let mem: Vec<&[(f64, f64)]> = jobs.iter().map(|l| l.mem_mib.as_slice()).collect();
    panel(&panels[0], "Memory", "memory (MiB)", x_max, &mem)?;
    let cpu: Vec<&[(f64, f64)]> = jobs.iter().map(|l| l.cpu_pct.as_slice()).collect();
    panel(&panels[1], "CPU", "CPU (% of one CPU)", x_max, &cpu)?;
    if !threads.is_empty() {
        panel(
            &panels[2],
            "Busiest threads",
            "CPU (% of one CPU)",
            x_max,
            &threads,
        )?;
    }
    let labels: Vec<String> = jobs.iter().map(|l| l.label.clone()).collect();
    if threads.is_empty() {
        legend(&side, "jobs", &labels)?;
    } else {
        let (_, h) = side.dim_in_pixel();
        let (top, bottom) = side.split_vertically(h * 2 / 3);
        legend(&top, "jobs", &labels)?;
        let names: Vec<String> = jobs
            .iter()
            .flat_map(|l| l.threads.iter().map(|(n, _)| n.clone()))
            .collect();
        legend(&bottom, "threads", &names)?;
    }
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

    /// 25 jobs (the case) and 60: the legend is a column right of the panels, no
    /// line is drawn under it, and what does not fit is counted in one row.
    #[test]
    fn many_jobs_keep_the_legend_off_the_panels() {
        let x_of = |n: roxmltree::Node| n.attribute("x").and_then(|x| x.parse::<f64>().ok());
        let panels_end = (SIZE.0 - LEGEND_W) as f64;
        for (n, shown) in [(25, 25), (60, 36)] {
            let jobs: Vec<JobReport> = (0..n).map(|i| steps_job(&i.to_string(), "n1")).collect();
            let svg = render_svg(&jobs).unwrap();
            let doc = roxmltree::Document::parse(&svg).expect("valid SVG");
            let labels: Vec<roxmltree::Node> = doc
                .descendants()
                .filter(|t| {
                    t.has_tag_name("text") && t.text().is_some_and(|s| s.trim().starts_with("job "))
                })
                .collect();
            assert_eq!(labels.len(), shown, "{n} jobs");
            assert!(
                labels
                    .iter()
                    .all(|t| x_of(*t).is_some_and(|x| x >= panels_end)),
                "{n} jobs: a label inside the panels"
            );
            let more = n - shown;
            assert_eq!(
                svg.contains(&format!("… and {more} more jobs")),
                more > 0,
                "{n} jobs"
            );
            // Every series point (2 px lines; the legend's samples are 3 px) lies left of the
            // legend column.
            let series = doc
                .descendants()
                .filter(|e| e.has_tag_name("polyline") && e.attribute("stroke-width") == Some("2"));
            for l in series {
                for p in l.attribute("points").unwrap_or("").split_whitespace() {
                    let x: f64 = p.split(',').next().unwrap().parse().unwrap();
                    assert!(x < panels_end, "{n} jobs: a line under the legend at x {x}");
                }
            }
        }
    }

    #[test]
    fn the_first_jobs_get_distinct_styles() {
        let styles: std::collections::HashSet<(u8, u8, u8, u8)> = (0..STYLES)
            .map(|i| {
                let c = colour(i);
                (c.0, c.1, c.2, dash(i) as u8)
            })
            .collect();
        assert_eq!(styles.len(), STYLES);
        assert_eq!((colour(STYLES), dash(STYLES)), (colour(0), dash(0)));
        let (rows, more) = legend_rows(&["a".into(), "b".into(), "c".into()], 2);
        assert_eq!(
            (rows, more.as_deref()),
            (vec!["a".to_string()], Some("… and 2 more jobs"))
        );
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
