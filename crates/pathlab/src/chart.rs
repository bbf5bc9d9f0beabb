//! Terminal charts. Numbers (rates, times, sizes, percentages) are written by
//! [`pathlab_core::format`], the one formatter every command and report shares.

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

/// Writes `  {label} over time: {sparkline}` (60 columns) for `values`, nothing when there
/// are none.
pub fn write_over_time(
    out: &mut impl std::io::Write,
    label: &str,
    values: &[f64],
) -> std::io::Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    writeln!(out, "  {label} over time: {}", sparkline(values, 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_peak() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 3), "▁▅█");
        assert_eq!(sparkline(&[1.0; 100], 10).chars().count(), 10);
        assert_eq!(sparkline(&[], 10), "");
    }
}
