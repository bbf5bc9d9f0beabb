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
}
