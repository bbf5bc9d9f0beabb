//! FQ-CoDel (RFC 8290). STUB: behaves as tail drop until implemented.

use super::{Limits, Queue, TailDrop};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::FqCodelConfig;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// FQ-CoDel queue.
#[derive(Debug)]
pub struct FqCodel {
    inner: TailDrop,
}

impl FqCodel {
    /// A FQ-CoDel queue.
    pub fn new(config: FqCodelConfig, limits: Limits, rng: Rng) -> FqCodel {
        let _ = (config, rng);
        FqCodel {
            inner: TailDrop::new(limits),
        }
    }
}

impl Queue for FqCodel {
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
