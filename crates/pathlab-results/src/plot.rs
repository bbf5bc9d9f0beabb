//! Figures as PNG and SVG, drawn with plotters in memory.
//!
//! Text is drawn with a font embedded in the crate (a subset of DejaVu Sans, see
//! `fonts/README.md`) through plotters' `ab_glyph` support, so rendering needs neither
//! fontconfig nor freetype: a machine with only the Rust toolchain builds and draws the same
//! pictures. Every PNG is [`WIDTH`] x [`HEIGHT`] pixels.

use std::sync::Once;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Width of every PNG, pixels.
pub const WIDTH: u32 = 1024;
/// Height of every PNG, pixels.
pub const HEIGHT: u32 = 640;

/// The embedded font: DejaVu Sans, cut to the characters labels use.
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans-subset.ttf");
static REGISTER: Once = Once::new();

/// The font family every text is drawn with.
const FAMILY: &str = "sans-serif";

fn register_font() {
    REGISTER.call_once(|| {
        // The font is part of the binary and checked by the tests: it always parses.
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            debug_assert!(false, "the embedded font does not parse");
        }
    });
}

/// Colours of the lines, in order (Tableau 10: distinct for the colour-blind, print grey).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    /// A measured series.
    Solid,
    /// A figure from theory, or a second quantity of the same subject (ssthresh next to
    /// cwnd).
    Dashed,
    /// Measured points, each a dot (and a thin line through them).
    Points,
    /// Events, each a dot and nothing between them (retransmissions on a time-sequence
    /// graph).
    Marks,
}

/// One line of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its legend entry (empty: none).
    pub label: String,
    /// `(x, y)` in the axes' units.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub style: LineStyle,
    /// Its colour: an index into the palette (wraps around).
    pub color: usize,
}

impl Line {
    /// A line labelled `label` through `points`.
    pub fn new(label: &str, points: Vec<(f64, f64)>, style: LineStyle, color: usize) -> Line {
        Line {
            label: label.to_owned(),
            points,
            style,
            color,
        }
    }
}

/// Where the legend goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegendAt {
    /// Top right (time series that start low).
    UpperRight,
    /// Bottom right (CDFs).
    LowerRight,
    /// Top left.
    UpperLeft,
}

/// A figure of lines on linear axes.
#[derive(Debug, Clone, PartialEq)]
pub struct LineFigure {
    /// The first line of the heading.
    pub title: String,
    /// The second, smaller line: what was run (parameters, link specs).
    pub subtitle: String,
    /// The x axis, with its unit.
    pub x_label: String,
    /// The y axis, with its unit.
    pub y_label: String,
    /// The lines.
    pub lines: Vec<Line>,
    /// Whether the y axis starts at zero (otherwise at the smallest value).
    pub y_from_zero: bool,
    /// Where the legend goes.
    pub legend: LegendAt,
}

/// A grid of values over two parameters, coloured by value and labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    /// The first line of the heading.
    pub title: String,
    /// The second line.
    pub subtitle: String,
    /// The x axis (a parameter's name).
    pub x_label: String,
    /// The y axis.
    pub y_label: String,
    /// The x parameter's values, in order.
    pub x_values: Vec<String>,
    /// The y parameter's values, in order.
    pub y_values: Vec<String>,
    /// `cells[y][x]`: the value there, if a run had those parameters.
    pub cells: Vec<Vec<Option<f64>>>,
    /// Decimals of the value written in each cell.
    pub decimals: usize,
}

/// Something to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Lines.
    Lines(LineFigure),
    /// A heatmap.
    Heatmap(Heatmap),
}

/// A chart drawn both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The PNG file's bytes, [`WIDTH`] x [`HEIGHT`].
    pub png: Vec<u8>,
    /// The SVG file's text.
    pub svg: String,
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing '{title}': {problem}")]
pub struct PlotError {
    /// The chart's title.
    pub title: String,
    /// What plotters or the PNG encoder said.
    pub problem: String,
}

/// Draws `chart` as PNG and SVG.
pub fn render(chart: &Chart) -> Result<Rendered, PlotError> {
    register_font();
    let title = match chart {
        Chart::Lines(f) => f.title.clone(),
        Chart::Heatmap(h) => h.title.clone(),
    };
    let error = |problem: String| PlotError {
        title: title.clone(),
        problem,
    };
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart).map_err(|e| error(e.to_string()))?;
        root.present().map_err(|e| error(e.to_string()))?;
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart).map_err(|e| error(e.to_string()))?;
        root.present().map_err(|e| error(e.to_string()))?;
    }
    let png = encode_png(&rgb).map_err(|e| error(e.to_string()))?;
    Ok(Rendered { png, svg })
}

fn encode_png(rgb: &[u8]) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // Plots are flat colours and thin lines: the best deflate with per-row filters makes
    // them several times smaller than the defaults, and they are inlined in the page.
    encoder.set_compression(png::Compression::Best);
    encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (title, subtitle) = match chart {
        Chart::Lines(f) => (&f.title, &f.subtitle),
        Chart::Heatmap(h) => (&h.title, &h.subtitle),
    };
    let (top, body) = root.split_vertically(62);
    top.draw(&Text::new(
        title.clone(),
        (16, 10),
        (FAMILY, 22).into_font().color(&BLACK),
    ))?;
    top.draw(&Text::new(
        fit(subtitle, 130),
        (16, 38),
        (FAMILY, 14).into_font().color(&RGBColor(70, 70, 70)),
    ))?;
    match chart {
        Chart::Lines(figure) => draw_lines(&body, figure),
        Chart::Heatmap(heatmap) => draw_heatmap(&body, heatmap),
    }
}

/// `text` cut to `max` characters (with an ellipsis), so a heading stays in the picture.
fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

/// A slice of x (its index) and its lowest and highest point.
type Bucket = (usize, (f64, f64), (f64, f64));

/// At most about `2 x buckets` points that keep the envelope of `points` (the smallest and
/// largest y of each slice of x), so a 50 000-packet series draws fast and its SVG stays
/// small without hiding a spike.
fn decimate(points: &[(f64, f64)], x0: f64, x1: f64, buckets: usize) -> Vec<(f64, f64)> {
    if points.len() <= buckets * 2 || x1 <= x0 {
        return points.to_vec();
    }
    let width = (x1 - x0) / buckets as f64;
    let mut out = Vec::with_capacity(buckets * 2 + 2);
    let mut current: Option<Bucket> = None;
    for &p in points {
        let bucket = ((p.0 - x0) / width) as usize;
        match &mut current {
            Some((b, low, high)) if *b == bucket => {
                if p.1 < low.1 {
                    *low = p;
                }
                if p.1 > high.1 {
                    *high = p;
                }
            }
            _ => {
                if let Some((_, low, high)) = current.take() {
                    push_ordered(&mut out, low, high);
                }
                current = Some((bucket, p, p));
            }
        }
    }
    if let Some((_, low, high)) = current {
        push_ordered(&mut out, low, high);
    }
    out
}

fn push_ordered(out: &mut Vec<(f64, f64)>, a: (f64, f64), b: (f64, f64)) {
    if a == b {
        out.push(a);
    } else if a.0 <= b.0 {
        out.extend([a, b]);
    } else {
        out.extend([b, a]);
    }
}

/// A tick label: at most three decimals, without trailing zeros (`10`, `0.25`).
fn number(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// The x and y ranges a line figure is drawn over: every point's, a unit wide when
/// flat, with room for dots at the x ends, from zero up when asked, and 6% headroom above.
fn line_ranges(figure: &LineFigure) -> ((f64, f64), (f64, f64)) {
    let all = || figure.lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1) = range(all().map(|p| p.0)).unwrap_or((0.0, 1.0));
    let (mut y0, mut y1) = range(all().map(|p| p.1)).unwrap_or((0.0, 1.0));
    if x1 <= x0 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    if figure
        .lines
        .iter()
        .any(|l| matches!(l.style, LineStyle::Points | LineStyle::Marks))
    {
        // Room for the dots at the ends.
        let pad = (x1 - x0) * 0.03;
        x0 -= pad;
        x1 += pad;
    }
    if figure.y_from_zero {
        y0 = y0.min(0.0);
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    y1 += (y1 - y0) * 0.06;
    ((x0, x1), (y0, y1))
}

/// The cartesian chart a line figure's lines are drawn on.
type LineChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws a line figure's axes, lines and legend in `area`.
fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    figure: &LineFigure,
) -> DrawResult<DB> {
    let ((x0, x1), (y0, y1)) = line_ranges(figure);
    let mut chart = ChartBuilder::on(area)
        .margin_left(12)
        .margin_right(24)
        .margin_bottom(8)
        .x_label_area_size(48)
        .y_label_area_size(76)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc(figure.x_label.as_str())
        .y_desc(figure.y_label.as_str())
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .x_label_formatter(&|v| number(*v))
        .y_label_formatter(&|v| number(*v))
        .draw()?;
    for line in &figure.lines {
        draw_line(&mut chart, line, (x0, x1))?;
    }
    // Every line with a label has an entry in the legend.
    if figure.lines.iter().any(|l| !l.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(match figure.legend {
                LegendAt::UpperRight => SeriesLabelPosition::UpperRight,
                LegendAt::LowerRight => SeriesLabelPosition::LowerRight,
                LegendAt::UpperLeft => SeriesLabelPosition::UpperLeft,
            })
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font((FAMILY, 14))
            .draw()?;
    }
    Ok(())
}

/// Draws one line of a figure whose x range is `x0..x1` in its style and colour, and gives
/// it a legend entry when it has a label: a stroke for a solid line, two short strokes for
/// a dashed one, a dot for points and marks.
fn draw_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut LineChart<'a, DB>,
    line: &Line,
    (x0, x1): (f64, f64),
) -> DrawResult<DB> {
    let color = PALETTE[line.color % PALETTE.len()];
    let points = decimate(&line.points, x0, x1, 1500);
    let legend_style = match line.style {
        LineStyle::Solid => {
            // Thick lines are drawn with mitred joins, which spike at the sharp turns of
            // a dense series: those get a thin line.
            let style = color.stroke_width(if points.len() > 400 { 1 } else { 2 });
            let drawn = chart.draw_series(LineSeries::new(points, style))?;
            if !line.label.is_empty() {
                drawn
                    .label(line.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
            }
            return Ok(());
        }
        LineStyle::Dashed => {
            let style = color.stroke_width(2);
            chart.draw_series(DashedLineSeries::new(points, 8, 6, style))?;
            style
        }
        LineStyle::Points => {
            let thin = color.mix(0.45).stroke_width(1);
            chart.draw_series(LineSeries::new(points.iter().copied(), thin))?;
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            color.filled()
        }
        LineStyle::Marks => {
            chart.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )?;
            color.filled()
        }
    };
    if !line.label.is_empty() {
        let legend = chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?
            .label(line.label.as_str());
        // A dashed line's legend: two short strokes; a point's: a dot.
        if line.style == LineStyle::Dashed {
            legend.legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (9, 0)], legend_style)
                    + PathElement::new(vec![(15, 0), (24, 0)], legend_style)
            });
        } else {
            legend.legend(move |(x, y)| {
                EmptyElement::at((x, y)) + Circle::new((12, 0), 3, legend_style)
            });
        }
    }
    Ok(())
}

/// A colour from dark blue (0) through teal and green to yellow (1), like viridis.
fn scale_color(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let scaled = t * (STOPS.len() - 1) as f64;
    let i = (scaled.floor() as usize).min(STOPS.len() - 2);
    let f = scaled - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn draw_heatmap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    heatmap: &Heatmap,
) -> DrawResult<DB> {
    let nx = heatmap.x_values.len().max(1) as u32;
    let ny = heatmap.y_values.len().max(1) as u32;
    let (lo, hi) = range(heatmap.cells.iter().flatten().flatten().copied()).unwrap_or((0.0, 1.0));
    let mut chart = ChartBuilder::on(area)
        .margin_left(12)
        .margin_right(24)
        .margin_bottom(8)
        .x_label_area_size(48)
        .y_label_area_size(90)
        // A segmented 0..n has n + 1 segments: one per value is 0..n-1.
        .build_cartesian_2d((0..nx - 1).into_segmented(), (0..ny - 1).into_segmented())?;
    let label = |values: &[String], v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) => values.get(*i as usize).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(heatmap.x_label.as_str())
        .y_desc(heatmap.y_label.as_str())
        .x_labels(nx as usize)
        .y_labels(ny as usize)
        .x_label_formatter(&|v| label(&heatmap.x_values, v))
        .y_label_formatter(&|v| label(&heatmap.y_values, v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()?;
    for (y, row) in heatmap.cells.iter().enumerate() {
        for (x, cell) in row.iter().enumerate() {
            let (x, y) = (x as u32, y as u32);
            let corners = [
                (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
            ];
            let center = (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y));
            let (fill, text, ink) = match cell {
                Some(value) => {
                    let t = if hi > lo {
                        (value - lo) / (hi - lo)
                    } else {
                        0.5
                    };
                    let ink = if t > 0.6 { BLACK } else { WHITE };
                    (scale_color(t), format!("{value:.*}", heatmap.decimals), ink)
                }
                None => (RGBColor(230, 230, 230), "no run".to_owned(), BLACK),
            };
            chart.draw_series(std::iter::once(Rectangle::new(corners, fill.filled())))?;
            chart.draw_series(std::iter::once(Text::new(
                text,
                center,
                (FAMILY, 16)
                    .into_font()
                    .color(&ink)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            )))?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Width and height from a PNG's IHDR chunk, after checking the signature.
    pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
        let signature = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
        if bytes.len() < 24 || bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
            return None;
        }
        let word = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        Some((word(16), word(20)))
    }

    /// Decodes a PNG fully (checksums, compression): its size and RGB(A) pixels.
    pub fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(bytes);
        let mut reader = decoder.read_info().expect("a PNG header");
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).expect("PNG data");
        pixels.truncate(info.buffer_size());
        (info.width, info.height, pixels)
    }

    fn figure() -> LineFigure {
        LineFigure {
            title: "Queue length, r1->h2".into(),
            subtitle: "bufferbloat (queue=10): delay 5ms rate 10mbit limit 10".into(),
            x_label: "time (s)".into(),
            y_label: "queue (packets)".into(),
            lines: vec![
                Line {
                    label: "measured".into(),
                    points: (0..5000)
                        .map(|i| (f64::from(i) * 1e-3, f64::from(i % 97)))
                        .collect(),
                    style: LineStyle::Solid,
                    color: 0,
                },
                Line {
                    label: "theory".into(),
                    points: vec![(0.0, 50.0), (5.0, 50.0)],
                    style: LineStyle::Dashed,
                    color: 3,
                },
            ],
            y_from_zero: true,
            legend: LegendAt::UpperRight,
        }
    }

    #[test]
    fn line_figures_render_to_a_png_of_the_fixed_size_with_text_and_an_svg() {
        let rendered = render(&Chart::Lines(figure())).expect("draws");
        assert_eq!(png_size(&rendered.png), Some((WIDTH, HEIGHT)));
        let (w, h, pixels) = decode_png(&rendered.png);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        // The first line's colour (the data) and dark title pixels are both there.
        let rgb: Vec<[u8; 3]> = pixels.chunks(3).map(|c| [c[0], c[1], c[2]]).collect();
        assert!(rgb.contains(&[31, 119, 180]), "no data line drawn");
        // The title is drawn with the embedded font: dark pixels in the heading band.
        let heading_dark = rgb[..(WIDTH * 40) as usize]
            .iter()
            .filter(|p| p.iter().all(|&c| c < 90))
            .count();
        assert!(
            heading_dark > 200,
            "no title text: {heading_dark} dark pixels"
        );
        assert!(rendered.svg.starts_with("<svg"));
        assert!(rendered.svg.contains("Queue length, r1-&gt;h2"));
        assert!(rendered.svg.contains("theory"));
    }

    #[test]
    fn heatmaps_render() {
        let heatmap = Heatmap {
            title: "Goodput".into(),
            subtitle: String::new(),
            x_label: "queue".into(),
            y_label: "loss".into(),
            x_values: vec!["10".into(), "50".into()],
            y_values: vec!["0".into(), "0.01".into()],
            cells: vec![vec![Some(1.0), Some(2.0)], vec![None, Some(4.0)]],
            decimals: 1,
        };
        let rendered = render(&Chart::Heatmap(heatmap)).expect("draws");
        assert_eq!(png_size(&rendered.png), Some((WIDTH, HEIGHT)));
        assert!(rendered.svg.contains("no run") && rendered.svg.contains("4.0"));
    }

    #[test]
    fn decimation_keeps_the_envelope() {
        let mut points: Vec<(f64, f64)> =
            (0..100_000).map(|i| (f64::from(i) * 1e-4, 1.0)).collect();
        points[54_321].1 = 99.0;
        let kept = decimate(&points, 0.0, 10.0, 1000);
        assert!(kept.len() <= 2000, "{}", kept.len());
        assert!(kept.iter().any(|p| p.1 == 99.0));
        assert!(kept.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(number(10.0), "10");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(-0.0001), "0");
        assert_eq!(number(1.0 / 3.0), "0.333");
    }

    #[test]
    fn the_scale_runs_from_dark_to_light() {
        let brightness = |c: RGBColor| u32::from(c.0) + u32::from(c.1) + u32::from(c.2);
        assert!(brightness(scale_color(0.0)) < brightness(scale_color(1.0)));
        assert_eq!(scale_color(f64::NAN), scale_color(0.0));
    }
}
