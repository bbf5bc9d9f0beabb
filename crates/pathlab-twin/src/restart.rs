//! How the path restarts after an idle spell, from a second calibrating TCP flow
//! ([`crate::calibrate`]) that starts after [`IDLE_BEFORE_S`] of pings alone, against the
//! first (the path warm from the saturating phases). A path whose capacity a controller
//! hands out (a bonding tunnel's lines, a cellular scheduler) carries a transfer's first
//! second slower than the rest, which the twin copies as `restart FROM RAMP` (pathlab-core's
//! `RestartSpec`: the rate restarts at a share `from` of itself and climbs to it in a
//! straight line over `ramp`). Through pathlab's bond over three lines bulk TCP after pings
//! carried 73-89% of its steady goodput in its first second, sometimes 106-111% in its
//! third (the lines draining what queued), and a 10 s transfer 3-5% less than on a twin
//! without it (2026-12-07).
//!
//! # The cost
//!
//! What the cold flow carried less than the warm flow's steady goodput over its whole
//! intervals, in seconds of that rate, less what TCP's own slow start costs on a link of
//! that rate and the flow's least round trip (which the twin's TCP repeats); an interval
//! with a retransmission counts not (a window cut, TCP's own). Its standard error is the
//! warm flow's steady spread over as many intervals. A restart is copied when it costs at
//! least [`MIN_COST_S`] and twice its error: what the check's transfers lose is that cost,
//! overshoot included (a per-interval fit of a straight ramp, judged by an F test, refused
//! the bond's `84%, 88%, 111%`, and its twin's goodput went 5.3% above the path's).
//!
//! # The shape
//!
//! Only the intervals in which TCP had a queue at the bottleneck say what the path could
//! carry: there TCP sent more than it could, so what arrived is the path's capacity. An
//! interval counts when every sender sample in it saw a smoothed round trip of at least
//! [`QUEUED_ABOVE`] over the flow's least one plus [`QUEUED_MIN_NS`], and no loss. Over
//! them, the ramp that costs the cost is fitted by least squares on `from` (the ramp follows:
//! its shortfall from the end of TCP's own start to the ramp's end or the flow's is the
//! cost), its interval the region whose sum of squares is within
//! `1 + 2 F(2, n - 2) / (n - 2)` of the least (Beale's region of a nonlinear least-squares
//! fit), the ramp's widened by the cost's error.

use crate::calibrate::TcpRun;
use crate::figure::Figure;

/// A smoothed round trip this share above the flow's least one (and [`QUEUED_MIN_NS`]) is
/// a queue at the bottleneck: a bulk flow through the bond's CoDel holds 25% (5 ms of 20).
pub const QUEUED_ABOVE: f64 = 0.1;

/// The least queue counted, ns: below it, the round trip's own jitter.
pub const QUEUED_MIN_NS: f64 = 1e6;

/// The least a restart must cost a transfer, seconds at the steady rate, for the twin to
/// copy it: 2% of a 10 s transfer, well within the 5% its goodput is judged by. The
/// kernel's tbf, which does not restart, fitted ramps of 59 and 74 ms with an earlier fit
/// (per interval, which an F test then refused), and once `97% 7803ms`, 117 ms (one flow
/// 3% slower than the other over its whole 5 s: what two flows differ by, not a ramp;
/// 0.1 s before 2026-12-08). Through the bond, since its lines stopped draining at a
/// restart, its flows after pings cost 79-94 ms (none copied) and one 420 ms under a busy
/// loop per core (copied).
pub const MIN_COST_S: f64 = 0.2;

/// The least counted intervals to fit.
const MIN_COUNTED: usize = 6;

/// The grid's step of `from`: hundredths.
const FROM_STEP: f64 = 0.01;

/// The longest ramp fitted, in lengths of the flow.
const RAMP_BEYOND_FLOW: f64 = 3.0;

/// The restart a flow's start shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartFit {
    /// The share of the rate the path restarts at, 0 to 1.
    pub from: Figure,
    /// How long its rate takes to climb to all of it, s.
    pub ramp_s: Figure,
}

/// The restart the flow `cold` (after an idle spell) shows against `warm` (the flow just
/// before it, the path warm) and that one's `steady` goodput
/// ([`crate::calibrate::steady_goodput`]), if it shows one (see the module's docs). `Err`
/// says, for the goodput figure's `how`, why none is copied.
pub fn fit(cold: &TcpRun, warm: &TcpRun, steady: &Figure) -> Result<RestartFit, String> {
    let seconds = per_second_shares(cold, steady.value);
    let after = format!(
        "after {IDLE_BEFORE_S} s of pings alone bulk TCP carried {seconds} of this in its first \
         seconds"
    );
    let Some(flags) = interval_flags(cold) else {
        return Err(format!("{after}; no round-trip samples from its sender"));
    };
    let counted: Vec<usize> = (0..flags.len())
        .filter(|&i| flags[i].queued && !flags[i].lost)
        .collect();
    if counted.len() < MIN_COUNTED || steady.value <= 0.0 || cold.interval_ns == 0 {
        return Err(format!(
            "{after}; {} of its intervals had a queue at the bottleneck ({MIN_COUNTED} at \
             least to fit a restart)",
            counted.len()
        ));
    }
    let Cost {
        restart: cost_s,
        error: error_s,
        own_start: own_start_s,
    } = restart_cost(cold, &flags, warm, steady.value);
    let costs = format!(
        "it carried {:.0} ms of the steady rate less than TCP's own start costs on such a \
         link (slow start for {:.0} ms; within {:.0})",
        cost_s * 1e3,
        own_start_s * 1e3,
        2.0 * error_s * 1e3
    );
    if cost_s < MIN_COST_S.max(2.0 * error_s) {
        return Err(format!(
            "{after}; {costs}: under {:.0} ms or within its noise, no restart copied",
            MIN_COST_S * 1e3
        ));
    }
    let interval_s = cold.interval_ns as f64 * 1e-9;
    let points: Vec<(f64, f64, f64)> = counted
        .iter()
        .map(|&i| {
            let (start, end) = (i as f64 * interval_s, (i + 1) as f64 * interval_s);
            (start, end, share(cold, i, steady.value))
        })
        .collect();
    // The shape that costs that: `from` on a grid, the ramp what makes its cost; a ramp
    // may outlast the flow (up to a few times it).
    let longest = RAMP_BEYOND_FLOW * cold.interval_bytes.len() as f64 * interval_s;
    let flow_s = restart_flow_s(cold);
    let ramp_of = |from: f64, cost: f64| ramp_costing(from, cost, own_start_s, flow_s);
    let cells: Vec<(f64, f64)> = (1..(1.0 / FROM_STEP).round() as usize)
        .map(|i| i as f64 * FROM_STEP)
        .filter(|&from| ramp_of(from, cost_s) <= longest)
        .map(|from| (from, sum_of_squares(&points, from, ramp_of(from, cost_s))))
        .collect();
    let Some(&(from, least)) = cells.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return Err(format!(
            "{after}; {costs}, more than a ramp within {longest:.0} s can: no restart copied"
        ));
    };
    let n = points.len() as f64;
    let region = least * (1.0 + 2.0 * f_quantile_2(n - 2.0) / (n - 2.0));
    let inside = cells.iter().filter(|c| c.1 <= region).map(|c| c.0);
    let (from_low, from_high) = inside.fold((from, from), |(l, h), f| (l.min(f), h.max(f)));
    let ramp = ramp_of(from, cost_s);
    // A start near all of the rate costs that only with a ramp past any fitted (or none):
    // the interval ends at the longest fitted.
    let ramp_bound = |ramp: f64| ramp.min(longest);
    let how = format!(
        "{after}; {costs}; a rate climbing in a straight line to the steady goodput that \
         costs that, its start fitted by least squares to the {} of {} intervals of {} ms \
         with a queue at the bottleneck (the path's capacity then); intervals from the fit's \
         95% confidence region and the cost's",
        points.len(),
        cold.interval_bytes.len(),
        cold.interval_ns / 1_000_000,
    );
    Ok(RestartFit {
        from: Figure::new(from, from_low, from_high, how.clone()),
        ramp_s: Figure::new(
            ramp,
            ramp_bound(ramp_of(from_low, (cost_s - 2.0 * error_s).max(0.0))),
            ramp_bound(ramp_of(from_high, cost_s + 2.0 * error_s)),
            how,
        ),
    })
}

/// What a restart costs a transfer, s at the steady rate, and that figure's standard
/// error; how long TCP's own start takes ([`slow_start`]).
struct Cost {
    /// The restart's, s.
    restart: f64,
    /// Its standard error, s.
    error: f64,
    /// TCP's own start's length, s.
    own_start: f64,
}

/// The ramp from `from` whose cost over a flow of `flow_s` is `cost_s` when TCP's own
/// start hides its first `own_s` (TCP could not have used the rate then either, on the path
/// or on the twin): the rate's shortfall `(1 - from) (1 - t / ramp)` integrated from `own`
/// to the ramp's end or the flow's; infinite where no ramp costs that much.
fn ramp_costing(from: f64, cost_s: f64, own_s: f64, flow_s: f64) -> f64 {
    let a = 1.0 - from;
    let own = own_s.clamp(0.0, flow_s);
    let at_flow_end = a * (flow_s - own).powi(2) / (2.0 * flow_s);
    if cost_s <= at_flow_end {
        // a (ramp - own)^2 = 2 cost ramp: its root above `own`.
        let b = 2.0 * a * own + 2.0 * cost_s;
        (b + (b * b - 4.0 * a * a * own * own).max(0.0).sqrt()) / (2.0 * a)
    } else {
        // a ((flow - own) - (flow^2 - own^2) / (2 ramp)) = cost.
        let room = (flow_s - own) - cost_s / a;
        if room <= 0.0 {
            f64::INFINITY
        } else {
            (flow_s * flow_s - own * own) / (2.0 * room)
        }
    }
}

/// The share of `steady_bps` that `run`'s interval `i` carried.
fn share(run: &TcpRun, i: usize, steady_bps: f64) -> f64 {
    run.interval_bytes[i] as f64 * 8.0 / (run.interval_ns.max(1) as f64 * 1e-9) / steady_bps
}

/// The flow's least smoothed round trip, s: its base (the handshake's, the first sample).
fn least_srtt_s(run: &TcpRun) -> Option<f64> {
    run.rtt_samples
        .iter()
        .filter(|s| s.srtt_us > 0)
        .map(|s| f64::from(s.srtt_us) * 1e-6)
        .reduce(f64::min)
}

/// The cold flow's whole intervals, s: the stretch [`restart_cost`] counts to.
fn restart_flow_s(cold: &TcpRun) -> f64 {
    cold.interval_bytes.len().saturating_sub(1) as f64 * cold.interval_ns as f64 * 1e-9
}

/// How much less than the steady goodput the cold flow carried over its whole intervals,
/// in seconds of the steady rate, less what TCP's own slow start costs on a link of that
/// rate and the flow's least round trip ([`slow_start`]), which the twin's TCP repeats; an
/// interval with a loss counts not (TCP's own window cut). Its error: the warm flow's
/// steady half's spread from one interval to the next, over as many intervals. Not from
/// the first interval with a queue on: through the bond the flow's first 250 ms carried
/// almost nothing (its first second 69-74%, the twin's TCP 80% of its first 250 ms), and
/// leaving that interval out as TCP's own left 19-107 ms of a restart that cost the
/// check's transfers 4-5%. Nor against the warm flow's own start: through the bond it
/// followed the small packets and ramped too (-164 and -310 ms).
fn restart_cost(cold: &TcpRun, flags: &[Flags], warm: &TcpRun, steady_bps: f64) -> Cost {
    let interval_s = cold.interval_ns.max(1) as f64 * 1e-9;
    let kept: Vec<usize> = (0..flags.len()).filter(|&i| !flags[i].lost).collect();
    let deficit: f64 = kept
        .iter()
        .map(|&i| (1.0 - share(cold, i, steady_bps)) * interval_s)
        .sum();
    let own = slow_start(cold, steady_bps);
    let whole = warm.interval_bytes.len().saturating_sub(1);
    let steady: Vec<f64> = (whole / 2..whole)
        .map(|i| share(warm, i, steady_bps))
        .collect();
    let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    let variance = steady.iter().map(|s| (s - mean).powi(2)).sum::<f64>()
        / (steady.len().saturating_sub(1).max(1)) as f64;
    Cost {
        restart: deficit - own.deficit_s,
        error: variance.sqrt() * interval_s * (kept.len() as f64).sqrt(),
        own_start: own.length_s,
    }
}

/// TCP's own start on a link of `steady_bps` and `run`'s least smoothed round trip: how
/// long slow start takes to fill it and what it costs a transfer, s at that rate. From an
/// initial window of [`INITIAL_WINDOW`] segments (RFC 6928), doubling each round trip:
/// round k carries `IW 2^k` segments of the `BDP` the link could, for `K = ceil(log2(BDP
/// / IW))` rounds, so the cost is `K rtt - rtt IW (2^K - 1) / BDP`. The bond's (20 ms,
/// 38.5 Mbit/s, 1402-byte segments: a BDP of 69): 3 rounds, 40 ms.
fn slow_start(run: &TcpRun, steady_bps: f64) -> SlowStart {
    let rtt_s = least_srtt_s(run).unwrap_or(0.0);
    let bdp = steady_bps * rtt_s / (8.0 * f64::from(run.mss.max(1)));
    if bdp <= INITIAL_WINDOW {
        return SlowStart::default();
    }
    let rounds = (bdp / INITIAL_WINDOW).log2().ceil();
    SlowStart {
        length_s: rounds * rtt_s,
        deficit_s: rounds * rtt_s - rtt_s * INITIAL_WINDOW * (rounds.exp2() - 1.0) / bdp,
    }
}

/// Segments in TCP's initial window (RFC 6928).
const INITIAL_WINDOW: f64 = 10.0;

/// TCP's own start ([`slow_start`]).
#[derive(Debug, Default, Clone, Copy)]
struct SlowStart {
    /// How long it takes, s.
    length_s: f64,
    /// What it costs a transfer, s of the steady rate.
    deficit_s: f64,
}

/// How long the flow after an idle spell waits first, s, with only the check's pings on
/// the path ([`crate::check::RTT_INTERVAL_MS`]): past TCP's least retransmission timeout
/// (after which a sender restarts from its initial window) and a bonding tunnel's idle
/// spell (1 s each). Pings, not silence, as a path in use has them, and as `twin check`'s
/// bulk flows start after them: the bond restarts a line that carried only pings from
/// twice what it delivered, a silent one from the capacity it showed last (its cold flow
/// up after 2 s of silence carried 90% of the steady goodput in its first second, the
/// check's after pings 71%).
pub const IDLE_BEFORE_S: u64 = 2;

/// What the sender's samples say of each whole interval (the last, partial, left out):
/// whether every sample in it saw a queue, and whether any saw a retransmission since the
/// sample before (after a loss the window is cut and TCP, not the path, sets the pace).
/// `None` without samples.
fn interval_flags(run: &TcpRun) -> Option<Vec<Flags>> {
    let queued_ns = queued_threshold_ns(run)?;
    let mut before = 0;
    let samples: Vec<(u64, bool, bool)> = run
        .rtt_samples
        .iter()
        .map(|s| {
            let lost = s.retransmitted > before;
            before = s.retransmitted;
            (s.at_ns, f64::from(s.srtt_us) * 1e3 >= queued_ns, lost)
        })
        .collect();
    let whole = run.interval_bytes.len().saturating_sub(1) as u64;
    let flags = (0..whole)
        .map(|i| {
            let span = i * run.interval_ns..(i + 1) * run.interval_ns;
            let inside: Vec<_> = samples.iter().filter(|s| span.contains(&s.0)).collect();
            Flags {
                queued: !inside.is_empty() && inside.iter().all(|s| s.1),
                lost: inside.iter().any(|s| s.2),
            }
        })
        .collect();
    Some(flags)
}

/// A smoothed round trip at or above this is a queue at the bottleneck, ns: the flow's
/// least one plus [`QUEUED_ABOVE`] of it and [`QUEUED_MIN_NS`]. `None` without samples.
fn queued_threshold_ns(run: &TcpRun) -> Option<f64> {
    let least_ns = least_srtt_s(run)? * 1e9;
    Some(least_ns * (1.0 + QUEUED_ABOVE) + QUEUED_MIN_NS)
}

/// An interval as its sender's samples saw it ([`interval_flags`]).
#[derive(Debug, Clone, Copy)]
struct Flags {
    queued: bool,
    lost: bool,
}

/// The shares of `steady` the run's first three whole seconds carried, as `71%, 87%, 109%`.
fn per_second_shares(run: &TcpRun, steady: f64) -> String {
    let per_second = (1_000_000_000 / run.interval_ns.max(1)).max(1) as usize;
    run.interval_bytes
        .chunks_exact(per_second)
        .take(3)
        .map(|second| {
            let bits = second.iter().sum::<u64>() as f64 * 8.0;
            format!("{:.0}%", bits / steady.max(1.0) * 100.0)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ramp's integral from 0 to `x` s, in seconds at the whole rate.
fn carried(from: f64, ramp: f64, x: f64) -> f64 {
    if x <= ramp {
        from * x + (1.0 - from) * x * x / (2.0 * ramp)
    } else {
        ramp * (1.0 + from) / 2.0 + (x - ramp)
    }
}

/// The squared misses of the ramp `(from, ramp)` over `points` (start, end, share).
fn sum_of_squares(points: &[(f64, f64, f64)], from: f64, ramp: f64) -> f64 {
    points
        .iter()
        .map(|&(a, b, share)| {
            let mean = (carried(from, ramp, b) - carried(from, ramp, a)) / (b - a);
            (share - mean).powi(2)
        })
        .sum()
}

/// The 95% quantile of Fisher's F with 2 and `k` degrees of freedom, which has a closed
/// form: `k / 2 (0.05^(-2/k) - 1)`.
fn f_quantile_2(k: f64) -> f64 {
    k / 2.0 * (0.05_f64.powf(-2.0 / k) - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::{steady_goodput, RttSample};

    /// A 5 s flow of 250 ms intervals at `bps` of steady goodput over a path that restarts
    /// at `from` and climbs over `ramp_s`, its own slow start costing the first `start_s`
    /// (no queue then); a queue in every interval after, the intervals wobbling by
    /// `jitter`.
    fn flow(bps: f64, from: f64, ramp_s: f64, start_s: f64, jitter: f64) -> TcpRun {
        let interval_s = 0.25;
        let mut interval_bytes = Vec::new();
        let mut rtt_samples = Vec::new();
        for i in 0..21 {
            let (a, b) = (i as f64 * interval_s, (i + 1) as f64 * interval_s);
            let a_sent = a.max(start_s);
            let share = if b <= start_s {
                0.3
            } else {
                (carried(from, ramp_s, b) - carried(from, ramp_s, a_sent)) / interval_s
            };
            let wobble = if i % 2 == 0 {
                1.0 + jitter
            } else {
                1.0 - jitter
            };
            let seconds = if i == 20 { 0.1 } else { interval_s };
            interval_bytes.push((bps / 8.0 * seconds * share * wobble) as u64);
            for k in 0..5 {
                let at_ns = ((a + k as f64 * 0.05) * 1e9) as u64;
                let queued = a >= start_s;
                let srtt_us = if queued { 26_000 } else { 20_500 };
                rtt_samples.push(RttSample {
                    at_ns,
                    srtt_us,
                    retransmitted: 0,
                });
            }
        }
        TcpRun {
            interval_ns: 250_000_000,
            interval_bytes,
            mss: 1402,
            frame_bytes: 1468,
            rtt_samples,
        }
    }

    /// The flow with the path warm (no restart, the same slow start) and its steady goodput.
    fn warm(bps: f64, start_s: f64) -> (TcpRun, Figure) {
        let run = flow(bps, 1.0, 0.025, start_s, 0.005);
        let steady = steady_goodput(&run).unwrap();
        (run, steady)
    }

    #[test]
    fn a_path_that_restarts_slowly_is_fitted_within_the_intervals() {
        // The bond down, roughly: 38.5 Mbit/s, from 40% over 1.4 s, slow start in the
        // first 100 ms (its interval not fitted: a queue only from 250 ms); the ramp costs
        // 420 ms, less what slow start hid of it and plus slow start's own 100 ms against
        // the 61 ms of theory's.
        let (warm, steady) = warm(38.5e6, 0.1);
        let run = flow(38.5e6, 0.4, 1.4, 0.1, 0.005);
        let fit = fit(&run, &warm, &steady).expect("a restart");
        assert!(fit.from.covers(0.4), "{:?}", fit.from);
        assert!(fit.ramp_s.covers(1.4), "{:?}", fit.ramp_s);
        assert!((fit.from.value - 0.4).abs() < 0.05, "{:?}", fit.from);
        assert!((fit.ramp_s.value - 1.4).abs() < 0.1, "{:?}", fit.ramp_s);
        assert!(
            fit.from
                .how
                .contains("it carried 422 ms of the steady rate less"),
            "{}",
            fit.from.how
        );
    }

    #[test]
    fn a_ramp_longer_than_the_flow_is_fitted_against_the_warm_flows_goodput() {
        // From 55% over 7 s (the bond's lines once): the 5 s flow ends still climbing, at
        // 94%; the flow before it, the lines warm, gives the steady goodput.
        let (warm, steady) = warm(38.5e6, 0.1);
        let run = flow(38.5e6, 0.55, 7.0, 0.1, 0.005);
        let fit = fit(&run, &warm, &steady).expect("a restart");
        assert!((fit.from.value - 0.55).abs() < 0.03, "{:?}", fit.from);
        assert!(
            (fit.ramp_s.value / 7.0 - 1.0).abs() < 0.15,
            "{:?}",
            fit.ramp_s
        );
        assert!(fit.ramp_s.covers(7.0), "{:?}", fit.ramp_s);
    }

    /// Regression (the bond down, 2026-12-07): a start at 91% over 3.6 s, the cost near
    /// its noise, put 96% in the start's interval, which no ramp costs that much from: the
    /// ramp's interval went to infinity and the twin file did not read back. (92% over
    /// 5.2 s here, 224 ms: the least cost copied is 200 ms since 2026-12-08.)
    #[test]
    fn a_shallow_restart_near_its_noise_has_a_finite_interval() {
        let warm = flow(38.5e6, 1.0, 0.025, 0.06, 0.04);
        let steady = steady_goodput(&warm).unwrap();
        let run = flow(38.5e6, 0.92, 5.2, 0.06, 0.04);
        let fit = fit(&run, &warm, &steady).expect("a restart");
        let longest = RAMP_BEYOND_FLOW * 21.0 * 0.25;
        for figure in [&fit.from, &fit.ramp_s] {
            assert!(
                figure.high.is_finite() && figure.low.is_finite(),
                "{figure:?}"
            );
        }
        assert!(fit.ramp_s.high <= longest, "{:?}", fit.ramp_s);
        assert!(
            fit.from.high > 0.9,
            "a start near the whole rate: {:?}",
            fit.from
        );
    }

    #[test]
    fn a_path_at_its_rate_at_once_does_not_restart() {
        // Slow start alone (no queue in its interval), then the rate: nothing to copy.
        let (warm, steady) = warm(19.3e6, 0.1);
        let run = flow(19.3e6, 1.0, 0.025, 0.1, 0.01);
        assert!(fit(&run, &warm, &steady).is_err());
    }

    #[test]
    fn a_slow_start_without_a_queue_is_tcps_own_and_not_a_restart() {
        // A long round trip's slow start (300 ms: 6 rounds, 1.8 s, as theory has it): 0.9
        // s without a queue, at a third of the rate.
        let long = |mut run: TcpRun| {
            for sample in &mut run.rtt_samples {
                sample.srtt_us *= 15;
            }
            run
        };
        let (warm, steady) = warm(19.3e6, 0.9);
        let run = long(flow(19.3e6, 1.0, 0.025, 0.9, 0.01));
        assert!(fit(&run, &long(warm), &steady).is_err());
    }

    #[test]
    fn a_restart_that_costs_a_transfer_little_is_left_out() {
        // 90% for 0.5 s: 25 ms of the rate.
        let (warm, steady) = warm(19.3e6, 0.0);
        let run = flow(19.3e6, 0.9, 0.5, 0.0, 0.0);
        assert!(fit(&run, &warm, &steady).is_err());
    }

    #[test]
    fn intervals_after_a_loss_are_tcps_own_and_not_fitted() {
        // Slow start's loss at 0.5 s: the window cut leaves two intervals at 60% with the
        // queue still shown (the smoothed round trip lags); their retransmissions say why.
        let (warm, steady) = warm(19.3e6, 0.1);
        let mut run = flow(19.3e6, 1.0, 0.025, 0.1, 0.005);
        for i in [2, 3] {
            run.interval_bytes[i] = (run.interval_bytes[i] as f64 * 0.6) as u64;
        }
        assert!(fit(&run, &warm, &steady).is_ok(), "the dip fits as a ramp");
        // One retransmission a sample from 0.5 s to 1 s, none after.
        for sample in &mut run.rtt_samples {
            let at = sample.at_ns.clamp(450_000_000, 950_000_000);
            sample.retransmitted = ((at - 450_000_000) / 50_000_000) as u32;
        }
        assert!(
            fit(&run, &warm, &steady).is_err(),
            "a loss's dip is not a restart"
        );
    }

    #[test]
    fn a_flow_without_round_trip_samples_fits_nothing() {
        let (warm, steady) = warm(38.5e6, 0.1);
        let mut run = flow(38.5e6, 0.4, 1.4, 0.1, 0.005);
        run.rtt_samples.clear();
        assert!(fit(&run, &warm, &steady).is_err());
    }

    #[test]
    fn the_f_quantile_matches_the_tables() {
        // F(2, 8) and F(2, 18) at 95%: 4.459 and 3.555.
        assert!((f_quantile_2(8.0) - 4.459).abs() < 1e-3);
        assert!((f_quantile_2(18.0) - 3.555).abs() < 1e-3);
    }
}
