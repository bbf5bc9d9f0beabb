//! The receiver's side of the tunnel's ingress: fragments put back into packets, and
//! packets delivered in order within each stream.
//!
//! Lines of different delays deliver pieces out of order. The sender's scheduler keeps that
//! small (each piece goes where it arrives first), and this buffer hides what is left: a
//! packet whose predecessors in its stream have not all arrived waits, at most `timeout`
//! (the lines' delay spread plus a margin, set by the endpoint), then the gap is given up
//! as lost. Streams are independent, so one user's lost fragment holds back no one else,
//! and a fragment that never comes costs its stream one timeout, not the tunnel.
//! Packets are numbered per stream from 1 (serial-number arithmetic, RFC 1982, so numbers
//! wrap).

use std::collections::{BTreeMap, HashMap};

use pathlab_core::{Duration, Instant};

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
}

/// A packet being put together.
#[derive(Debug)]
struct Partial {
    data: Vec<u8>,
    received: usize,
    compressed: bool,
    first_seen: Instant,
}

/// A complete packet waiting for its predecessors.
#[derive(Debug)]
struct Complete {
    data: Vec<u8>,
    compressed: bool,
    since: Instant,
}

#[derive(Debug)]
struct StreamRx {
    next: u32,
    partial: BTreeMap<u32, Partial>,
    complete: BTreeMap<u32, Complete>,
    last_active: Instant,
}

/// A packet ready to hand to the TUN device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The packet's bytes (still compressed if `compressed`).
    pub data: Vec<u8>,
    /// Whether the bytes are LZ4-compressed.
    pub compressed: bool,
}

/// Most streams the receiver tracks; the least recently active is forgotten beyond it.
pub const MAX_STREAMS: usize = 4096;

/// Reassembly and per-stream ordering.
#[derive(Debug)]
pub struct Reorder {
    streams: HashMap<u16, StreamRx>,
    timeout: Duration,
    fragment_timeout: Duration,
    ready: std::collections::VecDeque<Delivered>,
    counters: ReorderCounters,
}

/// `a` comes before `b` in serial-number order.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Reorder {
    /// A receiver that waits at most `timeout` for a gap.
    pub fn new(timeout: Duration) -> Reorder {
        Reorder {
            streams: HashMap::new(),
            timeout,
            fragment_timeout: timeout.max(Duration::from_millis(500)),
            ready: std::collections::VecDeque::new(),
            counters: ReorderCounters::default(),
        }
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
        compressed: bool,
        data: &[u8],
    ) {
        if !self.streams.contains_key(&stream) && self.streams.len() >= MAX_STREAMS {
            self.forget_oldest_stream();
        }
        let rx = self.streams.entry(stream).or_insert_with(|| StreamRx {
            next: 1,
            partial: BTreeMap::new(),
            complete: BTreeMap::new(),
            last_active: now,
        });
        rx.last_active = now;
        if before(packet, rx.next) || rx.complete.contains_key(&packet) {
            self.counters.late_fragments += 1;
            return;
        }
        let (offset, total_len) = (usize::from(offset), usize::from(total_len));
        let partial = rx.partial.entry(packet).or_insert_with(|| Partial {
            data: vec![0; total_len],
            received: 0,
            compressed,
            first_seen: now,
        });
        if partial.data.len() != total_len
            || offset + data.len() > total_len
            || partial.compressed != compressed
        {
            self.counters.bad_fragments += 1;
            return;
        }
        partial.data[offset..offset + data.len()].copy_from_slice(data);
        partial.received += data.len();
        if partial.received < total_len {
            return;
        }
        let partial = rx.partial.remove(&packet).expect("present");
        if partial.received > total_len {
            self.counters.bad_fragments += 1; // overlapping pieces: the bytes are suspect
            return;
        }
        if packet == rx.next {
            self.ready.push_back(Delivered {
                data: partial.data,
                compressed: partial.compressed,
            });
            self.counters.delivered += 1;
            rx.next = rx.next.wrapping_add(1).max(1);
            Self::release_in_order(rx, &mut self.ready, &mut self.counters);
        } else {
            rx.complete.insert(
                packet,
                Complete {
                    data: partial.data,
                    compressed: partial.compressed,
                    since: now,
                },
            );
        }
    }

    fn release_in_order(
        rx: &mut StreamRx,
        ready: &mut std::collections::VecDeque<Delivered>,
        counters: &mut ReorderCounters,
    ) {
        while let Some(complete) = rx.complete.remove(&rx.next) {
            ready.push_back(Delivered {
                data: complete.data,
                compressed: complete.compressed,
            });
            counters.delivered += 1;
            counters.reordered += 1;
            rx.next = rx.next.wrapping_add(1).max(1);
        }
    }

    fn forget_oldest_stream(&mut self) {
        if let Some(oldest) = self
            .streams
            .iter()
            .min_by_key(|(_, rx)| rx.last_active)
            .map(|(id, _)| *id)
        {
            self.streams.remove(&oldest);
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
                let partials = rx.partial.len();
                rx.partial.retain(|&n, _| !before(n, first));
                self.counters.fragments_timed_out += (partials - rx.partial.len()) as u64;
                rx.next = first;
                Self::release_in_order(rx, &mut self.ready, &mut self.counters);
            }
            let before_count = rx.partial.len();
            rx.partial
                .retain(|_, p| now.saturating_since(p.first_seen) < self.fragment_timeout);
            self.counters.fragments_timed_out += (before_count - rx.partial.len()) as u64;
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
        reorder.handle_fragment(ms(0), 7, 1, 200, 256, false, &packet[200..]);
        reorder.handle_fragment(ms(1), 7, 1, 0, 256, false, &packet[..100]);
        assert!(reorder.poll_deliver().is_none());
        reorder.handle_fragment(ms(2), 7, 1, 100, 256, false, &packet[100..200]);
        assert_eq!(delivered(&mut reorder), vec![packet]);
    }

    #[test]
    fn a_stream_is_delivered_in_order_and_a_gap_is_skipped_after_the_timeout() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 2, 0, 1, false, &[2]);
        reorder.handle_fragment(ms(1), 1, 3, 0, 1, false, &[3]);
        assert!(reorder.poll_deliver().is_none(), "2 and 3 wait for 1");
        reorder.handle_fragment(ms(5), 1, 1, 0, 1, false, &[1]);
        assert_eq!(delivered(&mut reorder), vec![vec![1], vec![2], vec![3]]);
        assert_eq!(reorder.counters().reordered, 2);
        // 4 is lost; 5 waits the timeout, then goes.
        reorder.handle_fragment(ms(10), 1, 5, 0, 1, false, &[5]);
        assert_eq!(reorder.poll_at(), Some(ms(60)));
        reorder.handle_timeout(ms(59));
        assert!(reorder.poll_deliver().is_none());
        reorder.handle_timeout(ms(60));
        assert_eq!(delivered(&mut reorder), vec![vec![5]]);
        assert_eq!(reorder.counters().gaps_skipped, 1);
        // 4 arriving now is late.
        reorder.handle_fragment(ms(70), 1, 4, 0, 1, false, &[4]);
        assert!(reorder.poll_deliver().is_none());
        assert_eq!(reorder.counters().late_fragments, 1);
    }

    #[test]
    fn streams_do_not_wait_for_each_other() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        // Stream 1's packet 1 is half there; stream 2's packet completes at once.
        reorder.handle_fragment(ms(0), 1, 1, 0, 1500, false, &[0; 700]);
        reorder.handle_fragment(ms(1), 2, 1, 0, 100, false, &[9; 100]);
        assert_eq!(delivered(&mut reorder), vec![vec![9; 100]]);
    }

    #[test]
    fn a_packet_missing_a_fragment_times_out_and_its_successor_goes_on() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 1, 0, 1500, false, &[0; 700]);
        reorder.handle_fragment(ms(1), 1, 2, 0, 10, false, &[2; 10]);
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
            },
        );
        reorder.handle_fragment(ms(0), 3, 1, 0, 1, false, &[1]);
        reorder.handle_fragment(ms(0), 3, u32::MAX, 0, 1, false, &[0]);
        assert_eq!(delivered(&mut reorder), vec![vec![0], vec![1]]);
    }

    #[test]
    fn a_fragment_beyond_its_packet_is_refused() {
        let mut reorder = Reorder::new(Duration::from_millis(50));
        reorder.handle_fragment(ms(0), 1, 1, 90, 100, false, &[0; 20]);
        assert_eq!(reorder.counters().bad_fragments, 1);
        assert!(reorder.poll_deliver().is_none());
    }
}
