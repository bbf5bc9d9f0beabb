//! Loss models: random (correlated), netem's 4-state Markov, Gilbert-Elliott.
//! STUB until implemented.

use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::LossSpec;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// Drops (or ECN-marks) packets as a loss model says.
#[derive(Debug)]
pub struct LossStage {
    out: Option<Packet>,
}

impl LossStage {
    /// A loss stage; with `ecn`, ECN-capable packets are marked CE instead of dropped.
    pub fn new(spec: LossSpec, ecn: bool, rng: Rng) -> LossStage {
        let _ = (spec, ecn, rng);
        LossStage { out: None }
    }
}

impl Stage for LossStage {
    fn enqueue(&mut self, _now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        self.out = Some(packet);
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
