//! How the path restarts after an idle spell, from a second calibrating TCP flow
//! ([`crate::calibrate`]) that starts after [`IDLE_BEFORE_S`] of pings alone, against
//! the first's steady goodput (the path warm from the saturating phases): a path whose capacity a controller hands out (a bonding
//! tunnel's lines, a cellular scheduler) carries a transfer's first second slower than the
//! rest, which the twin copies as `restart FROM RAMP` (pathlab-core's `RestartSpec`: the
//! rate restarts at a share `from` of itself and climbs to it in a straight line over
//! `ramp`). Through pathlab's bond over three lines, bulk TCP after a pause carried 67% of
//! its steady goodput in its first second and 92% in its second, and a 10 s transfer 4-5%
//! less than on a twin without it (2026-12-07).
//!
//! # What is fitted
//!
//! Only the intervals in which TCP had a queue at the bottleneck say what the path could
//! carry: there TCP sent more than it could, so what arrived is the path's capacity. An
//! interval counts when every sender sample in it saw a smoothed round trip of at least
//! [`QUEUED_ABOVE`] over the flow's least one plus [`QUEUED_MIN_NS`]; the others are TCP's
//! own doing (slow start, a window cut after a loss), which the twin's TCP repeats on its
//! own. Over the counted intervals, the share of the steady goodput each carried is fitted
//! by least squares to the ramp's mean over the interval, `from` and `ramp` on a grid.
//!
//! # When it is a restart
//!
//! When the best ramp fits significantly better than none (the extra sum of squares F test
//! at 95%, two parameters) and costs a transfer at least [`MIN_COST_S`] of the steady rate
//! (`(1 - from) ramp / 2`). The intervals are the region of the grid whose sum of squares is
//! within `1 + 2 F(2, n - 2) / (n - 2)` of the least (Beale's confidence region of a
//! nonlinear least-squares fit).

use serde::{Deserialize, Serialize};

use crate::calibrate::TcpRun;
use crate::figure::Figure;

/// One sample of the sender's `TCP_INFO` during the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RttSample {
    /// When, ns from the flow's start.
    pub at_ns: u64,
    /// The smoothed round trip then, us.
    pub srtt_us: u32,
    /// Segments the sender had retransmitted by then.
    #[serde(default)]
    pub retransmitted: u32,
}

/// A smoothed round trip this share above the flow's least one (and [`QUEUED_MIN_NS`]) is
/// a queue at the bottleneck: a bulk flow through the bond's CoDel holds 25% (5 ms of 20).
pub const QUEUED_ABOVE: f64 = 0.1;

/// The least queue counted, ns: below it, the round trip's own jitter.
pub const QUEUED_MIN_NS: f64 = 1e6;

/// The least a restart must cost a transfer, seconds at the steady rate, for the twin to
/// copy it: 1% of a 10 s transfer. The kernel's tbf, which does not restart, fitted ramps
/// of 59 and 74 ms (that the F test then refused).
pub const MIN_COST_S: f64 = 0.1;

/// The least counted intervals to fit.
const MIN_COUNTED: usize = 6;

/// The grid's steps: `from` in hundredths, `ramp` in 25 ms.
const FROM_STEP: f64 = 0.01;
const RAMP_STEP_S: f64 = 0.025;

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

/// The restart `run` (a flow after an idle spell) shows against the `steady` goodput of a
/// flow with the path warm ([`crate::calibrate::steady_goodput`]), if it shows one (see
/// the module's docs): its own end may still be climbing (a bond's lines took 7 s once).
/// `Err` says, for the goodput figure's `how`, why none is copied.
pub fn fit(run: &TcpRun, steady: &Figure) -> Result<RestartFit, String> {
    let interval_s = run.interval_ns as f64 * 1e-9;
    let seconds = per_second_shares(run, steady.value);
    let after = format!(
        "after {IDLE_BEFORE_S} s of pings alone bulk TCP carried {seconds} of this in its first \
         seconds"
    );
    let Some(counted) = counted_intervals(run) else {
        return Err(format!("{after}; no round-trip samples from its sender"));
    };
    if counted.len() < MIN_COUNTED || steady.value <= 0.0 {
        return Err(format!(
            "{after}; {} of its intervals had a queue at the bottleneck ({MIN_COUNTED} at \
             least to fit a restart)",
            counted.len()
        ));
    }
    let points: Vec<(f64, f64, f64)> = counted
        .iter()
        .map(|&i| {
            let share = run.interval_bytes[i] as f64 * 8.0 / interval_s / steady.value;
            (i as f64 * interval_s, (i + 1) as f64 * interval_s, share)
        })
        .collect();
    // A ramp may outlast the flow (its slope says where it ends), up to a few times it.
    let grid = Grid::over(
        &points,
        RAMP_BEYOND_FLOW * run.interval_bytes.len() as f64 * interval_s,
    );
    let none = sum_of_squares(&points, 1.0, RAMP_STEP_S);
    let (from, ramp, least) = grid.best;
    let n = points.len() as f64;
    let f = f_quantile_2(n - 2.0);
    let significant = (none - least) / 2.0 > f * least / (n - 2.0);
    let cost_s = (1.0 - from) * ramp / 2.0;
    let best = format!(
        "from {:.0}% over {:.0} ms, costing a transfer {:.0} ms of the steady rate",
        from * 100.0,
        ramp * 1e3,
        cost_s * 1e3
    );
    if !significant {
        return Err(format!(
            "{after}; the best ramp ({best}) fits its {} intervals with a queue no better than \
             none (F test, 95%): no restart copied",
            points.len()
        ));
    }
    if cost_s < MIN_COST_S {
        return Err(format!(
            "{after}; the best ramp ({best}) costs under {:.0} ms: no restart copied",
            MIN_COST_S * 1e3
        ));
    }
    let region = least * (1.0 + 2.0 * f / (n - 2.0));
    let (from_range, ramp_range) = grid.within(region);
    let how = format!(
        "{after}: of its {} intervals of {} ms, the {} with a queue at the bottleneck (the \
         path's capacity then) fitted to a rate climbing in a straight line to the steady \
         goodput of a flow just before, the path warm (least squares on a grid): {best}; \
         intervals from the fit's 95% confidence region",
        run.interval_bytes.len(),
        run.interval_ns / 1_000_000,
        points.len(),
    );
    Ok(RestartFit {
        from: Figure::new(from, from_range.0, from_range.1, how.clone()),
        ramp_s: Figure::new(ramp, ramp_range.0, ramp_range.1, how),
    })
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

/// The whole intervals (the last, partial, left out) in which every sender sample saw a
/// queue and none a retransmission since the sample before (after a loss the window is
/// cut and TCP, not the path, sets the pace); `None` without samples.
fn counted_intervals(run: &TcpRun) -> Option<Vec<usize>> {
    let least_ns = run
        .rtt_samples
        .iter()
        .filter(|s| s.srtt_us > 0)
        .map(|s| f64::from(s.srtt_us) * 1e3)
        .reduce(f64::min)?;
    let queued_ns = least_ns * (1.0 + QUEUED_ABOVE) + QUEUED_MIN_NS;
    let mut before = 0;
    let paced_by_path: Vec<(u64, bool)> = run
        .rtt_samples
        .iter()
        .map(|s| {
            let lost = s.retransmitted > before;
            before = s.retransmitted;
            (s.at_ns, !lost && f64::from(s.srtt_us) * 1e3 >= queued_ns)
        })
        .collect();
    let whole = run.interval_bytes.len().saturating_sub(1);
    let counted = (0..whole)
        .filter(|&i| {
            let (start, end) = (i as u64 * run.interval_ns, (i as u64 + 1) * run.interval_ns);
            let mut inside = paced_by_path
                .iter()
                .filter(|(at, _)| (start..end).contains(at))
                .peekable();
            inside.peek().is_some() && inside.all(|&(_, by_path)| by_path)
        })
        .collect();
    Some(counted)
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

/// Every `(from, ramp)` on the grid with its sum of squares, and the least.
struct Grid {
    cells: Vec<(f64, f64, f64)>,
    best: (f64, f64, f64),
}

impl Grid {
    fn over(points: &[(f64, f64, f64)], longest_s: f64) -> Grid {
        let froms = (1..=(1.0 / FROM_STEP).round() as usize).map(|i| i as f64 * FROM_STEP);
        let ramps: Vec<f64> = (1..=(longest_s / RAMP_STEP_S).floor() as usize)
            .map(|i| i as f64 * RAMP_STEP_S)
            .collect();
        let cells: Vec<(f64, f64, f64)> = froms
            .flat_map(|from| {
                ramps
                    .iter()
                    .map(move |&ramp| (from, ramp, sum_of_squares(points, from, ramp)))
            })
            .collect();
        let best = cells
            .iter()
            .copied()
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .unwrap_or((1.0, RAMP_STEP_S, f64::INFINITY));
        Grid { cells, best }
    }

    /// The ranges of `from` and of `ramp` over the cells within `bound`.
    fn within(&self, bound: f64) -> ((f64, f64), (f64, f64)) {
        let inside = self.cells.iter().filter(|c| c.2 <= bound);
        inside.fold(
            ((f64::MAX, f64::MIN), (f64::MAX, f64::MIN)),
            |((fl, fh), (rl, rh)), c| ((fl.min(c.0), fh.max(c.0)), (rl.min(c.1), rh.max(c.1))),
        )
    }
}

/// The 95% quantile of Fisher's F with 2 and `k` degrees of freedom, which has a closed
/// form: `k / 2 (0.05^(-2/k) - 1)`.
fn f_quantile_2(k: f64) -> f64 {
    k / 2.0 * (0.05_f64.powf(-2.0 / k) - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::steady_goodput;

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

    #[test]
    fn a_path_that_restarts_slowly_is_fitted_within_the_intervals() {
        // The bond down, roughly: 38.5 Mbit/s, from 40% over 1.4 s, slow start in the
        // first 100 ms (its interval not counted: a queue only from 250 ms).
        let run = flow(38.5e6, 0.4, 1.4, 0.1, 0.005);
        let steady = steady_goodput(&run).unwrap();
        let fit = fit(&run, &steady).expect("a restart");
        assert!(fit.from.covers(0.4), "{:?}", fit.from);
        assert!(fit.ramp_s.covers(1.4), "{:?}", fit.ramp_s);
        assert!((fit.from.value - 0.4).abs() < 0.05, "{:?}", fit.from);
        assert!((fit.ramp_s.value - 1.4).abs() < 0.1, "{:?}", fit.ramp_s);
        assert!(
            fit.from.how.contains("costing a transfer 420 ms"),
            "{}",
            fit.from.how
        );
    }

    #[test]
    fn a_ramp_longer_than_the_flow_is_fitted_against_the_warm_flows_goodput() {
        // From 55% over 7 s (the bond's lines once): the 5 s flow ends still climbing, at
        // 94%; the flow before it, the lines warm, gives the steady goodput.
        let steady = steady_goodput(&flow(38.5e6, 1.0, 0.025, 0.1, 0.005)).unwrap();
        let run = flow(38.5e6, 0.55, 7.0, 0.1, 0.005);
        let fit = fit(&run, &steady).expect("a restart");
        assert!((fit.from.value - 0.55).abs() < 0.03, "{:?}", fit.from);
        assert!(
            (fit.ramp_s.value / 7.0 - 1.0).abs() < 0.15,
            "{:?}",
            fit.ramp_s
        );
        assert!(fit.ramp_s.covers(7.0), "{:?}", fit.ramp_s);
    }

    #[test]
    fn a_path_at_its_rate_at_once_does_not_restart() {
        // Slow start alone (no queue in its interval), then the rate: nothing to copy.
        let run = flow(19.3e6, 1.0, 0.025, 0.1, 0.01);
        let steady = steady_goodput(&run).unwrap();
        assert!(fit(&run, &steady).is_err());
    }

    #[test]
    fn a_slow_start_without_a_queue_is_tcps_own_and_not_a_restart() {
        // A long round trip's slow start: 0.9 s without a queue, at a third of the rate.
        let run = flow(19.3e6, 1.0, 0.025, 0.9, 0.01);
        let steady = steady_goodput(&run).unwrap();
        assert!(fit(&run, &steady).is_err());
    }

    #[test]
    fn a_restart_that_costs_a_transfer_little_is_left_out() {
        // 90% for 0.5 s: 25 ms of the rate.
        let run = flow(19.3e6, 0.9, 0.5, 0.0, 0.0);
        let steady = steady_goodput(&run).unwrap();
        assert!(fit(&run, &steady).is_err());
    }

    #[test]
    fn intervals_after_a_loss_are_tcps_own_and_not_fitted() {
        // Slow start's loss at 0.5 s: the window cut leaves two intervals at 60% with the
        // queue still shown (the smoothed round trip lags); their retransmissions say why.
        let mut run = flow(19.3e6, 1.0, 0.025, 0.1, 0.005);
        for i in [2, 3] {
            run.interval_bytes[i] = (run.interval_bytes[i] as f64 * 0.6) as u64;
        }
        let steady = steady_goodput(&run).unwrap();
        assert!(fit(&run, &steady).is_ok(), "the dip fits as a ramp");
        // One retransmission a sample from 0.5 s to 1 s, none after.
        for sample in &mut run.rtt_samples {
            let at = sample.at_ns.clamp(450_000_000, 950_000_000);
            sample.retransmitted = ((at - 450_000_000) / 50_000_000) as u32;
        }
        assert!(fit(&run, &steady).is_err(), "a loss's dip is not a restart");
    }

    #[test]
    fn a_flow_without_round_trip_samples_fits_nothing() {
        let mut run = flow(38.5e6, 0.4, 1.4, 0.1, 0.005);
        run.rtt_samples.clear();
        let steady = steady_goodput(&run).unwrap();
        assert!(fit(&run, &steady).is_err());
    }

    #[test]
    fn the_f_quantile_matches_the_tables() {
        // F(2, 8) and F(2, 18) at 95%: 4.459 and 3.555.
        assert!((f_quantile_2(8.0) - 4.459).abs() < 1e-3);
        assert!((f_quantile_2(18.0) - 3.555).abs() < 1e-3);
    }
}
