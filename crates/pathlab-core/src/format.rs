//! Rates, times, sizes and percentages as people read them: the one formatter of each
//! quantity, shared by the CLI, the reports, `tune` and `inspect`.
//!
//! Conventions, the same in every function:
//! - rates and bit counts take SI prefixes: 1 kbit = 1e3 bit, 1 Mbit = 1e6 bit, 1 Gbit =
//!   1e9 bit, 1 Tbit = 1e12 bit;
//! - byte sizes come in two systems, named in the function: [`bytes_si`] (1 kB = 1e3 B,
//!   1 MB = 1e6 B: sizes worked out from rates, like a bandwidth-delay product) and
//!   [`bytes_binary`] (1 KiB = 1024 B, 1 MiB = 1024² B: buffers and windows, which the
//!   kernel sizes in pages);
//! - times are given in seconds (`f64`, so a mean or a signed difference fits) and written
//!   in `us`, `ms`, `s` or `min`;
//! - a percentage is either a fraction (0.25 of a whole: [`fraction_as_percent`]) or a
//!   figure that is already in percent (25.0: [`percent_as_is`]); the two names keep them
//!   apart, since multiplying the wrong one by 100 is the mistake they invite;
//! - how many decimals a number keeps is the caller's [`Digits`]: fixed ones for columns
//!   that line up, trimmed ones for sentences.
//!
//! Each function is pure text: no I/O, no clock.

/// How a number is written: how many decimals, whether trailing zeros go, whether a `+`
/// shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digits {
    /// Decimals after the point (the most, when `trim_zeros`).
    decimals: usize,
    /// Drop trailing zeros, and the point if nothing follows it.
    trim_zeros: bool,
    /// Write `+` in front of positive numbers (and zero), as a difference reads.
    plus_sign: bool,
}

impl Digits {
    /// Exactly `decimals` decimals, so numbers in a column line up: `10.00`, `9.98`.
    pub const fn fixed(decimals: usize) -> Digits {
        Digits {
            decimals,
            trim_zeros: false,
            plus_sign: false,
        }
    }

    /// At most `decimals` decimals, trailing zeros dropped, for sentences: `10`, `1.6`,
    /// `98.73`.
    pub const fn up_to(decimals: usize) -> Digits {
        Digits {
            decimals,
            trim_zeros: true,
            plus_sign: false,
        }
    }

    /// The same with a `+` before positive numbers, for a difference: `+1.6`, `-0.4`.
    pub const fn signed(self) -> Digits {
        Digits {
            plus_sign: true,
            ..self
        }
    }

    /// `value` written in this style.
    fn write(self, value: f64) -> String {
        let text = if self.plus_sign {
            format!("{value:+.decimals$}", decimals = self.decimals)
        } else {
            format!("{value:.decimals$}", decimals = self.decimals)
        };
        if !self.trim_zeros || self.decimals == 0 {
            return text;
        }
        let trimmed = text.trim_end_matches('0').trim_end_matches('.');
        // What rounds to zero is zero, whatever its sign was.
        match trimmed {
            "-0" | "+0" if self.plus_sign => "+0".to_owned(),
            "-0" => "0".to_owned(),
            _ => trimmed.to_owned(),
        }
    }
}

/// SI prefixes of bits, largest first.
const SI_PREFIXES: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];

/// A rate in bits per second with the SI prefix that keeps the number at 1 or above:
/// `9.98 Mbit/s` (1 Mbit/s = 1e6 bit/s), `512 bit/s` below 1 kbit/s.
pub fn rate(bits_per_sec: f64, digits: Digits) -> String {
    format!("{}/s", bits(bits_per_sec, digits))
}

/// A count of bits with the SI prefix that keeps the number at 1 or above: `170 Mbit`
/// (1 Mbit = 1e6 bit), as a bandwidth-delay product reads.
pub fn bits(bits: f64, digits: Digits) -> String {
    for (scale, prefix) in SI_PREFIXES {
        if bits.abs() >= scale {
            return format!("{} {prefix}bit", digits.write(bits / scale));
        }
    }
    format!("{} bit", digits.write(bits))
}

/// A rate as a bare number of Mbit/s (1 Mbit/s = 1e6 bit/s), for a column or an axis that
/// names the unit once and compares rows in it: `9.50`.
pub fn in_mbit_per_sec(bits_per_sec: f64, digits: Digits) -> String {
    digits.write(bits_per_sec / 1e6)
}

/// A byte count in SI units (1 kB = 1e3 B, 1 MB = 1e6 B, up to TB), whole bytes below
/// 1 kB: `21.25 MB`, `999 B`.
pub fn bytes_si(len_bytes: u64, digits: Digits) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    scaled_bytes(len_bytes, &UNITS, digits)
}

/// A byte count in binary units (1 KiB = 1024 B, 1 MiB = 1024² B, up to GiB), whole bytes
/// below 1 KiB: `64 KiB`, `1.38 MiB`, as buffers and windows are sized.
pub fn bytes_binary(len_bytes: u64, digits: Digits) -> String {
    const UNITS: [(f64, &str); 3] = [
        (1_073_741_824.0, "GiB"),
        (1_048_576.0, "MiB"),
        (1024.0, "KiB"),
    ];
    scaled_bytes(len_bytes, &UNITS, digits)
}

/// `len_bytes` in the largest of `units` (largest first) it reaches, else in bytes.
fn scaled_bytes(len_bytes: u64, units: &[(f64, &str)], digits: Digits) -> String {
    let value = len_bytes as f64;
    for &(scale, unit) in units {
        if value >= scale {
            return format!("{} {unit}", digits.write(value / scale));
        }
    }
    format!("{len_bytes} B")
}

/// A time in the unit that reads best: `us` below 1 ms, `ms` below 1 s, `s` below 2 min,
/// `min` from there (a minute is 60 s): `170 ms`, `34.36 s`, `20.79 min`.
pub fn time(seconds: f64, digits: Digits) -> String {
    // A hair of slack, so 1000 us that came as 1e3 * 1e-6 s is still 1 ms.
    let magnitude = seconds.abs() * (1.0 + 1e-9);
    if magnitude >= 120.0 {
        format!("{} min", digits.write(seconds / 60.0))
    } else if magnitude >= 1.0 {
        format!("{} s", digits.write(seconds))
    } else if magnitude >= 1e-3 {
        format!("{} ms", digits.write(seconds * 1e3))
    } else {
        format!("{} us", digits.write(seconds * 1e6))
    }
}

/// A time as a bare number of milliseconds (1 ms = 1e-3 s), for a column or a sentence
/// that names the unit once: `120.012`.
pub fn in_millis(seconds: f64, digits: Digits) -> String {
    digits.write(seconds * 1e3)
}

/// A fraction of a whole (0.25 of it, 1 = all of it) written as a percentage: `25.00%`.
/// With [`Digits::signed`], a relative difference (`measured / theory - 1`): `+1.6%`.
pub fn fraction_as_percent(fraction: f64, digits: Digits) -> String {
    percent_as_is(fraction * 100.0, digits)
}

/// A figure that is already in percent (25.0 means a quarter) written with its sign:
/// `25.0%`, such as RFC 6349's Buffer Delay Percentage.
pub fn percent_as_is(percent: f64, digits: Digits) -> String {
    format!("{}%", digits.write(percent))
}

/// Bytes as lowercase hex, two digits each (`[0xab, 0x01]` is `ab01`): nonces, keys and
/// tokens written as text.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut text, b| {
            let _ = write!(text, "{b:02x}");
            text
        })
}

/// The bytes of `N * 2` hex digits (either case), or `None` if the text is anything else:
/// the inverse of [`hex`].
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: Digits = Digits::fixed(2);
    const UP_TO_TWO: Digits = Digits::up_to(2);

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        assert_eq!(hex(&[0xab, 0x01, 0x00]), "ab0100");
        assert_eq!(hex(&[]), "");
        assert_eq!(from_hex::<3>("ab0100"), Some([0xab, 0x01, 0x00]));
        assert_eq!(from_hex::<1>("AB"), Some([0xab]));
        assert_eq!(from_hex::<2>("ab0"), None);
        assert_eq!(from_hex::<1>("+1"), None);
        assert_eq!(from_hex::<1>("zz"), None);
    }

    #[test]
    fn digits_are_fixed_trimmed_or_signed() {
        assert_eq!(Digits::fixed(2).write(10.0), "10.00");
        assert_eq!(Digits::fixed(0).write(100.0), "100");
        assert_eq!(Digits::up_to(2).write(21.25), "21.25");
        assert_eq!(Digits::up_to(2).write(6.30), "6.3");
        assert_eq!(Digits::up_to(2).write(1.0), "1");
        assert_eq!(
            Digits::up_to(0).write(100.0),
            "100",
            "no point, nothing trimmed"
        );
        assert_eq!(Digits::up_to(2).write(-0.001), "0");
        assert_eq!(Digits::fixed(1).signed().write(0.016 * 100.0), "+1.6");
        assert_eq!(Digits::fixed(1).signed().write(-0.4), "-0.4");
        assert_eq!(Digits::up_to(1).signed().write(-0.01), "+0");
    }

    #[test]
    fn rates_take_the_si_prefix_that_keeps_them_above_one() {
        // 9 980 000 / 1e6 = 9.98.
        assert_eq!(rate(9_980_000.0, TWO), "9.98 Mbit/s");
        assert_eq!(rate(10e6, TWO), "10.00 Mbit/s");
        assert_eq!(rate(10e6, UP_TO_TWO), "10 Mbit/s");
        assert_eq!(rate(1e9, UP_TO_TWO), "1 Gbit/s");
        // 98 734 000 / 1e6 = 98.734 -> 98.73.
        assert_eq!(rate(98_734_000.0, UP_TO_TWO), "98.73 Mbit/s");
        assert_eq!(rate(1_600_000.0, UP_TO_TWO), "1.6 Mbit/s");
        assert_eq!(rate(2.5e12, UP_TO_TWO), "2.5 Tbit/s");
        assert_eq!(rate(1500.0, TWO), "1.50 kbit/s");
        assert_eq!(rate(512.0, TWO), "512.00 bit/s");
        assert_eq!(rate(0.0, UP_TO_TWO), "0 bit/s");
        assert_eq!(rate(-2e6, TWO), "-2.00 Mbit/s");
    }

    #[test]
    fn bits_and_fixed_unit_rates() {
        // 1 Gbit/s x 170 ms = 1.7e8 bit.
        assert_eq!(bits(1.7e8, UP_TO_TWO), "170 Mbit");
        assert_eq!(bits(999.0, UP_TO_TWO), "999 bit");
        // 9.5e6 / 1e6 = 9.5; 1.2 Gbit/s stays in Mbit/s.
        assert_eq!(in_mbit_per_sec(9.5e6, TWO), "9.50");
        assert_eq!(in_mbit_per_sec(1.2e9, Digits::fixed(0)), "1200");
    }

    #[test]
    fn bytes_in_si_and_binary_units() {
        // 21 250 000 / 1e6 = 21.25.
        assert_eq!(bytes_si(21_250_000, UP_TO_TWO), "21.25 MB");
        assert_eq!(bytes_si(2_100_000, UP_TO_TWO), "2.1 MB");
        assert_eq!(bytes_si(1000, UP_TO_TWO), "1 kB");
        assert_eq!(bytes_si(999, UP_TO_TWO), "999 B");
        assert_eq!(bytes_si(3_000_000_000_000, UP_TO_TWO), "3 TB");
        // 65 536 / 1024 = 64; 1 447 034 / 1 048 576 = 1.38.
        assert_eq!(bytes_binary(65_536, UP_TO_TWO), "64 KiB");
        assert_eq!(bytes_binary(1_447_034, UP_TO_TWO), "1.38 MiB");
        // 4000 / 1024 = 3.906.
        assert_eq!(bytes_binary(4000, UP_TO_TWO), "3.91 KiB");
        assert_eq!(bytes_binary(1023, UP_TO_TWO), "1023 B");
        assert_eq!(bytes_binary(3 << 30, TWO), "3.00 GiB");
    }

    #[test]
    fn times_take_the_unit_that_reads_best() {
        assert_eq!(time(0.170, UP_TO_TWO), "170 ms");
        assert_eq!(time(34.36, UP_TO_TWO), "34.36 s");
        // 7338 RTTs of 170 ms = 1247.46 s = 20.791 min.
        assert_eq!(time(7338.0 * 0.170, UP_TO_TWO), "20.79 min");
        assert_eq!(time(119.0, UP_TO_TWO), "119 s");
        assert_eq!(time(250e-6, UP_TO_TWO), "250 us");
        assert_eq!(time(1e-3, TWO), "1.00 ms");
        assert_eq!(time(f64::from(1000_u32) * 1e-6, UP_TO_TWO), "1 ms");
        assert_eq!(time(-0.5, UP_TO_TWO), "-500 ms");
        // 120 012 us = 120.012 ms.
        assert_eq!(in_millis(0.120_012, Digits::fixed(3)), "120.012");
        assert_eq!(in_millis(0.032_14, Digits::fixed(1)), "32.1");
        assert_eq!(in_millis(-0.0025, Digits::fixed(2).signed()), "-2.50");
    }

    #[test]
    fn a_fraction_and_a_percent_write_the_same_percentage() {
        assert_eq!(fraction_as_percent(1.0 / 3.0, TWO), "33.33%");
        assert_eq!(fraction_as_percent(0.95, Digits::fixed(1)), "95.0%");
        assert_eq!(fraction_as_percent(0.85, Digits::fixed(0)), "85%");
        // 9.5 Mbit/s against a 10 Mbit/s theory: 0.95 - 1 = -5 %.
        assert_eq!(
            fraction_as_percent(9.5 / 10.0 - 1.0, Digits::fixed(1).signed()),
            "-5.0%"
        );
        assert_eq!(percent_as_is(33.333, TWO), "33.33%");
        assert_eq!(percent_as_is(12.5, Digits::fixed(1)), "12.5%");
    }
}
