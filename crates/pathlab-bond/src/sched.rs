//! Which line the next datagram goes on.
//!
//! The default scheduler sends each datagram where it would *arrive* first: line `j` would
//! deliver `len` bytes at
//!
//! ```text
//! A_j = max(now, ready_j) + len / rate_j + owd_j
//! ```
//!
//! where `ready_j` is when its pacer lets it send and `owd_j` its current one-way delay
//! (base plus queue; the clocks' offset is the same on every line of one direction, so it
//! cancels in the comparison). The line of earliest arrival sends if it is ready. A line that
//! is ready but not the earliest sends only if the backlog is large enough that the other
//! lines together would still be delivering it when this line's datagram lands: that is the
//! test `A_i <= T`, where `T` is when the backlog would have arrived over the other lines,
//! each starting at its own `max(now, ready_j) + owd_j` and draining at its rate (a
//! water-filling of the backlog over the lines). So a lone ping takes the fastest line, a
//! bulk backlog spreads over all lines in proportion to their rates, and what a slow or
//! far line carries arrives about when the fast lines' share does: little reordering for
//! the receiver to hide. This is the earliest-completion-first idea of multipath schedulers
//! (ECF, BLEST for MPTCP) applied per datagram with paced lines.
//!
//! The baselines, for comparison: round robin over the lines that are up, and smooth
//! weighted round robin with weights from the lines' configured rates (as MLVPN), both
//! unpaced as those tunnels are.

use pathlab_core::{Duration, Instant};

/// Which scheduler a tunnel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulerKind {
    /// Earliest arrival over paced lines (the default).
    #[default]
    Delay,
    /// Round robin, unpaced.
    RoundRobin,
    /// Weighted round robin by configured rate, unpaced.
    WeightedRoundRobin,
}

/// What the scheduler knows of one line that is up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineView {
    /// When its pacer lets it send next.
    pub ready_at: Instant,
    /// Its rate, bits per second.
    pub rate_bps: f64,
    /// Its one-way delay, ns (offset included, common to all lines).
    pub owd_ns: i64,
}

/// The scheduler's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Send on this line now.
    Send(usize),
    /// No line should send before this instant.
    Wait(Instant),
    /// No line is up.
    NoLine,
}

fn nanos_for(len_bytes: usize, rate_bps: f64) -> f64 {
    len_bytes as f64 * 8.0 / rate_bps * 1e9
}

/// Picks the line for a datagram of `len_bytes` at `now`, with `backlog_bytes` waiting in
/// all (this datagram's included). `lines[j]` is `None` for a line that is down. A ready
/// line that is not the earliest may still send if its datagram lands at most `slack`
/// after the others would have delivered the backlog (the receiver's reorder buffer holds
/// that much; a window-limited flow then keeps a far line busy with a smaller backlog).
pub fn earliest_arrival(
    now: Instant,
    lines: &[Option<LineView>],
    len_bytes: usize,
    backlog_bytes: u64,
    slack: Duration,
) -> Choice {
    let now_ns = now.as_nanos() as f64;
    let arrival = |view: &LineView| arrival_ns(now_ns, view, len_bytes);
    let Some((best, best_view)) = lines
        .iter()
        .enumerate()
        .filter_map(|(j, view)| view.map(|v| (j, v)))
        .min_by(|(_, a), (_, b)| arrival(a).total_cmp(&arrival(b)))
    else {
        return Choice::NoLine;
    };
    if best_view.ready_at <= now {
        return Choice::Send(best);
    }
    // Ready lines other than the best, earliest arrival first.
    let mut ready: Vec<(usize, f64)> = lines
        .iter()
        .enumerate()
        .filter_map(|(j, view)| view.filter(|v| v.ready_at <= now).map(|v| (j, arrival(&v))))
        .collect();
    ready.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (candidate, candidate_arrival) in ready {
        let others = lines
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != candidate)
            .filter_map(|(_, view)| *view);
        if drain_time(now_ns, others, backlog_bytes) + slack.as_nanos() as f64 >= candidate_arrival
        {
            return Choice::Send(candidate);
        }
    }
    Choice::Wait(best_view.ready_at)
}

/// When a datagram of `len_bytes` sent on `view`'s line as soon as its pacer lets it
/// would arrive (ns, the views' clock).
fn arrival_ns(now_ns: f64, view: &LineView, len_bytes: usize) -> f64 {
    let start = (view.ready_at.as_nanos() as f64).max(now_ns);
    start + nanos_for(len_bytes, view.rate_bps) + view.owd_ns as f64
}

/// The lines up (`Some`), earliest arrival of a datagram of `len_bytes` first: where an
/// interactive packet goes (the first), and a redundant one (the first two).
pub fn by_arrival(now: Instant, lines: &[Option<LineView>], len_bytes: usize) -> Vec<usize> {
    let now_ns = now.as_nanos() as f64;
    let mut ranked: Vec<(usize, f64)> = lines
        .iter()
        .enumerate()
        .filter_map(|(j, view)| view.map(|v| (j, arrival_ns(now_ns, &v, len_bytes))))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    ranked.into_iter().map(|(j, _)| j).collect()
}

/// When `backlog_bytes` would have arrived over `lines` in parallel, each from its own
/// first arrival `max(now, ready) + owd` at its rate (ns, same clock as the views).
fn drain_time(now_ns: f64, lines: impl Iterator<Item = LineView>, backlog_bytes: u64) -> f64 {
    let mut starts: Vec<(f64, f64)> = lines
        .map(|v| {
            let start = (v.ready_at.as_nanos() as f64).max(now_ns) + v.owd_ns as f64;
            (start, v.rate_bps / 8.0 / 1e9) // bytes per ns
        })
        .collect();
    if starts.is_empty() {
        return f64::INFINITY;
    }
    starts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut remaining = backlog_bytes as f64;
    let mut rate = 0.0;
    let mut time = starts[0].0;
    for (k, &(start, line_rate)) in starts.iter().enumerate() {
        if k > 0 {
            // Between the previous start and this one, the lines so far drain the backlog.
            let span = start - time;
            if rate * span >= remaining {
                return time + remaining / rate;
            }
            remaining -= rate * span;
            time = start;
        }
        rate += line_rate;
    }
    time + remaining / rate
}

/// Smooth weighted round robin (nginx's): each pick adds every weight to its line's
/// credit, takes the line of highest credit, and takes the total from it. Lines of weight
/// `w` are picked in proportion to `w`, interleaved rather than in runs.
#[derive(Debug, Clone, Default)]
pub struct WeightedRoundRobin {
    credit: Vec<f64>,
}

impl WeightedRoundRobin {
    /// Picks among the lines with `Some(weight)` (those up).
    pub fn pick(&mut self, weights: &[Option<f64>]) -> Option<usize> {
        self.credit.resize(weights.len(), 0.0);
        let total: f64 = weights.iter().flatten().sum();
        let mut best: Option<usize> = None;
        for (j, weight) in weights.iter().enumerate() {
            if let Some(weight) = weight {
                self.credit[j] += weight;
                if best.is_none_or(|b| self.credit[j] > self.credit[b]) {
                    best = Some(j);
                }
            }
        }
        let best = best?;
        self.credit[best] -= total;
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The scheduler takes one `Option<LineView>` per line (`None`: down).
    #[allow(clippy::unnecessary_wraps)]
    fn view(ready_ms: u64, mbit: f64, owd_ms: i64) -> Option<LineView> {
        Some(LineView {
            ready_at: Instant::from_millis(ready_ms),
            rate_bps: mbit * 1e6,
            owd_ns: owd_ms * 1_000_000,
        })
    }

    /// Where a 1000-byte datagram goes at time zero, `backlog_bytes` waiting, no slack.
    fn choose_at_zero(lines: &[Option<LineView>], backlog_bytes: u64) -> Choice {
        earliest_arrival(Instant::ZERO, lines, 1000, backlog_bytes, Duration::ZERO)
    }

    #[test]
    fn a_lone_packet_takes_the_line_where_it_arrives_first() {
        // 12 Mbit/s at 10 ms and 3 Mbit/s at 40 ms, both ready: 1000 bytes arrive at
        // 10.67 ms and 42.67 ms.
        let lines = [view(0, 12.0, 10), view(0, 3.0, 40)];
        assert_eq!(choose_at_zero(&lines, 1000), Choice::Send(0));
        // Even with the fast line busy for 20 ms more, it still wins (30.7 ms < 42.7 ms):
        // the slow line waits.
        let lines = [view(20, 12.0, 10), view(0, 3.0, 40)];
        assert_eq!(
            choose_at_zero(&lines, 1000),
            Choice::Wait(Instant::from_millis(20))
        );
    }

    #[test]
    fn a_backlog_large_enough_uses_the_slow_line_too() {
        // The fast line (12 Mbit/s = 1.5 bytes/us) is busy for 1 ms more. The slow line's
        // datagram lands at 42.67 ms; the fast line alone delivers a backlog of B bytes by
        // 11 ms + B / 1500 bytes per ms: B = 48 kB takes it to 43 ms, past the slow line's
        // landing, so the slow line sends; 30 kB would end at 31 ms, so it waits.
        let lines = [view(1, 12.0, 10), view(0, 3.0, 40)];
        assert_eq!(choose_at_zero(&lines, 48_000), Choice::Send(1));
        assert_eq!(
            choose_at_zero(&lines, 30_000),
            Choice::Wait(Instant::from_millis(1))
        );
    }

    #[test]
    fn drain_time_water_fills_the_lines() {
        // 1.5 bytes/us from t=10 ms, plus 0.375 bytes/us from t=40 ms: 60 kB is 45 kB by
        // 40 ms, the remaining 15 kB at 1.875 bytes/us takes 8 ms: 48 ms.
        let lines = [view(0, 12.0, 10).unwrap(), view(0, 3.0, 40).unwrap()];
        let t = drain_time(0.0, lines.into_iter(), 60_000);
        assert!((t / 1e6 - 48.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn lines_rank_by_arrival() {
        // 10 ms busy for 20 ms, 25 ms idle, 40 ms idle, one down: 25 ms first.
        let lines = [view(20, 12.0, 10), view(0, 6.0, 25), None, view(0, 3.0, 40)];
        assert_eq!(by_arrival(Instant::ZERO, &lines, 200), vec![1, 0, 3]);
        assert!(by_arrival(Instant::ZERO, &[None], 200).is_empty());
    }

    #[test]
    fn no_line_up_is_said() {
        assert_eq!(
            earliest_arrival(Instant::ZERO, &[None, None], 100, 100, Duration::ZERO),
            Choice::NoLine
        );
    }

    #[test]
    fn weighted_round_robin_follows_the_weights_interleaved() {
        let mut wrr = WeightedRoundRobin::default();
        let weights = [Some(12.0), Some(6.0), Some(3.0)];
        let picks: Vec<usize> = (0..21).map(|_| wrr.pick(&weights).unwrap()).collect();
        let count = |j| picks.iter().filter(|&&p| p == j).count();
        assert_eq!((count(0), count(1), count(2)), (12, 6, 3));
        // Interleaved: the heaviest line never takes more than 2 in a row here.
        assert!(picks
            .windows(3)
            .all(|w| !(w[0] == 0 && w[1] == 0 && w[2] == 0)));
        // A line that goes down is skipped.
        assert_eq!(wrr.pick(&[None, Some(1.0), None]), Some(1));
    }
}
