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
    /// The sweep point's parameters (`KEY`, value as substituted), in the sweep's order;
    /// empty for an experiment without a sweep.
    #[serde(default)]
    pub parameters: Vec<(String, String)>,
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
    /// What theory says about its path, from the specs as the run started (`None` without
    /// a peer).
    #[serde(default)]
    pub path: Option<PathTheory>,
    /// What came of it.
    pub outcome: LabOutcome,
}

/// What an ICMP echo workload (`ping`) found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingReport {
    /// Between requests, ns.
    pub interval_ns: u64,
    /// ICMP payload bytes.
    pub size: u32,
    /// Requests sent.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Round-trip time percentiles of the replies.
    pub rtt: pathlab_probe::rtt::Percentiles,
    /// Every reply: (seq, rtt ns), in sequence order (as `rtt`'s series).
    pub series: Vec<(u64, i64)>,
    /// When each request of `series` was sent, ns after the first request.
    pub series_sent_ns: Vec<u64>,
}

/// A workload's path from `from` to `to` as the specs describe it at the start of a run:
/// the figures its measurements are judged against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathTheory {
    /// Sum of the fixed delays of every hop, both ways, seconds: the RTT of an idle path.
    pub base_rtt_s: f64,
    /// The slowest fixed rate on the way there, bits per second.
    pub bottleneck_bps: Option<f64>,
    /// Its queue's limit, packets.
    pub queue_packets: Option<u32>,
    /// The RTT when that queue is full of full-size frames:
    /// base + queue x 1514 B x 8 / rate, seconds.
    pub plateau_rtt_s: Option<f64>,
    /// The period of one Reno flow's sawtooth when it alone fills that queue, seconds:
    /// the window grows by a segment per round trip from W/2 to W = C x R0 + Q (C the
    /// bottleneck's full-size packets per second, R0 the base RTT plus a frame's
    /// serialization, Q the queue), each round trip lasting max(R0, w / C), plus one round
    /// trip of recovery at W / C. Grows as Q squared once Q is past the pipe.
    #[serde(default)]
    pub sawtooth_period_s: Option<f64>,
    /// The probability that a packet is lost on the way there (independent losses of the
    /// hops combined; `None` if a hop's loss model has no fixed mean).
    pub loss: Option<f64>,
    /// The Mathis bound on one Reno flow's goodput there, (MSS / RTT) x sqrt(3/2) / sqrt(p)
    /// with MSS 1448 B and the base RTT, bits per second (`None` without loss).
    pub mathis_bps: Option<f64>,
}

/// The Mathis et al. (1997) bound on a Reno flow's goodput, bits per second:
/// `(mss / rtt) x sqrt(3/2) / sqrt(p)`.
pub fn mathis_bps(mss_bytes: f64, rtt_s: f64, loss: f64) -> f64 {
    mss_bytes * 8.0 / rtt_s * (1.5f64).sqrt() / loss.sqrt()
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
    /// `ping`.
    Ping(Box<PingReport>),
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
