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
    /// How the emulators' forwarding threads were scheduled; `None` in files from before.
    #[serde(default, skip_serializing_if = "Option::is_none")] // added with --priority
    pub scheduling: Option<Scheduling>,
}

/// How an emulator's forwarding threads were scheduled: what was asked, what the kernel
/// gave, and why anything asked was not given. A run's timing holds on a busy machine only
/// where its forwarding threads had real-time scheduling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduling {
    /// What was asked (`--priority`): `realtime` or `normal`.
    pub asked: String,
    /// The class every forwarding thread got: `fifo` (SCHED_FIFO), `normal` (SCHED_OTHER),
    /// or `mixed` when they differ.
    pub policy: String,
    /// Their real-time priority (1-99; 0 at normal priority).
    pub priority: u32,
    /// Whether the process's memory is locked in RAM.
    pub memory_locked: bool,
    /// The CPUs they may run on, as `taskset -c` writes them (`0-1`).
    pub cpus: String,
    /// How many forwarding threads there are.
    pub threads: u32,
    /// What was asked and not given, and why, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Scheduling {
    /// One line for a terminal: `real-time (SCHED_FIFO 50), memory locked, CPUs 0-1, 2
    /// threads`, or what runs at normal priority and why.
    pub fn text(&self) -> String {
        let class = match self.policy.as_str() {
            "fifo" => format!("real-time (SCHED_FIFO {})", self.priority),
            "normal" if self.asked == "normal" => "normal priority (as asked)".to_owned(),
            "normal" => "normal priority".to_owned(),
            other => other.to_owned(),
        };
        let memory = if self.memory_locked {
            "memory locked"
        } else {
            "memory not locked"
        };
        format!(
            "{class}, {memory}, CPUs {}, {} forwarding thread{}",
            self.cpus,
            self.threads,
            if self.threads == 1 { "" } else { "s" }
        )
    }
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
    /// How late its emulator sent against the model, A to B then B to A; empty when the
    /// link was not emulated (or the file predates the fidelity guard).
    #[serde(default)] // added in v1 with the fidelity guard
    pub lateness: Vec<SendLateness>,
    /// Changes of its specs made by hand while the run lasted (`pathlab lab --control`),
    /// in order; scheduled events are in the spec instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")] // added with lab --control
    pub changes: Vec<LinkChange>,
    /// The path under the link when an engine made it (`pathlab lab collect`), as each
    /// end measured it before the run: the link's delay is its spec's plus this.
    #[serde(default, skip_serializing_if = "Vec::is_empty")] // added with lab collect
    pub underlay: Vec<LinkUnderlay>,
}

/// A change of a link's specs made while a run lasted, over `pathlab lab --control`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkChange {
    /// When, ns after the run's start.
    pub at_ns: u64,
    /// The new spec from A to B, canonical, if it changed.
    pub forward: Option<String>,
    /// The new spec from B to A, if it changed.
    pub reverse: Option<String>,
    /// Who made it (`http 127.0.0.1:40312`).
    pub by: String,
}

/// How late an emulator sent one direction of a link against its model (the fidelity
/// guard's figures, see docs/emulate.md): when it cannot keep up, what crossed the link
/// is not the link the spec describes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendLateness {
    /// The node the direction leaves.
    pub from: String,
    /// The node it reaches.
    pub to: String,
    /// Packets sent.
    pub packets: u64,
    /// Median lateness of the run, ns.
    pub p50_ns: u64,
    /// 99th percentile of the run, ns.
    pub p99_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
    /// The bound a second's p99 had to stay under, ns; `None`: the guard was off.
    pub bound_ns: Option<u64>,
    /// Whole seconds judged (the run's length, rounded down).
    pub seconds: u64,
    /// Of those, the ones whose p99 exceeded the bound.
    pub late_seconds: u64,
    /// The highest p99 of any one second, ns.
    pub worst_second_p99_ns: u64,
}

impl SendLateness {
    /// The warning a report and the lab's summary give when some second was late:
    /// `link r1-h2 sent late (r1 to h2): p99 up to 3.2 ms, over 1 ms in 4 of 20 s —
    /// results may reflect the emulator, not the link`.
    pub fn warning(&self, link: &str) -> Option<String> {
        if self.late_seconds == 0 {
            return None;
        }
        Some(format!(
            "link {link} sent late ({} to {}): p99 up to {}, over {} in {} of {} s \u{2014} \
             results may reflect the emulator, not the link",
            self.from,
            self.to,
            lateness_text(self.worst_second_p99_ns),
            lateness_text(self.bound_ns.unwrap_or(0)),
            self.late_seconds,
            self.seconds,
        ))
    }
}

impl LabRun {
    /// A line for each change made by hand to a link while the run lasted: `link h1-h2
    /// changed 2.01 s into the run by http 127.0.0.1:40312: h1-h2 'delay 30ms' both ways —
    /// the theory is the specs' at the start`.
    pub fn change_notes(&self) -> Vec<String> {
        self.links
            .iter()
            .flat_map(|link| {
                link.changes.iter().map(move |change| {
                    let what = match (&change.forward, &change.reverse) {
                        (Some(f), Some(r)) if f == r => format!("'{f}' both ways"),
                        (Some(f), Some(r)) => format!("'{f}' forward, '{r}' reverse"),
                        (Some(f), None) => format!("'{f}' forward"),
                        (None, Some(r)) => format!("'{r}' reverse"),
                        (None, None) => "nothing".into(),
                    };
                    format!(
                        "link {} changed {:.2} s into the run by {}: {what} \u{2014} the \
                         figures' theory is the specs' at the start",
                        link.name,
                        change.at_ns as f64 / 1e9,
                        change.by
                    )
                })
            })
            .collect()
    }

    /// Every late direction's warning ([`SendLateness::warning`]), link by link: empty
    /// when every emulator kept up.
    pub fn late_warnings(&self) -> Vec<String> {
        self.links
            .iter()
            .flat_map(|link| link.lateness.iter().filter_map(|l| l.warning(&link.name)))
            .collect()
    }
}

/// A lateness as people read it: `850 us` below a millisecond, `3.2 ms` below 100 ms,
/// `143 ms` above. The one way lateness figures are written, by the emulator's warnings,
/// the lab's summary and reports.
pub fn lateness_text(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} us", ns / 1_000)
    } else if ns < 100_000_000 {
        let tenths = (ns + 50_000) / 100_000;
        if tenths.is_multiple_of(10) {
            format!("{} ms", tenths / 10)
        } else {
            format!("{}.{} ms", tenths / 10, tenths % 10)
        }
    } else {
        format!("{} ms", (ns + 500_000) / 1_000_000)
    }
}

/// What `pathlab node` measured of the path under one of its links before the run (an
/// engine's veth or VXLAN tunnel): echo requests to the far end, through both ends'
/// emulators with no impairment set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkUnderlay {
    /// The node's interface.
    pub interface: String,
    /// The link.
    pub link: String,
    /// What kind of device the engine made (`veth`, `vxlan`, ...).
    pub device: String,
    /// A VXLAN device's remote underlay address (the far machine), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<std::net::IpAddr>,
    /// Replies received.
    pub samples: u32,
    /// The least round trip, ns.
    pub rtt_min_ns: u64,
    /// The median round trip, ns.
    pub rtt_p50_ns: u64,
    /// Which clock timed the round trips (all zero in results written before it was
    /// recorded).
    #[serde(default)]
    pub timed_by: pathlab_probe::rtt::RoundTripClocks,
    /// The one-way delay the link's egress spec asks for at the start, ns.
    pub spec_delay_ns: u64,
}

impl LinkUnderlay {
    /// The underlay's one-way delay, estimated as half the median round trip, ns.
    pub fn one_way_ns(&self) -> u64 {
        self.rtt_p50_ns / 2
    }

    /// Whether the underlay alone is slower than the spec asks the link to be: the link
    /// cannot have the spec's delay (pathlab adds the spec to the underlay's, it subtracts
    /// nothing).
    pub fn exceeds_spec(&self) -> bool {
        self.one_way_ns() > self.spec_delay_ns
    }

    /// The warning a node prints, and the collector repeats, when [`Self::exceeds_spec`].
    pub fn warning(&self) -> Option<String> {
        self.exceeds_spec().then(|| {
            format!(
                "link {} ({}): the underlay alone takes {} one way ({} round trip), more than \
                 the spec's delay of {}; the link's delay is the spec's plus the underlay's",
                self.link,
                self.device,
                time_text(self.one_way_ns()),
                time_text(self.rtt_p50_ns),
                time_text(self.spec_delay_ns),
            )
        })
    }
}

/// A time in ns as it reads best (`2.51 ms`).
fn time_text(ns: u64) -> String {
    use pathlab_core::format::{time, Digits};
    time(ns as f64 * 1e-9, Digits::up_to(2))
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
    /// What `pathlab inspect` saw of its TCP connections that moved data, with their
    /// verdicts, when the workload asked to be watched (added in v1 with issue 17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspect: Option<pathlab_diagnose::diagnosis::InspectReport>,
}

/// The round trips of an `rtt` or `ping` workload, whichever measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTrips<'a> {
    /// Requests sent.
    pub sent: u64,
    /// Their round-trip time percentiles.
    pub rtt: &'a pathlab_probe::rtt::Percentiles,
    /// Every reply: (seq, rtt ns).
    pub series: &'a [(u64, i64)],
    /// When each reply's request was sent, ns after the first (empty in old rtt results).
    pub sent_ns: &'a [u64],
    /// Which clock timed them.
    pub timed_by: pathlab_probe::rtt::RoundTripClocks,
}

impl RoundTrips<'_> {
    /// The RTT plateau: the 99th percentile of the second half of the requests (once a
    /// bulk flow keeps the queue between half and full), seconds.
    pub fn plateau_s(&self) -> Option<f64> {
        let half = self.sent / 2;
        let mut late: Vec<f64> = self
            .series
            .iter()
            .filter(|&&(seq, _)| seq >= half)
            .map(|&(_, ns)| ns as f64 * 1e-9)
            .collect();
        late.sort_by(f64::total_cmp);
        pathlab_core::quantile::of_sorted(&late, 0.99)
    }
}

impl LabOutcome {
    /// The round trips, for `rtt` and `ping` workloads.
    pub fn round_trips(&self) -> Option<RoundTrips<'_>> {
        match self {
            LabOutcome::Rtt(report) => Some(RoundTrips {
                sent: report.sent,
                rtt: &report.rtt,
                series: &report.series,
                sent_ns: &report.series_sent_ns,
                timed_by: report.timed_by,
            }),
            LabOutcome::Ping(report) => Some(RoundTrips {
                sent: report.sent,
                rtt: &report.rtt,
                series: &report.series,
                sent_ns: &report.series_sent_ns,
                timed_by: report.timed_by,
            }),
            _ => None,
        }
    }
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
    /// Which clock timed the replies' round trips: the kernel's stamps, or the pinger's
    /// own clock where the kernel gave none (all zero in results written before it was
    /// recorded).
    #[serde(default)]
    pub timed_by: pathlab_probe::rtt::RoundTripClocks,
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

/// The most a `blocks` application of `size`-byte blocks can move on `path`, bits/s: a
/// block per round trip, the round trip being the base RTT plus the block's time through
/// the bottleneck (in full-size frames, 1448 B of payload per 1514 B) where there is one.
pub fn blocks_bound_bps(size: u32, path: &PathTheory) -> f64 {
    let bits = f64::from(size) * 8.0;
    let serialization = path
        .bottleneck_bps
        .map_or(0.0, |rate| bits * 1514.0 / 1448.0 / rate);
    bits / (path.base_rtt_s + serialization)
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
    /// `blocks`.
    Blocks(Box<pathlab_probe::tcp::BlocksReport>),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_made_by_hand_are_told_with_when_and_by_whom() {
        let change = |forward: Option<&str>, reverse: Option<&str>| LinkChange {
            at_ns: 2_012_000_000,
            forward: forward.map(str::to_owned),
            reverse: reverse.map(str::to_owned),
            by: "http 127.0.0.1:40312".into(),
        };
        let run = LabRun {
            links: vec![LabLink {
                name: "h1-h2".into(),
                forward: "delay 10ms".into(),
                reverse: "delay 10ms".into(),
                recording: None,
                lateness: Vec::new(),
                changes: vec![
                    change(Some("delay 30ms"), Some("delay 30ms")),
                    change(None, Some("loss 1%")),
                ],
                underlay: Vec::new(),
            }],
            ..serde_json::from_value(serde_json::json!({
                "name": "x", "description": "", "spec": "", "parameters": [],
                "kernel": "", "started_unix_ns": 0, "duration_ns": 0,
                "interrupted": false, "links": [], "workloads": []
            }))
            .unwrap()
        };
        assert_eq!(
            run.change_notes(),
            [
                "link h1-h2 changed 2.01 s into the run by http 127.0.0.1:40312: 'delay 30ms' \
                 both ways \u{2014} the figures' theory is the specs' at the start",
                "link h1-h2 changed 2.01 s into the run by http 127.0.0.1:40312: 'loss 1%' \
                 reverse \u{2014} the figures' theory is the specs' at the start",
            ]
        );
        // A run without changes writes no field, and older files read without one.
        let mut plain = run.clone();
        plain.links[0].changes.clear();
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("changes"));
        assert_eq!(serde_json::from_str::<LabRun>(&json).unwrap(), plain);
    }

    #[test]
    fn lateness_reads_in_the_unit_that_fits() {
        assert_eq!(lateness_text(0), "0 us");
        assert_eq!(lateness_text(850_400), "850 us");
        assert_eq!(lateness_text(1_000_000), "1 ms");
        assert_eq!(lateness_text(3_240_000), "3.2 ms");
        assert_eq!(lateness_text(143_400_000), "143 ms");
    }

    #[test]
    fn a_late_direction_is_named_with_its_figures_and_an_on_time_one_is_not() {
        let late = SendLateness {
            from: "r1".into(),
            to: "h2".into(),
            packets: 1_000,
            bound_ns: Some(1_000_000),
            seconds: 20,
            late_seconds: 4,
            worst_second_p99_ns: 3_200_000,
            ..SendLateness::default()
        };
        assert_eq!(
            late.warning("r1-h2").as_deref(),
            Some(
                "link r1-h2 sent late (r1 to h2): p99 up to 3.2 ms, over 1 ms in 4 of 20 s \u{2014} \
                 results may reflect the emulator, not the link"
            )
        );
        let on_time = SendLateness {
            late_seconds: 0,
            ..late
        };
        assert_eq!(on_time.warning("r1-h2"), None);
    }

    #[test]
    fn ping_and_rtt_round_trips_share_the_plateau() {
        // 100 requests; the second half's RTTs are 50..=99 ms, and the 99th percentile of
        // those 50 is the one of rank ceil(0.99 x 50) = 50: 99 ms.
        let series: Vec<(u64, i64)> = (0..100).map(|i| (i, i as i64 * 1_000_000)).collect();
        let ping = LabOutcome::Ping(Box::new(PingReport {
            interval_ns: 10_000_000,
            size: 56,
            sent: 100,
            received: 100,
            rtt: pathlab_probe::rtt::percentiles(series.iter().map(|&(_, r)| r)),
            series: series.clone(),
            series_sent_ns: (0..100).map(|i| i * 10_000_000).collect(),
            timed_by: pathlab_probe::rtt::RoundTripClocks {
                kernel: 100,
                user_space: 0,
            },
        }));
        let trips = ping.round_trips().expect("ping has round trips");
        assert_eq!(trips.plateau_s(), Some(0.099));
        assert_eq!(trips.sent_ns[3], 30_000_000);
        assert_eq!(trips.timed_by.describe(), "timed by the kernel");
        assert!(LabOutcome::NotStarted.round_trips().is_none());
    }
}
