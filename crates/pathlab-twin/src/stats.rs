//! The few statistics the estimators share: binomial (Wilson) intervals, distribution-free
//! intervals of quantiles from order statistics, and batch means.

/// The standard normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959_964;

/// Student's t quantile (0.975) with 9 degrees of freedom: ten batches.
const T95_9: f64 = 2.262_157;

/// How many batches [`batch_means`] cuts a run into.
pub const BATCHES: usize = 10;

/// The Wilson score interval (95%) of a proportion: `successes` of `trials` (Wilson 1927;
/// its coverage stays near 95% for small counts and proportions near 0, where the normal
/// approximation's does not). `(0, 1)` without trials.
pub fn wilson(successes: u64, trials: u64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The distribution-free 95% interval of the `q`-quantile of `sorted` (ascending): the
/// order statistics whose ranks are `n q -+ z sqrt(n q (1 - q))` (the normal approximation
/// of the binomial count of values below the quantile; Conover, Practical Nonparametric
/// Statistics, section 3.2). `None` when empty.
pub fn quantile_interval<T: Copy>(sorted: &[T], q: f64) -> Option<(T, T)> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as f64;
    let spread = Z95 * (n * q * (1.0 - q)).sqrt();
    let low_rank = (n * q - spread).floor().max(1.0) as usize;
    let high_rank = ((n * q + spread).ceil() as usize + 1).clamp(1, sorted.len());
    Some((
        sorted[low_rank.min(sorted.len()) - 1],
        sorted[high_rank - 1],
    ))
}

/// The batch-means 95% half-width of an estimate from `BATCHES` estimates of the same
/// figure on equal consecutive stretches of the run: `t(9) x sd / sqrt(10)`. The stretches
/// must be long compared with how long the process remembers (a burst, a queue's cycle)
/// for them to count as independent. `None` with fewer than two finite estimates.
pub fn batch_half_width(estimates: &[f64]) -> Option<f64> {
    let finite: Vec<f64> = estimates
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if finite.len() < 2 {
        return None;
    }
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let variance = finite.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    // With fewer batches than BATCHES, t grows; the 9-degree quantile is kept (the
    // estimators always cut ten).
    Some(T95_9 * (variance / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_its_published_values() {
        // Newcombe (1998), table I: 81 of 263 -> 0.2553 to 0.3662.
        let (low, high) = wilson(81, 263);
        assert!(
            (low - 0.2553).abs() < 5e-4 && (high - 0.3662).abs() < 5e-4,
            "{low} {high}"
        );
        // 0 of 10 -> 0 to 0.2775.
        let (low, high) = wilson(0, 10);
        assert!(low == 0.0 && (high - 0.2775).abs() < 5e-4, "{high}");
    }

    #[test]
    fn a_quantile_interval_brackets_the_quantile() {
        let values: Vec<u32> = (1..=1000).collect();
        let (low, high) = quantile_interval(&values, 0.5).unwrap();
        // sqrt(1000 x 0.25) x 1.96 = 31 ranks each side.
        assert!(
            (468..=470).contains(&low) && (531..=533).contains(&high),
            "{low} {high}"
        );
        assert_eq!(quantile_interval(&values, 0.0).unwrap().0, 1);
        assert_eq!(quantile_interval(&values, 1.0).unwrap().1, 1000);
    }
}
