//! The report of a saved `pathlab inspect` watch: per connection its intervals as CSV, and
//! figures of what it moved, its windows against what was in flight, its RTT and where
//! the time went, with the verdicts on one page.

use std::fmt::Write as _;
use std::path::Path;

use pathlab_core::format::{self, Digits};
use pathlab_diagnose::diagnosis::{ConnectionReport, InspectReport, Limit};

use super::figures::Figure;
use super::page::{write_page, Section};
use super::{ReportError, ReportFiles};
use crate::plot::{Chart, LegendAt, Line, LineFigure, LineStyle};
use crate::series::slug;

const TIME_AXIS: &str = "time since the watch began (s)";

/// The connections worth a figure: those that moved data.
fn moving(report: &InspectReport) -> impl Iterator<Item = &ConnectionReport> {
    report
        .connections
        .iter()
        .filter(|c| c.verdict.limit != Limit::Idle && !c.intervals.is_empty())
}

/// The figures of one connection.
pub fn connection_figures(connection: &ConnectionReport, stem: &str) -> Vec<Figure> {
    let name = connection.last.name();
    let at = |ns: u64| ns as f64 * 1e-9;
    let over = |value: &dyn Fn(&pathlab_diagnose::diagnosis::Interval) -> f64| -> Vec<(f64, f64)> {
        connection
            .intervals
            .iter()
            .map(|i| (at(i.to_ns), value(i)))
            .collect()
    };
    let figure = |suffix: &str, caption: String, title: &str, y: &str, lines: Vec<Line>| Figure {
        stem: format!("{stem}-{suffix}"),
        caption,
        chart: Chart::Lines(LineFigure {
            title: title.to_owned(),
            subtitle: name.clone(),
            x_label: TIME_AXIS.to_owned(),
            y_label: y.to_owned(),
            lines,
            y_from_zero: true,
            legend: LegendAt::UpperRight,
        }),
    };
    let kib = |bytes: f64| bytes / 1024.0;
    vec![
        figure(
            "throughput",
            format!("What {name} moved per interval (acknowledged, or received at a receiving end)."),
            "Throughput",
            "Mbit/s",
            vec![Line::new(
                "moved",
                over(&|i| i.throughput_bps * 1e-6),
                LineStyle::Solid,
                0,
            )],
        ),
        figure(
            "windows",
            format!(
                "{name}: the congestion window against the peer's advertised window and the \
                 bytes in flight; the smaller window is the bound, and in flight at it says it held."
            ),
            "Windows and bytes in flight",
            "KiB",
            vec![
                Line::new(
                    "congestion window",
                    over(&|i| kib(f64::from(i.cwnd) * f64::from(i.mss))),
                    LineStyle::Solid,
                    0,
                ),
                Line::new(
                    "peer's window",
                    over(&|i| kib(f64::from(i.peer_window))),
                    LineStyle::Solid,
                    1,
                ),
                Line::new(
                    "in flight",
                    over(&|i| kib(i.in_flight_bytes as f64)),
                    LineStyle::Dashed,
                    2,
                ),
            ],
        ),
        figure(
            "rtt",
            format!("{name}: the smoothed RTT and the smallest seen."),
            "Round-trip time",
            "ms",
            vec![
                Line::new("smoothed", over(&|i| f64::from(i.srtt_us) * 1e-3), LineStyle::Solid, 0),
                Line::new("minimum", over(&|i| f64::from(i.min_rtt_us) * 1e-3), LineStyle::Dashed, 1),
            ],
        ),
        figure(
            "limits",
            format!(
                "{name}: where each interval's time went (the kernel's busy, rwnd-limited and \
                 sndbuf-limited time, with each bound that held at both ends of an interval)."
            ),
            "Where the time went",
            "% of the interval",
            vec![
                Line::new("receiver's window", over(&|i| i.limits.receiver_window * 100.0), LineStyle::Solid, 0),
                Line::new("send buffer", over(&|i| i.limits.send_buffer * 100.0), LineStyle::Solid, 1),
                Line::new("congestion", over(&|i| i.limits.congestion * 100.0), LineStyle::Solid, 2),
                Line::new("application", over(&|i| i.limits.application * 100.0), LineStyle::Solid, 3),
            ],
        ),
    ]
}

/// A connection's intervals as CSV: one row each, with a header.
pub fn intervals_csv(connection: &ConnectionReport) -> String {
    let mut out = String::from(
        "from_s,to_s,sending,throughput_bps,cwnd_segments,mss_bytes,ssthresh_segments,\
         peer_window_bytes,in_flight_bytes,srtt_us,rttvar_us,min_rtt_us,retrans_segments,\
         retrans_bytes,pacing_rate_bps,delivery_rate_bps,send_queue_bytes,recv_queue_bytes,\
         receiver_window_share,send_buffer_share,congestion_share,application_share\n",
    );
    for i in &connection.intervals {
        let _ = writeln!(
            out,
            "{:.6},{:.6},{},{:.0},{},{},{},{},{},{},{},{},{},{},{:.0},{:.0},{},{},{:.4},{:.4},{:.4},{:.4}",
            i.from_ns as f64 * 1e-9,
            i.to_ns as f64 * 1e-9,
            i.sending,
            i.throughput_bps,
            i.cwnd,
            i.mss,
            i.ssthresh.map_or_else(String::new, |s| s.to_string()),
            i.peer_window,
            i.in_flight_bytes,
            i.srtt_us,
            i.rttvar_us,
            i.min_rtt_us,
            i.retrans_segments,
            i.retrans_bytes,
            i.pacing_rate_bps,
            i.delivery_rate_bps,
            i.send_queue,
            i.recv_queue,
            i.limits.receiver_window,
            i.limits.send_buffer,
            i.limits.congestion,
            i.limits.application,
        );
    }
    out
}

/// Writes the report of an inspect watch into `out_dir`: CSV per connection, figures, and
/// `report.html` with the verdicts. `command` is the command line that made it.
pub fn write_inspect_report(
    report: &InspectReport,
    command: &[String],
    out_dir: &Path,
) -> Result<ReportFiles, ReportError> {
    let mut rows = Vec::new();
    let mut sections = Vec::new();
    for connection in moving(report) {
        let stem = slug(&connection.last.name());
        rows.push(vec![
            connection.last.name(),
            connection.last.congestion.clone().unwrap_or_default(),
            connection.verdict.limit.name().to_owned(),
            format::fraction_as_percent(connection.verdict.share, Digits::fixed(0)),
            connection.verdict.sentence.clone(),
        ]);
        sections.push(Section {
            heading: connection.last.name(),
            text: connection.verdict.sentence.clone(),
            figures: connection_figures(connection, &stem),
            csv: vec![(format!("{stem}.csv"), intervals_csv(connection))],
        });
    }
    let intro = format!(
        "{}: {} connection(s) watched for {:.1} s, a look every {:.0} ms; {} moved data.",
        command.join(" "),
        report.connections.len(),
        report.duration_ns as f64 * 1e-9,
        report.interval_ns as f64 * 1e-6,
        rows.len()
    );
    write_page(
        "pathlab inspect",
        &intro,
        (
            &[
                "connection",
                "congestion control",
                "limit",
                "share",
                "verdict",
            ],
            rows,
        ),
        sections,
        out_dir,
    )
}
