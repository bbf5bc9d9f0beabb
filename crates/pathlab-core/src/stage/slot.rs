//! Slotted delivery (netem `slot`): packets leave only at slot boundaries, at most
//! `packets`/`bytes` per slot, as on links that transmit in grants (Wi-Fi aggregation,
//! DOCSIS, LTE).
//!
//! A slot boundary serves packets ready at or before it, in order, until its budget is
//! spent; the next boundary comes one gap later (uniform in `[min, max]`, or drawn from a
//! distribution). When the link has been idle longer than a gap, the next packet opens a
//! new slot at once, as netem does when its next slot time has passed.

use std::collections::VecDeque;

use super::distribution::DelaySampler;
use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{Distribution, SlotInterval, SlotSpec};
use crate::time::{Duration, Instant};
use crate::verdict::Verdicts;

/// Releases packets only at slot boundaries.
#[derive(Debug)]
pub struct SlotStage {
    gap: DelaySampler,
    rng: Rng,
    max_packets: Option<u32>,
    max_bytes: Option<u64>,
    held: VecDeque<(Instant, Packet)>,
    /// The current slot and what it has left; `None` before the first packet.
    slot: Option<(Instant, u32, u64)>,
}

impl SlotStage {
    /// A slot stage.
    pub fn new(spec: SlotSpec, rng: Rng) -> SlotStage {
        let gap = match spec.interval {
            SlotInterval::Uniform { min, max } => DelaySampler::new(
                Duration::from_nanos(min.as_nanos() / 2 + max.as_nanos() / 2),
                Duration::from_nanos((max.as_nanos() - min.as_nanos()) / 2),
                0.0,
                Distribution::Uniform,
            ),
            SlotInterval::Distribution {
                distribution,
                delay,
                jitter,
            } => DelaySampler::new(delay, jitter, 0.0, distribution),
        };
        SlotStage {
            gap,
            rng,
            max_packets: spec.max_packets,
            max_bytes: spec.max_bytes,
            held: VecDeque::new(),
            slot: None,
        }
    }

    fn open(&self, at: Instant) -> (Instant, u32, u64) {
        (
            at,
            self.max_packets.unwrap_or(u32::MAX),
            self.max_bytes.unwrap_or(u64::MAX),
        )
    }

    /// Moves the current slot forward until it can serve the head packet.
    fn settle(&mut self) {
        let Some((ready, packet)) = self.held.front() else {
            return;
        };
        let (ready, len) = (*ready, u64::from(packet.len_bytes));
        loop {
            match self.slot {
                Some((at, packets, bytes)) if at >= ready && packets > 0 && bytes >= len => return,
                // A packet larger than a whole slot's byte budget gets a slot to itself.
                Some((at, packets, bytes))
                    if at >= ready
                        && packets > 0
                        && self.max_bytes.is_some_and(|m| m < len)
                        && bytes == self.max_bytes.unwrap_or(0) =>
                {
                    return
                }
                Some((at, ..)) => {
                    let next = at + self.gap.sample(&mut self.rng).max(Duration::from_nanos(1));
                    // Idle for more than a gap: the packet opens a slot when it is ready.
                    self.slot = Some(self.open(if next < ready { ready } else { next }));
                }
                None => self.slot = Some(self.open(ready)),
            }
        }
    }
}

impl Stage for SlotStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        self.held.push_back((now, packet));
        if self.held.len() == 1 {
            self.settle();
        }
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        let (at, packets, bytes) = self.slot?;
        if at > now || self.held.front()?.0 > at {
            return None;
        }
        let (_, packet) = self.held.pop_front()?;
        self.slot = Some((
            at,
            packets - 1,
            bytes.saturating_sub(u64::from(packet.len_bytes)),
        ));
        self.settle();
        Some(packet)
    }

    fn poll_at(&self) -> Option<Instant> {
        self.held.front()?;
        self.slot.map(|(at, ..)| at)
    }

    fn len_packets(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;

    #[test]
    fn packets_leave_at_boundaries_within_the_per_slot_budget() {
        let spec = SlotSpec {
            interval: SlotInterval::Uniform {
                min: Duration::from_millis(10),
                max: Duration::from_millis(10),
            },
            max_packets: Some(3),
            max_bytes: None,
        };
        let mut stage = SlotStage::new(spec, Rng::seed_from(1));
        let mut verdicts = Verdicts::default();
        // 20 packets, one per ms from t = 0.
        for i in 0..20 {
            let now = Instant::from_millis(i);
            stage.enqueue(
                now,
                Packet::synthetic(now, 100, 0, Ecn::NotEct),
                &mut verdicts,
            );
        }
        let mut departures = Vec::new();
        while let Some(at) = stage.poll_at() {
            stage.dequeue(at).expect("due");
            departures.push(at.as_nanos() / 1_000_000);
        }
        // Slot 0 serves the packet ready at 0; slots at 10, 20, ... serve 3 each.
        assert_eq!(
            departures,
            vec![0, 10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40, 50, 50, 50, 60, 60, 60, 70]
        );
    }

    #[test]
    fn byte_budgets_and_idle_restarts() {
        let spec = SlotSpec {
            interval: SlotInterval::Uniform {
                min: Duration::from_millis(5),
                max: Duration::from_millis(5),
            },
            max_packets: None,
            max_bytes: Some(2500),
        };
        let mut stage = SlotStage::new(spec, Rng::seed_from(1));
        let mut verdicts = Verdicts::default();
        for _ in 0..4 {
            stage.enqueue(
                Instant::ZERO,
                Packet::synthetic(Instant::ZERO, 1000, 0, Ecn::NotEct),
                &mut verdicts,
            );
        }
        let mut departures = Vec::new();
        while let Some(at) = stage.poll_at() {
            stage.dequeue(at).expect("due");
            departures.push(at.as_nanos() / 1_000_000);
        }
        assert_eq!(departures, vec![0, 0, 5, 5]);
        // After a long idle period a packet leaves when it is ready.
        let later = Instant::from_secs(3);
        stage.enqueue(
            later,
            Packet::synthetic(later, 1000, 0, Ecn::NotEct),
            &mut verdicts,
        );
        assert_eq!(stage.poll_at(), Some(later));
        // A packet larger than the byte budget still gets through, alone.
        stage.dequeue(later);
        stage.enqueue(
            later,
            Packet::synthetic(later, 9000, 0, Ecn::NotEct),
            &mut verdicts,
        );
        assert_eq!(stage.poll_at(), Some(later + Duration::from_millis(5)));
    }
}
