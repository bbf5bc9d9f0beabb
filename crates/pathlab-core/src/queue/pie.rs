//! PIE (RFC 8033). STUB: behaves as tail drop until implemented.

use super::{Limits, Queue, TailDrop};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::PieConfig;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// PIE queue.
#[derive(Debug)]
pub struct Pie {
    inner: TailDrop,
}

impl Pie {
    /// A PIE queue.
    pub fn new(config: PieConfig, limits: Limits, rng: Rng) -> Pie {
        let _ = (config, rng);
        Pie {
            inner: TailDrop::new(limits),
        }
    }
}

impl Queue for Pie {
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
