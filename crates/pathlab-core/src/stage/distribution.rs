//! Jitter distributions (netem's uniform, normal, pareto, paretonormal).
//! STUB until implemented.

use crate::rng::Rng;
use crate::spec::Distribution;
use crate::time::Duration;

/// Draws delays with a given mean, spread and distribution.
#[derive(Debug, Clone)]
pub struct DelaySampler {
    mean: Duration,
}

impl DelaySampler {
    /// A sampler for `mean` +- `jitter` shaped by `distribution`, successive samples
    /// correlated by `correlation` (in `[0, 1]`).
    pub fn new(
        mean: Duration,
        jitter: Duration,
        correlation: f64,
        distribution: Distribution,
    ) -> DelaySampler {
        let _ = (jitter, correlation, distribution);
        DelaySampler { mean }
    }

    /// The next delay (never negative).
    pub fn sample(&mut self, rng: &mut Rng) -> Duration {
        let _ = rng;
        self.mean
    }
}
