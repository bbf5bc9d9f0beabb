//! What happened to packets that did not simply pass: drops with their reason, CE marks.

use serde::{Deserialize, Serialize};

use crate::packet::Packet;
use crate::time::Instant;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropReason {
    /// The loss model (random, Gilbert-Elliott, state) chose it.
    Loss,
    /// The queue was full (packet or byte limit; fq_codel's overflow drop).
    QueueFull,
    /// RED dropped it early.
    Red,
    /// CoDel (or FQ-CoDel's per-flow CoDel) dropped it at dequeue.
    Codel,
    /// PIE dropped it at enqueue.
    Pie,
    /// Longer than the link's `mtu` (dropped silently, no ICMP).
    Mtu,
}

impl DropReason {
    /// Every reason, in a fixed order (for counters indexed by reason).
    pub const ALL: [DropReason; 6] = [
        DropReason::Loss,
        DropReason::QueueFull,
        DropReason::Red,
        DropReason::Codel,
        DropReason::Pie,
        DropReason::Mtu,
    ];

    /// Position of the reason in [`DropReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Short lowercase name used in reports (`loss`, `queue-full`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::QueueFull => "queue-full",
            DropReason::Red => "red",
            DropReason::Codel => "codel",
            DropReason::Pie => "pie",
            DropReason::Mtu => "mtu",
        }
    }
}

/// A packet that was dropped, when, and why.
#[derive(Debug, Clone)]
pub struct Dropped {
    /// The packet itself (the caller may count it, record it or write it to a pcap).
    pub packet: Packet,
    /// Why.
    pub reason: DropReason,
    /// When.
    pub at: Instant,
}

/// Collects the drops and CE marks a stage or queue made during one call.
///
/// The caller owns it and drains it after each call; stages only append.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Packets dropped, in the order they were dropped.
    pub dropped: Vec<Dropped>,
    /// Number of packets marked CE instead of being dropped.
    pub ce_marked: u64,
}

impl Verdicts {
    /// Records a drop.
    pub fn drop_packet(&mut self, packet: Packet, reason: DropReason, at: Instant) {
        self.dropped.push(Dropped { packet, reason, at });
    }

    /// Drops `packet` for `reason` unless `ecn` allows marking it CE, in which case the
    /// marked packet is returned to travel on.
    pub fn drop_or_mark(
        &mut self,
        mut packet: Packet,
        reason: DropReason,
        at: Instant,
        ecn: bool,
    ) -> Option<Packet> {
        if ecn && packet.mark_ce() {
            self.ce_marked += 1;
            Some(packet)
        } else {
            self.drop_packet(packet, reason, at);
            None
        }
    }
}
