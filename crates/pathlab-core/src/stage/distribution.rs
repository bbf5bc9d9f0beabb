//! Jitter distributions (netem's uniform, normal, pareto, paretonormal) with correlation.
//!
//! `uniform` is netem's default: uniform over `[mean - jitter, mean + jitter]`, so its
//! standard deviation is jitter / sqrt(3). The others have mean `mean` and standard
//! deviation `jitter`: each is a table of 4096 quantiles computed at construction from its
//! exact inverse CDF and normalized to mean 0 and standard deviation 1, as netem's tables
//! are (pareto: shape 3; paretonormal: netem's sum of 1/4 normal and 3/4 pareto, each
//! standardized, restandardized).
//!
//! Correlation keeps the distribution: successive draws come from a Gaussian AR(1)
//! process z' = c z + sqrt(1 - c^2) e mapped through the normal CDF to a uniform u, and u
//! picks the quantile (a Gaussian copula). netem instead averages the new random number
//! with the previous one, which narrows the distribution as the correlation grows.
//! A draw below zero is clamped to zero delay, which raises the mean when jitter is large
//! against the delay.

use std::sync::Arc;

use crate::rng::Rng;
use crate::spec::Distribution;
use crate::time::Duration;

const TABLE_SIZE: usize = 4096;
const PARETO_SHAPE: f64 = 3.0;

/// The standard normal CDF (Abramowitz and Stegun 26.2.17 via erfc 7.1.26, error < 1.5e-7).
pub fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

fn standardize(mut values: Vec<f64>) -> Vec<f64> {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    for v in &mut values {
        *v = (*v - mean) / std;
    }
    values
}

fn quantiles(size: usize, inverse_cdf: impl Fn(f64) -> f64) -> Vec<f64> {
    (0..size)
        .map(|i| inverse_cdf((i as f64 + 0.5) / size as f64))
        .collect()
}

fn pareto_quantile(p: f64) -> f64 {
    (1.0 - p).powf(-1.0 / PARETO_SHAPE)
}

/// The standardized quantile table of a distribution (`None` for uniform, computed directly).
fn table(distribution: Distribution) -> Option<Arc<[f64]>> {
    let values = match distribution {
        Distribution::Uniform => return None,
        Distribution::Normal => quantiles(TABLE_SIZE, normal_quantile),
        Distribution::Pareto => quantiles(TABLE_SIZE, pareto_quantile),
        Distribution::ParetoNormal => {
            // The distribution of 0.25 N + 0.75 P, by quadrature over a grid of both
            // variables' quantiles, then read off at the table's probabilities.
            const GRID: usize = 512;
            let normal = standardize(quantiles(GRID, normal_quantile));
            let pareto = standardize(quantiles(GRID, pareto_quantile));
            let mut sums: Vec<f64> = normal
                .iter()
                .flat_map(|n| pareto.iter().map(move |p| 0.25 * n + 0.75 * p))
                .collect();
            sums.sort_unstable_by(f64::total_cmp);
            (0..TABLE_SIZE)
                .map(|i| sums[(i * sums.len() + sums.len() / 2) / TABLE_SIZE])
                .collect()
        }
    };
    Some(standardize(values).into())
}

/// Draws delays with a given mean, spread and distribution.
#[derive(Debug, Clone)]
pub struct DelaySampler {
    mean_nanos: f64,
    jitter_nanos: f64,
    correlation: f64,
    innovation: f64,
    table: Option<Arc<[f64]>>,
    /// The AR(1) state of the copula, when correlated.
    z: f64,
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
        let correlation = correlation.clamp(0.0, 1.0);
        DelaySampler {
            mean_nanos: mean.as_nanos() as f64,
            jitter_nanos: jitter.as_nanos() as f64,
            correlation,
            innovation: (1.0 - correlation * correlation).sqrt(),
            table: if jitter.is_zero() {
                None
            } else {
                table(distribution)
            },
            z: 0.0,
        }
    }

    /// The next delay (never negative).
    #[inline]
    pub fn sample(&mut self, rng: &mut Rng) -> Duration {
        if self.jitter_nanos == 0.0 {
            return Duration::from_nanos(self.mean_nanos as u64);
        }
        let u = if self.correlation > 0.0 {
            self.z = self.correlation * self.z + self.innovation * rng.normal();
            normal_cdf(self.z).min(1.0 - f64::EPSILON)
        } else {
            rng.f64()
        };
        let x = match &self.table {
            Some(table) => table[((u * TABLE_SIZE as f64) as usize).min(TABLE_SIZE - 1)],
            None => 2.0 * u - 1.0,
        };
        Duration::from_secs_f64((self.mean_nanos + self.jitter_nanos * x) / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean, standard deviation, and lag-1 Spearman (rank) correlation of `n` draws.
    fn moments(sampler: &mut DelaySampler, n: usize) -> (f64, f64, f64) {
        let mut rng = Rng::seed_from(3);
        let xs: Vec<f64> = (0..n)
            .map(|_| sampler.sample(&mut rng).as_secs_f64() * 1e3)
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| xs[*a].total_cmp(&xs[*b]));
        let mut ranks = vec![0.0; n];
        for (rank, index) in order.into_iter().enumerate() {
            ranks[index] = rank as f64;
        }
        let rank_mean = (n as f64 - 1.0) / 2.0;
        let (mut cov, mut v) = (0.0, 0.0);
        for w in ranks.windows(2) {
            cov += (w[0] - rank_mean) * (w[1] - rank_mean);
            v += (w[0] - rank_mean).powi(2);
        }
        (mean, var.sqrt(), cov / v)
    }

    #[test]
    fn quantile_and_cdf_are_inverse() {
        for p in [0.001, 0.1, 0.5, 0.9, 0.999] {
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 1e-6, "p {p}");
        }
    }

    /// Mean and standard deviation within 2% over 100k draws: mean 100 ms and jitter 10 ms
    /// (uniform: half-width 10 ms, std 10/sqrt(3) = 5.774 ms). The tables are standardized
    /// exactly, but Pareto's heavy tail (shape 3 has no finite fourth moment) makes the sample
    /// std of pareto and paretonormal converge slowly: within 5% for those two.
    #[test]
    fn jitter_has_the_configured_mean_and_standard_deviation() {
        for (distribution, std, tolerance) in [
            (Distribution::Uniform, 10.0 / 3f64.sqrt(), 0.02),
            (Distribution::Normal, 10.0, 0.02),
            (Distribution::ParetoNormal, 10.0, 0.05),
            (Distribution::Pareto, 10.0, 0.05),
        ] {
            for correlation in [0.0, 0.5] {
                let mut sampler = DelaySampler::new(
                    Duration::from_millis(100),
                    Duration::from_millis(10),
                    correlation,
                    distribution,
                );
                let (mean, measured_std, lag1) = moments(&mut sampler, 100_000);
                assert!(
                    (mean - 100.0).abs() / 100.0 < 0.02,
                    "{distribution:?} mean {mean}"
                );
                assert!(
                    (measured_std - std).abs() / std < tolerance,
                    "{distribution:?} c {correlation}: std {measured_std}, expected {std}"
                );
                // A Gaussian copula with correlation c has Spearman rank correlation
                // (6/pi) asin(c/2), whatever the marginal (Kruskal 1958): 0.4826 for c = 0.5.
                let expected = 6.0 / std::f64::consts::PI * (correlation / 2.0).asin();
                assert!(
                    (lag1 - expected).abs() < 0.02,
                    "{distribution:?}: lag-1 rank correlation {lag1}, expected {expected}"
                );
            }
        }
    }

    #[test]
    fn no_jitter_is_exact_and_negative_draws_clamp_to_zero() {
        let mut rng = Rng::seed_from(1);
        let mut exact = DelaySampler::new(
            Duration::from_millis(5),
            Duration::ZERO,
            0.0,
            Distribution::Normal,
        );
        assert_eq!(exact.sample(&mut rng), Duration::from_millis(5));
        let mut wide = DelaySampler::new(
            Duration::from_millis(1),
            Duration::from_millis(100),
            0.0,
            Distribution::Normal,
        );
        assert!((0..10_000).any(|_| wide.sample(&mut rng) == Duration::ZERO));
    }
}
