//! Loss models: random (correlated), netem's 4-state Markov, Gilbert-Elliott.
//!
//! [`LossModel`] is the pure decision engine (one `lose()` per packet, no packets, no
//! time), so its statistics can be tested over millions of decisions; [`LossStage`] wraps
//! it as a pipeline stage that drops, or with `ecn` marks CE, the packets it chooses.
//!
//! # Models
//!
//! - **random `P [CORR]`**: a [`CorrelatedChance`] per packet. Unlike netem, the
//!   correlation keeps the long-run loss rate at `P` (see [`super::impair`]).
//! - **state `p13 p31 p32 p23 p14`** (netem's 4-state model, Salsano et al., "Definition
//!   and usage of a 4-state Markov loss model", 2012): 1 = good reception, 2 = good
//!   reception inside a burst, 3 = burst loss, 4 = isolated loss. One transition per
//!   packet; the packet is lost when the chain *enters* (or stays in) state 3 or 4.
//!   From 1: to 4 with `p14`, to 3 with `p13`, else stay. From 2: to 3 with `p23`, else
//!   stay. From 3: to 1 with `p31`, to 2 with `p32`, else stay (lose again). From 4:
//!   always to 1. Probabilities that sum above 1 are cut in the order listed (`p14`
//!   before `p13`, `p31` before `p32`). The chain starts in state 1. This is the current
//!   kernel's chain (older kernels, before a 2020 fix, mislabelled states 3 and 4 in the
//!   code, which changed burst lengths).
//! - **gemodel `p r 1-h 1-k`** (Gilbert-Elliott): per packet, first the transition (good
//!   to bad with `p`, bad to good with `r`), then the packet is lost with the *new*
//!   state's loss probability (`1-h` in bad, `1-k` in good). The chain starts good. Mean
//!   loss is `pi_bad (1-h) + pi_good (1-k)` with `pi_bad = p / (p + r)`; with `1-h = 1`
//!   and `1-k = 0` (simple Gilbert) loss bursts last `1 / r` packets on average. netem
//!   differs: it decides the loss with the *old* state's probability, so the packet on
//!   which the chain turns bad is still judged as good (and vice versa); its long-run
//!   mean is the same, but its bursts start one packet later.
//!
//! # ECN
//!
//! With `ecn`, a chosen packet that is ECN-capable is marked CE and passes; others are
//! dropped ([`Verdicts::drop_or_mark`] with [`DropReason::Loss`]), as netem's `ecn` does.

use super::impair::CorrelatedChance;
use super::{Outbox, Stage};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::LossSpec;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

/// State of netem's 4-state loss model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FourState {
    /// 1: good reception (gap period).
    Good,
    /// 2: good reception inside a burst.
    GoodInBurst,
    /// 3: loss inside a burst.
    BurstLoss,
    /// 4: isolated loss.
    IsolatedLoss,
}

impl FourState {
    /// The next state for a uniform draw `u`: `first` below its threshold, else `second`
    /// below its own, else `otherwise`. The thresholds are cumulative (netem's transition
    /// probabilities, summed as [`LossModel`] holds them).
    #[inline]
    fn drawn(
        u: f64,
        (first_below, first): (f64, FourState),
        (second_below, second): (f64, FourState),
        otherwise: FourState,
    ) -> FourState {
        if u < first_below {
            first
        } else if u < second_below {
            second
        } else {
            otherwise
        }
    }
}

/// The pure loss decision engine: one [`LossModel::lose`] per packet.
#[derive(Debug, Clone)]
pub enum LossModel {
    /// Independent or correlated random loss.
    Random(CorrelatedChance),
    /// netem's 4-state Markov chain, with cumulative thresholds precomputed.
    FourState {
        /// Current state.
        state: FourState,
        /// From 1: below this, go to 4.
        to4_from1: f64,
        /// From 1: below this (and not to 4), go to 3.
        to3_from1: f64,
        /// From 2: below this, go to 3.
        to3_from2: f64,
        /// From 3: below this, go to 1.
        to1_from3: f64,
        /// From 3: below this (and not to 1), go to 2.
        to2_from3: f64,
        /// Randomness.
        rng: Rng,
    },
    /// Gilbert-Elliott two-state chain.
    GilbertElliott {
        /// Whether the chain is in the bad state.
        bad: bool,
        /// Good to bad.
        p: f64,
        /// Bad to good.
        r: f64,
        /// Loss probability in the bad state.
        loss_in_bad: f64,
        /// Loss probability in the good state.
        loss_in_good: f64,
        /// Randomness.
        rng: Rng,
    },
}

impl LossModel {
    /// The decision engine for `spec`.
    pub fn new(spec: LossSpec, rng: Rng) -> LossModel {
        match spec {
            LossSpec::Random(chance) => LossModel::Random(CorrelatedChance::new(chance, rng)),
            LossSpec::State {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                let to4_from1 = p14.get();
                let to1_from3 = p31.get();
                LossModel::FourState {
                    state: FourState::Good,
                    to4_from1,
                    to3_from1: (to4_from1 + p13.get()).min(1.0),
                    to3_from2: p23.get(),
                    to1_from3,
                    to2_from3: (to1_from3 + p32.get()).min(1.0),
                    rng,
                }
            }
            LossSpec::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            } => LossModel::GilbertElliott {
                bad: false,
                p: p.get(),
                r: r.get(),
                loss_in_bad: loss_in_bad.get(),
                loss_in_good: loss_in_good.get(),
                rng,
            },
        }
    }

    /// Decides the fate of the next packet: `true` if it is lost.
    #[inline]
    pub fn lose(&mut self) -> bool {
        match self {
            LossModel::Random(coin) => coin.flip(),
            LossModel::FourState {
                state,
                to4_from1,
                to3_from1,
                to3_from2,
                to1_from3,
                to2_from3,
                rng,
            } => {
                *state = match *state {
                    FourState::Good => FourState::drawn(
                        rng.f64(),
                        (*to4_from1, FourState::IsolatedLoss),
                        (*to3_from1, FourState::BurstLoss),
                        FourState::Good,
                    ),
                    FourState::GoodInBurst => {
                        if rng.f64() < *to3_from2 {
                            FourState::BurstLoss
                        } else {
                            FourState::GoodInBurst
                        }
                    }
                    FourState::BurstLoss => FourState::drawn(
                        rng.f64(),
                        (*to1_from3, FourState::Good),
                        (*to2_from3, FourState::GoodInBurst),
                        FourState::BurstLoss,
                    ),
                    FourState::IsolatedLoss => FourState::Good,
                };
                matches!(*state, FourState::BurstLoss | FourState::IsolatedLoss)
            }
            LossModel::GilbertElliott {
                bad,
                p,
                r,
                loss_in_bad,
                loss_in_good,
                rng,
            } => {
                let switch = if *bad { *r } else { *p };
                if rng.chance(switch) {
                    *bad = !*bad;
                }
                let loss = if *bad { *loss_in_bad } else { *loss_in_good };
                rng.chance(loss)
            }
        }
    }
}

/// Drops (or ECN-marks) packets as a loss model says.
#[derive(Debug)]
pub struct LossStage {
    model: LossModel,
    ecn: bool,
    out: Outbox,
    /// Packets the model chose (dropped or marked).
    pub lost: u64,
}

impl LossStage {
    /// A loss stage; with `ecn`, ECN-capable packets are marked CE instead of dropped.
    pub fn new(spec: LossSpec, ecn: bool, rng: Rng) -> LossStage {
        LossStage {
            model: LossModel::new(spec, rng),
            ecn,
            out: Outbox::default(),
            lost: 0,
        }
    }
}

impl Stage for LossStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        if self.model.lose() {
            self.lost += 1;
            if let Some(marked) = verdicts.drop_or_mark(packet, DropReason::Loss, now, self.ecn) {
                self.out.push(now, marked);
            }
        } else {
            self.out.push(now, packet);
        }
    }
    passes_through_outbox!(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::spec::Chance;
    use crate::stage::testutil::{binomial_bound, check_correlated_count};
    use crate::units::Probability;

    fn prob(p: f64) -> Probability {
        Probability::new(p).unwrap()
    }

    fn run(spec: LossSpec, n: usize, seed: u64) -> Vec<bool> {
        let mut model = LossModel::new(spec, Rng::seed_from(seed));
        (0..n).map(|_| model.lose()).collect()
    }

    /// Mean length of runs of consecutive losses.
    fn mean_run(events: &[bool]) -> f64 {
        let mut runs = 0u64;
        let mut lost = 0u64;
        let mut previous = false;
        for &e in events {
            if e {
                lost += 1;
                if !previous {
                    runs += 1;
                }
            }
            previous = e;
        }
        lost as f64 / runs as f64
    }

    fn fraction(events: &[bool]) -> f64 {
        events.iter().filter(|&&e| e).count() as f64 / events.len() as f64
    }

    #[test]
    fn random_loss_is_within_the_binomial_bound() {
        let n = 100_000;
        for p in [0.001, 0.01, 0.1, 0.5] {
            let spec = LossSpec::Random(Chance {
                probability: prob(p),
                correlation: prob(0.0),
            });
            let k = fraction(&run(spec, n, 7)) * n as f64;
            let np = n as f64 * p;
            eprintln!("random p={p}: {k} lost of {n} (expected {np})");
            // 99.9% two-sided normal bound of a binomial count.
            let bound = binomial_bound(n as f64, p, 0.0);
            assert!((k - np).abs() <= bound, "p={p}: {k} vs {np} +- {bound}");
        }
    }

    #[test]
    fn correlated_random_loss_keeps_the_mean_and_has_lag1_correlation() {
        let n = 100_000;
        for (p, c) in [(0.01, 0.25), (0.05, 0.5), (0.2, 0.75)] {
            let spec = LossSpec::Random(Chance {
                probability: prob(p),
                correlation: prob(c),
            });
            let events = run(spec, n, 17);
            let (k, np, rho) = check_correlated_count(&events, p, c);
            eprintln!("random p={p} c={c}: {k} lost (expected {np}), lag-1 {rho:.4}");
            // Standard error of the lag-1 estimate about 1/sqrt(n p) for rare events.
            assert!((rho - c).abs() < 0.05, "p={p} c={c}: lag-1 {rho}");
        }
    }

    #[test]
    fn gilbert_elliott_mean_loss_and_burst_length() {
        let n = 2_000_000;
        // Mean loss = pi_bad (1-h) + pi_good (1-k), pi_bad = p / (p + r)
        // (stationary distribution of the two-state chain; Gilbert 1960, Elliott 1963).
        let (p, r, loss_bad, loss_good) = (0.01, 0.3, 0.7, 0.002);
        let spec = LossSpec::GilbertElliott {
            p: prob(p),
            r: prob(r),
            loss_in_bad: prob(loss_bad),
            loss_in_good: prob(loss_good),
        };
        let pi_bad = p / (p + r);
        let expected = pi_bad * loss_bad + (1.0 - pi_bad) * loss_good;
        let measured = fraction(&run(spec, n, 5));
        eprintln!("gemodel: loss {measured:.5} (expected {expected:.5})");
        assert!(
            (measured / expected - 1.0).abs() < 0.05,
            "{measured} vs {expected}"
        );

        // Simple Gilbert: lose everything in bad, nothing in good. A burst is a stay in
        // bad, geometric with mean 1 / r; mean loss is p / (p + r).
        let (p, r) = (0.02, 0.25);
        let spec = LossSpec::GilbertElliott {
            p: prob(p),
            r: prob(r),
            loss_in_bad: prob(1.0),
            loss_in_good: prob(0.0),
        };
        let events = run(spec, n, 6);
        let burst = mean_run(&events);
        eprintln!(
            "simple gilbert: burst {burst:.4} (expected {}), loss {:.5}",
            1.0 / r,
            fraction(&events)
        );
        assert!(
            (burst * r - 1.0).abs() < 0.05,
            "burst {burst} vs {}",
            1.0 / r
        );
        let measured = fraction(&events);
        let expected = p / (p + r);
        assert!(
            (measured / expected - 1.0).abs() < 0.05,
            "{measured} vs {expected}"
        );
    }

    /// Stationary distribution of a finite Markov chain by power iteration.
    fn stationary(matrix: &[[f64; 4]; 4]) -> [f64; 4] {
        let mut pi = [0.25; 4];
        for _ in 0..100_000 {
            let mut next = [0.0; 4];
            for (from, row) in matrix.iter().enumerate() {
                for (to, p) in row.iter().enumerate() {
                    next[to] += pi[from] * p;
                }
            }
            pi = next;
        }
        pi
    }

    #[test]
    fn four_state_mean_loss_and_loss_run_length() {
        let n = 2_000_000;
        let (p13, p31, p32, p23, p14) = (0.01, 0.4, 0.2, 0.3, 0.005);
        let spec = LossSpec::State {
            p13: prob(p13),
            p31: prob(p31),
            p32: prob(p32),
            p23: prob(p23),
            p14: prob(p14),
        };
        // Rows: from states 1..4; columns: to states 1..4.
        let matrix = [
            [1.0 - p13 - p14, 0.0, p13, p14],
            [0.0, 1.0 - p23, p23, 0.0],
            [p31, p32, 1.0 - p31 - p32, 0.0],
            [1.0, 0.0, 0.0, 0.0],
        ];
        let pi = stationary(&matrix);
        let expected_loss = pi[2] + pi[3];
        // Loss runs: a run starts on a transition into 3 from 1 or 2, or into 4 from 1.
        // A run entered through 4 has length 1 (4 always returns to 1, which is not
        // lost). A run entered through 3 lasts while the chain stays in 3: geometric with
        // mean 1 / (p31 + p32). So the mean run is the start-rate weighted average:
        //   E[L] = (pi1 p14 * 1 + (pi1 p13 + pi2 p23) / (p31 + p32))
        //          / (pi1 p14 + pi1 p13 + pi2 p23).
        let into4 = pi[0] * p14;
        let into3 = pi[0] * p13 + pi[1] * p23;
        let expected_run = (into4 + into3 / (p31 + p32)) / (into4 + into3);
        let events = run(spec, n, 9);
        let measured_loss = fraction(&events);
        let measured_run = mean_run(&events);
        eprintln!("4-state: loss {measured_loss:.5} (expected {expected_loss:.5}), run {measured_run:.4} (expected {expected_run:.4})");
        assert!(
            (measured_loss / expected_loss - 1.0).abs() < 0.05,
            "loss {measured_loss} vs {expected_loss}"
        );
        assert!(
            (measured_run / expected_run - 1.0).abs() < 0.05,
            "run {measured_run} vs {expected_run}"
        );
    }

    #[test]
    fn total_loss_and_ecn_marking() {
        let all = LossSpec::Random(Chance {
            probability: Probability::ONE,
            correlation: prob(0.0),
        });
        let mut stage = LossStage::new(all, true, Rng::seed_from(1));
        let mut verdicts = Verdicts::default();
        let now = Instant::from_millis(3);
        stage.enqueue(
            now,
            Packet::synthetic(now, 100, 0, Ecn::NotEct),
            &mut verdicts,
        );
        stage.enqueue(
            now,
            Packet::synthetic(now, 100, 0, Ecn::Ect0),
            &mut verdicts,
        );
        assert_eq!(verdicts.dropped.len(), 1);
        assert_eq!(verdicts.dropped[0].reason, DropReason::Loss);
        assert_eq!(verdicts.dropped[0].at, now);
        assert_eq!(verdicts.ce_marked, 1);
        assert_eq!(stage.poll_at(), Some(now));
        let marked = stage.dequeue(now).unwrap();
        assert_eq!(marked.ecn, Ecn::Ce);
        assert!(stage.dequeue(now).is_none());
        assert_eq!(stage.lost, 2);

        let mut no_ecn = LossStage::new(all, false, Rng::seed_from(1));
        no_ecn.enqueue(
            now,
            Packet::synthetic(now, 100, 0, Ecn::Ect0),
            &mut verdicts,
        );
        assert_eq!(verdicts.dropped.len(), 2);
        assert_eq!(no_ecn.len_packets(), 0);

        // Degenerate chains do not panic.
        for spec in [
            LossSpec::State {
                p13: Probability::ONE,
                p31: Probability::ONE,
                p32: Probability::ONE,
                p23: Probability::ONE,
                p14: Probability::ONE,
            },
            LossSpec::GilbertElliott {
                p: Probability::ONE,
                r: Probability::ZERO,
                loss_in_bad: Probability::ONE,
                loss_in_good: Probability::ONE,
            },
        ] {
            let events = run(spec, 1000, 2);
            assert!(events.iter().filter(|&&e| e).count() >= 500);
        }
    }
}
