//! What each TCP connection in a packet capture did, tcptrace-style, and what limited it
//! (`pathlab analyze`).
//!
//! Sans-IO: [`Analyzer::handle_segment`] takes each decoded segment with the instant it
//! was captured (in capture order), and [`Analyzer::finish`] answers with a
//! [`ConnectionReport`] per connection. Nothing here reads a file or a clock.
//!
//! # Where the capture was taken
//!
//! A capture point splits a connection's round trip in two halves: from the capture point
//! to one end and back, and to the other end and back. Each half is measured on its own:
//!
//! - the half through the end that receives data: from a data segment to the ACK that
//!   covers it (Karn's rule: never from a segment sent twice), from a TSval to the first
//!   TSecr that echoes it, and from the SYN to the SYN-ACK when the client receives;
//! - the half through the other end: from a TSval of the receiver to the sender's first
//!   echo of it, and from the SYN-ACK to the handshake's ACK.
//!
//! An RTT sample is a sample of the first half plus the latest sample of the second before
//! it. At the sender the second half is next to nothing (the capture sees the ACK and the
//! data it releases together), at the receiver the first one is, and in the middle (`pathlab
//! emulate --pcap`, which writes what each direction sends when it leaves the emulator)
//! both count. [`Vantage`] says which it was: the end whose half is under 5% of the
//! whole RTT is where the capture was taken. Without timestamps and without the handshake,
//! the second half is unknown and the RTT is the first half only (said in the report).
//!
//! # What limited a transfer
//!
//! The transfer's time is cut into slices of one minimum RTT, each of which is one of:
//!
//! - the receiver's window: a new segment reached, within one MSS, the right edge of the
//!   window the sender could have known (the latest ACK seen at least the sender's half
//!   RTT before it), or the window was zero;
//! - the application: nothing was in flight, and nothing new came for longer than the
//!   sender's half RTT after everything was ACKed;
//! - congestion: anything else with data in flight or sent (the congestion window set the
//!   pace, including loss recovery and retransmission timeouts).
//!
//! The largest share is the verdict (T-RAT, SIGCOMM 2002, and Siekkinen et al., CoNEXT
//! 2005, classify traces the same way). The window test needs the window scale from the
//! handshake: without the SYNs, windows are unscaled and the receiver's window is not
//! judged (the report says so).
//!
//! # Counting
//!
//! A segment whose bytes were all seen before is a retransmission: fast (three duplicate
//! ACKs or SACK blocks above it), after a timeout ([`RTO_MIN_NS`] of silence), or a probe
//! (a tail loss probe); spurious when its data was ACKed before it was seen or a D-SACK
//! reported it. New bytes below the highest seen are out of order when they come sooner
//! than the sender's half RTT after the highest, else a retransmission of a segment lost
//! before the capture point. A segment the capture says the emulator dropped was sent (it
//! counts in the bytes transmitted) and its retransmission counts as one.

use std::collections::HashMap;
use std::net::SocketAddr;

use pathlab_core::Instant;
use serde::{Deserialize, Serialize};

use crate::capture::{TcpFlags, TcpSegment};
use crate::diagnosis::{Limit, Limits};
use pathlab_probe::rfc6349::Framing;

mod driver;
mod flow;
mod summary;
#[cfg(test)]
mod tests;

pub use driver::{analyze_capture, CaptureAnalysis};
use flow::{unwrap_seq, Ack, Flow, Send, Unacked};
pub use flow::{Retransmission, RetransmissionKind, RTO_MIN_NS};

/// Out-of-order arrivals are told from retransmissions within this long when the sender's
/// half RTT is not known yet (Wireshark's default).
const DEFAULT_REORDER_WINDOW_NS: u64 = 3_000_000;

/// What the analysis is told besides the packets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AnalyzerConfig {
    /// The bottleneck's rate, bits/s, counting `framing`'s bytes (`--rate`): with it, RFC
    /// 6349's transfer time ratio.
    pub bottleneck_bps: Option<f64>,
    /// Which link bytes that rate counts.
    pub framing: Framing,
}

/// Where the capture was taken, from the two halves of the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VantageKind {
    /// At or next to the client (the end that sent the SYN, or spoke first).
    Client,
    /// At or next to the server.
    Server,
    /// In between: both halves take time.
    Middle,
    /// One half was never measured.
    Unknown,
}

/// The capture point and the two halves of the round trip it sees.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Vantage {
    /// Where.
    pub kind: VantageKind,
    /// Smallest time from the capture point to the client and back, ns.
    pub client_half_ns: Option<u64>,
    /// Smallest time from the capture point to the server and back, ns.
    pub server_half_ns: Option<u64>,
}

/// RTT statistics of one direction's data, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RttSummary {
    /// Samples.
    pub samples: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Median (nearest rank).
    pub median_ns: u64,
    /// 95th percentile (nearest rank).
    pub p95_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Whether the half through the sender was measured (else the RTT is from the capture
    /// point to the receiver and back only).
    pub both_halves: bool,
}

/// Counts of retransmissions by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetransmissionCounts {
    /// All retransmitted segments.
    pub total: u64,
    /// Fast retransmits.
    pub fast: u64,
    /// After a timeout.
    pub rto: u64,
    /// Probes (tail loss probe, RACK).
    pub probe: u64,
    /// Of them, spurious.
    pub spurious: u64,
    /// Of them, of segments lost before the capture point.
    pub lost_before_capture: u64,
}

/// The receiver's advertised window for this direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// The receiver's window scale shift, when the handshake showed it.
    pub scale: Option<u8>,
    /// Whether windows are scaled (the handshake was seen).
    pub scale_known: bool,
    /// Largest advertised window, bytes.
    pub max_bytes: u64,
    /// Median advertised window, bytes.
    pub median_bytes: u64,
    /// ACKs with a zero window.
    pub zero_window_acks: u64,
    /// Time the window stayed zero, ns.
    pub zero_window_ns: u64,
}

/// RFC 6349's three metrics computed from the trace (section 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMetrics {
    /// TCP Efficiency: (transmitted - retransmitted) / transmitted bytes.
    pub tcp_efficiency: Option<f64>,
    /// Buffer Delay Percentage: (mean RTT - minimum RTT) / minimum RTT x 100.
    pub buffer_delay_percent: Option<f64>,
    /// The ideal TCP rate at the bottleneck `--rate` gave, bits/s.
    pub ideal_rate_bps: Option<f64>,
    /// Transfer Time Ratio: the actual transfer time over the ideal one.
    pub transfer_time_ratio: Option<f64>,
    /// The MTU the ideal assumes, bytes.
    pub mtu_bytes: u32,
}

/// What limited one direction's transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowVerdict {
    /// The largest share.
    pub limit: Limit,
    /// Its share of the transfer's time.
    pub share: f64,
    /// All the shares (a trace never shows the send buffer: its share is 0).
    pub limits: Limits,
    /// What the limit caps the rate at, bits/s, when it is a window over an RTT.
    pub cap_bps: Option<f64>,
    /// The sentence a user acts on.
    pub sentence: String,
}

/// The series the figures are drawn from; times in ns since the capture began, sequence
/// numbers relative to the direction's first byte. Long series are thinned to
/// [`summary::MAX_POINTS`] points (retransmissions never).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowSeries {
    /// New data: (time, start, end).
    pub segments: Vec<(u64, u64, u64)>,
    /// Retransmissions: (time, start, end).
    pub retransmissions: Vec<(u64, u64, u64)>,
    /// ACKs: (time, cumulative ACK, right edge of the window).
    pub acks: Vec<(u64, u64, u64)>,
    /// Bytes in flight at the capture point and the advertised window: (time, flight,
    /// window).
    pub flight: Vec<(u64, u64, u64)>,
    /// RTT samples: (time, RTT ns).
    pub rtt: Vec<(u64, u64)>,
    /// Goodput (newly ACKed bytes) per slice: (slice start, bits/s).
    pub goodput: Vec<(u64, f64)>,
    /// Throughput (bytes sent, retransmissions too) per slice: (slice start, bits/s).
    pub throughput: Vec<(u64, f64)>,
}

/// One direction of a connection that carried data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    /// The sender.
    pub from: SocketAddr,
    /// The receiver.
    pub to: SocketAddr,
    /// Payload bytes, each counted once: the transfer's size.
    pub bytes: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_transmitted: u64,
    /// Payload bytes sent again.
    pub bytes_retransmitted: u64,
    /// Segments with payload.
    pub data_segments: u64,
    /// Largest payload seen, bytes.
    pub mss_bytes: u32,
    /// From the first data segment to the ACK of the last byte (or the last segment), ns.
    pub duration_ns: u64,
    /// `bytes` over `duration_ns`, bits/s.
    pub goodput_bps: f64,
    /// RTT.
    pub rtt: RttSummary,
    /// Retransmissions.
    pub retransmissions: RetransmissionCounts,
    /// Segments that arrived below the highest sequence number, new, within the reorder
    /// window.
    pub out_of_order: u64,
    /// Holes in sequence space seen at the capture point (data lost before it).
    pub holes: u64,
    /// Segments the capture says the emulator dropped at the capture point.
    pub dropped_at_capture: u64,
    /// The receiver's window.
    pub window: WindowSummary,
    /// RFC 6349's metrics.
    pub metrics: TraceMetrics,
    /// What limited it.
    pub verdict: FlowVerdict,
    /// For the figures.
    pub series: FlowSeries,
}

/// One connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionReport {
    /// The end that sent the SYN (or spoke first, without a handshake in the capture).
    pub client: SocketAddr,
    /// The other end.
    pub server: SocketAddr,
    /// Whether the capture holds the handshake (SYN and SYN-ACK).
    pub handshake_seen: bool,
    /// First packet, ns since the capture began.
    pub start_ns: u64,
    /// First to last packet, ns.
    pub duration_ns: u64,
    /// TCP segments, both ways.
    pub segments: u64,
    /// Where the capture was taken.
    pub vantage: Vantage,
    /// Each direction that carried data, the larger first.
    pub flows: Vec<FlowReport>,
    /// What the analysis could not know, in words.
    pub notes: Vec<String>,
}

/// What a SYN said.
#[derive(Debug, Clone, Copy, Default)]
struct Syn {
    window_scale: Option<u8>,
    mss: Option<u16>,
    at: Option<Instant>,
    sent: u32,
}

#[derive(Debug, Clone)]
struct Connection {
    /// `[client, server]`.
    ends: [SocketAddr; 2],
    first_at: Instant,
    last_at: Instant,
    segments: u64,
    syn: [Option<Syn>; 2],
    handshake_acked: bool,
    flows: [Flow; 2],
    /// Samples of the time from the capture point to each end and back: (when, ns).
    halves: [Vec<(Instant, u64)>; 2],
    closed: bool,
}

impl Connection {
    fn new(ends: [SocketAddr; 2], now: Instant) -> Connection {
        Connection {
            ends,
            first_at: now,
            last_at: now,
            segments: 0,
            syn: [None; 2],
            handshake_acked: false,
            flows: [Flow::default(), Flow::default()],
            halves: [Vec::new(), Vec::new()],
            closed: false,
        }
    }

    /// The window scale of windows `end` advertises: `Some(shift)` when the handshake
    /// showed both SYNs (0 unless both offered scaling), `None` when it is unknown.
    fn scale_of(&self, end: usize) -> Option<u8> {
        match (self.syn[0], self.syn[1]) {
            (Some(a), Some(b)) => Some(if a.window_scale.is_some() && b.window_scale.is_some() {
                [a, b][end].window_scale.unwrap_or(0)
            } else {
                0
            }),
            _ => None,
        }
    }

    /// The smallest sample of the half through `end`.
    fn half_min(&self, end: usize) -> Option<u64> {
        self.halves[end].iter().map(|&(_, ns)| ns).min()
    }

    fn handle(&mut self, now: Instant, segment: &TcpSegment, from: usize, dropped_here: bool) {
        self.last_at = now;
        self.segments += 1;
        let to = 1 - from;
        let flags = segment.flags;
        if flags.has(TcpFlags::SYN) {
            self.handle_syn(now, segment, from);
        } else if from == 0 && !self.handshake_acked && flags.has(TcpFlags::ACK) && !dropped_here {
            // The handshake's ACK: the half through the client.
            if let (Some(server_syn), Some(_)) = (self.syn[1], self.syn[0]) {
                if let (Some(at), 1) = (server_syn.at, server_syn.sent) {
                    self.halves[0].push((now, now.saturating_since(at).as_nanos()));
                }
            }
            self.handshake_acked = true;
        }
        if flags.has(TcpFlags::RST) {
            self.closed = true;
        }
        let reorder_window = self
            .half_min(from)
            .unwrap_or(DEFAULT_REORDER_WINDOW_NS)
            .max(1);
        self.flows[from].handle_data(now, segment, dropped_here, reorder_window);
        if dropped_here {
            // The receiver never saw it: its ACK and timestamps say nothing.
            return;
        }
        if flags.has(TcpFlags::ACK) {
            let scale = if flags.has(TcpFlags::SYN) {
                Some(0)
            } else {
                self.scale_of(from)
            };
            if let Some(sample) = self.flows[to].handle_ack(now, segment, scale) {
                // Data of `to` ACKed by `from`: the half through `from`.
                self.halves[from].push((now, sample));
            }
        }
        if let Some((tsval, tsecr)) = segment.options.timestamps {
            let flow = &mut self.flows[from];
            if flow.tsvals.back().is_none_or(|&(last, _)| last != tsval) {
                flow.tsvals.push_back((tsval, now));
                if flow.tsvals.len() > 4096 {
                    flow.tsvals.pop_front();
                }
            }
            if flags.has(TcpFlags::ACK) {
                let peer = &mut self.flows[to].tsvals;
                if let Some(position) = peer.iter().position(|&(value, _)| value == tsecr) {
                    let at = peer[position].1;
                    peer.drain(..=position);
                    self.halves[from].push((now, now.saturating_since(at).as_nanos()));
                }
            }
        }
        if flags.has(TcpFlags::FIN) && self.flows[0].fin_at.is_some() {
            self.closed |= self.flows[1].fin_at.is_some();
        }
    }

    fn handle_syn(&mut self, now: Instant, segment: &TcpSegment, from: usize) {
        let syn = self.syn[from].get_or_insert_with(Syn::default);
        syn.sent += 1;
        syn.window_scale = segment.options.window_scale;
        syn.mss = segment.options.mss;
        if syn.at.is_none() {
            syn.at = Some(now);
        }
        self.flows[from].base = Some(segment.seq.wrapping_add(1));
        if from == 1 && segment.flags.has(TcpFlags::ACK) {
            // The SYN-ACK: the half through the server, unless either SYN went twice.
            if let (Some(client), Some(server)) = (self.syn[0], self.syn[1]) {
                if let (Some(at), 1, 1) = (client.at, client.sent, server.sent) {
                    self.halves[1].push((now, now.saturating_since(at).as_nanos()));
                }
            }
        }
    }
}

impl Flow {
    fn handle_data(
        &mut self,
        now: Instant,
        segment: &TcpSegment,
        dropped_here: bool,
        reorder_window_ns: u64,
    ) {
        let syn = segment.flags.has(TcpFlags::SYN);
        let data_seq = segment.seq.wrapping_add(u32::from(syn));
        let base = *self.base.get_or_insert(data_seq);
        let start = unwrap_seq(base, self.highest_end, data_seq);
        let len = i64::from(segment.payload_len);
        let end = start + len;
        if segment.flags.has(TcpFlags::FIN) && self.fin_at.is_none() {
            self.fin_at = Some(now);
        }
        if len == 0 {
            return;
        }
        if start < 0 {
            self.before_capture += 1;
            return;
        }
        self.data_segments += 1;
        self.bytes_sent += segment.payload_len as u64;
        self.largest_payload = self.largest_payload.max(segment.payload_len);
        self.largest_ip_len = self.largest_ip_len.max(segment.ip_len);
        self.ip_header_len = segment.ip_header_len;
        self.ipv6 = segment.ip_header_len >= 40;
        self.timestamps |= segment.options.timestamps.is_some();
        self.vlan |= segment.vlan;
        self.first_data_at.get_or_insert(now);
        self.last_data_at = Some(now);
        if dropped_here {
            self.dropped_at_capture += 1;
            self.dropped_bytes_at_capture += segment.payload_len as u64;
            // Sent and lost here: a retransmission if its bytes were sent before; it moves
            // neither the highest sequence nor the timeline of what passed.
            let prior = (self.seen.overlap(start, end) + self.dropped.overlap(start, end)).min(len);
            if prior > 0 {
                self.record_retransmission(now, start, end, prior, false);
            }
            self.dropped.insert(start, end);
            return;
        }
        let overlap = (self.seen.overlap(start, end) + self.dropped.overlap(start, end)).min(len);
        let below_highest = start < self.highest_end;
        let retransmission = if overlap > 0 {
            Some(false)
        } else if below_highest {
            let since_highest = self
                .highest_at
                .map_or(0, |at| now.saturating_since(at).as_nanos());
            if since_highest < reorder_window_ns {
                self.out_of_order += 1;
                None
            } else {
                Some(true)
            }
        } else {
            let gap = start - self.highest_end - self.dropped.overlap(self.highest_end, start);
            if gap > 0 {
                self.holes += 1;
                self.hole_bytes += gap as u64;
            }
            None
        };
        if let Some(lost_before_capture) = retransmission {
            let bytes = if lost_before_capture { len } else { overlap };
            self.record_retransmission(now, start, end, bytes, lost_before_capture);
        }
        if end > self.highest_end {
            self.highest_end = end;
            self.highest_at = Some(now);
        }
        self.seen.insert(start, end);
        self.unacked.push_back(Unacked {
            start,
            end,
            at: now,
            retransmitted: retransmission.is_some(),
        });
        self.last_send_at = Some(now);
        self.sends.push(Send {
            at: now,
            start,
            end,
            retransmission: retransmission.is_some(),
            flight: self.flight(),
        });
    }

    /// Counts a retransmission of `[start, end)` (`bytes` of it sent before) seen at `now`,
    /// with its kind, and marks what it covers as sent twice (Karn).
    fn record_retransmission(
        &mut self,
        now: Instant,
        start: i64,
        end: i64,
        bytes: i64,
        lost_before_capture: bool,
    ) {
        self.retransmitted_bytes += bytes as u64;
        let silence_from = [self.last_send_at, self.last_ack_at]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(now);
        let kind = if self.dupacks >= 3 || self.sacked.any_above(end) {
            RetransmissionKind::Fast
        } else if now.saturating_since(silence_from).as_nanos() >= RTO_MIN_NS {
            RetransmissionKind::Rto
        } else {
            RetransmissionKind::Probe
        };
        self.retransmissions.push(Retransmission {
            at_ns: now.as_nanos(),
            start: start as u64,
            end: end as u64,
            kind,
            spurious: self.ack_seen && end <= self.acked,
            lost_before_capture,
        });
        for unacked in &mut self.unacked {
            if unacked.end > start && unacked.start < end {
                unacked.retransmitted = true;
            }
        }
    }

    /// Takes the peer's ACK of this direction's data; returns an RTT sample of the half
    /// through the peer, ns, when the ACK covers a segment sent once.
    fn handle_ack(&mut self, now: Instant, segment: &TcpSegment, scale: Option<u8>) -> Option<u64> {
        let base = *self.base.get_or_insert(segment.ack);
        let acked = unwrap_seq(base, self.highest_end, segment.ack);
        let window = u64::from(segment.window) << scale.unwrap_or(0);
        let mut sample = None;
        if !self.ack_seen || acked > self.acked {
            // Karn's rule as Linux keeps it: no sample from an ACK that covers anything
            // sent twice; else from the newest segment it covers.
            let (mut last, mut ambiguous) = (None, false);
            while self.unacked.front().is_some_and(|u| u.end <= acked) {
                last = self.unacked.pop_front();
                ambiguous |= last.is_some_and(|u| u.retransmitted);
            }
            if let Some(unacked) = last.filter(|_| !ambiguous) {
                sample = Some(now.saturating_since(unacked.at).as_nanos());
            }
            self.acked = acked;
            self.ack_seen = true;
            self.dupacks = 0;
            self.sacked.trim_below(acked);
        } else if acked == self.acked
            && segment.payload_len == 0
            && !segment.flags.has(TcpFlags::FIN)
            && self.last_window == Some(window)
            && self.highest_end > acked
        {
            self.dupacks += 1;
        }
        for (index, &(left, right)) in segment.options.sack.iter().enumerate() {
            let (left, right) = (
                unwrap_seq(base, acked, left),
                unwrap_seq(base, acked, right),
            );
            let inside_second = index == 0
                && segment.options.sack.get(1).is_some_and(|&(l2, r2)| {
                    unwrap_seq(base, acked, l2) <= left && right <= unwrap_seq(base, acked, r2)
                });
            if index == 0 && (right <= acked || inside_second) {
                self.dsack(left, right);
            } else if left >= acked {
                self.sacked.insert(left, right);
            }
        }
        if window == 0 && !segment.flags.has(TcpFlags::RST) {
            self.zero_window_acks += 1;
            self.zero_since.get_or_insert(now);
        } else if let Some(since) = self.zero_since.take() {
            self.zero_windows.push((since, now));
        }
        self.last_window = Some(window);
        self.last_ack_at = Some(now);
        self.acks.push(Ack {
            at: now,
            acked,
            right_edge: acked + window as i64,
            window,
        });
        sample
    }
}

/// The analysis of a capture's TCP connections. Feed it every TCP segment in capture
/// order with [`Analyzer::handle_segment`], then call [`Analyzer::finish`].
#[derive(Debug)]
pub struct Analyzer {
    config: AnalyzerConfig,
    connections: Vec<Connection>,
    /// The connection each address pair (the smaller first) is at now.
    by_ends: HashMap<(SocketAddr, SocketAddr), usize>,
}

impl Analyzer {
    /// An analysis with `config`.
    pub fn new(config: AnalyzerConfig) -> Analyzer {
        Analyzer {
            config,
            connections: Vec::new(),
            by_ends: HashMap::new(),
        }
    }

    /// Takes one segment captured at `now` (since the capture began); `dropped_here` when
    /// the capture says it was dropped at the capture point (`pathlab emulate --pcap`).
    pub fn handle_segment(&mut self, now: Instant, segment: &TcpSegment, dropped_here: bool) {
        let (a, b) = (segment.source, segment.destination);
        let key = if a <= b { (a, b) } else { (b, a) };
        let opening = segment.flags.has(TcpFlags::SYN) && !segment.flags.has(TcpFlags::ACK);
        let index = match self.by_ends.get(&key) {
            // A new SYN on the address pair of a finished connection starts a new one.
            Some(&index) if !(opening && self.connections[index].closed) => index,
            _ => {
                // A SYN-ACK first: its SYN was not captured, its receiver is the client.
                let server_first =
                    segment.flags.has(TcpFlags::SYN) && segment.flags.has(TcpFlags::ACK);
                let ends = if server_first { [b, a] } else { [a, b] };
                self.connections.push(Connection::new(ends, now));
                self.by_ends.insert(key, self.connections.len() - 1);
                self.connections.len() - 1
            }
        };
        let connection = &mut self.connections[index];
        let from = usize::from(connection.ends[0] != a);
        connection.handle(now, segment, from, dropped_here);
    }

    /// The report of every connection, in the order they began.
    pub fn finish(self) -> Vec<ConnectionReport> {
        self.connections
            .iter()
            .map(|connection| summary::report(connection, &self.config))
            .collect()
    }
}
