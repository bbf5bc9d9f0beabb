//! Human-readable numbers for terminal output.

use pathlab_core::Duration;

/// A rate in bits per second with an SI prefix: `9.98 Mbit/s`.
pub fn rate(bits_per_sec: f64) -> String {
    const PREFIXES: [(f64, &str); 4] = [(1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")];
    for (scale, prefix) in PREFIXES {
        if bits_per_sec.abs() >= scale {
            return format!("{:.2} {prefix}bit/s", bits_per_sec / scale);
        }
    }
    format!("{bits_per_sec:.0} bit/s")
}

/// A duration in milliseconds with three significant decimals: `120.012 ms`.
pub fn millis(d: Duration) -> String {
    format!("{:.3}", d.as_millis_f64())
}

/// A fraction as a percentage: `33.33%`.
pub fn percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

/// A one-line bar chart of `values` squeezed into `width` columns (max of each bucket).
pub fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    let columns = width.min(values.len());
    (0..columns)
        .map(|column| {
            let from = column * values.len() / columns;
            let to = ((column + 1) * values.len() / columns).max(from + 1);
            let peak = values[from..to].iter().copied().fold(0.0_f64, f64::max);
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((peak / max) * 7.0).round() as usize]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(rate(9_980_000.0), "9.98 Mbit/s");
        assert_eq!(rate(512.0), "512.00 bit/s");
        assert_eq!(millis(Duration::from_micros(120_012)), "120.012");
        assert_eq!(percent(1.0 / 3.0), "33.33%");
    }

    #[test]
    fn sparkline_scales_to_the_peak() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 3), "▁▅█");
        assert_eq!(sparkline(&[1.0; 100], 10).chars().count(), 10);
        assert_eq!(sparkline(&[], 10), "");
    }
}
