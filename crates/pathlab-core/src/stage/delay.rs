//! Propagation delay with jitter, and netem-style reordering.
//!
//! **Jitter keeps packet order.** A packet leaves at `max(arrival + draw, previous
//! departure)`, as on a real path where packets of one flow do not overtake each other.
//! netem instead sorts packets by their drawn time, so any jitter larger than the packet
//! spacing silently reorders them; users are surprised by it and TCP slows down.
//!
//! **Reordering is asked for explicitly**, with netem's `reorder P [CORR] [gap N]`: after
//! N-1 normally delayed packets, the next one is sent without delay with probability P
//! (correlated with the previous decision), and the count starts over. In that mode, as in
//! netem, packets leave in order of their own times, so jitter may reorder them too.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::distribution::DelaySampler;
use super::impair::CorrelatedChance;
use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{Chance, DelaySpec, ReorderSpec};
use crate::time::{Duration, Instant};
use crate::verdict::Verdicts;

/// A packet held until `at`; `seq` keeps arrival order among equal times.
#[derive(Debug)]
struct Held {
    at: Instant,
    seq: u64,
    packet: Packet,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Debug)]
struct Reorder {
    coin: CorrelatedChance,
    gap: u32,
    /// Packets delayed normally since the last one sent early.
    since_last: u32,
}

/// Holds each packet for its delay.
#[derive(Debug)]
pub struct DelayStage {
    sampler: Option<DelaySampler>,
    rng: Rng,
    reorder: Option<Reorder>,
    /// In order (no reorder): departure times never decrease.
    in_order: VecDeque<(Instant, Packet)>,
    /// With reorder: by departure time.
    by_time: BinaryHeap<Reverse<Held>>,
    last_departure: Instant,
    seq: u64,
    /// Packets sent ahead of their turn by `reorder`.
    pub reordered: u64,
}

impl DelayStage {
    /// A delay stage; `reorder` lets some packets skip the delay.
    pub fn new(delay: Option<DelaySpec>, reorder: Option<ReorderSpec>, mut rng: Rng) -> DelayStage {
        let sampler = delay
            .map(|d| DelaySampler::new(d.delay, d.jitter, d.correlation.get(), d.distribution));
        let reorder = reorder.map(|r| Reorder {
            coin: CorrelatedChance::new(
                Chance {
                    probability: r.probability,
                    correlation: r.correlation,
                },
                rng.fork(),
            ),
            gap: r.gap.max(1),
            since_last: 0,
        });
        DelayStage {
            sampler,
            rng,
            reorder,
            in_order: VecDeque::new(),
            by_time: BinaryHeap::new(),
            last_departure: Instant::ZERO,
            seq: 0,
            reordered: 0,
        }
    }

    fn draw(&mut self) -> Duration {
        match &mut self.sampler {
            Some(sampler) => sampler.sample(&mut self.rng),
            None => Duration::ZERO,
        }
    }
}

impl Stage for DelayStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        let Some(reorder) = &mut self.reorder else {
            let at = (now + self.draw()).max(self.last_departure);
            self.last_departure = at;
            self.in_order.push_back((at, packet));
            return;
        };
        let early = reorder.since_last + 1 >= reorder.gap && reorder.coin.flip();
        let at = if early {
            reorder.since_last = 0;
            self.reordered += 1;
            now
        } else {
            reorder.since_last += 1;
            now + self.draw()
        };
        self.seq += 1;
        self.by_time.push(Reverse(Held {
            at,
            seq: self.seq,
            packet,
        }));
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if self.reorder.is_some() {
            if self.by_time.peek()?.0.at <= now {
                return self.by_time.pop().map(|Reverse(held)| held.packet);
            }
            return None;
        }
        if self.in_order.front()?.0 <= now {
            return self.in_order.pop_front().map(|(_, packet)| packet);
        }
        None
    }

    fn poll_at(&self) -> Option<Instant> {
        if self.reorder.is_some() {
            self.by_time.peek().map(|Reverse(held)| held.at)
        } else {
            self.in_order.front().map(|(at, _)| *at)
        }
    }

    fn len_packets(&self) -> usize {
        self.in_order.len() + self.by_time.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::spec::Distribution;
    use crate::units::Probability;

    fn delay(ms: u64, jitter_ms: u64) -> DelaySpec {
        DelaySpec {
            delay: Duration::from_millis(ms),
            jitter: Duration::from_millis(jitter_ms),
            correlation: Probability::ZERO,
            distribution: Distribution::Normal,
        }
    }

    /// Sends `n` packets 1 ms apart and returns (id, departure) in departure order.
    fn run(stage: &mut DelayStage, n: u64) -> Vec<(u64, Instant)> {
        let mut verdicts = Verdicts::default();
        for id in 0..n {
            let now = Instant::from_millis(id);
            let mut packet = Packet::synthetic(now, 100, 0, Ecn::NotEct);
            packet.id = id;
            stage.enqueue(now, packet, &mut verdicts);
        }
        let mut out = Vec::new();
        while let Some(at) = stage.poll_at() {
            let packet = stage.dequeue(at).expect("due");
            out.push((packet.id, at));
        }
        out
    }

    #[test]
    fn jitter_keeps_order_without_reorder() {
        let mut stage = DelayStage::new(Some(delay(50, 20)), None, Rng::seed_from(4));
        let out = run(&mut stage, 10_000);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(stage.reordered, 0);
    }

    /// With reorder P gap N, one packet in each run of N is eligible and goes early with
    /// probability P; a run ends after an early packet, so runs last N-1 + G packets with G
    /// geometric of mean 1/P: the early fraction is 1 / (N - 1 + 1/P).
    #[test]
    fn reorder_sends_the_expected_fraction_early() {
        for (p, gap) in [(0.25, 1), (0.25, 5), (1.0, 3)] {
            let reorder = ReorderSpec {
                probability: Probability::new(p).expect("valid"),
                correlation: Probability::ZERO,
                gap,
            };
            let mut stage = DelayStage::new(Some(delay(10, 0)), Some(reorder), Rng::seed_from(8));
            let n = 100_000;
            let out = run(&mut stage, n);
            let expected = 1.0 / (f64::from(gap) - 1.0 + 1.0 / p);
            let fraction = stage.reordered as f64 / n as f64;
            assert!(
                (fraction - expected).abs() / expected < 0.03,
                "p {p} gap {gap}: {fraction} vs {expected}"
            );
            // Early packets really overtake: departures are not in id order.
            assert!(out.windows(2).any(|w| w[0].0 > w[1].0));
        }
    }
}
