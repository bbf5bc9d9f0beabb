//! One line of a session, both ways: what we send on it (sequence, pacer, rate controller,
//! liveness) and what we receive on it (replay window, the one-way delay samples and
//! counts we report back, the timestamp we echo).
//!
//! A line counts what its modem counts: each datagram as its UDP payload plus the UDP and
//! IP headers of the line's family plus the line's framing ([`LineFraming`]). Its pacer,
//! its controller's rates and its byte counters are in those bytes, so a line paced at
//! `R` carries datagrams of `len` bytes of payload at `R / ((len + overhead) * 8)` per
//! second, what a modem of rate `R` forwards. Reports the peer sends count UDP payloads
//! (the peer need not know our framing); the controller adds the overhead per datagram
//! they count.

use pathlab_core::wire::{ethernet, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};
use pathlab_core::{Duration, Instant};

use crate::control::{ControllerConfig, RateController};
use crate::crypto::ReplayWindow;
use crate::pmtu::LineMtu;
use crate::wire::{Feedback, Frame, MAX_SEQ};

/// Whether a line carries traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LineState {
    /// Traffic flows both ways.
    Up,
    /// Nothing heard from the peer on it (or no report of what we sent) for too long; it
    /// carries only probes until it answers again.
    Down,
}

/// The framing a line's modem counts per datagram by default: Ethernet's header, 14 bytes,
/// as `pathlab emulate` counts a frame for its `rate` (no preamble, FCS or gap), so a bond
/// over an emulated line of `rate 10mbit` paces to exactly what that line carries.
pub const ETHERNET_FRAMING_BYTES: u16 = ethernet::HEADER_LEN as u16;

/// The largest framing a line may declare (`--line IF,overhead=BYTES`): far above any
/// real link layer's (PPPoE over ATM with LLC/SNAP is 40 bytes, Ethernet on the wire 38),
/// small enough that a typo does not pace a line at a fraction of its rate.
pub const MAX_FRAMING_BYTES: u16 = 256;

/// What a line's modem counts per datagram besides the UDP payload: the UDP header, the
/// IP header of the line's (outer) family, and the link layer's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineFraming {
    /// Whether the line's datagrams are IPv6 (40-byte header) or IPv4 (20).
    pub ipv6: bool,
    /// Bytes the link layer adds to each IP packet, as the modem counts them (at most
    /// [`MAX_FRAMING_BYTES`]).
    pub framing_bytes: u16,
}

impl Default for LineFraming {
    /// IPv4 over Ethernet: 8 + 20 + 14 = 42 bytes per datagram.
    fn default() -> LineFraming {
        LineFraming {
            ipv6: false,
            framing_bytes: ETHERNET_FRAMING_BYTES,
        }
    }
}

impl LineFraming {
    /// Bytes per datagram beyond its UDP payload.
    pub fn overhead_bytes(self) -> usize {
        let ip = if self.ipv6 {
            IPV6_HEADER_LEN
        } else {
            IPV4_HEADER_LEN
        };
        UDP_HEADER_LEN + ip + usize::from(self.framing_bytes.min(MAX_FRAMING_BYTES))
    }

    /// The bytes the line's modem counts for a datagram of `payload_bytes` of UDP payload.
    pub fn line_bytes(self, payload_bytes: usize) -> usize {
        payload_bytes + self.overhead_bytes()
    }
}

/// Per-line counters. Bytes are the line's (UDP payload, UDP and IP headers and the line's
/// framing: [`LineFraming`]), as its modem counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineCounters {
    /// Datagrams sent.
    pub sent_packets: u64,
    /// Line bytes sent.
    pub sent_bytes: u64,
    /// Datagrams received and authenticated.
    pub received_packets: u64,
    /// Line bytes received and authenticated.
    pub received_bytes: u64,
    /// Datagrams sent that carried no inner data: reports, keepalives, probes and closes
    /// that found no data datagram to ride on (each a packet a packet-limited modem
    /// counts).
    #[serde(default)]
    pub control_only_packets: u64,
    /// Datagrams refused as replays.
    pub replays: u64,
    /// Times the line was declared down.
    pub went_down: u64,
    /// Times it came back.
    pub came_back: u64,
    /// Reports and echoes from the peer refused as impossible (a datagram we never sent,
    /// more bytes than datagrams can hold, a delay of centuries): see [`Line::on_feedback`].
    #[serde(default)]
    pub refused_reports: u64,
}

/// Largest one-way delay sample (ns, clock offset included) a report may carry: 2^62 ns
/// is 146 years, beyond any two clocks' offset, and leaves room to add and subtract two
/// samples and a target without overflowing an `i64`.
pub const MAX_REPORTED_OWD_NS: i64 = 1 << 62;

/// Largest round trip an echo may give: a line is down after 300 ms of silence, so a
/// minute is no line's round trip, only an old or forged timestamp.
pub const MAX_ECHO_RTT: Duration = Duration::from_secs(60);

/// Whether a report of what arrived on a line on which we sent up to `sent_seq` could be
/// true. The peer is authenticated, but its counters are summed and subtracted here: a
/// bug or a compromised peer must not overflow them, nor pace the line by absurd figures.
fn plausible(report: &Feedback, sent_seq: u64) -> bool {
    let max_payload = crate::wire::MAX_DATAGRAM_BYTES as u64;
    report.highest_seq <= sent_seq
        && report.received_packets <= report.highest_seq
        && report.received_bytes <= report.received_packets.saturating_mul(max_payload)
        && report.owd_min_ns.unsigned_abs() <= MAX_REPORTED_OWD_NS as u64
        && report.owd_last_ns.unsigned_abs() <= MAX_REPORTED_OWD_NS as u64
}

/// What we receive on a line, summarised for the next report.
#[derive(Debug, Clone, Default)]
struct Receiving {
    received_packets: u64,
    received_bytes: u64,
    owd_min_ns: Option<i64>,
    owd_min_len: u16,
    owd_last_ns: i64,
    samples: u32,
    /// The latest sender timestamp and when it arrived, to echo.
    echo: Option<(u64, Instant)>,
    /// Whether something arrived since the last report.
    fresh: bool,
    /// Smoothed one-way delay and its mean deviation (ns, offset included), as TCP
    /// smooths the round trip (RFC 6298): what the reorder buffer sizes its wait from.
    owd_smoothed: Option<(f64, f64)>,
    /// The lowest one-way delay seen recently (decays towards the smoothed one so a
    /// route change is forgotten).
    owd_floor: Option<f64>,
}

/// One line of a session.
#[derive(Debug)]
pub struct Line {
    /// Our index for it (the header's `line`).
    pub index: u8,
    seq: u64,
    pub(crate) controller: RateController,
    ready_at: Instant,
    last_sent: Instant,
    last_received: Instant,
    last_feedback: Instant,
    last_report: Instant,
    state: LineState,
    state_since: Instant,
    replay: ReplayWindow,
    receiving: Receiving,
    counters: LineCounters,
    /// What the line's path carries, and its search.
    mtu: LineMtu,
    /// A probe the peer sent on this line, to acknowledge: its seq and length.
    probe_ack: Option<(u64, u16)>,
    /// What the line's modem counts per datagram.
    framing: LineFraming,
    /// When the line last sent a datagram with inner data in it.
    last_data_sent: Instant,
}

/// How a datagram that went out on a line is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Whether it carried inner data (a fragment); if not, it was control only.
    pub data: bool,
    /// Whether it is charged to the line's pacer.
    pub paced: bool,
}

/// Timers of the liveness and reporting logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTimers {
    /// How often a line that carries nothing else sends a keepalive.
    pub keepalive: Duration,
    /// How often the receiver reports what it saw on a line.
    pub feedback: Duration,
    /// How long a due report may wait for a data datagram of its line to ride on, while
    /// the line carries data; a line that sent no data for a report interval sends its
    /// report alone when due.
    pub report_grace: Duration,
    /// How long without hearing from the peer (or without a report) a line is down after.
    pub down_after: Duration,
    /// How often a line that is down is probed.
    pub probe_down: Duration,
}

impl Default for LineTimers {
    fn default() -> LineTimers {
        LineTimers {
            keepalive: Duration::from_millis(50),
            feedback: Duration::from_millis(25),
            report_grace: Duration::from_millis(25),
            down_after: Duration::from_millis(300),
            probe_down: Duration::from_millis(100),
        }
    }
}

impl Line {
    /// A line that starts up at `now`, counted as IPv4 over Ethernet until
    /// [`Line::set_framing`] says otherwise.
    pub fn new(index: u8, controller: ControllerConfig, max_payload: usize, now: Instant) -> Line {
        let mut line = Line {
            index,
            seq: 0,
            controller: RateController::new(controller, now),
            ready_at: now,
            last_sent: now,
            last_received: now,
            last_feedback: now,
            last_report: now,
            state: LineState::Up,
            state_since: now,
            replay: ReplayWindow::new(),
            receiving: Receiving::default(),
            counters: LineCounters::default(),
            mtu: LineMtu::new(max_payload, now),
            probe_ack: None,
            framing: LineFraming::default(),
            last_data_sent: now,
        };
        line.set_framing(LineFraming::default());
        line
    }

    /// What the line's modem counts per datagram.
    pub fn framing(&self) -> LineFraming {
        self.framing
    }

    /// Sets what the line's modem counts per datagram (a server learns a line's family
    /// from the address its datagrams come from).
    pub fn set_framing(&mut self, framing: LineFraming) {
        self.framing = framing;
        self.controller.set_overhead_bytes(framing.overhead_bytes());
    }

    /// The line for a new session at `now` (new keys, a far end that starts afresh): its
    /// sequence numbers, replay window, reports and rate controller start again; its
    /// counters and what its path MTU search found go on.
    pub fn renewed(self, controller: ControllerConfig, now: Instant) -> Line {
        let mut line = Line {
            counters: self.counters,
            mtu: self.mtu,
            ..Line::new(self.index, controller, 0, now)
        };
        line.set_framing(self.framing);
        line
    }

    /// The highest seq received on the line in this session (0 before the first).
    pub fn highest_received_seq(&self) -> u64 {
        self.replay.highest()
    }

    /// Starts the liveness clocks afresh (the session just opened).
    pub fn reset_liveness(&mut self, now: Instant) {
        self.last_received = now;
        self.last_feedback = now;
        self.last_sent = now;
    }

    /// The largest datagram (UDP payload) the line may send now: what its path MTU search
    /// has proven.
    pub fn payload_limit(&self) -> usize {
        self.mtu.limit()
    }

    /// The line's path MTU state.
    pub fn mtu(&self) -> &LineMtu {
        &self.mtu
    }

    /// The size of a path MTU probe due at `now`, if the line is up and one is.
    pub fn probe_due(&mut self, now: Instant) -> Option<usize> {
        if !self.is_up() {
            return None;
        }
        self.mtu.probe_due(now, self.controller.srtt())
    }

    /// A probe of `size` went out as datagram `seq`.
    pub fn on_probe_sent(&mut self, seq: u64, size: usize, now: Instant) {
        self.mtu.on_probe_sent(seq, size, now);
    }

    /// The peer acknowledged our probe `seq` of `len_bytes`.
    pub fn on_probe_ack(&mut self, seq: u64, len_bytes: u16) {
        self.mtu.on_ack(seq, usize::from(len_bytes));
    }

    /// The peer's datagram `seq` of `len_bytes` on this line was a probe: acknowledge it
    /// in the next report, which falls due at once.
    pub fn probe_received(&mut self, seq: u64, len_bytes: usize) {
        self.probe_ack = Some((seq, u16::try_from(len_bytes).unwrap_or(u16::MAX)));
    }

    /// The acknowledgement of the peer's latest probe, if not sent yet.
    pub fn take_probe_ack(&mut self) -> Option<Frame<'static>> {
        self.probe_ack
            .take()
            .map(|(seq, len_bytes)| Frame::ProbeAck {
                line: self.index,
                seq,
                len_bytes,
            })
    }

    /// Whether the line is up.
    pub fn is_up(&self) -> bool {
        self.state == LineState::Up && !self.exhausted()
    }

    /// The line's state.
    pub fn state(&self) -> LineState {
        self.state
    }

    /// The rate controller.
    pub fn controller(&self) -> &RateController {
        &self.controller
    }

    /// The counters.
    pub fn counters(&self) -> LineCounters {
        self.counters
    }

    /// When the pacer lets the line send.
    pub fn ready_at(&self) -> Instant {
        self.ready_at
    }

    /// The sequence number for the next datagram; `None` once the line has used all 48
    /// bits (it would repeat an AEAD nonce: the line stays down, 9 years at 10^6 a second).
    pub fn next_seq(&mut self) -> Option<u64> {
        if self.seq >= MAX_SEQ {
            return None;
        }
        self.seq += 1;
        Some(self.seq)
    }

    /// Whether the line has sent its last sequence number.
    fn exhausted(&self) -> bool {
        self.seq >= MAX_SEQ
    }

    /// We sent a datagram of `len_bytes` of UDP payload at `now`; `sent` says whether it
    /// carried inner data and whether the pacer is charged. The pacer and the controller
    /// count it as the line's modem does ([`LineFraming`]).
    pub fn on_sent(&mut self, now: Instant, len_bytes: usize, sent: Sent) {
        let len_bytes = self.framing.line_bytes(len_bytes);
        self.counters.sent_packets += 1;
        self.counters.sent_bytes += len_bytes as u64;
        self.last_sent = now;
        if sent.data {
            self.last_data_sent = now;
        } else {
            self.counters.control_only_packets += 1;
        }
        self.controller.on_sent(len_bytes);
        if sent.paced {
            // A pacer that fell behind (a late wake-up) may catch up by at most 1 ms.
            let start = self
                .ready_at
                .max(now - Duration::from_millis(1).min(now - Instant::ZERO));
            let rate = self.controller.rate().as_f64().max(1.0);
            // Its bytes at the rate, and not sooner than the packet rate allows.
            let packet_time = self.controller.packet_rate().map_or(0.0, |pps| 1.0 / pps);
            self.ready_at =
                start + Duration::from_secs_f64((len_bytes as f64 * 8.0 / rate).max(packet_time));
        }
    }

    /// Checks a datagram's sequence number against the replay window (after it was
    /// authenticated) and records it.
    pub fn accept_seq(&mut self, seq: u64) -> bool {
        if self.replay.check_and_update(seq).is_err() {
            self.counters.replays += 1;
            return false;
        }
        true
    }

    /// An authenticated datagram of `len_bytes` of UDP payload, sent at `sent_ns` on the
    /// peer's clock, arrived at `now`. The report counts the payload (what the peer's
    /// controller adds its own overhead to), the counters the line's bytes.
    pub fn on_received(&mut self, now: Instant, sent_ns: u64, len_bytes: usize) {
        self.counters.received_packets += 1;
        self.counters.received_bytes += self.framing.line_bytes(len_bytes) as u64;
        self.last_received = now;
        let r = &mut self.receiving;
        r.received_packets += 1;
        r.received_bytes += len_bytes as u64;
        let owd = (i128::from(now.as_nanos()) - i128::from(sent_ns))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        if r.owd_min_ns.is_none_or(|m| owd < m) {
            r.owd_min_ns = Some(owd);
            r.owd_min_len = len_bytes.min(usize::from(u16::MAX)) as u16;
        }
        r.owd_last_ns = owd;
        r.samples += 1;
        r.echo = Some((sent_ns, now));
        r.fresh = true;
        let sample = owd as f64;
        r.owd_smoothed = Some(match r.owd_smoothed {
            None => (sample, 0.0),
            Some((mean, deviation)) => (
                mean + (sample - mean) / 8.0,
                deviation + ((sample - mean).abs() - deviation) / 4.0,
            ),
        });
        r.owd_floor = Some(match r.owd_floor {
            None => sample,
            Some(floor) if sample < floor => sample,
            Some(floor) => floor + (sample - floor) / 1024.0,
        });
    }

    /// The latest a datagram on this line is likely to arrive, relative to its sending: the
    /// smoothed one-way delay plus four mean deviations (ns, offset included).
    pub fn owd_high_ns(&self) -> Option<f64> {
        self.receiving
            .owd_smoothed
            .map(|(mean, deviation)| mean + 4.0 * deviation)
    }

    /// The lowest one-way delay seen on this line recently (ns, offset included).
    pub fn owd_low_ns(&self) -> Option<f64> {
        self.receiving.owd_floor
    }

    /// The peer reported on what we sent on this line. A report that cannot be true (it
    /// counts a datagram beyond the last we sent, more datagrams than sequence numbers,
    /// more bytes than they hold, or a delay beyond [`MAX_REPORTED_OWD_NS`]) is refused
    /// and counted, and does not keep the line up.
    pub fn on_feedback(&mut self, now: Instant, report: &Feedback) {
        if !plausible(report, self.seq) {
            self.counters.refused_reports += 1;
            return;
        }
        self.last_feedback = now;
        if self.state == LineState::Down {
            // Reports of a line that is down span the outage: their loss and delivery say
            // nothing about the line's rate. It restarts when it comes back.
            return;
        }
        let mtu = &self.mtu;
        self.controller
            .on_feedback_excusing(now, report, |from, to| mtu.lost_between(from, to));
    }

    /// The peer echoed one of our timestamps: a round-trip sample (refused and counted
    /// beyond [`MAX_ECHO_RTT`]).
    pub fn on_echo(&mut self, now: Instant, echoed_ns: u64, held_ns: u64) {
        let rtt = now
            .as_nanos()
            .saturating_sub(echoed_ns)
            .saturating_sub(held_ns);
        if rtt > MAX_ECHO_RTT.as_nanos() {
            self.counters.refused_reports += 1;
            return;
        }
        if rtt > 0 {
            self.controller.on_rtt(Duration::from_nanos(rtt));
        }
    }

    /// Whether a report (and echo) is due on this line at `now`: a datagram the line sends
    /// now carries it.
    pub fn report_due(&self, now: Instant, timers: &LineTimers) -> bool {
        self.probe_ack.is_some()
            || self.receiving.fresh && now >= self.last_report + timers.feedback
    }

    /// When the line's due report stops waiting for data to ride on and goes in a datagram
    /// of its own (`None`: nothing to report). A probe's acknowledgement goes at once.
    /// Otherwise a report due at `due` rides on the line's next data datagram, for at
    /// most [`LineTimers::report_grace`]; a line that sent no data for a report interval
    /// is not expected to send any, and sends its report alone when due.
    ///
    /// Only the line's own datagrams carry its report: its Echo's round trip is the
    /// line's (the controller's `tau` and the path MTU search's timeouts are per line).
    pub fn report_alone_at(&self, timers: &LineTimers) -> Option<Instant> {
        if self.probe_ack.is_some() {
            return Some(Instant::ZERO);
        }
        if !self.receiving.fresh {
            return None;
        }
        let due = self.last_report + timers.feedback;
        let no_data_expected = (self.last_data_sent + timers.feedback).max(due);
        Some(no_data_expected.min(due + timers.report_grace))
    }

    /// Whether the line must send a datagram at `now`, with or without data: its report
    /// waited long enough for data to ride on ([`Line::report_alone_at`]), or its
    /// keepalive is due.
    pub fn must_send(&self, now: Instant, timers: &LineTimers) -> bool {
        self.report_alone_at(timers).is_some_and(|at| now >= at) || self.keepalive_due(now, timers)
    }

    /// Whether the line must send something at `now` to stay alive (keepalive, or a probe
    /// while down).
    pub fn keepalive_due(&self, now: Instant, timers: &LineTimers) -> bool {
        if self.exhausted() {
            return false;
        }
        let every = match self.state {
            LineState::Up => timers.keepalive,
            LineState::Down => timers.probe_down,
        };
        now >= self.last_sent + every
    }

    /// The report and echo frames for this line, written at `now`; marks them sent.
    pub fn take_report(&mut self, now: Instant) -> [Frame<'static>; 2] {
        self.last_report = now;
        let r = &mut self.receiving;
        r.fresh = false;
        let feedback = Feedback {
            line: self.index,
            highest_seq: self.replay.highest(),
            received_packets: r.received_packets,
            received_bytes: r.received_bytes,
            report_ns: now.as_nanos(),
            owd_min_ns: r.owd_min_ns.unwrap_or(r.owd_last_ns),
            owd_last_ns: r.owd_last_ns,
            samples: r.samples,
            owd_min_len: r.owd_min_len,
        };
        r.owd_min_ns = None;
        r.samples = 0;
        let (echoed_ns, arrived) = r.echo.unwrap_or((0, now));
        let echo = Frame::Echo {
            line: self.index,
            echoed_ns,
            held_ns: now.saturating_since(arrived).as_nanos(),
        };
        [Frame::Feedback(feedback), echo]
    }

    /// This end did not run for `away`, up to `now` (its process was not scheduled): the
    /// peer's silence in that time was not heard, and reports of what we did not send
    /// could not come, so neither counts towards `down_after`.
    pub fn excuse_absence(&mut self, now: Instant, away: Duration) {
        self.last_received = (self.last_received + away).min(now);
        self.last_feedback = (self.last_feedback + away).min(now);
    }

    /// Updates the line's state at `now`: down after `down_after` without hearing from the
    /// peer or without a report of what we sent; up again once both come back. Returns
    /// whether the state changed.
    pub fn update_state(&mut self, now: Instant, timers: &LineTimers) -> bool {
        let heard = now.saturating_since(self.last_received) < timers.down_after;
        let reported = now.saturating_since(self.last_feedback) < timers.down_after;
        let next = if heard && reported {
            LineState::Up
        } else {
            LineState::Down
        };
        if next == self.state {
            return false;
        }
        self.state = next;
        self.state_since = now;
        match next {
            LineState::Down => {
                self.counters.went_down += 1;
                self.controller.suspend();
            }
            LineState::Up => {
                self.counters.came_back += 1;
                self.controller.restart(now);
                self.mtu.restart(now);
            }
        }
        true
    }

    /// When the line's state may next change, its keepalive or report falls due.
    pub fn poll_at(&self, timers: &LineTimers) -> Instant {
        let keepalive = self.last_sent
            + match self.state {
                LineState::Up => timers.keepalive,
                LineState::Down => timers.probe_down,
            };
        let mut at = keepalive;
        if let Some(report) = self.report_alone_at(timers) {
            at = at.min(report);
        }
        if self.state == LineState::Up {
            at = at.min(self.last_received.min(self.last_feedback) + timers.down_after);
            at = at.min(self.mtu.poll_at(self.controller.srtt()));
        }
        at
    }

    /// Since when the line is in its state.
    pub fn state_since(&self) -> Instant {
        self.state_since
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): the probes its path MTU search
    /// remembers and the reports its controller keeps (its replay window and base delay
    /// are fixed arrays).
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("line.mtu_probes", self.mtu.remembered());
        sizes.add("line.controller_history", self.controller.history_len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_that_sent(datagrams: u64) -> Line {
        let mut line = Line::new(0, ControllerConfig::default(), 1472, Instant::ZERO);
        for _ in 0..datagrams {
            line.next_seq();
        }
        line
    }

    fn report(highest_seq: u64, packets: u64, bytes: u64, report_ns: u64) -> Feedback {
        Feedback {
            line: 0,
            highest_seq,
            received_packets: packets,
            received_bytes: bytes,
            report_ns,
            owd_min_ns: 20_000_000,
            owd_last_ns: 20_000_000,
            samples: 1,
            owd_min_len: 1472,
        }
    }

    /// Regression (issue 27): a report whose received count went down made the controller
    /// subtract past zero (a panic in debug builds, a wrap to 2^64 in release), and
    /// `u64::MAX`-style figures reached the pacer and the scheduler's sums.
    #[test]
    fn reports_with_impossible_counters_are_refused_and_nothing_overflows() {
        let mut line = line_that_sent(100);
        let ms = |n: u64| Instant::from_millis(n);
        line.on_feedback(ms(10), &report(50, 50, 50 * 1472, 10_000_000));
        // Fewer datagrams received than the previous report said: ignored, no panic.
        line.on_feedback(ms(20), &report(60, 40, 60 * 1472, 20_000_000));
        line.on_feedback(ms(30), &report(70, 70, 70 * 1472, 30_000_000));
        assert_eq!(line.counters().refused_reports, 0, "plausible so far");
        let absurd = [
            report(u64::MAX, u64::MAX, u64::MAX, u64::MAX),
            report(101, 80, 80 * 1472, 40_000_000), // a datagram we never sent
            report(80, 81, 80 * 1472, 40_000_000),  // more datagrams than numbers
            report(80, 80, 80 * 65_508, 40_000_000), // more bytes than they hold
            Feedback {
                owd_min_ns: i64::MAX,
                ..report(80, 80, 80 * 1472, 40_000_000)
            },
            Feedback {
                owd_last_ns: i64::MIN,
                ..report(80, 80, 80 * 1472, 40_000_000)
            },
        ];
        for (k, report) in absurd.iter().enumerate() {
            line.on_feedback(ms(40), report);
            assert_eq!(line.counters().refused_reports, k as u64 + 1, "{report:?}");
        }
        // The figures in use are still the plausible ones.
        assert!(line.controller().owd_ns() == Some(20_000_000));
        assert!(line.controller().rate().as_f64().is_finite());
        // An echo of a timestamp from the start of time is no round trip.
        line.on_echo(Instant::from_secs(3600), 0, 0);
        assert_eq!(line.counters().refused_reports, absurd.len() as u64 + 1);
        assert_eq!(line.controller().srtt(), None);
        line.on_echo(ms(40), 0, u64::MAX);
        assert_eq!(
            line.controller().srtt(),
            None,
            "held longer than it took: no sample"
        );
    }

    /// The controller, on its own, also survives a count that goes backwards.
    #[test]
    fn the_controller_ignores_a_received_count_that_goes_backwards() {
        let mut controller = RateController::new(ControllerConfig::default(), Instant::ZERO);
        controller.on_feedback(
            Instant::from_millis(10),
            &report(50, 50, 50_000, 10_000_000),
        );
        controller.on_feedback(
            Instant::from_millis(20),
            &report(60, 10, 60_000, 20_000_000),
        );
        assert!((0.0..=1.0).contains(&controller.loss()));
    }
}
