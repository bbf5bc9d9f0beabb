//! What `pathlab report` is asked to draw and where: the saved results it names, read
//! ([`ReportSource::load`]), and the directory the report goes to ([`default_out`]).

use std::path::{Path, PathBuf};

use super::{
    find_results, load_run, sort_by_parameters, write_report, ReportError, ReportFiles,
    ReportOptions, RunData,
};
use crate::{ResultFile, RunResult};
use pathlab_diagnose::diagnosis::InspectReport;
use pathlab_diagnose::tcpflow::CaptureAnalysis;

/// The saved results a report is drawn from.
#[derive(Debug, Clone)]
pub enum ReportSource {
    /// A watch `pathlab inspect --save` wrote: its own page.
    Inspect {
        /// The watch.
        report: Box<InspectReport>,
        /// The command line that made it.
        command: Vec<String>,
    },
    /// An analysis `pathlab analyze --out` wrote: its own page.
    Analyze {
        /// The analysis.
        analysis: Box<CaptureAnalysis>,
        /// The command line that made it.
        command: Vec<String>,
    },
    /// A check `pathlab twin check --out` wrote: its own page.
    TwinCheck {
        /// The check.
        record: Box<pathlab_twin::check::CheckRecord>,
        /// The command line that made it.
        command: Vec<String>,
    },
    /// Lab runs (a sweep's points in the order of their parameters).
    Runs(Vec<RunData>),
}

impl ReportSource {
    /// Reads what `inputs` name: one saved inspect watch or analysis, or else every run
    /// they hold (a run's `result.json`, a run's directory, or a directory of runs).
    pub fn load(inputs: &[PathBuf]) -> Result<ReportSource, ReportError> {
        if let [only] = inputs {
            if let Some(page) = page_result(only) {
                return Ok(page);
            }
        }
        load_runs(inputs).map(ReportSource::Runs)
    }
}

/// A saved `pathlab inspect` watch, `pathlab analyze` or `pathlab twin check` at `path`,
/// if that is what it is.
fn page_result(path: &Path) -> Option<ReportSource> {
    let text = std::fs::read_to_string(path).ok()?;
    ReportSource::page(ResultFile::from_json(&text).ok()?)
}

impl ReportSource {
    /// The page of a result that has one of its own (a watch, an analysis, a twin check);
    /// `None` for a run, which the runs' report draws.
    pub fn page(file: ResultFile) -> Option<ReportSource> {
        match file.result {
            RunResult::Inspect(report) => Some(ReportSource::Inspect {
                report,
                command: file.command,
            }),
            RunResult::Analyze(analysis) => Some(ReportSource::Analyze {
                analysis,
                command: file.command,
            }),
            RunResult::TwinCheck(record) => Some(ReportSource::TwinCheck {
                record,
                command: file.command,
            }),
            _ => None,
        }
    }
}

/// Reads every run `inputs` name; a sweep's points in the order of their parameters.
pub fn load_runs(inputs: &[PathBuf]) -> Result<Vec<RunData>, ReportError> {
    let mut runs = Vec::new();
    for input in inputs {
        let mut group = Vec::new();
        for file in find_results(input)? {
            group.push(load_run(&file)?);
        }
        sort_by_parameters(&mut group);
        runs.extend(group);
    }
    Ok(runs)
}

/// Where the report of `inputs` goes by default: the input's directory when there is
/// one input (the directory itself, or the file's), else `report-UNIXTIME` named after
/// `now_unix_secs`.
pub fn default_out(inputs: &[PathBuf], now_unix_secs: u64) -> PathBuf {
    if let [only] = inputs {
        if only.is_dir() {
            return only.clone();
        }
        if let Some(parent) = only.parent() {
            return if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_owned()
            };
        }
    }
    PathBuf::from(format!("report-{now_unix_secs}"))
}

/// A report to write: what it draws, where, and how.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// The results it draws.
    pub source: ReportSource,
    /// The directory it goes to.
    pub out: PathBuf,
    /// What it shows besides each run's own figures (runs only).
    pub options: ReportOptions,
}

impl ReportConfig {
    /// Writes the report: a watch's or an analysis's own page, or the runs' report
    /// ([`write_report`]).
    pub fn write(&self) -> Result<ReportFiles, ReportError> {
        match &self.source {
            ReportSource::Inspect { report, command } => {
                super::inspect::write_inspect_report(report, command, &self.out)
            }
            ReportSource::Analyze { analysis, command } => {
                super::analyze::write_analyze_report(analysis, command, &self.out)
            }
            ReportSource::TwinCheck { record, command } => {
                super::twin::write_twin_check_report(record, command, &self.out)
            }
            ReportSource::Runs(runs) => write_report(runs, &self.out, &self.options),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_input_reports_into_its_directory_and_several_into_a_new_one() {
        let file = PathBuf::from("runs/lab-1/result.json");
        assert_eq!(default_out(&[file], 7), PathBuf::from("runs/lab-1"));
        assert_eq!(
            default_out(&[PathBuf::from("result.json")], 7),
            PathBuf::from(".")
        );
        let two = [
            PathBuf::from("a/result.json"),
            PathBuf::from("b/result.json"),
        ];
        assert_eq!(
            default_out(&two, 1_700_000_000),
            PathBuf::from("report-1700000000")
        );
    }

    #[test]
    fn a_missing_input_is_named() {
        let missing = PathBuf::from("/nonexistent/pathlab-report-input");
        let error = ReportSource::load(&[missing]).unwrap_err();
        assert!(matches!(error, ReportError::NotFound { .. }), "{error}");
    }
}
