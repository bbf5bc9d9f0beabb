//! `pathlab twin check`'s verdict: the same workloads' figures on the real path and on its
//! twin, side by side, each with its error and the bound it is judged by (issue 41's
//! accuracy targets), and whether the twin holds.

use pathlab_probe::owd::OneWayResult;
use pathlab_probe::rtt::RttReport;
use pathlab_probe::tcp::TcpTestReport;
use serde::{Deserialize, Serialize};

/// How long the workloads both paths run take, in turn: an idle round-trip test (the base
/// RTT), bulk TCP up with round trips beside it, the same down, then paced probes each way
/// at low load (loss); and the congestion control bulk TCP runs with on both.
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

/// The workloads' reports of one direction: bulk TCP, the round trips beside it, and the
/// paced probes at low load.
#[derive(Debug, Clone, Copy)]
pub struct DirectionReports<'a> {
    /// Bulk TCP that way.
    pub tcp: &'a TcpTestReport,
    /// Whether its data went from the test's client to its server (its goodput is then
    /// `up_bps`, else `down_bps`).
    pub up: bool,
    /// Round trips during the transfer.
    pub rtt: &'a RttReport,
    /// Paced probes that way.
    pub owd: &'a OneWayResult,
}

/// The nearest-rank `q`-quantile of a round-trip test's round trips, ms (0 with none).
fn rtt_quantile_ms(report: &RttReport, q: f64) -> f64 {
    let mut values: Vec<i64> = report.series.iter().map(|&(_, rtt)| rtt).collect();
    values.sort_unstable();
    pathlab_core::quantile::of_sorted(&values, q).map_or(0.0, |ns| ns as f64 / 1e6)
}

impl DirectionFigures {
    /// The figures of one direction's reports.
    pub fn of(reports: &DirectionReports<'_>) -> DirectionFigures {
        let sequence = &reports.owd.sequence;
        DirectionFigures {
            goodput_bps: if reports.up {
                reports.tcp.up_bps
            } else {
                reports.tcp.down_bps
            },
            loaded_rtt_p50_ms: rtt_quantile_ms(reports.rtt, 0.5),
            loaded_rtt_p95_ms: rtt_quantile_ms(reports.rtt, 0.95),
            loss: sequence.lost as f64 / sequence.sent.max(1) as f64,
        }
    }
}

impl PathFigures {
    /// The figures of an idle round-trip test (its least round trip) and each direction's
    /// reports.
    pub fn of(
        idle: &RttReport,
        up: &DirectionReports<'_>,
        down: &DirectionReports<'_>,
    ) -> PathFigures {
        PathFigures {
            base_rtt_ms: idle.rtt.min_ns as f64 / 1e6,
            up: DirectionFigures::of(up),
            down: DirectionFigures::of(down),
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
    fn loss_below_half_a_percent_is_judged_by_the_floor() {
        let real = path(9.5e6, 80.0, 95.0, 0.001);
        assert!(compare(&real, &path(9.5e6, 80.0, 95.0, 0.004)).holds());
        let lossy = compare(&real, &path(9.5e6, 80.0, 95.0, 0.006));
        assert_eq!(lossy.misses().count(), 2, "{lossy:#?}");
    }
}
