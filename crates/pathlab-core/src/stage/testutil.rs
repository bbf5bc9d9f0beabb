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

/// The 99.9% two-sided bound on |k - np| for k events in `n` trials of probability `p`
/// (normal approximation, 3.29 standard deviations), widened for a Markov coin with lag-1
/// correlation `c` by its variance inflation 1 + 2 sum c^k = (1 + c) / (1 - c).
pub(crate) fn binomial_bound(n: f64, p: f64, c: f64) -> f64 {
    3.29 * (n * p * (1.0 - p) * (1.0 + c) / (1.0 - c)).sqrt()
}

/// Checks a correlated coin's throws (`events`, of rate `p` and lag-1 correlation `c`):
/// asserts that the count of events is within [`binomial_bound`] of `n p`, and returns the
/// count, `n p` and the events' lag-1 autocorrelation, for the caller to check.
pub(crate) fn check_correlated_count(events: &[bool], p: f64, c: f64) -> (f64, f64, f64) {
    let n = events.len() as f64;
    let k = events.iter().filter(|&&e| e).count() as f64;
    let np = n * p;
    let bound = binomial_bound(n, p, c);
    assert!(
        (k - np).abs() <= bound,
        "p={p} c={c}: {k} vs {np} +- {bound}"
    );
    (k, np, lag1(events))
}
