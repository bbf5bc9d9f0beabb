//! The receiver's side of the tunnel's ingress: fragments put back into packets, and
//! packets delivered in order within each stream.
//!
//! Lines of different delays deliver pieces out of order. The sender's scheduler keeps that
//! small (each piece goes where it arrives first), and this buffer hides what is left: a
//! packet whose predecessors in its stream have not all arrived waits, at most `timeout`
//! (the lines' delay spread plus a margin, set by the endpoint), then the gap is given up
//! as lost. A stream is one inner flow (the sender's `fair` module gives each flow its own
//! id and numbers), so order is kept per flow, as TCP needs, and a host's ping does not
//! wait for its own bulk flow's gaps. Streams are independent, so one flow's lost fragment
//! holds back no one else, and a fragment that never comes costs its stream one timeout,
//! not the tunnel.
//! Packets are numbered per stream from 1 (serial-number arithmetic, RFC 1982, so numbers
//! wrap).
//!
//! What waits here is bounded per session by [`ReorderLimits`], in bytes (what a packet's
//! first fragment makes us allocate: its claimed length) and in packets: beyond either, the
//! packet that has waited longest is given up ([`ReorderCounters::evicted`]), so a peer
//! that starts packets it never finishes costs at most the limits, not memory without end.
//! Each packet remembers which of its bytes arrived, so a fragment that came twice is
//! counted once ([`ReorderCounters::duplicate_fragments`]) and cannot complete a packet
//! whose bytes are missing.

use std::collections::{BTreeMap, HashMap, VecDeque};

use pathlab_core::{Duration, Instant};

use crate::wire::Coding;

/// Counters of the receiving side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReorderCounters {
    /// Packets delivered.
    pub delivered: u64,
    /// Packets delivered after waiting for a predecessor.
    pub reordered: u64,
    /// Gaps given up on (packets never completed before a successor timed out).
    pub gaps_skipped: u64,
    /// Incomplete packets dropped because their missing fragments never came (given up
    /// with a gap, or after the fragment timeout).
    pub fragments_timed_out: u64,
    /// Fragments for packets already delivered or skipped.
    pub late_fragments: u64,
    /// Fragments that did not fit their packet (overlap or a length that disagrees).
    pub bad_fragments: u64,
    /// Fragments whose bytes had all arrived already: ignored.
    #[serde(default)]
    pub duplicate_fragments: u64,
    /// Packets (incomplete, or complete and waiting for a predecessor) given up because
    /// the session's reassembly held [`ReorderLimits`] already: the oldest go first.
    #[serde(default)]
    pub evicted: u64,
    /// Copies of packets delivered or complete already (a redundant class's second copy,
    /// [`crate::class`]): dropped. Fragments of a packet given up that come late are
    /// `late_fragments`, not these.
    #[serde(default)]
    pub duplicates: u64,
}

/// How much the reassembly and reorder buffers of one session may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReorderLimits {
    /// Bytes: packets' claimed lengths plus what records their arrived bytes.
    pub max_bytes: usize,
    /// Packets, incomplete or waiting.
    pub max_packets: usize,
}

impl Default for ReorderLimits {
    /// 8 MiB: a second (the longest gap wait) of a 64 Mbit/s tunnel, more than the
    /// slow lines the bond is for carry; 8,192 packets: as many 1 KB packets.
    fn default() -> ReorderLimits {
        ReorderLimits {
            max_bytes: 8 << 20,
            max_packets: 8192,
        }
    }
}

/// A packet being put together.
#[derive(Debug)]
struct Partial {
    data: Vec<u8>,
    /// One bit per byte of `data`: arrived.
    arrived: Vec<u64>,
    received: usize,
    coding: Coding,
    first_seen: Instant,
    /// Its place in [`Reorder::arrival_order`].
    serial: u64,
}

impl Partial {
    /// Bytes it holds, as the limits count them.
    fn charge(&self) -> usize {
        self.data.len() + self.arrived.len() * 8
    }
}

/// A complete packet waiting for its predecessors.
#[derive(Debug)]
struct Complete {
    data: Vec<u8>,
    coding: Coding,
    since: Instant,
    serial: u64,
}

/// What a fragment's bytes are to the bytes of its packet that arrived already.
enum Coverage {
    New,
    Duplicate,
    Overlap,
}

/// Marks bytes `range` of a packet arrived, unless some of them had.
fn mark_arrived(arrived: &mut [u64], range: std::ops::Range<usize>) -> Coverage {
    let seen = range
        .clone()
        .filter(|&i| arrived[i / 64] & (1 << (i % 64)) != 0)
        .count();
    if seen == range.len() {
        return Coverage::Duplicate;
    }
    if seen > 0 {
        return Coverage::Overlap;
    }
    for i in range {
        arrived[i / 64] |= 1 << (i % 64);
    }
    Coverage::New
}

/// Bytes and packets held, against the limits.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    bytes: usize,
    packets: usize,
}

#[derive(Debug)]
struct StreamRx {
    next: u32,
    partial: BTreeMap<u32, Partial>,
    complete: BTreeMap<u32, Complete>,
    last_active: Instant,
    /// Bit `k`: packet `next - 1 - k` was delivered (not given up), so a copy of it that
    /// comes is a duplicate.
    delivered: u64,
}

impl StreamRx {
    /// Moves `next` on by one, the packet at it delivered or not.
    fn advance(&mut self, delivered: bool) {
        self.delivered = (self.delivered << 1) | u64::from(delivered);
        self.next = self.next.wrapping_add(1).max(1);
    }

    /// Moves `next` on to `first`, the packets between given up.
    fn skip_to(&mut self, first: u32) {
        let gap = first.wrapping_sub(self.next);
        self.delivered = if gap < 64 { self.delivered << gap } else { 0 };
        self.next = first;
    }

    /// Whether packet `number` (before `next`) is known delivered.
    fn was_delivered(&self, number: u32) -> bool {
        // Numbers skip 0 when they wrap; a copy that far back is taken as late.
        let back = self.next.wrapping_sub(number).wrapping_sub(1);
        back < 64 && self.delivered & (1 << back) != 0
    }
}

/// A packet ready to hand to the TUN device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The packet's bytes, still coded as `coding` says.
    pub data: Vec<u8>,
    /// How the bytes are coded (LZ4, compressed headers).
    pub coding: Coding,
}

/// Most streams the receiver tracks: every id the wire can name, so it never forgets one.
/// A sender reuses a flow's id after it idled, its packet numbers going on; a receiver that
/// had forgotten the id would wait for numbers 1 to N - 1 (a gap's timeout) before the new
/// flow's first packet. Ids are per flow, and a site's flows within the sender's
/// `stream_idle` (5 s) may well pass 4,096 (this was the bound when ids were per user).
/// What it costs: an empty stream's entry, about 80 bytes, 5 MiB for all 65,536. The least
/// recently active is forgotten beyond it (unreachable with 16-bit ids).
pub const MAX_STREAMS: usize = 1 << 16;

/// Reassembly and per-stream ordering.
#[derive(Debug)]
pub struct Reorder {
    streams: HashMap<u16, StreamRx>,
    timeout: Duration,
    fragment_timeout: Duration,
    ready: VecDeque<Delivered>,
    counters: ReorderCounters,
    limits: ReorderLimits,
    held: Held,
    /// Packets in the order their first fragment came, to give up the oldest; entries of
    /// packets gone already are skipped (their serial no longer matches) and pruned.
    arrival_order: VecDeque<(u64, u16, u32)>,
    next_serial: u64,
}

/// `a` comes before `b` in serial-number order.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Reorder {
    /// A receiver that waits at most `timeout` for a gap.
    pub fn new(timeout: Duration) -> Reorder {
        Reorder::with_limits(timeout, ReorderLimits::default())
    }

    /// A receiver that waits at most `timeout` for a gap and holds at most `limits`.
    pub fn with_limits(timeout: Duration, limits: ReorderLimits) -> Reorder {
        Reorder {
            streams: HashMap::new(),
            timeout,
            fragment_timeout: timeout.max(Duration::from_millis(500)),
            ready: VecDeque::new(),
            counters: ReorderCounters::default(),
            limits,
            held: Held::default(),
            arrival_order: VecDeque::new(),
            next_serial: 0,
        }
    }

    /// Forgets every stream and what it held (a new session numbers its packets from 1
    /// again); keeps the counters, limits and timeout.
    pub fn renew(&mut self) {
        let counters = self.counters;
        *self = Reorder::with_limits(self.timeout, self.limits);
        self.counters = counters;
    }

    /// Bytes held in incomplete and waiting packets (as [`ReorderLimits`] counts them).
    pub fn held_bytes(&self) -> usize {
        self.held.bytes
    }

    /// Incomplete and waiting packets held.
    pub fn held_packets(&self) -> usize {
        self.held.packets
    }

    /// Changes how long a gap is waited for (the lines' delay spread changed).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
        self.fragment_timeout = timeout.max(Duration::from_millis(500));
    }

    /// How long a gap is waited for.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The counters.
    pub fn counters(&self) -> ReorderCounters {
        self.counters
    }

    /// A fragment arrived at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_fragment(
        &mut self,
        now: Instant,
        stream: u16,
        packet: u32,
        offset: u16,
        total_len: u16,
        coding: Coding,
        data: &[u8],
    ) {
        let (offset, total_len) = (usize::from(offset), usize::from(total_len));
        if data.is_empty() || offset + data.len() > total_len {
            self.counters.bad_fragments += 1;
            return;
        }
        if !self.streams.contains_key(&stream) && self.streams.len() >= MAX_STREAMS {
            self.forget_oldest_stream();
        }
        let rx = self.streams.entry(stream).or_insert_with(|| StreamRx {
            next: 1,
            partial: BTreeMap::new(),
            complete: BTreeMap::new(),
            last_active: now,
            delivered: 0,
        });
        rx.last_active = now;
        if rx.complete.contains_key(&packet)
            || (before(packet, rx.next) && rx.was_delivered(packet))
        {
            self.counters.duplicates += 1;
            return;
        }
        if before(packet, rx.next) {
            self.counters.late_fragments += 1;
            return;
        }
        if !rx.partial.contains_key(&packet) {
            let charge = total_len + total_len.div_ceil(64) * 8;
            if !self.make_room(charge) {
                self.counters.evicted += 1;
                return;
            }
            let serial = self.next_serial;
            self.next_serial += 1;
            self.arrival_order.push_back((serial, stream, packet));
            self.held.bytes += charge;
            self.held.packets += 1;
            let rx = self.streams.get_mut(&stream).expect("made above");
            rx.partial.insert(
                packet,
                Partial {
                    data: vec![0; total_len],
                    arrived: vec![0; total_len.div_ceil(64)],
                    received: 0,
                    coding,
                    first_seen: now,
                    serial,
                },
            );
        }
        let rx = self.streams.get_mut(&stream).expect("made above");
        let partial = rx.partial.get_mut(&packet).expect("present");
        if partial.data.len() != total_len || partial.coding != coding {
            self.counters.bad_fragments += 1;
            return;
        }
        match mark_arrived(&mut partial.arrived, offset..offset + data.len()) {
            Coverage::New => {}
            Coverage::Duplicate => {
                self.counters.duplicate_fragments += 1;
                return;
            }
            Coverage::Overlap => {
                // Pieces that disagree on where bytes go: the bytes are suspect.
                self.counters.bad_fragments += 1;
                return;
            }
        }
        partial.data[offset..offset + data.len()].copy_from_slice(data);
        partial.received += data.len();
        if partial.received < total_len {
            return;
        }
        let partial = rx.partial.remove(&packet).expect("present");
        self.held.bytes -= partial.arrived.len() * 8;
        if packet == rx.next {
            self.held.bytes -= partial.data.len();
            self.held.packets -= 1;
            self.ready.push_back(Delivered {
                data: partial.data,
                coding: partial.coding,
            });
            self.counters.delivered += 1;
            rx.advance(true);
            Self::release_in_order(rx, &mut self.ready, &mut self.counters, &mut self.held);
        } else {
            rx.complete.insert(
                packet,
                Complete {
                    data: partial.data,
                    coding: partial.coding,
                    since: now,
                    serial: partial.serial,
                },
            );
        }
    }

    /// Gives up the oldest packets until `charge` more bytes and one more packet fit the
    /// limits; false if they never can.
    fn make_room(&mut self, charge: usize) -> bool {
        if charge > self.limits.max_bytes || self.limits.max_packets == 0 {
            return false;
        }
        while self.held.bytes + charge > self.limits.max_bytes
            || self.held.packets + 1 > self.limits.max_packets
        {
            let Some((serial, stream, packet)) = self.arrival_order.pop_front() else {
                break;
            };
            let Some(rx) = self.streams.get_mut(&stream) else {
                continue;
            };
            if rx.partial.get(&packet).is_some_and(|p| p.serial == serial) {
                let partial = rx.partial.remove(&packet).expect("present");
                self.held.bytes -= partial.charge();
            } else if rx.complete.get(&packet).is_some_and(|c| c.serial == serial) {
                let complete = rx.complete.remove(&packet).expect("present");
                self.held.bytes -= complete.data.len();
            } else {
                continue; // gone already
            }
            self.held.packets -= 1;
            self.counters.evicted += 1;
        }
        // Entries of packets gone by other ways: pruned once they outnumber the live ones.
        if self.arrival_order.len() > 2 * self.held.packets + 1024 {
            let streams = &self.streams;
            self.arrival_order.retain(|&(serial, stream, packet)| {
                streams.get(&stream).is_some_and(|rx| {
                    rx.partial.get(&packet).is_some_and(|p| p.serial == serial)
                        || rx.complete.get(&packet).is_some_and(|c| c.serial == serial)
                })
            });
        }
        true
    }

    fn release_in_order(
        rx: &mut StreamRx,
        ready: &mut VecDeque<Delivered>,
        counters: &mut ReorderCounters,
        held: &mut Held,
    ) {
        while let Some(complete) = rx.complete.remove(&rx.next) {
            held.bytes -= complete.data.len();
            held.packets -= 1;
            ready.push_back(Delivered {
                data: complete.data,
                coding: complete.coding,
            });
            counters.delivered += 1;
            counters.reordered += 1;
            rx.advance(true);
        }
    }

    fn forget_oldest_stream(&mut self) {
        if let Some(oldest) = self
            .streams
            .iter()
            .min_by_key(|(_, rx)| rx.last_active)
            .map(|(id, _)| *id)
        {
            if let Some(rx) = self.streams.remove(&oldest) {
                for partial in rx.partial.values() {
                    self.held.bytes -= partial.charge();
                }
                for complete in rx.complete.values() {
                    self.held.bytes -= complete.data.len();
                }
                self.held.packets -= rx.partial.len() + rx.complete.len();
            }
        }
    }

    /// Gives up gaps and incomplete packets whose time is over at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for rx in self.streams.values_mut() {
            // A complete packet waited long enough: the gap before it is lost.
            while let Some(waited_since) = rx.complete.values().map(|c| c.since).min() {
                if now.saturating_since(waited_since) < self.timeout {
                    break;
                }
                let first = *rx.complete.keys().next().expect("not empty");
                // BTreeMap order is numeric; with wrap-around the serial-first packet is
                // the one closest after `next`.
                let first = rx
                    .complete
                    .keys()
                    .copied()
                    .min_by_key(|&n| n.wrapping_sub(rx.next))
                    .unwrap_or(first);
                self.counters.gaps_skipped += 1;
                // Incomplete packets in the gap are given up with it: they timed out too.
                let held = &mut self.held;
                let counters = &mut self.counters;
                rx.partial.retain(|&n, p| {
                    let keep = !before(n, first);
                    if !keep {
                        held.bytes -= p.charge();
                        held.packets -= 1;
                        counters.fragments_timed_out += 1;
                    }
                    keep
                });
                rx.skip_to(first);
                Self::release_in_order(rx, &mut self.ready, &mut self.counters, &mut self.held);
            }
            let held = &mut self.held;
            let counters = &mut self.counters;
            let fragment_timeout = self.fragment_timeout;
            rx.partial.retain(|_, p| {
                let keep = now.saturating_since(p.first_seen) < fragment_timeout;
                if !keep {
                    held.bytes -= p.charge();
                    held.packets -= 1;
                    counters.fragments_timed_out += 1;
                }
                keep
            });
        }
    }

    /// When [`Reorder::handle_timeout`] next has work.
    pub fn poll_at(&self) -> Option<Instant> {
        self.streams
            .values()
            .flat_map(|rx| {
                let gap = rx.complete.values().map(|c| c.since + self.timeout).min();
                let fragment = rx
                    .partial
                    .values()
                    .map(|p| p.first_seen + self.fragment_timeout)
                    .min();
                gap.into_iter().chain(fragment)
            })
            .min()
    }

    /// The next packet ready for the TUN device.
    pub fn poll_deliver(&mut self) -> Option<Delivered> {
        self.ready.pop_front()
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): streams (at most [`MAX_STREAMS`]),
    /// packets held in pieces and whole (within [`ReorderLimits`]), packets ready, and the
    /// arrival-order index (pruned to twice the packets held and 1,024).
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("reorder.streams", self.streams.len());
        for rx in self.streams.values() {
            sizes.add("reorder.partial", rx.partial.len());
            sizes.add("reorder.complete", rx.complete.len());
        }
        sizes.add("reorder.ready", self.ready.len());
        sizes.add("reorder.arrival_order", self.arrival_order.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn delivered(reorder: &mut Reorder) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| reorder.poll_deliver().map(|d| d.data)).collect()
    }

    #[test]
    fn fragments_in_any_order_make_the_packet() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        let packet: Vec<u8> = (0..=255).collect();
        reorder.handle_fragment(ms(0), 7, 1, 200, 256, Coding::RAW, &packet[200..]);
        reorder.handle_fragment(ms(1), 7, 1, 0, 256, Coding::RAW, &packet[..100]);
        assert!(reorder.poll_deliver().is_none());
        reorder.handle_fragment(ms(2), 7, 1, 100, 256, Coding::RAW, &packet[100..200]);
        assert_eq!(delivered(&mut reorder), vec![packet]);
    }

    #[test]
    fn a_second_copy_is_a_duplicate_and_a_packet_given_up_is_late() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        for n in 1..=3 {
            reorder.handle_fragment(ms(n.into()), 4, n, 0, 1, Coding::RAW, &[n as u8]);
        }
        // 5 comes before 4: complete, waiting; its copy is a duplicate too.
        reorder.handle_fragment(ms(4), 4, 5, 0, 1, Coding::RAW, &[5]);
        reorder.handle_fragment(ms(5), 4, 5, 0, 1, Coding::RAW, &[5]);
        for n in 1..=3 {
            reorder.handle_fragment(ms(6), 4, n, 0, 1, Coding::RAW, &[n as u8]);
        }
        assert_eq!(reorder.counters().duplicates, 4);
        // 4 never comes: given up; when it does come it is late, not a copy; 5's copy
        // still is.
        reorder.handle_timeout(ms(100));
        reorder.handle_fragment(ms(101), 4, 4, 0, 1, Coding::RAW, &[4]);
        reorder.handle_fragment(ms(101), 4, 5, 0, 1, Coding::RAW, &[5]);
        let counters = reorder.counters();
        assert_eq!((counters.duplicates, counters.late_fragments), (5, 1));
        assert_eq!(delivered(&mut reorder).len(), 4);
    }

    #[test]
    fn a_stream_is_delivered_in_order_and_a_gap_is_skipped_after_the_timeout() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 2, 0, 1, Coding::RAW, &[2]);
        reorder.handle_fragment(ms(1), 1, 3, 0, 1, Coding::RAW, &[3]);
        assert!(reorder.poll_deliver().is_none(), "2 and 3 wait for 1");
        reorder.handle_fragment(ms(5), 1, 1, 0, 1, Coding::RAW, &[1]);
        assert_eq!(delivered(&mut reorder), vec![vec![1], vec![2], vec![3]]);
        assert_eq!(reorder.counters().reordered, 2);
        // 4 is lost; 5 waits the timeout, then goes.
        reorder.handle_fragment(ms(10), 1, 5, 0, 1, Coding::RAW, &[5]);
        assert_eq!(reorder.poll_at(), Some(ms(60)));
        reorder.handle_timeout(ms(59));
        assert!(reorder.poll_deliver().is_none());
        reorder.handle_timeout(ms(60));
        assert_eq!(delivered(&mut reorder), vec![vec![5]]);
        assert_eq!(reorder.counters().gaps_skipped, 1);
        // 4 arriving now is late.
        reorder.handle_fragment(ms(70), 1, 4, 0, 1, Coding::RAW, &[4]);
        assert!(reorder.poll_deliver().is_none());
        assert_eq!(reorder.counters().late_fragments, 1);
    }

    #[test]
    fn streams_do_not_wait_for_each_other() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        // Stream 1's packet 1 is half there; stream 2's packet completes at once.
        reorder.handle_fragment(ms(0), 1, 1, 0, 1500, Coding::RAW, &[0; 700]);
        reorder.handle_fragment(ms(1), 2, 1, 0, 100, Coding::RAW, &[9; 100]);
        assert_eq!(delivered(&mut reorder), vec![vec![9; 100]]);
    }

    #[test]
    fn a_packet_missing_a_fragment_times_out_and_its_successor_goes_on() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 1, 0, 1500, Coding::RAW, &[0; 700]);
        reorder.handle_fragment(ms(1), 1, 2, 0, 10, Coding::RAW, &[2; 10]);
        reorder.handle_timeout(ms(51));
        assert_eq!(delivered(&mut reorder), vec![vec![2; 10]]);
        assert_eq!(
            reorder.counters().fragments_timed_out,
            1,
            "given up with the gap"
        );
        // The partial packet 1 is behind `next` now: dropped with the gap.
        reorder.handle_timeout(ms(600));
        assert_eq!(reorder.poll_at(), None);
    }

    #[test]
    fn numbers_wrap() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.streams.insert(
            3,
            StreamRx {
                next: u32::MAX,
                partial: BTreeMap::new(),
                complete: BTreeMap::new(),
                last_active: ms(0),
                delivered: 0,
            },
        );
        reorder.handle_fragment(ms(0), 3, 1, 0, 1, Coding::RAW, &[1]);
        reorder.handle_fragment(ms(0), 3, u32::MAX, 0, 1, Coding::RAW, &[0]);
        assert_eq!(delivered(&mut reorder), vec![vec![0], vec![1]]);
    }

    /// Regression (issue 27): a fragment that came twice counted its bytes twice, so
    /// half a packet and its duplicate made a "whole" packet with zeros for its missing half.
    #[test]
    fn a_duplicate_fragment_is_counted_once_and_completes_nothing() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        let packet: Vec<u8> = (0..100).collect();
        reorder.handle_fragment(ms(0), 1, 1, 0, 100, Coding::RAW, &packet[..50]);
        reorder.handle_fragment(ms(1), 1, 1, 0, 100, Coding::RAW, &packet[..50]);
        assert!(
            reorder.poll_deliver().is_none(),
            "half a packet is not a packet"
        );
        assert_eq!(reorder.counters().duplicate_fragments, 1);
        reorder.handle_fragment(ms(2), 1, 1, 50, 100, Coding::RAW, &packet[50..]);
        assert_eq!(delivered(&mut reorder), vec![packet]);
        assert_eq!((reorder.held_bytes(), reorder.held_packets()), (0, 0));
    }

    /// Regression (issue 27): reassembly was unbounded: each packet number's first
    /// fragment allocated its claimed length (up to 64 KiB) until its timeout, so a peer
    /// sending one byte of many packets it never finished held gigabytes.
    #[test]
    fn a_reassembly_flood_is_held_within_the_limits_and_counted() {
        let limits = ReorderLimits::default();
        let mut reorder = Reorder::new(Duration::from_millis(50));
        // Within one fragment timeout (500 ms): 20,000 packets over 1,000 streams, each
        // claiming 65,535 bytes (1.3 GB claimed), one byte sent, and sent twice.
        let floods = 20_000u32;
        for k in 0..floods {
            let now = ms(u64::from(k) / 100);
            let (stream, packet) = ((k % 1000) as u16, 2 + k / 1000);
            reorder.handle_fragment(now, stream, packet, 7, u16::MAX, Coding::RAW, &[1]);
            reorder.handle_fragment(now, stream, packet, 7, u16::MAX, Coding::RAW, &[1]);
            assert!(reorder.held_bytes() <= limits.max_bytes);
            assert!(reorder.held_packets() <= limits.max_packets);
        }
        let charge = 65_535 + 65_535usize.div_ceil(64) * 8;
        let held = limits.max_bytes / charge;
        assert_eq!(reorder.held_packets(), held, "as many as fit 8 MiB");
        let counters = reorder.counters();
        assert_eq!(
            counters.evicted,
            u64::from(floods) - held as u64,
            "the rest counted"
        );
        assert_eq!(counters.duplicate_fragments, u64::from(floods));
        // A real packet still gets through, and the oldest went first: what is held is
        // the latest packets.
        reorder.handle_fragment(ms(200), 5000, 1, 0, 3, Coding::RAW, &[1, 2, 3]);
        assert_eq!(delivered(&mut reorder), vec![vec![1, 2, 3]]);
        // Everything times out: nothing held.
        reorder.handle_timeout(ms(1000));
        assert_eq!((reorder.held_bytes(), reorder.held_packets()), (0, 0));
        assert!(reorder.arrival_order.len() <= 2 * held + 1024);
    }

    #[test]
    fn a_fragment_beyond_its_packet_is_refused() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 1, 90, 100, Coding::RAW, &[0; 20]);
        assert_eq!(reorder.counters().bad_fragments, 1);
        assert!(reorder.poll_deliver().is_none());
    }
}
