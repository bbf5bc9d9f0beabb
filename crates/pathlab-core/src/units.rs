//! Rates and probabilities with their units in the type.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::format::{self, Digits};
use crate::time::Duration;

/// Bytes of a full-size Ethernet frame (1500 B of IP, 14 B of header): what a bottleneck
/// queue holds when a bulk TCP flow fills it.
pub const FRAME_BYTES: f64 = 1500.0 + crate::wire::ethernet::HEADER_LEN as f64;

/// TCP payload of a full-size packet with timestamps (1500 - 20 - 20 - 12 B).
pub const MSS_BYTES: f64 = 1448.0;

/// A rate in bits per second.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct BitsPerSec(pub u64);

impl BitsPerSec {
    /// `n` kilobits (1000 bits) per second.
    pub const fn kbit(n: u64) -> BitsPerSec {
        BitsPerSec(n * 1_000)
    }

    /// `n` megabits (10^6 bits) per second.
    pub const fn mbit(n: u64) -> BitsPerSec {
        BitsPerSec(n * 1_000_000)
    }

    /// `n` gigabits (10^9 bits) per second.
    pub const fn gbit(n: u64) -> BitsPerSec {
        BitsPerSec(n * 1_000_000_000)
    }

    /// The rate in bits per second.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// The rate as a float in bits per second.
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// Time to serialize `len_bytes` bytes at this rate, rounded up to the next nanosecond
    /// so a stream of packets never exceeds the rate. A zero rate never finishes.
    pub fn serialization_time(self, len_bytes: u64) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        let bits = u128::from(len_bytes) * 8 * 1_000_000_000;
        let nanos = bits.div_ceil(u128::from(self.0));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Bytes this rate carries in `span` (rounded down).
    pub fn bytes_in(self, span: Duration) -> u64 {
        let bits = u128::from(self.0) * u128::from(span.as_nanos()) / 1_000_000_000;
        u64::try_from(bits / 8).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for BitsPerSec {
    /// Prints the largest tc unit that keeps the value exact: `10mbit`, `1500kbit`, `1gbit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
            (1, "bit"),
        ];
        if self.0 == 0 {
            return f.write_str("0bit");
        }
        for (scale, unit) in UNITS {
            if self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        unreachable!("every integer is a multiple of 1")
    }
}

/// A packet rate: the most packets per second a device serves, whatever their size (`pps
/// N`: a modem's or router's per-packet processing limit, beside its byte rate).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PacketsPerSec(pub u32);

impl PacketsPerSec {
    /// The most a spec may ask for: one packet per nanosecond, the model's resolution.
    pub const MAX: PacketsPerSec = PacketsPerSec(1_000_000_000);

    /// The packets per second.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The time one packet occupies the server, 1/N s, rounded up to the next nanosecond
    /// so a stream of packets never exceeds the rate. A zero rate never serves.
    pub fn interval(self) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(self.0)))
    }
}

impl fmt::Display for PacketsPerSec {
    /// The plain count, as the spec's canonical form writes it (`pps 6500`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A probability in `[0, 1]`, printed and parsed as a percentage like tc does.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Probability(f64);

impl Probability {
    /// Never.
    pub const ZERO: Probability = Probability(0.0);
    /// Always.
    pub const ONE: Probability = Probability(1.0);

    /// A probability from a fraction; `None` unless `0 <= p <= 1`.
    pub fn new(p: f64) -> Option<Probability> {
        (0.0..=1.0).contains(&p).then_some(Probability(p))
    }

    /// A probability from a percentage; `None` unless `0 <= percent <= 100`.
    pub fn from_percent(percent: f64) -> Option<Probability> {
        Probability::new(percent / 100.0)
    }

    /// The probability as a fraction in `[0, 1]`.
    pub const fn get(self) -> f64 {
        self.0
    }

    /// The probability in percent.
    pub fn percent(self) -> f64 {
        self.0 * 100.0
    }

    /// Whether the probability is zero.
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

impl fmt::Display for Probability {
    /// Prints a percentage with up to 6 decimals and no trailing zeros: `0.5%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format::percent_as_is(self.percent(), Digits::up_to(6)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_time_of_a_full_frame_at_10mbit() {
        // 1514 bytes * 8 / 10e6 = 1.2112 ms exactly.
        assert_eq!(
            BitsPerSec::mbit(10).serialization_time(1514),
            Duration::from_nanos(1_211_200)
        );
        // Rounded up: 1 byte at 3 bit/s is 2.666.. s.
        assert_eq!(
            BitsPerSec(3).serialization_time(1),
            Duration::from_nanos(2_666_666_667)
        );
        assert_eq!(BitsPerSec(0).serialization_time(1), Duration::MAX);
    }

    #[test]
    fn display_is_exact_and_short() {
        assert_eq!(BitsPerSec::mbit(10).to_string(), "10mbit");
        assert_eq!(BitsPerSec::kbit(1500).to_string(), "1500kbit");
        assert_eq!(BitsPerSec(12_345).to_string(), "12345bit");
        assert_eq!(Probability::from_percent(0.5).unwrap().to_string(), "0.5%");
        assert_eq!(Probability::ONE.to_string(), "100%");
        assert!(Probability::from_percent(150.0).is_none());
        assert_eq!(PacketsPerSec(6500).to_string(), "6500");
    }

    #[test]
    fn packet_interval_is_one_over_the_rate_rounded_up() {
        assert_eq!(
            PacketsPerSec(6250).interval(),
            Duration::from_nanos(160_000)
        );
        // 1e9 / 6500 = 153 846.15.. ns: rounded up, so 6500 packets take at least 1 s.
        assert_eq!(
            PacketsPerSec(6500).interval(),
            Duration::from_nanos(153_847)
        );
        assert_eq!(PacketsPerSec::MAX.interval(), Duration::from_nanos(1));
        assert_eq!(PacketsPerSec(0).interval(), Duration::MAX);
    }
}
