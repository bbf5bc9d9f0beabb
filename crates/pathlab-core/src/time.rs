//! Virtual time: integer nanoseconds since an arbitrary origin.
//!
//! The model never reads a clock. Callers convert their clock into an [`Instant`] at the
//! edge (a simulation starts at [`Instant::ZERO`]), so every run can be replayed bit for bit.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use serde::{Deserialize, Serialize};

/// A point in time, in nanoseconds since the caller's origin.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Instant(u64);

/// A span of time in nanoseconds; never negative.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Duration(u64);

impl Instant {
    /// The origin of virtual time.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant; used as "never".
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Instant {
        Instant(micros * 1_000)
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Instant {
        Instant(millis * 1_000_000)
    }

    /// An instant `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Instant {
        Instant(secs * 1_000_000_000)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the origin, as a float (for reports and plots).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);
    /// The longest representable span.
    pub const MAX: Duration = Duration(u64::MAX);

    /// A span of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: u64) -> Duration {
        Duration(nanos)
    }

    /// A span of `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Duration {
        Duration(micros * 1_000)
    }

    /// A span of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Duration {
        Duration(millis * 1_000_000)
    }

    /// A span of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Duration {
        Duration(secs * 1_000_000_000)
    }

    /// A span from a float number of seconds, rounded to the nearest nanosecond and
    /// clamped to `[0, MAX]` (NaN gives zero).
    pub fn from_secs_f64(secs: f64) -> Duration {
        let nanos = (secs * 1e9).round();
        if nanos.is_nan() || nanos <= 0.0 {
            Duration::ZERO
        } else if nanos >= u64::MAX as f64 {
            Duration::MAX
        } else {
            Duration(nanos as u64)
        }
    }

    /// The span in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The span in seconds, as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The span in milliseconds, as a float.
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// `self - other`, or zero if `other` is longer.
    pub const fn saturating_sub(self, other: Duration) -> Duration {
        Duration(self.0.saturating_sub(other.0))
    }

    /// `self * factor`, saturating at [`Duration::MAX`].
    pub const fn saturating_mul(self, factor: u64) -> Duration {
        Duration(self.0.saturating_mul(factor))
    }

    /// Whether the span is zero.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(rhs.0))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier `self` gives zero rather than a panic.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Duration {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}

impl SubAssign for Duration {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> std::time::Duration {
        d.to_std()
    }
}

impl Duration {
    /// The same span as a `std::time::Duration` (usable in constants).
    pub const fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0)
    }
}

/// Formats a span of nanoseconds with the largest unit that keeps it exact
/// (`25ms`, `1500us`, `2s`, `17ns`), as tc prints and parses times.
pub(crate) fn format_nanos(nanos: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    if nanos == 0 {
        return f.write_str("0ms");
    }
    for (scale, unit) in UNITS {
        if nanos.is_multiple_of(scale) {
            return write!(f, "{}{unit}", nanos / scale);
        }
    }
    unreachable!("every integer is a multiple of 1")
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_nanos(self.0, f)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let t = Instant::from_millis(5);
        assert_eq!(t - Instant::from_millis(7), Duration::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(
            t + Duration::from_micros(1500),
            Instant::from_nanos(6_500_000)
        );
    }

    #[test]
    fn display_uses_the_largest_exact_unit() {
        assert_eq!(Duration::from_millis(25).to_string(), "25ms");
        assert_eq!(Duration::from_micros(1500).to_string(), "1500us");
        assert_eq!(Duration::from_secs(2).to_string(), "2s");
        assert_eq!(Duration::from_nanos(17).to_string(), "17ns");
        assert_eq!(Duration::ZERO.to_string(), "0ms");
    }

    #[test]
    fn float_conversion_rounds_and_clamps() {
        assert_eq!(
            Duration::from_secs_f64(0.001_5),
            Duration::from_micros(1500)
        );
        assert_eq!(Duration::from_secs_f64(-1.0), Duration::ZERO);
        assert_eq!(Duration::from_secs_f64(f64::NAN), Duration::ZERO);
        assert_eq!(Duration::from_secs_f64(1e30), Duration::MAX);
    }
}
