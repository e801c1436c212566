//! Charts: `summary.png` of one run, `compare.png` of several, and the
//! panels a report scenario asks for.
//!
//! Owns the chart layouts (after basho_bench's `priv/summary.r`: throughput on
//! top, then per op the mean/median/95th, 99th, 99.9th and max latency panels
//! in ms; the throughput overlay of `priv/compare.r`; a scenario's stack of
//! [`Panel`]s over any x axis, [`draw_panels`]) and the embedded
//! DejaVu Sans font, so no system font is needed. It must never read result
//! files or compute statistics: callers hand it the series.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::BenchError;
use crate::stats::Interval;
use crate::workload::Op;

/// DejaVu Sans 2.37 (see `assets/README.md` and `assets/DejaVuSans-LICENSE`).
static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The family name the embedded font is registered under.
const FONT: &str = "tablinum-sans";

/// Width of both charts, pixels.
pub const CHART_WIDTH_PX: u32 = 1400;
/// Height of the title strip, pixels.
pub const TITLE_HEIGHT_PX: u32 = 36;
/// Height of the throughput panel, pixels.
pub const THROUGHPUT_PANEL_HEIGHT_PX: u32 = 320;
/// Height of one op's row of latency panels, pixels.
pub const LATENCY_ROW_HEIGHT_PX: u32 = 240;

/// The x axis of the time-series panels.
const ELAPSED: &str = "elapsed (s)";

/// A named series of `(x, y)` points.
struct Series {
    /// Legend text (empty: no legend entry).
    label: String,
    /// Points in x order.
    points: Vec<(f64, f64)>,
    /// Colour.
    color: RGBColor,
}

fn series(label: impl Into<String>, points: Vec<(f64, f64)>, color: RGBColor) -> Series {
    Series {
        label: label.into(),
        points,
        color,
    }
}

fn font_ready() -> Result<(), String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, FONT_TTF)
                .map_err(|_| "embedded font is not a valid TrueType font".to_string())
        })
        .clone()
}

/// The colour of series `i` (matching R's default-ish palette order).
pub fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0xe3, 0x77, 0xc2),
        RGBColor(0x17, 0xbe, 0xcf),
    ];
    COLORS[i % COLORS.len()]
}

fn chart_err(file: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |message| BenchError::Chart {
        file: file.to_path_buf(),
        message,
    }
}

/// One line panel with its own axes and legend.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    x_max: f64,
    lines: &[Series],
) -> Result<(), String> {
    let y_max = lines
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max);
    let legend = lines.iter().any(|s| !s.label.is_empty());
    // Headroom above the data for the legend box.
    let headroom = if legend {
        1.1 + 0.08 * lines.len() as f64
    } else {
        1.1
    };
    let y_max = if y_max > 0.0 { y_max * headroom } else { 1.0 };
    let y_fmt = move |y: &f64| {
        if y_max >= 100.0 {
            format!("{y:.0}")
        } else if y_max >= 1.0 {
            format!("{y:.1}")
        } else {
            format!("{y:.3}")
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 16))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max.max(1e-3), 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(|e| e.to_string())?;
    for s in lines {
        let color = s.color;
        chart
            .draw_series(
                LineSeries::new(s.points.iter().copied(), color.stroke_width(2)).point_size(2),
            )
            .map_err(|e| e.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xaa, 0xaa, 0xaa))
            .label_font((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Draws `summary.png`: throughput (successful and failed ops/s per interval)
/// on top, then one row per op with mean/median/95th, 99th, 99.9th and max
/// latency in ms, all against elapsed seconds.
pub fn draw_summary(
    file: &Path,
    title: &str,
    intervals: &[Interval],
    ops: &[Op],
) -> Result<(), BenchError> {
    let err = chart_err(file);
    font_ready().map_err(&err)?;
    let height =
        TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX + LATENCY_ROW_HEIGHT_PX * ops.len() as u32;
    let root = BitMapBackend::new(file, (CHART_WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root
        .titled(title, (FONT, 20))
        .map_err(|e| err(e.to_string()))?;
    let x_max = intervals.last().map_or(1.0, |i| i.elapsed_s);
    let (top, rest) = root.split_vertically(THROUGHPUT_PANEL_HEIGHT_PX);
    let ok: Vec<_> = intervals
        .iter()
        .map(|i| (i.elapsed_s, i.ops_per_sec()))
        .collect();
    let failed: Vec<_> = intervals
        .iter()
        .map(|i| (i.elapsed_s, crate::stats::rate(i.failed, i.window_s)))
        .collect();
    panel(
        &top,
        "Throughput",
        (ELAPSED, "ops/s"),
        x_max,
        &[
            series("ok", ok, palette(0)),
            series("failed", failed, palette(1)),
        ],
    )
    .map_err(&err)?;

    if !ops.is_empty() {
        let cells = rest.split_evenly((ops.len(), 4));
        for (row, &op) in ops.iter().enumerate() {
            let pts = |f: &dyn Fn(&crate::stats::Percentiles) -> f64| -> Vec<(f64, f64)> {
                intervals
                    .iter()
                    .filter_map(|i| {
                        i.op(op)
                            .filter(|o| o.successful > 0)
                            .map(|o| (i.elapsed_s, f(&o.latency_us) / 1000.0))
                    })
                    .collect()
            };
            let name = op.name();
            let panels: [(String, Vec<Series>); 4] = [
                (
                    format!("{name}: mean / median / 95th"),
                    vec![
                        series("mean", pts(&|p| p.mean), palette(0)),
                        series("median", pts(&|p| p.p50 as f64), palette(2)),
                        series("95th", pts(&|p| p.p95 as f64), palette(3)),
                    ],
                ),
                (
                    format!("{name}: 99th"),
                    vec![series("", pts(&|p| p.p99 as f64), palette(4))],
                ),
                (
                    format!("{name}: 99.9th"),
                    vec![series("", pts(&|p| p.p99_9 as f64), palette(5))],
                ),
                (
                    format!("{name}: max"),
                    vec![series("", pts(&|p| p.max as f64), palette(1))],
                ),
            ];
            for (col, (title, lines)) in panels.iter().enumerate() {
                panel(
                    &cells[row * 4 + col],
                    title,
                    (ELAPSED, "latency (ms)"),
                    x_max,
                    lines,
                )
                .map_err(&err)?;
            }
        }
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// One run's throughput series for [`draw_compare`].
pub struct RunSeries {
    /// Legend text (`label #n`).
    pub label: String,
    /// Group index (selects the colour).
    pub group: usize,
    /// `(elapsed_s, successful ops/s)` per interval.
    pub points: Vec<(f64, f64)>,
}

/// Draws `compare.png`: the throughput of every run per interval, overlaid,
/// coloured by group.
pub fn draw_compare(file: &Path, title: &str, runs: &[RunSeries]) -> Result<(), BenchError> {
    let err = chart_err(file);
    font_ready().map_err(&err)?;
    let root = BitMapBackend::new(
        file,
        (
            CHART_WIDTH_PX,
            TITLE_HEIGHT_PX + 2 * THROUGHPUT_PANEL_HEIGHT_PX,
        ),
    )
    .into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root
        .titled(title, (FONT, 20))
        .map_err(|e| err(e.to_string()))?;
    let x_max = runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.0))
        .fold(0.0f64, f64::max);
    let lines: Vec<Series> = runs
        .iter()
        .map(|r| series(r.label.clone(), r.points.clone(), palette(r.group)))
        .collect();
    panel(
        &root,
        "Throughput per interval",
        (ELAPSED, "ops/s"),
        x_max,
        &lines,
    )
    .map_err(&err)?;
    root.present().map_err(|e| err(e.to_string()))
}

/// One line of a [`Panel`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
}

impl Line {
    /// A line labelled `label` through `points`.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Line {
        Line {
            label: label.into(),
            points,
        }
    }
}

/// One panel of [`draw_panels`]: lines over one x axis starting at 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// x axis description (`q (tablets)`).
    pub x_desc: String,
    /// y axis description (`rows/s`).
    pub y_desc: String,
    /// The lines; line `i` gets colour [`palette`]`(i)`.
    pub lines: Vec<Line>,
}

/// Draws `panels` one above the other, each [`THROUGHPUT_PANEL_HEIGHT_PX`] high.
pub fn draw_panels(file: &Path, title: &str, panels: &[Panel]) -> Result<(), BenchError> {
    let err = chart_err(file);
    font_ready().map_err(&err)?;
    let rows = panels.len().max(1);
    let height = TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX * rows as u32;
    let root = BitMapBackend::new(file, (CHART_WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root
        .titled(title, (FONT, 20))
        .map_err(|e| err(e.to_string()))?;
    let areas = root.split_evenly((rows, 1));
    for (area, p) in areas.iter().zip(panels) {
        let x_max = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|pt| pt.0))
            .filter(|x| x.is_finite())
            .fold(0.0f64, f64::max)
            * 1.05;
        let lines: Vec<Series> = p
            .lines
            .iter()
            .enumerate()
            .map(|(i, l)| series(l.label.clone(), l.points.clone(), palette(i)))
            .collect();
        panel(area, &p.title, (&p.x_desc, &p.y_desc), x_max, &lines).map_err(&err)?;
    }
    root.present().map_err(|e| err(e.to_string()))
}
