//! The tunnel's ingress: users share it by volume, not by packet (the seed's last section).
//!
//! Inner packets queue per *stream* (a user of the site: the inner source address of what
//! goes up, the inner destination of what comes down, by default; or a flow; or one stream
//! for all). Each tunnel datagram is filled by deficit round robin at
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
//!
//! Stream ids are the wire's 16 bits, so they are reused: a stream idle for
//! [`FairConfig::stream_idle`] gives its id back, and a later user takes it. Two rules keep
//! users apart at the far end. An id's packet numbers go on from where its previous owner
//! stopped (they live with the id, not the user), so no (stream, packet) pair ever names
//! two packets and no fragment can be put into another user's packet, whatever the far
//! end still remembers. And an id is only freed after its last byte left at least
//! `stream_idle` ago, longer than the far end waits for a gap or a fragment (at most 1 s)
//! plus a line's delay, so a new owner never waits behind its predecessor's gaps. When all
//! 65,536 ids are held by streams active within `stream_idle`, a new user shares one
//! (counted in [`FairCounters::streams_shared`]): ordered with its owner, nothing worse.

use std::collections::{HashMap, VecDeque};

use pathlab_core::queue::{CodelQueue, CodelState};
use pathlab_core::spec::CodelConfig;
use pathlab_core::{Duration, Instant, Packet, Verdicts};

use crate::wire::{piece_header_bytes, Coding, Fragment, FRAGMENT_HEADER_BYTES};

/// How inner packets are told apart into users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FairKey {
    /// By the site's user (the seed's users): the inner source address at the site, the
    /// inner destination at the server (see [`Direction`]), never the internet host at the
    /// other end, which a user multiplies by talking to many.
    #[default]
    Source,
    /// By flow (the 5-tuple).
    Flow,
    /// Not at all: one FIFO for everything.
    Off,
}

/// Which way a queue sends, which decides which inner address is the site's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// From the site to the server: the user is the inner source.
    #[default]
    Up,
    /// From the server down to the site: the user is the inner destination.
    Down,
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
    /// How long a stream stays idle (its last byte sent) before its id is freed for
    /// another user; longer than the far end's reorder and fragment timeouts (at most 1 s
    /// each) plus a line's delay, so no packet of the previous owner is still expected.
    pub stream_idle: Duration,
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
            stream_idle: Duration::from_secs(5),
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
    /// Idle streams whose id was freed for another user.
    #[serde(default)]
    pub streams_reclaimed: u64,
    /// Users that found every stream id held and shared another user's stream.
    #[serde(default)]
    pub streams_shared: u64,
    /// Packets half sent when a new session began, given up.
    #[serde(default)]
    pub new_session_dropped: u64,
}

/// A packet being sent, fragment by fragment.
#[derive(Debug)]
struct Head {
    number: u32,
    data: Vec<u8>,
    offset: usize,
    coding: Coding,
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
    /// The user holding the id (`None`: free, waiting in `free_ids`).
    key: Option<u64>,
    /// When a packet last came or a byte last left.
    last_active: Instant,
    /// Survives a change of owner: see the module's doc.
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
    fn new(id: u16, key: u64, now: Instant) -> Stream {
        Stream {
            id,
            key: Some(key),
            last_active: now,
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

    /// Whether the stream holds nothing and has not for `idle`.
    fn is_idle(&self, now: Instant, idle: Duration) -> bool {
        !self.active
            && !self.urgent
            && self.head.is_none()
            && self.waiting.queue.is_empty()
            && now.saturating_since(self.last_active) >= idle
    }

    /// Hands the id to `key`: a fresh queue, the packet numbers going on.
    fn reassign(&mut self, key: u64, now: Instant) {
        let next_number = self.next_number;
        *self = Stream::new(self.id, key, now);
        self.next_number = next_number;
    }
}

/// Stream ids are the wire's 16 bits.
pub const MAX_STREAM_IDS: usize = 1 << 16;

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
    direction: Direction,
    /// Indexed by stream id.
    streams: Vec<Stream>,
    by_key: HashMap<u64, usize>,
    /// Ids freed by idle streams (each idle for `stream_idle` already).
    free_ids: Vec<usize>,
    /// When idle streams are next looked for.
    next_sweep: Instant,
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
    /// An empty queue sending up from the site.
    pub fn new(config: FairConfig) -> FairQueue {
        FairQueue::with_direction(config, Direction::Up)
    }

    /// An empty queue sending `direction`.
    pub fn with_direction(config: FairConfig, direction: Direction) -> FairQueue {
        FairQueue {
            config,
            direction,
            streams: Vec::new(),
            by_key: HashMap::new(),
            free_ids: Vec::new(),
            next_sweep: Instant::ZERO,
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

    /// A new session: the far end's reassembly starts afresh, so every stream's packet
    /// numbers start again at 1; a packet half sent under the old session is given up (its
    /// first pieces went to a far end that forgot them) and counted as dropped. Returns how
    /// many were given up.
    pub fn new_session(&mut self) -> u64 {
        let mut given_up = 0;
        for stream in &mut self.streams {
            if let Some(head) = stream.head.take() {
                self.backlog_bytes -= (head.data.len() - head.offset) as u64;
                given_up += 1;
            }
            stream.next_number = 1;
        }
        self.counters.new_session_dropped += given_up;
        given_up
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

    /// Streams held by a user now (idle ones are freed after `stream_idle`).
    pub fn stream_count(&self) -> usize {
        self.by_key.len()
    }

    /// Stream ids ever handed out at once: the size of the stream table, which never
    /// exceeds [`MAX_STREAM_IDS`].
    pub fn stream_slots(&self) -> usize {
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

    /// Queues an inner packet at `now`; its tag says how its bytes are coded
    /// ([`Coding::to_tag`]; the original is not needed to classify it: `key_of` reads the
    /// header of the packet before).
    pub fn enqueue(&mut self, now: Instant, mut packet: Packet, key: u64) {
        if packet.data.is_empty() || packet.data.len() > usize::from(u16::MAX) {
            self.counters.oversized_dropped += 1;
            return;
        }
        packet.enqueued = now;
        let index = match self.by_key.get(&key) {
            Some(&index) => index,
            None => self.claim_stream(now, key),
        };
        self.counters.packets_in += 1;
        let len = packet.data.len() as u64;
        let stream = &mut self.streams[index];
        stream.last_active = now;
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

    /// A stream for a user not seen within `stream_idle`: a freed id, a new one, or (all
    /// 65,536 held) another user's.
    fn claim_stream(&mut self, now: Instant, key: u64) -> usize {
        if now >= self.next_sweep {
            self.reclaim_idle(now);
        }
        let index = if let Some(index) = self.free_ids.pop() {
            self.streams[index].reassign(key, now);
            index
        } else if self.streams.len() < MAX_STREAM_IDS {
            let index = self.streams.len();
            self.streams.push(Stream::new(index as u16, key, now));
            index
        } else {
            self.counters.streams_shared += 1;
            // Not mapped: the user gets an id of its own once one is freed.
            return (key % MAX_STREAM_IDS as u64) as usize;
        };
        self.by_key.insert(key, index);
        index
    }

    /// Frees the ids of streams idle for `stream_idle`. A sweep of the table, at most four
    /// times per `stream_idle` and only when a new user comes: the cost stays a few
    /// operations per packet however many users churn.
    fn reclaim_idle(&mut self, now: Instant) {
        let idle = self.config.stream_idle;
        self.next_sweep = now + Duration::from_nanos(idle.as_nanos() / 4);
        for (index, stream) in self.streams.iter_mut().enumerate() {
            if stream.key.is_none() || !stream.is_idle(now, idle) {
                continue;
            }
            if let Some(key) = stream.key.take() {
                self.by_key.remove(&key);
            }
            // Its queue's memory goes back now, not when the id is taken again.
            stream.waiting = Waiting::default();
            self.free_ids.push(index);
            self.counters.streams_reclaimed += 1;
        }
    }

    /// The stream key of an inner IP packet under this queue's [`FairKey`].
    pub fn key_of(&self, packet: &Packet) -> u64 {
        match self.config.key {
            FairKey::Off => 0,
            FairKey::Flow => packet.flow,
            FairKey::Source => match self.direction {
                Direction::Up => source_key(&packet.data),
                Direction::Down => destination_key(&packet.data),
            },
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
                    coding: Coding::from_tag(packet.tag),
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
            stream.last_active = now;
            emit(Fragment {
                stream: stream.id,
                packet: head.number,
                offset: head.offset as u16,
                total_len: head.data.len() as u16,
                coding: head.coding,
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

/// A key from an IP packet's source address (0 when it is not IP).
pub fn source_key(packet: &[u8]) -> u64 {
    crate::inner::source_bytes(packet).map_or(0, address_key)
}

/// A key from an IP packet's destination address (0 when it is not IP).
pub fn destination_key(packet: &[u8]) -> u64 {
    crate::inner::destination_bytes(packet).map_or(0, address_key)
}

fn address_key(address: &[u8]) -> u64 {
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

    /// Regression (issue 27): ids were never freed and wrapped at 65,536, so user 65,536's
    /// packet 1 went out as stream 0's packet 1 and the far end merged the two.
    #[test]
    fn stream_ids_churn_past_65536_users_without_two_users_sharing_a_packet_number() {
        use std::collections::HashMap;
        let config = FairConfig::default();
        let mut queue = FairQueue::new(config);
        let mut receiver = crate::reorder::Reorder::new(Duration::from_millis(50));
        // (stream, packet) -> user that sent it; stream -> (its user, its last byte's time).
        let mut owner_of_number: HashMap<(u16, u32), u64> = HashMap::new();
        let mut holder: HashMap<u16, (u64, Instant)> = HashMap::new();
        let users = 70_000u64;
        let mut delivered = std::collections::HashSet::new();
        let mut take = |receiver: &mut crate::reorder::Reorder| {
            while let Some(packet) = receiver.poll_deliver() {
                // A packet made of two users' fragments would mix their bytes.
                let user = u64::from_be_bytes(packet.data[..8].try_into().unwrap());
                assert!(packet
                    .data
                    .chunks(8)
                    .all(|c| c == &user.to_be_bytes()[..c.len()]));
                assert!(delivered.insert(user), "user {user} delivered twice");
            }
        };
        // A user every millisecond, each sending one 300-byte packet (its id in its
        // bytes) cut into two fragments: 70 s, past the 65,536 ids.
        for user in 0..users {
            let now = Instant::from_millis(user);
            let data: Vec<u8> = user
                .to_be_bytes()
                .iter()
                .copied()
                .cycle()
                .take(300)
                .collect();
            queue.enqueue(now, Packet::from_ip(now, data), user);
            let mut fragments = Vec::new();
            queue.fill(now, 200, |f| {
                fragments.push((f.stream, f.packet, f.offset, f.total_len, f.data.to_vec()));
            });
            queue.fill(now, 200, |f| {
                fragments.push((f.stream, f.packet, f.offset, f.total_len, f.data.to_vec()));
            });
            assert_eq!(fragments.len(), 2, "user {user}");
            for (stream, number, offset, total_len, bytes) in fragments.into_iter().rev() {
                let first = *owner_of_number.entry((stream, number)).or_insert(user);
                assert_eq!(first, user, "stream {stream} packet {number} named twice");
                if let Some(&(previous, last_sent)) = holder.get(&stream) {
                    if previous != user {
                        // A reused id waited out its quarantine.
                        assert!(now.saturating_since(last_sent) >= config.stream_idle);
                    }
                }
                holder.insert(stream, (user, now));
                receiver.handle_fragment(
                    now,
                    stream,
                    number,
                    offset,
                    total_len,
                    Coding::RAW,
                    &bytes,
                );
            }
            if user % 25 == 0 {
                receiver.handle_timeout(now);
            }
            take(&mut receiver);
        }
        receiver.handle_timeout(Instant::from_millis(users + 1000));
        take(&mut receiver);
        assert_eq!(delivered.len() as u64, users, "every packet whole, once");
        // At most the users of the last `stream_idle` (and its sweep period) hold ids: a
        // user per ms for 5 s plus 1.25 s.
        let bound = (config.stream_idle.as_millis_f64() * 1.25) as usize + 1;
        assert!(
            queue.stream_slots() <= bound,
            "{} slots",
            queue.stream_slots()
        );
        assert!(queue.stream_count() <= bound);
        assert!(queue.counters().streams_reclaimed >= users - bound as u64);
        assert_eq!(queue.counters().streams_shared, 0);
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
