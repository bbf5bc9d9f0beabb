//! Slotted delivery (netem `slot`). STUB until implemented.

use std::collections::VecDeque;

use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::SlotSpec;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// Releases packets only at slot boundaries.
#[derive(Debug)]
pub struct SlotStage {
    held: VecDeque<Packet>,
}

impl SlotStage {
    /// A slot stage.
    pub fn new(spec: SlotSpec, rng: Rng) -> SlotStage {
        let _ = (spec, rng);
        SlotStage {
            held: VecDeque::new(),
        }
    }
}

impl Stage for SlotStage {
    fn enqueue(&mut self, _now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        self.held.push_back(packet);
    }
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.held.pop_front()
    }
    fn poll_at(&self) -> Option<Instant> {
        self.held.front().map(|p| p.arrival)
    }
    fn len_packets(&self) -> usize {
        self.held.len()
    }
}
