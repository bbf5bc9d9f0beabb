//! Loss models: random (correlated), netem's 4-state Markov chain, Gilbert-Elliott.
//!
//! - `loss random P [CORR]`: the mean-preserving correlated coin of [`super::impair`].
//! - `loss state p13 p31 p32 p23 p14` (netem's model, after Salsano et al.): states 1 good
//!   reception, 2 good reception within a burst, 3 burst loss, 4 isolated loss. From 1 the
//!   chain goes to 4 with p14 or to 3 with p13; from 3 to 1 with p31 or to 2 with p32; from
//!   2 to 3 with p23; from 4 always back to 1. A packet is lost when the chain *enters*
//!   state 3 or 4.
//! - `loss gemodel p r 1-h 1-k`: good and bad states; the chain moves first (good to bad
//!   with p, bad to good with r), then the packet is lost with the new state's probability
//!   (1-k in good, 1-h in bad).
//!
//! With `ecn`, an ECN-capable packet the model chooses is marked CE instead of dropped.

use super::impair::CorrelatedChance;
use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::LossSpec;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

/// The loss decision alone, one call per packet.
#[derive(Debug, Clone)]
pub struct LossModel {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Random(CorrelatedChance),
    State {
        state: u8,
        p13: f64,
        p31: f64,
        p32: f64,
        p23: f64,
        p14: f64,
        rng: Rng,
    },
    GilbertElliott {
        bad: bool,
        p: f64,
        r: f64,
        loss_in_bad: f64,
        loss_in_good: f64,
        rng: Rng,
    },
}

impl LossModel {
    /// The model a spec describes.
    pub fn new(spec: LossSpec, rng: Rng) -> LossModel {
        let kind = match spec {
            LossSpec::Random(chance) => Kind::Random(CorrelatedChance::new(chance, rng)),
            LossSpec::State {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => Kind::State {
                state: 1,
                p13: p13.get(),
                p31: p31.get(),
                p32: p32.get(),
                p23: p23.get(),
                p14: p14.get(),
                rng,
            },
            LossSpec::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            } => Kind::GilbertElliott {
                bad: false,
                p: p.get(),
                r: r.get(),
                loss_in_bad: loss_in_bad.get(),
                loss_in_good: loss_in_good.get(),
                rng,
            },
        };
        LossModel { kind }
    }

    /// Whether the next packet is lost.
    #[inline]
    pub fn lose(&mut self) -> bool {
        match &mut self.kind {
            Kind::Random(coin) => coin.flip(),
            Kind::State {
                state,
                p13,
                p31,
                p32,
                p23,
                p14,
                rng,
            } => {
                let u = rng.f64();
                *state = match *state {
                    1 if u < *p14 => 4,
                    1 if u < *p14 + *p13 => 3,
                    3 if u < *p31 => 1,
                    3 if u < *p31 + *p32 => 2,
                    2 if u < *p23 => 3,
                    4 => 1,
                    same => same,
                };
                matches!(*state, 3 | 4)
            }
            Kind::GilbertElliott {
                bad,
                p,
                r,
                loss_in_bad,
                loss_in_good,
                rng,
            } => {
                let u = rng.f64();
                *bad = if *bad { u >= *r } else { u < *p };
                rng.chance(if *bad { *loss_in_bad } else { *loss_in_good })
            }
        }
    }
}

/// Drops (or ECN-marks) packets as a loss model says.
#[derive(Debug)]
pub struct LossStage {
    model: LossModel,
    ecn: bool,
    out: Option<Packet>,
}

impl LossStage {
    /// A loss stage; with `ecn`, ECN-capable packets are marked CE instead of dropped.
    pub fn new(spec: LossSpec, ecn: bool, rng: Rng) -> LossStage {
        LossStage {
            model: LossModel::new(spec, rng),
            ecn,
            out: None,
        }
    }
}

impl Stage for LossStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        self.out = if self.model.lose() {
            verdicts.drop_or_mark(packet, DropReason::Loss, now, self.ecn)
        } else {
            Some(packet)
        };
    }

    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.out.take()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.out.as_ref().map(|p| p.arrival)
    }

    fn len_packets(&self) -> usize {
        usize::from(self.out.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::spec::Chance;
    use crate::stage::impair::binomial_bound;
    use crate::units::Probability;

    fn p(x: f64) -> Probability {
        Probability::new(x).expect("valid")
    }

    /// Loss fraction and mean run length of consecutive losses over `n` decisions.
    fn measure(spec: LossSpec, n: usize) -> (f64, f64) {
        let mut model = LossModel::new(spec, Rng::seed_from(99));
        let (mut lost, mut runs, mut previous) = (0usize, 0usize, false);
        for _ in 0..n {
            let now = model.lose();
            if now {
                lost += 1;
                if !previous {
                    runs += 1;
                }
            }
            previous = now;
        }
        (lost as f64 / n as f64, lost as f64 / runs.max(1) as f64)
    }

    #[test]
    fn random_loss_is_within_the_binomial_bound() {
        for (rate, correlation) in [(0.02, 0.0), (0.005, 0.0), (0.02, 0.5)] {
            let n = 100_000;
            let spec = LossSpec::Random(Chance {
                probability: p(rate),
                correlation: p(correlation),
            });
            let (fraction, _) = measure(spec, n);
            let lost = fraction * n as f64;
            let bound = binomial_bound(n as f64, rate, correlation);
            assert!(
                (lost - n as f64 * rate).abs() <= bound,
                "loss {rate} corr {correlation}: {lost} lost, bound {bound}"
            );
        }
    }

    /// Gilbert-Elliott: stationary P(bad) = p / (p + r), so mean loss is
    /// P(bad)(1-h) + P(good)(1-k); with 1-h = 1 and 1-k = 0 (simple Gilbert) a loss run is
    /// a stay in the bad state, geometric with mean 1/r (Gilbert 1960; Hasslinger & Hohlfeld 2008).
    #[test]
    fn gilbert_elliott_mean_loss_and_burst_length() {
        let (pg, r) = (0.01, 0.25);
        let (fraction, burst) = measure(
            LossSpec::GilbertElliott {
                p: p(pg),
                r: p(r),
                loss_in_bad: p(1.0),
                loss_in_good: p(0.0),
            },
            2_000_000,
        );
        let expected = pg / (pg + r);
        assert!(
            (fraction - expected).abs() / expected < 0.05,
            "{fraction} vs {expected}"
        );
        assert!((burst - 1.0 / r).abs() / (1.0 / r) < 0.05, "burst {burst}");

        let (h, k) = (0.6, 0.01);
        let (fraction, _) = measure(
            LossSpec::GilbertElliott {
                p: p(pg),
                r: p(r),
                loss_in_bad: p(h),
                loss_in_good: p(k),
            },
            2_000_000,
        );
        let bad = pg / (pg + r);
        let expected = bad * h + (1.0 - bad) * k;
        assert!(
            (fraction - expected).abs() / expected < 0.05,
            "{fraction} vs {expected}"
        );
    }

    /// netem's 4-state chain: mean loss is pi3 + pi4 of its stationary distribution
    /// (solved here by iterating the transition matrix). Loss runs start either in 4 (always
    /// length 1: 4 returns to 1, a good reception) or by entering 3 from 1 or 2 (then
    /// geometric with mean 1/(p31 + p32)); their mean length is the mixture weighted by the
    /// entry rates pi1 p14 and pi1 p13 + pi2 p23.
    #[test]
    fn four_state_mean_loss_and_run_length() {
        let (p13, p31, p32, p23, p14) = (0.02, 0.3, 0.2, 0.4, 0.005);
        let spec = LossSpec::State {
            p13: p(p13),
            p31: p(p31),
            p32: p(p32),
            p23: p(p23),
            p14: p(p14),
        };
        let mut pi = [0.25; 4];
        for _ in 0..100_000 {
            let [s1, s2, s3, s4] = pi;
            pi = [
                s1 * (1.0 - p13 - p14) + s3 * p31 + s4,
                s2 * (1.0 - p23) + s3 * p32,
                s1 * p13 + s2 * p23 + s3 * (1.0 - p31 - p32),
                s1 * p14,
            ];
        }
        let expected_loss = pi[2] + pi[3];
        let isolated = pi[0] * p14;
        let bursts = pi[0] * p13 + pi[1] * p23;
        let expected_run = (isolated + bursts / (p31 + p32)) / (isolated + bursts);
        let (fraction, run) = measure(spec, 2_000_000);
        assert!(
            (fraction - expected_loss).abs() / expected_loss < 0.05,
            "{fraction} vs {expected_loss}"
        );
        assert!(
            (run - expected_run).abs() / expected_run < 0.05,
            "{run} vs {expected_run}"
        );
    }

    #[test]
    fn ecn_marks_capable_packets_and_drops_the_others() {
        let spec = LossSpec::Random(Chance {
            probability: p(1.0),
            correlation: p(0.0),
        });
        let mut stage = LossStage::new(spec, true, Rng::seed_from(1));
        let mut verdicts = Verdicts::default();
        stage.enqueue(
            Instant::ZERO,
            Packet::synthetic(Instant::ZERO, 100, 0, Ecn::Ect0),
            &mut verdicts,
        );
        assert_eq!(stage.dequeue(Instant::ZERO).map(|p| p.ecn), Some(Ecn::Ce));
        stage.enqueue(
            Instant::ZERO,
            Packet::synthetic(Instant::ZERO, 100, 0, Ecn::NotEct),
            &mut verdicts,
        );
        assert!(stage.dequeue(Instant::ZERO).is_none());
        assert_eq!(verdicts.dropped.len(), 1);
        assert_eq!(verdicts.ce_marked, 1);
    }
}
