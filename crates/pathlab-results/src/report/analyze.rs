//! The report of a saved `pathlab analyze` of a capture: per direction that carried data
//! (the largest first, as many as the figures draw), its verdict and figures, with every
//! connection in the summary table.

use std::path::Path;

use pathlab_diagnose::tcpflow::CaptureAnalysis;

use super::figures::Figure;
use super::page::{write_page, Section};
use super::{ReportError, ReportFiles};
use crate::capture_figures::{flow_figures, MAX_FLOWS_DRAWN};
use crate::plot::Chart;

/// A chart's heading as a caption.
fn caption(chart: &Chart) -> String {
    match chart {
        Chart::Lines(f) => format!("{}: {}", f.title, f.subtitle),
        Chart::Heatmap(h) => format!("{}: {}", h.title, h.subtitle),
    }
}

/// Writes the report of `analysis` into `out_dir`; `command` made it.
pub fn write_analyze_report(
    analysis: &CaptureAnalysis,
    command: &[String],
    out_dir: &Path,
) -> Result<ReportFiles, ReportError> {
    let mut flows: Vec<_> = analysis
        .connections
        .iter()
        .enumerate()
        .flat_map(|(index, c)| c.flows.iter().map(move |f| (index + 1, c, f)))
        .filter(|(_, _, f)| f.bytes > 0)
        .collect();
    flows.sort_by_key(|(_, _, f)| std::cmp::Reverse(f.bytes));
    let rows = flows
        .iter()
        .map(|(number, _, f)| {
            vec![
                format!("{number}: {} -> {}", f.from, f.to),
                f.bytes.to_string(),
                format!("{:.3} s", f.duration_ns as f64 * 1e-9),
                super::mbit_per_sec(f.goodput_bps),
                f.retransmissions.total.to_string(),
                f.verdict.limit.name().to_owned(),
                f.verdict.sentence.clone(),
            ]
        })
        .collect();
    let sections = flows
        .iter()
        .take(MAX_FLOWS_DRAWN)
        .map(|(number, connection, flow)| Section {
            heading: format!("connection {number}: {} -> {}", flow.from, flow.to),
            text: flow.verdict.sentence.clone(),
            figures: flow_figures(*number, connection, flow)
                .into_iter()
                .map(|(stem, chart)| Figure {
                    stem,
                    caption: caption(&chart),
                    chart,
                })
                .collect(),
            csv: Vec::new(),
        })
        .collect();
    let intro = format!(
        "{}: {} packets, {} TCP segments, {} connection(s), {} packets dropped at the capture point.",
        command.join(" "),
        analysis.packets,
        analysis.tcp_segments,
        analysis.connections.len(),
        analysis.dropped_at_capture
    );
    write_page(
        "pathlab analyze",
        &intro,
        (
            &[
                "direction",
                "bytes",
                "duration",
                "goodput",
                "retransmissions",
                "limit",
                "verdict",
            ],
            rows,
        ),
        sections,
        out_dir,
    )
}
