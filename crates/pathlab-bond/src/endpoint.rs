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
//! A client starts by sending Hellos on every line (sealed with the hello key, so only a
//! holder of the pre-shared key gets an answer) until a Welcome comes back; the session
//! keys then derive from both nonces, so a datagram of another session, a reflected one or
//! one sealed with another key fails authentication, is counted and never answered.

use std::collections::VecDeque;

use pathlab_core::{BitsPerSec, Duration, Instant, Packet};

use crate::control::ControllerConfig;
use crate::crypto::{self, Psk, Role, SessionKeys};
use crate::fair::{Direction, FairConfig, FairQueue, COMPRESSED_TAG};
use crate::line::{Line, LineTimers};
use crate::reorder::Reorder;
use crate::sched::{self, Choice, LineView, SchedulerKind, WeightedRoundRobin};
use crate::wire::{
    self, Frame, Header, Hello, Kind, Welcome, DATA_OVERHEAD_BYTES, ECHO_FRAME_BYTES,
    FEEDBACK_FRAME_BYTES, FRAGMENT_HEADER_BYTES,
};

/// Randomness the endpoint needs (nonces, session ids): the driver gives the OS's CSPRNG,
/// tests a seeded generator.
pub trait Entropy: std::fmt::Debug + Send {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
}

/// A session end's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BondConfig {
    /// How many lines (the client's; the most a server accepts per session).
    pub lines: usize,
    /// Largest UDP payload per line (the line's path MTU minus IP and UDP headers).
    pub max_payload: Vec<usize>,
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
    /// Liveness and reporting timers.
    pub timers: LineTimers,
    /// How often a client repeats its Hellos until welcomed.
    pub hello_interval: Duration,
    /// Reorder timeout's margin over the lines' delay spread.
    pub reorder_margin: Duration,
}

impl BondConfig {
    /// Defaults for `lines` lines of MTU 1500 over IPv4.
    pub fn new(lines: usize) -> BondConfig {
        BondConfig {
            lines,
            max_payload: vec![DEFAULT_MAX_PAYLOAD; lines],
            controller: ControllerConfig::default(),
            line_rates: vec![None; lines],
            scheduler: SchedulerKind::Delay,
            fair: FairConfig::default(),
            compress: false,
            timers: LineTimers::default(),
            hello_interval: Duration::from_millis(250),
            reorder_margin: Duration::from_millis(10),
        }
    }
}

/// The largest UDP payload on a 1500-byte IPv4 path.
pub const DEFAULT_MAX_PAYLOAD: usize = 1500 - 20 - 8;

/// Counters of a session end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
}

#[derive(Debug)]
enum State {
    /// A client waiting for its Welcome.
    Connecting {
        client_nonce: [u8; 16],
        next_hello: Instant,
        next_line: usize,
        hellos_sent: u64,
    },
    /// Keys agreed.
    Open { session: u32, keys: SessionKeys },
    /// The peer closed the session.
    Closed,
}

/// What a datagram carries besides its line's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// As much queued data as fits.
    All,
    /// Only the packets of streams that just became active.
    NewStreams,
    /// No data (a keepalive or a report).
    Nothing,
    /// A path MTU probe: zeros (a Padding frame) to this many bytes of UDP payload, no
    /// report.
    Probe(usize),
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
    psk: Psk,
    hello_keys: SessionKeys,
    state: State,
    lines: Vec<Line>,
    fair: FairQueue,
    reorder: Reorder,
    wrr: WeightedRoundRobin,
    round_robin_next: usize,
    delivered: VecDeque<Vec<u8>>,
    counters: BondCounters,
    next_state_check: Instant,
    /// When the scheduler said data may go next (set when it said "wait").
    send_at: Option<Instant>,
}

impl Bond {
    /// A client end that will open a session with the first [`Bond::poll_transmit`].
    pub fn client(config: BondConfig, psk: Psk, entropy: &mut dyn Entropy, now: Instant) -> Bond {
        let mut client_nonce = [0; 16];
        entropy.fill(&mut client_nonce);
        let state = State::Connecting {
            client_nonce,
            next_hello: now,
            next_line: 0,
            hellos_sent: 0,
        };
        Bond::new(config, Role::Client, psk, state, now)
    }

    /// The server end of a session a client's Hello opened.
    pub fn server(
        config: BondConfig,
        psk: Psk,
        session: u32,
        client_nonce: &[u8; 16],
        server_nonce: &[u8; 16],
        now: Instant,
    ) -> Bond {
        let keys = SessionKeys::session(&psk, Role::Server, client_nonce, server_nonce);
        Bond::new(
            config,
            Role::Server,
            psk,
            State::Open { session, keys },
            now,
        )
    }

    fn new(config: BondConfig, role: Role, psk: Psk, state: State, now: Instant) -> Bond {
        let lines = (0..config.lines)
            .map(|j| {
                let mut controller = config.controller;
                if let Some(rate) = config.line_rates.get(j).copied().flatten() {
                    controller.max_rate = Some(rate);
                }
                let max_payload = config
                    .max_payload
                    .get(j)
                    .copied()
                    .unwrap_or(DEFAULT_MAX_PAYLOAD);
                Line::new(j as u8, controller, max_payload, now)
            })
            .collect();
        Bond {
            hello_keys: SessionKeys::hello(&psk, role),
            // The server sends down to the site: its users are the inner destinations.
            fair: FairQueue::with_direction(
                config.fair,
                match role {
                    Role::Client => Direction::Up,
                    Role::Server => Direction::Down,
                },
            ),
            reorder: Reorder::new(Duration::from_millis(50)),
            wrr: WeightedRoundRobin::default(),
            round_robin_next: 0,
            delivered: VecDeque::new(),
            counters: BondCounters::default(),
            next_state_check: now,
            send_at: None,
            psk,
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

    /// Whether the peer closed the session.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
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
        self.counters
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

    /// An inner IP packet from the TUN side at `now`.
    pub fn handle_inner(&mut self, now: Instant, data: Vec<u8>) {
        self.counters.inner_in += 1;
        if !self.is_open() {
            self.counters.no_line_dropped += 1;
            return;
        }
        let mut packet = Packet::from_ip(now, data);
        let key = self.fair.key_of(&packet);
        if self.config.compress {
            let compressed = lz4_flex::compress_prepend_size(&packet.data);
            if compressed.len() < packet.data.len() {
                self.counters.compressed += 1;
                self.counters.compression_saved_bytes +=
                    (packet.data.len() - compressed.len()) as u64;
                packet.data = compressed;
                packet.tag = COMPRESSED_TAG;
            }
        }
        self.fair.enqueue(now, packet, key);
    }

    /// A datagram that arrived on line `line` at `now` (for a client, the line whose
    /// socket received it). Authentication failures and malformed datagrams are counted and
    /// otherwise ignored: nothing is ever sent in answer to them.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &mut [u8]) {
        let Ok(header) = Header::decode(datagram) else {
            self.counters.malformed += 1;
            return;
        };
        match (header.kind, &self.state) {
            (Kind::Welcome, State::Connecting { client_nonce, .. }) => {
                let client_nonce = *client_nonce;
                let Ok((_, body)) = crypto::open(&self.hello_keys.open, datagram) else {
                    self.counters.auth_failures += 1;
                    return;
                };
                let Ok(welcome) = Welcome::decode(body) else {
                    self.counters.malformed += 1;
                    return;
                };
                if welcome.client_nonce != client_nonce {
                    self.counters.auth_failures += 1;
                    return;
                }
                let keys = SessionKeys::session(
                    &self.psk,
                    self.role,
                    &client_nonce,
                    &welcome.server_nonce,
                );
                self.state = State::Open {
                    session: welcome.session,
                    keys,
                };
                for line in &mut self.lines {
                    line.reset_liveness(now);
                }
            }
            (Kind::Data, State::Open { session, keys }) => {
                if header.session != *session {
                    self.counters.auth_failures += 1;
                    return;
                }
                let len = datagram.len();
                let Ok((header, body)) = crypto::open(&keys.open, datagram) else {
                    self.counters.auth_failures += 1;
                    return;
                };
                let Some(line) = self.lines.get_mut(usize::from(header.line)) else {
                    self.counters.malformed += 1;
                    return;
                };
                if !line.accept_seq(header.seq) {
                    self.counters.replays += 1;
                    return;
                }
                let Ok((sent_ns, frames)) = wire::decode_data(body) else {
                    self.counters.malformed += 1;
                    return;
                };
                line.on_received(now, sent_ns, len);
                let j = usize::from(header.line);
                for frame in frames {
                    let Ok(frame) = frame else {
                        self.counters.malformed += 1;
                        break;
                    };
                    if let Frame::Padding(_) = frame {
                        // A path MTU probe: it crossed the line at this size.
                        self.lines[j].probe_received(header.seq, len);
                    }
                    self.handle_frame(now, frame);
                }
            }
            (Kind::Welcome, State::Open { .. } | State::Closed) => {
                // The server welcomes every line's Hello: the second line's Welcome comes
                // after the session opened. Not an attack; ignored, not counted.
            }
            _ => {
                // A Hello at a client, Data before the Welcome: not for this state.
                // Counted with the failures; never answered.
                self.counters.auth_failures += 1;
            }
        }
        self.update_lines(now);
    }

    fn handle_frame(&mut self, now: Instant, frame: Frame<'_>) {
        match frame {
            Frame::Fragment(fragment) => self.reorder.handle_fragment(
                now,
                fragment.stream,
                fragment.packet,
                fragment.offset,
                fragment.total_len,
                fragment.compressed,
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
            Frame::Close => self.state = State::Closed,
            Frame::Padding(_) => {}
        }
        self.take_reordered();
    }

    fn take_reordered(&mut self) {
        while let Some(delivered) = self.reorder.poll_deliver() {
            let data = if delivered.compressed {
                match decompress(&delivered.data) {
                    Some(data) => data,
                    None => {
                        self.counters.decompress_failures += 1;
                        continue;
                    }
                }
            } else {
                delivered.data
            };
            self.counters.inner_out += 1;
            self.delivered.push_back(data);
        }
    }

    /// Timers due at `now`: reorder gaps, line liveness.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.reorder.handle_timeout(now);
        self.take_reordered();
        self.update_lines(now);
    }

    fn update_lines(&mut self, now: Instant) {
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
        match &mut self.state {
            State::Closed => None,
            State::Connecting {
                client_nonce,
                next_hello,
                next_line,
                hellos_sent,
            } => {
                if now < *next_hello || self.lines.is_empty() {
                    return None;
                }
                let line = *next_line;
                *next_line += 1;
                if *next_line == self.lines.len() {
                    *next_line = 0;
                    *next_hello = now + self.config.hello_interval;
                }
                // The hello key serves every session of this PSK, so a Hello's nonce must
                // not repeat across clients and restarts: its session field and seq (80
                // bits of the nonce) start from the client's random nonce.
                *hellos_sent += 1;
                let seq = (u64::from_be_bytes(client_nonce[..8].try_into().expect("8 bytes"))
                    .wrapping_add(*hellos_sent)
                    & wire::MAX_SEQ)
                    .max(1);
                let header = Header {
                    kind: Kind::Hello,
                    line: line as u8,
                    session: u32::from_be_bytes(client_nonce[8..12].try_into().expect("4 bytes")),
                    seq,
                };
                header.encode(buf);
                Hello {
                    client_nonce: *client_nonce,
                    lines: self.lines.len() as u8,
                }
                .encode(buf);
                // Padded to the Welcome's size: the server never answers with more bytes
                // than it received.
                buf.resize(wire::HEADER_BYTES + wire::WELCOME_BODY_BYTES, 0);
                crypto::seal(&self.hello_keys.seal, &header, buf).ok()?;
                Some(Transmit { line: line as u8 })
            }
            State::Open { .. } => self.poll_transmit_open(now, buf),
        }
    }

    fn poll_transmit_open(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let timers = self.config.timers;
        self.send_at = None;
        // A path MTU probe first: a few per search, and the search holds data back to what
        // is proven.
        for j in 0..self.lines.len() {
            if let Some(size) = self.lines[j].probe_due(now) {
                if let Some(transmit) = self.build(now, j, Fill::Probe(size), buf) {
                    return Some(transmit);
                }
            }
        }
        // Control first: a line whose report or keepalive is due sends now, with data if
        // the scheduler would give it some anyway.
        if let Some(j) = (0..self.lines.len()).find(|&j| {
            let line = &self.lines[j];
            line.report_due(now, &timers) || line.keepalive_due(now, &timers)
        }) {
            let with_data = self.lines[j].is_up() && self.line_may_send(now, j);
            return self.build(
                now,
                j,
                if with_data { Fill::All } else { Fill::Nothing },
                buf,
            );
        }
        if self.fair.is_empty() {
            return None;
        }
        // A sparse flow's packet (a ping, an ACK, a DNS query) need not wait for the
        // pacer: it goes now, alone in a short datagram, on the line where it lands first,
        // borrowing at most one frame's time from that line's pacer. Its bytes are charged
        // to the pacer, so the line's rate holds: a flow that keeps coming back as new
        // finds the pacer in debt and waits like everyone else.
        if self.config.scheduler == SchedulerKind::Delay && self.fair.has_new_streams() {
            let views: Vec<Option<LineView>> = self
                .views()
                .into_iter()
                .map(|v| {
                    v.filter(|v| v.ready_at <= now + frame_time(v.rate_bps))
                        .map(|v| LineView { ready_at: now, ..v })
                })
                .collect();
            if let Choice::Send(j) = sched::earliest_arrival(now, &views, 200, 200, Duration::ZERO)
            {
                return self.build(now, j, Fill::NewStreams, buf);
            }
        }
        let line = match self.config.scheduler {
            SchedulerKind::Delay => {
                let len = self.fair.backlog_bytes().min(
                    self.lines
                        .iter()
                        .map(Line::payload_limit)
                        .max()
                        .unwrap_or(DEFAULT_MAX_PAYLOAD) as u64,
                ) as usize;
                match sched::earliest_arrival(
                    now,
                    &self.views(),
                    len,
                    self.fair.backlog_bytes(),
                    self.config.controller.target.saturating_mul(2),
                ) {
                    Choice::Send(j) => j,
                    Choice::Wait(at) => {
                        self.send_at = Some(at);
                        return None;
                    }
                    Choice::NoLine => {
                        self.drop_backlog(now);
                        return None;
                    }
                }
            }
            SchedulerKind::RoundRobin => {
                let up: Vec<usize> = (0..self.lines.len())
                    .filter(|&j| self.lines[j].is_up())
                    .collect();
                if up.is_empty() {
                    self.drop_backlog(now);
                    return None;
                }
                self.round_robin_next = (self.round_robin_next + 1) % self.lines.len();
                *up.iter()
                    .find(|&&j| j >= self.round_robin_next)
                    .unwrap_or(&up[0])
            }
            SchedulerKind::WeightedRoundRobin => {
                let weights: Vec<Option<f64>> = self
                    .lines
                    .iter()
                    .enumerate()
                    .map(|(j, l)| {
                        l.is_up().then(|| {
                            self.config
                                .line_rates
                                .get(j)
                                .copied()
                                .flatten()
                                .map_or(1.0, BitsPerSec::as_f64)
                        })
                    })
                    .collect();
                match self.wrr.pick(&weights) {
                    Some(j) => j,
                    None => {
                        self.drop_backlog(now);
                        return None;
                    }
                }
            }
        };
        self.build(now, line, Fill::All, buf)
    }

    /// Whether line `j` may carry data at `now` under the scheduler.
    fn line_may_send(&self, now: Instant, j: usize) -> bool {
        if self.fair.is_empty() {
            return false;
        }
        match self.config.scheduler {
            SchedulerKind::Delay => {
                let len = self
                    .fair
                    .backlog_bytes()
                    .min(self.lines[j].payload_limit() as u64) as usize;
                sched::earliest_arrival(
                    now,
                    &self.views(),
                    len,
                    self.fair.backlog_bytes(),
                    self.config.controller.target.saturating_mul(2),
                ) == Choice::Send(j)
            }
            SchedulerKind::RoundRobin | SchedulerKind::WeightedRoundRobin => true,
        }
    }

    fn views(&self) -> Vec<Option<LineView>> {
        let fallback = self
            .lines
            .iter()
            .filter_map(|l| l.controller().scheduling_owd_ns())
            .min()
            .unwrap_or(0);
        self.lines
            .iter()
            .map(|line| {
                line.is_up().then(|| LineView {
                    ready_at: line.ready_at(),
                    rate_bps: line.controller().rate().as_f64().max(1.0),
                    // A line not measured yet is taken as good as the best: it gets
                    // traffic, and so a measurement.
                    owd_ns: line.controller().scheduling_owd_ns().unwrap_or(fallback),
                })
            })
            .collect()
    }

    fn drop_backlog(&mut self, now: Instant) {
        // No line is up: what waits would only grow stale. Drop it, counted.
        let mut dropped = 0;
        while !self.fair.is_empty() {
            let before = self.fair.backlog_bytes();
            self.fair.fill(now, usize::MAX / 2, |_| dropped += 1);
            if self.fair.backlog_bytes() == before {
                break;
            }
        }
        self.counters.no_line_dropped += dropped;
    }

    /// Writes a Data datagram for line `j`: its report and echo if due, then what `fill`
    /// says (fragments, or a probe's padding), sealed.
    fn build(&mut self, now: Instant, j: usize, fill: Fill, buf: &mut Vec<u8>) -> Option<Transmit> {
        let State::Open { session, keys } = &self.state else {
            return None;
        };
        let timers = self.config.timers;
        let line = &mut self.lines[j];
        let header = Header {
            kind: Kind::Data,
            line: line.index,
            session: *session,
            seq: line.next_seq()?,
        };
        header.encode(buf);
        wire::encode_data_prefix(now.as_nanos(), buf);
        let probe = matches!(fill, Fill::Probe(_));
        if !probe && (line.report_due(now, &timers) || line.keepalive_due(now, &timers)) {
            // A probe's acknowledgement before the report that counts it: the peer then
            // tells a probe too big for the path from a lost datagram.
            if let Some(ack) = line.take_probe_ack() {
                ack.encode(buf);
            }
            for frame in line.take_report(now) {
                frame.encode(buf);
            }
        }
        let capacity = line.payload_limit().saturating_sub(wire::TAG_BYTES);
        let budget = capacity.saturating_sub(buf.len());
        let write = |fragment: wire::Fragment<'_>| Frame::Fragment(fragment).encode(buf);
        match fill {
            Fill::All => {
                self.fair.fill(now, budget, write);
            }
            Fill::NewStreams => {
                self.fair.fill_new(now, budget, write);
            }
            Fill::Nothing => {}
            Fill::Probe(size) => {
                let zeros =
                    size.saturating_sub(buf.len() + wire::PADDING_HEADER_BYTES + wire::TAG_BYTES);
                Frame::Padding(u16::try_from(zeros).unwrap_or(u16::MAX)).encode(buf);
            }
        }
        crypto::seal(&keys.seal, &header, buf).ok()?;
        if probe {
            line.on_probe_sent(header.seq, buf.len(), now);
        }
        let paced = self.config.scheduler == SchedulerKind::Delay;
        line.on_sent(now, buf.len(), paced);
        Some(Transmit { line: line.index })
    }

    /// The MTU for the TUN device: the largest inner packet that goes whole in one datagram
    /// of every line that is up and whose path MTU search has ended (`None` before one has).
    pub fn tunnel_mtu(&self) -> Option<usize> {
        self.lines
            .iter()
            .filter(|l| l.is_up() && !l.mtu().searching())
            .map(|l| {
                l.payload_limit()
                    .saturating_sub(DATA_OVERHEAD_BYTES + wire::PACKET_HEADER_BYTES)
            })
            .min()
    }

    /// When the endpoint next needs [`Bond::handle_timeout`] or [`Bond::poll_transmit`].
    pub fn poll_at(&self) -> Option<Instant> {
        match &self.state {
            State::Closed => None,
            State::Connecting { next_hello, .. } => Some(*next_hello),
            State::Open { .. } => {
                let timers = &self.config.timers;
                let lines = self.lines.iter().map(|l| l.poll_at(timers)).min();
                let send = if self.fair.is_empty() {
                    None
                } else {
                    self.send_at
                };
                [lines, send, self.reorder.poll_at()]
                    .into_iter()
                    .flatten()
                    .min()
            }
        }
    }

    /// Ends the session: the next datagram tells the peer.
    pub fn close(&mut self) {
        self.state = State::Closed;
    }
}

/// The time a full-size frame takes at `rate_bps`.
fn frame_time(rate_bps: f64) -> Duration {
    Duration::from_secs_f64(1514.0 * 8.0 / rate_bps.max(1.0))
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
