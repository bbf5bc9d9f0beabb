//! `pathlab twin check`'s verdict: the same workloads' figures on the real path and on its
//! twin, side by side, each with its error and the bound it is judged by (issue 41's
//! accuracy targets), and whether the twin holds.

use pathlab_probe::owd::OneWayResult;
use pathlab_probe::rtt::RttReport;
use pathlab_probe::tcp::TcpTestReport;
use serde::{Deserialize, Serialize};

pub mod synthetic;

/// How long the workloads both paths run take, in turn: an idle round-trip test (the base
/// RTT), bulk TCP up with round trips beside it, the same down, then paced probes both ways
/// at once at low load (loss); and the congestion control bulk TCP runs with on both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The idle round trips, seconds.
    pub idle_s: u64,
    /// Bulk TCP each way (and the round trips beside it), seconds.
    pub bulk_s: u64,
    /// Paced probes each way, seconds.
    pub probes_s: u64,
    /// The senders' congestion control, the same on the path and on the twin (never the
    /// kernel's default, which differs between hosts and namespaces: see [`CONGESTION`]).
    pub congestion: String,
}

impl Plan {
    /// Bulk TCP for `bulk_s` (at least 2) with `congestion`, the idle round trips and each
    /// way's probes half as long (at least 1).
    pub fn for_bulk(bulk_s: u64, congestion: &str) -> Plan {
        let bulk_s = bulk_s.max(2);
        Plan {
            idle_s: bulk_s / 2,
            bulk_s,
            probes_s: bulk_s / 2,
            congestion: congestion.to_owned(),
        }
    }
}

/// The congestion control of the check's bulk TCP unless told otherwise: Linux's default,
/// a loss-based one, whose queue is the path's buffer. The kernel's own default is not
/// taken: a host set to BBR (new namespaces inherit it) paced one flow at its bandwidth
/// estimate on the tbf path of `tests/twin.rs`, with no drop and a queue of its own
/// making (about 9 ms of tbf's 50), which depends on the timing of the ACKs more than on
/// the buffer the twin copies (issue 41).
pub const CONGESTION: &str = "cubic";

/// The round trips' interval, ms, and their UDP payload, bytes.
pub const RTT_INTERVAL_MS: u64 = 10;
/// The round trips' payload.
pub const RTT_BYTES: u32 = 64;
/// The paced probes' rate (bits/s of payload) and payload: the twin's low-load phase's.
pub const PROBE_RATE_BPS: u64 = 320_000;
/// Their payload.
pub const PROBE_BYTES: u32 = 200;

/// Goodput of bulk TCP on the twin within this share of the real path's.
pub const GOODPUT_WITHIN: f64 = 0.05;
/// Round trips under load (p50 and p95) within this share.
pub const LOADED_RTT_WITHIN: f64 = 0.10;
/// The base round trip within this, ms.
pub const BASE_RTT_WITHIN_MS: f64 = 0.5;
/// Loss within this share of itself...
pub const LOSS_WITHIN: f64 = 0.20;
/// ...where the real path loses at least this much; below, both must be below it.
pub const LOSS_FLOOR: f64 = 0.005;

/// What the workloads found on one path, one direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DirectionFigures {
    /// Bulk TCP's goodput, bits per second.
    pub goodput_bps: f64,
    /// Round trips beside it: median and 95th percentile, ms.
    pub loaded_rtt_p50_ms: f64,
    /// The 95th percentile.
    pub loaded_rtt_p95_ms: f64,
    /// Loss of paced probes at low load, a fraction.
    pub loss: f64,
}

/// What the workloads found on one path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathFigures {
    /// The least round trip of an idle path, ms.
    pub base_rtt_ms: f64,
    /// From this host to the far one.
    pub up: DirectionFigures,
    /// Back.
    pub down: DirectionFigures,
}

/// The workloads' reports of one direction, kept whole: the verdict's figures come from
/// them ([`DirectionFigures::of`]) and the report draws them, the path's and the twin's
/// overlaid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionRuns {
    /// Bulk TCP that way.
    pub tcp: TcpTestReport,
    /// Whether its data went from the test's client to its server (its goodput is then
    /// `up_bps`, else `down_bps`).
    pub up: bool,
    /// Round trips during the transfer.
    pub rtt: RttReport,
    /// Paced probes that way.
    pub owd: OneWayResult,
}

/// The workloads' reports on one path: the idle round trips and each direction's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathRuns {
    /// The idle round trips (the base RTT).
    pub idle: RttReport,
    /// From this host to the far one.
    pub up: DirectionRuns,
    /// Back.
    pub down: DirectionRuns,
}

/// The round trips of a round-trip test, ms, in arrival order.
pub fn rtts_ms(report: &RttReport) -> Vec<f64> {
    report
        .series
        .iter()
        .map(|&(_, rtt)| rtt as f64 / 1e6)
        .collect()
}

/// The nearest-rank `q`-quantile of a round-trip test's round trips, ms (0 with none).
fn rtt_quantile_ms(report: &RttReport, q: f64) -> f64 {
    let mut values: Vec<i64> = report.series.iter().map(|&(_, rtt)| rtt).collect();
    values.sort_unstable();
    pathlab_core::quantile::of_sorted(&values, q).map_or(0.0, |ns| ns as f64 / 1e6)
}

impl DirectionRuns {
    /// The bulk transfer's streams that way (the client's upload, or its download).
    fn streams(&self) -> &[pathlab_probe::tcp::StreamReport] {
        if self.up {
            &self.tcp.up
        } else {
            &self.tcp.down
        }
    }

    /// Bulk TCP's goodput over time: `(s since the transfer started, bits/s)`, one point
    /// per `window_ns` (at its end) from what the receiver acknowledged, by the sender's
    /// `TCP_INFO` samples, of every stream together; from the receiver's per-interval
    /// counts where the sender kept no samples.
    pub fn goodput_over_time(&self, window_ns: u64) -> Vec<(f64, f64)> {
        let window_ns = window_ns.max(1);
        let streams = self.streams();
        if streams.iter().all(|s| s.samples.is_empty()) {
            return self.interval_goodput();
        }
        let end_ns = streams
            .iter()
            .filter_map(|s| s.samples.last())
            .map(|s| s.at_ns)
            .max()
            .unwrap_or(0);
        // What every stream had acknowledged by `at_ns`, between its samples on either
        // side as a straight line (from none at its start): windows that do not fall on
        // the samples' ticks then read the rate, not the ticks' aliasing.
        let acked_by = |at_ns: u64| -> f64 {
            streams
                .iter()
                .map(|s| acked_between_samples(&s.samples, at_ns))
                .sum()
        };
        (1..=end_ns / window_ns)
            .map(|k| {
                let (start, end) = ((k - 1) * window_ns, k * window_ns);
                let bytes = (acked_by(end) - acked_by(start)).max(0.0);
                (end as f64 / 1e9, bytes * 8e9 / window_ns as f64)
            })
            .collect()
    }

    /// Goodput per interval by the receiver's counts, every stream together.
    fn interval_goodput(&self) -> Vec<(f64, f64)> {
        let interval_ns = self.tcp.interval_ns.max(1);
        let count = self
            .streams()
            .iter()
            .map(|s| s.interval_bytes.len())
            .max()
            .unwrap_or(0);
        (0..count)
            .map(|i| {
                let bytes: u64 = self
                    .streams()
                    .iter()
                    .filter_map(|s| s.interval_bytes.get(i))
                    .sum();
                let end = (i as u64 + 1) * interval_ns;
                (end as f64 / 1e9, bytes as f64 * 8e9 / interval_ns as f64)
            })
            .collect()
    }

    /// The paced probes' one-way delays above the least of them, ms, in arrival order.
    pub fn probe_delays_ms(&self) -> Vec<f64> {
        self.owd
            .owd
            .series
            .iter()
            .map(|&(_, deviation)| deviation as f64 / 1e6)
            .collect()
    }
}

/// The bytes a stream's receiver had acknowledged by `at_ns`, by its sender's samples:
/// linear between the samples on either side, from none at the stream's start, the last
/// sample's after it.
fn acked_between_samples(samples: &[pathlab_probe::tcp::TcpSample], at_ns: u64) -> f64 {
    let after = samples.partition_point(|s| s.at_ns <= at_ns);
    let (t0, a0) = after
        .checked_sub(1)
        .map_or((0, 0), |i| (samples[i].at_ns, samples[i].acked_bytes));
    match samples.get(after) {
        Some(next) if next.at_ns > t0 => {
            let share = (at_ns - t0) as f64 / (next.at_ns - t0) as f64;
            a0 as f64 + share * next.acked_bytes.saturating_sub(a0) as f64
        }
        _ => a0 as f64,
    }
}

impl DirectionFigures {
    /// The figures of one direction's reports.
    pub fn of(runs: &DirectionRuns) -> DirectionFigures {
        let sequence = &runs.owd.sequence;
        DirectionFigures {
            goodput_bps: if runs.up {
                runs.tcp.up_bps
            } else {
                runs.tcp.down_bps
            },
            loaded_rtt_p50_ms: rtt_quantile_ms(&runs.rtt, 0.5),
            loaded_rtt_p95_ms: rtt_quantile_ms(&runs.rtt, 0.95),
            loss: sequence.lost as f64 / sequence.sent.max(1) as f64,
        }
    }
}

impl PathFigures {
    /// The figures of a path's runs: the idle round trips' least, each direction's.
    pub fn of(runs: &PathRuns) -> PathFigures {
        PathFigures {
            base_rtt_ms: runs.idle.rtt.min_ns as f64 / 1e6,
            up: DirectionFigures::of(&runs.up),
            down: DirectionFigures::of(&runs.down),
        }
    }
}

/// One figure compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// What it is, with its unit.
    pub name: String,
    /// On the real path.
    pub real: f64,
    /// On the twin.
    pub twin: f64,
    /// The error as judged: relative (a share) or absolute (in the figure's unit), as
    /// `bound` is.
    pub error: f64,
    /// The bound.
    pub bound: f64,
    /// Whether `error` is relative.
    pub relative: bool,
    /// Whether the twin holds on this figure.
    pub within: bool,
}

impl Row {
    fn relative(name: &str, real: f64, twin: f64, bound: f64) -> Row {
        let error = if real > 0.0 {
            (twin - real) / real
        } else {
            f64::INFINITY
        };
        Row::with_error(name, (real, twin), error, bound, true)
    }

    fn absolute(name: &str, real: f64, twin: f64, bound: f64) -> Row {
        Row::with_error(name, (real, twin), twin - real, bound, false)
    }

    /// The row of figure `name` whose error (relative or not) is `error`: within when its
    /// size is at most `bound`.
    fn with_error(
        name: &str,
        (real, twin): (f64, f64),
        error: f64,
        bound: f64,
        relative: bool,
    ) -> Row {
        Row {
            name: name.to_owned(),
            real,
            twin,
            error,
            bound,
            relative,
            within: error.abs() <= bound,
        }
    }

    /// The error and the bound as printed: `+4.2%` and `10%` where relative, else in the
    /// figure's unit to three decimals.
    pub fn error_and_bound(&self) -> (String, String) {
        if self.relative {
            (
                format!("{:+.1}%", self.error * 100.0),
                format!("{:.0}%", self.bound * 100.0),
            )
        } else {
            (format!("{:+.3}", self.error), format!("{:.3}", self.bound))
        }
    }

    /// Loss: relative where the real path loses at least [`LOSS_FLOOR`]; below it, the
    /// twin must lose less than the floor too (the error is then absolute).
    fn loss(name: &str, real: f64, twin: f64) -> Row {
        if real >= LOSS_FLOOR {
            return Row::relative(name, real, twin, LOSS_WITHIN);
        }
        Row {
            within: twin < LOSS_FLOOR,
            ..Row::absolute(name, real, twin, LOSS_FLOOR)
        }
    }
}

/// The comparison of a real path and its twin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Every figure.
    pub rows: Vec<Row>,
}

impl Comparison {
    /// Whether the twin holds on every figure.
    pub fn holds(&self) -> bool {
        self.rows.iter().all(|r| r.within)
    }

    /// The figures it does not hold on.
    pub fn misses(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| !r.within)
    }

    /// The verdict in words: that the twin holds, or the figures it misses.
    pub fn verdict(&self) -> String {
        if self.holds() {
            "the twin holds on every figure".to_owned()
        } else {
            let missed: Vec<&str> = self.misses().map(|r| r.name.as_str()).collect();
            format!("the twin misses {}", missed.join("; "))
        }
    }
}

/// A whole check, as `pathlab twin check` saves it and `pathlab report` draws it: what
/// was compared and every workload's report on both paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// The real path's far end, as given.
    pub host: String,
    /// The twin's spec up (this host to the far one), as the emulator ran it.
    pub twin_up: String,
    /// Its spec down.
    pub twin_down: String,
    /// Bulk TCP's congestion control, on both paths.
    pub congestion: String,
    /// The workloads on the real path.
    pub real: PathRuns,
    /// The same on the twin.
    pub twin: PathRuns,
}

impl CheckRecord {
    /// The verdict: each figure of the twin against the real path's.
    pub fn comparison(&self) -> Comparison {
        compare(&PathFigures::of(&self.real), &PathFigures::of(&self.twin))
    }
}

/// Compares the twin's figures with the real path's.
pub fn compare(real: &PathFigures, twin: &PathFigures) -> Comparison {
    let mut rows = vec![Row::absolute(
        "base RTT, ms",
        real.base_rtt_ms,
        twin.base_rtt_ms,
        BASE_RTT_WITHIN_MS,
    )];
    for (way, r, t) in [("up", &real.up, &twin.up), ("down", &real.down, &twin.down)] {
        rows.push(Row::relative(
            &format!("goodput {way}, Mbit/s"),
            r.goodput_bps / 1e6,
            t.goodput_bps / 1e6,
            GOODPUT_WITHIN,
        ));
        rows.push(Row::relative(
            &format!("RTT p50 loaded {way}, ms"),
            r.loaded_rtt_p50_ms,
            t.loaded_rtt_p50_ms,
            LOADED_RTT_WITHIN,
        ));
        rows.push(Row::relative(
            &format!("RTT p95 loaded {way}, ms"),
            r.loaded_rtt_p95_ms,
            t.loaded_rtt_p95_ms,
            LOADED_RTT_WITHIN,
        ));
        rows.push(Row::loss(&format!("loss {way}"), r.loss, t.loss));
    }
    Comparison { rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(goodput: f64, p50: f64, p95: f64, loss: f64) -> PathFigures {
        let direction = DirectionFigures {
            goodput_bps: goodput,
            loaded_rtt_p50_ms: p50,
            loaded_rtt_p95_ms: p95,
            loss,
        };
        PathFigures {
            base_rtt_ms: 20.0,
            up: direction,
            down: direction,
        }
    }

    #[test]
    fn a_twin_within_every_bound_holds_and_one_outside_is_named() {
        let real = path(9.5e6, 80.0, 95.0, 0.01);
        let close = PathFigures {
            base_rtt_ms: 20.4,
            ..path(9.1e6, 87.0, 86.0, 0.0085)
        };
        let comparison = compare(&real, &close);
        assert!(comparison.holds(), "{comparison:#?}");
        assert_eq!(comparison.rows.len(), 9);
        // Goodput 6% low, base 0.6 ms off: both named, nothing else.
        let off = PathFigures {
            base_rtt_ms: 20.6,
            ..path(8.9e6, 80.0, 95.0, 0.01)
        };
        let comparison = compare(&real, &off);
        let missed: Vec<&str> = comparison.misses().map(|r| r.name.as_str()).collect();
        assert_eq!(
            missed,
            ["base RTT, ms", "goodput up, Mbit/s", "goodput down, Mbit/s"]
        );
        assert!((comparison.rows[1].error + 0.0631).abs() < 1e-3);
    }

    #[test]
    fn the_runs_figures_are_their_reports_and_goodput_over_time_adds_up_to_the_transfer() {
        use super::synthetic::{Synthetic, SECONDS};
        let runs = Synthetic {
            base_rtt_ms: 20.0,
            goodput_bps: 9.6e6,
            queue_ms: 40.0,
            loss_every: 50,
        }
        .runs();
        let figures = PathFigures::of(&runs);
        assert!((figures.base_rtt_ms - 20.0).abs() < 0.01, "{figures:?}");
        // The queue ramps from 0 to 40 ms: the median round trip is 20 + 20.
        assert!(
            (figures.up.loaded_rtt_p50_ms - 40.0).abs() < 0.2,
            "{figures:?}"
        );
        assert!((figures.up.loss - 0.02).abs() < 1e-9, "{figures:?}");
        let curve = runs.up.goodput_over_time(250_000_000);
        assert_eq!(curve.len() as u64, SECONDS * 4, "{curve:?}");
        for &(t, bps) in &curve {
            assert!((bps - 9.6e6).abs() < 1e3, "{t} s: {bps}");
        }
        // Without the sender's samples, the receiver's counts per second.
        let mut counted = runs.up.clone();
        counted.tcp.up[0].samples.clear();
        let curve = counted.goodput_over_time(250_000_000);
        assert_eq!(curve.len() as u64, SECONDS, "{curve:?}");
        assert!(
            curve.iter().all(|&(_, bps)| (bps - 9.6e6).abs() < 10.0),
            "{curve:?}"
        );
        // The probes' delays above their least: 0 to 1.2 ms.
        let delays = runs.down.probe_delays_ms();
        let most = delays.iter().copied().fold(0.0, f64::max);
        assert!((most - 1.2).abs() < 0.01, "{most}");
    }

    #[test]
    fn loss_below_half_a_percent_is_judged_by_the_floor() {
        let real = path(9.5e6, 80.0, 95.0, 0.001);
        assert!(compare(&real, &path(9.5e6, 80.0, 95.0, 0.004)).holds());
        let lossy = compare(&real, &path(9.5e6, 80.0, 95.0, 0.006));
        assert_eq!(lossy.misses().count(), 2, "{lossy:#?}");
    }
}
