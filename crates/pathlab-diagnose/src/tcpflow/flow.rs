//! One direction of a connection: the data one end sent, and what the other end's ACKs
//! said about it, as seen at the capture point.

use std::collections::VecDeque;

use pathlab_core::Instant;

/// Linux's smallest retransmission timeout (`TCP_RTO_MIN`): a retransmission after this
/// much silence came from the timer.
pub const RTO_MIN_NS: u64 = 200_000_000;

/// Sequence number `value` relative to `base`, unwrapped to the 64-bit position nearest
/// `reference` (so transfers past 4 GiB and segments just below the base both work).
pub fn unwrap_seq(base: u32, reference: i64, value: u32) -> i64 {
    const SPAN: i64 = 1 << 32;
    let offset = i64::from(value.wrapping_sub(base));
    let epoch = reference.div_euclid(SPAN);
    (epoch - 1..=epoch + 1)
        .map(|e| e * SPAN + offset)
        .min_by_key(|candidate| (candidate - reference).abs())
        .unwrap_or(offset)
}

/// Disjoint, sorted `[start, end)` ranges of sequence space.
#[derive(Debug, Clone, Default)]
pub struct RangeSet {
    ranges: Vec<(i64, i64)>,
}

impl RangeSet {
    /// Bytes of `[start, end)` already in the set.
    pub fn overlap(&self, start: i64, end: i64) -> i64 {
        self.ranges
            .iter()
            .map(|&(a, b)| (b.min(end) - a.max(start)).max(0))
            .sum()
    }

    /// Adds `[start, end)`.
    pub fn insert(&mut self, start: i64, end: i64) {
        if end <= start {
            return;
        }
        let (mut start, mut end) = (start, end);
        self.ranges.retain(|&(a, b)| {
            if b < start || a > end {
                true
            } else {
                start = start.min(a);
                end = end.max(b);
                false
            }
        });
        let at = self.ranges.partition_point(|&(a, _)| a < start);
        self.ranges.insert(at, (start, end));
    }

    /// Forgets everything below `position`.
    pub fn trim_below(&mut self, position: i64) {
        self.ranges.retain_mut(|(a, b)| {
            *a = (*a).max(position);
            *b > *a
        });
    }

    /// Total bytes.
    pub fn bytes(&self) -> i64 {
        self.ranges.iter().map(|(a, b)| b - a).sum()
    }

    /// Whether some range ends above `position`.
    pub fn any_above(&self, position: i64) -> bool {
        self.ranges.iter().any(|&(_, b)| b > position)
    }
}

/// Why a segment was sent again, as far as the capture shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetransmissionKind {
    /// After three duplicate ACKs, or with SACK blocks above it: fast retransmit.
    Fast,
    /// After [`RTO_MIN_NS`] or more of silence: the retransmission timer.
    Rto,
    /// Neither: a tail loss probe or RACK's reordering timer.
    Probe,
}

/// One retransmitted segment.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Retransmission {
    /// When it was seen, ns since the capture began.
    pub at_ns: u64,
    /// Its sequence range relative to the first byte, `[start, end)`.
    pub start: u64,
    /// End of the range.
    pub end: u64,
    /// Why it was sent.
    pub kind: RetransmissionKind,
    /// The data had already arrived: ACKed before it was seen, or reported by a D-SACK.
    pub spurious: bool,
    /// The first copy never passed the capture point: it was lost before it.
    pub lost_before_capture: bool,
}

/// A segment not yet acknowledged, for RTT samples (Karn's rule: none from a segment
/// that was sent twice).
#[derive(Debug, Clone, Copy)]
pub struct Unacked {
    pub start: i64,
    pub end: i64,
    pub at: Instant,
    pub retransmitted: bool,
}

/// A data segment as plotted: when, its range, whether it was a retransmission.
#[derive(Debug, Clone, Copy)]
pub struct Send {
    pub at: Instant,
    pub start: i64,
    pub end: i64,
    pub retransmission: bool,
    /// Bytes in flight at the capture point after it (SACKed bytes left out).
    pub flight: i64,
}

/// An ACK of this direction's data: the cumulative ACK and the window's right edge.
#[derive(Debug, Clone, Copy)]
pub struct Ack {
    pub at: Instant,
    pub acked: i64,
    /// `acked + window`, `None` before anything of the window is known.
    pub right_edge: i64,
    pub window: u64,
}

/// The data one end sent and the ACKs the other end returned.
#[derive(Debug, Clone, Default)]
pub struct Flow {
    /// The sequence number of relative position 0 (the first data byte).
    pub base: Option<u32>,
    /// One past the highest byte seen.
    pub highest_end: i64,
    pub highest_at: Option<Instant>,
    pub seen: RangeSet,
    /// Bytes of segments the capture says were dropped at the capture point: sent, never
    /// forwarded, and seen at another time than the forwarded ones (the emulator writes a
    /// drop when the packet arrives, a forwarded packet when it leaves).
    pub dropped: RangeSet,
    pub data_segments: u64,
    pub bytes_sent: u64,
    pub retransmitted_bytes: u64,
    pub retransmissions: Vec<Retransmission>,
    pub out_of_order: u64,
    pub holes: u64,
    pub hole_bytes: u64,
    pub dropped_at_capture: u64,
    pub dropped_bytes_at_capture: u64,
    pub before_capture: u64,
    pub largest_payload: u32,
    pub largest_ip_len: u32,
    pub ip_header_len: u32,
    pub ipv6: bool,
    pub timestamps: bool,
    pub vlan: bool,
    pub first_data_at: Option<Instant>,
    pub last_data_at: Option<Instant>,
    pub last_send_at: Option<Instant>,
    pub fin_at: Option<Instant>,
    pub unacked: VecDeque<Unacked>,
    /// This end's TSvals at their first sighting, waiting for the peer's echo.
    pub tsvals: VecDeque<(u32, Instant)>,
    // What the peer's ACKs say.
    pub acked: i64,
    pub ack_seen: bool,
    pub last_ack_at: Option<Instant>,
    pub last_window: Option<u64>,
    pub dupacks: u32,
    pub sacked: RangeSet,
    pub zero_window_acks: u64,
    pub zero_since: Option<Instant>,
    pub zero_windows: Vec<(Instant, Instant)>,
    pub sends: Vec<Send>,
    pub acks: Vec<Ack>,
}

impl Flow {
    /// Bytes in flight at the capture point: sent, neither cumulatively ACKed nor SACKed.
    pub fn flight(&self) -> i64 {
        (self.highest_end - self.acked - self.sacked.bytes()).max(0)
    }

    /// Payload bytes that were sent at least once (the transfer's size).
    pub fn unique_bytes(&self) -> u64 {
        self.seen.bytes().max(0) as u64
    }

    /// Marks the retransmissions within `[start, end)` spurious (a D-SACK covered them).
    pub fn dsack(&mut self, start: i64, end: i64) {
        for retransmission in self.retransmissions.iter_mut().rev() {
            let (a, b) = (retransmission.start as i64, retransmission.end as i64);
            if a < end && b > start {
                retransmission.spurious = true;
                return;
            }
        }
    }
}
