//! A small, fast, seedable random number generator (xoshiro256++ seeded by splitmix64).
//!
//! The model owns its generator so that a run with the same seed replays exactly, on any
//! platform and with any version of third-party crates.

/// xoshiro256++ (Blackman and Vigna, 2019): 256 bits of state, period 2^256 - 1.
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn seed_from(seed: u64) -> Rng {
        let mut x = seed;
        let state = [
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ];
        Rng { state }
    }

    /// A new independent generator derived from this one (for a sub-component).
    pub fn fork(&mut self) -> Rng {
        Rng::seed_from(self.next_u64())
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform float in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p` (`p <= 0` never, `p >= 1` always).
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// A uniform integer in `[0, n)`; `n` must be positive.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        // Lemire's multiply-shift; the tiny bias (< n / 2^64) does not matter here.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A standard normal variate (Box-Muller; one of the pair is discarded for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.f64(); // (0, 1], so ln is finite
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// An exponential variate with mean 1.
    pub fn exponential(&mut self) -> f64 {
        -(1.0 - self.f64()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_forks_differ() {
        let mut a = Rng::seed_from(7);
        let mut b = Rng::seed_from(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut fork = a.fork();
        assert_ne!(fork.next_u64(), a.next_u64());
    }

    #[test]
    fn uniform_and_normal_moments() {
        let mut rng = Rng::seed_from(1);
        let n = 200_000;
        let (mut sum, mut sum_sq) = (0.0, 0.0);
        for _ in 0..n {
            let x = rng.normal();
            sum += x;
            sum_sq += x * x;
        }
        let mean = sum / f64::from(n);
        let var = sum_sq / f64::from(n) - mean * mean;
        // Standard error of the mean is 1/sqrt(n) = 0.0022; allow 5 of them.
        assert!(mean.abs() < 0.011, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        let uniform_mean: f64 = (0..n).map(|_| rng.f64()).sum::<f64>() / f64::from(n);
        assert!(
            (uniform_mean - 0.5).abs() < 0.004,
            "uniform mean {uniform_mean}"
        );
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
