//! The base one-way delay and the delay's variation at low load, as an empirical
//! distribution (quantiles of the measured deviations, not a normal fit) the emulator
//! replays.

use std::fmt::Write as _;

use pathlab_core::quantile;
use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::samples::{Clocks, Sample};
use crate::stats::quantile_interval;

/// The base one-way delay, ns: the least drift-corrected delay of the low-load phase less
/// the clocks' offset, which the caller knows within `offset_uncertainty_ns` (0 when the
/// clocks are one, as in a simulation; half the round trip's asymmetry bound otherwise).
/// The interval adds the timestamps' `resolution_ns` below it (the least delay is a
/// measured value, true to one tick) and the offset's uncertainty both ways.
pub fn base_delay(
    clocks: &Clocks,
    offset_ns: f64,
    offset_uncertainty_ns: f64,
    resolution_ns: f64,
) -> Figure {
    let value = clocks.base_raw_ns - offset_ns;
    Figure::new(
        value,
        value - resolution_ns - offset_uncertainty_ns,
        value + offset_uncertainty_ns,
        format!(
            "least one-way delay of {} packets at low load, clock drift {:.1} ppm removed{}",
            clocks.packets,
            clocks.drift.drift * 1e6,
            if offset_uncertainty_ns > 0.0 {
                format!(
                    ", clock offset known within {:.0} us",
                    offset_uncertainty_ns / 1e3
                )
            } else {
                String::new()
            }
        ),
    )
}

/// One point of an empirical distribution: the `q`-quantile and its 95% interval, ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantilePoint {
    /// The probability, in `[0, 1]`.
    pub q: f64,
    /// The nearest-rank quantile of the deviations, ns.
    pub value_ns: f64,
    /// Its interval's low end (distribution-free, from order statistics), ns.
    pub low_ns: f64,
    /// Its interval's high end, ns.
    pub high_ns: f64,
}

/// The delay's variation at low load: equally spaced quantiles of the deviations from the
/// least delay, from 0 (always 0) to 1 (the top segment's mean kept: [`keep_the_tails_mean`]),
/// which an emulator replays by drawing a probability and interpolating.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayVariation {
    /// `points + 1` quantiles at `0, 1/points, ..., 1`.
    pub quantiles: Vec<QuantilePoint>,
    /// How it was measured.
    pub how: String,
}

impl DelayVariation {
    /// The quantiles' values, ns, in order (what a spec's `quantiles` takes).
    pub fn values_ns(&self) -> Vec<f64> {
        self.quantiles.iter().map(|q| q.value_ns).collect()
    }

    /// The mean of the replayed distribution (linear between the quantiles), ns.
    pub fn mean_ns(&self) -> f64 {
        let values = self.values_ns();
        if values.len() < 2 {
            return values.first().copied().unwrap_or(0.0);
        }
        let pairs = values.windows(2).map(|w| f64::midpoint(w[0], w[1]));
        pairs.sum::<f64>() / (values.len() - 1) as f64
    }
}

/// The empirical distribution of the low-load deviations at `points + 1` equally spaced
/// quantiles (`points` at least 1); `None` if nothing arrived.
pub fn delay_variation(
    low_load: &[Sample],
    clocks: &Clocks,
    points: usize,
) -> Option<DelayVariation> {
    let points = points.max(1);
    let mut deviations: Vec<f64> = low_load
        .iter()
        .filter_map(|s| clocks.relative_ns(s))
        .map(|d| d.max(0.0))
        .collect();
    deviations.sort_by(f64::total_cmp);
    let quantiles = (0..=points)
        .map(|i| {
            let q = i as f64 / points as f64;
            let value_ns = quantile::of_sorted(&deviations, q)?;
            let (low_ns, high_ns) = quantile_interval(&deviations, q)?;
            Some(QuantilePoint {
                q,
                value_ns,
                low_ns: low_ns.min(value_ns),
                high_ns: high_ns.max(value_ns),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let mut variation = DelayVariation {
        quantiles,
        how: format!(
            "nearest-rank quantiles of the one-way delay above its least value, {} packets at \
             low load, clock drift removed; intervals from order statistics",
            deviations.len()
        ),
    };
    keep_the_tails_mean(&mut variation, &deviations);
    Some(variation)
}

/// Sets the last point (q = 1) so that the replayed distribution's top segment, which
/// an emulator draws uniformly between its two points, has the mean of the deviations in
/// it: `2 x their mean - the point below`, between that point and the largest. The
/// largest stays the point's interval's high end.
///
/// With the largest as the last point, one late probe of 1,000 is drawn by a whole
/// segment's share of the twin's packets (5% of them with 21 points): the bond's twin
/// replayed one 14.3 ms probe among others within 0.2 ms as 5% of its packets up to 14.3
/// ms late, its loaded round trips' p95 +37% and +41% (5.5 ms in another run: +11% and
/// +14%), 2026-12-07. A tail spread evenly up to the largest keeps its largest.
fn keep_the_tails_mean(variation: &mut DelayVariation, sorted: &[f64]) {
    let points = variation.quantiles.len() - 1;
    let (Some(&largest), true) = (sorted.last(), points >= 1) else {
        return;
    };
    let below = variation.quantiles[points - 1].value_ns;
    let in_top = sorted.len().div_ceil(points);
    let top = &sorted[sorted.len() - in_top..];
    let mean = top.iter().sum::<f64>() / top.len() as f64;
    let last = &mut variation.quantiles[points];
    last.value_ns = (2.0 * mean - below).clamp(below, largest);
    last.low_ns = last.low_ns.min(last.value_ns);
    last.high_ns = largest;
    let _ = write!(
        variation.how,
        "; the last point keeps the mean of the top {in_top} (the largest {:.3} ms)",
        largest / 1e6
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{paced, spec, through};

    #[test]
    fn the_base_delay_is_exact_to_the_nanosecond_on_a_quiet_path() {
        // 23.4 ms of delay, 10 Mbit/s: a 200-byte probe adds 160 us of serialization.
        let path = spec("delay 23.4ms rate 10mbit");
        let samples = through(&path, 1, &paced(0, 2000, 2_000_000, 200));
        let clocks = Clocks::from_low_load(&samples).unwrap();
        let base = base_delay(&clocks, 0.0, 0.0, 1.0);
        assert_eq!(base.value, 23_400_000.0 + 160_000.0, "{base:?}");
        assert!(base.covers(23_560_000.0));
        // Without the path's delay the test fails: the figure is the path's, not a constant.
        let other = through(
            &spec("delay 20ms rate 10mbit"),
            1,
            &paced(0, 2000, 2_000_000, 200),
        );
        let other = base_delay(&Clocks::from_low_load(&other).unwrap(), 0.0, 0.0, 1.0);
        assert!(!other.covers(23_560_000.0));
    }

    #[test]
    fn the_low_load_variation_recovers_a_normal_jitter_within_its_intervals() {
        // Normal jitter, sd 2 ms: sampled by pathlab-core's table, whose least entry (4.0
        // sd below the mean) 100 000 draws hit but for a chance of e^-6. Packets 20 ms
        // apart, so the delay stage, which keeps order, never holds one behind another.
        let path = spec("delay 50ms 2ms distribution normal");
        let samples = through(&path, 7, &paced(0, 100_000, 20_000_000, 200));
        let clocks = Clocks::from_low_load(&samples).unwrap();
        let variation = delay_variation(&samples, &clocks, 20).unwrap();
        let table = pathlab_core::stage::distribution::quantile_table(
            pathlab_core::spec::Distribution::Normal,
        )
        .unwrap();
        let least = table[0];
        let mut covered = 0;
        for point in &variation.quantiles[1..20] {
            // The table's q-quantile, relative to its least entry, in ns.
            let index = ((point.q * table.len() as f64).ceil() as usize).clamp(1, table.len()) - 1;
            let truth = (table[index] - least) * 2e6;
            if point.low_ns <= truth && truth <= point.high_ns {
                covered += 1;
            }
        }
        // 19 intervals at 95%: 16 or more cover with probability > 0.98.
        assert!(covered >= 16, "{covered} of 19: {variation:?}");
        // The median deviation is the least entry's distance from the mean: 4 sd = 8 ms.
        let median = variation.quantiles[10].value_ns;
        assert!((median - 8e6).abs() < 0.1e6, "{median}");
    }

    #[test]
    fn one_late_probe_is_not_replayed_as_a_whole_segment_of_late_packets() {
        // 1,000 probes within a few us of each other, one of them 14.3 ms late.
        let path = spec("delay 10ms rate 10mbit");
        let mut samples = through(&path, 3, &paced(0, 1000, 5_000_000, 200));
        let late = &mut samples[500];
        late.received_ns = late.received_ns.map(|t| t + 14_300_000);
        let clocks = Clocks::from_low_load(&samples).unwrap();
        let variation = delay_variation(&samples, &clocks, 20).unwrap();
        let last = variation.quantiles[20];
        // The top 50 probes' mean is 14.3 ms / 50 above the rest: the replayed mean is the
        // measured one, not 5% x 7.15 ms.
        let measured_mean = 14.3e6 / 1000.0;
        assert!(
            (variation.mean_ns() - measured_mean).abs() < 20_000.0,
            "{} against {measured_mean}: {last:?}",
            variation.mean_ns()
        );
        assert!(last.value_ns < 0.6e6, "{last:?}");
        assert!(
            (last.high_ns - 14.3e6).abs() < 0.1e6,
            "the largest is kept: {last:?}"
        );
        // A tail spread evenly up to its largest keeps it: uniform deviations 0-9.99 ms,
        // their 95th percentile 9.49 ms below the last point.
        let spread: Vec<f64> = (0..1000).map(|i| f64::from(i) * 10_000.0).collect();
        let mut uniform = variation.clone();
        uniform.quantiles[19].value_ns = spread[949];
        keep_the_tails_mean(&mut uniform, &spread);
        let top = uniform.quantiles[20].value_ns;
        assert!((top - 9.99e6).abs() < 0.02e6, "{top}");
    }
}
