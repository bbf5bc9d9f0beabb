//! Every time series of a lab run, on the run's clock, in seconds.
//!
//! A lab run keeps its data on three clocks: the emulators' recordings count from each
//! emulator's time zero (`clock_zero_unix_ns`), workloads count from their own start
//! (`start_ns` after the run started), and the run itself from `started_unix_ns`. This module
//! puts all of them on one: **seconds since the run started** (negative for what an emulator
//! saw before the run's clock started, e.g. while the topology came up).
//!
//! - emulator instant `at` → `(at + clock_zero_unix_ns − started_unix_ns) / 1e9`;
//! - TCP sample `at_ns` (since the stream started, which is the workload's start) →
//!   `(start_ns + at_ns) / 1e9`; interval `i` of `interval_ns` is plotted at its end,
//!   `(start_ns + (i + 1) × interval_ns) / 1e9`, as iperf3 reports it;
//! - RTT probe → `(start_ns + sent) / 1e9`, `sent` from `RttReport::series_sent_ns` (ns after
//!   the first probe), or `seq × duration / sent` for files written before it existed;
//! - OWD deviation → `(start_ns + received − first received) / 1e9`.
//!
//! The queue delay of a packet is the time it waited in the bottleneck queue: `dequeued −
//! arrived`. Impairments (loss, duplication, corruption) act instantly on arrival, so a
//! packet's arrival at the link is its arrival at the queue, and `dequeued` is when its
//! transmission began (`pathlab_core::record::PacketRecord`). It excludes serialization
//! (`transmitted − dequeued`) and the propagation delay and jitter after the bottleneck,
//! which `departed − arrived − delay` would mix in. It is plotted at the packet's arrival,
//! the instant a probe sent then would have met that queue.

use std::collections::BTreeMap;

use pathlab_core::quantile;
use pathlab_core::spec::LinkSpec;
use pathlab_core::verdict::DropReason;

use crate::lab::{LabOutcome, LabRun, LabWorkload};
use crate::recording::{Recording, RecordingLine};

/// What a series measures, and so its CSV column, unit and plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Packets waiting in a bottleneck queue (the emulator's periodic sample).
    QueuePackets,
    /// How long each packet waited in a bottleneck queue, seconds.
    QueueDelay,
    /// Packets dropped on a link direction so far (any reason), at each drop.
    Drops,
    /// Bits per second a link direction's bottleneck sent on, per interval (the emulator's
    /// truth of what the link carried).
    DeliveredRate,
    /// Round-trip time of each probe, seconds.
    Rtt,
    /// A TCP sender's congestion window, segments.
    Cwnd,
    /// A TCP sender's slow-start threshold, segments (the "infinite" initial value left out).
    Ssthresh,
    /// A TCP sender's smoothed RTT, seconds.
    Srtt,
    /// Segments a TCP sender retransmitted so far.
    Retransmissions,
    /// What a TCP stream's receiver got per interval, bits per second.
    Throughput,
    /// One-way delay deviation of each probe from the recent minimum, seconds.
    OwdDeviation,
}

impl Metric {
    /// Every metric, in the order figures and files list them.
    pub const ALL: [Metric; 11] = [
        Metric::QueuePackets,
        Metric::QueueDelay,
        Metric::Drops,
        Metric::DeliveredRate,
        Metric::Rtt,
        Metric::Cwnd,
        Metric::Ssthresh,
        Metric::Srtt,
        Metric::Retransmissions,
        Metric::Throughput,
        Metric::OwdDeviation,
    ];

    /// The value's CSV column, with its unit.
    pub fn column(self) -> &'static str {
        match self {
            Metric::QueuePackets => "queue_packets",
            Metric::QueueDelay => "queue_delay_s",
            Metric::Drops => "dropped_packets_total",
            Metric::DeliveredRate => "delivered_bps",
            Metric::Rtt => "rtt_s",
            Metric::Cwnd => "cwnd_segments",
            Metric::Ssthresh => "ssthresh_segments",
            Metric::Srtt => "srtt_s",
            Metric::Retransmissions => "retransmitted_segments_total",
            Metric::Throughput => "throughput_bps",
            Metric::OwdDeviation => "owd_deviation_s",
        }
    }

    /// A short name for file names: `queue-packets`, `rtt`, ...
    pub fn slug(self) -> &'static str {
        match self {
            Metric::QueuePackets => "queue-packets",
            Metric::QueueDelay => "queue-delay",
            Metric::Drops => "drops",
            Metric::DeliveredRate => "delivered-rate",
            Metric::Rtt => "rtt",
            Metric::Cwnd => "cwnd",
            Metric::Ssthresh => "ssthresh",
            Metric::Srtt => "srtt",
            Metric::Retransmissions => "retransmissions",
            Metric::Throughput => "throughput",
            Metric::OwdDeviation => "owd-deviation",
        }
    }

    /// What it is, for titles.
    pub fn title(self) -> &'static str {
        match self {
            Metric::QueuePackets => "Queue length",
            Metric::QueueDelay => "Queue delay per packet",
            Metric::Drops => "Drops",
            Metric::DeliveredRate => "Delivered rate per link direction",
            Metric::Rtt => "RTT per probe",
            Metric::Cwnd => "Congestion window",
            Metric::Ssthresh => "Slow-start threshold",
            Metric::Srtt => "TCP smoothed RTT",
            Metric::Retransmissions => "Retransmissions",
            Metric::Throughput => "Throughput per interval",
            Metric::OwdDeviation => "One-way delay deviation",
        }
    }

    /// The axis label of the plotted value, with its unit.
    pub fn axis(self) -> &'static str {
        match self {
            Metric::QueuePackets => "queue (packets)",
            Metric::QueueDelay => "queue delay (ms)",
            Metric::Drops => "dropped packets (total)",
            Metric::DeliveredRate => "delivered (Mbit/s)",
            Metric::Rtt => "RTT (ms)",
            Metric::Cwnd | Metric::Ssthresh => "segments",
            Metric::Srtt => "srtt (ms)",
            Metric::Retransmissions => "retransmitted segments (total)",
            Metric::Throughput => "throughput (Mbit/s)",
            Metric::OwdDeviation => "OWD deviation (ms)",
        }
    }

    /// Factor from the CSV unit to the plotted one (seconds to ms, bit/s to Mbit/s).
    pub fn plot_scale(self) -> f64 {
        match self {
            Metric::QueueDelay | Metric::Rtt | Metric::Srtt | Metric::OwdDeviation => 1e3,
            Metric::Throughput | Metric::DeliveredRate => 1e-6,
            _ => 1.0,
        }
    }
}

/// One time series: `(seconds since the run started, value in the metric's CSV unit)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// What it measures.
    pub metric: Metric,
    /// Of what: a link direction (`r1->h2`), a workload (`probes`) or a TCP stream
    /// (`bulk up 0`).
    pub subject: String,
    /// The points, in time order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A name for its files: `rtt-probes`, `queue-packets-r1-h2`.
    pub fn slug(&self) -> String {
        format!("{}-{}", self.metric.slug(), slug(&self.subject))
    }

    /// The series as CSV: a header `time_s,<column>` ([`Metric::column`]), then one row per
    /// point, the time to the nanosecond and the value as it was computed.
    pub fn csv(&self) -> String {
        use std::fmt::Write as _;
        let mut csv = format!("time_s,{}\n", self.metric.column());
        for &(time_s, value) in &self.points {
            let _ = writeln!(csv, "{time_s:.9},{value}");
        }
        csv
    }
}

/// `text` with everything but ASCII letters, digits, `.` and `_` turned into single dashes,
/// without leading or trailing dashes and dots: safe as a file name.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    // No leading dot: a slug is never `..` or a hidden file.
    let trimmed = out.trim_matches(|c| c == '-' || c == '.');
    if trimmed.is_empty() {
        "x".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// What an emulator's recording says about one direction of a link, summed up after the
/// run (the emulator's live counters are `pathlab_emulator::emulator::DirectionCounters`).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedDirectionSummary {
    /// `A->B` (the link's forward direction) or `B->A`.
    pub subject: String,
    /// The direction's spec at the start.
    pub spec: String,
    /// Whether it has a bottleneck (a rate, so a queue).
    pub has_queue: bool,
    /// Packets that arrived.
    pub packets: u64,
    /// Packets dropped, by reason name (`loss`, `queue-full`, ...).
    pub drops: BTreeMap<&'static str, u64>,
    /// Packets marked CE.
    pub ce_marked: u64,
    /// Queue samples, packets: largest and median (`None` without samples).
    pub queue_max_packets: Option<u32>,
    /// Median of the queue samples, packets.
    pub queue_median_packets: Option<u32>,
    /// Queue delay of the packets that went through the queue, seconds: median, 99th
    /// percentile, largest.
    pub queue_delay_p50_s: Option<f64>,
    /// 99th percentile of the queue delay.
    pub queue_delay_p99_s: Option<f64>,
    /// Largest queue delay.
    pub queue_delay_max_s: Option<f64>,
}

impl RecordedDirectionSummary {
    /// Packets dropped for any reason.
    pub fn drops_total(&self) -> u64 {
        self.drops.values().sum()
    }
}

/// Names a link direction: `r1->h2` for link `r1-h2` direction 0, `h2->r1` for 1 (or
/// `NAME forward` when the name does not split in two nodes).
pub fn direction_subject(link: &str, dir: u8) -> String {
    let parts: Vec<&str> = link.split('-').collect();
    match (parts.as_slice(), dir) {
        ([a, b], 0) => format!("{a}->{b}"),
        ([a, b], _) => format!("{b}->{a}"),
        (_, 0) => format!("{link} forward"),
        (_, _) => format!("{link} reverse"),
    }
}

/// Whether a spec has a bottleneck queue (a rate or a packet rate).
fn spec_has_rate(spec: &str) -> bool {
    LinkSpec::parse(spec).is_ok_and(|s| s.has_bottleneck())
}

/// The series and statistics of one link's recording, on the run's clock.
pub fn link_series(
    run: &LabRun,
    link: &str,
    recording: &Recording,
) -> Result<(Vec<Series>, Vec<RecordedDirectionSummary>), TooManyIntervals> {
    let Some(header) = &recording.header else {
        return Ok((Vec::new(), Vec::new()));
    };
    // In integer nanoseconds, then one division: the seconds are the nearest double.
    let offset_ns = i128::from(header.clock_zero_unix_ns) - i128::from(run.started_unix_ns);
    let run_s =
        |at: pathlab_core::time::Instant| (i128::from(at.as_nanos()) + offset_ns) as f64 / 1e9;
    let mut series = Vec::new();
    let mut stats = Vec::new();
    for (index, info) in header.directions.iter().enumerate() {
        let Ok(dir) = u8::try_from(index) else {
            break;
        };
        let subject = direction_subject(link, dir);
        let later_rate = recording.lines.iter().any(|line| {
            matches!(line, RecordingLine::Spec { dir: d, spec, .. } if *d == dir && spec_has_rate(spec))
        });
        let mut packets = 0;
        let mut ce_marked = 0;
        let mut drops = BTreeMap::new();
        let mut drop_points = Vec::new();
        let mut delay_points = Vec::new();
        // (when it left the queue, frame bytes) of every packet the bottleneck sent.
        let mut sent = Vec::new();
        for record in recording.packets(dir) {
            packets += 1;
            ce_marked += u64::from(record.ce_marked);
            if let Some((at, reason)) = record.dropped {
                *drops.entry(DropReason::name(reason)).or_insert(0) += 1;
                drop_points.push(run_s(at));
            }
            if let Some(dequeued) = record.dequeued {
                let waited = dequeued
                    .as_nanos()
                    .saturating_sub(record.arrived.as_nanos());
                delay_points.push((run_s(record.arrived), waited as f64 / 1e9));
                sent.push((run_s(dequeued), record.len_bytes));
            }
        }
        let has_queue = spec_has_rate(&info.spec) || later_rate || !delay_points.is_empty();
        let queue_points: Vec<(f64, f64)> = recording
            .queue_samples(dir)
            .map(|(at, packets, _)| (run_s(at), f64::from(packets)))
            .collect();
        let mut queue_sorted: Vec<u32> = recording.queue_samples(dir).map(|q| q.1).collect();
        queue_sorted.sort_unstable();
        let mut delays: Vec<f64> = delay_points.iter().map(|p| p.1).collect();
        delays.sort_by(f64::total_cmp);
        // Records are written when a packet's fate is known, so sort by the plotted time.
        delay_points.sort_by(|a, b| a.0.total_cmp(&b.0));
        drop_points.sort_by(f64::total_cmp);
        stats.push(RecordedDirectionSummary {
            subject: subject.clone(),
            spec: info.spec.clone(),
            has_queue,
            packets,
            drops,
            ce_marked,
            queue_max_packets: has_queue.then(|| queue_sorted.last().copied()).flatten(),
            queue_median_packets: has_queue
                .then(|| quantile::of_sorted(&queue_sorted, 0.5))
                .flatten(),
            queue_delay_p50_s: quantile::of_sorted(&delays, 0.5),
            queue_delay_p99_s: quantile::of_sorted(&delays, 0.99),
            queue_delay_max_s: delays.last().copied(),
        });
        if has_queue {
            series.push(Series {
                metric: Metric::QueuePackets,
                subject: subject.clone(),
                points: queue_points,
            });
            series.push(Series {
                metric: Metric::QueueDelay,
                subject: subject.clone(),
                points: delay_points,
            });
            series.push(Series {
                metric: Metric::DeliveredRate,
                subject: subject.clone(),
                points: delivered_rate(&mut sent, DELIVERED_RATE_INTERVAL_S).ok_or_else(|| {
                    TooManyIntervals {
                        link: link.to_owned(),
                        subject: subject.clone(),
                        span_s: sent.last().map_or(0.0, |l| l.0) - sent[0].0,
                    }
                })?,
            });
        }
        if has_queue || !drop_points.is_empty() {
            series.push(Series {
                metric: Metric::Drops,
                subject,
                points: drop_points
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (t, (i + 1) as f64))
                    .collect(),
            });
        }
    }
    Ok((series, stats))
}

/// The interval a link direction's delivered rate is averaged over.
pub const DELIVERED_RATE_INTERVAL_S: f64 = 0.5;

/// The most intervals a link direction's delivered rate is counted in: 500,000 s (almost
/// six days) of [`DELIVERED_RATE_INTERVAL_S`], 8 MB of counters. The intervals span what
/// a recording's timestamps say, so without a bound a file with one packet 2^63 ns after
/// another asks for 1.8e10 of them (147 GB).
pub const MAX_DELIVERED_RATE_INTERVALS: usize = 1_000_000;

/// A link direction whose packets left its queue over more time than a report counts what
/// it delivered in ([`MAX_DELIVERED_RATE_INTERVALS`]): a damaged or crafted recording.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "link {link}, direction {subject}: its packets left the queue over {span_s:.0} s, more \
     than the {max_s:.0} s ({MAX_DELIVERED_RATE_INTERVALS} intervals of \
     {DELIVERED_RATE_INTERVAL_S} s) a report counts what a link delivered in; is the \
     recording damaged?",
    max_s = MAX_DELIVERED_RATE_INTERVALS as f64 * DELIVERED_RATE_INTERVAL_S
)]
pub struct TooManyIntervals {
    /// The link.
    pub link: String,
    /// The direction ([`direction_subject`]).
    pub subject: String,
    /// From the first packet that left the queue to the last, seconds.
    pub span_s: f64,
}

/// Bits per second of `sent` (seconds, frame bytes) in consecutive intervals of
/// `interval_s` from the first packet's (each at the interval's end; empty intervals
/// between busy ones at 0); `None` if that takes more than
/// [`MAX_DELIVERED_RATE_INTERVALS`].
fn delivered_rate(sent: &mut [(f64, u32)], interval_s: f64) -> Option<Vec<(f64, f64)>> {
    sent.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (Some(&(first, _)), Some(&(last, _))) = (sent.first(), sent.last()) else {
        return Some(Vec::new());
    };
    // In floating point: a span of 1e300 s is no usize.
    let intervals = ((last - first) / interval_s).floor() + 1.0;
    if intervals > MAX_DELIVERED_RATE_INTERVALS as f64 {
        return None;
    }
    let mut bins: Vec<u64> = vec![0; intervals as usize];
    for &(at, len_bytes) in sent.iter() {
        let bin = ((at - first) / interval_s) as usize;
        bins[bin] += u64::from(len_bytes);
    }
    Some(
        bins.iter()
            .enumerate()
            .map(|(i, &bytes)| {
                (
                    first + (i + 1) as f64 * interval_s,
                    bytes as f64 * 8.0 / interval_s,
                )
            })
            .collect(),
    )
}

use pathlab_diagnose::diagnosis::INFINITE_SSTHRESH;

/// The series of the run's workloads (RTT, TCP, OWD), on the run's clock.
pub fn workload_series(run: &LabRun) -> Vec<Series> {
    let mut out = Vec::new();
    for workload in &run.workloads {
        match &workload.outcome {
            LabOutcome::Rtt(_) | LabOutcome::Ping(_) => out.push(round_trip_series(workload)),
            LabOutcome::Owd(result) => out.push(Series {
                metric: Metric::OwdDeviation,
                subject: workload.name.clone(),
                points: result
                    .owd
                    .series
                    .iter()
                    .map(|&(received_ns, deviation_ns)| {
                        (
                            run_seconds(workload, received_ns as f64),
                            deviation_ns as f64 / 1e9,
                        )
                    })
                    .collect(),
            }),
            LabOutcome::Tcp(report) => out.extend(tcp_series(workload, report)),
            LabOutcome::Blocks(_)
            | LabOutcome::Command { .. }
            | LabOutcome::Failed(_)
            | LabOutcome::NotStarted => {}
        }
    }
    out
}

/// A time `ns` after `workload` started, in seconds on the run's clock.
fn run_seconds(workload: &LabWorkload, ns: f64) -> f64 {
    (workload.start_ns as f64 + ns) / 1e9
}

/// The RTT of every reply of an RTT or ping workload against when its request was sent
/// (recorded, or spread evenly over the workload by sequence number in older results), in
/// time order.
fn round_trip_series(workload: &LabWorkload) -> Series {
    let report = workload.outcome.round_trips().expect("rtt or ping");
    let timed = report.sent_ns.len() == report.series.len();
    let interval_ns = if report.sent > 0 {
        workload.duration_ns as f64 / report.sent as f64
    } else {
        0.0
    };
    let mut points: Vec<(f64, f64)> = report
        .series
        .iter()
        .enumerate()
        .map(|(i, &(seq, rtt_ns))| {
            let sent_ns = if timed {
                report.sent_ns[i] as f64
            } else {
                seq as f64 * interval_ns
            };
            (run_seconds(workload, sent_ns), rtt_ns as f64 / 1e9)
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    Series {
        metric: Metric::Rtt,
        subject: workload.name.clone(),
        points,
    }
}

/// Every stream of a TCP workload: its cwnd, ssthresh (while finite), smoothed RTT and
/// retransmissions from TCP_INFO, and its throughput per interval. A lone stream is named
/// by the workload, several by `NAME up|down INDEX`.
fn tcp_series(workload: &LabWorkload, report: &pathlab_probe::tcp::TcpTestReport) -> Vec<Series> {
    let at = |ns: f64| run_seconds(workload, ns);
    let streams: Vec<(&str, &pathlab_probe::tcp::StreamReport)> = report
        .up
        .iter()
        .map(|s| ("up", s))
        .chain(report.down.iter().map(|s| ("down", s)))
        .collect();
    let single = streams.len() == 1;
    let mut out = Vec::new();
    for (direction, stream) in streams {
        let subject = if single {
            workload.name.clone()
        } else {
            format!("{} {direction} {}", workload.name, stream.index)
        };
        let samples = &stream.samples;
        let mut push = |metric, points: Vec<(f64, f64)>| {
            out.push(Series {
                metric,
                subject: subject.clone(),
                points,
            });
        };
        push(
            Metric::Cwnd,
            samples
                .iter()
                .map(|s| (at(s.at_ns as f64), f64::from(s.cwnd)))
                .collect(),
        );
        push(
            Metric::Ssthresh,
            samples
                .iter()
                .filter(|s| s.ssthresh < INFINITE_SSTHRESH)
                .map(|s| (at(s.at_ns as f64), f64::from(s.ssthresh)))
                .collect(),
        );
        push(
            Metric::Srtt,
            samples
                .iter()
                .map(|s| (at(s.at_ns as f64), f64::from(s.srtt_us) / 1e6))
                .collect(),
        );
        push(
            Metric::Retransmissions,
            samples
                .iter()
                .map(|s| (at(s.at_ns as f64), f64::from(s.retrans_segments)))
                .collect(),
        );
        if report.interval_ns > 0 {
            let interval = report.interval_ns as f64;
            push(
                Metric::Throughput,
                stream
                    .interval_bytes
                    .iter()
                    .enumerate()
                    .map(|(i, &bytes)| {
                        (
                            at((i + 1) as f64 * interval),
                            bytes as f64 * 8.0 * 1e9 / interval,
                        )
                    })
                    .collect(),
            );
        }
    }
    out
}

/// Every series of a run: its links' (from their recordings, by link name) and its
/// workloads', in [`Metric::ALL`] order; and the statistics of every link direction.
pub fn run_series(
    run: &LabRun,
    recordings: &[(String, Recording)],
) -> Result<(Vec<Series>, Vec<RecordedDirectionSummary>), TooManyIntervals> {
    let mut series = Vec::new();
    let mut stats = Vec::new();
    for (link, recording) in recordings {
        let (s, d) = link_series(run, link, recording)?;
        series.extend(s);
        stats.extend(d);
    }
    series.extend(workload_series(run));
    // Stable: within a metric, links and workloads keep the run's order.
    series.sort_by_key(|s| s.metric);
    Ok((series, stats))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lab::{LabLink, LabWorkload, PathTheory};
    use crate::recording::{DirectionInfo, RecordingHeader, RECORDING_MAGIC, RECORDING_VERSION};
    use pathlab_core::packet::Ecn;
    use pathlab_core::record::PacketRecord;
    use pathlab_core::time::Instant;
    use pathlab_probe::rtt::{OffsetBasis, Percentiles, RoundTripClocks, RttReport};
    use pathlab_probe::tcp::{StreamReport, TcpSample, TcpTestReport};

    /// The run starts at this unix time.
    pub const STARTED_UNIX_NS: u64 = 1_700_000_000_000_000_000;
    /// The emulator's clock zero: 0.25 s before the run started.
    pub const CLOCK_ZERO_UNIX_NS: u64 = STARTED_UNIX_NS - 250_000_000;

    pub fn percentiles(ns: u64) -> Percentiles {
        Percentiles {
            min_ns: ns,
            p50_ns: ns,
            p90_ns: ns,
            p99_ns: ns,
            max_ns: ns,
            mean_ns: ns as f64,
        }
    }

    /// A two-second run: a TCP flow `bulk` from t = 0 and RTT probes `probes` from t = 0.5 s
    /// (every 100 ms, RTT 20 ms + 1 ms x seq), through link `r1-h2` whose forward direction
    /// has a 10 Mbit/s bottleneck.
    pub fn synthetic_run() -> LabRun {
        let path = PathTheory {
            base_rtt_s: 0.02,
            bottleneck_bps: Some(10e6),
            queue_packets: Some(10),
            plateau_rtt_s: Some(0.032112),
            loss: Some(0.01),
            mathis_bps: Some(crate::lab::mathis_bps(1448.0, 0.02, 0.01)),
            sawtooth_period_s: None,
        };
        let tcp = synthetic_tcp_report();
        let rtt = synthetic_rtt_report();
        LabRun {
            name: "synthetic".into(),
            description: "a <made-up> run & its \"data\"".into(),
            spec: String::new(),
            kernel: "Linux test".into(),
            started_unix_ns: STARTED_UNIX_NS,
            duration_ns: 2_000_000_000,
            interrupted: false,
            scheduling: None,
            parameters: vec![("queue".into(), "10".into())],
            links: vec![LabLink {
                name: "r1-h2".into(),
                forward: "delay 5ms rate 10mbit limit 10".into(),
                reverse: "delay 5ms".into(),
                recording: Some("link-r1-h2.jsonl".into()),
                lateness: Vec::new(),
                changes: Vec::new(),
                underlay: Vec::new(),
            }],
            workloads: vec![
                LabWorkload {
                    name: "bulk".into(),
                    from: "h1".into(),
                    to: Some("h2".into()),
                    start_ns: 0,
                    duration_ns: 2_000_000_000,
                    path: Some(path),
                    outcome: LabOutcome::Tcp(Box::new(tcp)),
                    inspect: None,
                },
                LabWorkload {
                    name: "probes".into(),
                    from: "h1".into(),
                    to: Some("h2".into()),
                    start_ns: 500_000_000,
                    duration_ns: 1_000_000_000,
                    path: Some(path),
                    outcome: LabOutcome::Rtt(Box::new(rtt)),
                    inspect: None,
                },
            ],
        }
    }

    /// The synthetic run's TCP flow: one stream up for 2 s, 9.5 Mbit/s, its cwnd growing by
    /// one every 200 ms (ssthresh 7 from the sixth sample, one retransmission from then).
    fn synthetic_tcp_report() -> TcpTestReport {
        let samples = (0..10u32)
            .map(|i| TcpSample {
                at_ns: u64::from(i) * 200_000_000,
                cwnd: 10 + i,
                ssthresh: if i < 5 { u32::MAX >> 1 } else { 7 },
                srtt_us: 20_000 + i * 1000,
                retrans_segments: i / 5,
                mss: 1448,
                ..TcpSample::default()
            })
            .collect();
        TcpTestReport {
            interval_ns: 500_000_000,
            up: vec![StreamReport {
                index: 0,
                interval_bytes: vec![500_000, 625_000, 625_000, 625_000],
                bytes: 2_375_000,
                receive_ns: 2_000_000_000,
                samples,
                starved: None,
            }],
            down: vec![],
            up_bps: 9.5e6,
            down_bps: 0.0,
            client_cpu_s: 0.1,
            server_cpu_s: 0.1,
        }
    }

    /// The synthetic run's RTT probes: 10 sent every 100 ms, all answered, the RTT of probe
    /// `seq` 20 ms + 1 ms x seq, timed by the kernel.
    fn synthetic_rtt_report() -> RttReport {
        RttReport {
            sent: 10,
            reflector_received: 10,
            reflector_dropped: 0,
            replies: 10,
            lost_up: 0,
            lost_down: 0,
            duplicates: 0,
            rtt: percentiles(25_000_000),
            up: percentiles(12_000_000),
            down: percentiles(12_000_000),
            clock_offset_ns: 0,
            offset_basis: OffsetBasis::ClocksAgree,
            send_error: percentiles(1000),
            series: (0..10)
                .map(|seq| (seq, 20_000_000 + seq as i64 * 1_000_000))
                .collect(),
            series_sent_ns: (0..10).map(|seq| seq * 100_000_000).collect(),
            timed_by: RoundTripClocks {
                kernel: 10,
                user_space: 0,
            },
        }
    }

    fn packet(id: u64, arrived_ns: u64, dequeued_ns: Option<u64>, dropped: bool) -> PacketRecord {
        PacketRecord {
            id,
            tag: 0,
            flow: 1,
            len_bytes: 1514,
            arrived: Instant::from_nanos(arrived_ns),
            ecn_on_arrival: Ecn::NotEct,
            queue_len_on_arrival: Some(0),
            dequeued: dequeued_ns.map(Instant::from_nanos),
            transmitted: dequeued_ns.map(|d| Instant::from_nanos(d + 1_211_200)),
            departed: dequeued_ns.map(|d| Instant::from_nanos(d + 6_211_200)),
            dropped: dropped.then_some((Instant::from_nanos(arrived_ns), DropReason::QueueFull)),
            duplicate_of: None,
            ce_marked: false,
            corrupted: false,
            sent: None,
        }
    }

    /// The recording of `r1-h2`: queue samples every 10 ms from the emulator's zero (the
    /// one at 1.25 s on its clock has 7 packets: 1.0 s on the run's), two packets that
    /// waited 3 ms and 5 ms, and a drop.
    pub fn synthetic_recording() -> Recording {
        let header = RecordingHeader {
            magic: RECORDING_MAGIC.into(),
            version: RECORDING_VERSION,
            pathlab_version: "test".into(),
            command: vec![],
            clock_zero_unix_ns: CLOCK_ZERO_UNIX_NS,
            directions: vec![
                DirectionInfo {
                    from: "a".into(),
                    to: "b".into(),
                    spec: "delay 5ms rate 10mbit limit 10".into(),
                },
                DirectionInfo {
                    from: "b".into(),
                    to: "a".into(),
                    spec: "delay 5ms".into(),
                },
            ],
            queue_sample_interval_ns: 10_000_000,
        };
        let mut lines = Vec::new();
        for i in 0..200u64 {
            for dir in 0..2 {
                lines.push(RecordingLine::Queue {
                    dir,
                    at: Instant::from_nanos(i * 10_000_000),
                    packets: if dir == 0 && i == 125 {
                        7
                    } else {
                        u32::from(dir == 0)
                    },
                    bytes: 0,
                });
            }
        }
        // Written out of time order, as the emulator does when a later arrival finishes first.
        lines.push(RecordingLine::Packet {
            dir: 0,
            record: packet(2, 1_300_000_000, Some(1_305_000_000), false),
        });
        lines.push(RecordingLine::Packet {
            dir: 0,
            record: packet(1, 1_250_000_000, Some(1_253_000_000), false),
        });
        lines.push(RecordingLine::Packet {
            dir: 0,
            record: packet(3, 1_400_000_000, None, true),
        });
        lines.push(RecordingLine::Packet {
            dir: 1,
            record: PacketRecord {
                queue_len_on_arrival: None,
                ..packet(1, 1_260_000_000, None, false)
            },
        });
        Recording {
            header: Some(header),
            lines,
        }
    }

    fn find<'a>(series: &'a [Series], metric: Metric, subject: &str) -> &'a Series {
        series
            .iter()
            .find(|s| s.metric == metric && s.subject == subject)
            .unwrap_or_else(|| panic!("no {metric:?} of {subject}"))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_direction_delivers_what_left_its_queue_per_interval() {
        let run = synthetic_run();
        let (series, _) = run_series(&run, &[("r1-h2".into(), synthetic_recording())]).unwrap();
        let rate = find(&series, Metric::DeliveredRate, "r1->h2");
        // Two 1514-byte frames left the queue at 1.003 and 1.055 s (the drop sent nothing):
        // one interval from the first, at its end, 2 x 1514 x 8 bits in 0.5 s.
        assert_eq!(rate.points.len(), 1, "{:?}", rate.points);
        assert!(close(rate.points[0].0, 1.003 + DELIVERED_RATE_INTERVAL_S));
        assert!(close(rate.points[0].1, 2.0 * 1514.0 * 8.0 / 0.5));
        let mut sent = vec![(2.2, 1000), (0.1, 500), (0.3, 500)];
        assert_eq!(
            delivered_rate(&mut sent, 1.0),
            Some(vec![(1.1, 8000.0), (2.1, 0.0), (3.1, 8000.0)]),
            "an idle interval between busy ones is 0"
        );
        assert!(
            series
                .iter()
                .all(|s| s.metric != Metric::DeliveredRate || s.subject != "h2->r1"),
            "a direction without a rate has no bottleneck to count"
        );
    }

    #[test]
    fn a_recording_asking_for_more_rate_intervals_than_the_bound_is_refused() {
        let run = synthetic_run();
        // The synthetic packets left the queue at 1.253 and 1.305 s (emulator clock); one
        // more 2^62 ns later would take 9.2e9 intervals of 0.5 s, 74 GB of counters.
        let late = |dequeued_ns: u64| {
            let mut recording = synthetic_recording();
            recording.lines.push(RecordingLine::Packet {
                dir: 0,
                record: packet(4, dequeued_ns - 1_000_000, Some(dequeued_ns), false),
            });
            recording
        };
        let error = run_series(&run, &[("r1-h2".into(), late(1 << 62))]).unwrap_err();
        assert_eq!(
            (error.link.as_str(), error.subject.as_str()),
            ("r1-h2", "r1->h2")
        );
        assert!((error.span_s - 4.611_686e9).abs() < 1e3, "{}", error.span_s);
        let message = error.to_string();
        assert!(
            message.contains("more than the 500000 s (1000000 intervals of 0.5 s)"),
            "{message}"
        );
        // At the bound: the last interval is the 1,000,000th.
        let last_allowed_ns = 1_253_000_000 + 499_999_999_000_000;
        let (series, _) = run_series(&run, &[("r1-h2".into(), late(last_allowed_ns))]).unwrap();
        let rate = find(&series, Metric::DeliveredRate, "r1->h2");
        assert_eq!(rate.points.len(), MAX_DELIVERED_RATE_INTERVALS);
        assert!(run_series(
            &run,
            &[("r1-h2".into(), late(last_allowed_ns + 1_000_000_000))]
        )
        .is_err());
    }

    #[test]
    fn emulator_instants_land_on_the_runs_clock() {
        let run = synthetic_run();
        let (series, stats) = run_series(&run, &[("r1-h2".into(), synthetic_recording())]).unwrap();
        let queue = find(&series, Metric::QueuePackets, "r1->h2");
        // Emulator zero is 0.25 s before the run: its first sample is at -0.25 s on the run's
        // clock, and the 7-packet sample taken 1.25 s after its zero is at 1.0 s.
        assert!(close(queue.points[0].0, -0.25), "{:?}", queue.points[0]);
        let seven: Vec<_> = queue.points.iter().filter(|p| p.1 == 7.0).collect();
        assert_eq!(seven.len(), 1);
        assert!(close(seven[0].0, 1.0), "{seven:?}");
        // Queue delay = dequeued - arrived, at arrival, sorted by time.
        let delay = find(&series, Metric::QueueDelay, "r1->h2");
        assert_eq!(delay.points.len(), 2);
        assert!(close(delay.points[0].0, 1.0) && close(delay.points[0].1, 0.003));
        assert!(close(delay.points[1].0, 1.05) && close(delay.points[1].1, 0.005));
        let drops = find(&series, Metric::Drops, "r1->h2");
        assert_eq!(drops.points.len(), 1);
        assert!(close(drops.points[0].0, 1.15) && drops.points[0].1 == 1.0);
        // The reverse direction has no rate, so no queue series.
        assert!(!series.iter().any(|s| s.subject == "h2->r1"));
        assert_eq!(stats.len(), 2);
        assert!(stats[0].has_queue && !stats[1].has_queue);
        assert_eq!(stats[0].queue_max_packets, Some(7));
        assert_eq!(stats[0].queue_median_packets, Some(1));
        assert_eq!(stats[0].drops_total(), 1);
        assert_eq!(stats[0].drops.get("queue-full"), Some(&1));
        assert_eq!(stats[1].queue_max_packets, None);
    }

    #[test]
    fn workload_series_start_at_the_workloads_start() {
        let run = synthetic_run();
        let series = workload_series(&run);
        let rtt = find(&series, Metric::Rtt, "probes");
        assert_eq!(rtt.points.len(), 10);
        // Probe 3 was sent 300 ms after the first, which left 0.5 s into the run.
        assert!(close(rtt.points[3].0, 0.8) && close(rtt.points[3].1, 0.023));
        let cwnd = find(&series, Metric::Cwnd, "bulk");
        assert!(close(cwnd.points[2].0, 0.4) && cwnd.points[2].1 == 12.0);
        // The "infinite" ssthresh before the first loss is left out.
        let ssthresh = find(&series, Metric::Ssthresh, "bulk");
        assert_eq!(ssthresh.points.len(), 5);
        assert!(close(ssthresh.points[0].0, 1.0) && ssthresh.points[0].1 == 7.0);
        let srtt = find(&series, Metric::Srtt, "bulk");
        assert!(close(srtt.points[1].1, 0.021));
        // Interval i is at its end: 625 kB in 0.5 s is 10 Mbit/s.
        let throughput = find(&series, Metric::Throughput, "bulk");
        assert!(close(throughput.points[0].0, 0.5) && close(throughput.points[0].1, 8e6));
        assert!(close(throughput.points[3].0, 2.0) && close(throughput.points[3].1, 10e6));
    }

    #[test]
    fn old_rtt_results_place_probes_by_sequence_number() {
        let mut run = synthetic_run();
        if let LabOutcome::Rtt(report) = &mut run.workloads[1].outcome {
            report.series_sent_ns.clear();
        }
        let series = workload_series(&run);
        let rtt = find(&series, Metric::Rtt, "probes");
        // 10 sent in 1 s: seq 4 went out 0.4 s after the workload started at 0.5 s.
        assert!(close(rtt.points[4].0, 0.9), "{:?}", rtt.points[4]);
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("r1->h2"), "r1-h2");
        assert_eq!(slug("bulk up 0"), "bulk-up-0");
        assert_eq!(slug("../x"), "x");
        assert_eq!(slug("0.5"), "0.5");
        assert_eq!(slug("//"), "x");
        assert_eq!(direction_subject("r1-h2", 1), "h2->r1");
        assert_eq!(direction_subject("a-b-c", 0), "a-b-c forward");
    }
}
