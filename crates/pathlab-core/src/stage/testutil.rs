//! Helpers shared by the stage tests.

/// Lag-1 autocorrelation of a 0/1 sequence.
pub(crate) fn lag1(events: &[bool]) -> f64 {
    let n = events.len() as f64;
    let mean = events.iter().filter(|&&e| e).count() as f64 / n;
    let var = mean * (1.0 - mean);
    let cov = events
        .windows(2)
        .map(|w| (f64::from(u8::from(w[0])) - mean) * (f64::from(u8::from(w[1])) - mean))
        .sum::<f64>()
        / (n - 1.0);
    cov / var
}
