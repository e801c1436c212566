//! The chart model: what a chart shows, computed without drawing anything.
//!
//! Owns every decision a reader sees: the time unit of a latency axis (chosen
//! from the data, so 200–2000 µs reads `0.5 … 2.5 ms`, never `0.001`), the
//! axis ranges and tick labels (1-2-5 steps, as many decimals as the step
//! needs, so labels are distinct), each series' scaled points, colour, dash
//! and marker, the draw order (larger series first, so a median is drawn over
//! its 95th percentile), found and not-found reads as separate series, the
//! pixel layout (legends and the summary text box in their own columns, never
//! over a plotting area) and the summary lines. It must never touch plotters'
//! backends or the file system: [`super`] draws a [`ChartModel`], and the
//! tests check the model.

use plotters::style::RGBColor;

use super::{palette, Line, Panel, RunSeries};
use crate::output::RunSummary;
use crate::stats::{Interval, OpInterval, Percentiles};
use crate::workload::Op;

/// Width of every chart, pixels.
pub const CHART_WIDTH_PX: u32 = 1400;
/// Height of the title strip, pixels.
pub const TITLE_HEIGHT_PX: u32 = 36;
/// Height of the throughput row (and of one scenario panel), pixels.
pub const THROUGHPUT_PANEL_HEIGHT_PX: u32 = 320;
/// Height of one op's row of latency panels, pixels.
pub const LATENCY_ROW_HEIGHT_PX: u32 = 240;
/// Width of the legend column right of a row of panels, pixels.
pub const LEGEND_WIDTH_PX: u32 = 210;
/// Width of the legend column of a scenario chart (longer labels), pixels.
pub const SCENARIO_LEGEND_WIDTH_PX: u32 = 300;
/// Width of the summary text box right of the throughput panel, pixels.
pub const SUMMARY_BOX_WIDTH_PX: u32 = 470;
/// Height of one legend entry or text line, pixels.
pub const LINE_HEIGHT_PX: u32 = 16;
/// Inner padding of legends and the text box, pixels.
pub const BOX_PADDING_PX: u32 = 8;
/// Font size of legends and the summary text box, pixels.
pub const BOX_FONT_PX: u32 = 13;
/// Widest advance of a DejaVu Sans glyph at [`BOX_FONT_PX`] for the text the
/// charts print (digits, lower case, `µ`), rounded up; used to check that a
/// line fits its box.
pub const BOX_CHAR_WIDTH_PX: u32 = 9;
/// About one x tick label per this many pixels of plotting area.
const X_TICK_SPACING_PX: u32 = 90;
/// About one y tick label per this many pixels of plotting area.
const Y_TICK_SPACING_PX: u32 = 40;
/// Width of a panel outside its plotting area (y labels, margins), pixels.
const PANEL_CHROME_W_PX: u32 = 80;
/// Height of a panel outside its plotting area (caption, x labels, margins).
const PANEL_CHROME_H_PX: u32 = 75;

/// The unit durations are shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
}

impl TimeUnit {
    /// Microseconds in one of this unit.
    pub fn us(self) -> f64 {
        match self {
            TimeUnit::Micros => 1.0,
            TimeUnit::Millis => 1e3,
            TimeUnit::Seconds => 1e6,
        }
    }

    /// The symbol printed after numbers and in axis descriptions.
    pub fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Micros => "µs",
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        }
    }

    /// The unit in which `max_us` (the largest value shown) is a number in
    /// [1, 1000): µs below 1 ms, ms below 1 s, else s.
    pub fn fitting(max_us: f64) -> TimeUnit {
        if max_us < 1e3 {
            TimeUnit::Micros
        } else if max_us < 1e6 {
            TimeUnit::Millis
        } else {
            TimeUnit::Seconds
        }
    }
}

/// A duration in µs as `850 µs`, `1.92 ms`, `12.3 s` (three significant digits
/// at most, in the unit that fits it).
pub fn format_us(us: f64) -> String {
    let unit = TimeUnit::fitting(us);
    let v = us / unit.us();
    let decimals = if unit == TimeUnit::Micros || v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {}", unit.symbol())
}

/// A marker drawn at every point of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// A dot.
    Circle,
    /// A square.
    Square,
    /// A triangle.
    Triangle,
    /// A diagonal cross.
    Cross,
}

impl Marker {
    fn nth(i: usize) -> Marker {
        [
            Marker::Circle,
            Marker::Square,
            Marker::Triangle,
            Marker::Cross,
        ][i % 4]
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Line and marker colour.
    pub color: RGBColor,
    /// Dashed line (solid otherwise).
    pub dashed: bool,
    /// Marker at each point.
    pub marker: Marker,
    /// Marker outlined (filled otherwise).
    pub hollow: bool,
}

/// One series as drawn: label, points in the axis' unit, style.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesModel {
    /// Legend text (empty: no legend entry).
    pub label: String,
    /// `(x, y)` points in x order, y already in the axis' unit.
    pub points: Vec<(f64, f64)>,
    /// Style.
    pub style: Style,
}

/// One axis: range, ticks and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Description, with the unit (`latency (ms)`).
    pub desc: String,
    /// Lowest value shown.
    pub min: f64,
    /// Highest value shown.
    pub max: f64,
    /// Tick positions, ascending, all within `min..=max`.
    pub ticks: Vec<f64>,
    /// Decimals of the tick labels (enough for the tick step).
    pub decimals: usize,
}

impl Axis {
    /// The label of the tick at `v`.
    pub fn label(&self, v: f64) -> String {
        let decimals = self.decimals;
        let s = format!("{v:.decimals$}");
        // `-0.0` reads badly.
        if s.trim_start_matches('-')
            .trim_matches(['0', '.'])
            .is_empty()
        {
            s.trim_start_matches('-').to_string()
        } else {
            s
        }
    }

    /// The labels of all ticks, in order.
    pub fn labels(&self) -> Vec<String> {
        self.ticks.iter().map(|&v| self.label(v)).collect()
    }

    /// Whether `v` lies within the axis.
    pub fn contains(&self, v: f64) -> bool {
        v >= self.min && v <= self.max
    }
}

/// A rectangle of the image, pixels from the top-left corner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

impl Rect {
    /// Whether the two rectangles share any pixel.
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// Whether `o` lies entirely inside `self`.
    pub fn contains(&self, o: &Rect) -> bool {
        o.x >= self.x
            && o.y >= self.y
            && o.x + o.w <= self.x + self.w
            && o.y + o.h <= self.y + self.h
    }
}

/// One panel: a caption, two axes and its series, in its own rectangle.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelModel {
    /// Caption.
    pub title: String,
    /// Where it is drawn (caption, tick labels and plotting area).
    pub rect: Rect,
    /// x axis.
    pub x: Axis,
    /// y axis.
    pub y: Axis,
    /// Time unit of the y axis, when it shows durations.
    pub y_unit: Option<TimeUnit>,
    /// Series in draw order: larger ones first, so smaller ones stay on top.
    pub series: Vec<SeriesModel>,
    /// x ranges shaded behind the series (clipped to the x axis).
    pub bands: Vec<(f64, f64)>,
}

/// A legend: entries in a rectangle of their own.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendModel {
    /// Where it is drawn.
    pub rect: Rect,
    /// Heading line (empty: none).
    pub heading: String,
    /// `(label, style)`, top to bottom, as many as fit.
    pub entries: Vec<(String, Style)>,
    /// Entries left out for want of room (said in a last line).
    pub more: usize,
}

impl LegendModel {
    /// Lines it prints: heading, entries, the "more" line.
    pub fn line_count(&self) -> usize {
        usize::from(!self.heading.is_empty()) + self.entries.len() + usize::from(self.more > 0)
    }
}

/// Lines of text in a box of their own.
#[derive(Debug, Clone, PartialEq)]
pub struct TextBox {
    /// Where it is drawn.
    pub rect: Rect,
    /// Lines, top to bottom.
    pub lines: Vec<String>,
}

/// Everything a chart shows, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartModel {
    /// Image size, pixels.
    pub size: (u32, u32),
    /// Title strip text.
    pub title: String,
    /// Panels.
    pub panels: Vec<PanelModel>,
    /// Legends, each outside every panel.
    pub legends: Vec<LegendModel>,
    /// Summary figures, outside every panel.
    pub text: Option<TextBox>,
}

/// A 1-2-5 step giving about `count` ticks over `span`.
fn nice_step(span: f64, count: usize) -> f64 {
    let span = if span.is_finite() && span > 0.0 {
        span
    } else {
        1.0
    };
    let raw = span / count.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    // The 1-2-5 value nearest to `norm` on a log scale (the thresholds are
    // the geometric means of neighbours), so the tick count stays near
    // `count` rather than dropping to `count / 2.5`.
    let nice = if norm < 2f64.sqrt() {
        1.0
    } else if norm < 10f64.sqrt() {
        2.0
    } else if norm < 50f64.sqrt() {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// The 1-2-5 step below `step`.
fn smaller_step(step: f64) -> f64 {
    let mag = 10f64.powf(step.log10().floor());
    let norm = (step / mag).round();
    if norm >= 5.0 {
        2.0 * mag
    } else if norm >= 2.0 {
        mag
    } else {
        mag / 2.0
    }
}

/// About `count` ticks over `min..=max`, and never fewer than three.
fn step_within(min: f64, max: f64, count: usize) -> f64 {
    let mut step = nice_step(max - min, count);
    for _ in 0..8 {
        if ticks(min, max, step).len() >= 3 {
            break;
        }
        step = smaller_step(step);
    }
    step
}

/// Decimals that tell multiples of `step` apart.
fn decimals_for(step: f64) -> usize {
    let e = step.log10().floor() + 1e-9;
    if e >= 0.0 {
        0
    } else {
        (-e).ceil() as usize
    }
}

/// The multiples of `step` within `min..=max`.
fn ticks(min: f64, max: f64, step: f64) -> Vec<f64> {
    let first = (min / step - 1e-9).ceil() as i64;
    let last = (max / step + 1e-9).floor() as i64;
    // Clamped: `k * step` may land a rounding error beyond an end.
    (first..=last)
        .map(|k| (k as f64 * step).clamp(min, max))
        .collect()
}

/// About how many x ticks a panel `width_px` wide has room for.
fn x_tick_count(width_px: u32) -> usize {
    (width_px.saturating_sub(PANEL_CHROME_W_PX) / X_TICK_SPACING_PX).max(2) as usize
}

/// About how many y ticks a panel `height_px` high has room for.
fn y_tick_count(height_px: u32) -> usize {
    (height_px.saturating_sub(PANEL_CHROME_H_PX) / Y_TICK_SPACING_PX).max(2) as usize
}

/// An axis from 0 to `data_max`, for counts, rates, durations and elapsed
/// time. With `headroom` it ends at the first tick above the data, so the
/// highest point is never on the frame.
fn axis_from_zero(desc: String, data_max: f64, count: usize, headroom: bool) -> Axis {
    let top = if data_max.is_finite() && data_max > 0.0 {
        data_max
    } else {
        1.0
    };
    let (step, max) = if headroom {
        let above = |step: f64| ((top / step + 1e-9).floor() + 1.0) * step;
        let mut step = nice_step(top, count);
        for _ in 0..8 {
            if ticks(0.0, above(step), step).len() >= 3 {
                break;
            }
            step = smaller_step(step);
        }
        (step, above(step))
    } else {
        (step_within(0.0, top, count), top)
    };
    Axis {
        desc,
        min: 0.0,
        max,
        ticks: ticks(0.0, max, step),
        decimals: decimals_for(step),
    }
}

/// An axis spanning the data (`lo..=hi`) with a little room on both sides.
fn axis_over_data(desc: String, lo: f64, hi: f64, count: usize) -> Axis {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let pad = if hi > lo {
        (hi - lo) * 0.03
    } else {
        lo.abs().max(1.0) * 0.1
    };
    let (min, max) = (lo - pad, hi + pad);
    let step = step_within(min, max, count);
    Axis {
        desc,
        min,
        max,
        ticks: ticks(min, max, step),
        decimals: decimals_for(step),
    }
}

fn finite(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect()
}

fn y_max(series: &[SeriesModel]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
}

/// Puts larger series first (by mean y), so the smaller are drawn over them.
fn draw_order(series: &mut [SeriesModel]) {
    let mean =
        |s: &SeriesModel| s.points.iter().map(|p| p.1).sum::<f64>() / s.points.len().max(1) as f64;
    series.sort_by(|a, b| mean(b).total_cmp(&mean(a)));
}

/// How a panel's x axis is ranged.
#[derive(Debug, Clone, Copy)]
enum XRange {
    /// `0..=max`: elapsed time.
    FromZero(f64),
    /// Over the data.
    Data,
}

/// A panel of `series` (legend order) in `rect`. With `y_unit`, y values are
/// durations in that unit, shown in the unit that fits the largest.
fn panel_model(
    title: String,
    rect: Rect,
    (x_desc, x_range): (&str, XRange),
    (y_desc, y_unit): (&str, Option<TimeUnit>),
    series: Vec<SeriesModel>,
) -> PanelModel {
    let mut series: Vec<SeriesModel> = series
        .into_iter()
        .map(|s| SeriesModel {
            points: finite(&s.points),
            ..s
        })
        .collect();
    let (y_desc, unit) = match y_unit {
        Some(from) => {
            let to = TimeUnit::fitting(y_max(&series) * from.us());
            let factor = from.us() / to.us();
            for s in &mut series {
                for p in &mut s.points {
                    p.1 *= factor;
                }
            }
            (format!("{y_desc} ({})", to.symbol()), Some(to))
        }
        None => (y_desc.to_string(), None),
    };
    let x = match x_range {
        XRange::FromZero(max) => {
            axis_from_zero(x_desc.to_string(), max, x_tick_count(rect.w), false)
        }
        XRange::Data => {
            let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
            let lo = xs.clone().fold(f64::INFINITY, f64::min);
            let hi = xs.fold(f64::NEG_INFINITY, f64::max);
            axis_over_data(x_desc.to_string(), lo, hi, x_tick_count(rect.w))
        }
    };
    let y = axis_from_zero(y_desc, y_max(&series), y_tick_count(rect.h), true);
    draw_order(&mut series);
    PanelModel {
        title,
        rect,
        x,
        y,
        y_unit: unit,
        series,
        bands: Vec::new(),
    }
}

/// A legend in `rect` of the labelled series among `series`, first
/// appearance of each label kept, in order.
fn legend_of<'a>(
    rect: Rect,
    heading: &str,
    series: impl IntoIterator<Item = &'a SeriesModel>,
) -> LegendModel {
    let mut entries: Vec<(String, Style)> = Vec::new();
    for s in series {
        if !s.label.is_empty() && !entries.iter().any(|e| e.0 == s.label) {
            entries.push((s.label.clone(), s.style));
        }
    }
    let room = ((rect.h.saturating_sub(2 * BOX_PADDING_PX) / LINE_HEIGHT_PX) as usize)
        .saturating_sub(usize::from(!heading.is_empty()));
    let mut more = 0;
    if entries.len() > room {
        // Keep one line to say how many were left out.
        let keep = room.saturating_sub(1);
        more = entries.len() - keep;
        entries.truncate(keep);
    }
    LegendModel {
        rect,
        heading: heading.to_string(),
        entries,
        more,
    }
}

/// A latency statistic drawn in `summary.png`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stat {
    Mean,
    Median,
    P95,
    P99,
    P999,
    Max,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Median => "median",
            Stat::P95 => "95th",
            Stat::P99 => "99th",
            Stat::P999 => "99.9th",
            Stat::Max => "max",
        }
    }

    fn of(self, p: &Percentiles) -> f64 {
        match self {
            Stat::Mean => p.mean,
            Stat::Median => p.p50 as f64,
            Stat::P95 => p.p95 as f64,
            Stat::P99 => p.p99 as f64,
            Stat::P999 => p.p99_9 as f64,
            Stat::Max => p.max as f64,
        }
    }

    /// Colour and marker per statistic; found solid and filled, not found
    /// dashed and hollow.
    fn style(self, not_found: bool) -> Style {
        let (color, marker) = match self {
            Stat::Mean => (palette(0), Marker::Circle),
            Stat::Median => (palette(2), Marker::Square),
            Stat::P95 => (palette(3), Marker::Triangle),
            Stat::P99 => (palette(4), Marker::Circle),
            Stat::P999 => (palette(5), Marker::Circle),
            Stat::Max => (palette(1), Marker::Circle),
        };
        Style {
            color,
            dashed: not_found,
            marker,
            hollow: not_found,
        }
    }
}

/// The panels of one op's row, left to right.
const OP_PANELS: [&[Stat]; 4] = [
    &[Stat::Mean, Stat::Median, Stat::P95],
    &[Stat::P99],
    &[Stat::P999],
    &[Stat::Max],
];

/// The series of `stat` for `op`: found reads (all successful ops when
/// `split` is false) and, with `split`, not-found reads apart.
fn op_series(intervals: &[Interval], op: Op, stat: Stat, split: bool) -> Vec<SeriesModel> {
    let rows = || {
        intervals
            .iter()
            .filter_map(move |i| i.op(op).map(|o| (i.elapsed_s, o)))
    };
    let found: Vec<(f64, f64)> = rows()
        .filter(|(_, o)| o.successful > o.not_found)
        .map(|(t, o): (f64, &OpInterval)| (t, stat.of(o.found_latency())))
        .collect();
    if !split {
        return vec![SeriesModel {
            label: stat.name().to_string(),
            points: found,
            style: stat.style(false),
        }];
    }
    let not_found: Vec<(f64, f64)> = rows()
        .filter_map(|(t, o)| {
            o.not_found_latency_us
                .as_ref()
                .filter(|_| o.not_found > 0)
                .map(|p| (t, stat.of(p)))
        })
        .collect();
    vec![
        SeriesModel {
            label: format!("{} found", stat.name()),
            points: found,
            style: stat.style(false),
        },
        SeriesModel {
            label: format!("{} not found", stat.name()),
            points: not_found,
            style: stat.style(true),
        },
    ]
}

/// The summary lines of a run: totals, then per op throughput and p50/p99,
/// found and not-found apart where some reads found nothing.
pub fn summary_lines(summary: &RunSummary, ops: &[Op]) -> Vec<String> {
    let mut lines = vec![
        format!(
            "duration {:.1} s, {} ops, {} failed",
            summary.elapsed_s, summary.total, summary.failed
        ),
        format!(
            "{:.1} ops/s (last {:.0} s: {:.1} ops/s)",
            summary.ops_per_sec, summary.last_window_s, summary.last_window_ops_per_sec
        ),
        format!("not found {} (successful gets/heads)", summary.not_found),
    ];
    for op in ops {
        let Some(s) = summary.ops.get(op.name()) else {
            continue;
        };
        lines.push(format!(
            "{}: {:.1} ops/s, p50 {}, p99 {}",
            op.name(),
            s.ops_per_sec,
            format_us(s.latency_us.p50 as f64),
            format_us(s.latency_us.p99 as f64)
        ));
        if let (Some(f), Some(n)) = (&s.found_latency_us, &s.not_found_latency_us) {
            lines.push(format!(
                "    found {}: p50 {}, p99 {}",
                s.successful - s.not_found,
                format_us(f.p50 as f64),
                format_us(f.p99 as f64)
            ));
            lines.push(format!(
                "    not found {}: p50 {}, p99 {}",
                s.not_found,
                format_us(n.p50 as f64),
                format_us(n.p99 as f64)
            ));
        }
    }
    lines
}

/// Whether `op` had any not-found read in `intervals`.
fn has_not_found(intervals: &[Interval], op: Op) -> bool {
    intervals
        .iter()
        .any(|i| i.op(op).is_some_and(|o| o.not_found > 0))
}

/// The model of `summary.png`: throughput (ok, not found, failed ops/s) with
/// its legend and the run's summary lines on the right, then per op a row of
/// latency panels (mean/median/95th, 99th, 99.9th, max; found and not-found
/// apart when some reads found nothing) with the row's legend on the right.
pub fn summary_model(
    title: &str,
    intervals: &[Interval],
    ops: &[Op],
    summary: &RunSummary,
) -> ChartModel {
    let w = CHART_WIDTH_PX;
    let height =
        TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX + LATENCY_ROW_HEIGHT_PX * ops.len() as u32;
    let x_max = intervals.last().map_or(1.0, |i| i.elapsed_s);
    let elapsed = ("elapsed (s)", XRange::FromZero(x_max));

    let rate = |f: &dyn Fn(&Interval) -> u64| -> Vec<(f64, f64)> {
        intervals
            .iter()
            .map(|i| (i.elapsed_s, crate::stats::rate(f(i), i.window_s)))
            .collect()
    };
    let not_found = |i: &Interval| i.ops.iter().map(|o| o.not_found).sum::<u64>();
    let style = |i: usize, marker: Marker| Style {
        color: palette(i),
        dashed: false,
        marker,
        hollow: false,
    };
    let mut throughput = vec![SeriesModel {
        label: "ok".into(),
        points: rate(&|i| i.successful.saturating_sub(not_found(i))),
        style: style(0, Marker::Circle),
    }];
    if ops.iter().any(|&op| has_not_found(intervals, op)) {
        throughput.push(SeriesModel {
            label: "not found".into(),
            points: rate(&not_found),
            style: Style {
                dashed: true,
                hollow: true,
                ..style(3, Marker::Triangle)
            },
        });
    }
    throughput.push(SeriesModel {
        label: "failed".into(),
        points: rate(&|i| i.failed),
        style: style(1, Marker::Cross),
    });
    let top_y = TITLE_HEIGHT_PX;
    let panel_w = w - SUMMARY_BOX_WIDTH_PX;
    let mut panels = vec![panel_model(
        "Throughput".into(),
        Rect {
            x: 0,
            y: top_y,
            w: panel_w,
            h: THROUGHPUT_PANEL_HEIGHT_PX,
        },
        elapsed,
        ("ops/s", None),
        throughput.clone(),
    )];
    let legend_h = BOX_PADDING_PX * 2 + LINE_HEIGHT_PX * throughput.len() as u32;
    let mut legends = vec![legend_of(
        Rect {
            x: panel_w,
            y: top_y + BOX_PADDING_PX,
            w: SUMMARY_BOX_WIDTH_PX - BOX_PADDING_PX,
            h: legend_h,
        },
        "",
        &throughput,
    )];
    let text_y = top_y + 2 * BOX_PADDING_PX + legend_h;
    let text = TextBox {
        rect: Rect {
            x: panel_w,
            y: text_y,
            w: SUMMARY_BOX_WIDTH_PX - BOX_PADDING_PX,
            h: top_y + THROUGHPUT_PANEL_HEIGHT_PX - BOX_PADDING_PX - text_y,
        },
        lines: summary_lines(summary, ops),
    };

    let cell_w = (w - LEGEND_WIDTH_PX) / OP_PANELS.len() as u32;
    for (row, &op) in ops.iter().enumerate() {
        let y = TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX + LATENCY_ROW_HEIGHT_PX * row as u32;
        let split = has_not_found(intervals, op);
        let mut row_series = Vec::new();
        for (col, stats) in OP_PANELS.iter().enumerate() {
            let series: Vec<SeriesModel> = stats
                .iter()
                .flat_map(|&s| op_series(intervals, op, s, split))
                .collect();
            row_series.extend(series.iter().cloned());
            let names: Vec<&str> = stats.iter().map(|s| s.name()).collect();
            panels.push(panel_model(
                format!("{}: {}", op.name(), names.join(" / ")),
                Rect {
                    x: cell_w * col as u32,
                    y,
                    w: cell_w,
                    h: LATENCY_ROW_HEIGHT_PX,
                },
                elapsed,
                ("latency", Some(TimeUnit::Micros)),
                series,
            ));
        }
        legends.push(legend_of(
            Rect {
                x: cell_w * OP_PANELS.len() as u32 + BOX_PADDING_PX,
                y: y + BOX_PADDING_PX,
                w: w - cell_w * OP_PANELS.len() as u32 - 2 * BOX_PADDING_PX,
                h: LATENCY_ROW_HEIGHT_PX - 2 * BOX_PADDING_PX,
            },
            op.name(),
            &row_series,
        ));
    }
    ChartModel {
        size: (w, height),
        title: title.to_string(),
        panels,
        legends,
        text: Some(text),
    }
}

/// The legend column right of a panel `h` high at `y`, in a chart `w` wide.
fn side_legend_rect(w: u32, y: u32, h: u32) -> Rect {
    Rect {
        x: w - SCENARIO_LEGEND_WIDTH_PX + BOX_PADDING_PX,
        y: y + BOX_PADDING_PX,
        w: SCENARIO_LEGEND_WIDTH_PX - 2 * BOX_PADDING_PX,
        h: h - 2 * BOX_PADDING_PX,
    }
}

/// The model of `compare.png`: every run's throughput per interval, coloured
/// by group, the legend on the right.
pub fn compare_model(title: &str, runs: &[RunSeries]) -> ChartModel {
    let w = CHART_WIDTH_PX;
    let h = 2 * THROUGHPUT_PANEL_HEIGHT_PX;
    let x_max = runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.0))
        .fold(0.0f64, f64::max);
    let series: Vec<SeriesModel> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| SeriesModel {
            label: r.label.clone(),
            points: r.points.clone(),
            style: Style {
                color: palette(r.group),
                dashed: false,
                marker: Marker::nth(i),
                hollow: false,
            },
        })
        .collect();
    let legend = legend_of(side_legend_rect(w, TITLE_HEIGHT_PX, h), "", &series);
    let panel = panel_model(
        "Throughput per interval".into(),
        Rect {
            x: 0,
            y: TITLE_HEIGHT_PX,
            w: w - SCENARIO_LEGEND_WIDTH_PX,
            h,
        },
        ("elapsed (s)", XRange::FromZero(x_max)),
        ("ops/s", None),
        series,
    );
    ChartModel {
        size: (w, TITLE_HEIGHT_PX + h),
        title: title.to_string(),
        panels: vec![panel],
        legends: vec![legend],
        text: None,
    }
}

/// The model of a scenario chart: `panels` one above the other, each
/// [`THROUGHPUT_PANEL_HEIGHT_PX`] high with its legend on the right; x axes
/// span their data (percentiles start at 50, not 0).
pub fn panels_model(title: &str, panels: &[Panel]) -> ChartModel {
    let w = CHART_WIDTH_PX;
    let rows = panels.len().max(1) as u32;
    let mut out = ChartModel {
        size: (w, TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX * rows),
        title: title.to_string(),
        panels: Vec::new(),
        legends: Vec::new(),
        text: None,
    };
    for (row, p) in panels.iter().enumerate() {
        let y = TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX * row as u32;
        let series: Vec<SeriesModel> = p
            .lines
            .iter()
            .enumerate()
            .map(|(i, l): (usize, &Line)| SeriesModel {
                label: l.label.clone(),
                points: l.points.clone(),
                style: Style {
                    color: palette(i),
                    dashed: false,
                    marker: Marker::nth(i),
                    hollow: false,
                },
            })
            .collect();
        out.legends.push(legend_of(
            side_legend_rect(w, y, THROUGHPUT_PANEL_HEIGHT_PX),
            "",
            &series,
        ));
        let mut panel = panel_model(
            p.title.clone(),
            Rect {
                x: 0,
                y,
                w: w - SCENARIO_LEGEND_WIDTH_PX,
                h: THROUGHPUT_PANEL_HEIGHT_PX,
            },
            (&p.x_desc, XRange::Data),
            (&p.y_desc, p.y_unit),
            series,
        );
        panel.bands = p
            .bands
            .iter()
            .map(|&(a, b)| (a.max(panel.x.min), b.min(panel.x.max)))
            .filter(|(a, b)| a < b)
            .collect();
        out.panels.push(panel);
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::output::OpSummary;
    use crate::workload::Workload;

    /// Percentiles spread around a median of `p50` µs: max is 4× the median.
    fn spread(p50: u64) -> Percentiles {
        Percentiles {
            min: p50 / 2,
            mean: p50 as f64 * 1.1,
            p50,
            p95: p50 * 3 / 2,
            p99: p50 * 2,
            p99_9: p50 * 3,
            max: p50 * 4,
        }
    }

    /// One op's interval: `n` ok ops around `found_p50` µs and `nf` not-found
    /// ones around `nf_p50` µs.
    fn op_interval(op: Op, n: u64, found_p50: u64, nf: u64, nf_p50: u64) -> OpInterval {
        OpInterval {
            op,
            successful: n + nf,
            not_found: nf,
            failed: 0,
            // The merged histogram: close enough to the found one here.
            latency_us: spread(found_p50),
            found_latency_us: (nf > 0).then(|| spread(found_p50)),
            not_found_latency_us: (nf > 0).then(|| spread(nf_p50)),
        }
    }

    /// Ten 1 s intervals: gets with found reads between 200 and 2000 µs
    /// (median 200..500, max 4× that) and not-found reads much faster (median
    /// 60 µs); puts between 5 and 80 µs (median 5..20).
    pub(crate) fn intervals() -> Vec<Interval> {
        (1..=10u64)
            .map(|t| {
                let get = op_interval(Op::Get, 900, 200 + 30 * (t - 1), 100, 60);
                let put = op_interval(Op::Put, 1000, 5 + (t - 1) * 15 / 9, 0, 0);
                Interval {
                    elapsed_s: t as f64,
                    window_s: 1.0,
                    successful: get.successful + put.successful,
                    failed: 0,
                    ops: vec![get, put],
                }
            })
            .collect()
    }

    pub(crate) const OPS: [Op; 2] = [Op::Get, Op::Put];

    fn op_summary(n: u64, nf: u64, p50: u64) -> OpSummary {
        OpSummary {
            total: n + nf,
            successful: n + nf,
            failed: 0,
            not_found: nf,
            ops_per_sec: (n + nf) as f64 / 10.0,
            latency_us: spread(p50),
            service_time_us: None,
            found_latency_us: (nf > 0).then(|| spread(p50)),
            not_found_latency_us: (nf > 0).then(|| spread(60)),
        }
    }

    /// The whole-run summary of `ops`; gets and heads with not-found reads
    /// when `not_found` (no other op can have them).
    pub(crate) fn summary(ops: &[Op], not_found: bool) -> RunSummary {
        let nf = |op: &Op| u64::from(not_found && matches!(op, Op::Get | Op::Head)) * 1000;
        let per_op: BTreeMap<String, OpSummary> = ops
            .iter()
            .map(|op| (op.name().to_string(), op_summary(123_456, nf(op), 480)))
            .collect();
        let total = per_op.values().map(|o| o.total).sum();
        RunSummary {
            workload: Workload::default(),
            target: "memory".into(),
            seed: 1,
            started_at: "2026-01-01T00:00:00Z".into(),
            elapsed_s: 3600.0,
            intervals: 3600,
            preload: None,
            ops: per_op,
            total,
            successful: total,
            failed: 0,
            not_found: ops.iter().map(nf).sum(),
            ops_per_sec: total as f64 / 3600.0,
            last_window_ops_per_sec: 123_456.7,
            last_window_s: 360.0,
            disk_bytes: None,
            disk_io: None,
            reclaim: None,
            chart_error: None,
            store_counters: BTreeMap::new(),
        }
    }

    fn panel<'a>(m: &'a ChartModel, title: &str) -> &'a PanelModel {
        m.panels
            .iter()
            .find(|p| p.title == title)
            .unwrap_or_else(|| panic!("no panel {title}: {:?}", titles(m)))
    }

    fn titles(m: &ChartModel) -> Vec<&str> {
        m.panels.iter().map(|p| p.title.as_str()).collect()
    }

    fn labels_as_numbers(a: &Axis) -> Vec<f64> {
        a.labels()
            .iter()
            .map(|l| l.parse().unwrap_or_else(|e| panic!("label {l}: {e}")))
            .collect()
    }

    fn assert_distinct_labels(a: &Axis) {
        let labels = a.labels();
        assert!(labels.len() >= 3, "too few ticks on {}: {labels:?}", a.desc);
        let mut sorted = labels.clone();
        sorted.dedup();
        assert_eq!(sorted, labels, "repeated tick labels on {}", a.desc);
        for t in &a.ticks {
            assert!(a.contains(*t), "tick {t} outside {}..{}", a.min, a.max);
        }
    }

    #[test]
    fn time_unit_follows_the_magnitude() {
        assert_eq!(TimeUnit::fitting(80.0), TimeUnit::Micros);
        assert_eq!(TimeUnit::fitting(999.0), TimeUnit::Micros);
        assert_eq!(TimeUnit::fitting(2000.0), TimeUnit::Millis);
        assert_eq!(TimeUnit::fitting(2.5e6), TimeUnit::Seconds);
        assert_eq!(format_us(850.0), "850 µs");
        assert_eq!(format_us(1920.0), "1.92 ms");
        assert_eq!(format_us(12_345.0), "12.3 ms");
        assert_eq!(format_us(2_100_000.0), "2.10 s");
    }

    #[test]
    fn latency_axes_are_in_the_unit_of_their_data() {
        let m = summary_model("t", &intervals(), &OPS, &summary(&OPS, true));
        // Found gets up to 3 × 470 = 1410 µs (99.9th) and 4 × 470 = 1880 µs
        // (max), not-found ones far below: ms.
        for (title, want_max, want_top) in [("get: 99.9th", 1.41, 1.5), ("get: max", 1.88, 2.0)] {
            let p = panel(&m, title);
            assert_eq!(p.y_unit, Some(TimeUnit::Millis), "{title}");
            assert_eq!(p.y.desc, "latency (ms)");
            let values = labels_as_numbers(&p.y);
            let top = values.last().copied().unwrap_or(0.0);
            assert_eq!(top, want_top, "{title}: {:?}", p.y.labels());
            assert!(p.y.decimals <= 1, "{title}: {:?}", p.y.labels());
            // The points were scaled too.
            let max = p
                .series
                .iter()
                .flat_map(|s| &s.points)
                .map(|p| p.1)
                .fold(0.0, f64::max);
            assert!((max - want_max).abs() < 1e-9, "{title}: max {max}");
        }
        assert_eq!(
            panel(&m, "get: max").y.labels(),
            ["0.0", "0.5", "1.0", "1.5", "2.0"]
        );
        // Puts: 5..80 µs → µs, whole numbers.
        for (title, want_top) in [("put: mean / median / 95th", 40.0), ("put: max", 100.0)] {
            let p = panel(&m, title);
            assert_eq!(p.y_unit, Some(TimeUnit::Micros), "{title}");
            assert_eq!(p.y.desc, "latency (µs)");
            assert_eq!(p.y.decimals, 0, "{title}: {:?}", p.y.labels());
            let top = labels_as_numbers(&p.y).last().copied().unwrap_or(0.0);
            assert_eq!(top, want_top, "{title}: {:?}", p.y.labels());
        }
        // Found gets' 99th percentile stays below 1 ms (2 × 470 µs): µs.
        assert_eq!(panel(&m, "get: 99th").y_unit, Some(TimeUnit::Micros));
        assert_eq!(
            panel(&m, "get: 99th").y.labels(),
            ["0", "200", "400", "600", "800", "1000"]
        );
    }

    #[test]
    fn tick_labels_are_distinct_at_every_magnitude() {
        for max in [
            0.0013, 0.0022, 0.004, 0.09, 0.9, 1.0, 7.0, 12.0, 99.0, 999.0, 1234.5, 4e6, 7.3e9,
        ] {
            for count in [2, 4, 6, 12] {
                let a = axis_from_zero("y".into(), max, count, true);
                assert_distinct_labels(&a);
                assert!(a.max > max, "{max}: axis ends at {}", a.max);
                let a = axis_from_zero("x".into(), max, count, false);
                assert_distinct_labels(&a);
                assert_eq!(a.max, max);
                let a = axis_over_data("x".into(), max, max * 1.7, count);
                assert_distinct_labels(&a);
            }
        }
        // The panels of a whole chart too.
        let m = summary_model("t", &intervals(), &OPS, &summary(&OPS, true));
        for p in &m.panels {
            assert_distinct_labels(&p.x);
            assert_distinct_labels(&p.y);
        }
    }

    #[test]
    fn every_series_is_present_visible_and_in_the_legend() {
        let m = summary_model("t", &intervals(), &OPS, &summary(&OPS, true));
        let mut want: Vec<(String, String)> = vec![
            ("Throughput".into(), "ok".into()),
            ("Throughput".into(), "not found".into()),
            ("Throughput".into(), "failed".into()),
        ];
        for (title, stats) in [
            ("mean / median / 95th", &["mean", "median", "95th"][..]),
            ("99th", &["99th"]),
            ("99.9th", &["99.9th"]),
            ("max", &["max"]),
        ] {
            for s in stats {
                for kind in ["found", "not found"] {
                    want.push((format!("get: {title}"), format!("{s} {kind}")));
                }
                want.push((format!("put: {title}"), s.to_string()));
            }
        }
        for (title, label) in &want {
            let p = panel(&m, title);
            let s = p
                .series
                .iter()
                .find(|s| &s.label == label)
                .unwrap_or_else(|| panic!("{title}: no series {label}"));
            assert!(
                s.points
                    .iter()
                    .any(|&(x, y)| p.x.contains(x) && p.y.contains(y)),
                "{title}: {label} has no point in view: {:?}",
                s.points
            );
            assert!(
                m.legends
                    .iter()
                    .any(|l| l.entries.iter().any(|e| &e.0 == label && e.1 == s.style)),
                "{label} missing from the legends"
            );
        }
        assert!(m.legends.iter().all(|l| l.more == 0));
        // Found and not-found look different; so do median and 95th.
        let first = panel(&m, "get: mean / median / 95th");
        let style = |label: &str| {
            first
                .series
                .iter()
                .find(|s| s.label == label)
                .map(|s| s.style)
                .unwrap_or_else(|| panic!("{label}"))
        };
        assert_ne!(style("median found"), style("median not found"));
        assert_ne!(style("median found").color, style("95th found").color);
        // Smaller percentiles are drawn last, over the larger.
        let at = |label: &str| first.series.iter().position(|s| s.label == label);
        assert!(at("95th found") < at("mean found"));
        assert!(at("mean found") < at("median found"));
        // Without not-found reads, a get has no found/not-found split.
        let mut plain = intervals();
        for i in &mut plain {
            i.ops[0] = op_interval(Op::Get, 1000, 300, 0, 0);
        }
        let m = summary_model("t", &plain, &OPS, &summary(&OPS, false));
        let labels: Vec<&str> = panel(&m, "get: max")
            .series
            .iter()
            .map(|s| s.label.as_str())
            .collect();
        assert_eq!(labels, ["max"]);
        assert!(panel(&m, "Throughput")
            .series
            .iter()
            .all(|s| s.label != "not found"));
    }

    fn assert_outside_every_panel(m: &ChartModel) {
        let image = Rect {
            x: 0,
            y: 0,
            w: m.size.0,
            h: m.size.1,
        };
        let boxes: Vec<Rect> = m
            .legends
            .iter()
            .map(|l| l.rect)
            .chain(m.text.iter().map(|t| t.rect))
            .collect();
        assert!(!boxes.is_empty());
        for (i, b) in boxes.iter().enumerate() {
            assert!(image.contains(b), "{b:?} outside the image {image:?}");
            for p in &m.panels {
                assert!(!b.overlaps(&p.rect), "{b:?} covers panel {}", p.title);
            }
            for o in &boxes[i + 1..] {
                assert!(!b.overlaps(o), "{b:?} overlaps {o:?}");
            }
        }
        for (i, p) in m.panels.iter().enumerate() {
            assert!(image.contains(&p.rect), "{} outside the image", p.title);
            for o in &m.panels[i + 1..] {
                assert!(
                    !p.rect.overlaps(&o.rect),
                    "{} overlaps {}",
                    p.title,
                    o.title
                );
            }
        }
        for l in &m.legends {
            let need = 2 * BOX_PADDING_PX + LINE_HEIGHT_PX * l.line_count() as u32;
            assert!(
                need <= l.rect.h,
                "legend of {} lines in {:?}",
                l.line_count(),
                l.rect
            );
        }
    }

    #[test]
    fn legends_and_summary_sit_outside_the_data() {
        let all = Op::ALL;
        let mut ivs = intervals();
        for i in &mut ivs {
            i.ops = all
                .iter()
                .map(|&op| {
                    op_interval(
                        op,
                        100,
                        300,
                        u64::from(op == Op::Get || op == Op::Head) * 10,
                        90,
                    )
                })
                .collect();
        }
        let m = summary_model("t", &ivs, &all, &summary(&all, true));
        assert_outside_every_panel(&m);
        assert_eq!(
            m.size,
            (
                CHART_WIDTH_PX,
                TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX + 6 * LATENCY_ROW_HEIGHT_PX
            )
        );
        // Every summary line fits its box, even for six ops of an hour's run.
        let text = m.text.as_ref().unwrap_or_else(|| panic!("no summary box"));
        let need = 2 * BOX_PADDING_PX + LINE_HEIGHT_PX * text.lines.len() as u32;
        assert!(
            need <= text.rect.h,
            "{} lines in {:?}",
            text.lines.len(),
            text.rect
        );
        for line in &text.lines {
            let w = 2 * BOX_PADDING_PX + BOX_CHAR_WIDTH_PX * line.chars().count() as u32;
            assert!(w <= text.rect.w, "too wide ({w} px): {line}");
        }
        let runs: Vec<RunSeries> = (0..40)
            .map(|i| RunSeries {
                label: format!("run #{i}"),
                group: i % 3,
                points: vec![(1.0, 10.0), (2.0, 12.0)],
            })
            .collect();
        let m = compare_model("t", &runs);
        assert_outside_every_panel(&m);
        assert_eq!(m.legends[0].entries.len() + m.legends[0].more, 40);
        let m = panels_model(
            "t",
            &[
                scan_panel(&[0.5, 0.9, 1.2, 2.0, 3.5, 8.0]),
                scan_panel(&[0.05, 0.06, 0.07, 0.08, 0.1, 0.4]),
            ],
        );
        assert_outside_every_panel(&m);
    }

    fn scan_panel(ms: &[f64]) -> Panel {
        let pct = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9];
        Panel {
            bands: Vec::new(),
            title: "probe".into(),
            x_desc: "percentile".into(),
            y_desc: "probe scan time".into(),
            y_unit: Some(TimeUnit::Millis),
            lines: vec![
                Line::new(
                    "shed",
                    pct.iter().copied().zip(ms.iter().copied()).collect(),
                ),
                Line::new(
                    "noshed",
                    pct.iter()
                        .copied()
                        .zip(ms.iter().map(|v| v * 2.0))
                        .collect(),
                ),
            ],
        }
    }

    #[test]
    fn scenario_x_axis_starts_at_the_data() {
        let m = panels_model(
            "t",
            &[
                scan_panel(&[0.5, 0.9, 1.2, 2.0, 3.5, 8.0]),
                scan_panel(&[0.05, 0.06, 0.07, 0.08, 0.1, 0.4]),
            ],
        );
        for p in &m.panels {
            assert!((45.0..50.0).contains(&p.x.min), "x from {}", p.x.min);
            assert!((99.9..106.0).contains(&p.x.max), "x to {}", p.x.max);
            assert_eq!(p.x.ticks.first().copied(), Some(50.0), "{:?}", p.x.labels());
            assert_distinct_labels(&p.x);
        }
        // Milliseconds in, the unit that fits out.
        assert_eq!(m.panels[0].y_unit, Some(TimeUnit::Millis));
        assert_eq!(m.panels[0].y.desc, "probe scan time (ms)");
        assert_eq!(m.panels[1].y_unit, Some(TimeUnit::Micros));
        assert_eq!(m.panels[1].y.desc, "probe scan time (µs)");
        let top = m.panels[1]
            .series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.1)
            .fold(0.0, f64::max);
        assert!((top - 800.0).abs() < 1e-9, "0.4 ms × 2 = 800 µs, got {top}");
    }

    #[test]
    fn summary_lines_give_rates_percentiles_and_not_found() {
        let lines = summary_lines(&summary(&OPS, true), &OPS);
        let text = lines.join("\n");
        assert!(text.contains("duration 3600.0 s"), "{text}");
        assert!(
            text.contains("ops/s (last 360 s: 123456.7 ops/s)"),
            "{text}"
        );
        assert!(
            text.contains("get: 12445.6 ops/s, p50 480 µs, p99 960 µs"),
            "{text}"
        );
        assert!(text.contains("found 123456: p50 480 µs"), "{text}");
        assert!(
            text.contains("not found 1000: p50 60 µs, p99 120 µs"),
            "{text}"
        );
        let plain = summary_lines(&summary(&OPS, false), &OPS);
        assert!(
            plain.iter().all(|l| !l.contains("not found 0:")),
            "{plain:?}"
        );
    }
}
