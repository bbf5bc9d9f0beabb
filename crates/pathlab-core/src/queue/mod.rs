//! Queues and active queue management, behind one small trait.
//!
//! Every discipline implements [`Queue`]: `enqueue` a packet (which may drop it, or drop
//! another one to make room), `dequeue` the next one to transmit (which is where CoDel
//! drops). The bottleneck calls `dequeue` exactly when the line is free to send, with the
//! virtual time of that instant, so sojourn times are exact. No discipline reads a clock.

/// The `len_packets`, `len_bytes` and `drain` of a discipline that holds its packets in
/// one [`fifo::Fifo`] at `self.$path`: counted and drained as that FIFO is.
macro_rules! held_in_fifo {
    ($($path:ident).+) => {
        fn len_packets(&self) -> usize {
            self.$($path).+.len_packets()
        }

        fn len_bytes(&self) -> u64 {
            self.$($path).+.len_bytes()
        }

        fn drain(&mut self) -> Vec<Packet> {
            self.$($path).+.drain_all()
        }
    };
}

mod codel;
mod fifo;
mod fq_codel;
mod pie;
mod red;
#[cfg(test)]
mod testing;

pub use codel::{Codel, CodelQueue, CodelState};
pub use fifo::{HeadDrop, TailDrop};
pub use fq_codel::FqCodel;
pub use pie::Pie;
pub use red::Red;

use std::fmt::Debug;

use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::{Discipline, QueueSpec};
use crate::time::Instant;
use crate::verdict::Verdicts;

/// A queue discipline.
///
/// Call `enqueue` when a packet arrives and `dequeue` when the link can send; drain the
/// [`Verdicts`] after each call. Both take the current virtual time.
pub trait Queue: Debug + Send {
    /// Offers a packet; the queue keeps it, or drops it or another one into `verdicts`.
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts);
    /// The next packet to transmit, if any; AQMs may drop packets into `verdicts` first.
    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet>;
    /// Packets held.
    fn len_packets(&self) -> usize;
    /// Bytes held.
    fn len_bytes(&self) -> u64;
    /// Removes every packet without AQM decisions, oldest first (used when the discipline
    /// is replaced at run time).
    fn drain(&mut self) -> Vec<Packet>;
    /// Whether the queue holds nothing.
    fn is_empty(&self) -> bool {
        self.len_packets() == 0
    }
}

/// Packet and byte limits of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most packets held.
    pub packets: u32,
    /// Most bytes held, if limited.
    pub bytes: Option<u64>,
}

impl Limits {
    /// The limits of a queue spec (applying the discipline's default packet limit).
    pub fn of(spec: &QueueSpec) -> Limits {
        Limits {
            packets: spec.effective_limit_packets(),
            bytes: spec.limit_bytes,
        }
    }

    /// Whether a queue holding `packets` and `bytes` can take one more of `len_bytes`.
    #[inline]
    pub fn admits(&self, packets: usize, bytes: u64, len_bytes: u32) -> bool {
        packets < self.packets as usize
            && self
                .bytes
                .is_none_or(|limit| bytes + u64::from(len_bytes) <= limit)
    }
}

/// Builds the queue a spec describes. `rng` seeds the randomized disciplines.
pub fn build(spec: &QueueSpec, rng: Rng) -> Box<dyn Queue> {
    let limits = Limits::of(spec);
    match spec.discipline {
        Discipline::TailDrop => Box::new(TailDrop::new(limits)),
        Discipline::HeadDrop => Box::new(HeadDrop::new(limits)),
        Discipline::Red(config) => Box::new(Red::new(config, limits, rng)),
        Discipline::Codel(config) => Box::new(Codel::new(config, limits)),
        Discipline::FqCodel(config) => Box::new(FqCodel::new(config, limits, rng)),
        Discipline::Pie(config) => Box::new(Pie::new(config, limits, rng)),
    }
}
