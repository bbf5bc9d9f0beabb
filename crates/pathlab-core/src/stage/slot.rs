//! Slotted delivery (netem `slot`): packets leave only at slot boundaries, a bounded
//! number per slot, as on Wi-Fi (aggregation), DOCSIS or LTE (grants).
//!
//! # Semantics
//!
//! Slot boundaries form a grid anchored at the first packet: `s_0` is the instant the
//! first packet reaches the stage, and `s_(k+1) = s_k + gap_k`, each gap drawn uniformly
//! in `[min, max]` or from a distribution with mean `delay` and spread `jitter` (see
//! [`DelaySampler`]; negative draws are zero). A packet ready at `t` leaves at the first
//! boundary `>= t` whose budget is not spent; packets keep their order. A slot's budget is
//! `max_packets` packets and `max_bytes` bytes (either unlimited when `None` or 0, as
//! netem treats 0); a packet may leave while the slot has at least one packet and one
//! byte left, and its bytes are then deducted, so a packet larger than `max_bytes` still
//! gets through, alone in its slot (as netem does).
//!
//! netem differs in one way: when the queue is idle, netem restarts the slot clock at the
//! next packet (a new slot `gap` after it), whereas our grid keeps running, so an idle
//! link's next packet waits for the grid's next boundary (on average half a gap), like a
//! real slotted medium. After an idle time of many gaps the grid is advanced in one jump
//! (to 16 mean gaps before the packet, then gap by gap), which keeps the cost per packet
//! bounded without changing the boundary statistics noticeably.
//!
//! # Driving it
//!
//! `poll_at` is the boundary at which the head packet leaves (its exact departure
//! instant); departures are non-decreasing.

use std::collections::VecDeque;

use super::distribution::DelaySampler;
use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{SlotInterval, SlotSpec};
use crate::time::{Duration, Instant};
use crate::verdict::Verdicts;

/// How the gap to the next boundary is drawn.
#[derive(Debug, Clone)]
enum Gap {
    /// Always the same.
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform { min: Duration, max: Duration },
    /// From a jitter distribution.
    Sampled(DelaySampler),
}

/// Releases packets only at slot boundaries.
#[derive(Debug)]
pub struct SlotStage {
    gap: Gap,
    mean_gap: Duration,
    rng: Rng,
    max_packets: u32,
    max_bytes: u64,
    held: VecDeque<(Instant, Packet)>,
    /// The current boundary, once the first packet has arrived.
    boundary: Option<Instant>,
    packets_left: u32,
    bytes_left: u64,
    /// When the head packet leaves.
    head_departure: Option<Instant>,
}

impl SlotStage {
    /// A slot stage.
    pub fn new(spec: SlotSpec, rng: Rng) -> SlotStage {
        let (gap, mean_gap) = match spec.interval {
            SlotInterval::Uniform { min, max } => {
                let (min, max) = (min.min(max), min.max(max));
                let mean = Duration::from_nanos(min.as_nanos() / 2 + max.as_nanos() / 2);
                if min == max {
                    (Gap::Fixed(min), min)
                } else {
                    (Gap::Uniform { min, max }, mean)
                }
            }
            SlotInterval::Distribution {
                distribution,
                delay,
                jitter,
            } => {
                let sampler = DelaySampler::new(delay, jitter, 0.0, distribution);
                if sampler.is_constant() {
                    (Gap::Fixed(delay), delay)
                } else {
                    (Gap::Sampled(sampler), delay)
                }
            }
        };
        let max_packets = match spec.max_packets {
            None | Some(0) => u32::MAX,
            Some(n) => n,
        };
        let max_bytes = match spec.max_bytes {
            None | Some(0) => u64::MAX,
            Some(n) => n,
        };
        SlotStage {
            gap,
            mean_gap,
            rng,
            max_packets,
            max_bytes,
            held: VecDeque::new(),
            boundary: None,
            packets_left: max_packets,
            bytes_left: max_bytes,
            head_departure: None,
        }
    }

    fn draw_gap(&mut self) -> Duration {
        match &mut self.gap {
            Gap::Fixed(gap) => *gap,
            Gap::Uniform { min, max } => {
                let span = (max.as_nanos() - min.as_nanos()).saturating_add(1);
                *min + Duration::from_nanos(self.rng.below(span))
            }
            Gap::Sampled(sampler) => sampler.sample(&mut self.rng),
        }
    }

    /// Moves to the next boundary with a fresh budget.
    fn next_boundary(&mut self, boundary: Instant) -> Instant {
        self.packets_left = self.max_packets;
        self.bytes_left = self.max_bytes;
        boundary + self.draw_gap()
    }

    /// Finds the boundary at which the head packet (ready at `ready`) leaves.
    fn schedule_head(&mut self) {
        let Some(&(ready, _)) = self.held.front() else {
            self.head_departure = None;
            return;
        };
        let mut boundary = *self.boundary.get_or_insert(ready);
        if boundary < ready {
            match self.gap {
                Gap::Fixed(gap) if gap.is_zero() => boundary = ready,
                Gap::Fixed(gap) => {
                    let steps = (ready - boundary).as_nanos().div_ceil(gap.as_nanos());
                    boundary += gap.saturating_mul(steps);
                }
                _ => {
                    let far = self.mean_gap.saturating_mul(64);
                    if !self.mean_gap.is_zero() && ready - boundary > far {
                        boundary = ready - self.mean_gap.saturating_mul(16);
                    }
                }
            }
            if boundary >= ready {
                self.packets_left = self.max_packets;
                self.bytes_left = self.max_bytes;
            }
        }
        while boundary < ready || self.packets_left == 0 || self.bytes_left == 0 {
            boundary = self.next_boundary(boundary);
            if boundary == Instant::MAX {
                break;
            }
        }
        self.boundary = Some(boundary);
        self.head_departure = Some(boundary);
    }
}

impl Stage for SlotStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        self.held.push_back((now, packet));
        if self.held.len() == 1 {
            self.schedule_head();
        }
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if self.head_departure? > now {
            return None;
        }
        let (_, packet) = self.held.pop_front()?;
        self.packets_left = self.packets_left.saturating_sub(1);
        self.bytes_left = self.bytes_left.saturating_sub(u64::from(packet.len_bytes));
        self.schedule_head();
        Some(packet)
    }

    fn poll_at(&self) -> Option<Instant> {
        self.head_departure
    }

    fn len_packets(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::spec::Distribution;

    fn spec(interval: SlotInterval, max_packets: Option<u32>, max_bytes: Option<u64>) -> SlotSpec {
        SlotSpec {
            interval,
            max_packets,
            max_bytes,
        }
    }

    /// Offers packets (arrival instant, length) and returns (arrival, departure, length)
    /// in departure order, draining as virtual time advances.
    fn drive(stage: &mut SlotStage, arrivals: &[(Instant, u32)]) -> Vec<(Instant, Instant, u32)> {
        let mut verdicts = Verdicts::default();
        let mut out = Vec::new();
        let drain = |stage: &mut SlotStage, until: Instant, out: &mut Vec<_>| {
            while let Some(at) = stage.poll_at() {
                if at > until {
                    break;
                }
                let packet: Packet = stage.dequeue(at).unwrap();
                out.push((packet.arrival, at, packet.len_bytes));
            }
        };
        for &(now, len) in arrivals {
            drain(stage, now, &mut out);
            stage.enqueue(
                now,
                Packet::synthetic(now, len, 0, Ecn::NotEct),
                &mut verdicts,
            );
        }
        drain(stage, Instant::MAX, &mut out);
        out
    }

    /// Slots exactly `gap` apart, each for at most `packets` packets and `bytes` bytes.
    fn every(gap: Duration, packets: Option<u32>, bytes: Option<u64>) -> SlotStage {
        let interval = SlotInterval::Uniform { min: gap, max: gap };
        SlotStage::new(spec(interval, packets, bytes), Rng::seed_from(1))
    }

    #[test]
    fn fixed_slots_release_only_at_boundaries_within_budget() {
        let gap = Duration::from_millis(5);
        let mut stage = every(gap, Some(3), Some(4000));
        let start = Instant::from_millis(100);
        // 40 packets of 1000 bytes, one every 0.5 ms: 2 per ms, 10 per slot offered.
        let arrivals: Vec<_> = (0..40u64)
            .map(|i| (start + Duration::from_micros(500 * i), 1000))
            .collect();
        let out = drive(&mut stage, &arrivals);
        assert_eq!(out.len(), 40);
        let mut per_slot = std::collections::BTreeMap::<Instant, (u32, u64)>::new();
        for &(arrival, departure, len) in &out {
            assert!(departure >= arrival);
            let offset = (departure - start).as_nanos();
            assert_eq!(offset % gap.as_nanos(), 0, "{departure} is not a boundary");
            let slot = per_slot.entry(departure).or_default();
            slot.0 += 1;
            slot.1 += u64::from(len);
        }
        // Budget: 3 packets (the 4000-byte budget allows 4 of 1000, so packets bind).
        assert!(per_slot.values().all(|&(packets, _)| packets <= 3));
        // The first packet leaves at s0, its arrival; the backlog then drains 3 per slot.
        assert_eq!(out[0].1, start);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "order kept");
        assert!(per_slot.values().filter(|&&(p, _)| p == 3).count() >= 10);
    }

    #[test]
    fn byte_budget_lets_one_oversized_packet_through() {
        let gap = Duration::from_millis(1);
        let mut stage = every(gap, None, Some(1500));
        let arrivals = [
            (Instant::ZERO, 9000),
            (Instant::ZERO, 100),
            (Instant::ZERO, 1400),
            (Instant::ZERO, 1),
        ];
        let out = drive(&mut stage, &arrivals);
        let departures: Vec<_> = out.iter().map(|o| o.1).collect();
        assert_eq!(
            departures,
            [
                Instant::ZERO,
                Instant::from_millis(1),
                Instant::from_millis(1),
                Instant::from_millis(2)
            ]
        );
    }

    #[test]
    fn random_slots_stay_on_their_grid() {
        // Uniform gaps in [2, 8] ms: every departure is a boundary, and the mean distance
        // between distinct departure instants of a saturated stage is the mean gap, 5 ms.
        let mut stage = SlotStage::new(
            spec(
                SlotInterval::Uniform {
                    min: Duration::from_millis(2),
                    max: Duration::from_millis(8),
                },
                Some(1),
                None,
            ),
            Rng::seed_from(2),
        );
        let arrivals: Vec<_> = (0..10_000).map(|_| (Instant::ZERO, 100)).collect();
        let out = drive(&mut stage, &arrivals);
        let gaps: Vec<f64> = out
            .windows(2)
            .map(|w| (w[1].1 - w[0].1).as_millis_f64())
            .collect();
        assert!(gaps.iter().all(|&g| (2.0..=8.0).contains(&g)));
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        // Uniform[2, 8] has std 6 / sqrt(12) = 1.73 ms; 3.29 standard errors of the mean.
        assert!(
            (mean - 5.0).abs() < 3.29 * 1.73 / (gaps.len() as f64).sqrt(),
            "{mean}"
        );
    }

    #[test]
    fn idle_grid_and_extremes_do_not_hang() {
        for interval in [
            SlotInterval::Uniform {
                min: Duration::ZERO,
                max: Duration::ZERO,
            },
            SlotInterval::Uniform {
                min: Duration::from_nanos(1),
                max: Duration::from_nanos(3),
            },
            SlotInterval::Distribution {
                distribution: Distribution::Normal,
                delay: Duration::from_micros(1),
                jitter: Duration::from_micros(1),
            },
            SlotInterval::Uniform {
                min: Duration::MAX,
                max: Duration::MAX,
            },
        ] {
            let mut stage = SlotStage::new(spec(interval, Some(0), Some(1)), Rng::seed_from(3));
            // Arrivals a long idle time apart: the grid must jump, not walk.
            let arrivals = [
                (Instant::ZERO, 10),
                (Instant::from_secs(3600), 10),
                (Instant::from_secs(7200), 10),
                (Instant::MAX, 10),
            ];
            let out = drive(&mut stage, &arrivals);
            assert_eq!(out.len(), 4);
            assert!(out.iter().all(|&(a, d, _)| d >= a));
        }
    }
}
