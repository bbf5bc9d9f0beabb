//! One end of one tunnel session: the [`Bond`] state machine, the same for client and
//! server.
//!
//! Call order (as quinn-proto's `Connection`): feed inputs with [`Bond::handle_inner`]
//! (a packet from the TUN device) and [`Bond::handle_datagram`] (a datagram from a line);
//! then drain outputs with [`Bond::poll_transmit`] (datagrams to send, each on a line) and
//! [`Bond::poll_deliver`] (packets for the TUN device) until they return `None`; then
//! sleep until [`Bond::poll_at`] or the next input, and call [`Bond::handle_timeout`]
//! when that instant comes. Every call takes `now`; the endpoint never reads a clock.
//!
//! A client opens its session with a Noise handshake ([`crate::handshake`]): the same
//! Initiation on every line, retried with backoff until a Response comes back. It never
//! gives up on its server: when it has heard nothing authenticated for
//! [`BondConfig::rehandshake_after`] while sending (keepalives go every 50 ms, so silence
//! means every line is down or the server lost the session), when the server says it knows
//! no such session (a [`Kind::Stale`], believed only after a shorter silence), or when the
//! server closes, it handshakes again, keeping the old session until the new one opens.
//! A datagram of another session, a reflected one or one sealed with another key fails
//! authentication, is counted and never answered.

use std::collections::VecDeque;

use pathlab_core::packet::Ecn;
use pathlab_core::{BitsPerSec, Duration, Instant, Packet};

mod client;
mod rekeying;
mod sizes;
mod transmit;

use client::ClientSide;
use transmit::Fill;

use crate::class::{ClassCounters, ClassRule, Classifier, TrafficClass};
use crate::control::ControllerConfig;
use crate::crypto::{Role, SessionKeys};
use crate::fair::{Direction, FairConfig, FairKey, FairQueue};
use crate::handshake::ClientKeys;
use crate::headers::{Compressor, CompressorConfig, Decompressor, HeaderCounters};
use crate::inner::{self, Framing};
use crate::line::{Line, LineFraming, LineTimers};
use crate::rekey::{KeyRing, Opened};
use crate::reorder::Reorder;
use crate::sched::{SchedulerKind, WeightedRoundRobin};
use crate::wire::{
    self, Coding, Frame, Header, Kind, DATA_OVERHEAD_BYTES, ECHO_FRAME_BYTES, FEEDBACK_FRAME_BYTES,
    FRAGMENT_HEADER_BYTES,
};

pub use crate::entropy::Entropy;

/// A session end's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BondConfig {
    /// How many lines (the client's; the most a server accepts per session).
    pub lines: usize,
    /// Largest UDP payload per line (the line's path MTU minus IP and UDP headers).
    pub max_payload: Vec<usize>,
    /// What each line's modem counts per datagram besides the UDP payload (missing: IPv4
    /// over Ethernet). A server learns each line's family from its datagrams' source.
    pub line_framing: Vec<LineFraming>,
    /// The rate controller's settings (the same for every line; `max_rate` per line below).
    pub controller: ControllerConfig,
    /// Each line's nominal rate, if the user gave it: caps its controller, and weighs it
    /// for the weighted round robin.
    pub line_rates: Vec<Option<BitsPerSec>>,
    /// Which scheduler.
    pub scheduler: SchedulerKind,
    /// The fair ingress queue's settings.
    pub fair: FairConfig,
    /// Compress inner packets with LZ4 when it shrinks them.
    pub compress: bool,
    /// Compress inner packets' IP/TCP and IP/UDP headers ([`crate::headers`]) and
    /// acknowledge the peer's references. Off, this end sends packets as they come and
    /// never acknowledges, so the peer, which compresses only against acknowledged
    /// references, sends it whole packets too (with a 3-byte prefix on one packet per flow
    /// every [`CompressorConfig::retry_after`]).
    pub header_compression: bool,
    /// The header compressor's settings.
    pub headers: CompressorConfig,
    /// What inner packets are: IP packets (a TUN device) or Ethernet frames (a TAP).
    pub framing: Framing,
    /// Liveness and reporting timers.
    pub timers: LineTimers,
    /// How long a client waits for a Response before its first retry; each retry waits
    /// twice as long, up to [`BondConfig::hello_backoff_max`] (each wait drawn from 75% to
    /// 100% of it, so clients that lost their server together do not retry together).
    pub hello_interval: Duration,
    /// The longest wait between two handshake attempts: once a line can carry a
    /// handshake again, the session is back within this and a round trip.
    pub hello_backoff_max: Duration,
    /// How long a client with an open session may hear nothing authenticated before it
    /// handshakes again.
    pub rehandshake_after: Duration,
    /// How long a client must have heard nothing authenticated to believe a Stale (which
    /// anyone can forge) and handshake at once.
    pub stale_after: Duration,
    /// Reorder timeout's margin over the lines' delay spread.
    pub reorder_margin: Duration,
    /// How old a session's keys get before the client rekeys ([`crate::rekey`]; at
    /// least [`crate::rekey::MIN_REKEY_AFTER`] where a user sets it).
    pub rekey_after: Duration,
    /// How many datagrams a key seals before the client rekeys, whatever its age.
    pub rekey_after_messages: u64,
    /// The hard limit on a key's age: a previous key opens nothing once this old, and a
    /// client whose rekeys failed this long opens a new session.
    pub reject_after: Duration,
    /// The traffic class rules ([`crate::class`]; first match wins, before the default).
    pub classes: Vec<ClassRule>,
}

impl BondConfig {
    /// Defaults for `lines` lines of MTU 1500 over IPv4.
    pub fn new(lines: usize) -> BondConfig {
        BondConfig {
            lines,
            max_payload: vec![DEFAULT_MAX_PAYLOAD; lines],
            line_framing: vec![LineFraming::default(); lines],
            controller: ControllerConfig::default(),
            line_rates: vec![None; lines],
            scheduler: SchedulerKind::Delay,
            fair: FairConfig::default(),
            compress: false,
            header_compression: true,
            headers: CompressorConfig::default(),
            framing: Framing::Ip,
            timers: LineTimers::default(),
            hello_interval: Duration::from_millis(200),
            hello_backoff_max: Duration::from_millis(800),
            rehandshake_after: Duration::from_millis(500),
            stale_after: Duration::from_millis(100),
            reorder_margin: Duration::from_millis(10),
            rekey_after: Duration::from_secs(120),
            rekey_after_messages: crate::rekey::REKEY_AFTER_MESSAGES,
            reject_after: Duration::from_secs(180),
            classes: Vec::new(),
        }
    }
}

/// The MTU of the device inner packets come from, for datagrams of `payload` bytes: a
/// full-size packet fills one datagram with one frame header and no fragment's. A TAP's
/// ([`Framing::Ethernet`]) leaves room for the Ethernet header and one VLAN tag. With header
/// compression (of bare IP packets only) a full-size segment of a bulk TCP flow is counted
/// at its compressed length, [`crate::headers::BULK_TCP_SAVED_BYTES`] shorter: at the
/// MTU of its whole length it would leave that much of each datagram empty, or split every
/// packet in two pieces (two fragment headers a datagram). The packets that go with their
/// full header (a flow's first, an ECN-capable one, most UDP) cross in two pieces.
pub fn device_mtu(payload: usize, framing: Framing, header_compression: bool) -> usize {
    let saved = if header_compression && framing.carries_bare_ip() {
        crate::headers::BULK_TCP_SAVED_BYTES
    } else {
        0
    };
    (payload + saved)
        .saturating_sub(DATA_OVERHEAD_BYTES + wire::PACKET_HEADER_BYTES)
        .saturating_sub(framing.device_overhead_bytes())
}

/// The largest UDP payload on a 1500-byte IPv4 path.
pub const DEFAULT_MAX_PAYLOAD: usize =
    1500 - pathlab_core::wire::IPV4_HEADER_LEN - pathlab_core::wire::UDP_HEADER_LEN;

/// Counters of a session end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BondCounters {
    /// Inner packets taken from the TUN side.
    pub inner_in: u64,
    /// Inner packets handed to the TUN side.
    pub inner_out: u64,
    /// Datagrams that failed authentication (wrong key, tampered, another session).
    pub auth_failures: u64,
    /// Datagrams that did not parse after authentication.
    pub malformed: u64,
    /// Datagrams refused as replays.
    pub replays: u64,
    /// Inner packets compressed (kept compressed because it shrank them).
    pub compressed: u64,
    /// Bytes compression saved.
    pub compression_saved_bytes: u64,
    /// Inner packets dropped because no line was up.
    pub no_line_dropped: u64,
    /// Compressed packets that failed to decompress.
    pub decompress_failures: u64,
    /// Handshakes a client started (each an Initiation sent on every line).
    pub handshakes: u64,
    /// Sessions a client opened after its first: the server restarted or forgot it, or
    /// every line was down too long.
    pub reconnects: u64,
    /// Cookies a client received (the server was under load and asked for proof of
    /// address).
    pub cookies: u64,
    /// Stale signals a client received (the server knew no such session).
    pub stale_signals: u64,
    /// Inner packets sent with compressed headers ([`HeaderCounters::compressed`]).
    pub headers_compressed: u64,
    /// Bytes header compression saved.
    pub headers_saved_bytes: u64,
    /// Packets sent whole to establish a header-compression reference.
    pub headers_full_sent: u64,
    /// Flows the header compressor holds a context for now (a gauge).
    pub headers_contexts: u64,
    /// Packets the header compressor's own check refused (sent as they came).
    pub headers_verify_failed: u64,
    /// Header-compressed packets dropped because their reference was not held.
    pub headers_missing_context: u64,
    /// Header-compressed packets dropped because they did not decode or failed their
    /// checksum.
    pub headers_decode_failed: u64,
    /// Rekeys done: the session's keys replaced inside it (a client's when it switched,
    /// a server's when the client's first datagram under the new keys came).
    pub rekeys: u64,
    /// Rekey handshakes a client started (each a RekeyInit on every line; more than
    /// `rekeys` when some were lost and retried).
    pub rekey_handshakes: u64,
    /// Header-compression references this end stored and acknowledged.
    pub headers_acks_sent: u64,
    /// Acknowledgements of this end's references received.
    pub headers_acks_received: u64,
    /// Inner packets classed bulk ([`crate::class`]).
    pub class_bulk: u64,
    /// Inner packets classed interactive.
    pub class_interactive: u64,
    /// Inner packets classed redundant.
    pub class_redundant: u64,
    /// Second copies of redundant packets sent (fewer than `class_redundant` when one
    /// line was up).
    pub redundant_copies: u64,
    /// Interactive and redundant packets dropped: their queue full, or waiting a second.
    pub express_dropped: u64,
}

#[derive(Debug)]
enum State {
    /// A client that has no session yet.
    Connecting,
    /// Keys agreed (and rolled over since, as [`crate::rekey`] says).
    Open { session: u32, keys: KeyRing },
    /// Closed: by this end, or (a server's session) by its client.
    Closed,
}

/// What a datagram did, for the server's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// It authenticated under the session's keys, on `line`; `newest` if its seq is the
    /// highest seen on that line (only such a datagram may move the line's address).
    Authentic {
        /// The sender's line.
        line: u8,
        /// Whether it is the newest on its line.
        newest: bool,
    },
    /// Refused (counted), or not for this end's state.
    Refused,
}

/// A datagram to send: the line it goes on; its bytes are in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The line index.
    pub line: u8,
}

/// One end of one tunnel session.
#[derive(Debug)]
pub struct Bond {
    config: BondConfig,
    role: Role,
    state: State,
    client: Option<ClientSide>,
    /// Lines a Close still has to go on (from line `lines - left`), after [`Bond::close`].
    closing_left: usize,
    /// When the last authenticated datagram came.
    last_authenticated: Instant,
    lines: Vec<Line>,
    fair: FairQueue,
    reorder: Reorder,
    /// When the lines were last judged, to tell a pause of this end's own.
    last_judged: Option<Instant>,
    wrr: WeightedRoundRobin,
    round_robin_next: usize,
    delivered: VecDeque<Vec<u8>>,
    compressor: Compressor,
    decompressor: Decompressor,
    /// A packet's header-compressed form, or a HeaderAcks frame's entries, reused.
    coded: Vec<u8>,
    /// Acknowledgements on their way into a frame, reused.
    acks: Vec<wire::HeaderAck>,
    counters: BondCounters,
    next_state_check: Instant,
    /// When the scheduler said data may go next (set when it said "wait").
    send_at: Option<Instant>,
    /// A server's randomness for its rekeys' ephemeral keys (a client's is its own).
    rekey_entropy: Option<Box<dyn Entropy>>,
    /// Per line, the rekey frame waiting to ride on the line's next datagram.
    control_out: Vec<Vec<u8>>,
    /// Chooses each inner packet's traffic class.
    classifier: Classifier,
    /// The frames of the last express datagram, and the line their redundant copy goes on
    /// next.
    copy_out: Option<usize>,
    express_frames: Vec<u8>,
    /// Packets that began in the last express datagram.
    express_began: u64,
}

impl Bond {
    /// A client end that opens a session with its first [`Bond::poll_transmit`]: `keys` are
    /// its own and the server's, `entropy` draws its handshakes' randomness, and
    /// `unix_now_ns` is the wall clock at `now` (handshake timestamps grow with it).
    pub fn client(
        config: BondConfig,
        keys: ClientKeys,
        entropy: Box<dyn Entropy>,
        now: Instant,
        unix_now_ns: u64,
    ) -> Bond {
        let mut bond = Bond::new(config, Role::Client, State::Connecting, now);
        bond.client = Some(ClientSide {
            keys,
            entropy,
            unix_at_zero_ns: unix_now_ns.saturating_sub(now.as_nanos()),
            last_timestamp_ns: 0,
            cookie: None,
            handshake: None,
            rekeying: None,
        });
        bond.tick_client(now);
        bond
    }

    /// The server end of a session a handshake opened with `keys`; `entropy` draws its
    /// rekeys' ephemeral keys.
    pub fn server(
        config: BondConfig,
        session: u32,
        keys: SessionKeys,
        entropy: Box<dyn Entropy>,
        now: Instant,
    ) -> Bond {
        let keys = KeyRing::new(keys, now);
        let mut bond = Bond::new(config, Role::Server, State::Open { session, keys }, now);
        bond.rekey_entropy = Some(entropy);
        bond
    }

    fn new_line(config: &BondConfig, j: usize, now: Instant) -> Line {
        let max_payload = config
            .max_payload
            .get(j)
            .copied()
            .unwrap_or(DEFAULT_MAX_PAYLOAD);
        let mut line = Line::new(j as u8, Bond::line_controller(config, j), max_payload, now);
        line.set_framing(config.line_framing.get(j).copied().unwrap_or_default());
        line
    }

    /// Sets what line `line`'s modem counts per datagram (a server learns a line's family
    /// from the address its datagrams come from). An index beyond the lines is ignored.
    pub fn set_line_framing(&mut self, line: usize, framing: LineFraming) {
        if let Some(l) = self.lines.get_mut(line) {
            if l.framing() != framing {
                l.set_framing(framing);
            }
        }
    }

    fn line_controller(config: &BondConfig, j: usize) -> ControllerConfig {
        let mut controller = config.controller;
        if let Some(rate) = config.line_rates.get(j).copied().flatten() {
            controller.max_rate = Some(rate);
        }
        controller
    }

    fn new(config: BondConfig, role: Role, state: State, now: Instant) -> Bond {
        let lines = (0..config.lines)
            .map(|j| Bond::new_line(&config, j, now))
            .collect();
        Bond {
            // The server sends down to the site: its users are the inner destinations.
            fair: FairQueue::with_direction(
                config.fair,
                match role {
                    Role::Client => Direction::Up,
                    Role::Server => Direction::Down,
                },
            ),
            reorder: Reorder::new(Duration::from_millis(50)),
            last_judged: None,
            wrr: WeightedRoundRobin::default(),
            round_robin_next: 0,
            delivered: VecDeque::new(),
            compressor: Compressor::new(config.headers),
            decompressor: Decompressor::new(config.header_compression),
            coded: Vec::new(),
            acks: Vec::new(),
            counters: BondCounters::default(),
            next_state_check: now,
            send_at: None,
            rekey_entropy: None,
            control_out: vec![Vec::new(); config.lines],
            classifier: Classifier::new(config.classes.clone()),
            copy_out: None,
            express_frames: Vec::new(),
            express_began: 0,
            client: None,
            closing_left: 0,
            last_authenticated: now,
            role,
            state,
            lines,
            config,
        }
    }

    /// Whether the session is open (keys agreed).
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Whether the session ended: closed by this end, or a server's by its client.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Whether a client is handshaking (to open its first session or a new one).
    pub fn is_handshaking(&self) -> bool {
        self.client.as_ref().is_some_and(|c| c.handshake.is_some())
    }

    /// The session id, once open.
    pub fn session(&self) -> Option<u32> {
        match self.state {
            State::Open { session, .. } => Some(session),
            _ => None,
        }
    }

    /// The lines.
    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// The counters.
    pub fn counters(&self) -> BondCounters {
        let (sent, received): (HeaderCounters, HeaderCounters) =
            (self.compressor.counters(), self.decompressor.counters());
        let classes: ClassCounters = self.classifier.counters();
        BondCounters {
            headers_compressed: sent.compressed,
            headers_saved_bytes: sent.saved_bytes,
            headers_full_sent: sent.full_sent,
            headers_contexts: sent.contexts,
            headers_verify_failed: sent.verify_failed,
            headers_missing_context: received.missing_context,
            headers_decode_failed: received.decode_failed,
            headers_acks_sent: received.acks_sent,
            headers_acks_received: sent.acks_received,
            class_bulk: classes.bulk,
            class_interactive: classes.interactive,
            class_redundant: classes.redundant,
            redundant_copies: classes.redundant_copies,
            express_dropped: classes.express_dropped,
            ..self.counters
        }
    }

    /// The fair queue (for its counters and backlog).
    pub fn fair(&self) -> &FairQueue {
        &self.fair
    }

    /// The reorder buffer (for its counters and timeout).
    pub fn reorder(&self) -> &Reorder {
        &self.reorder
    }

    /// The configuration.
    pub fn config(&self) -> &BondConfig {
        &self.config
    }

    /// An inner packet from the TUN side at `now`: an IP packet, or with
    /// [`Framing::Ethernet`] an Ethernet frame from a TAP device.
    pub fn handle_inner(&mut self, now: Instant, data: Vec<u8>) {
        self.counters.inner_in += 1;
        if !self.is_open() || self.closing_left > 0 {
            self.counters.no_line_dropped += 1;
            return;
        }
        // Where an inner packet is classified: its flow and its user (`inner` says how
        // for frames). Header compression, which works on IP packets, goes here too, and
        // only where `framing.carries_bare_ip()` (a frame's IP packet starts at
        // `packet.ip_offset()`, after its Ethernet header and VLAN tags).
        let framing = self.config.framing;
        let mut packet = inner::packet(now, data, framing);
        let key = match (framing, self.config.fair.key) {
            (Framing::Ethernet, FairKey::Source) => {
                inner::frame_user_key(&packet, self.role == Role::Server)
            }
            _ => self.fair.key_of(&packet),
        };
        let class = self.classifier.classify(now, &packet);
        // An ECN-capable packet stays in the clear: CoDel marks it CE in place.
        if packet.ecn != Ecn::NotEct {
            self.enqueue(now, packet, key, class);
            return;
        }
        let mut coding = Coding::RAW;
        let mut data = std::mem::take(&mut packet.data);
        if self.config.header_compression
            && framing.carries_bare_ip()
            && self.compressor.compress(now, &data, &mut self.coded)
        {
            std::mem::swap(&mut data, &mut self.coded);
            coding.headers = true;
        }
        if self.config.compress {
            let compressed = lz4_flex::compress_prepend_size(&data);
            if compressed.len() < data.len() {
                self.counters.compressed += 1;
                self.counters.compression_saved_bytes += (data.len() - compressed.len()) as u64;
                data = compressed;
                coding.lz4 = true;
            }
        }
        if coding == Coding::RAW {
            packet.data = data;
            self.enqueue(now, packet, key, class);
            return;
        }
        // A coded packet's bytes are no IP header: nothing may rewrite them in the queue.
        let mut coded = Packet::synthetic(now, data.len() as u32, packet.flow, packet.ecn);
        coded.data = data;
        coded.tag = coding.to_tag();
        self.enqueue(now, coded, key, class);
    }

    /// Queues a classified packet: bulk in the fair queue, the others ahead of it.
    fn enqueue(&mut self, now: Instant, packet: Packet, key: u64, class: TrafficClass) {
        if class == TrafficClass::Bulk || self.config.scheduler != SchedulerKind::Delay {
            self.fair.enqueue(now, packet, key);
        } else if !self.fair.enqueue_express(now, packet, key, class) {
            self.classifier.count_express_dropped(1);
        }
    }

    /// A datagram that arrived on line `line` at `now` (for a client, the line whose
    /// socket received it). Authentication failures and malformed datagrams are counted and
    /// otherwise ignored: nothing is ever sent in answer to them.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &mut [u8]) -> Received {
        let Ok(header) = Header::decode(datagram) else {
            self.counters.malformed += 1;
            return Received::Refused;
        };
        let received = match (header.kind, self.role) {
            (Kind::Data, _) => self.handle_data(now, header, datagram),
            (Kind::Welcome, Role::Client) => {
                self.handle_response(now, header, datagram);
                Received::Refused
            }
            (Kind::Cookie, Role::Client) => {
                self.handle_cookie(now, header, datagram);
                Received::Refused
            }
            (Kind::Stale, Role::Client) => {
                self.handle_stale(now, header);
                Received::Refused
            }
            _ => {
                // A handshake message at the wrong end: never answered.
                self.counters.auth_failures += 1;
                Received::Refused
            }
        };
        self.update_lines(now);
        received
    }

    fn handle_data(&mut self, now: Instant, header: Header, datagram: &mut [u8]) -> Received {
        let State::Open { session, keys } = &mut self.state else {
            self.counters.auth_failures += 1;
            return Received::Refused;
        };
        if header.session != *session {
            self.counters.auth_failures += 1;
            return Received::Refused;
        }
        let len = datagram.len();
        let Ok((header, opened)) = keys.open(now, self.config.reject_after, datagram) else {
            self.counters.auth_failures += 1;
            return Received::Refused;
        };
        if opened == Opened::Promoted {
            self.counters.rekeys += 1;
            for control in &mut self.control_out {
                control.clear();
            }
        }
        let body = crate::rekey::body(datagram);
        let Some(line) = self.lines.get_mut(usize::from(header.line)) else {
            self.counters.malformed += 1;
            return Received::Refused;
        };
        let newest = header.seq > line.highest_received_seq();
        if !line.accept_seq(header.seq) {
            self.counters.replays += 1;
            return Received::Refused;
        }
        let Ok((sent_ns, frames)) = wire::decode_data(body) else {
            self.counters.malformed += 1;
            return Received::Refused;
        };
        self.last_authenticated = now;
        line.on_received(now, sent_ns, len);
        let j = usize::from(header.line);
        for frame in frames {
            let Ok(frame) = frame else {
                self.counters.malformed += 1;
                break;
            };
            match frame {
                // A path MTU probe: it crossed the line at this size.
                Frame::Padding(_) => self.lines[j].probe_received(header.seq, len),
                Frame::Rekey { reply, id, message } => {
                    self.handle_rekey(now, j, reply, id, message);
                    continue;
                }
                _ => {}
            }
            self.handle_frame(now, frame);
        }
        Received::Authentic {
            line: header.line,
            newest,
        }
    }

    fn handle_frame(&mut self, now: Instant, frame: Frame<'_>) {
        match frame {
            Frame::Fragment(fragment) => self.reorder.handle_fragment(
                now,
                fragment.stream,
                fragment.packet,
                fragment.offset,
                fragment.total_len,
                fragment.coding,
                fragment.data,
            ),
            Frame::Feedback(report) => {
                if let Some(line) = self.lines.get_mut(usize::from(report.line)) {
                    line.on_feedback(now, &report);
                }
            }
            Frame::Echo {
                line,
                echoed_ns,
                held_ns,
            } => {
                if let Some(line) = self.lines.get_mut(usize::from(line)) {
                    line.on_echo(now, echoed_ns, held_ns);
                }
            }
            Frame::ProbeAck {
                line,
                seq,
                len_bytes,
            } => {
                if let Some(line) = self.lines.get_mut(usize::from(line)) {
                    line.on_probe_ack(seq, len_bytes);
                }
            }
            Frame::Close => match self.role {
                // The client left: the server frees its slot.
                Role::Server => self.state = State::Closed,
                // The server is going away (a restart, say): come back as soon as it does.
                Role::Client => self.start_handshaking(now),
            },
            Frame::HeaderAcks(acks) => {
                for ack in acks.iter() {
                    self.compressor.handle_ack(now, ack);
                }
            }
            Frame::Padding(_) | Frame::Rekey { .. } => {}
        }
        self.take_reordered();
    }

    fn take_reordered(&mut self) {
        while let Some(delivered) = self.reorder.poll_deliver() {
            let mut data = delivered.data;
            if delivered.coding.lz4 {
                match decompress(&data) {
                    Some(decompressed) => data = decompressed,
                    None => {
                        self.counters.decompress_failures += 1;
                        continue;
                    }
                }
            }
            if delivered.coding.headers {
                // Counted by the decompressor when it fails.
                match self.decompressor.decompress(&data) {
                    Ok(packet) => data = packet,
                    Err(_) => continue,
                }
            }
            self.counters.inner_out += 1;
            self.delivered.push_back(data);
        }
    }

    /// Timers due at `now`: reorder gaps, line liveness.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let State::Open { keys, .. } = &mut self.state {
            // An old key goes (zeroed) when its time is up, not when a datagram next comes.
            keys.expire(now, self.config.reject_after);
        }
        self.tick_client(now);
        self.reorder.handle_timeout(now);
        self.take_reordered();
        self.update_lines(now);
    }

    /// Judges the lines' liveness at `now` (and the reorder buffer's wait).
    ///
    /// A call more than half of `down_after` after the previous one means this end did
    /// not run in between (a busy host; the soak's tunnel ends, beside builds and a
    /// real-time emulator, went 550 ms without a pass): the time it was away does not
    /// count as its lines' silence (each line's [`Line::excuse_absence`]), or it would
    /// declare lines down the moment it woke, though no report had come because it had
    /// sent nothing, and what had come was still unread.
    fn update_lines(&mut self, now: Instant) {
        let away = self
            .last_judged
            .map_or(Duration::ZERO, |at| now.saturating_since(at));
        self.last_judged = Some(now);
        if away.as_nanos() > self.config.timers.down_after.as_nanos() / 2 {
            for line in &mut self.lines {
                line.excuse_absence(now, away);
            }
        }
        if !self.is_open() {
            return;
        }
        for line in &mut self.lines {
            line.update_state(now, &self.config.timers);
        }
        // The reorder buffer waits for what the slowest line may still bring: from the
        // earliest a datagram arrives on any line to the latest one is likely to on any,
        // as this end sees them, plus a margin.
        let up = || self.lines.iter().filter(|l| l.is_up());
        let low = up().filter_map(Line::owd_low_ns).min_by(f64::total_cmp);
        let high = up().filter_map(Line::owd_high_ns).max_by(f64::total_cmp);
        if let (Some(low), Some(high)) = (low, high) {
            let spread = Duration::from_secs_f64((high - low).max(0.0) / 1e9);
            let timeout = (spread + self.config.reorder_margin)
                .max(Duration::from_millis(10))
                .min(Duration::from_secs(1));
            self.reorder.set_timeout(timeout);
        }
        let rate: f64 = self
            .lines
            .iter()
            .filter(|l| l.is_up())
            .map(|l| l.controller().rate().as_f64())
            .sum();
        let sending = || {
            self.lines
                .iter()
                .filter(|l| l.is_up())
                .filter_map(|l| l.controller().scheduling_owd_ns())
        };
        let spread = match (sending().min(), sending().max()) {
            (Some(min), Some(max)) => Duration::from_nanos(max.saturating_sub(min).max(0) as u64),
            _ => Duration::ZERO,
        };
        let fast_rtt = self
            .lines
            .iter()
            .filter(|l| l.is_up())
            .filter_map(|l| l.controller().srtt())
            .min()
            .unwrap_or(Duration::ZERO);
        self.fair.set_path(
            rate,
            spread.min(Duration::from_millis(500)),
            fast_rtt.min(Duration::from_millis(500)),
        );
        self.next_state_check = now;
    }

    /// The next inner packet for the TUN side.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        self.delivered.pop_front()
    }

    /// The next datagram to send at `now`, written into `buf` (cleared first), and the line
    /// it goes on. Call until `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.tick_client(now);
        let lines = self.lines.len();
        if let Some(handshake) = self.client.as_mut().and_then(|c| c.handshake.as_mut()) {
            if handshake.copies_left > 0 {
                // The same Initiation on every line: the server answers the first that
                // comes, and copies on other lines get the same Response.
                let line = lines - handshake.copies_left;
                handshake.copies_left -= 1;
                buf.extend_from_slice(&handshake.message);
                return Some(Transmit { line: line as u8 });
            }
        }
        if self.closing_left > 0 {
            let line = lines - self.closing_left;
            self.closing_left -= 1;
            let transmit = self.build(now, line, Fill::Close, buf);
            if self.closing_left == 0 {
                self.state = State::Closed;
            }
            return transmit.or_else(|| self.poll_transmit(now, buf));
        }
        match self.state {
            State::Closed | State::Connecting => None,
            State::Open { .. } => self.poll_transmit_open(now, buf),
        }
    }

    /// The UDP payload of the narrowest line's datagrams, among the lines that are up and
    /// whose path MTU search has ended (`None` before one has).
    pub fn narrowest_payload(&self) -> Option<usize> {
        self.lines
            .iter()
            .filter(|l| l.is_up() && !l.mtu().searching())
            .map(Line::payload_limit)
            .min()
    }

    /// The MTU for the TUN or TAP device: [`device_mtu`] of the narrowest line (`None`
    /// before a line's path MTU search has ended).
    pub fn tunnel_mtu(&self) -> Option<usize> {
        self.narrowest_payload()
            .map(|payload| device_mtu(payload, self.config.framing, self.config.header_compression))
    }

    /// When the endpoint next needs [`Bond::handle_timeout`] or [`Bond::poll_transmit`].
    pub fn poll_at(&self) -> Option<Instant> {
        let handshake = self
            .client
            .as_ref()
            .and_then(|c| c.handshake.as_ref())
            .map(|h| {
                if h.copies_left > 0 {
                    Instant::ZERO
                } else {
                    h.backoff.next_attempt
                }
            });
        let silence = match (&self.client, &self.state) {
            (Some(client), State::Open { .. })
                if client.handshake.is_none() && self.closing_left == 0 =>
            {
                Some(self.last_authenticated + self.config.rehandshake_after)
            }
            _ => None,
        };
        let closing =
            (self.closing_left > 0 || self.control_line().is_some()).then_some(Instant::ZERO);
        let keys = match &self.state {
            State::Open { keys, .. } => {
                let reject = self.config.reject_after;
                let renew = self.client.as_ref().map(|_| keys.since() + reject);
                [keys.expires_at(reject), renew, self.rekey_at()]
                    .into_iter()
                    .flatten()
                    .min()
            }
            State::Connecting | State::Closed => None,
        };
        let open = match &self.state {
            State::Open { .. } => {
                let timers = &self.config.timers;
                let lines = self.lines.iter().map(|l| l.poll_at(timers)).min();
                let send = if self.fair.is_empty() {
                    None
                } else {
                    self.send_at
                };
                // Express packets and a redundant copy go at once.
                let express = (self.fair.express_bytes() > 0 || self.copy_out.is_some())
                    .then_some(Instant::ZERO);
                [lines, send, express, self.reorder.poll_at()]
                    .into_iter()
                    .flatten()
                    .min()
            }
            State::Connecting | State::Closed => None,
        };
        [handshake, silence, closing, keys, open]
            .into_iter()
            .flatten()
            .min()
    }

    /// Ends the session: the next [`Bond::poll_transmit`] calls send an authenticated Close
    /// on every line (so the server frees the slot at once), then nothing more.
    pub fn close(&mut self) {
        if let Some(client) = &mut self.client {
            client.handshake = None;
        }
        match self.state {
            State::Open { .. } if !self.lines.is_empty() => self.closing_left = self.lines.len(),
            _ => self.state = State::Closed,
        }
    }
}

/// Decompresses an LZ4 block with its length prepended, refusing lengths beyond an IP
/// packet's (an authenticated peer still must not make us allocate what it likes).
fn decompress(data: &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
    if len > usize::from(u16::MAX) {
        return None;
    }
    lz4_flex::decompress_size_prepended(data).ok()
}

const _: () = {
    // A report and an echo must leave room for at least one fragment in a datagram of the
    // smallest IPv6 path (1280 bytes).
    assert!(
        DATA_OVERHEAD_BYTES + FEEDBACK_FRAME_BYTES + ECHO_FRAME_BYTES + FRAGMENT_HEADER_BYTES
            < 1280 - 48
    );
};
