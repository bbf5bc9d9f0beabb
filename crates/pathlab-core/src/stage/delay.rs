//! Propagation delay with jitter, and netem-style reordering. STUB until implemented.

use std::collections::VecDeque;

use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{DelaySpec, ReorderSpec};
use crate::time::{Duration, Instant};
use crate::verdict::Verdicts;

/// Holds each packet for its delay.
#[derive(Debug)]
pub struct DelayStage {
    delay: Duration,
    held: VecDeque<(Instant, Packet)>,
    /// Packets sent ahead of their turn by `reorder`.
    pub reordered: u64,
}

impl DelayStage {
    /// A delay stage; `reorder` lets some packets skip the delay.
    pub fn new(delay: Option<DelaySpec>, reorder: Option<ReorderSpec>, rng: Rng) -> DelayStage {
        let _ = (reorder, rng);
        DelayStage {
            delay: delay.map_or(Duration::ZERO, |d| d.delay),
            held: VecDeque::new(),
            reordered: 0,
        }
    }
}

impl Stage for DelayStage {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        self.held.push_back((now + self.delay, packet));
    }
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if self.held.front()?.0 <= now {
            self.held.pop_front().map(|(_, p)| p)
        } else {
            None
        }
    }
    fn poll_at(&self) -> Option<Instant> {
        self.held.front().map(|(t, _)| *t)
    }
    fn len_packets(&self) -> usize {
        self.held.len()
    }
}
