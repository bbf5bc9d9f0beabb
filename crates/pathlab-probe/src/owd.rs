//! One-way delay without synchronized clocks: deviation from the minimum, clock drift,
//! interarrival jitter, and whether a queue is building.
//!
//! The receiver's clock minus the sender's timestamp is the one-way delay plus an unknown
//! offset plus a drift that grows with time. The drift is read from an envelope of the
//! delays ([`clock_drift`]): the lowest delay of each stretch of time, which a queue does
//! not lower (Moon, Skelly and Towsley's skew estimator), or the 90th percentile, on which a
//! buffer overfed to its end rests, whichever follows the slope most pairs of its points
//! agree on more tightly; only the points on that line are fitted, so a queue that fills
//! and stays does not tilt it. A slope beyond what a clock can drift (500 ppm) is a queue,
//! not a clock, and nothing is removed. The offset cancels in the deviation, taken from the
//! least drift-corrected delay of the whole run, as the seed takes it over its whole test:
//! a standing queue shows as the deviation it is, where a minimum over the last packets
//! would forget it within milliseconds of a fast probe.

use pathlab_core::quantile;
use serde::{Deserialize, Serialize};

use crate::control::{Direction, ReceivedProbe};
use crate::sequence::{SequenceStats, SequenceTracker};

/// The most two clocks plausibly drift apart: 500 parts per million.
pub const MAX_CLOCK_DRIFT: f64 = 500e-6;

/// RFC 3550 section 6.4.1 interarrival jitter, updated per packet in arrival order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jitter {
    previous: Option<(i128, i128)>,
    jitter_ns: f64,
}

impl Jitter {
    /// Adds a packet sent at `sent_ns` (sender clock) and received at `received_ns`.
    pub fn add(&mut self, sent_ns: u64, received_ns: u64) {
        let (sent, received) = (i128::from(sent_ns), i128::from(received_ns));
        if let Some((previous_sent, previous_received)) = self.previous {
            let difference = ((received - previous_received) - (sent - previous_sent)).abs() as f64;
            self.jitter_ns += (difference - self.jitter_ns) / 16.0;
        }
        self.previous = Some((sent, received));
    }

    /// The current estimate in ns.
    pub fn ns(&self) -> f64 {
        self.jitter_ns
    }
}

/// The base one-way delay of a live stream of samples: the minimum over a sliding history
/// of fixed-length buckets, as the seed asks ("the normal level must be computed over the
/// last N packets or minutes, because the clocks drift") and as LEDBAT keeps its base
/// history (RFC 6817 section 3.4.2: one minimum per interval, the oldest forgotten).
///
/// Samples are the receiver's clock minus the sender's timestamp, in ns: the clocks' offset
/// is in every sample and cancels in `sample - base`. A queue that never drains inside the
/// history raises the base with it, so a user of this filter drains its queue from time to
/// time; a drift of `d` (s/s) lets the base lag by at most `d x history`.
#[derive(Debug, Clone)]
pub struct BaseDelay {
    bucket_ns: u64,
    /// (start of the bucket in the caller's clock, minimum sample in it), oldest first.
    buckets: std::collections::VecDeque<(u64, i64)>,
    capacity: usize,
    /// The lowest of the buckets' minima, kept as they change: a bond's lines ask for it
    /// on every datagram and report (scanning the buckets then was 11% of the virtual
    /// week's CPU).
    lowest: Option<i64>,
}

impl BaseDelay {
    /// A filter whose history is `buckets` buckets of `bucket_ns` each.
    pub fn new(bucket_ns: u64, buckets: usize) -> BaseDelay {
        BaseDelay {
            bucket_ns: bucket_ns.max(1),
            buckets: std::collections::VecDeque::with_capacity(buckets.max(1)),
            capacity: buckets.max(1),
            lowest: None,
        }
    }

    /// Adds a sample taken at `now_ns` (the caller's clock, nondecreasing).
    pub fn add(&mut self, now_ns: u64, sample_ns: i64) {
        match self.buckets.back_mut() {
            Some((start, min)) if now_ns < start.saturating_add(self.bucket_ns) => {
                *min = (*min).min(sample_ns);
            }
            _ => {
                let gone = if self.buckets.len() == self.capacity {
                    self.buckets.pop_front()
                } else {
                    None
                };
                self.buckets.push_back((now_ns, sample_ns));
                if gone.is_some_and(|(_, min)| Some(min) == self.lowest) {
                    // The oldest bucket held the lowest: look again.
                    self.lowest = self.buckets.iter().map(|(_, min)| *min).min();
                    return;
                }
            }
        }
        self.lowest = Some(self.lowest.map_or(sample_ns, |low| low.min(sample_ns)));
    }

    /// The lowest sample in the history, if any.
    pub fn base(&self) -> Option<i64> {
        self.lowest
    }

    /// Forgets every sample (after a route change, say).
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.lowest = None;
    }
}

/// What a queue along the path is doing, as far as the probes can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueVerdict {
    /// The delay rose well beyond jitter and kept a rising trend.
    Building,
    /// No significant rise.
    NotBuilding,
    /// Too few packets to tell.
    Unknown,
}

impl QueueVerdict {
    /// The verdict in a few words, as tables and reports print it.
    pub fn text(self) -> &'static str {
        match self {
            QueueVerdict::Building => "queue building",
            QueueVerdict::NotBuilding => "no queue building",
            QueueVerdict::Unknown => "too few probes to tell",
        }
    }
}

/// The one-way delay analysis of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwdReport {
    /// Packets analysed (distinct, in range).
    pub packets: u64,
    /// Packets per window of the trend test's medians.
    pub window: u64,
    /// Deviation from the least delay of the run (clock drift removed), ns: median, 95th
    /// percentile, maximum.
    pub deviation_p50_ns: u64,
    /// 95th percentile of the deviation.
    pub deviation_p95_ns: u64,
    /// Largest deviation.
    pub deviation_max_ns: u64,
    /// Estimated clock drift between the hosts, in parts per million (receiver faster is
    /// positive), from the lower envelope of the delays; 0 when implausible.
    pub clock_drift_ppm: f64,
    /// Whether the lowest delays rose (or fell) faster than a clock drifts: a queue that
    /// stayed, so no drift was removed.
    #[serde(default)]
    pub clock_drift_implausible: bool,
    /// RFC 3550 interarrival jitter at the end of the run, ns.
    pub jitter_ns: f64,
    /// Least-squares trend of the drift-corrected delay, microseconds per second.
    pub trend_us_per_s: f64,
    /// Half-width of the trend's 95% confidence interval.
    pub trend_ci95_us_per_s: f64,
    /// How far the delay rose above its level at the start (window medians), ns.
    pub queue_growth_ns: u64,
    /// The verdict.
    pub verdict: QueueVerdict,
    /// The deviation of every packet in arrival order, `(received_ns - first received_ns,
    /// deviation_ns)`, for plots.
    pub series: Vec<(u64, u64)>,
}

/// Stretches of time the drift estimator takes one lowest delay from: one per this many
/// seconds of the run, at least [`DRIFT_WINDOWS`]`.start()` and at most `.end()`.
const DRIFT_WINDOW_S: f64 = 0.25;

/// How many lows the drift estimator takes from a run.
const DRIFT_WINDOWS: std::ops::RangeInclusive<usize> = 4..=40;

/// The clock drift a run's lowest delays show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockDrift {
    /// Receiver faster is positive, s/s; 0 when not plausible.
    pub drift: f64,
    /// Whether the lows moved as a clock can ([`MAX_CLOCK_DRIFT`]); when not, they moved
    /// with a queue, and no drift is taken.
    pub plausible: bool,
}

/// The `q` quantile of the delays of each of equal stretches of the run (`raw` in arrival
/// order; 0 is the lowest): `(the stretch's mean time, that delay)`.
fn envelope(raw: &[(f64, i64)], q: f64) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (raw.first(), raw.last()) else {
        return Vec::new();
    };
    let span = last.0 - first.0;
    if span <= 0.0 {
        return Vec::new();
    }
    let count = ((span / DRIFT_WINDOW_S).round() as usize)
        .clamp(*DRIFT_WINDOWS.start(), *DRIFT_WINDOWS.end());
    let width = span / count as f64;
    let mut stretches: Vec<(f64, Vec<i64>)> = vec![(0.0, Vec::new()); count];
    for &(t, delay) in raw {
        let index = (((t - first.0) / width) as usize).min(count - 1);
        stretches[index].0 += t;
        stretches[index].1.push(delay);
    }
    stretches
        .into_iter()
        .filter_map(|(time_sum, mut delays)| {
            delays.sort_unstable();
            let mean_t = time_sum / delays.len().max(1) as f64;
            quantile::of_sorted(&delays, q).map(|delay| (mean_t, delay as f64))
        })
        .collect()
}

/// The median of `values` (sorted in place); `None` when empty.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    quantile::of_sorted(values, 0.5)
}

/// A line through the points of an envelope: the slope most pairs agree on (their median,
/// Theil and Sen's estimator), then least squares over the points on that line (within
/// three median deviations, and 100 us of timing noise). Returns the slope (ns per s) and
/// the points' median deviation from the line, ns: how tightly the envelope follows it.
fn envelope_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    if points.len() < 3 {
        return None;
    }
    let mut slopes: Vec<f64> = points
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            points[i + 1..]
                .iter()
                .filter(move |b| b.0 > a.0)
                .map(move |b| (b.1 - a.1) / (b.0 - a.0))
        })
        .collect();
    let slope = median(&mut slopes)?;
    let mut offsets: Vec<f64> = points.iter().map(|(t, d)| d - slope * t).collect();
    let intercept = median(&mut offsets)?;
    let residual = |(t, d): &(f64, f64)| (d - intercept - slope * t).abs();
    let mut residuals: Vec<f64> = points.iter().map(residual).collect();
    let spread = median(&mut residuals)?;
    let tolerance = (3.0 * 1.4826 * spread).max(100_000.0);
    let on_line: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|point| residual(point) <= tolerance)
        .collect();
    let fitted = regression(&on_line).map_or(slope, |(fitted, _)| fitted);
    Some((fitted, spread))
}

/// The clock drift from the envelopes of the delays (`raw`: seconds since the first
/// arrival, delay in ns, in arrival order). Each stretch of the run gives its lowest delay
/// and its 90th percentile; a line is fitted to each envelope ([`envelope_line`]), and the
/// one the envelope follows more tightly is taken. A path whose queue empties now and then
/// rests on its lows (Moon, Skelly and Towsley's lower envelope), whose stretches a filling
/// buffer lifted are off the line and left out; a buffer overfed to its end rests on its
/// highs, since it holds no more than its limit, while its lows sink by however long the
/// sender last paused (a busy host). The 90th percentile, not the highest: a probe stamped
/// and then held back by the sender's own scheduler looks later than any queue made it.
/// A slope beyond [`MAX_CLOCK_DRIFT`] is not a clock: no drift is taken.
pub fn clock_drift(raw: &[(f64, i64)]) -> ClockDrift {
    let lows = envelope_line(&envelope(raw, 0.0));
    let highs = envelope_line(&envelope(raw, 0.9));
    let tighter = match (lows, highs) {
        (Some(low), Some(high)) if high.1 < low.1 => Some(high),
        (Some(low), _) => Some(low),
        (None, high) => high,
    };
    let Some((ns_per_s, _)) = tighter else {
        return ClockDrift {
            drift: 0.0,
            plausible: true,
        };
    };
    let drift = ns_per_s * 1e-9;
    if drift.abs() <= MAX_CLOCK_DRIFT {
        ClockDrift {
            drift,
            plausible: true,
        }
    } else {
        ClockDrift {
            drift: 0.0,
            plausible: false,
        }
    }
}

/// Least-squares slope of `y` on `x` and its standard error.
fn regression(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    let standard_error = (residual / (n - 2.0) / sxx).sqrt();
    Some((slope, standard_error))
}

/// The trend test: whether the one-way delay of a run of probes rises, the sign of a queue
/// building because they (with whatever shares the path) arrive faster than it drains.
/// The same test judges `owd`'s queue verdict and each of `capacity`'s self-loading
/// streams (the pathload idea: a stream faster than the available bandwidth builds a
/// queue).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayTrend {
    /// Estimated clock drift (receiver faster is positive), s/s: 0 when the lows moved
    /// faster than a clock can ([`ClockDrift`]).
    pub clock_drift: f64,
    /// Whether the lows moved faster than a clock can, so no drift was removed.
    pub clock_drift_implausible: bool,
    /// Least-squares trend of the drift-corrected delay, ns per second.
    pub trend_ns_per_s: f64,
    /// Its standard error.
    pub trend_se_ns_per_s: f64,
    /// How far the highest window median rose above the first window's, ns.
    pub growth_ns: f64,
    /// The trend times the run's span: the rise the fit says happened, ns.
    pub fitted_rise_ns: f64,
    /// What a rise must exceed to count: 1 ms, or five times the jitter.
    pub threshold_ns: f64,
    /// RFC 3550 jitter of the run, ns.
    pub jitter_ns: f64,
    /// The verdict.
    pub verdict: QueueVerdict,
}

/// Each probe's time since the first arrival (s) and its delay relative to the first
/// probe's (ns; the clocks' offset cancels).
fn relative_delays(probes: &[ReceivedProbe]) -> Vec<(f64, i64)> {
    let Some(first) = probes.first() else {
        return Vec::new();
    };
    let start = first.received_ns;
    let base = i128::from(first.received_ns) - i128::from(first.sent_ns);
    probes
        .iter()
        .map(|p| {
            let t = p.received_ns.saturating_sub(start) as f64 * 1e-9;
            let delay = i128::from(p.received_ns) - i128::from(p.sent_ns) - base;
            (t, delay as i64)
        })
        .collect()
}

/// Runs the trend test on probes (distinct ones, in arrival order) with windows of
/// `window` packets: the clock drift from the lower envelope ([`clock_drift`]) removed;
/// then a queue builds when the
/// delay rose by more than the noise (1 ms, or five times the jitter) both in the window
/// medians and along the fitted trend over the whole run, and the trend is above zero with
/// 95% confidence. The fitted rise keeps a slope that is significant but tiny (a few us/s,
/// from timing noise on a busy host) from counting because one burst lifted a window's
/// median. Fewer than two windows of probes: [`QueueVerdict::Unknown`].
pub fn delay_trend(probes: &[ReceivedProbe], window: usize) -> DelayTrend {
    let window = window.max(2);
    let mut jitter = Jitter::default();
    for probe in probes {
        jitter.add(probe.sent_ns, probe.received_ns);
    }
    let raw = relative_delays(probes);
    let clock = clock_drift(&raw);
    let drift = clock.drift;
    let corrected: Vec<(f64, f64)> = raw
        .iter()
        .map(|&(t, d)| (t, d as f64 - drift * t * 1e9))
        .collect();
    let (trend, trend_se) = regression(&corrected).unwrap_or((0.0, 0.0));
    let medians: Vec<f64> = corrected
        .chunks(window)
        .map(|block| {
            let mut values: Vec<f64> = block.iter().map(|p| p.1).collect();
            values.sort_by(f64::total_cmp);
            quantile::of_sorted(&values, 0.5).expect("a chunk is not empty")
        })
        .collect();
    // Growth: the highest window median above the first window's median.
    let growth = match medians.first() {
        Some(first) => medians.iter().copied().fold(f64::MIN, f64::max) - first,
        None => 0.0,
    };
    let threshold = (1e6f64).max(5.0 * jitter.ns());
    let span_s = corrected.last().map_or(0.0, |p| p.0) - corrected.first().map_or(0.0, |p| p.0);
    let fitted_rise = trend * span_s;
    let verdict = if probes.len() < 2 * window {
        QueueVerdict::Unknown
    } else if growth > threshold && fitted_rise > threshold && trend - 1.96 * trend_se > 0.0 {
        QueueVerdict::Building
    } else {
        QueueVerdict::NotBuilding
    };
    DelayTrend {
        clock_drift: drift,
        clock_drift_implausible: !clock.plausible,
        trend_ns_per_s: trend,
        trend_se_ns_per_s: trend_se,
        growth_ns: growth,
        fitted_rise_ns: fitted_rise,
        threshold_ns: threshold,
        jitter_ns: jitter.ns(),
        verdict,
    }
}

/// Analyses the probes a receiver recorded (distinct ones, in arrival order).
pub fn analyse(probes: &[ReceivedProbe], window: usize) -> OwdReport {
    let window = window.max(2);
    let trend = delay_trend(probes, window);
    if probes.is_empty() {
        return OwdReport {
            packets: 0,
            window: window as u64,
            deviation_p50_ns: 0,
            deviation_p95_ns: 0,
            deviation_max_ns: 0,
            clock_drift_ppm: 0.0,
            clock_drift_implausible: false,
            jitter_ns: 0.0,
            trend_us_per_s: 0.0,
            trend_ci95_us_per_s: 0.0,
            queue_growth_ns: 0,
            verdict: QueueVerdict::Unknown,
            series: Vec::new(),
        };
    }
    // The seed's deviation: from the least delay of the whole run, the drift removed.
    let corrected: Vec<(f64, f64)> = relative_delays(probes)
        .into_iter()
        .map(|(t, delay)| (t, delay as f64 - trend.clock_drift * t * 1e9))
        .collect();
    let base = corrected
        .iter()
        .map(|&(_, delay)| delay)
        .fold(f64::INFINITY, f64::min);
    let series: Vec<(u64, u64)> = corrected
        .iter()
        .map(|&(t, delay)| ((t * 1e9) as u64, (delay - base).round() as u64))
        .collect();
    let mut deviations: Vec<u64> = series.iter().map(|s| s.1).collect();
    deviations.sort_unstable();
    OwdReport {
        packets: probes.len() as u64,
        window: window as u64,
        deviation_p50_ns: quantile::of_sorted(&deviations, 0.5).unwrap_or(0),
        deviation_p95_ns: quantile::of_sorted(&deviations, 0.95).unwrap_or(0),
        deviation_max_ns: deviations.last().copied().unwrap_or(0),
        clock_drift_ppm: trend.clock_drift * 1e6,
        clock_drift_implausible: trend.clock_drift_implausible,
        jitter_ns: trend.jitter_ns,
        trend_us_per_s: trend.trend_ns_per_s * 1e-3,
        trend_ci95_us_per_s: 1.96 * trend.trend_se_ns_per_s * 1e-3,
        queue_growth_ns: trend.growth_ns.max(0.0) as u64,
        verdict: trend.verdict,
        series,
    }
}

/// Everything a one-way test found, for one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneWayResult {
    /// Which way the probes went.
    pub direction: Direction,
    /// Rate asked for, bits per second of UDP payload.
    pub rate_bps: u64,
    /// UDP payload bytes per probe.
    pub size: u32,
    /// Rate the sender achieved, bits per second of UDP payload.
    pub achieved_rate_bps: f64,
    /// Probes per second the sender achieved.
    pub achieved_pps: f64,
    /// Loss, duplicates, reordering.
    pub sequence: SequenceStats,
    /// Probes the receiver dropped for failing authentication or not belonging to the test.
    pub rejected: u64,
    /// How late the sender wrote its probes against their schedule (zero from a sender
    /// that does not say).
    #[serde(default)]
    pub send_lateness: SendLateness,
    /// Delay deviation, jitter, drift, trend and the verdict.
    pub owd: OwdReport,
}

impl OneWayResult {
    /// Probes per second that arrived: what the path delivered (its capacity in packets,
    /// when the probes overloaded it). It is the least-squares slope of the arrivals'
    /// count against their arrival time, not the count over the first-to-last span: a
    /// forwarder that stalls for a few milliseconds at either end (a busy emulator) moves
    /// the span's ends, and the span's rate with them, but only a few points of the line.
    /// `None` with fewer than two arrivals at distinct times.
    pub fn delivered_pps(&self) -> Option<f64> {
        let series = &self.owd.series;
        let n = series.len() as f64;
        let mean_t = series.iter().map(|&(t, _)| t as f64).sum::<f64>() / n;
        let mean_i = (n - 1.0) / 2.0;
        let (mut covariance, mut variance) = (0.0, 0.0);
        for (i, &(t, _)) in series.iter().enumerate() {
            let dt = (t as f64 - mean_t) * 1e-9;
            covariance += dt * (i as f64 - mean_i);
            variance += dt * dt;
        }
        (series.len() >= 2 && variance > 0.0).then(|| covariance / variance)
    }
}

/// How late a one-way test's sender wrote its probes (defined with the `sent` message that
/// carries it).
pub use crate::control::SendLateness;

/// What the sender of a one-way test reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderReport {
    /// Which way the probes went.
    pub direction: Direction,
    /// Rate asked for, bits per second of UDP payload.
    pub rate_bps: u64,
    /// UDP payload bytes per probe.
    pub size: u32,
    /// Probes sent.
    pub sent: u64,
    /// From the first send to the last, ns.
    pub duration_ns: u64,
    /// How late it sent its probes.
    pub late: SendLateness,
}

/// Computes a direction's result from what the sender reports and what the receiver
/// recorded (arrivals in arrival order; a receiver counts copies of a probe it recorded in
/// `duplicates` instead of recording them, and copies among `arrivals` count too).
pub fn one_way_result(
    sender: SenderReport,
    arrivals: &[ReceivedProbe],
    rejected: u64,
    duplicates: u64,
    window: usize,
) -> OneWayResult {
    let mut tracker = SequenceTracker::new(sender.sent);
    let distinct: Vec<ReceivedProbe> = arrivals
        .iter()
        .copied()
        .filter(|p| tracker.arrive(p.seq))
        .collect();
    let seconds = sender.duration_ns as f64 * 1e-9;
    // n probes span n - 1 intervals.
    let intervals = sender.sent.saturating_sub(1) as f64;
    let achieved_pps = if seconds > 0.0 {
        intervals / seconds
    } else {
        0.0
    };
    OneWayResult {
        direction: sender.direction,
        rate_bps: sender.rate_bps,
        size: sender.size,
        achieved_rate_bps: achieved_pps * f64::from(sender.size) * 8.0,
        achieved_pps,
        sequence: {
            let mut stats = tracker.stats(sender.sent);
            stats.duplicates += duplicates;
            stats
        },
        rejected,
        send_lateness: sender.late,
        owd: analyse(&distinct, window),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base_delay_is_the_minimum_of_its_history_and_forgets_the_oldest_bucket() {
        let mut base = super::BaseDelay::new(1_000, 3);
        assert_eq!(base.base(), None);
        base.add(0, 50);
        base.add(500, 40);
        base.add(1_000, 70);
        base.add(2_100, 60);
        assert_eq!(base.base(), Some(40));
        // A fourth bucket pushes out the first, whose minimum was 40.
        base.add(3_200, 65);
        assert_eq!(base.base(), Some(60));
        // A clock running slow lowers the samples: the base follows at once.
        base.add(3_300, -5);
        assert_eq!(base.base(), Some(-5));
        base.clear();
        assert_eq!(base.base(), None);
    }

    /// The kept lowest is the buckets' lowest after every sample, through buckets that
    /// leave holding it and not, samples that rise and fall, and clears.
    #[test]
    fn base_delay_kept_as_it_changes_is_the_lowest_of_its_buckets() {
        let mut rng = pathlab_core::rng::Rng::seed_from(3);
        let mut base = super::BaseDelay::new(1_000, 4);
        let mut now = 0u64;
        for k in 0..20_000 {
            now += (rng.f64() * 700.0) as u64;
            let sample = (rng.f64() * 1_000.0) as i64 - 300 + (k % 500);
            base.add(now, sample);
            let scanned = base.buckets.iter().map(|(_, min)| *min).min();
            assert_eq!(base.base(), scanned, "after sample {k}");
            if k % 4_999 == 4_998 {
                base.clear();
            }
        }
    }

    use super::*;
    use pathlab_core::{Instant, Link, LinkSpec, Packet};

    /// Probes of `size` bytes at `rate_bps` through a link in virtual time, received on a
    /// clock `offset_ns` ahead of the sender's and drifting by `drift_ppm`.
    fn through_link(
        spec: &str,
        rate_bps: f64,
        size: u32,
        seconds: f64,
        offset_ns: u64,
        drift_ppm: f64,
    ) -> (Vec<ReceivedProbe>, u64) {
        let interval = f64::from(size) * 8.0 / rate_bps;
        let count = (seconds / interval) as u64;
        let sends: Vec<u64> = (0..count)
            .map(|seq| (seq as f64 * interval * 1e9) as u64)
            .collect();
        through_link_at(spec, size, &sends, offset_ns, drift_ppm)
    }

    /// Probes of `size` bytes sent at `sends` (ns, nondecreasing) through a link in virtual
    /// time, received on a clock `offset_ns` ahead of the sender's and drifting by
    /// `drift_ppm`.
    fn through_link_at(
        spec: &str,
        size: u32,
        sends: &[u64],
        offset_ns: u64,
        drift_ppm: f64,
    ) -> (Vec<ReceivedProbe>, u64) {
        let mut link = Link::new(&LinkSpec::parse(spec).unwrap(), 1).unwrap();
        let mut received = Vec::new();
        let receive = |now: Instant, packet: Packet, received: &mut Vec<ReceivedProbe>| {
            let local = now.as_nanos() as f64 * (1.0 + drift_ppm * 1e-6) + offset_ns as f64;
            received.push(ReceivedProbe {
                seq: u64::from(packet.tag),
                sent_ns: sends[packet.tag as usize],
                received_ns: local as u64,
            });
        };
        for (seq, &sent) in sends.iter().enumerate() {
            let now = Instant::from_nanos(sent);
            while let Some(at) = link.poll_at().filter(|&at| at <= now) {
                while let Some(packet) = link.dequeue(at) {
                    receive(at, packet, &mut received);
                }
            }
            let mut packet = Packet::synthetic(now, size + 42, 7, pathlab_core::Ecn::NotEct);
            packet.tag = seq as u32;
            link.enqueue(now, packet);
        }
        while let Some(at) = link.poll_at() {
            while let Some(packet) = link.dequeue(at) {
                receive(at, packet, &mut received);
            }
        }
        (received, sends.len() as u64)
    }

    #[test]
    fn rfc3550_jitter_of_alternating_delays() {
        // Delays alternate 10 and 12 ms: |D| = 2 ms every packet, so J -> 2 ms.
        let mut jitter = Jitter::default();
        for i in 0..400u64 {
            let delay = if i % 2 == 0 { 10_000_000 } else { 12_000_000 };
            jitter.add(i * 1_000_000, i * 1_000_000 + delay);
        }
        assert!((jitter.ns() - 2e6).abs() < 1e3, "{}", jitter.ns());
    }

    #[test]
    fn fifteen_megabits_into_ten_builds_a_queue_and_five_does_not() {
        // The seed's situation: offered load above the line rate fills the buffer.
        let (over, _) = through_link("rate 10mbit", 15e6, 1200, 3.0, 123_456_789, 40.0);
        let report = analyse(&over, 100);
        assert_eq!(report.verdict, QueueVerdict::Building, "{report:?}");
        // The queue grows at (15 - 10) / 10 of real time: ~500 ms per second.
        assert!(
            report.trend_us_per_s > 100_000.0,
            "{}",
            report.trend_us_per_s
        );
        let (under, _) = through_link("rate 10mbit", 5e6, 1200, 3.0, 123_456_789, 40.0);
        let report = analyse(&under, 100);
        assert_eq!(
            report.verdict,
            QueueVerdict::NotBuilding,
            "{:?}",
            (report.trend_us_per_s, report.queue_growth_ns)
        );
        // The clock drift (40 ppm) is found and removed.
        assert!(
            (report.clock_drift_ppm - 40.0).abs() < 2.0,
            "{}",
            report.clock_drift_ppm
        );
        assert!(
            report.trend_us_per_s.abs() < 5.0,
            "{}",
            report.trend_us_per_s
        );
    }

    #[test]
    fn a_tiny_significant_slope_and_one_burst_are_not_a_queue() {
        // What a busy host gave at 10 Mbit/s into 11: the delay creeps up by 30 us/s (not
        // in the minima, so not clock drift) and one burst lifts one window's median by
        // 2 ms. Over 2 s the fitted line rises 60 us: no queue is building.
        let probes: Vec<ReceivedProbe> = (0..2000u64)
            .map(|seq| {
                let sent_ns = seq * 1_000_000;
                let t = sent_ns as f64 * 1e-9;
                let mut delay = 10_000_000.0;
                if seq % 10 != 0 {
                    delay += 50_000.0 + 30_000.0 * t + (seq % 7) as f64 * 1_000.0;
                }
                if (1000..1080).contains(&seq) {
                    delay += 2_000_000.0;
                }
                ReceivedProbe {
                    seq,
                    sent_ns,
                    received_ns: sent_ns + delay as u64,
                }
            })
            .collect();
        let report = analyse(&probes, 100);
        assert!(
            report.queue_growth_ns > 1_000_000
                && report.trend_us_per_s - report.trend_ci95_us_per_s > 0.0,
            "the case this guards: growth and a significant trend {report:?}"
        );
        assert_eq!(report.verdict, QueueVerdict::NotBuilding, "{report:?}");
    }

    #[test]
    fn delivered_packets_per_second_are_the_lines_and_a_late_tail_barely_moves_them() {
        // 400-byte probes at 5 Mbit/s (1562.5/s) into 1000 packets/s: the line delivers
        // one per ms (rate 10 Mbit/s is far from binding).
        let (probes, sent) = through_link("rate 10mbit pps 1000", 5e6, 400, 3.0, 0, 0.0);
        let sender = SenderReport {
            direction: Direction::Up,
            rate_bps: 5_000_000,
            size: 400,
            sent,
            duration_ns: 3_000_000_000,
            late: SendLateness::default(),
        };
        let result = one_way_result(sender, &probes, 0, 0, 100);
        let delivered = result.delivered_pps().unwrap();
        assert!((delivered / 1000.0 - 1.0).abs() < 1e-3, "{delivered}");
        // A forwarder that stalls 30 ms before its last 20 packets (a busy emulator): the
        // first-to-last span (about 4 s: 3 s of sending, then the queue's 1000 packets)
        // would say 0.7% less; the slope moves under 0.1%.
        let mut late = probes.clone();
        let count = late.len();
        for probe in &mut late[count - 20..] {
            probe.received_ns += 30_000_000;
        }
        let result = one_way_result(sender, &late, 0, 0, 100);
        let span_s = result.owd.series.last().unwrap().0 as f64 * 1e-9;
        let by_span = (result.owd.series.len() - 1) as f64 / span_s;
        assert!(by_span / 1000.0 - 1.0 < -0.006, "{by_span}");
        let delivered = result.delivered_pps().unwrap();
        assert!((delivered / 1000.0 - 1.0).abs() < 1e-3, "{delivered}");
        assert_eq!(
            one_way_result(sender, &probes[..1], 0, 0, 100).delivered_pps(),
            None
        );
    }

    #[test]
    fn jitter_alone_is_not_a_queue() {
        let (probes, _) = through_link(
            "delay 20ms 5ms distribution normal",
            5e6,
            1200,
            3.0,
            0,
            -25.0,
        );
        let report = analyse(&probes, 100);
        assert_eq!(report.verdict, QueueVerdict::NotBuilding, "{report:?}");
        assert!(
            report.jitter_ns > 1e6,
            "RFC 3550 jitter sees the 5 ms spread: {}",
            report.jitter_ns
        );
    }

    #[test]
    fn deviation_is_taken_from_the_runs_minimum() {
        let probes: Vec<ReceivedProbe> = [5u64, 3, 4, 10, 3]
            .iter()
            .enumerate()
            .map(|(i, &d)| ReceivedProbe {
                seq: i as u64,
                sent_ns: i as u64 * 100,
                received_ns: i as u64 * 100 + d,
            })
            .collect();
        let report = analyse(&probes, 2);
        let deviations: Vec<u64> = report.series.iter().map(|s| s.1).collect();
        assert_eq!(deviations, vec![2, 0, 1, 7, 0]);
    }

    /// The queue a full buffer of `limit` frames of `frame` bytes holds at `rate_bps`, ns.
    fn full_buffer_ns(limit: f64, frame: f64, rate_bps: f64) -> f64 {
        limit * frame * 8.0 / rate_bps * 1e9
    }

    #[test]
    fn a_known_drift_is_recovered_while_a_queue_fills_and_stays() {
        // The seed's plot on an overfed line: 12 Mbit/s into 10 with a buffer of 100
        // frames, for 8 s. The buffer fills in half a second and stays full; the lows of
        // the other stretches sit on a line whose slope is the clock's.
        for drift_ppm in [0.0, 100.0, -300.0] {
            let (probes, _) = through_link(
                "rate 10mbit limit 100",
                12e6,
                1200,
                8.0,
                987_654_321,
                drift_ppm,
            );
            let report = analyse(&probes, 100);
            assert!(!report.clock_drift_implausible, "{drift_ppm}");
            assert!(
                (report.clock_drift_ppm - drift_ppm).abs() < 5.0,
                "{drift_ppm} ppm: found {}",
                report.clock_drift_ppm
            );
            assert_eq!(report.verdict, QueueVerdict::Building);
            // The deviation shows the buffer that stayed full: its 95th percentile is the
            // full buffer's delay (1242-byte frames), within 10%.
            let full = full_buffer_ns(100.0, 1242.0, 10e6);
            assert!(
                (report.deviation_p95_ns as f64 / full - 1.0).abs() < 0.1,
                "{drift_ppm} ppm: p95 {} ns for {full}",
                report.deviation_p95_ns
            );
            assert!(report.deviation_p50_ns as f64 > 0.9 * full);
        }
    }

    #[test]
    fn a_sender_that_stalls_on_a_busy_host_does_not_tilt_the_drift() {
        // What a busy host gave on the kernel's tbf (-52.7 ppm between two namespaces): the
        // sender loses its core for up to 12 ms now and then, the full buffer drains a
        // little each time, and the lows of most stretches sit some milliseconds below the
        // full buffer, by how long that stretch's worst stall was. The highs stay at the
        // buffer's limit.
        // A stalled sender catches up: what fell due in the stall leaves at its end.
        let interval = 1242.0 * 8.0 / 12.4e6;
        let mut rng = pathlab_core::rng::Rng::seed_from(11);
        let mut sends = Vec::new();
        let mut stalled_until = 0u64;
        let mut t = 0.0f64;
        while t < 10.0 {
            let due = (t * 1e9) as u64;
            if due > stalled_until && rng.chance(0.01) {
                stalled_until = due + rng.below(12_000_000);
            }
            sends.push(due.max(stalled_until));
            t += interval;
        }
        for drift_ppm in [0.0, 80.0] {
            let (probes, _) = through_link_at("rate 10mbit limit 100", 1200, &sends, 77, drift_ppm);
            let report = analyse(&probes, 100);
            assert!(
                (report.clock_drift_ppm - drift_ppm).abs() < 5.0,
                "{drift_ppm} ppm: found {}",
                report.clock_drift_ppm
            );
        }
    }

    #[test]
    fn below_the_rate_the_deviation_is_flat_and_the_drift_is_the_clocks() {
        let (probes, _) = through_link("rate 10mbit limit 100", 5e6, 1200, 5.0, 1, 40.0);
        let report = analyse(&probes, 100);
        assert!((report.clock_drift_ppm - 40.0).abs() < 5.0, "{report:?}");
        // One frame's serialization at most: 1242 bytes at 10 Mbit/s is under 1 ms.
        assert!(
            report.deviation_p95_ns < 1_000_000,
            "{}",
            report.deviation_p95_ns
        );
        assert_eq!(report.verdict, QueueVerdict::NotBuilding);
    }

    #[test]
    fn a_queue_that_grows_all_run_is_not_taken_for_a_clock() {
        // 15 Mbit/s into 10 with no limit: the lows rise at 500 ms per second, a thousand
        // times what a clock drifts; nothing is removed and the report says why.
        let (probes, _) = through_link("rate 10mbit", 15e6, 1200, 3.0, 5, 0.0);
        let report = analyse(&probes, 100);
        assert!(report.clock_drift_implausible, "{report:?}");
        assert_eq!(report.clock_drift_ppm, 0.0);
        assert_eq!(report.verdict, QueueVerdict::Building);
    }
}
