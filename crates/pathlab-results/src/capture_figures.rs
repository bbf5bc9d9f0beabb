//! The figures of `pathlab analyze`, drawn from its saved `CaptureAnalysis` alone: per
//! direction that carried data, the time-sequence graph (tcptrace's: segments, the ACK
//! line, the advertised window's right edge, retransmissions marked), RTT over time,
//! goodput and throughput over time, and bytes in flight against the advertised window.

use pathlab_core::format::{self, Digits};
use pathlab_diagnose::tcpflow::{ConnectionReport, FlowReport};

use crate::plot::{Chart, LegendAt, Line, LineFigure, LineStyle};

/// Directions drawn at most (the largest transfers first); the rest are in the JSON.
pub const MAX_FLOWS_DRAWN: usize = 8;

/// Palette indices, as tcptrace colours its lines where the palette allows.
const SEGMENTS: usize = 0;
const WINDOW: usize = 1;
const ACKS: usize = 2;
const RETRANSMISSIONS: usize = 3;

/// Sequence numbers in the unit that keeps a figure's labels short.
fn sequence_unit(max: u64) -> (f64, &'static str) {
    if max >= 10_000_000 {
        (1e6, "MB")
    } else {
        (1e3, "kB")
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// A figure against the capture's time: `lines` under `title` and `subtitle`, `y_label`
/// up from zero, the legend at `legend`.
fn capture_chart(
    title: String,
    subtitle: String,
    y_label: String,
    lines: Vec<Line>,
    legend: LegendAt,
) -> Chart {
    Chart::Lines(LineFigure {
        title,
        subtitle,
        x_label: "time since the capture began (s)".into(),
        y_label,
        lines,
        y_from_zero: true,
        legend,
    })
}

/// The figures of one direction of connection `number` (counted from 1): (file stem,
/// chart).
pub fn flow_figures(
    number: usize,
    connection: &ConnectionReport,
    flow: &FlowReport,
) -> Vec<(String, Chart)> {
    let subject = format!("connection {number}: {} -> {}", flow.from, flow.to);
    let stem = format!(
        "conn{number}-{}",
        if flow.from == connection.client {
            "up"
        } else {
            "down"
        }
    );
    vec![
        (format!("{stem}-sequence"), sequence_chart(flow, &subject)),
        (format!("{stem}-rtt"), rtt_chart(flow, &subject)),
        (
            format!("{stem}-throughput"),
            throughput_chart(flow, &subject),
        ),
        (format!("{stem}-flight"), flight_chart(flow, &subject)),
    ]
}

/// tcptrace's time-sequence graph of a direction: the end of every segment, the ACK line,
/// the advertised window's right edge (when its scale is known) and the retransmissions
/// marked, in kB or MB relative to the first sequence number.
fn sequence_chart(flow: &FlowReport, subject: &str) -> Chart {
    let series = &flow.series;
    let subtitle = format!(
        "{} bytes, {} retransmissions; {}",
        flow.bytes, flow.retransmissions.total, flow.verdict.sentence
    );
    let max_seq = series
        .acks
        .iter()
        .map(|a| a.2)
        .chain(series.segments.iter().map(|s| s.2))
        .max()
        .unwrap_or(0);
    let (scale, unit) = sequence_unit(max_seq);
    let seq = |v: u64| v as f64 / scale;
    let mut sequence_lines = vec![
        Line::new(
            "segments (end)",
            series
                .segments
                .iter()
                .map(|s| (seconds(s.0), seq(s.2)))
                .collect(),
            LineStyle::Solid,
            SEGMENTS,
        ),
        Line::new(
            "ACK",
            series
                .acks
                .iter()
                .map(|a| (seconds(a.0), seq(a.1)))
                .collect(),
            LineStyle::Solid,
            ACKS,
        ),
    ];
    if flow.window.scale_known {
        sequence_lines.push(Line::new(
            "advertised window",
            series
                .acks
                .iter()
                .map(|a| (seconds(a.0), seq(a.2)))
                .collect(),
            LineStyle::Dashed,
            WINDOW,
        ));
    }
    if !series.retransmissions.is_empty() {
        sequence_lines.push(Line::new(
            "retransmission",
            series
                .retransmissions
                .iter()
                .map(|r| (seconds(r.0), seq(r.2)))
                .collect(),
            LineStyle::Marks,
            RETRANSMISSIONS,
        ));
    }
    capture_chart(
        format!("Time-sequence graph, {subject}"),
        subtitle,
        format!("sequence number, relative ({unit})"),
        sequence_lines,
        LegendAt::UpperLeft,
    )
}

/// Every RTT sample of a direction against when it was taken (a line when there are too
/// many to dot), its percentiles in the subtitle.
fn rtt_chart(flow: &FlowReport, subject: &str) -> Chart {
    let ms = |ns: u64| format::in_millis(seconds(ns), Digits::fixed(3));
    let rtt_style = if flow.series.rtt.len() > 2000 {
        LineStyle::Solid
    } else {
        LineStyle::Points
    };
    capture_chart(
        format!("RTT, {subject}"),
        format!(
            "{} samples: min {} ms, median {} ms, p95 {} ms{}",
            flow.rtt.samples,
            ms(flow.rtt.min_ns),
            ms(flow.rtt.median_ns),
            ms(flow.rtt.p95_ns),
            if flow.rtt.both_halves {
                ""
            } else {
                " (capture point to the receiver and back only)"
            }
        ),
        "RTT (ms)".into(),
        vec![Line::new(
            "RTT sample",
            flow.series
                .rtt
                .iter()
                .map(|r| (seconds(r.0), r.1 as f64 * 1e-6))
                .collect(),
            rtt_style,
            SEGMENTS,
        )],
        LegendAt::UpperRight,
    )
}

/// A direction's goodput (newly acknowledged) and throughput (sent, retransmissions
/// included) over time, with its TCP efficiency in the subtitle.
fn throughput_chart(flow: &FlowReport, subject: &str) -> Chart {
    let series = &flow.series;
    capture_chart(
        format!("Throughput, {subject}"),
        format!(
            "goodput {} Mbit/s over {:.3} s; TCP efficiency {}",
            format::in_mbit_per_sec(flow.goodput_bps, Digits::fixed(3)),
            seconds(flow.duration_ns),
            flow.metrics.tcp_efficiency.map_or("-".to_owned(), |e| {
                format::fraction_as_percent(e, Digits::fixed(2))
            })
        ),
        "rate (Mbit/s)".into(),
        vec![
            Line::new(
                "goodput (newly ACKed)",
                series
                    .goodput
                    .iter()
                    .map(|g| (seconds(g.0), g.1 * 1e-6))
                    .collect(),
                LineStyle::Solid,
                ACKS,
            ),
            Line::new(
                "throughput (sent, with retransmissions)",
                series
                    .throughput
                    .iter()
                    .map(|g| (seconds(g.0), g.1 * 1e-6))
                    .collect(),
                LineStyle::Dashed,
                SEGMENTS,
            ),
        ],
        LegendAt::UpperRight,
    )
}

/// A direction's bytes in flight against the receiver's advertised window, in KiB.
fn flight_chart(flow: &FlowReport, subject: &str) -> Chart {
    let kib = |v: u64| v as f64 / 1024.0;
    let flight = &flow.series.flight;
    capture_chart(
        format!("In flight and the advertised window, {subject}"),
        format!(
            "{}; in flight as the capture point sees it (SACKed bytes left out)",
            if flow.window.scale_known {
                format!("window scale {}", flow.window.scale.unwrap_or(0))
            } else {
                "window scale unknown (no handshake): windows unscaled".to_owned()
            }
        ),
        "bytes (KiB)".into(),
        vec![
            Line::new(
                "in flight",
                flight.iter().map(|f| (seconds(f.0), kib(f.1))).collect(),
                LineStyle::Solid,
                SEGMENTS,
            ),
            Line::new(
                "advertised window",
                flight.iter().map(|f| (seconds(f.0), kib(f.2))).collect(),
                LineStyle::Dashed,
                WINDOW,
            ),
        ],
        LegendAt::UpperRight,
    )
}
