//! What a lab run saves: the experiment, every link's specs and recording, and every
//! workload's result, on one clock (nanoseconds since the run started).

use serde::{Deserialize, Serialize};

/// One run of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabRun {
    /// The experiment's name.
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// The spec file's text as run (after sweep substitution).
    pub spec: String,
    /// `uname -sr` of the machine it ran on.
    pub kernel: String,
    /// When it started, ns since the Unix epoch.
    pub started_unix_ns: u64,
    /// How long it ran, ns (less than asked when interrupted).
    pub duration_ns: u64,
    /// Whether Ctrl-C (or an error) ended it early: what is here is what was recorded.
    pub interrupted: bool,
    /// Every link.
    pub links: Vec<LabLink>,
    /// Every workload.
    pub workloads: Vec<LabWorkload>,
}

/// A link of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabLink {
    /// `A-B`.
    pub name: String,
    /// Spec from A to B at the start.
    pub forward: String,
    /// Spec from B to A at the start.
    pub reverse: String,
    /// The emulator's recording (JSON lines, next to the result file), if emulated.
    pub recording: Option<String>,
}

/// A workload of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabWorkload {
    /// Its name.
    pub name: String,
    /// Where it ran.
    pub from: String,
    /// Its peer, if any.
    pub to: Option<String>,
    /// When it started, ns after the run started.
    pub start_ns: u64,
    /// How long it was asked to run, ns.
    pub duration_ns: u64,
    /// What came of it.
    pub outcome: LabOutcome,
}

/// A workload's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "data")]
pub enum LabOutcome {
    /// `tcp`.
    Tcp(Box<pathlab_probe::tcp::TcpTestReport>),
    /// `rtt`.
    Rtt(Box<pathlab_probe::rtt::RttReport>),
    /// `owd`.
    Owd(Box<pathlab_probe::owd::OneWayResult>),
    /// A program.
    Command {
        /// Its exit code (`None`: killed at the end of its time, or by a signal).
        exit_code: Option<i32>,
        /// Its standard output and error, in a file next to the result file.
        output: String,
    },
    /// It did not run to the end.
    Failed(String),
    /// The run ended before it started.
    NotStarted,
}
