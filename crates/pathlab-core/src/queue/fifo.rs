//! First-in first-out queues that drop when full: at the tail (netem, most routers) or at
//! the head (fresher data wins, and the sender learns of the loss one queue-time sooner).

use std::collections::VecDeque;

use super::codel::CodelQueue;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

/// Packets in arrival order with their byte count: the storage of every single-queue
/// discipline (CoDel's per-flow queues included).
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    packets: VecDeque<Packet>,
    bytes: u64,
}

impl Fifo {
    /// Appends `packet` if `limits` admit it (stamping its enqueue time), else drops it as
    /// queue-full. Returns whether it was kept.
    pub(crate) fn offer(
        &mut self,
        now: Instant,
        mut packet: Packet,
        limits: Limits,
        verdicts: &mut Verdicts,
    ) -> bool {
        if limits.admits(self.packets.len(), self.bytes, packet.len_bytes) {
            packet.enqueued = now;
            self.push(packet);
            true
        } else {
            verdicts.drop_packet(packet, DropReason::QueueFull, now);
            false
        }
    }

    /// Appends without checking limits (the caller has).
    pub(crate) fn push(&mut self, packet: Packet) {
        self.bytes += u64::from(packet.len_bytes);
        self.packets.push_back(packet);
    }

    /// Removes the head packet.
    pub(crate) fn pop(&mut self) -> Option<Packet> {
        let packet = self.packets.pop_front()?;
        self.bytes -= u64::from(packet.len_bytes);
        Some(packet)
    }

    /// Removes every packet, oldest first.
    pub(crate) fn drain_all(&mut self) -> Vec<Packet> {
        self.bytes = 0;
        self.packets.drain(..).collect()
    }

    pub(crate) fn len_packets(&self) -> usize {
        self.packets.len()
    }

    pub(crate) fn len_bytes(&self) -> u64 {
        self.bytes
    }
}

impl CodelQueue for Fifo {
    fn pop(&mut self) -> Option<Packet> {
        Fifo::pop(self)
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A FIFO that drops arrivals when full.
#[derive(Debug)]
pub struct TailDrop {
    fifo: Fifo,
    limits: Limits,
}

impl TailDrop {
    /// An empty queue with these limits.
    pub fn new(limits: Limits) -> TailDrop {
        TailDrop {
            fifo: Fifo::default(),
            limits,
        }
    }
}

impl Queue for TailDrop {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        self.fifo.offer(now, packet, self.limits, verdicts);
    }

    fn dequeue(&mut self, _now: Instant, _verdicts: &mut Verdicts) -> Option<Packet> {
        self.fifo.pop()
    }

    held_in_fifo!(fifo);
}

/// A FIFO that drops its oldest packets to make room for an arrival.
#[derive(Debug)]
pub struct HeadDrop {
    inner: TailDrop,
}

impl HeadDrop {
    /// An empty queue with these limits.
    pub fn new(limits: Limits) -> HeadDrop {
        HeadDrop {
            inner: TailDrop::new(limits),
        }
    }
}

impl Queue for HeadDrop {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        let limits = self.inner.limits;
        // A packet larger than the whole byte limit can never fit: drop it, not the queue.
        if !limits.admits(0, 0, packet.len_bytes) {
            verdicts.drop_packet(packet, DropReason::QueueFull, now);
            return;
        }
        while !limits.admits(
            self.inner.len_packets(),
            self.inner.len_bytes(),
            packet.len_bytes,
        ) {
            let oldest = self
                .inner
                .dequeue(now, verdicts)
                .expect("a queue that admits nothing is not empty");
            verdicts.drop_packet(oldest, DropReason::QueueFull, now);
        }
        self.inner.enqueue(now, packet, verdicts);
    }

    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet> {
        self.inner.dequeue(now, verdicts)
    }

    held_in_fifo!(inner.fifo);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;

    fn packet(len: u32) -> Packet {
        Packet::synthetic(Instant::ZERO, len, 0, Ecn::NotEct)
    }

    #[test]
    fn tail_drop_keeps_the_oldest_and_respects_both_limits() {
        let mut queue = TailDrop::new(Limits {
            packets: 3,
            bytes: Some(2500),
        });
        let mut verdicts = Verdicts::default();
        for (id, len) in [(1, 1000), (2, 1000), (3, 1000), (4, 100)] {
            let mut p = packet(len);
            p.id = id;
            queue.enqueue(Instant::ZERO, p, &mut verdicts);
        }
        // 1 and 2 fit (2000 bytes); 3 would make 3000 > 2500; 4 fits (2100 bytes, 3 packets).
        let dropped: Vec<u64> = verdicts.dropped.iter().map(|d| d.packet.id).collect();
        assert_eq!(dropped, vec![3]);
        assert_eq!(queue.len_packets(), 3);
        assert_eq!(queue.len_bytes(), 2100);
        let order: Vec<u64> = std::iter::from_fn(|| queue.dequeue(Instant::ZERO, &mut verdicts))
            .map(|p| p.id)
            .collect();
        assert_eq!(order, vec![1, 2, 4]);
        assert_eq!(queue.len_bytes(), 0);
    }

    #[test]
    fn head_drop_drops_the_oldest() {
        let mut queue = HeadDrop::new(Limits {
            packets: 2,
            bytes: None,
        });
        let mut verdicts = Verdicts::default();
        for id in 1..=4 {
            let mut p = packet(100);
            p.id = id;
            queue.enqueue(Instant::ZERO, p, &mut verdicts);
        }
        let dropped: Vec<u64> = verdicts.dropped.iter().map(|d| d.packet.id).collect();
        assert_eq!(dropped, vec![1, 2]);
        let kept: Vec<u64> = std::iter::from_fn(|| queue.dequeue(Instant::ZERO, &mut verdicts))
            .map(|p| p.id)
            .collect();
        assert_eq!(kept, vec![3, 4]);
    }
}
