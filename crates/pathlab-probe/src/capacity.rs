//! Capacity and available bandwidth from what probe receivers recorded, sans-IO.
//!
//! **Capacity** (the pathrate idea, Dovrolis, Ramanathan and Moore 2004): two packets sent
//! back to back leave the narrowest link as far apart as that link takes to serialize the
//! second, so `capacity = bits / dispersion`. A train of `n` back-to-back packets gives
//! `(n - 1) x bits / (last arrival - first arrival)`, averaging the timestamps' noise over
//! `n - 1` gaps. Cross traffic that slips in between widens the dispersion, so a train
//! measures the *asymptotic dispersion rate* (ADR), at most the capacity; short pairs are
//! less often hit, so the strongest *mode* of the pair estimates still sits at the
//! capacity. Pairs are also the first to suffer from timestamps that come in bursts (60 us
//! apart at 200 Mbit/s), so pathlab takes the trains' median and reports the pairs' mode
//! beside it, flagging a disagreement (see [`combine`]).
//!
//! **Available bandwidth** (the pathload idea, Jain and Dovrolis 2002): a periodic stream at
//! rate `R` builds a queue, and its one-way delays rise, exactly when `R` is above what the
//! path has spare; below, the delays stay flat. Each stream is judged by the trend test
//! `owd` uses ([`crate::owd::delay_trend`]), a stream that lost probes counts as rising,
//! and a fleet of streams at one rate says "above" when most of its streams rose. A
//! binary search over `R` between 0 and the capacity narrows the bracket in which the
//! verdict flips; the available bandwidth is its middle, the bracket its range.

use pathlab_core::quantile;
use pathlab_core::wire::ethernet;
use serde::{Deserialize, Serialize};

use crate::control::{Direction, ReceivedProbe};
use crate::owd::{delay_trend, QueueVerdict};
use crate::shaper::Shaper;

/// A median with its 95% confidence interval (distribution-free, from order statistics).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The median, bits/s.
    pub median_bps: f64,
    /// Lower end of the 95% confidence interval of the median.
    pub low_bps: f64,
    /// Upper end.
    pub high_bps: f64,
    /// How many samples.
    pub samples: usize,
}

/// The median of `values` and a 95% confidence interval for it: the order statistics
/// `n/2 -/+ 0.98 sqrt(n)` (normal approximation of the binomial), clamped to the sample.
pub fn median_ci(values: &[f64]) -> Option<Estimate> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let half_width = 0.98 * (n as f64).sqrt();
    let low = ((n as f64 / 2.0 - half_width).floor().max(0.0)) as usize;
    let high = ((n as f64 / 2.0 + half_width).ceil() as usize).min(n - 1);
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])
    };
    Some(Estimate {
        median_bps: median,
        low_bps: sorted[low],
        high_bps: sorted[high],
        samples: n,
    })
}

/// One estimate per train whose every probe arrived exactly once: `(length - 1) x
/// bits_per_probe / (last arrival - first arrival)`. Trains are the probes `k x length ..
/// (k + 1) x length`.
pub fn train_estimates(arrivals: &[ReceivedProbe], length: u64, bits_per_probe: f64) -> Vec<f64> {
    let length = length.max(2);
    let mut trains = std::collections::BTreeMap::<u64, Vec<&ReceivedProbe>>::new();
    for probe in arrivals {
        trains.entry(probe.seq / length).or_default().push(probe);
    }
    trains
        .values()
        .filter(|probes| {
            let mut seqs: Vec<u64> = probes.iter().map(|p| p.seq).collect();
            seqs.sort_unstable();
            seqs.dedup();
            seqs.len() == probes.len() && probes.len() as u64 == length
        })
        .filter_map(|probes| {
            let first = probes.iter().map(|p| p.received_ns).min()?;
            let last = probes.iter().map(|p| p.received_ns).max()?;
            (last > first)
                .then(|| (length - 1) as f64 * bits_per_probe / ((last - first) as f64 * 1e-9))
        })
        .collect()
}

/// The strongest mode of `values`: the centre of the densest window `width` wide (as a
/// fraction of the value), found over windows centred on each sample; its samples'
/// median. `None` when empty.
pub fn strongest_mode(values: &[f64], width: f64) -> Option<(f64, usize)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mut best: Option<(usize, usize)> = None;
    let mut end = 0;
    for start in 0..sorted.len() {
        let limit = sorted[start] * (1.0 + width);
        end = end.max(start);
        while end + 1 < sorted.len() && sorted[end + 1] <= limit {
            end += 1;
        }
        if best.is_none_or(|(s, e)| end - start > e - s) {
            best = Some((start, end));
        }
    }
    let (start, end) = best?;
    let window = &sorted[start..=end];
    Some((quantile::of_sorted(window, 0.5)?, window.len()))
}

/// What the dispersion of pairs and trains says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// The path's capacity at the IP layer, bits/s.
    pub capacity_bps: f64,
    /// Its 95% confidence interval.
    pub low_bps: f64,
    /// Upper end.
    pub high_bps: f64,
    /// The same for the link layer that counts a 14-byte Ethernet header per packet (what
    /// a `rate` in tc, netem or pathlab means).
    pub frame_capacity_bps: f64,
    /// Which estimate was taken: `trains` or `pairs`.
    pub method: String,
    /// IP bytes per probe.
    pub packet_bytes: u32,
    /// The pairs' median and CI.
    pub pairs: Option<Estimate>,
    /// The pairs' strongest mode, bits/s, and how many pairs are in it.
    pub pair_mode_bps: Option<f64>,
    /// Pairs sent.
    pub pairs_sent: u64,
    /// The trains' median and CI (the asymptotic dispersion rate).
    pub trains: Option<Estimate>,
    /// Probes per train.
    pub train_length: u64,
    /// Trains sent.
    pub trains_sent: u64,
    /// What a constant-rate stream after the trains found: a token bucket (whose sustained
    /// rate is then the bottleneck, [`Capacity::bottleneck_bps`]) or none within its
    /// budget; `None` when no stream was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shaper: Option<Shaper>,
}

impl Capacity {
    /// The rate the path sustains at the IP layer: a shaper's or policer's rate once its
    /// bucket is empty when the stream found one, else the capacity (dispersion measures
    /// the link beneath a bucket, not the plan).
    pub fn bottleneck_bps(&self) -> f64 {
        match &self.shaper {
            Some(shaper) if shaper.shaped() => shaper.sustained_bps,
            _ => self.capacity_bps,
        }
    }

    /// How [`Capacity::bottleneck_bps`] was found, for a report's reader.
    pub fn bottleneck_source(&self) -> &'static str {
        match &self.shaper {
            Some(shaper) if shaper.shaped() => {
                "the sustained rate after a token bucket's burst, from a constant-rate stream"
            }
            Some(_) => "packet trains; a constant-rate stream found no token bucket",
            None => "packet trains",
        }
    }

    /// Whether the pairs' strongest mode is more than 10% away from the capacity.
    pub fn pairs_disagree(&self) -> bool {
        self.pair_mode_bps
            .is_some_and(|mode| (mode / self.capacity_bps - 1.0).abs() > 0.1)
    }
}

/// Width of the window the pair mode is taken over, as a fraction of the rate.
pub const MODE_WIDTH: f64 = 0.05;

/// Combines pairs and trains into a capacity: the trains' median, with its confidence
/// interval. The pairs' strongest mode is kept beside it as a check: above the trains'
/// median by more than 10%, cross traffic that joins before the bottleneck may be
/// widening the trains (pathrate would take the mode then), or the receiver's timestamps
/// are compressing pairs (a host that delivers packets in bursts, as a busy receiver or an
/// emulator does at a few hundred Mbit/s, where a pair is 60 us apart). Only the trains
/// average the timing noise over many gaps, so they decide; [`Capacity::pairs_disagree`]
/// says when to look closer.
pub fn combine(
    pair_estimates: &[f64],
    train_estimates: &[f64],
    packet_bytes: u32,
    (pairs_sent, train_length, trains_sent): (u64, u64, u64),
) -> Option<Capacity> {
    let pairs = median_ci(pair_estimates);
    let trains = median_ci(train_estimates);
    let mode = strongest_mode(pair_estimates, MODE_WIDTH);
    let (capacity, low, high, method) = match (trains, pairs) {
        (Some(t), _) => (t.median_bps, t.low_bps, t.high_bps, "trains"),
        (None, Some(p)) => (p.median_bps, p.low_bps, p.high_bps, "pairs"),
        (None, None) => return None,
    };
    // The Ethernet header is what a frame adds to an IP packet on the links Linux, tc,
    // netem and pathlab's emulator rate-limit (preamble, FCS and gap not counted).
    let frame_bytes = packet_bytes + ethernet::HEADER_LEN as u32;
    let frame = f64::from(frame_bytes) / f64::from(packet_bytes);
    Some(Capacity {
        capacity_bps: capacity,
        low_bps: low,
        high_bps: high,
        frame_capacity_bps: capacity * frame,
        method: method.into(),
        packet_bytes,
        pairs,
        pair_mode_bps: mode.map(|m| m.0),
        pairs_sent,
        trains,
        train_length,
        trains_sent,
        shaper: None,
    })
}

/// One self-loading stream, judged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Probes that arrived (distinct).
    pub received: u64,
    /// Probes that did not.
    pub lost: u64,
    /// The trend test's verdict.
    pub verdict: QueueVerdict,
    /// The delay's rise along the fitted trend, ns.
    pub rise_ns: f64,
}

impl Stream {
    /// Whether the stream says its rate is above what is available: a rising delay, or
    /// losses (a queue that overflowed).
    pub fn rising(&self) -> bool {
        self.lost > 0 || self.verdict == QueueVerdict::Building
    }
}

/// Judges each stream of a fleet: stream `k` is the probes `k x length .. (k + 1) x length`,
/// in arrival order; the trend test runs with windows of a tenth of a stream (pathload's
/// groups), at least 4 probes.
pub fn judge_streams(arrivals: &[ReceivedProbe], length: u64, streams: u64) -> Vec<Stream> {
    let window = (length / 10).max(4) as usize;
    (0..streams)
        .map(|k| {
            let mut seen = std::collections::HashSet::new();
            let probes: Vec<ReceivedProbe> = arrivals
                .iter()
                .filter(|p| p.seq / length == k && seen.insert(p.seq))
                .copied()
                .collect();
            let trend = delay_trend(&probes, window);
            Stream {
                received: probes.len() as u64,
                lost: length - probes.len() as u64,
                verdict: trend.verdict,
                rise_ns: trend.fitted_rise_ns,
            }
        })
        .collect()
}

/// A fleet of streams at one rate and what it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// The streams' rate, bits/s (IP layer).
    pub rate_bps: f64,
    /// The streams.
    pub streams: Vec<Stream>,
    /// Whether most streams rose: the rate is above the available bandwidth.
    pub above: bool,
}

/// The available bandwidth found by the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Available {
    /// The middle of the final bracket, bits/s (IP layer).
    pub available_bps: f64,
    /// The highest rate found below the available bandwidth.
    pub low_bps: f64,
    /// The lowest rate found above it (the capacity if none was).
    pub high_bps: f64,
    /// Every fleet, in the order sent.
    pub fleets: Vec<Fleet>,
}

/// The binary search over stream rates.
#[derive(Debug, Clone)]
pub struct AvailableSearch {
    low: f64,
    high: f64,
    resolution: f64,
    max_fleets: usize,
    fleets: Vec<Fleet>,
}

impl AvailableSearch {
    /// A search between 0 and `capacity_bps` that stops when the bracket is narrower than
    /// `resolution` (a fraction of the capacity) or after `max_fleets` fleets.
    pub fn new(capacity_bps: f64, resolution: f64, max_fleets: usize) -> AvailableSearch {
        AvailableSearch {
            low: 0.0,
            high: capacity_bps,
            resolution: resolution * capacity_bps,
            max_fleets,
            fleets: Vec::new(),
        }
    }

    /// The next fleet's rate, or `None` when done.
    pub fn next_rate(&self) -> Option<f64> {
        (self.high - self.low > self.resolution && self.fleets.len() < self.max_fleets)
            .then(|| f64::midpoint(self.low, self.high))
    }

    /// What a fleet at `rate_bps` said.
    pub fn record(&mut self, rate_bps: f64, streams: Vec<Stream>) -> &Fleet {
        let rising = streams.iter().filter(|s| s.rising()).count();
        let above = 2 * rising > streams.len();
        if above {
            self.high = self.high.min(rate_bps);
        } else {
            self.low = self.low.max(rate_bps);
        }
        self.fleets.push(Fleet {
            rate_bps,
            streams,
            above,
        });
        self.fleets.last().expect("just pushed")
    }

    /// The result.
    pub fn result(self) -> Available {
        Available {
            available_bps: f64::midpoint(self.low, self.high),
            low_bps: self.low,
            high_bps: self.high,
            fleets: self.fleets,
        }
    }
}

/// Everything `capacity` found in one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityReport {
    /// Which way the probes went.
    pub direction: Direction,
    /// The path MTU the probes were sized by, bytes.
    pub path_mtu_bytes: u32,
    /// The dispersion estimate.
    pub capacity: Capacity,
    /// The available bandwidth, when searched.
    pub available: Option<Available>,
    /// Probes sent in all (MTU search, pairs, trains, streams).
    pub probes: u64,
}

/// What a capacity run had found in one direction when it was cut short (a server that
/// stopped answering, a path that went down): each step that finished, none after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityProgress {
    /// Which way the probes went.
    pub direction: Direction,
    /// The path MTU, once its search finished, bytes.
    pub path_mtu_bytes: Option<u32>,
    /// Each whole pair's capacity estimate, bits/s, once the pairs had all come back.
    pub pair_estimates_bps: Vec<f64>,
    /// The capacity, once the trains had (with the shaper stream's finding once it came
    /// back, [`CapacityProgress::shaper_done`]).
    pub capacity: Option<Capacity>,
    /// Whether the constant-rate stream that looks for a shaper finished (or was not sent).
    #[serde(default)]
    pub shaper_done: bool,
    /// The available-bandwidth search's bracket from the fleets that finished (none before
    /// the first).
    pub available: Option<Available>,
    /// Probes sent in the steps that finished.
    pub probes: u64,
}

impl CapacityProgress {
    /// Nothing found yet in `direction`.
    pub fn new(direction: Direction) -> CapacityProgress {
        CapacityProgress {
            direction,
            path_mtu_bytes: None,
            pair_estimates_bps: Vec::new(),
            capacity: None,
            shaper_done: false,
            available: None,
            probes: 0,
        }
    }

    /// Whether any step finished.
    pub fn is_empty(&self) -> bool {
        self.path_mtu_bytes.is_none()
    }

    /// The step after the last that finished: the one a failure stopped.
    pub fn running_step(&self) -> &'static str {
        if self.path_mtu_bytes.is_none() {
            "path MTU"
        } else if self.pair_estimates_bps.is_empty() && self.capacity.is_none() {
            "packet pairs"
        } else if self.capacity.is_none() {
            "packet trains"
        } else if !self.shaper_done {
            "shaper stream"
        } else {
            "available bandwidth"
        }
    }
}

/// Probes of one kind of train: `length` probes of `payload_bytes` (UDP payload), `spacing_ns`
/// apart (0: back to back), a train every `period_ns`; what a `Trains` request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainPlan {
    /// UDP payload bytes per probe.
    pub payload_bytes: u32,
    /// Probes per train.
    pub length: u32,
    /// Between the probes of a train, ns.
    pub spacing_ns: u64,
    /// From the start of one train to the start of the next, ns.
    pub period_ns: u64,
}

/// Fewest probes in a self-loading stream: two windows of the trend test's smallest.
pub const MIN_STREAM_PROBES: u64 = 40;

/// Pairs and trains start this far apart at least, so each finds the queue empty.
pub const MIN_TRAIN_PERIOD_NS: u64 = 10_000_000;

/// The period of trains of `length` probes of `packet_bits`: at least `at_least_ns` and
/// [`MIN_TRAIN_PERIOD_NS`], and long enough that the test's average rate is at most half
/// the server's `max_rate_bps`.
fn train_period_ns(length: u32, packet_bits: f64, max_rate_bps: f64, at_least_ns: u64) -> u64 {
    let within_rate = (f64::from(length) * packet_bits / (0.5 * max_rate_bps) * 1e9).ceil() as u64;
    at_least_ns.max(MIN_TRAIN_PERIOD_NS).max(within_rate)
}

/// Packet pairs: two probes back to back, [`MIN_TRAIN_PERIOD_NS`] apart (or further, to
/// stay within half the server's rate). `packet_bytes` is the IP packet, `payload_bytes`
/// its UDP payload.
pub fn pairs_plan(payload_bytes: u32, packet_bytes: u32, max_rate_bps: f64) -> TrainPlan {
    let bits = f64::from(packet_bytes) * 8.0;
    TrainPlan {
        payload_bytes,
        length: 2,
        spacing_ns: 0,
        period_ns: train_period_ns(2, bits, max_rate_bps, MIN_TRAIN_PERIOD_NS),
    }
}

/// Packet trains long enough to last 10 ms at the pairs' rough capacity (8 to 256
/// packets), so timing noise of tens of microseconds is a fraction of a percent; each
/// starts when the last has long drained (four train times apart at least).
pub fn trains_plan(
    rough_bps: f64,
    payload_bytes: u32,
    packet_bytes: u32,
    max_rate_bps: f64,
) -> TrainPlan {
    let bits = f64::from(packet_bytes) * 8.0;
    let length = ((rough_bps * 0.010 / bits).round() as u32).clamp(8, 256);
    let train_ns = (f64::from(length) * bits / rough_bps * 1e9) as u64;
    TrainPlan {
        payload_bytes,
        length,
        spacing_ns: 0,
        period_ns: train_period_ns(length, bits, max_rate_bps, 4 * train_ns),
    }
}

/// A fleet's streams at `rate_bps`, each lasting about `stream_ns`: probes up to
/// `packet_bytes` (IP), smaller at low rates so a stream keeps at least
/// [`MIN_STREAM_PROBES`]; never smaller than 64 bytes of payload (a header and a tag).
/// Each stream is followed by twice its length of silence, for its queue to drain before
/// the next. `overhead_bytes` is the IP and UDP headers.
pub fn stream_plan(
    rate_bps: f64,
    stream_ns: u64,
    packet_bytes: u32,
    overhead_bytes: u32,
) -> TrainPlan {
    let stream_s = stream_ns as f64 * 1e-9;
    let wanted_bytes = rate_bps * stream_s / 8.0 / MIN_STREAM_PROBES as f64;
    let smallest = 64 + overhead_bytes;
    let ip_bytes = (wanted_bytes as u32).clamp(smallest, packet_bytes.max(smallest));
    let spacing_ns = (f64::from(ip_bytes) * 8.0 / rate_bps * 1e9) as u64;
    let length =
        ((stream_s * 1e9 / spacing_ns.max(1) as f64).round() as u64).max(MIN_STREAM_PROBES);
    TrainPlan {
        payload_bytes: ip_bytes - overhead_bytes,
        length: length as u32,
        spacing_ns,
        period_ns: 3 * spacing_ns * length,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes sent at `send_ns` through a FIFO link of `rate_bps` (IP layer), each `bits`
    /// long, shared with cross-traffic packets arriving at `cross_ns`, each taking
    /// `cross_service_ns` of the link; 5 ms of propagation after it.
    fn through_link(
        send_ns: &[u64],
        bits: f64,
        rate_bps: f64,
        cross_ns: &[u64],
        cross_service_ns: u64,
    ) -> Vec<ReceivedProbe> {
        let service = (bits / rate_bps * 1e9) as u64;
        let mut events: Vec<(u64, Option<usize>)> = send_ns
            .iter()
            .enumerate()
            .map(|(seq, &t)| (t, Some(seq)))
            .chain(cross_ns.iter().map(|&t| (t, None)))
            .collect();
        events.sort_by_key(|e| (e.0, e.1.is_some()));
        let mut free = 0u64;
        let mut out = Vec::new();
        for (at, probe) in events {
            let start = at.max(free);
            match probe {
                Some(seq) => {
                    free = start + service;
                    out.push(ReceivedProbe {
                        seq: seq as u64,
                        sent_ns: at,
                        received_ns: free + 5_000_000,
                    });
                }
                None => free = start + cross_service_ns,
            }
        }
        out
    }

    /// 4 Mbit/s of cross traffic on 10 Mbit/s: a 1 ms packet every 2.5 ms.
    fn cbr_4mbit(until_ns: u64) -> Vec<u64> {
        (0..until_ns / 2_500_000)
            .map(|k| k * 2_500_000 + 300_000)
            .collect()
    }

    #[test]
    fn median_ci_brackets_the_median_by_order_statistics() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        let e = median_ci(&values).unwrap();
        assert_eq!(e.median_bps, 50.5);
        // 50 -/+ 0.98 x 10 = 40.2 .. 59.8 -> the 41st and 61st values (0-based 40, 60).
        assert_eq!((e.low_bps, e.high_bps), (41.0, 61.0));
        assert_eq!(median_ci(&[]), None);
    }

    #[test]
    fn back_to_back_trains_give_the_link_rate() {
        let bits = 1500.0 * 8.0;
        // 10 trains of 8, back to back, 50 ms apart, through 10 Mbit/s.
        let send: Vec<u64> = (0..80).map(|i| (i / 8) * 50_000_000).collect();
        let arrivals = through_link(&send, bits, 10e6, &[], 0);
        let estimates = train_estimates(&arrivals, 8, bits);
        assert_eq!(estimates.len(), 10);
        for e in estimates {
            assert!((e / 10e6 - 1.0).abs() < 1e-6, "{e}");
        }
        // A train with a lost probe gives no estimate.
        let partial: Vec<ReceivedProbe> = arrivals.iter().copied().filter(|p| p.seq != 3).collect();
        assert_eq!(train_estimates(&partial, 8, bits).len(), 9);
    }

    #[test]
    fn cross_traffic_widens_trains_and_the_pair_mode_says_so() {
        let bits = 1500.0 * 8.0;
        let cross = cbr_4mbit(2_000_000_000);
        // The probes reach the bottleneck through a 12 Mbit/s access link, 1 ms apart, so
        // cross traffic can slip in between. 100 pairs 7.3 ms apart (not a multiple of the
        // cross traffic's period, so the pairs meet it at every phase), 10 trains of 16.
        let pairs_send: Vec<u64> = (0..200u64)
            .map(|i| (i / 2) * 7_300_000 + (i % 2) * 1_000_000)
            .collect();
        let pairs = through_link(&pairs_send, bits, 10e6, &cross, 1_000_000);
        let pair_estimates = train_estimates(&pairs, 2, bits);
        let train_send: Vec<u64> = (0..160)
            .map(|i| (i / 16) * 100_000_000 + (i % 16) * 1_000_000)
            .collect();
        let trains = through_link(&train_send, bits, 10e6, &cross, 1_000_000);
        let train_estimates = train_estimates(&trains, 16, bits);
        let c = combine(&pair_estimates, &train_estimates, 1500, (100, 16, 10)).unwrap();
        // The trains measure the asymptotic dispersion rate, below the capacity; the pairs'
        // mode is the capacity, and the disagreement is flagged.
        assert!(c.capacity_bps < 0.9 * 10e6, "{c:?}");
        assert_eq!(c.method, "trains");
        assert!(
            (c.pair_mode_bps.unwrap() / 10e6 - 1.0).abs() < 0.01,
            "{c:?}"
        );
        assert!(c.pairs_disagree());
        assert!(c.low_bps <= c.capacity_bps && c.capacity_bps <= c.high_bps);
        assert!((c.frame_capacity_bps / c.capacity_bps - 1514.0 / 1500.0).abs() < 1e-12);
        // Without cross traffic the trains are taken, and exact.
        let clean = through_link(&train_send, bits, 10e6, &[], 0);
        let c = combine(
            &pair_estimates,
            &train_estimates_of(&clean, bits),
            1500,
            (100, 16, 10),
        )
        .unwrap();
        assert_eq!(c.method, "trains");
        assert!((c.capacity_bps / 10e6 - 1.0).abs() < 1e-6, "{c:?}");
        assert!(!c.pairs_disagree());
    }

    fn train_estimates_of(arrivals: &[ReceivedProbe], bits: f64) -> Vec<f64> {
        train_estimates(arrivals, 16, bits)
    }

    #[test]
    fn streams_above_the_available_rate_rise_and_below_stay_flat() {
        // A 10 Mbit/s link (IP layer) carrying 4 Mbit/s of cross traffic: 6 available.
        let bits = 1000.0 * 8.0;
        let cross = cbr_4mbit(1_000_000_000);
        let stream = |rate: f64| {
            let spacing = bits / rate * 1e9;
            let send: Vec<u64> = (0..100).map(|i| (f64::from(i) * spacing) as u64).collect();
            judge_streams(&through_link(&send, bits, 10e6, &cross, 1_000_000), 100, 1)[0]
        };
        assert!(stream(8e6).rising(), "{:?}", stream(8e6));
        assert!(!stream(3e6).rising(), "{:?}", stream(3e6));
        // The search converges on 6 Mbit/s.
        let mut search = AvailableSearch::new(10e6, 0.04, 10);
        while let Some(rate) = search.next_rate() {
            let one = stream(rate);
            search.record(rate, vec![one; 3]);
        }
        let found = search.result();
        assert!(
            (found.available_bps / 6e6 - 1.0).abs() < 0.1,
            "{:.2} Mbit/s in [{:.2}, {:.2}]",
            found.available_bps / 1e6,
            found.low_bps / 1e6,
            found.high_bps / 1e6
        );
        assert!(found.high_bps - found.low_bps <= 0.4e6 + 1.0);
    }

    #[test]
    fn the_strongest_mode_is_the_densest_window() {
        let values = [9.0, 9.9, 10.0, 10.1, 10.05, 6.0, 6.1, 20.0];
        let (mode, count) = strongest_mode(&values, 0.05).unwrap();
        assert_eq!(count, 4);
        assert!((9.9..=10.1).contains(&mode), "{mode}");
        assert_eq!(strongest_mode(&[], 0.05), None);
    }

    #[test]
    fn train_plans_stay_within_half_the_servers_rate_and_last_what_they_should() {
        // 1500-byte packets, a server allowing 100 Mbit/s.
        let pairs = pairs_plan(1472, 1500, 100e6);
        assert_eq!((pairs.length, pairs.spacing_ns), (2, 0));
        assert_eq!(pairs.period_ns, MIN_TRAIN_PERIOD_NS);
        // A server allowing 1 Mbit/s: 2 x 12,000 bits at 0.5 Mbit/s take 48 ms.
        assert_eq!(pairs_plan(1472, 1500, 1e6).period_ns, 48_000_000);
        // Trains at a rough 100 Mbit/s: 10 ms is 83.3 packets; 4 train times apart.
        let trains = trains_plan(100e6, 1472, 1500, 1e9);
        assert_eq!(trains.length, 83);
        assert_eq!(trains.period_ns, 4 * 9_960_000);
        // At 1 Mbit/s 10 ms is less than a packet: the shortest train, 8.
        assert_eq!(trains_plan(1e6, 1472, 1500, 1e9).length, 8);
        // At 10 Gbit/s, the longest, 256, and a 100 Mbit/s server's rate sets the period:
        // 256 x 12,000 bits at 50 Mbit/s.
        let fast = trains_plan(10e9, 1472, 1500, 100e6);
        assert_eq!(fast.length, 256);
        assert_eq!(fast.period_ns, 61_440_000);
        for (plan, max_rate) in [(pairs, 100e6), (trains, 1e9), (fast, 100e6)] {
            let rate = f64::from(plan.length) * 12_000.0 / (plan.period_ns as f64 * 1e-9);
            assert!(rate <= 0.5 * max_rate + 1.0, "{plan:?}: {rate}");
        }
    }

    #[test]
    fn streams_offer_their_rate_for_their_time_with_enough_probes() {
        for rate in [0.3e6, 1e6, 10e6, 100e6, 1e9] {
            let plan = stream_plan(rate, 100_000_000, 1500, 28);
            let ip_bits = f64::from(plan.payload_bytes + 28) * 8.0;
            let offered = ip_bits / (plan.spacing_ns as f64 * 1e-9);
            assert!(
                (offered / rate - 1.0).abs() < 1e-3,
                "{rate}: offers {offered}"
            );
            assert!(u64::from(plan.length) >= MIN_STREAM_PROBES, "{rate}");
            assert!(
                plan.payload_bytes >= 64 && plan.payload_bytes <= 1472,
                "{rate}"
            );
            let stream_ns = plan.spacing_ns * u64::from(plan.length);
            // 100 ms unless the 40-probe floor or the 64-byte floor makes it longer.
            if u64::from(plan.length) > MIN_STREAM_PROBES {
                assert!(
                    (stream_ns as f64 / 1e8 - 1.0).abs() < 0.02,
                    "{rate}: {stream_ns}"
                );
            }
            assert_eq!(plan.period_ns, 3 * stream_ns);
        }
    }
}
