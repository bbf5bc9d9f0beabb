//! tc's units for times, rates, sizes and percentages.
//!
//! Each parser returns `None` when the token is not of its kind, so the spec parser can
//! tell an optional argument (`delay 25ms 5ms`) from the next keyword (`delay 25ms loss`).

use crate::time::Duration;
use crate::units::BitsPerSec;

/// Splits `12.5ms` into `(12.5, "ms")`; `None` unless it starts with a finite non-negative
/// decimal number.
fn split_number(token: &str) -> Option<(f64, &str)> {
    let end = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(token.len());
    let (number, unit) = token.split_at(end);
    if number.is_empty() || number == "." {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some((value, unit))
}

/// A time as tc(8) writes it: `s sec secs ms msec msecs us usec usecs ns nsec nsecs`; a bare
/// number is microseconds, as in tc.
pub fn time(token: &str) -> Option<Duration> {
    let (value, unit) = split_number(token)?;
    let nanos_per_unit = match unit.to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" => 1e9,
        "ms" | "msec" | "msecs" => 1e6,
        "" | "us" | "usec" | "usecs" => 1e3,
        "ns" | "nsec" | "nsecs" => 1.0,
        _ => return None,
    };
    let nanos = (value * nanos_per_unit).round();
    (nanos < u64::MAX as f64).then(|| Duration::from_nanos(nanos as u64))
}

/// How a rate token failed.
pub enum RateProblem {
    /// Not a number with a rate unit.
    NotARate,
    /// A number without a unit: tc's code and man page disagree on what it means.
    NoUnit,
}

/// A rate as tc(8) writes it: `bit kbit mbit gbit tbit`, `kibit mibit gibit tibit`, `bps kbps
/// mbps gbps tbps` (bytes per second, as in tc), SI shorthands `k M G T` (bits).
pub fn rate(token: &str) -> Result<BitsPerSec, RateProblem> {
    let (value, unit) = split_number(token).ok_or(RateProblem::NotARate)?;
    let bits_per_unit = match unit.to_ascii_lowercase().as_str() {
        "" => return Err(RateProblem::NoUnit),
        "bit" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        "t" | "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        "tibit" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        "tbps" => 8e12,
        "kibps" => 8.0 * 1024.0,
        "mibps" => 8.0 * 1024.0 * 1024.0,
        "gibps" => 8.0 * 1024.0 * 1024.0 * 1024.0,
        "tibps" => 8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(RateProblem::NotARate),
    };
    let bits = (value * bits_per_unit).round();
    if bits >= u64::MAX as f64 {
        return Err(RateProblem::NotARate);
    }
    Ok(BitsPerSec(bits as u64))
}

/// A packet rate: a number with an optional SI multiplier `k` or `M` and an optional
/// `pps` unit (`6500`, `6.5k`, `6.5kpps`). Returns packets per second, not checked for
/// being whole or positive.
pub fn packet_rate(token: &str) -> Option<f64> {
    let lower = token.to_ascii_lowercase();
    let number = lower.strip_suffix("pps").unwrap_or(&lower);
    let (value, unit) = split_number(number)?;
    let multiplier = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        _ => return None,
    };
    Some(value * multiplier)
}

/// A size in bytes as tc's get_size: `b`, `k kb`, `m mb`, `g gb` (powers of 1024), `kbit
/// mbit gbit` (1024-based bits). A bare number is bytes.
pub fn size(token: &str) -> Option<u64> {
    let (value, unit) = split_number(token)?;
    let bytes_per_unit = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "kbit" => 1024.0 / 8.0,
        "mbit" => 1024.0 * 1024.0 / 8.0,
        "gbit" => 1024.0 * 1024.0 * 1024.0 / 8.0,
        _ => return None,
    };
    let bytes = (value * bytes_per_unit).round();
    (bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// A size with an explicit unit (so `limit 100` stays a packet count).
pub fn size_with_unit(token: &str) -> Option<u64> {
    let (_, unit) = split_number(token)?;
    if unit.is_empty() {
        None
    } else {
        size(token)
    }
}

/// A percentage, `0.5%` or a bare `0.5` (both percent, as iproute2's parse_percent). Returns
/// the percent value, not checked against 100.
pub fn percent(token: &str) -> Option<f64> {
    let number = token.strip_suffix('%').unwrap_or(token);
    let (value, unit) = split_number(number)?;
    unit.is_empty().then_some(value)
}

/// A non-negative integer.
pub fn integer(token: &str) -> Option<u64> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// A possibly negative integer that fits an i32 (netem's overheads).
pub fn signed(token: &str) -> Option<i32> {
    let digits = token.strip_prefix('-').unwrap_or(token);
    integer(digits)?;
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_tc() {
        assert_eq!(time("25ms"), Some(Duration::from_millis(25)));
        assert_eq!(time("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(time("100"), Some(Duration::from_micros(100)));
        assert_eq!(time("fast"), None);
        assert_eq!(time("-1ms"), None);
        assert!(matches!(rate("10mbit"), Ok(BitsPerSec(10_000_000))));
        assert!(matches!(rate("10M"), Ok(BitsPerSec(10_000_000))));
        assert!(matches!(rate("1mbps"), Ok(BitsPerSec(8_000_000))));
        assert!(matches!(rate("1kibit"), Ok(BitsPerSec(1024))));
        assert!(matches!(rate("1000"), Err(RateProblem::NoUnit)));
        assert_eq!(size("150kb"), Some(153_600));
        assert_eq!(size("1500"), Some(1500));
        assert_eq!(size_with_unit("100"), None);
        assert_eq!(percent("0.5%"), Some(0.5));
        assert_eq!(percent("25"), Some(25.0));
        assert_eq!(percent("x%"), None);
        assert_eq!(signed("-4"), Some(-4));
        assert_eq!(integer("1e3"), None);
        assert_eq!(packet_rate("6500"), Some(6500.0));
        assert_eq!(packet_rate("6.5k"), Some(6500.0));
        assert_eq!(packet_rate("6.5kpps"), Some(6500.0));
        assert_eq!(packet_rate("1M"), Some(1e6));
        assert_eq!(packet_rate("pps"), None);
        assert_eq!(packet_rate("-3"), None);
        assert_eq!(packet_rate("10mbit"), None);
    }
}
