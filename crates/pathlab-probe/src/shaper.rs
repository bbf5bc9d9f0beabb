//! A token bucket on the path (a shaper or a policer), found from a constant-rate stream,
//! sans-IO.
//!
//! Packet pairs, and trains short enough to fit in a bucket, leave a token bucket back to
//! back at the rate of the link beneath it: dispersion measures the wire, not the plan.
//! ShaperProbe (Kanuparthy and Dovrolis, IMC 2011) finds the plan by sending at the
//! capacity for long enough to empty the bucket and watching the received rate shift
//! down. This module plans that stream ([`stream_plan`]) and reads what the receiver
//! recorded ([`find`]).
//!
//! **The model.** A bucket of `B` bytes filled at `R` lets a packet through when it holds
//! the packet's bytes. Fed faster than `R`, it passes everything until it is empty, then
//! one packet per `L / R`: the `k`-th packet through leaves when `B + R t = k L`. So the
//! cumulative bytes received, against the time since the first arrival, lie on the line
//! `B + R t` once the bucket is empty, and above it before (at the rate of the link
//! beneath, or the bucket's peak). [`find`] fits two lines to the cumulative count, the
//! break where their squared error is least; the second line's slope is the sustained rate
//! `R`, its intercept the burst `B`. A plain rate limit is a bucket of one packet: the
//! same fit gives an intercept of one packet, which is how "no shaper" is told.
//!
//! **A bucket the probes before drained.** The pairs and trains before the stream pass the
//! same bucket: on a line whose bucket refills slowly (an ISP's policer keeps a second of
//! its rate: 2.5 MB at 20 Mbit/s) they leave it part empty, and the stream's burst reads
//! short of it (1.28 MB of 2.53 on nft's policer). [`drained_before`] bounds what they can
//! have taken from it; past a twentieth of the burst, [`refill_ns`] says how long the path
//! must rest for the bucket to be full again, and the stream is sent once more.
//!
//! **Shaper or policer.** A shaper queues what the bucket cannot pass: after the shift
//! the one-way delay rises towards its buffer, and drops start only once the buffer is
//! full. A policer drops at once: the delay stays flat and the loss starts at the shift.

use pathlab_core::format::{self, Digits};
use pathlab_core::quantile;
use pathlab_core::wire::ethernet;
use serde::{Deserialize, Serialize};

use crate::control::ReceivedProbe;
use crate::session::MAX_TRAIN;

/// The stream's byte budget by default: 10 MiB, enough to empty the buckets of the cable
/// and fixed-line plans with a boost that ShaperProbe found (a few MB) at any rate.
pub const DEFAULT_BUDGET_BYTES: u64 = 10 << 20;

/// Least and most budget a user may set: 100 KiB to 1 GiB.
pub const BUDGET_BYTES: std::ops::RangeInclusive<u64> = 100 << 10..=1 << 30;

/// The stream lasts at most this long, whatever its budget: 2 s (CI's time).
pub const MAX_STREAM_NS: u64 = 2_000_000_000;

/// Fewest probes in a stream (a small budget at a large packet size).
pub const MIN_STREAM_PROBES: u64 = 64;

/// Fewest arrivals after a shift for the sustained rate to be measured from them.
pub const MIN_AFTER_SHIFT: usize = 16;

/// A received rate below this fraction of the rate before it (and of the rate the stream
/// was sent at) is a shift.
pub const SHIFT: f64 = 0.9;

/// A burst of fewer packets than this above the sustained rate is a plain rate limit (whose
/// intercept is one packet) with timing noise.
pub const MIN_BURST_PACKETS: f64 = 2.5;

/// An arrival stamped this much later than the upper envelope of the stream says it could
/// have come was held back by the receiver ([`held_back`]): 2 ms, far above the stamps'
/// own noise (tens of microseconds), below the stalls a busy machine gave (10 ms hid a
/// 32 KB bucket at 50 Mbit/s).
pub const HELD_NS: f64 = 2e6;

/// The longest the path rests for a drained bucket to fill before the stream is sent
/// again: 5 s. A bucket that takes longer is read short of its depth, and the report says
/// how long it rested.
pub const MAX_REFILL_NS: u64 = 5_000_000_000;

/// What the probes before a stream may have left a bucket of `sustained_bps` (IP) short
/// of, IP bytes: the most that any stretch of `before` (each probe's arrival, ns, and IP
/// bytes, in the receiver's clock) up to the stream's first arrival at `start_ns` carried
/// beyond what the bucket refills in that stretch. A bucket passes what arrives through it
/// and refills at its rate only while it is not full, so its deficit at `start_ns` is at
/// most this (the probes it dropped took nothing from it, and are not in `before`).
pub fn drained_before(before: &[(u64, u32)], start_ns: u64, sustained_bps: f64) -> f64 {
    let mut sorted: Vec<(u64, u32)> = before
        .iter()
        .copied()
        .filter(|&(at, _)| at < start_ns)
        .collect();
    sorted.sort_unstable_by_key(|&(at, _)| std::cmp::Reverse(at));
    let bytes_per_ns = sustained_bps / 8e9;
    let mut carried = 0.0;
    let mut most: f64 = 0.0;
    for (at, bytes) in sorted {
        carried += f64::from(bytes);
        most = most.max(carried - bytes_per_ns * (start_ns - at) as f64);
    }
    most
}

/// How long the path must rest after a stream that found `shaper` for its bucket to be
/// full again, ns, when the probes before the stream may have left its burst short by
/// more than a twentieth (and [`MIN_BURST_PACKETS`] packets): `drained` bytes
/// ([`drained_before`]). The stream ends with the bucket empty, and the bucket holds at
/// most the burst found plus `drained`: that at the sustained rate, and a tenth more,
/// at most [`MAX_REFILL_NS`]. `None`: the burst found is the bucket's.
pub fn refill_ns(shaper: &Shaper, drained: f64) -> Option<u64> {
    let packets = drained / f64::from(shaper.packet_bytes.max(1));
    if !shaper.shaped()
        || shaper.sustained_bps <= 0.0
        || drained <= shaper.burst_bytes / 20.0
        || packets <= MIN_BURST_PACKETS
    {
        return None;
    }
    let ns = (shaper.burst_bytes + drained) * 8.0 / shaper.sustained_bps * 1.1e9;
    Some((ns as u64).min(MAX_REFILL_NS))
}

/// The constant-rate stream, as a `Trains` request asks for it: `trains` trains of
/// `length` probes `spacing_ns` apart, each train starting where the last one's spacing
/// would have put its next probe (`period_ns` is `length` spacings), so the probes are
/// evenly spaced from first to last (a server takes trains of at most [`MAX_TRAIN`]
/// probes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPlan {
    /// UDP payload bytes per probe.
    pub payload_bytes: u32,
    /// Probes per train.
    pub length: u32,
    /// Between probes, ns.
    pub spacing_ns: u64,
    /// From the start of one train to the start of the next, ns.
    pub period_ns: u64,
    /// How many trains.
    pub trains: u32,
}

impl StreamPlan {
    /// Probes in the stream.
    pub fn probes(&self) -> u64 {
        u64::from(self.length) * u64::from(self.trains)
    }

    /// How long the stream lasts, ns.
    pub fn duration_ns(&self) -> u64 {
        self.period_ns * u64::from(self.trains)
    }
}

/// A stream of `packet_bytes` IP packets (`payload_bytes` of UDP payload) at `rate_bps`
/// (IP layer) carrying at most `budget_bytes` and lasting at most [`MAX_STREAM_NS`];
/// [`MIN_STREAM_PROBES`] at least.
pub fn stream_plan(
    rate_bps: f64,
    budget_bytes: u64,
    payload_bytes: u32,
    packet_bytes: u32,
) -> StreamPlan {
    let bits = f64::from(packet_bytes) * 8.0;
    let spacing_ns = ((bits / rate_bps * 1e9).round() as u64).max(1);
    let by_budget = budget_bytes / u64::from(packet_bytes.max(1));
    let by_time = MAX_STREAM_NS / spacing_ns;
    let probes = by_budget.min(by_time).max(MIN_STREAM_PROBES);
    let trains = probes.div_ceil(u64::from(MAX_TRAIN));
    let length = probes / trains;
    StreamPlan {
        payload_bytes,
        length: length as u32,
        spacing_ns,
        period_ns: length * spacing_ns,
        trains: trains as u32,
    }
}

/// What the stream found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShaperKind {
    /// No shift in the received rate within the budget.
    None,
    /// A bucket with a queue: the delay rose after the shift.
    Shaper,
    /// A bucket without one: drops from the shift on, the delay flat.
    Policer,
}

/// A token bucket on the path, or its absence, from one constant-rate stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shaper {
    /// What was found.
    pub kind: ShaperKind,
    /// IP bytes per probe.
    pub packet_bytes: u32,
    /// The rate the stream was sent at (from the sender's stamps), bits/s at the IP layer.
    pub offered_bps: f64,
    /// Probes sent.
    pub sent: u64,
    /// The stream's budget, bytes: no bucket larger than about this is seen.
    pub budget_bytes: u64,
    /// The received rate while the bucket lasted, bits/s (IP); `None` without a shift, or
    /// when the burst arrived all at one instant.
    pub burst_rate_bps: Option<f64>,
    /// The received rate once the bucket was empty (the whole stream's without a shift),
    /// bits/s (IP): the rate the path sustains.
    pub sustained_bps: f64,
    /// IP bytes that came through above the sustained rate: the bucket (one packet for a
    /// plain rate limit).
    pub burst_bytes: f64,
    /// From the first arrival to the shift, ns.
    pub burst_ns: u64,
    /// How far the one-way delay rose after the shift (its 95th percentile above the
    /// stream's least), ns: a shaper's queue.
    pub queue_ns: u64,
    /// Probes that did not arrive.
    pub lost: u64,
    /// From the shift to the first loss, by the sender's clock, ns (negative: before it);
    /// `None` without loss.
    pub loss_after_shift_ns: Option<i64>,
    /// What the probes before the stream may have taken from the bucket, IP bytes
    /// ([`drained_before`]; 0 where not known).
    #[serde(default)]
    pub drained_before_bytes: f64,
    /// How long the path rested before this stream, ns: 0 for the first stream; more when
    /// the first found a bucket the probes before it may have drained ([`refill_ns`]),
    /// and this is the stream sent again.
    #[serde(default)]
    pub rested_ns: u64,
}

impl Shaper {
    /// Whether a bucket was found (shaper or policer).
    pub fn shaped(&self) -> bool {
        self.kind != ShaperKind::None
    }

    /// Link-layer bytes per IP byte: what a bucket counting Ethernet headers (tc's tbf, a
    /// pathlab `rate`) sees.
    pub fn frame_ratio(&self) -> f64 {
        let packet = f64::from(self.packet_bytes.max(1));
        (packet + ethernet::HEADER_LEN as f64) / packet
    }

    /// One sentence for a report: what was found, in the rates at the IP layer and the
    /// burst as tc counts it (frames, Ethernet headers included).
    pub fn describe(&self) -> String {
        let rate = |bps: f64| format::rate(bps, Digits::fixed(2));
        let ms = |ns: u64| format::time(ns as f64 * 1e-9, Digits::up_to(2));
        let burst = format::bytes_binary(
            (self.burst_bytes * self.frame_ratio()) as u64,
            Digits::up_to(3),
        );
        let at = self.burst_rate_bps.map_or_else(
            || "back to back".to_owned(),
            |bps| format!("at {}", rate(bps)),
        );
        let sustained = rate(self.sustained_bps);
        let frames = rate(self.sustained_bps * self.frame_ratio());
        let found = match self.kind {
            ShaperKind::Shaper => format!(
                "shaped: a burst of about {burst} {at}, then {sustained} ({frames} counting \
                 Ethernet headers) after {}; a queue of {} built behind it{}",
                ms(self.burst_ns),
                ms(self.queue_ns),
                self.loss_after_shift_ns
                    .map_or_else(String::new, |ns| format!(
                        " and drops began {} after the shift",
                        ms(ns.max(0) as u64)
                    ))
            ),
            ShaperKind::Policer => format!(
                "policed: a burst of about {burst} {at}, then {sustained} ({frames} counting \
                 Ethernet headers) after {}, dropping from the shift on with no queue",
                ms(self.burst_ns)
            ),
            ShaperKind::None => format!(
                "no token bucket within {}: a stream offered at {} arrived at {sustained}",
                format::bytes_binary(self.budget_bytes, Digits::up_to(3)),
                rate(self.offered_bps)
            ),
        };
        if self.rested_ns == 0 {
            return found;
        }
        format!(
            "{found} (a second stream, after the path rested {}: the probes before the \
             first may have drained {} of the bucket{})",
            ms(self.rested_ns),
            format::bytes_binary(
                (self.drained_before_bytes * self.frame_ratio()) as u64,
                Digits::up_to(3)
            ),
            if self.rested_ns >= MAX_REFILL_NS {
                ", and it may not have filled in that time"
            } else {
                ""
            }
        )
    }
}

/// Least squares of `y` on `x` over one segment, from running sums.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    n: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
    yy: f64,
}

impl Sums {
    fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        self.x += x;
        self.y += y;
        self.xx += x * x;
        self.xy += x * y;
        self.yy += y * y;
    }

    fn minus(&self, other: &Sums) -> Sums {
        Sums {
            n: self.n - other.n,
            x: self.x - other.x,
            y: self.y - other.y,
            xx: self.xx - other.xx,
            xy: self.xy - other.xy,
            yy: self.yy - other.yy,
        }
    }

    /// Centred second moments: (Sxx, Sxy, Syy).
    fn centred(&self) -> (f64, f64, f64) {
        let n = self.n.max(1.0);
        (
            (self.xx - self.x * self.x / n).max(0.0),
            self.xy - self.x * self.y / n,
            (self.yy - self.y * self.y / n).max(0.0),
        )
    }

    /// The squared error left by the fitted line.
    fn residual(&self) -> f64 {
        let (sxx, sxy, syy) = self.centred();
        if sxx > 0.0 {
            (syy - sxy * sxy / sxx).max(0.0)
        } else {
            syy
        }
    }

    /// Slope and intercept; `None` when every `x` is the same.
    fn line(&self) -> Option<(f64, f64)> {
        let (sxx, sxy, _) = self.centred();
        (sxx > 0.0).then(|| {
            let slope = sxy / sxx;
            (slope, (self.y - slope * self.x) / self.n)
        })
    }
}

/// The probes of the stream (`seq` below `sent`) that arrived, each once, in the order
/// they arrived (ties by `seq`).
fn distinct_in_order(arrivals: &[ReceivedProbe], sent: u64) -> Vec<ReceivedProbe> {
    let mut seen = std::collections::HashSet::new();
    let mut probes: Vec<ReceivedProbe> = arrivals
        .iter()
        .filter(|p| p.seq < sent && seen.insert(p.seq))
        .copied()
        .collect();
    probes.sort_by_key(|p| (p.received_ns, p.seq));
    probes
}

/// The running sums of `points`: entry k sums the first k (entry 0 is empty, the last
/// sums them all).
fn prefix_sums(points: &[(f64, f64)]) -> Vec<Sums> {
    let mut prefix = Vec::with_capacity(points.len() + 1);
    let mut running = Sums::default();
    prefix.push(running);
    for &(x, y) in points {
        running.add(x, y);
        prefix.push(running);
    }
    prefix
}

/// Where two fitted lines leave the least squared error, from the points' prefix sums:
/// segment one is points[..k], two is points[k..], each of at least two points and the
/// second of [`MIN_AFTER_SHIFT`]; `None` when there are too few points to break.
fn best_break(prefix: &[Sums]) -> Option<usize> {
    let n = prefix.len() - 1;
    let all = prefix[n];
    (2..=n.saturating_sub(MIN_AFTER_SHIFT))
        .map(|k| {
            let error = prefix[k].residual() + all.minus(&prefix[k]).residual();
            (k, error)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// Reads a constant-rate stream of `sent` probes of `packet_bytes` (IP) that the receiver
/// recorded as `arrivals`: the rate it sustained, whether it shifted down (and how far,
/// after how many bytes), shaper or policer. `None` when fewer than [`MIN_AFTER_SHIFT`]
/// probes arrived.
pub fn find(
    arrivals: &[ReceivedProbe],
    sent: u64,
    packet_bytes: u32,
    budget_bytes: u64,
) -> Option<Shaper> {
    let probes = distinct_in_order(arrivals, sent);
    if probes.len() < MIN_AFTER_SHIFT {
        return None;
    }
    let received = probes.len() as u64;
    let first_loss = first_loss_ns(&probes, sent);
    let first = probes[0].received_ns;
    // Seconds since the first arrival, and the packets received by then (inclusive): small
    // numbers, so the running sums keep their precision.
    let points: Vec<(f64, f64)> = probes
        .iter()
        .enumerate()
        .map(|(i, p)| ((p.received_ns - first) as f64 * 1e-9, (i + 1) as f64))
        .collect();
    // What the receiver held back is left out of the fit, the queue and the rates (its
    // count still counts): its stamps say when the receiver got to it, not when it came.
    let held = held_back(&points);
    let (probes, points): (Vec<ReceivedProbe>, Vec<(f64, f64)>) = probes
        .into_iter()
        .zip(points)
        .zip(held)
        .filter_map(|(kept, held)| (!held).then_some(kept))
        .unzip();
    if probes.len() < MIN_AFTER_SHIFT {
        return None;
    }
    let prefix = prefix_sums(&points);
    let all = prefix[points.len()];
    let best = best_break(&prefix);
    let bits = f64::from(packet_bytes) * 8.0;
    let offered_bps = offered(&probes, bits);
    // A bucket holds the stream below the rate it was sent at, then: a received rate that
    // fell only to the sender's own (a sender that started behind its schedule and sent
    // its first probes in one batch; one that a busy machine slowed down midway, on
    // loopback: 527 Mbit/s received of 527 sent after 982 before, nothing lost) is no
    // bucket.
    let shift = best.and_then(|k| {
        let (rate, intercept) = all.minus(&prefix[k]).line()?;
        let before = prefix[k].line().map(|(slope, _)| slope);
        let dropped = before.is_none_or(|before| rate < SHIFT * before);
        let sent_after = offered(&probes[k..], bits).min(offered_bps);
        let held = rate * bits < SHIFT * sent_after;
        (dropped && held && intercept >= MIN_BURST_PACKETS && rate > 0.0)
            .then_some((k, rate, intercept, before))
    });
    let delays: Vec<i64> = probes
        .iter()
        .map(|p| p.received_ns as i64 - p.sent_ns as i64)
        .collect();
    let base = delays.iter().copied().min().unwrap_or(0);
    let queue_from = |k: usize| {
        let mut after: Vec<i64> = delays[k..].to_vec();
        after.sort_unstable();
        quantile::of_sorted(&after, 0.95).map_or(0, |p95| (p95 - base).max(0) as u64)
    };
    let lost = sent.saturating_sub(received);
    let mut shaper = match shift {
        Some((k, rate, intercept, before)) => Shaper {
            kind: ShaperKind::Shaper,
            packet_bytes,
            offered_bps,
            sent,
            budget_bytes,
            burst_rate_bps: before.map(|slope| slope * bits),
            sustained_bps: rate * bits,
            burst_bytes: intercept * f64::from(packet_bytes),
            burst_ns: probes[k - 1].received_ns - first,
            queue_ns: queue_from(k),
            lost,
            loss_after_shift_ns: first_loss.map(|at| at as i64 - probes[k].sent_ns as i64),
            drained_before_bytes: 0.0,
            rested_ns: 0,
        },
        None => {
            let (rate, intercept) = all.line()?;
            Shaper {
                kind: ShaperKind::None,
                packet_bytes,
                offered_bps,
                sent,
                budget_bytes,
                burst_rate_bps: None,
                sustained_bps: rate * bits,
                burst_bytes: intercept * f64::from(packet_bytes),
                burst_ns: 0,
                queue_ns: queue_from(0),
                lost,
                loss_after_shift_ns: None,
                drained_before_bytes: 0.0,
                rested_ns: 0,
            }
        }
    };
    if shaper.kind == ShaperKind::Shaper {
        // A queue of more than a packet and a half at the sustained rate (and 1 ms, above
        // timestamp noise) is a shaper's; less, a policer's.
        let packet_ns = bits / shaper.sustained_bps * 1e9;
        if (shaper.queue_ns as f64) < (1.5 * packet_ns).max(1e6) {
            shaper.kind = ShaperKind::Policer;
        }
    }
    Some(shaper)
}

/// Which of `points` (seconds since the first arrival, packets received by then, in
/// arrival order) a stalled receiver held back: stamped more than [`HELD_NS`] later than
/// the upper concave envelope of the count reaches them.
///
/// Whatever a token bucket, a rate or a policer does, the count it lets through grows at
/// its burst's rate and then at the sustained one: a concave curve, which every arrival
/// lies on unless stamped late. A receiver that stops reading for a while (a busy
/// machine: the kernel stamps what it then delivers, all at once) leaves a flat stretch
/// and a jump back to the curve; the envelope bridges it with a chord that is the curve
/// itself, and what arrived meanwhile lies far to its right. A sender that pauses and
/// carries on without catching up shifts the rest of the curve instead: what follows lies
/// right of a chord to the last arrival, by less and less, and only the part further than
/// [`HELD_NS`] is left out.
fn held_back(points: &[(f64, f64)]) -> Vec<bool> {
    // The upper hull, left to right (monotone chain): a point on or below the line from
    // the one before it to the next is no vertex.
    let mut hull: Vec<(f64, f64)> = Vec::new();
    for &point in points {
        while let [.., o, a] = hull[..] {
            let cross = (a.0 - o.0) * (point.1 - o.1) - (a.1 - o.1) * (point.0 - o.0);
            if cross < 0.0 {
                break;
            }
            hull.pop();
        }
        hull.push(point);
    }
    // Counts rise along the hull: each point's count falls on one of its segments.
    let mut segment = 0;
    points
        .iter()
        .map(|&(x, y)| {
            while segment + 2 < hull.len() && hull[segment + 1].1 < y {
                segment += 1;
            }
            let (a, b) = (hull[segment], hull[(segment + 1).min(hull.len() - 1)]);
            let reached = if b.1 > a.1 {
                a.0 + (y - a.1) * (b.0 - a.0) / (b.1 - a.1)
            } else {
                a.0
            };
            (x - reached) * 1e9 > HELD_NS
        })
        .collect()
}

/// The rate the probes were sent at, from the sender's stamps of the first and last that
/// arrived (of those in `probes`; 0 for fewer than two).
fn offered(probes: &[ReceivedProbe], bits: f64) -> f64 {
    let low = probes.iter().min_by_key(|p| p.seq);
    let high = probes.iter().max_by_key(|p| p.seq);
    match (low, high) {
        (Some(low), Some(high)) if high.sent_ns > low.sent_ns => {
            (high.seq - low.seq) as f64 * bits / ((high.sent_ns - low.sent_ns) as f64 * 1e-9)
        }
        _ => 0.0,
    }
}

/// When the first probe that did not arrive was sent: the send stamp of the last probe
/// before it that did (the first probe's own, if it was the first lost). `None` without
/// loss among the probes sent.
fn first_loss_ns(probes: &[ReceivedProbe], sent: u64) -> Option<u64> {
    let mut by_seq: Vec<&ReceivedProbe> = probes.iter().collect();
    by_seq.sort_by_key(|p| p.seq);
    let mut expected = 0;
    let mut before: Option<&ReceivedProbe> = None;
    for probe in by_seq {
        if probe.seq != expected {
            return Some(before.unwrap_or(probe).sent_ns);
        }
        expected += 1;
        before = Some(probe);
    }
    (expected < sent).then(|| before.map_or(0, |p| p.sent_ns))
}

#[cfg(test)]
mod tests;
