//! Propagation delay with jitter, and netem-style reordering.
//!
//! # Without `reorder`: order is kept
//!
//! Each packet draws a delay `d` from the [`DelaySampler`] and is released at
//! `max(now + d, previous release)`: jitter never reorders packets. netem without `rate`
//! sorts packets by their send time, so jitter larger than the packet spacing silently
//! reorders them (the most common netem surprise: TCP then sees spurious duplicate ACKs).
//! The price of keeping order is that a packet that draws a short delay right behind one
//! that drew a long delay waits for it: when packets are spaced more closely than the
//! jitter, the delays seen are a little longer than the sampled ones (like a FIFO link
//! whose latency varies). A constant delay `D` adds exactly `D`.
//!
//! # With `reorder P [CORR] gap N`: netem's reordering
//!
//! As netem: after `N - 1` packets delayed normally, the next packet is sent *without
//! delay* (released at `now`) with probability `P` (a [`CorrelatedChance`] with
//! correlation `CORR`), and the counter restarts; if the coin says no, the packet is
//! delayed and the following one is eligible again. Without `gap`, `N = 1` and every
//! packet is eligible. Packets then leave in release-time order (a heap, ties in arrival
//! order), so in this mode jitter may reorder too, as in netem. In steady state (no
//! correlation) a cycle is `N - 1` delayed packets then a geometric number of tries of
//! mean `1 / P`, so the fraction sent early is `1 / (N - 1 + 1 / P) = P / (1 + (N - 1) P)`.
//! [`DelayStage::reordered`] counts the packets sent early (netem's notion; one only
//! overtakes others if some are still held).
//!
//! # Driving it
//!
//! `poll_at` is the release instant of the packet `dequeue` returns next; releases come
//! out in non-decreasing order, so a caller that reads `poll_at` before each `dequeue`
//! gets each packet's exact departure time. No allocation per packet once the internal
//! queue has grown to the link's bandwidth-delay product.

use std::collections::{BinaryHeap, VecDeque};

use super::distribution::DelaySampler;
use super::impair::CorrelatedChance;
use super::Stage;
use crate::heap::Earliest;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{Chance, DelayQuantiles, DelaySpec, Distribution, ReorderSpec};
use crate::time::{Duration, Instant};
use crate::verdict::Verdicts;

/// A packet waiting in the reordering heap: its release, then its arrival's sequence
/// number, earliest first.
type Held = Earliest<(Instant, u64), Packet>;

#[derive(Debug)]
struct Reorder {
    coin: CorrelatedChance,
    gap: u32,
    /// Packets delayed normally since the last early one (netem's `counter`).
    counter: u32,
    heap: BinaryHeap<Held>,
    sequence: u64,
}

/// Holds each packet for its delay.
#[derive(Debug)]
pub struct DelayStage {
    sampler: DelaySampler,
    rng: Rng,
    /// Order-keeping mode: releases are non-decreasing, so a FIFO suffices.
    fifo: VecDeque<(Instant, Packet)>,
    last_release: Instant,
    reorder: Option<Reorder>,
    /// Packets sent ahead of their turn by `reorder` (sent without delay).
    pub reordered: u64,
}

impl DelayStage {
    /// The same stage drawing its delays from a measured distribution (a spec's
    /// `quantiles`) added to the delay, in place of a jitter.
    pub fn replaying(mut self, quantiles: &DelayQuantiles) -> DelayStage {
        self.sampler = DelaySampler::empirical(self.sampler.mean(), &quantiles.quantiles);
        self
    }

    /// A delay stage; `reorder` lets some packets skip the delay.
    pub fn new(delay: Option<DelaySpec>, reorder: Option<ReorderSpec>, mut rng: Rng) -> DelayStage {
        let sampler = match delay {
            Some(spec) => DelaySampler::new(
                spec.delay,
                spec.jitter,
                spec.correlation.get(),
                spec.distribution,
            ),
            None => DelaySampler::new(Duration::ZERO, Duration::ZERO, 0.0, Distribution::Uniform),
        };
        let reorder = reorder.map(|spec| Reorder {
            coin: CorrelatedChance::new(
                Chance {
                    probability: spec.probability,
                    correlation: spec.correlation,
                },
                rng.fork(),
            ),
            gap: spec.gap.max(1),
            counter: 0,
            heap: BinaryHeap::new(),
            sequence: 0,
        });
        DelayStage {
            sampler,
            rng,
            fifo: VecDeque::new(),
            last_release: Instant::ZERO,
            reorder,
            reordered: 0,
        }
    }
}

impl Stage for DelayStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        match &mut self.reorder {
            None => {
                let release = (now + self.sampler.sample(&mut self.rng)).max(self.last_release);
                self.last_release = release;
                self.fifo.push_back((release, packet));
            }
            Some(reorder) => {
                // netem: delay normally while inside the gap or when the coin says no.
                let early = reorder.counter + 1 >= reorder.gap && reorder.coin.flip();
                let release = if early {
                    reorder.counter = 0;
                    self.reordered += 1;
                    now
                } else {
                    reorder.counter = reorder.counter.saturating_add(1);
                    now + self.sampler.sample(&mut self.rng)
                };
                reorder.sequence += 1;
                reorder.heap.push(Held {
                    key: (release, reorder.sequence),
                    value: packet,
                });
            }
        }
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        match &mut self.reorder {
            None => {
                if self.fifo.front()?.0 <= now {
                    self.fifo.pop_front().map(|(_, packet)| packet)
                } else {
                    None
                }
            }
            Some(reorder) => {
                if reorder.heap.peek()?.key.0 <= now {
                    reorder.heap.pop().map(|held| held.value)
                } else {
                    None
                }
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        match &self.reorder {
            None => self.fifo.front().map(|(release, _)| *release),
            Some(reorder) => reorder.heap.peek().map(|held| held.key.0),
        }
    }

    fn len_packets(&self) -> usize {
        match &self.reorder {
            None => self.fifo.len(),
            Some(reorder) => reorder.heap.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::units::Probability;

    fn prob(p: f64) -> Probability {
        Probability::new(p).unwrap()
    }

    fn delay(delay_ms: u64, jitter_ms: u64, distribution: Distribution) -> DelaySpec {
        DelaySpec {
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(jitter_ms),
            correlation: Probability::ZERO,
            distribution,
        }
    }

    /// Sends `count` packets spaced by `spacing`, draining as virtual time advances;
    /// returns (tag, arrival, departure) in departure order.
    fn drive(
        stage: &mut DelayStage,
        count: u32,
        spacing: Duration,
    ) -> Vec<(u32, Instant, Instant)> {
        let mut verdicts = Verdicts::default();
        let mut out = Vec::with_capacity(count as usize);
        let drain = |stage: &mut DelayStage, until: Instant, out: &mut Vec<_>| {
            while let Some(at) = stage.poll_at() {
                if at > until {
                    break;
                }
                let packet: Packet = stage.dequeue(at).unwrap();
                out.push((packet.tag, packet.arrival, at));
            }
        };
        for i in 0..count {
            let now = Instant::ZERO + spacing.saturating_mul(u64::from(i));
            drain(stage, now, &mut out);
            let mut packet = Packet::synthetic(now, 1000, 0, Ecn::NotEct);
            packet.tag = i;
            stage.enqueue(now, packet, &mut verdicts);
        }
        drain(stage, Instant::MAX, &mut out);
        out
    }

    #[test]
    fn constant_delay_adds_exactly_d() {
        let d = Duration::from_nanos(37_123_457);
        let spec = DelaySpec {
            delay: d,
            ..delay(0, 0, Distribution::Normal)
        };
        let mut stage = DelayStage::new(Some(spec), None, Rng::seed_from(1));
        let out = drive(&mut stage, 10_000, Duration::from_micros(13));
        assert_eq!(out.len(), 10_000);
        assert!(out
            .iter()
            .all(|&(_, arrival, departure)| departure - arrival == d));
        assert!(out.windows(2).all(|w| w[0].0 + 1 == w[1].0));
    }

    #[test]
    fn jitter_keeps_order_and_its_moments_without_reorder() {
        // Spacing (100 ms) far beyond the jitter's reach (the normal table stops at 4
        // standard deviations, 20 ms), so the FIFO constraint never binds and the delays
        // are the sampled ones: mean 50 ms, std 5 ms within 2%.
        let mut stage = DelayStage::new(
            Some(delay(50, 5, Distribution::Normal)),
            None,
            Rng::seed_from(2),
        );
        let out = drive(&mut stage, 100_000, Duration::from_millis(100));
        let delays: Vec<f64> = out
            .iter()
            .map(|&(_, a, d)| (d - a).as_millis_f64())
            .collect();
        let n = delays.len() as f64;
        let mean = delays.iter().sum::<f64>() / n;
        let std = (delays.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        eprintln!("delay 50ms 5ms normal: mean {mean:.4} ms, std {std:.4} ms");
        assert!((mean / 50.0 - 1.0).abs() < 0.02, "mean {mean}");
        assert!((std / 5.0 - 1.0).abs() < 0.02, "std {std}");

        // Dense packets (every 100 us) with 20 ms jitter: still in order, none early.
        let mut stage = DelayStage::new(
            Some(delay(50, 20, Distribution::Pareto)),
            None,
            Rng::seed_from(3),
        );
        let out = drive(&mut stage, 50_000, Duration::from_micros(100));
        assert!(out.windows(2).all(|w| w[0].0 + 1 == w[1].0), "reordered");
        assert!(out.iter().all(|&(_, a, d)| d >= a));
        assert_eq!(stage.reordered, 0);
    }

    /// netem reorder: cycles of N - 1 forced delays then Geometric(P) tries, so the
    /// fraction sent early is 1 / (N - 1 + 1 / P) (renewal-reward theorem).
    #[test]
    fn reorder_fraction_matches_the_renewal_formula() {
        let n = 100_000u32;
        for (p, gap) in [(0.25, 1u32), (0.25, 5), (0.5, 10), (1.0, 3)] {
            let reorder = ReorderSpec {
                probability: prob(p),
                correlation: Probability::ZERO,
                gap,
            };
            let mut stage = DelayStage::new(
                Some(delay(10, 0, Distribution::Uniform)),
                Some(reorder),
                Rng::seed_from(u64::from(gap)),
            );
            let out = drive(&mut stage, n, Duration::from_micros(500));
            assert_eq!(out.len(), n as usize);
            let early = out.iter().filter(|&&(_, a, d)| d == a).count() as u64;
            assert_eq!(early, stage.reordered);
            let fraction = early as f64 / f64::from(n);
            let expected = 1.0 / (f64::from(gap) - 1.0 + 1.0 / p);
            // Binomial-like bound on the count (the renewal count's variance is at most
            // the binomial one here), 99.9%.
            let bound = 3.29 * (expected * (1.0 - expected) / f64::from(n)).sqrt() + 1e-9;
            eprintln!("reorder P={p} gap={gap}: early {fraction:.5} (expected {expected:.5})");
            assert!(
                (fraction - expected).abs() <= bound,
                "P={p} gap={gap}: {fraction} vs {expected}"
            );
            // Early packets overtake the ones still held: the output is out of order,
            // but departures are non-decreasing.
            assert!(out.windows(2).all(|w| w[0].2 <= w[1].2));
            if p < 1.0 || gap > 1 {
                assert!(out.windows(2).any(|w| w[0].0 > w[1].0));
            }
        }
    }

    #[test]
    fn extreme_delays_do_not_panic() {
        let spec = DelaySpec {
            delay: Duration::MAX,
            jitter: Duration::MAX,
            correlation: prob(0.5),
            distribution: Distribution::ParetoNormal,
        };
        let reorder = ReorderSpec {
            probability: prob(0.5),
            correlation: prob(0.5),
            gap: 0,
        };
        for reorder in [None, Some(reorder)] {
            let mut stage = DelayStage::new(Some(spec), reorder, Rng::seed_from(4));
            let out = drive(&mut stage, 1000, Duration::from_secs(1_000_000));
            assert_eq!(out.len(), 1000);
        }
        let mut none = DelayStage::new(None, None, Rng::seed_from(5));
        let out = drive(&mut none, 10, Duration::ZERO);
        assert!(out.iter().all(|&(_, a, d)| a == d));
    }
}
