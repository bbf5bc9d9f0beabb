//! The report of a saved `pathlab analyze` of a capture: per direction that carried data
//! (the largest first, as many as the figures draw), its verdict and figures, with every
//! connection in the summary table.

use std::path::{Path, PathBuf};

use pathlab_diagnose::tcpflow::CaptureAnalysis;

use super::figures::Figure;
use super::page::{write_page, Section};
use super::{ReportError, ReportFiles, RESULT_FILE};
use crate::capture_figures::{flow_figures, MAX_FLOWS_DRAWN};
use crate::plot::Chart;
use crate::{ResultFile, RunResult};

/// What [`save_analysis`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedAnalysis {
    /// The result file, `OUT/result.json` (with the plotted series).
    pub result: PathBuf,
    /// The report drawn from it.
    pub files: ReportFiles,
}

/// Why [`save_analysis`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The output directory could not be made.
    #[error("creating {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The result file could not be written.
    #[error("writing {}", path.display())]
    WriteResult {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The report could not be drawn or written.
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// Saves `analysis` into `out_dir` as `pathlab analyze --out` does: `result.json` (a
/// versioned result file with the series, which `pathlab report` draws again), then its
/// report ([`write_analyze_report`]). `command` made it, at `created_unix_secs`.
pub fn save_analysis(
    analysis: &CaptureAnalysis,
    command: Vec<String>,
    created_unix_secs: Option<u64>,
    out_dir: &Path,
) -> Result<SavedAnalysis, SaveError> {
    std::fs::create_dir_all(out_dir).map_err(|source| SaveError::CreateDir {
        path: out_dir.to_owned(),
        source,
    })?;
    let file = ResultFile::new(
        RunResult::Analyze(Box::new(analysis.clone())),
        command,
        created_unix_secs,
    );
    let result = out_dir.join(RESULT_FILE);
    std::fs::write(&result, file.to_json()).map_err(|source| SaveError::WriteResult {
        path: result.clone(),
        source,
    })?;
    let files = write_analyze_report(analysis, &file.command, out_dir)?;
    Ok(SavedAnalysis { result, files })
}

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
