//! Random Early Detection. STUB: behaves as tail drop until implemented.

use super::{Limits, Queue, TailDrop};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::RedConfig;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// RED queue.
#[derive(Debug)]
pub struct Red {
    inner: TailDrop,
}

impl Red {
    /// A RED queue.
    pub fn new(config: RedConfig, limits: Limits, rng: Rng) -> Red {
        let _ = (config, rng);
        Red {
            inner: TailDrop::new(limits),
        }
    }
}

impl Queue for Red {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        self.inner.enqueue(now, packet, verdicts);
    }
    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet> {
        self.inner.dequeue(now, verdicts)
    }
    fn len_packets(&self) -> usize {
        self.inner.len_packets()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}
