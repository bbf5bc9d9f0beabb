//! CoDel (RFC 8289). STUB: behaves as tail drop until implemented.

use super::{Limits, Queue, TailDrop};
use crate::packet::Packet;
use crate::spec::CodelConfig;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// CoDel queue.
#[derive(Debug)]
pub struct Codel {
    inner: TailDrop,
}

impl Codel {
    /// A CoDel queue.
    pub fn new(config: CodelConfig, limits: Limits) -> Codel {
        let _ = config;
        Codel {
            inner: TailDrop::new(limits),
        }
    }
}

impl Queue for Codel {
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

/// The per-queue CoDel state machine (shared with FQ-CoDel).
#[derive(Debug, Clone, Default)]
pub struct CodelState {}
