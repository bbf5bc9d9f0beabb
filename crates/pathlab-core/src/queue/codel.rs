//! CoDel, RFC 8289: drop at dequeue when the minimum sojourn time over an interval has
//! stayed above target, at a rate that grows as the square root of the drop count.
//!
//! [`CodelState`] is the RFC's per-queue state machine (section 5's `dodequeue` and
//! `dequeue`), written against [`CodelQueue`] so FQ-CoDel runs one per flow.

use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::spec::CodelConfig;
use crate::time::{Duration, Instant};
use crate::verdict::{DropReason, Verdicts};

/// Largest packet the RFC's `maxpacket` check allows for: one full Ethernet frame. CoDel
/// never drops when no more than this is queued, since the link is then not the cause.
pub const MAX_PACKET_BYTES: u64 = 1514;

/// What CoDel needs of the queue it manages.
pub trait CodelQueue {
    /// Removes the head packet.
    fn pop(&mut self) -> Option<Packet>;
    /// Bytes still queued.
    fn bytes(&self) -> u64;
}

/// The per-queue CoDel state machine (RFC 8289 section 5).
#[derive(Debug, Clone, Default)]
pub struct CodelState {
    /// When the sojourn time first went (and stayed) above target, plus one interval.
    first_above_time: Option<Instant>,
    /// When the next drop is due while dropping.
    drop_next: Instant,
    /// Drops since entering the dropping state.
    count: u32,
    /// `count` when the dropping state was last entered.
    lastcount: u32,
    dropping: bool,
}

impl CodelState {
    /// Packets dropped since the dropping state was last entered.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether CoDel is in its dropping state.
    pub fn is_dropping(&self) -> bool {
        self.dropping
    }

    fn control_law(t: Instant, interval: Duration, count: u32) -> Instant {
        t + Duration::from_secs_f64(interval.as_secs_f64() / f64::from(count.max(1)).sqrt())
    }

    /// The RFC's `dodequeue`: the head packet and whether it may be dropped.
    fn dodequeue(
        &mut self,
        now: Instant,
        config: &CodelConfig,
        queue: &mut impl CodelQueue,
        verdicts: &mut Verdicts,
    ) -> (Option<Packet>, bool) {
        let Some(mut packet) = queue.pop() else {
            self.first_above_time = None;
            return (None, false);
        };
        let sojourn = now.saturating_since(packet.enqueued);
        if let Some(threshold) = config.ce_threshold {
            if sojourn > threshold && packet.mark_ce() {
                verdicts.ce_marked += 1;
            }
        }
        let mut ok_to_drop = false;
        if sojourn < config.target || queue.bytes() <= MAX_PACKET_BYTES {
            self.first_above_time = None;
        } else {
            match self.first_above_time {
                None => self.first_above_time = Some(now + config.interval),
                Some(first_above) => ok_to_drop = now >= first_above,
            }
        }
        (Some(packet), ok_to_drop)
    }

    /// The RFC's `dequeue`: the next packet to send, dropping (or, with ECN, marking) as the
    /// control law says.
    pub fn dequeue(
        &mut self,
        now: Instant,
        config: &CodelConfig,
        queue: &mut impl CodelQueue,
        verdicts: &mut Verdicts,
    ) -> Option<Packet> {
        let (mut packet, mut ok_to_drop) = self.dodequeue(now, config, queue, verdicts);
        let Some(head) = packet.take() else {
            self.dropping = false;
            return None;
        };
        packet = Some(head);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                let current = packet.take().expect("a packet is held while dropping");
                self.count += 1;
                if let Some(marked) =
                    verdicts.drop_or_mark(current, DropReason::Codel, now, config.ecn)
                {
                    // A marked packet is sent; the next mark is scheduled as a drop would be.
                    self.drop_next = Self::control_law(self.drop_next, config.interval, self.count);
                    return Some(marked);
                }
                (packet, ok_to_drop) = self.dodequeue(now, config, queue, verdicts);
                if ok_to_drop {
                    self.drop_next = Self::control_law(self.drop_next, config.interval, self.count);
                } else {
                    self.dropping = false;
                }
            }
        } else if ok_to_drop {
            let current = packet.take().expect("checked above");
            let marked = verdicts.drop_or_mark(current, DropReason::Codel, now, config.ecn);
            if marked.is_some() {
                packet = marked;
            } else {
                (packet, _) = self.dodequeue(now, config, queue, verdicts);
            }
            self.dropping = true;
            // Re-entering soon after leaving: resume near the drop rate that worked.
            let delta = self.count.saturating_sub(self.lastcount);
            self.count = 1;
            if delta > 1
                && now.saturating_since(self.drop_next) < config.interval.saturating_mul(16)
            {
                self.count = delta;
            }
            self.drop_next = Self::control_law(now, config.interval, self.count);
            self.lastcount = self.count;
        }
        packet
    }
}

/// A single FIFO managed by CoDel.
#[derive(Debug)]
pub struct Codel {
    fifo: Fifo,
    state: CodelState,
    config: CodelConfig,
    limits: Limits,
}

impl Codel {
    /// A CoDel queue.
    pub fn new(config: CodelConfig, limits: Limits) -> Codel {
        Codel {
            fifo: Fifo::default(),
            state: CodelState::default(),
            config,
            limits,
        }
    }

    /// The state machine, for inspection.
    pub fn state(&self) -> &CodelState {
        &self.state
    }
}

impl Queue for Codel {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        self.fifo.offer(now, packet, self.limits, verdicts);
    }

    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet> {
        self.state
            .dequeue(now, &self.config, &mut self.fifo, verdicts)
    }

    fn len_packets(&self) -> usize {
        self.fifo.len_packets()
    }

    fn len_bytes(&self) -> u64 {
        self.fifo.len_bytes()
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fifo.drain_all()
    }
}
