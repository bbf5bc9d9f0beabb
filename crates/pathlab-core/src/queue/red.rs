//! Random Early Detection (Floyd and Jacobson 1993), with tc-red(8)'s options.
//!
//! On each arrival the average backlog (bytes) moves toward the current backlog by the
//! EWMA weight; after an idle period it first decays as if `avpkt`-sized packets had been
//! sent at 10 Mbit/s (tc's default `bandwidth`), since the queue does not know its line
//! rate: m = idle / (avpkt x 8 / 10 Mbit/s) and avg *= (1 - weight)^m (the paper's
//! section 4). Between `min` and `max` the drop probability pb rises linearly to
//! `probability` (and, with `gentle`, on to 1 at 2 x max). The paper's count correction
//! pa = pb / (1 - count pb), with count the packets let through since the last drop
//! (section 7), makes the gap between drops uniform on 1 ..= 1/pb, so a fraction
//! 2 pb / (1 + pb) is dropped. Above the curve every packet is dropped (or marked, with
//! `ecn`; `harddrop` drops everything above max even then).

use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::RedConfig;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

/// Line rate assumed to age the average over idle time (tc-red's default `bandwidth`).
const IDLE_BANDWIDTH_BITS_PER_SEC: f64 = 10e6;

/// RED's drop probability for an average backlog, before the count correction:
/// 0 below min, linear to `max_probability` at max, then 1 (or, with gentle, linear from
/// `max_probability` to 1 between max and 2 x max).
pub fn drop_curve(config: &RedConfig, average_bytes: f64) -> f64 {
    let (min, max) = (config.min_bytes as f64, config.max_bytes as f64);
    let max_p = config.max_probability.get();
    if average_bytes < min {
        0.0
    } else if average_bytes < max {
        max_p * (average_bytes - min) / (max - min)
    } else if config.gentle && average_bytes < 2.0 * max {
        max_p + (1.0 - max_p) * (average_bytes - max) / max
    } else {
        1.0
    }
}

/// A RED queue.
#[derive(Debug)]
pub struct Red {
    fifo: Fifo,
    config: RedConfig,
    limits: Limits,
    rng: Rng,
    average: f64,
    /// Packets let through since the last drop, or since the average entered the
    /// probabilistic region.
    count: u32,
    idle_since: Option<Instant>,
}

impl Red {
    /// A RED queue.
    pub fn new(config: RedConfig, limits: Limits, rng: Rng) -> Red {
        Red {
            fifo: Fifo::default(),
            config,
            limits,
            rng,
            average: 0.0,
            count: 0,
            idle_since: Some(Instant::ZERO),
        }
    }

    /// The current average backlog in bytes.
    pub fn average_bytes(&self) -> f64 {
        self.average
    }
}

impl Queue for Red {
    fn enqueue(&mut self, now: Instant, mut packet: Packet, verdicts: &mut Verdicts) {
        let weight = self.config.weight;
        if let Some(since) = self.idle_since.take() {
            let packet_time =
                f64::from(self.config.avpkt_bytes) * 8.0 / IDLE_BANDWIDTH_BITS_PER_SEC;
            let idle_packets = now.saturating_since(since).as_secs_f64() / packet_time;
            self.average *= (1.0 - weight).powf(idle_packets);
        }
        self.average = (1.0 - weight) * self.average + weight * self.fifo.len_bytes() as f64;

        let probability = drop_curve(&self.config, self.average);
        let early = if probability <= 0.0 {
            false
        } else if probability < 1.0 {
            let denominator = 1.0 - f64::from(self.count) * probability;
            denominator <= 0.0 || self.rng.chance(probability / denominator)
        } else {
            true
        };
        self.count = if early || probability <= 0.0 {
            0
        } else {
            self.count.saturating_add(1)
        };
        if early {
            let above_max = self.average >= self.config.max_bytes as f64;
            let may_mark = self.config.ecn && !(self.config.harddrop && above_max);
            match verdicts.drop_or_mark(packet, DropReason::Red, now, may_mark) {
                Some(marked) => packet = marked,
                None => {
                    if self.fifo.len_bytes() == 0 {
                        self.idle_since = Some(now);
                    }
                    return;
                }
            }
        }
        self.fifo.offer(now, packet, self.limits, verdicts);
    }

    fn dequeue(&mut self, now: Instant, _verdicts: &mut Verdicts) -> Option<Packet> {
        let packet = self.fifo.pop()?;
        if self.fifo.len_bytes() == 0 {
            self.idle_since = Some(now);
        }
        Some(packet)
    }

    held_in_fifo!(fifo);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::time::Duration;
    use crate::units::Probability;

    fn config(max_probability: f64) -> RedConfig {
        RedConfig {
            min_bytes: 10_000,
            max_bytes: 30_000,
            max_probability: Probability::new(max_probability).expect("a probability"),
            weight: 1.0,
            avpkt_bytes: 1000,
            ..RedConfig::default()
        }
    }

    fn limits() -> Limits {
        Limits {
            packets: 1000,
            bytes: None,
        }
    }

    /// The curve: 0 below min, a straight line from 0 to maxp between min and max (equal
    /// steps give equal increments), 1 from max (or, gentle, a line from maxp at max to 1
    /// at 2 max, continuous at max).
    #[test]
    fn red_curve_shape() {
        let plain = config(0.1);
        assert_eq!(drop_curve(&plain, 9_999.0), 0.0);
        let step = drop_curve(&plain, 11_000.0) - drop_curve(&plain, 10_000.0);
        for avg in (10_000..29_000).step_by(1000) {
            let avg = f64::from(avg);
            let rise = drop_curve(&plain, avg + 1000.0) - drop_curve(&plain, avg);
            assert!((rise - step).abs() < 1e-12);
        }
        assert!((drop_curve(&plain, 29_999.999) - 0.1).abs() < 1e-6);
        assert_eq!(drop_curve(&plain, 30_000.0), 1.0);
        let gentle = RedConfig {
            gentle: true,
            ..plain
        };
        assert!((drop_curve(&gentle, 30_000.0) - 0.1).abs() < 1e-12);
        assert!((drop_curve(&gentle, 45_000.0) - 0.55).abs() < 1e-12);
        assert_eq!(drop_curve(&gentle, 60_000.0), 1.0);
    }

    /// Holds the backlog at `level` packets of 1000 B (weight 1: avg = backlog) and offers
    /// `trials` packets; returns the gaps between drops (in arrivals) and the verdicts.
    fn hold(red: &mut Red, level: usize, trials: u64, ecn: Ecn) -> (Vec<u64>, Verdicts) {
        let mut verdicts = Verdicts::default();
        while red.len_packets() < level {
            let p = Packet::synthetic(Instant::ZERO, 1000, 0, ecn);
            red.fifo.push(p);
        }
        let mut gaps = Vec::new();
        let mut last = 0;
        for i in 1..=trials {
            let now = Instant::from_micros(i);
            let before = verdicts.dropped.len();
            red.enqueue(now, Packet::synthetic(now, 1000, 0, ecn), &mut verdicts);
            if verdicts.dropped.len() > before {
                gaps.push(i - last);
                last = i;
            }
            while red.len_packets() > level {
                red.dequeue(now, &mut verdicts);
            }
        }
        (gaps, verdicts)
    }

    /// [`hold`] on a new queue of `config` (its RNG seeded with `seed`): `(level,
    /// trials)`, the packets' ECN field `ecn`.
    fn held_new(config: RedConfig, seed: u64, (level, trials): (usize, u64), ecn: Ecn) -> Verdicts {
        let mut red = Red::new(config, limits(), Rng::seed_from(seed));
        hold(&mut red, level, trials, ecn).1
    }

    /// Floyd and Jacobson 1993, section 7: with pa = pb / (1 - count pb), count the
    /// packets let through since the last drop, the gap X between drops is uniform on
    /// 1 ..= 1/pb, so E[X] = (1 + 1/pb) / 2 and the drop fraction is 2 pb / (1 + pb).
    /// Checked within 3% for pb = 1%, 5%, 10%, plus the largest gap (never above 1/pb).
    #[test]
    fn red_count_method_spaces_drops_uniformly() {
        for (max_p, level) in [(0.02, 20), (0.1, 20), (0.2, 20)] {
            let mut red = Red::new(config(max_p), limits(), Rng::seed_from(9));
            let trials = 1_000_000;
            let (gaps, verdicts) = hold(&mut red, level, trials, Ecn::NotEct);
            let pb = max_p * 0.5; // 20,000 B: halfway between min and max
            let expected = 2.0 * pb / (1.0 + pb);
            let fraction = verdicts.dropped.len() as f64 / trials as f64;
            assert!(
                (fraction - expected).abs() < 0.03 * expected,
                "pb {pb}: fraction {fraction}, expected {expected}"
            );
            let longest = *gaps.iter().skip(1).max().expect("drops");
            assert!(longest as f64 <= (1.0 / pb).round(), "gap {longest}");
            assert!(verdicts.dropped.iter().all(|d| d.reason == DropReason::Red));
        }
    }

    /// With ECN, ECN-capable packets are marked instead of dropped in the probabilistic
    /// region and above max; with harddrop, above max they are dropped anyway.
    #[test]
    fn red_ecn_and_harddrop() {
        let ecn = RedConfig {
            ecn: true,
            ..config(0.1)
        };
        let verdicts = held_new(ecn, 1, (20, 10_000), Ecn::Ect0);
        assert!(verdicts.dropped.is_empty());
        let expected = 2.0 * 0.05 / 1.05 * 10_000.0;
        assert!((verdicts.ce_marked as f64 - expected).abs() < 0.1 * expected);
        // Above max (35 packets = 35,000 B): every arrival is marked ...
        let verdicts = held_new(ecn, 1, (35, 1000), Ecn::Ect0);
        assert_eq!((verdicts.dropped.len(), verdicts.ce_marked), (0, 1000));
        // ... or, with harddrop, dropped, also in gentle's max..2 max ramp.
        for gentle in [false, true] {
            let hard = RedConfig {
                harddrop: true,
                gentle,
                ..ecn
            };
            let verdicts = held_new(hard, 1, (35, 1000), Ecn::Ect0);
            assert_eq!(verdicts.ce_marked, 0);
            assert!(verdicts.dropped.iter().all(|d| d.reason == DropReason::Red));
            assert!(!verdicts.dropped.is_empty());
        }
        // Not ECN-capable: dropped even with ecn on.
        let verdicts = held_new(ecn, 1, (35, 1000), Ecn::NotEct);
        assert_eq!(verdicts.dropped.len(), 1000);
    }

    /// Gentle: between max and 2 max the drops are probabilistic (pb from maxp to 1 with
    /// the count method), above 2 max every packet goes.
    #[test]
    fn red_gentle_ramp_then_forced_drop() {
        let gentle = RedConfig {
            gentle: true,
            ..config(0.1)
        };
        let verdicts = held_new(gentle, 2, (40, 100_000), Ecn::NotEct);
        // 40,000 B: pb = 0.1 + 0.9 x 10,000 / 30,000 = 0.4; 2 pb / (1 + pb) = 0.571.
        let fraction = verdicts.dropped.len() as f64 / 100_000.0;
        assert!(
            (fraction - 0.8 / 1.4).abs() < 0.03 * 0.8 / 1.4,
            "{fraction}"
        );
        let verdicts = held_new(gentle, 2, (60, 1000), Ecn::NotEct);
        assert_eq!(verdicts.dropped.len(), 1000);
    }

    /// After idle the average decays as if avpkt-sized packets had left at 10 Mbit/s:
    /// idle 8 ms with avpkt 1000 B is m = 10 packet times, avg x (1 - w)^10.
    #[test]
    fn red_average_ages_over_idle_time() {
        let cfg = RedConfig {
            weight: 0.5,
            ..config(0.1)
        };
        let mut red = Red::new(cfg, limits(), Rng::seed_from(3));
        let mut verdicts = Verdicts::default();
        for _ in 0..40 {
            red.enqueue(
                Instant::ZERO,
                Packet::synthetic(Instant::ZERO, 1000, 0, Ecn::NotEct),
                &mut verdicts,
            );
        }
        while red.dequeue(Instant::ZERO, &mut verdicts).is_some() {}
        let before = red.average_bytes();
        let later = Instant::ZERO + Duration::from_millis(8);
        red.enqueue(
            later,
            Packet::synthetic(later, 1000, 0, Ecn::NotEct),
            &mut verdicts,
        );
        // Aged by 0.5^10, then one EWMA step toward the empty backlog: x 0.5.
        let expected = before * 0.5f64.powi(10) * 0.5;
        assert!((red.average_bytes() - expected).abs() < 1e-6 * before.max(1.0));
    }
}
