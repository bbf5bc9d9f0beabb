//! The report of a saved `pathlab twin check`: the verdict's table, then per direction the
//! real path's and the twin's curves overlaid (bulk TCP's goodput over time, the round
//! trips beside it over time and as a distribution, the paced probes' one-way delay as a
//! distribution), and the idle round trips' distribution. Where the twin misses a figure,
//! the curves show where the two paths part.

use std::fmt::Write as _;
use std::path::Path;

use pathlab_twin::check::{rtts_ms, CheckRecord, DirectionRuns, PathRuns, Row};

use super::figures::{cdf_points, lines_figure, Figure};
use super::page::{write_page, Section};
use super::{ReportError, ReportFiles};
use crate::plot::{LegendAt, Line, LineStyle};

/// Goodput over time is drawn per this window (bulk TCP's senders are sampled every
/// 100 ms: a quarter second smooths their bursts and keeps the slow start's shape).
const GOODPUT_WINDOW_NS: u64 = 250_000_000;

/// The page's summary table: its columns.
const COLUMNS: [&str; 6] = ["figure", "path", "twin", "error", "bound", "verdict"];

/// One curve of each path: `(label, colour)`, the path first.
const SIDES: [(&str, usize); 2] = [("path", 0), ("twin", 1)];

/// A figure of the path's and the twin's `curves` overlaid.
struct Overlay {
    stem: String,
    caption: String,
    title: String,
    axes: [&'static str; 2],
    legend: LegendAt,
    curves: [Vec<(f64, f64)>; 2],
}

impl Overlay {
    fn figure(self, subtitle: &str) -> Figure {
        let lines = SIDES
            .iter()
            .zip(self.curves)
            .map(|(&(label, color), points)| Line {
                label: label.to_owned(),
                points,
                style: LineStyle::Solid,
                color,
            })
            .collect();
        lines_figure(
            self.stem,
            self.caption,
            self.title,
            subtitle.to_owned(),
            self.axes,
            self.legend,
            lines,
        )
    }

    /// The curves as CSV rows `figure,side,x,y`.
    fn csv_rows(&self, out: &mut String) {
        for ((side, _), curve) in SIDES.iter().zip(&self.curves) {
            for (x, y) in curve {
                let _ = writeln!(out, "{},{side},{x},{y}", self.stem);
            }
        }
    }
}

/// The distributions' axes and where their legend goes.
const RTT_CDF_AXES: [&str; 2] = ["RTT (ms)", "fraction of round trips"];

/// The overlays of one direction (`way` is "up" or "down").
fn direction_overlays(way: &str, real: &DirectionRuns, twin: &DirectionRuns) -> Vec<Overlay> {
    let both = |f: &dyn Fn(&DirectionRuns) -> Vec<(f64, f64)>| [f(real), f(twin)];
    let rtt_over_time = |d: &DirectionRuns| {
        d.rtt
            .series_sent_ns
            .iter()
            .zip(&d.rtt.series)
            .map(|(&sent, &(_, rtt))| (sent as f64 / 1e9, rtt as f64 / 1e6))
            .collect()
    };
    vec![
        Overlay {
            stem: format!("goodput-{way}"),
            caption: format!(
                "Bulk TCP {way}: goodput over time on the path and on its twin (per {} ms, \
                 from what the receiver acknowledged)",
                GOODPUT_WINDOW_NS / 1_000_000
            ),
            title: format!("Bulk TCP {way}: goodput"),
            axes: ["time since the transfer started (s)", "goodput (Mbit/s)"],
            legend: LegendAt::LowerRight,
            curves: both(&|d| {
                d.goodput_over_time(GOODPUT_WINDOW_NS)
                    .into_iter()
                    .map(|(t, bps)| (t, bps / 1e6))
                    .collect()
            }),
        },
        Overlay {
            stem: format!("rtt-{way}"),
            caption: format!(
                "Round trips beside bulk TCP {way}, against when each was sent: the queue \
                 the transfer builds on each path"
            ),
            title: format!("RTT beside bulk TCP {way}"),
            axes: ["time since the round trips started (s)", "RTT (ms)"],
            legend: LegendAt::LowerRight,
            curves: both(&rtt_over_time),
        },
        Overlay {
            stem: format!("rtt-{way}-cdf"),
            caption: format!("Distribution of the round trips beside bulk TCP {way}"),
            title: format!("CDF of the RTT beside bulk TCP {way}"),
            axes: RTT_CDF_AXES,
            legend: LegendAt::LowerRight,
            curves: both(&|d| cdf_points(rtts_ms(&d.rtt))),
        },
        Overlay {
            stem: format!("probe-delay-{way}-cdf"),
            caption: format!(
                "Distribution of the paced probes' one-way delay {way} at low load, above \
                 the least of them (the delay's variation the twin replays)"
            ),
            title: format!("CDF of the one-way delay {way} at low load"),
            axes: ["one-way delay above its minimum (ms)", "fraction of probes"],
            legend: LegendAt::LowerRight,
            curves: both(&|d| cdf_points(d.probe_delays_ms())),
        },
    ]
}

/// The idle round trips' distributions.
fn idle_overlay(real: &PathRuns, twin: &PathRuns) -> Overlay {
    Overlay {
        stem: "rtt-idle-cdf".into(),
        caption: "Distribution of the idle round trips (the base RTT is their least)".into(),
        title: "CDF of the idle RTT".into(),
        axes: RTT_CDF_AXES,
        legend: LegendAt::LowerRight,
        curves: [
            cdf_points(rtts_ms(&real.idle)),
            cdf_points(rtts_ms(&twin.idle)),
        ],
    }
}

/// A section of `overlays` under `heading`, its CSV named `csv_name`.
fn section(heading: String, text: String, overlays: Vec<Overlay>, csv_name: &str) -> Section {
    let mut csv = String::from("figure,side,x,y\n");
    for overlay in &overlays {
        overlay.csv_rows(&mut csv);
    }
    Section {
        heading,
        figures: overlays.into_iter().map(|o| o.figure(&text)).collect(),
        text,
        csv: vec![(csv_name.to_owned(), csv)],
    }
}

/// A row of the verdict's table.
fn table_row(row: &Row) -> Vec<String> {
    let (error, bound) = row.error_and_bound();
    vec![
        row.name.clone(),
        format!("{:.3}", row.real),
        format!("{:.3}", row.twin),
        error,
        bound,
        if row.within { "within" } else { "MISS" }.to_owned(),
    ]
}

/// Writes the report of `record` into `out_dir`; `command` made it.
pub fn write_twin_check_report(
    record: &CheckRecord,
    command: &[String],
    out_dir: &Path,
) -> Result<ReportFiles, ReportError> {
    let comparison = record.comparison();
    let verdict = comparison.verdict();
    let intro = format!(
        "{}. The path to {} against its twin (up: {}; down: {}), bulk TCP with {}. Made by: {}",
        capitalized(&verdict),
        record.host,
        record.twin_up,
        record.twin_down,
        record.congestion,
        command.join(" ")
    );
    let mut sections = Vec::new();
    for (way, real, twin, spec) in [
        ("up", &record.real.up, &record.twin.up, &record.twin_up),
        (
            "down",
            &record.real.down,
            &record.twin.down,
            &record.twin_down,
        ),
    ] {
        let heading = if way == "up" {
            "up: this host to the far one"
        } else {
            "down: the far one to this host"
        };
        sections.push(section(
            heading.to_owned(),
            format!("the twin {way}: {spec}"),
            direction_overlays(way, real, twin),
            &format!("{way}.csv"),
        ));
    }
    sections.push(section(
        "idle round trips".into(),
        "both paths idle".into(),
        vec![idle_overlay(&record.real, &record.twin)],
        "idle.csv",
    ));
    let rows = comparison.rows.iter().map(table_row).collect();
    write_page(
        &format!("pathlab twin check: {}", record.host),
        &intro,
        (&COLUMNS, rows),
        sections,
        out_dir,
    )
}

/// `text` with its first letter in capitals.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}
