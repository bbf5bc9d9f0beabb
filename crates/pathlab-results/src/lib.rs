//! pathlab-results: versioned result files, exports, plots and reports.
//!
//! A run writes one [`ResultFile`]: a magic string, a format version, what produced it and
//! the measured data. Exports are pure functions of what a run wrote, so any old run can be
//! re-exported: [`series`] puts every time series of a lab run on the run's clock,
//! [`plot`] draws figures in memory (PNG and SVG, with an embedded font), and [`report`]
//! writes CSV files, figures and one HTML page. This crate only reads and writes files: no
//! sockets, no clock, no other system call.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt::Write as _;

pub mod capture_figures;
pub mod lab;
pub mod pcapng;
pub mod plot;
pub mod recording;
pub mod report;
pub mod series;

use pathlab_core::sim::SimReport;
use serde::{Deserialize, Serialize};

/// The first field of every result file.
pub const MAGIC: &str = "pathlab-result";

/// The newest format version this build writes and reads.
///
/// Fields added later carry `#[serde(default)] // added in vN` so older files still read.
pub const VERSION: u32 = 1;

/// A saved run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Always [`MAGIC`].
    pub magic: String,
    /// Format version ([`VERSION`] when written by this build).
    pub version: u32,
    /// Version of pathlab that wrote the file.
    pub pathlab_version: String,
    /// When the run ended, in seconds since the Unix epoch (UTC), if known.
    #[serde(default)]
    pub created_unix_secs: Option<u64>,
    /// The command line that produced the run.
    #[serde(default)]
    pub command: Vec<String>,
    /// Why the run ended before it was complete, for a file that holds what it measured
    /// until then; absent for a complete run (added in v1 after its first files, which are
    /// all complete: a reader that predates it reads a partial `owd`, `rtt` or `tcp` file
    /// as a complete one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
    /// What was measured.
    pub result: RunResult,
}

/// What a `pathlab capacity` run that ended early had measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityPartial {
    /// The directions that finished.
    pub done: Vec<pathlab_probe::capacity::CapacityReport>,
    /// The direction that failed: its steps that finished, if any did.
    pub interrupted: Option<pathlab_probe::capacity::CapacityProgress>,
}

/// Why a run ended early; its file holds what it had measured until then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incomplete {
    /// The error the run ended with, as the command printed it.
    pub error: String,
    /// What the saved result holds, and what it lacks.
    pub partial: String,
}

/// The measured data, by kind of run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "data")]
pub enum RunResult {
    /// A `pathlab sim` run.
    Sim(Box<SimReport>),
    /// A `pathlab owd` run: one result per direction.
    Owd(Vec<pathlab_probe::owd::OneWayResult>),
    /// A `pathlab rtt` run.
    Rtt(Box<pathlab_probe::rtt::RttReport>),
    /// A `pathlab tcp` run.
    Tcp(Box<pathlab_probe::tcp::TcpTestReport>),
    /// A `pathlab tcp --rfc6349` run.
    Rfc6349(Box<pathlab_probe::rfc6349::Rfc6349Report>),
    /// A `pathlab lab` run.
    Lab(Box<lab::LabRun>),
    /// A `pathlab analyze` of a capture (added in v1 with `analyze`: older readers do not
    /// know it).
    Analyze(Box<pathlab_diagnose::tcpflow::CaptureAnalysis>),
    /// A `pathlab capacity` run: one report per direction.
    Capacity(Vec<pathlab_probe::capacity::CapacityReport>),
    /// A `pathlab bloat` run.
    Bloat(Box<pathlab_probe::bloat::BloatReport>),
    /// A `pathlab capacity` run that ended early (always with
    /// [`ResultFile::incomplete`] saying why).
    CapacityPartial(Box<CapacityPartial>),
    /// A `pathlab bloat` run that ended early.
    BloatPartial(Box<pathlab_probe::bloat::BloatProgress>),
    /// A `pathlab tcp --rfc6349` run that ended early.
    Rfc6349Partial(Box<pathlab_probe::rfc6349::Rfc6349Progress>),
    /// A `pathlab inspect` watch.
    Inspect(Box<pathlab_diagnose::diagnosis::InspectReport>),
    /// A `pathlab twin check`: every workload's report on the real path and on its twin
    /// (added in v1 with `twin check --out`: older readers do not know it).
    TwinCheck(Box<pathlab_twin::check::CheckRecord>),
}

/// Why a result file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// Not JSON, or not the shape of a result file.
    #[error("not a pathlab result file: {0}")]
    Malformed(#[source] serde_json::Error),
    /// JSON, but the magic string is wrong.
    #[error("not a pathlab result file: magic is '{0}', expected '{MAGIC}'")]
    WrongMagic(String),
    /// Written by a newer pathlab.
    #[error(
        "result file version {found} is newer than this pathlab reads ({VERSION}); upgrade pathlab"
    )]
    TooNew {
        /// The file's version.
        found: u32,
    },
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// The file could not be read.
    #[error("reading: {0}")]
    Io(#[source] std::io::Error),
    /// A line of a recording is not a recording line.
    #[error("line {line} of the recording is malformed: {source}")]
    BadLine {
        /// Line number in the file, from 1 (the header is line 1).
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// The header fields of a file, read before the payload so a wrong file gets a clear error.
#[derive(Deserialize)]
struct Header {
    magic: String,
    version: u32,
}

impl ResultFile {
    /// A result of the current version.
    pub fn new(result: RunResult, command: Vec<String>, created_unix_secs: Option<u64>) -> Self {
        ResultFile {
            magic: MAGIC.to_owned(),
            version: VERSION,
            pathlab_version: env!("CARGO_PKG_VERSION").to_owned(),
            created_unix_secs,
            command,
            incomplete: None,
            result,
        }
    }

    /// The file of a run that ended early with `incomplete`, holding what it measured.
    pub fn with_incomplete(self, incomplete: Incomplete) -> Self {
        ResultFile {
            incomplete: Some(incomplete),
            ..self
        }
    }

    /// The file as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results always serialize")
    }

    /// Reads a file's contents, checking magic and version first.
    pub fn from_json(text: &str) -> Result<ResultFile, ResultError> {
        let header: Header = serde_json::from_str(text).map_err(ResultError::Malformed)?;
        if header.magic != MAGIC {
            return Err(ResultError::WrongMagic(header.magic));
        }
        if header.version > VERSION {
            return Err(ResultError::TooNew {
                found: header.version,
            });
        }
        serde_json::from_str(text).map_err(ResultError::Malformed)
    }
}

/// The time series of a simulation as CSV, one row per sample, times in seconds.
pub fn sim_samples_csv(report: &SimReport) -> String {
    let mut csv = String::from(
        "time_s,forward_queue_packets,forward_queue_bytes,reverse_queue_packets,\
         reverse_queue_bytes,forward_delivered_bytes,reverse_delivered_bytes,\
         forward_max_queue_delay_s\n",
    );
    for s in &report.samples {
        let _ = writeln!(
            csv,
            "{:.6},{},{},{},{},{},{},{:.9}",
            s.at.as_secs_f64(),
            s.forward_queue_packets,
            s.forward_queue_bytes,
            s.reverse_queue_packets,
            s.reverse_queue_bytes,
            s.forward_delivered_bytes,
            s.reverse_delivered_bytes,
            s.forward_max_queue_delay.as_secs_f64(),
        );
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_core::sim::{self, Load, SimConfig};
    use pathlab_core::{BitsPerSec, Duration, LinkSpec};

    fn report() -> SimReport {
        sim::run(&SimConfig {
            forward: LinkSpec::default(),
            reverse: LinkSpec::default(),
            loads: vec![Load::cbr(BitsPerSec::mbit(1), 1000)],
            duration: Duration::from_millis(50),
            seed: 3,
            sample_every: Duration::from_millis(10),
        })
        .expect("valid")
    }

    #[test]
    fn a_result_round_trips_through_json() {
        let file = ResultFile::new(
            RunResult::Sim(Box::new(report())),
            vec!["pathlab".into()],
            Some(1),
        );
        let back = ResultFile::from_json(&file.to_json()).expect("reads back");
        assert_eq!(back, file);
    }

    #[test]
    fn a_partial_result_says_so_and_a_complete_one_has_no_mark() {
        let complete = ResultFile::new(RunResult::Owd(Vec::new()), vec![], Some(1));
        let json = complete.to_json();
        assert!(!json.contains("incomplete"), "no mark on a complete run");
        let partial = complete.with_incomplete(Incomplete {
            error: "the server stopped answering 1.0 s into the test".into(),
            partial: "the probes received".into(),
        });
        let back = ResultFile::from_json(&partial.to_json()).expect("reads back");
        assert_eq!(back, partial);
        assert_eq!(
            back.incomplete.map(|i| i.partial).as_deref(),
            Some("the probes received")
        );
        // Files without the mark (all those written before it existed) are complete runs.
        assert_eq!(ResultFile::from_json(&json).unwrap().incomplete, None);
    }

    #[test]
    fn wrong_files_are_named_as_such() {
        assert!(matches!(
            ResultFile::from_json("{\"magic\":\"other\",\"version\":1}"),
            Err(ResultError::WrongMagic(m)) if m == "other"
        ));
        let mut file = ResultFile::new(RunResult::Sim(Box::new(report())), vec![], None);
        file.version = VERSION + 1;
        assert!(matches!(
            ResultFile::from_json(&file.to_json()),
            Err(ResultError::TooNew { .. })
        ));
        assert!(matches!(
            ResultFile::from_json("not json"),
            Err(ResultError::Malformed(_))
        ));
    }

    #[test]
    fn csv_has_a_row_per_sample() {
        let report = report();
        let csv = sim_samples_csv(&report);
        assert_eq!(csv.lines().count(), report.samples.len() + 1);
        assert!(csv.lines().nth(1).expect("a row").starts_with("0.000000,"));
    }
}
