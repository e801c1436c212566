//! Charts: `summary.png` of one run, `compare.png` of several, and the
//! panels a report scenario asks for.
//!
//! Owns the three chart kinds' entry points ([`draw_summary`],
//! [`draw_compare`], [`draw_panels`]), the drawing of a [`model::ChartModel`]
//! with plotters, and the embedded DejaVu Sans font, so no system font is
//! needed. What a chart shows — units, ranges, ticks, series, styles, draw
//! order, layout, summary lines — is decided by the pure [`model`], which is
//! where it is tested; this module only turns a model into pixels. It must
//! never read result files or compute statistics: callers hand it the series.

pub mod model;

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::BenchError;
use crate::output::RunSummary;
use crate::stats::Interval;
use crate::workload::Op;
use model::{
    Axis, LegendModel, Marker, PanelModel, Rect, SeriesModel, Style, TextBox, BOX_FONT_PX,
    BOX_PADDING_PX, LINE_HEIGHT_PX,
};
pub use model::{
    ChartModel, TimeUnit, CHART_WIDTH_PX, LATENCY_ROW_HEIGHT_PX, THROUGHPUT_PANEL_HEIGHT_PX,
    TITLE_HEIGHT_PX,
};

/// DejaVu Sans 2.37 (see `assets/README.md` and `assets/DejaVuSans-LICENSE`).
static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The family name the embedded font is registered under.
const FONT: &str = "tablinum-sans";
/// Line width of every series, pixels.
const STROKE_PX: u32 = 2;
/// Fill of a panel's shaded x ranges (light amber, behind the lines).
const BAND_COLOR: RGBColor = RGBColor(0xfb, 0xec, 0xc8);
/// Marker radius, pixels.
const MARKER_PX: i32 = 3;

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

/// Draws `summary.png`: throughput (ok, not-found and failed ops/s per
/// interval) with the run's summary figures beside it, then one row per op
/// with mean/median/95th, 99th, 99.9th and max latency against elapsed
/// seconds, each in the time unit its data needs (see
/// [`model::summary_model`]).
pub fn draw_summary(
    file: &Path,
    title: &str,
    intervals: &[Interval],
    ops: &[Op],
    summary: &RunSummary,
) -> Result<(), BenchError> {
    draw(file, &model::summary_model(title, intervals, ops, summary))
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
    draw(file, &model::compare_model(title, runs))
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

/// One panel of [`draw_panels`]: lines over one x axis that spans their data.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// x axis description (`q (tablets)`).
    pub x_desc: String,
    /// y axis description (`rows/s`); without a unit when `y_unit` is set.
    pub y_desc: String,
    /// When y values are durations, their unit: the chart then shows them in
    /// the unit that fits their magnitude and appends it to `y_desc`.
    pub y_unit: Option<TimeUnit>,
    /// The lines; line `i` gets colour [`palette`]`(i)`.
    pub lines: Vec<Line>,
    /// x ranges shaded behind the lines (say what they mark in `title`).
    pub bands: Vec<(f64, f64)>,
}

/// Draws `panels` one above the other, each [`THROUGHPUT_PANEL_HEIGHT_PX`]
/// high, legends on the right.
pub fn draw_panels(file: &Path, title: &str, panels: &[Panel]) -> Result<(), BenchError> {
    draw(file, &model::panels_model(title, panels))
}

/// Draws `chart` into the PNG `file`.
pub fn draw(file: &Path, chart: &ChartModel) -> Result<(), BenchError> {
    let err = |message: String| BenchError::Chart {
        file: file.to_path_buf(),
        message,
    };
    font_ready().map_err(err)?;
    let root = BitMapBackend::new(file, chart.size).into_drawing_area();
    draw_on(&root, chart).map_err(err)?;
    root.present().map_err(|e| err(e.to_string()))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn draw_on(root: &Area<'_>, chart: &ChartModel) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    root.draw(&Text::new(
        chart.title.clone(),
        (chart.size.0 as i32 / 2, model::TITLE_HEIGHT_PX as i32 / 2),
        (FONT, 20)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))
    .map_err(e)?;
    for p in &chart.panels {
        draw_panel(&sub_area(root, p.rect), p)?;
    }
    for l in &chart.legends {
        draw_legend(&sub_area(root, l.rect), l)?;
    }
    if let Some(t) = &chart.text {
        draw_text(&sub_area(root, t.rect), t)?;
    }
    Ok(())
}

fn sub_area<'a>(root: &Area<'a>, r: Rect) -> Area<'a> {
    root.clone().shrink((r.x, r.y), (r.w, r.h))
}

fn shape(style: &Style) -> ShapeStyle {
    ShapeStyle {
        color: style.color.to_rgba(),
        filled: !style.hollow,
        stroke_width: if style.hollow { 1 } else { STROKE_PX },
    }
}

/// Evaluates `$body` with `$m` bound to a function from a point to the
/// element of `$style`'s marker there (the element type differs per marker,
/// hence a macro rather than a function).
macro_rules! with_marker {
    ($style:expr, |$m:ident| $body:expr) => {{
        let style: Style = $style;
        let s = shape(&style);
        let r = MARKER_PX;
        match style.marker {
            Marker::Circle => {
                let $m = |p| Circle::new(p, r, s);
                $body
            }
            Marker::Square => {
                let $m = |p| EmptyElement::at(p) + Rectangle::new([(-r, -r), (r, r)], s);
                $body
            }
            Marker::Triangle => {
                let $m = |p| TriangleMarker::new(p, r + 1, s);
                $body
            }
            Marker::Cross => {
                let $m = |p| Cross::new(p, r, s.stroke_width(2));
                $body
            }
        }
    }};
}

/// An axis of a [`PanelModel`] as plotters sees it: the model's range, ticks
/// at the model's tick positions and nowhere else.
struct TickedAxis {
    range: RangedCoordf64,
    ticks: Vec<f64>,
}

impl TickedAxis {
    fn of(a: &Axis) -> TickedAxis {
        TickedAxis {
            range: (a.min..a.max).into(),
            ticks: a.ticks.clone(),
        }
    }
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
}

fn draw_panel(area: &Area<'_>, p: &PanelModel) -> Result<(), String> {
    let x_axis = TickedAxis::of(&p.x);
    let y_axis = TickedAxis::of(&p.y);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 16))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(|e| e.to_string())?;
    let x_label = |v: &f64| p.x.label(*v);
    let y_label = |v: &f64| p.y.label(*v);
    chart
        .configure_mesh()
        .x_desc(&p.x.desc)
        .y_desc(&p.y.desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
        .draw()
        .map_err(|e| e.to_string())?;
    for &(a, b) in &p.bands {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, p.y.min), (b, p.y.max)],
                BAND_COLOR.filled(),
            )))
            .map_err(|e| e.to_string())?;
    }
    for s in &p.series {
        draw_series(&mut chart, s)?;
    }
    Ok(())
}

type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<TickedAxis, TickedAxis>>;

fn draw_series(chart: &mut Chart<'_, '_>, s: &SeriesModel) -> Result<(), String> {
    let line = ShapeStyle {
        color: s.style.color.to_rgba(),
        filled: false,
        stroke_width: STROKE_PX,
    };
    let pts = s.points.iter().copied();
    if s.style.dashed {
        chart
            .draw_series(DashedLineSeries::new(pts, 7, 4, line))
            .map_err(|e| e.to_string())?;
    } else {
        chart
            .draw_series(LineSeries::new(pts, line))
            .map_err(|e| e.to_string())?;
    }
    with_marker!(s.style, |m| chart
        .draw_series(s.points.iter().map(|&p| m(p)))
        .map(|_| ())
        .map_err(|e| e.to_string()))
}

fn draw_legend(area: &Area<'_>, l: &LegendModel) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let text = (FONT, BOX_FONT_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let pad = BOX_PADDING_PX as i32;
    let row = |i: usize| pad + LINE_HEIGHT_PX as i32 * i as i32 + LINE_HEIGHT_PX as i32 / 2;
    let mut i = 0;
    if !l.heading.is_empty() {
        area.draw(&Text::new(l.heading.clone(), (pad, row(i)), text.clone()))
            .map_err(e)?;
        i += 1;
    }
    for (label, style) in &l.entries {
        let y = row(i);
        let line = ShapeStyle {
            color: style.color.to_rgba(),
            filled: false,
            stroke_width: STROKE_PX,
        };
        if style.dashed {
            area.draw(&PathElement::new(vec![(pad, y), (pad + 8, y)], line))
                .map_err(e)?;
            area.draw(&PathElement::new(vec![(pad + 20, y), (pad + 28, y)], line))
                .map_err(e)?;
        } else {
            area.draw(&PathElement::new(vec![(pad, y), (pad + 28, y)], line))
                .map_err(e)?;
        }
        with_marker!(*style, |m| area.draw(&m((pad + 14, y))).map_err(e))?;
        area.draw(&Text::new(label.clone(), (pad + 36, y), text.clone()))
            .map_err(e)?;
        i += 1;
    }
    if l.more > 0 {
        area.draw(&Text::new(
            format!("(+{} more)", l.more),
            (pad + 36, row(i)),
            text.clone(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

fn draw_text(area: &Area<'_>, t: &TextBox) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let (w, h) = area.dim_in_pixel();
    area.draw(&Rectangle::new(
        [(0, 0), (w as i32 - 1, h as i32 - 1)],
        RGBColor(0xaa, 0xaa, 0xaa).stroke_width(1),
    ))
    .map_err(e)?;
    let text = (FONT, BOX_FONT_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Top));
    for (i, line) in t.lines.iter().enumerate() {
        let y = BOX_PADDING_PX + LINE_HEIGHT_PX * i as u32;
        area.draw(&Text::new(
            line.clone(),
            (BOX_PADDING_PX as i32, y as i32),
            text.clone(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::model::tests::{intervals, summary, OPS};
    use super::*;

    /// A PNG smaller than this is (nearly) blank: an all-white
    /// 1400 × 836 image encodes to a few KiB.
    const NON_TRIVIAL_PNG_BYTES: u64 = 40_000;

    /// Decodes `path`; returns its size and how many pixels are not white.
    fn decode(path: &Path) -> ((u32, u32), usize) {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut reader = png::Decoder::new(file)
            .read_info()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader
            .next_frame(&mut buf)
            .unwrap_or_else(|e| panic!("{e}"));
        let px = info.line_size / info.width as usize;
        let inked = buf[..info.buffer_size()]
            .chunks(px)
            .filter(|p| p[..3] != [0xff, 0xff, 0xff])
            .count();
        ((info.width, info.height), inked)
    }

    #[test]
    fn summary_png_is_drawn() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("summary.png");
        draw_summary(
            &file,
            "memory: a test",
            &intervals(),
            &OPS,
            &summary(&OPS, true),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let bytes = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .len();
        assert!(bytes > NON_TRIVIAL_PNG_BYTES, "{bytes} bytes");
        let (size, inked) = decode(&file);
        let want = model::summary_model("", &intervals(), &OPS, &summary(&OPS, true)).size;
        assert_eq!(size, want);
        // Lines, markers and text cover more than a sliver of the image.
        let total = size.0 as usize * size.1 as usize;
        assert!(inked * 50 > total, "{inked} of {total} pixels inked");
    }

    #[test]
    fn compare_and_scenario_pngs_are_drawn() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let compare = dir.path().join("compare.png");
        let runs: Vec<RunSeries> = (0..3)
            .map(|i| RunSeries {
                label: format!("run #{i}"),
                group: i,
                points: (1..=20)
                    .map(|t| (f64::from(t), 1000.0 + 50.0 * i as f64))
                    .collect(),
            })
            .collect();
        draw_compare(&compare, "compare", &runs).unwrap_or_else(|e| panic!("{e}"));
        let scenario = dir.path().join("scenario.png");
        let panel = Panel {
            bands: Vec::new(),
            title: "probe".into(),
            x_desc: "percentile".into(),
            y_desc: "probe scan time".into(),
            y_unit: Some(TimeUnit::Millis),
            lines: vec![Line::new(
                "shed",
                vec![(50.0, 0.2), (99.0, 0.9), (99.9, 1.4)],
            )],
        };
        draw_panels(&scenario, "scenario", &[panel]).unwrap_or_else(|e| panic!("{e}"));
        for (file, height) in [
            (&compare, TITLE_HEIGHT_PX + 2 * THROUGHPUT_PANEL_HEIGHT_PX),
            (&scenario, TITLE_HEIGHT_PX + THROUGHPUT_PANEL_HEIGHT_PX),
        ] {
            let (size, inked) = decode(file);
            assert_eq!(size, (CHART_WIDTH_PX, height), "{}", file.display());
            assert!(inked > 5_000, "{}: {inked} pixels inked", file.display());
        }
    }
}
