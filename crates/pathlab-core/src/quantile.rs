//! Quantiles of measured values: the one definition every crate reports percentiles by.
//!
//! Both functions use the **nearest-rank** definition (Hyndman and Fan's type 1, the
//! inverse of the empirical distribution function): the `q`-quantile of `n` values is the
//! one of rank `ceil(q x n)` in ascending order (rank 1 at least, `n` at most), the
//! smallest value with at least a fraction `q` of the values at or below it.
//!
//! Nearest rank rather than interpolation because:
//! - a quantile is then always a value that was measured (a queue delay one packet saw, a
//!   window one ACK advertised), never a blend of two;
//! - it has an exact histogram counterpart, the bucket where the running count reaches
//!   the same rank, so the lateness histograms and the sorted samples agree; and
//! - HDR histograms (`value_at_quantile`, behind `pathlab-probe`'s RTT percentiles) count
//!   to the same rank, so every figure pathlab prints ranks alike.
//!
//! The median of an even count is therefore the lower of the two middle values. This
//! module reads no clock and does no I/O; it only ranks what it is given.

/// Rank (1-based) of the nearest-rank `q`-quantile among `total` values: `ceil(q x
/// total)`, clamped to `1..=total` (so `q` at or below 0, or NaN, ranks first and `q` at
/// or above 1 ranks last). `total` must be at least 1.
fn nearest_rank(total: u64, q: f64) -> u64 {
    let exact = q * total as f64;
    // A decimal `q` such as 0.55 is not exact in binary, and 0.55 x 100 computes to a hair
    // above 55, which `ceil` would turn into 56. Shrinking by a few ulps absorbs that error
    // and never moves a product that is a whole number or clearly above one.
    let rank = (exact - exact.abs() * 4.0 * f64::EPSILON).ceil();
    if rank.is_nan() || rank < 1.0 {
        1
    } else {
        (rank as u64).min(total)
    }
}

/// The nearest-rank `q`-quantile (0..=1) of `sorted`, which must be in ascending order:
/// the value of rank `ceil(q x n)`; `None` when `sorted` is empty.
///
/// `q = 0` gives the smallest value, `q = 1` the largest, `q = 0.5` of an even count the
/// lower middle value. See the [module doc](self) for why nearest rank.
pub fn of_sorted<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = nearest_rank(sorted.len() as u64, q);
    Some(sorted[rank as usize - 1])
}

/// The bucket that holds the nearest-rank `q`-quantile (0..=1) of a histogram: the index
/// of the first bucket where the running sum of `counts` (in the buckets' ascending order)
/// reaches rank `ceil(q x total)`, `total` being the number of values counted.
///
/// `None` when `total` is 0, or when `counts` add up to less than the rank. The caller
/// reports the bucket by its edges: its upper edge is a bound on the quantile (at most
/// that), its lower edge the other bound. The same rank as [`of_sorted`], so a histogram
/// of the samples gives the bucket of the value `of_sorted` returns.
pub fn bucket_of(counts: impl IntoIterator<Item = u64>, total: u64, q: f64) -> Option<usize> {
    if total == 0 {
        return None;
    }
    let rank = nearest_rank(total, q);
    let mut seen = 0u64;
    for (index, count) in counts.into_iter().enumerate() {
        seen = seen.saturating_add(count);
        if seen >= rank {
            return Some(index);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_ten_values_by_hand() {
        let values: Vec<u64> = (1..=10).map(|v| v * 10).collect();
        // ceil(0.5 x 10) = 5: the 5th value, the lower of the two middle ones.
        assert_eq!(of_sorted(&values, 0.5), Some(50));
        // ceil(0.9 x 10) = 9; ceil(0.95 x 10) = ceil(9.5) = 10; ceil(0.99 x 10) = 10.
        assert_eq!(of_sorted(&values, 0.9), Some(90));
        assert_eq!(of_sorted(&values, 0.95), Some(100));
        assert_eq!(of_sorted(&values, 0.99), Some(100));
        // ceil(0.25 x 10) = ceil(2.5) = 3; ceil(0.01 x 10) = ceil(0.1) = 1.
        assert_eq!(of_sorted(&values, 0.25), Some(30));
        assert_eq!(of_sorted(&values, 0.01), Some(10));
    }

    #[test]
    fn odd_count_median_is_the_middle_value() {
        // ceil(0.5 x 5) = ceil(2.5) = 3.
        assert_eq!(of_sorted(&[1.0, 2.0, 4.0, 8.0, 16.0], 0.5), Some(4.0));
    }

    #[test]
    fn edges_empty_one_sample_zero_and_one() {
        let empty: [u64; 0] = [];
        assert_eq!(of_sorted(&empty, 0.5), None);
        assert_eq!(of_sorted(&[7u64], 0.0), Some(7));
        assert_eq!(of_sorted(&[7u64], 0.5), Some(7));
        assert_eq!(of_sorted(&[7u64], 1.0), Some(7));
        let values = [3u64, 5, 9];
        // q = 0: rank clamped up to 1, the smallest; q = 1: rank 3, the largest.
        assert_eq!(of_sorted(&values, 0.0), Some(3));
        assert_eq!(of_sorted(&values, 1.0), Some(9));
        // Out of range or NaN clamps rather than panics.
        assert_eq!(of_sorted(&values, -1.0), Some(3));
        assert_eq!(of_sorted(&values, 2.0), Some(9));
        assert_eq!(of_sorted(&values, f64::NAN), Some(3));
    }

    #[test]
    fn decimal_q_that_binary_overshoots_keeps_its_rank() {
        // 0.55 x 100 computes to 55.000000000000007; the rank is still 55, not 56.
        assert!(std::hint::black_box(0.55) * 100.0 > 55.0);
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(of_sorted(&values, 0.55), Some(55));
        assert_eq!(of_sorted(&values, 0.07), Some(7));
        // Every percentile of 1..=n is ceil(p x n / 100), computed in integers.
        for n in [1u64, 2, 3, 7, 20, 25, 50, 100, 150, 999, 1000, 4096] {
            let values: Vec<u64> = (1..=n).collect();
            for percent in 0..=100u64 {
                let expected = (percent * n).div_ceil(100).clamp(1, n);
                let q = percent as f64 / 100.0;
                assert_eq!(of_sorted(&values, q), Some(expected), "p{percent} of {n}");
            }
        }
    }

    #[test]
    fn histogram_bucket_where_the_running_count_reaches_the_rank() {
        // 10 values: 2 in bucket 0, 0 in 1, 5 in 2, 3 in 3 (running 2, 2, 7, 10).
        let counts = [2u64, 0, 5, 3];
        // Ranks: q=0 -> 1 and q=0.2 -> 2 in bucket 0; 0.21 -> 3 and 0.5 -> 5 and
        // 0.7 -> 7 in bucket 2; 0.71 -> 8 and 1 -> 10 in bucket 3.
        for (q, bucket) in [
            (0.0, 0),
            (0.2, 0),
            (0.21, 2),
            (0.5, 2),
            (0.7, 2),
            (0.71, 3),
            (0.99, 3),
            (1.0, 3),
        ] {
            assert_eq!(bucket_of(counts, 10, q), Some(bucket), "q {q}");
        }
    }

    #[test]
    fn histogram_edges() {
        assert_eq!(bucket_of([0u64, 0], 0, 0.5), None, "nothing counted");
        assert_eq!(bucket_of([0u64, 1, 0], 1, 0.0), Some(1), "one value, q = 0");
        assert_eq!(bucket_of([0u64, 1, 0], 1, 1.0), Some(1), "one value, q = 1");
        // Counts that fall short of the total never reach the rank.
        assert_eq!(bucket_of([1u64, 1], 5, 0.9), None);
    }

    #[test]
    fn histogram_and_sorted_samples_agree() {
        // Samples 0..100 in buckets 10 wide: the quantile's bucket holds the quantile.
        let samples: Vec<u64> = (0..100).map(|i| (i * 37) % 100).collect();
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let mut counts = [0u64; 10];
        for &s in &samples {
            counts[(s / 10) as usize] += 1;
        }
        for q in [0.0, 0.1, 0.5, 0.55, 0.9, 0.99, 1.0] {
            let value = of_sorted(&sorted, q).unwrap();
            assert_eq!(
                bucket_of(counts, 100, q),
                Some((value / 10) as usize),
                "q {q}"
            );
        }
    }
}
