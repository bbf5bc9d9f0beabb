//! Reports of lab runs: CSV files of every series, PNG and SVG figures, one HTML page.
//!
//! ```no_run
//! use pathlab_results::report::{find_results, load_run, write_report, ReportOptions};
//! # fn main() -> Result<(), pathlab_results::report::ReportError> {
//! let mut runs = Vec::new();
//! for file in find_results(std::path::Path::new("lab-bufferbloat"))? {
//!     runs.push(load_run(&file)?);
//! }
//! let files = write_report(&runs, std::path::Path::new("lab-bufferbloat"), &ReportOptions { compare: true })?;
//! println!("{}", files.html.display());
//! # Ok(())
//! # }
//! ```
//!
//! Everything here is a function of the files a run wrote (`result.json` and its links'
//! recordings): the only system calls are reading them and writing the report's files.
//! What goes where:
//!
//! - `OUT/report.html`: self-contained (images inline as data URIs, inline CSS, no script,
//!   no link), one section per run, plus a comparison section for several runs;
//! - `OUT/csv/SERIES.csv` (one run) or `OUT/csv/RUN/SERIES.csv` (several): one file per
//!   series, `time_s,<value>_<unit>` ([`crate::series::Metric::column`]);
//! - `OUT/plots/FIGURE.png` and `.svg` (or `OUT/plots/RUN/...`, `OUT/plots/compare/...`,
//!   `OUT/plots/sweep/...`).

pub mod analyze;
mod figures;
mod html;
pub mod inspect;
pub mod page;
pub mod saved;
mod source;
mod twin;

use std::path::{Path, PathBuf};

use pathlab_core::format::{self, Digits};

use crate::lab::{LabOutcome, LabRun};
use crate::plot::{render, PlotError};
use crate::recording::read_recording;
use crate::series::{run_series, slug, RecordedDirectionSummary, Series, TooManyIntervals};
use crate::{ResultError, ResultFile, RunResult};

pub use figures::Figure;
pub use html::base64;
pub use source::{default_out, load_runs, ReportConfig, ReportSource};

/// The name of a run's result file inside its directory.
pub const RESULT_FILE: &str = "result.json";

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The path does not exist.
    #[error("{}: no such file or directory", path.display())]
    NotFound {
        /// What was asked for.
        path: PathBuf,
    },
    /// A directory with no `result.json`, in it or in its subdirectories.
    #[error("{}: no {RESULT_FILE} in it or in its subdirectories", path.display())]
    NoRuns {
        /// The directory.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Not a pathlab result, or one from a newer pathlab.
    #[error("{}: {source}", path.display())]
    NotAResult {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: ResultError,
    },
    /// A pathlab result, but not of a lab run.
    #[error("{}: not a lab result but {kind}; reports are made of `pathlab lab` runs", path.display())]
    NotALab {
        /// The file.
        path: PathBuf,
        /// What it is (`a pathlab tcp result`).
        kind: &'static str,
    },
    /// A link's recording is broken.
    #[error("{}: {source}", path.display())]
    BadRecording {
        /// The recording.
        path: PathBuf,
        /// What is wrong with it.
        source: ResultError,
    },
    /// A link's recording asks for more rate intervals than a report counts (its
    /// timestamps span more than [`crate::series::MAX_DELIVERED_RATE_INTERVALS`] of them):
    /// refused before anything is allocated for them.
    #[error("{}: {why}", path.display())]
    TooLong {
        /// The recording.
        path: PathBuf,
        /// Which direction, and over how long (in this message, not a source of it: `main`
        /// prints the chain).
        why: TooManyIntervals,
    },
    /// A file of the report could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A figure could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// Nothing to report.
    #[error("no runs to report")]
    Empty,
}

/// A lab run, read back with everything a report shows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunData {
    /// Its result file.
    pub source: PathBuf,
    /// The run.
    pub run: LabRun,
    /// Every series, on the run's clock ([`crate::series`]).
    pub series: Vec<Series>,
    /// What its links' recordings say, per direction.
    pub links: Vec<RecordedDirectionSummary>,
    /// What could not be read and was left out (a missing recording), for the reader.
    pub notes: Vec<String>,
}

impl RunData {
    /// Its sweep parameters as `queue=10, loss=0.01` (empty without a sweep).
    pub fn parameters_label(&self) -> String {
        self.run
            .parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A short name among several runs: its parameters, or its directory's name.
    pub fn label(&self) -> String {
        let parameters = self.parameters_label();
        if !parameters.is_empty() {
            return parameters;
        }
        self.source.parent().and_then(Path::file_name).map_or_else(
            || self.run.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        )
    }

    /// Goodput of its TCP workloads together (every stream, both ways), bits/s; `None`
    /// without a TCP workload.
    pub fn tcp_goodput_bps(&self) -> Option<f64> {
        let mut total = None;
        for workload in &self.run.workloads {
            if let LabOutcome::Tcp(report) = &workload.outcome {
                *total.get_or_insert(0.0) += report.up_bps + report.down_bps;
            }
        }
        total
    }
}

/// The result files named by `path`: the file itself, `PATH/result.json`, or
/// `PATH/*/result.json` (a sweep), in name order.
pub fn find_results(path: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let metadata = std::fs::metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ReportError::NotFound {
            path: path.to_owned(),
        },
        _ => ReportError::Read {
            path: path.to_owned(),
            source,
        },
    })?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let direct = path.join(RESULT_FILE);
    if direct.is_file() {
        return Ok(vec![direct]);
    }
    let entries = std::fs::read_dir(path).map_err(|source| ReportError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join(RESULT_FILE))
        .filter(|file| file.is_file())
        .collect();
    if found.is_empty() {
        return Err(ReportError::NoRuns {
            path: path.to_owned(),
        });
    }
    found.sort();
    Ok(found)
}

/// A time as every table and figure label of a report writes it: milliseconds with one
/// decimal, so rows compare in one unit: `32.1 ms`.
fn ms(seconds: f64) -> String {
    format!("{} ms", format::in_millis(seconds, Digits::fixed(1)))
}

/// A rate as every table and figure label of a report writes it: Mbit/s with two decimals,
/// so rows compare in one unit: `9.50 Mbit/s`.
fn mbit_per_sec(bits_per_sec: f64) -> String {
    format!(
        "{} Mbit/s",
        format::in_mbit_per_sec(bits_per_sec, Digits::fixed(2))
    )
}

/// How far a measurement lies from its theory, as a signed percentage with one decimal:
/// `-5.0%`; `–` without a theory to compare with.
fn versus(measured: f64, theory: f64) -> String {
    if theory > 0.0 {
        format::fraction_as_percent(measured / theory - 1.0, Digits::fixed(1).signed())
    } else {
        "–".to_owned()
    }
}

fn kind_name(result: &RunResult) -> &'static str {
    match result {
        RunResult::Sim(_) => "a pathlab sim result",
        RunResult::Owd(_) => "a pathlab owd result",
        RunResult::Rtt(_) => "a pathlab rtt result",
        RunResult::Tcp(_) => "a pathlab tcp result",
        RunResult::Rfc6349(_) => "a pathlab tcp --rfc6349 result",
        RunResult::Lab(_) => "a pathlab lab result",
        RunResult::Analyze(_) => "a pathlab analyze result",
        RunResult::Capacity(_) => "a pathlab capacity result",
        RunResult::Bloat(_) => "a pathlab bloat result",
        RunResult::CapacityPartial(_) => "a partial pathlab capacity result",
        RunResult::BloatPartial(_) => "a partial pathlab bloat result",
        RunResult::Rfc6349Partial(_) => "a partial pathlab tcp --rfc6349 result",
        RunResult::Inspect(_) => "a pathlab inspect result",
        RunResult::TwinCheck(_) => "a pathlab twin check result",
    }
}

/// Reads a lab run: its result file (`PATH` or `PATH/result.json`) and the recordings of
/// its links (next to it), and computes its series.
///
/// A recording the result names but that is not there is left out with a note (a run
/// copied without its recordings still has its workloads' series); one that is there but
/// broken is an error naming it.
pub fn load_run(path: &Path) -> Result<RunData, ReportError> {
    let file = if path.is_dir() {
        path.join(RESULT_FILE)
    } else {
        path.to_owned()
    };
    let text = std::fs::read_to_string(&file).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ReportError::NotFound { path: file.clone() },
        _ => ReportError::Read {
            path: file.clone(),
            source,
        },
    })?;
    if text.trim().is_empty() {
        return Err(ReportError::NotAResult {
            path: file,
            source: ResultError::Empty,
        });
    }
    let result = ResultFile::from_json(&text).map_err(|source| ReportError::NotAResult {
        path: file.clone(),
        source,
    })?;
    let run = match result.result {
        RunResult::Lab(run) => *run,
        other => {
            return Err(ReportError::NotALab {
                path: file,
                kind: kind_name(&other),
            })
        }
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut recordings = Vec::new();
    let mut notes = Vec::new();
    for link in &run.links {
        let Some(name) = &link.recording else {
            continue;
        };
        let recording_path = dir.join(name);
        let opened = match std::fs::File::open(&recording_path) {
            Ok(opened) => opened,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!(
                    "link {}: its recording {} is missing, so its queue and drops are not shown",
                    link.name,
                    recording_path.display()
                ));
                continue;
            }
            Err(source) => {
                return Err(ReportError::Read {
                    path: recording_path,
                    source,
                })
            }
        };
        let recording = read_recording(std::io::BufReader::new(opened)).map_err(|source| {
            ReportError::BadRecording {
                path: recording_path.clone(),
                source,
            }
        })?;
        recordings.push((link.name.clone(), recording));
    }
    let (series, links) = run_series(&run, &recordings).map_err(|why| {
        let recording = run
            .links
            .iter()
            .find(|l| l.name == why.link)
            .and_then(|l| l.recording.as_deref())
            .unwrap_or_default();
        ReportError::TooLong {
            path: dir.join(recording),
            why,
        }
    })?;
    Ok(RunData {
        source: file,
        run,
        series,
        links,
        notes,
    })
}

/// A sweep parameter's value as a number and its unit: `10ms` is (10, "ms"), `0.5%` is
/// (0.5, "%"), `10` is (10, ""); `None` if it does not start with a number.
pub fn split_number(value: &str) -> Option<(f64, &str)> {
    let value = value.trim();
    let end = value
        .find(|c: char| c.is_ascii_alphabetic() || c == '%')
        .unwrap_or(value.len());
    let number = value[..end]
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())?;
    Some((number, &value[end..]))
}

/// Orders runs by their parameters, numerically where both values are numbers (so the
/// points of a sweep over `queue` come as 10, 50, 100, not as their directories sort).
pub fn sort_by_parameters(runs: &mut [RunData]) {
    runs.sort_by(|a, b| {
        for ((_, x), (_, y)) in a.run.parameters.iter().zip(&b.run.parameters) {
            let order = match (split_number(x), split_number(y)) {
                (Some((x, _)), Some((y, _))) => x.total_cmp(&y),
                _ => x.cmp(y),
            };
            if order != std::cmp::Ordering::Equal {
                return order;
            }
        }
        a.source.cmp(&b.source)
    });
}

/// What a report shows besides every run's own figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// Put the same series of every run on one figure (RTT per probe of each queue size, ...).
    pub compare: bool,
}

/// The files a report wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportFiles {
    /// `OUT/report.html`.
    pub html: PathBuf,
    /// Every CSV file.
    pub csv: Vec<PathBuf>,
    /// Every PNG file (each figure also has an SVG next to it).
    pub png: Vec<PathBuf>,
    /// Every SVG file.
    pub svg: Vec<PathBuf>,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| ReportError::Write {
            path: parent.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, bytes).map_err(|source| ReportError::Write {
        path: path.to_owned(),
        source,
    })
}

/// A drawn figure, ready for the page.
#[derive(Debug)]
struct DrawnFigure {
    caption: String,
    png: Vec<u8>,
}

fn draw_all(
    figures: Vec<Figure>,
    dir: &Path,
    files: &mut ReportFiles,
) -> Result<Vec<DrawnFigure>, ReportError> {
    let mut drawn = Vec::new();
    for figure in figures {
        let rendered = render(&figure.chart)?;
        let png = dir.join(format!("{}.png", figure.stem));
        let svg = dir.join(format!("{}.svg", figure.stem));
        write(&png, &rendered.png)?;
        write(&svg, rendered.svg.as_bytes())?;
        files.png.push(png);
        files.svg.push(svg);
        drawn.push(DrawnFigure {
            caption: figure.caption,
            png: rendered.png,
        });
    }
    Ok(drawn)
}

/// Unique directory names for the runs: their directories' names (a sweep's point
/// directories, `queue-10`), or their labels.
fn run_slugs(runs: &[RunData]) -> Vec<String> {
    let mut slugs: Vec<String> = Vec::new();
    for run in runs {
        let base = slug(
            &run.source
                .parent()
                .and_then(Path::file_name)
                .map_or_else(|| run.label(), |n| n.to_string_lossy().into_owned()),
        );
        let mut name = base.clone();
        let mut n = 2;
        while slugs.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        slugs.push(name);
    }
    slugs
}

/// Writes the report of `runs` into `out_dir`: CSV files, figures and `report.html`.
pub fn write_report(
    runs: &[RunData],
    out_dir: &Path,
    options: &ReportOptions,
) -> Result<ReportFiles, ReportError> {
    if runs.is_empty() {
        return Err(ReportError::Empty);
    }
    let mut files = ReportFiles {
        html: out_dir.join("report.html"),
        ..ReportFiles::default()
    };
    let several = runs.len() > 1;
    let slugs = run_slugs(runs);
    let mut sections = Vec::new();
    for (run, run_slug) in runs.iter().zip(&slugs) {
        let csv_dir = if several {
            out_dir.join("csv").join(run_slug)
        } else {
            out_dir.join("csv")
        };
        let mut csv_files = Vec::new();
        for series in &run.series {
            let path = csv_dir.join(format!("{}.csv", series.slug()));
            write(&path, series.csv().as_bytes())?;
            csv_files.push(path.clone());
            files.csv.push(path);
        }
        let plot_dir = if several {
            out_dir.join("plots").join(run_slug)
        } else {
            out_dir.join("plots")
        };
        let figures = draw_all(figures::run_figures(run), &plot_dir, &mut files)?;
        sections.push(html::RunSection {
            run,
            figures,
            csv: csv_files
                .iter()
                .map(|p| p.strip_prefix(out_dir).unwrap_or(p).to_path_buf())
                .collect(),
        });
    }
    let mut comparison = Vec::new();
    if several {
        comparison.extend(draw_all(
            figures::sweep_figures(runs),
            &out_dir.join("plots").join("sweep"),
            &mut files,
        )?);
        if options.compare {
            comparison.extend(draw_all(
                figures::compare_figures(runs),
                &out_dir.join("plots").join("compare"),
                &mut files,
            )?);
        }
    }
    let page = html::page(runs, &comparison, &sections);
    write(&files.html, page.as_bytes())?;
    Ok(files)
}

#[cfg(test)]
mod tests;
