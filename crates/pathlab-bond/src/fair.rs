//! The tunnel's ingress: users share it by volume, not by packet (the seed's last section).
//!
//! Inner packets queue per *stream* (a user: the inner source address by default; or a
//! flow; or one stream for all). Each tunnel datagram is filled by deficit round robin at
//! the granularity of bytes, so one datagram carries fragments of several users' packets in
//! fair proportion, and a user's small packet does not wait behind every other user's
//! full-size one. A stream that just became active is served first (FQ-CoDel's new-flow
//! list, RFC 8290 section 4.1): the seed's pinging user's 100 bytes go into the very next
//! datagram, so on a 1 Mbit/s line it waits one datagram (12 ms), not 14 (168 ms).
//!
//! Each stream's queue is managed by CoDel (RFC 8289, `pathlab-core`'s state machine; with
//! ECN marking for ECN-capable packets) so a bulk TCP flow in the tunnel keeps a short queue
//! here rather than moving the bufferbloat the line controller removed from the modem into
//! the tunnel. CoDel's target is at least two full-size packets' time at a stream's fair
//! share, as cake scales it on slow links: below that every packet would look late.
//!
//! Packets are numbered per stream when their first byte leaves, so every number the
//! receiver sees belongs to a packet that was sent: a packet CoDel dropped leaves no hole
//! for the receiver to wait on.

use std::collections::{HashMap, VecDeque};

use pathlab_core::queue::{CodelQueue, CodelState};
use pathlab_core::spec::CodelConfig;
use pathlab_core::{Duration, Instant, Packet, Verdicts};

use crate::wire::{piece_header_bytes, Fragment, FRAGMENT_HEADER_BYTES};

/// How inner packets are told apart into users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FairKey {
    /// By inner source address (the seed's users).
    #[default]
    Source,
    /// By flow (the 5-tuple).
    Flow,
    /// Not at all: one FIFO for everything.
    Off,
}

/// The ingress queue's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairConfig {
    /// How users are told apart.
    pub key: FairKey,
    /// Bytes a stream may send per round.
    pub quantum_bytes: u32,
    /// Bytes all streams may hold together; beyond it the longest stream loses its head.
    pub limit_bytes: u64,
    /// CoDel's settings for each stream.
    pub codel: CodelConfig,
}

impl Default for FairConfig {
    fn default() -> FairConfig {
        FairConfig {
            key: FairKey::Source,
            quantum_bytes: 1514,
            limit_bytes: 4 << 20,
            codel: CodelConfig {
                ecn: true,
                ..CodelConfig::default()
            },
        }
    }
}

/// Counters of the ingress queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FairCounters {
    /// Packets accepted.
    pub packets_in: u64,
    /// Packets CoDel dropped.
    pub codel_dropped: u64,
    /// Packets CoDel marked CE instead.
    pub ce_marked: u64,
    /// Packets dropped because the queue was full.
    pub overflow_dropped: u64,
    /// Packets too long for the wire's 16-bit lengths.
    pub oversized_dropped: u64,
}

/// A packet being sent, fragment by fragment.
#[derive(Debug)]
struct Head {
    number: u32,
    data: Vec<u8>,
    offset: usize,
    compressed: bool,
}

/// A stream's packets not yet started, as CoDel sees them.
#[derive(Debug, Default)]
struct Waiting {
    queue: VecDeque<Packet>,
    queued_bytes: u64,
}

#[derive(Debug)]
struct Stream {
    id: u16,
    next_number: u32,
    waiting: Waiting,
    head: Option<Head>,
    deficit: i64,
    codel: CodelState,
    active: bool,
    urgent: bool,
}

impl CodelQueue for Waiting {
    fn pop(&mut self) -> Option<Packet> {
        let packet = self.queue.pop_front()?;
        self.queued_bytes -= packet.data.len() as u64;
        Some(packet)
    }

    fn bytes(&self) -> u64 {
        self.queued_bytes
    }
}

impl Stream {
    fn new(id: u16) -> Stream {
        Stream {
            id,
            next_number: 1,
            waiting: Waiting::default(),
            head: None,
            deficit: 0,
            codel: CodelState::default(),
            active: false,
            urgent: false,
        }
    }

    fn backlog(&self) -> u64 {
        self.waiting.queued_bytes
            + self
                .head
                .as_ref()
                .map_or(0, |head| (head.data.len() - head.offset) as u64)
    }
}

/// How a stream's service ended.
enum Served {
    /// The datagram has no room left.
    Full,
    /// The stream has nothing left.
    Empty,
    /// The stream spent its credit for this round.
    OutOfCredit,
}

/// The smallest piece worth a fragment header when a packet has more to send.
const MIN_PIECE_BYTES: usize = 64;

/// The ingress queue: per-stream CoDel queues served by byte-granular deficit round robin.
#[derive(Debug)]
pub struct FairQueue {
    config: FairConfig,
    streams: Vec<Stream>,
    by_key: HashMap<u64, usize>,
    new_streams: VecDeque<usize>,
    /// Active streams whose queue was empty when a packet came, with credit left.
    urgent: VecDeque<usize>,
    old_streams: VecDeque<usize>,
    backlog_bytes: u64,
    counters: FairCounters,
    verdicts: Verdicts,
    /// The tunnel's current total rate, to scale CoDel's target on slow links.
    rate_bps: f64,
    /// The standing queue the lines' spread of one-way delays needs (see `set_path`).
    spread: Duration,
}

impl FairQueue {
    /// An empty queue.
    pub fn new(config: FairConfig) -> FairQueue {
        FairQueue {
            config,
            streams: Vec::new(),
            by_key: HashMap::new(),
            new_streams: VecDeque::new(),
            urgent: VecDeque::new(),
            old_streams: VecDeque::new(),
            backlog_bytes: 0,
            counters: FairCounters::default(),
            verdicts: Verdicts::default(),
            rate_bps: 0.0,
            spread: Duration::ZERO,
        }
    }

    /// Bytes waiting (packets not yet sent and the unsent rest of those being sent).
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.backlog_bytes == 0
    }

    /// The queue's counters.
    pub fn counters(&self) -> FairCounters {
        self.counters
    }

    /// Streams seen so far.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Tells the queue the tunnel's current rate (scales CoDel's target on slow lines), the
    /// spread of its lines' one-way delays and the fastest line's round trip.
    ///
    /// A backlog that drains over the fast lines in less than the spread never reaches the
    /// slow ones, so CoDel must let a queue of more than the spread stand; and after a
    /// loss-based sender halves or (CUBIC) cuts its window to 0.7, the queue must still
    /// exceed the spread or the slow lines idle until the window grows back (measured in
    /// the `bond` recipe: the 3 Mbit/s line carried 2.4 of 3 with a target of the spread).
    /// With all lines busy the window is the rate times the fast round trip plus the
    /// queue's delay `q`; a cut to 0.7 leaves `q - 0.3 (rtt + q)`, which stays above the
    /// spread from `q = (spread + 0.3 rtt) / 0.7`: CoDel's target is that plus its own.
    pub fn set_path(&mut self, rate_bps: f64, spread: Duration, fast_rtt: Duration) {
        self.rate_bps = rate_bps;
        self.spread = if spread.is_zero() {
            spread
        } else {
            Duration::from_secs_f64((spread.as_secs_f64() + 0.3 * fast_rtt.as_secs_f64()) / 0.7)
        };
    }

    /// Queues an inner packet at `now`; `compressed` says its bytes are LZ4 (the original
    /// is not needed to classify it: `key_of` reads the header of the packet before).
    pub fn enqueue(&mut self, now: Instant, mut packet: Packet, key: u64) {
        if packet.data.is_empty() || packet.data.len() > usize::from(u16::MAX) {
            self.counters.oversized_dropped += 1;
            return;
        }
        packet.enqueued = now;
        let index = match self.by_key.get(&key) {
            Some(&index) => index,
            None => {
                let index = self.streams.len();
                // Stream ids are the wire's 16 bits; past 65536 users, users share ids
                // (they are then ordered together at the receiver, nothing worse).
                self.streams.push(Stream::new(index as u16));
                self.by_key.insert(key, index);
                index
            }
        };
        self.counters.packets_in += 1;
        let len = packet.data.len() as u64;
        let stream = &mut self.streams[index];
        stream.waiting.queue.push_back(packet);
        stream.waiting.queued_bytes += len;
        self.backlog_bytes += len;
        if !stream.active {
            stream.active = true;
            stream.deficit = i64::from(self.config.quantum_bytes);
            self.new_streams.push_back(index);
        } else if stream.waiting.queue.len() == 1
            && stream.head.is_none()
            && stream.deficit > 0
            && !stream.urgent
            && !self.new_streams.contains(&index)
        {
            // Its queue was empty and it has credit left this round: it need not wait
            // for its turn to spend it.
            stream.urgent = true;
            self.urgent.push_back(index);
        }
        while self.backlog_bytes > self.config.limit_bytes {
            self.drop_from_longest();
        }
    }

    /// The stream key of an inner IP packet under this queue's [`FairKey`].
    pub fn key_of(&self, packet: &Packet) -> u64 {
        match self.config.key {
            FairKey::Off => 0,
            FairKey::Flow => packet.flow,
            FairKey::Source => source_key(&packet.data),
        }
    }

    fn drop_from_longest(&mut self) {
        let Some(index) =
            (0..self.streams.len()).max_by_key(|&i| self.streams[i].waiting.queued_bytes)
        else {
            return;
        };
        let stream = &mut self.streams[index];
        if let Some(packet) = stream.waiting.pop() {
            self.backlog_bytes -= packet.data.len() as u64;
            self.counters.overflow_dropped += 1;
        } else {
            // Only packets already being sent are left: nothing more can be dropped.
            self.backlog_bytes = self.backlog_bytes.min(self.config.limit_bytes);
        }
    }

    fn codel_config(&self) -> CodelConfig {
        let mut config = self.config.codel;
        let active = (self.new_streams.len() + self.old_streams.len()).max(1) as f64;
        if self.rate_bps > 0.0 {
            let share = self.rate_bps / active;
            let two_packets = Duration::from_secs_f64(2.0 * 1500.0 * 8.0 / share);
            config.target = config.target.max(two_packets);
        }
        config.target = config.target.max(self.config.codel.target + self.spread);
        config.interval = config.interval.max(config.target.saturating_mul(4));
        config
    }

    /// Whether a stream that just became active waits (a sparse flow: a ping, a DNS query,
    /// a TCP ACK after silence).
    pub fn has_new_streams(&self) -> bool {
        !self.new_streams.is_empty() || !self.urgent.is_empty()
    }

    /// Hands out pieces of queued packets, fairly between streams, while `budget` bytes
    /// (frame headers included) allow; `emit` writes each piece. Returns the bytes used.
    pub fn fill(&mut self, now: Instant, budget: usize, emit: impl FnMut(Fragment<'_>)) -> usize {
        self.fill_from(now, budget, false, emit)
    }

    /// As [`FairQueue::fill`], from the streams that just became active only (their first
    /// quantum), so a sparse flow's packet goes alone in a short datagram.
    pub fn fill_new(
        &mut self,
        now: Instant,
        budget: usize,
        emit: impl FnMut(Fragment<'_>),
    ) -> usize {
        self.fill_from(now, budget, true, emit)
    }

    fn fill_from(
        &mut self,
        now: Instant,
        budget: usize,
        new_only: bool,
        mut emit: impl FnMut(Fragment<'_>),
    ) -> usize {
        let mut used = 0;
        let codel = self.codel_config();
        let quantum = i64::from(self.config.quantum_bytes);
        // Streams with credit left whose queue was empty when a packet came: served at
        // once, within their credit (a ping between two of its turns).
        while let Some(&index) = self.urgent.front() {
            match self.serve(now, index, budget, &mut used, &codel, &mut emit) {
                Served::Full => return used,
                Served::Empty | Served::OutOfCredit => {
                    self.urgent.pop_front();
                    self.streams[index].urgent = false;
                }
            }
        }
        loop {
            let (list_is_new, index) = match self.new_streams.front() {
                Some(&index) => (true, index),
                None if new_only => break,
                None => match self.old_streams.front() {
                    Some(&index) => (false, index),
                    None => break,
                },
            };
            if self.streams[index].deficit <= 0 {
                self.streams[index].deficit += quantum;
                self.pop_list(list_is_new);
                self.old_streams.push_back(index);
                continue;
            }
            match self.serve(now, index, budget, &mut used, &codel, &mut emit) {
                Served::Full => break,
                Served::OutOfCredit => {}
                Served::Empty => {
                    // A new stream moves to the old list once (so it cannot come back as
                    // new at once and starve the others), an old one leaves.
                    self.pop_list(list_is_new);
                    if list_is_new && !self.old_streams.is_empty() {
                        self.old_streams.push_back(index);
                    } else {
                        self.streams[index].active = false;
                    }
                }
            }
        }
        used
    }

    /// Emits pieces of stream `index` while it has packets, credit and room.
    fn serve(
        &mut self,
        now: Instant,
        index: usize,
        budget: usize,
        used: &mut usize,
        codel: &CodelConfig,
        emit: &mut impl FnMut(Fragment<'_>),
    ) -> Served {
        loop {
            let stream = &mut self.streams[index];
            if stream.deficit <= 0 {
                return Served::OutOfCredit;
            }
            if stream.head.is_none() {
                let packet =
                    stream
                        .codel
                        .dequeue(now, codel, &mut stream.waiting, &mut self.verdicts);
                for dropped in self.verdicts.dropped.drain(..) {
                    self.counters.codel_dropped += 1;
                    self.backlog_bytes -= dropped.packet.data.len() as u64;
                }
                self.counters.ce_marked += std::mem::take(&mut self.verdicts.ce_marked);
                let Some(packet) = packet else {
                    return Served::Empty;
                };
                let number = stream.next_number;
                stream.next_number = stream.next_number.wrapping_add(1).max(1);
                stream.head = Some(Head {
                    number,
                    compressed: packet.tag == COMPRESSED_TAG,
                    data: packet.data,
                    offset: 0,
                });
            }
            let head = stream.head.as_mut().expect("set above");
            let remaining = head.data.len() - head.offset;
            // A whole packet that fits goes with the shorter header of a Packet frame; one
            // that does not is split to fill the datagram. (Not splitting a packet that
            // would fit a datagram of its own saves two fragment headers per datagram,
            // 1426 inner bytes per 1500 instead of 1408, but in the seed's fairness case
            // it raised the 1 Mbit/s line's queue p50 from 7 to 13 ms and the pinging
            // user's added RTT p95 from 19 to 34 ms, for a reason not found yet.)
            let whole = piece_header_bytes(head.offset, remaining, head.data.len()) + remaining;
            let room = if *used + whole <= budget {
                remaining
            } else {
                budget.saturating_sub(*used + FRAGMENT_HEADER_BYTES)
            };
            let allowed = (stream.deficit as usize).max(MIN_PIECE_BYTES);
            let mut take = remaining.min(room).min(allowed);
            if take == 0 || (take < remaining && take < MIN_PIECE_BYTES.min(remaining)) {
                // Not worth a fragment header: the datagram is full.
                return Served::Full;
            }
            if remaining - take < 16 && remaining <= room {
                take = remaining; // do not leave a sliver for another header
            }
            emit(Fragment {
                stream: stream.id,
                packet: head.number,
                offset: head.offset as u16,
                total_len: head.data.len() as u16,
                compressed: head.compressed,
                data: &head.data[head.offset..head.offset + take],
            });
            *used += piece_header_bytes(head.offset, take, head.data.len()) + take;
            head.offset += take;
            stream.deficit -= take as i64;
            self.backlog_bytes -= take as u64;
            if head.offset == head.data.len() {
                stream.head = None;
            }
        }
    }

    fn pop_list(&mut self, new: bool) {
        if new {
            self.new_streams.pop_front();
        } else {
            self.old_streams.pop_front();
        }
    }

    /// Bytes one stream has waiting (for tests and stats).
    pub fn stream_backlog(&self, key: u64) -> u64 {
        self.by_key
            .get(&key)
            .map_or(0, |&index| self.streams[index].backlog())
    }
}

/// The tag a queued packet carries when its bytes are compressed.
pub const COMPRESSED_TAG: u32 = 1;

/// A key from an IP packet's source address (0 when it is not IP).
pub fn source_key(packet: &[u8]) -> u64 {
    let Some(address) = crate::inner::source_bytes(packet) else {
        return 0;
    };
    // FNV-1a: stable, cheap, and the queue needs no defence against chosen collisions
    // beyond sharing a stream.
    address
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    #[test]
    fn codel_lets_a_queue_stand_that_survives_a_cubic_cut_over_the_delay_spread() {
        let mut queue = FairQueue::new(FairConfig::default());
        // One line, fast: CoDel's own target (the two-packet floor is 1.2 ms at 20 Mbit/s).
        queue.set_path(20e6, Duration::ZERO, Duration::from_millis(25));
        assert!((ms(queue.codel_config().target) - 5.0).abs() < 1e-6);
        // Lines 30 ms apart, the fast one 25 ms round trip: after a cut to 0.7 a queue of
        // q keeps q - 0.3 (25 + q) ms, above 30 from q = (30 + 7.5) / 0.7 = 53.57 ms.
        queue.set_path(20e6, Duration::from_millis(30), Duration::from_millis(25));
        let config = queue.codel_config();
        let q = 37.5 / 0.7;
        assert!((ms(config.target) - (5.0 + q)).abs() < 1e-3, "{config:?}");
        assert!(q - 0.3 * (25.0 + q) >= 30.0 - 1e-9);
        assert_eq!(config.interval, config.target.saturating_mul(4));
        // A slow tunnel: two full packets at the share of each of its streams.
        queue.set_path(100e3, Duration::ZERO, Duration::from_millis(25));
        assert!((ms(queue.codel_config().target) - 240.0).abs() < 1e-6);
    }
}
