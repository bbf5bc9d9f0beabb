//! What a measurement hands the estimators: one [`Sample`] per packet sent, and the
//! [`Clocks`] that turn the receiver's timestamps into one-way delays relative to their
//! minimum with the clocks' drift removed (the seed's way: the two clocks are never
//! synchronized, so only the delay's deviation from its least value is known exactly).

use pathlab_probe::owd::{clock_drift, ClockDrift};
use serde::{Deserialize, Serialize};

/// One packet of a measurement: when it was sent (sender's clock), its size, and when it
/// arrived (receiver's clock), or `None` if it never did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The packet's sequence number within its phase (consecutive from any start).
    pub seq: u64,
    /// Sender's timestamp, ns.
    pub sent_ns: u64,
    /// Bytes the packet counts for at the bottleneck: the whole frame (the driver adds
    /// the Ethernet, IP and UDP headers to the payload).
    pub len_bytes: u32,
    /// Receiver's timestamp, ns; `None`: lost.
    pub received_ns: Option<u64>,
}

/// How the receiver's clock relates to the sender's, from a phase at low load: the drift
/// (from the envelope of the delays, `pathlab-probe`'s [`clock_drift`]) and the least
/// drift-corrected delay, which every delay of every phase is then taken relative to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clocks {
    /// The drift, as [`clock_drift`] found it (receiver faster is positive, s/s).
    pub drift: ClockDrift,
    /// The receiver's time the drift is reckoned from (the first arrival), ns.
    pub origin_ns: u64,
    /// The least drift-corrected `received - sent` of the low-load phase, ns: the base
    /// one-way delay plus the clocks' offset.
    pub base_raw_ns: f64,
    /// Packets the drift and base were taken from.
    pub packets: usize,
}

impl Clocks {
    /// The clocks as a low-load phase shows them; `None` if no packet arrived.
    pub fn from_low_load(samples: &[Sample]) -> Option<Clocks> {
        let mut arrived: Vec<(u64, u64)> = samples
            .iter()
            .filter_map(|s| s.received_ns.map(|r| (r, s.sent_ns)))
            .collect();
        arrived.sort_unstable();
        let &(origin_ns, first_sent) = arrived.first()?;
        let first_raw = i128::from(origin_ns) - i128::from(first_sent);
        let raw: Vec<(f64, i64)> = arrived
            .iter()
            .map(|&(received, sent)| {
                let t = (received - origin_ns) as f64 * 1e-9;
                let delay = i128::from(received) - i128::from(sent) - first_raw;
                (t, delay as i64)
            })
            .collect();
        let drift = clock_drift(&raw);
        let mut clocks = Clocks {
            drift,
            origin_ns,
            base_raw_ns: 0.0,
            packets: arrived.len(),
        };
        clocks.base_raw_ns = samples
            .iter()
            .filter_map(|s| clocks.corrected_ns(s))
            .fold(f64::INFINITY, f64::min);
        Some(clocks)
    }

    /// A sample's `received - sent` with the drift removed, ns (the clocks' offset still
    /// in it); `None` if it was lost.
    pub fn corrected_ns(&self, sample: &Sample) -> Option<f64> {
        let received = sample.received_ns?;
        let raw = received as f64 - sample.sent_ns as f64;
        let since_origin = (received as f64 - self.origin_ns as f64) * 1e-9;
        Some(raw - self.drift.drift * since_origin * 1e9)
    }

    /// A sample's one-way delay above the low-load minimum, drift removed, ns (negative
    /// only if a later phase saw a lower delay than the low-load one).
    pub fn relative_ns(&self, sample: &Sample) -> Option<f64> {
        self.corrected_ns(sample).map(|d| d - self.base_raw_ns)
    }
}

/// The window a low-load phase's start is judged in, ns: 250 ms.
const DRAIN_WINDOW_NS: u64 = 250_000_000;

/// A leading window whose median delay is this much above the later half's is a queue
/// of the phase before still draining, ns.
const DRAINING_NS: f64 = 1_000_000.0;

/// A low-load phase's samples from where the path had drained: without its leading
/// [`DRAIN_WINDOW_NS`] windows (by send time, up to half the phase) whose median delay
/// was more than [`DRAINING_NS`] above the later half's median, nor the probes of the next
/// window before its first within [`DRAINING_NS`] of that median (a window half drained
/// has its median below: through the bond 43 probes of 849 left kept a mean above 3 ms, up
/// to 5.8, and the twin's loaded round trips' p95 went 13% above the path's, 2026-12-07).
///
/// A path that paces its own queue (the bond's line controllers, which hold a queue of
/// their target while data waits) carries the backlog of a phase that overfed it for a
/// while after it: through the bond over three lines the first second of the low-load
/// phase, right after the rough-capacity stream, came 5.5 ms above the rest (0.1), in 7 of
/// 18 twins; the twin replayed that as the delay's variation, 20-25% of its packets 5 ms
/// late, and its round trips under load went 15-20% above the path's.
pub fn after_drain(low_load: &[Sample]) -> Vec<Sample> {
    let mut sorted = low_load.to_vec();
    sorted.sort_by_key(|s| s.sent_ns);
    let Some(clocks) = Clocks::from_low_load(&sorted) else {
        return sorted;
    };
    let first_ns = sorted.first().map_or(0, |s| s.sent_ns);
    let mut windows: Vec<Vec<f64>> = Vec::new();
    for sample in &sorted {
        let index = ((sample.sent_ns - first_ns) / DRAIN_WINDOW_NS) as usize;
        if windows.len() <= index {
            windows.resize(index + 1, Vec::new());
        }
        if let Some(delay) = clocks.relative_ns(sample) {
            windows[index].push(delay);
        }
    }
    let median = |delays: &[f64]| {
        let mut delays = delays.to_vec();
        delays.sort_by(f64::total_cmp);
        pathlab_core::quantile::of_sorted(&delays, 0.5)
    };
    let Some(settled) = median(&windows[windows.len() / 2..].concat()) else {
        return sorted;
    };
    let draining = windows
        .iter()
        .take(windows.len() / 2)
        .take_while(|w| median(w).is_some_and(|m| m > settled + DRAINING_NS))
        .count();
    // Within the first window left, up to its first probe that came through near the
    // settled median: the queue's last drops of backlog.
    let window_ns = first_ns + draining as u64 * DRAIN_WINDOW_NS;
    let from_ns = sorted
        .iter()
        .filter(|s| s.sent_ns >= window_ns && s.sent_ns < window_ns + DRAIN_WINDOW_NS)
        .find(|s| {
            clocks
                .relative_ns(s)
                .is_some_and(|d| d <= settled + DRAINING_NS)
        })
        .map_or(window_ns, |s| s.sent_ns);
    sorted.retain(|s| s.sent_ns >= from_ns);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drift_is_removed_and_delays_are_relative_to_the_least() {
        // 20 ms of delay, the receiver 40 ppm fast and 3 s ahead; one packet queued 5 ms.
        let samples: Vec<Sample> = (0..2000u64)
            .map(|seq| {
                let sent = seq * 5_000_000;
                let queued = if seq == 1000 { 5_000_000.0 } else { 0.0 };
                let true_arrival = sent as f64 + 20e6 + queued;
                let received = 3e9 + true_arrival * (1.0 + 40e-6);
                Sample {
                    seq,
                    sent_ns: sent,
                    len_bytes: 100,
                    received_ns: Some(received as u64),
                }
            })
            .collect();
        let clocks = Clocks::from_low_load(&samples).unwrap();
        assert!(
            (clocks.drift.drift - 40e-6).abs() < 1e-7,
            "{:?}",
            clocks.drift
        );
        let relative: Vec<f64> = samples
            .iter()
            .map(|s| clocks.relative_ns(s).unwrap())
            .collect();
        assert!(
            relative.iter().all(|d| *d > -2.0),
            "{:?}",
            relative.iter().fold(0.0f64, |a, b| a.min(*b))
        );
        // 5 ms x (1 + 40 ppm) on the receiver's clock.
        assert!((relative[1000] - 5e6).abs() < 1e3, "{}", relative[1000]);
        assert!(relative[1999] < 2.0, "{}", relative[1999]);
    }

    /// 1000 probes every 5 ms at 20 ms of delay plus `extra_ns(seq)` and up to 100 us of
    /// jitter, the receiver's clock 40 ppm fast.
    fn probes(extra_ns: impl Fn(u64) -> f64) -> Vec<Sample> {
        (0..1000u64)
            .map(|seq| {
                let sent = seq * 5_000_000;
                let jitter = (seq * 7919 % 100) as f64 * 1e3;
                let arrival = sent as f64 + 20e6 + extra_ns(seq) + jitter;
                Sample {
                    seq,
                    sent_ns: sent,
                    len_bytes: 242,
                    received_ns: Some((arrival * (1.0 + 40e-6)) as u64),
                }
            })
            .collect()
    }

    #[test]
    fn a_low_load_phase_starts_where_the_queue_before_it_drained() {
        // The bond's case: the first second 5.5 ms late (lines holding their target).
        let drained = after_drain(&probes(|seq| if seq < 200 { 5.5e6 } else { 0.0 }));
        assert_eq!(drained.first().map(|s| s.seq), Some(200));
        assert_eq!(drained.len(), 800);
        // The backlog ends 15 probes into a window, whose median is then low: those 15 go
        // too.
        let drained = after_drain(&probes(|seq| if seq < 215 { 4e6 } else { 0.0 }));
        assert_eq!(drained.first().map(|s| s.seq), Some(215));
        // A FIFO's backlog draining: 300 ms falling to none over the first 0.6 s.
        let fifo = after_drain(&probes(|seq| (300e6 - seq as f64 * 2.5e6).max(0.0)));
        let first = fifo.first().map_or(0, |s| s.seq);
        assert!((100..=150).contains(&first), "from probe {first}");
        // Nothing drained: a phase kept whole, whether its delays are low or high all
        // through, or high later (a queue of its own, which is the path's).
        for extra in [0.0, 5.5e6] {
            assert_eq!(after_drain(&probes(|_| extra)).len(), 1000);
        }
        let later = after_drain(&probes(|seq| if seq > 600 { 5.5e6 } else { 0.0 }));
        assert_eq!(later.len(), 1000);
    }
}
