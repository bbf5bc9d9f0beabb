//! The stages a link is made of, other than the queue: impairments, delay, slotting,
//! and the rate models the bottleneck serializes with.
//!
//! Each stage takes packets with `enqueue(now, packet)` and gives them back with
//! `dequeue(now)` once their time has come; `poll_at` says when that is. Stages that act
//! instantly (loss, duplicate, corrupt) give packets back at the same instant.
//!
//! # Contract with the link
//!
//! - `poll_at()` is the *exact* departure instant of the packet the next `dequeue` returns
//!   (for instant stages, the `now` it was enqueued with), and departures come out in
//!   non-decreasing order. A caller that reads `poll_at()` before each `dequeue(now)`
//!   therefore knows each packet's departure time even when it polls late, and should pass
//!   that instant (not its own `now`) to the next stage's `enqueue`.
//! - Stages keep their own FIFO of ready packets, so several `enqueue`s may precede the
//!   drain (a [`impair::Duplicate`] turns one packet into two, original first).
//! - No stage reads a clock or allocates per packet in steady state (duplicates clone the
//!   packet's bytes, which is the point of duplicating).
//! - The [`rate::RateModel`] is not a stage: the link asks it `next_start`, dequeues its
//!   queue at that instant, then `transmit`s (see its module doc).

/// The `dequeue`, `poll_at` and `len_packets` of a stage that decides at `enqueue` and
/// holds what it passes in its [`Outbox`] at `self.$field` until then.
macro_rules! passes_through_outbox {
    ($field:ident) => {
        fn dequeue(&mut self, now: Instant) -> Option<Packet> {
            self.$field.dequeue(now)
        }
        fn poll_at(&self) -> Option<Instant> {
            self.$field.poll_at()
        }
        fn len_packets(&self) -> usize {
            self.$field.len()
        }
    };
}

pub mod delay;
pub mod distribution;
pub mod impair;
pub mod loss;
pub mod rate;
pub mod restart;
pub mod slot;
#[cfg(test)]
mod testutil;

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// One step of a link's pipeline.
///
/// Call `enqueue` for every arriving packet, then `dequeue` until it returns `None`;
/// `poll_at` is the earliest instant at which `dequeue` may return a packet.
pub trait Stage {
    /// Takes a packet arriving at `now`; the stage may drop it (or mark it) into `verdicts`.
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts);
    /// A packet whose time has come by `now`, in departure order.
    fn dequeue(&mut self, now: Instant) -> Option<Packet>;
    /// When the next packet will be ready, or `None` if the stage is empty.
    fn poll_at(&self) -> Option<Instant>;
    /// Packets held.
    fn len_packets(&self) -> usize;
}

/// What an instant stage (loss, duplicate, corrupt) has let through, each packet with the
/// instant it left: the output side those stages share.
#[derive(Debug, Default)]
pub(crate) struct Outbox(VecDeque<(Instant, Packet)>);

impl Outbox {
    pub(crate) fn push(&mut self, at: Instant, packet: Packet) {
        self.0.push_back((at, packet));
    }

    pub(crate) fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if self.0.front()?.0 <= now {
            self.0.pop_front().map(|(_, packet)| packet)
        } else {
            None
        }
    }

    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.0.front().map(|(at, _)| *at)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
