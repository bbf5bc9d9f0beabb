//! What limits a live TCP transfer, from what its kernel says about it: the socket's
//! `tcp_info` and memory, sampled over time (`pathlab inspect`).
//!
//! The triage is web100's (RFC 4898 `SndLimTime{Rwin,Cwnd,Snd}`) as Linux keeps it since
//! 4.10: `tcpi_busy_time` is the time the socket had data to send or in flight, and the
//! parts of it spent blocked by the peer's advertised window (`tcpi_rwnd_limited`) and by
//! the send buffer (`tcpi_sndbuf_limited`); the rest of the busy time the congestion window
//! (the network) set the pace, and the time not busy the application had nothing to send.
//! Over an interval of `dt`, with `d` the change of each counter:
//!
//! - receiver's window `R = d rwnd_limited`,
//! - send buffer `S = d sndbuf_limited`,
//! - congestion `C = d busy - R - S`,
//! - application `A = dt - d busy`;
//!
//! the largest share of `dt` is the verdict, with the number that explains it: the peer's
//! window over the RTT for `R` (what it caps the rate at), the send buffer over the RTT for
//! `S`, retransmissions and RTT growth for `C`. A finite slow-start threshold on a
//! connection that has lost nothing came from the kernel's metrics cache (seed 001: a cached
//! ssthresh capped a fresh transfer's window at 1.45 MB).
//!
//! Nothing here reads a socket or a clock: samples come in with their instants.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use pathlab_core::format::{self, Digits};

mod select;
mod tcp_info;
#[cfg(test)]
mod tests;
mod watch;

pub use select::Selector;
pub use tcp_info::{SocketMemory, TcpInfo, INFINITE_SSTHRESH, TCP_STATES};
pub use watch::{ConnectionReport, InspectReport, Watch};

/// One look at one TCP socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketSample {
    /// When it was taken, ns since the watch began.
    pub at_ns: u64,
    /// The socket's own address.
    pub local: SocketAddr,
    /// The peer's address.
    pub remote: SocketAddr,
    /// The kernel's cookie of the socket: what tells two sockets of the same addresses apart.
    pub cookie: u64,
    /// The socket's inode (what /proc/PID/fd links to), 0 when the kernel hides it.
    pub inode: u64,
    /// The owner's user id.
    pub uid: u32,
    /// Bytes not yet acknowledged by the peer, or queued to send (`idiag_wqueue`).
    pub send_queue: u32,
    /// Bytes received and not read by the application (`idiag_rqueue`).
    pub recv_queue: u32,
    /// The congestion control's name.
    pub congestion: Option<String>,
    /// The kernel's `tcp_info`, if it gave one.
    pub info: Option<TcpInfo>,
    /// The socket's memory, if the kernel gave it.
    pub memory: Option<SocketMemory>,
}

impl SocketSample {
    /// `local -> remote` as `ss` prints it.
    pub fn name(&self) -> String {
        format!("{} -> {}", self.local, self.remote)
    }
}

/// Where an interval's time went, as fractions of it (they add up to 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Blocked by the peer's advertised window.
    pub receiver_window: f64,
    /// Blocked by the send buffer.
    pub send_buffer: f64,
    /// Paced by the congestion window (the network).
    pub congestion: f64,
    /// Nothing to send: the application.
    pub application: f64,
}

impl Limits {
    /// From the changes of busy, rwnd-limited and sndbuf-limited time over `dt_us`.
    fn from_deltas(dt_us: f64, busy_us: f64, rwnd_us: f64, sndbuf_us: f64) -> Limits {
        if dt_us <= 0.0 {
            return Limits::default();
        }
        // The counters are read at slightly different moments than `dt`: clamp so the
        // shares stay within the interval.
        let busy = busy_us.clamp(0.0, dt_us);
        let rwnd = rwnd_us.clamp(0.0, busy);
        let sndbuf = sndbuf_us.clamp(0.0, busy - rwnd);
        Limits {
            receiver_window: rwnd / dt_us,
            send_buffer: sndbuf / dt_us,
            congestion: (busy - rwnd - sndbuf) / dt_us,
            application: (dt_us - busy) / dt_us,
        }
    }

    /// The largest share, with its kind.
    pub fn largest(&self) -> (Limit, f64) {
        [
            (Limit::ReceiverWindow, self.receiver_window),
            (Limit::SendBuffer, self.send_buffer),
            (Limit::Congestion, self.congestion),
            (Limit::Application, self.application),
        ]
        .into_iter()
        .fold((Limit::Application, f64::MIN), |best, next| {
            if next.1 > best.1 {
                next
            } else {
                best
            }
        })
    }
}

/// What one interval between two samples of a connection shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Start and end, ns since the watch began.
    pub from_ns: u64,
    /// End, ns since the watch began.
    pub to_ns: u64,
    /// Whether this end sent data in the interval (otherwise it only received).
    pub sending: bool,
    /// Bytes acknowledged by the peer (sending) or received (receiving) per second, as bits.
    pub throughput_bps: f64,
    /// Congestion window at the end, segments.
    pub cwnd: u32,
    /// The MSS it sends with, bytes (what turns segments into bytes).
    #[serde(default)]
    pub mss: u32,
    /// Segments; `None` before the first (infinite).
    pub ssthresh: Option<u32>,
    /// The peer's advertised window, bytes (0 when the kernel does not say).
    pub peer_window: u32,
    /// Bytes sent and not acknowledged (unacked segments x MSS).
    pub in_flight_bytes: u64,
    /// Smoothed RTT at the end, us.
    pub srtt_us: u32,
    /// Its variation, us.
    pub rttvar_us: u32,
    /// Smallest RTT seen, us.
    pub min_rtt_us: u32,
    /// Segments and bytes retransmitted in the interval.
    pub retrans_segments: u32,
    /// Bytes retransmitted in the interval.
    pub retrans_bytes: u64,
    /// Bits/s.
    pub pacing_rate_bps: f64,
    /// The kernel's delivery-rate estimate, bits/s.
    pub delivery_rate_bps: f64,
    /// Bytes in the send queue at the end.
    pub send_queue: u32,
    /// Bytes in the receive queue at the end.
    pub recv_queue: u32,
    /// Where the time went.
    pub limits: Limits,
}

/// The interval between two samples of one connection (`earlier` first).
pub fn interval(earlier: &SocketSample, later: &SocketSample) -> Option<Interval> {
    let (a, b) = (earlier.info?, later.info?);
    let dt_ns = later.at_ns.saturating_sub(earlier.at_ns);
    if dt_ns == 0 {
        return None;
    }
    let seconds = dt_ns as f64 * 1e-9;
    let acked = b.bytes_acked.saturating_sub(a.bytes_acked);
    let received = b.bytes_received.saturating_sub(a.bytes_received);
    let sending = acked > 0 || b.data_segs_out > a.data_segs_out || b.unacked > 0;
    let moved = if sending { acked } else { received };
    let mut limits = Limits::from_deltas(
        dt_ns as f64 * 1e-3,
        b.busy_time_us.saturating_sub(a.busy_time_us) as f64,
        b.rwnd_limited_us.saturating_sub(a.rwnd_limited_us) as f64,
        b.sndbuf_limited_us.saturating_sub(a.sndbuf_limited_us) as f64,
    );
    // The kernel's clocks undercount both windows: see `binding`. Where the same bound held
    // at both ends of the interval, the busy time they left to congestion is that bound's.
    match (binding(earlier), binding(later)) {
        (Some(Limit::ReceiverWindow), Some(Limit::ReceiverWindow)) => {
            limits.receiver_window += limits.congestion;
            limits.congestion = 0.0;
        }
        (Some(Limit::SendBuffer), Some(Limit::SendBuffer)) => {
            limits.send_buffer += limits.congestion;
            limits.congestion = 0.0;
        }
        (Some(Limit::Application), Some(Limit::Application)) => {
            limits.application += limits.congestion;
            limits.congestion = 0.0;
        }
        _ => {}
    }
    Some(Interval {
        from_ns: earlier.at_ns,
        to_ns: later.at_ns,
        sending,
        throughput_bps: moved as f64 * 8.0 / seconds,
        cwnd: b.snd_cwnd,
        mss: b.snd_mss,
        ssthresh: (b.snd_ssthresh < INFINITE_SSTHRESH).then_some(b.snd_ssthresh),
        peer_window: b.snd_wnd,
        in_flight_bytes: u64::from(b.unacked) * u64::from(b.snd_mss),
        srtt_us: b.rtt_us,
        rttvar_us: b.rttvar_us,
        min_rtt_us: b.min_rtt_us,
        retrans_segments: b.total_retrans.saturating_sub(a.total_retrans),
        retrans_bytes: b.bytes_retrans.saturating_sub(a.bytes_retrans),
        pacing_rate_bps: b.pacing_rate as f64 * 8.0,
        delivery_rate_bps: b.delivery_rate as f64 * 8.0,
        send_queue: later.send_queue,
        recv_queue: later.recv_queue,
        limits,
    })
}

/// Which bound on the bytes in flight holds at this look: the peer's window (it is smaller
/// than the congestion window and in flight is within 2 MSS of it), the send buffer (at
/// least three quarters full, and in flight short of both windows by more than 2 MSS), the
/// application (in flight short of both windows by more than 2 MSS and nothing unsent), or
/// else the congestion window; `None` when nothing is in flight or waits to be sent.
///
/// The kernel's own clocks miss much of the first two: it stops its rwnd-limited clock
/// whenever TSO defers a send to wait for more window (`tcp_tso_should_defer`), and its
/// sndbuf-limited clock runs only while the application sleeps on a full buffer. Measured
/// through the emulator: a transfer held to its peer's 41 KB window at 20 ms (16.8 Mbit/s
/// exactly) read 44% rwnd-limited and 56% congestion; one held by a 32 KB send buffer read
/// 48% congestion. web100 (RFC 4898) attributed each send to the smaller of the bounds, as
/// this does at each look.
fn binding(sample: &SocketSample) -> Option<Limit> {
    let info = sample.info?;
    if info.unacked == 0 && info.notsent_bytes == 0 {
        return None;
    }
    let mss = u64::from(info.snd_mss.max(1));
    let in_flight = u64::from(info.unacked) * mss;
    let cwnd = u64::from(info.snd_cwnd) * mss;
    let peer = (info.has_peer_window() && info.snd_wnd > 0).then_some(u64::from(info.snd_wnd));
    if let Some(window) = peer {
        if window < cwnd && in_flight + 2 * mss >= window {
            return Some(Limit::ReceiverWindow);
        }
    }
    let smaller = peer.map_or(cwnd, |w| w.min(cwnd));
    if let Some(memory) = sample.memory {
        let full = u64::from(memory.wmem_queued) * 4 >= u64::from(memory.sndbuf) * 3;
        if memory.sndbuf > 0 && full && in_flight + 2 * mss < smaller {
            return Some(Limit::SendBuffer);
        }
    }
    // Both windows open, nothing waiting to be sent: the application has not written more
    // (an application that waits for an answer to each block keeps data in flight, so the
    // kernel counts it busy the whole time).
    if in_flight + 2 * mss < smaller && info.notsent_bytes == 0 {
        return Some(Limit::Application);
    }
    Some(Limit::Congestion)
}

/// What limited a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// The peer's advertised window: the receiving application or its buffer.
    ReceiverWindow,
    /// This end's send buffer.
    SendBuffer,
    /// The congestion window: the network (losses, a queue) or slow start.
    Congestion,
    /// The application did not give TCP data fast enough.
    Application,
    /// This end only receives: the sender's end says what limits the transfer.
    Receiving,
    /// No data moved.
    Idle,
    /// The kernel does not say where the time went (before 4.10).
    Unknown,
}

impl Limit {
    /// Its name in a sentence or a table.
    pub fn name(self) -> &'static str {
        match self {
            Limit::ReceiverWindow => "receiver's window",
            Limit::SendBuffer => "send buffer",
            Limit::Congestion => "congestion",
            Limit::Application => "application",
            Limit::Receiving => "receiving",
            Limit::Idle => "idle",
            Limit::Unknown => "unknown",
        }
    }
}

/// A verdict on a connection over the time it was watched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// What limited it most.
    pub limit: Limit,
    /// The share of the watched time the limit held.
    pub share: f64,
    /// Where all the time went.
    pub limits: Limits,
    /// Bits/s moved over the watch.
    pub throughput_bps: f64,
    /// What the limit caps the rate at, bits/s, where it is a window over an RTT.
    pub cap_bps: Option<f64>,
    /// A slow-start threshold from the metrics cache, bytes, when one was seen.
    pub cached_ssthresh_bytes: Option<u64>,
    /// The sentence a user acts on.
    pub sentence: String,
}

/// Shares below this are not called a limit: the transfer ran free.
const LEAST_SHARE: f64 = 0.2;

/// The verdict on a connection watched from `first` to `last` (the same socket), with
/// the `intervals` between its looks: where the time went is their sum, each corrected by
/// what bound held at its ends (see `binding`); without them, the one interval from
/// `first` to `last`.
pub fn verdict(first: &SocketSample, last: &SocketSample, intervals: &[Interval]) -> Verdict {
    let Some(whole) = interval(first, last) else {
        return Verdict {
            limit: Limit::Unknown,
            share: 0.0,
            limits: Limits::default(),
            throughput_bps: 0.0,
            cap_bps: None,
            cached_ssthresh_bytes: None,
            sentence: "watched too briefly, or the kernel gave no tcp_info: nothing to say".into(),
        };
    };
    let (a, b) = (
        first.info.expect("interval had it"),
        last.info.expect("interval had it"),
    );
    let cached = cached_ssthresh(&a, &b);
    let moved = b.bytes_acked.saturating_sub(a.bytes_acked)
        + b.bytes_received.saturating_sub(a.bytes_received);
    let rtt_s = f64::from(b.rtt_us.max(1)) * 1e-6;
    let rtt = format::time(f64::from(b.rtt_us) * 1e-6, Digits::up_to(2));
    let mut verdict = Verdict {
        limit: Limit::Idle,
        share: 0.0,
        limits: summed(intervals).unwrap_or(whole.limits),
        throughput_bps: whole.throughput_bps,
        cap_bps: None,
        cached_ssthresh_bytes: cached,
        sentence: String::new(),
    };
    let rate = format::rate(whole.throughput_bps, Digits::up_to(2));
    if moved == 0 {
        verdict.sentence = "idle: no data moved while it was watched".into();
        return verdict;
    }
    if !whole.sending {
        let (cap, sentence) = receiving_sentence(&b, last, &rate, rtt_s, &rtt);
        verdict.limit = Limit::Receiving;
        verdict.cap_bps = Some(cap);
        verdict.sentence = sentence;
        return verdict;
    }
    if !b.has_limits() {
        verdict.limit = Limit::Unknown;
        verdict.sentence = format!(
            "{rate}; this kernel does not say where the time went (tcp_info of {} bytes, 4.10 \
             and later keep busy, rwnd-limited and sndbuf-limited time)",
            b.len
        );
        return verdict;
    }
    let (limit, share) = verdict.limits.largest();
    verdict.limit = limit;
    verdict.share = share;
    let percent = format::fraction_as_percent(share, Digits::fixed(0));
    verdict.sentence = match limit {
        Limit::ReceiverWindow => {
            let (cap, sentence) = receiver_window_sentence(&percent, intervals, &b);
            verdict.cap_bps = Some(cap);
            sentence
        }
        Limit::SendBuffer => {
            let (cap, sentence) = send_buffer_sentence(&percent, intervals, &b, last);
            verdict.cap_bps = Some(cap);
            sentence
        }
        Limit::Congestion => congestion_sentence(&percent, &rate, &a, &b, cached),
        Limit::Application => format!(
            "application-limited {percent} of the time: the sender waited for data from the \
             application (it moved {rate}); TCP and the path could carry more"
        ),
        Limit::Receiving | Limit::Idle | Limit::Unknown => unreachable!("not among the shares"),
    };
    if share < LEAST_SHARE {
        verdict.sentence = format!(
            "nothing held it back for long ({rate}; the largest share: {})",
            verdict.sentence
        );
    }
    verdict
}

/// What a connection typically showed in the intervals a limit held (the largest share):
/// medians of the peer's window, the bytes in flight and the smoothed RTT, and the mean
/// rate; the last look's where no interval is.
struct Typical {
    window: u64,
    in_flight: u64,
    srtt_us: u32,
    throughput_bps: f64,
}

impl Typical {
    fn of(intervals: &[Interval], limit: Limit, last: &TcpInfo) -> Typical {
        let held: Vec<&Interval> = intervals
            .iter()
            .filter(|i| i.sending && i.limits.largest().0 == limit)
            .collect();
        if held.is_empty() {
            return Typical {
                window: u64::from(last.snd_wnd),
                in_flight: u64::from(last.unacked) * u64::from(last.snd_mss),
                srtt_us: last.rtt_us,
                throughput_bps: 0.0,
            };
        }
        let median = |values: &mut dyn Iterator<Item = u64>| {
            pathlab_probe::rtt::percentiles(values.map(|v| v as i64)).p50_ns
        };
        Typical {
            window: median(&mut held.iter().map(|i| u64::from(i.peer_window))),
            in_flight: median(&mut held.iter().map(|i| i.in_flight_bytes)),
            srtt_us: median(&mut held.iter().map(|i| u64::from(i.srtt_us))) as u32,
            throughput_bps: held.iter().map(|i| i.throughput_bps).sum::<f64>() / held.len() as f64,
        }
    }

    fn rtt_s(&self) -> f64 {
        f64::from(self.srtt_us.max(1)) * 1e-6
    }

    fn rtt_text(&self) -> String {
        format::time(f64::from(self.srtt_us) * 1e-6, Digits::up_to(2))
    }

    /// The rate `bytes` a round trip caps the connection at (bits/s), and the words that
    /// say so: "at a R RTT caps it at C; it moved T then".
    fn cap(&self, bytes: u64) -> (f64, String) {
        let cap = bytes as f64 * 8.0 / self.rtt_s();
        let words = format!(
            "at a {} RTT caps it at {}; it moved {} then",
            self.rtt_text(),
            format::rate(cap, Digits::up_to(2)),
            format::rate(self.throughput_bps, Digits::up_to(2)),
        );
        (cap, words)
    }
}

/// Where the time of all `intervals` went, weighted by their lengths; `None` for none.
fn summed(intervals: &[Interval]) -> Option<Limits> {
    let total: f64 = intervals
        .iter()
        .map(|i| i.to_ns.saturating_sub(i.from_ns) as f64)
        .sum();
    if total <= 0.0 {
        return None;
    }
    let mut sum = Limits::default();
    for i in intervals {
        let weight = i.to_ns.saturating_sub(i.from_ns) as f64 / total;
        sum.receiver_window += i.limits.receiver_window * weight;
        sum.send_buffer += i.limits.send_buffer * weight;
        sum.congestion += i.limits.congestion * weight;
        sum.application += i.limits.application * weight;
    }
    Some(sum)
}

/// This end only receives: what the window it advertises caps the sender at (bits/s, over
/// the RTT of `rtt_s` seconds, formatted as `rtt`), and the sentence that says so and
/// sends the user to the sender.
fn receiving_sentence(
    b: &TcpInfo,
    last: &SocketSample,
    rate: &str,
    rtt_s: f64,
    rtt: &str,
) -> (f64, String) {
    let window = if b.rcv_wnd > 0 {
        b.rcv_wnd
    } else {
        b.rcv_space
    };
    let cap = f64::from(window) * 8.0 / rtt_s;
    let sentence = format!(
        "this end only receives ({rate}); what limits the transfer shows at the sender \
         (run `pathlab inspect` there). This end advertises a window of {} (receive buffer \
         {}), which caps the sender at {} over a {rtt} RTT",
        format::bytes_binary(u64::from(window), Digits::up_to(2)),
        last.memory.map_or_else(
            || "unknown".to_owned(),
            |m| format::bytes_binary(u64::from(m.rcvbuf), Digits::up_to(2))
        ),
        format::rate(cap, Digits::up_to(2)),
    );
    (cap, sentence)
}

/// The receiver's window held it back most: what the typical window caps the rate at over
/// the typical RTT of those intervals (bits/s), and the sentence that says so.
fn receiver_window_sentence(percent: &str, intervals: &[Interval], b: &TcpInfo) -> (f64, String) {
    let held = Typical::of(intervals, Limit::ReceiverWindow, b);
    let (cap, caps) = held.cap(held.window);
    let sentence = format!(
        "limited by the receiver's window {percent} of the time ({} {caps}): the receiving \
         application, or its receive buffer (SO_RCVBUF, net.ipv4.tcp_rmem), is the \
         bottleneck; see `pathlab tune`",
        format::bytes_binary(held.window, Digits::up_to(2)),
    );
    (cap, sentence)
}

/// The send buffer held it back most: what the bytes it let be in flight cap the rate at
/// over the typical RTT of those intervals (bits/s), and the sentence that says so.
fn send_buffer_sentence(
    percent: &str,
    intervals: &[Interval],
    b: &TcpInfo,
    last: &SocketSample,
) -> (f64, String) {
    let held = Typical::of(intervals, Limit::SendBuffer, b);
    let buffer = last.memory.map_or(held.in_flight, |m| u64::from(m.sndbuf));
    let (cap, caps) = held.cap(held.in_flight.max(1));
    let sentence = format!(
        "limited by the send buffer {percent} of the time (the buffer, {} as the kernel \
         counts it, let {} be in flight, which {caps}): raise the sender's SO_SNDBUF or \
         net.ipv4.tcp_wmem; see `pathlab tune`",
        format::bytes_binary(buffer, Digits::up_to(2)),
        format::bytes_binary(held.in_flight, Digits::up_to(2)),
    );
    (cap, sentence)
}

/// The congestion window set the pace: say why, from losses, RTT growth or a cached
/// threshold.
fn congestion_sentence(
    percent: &str,
    rate: &str,
    a: &TcpInfo,
    b: &TcpInfo,
    cached: Option<u64>,
) -> String {
    let sent = b.bytes_sent.saturating_sub(a.bytes_sent).max(1);
    let retrans = b.bytes_retrans.saturating_sub(a.bytes_retrans);
    let retrans_share = retrans as f64 / sent as f64;
    let head = format!(
        "limited by congestion control {percent} of the time (cwnd {} segments, it moved {rate})",
        b.snd_cwnd
    );
    if let Some(bytes) = cached {
        return format!(
            "{head}: a cached ssthresh of {} ended slow start early (the kernel kept it from an \
             earlier connection to this host; net.ipv4.tcp_no_metrics_save=1 stops that)",
            format::bytes_binary(bytes, Digits::up_to(2))
        );
    }
    let queue_us = b.rtt_us.saturating_sub(b.min_rtt_us);
    if retrans_share >= 0.001 {
        format!(
            "{head}: the path loses packets ({} of the bytes were sent again, {} \
             segments)",
            format::fraction_as_percent(retrans_share, Digits::fixed(2)),
            b.total_retrans.saturating_sub(a.total_retrans)
        )
    } else if b.min_rtt_us > 0 && queue_us > b.min_rtt_us / 2 {
        format!(
            "{head}: a queue on the path (RTT {} against a minimum of {}: {} of queueing)",
            format::time(f64::from(b.rtt_us) * 1e-6, Digits::up_to(2)),
            format::time(f64::from(b.min_rtt_us) * 1e-6, Digits::up_to(2)),
            format::time(f64::from(queue_us) * 1e-6, Digits::up_to(2))
        )
    } else {
        format!("{head}: the window was still growing or the path is full (no losses, no queue)")
    }
}

/// A slow-start threshold the connection could only have had from the kernel's metrics
/// cache, in bytes: finite at the first look, while the connection was young (it had not
/// yet had as many bytes acknowledged as the threshold: the kernel also sets a finite one
/// later, after an idle period or a stretch the application held it back), and nothing
/// was lost, retransmitted or marked until the last look.
pub fn cached_ssthresh(first: &TcpInfo, last: &TcpInfo) -> Option<u64> {
    let threshold = u64::from(first.snd_ssthresh) * u64::from(first.snd_mss);
    let finite = first.snd_ssthresh > 0 && first.snd_ssthresh < INFINITE_SSTHRESH;
    let young = first.bytes_acked < threshold;
    let untouched = last.total_retrans == 0
        && last.bytes_retrans == 0
        && last.total_rto == 0
        && last.delivered_ce == 0
        && last.lost == 0;
    (finite && young && untouched).then_some(threshold)
}
