//! From a connection's state at the end of the capture to its report: RTT from the two
//! halves, the time slices' limits and the verdict, RFC 6349's metrics, the series.

use pathlab_core::{quantile, Instant};

use super::flow::Flow;
use super::{
    AnalyzerConfig, Connection, ConnectionReport, FlowReport, FlowSeries, FlowVerdict,
    RetransmissionCounts, RetransmissionKind, RttSummary, TraceMetrics, Vantage, VantageKind,
    WindowSummary,
};
use crate::diagnosis::{Limit, Limits};
use pathlab_core::format::{self, Digits};
use pathlab_probe::rfc6349::{
    buffer_delay_percent, ideal_tcp_rate_bps, tcp_efficiency, transfer_time_ratio, transfer_time_s,
    window_limited_rate_bps, PacketOverhead,
};

/// The most points a series keeps (retransmissions are all kept).
pub const MAX_POINTS: usize = 20_000;
/// A half of the round trip below this share of the whole puts the capture at that end.
const VANTAGE_SHARE: f64 = 0.05;
/// Time slices when no RTT was measured, ns.
const DEFAULT_SLICE_NS: u64 = 10_000_000;
/// The most time slices a transfer is cut into.
const MAX_SLICES: u64 = 200_000;
/// Slices of the goodput and throughput series over a transfer.
const RATE_SLICES: u64 = 100;

pub(super) fn report(connection: &Connection, config: &AnalyzerConfig) -> ConnectionReport {
    let client_half = connection.half_min(0);
    let server_half = connection.half_min(1);
    let vantage = vantage(client_half, server_half);
    let handshake_seen = connection.syn[0].is_some() && connection.syn[1].is_some();
    let mut notes = Vec::new();
    if !handshake_seen {
        notes.push(
            "the capture does not hold the handshake: the window scale is unknown, windows are \
             shown as advertised (unscaled) and the receiver's window is not judged"
                .to_owned(),
        );
    }
    if vantage.kind == VantageKind::Unknown {
        notes.push(
            "one half of the round trip was never measured (no handshake, no timestamps): RTTs \
             are from the capture point to the receiver and back only"
                .to_owned(),
        );
    }
    let mut flows: Vec<FlowReport> = (0..2)
        .filter(|&from| connection.flows[from].bytes_sent > 0)
        .map(|from| flow_report(connection, from, config))
        .collect();
    flows.sort_by_key(|flow| std::cmp::Reverse(flow.bytes));
    ConnectionReport {
        client: connection.ends[0],
        server: connection.ends[1],
        handshake_seen,
        start_ns: connection.first_at.as_nanos(),
        duration_ns: connection
            .last_at
            .saturating_since(connection.first_at)
            .as_nanos(),
        segments: connection.segments,
        vantage,
        flows,
        notes,
    }
}

fn vantage(client_half: Option<u64>, server_half: Option<u64>) -> Vantage {
    let kind = match (client_half, server_half) {
        (Some(client), Some(server)) => {
            // In floating point: two halves read from a capture may sum past u64.
            let whole = (client as f64 + server as f64).max(1.0);
            if (client as f64) < whole * VANTAGE_SHARE {
                VantageKind::Client
            } else if (server as f64) < whole * VANTAGE_SHARE {
                VantageKind::Server
            } else {
                VantageKind::Middle
            }
        }
        _ => VantageKind::Unknown,
    };
    Vantage {
        kind,
        client_half_ns: client_half,
        server_half_ns: server_half,
    }
}

/// RTT samples of `from`'s data: each sample of the half through the receiver plus the
/// latest sample of the half through the sender before it (the first one, before any).
fn rtt_samples(connection: &Connection, from: usize) -> (Vec<(Instant, u64)>, bool) {
    let near = &connection.halves[from];
    let far = &connection.halves[1 - from];
    let samples = far
        .iter()
        .map(|&(at, far_ns)| {
            let before = near.partition_point(|&(t, _)| t <= at);
            let near_ns = near.get(before.saturating_sub(1)).map_or(0, |&(_, ns)| ns);
            (at, far_ns.saturating_add(near_ns))
        })
        .collect();
    (samples, !near.is_empty())
}

fn summarize_rtt(samples: &[(Instant, u64)], both_halves: bool) -> RttSummary {
    let mut sorted: Vec<u64> = samples.iter().map(|&(_, ns)| ns).collect();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return RttSummary {
            both_halves,
            ..RttSummary::default()
        };
    }
    RttSummary {
        samples: sorted.len() as u64,
        min_ns: sorted[0],
        median_ns: quantile::of_sorted(&sorted, 0.5).unwrap_or(0),
        p95_ns: quantile::of_sorted(&sorted, 0.95).unwrap_or(0),
        mean_ns: sorted.iter().map(|&ns| ns as f64).sum::<f64>() / sorted.len() as f64,
        both_halves,
    }
}

/// When the transfer ended: the first ACK of its last byte, else its last segment.
fn end_of_transfer(flow: &Flow) -> Instant {
    let last_data = flow.last_data_at.unwrap_or(Instant::ZERO);
    flow.acks
        .iter()
        .find(|ack| ack.acked >= flow.highest_end && ack.at >= last_data)
        .map_or(last_data, |ack| ack.at)
}

fn flow_report(connection: &Connection, from: usize, config: &AnalyzerConfig) -> FlowReport {
    let flow = &connection.flows[from];
    let to = 1 - from;
    let (samples, both_halves) = rtt_samples(connection, from);
    let rtt = summarize_rtt(&samples, both_halves);
    let start = flow.first_data_at.unwrap_or(Instant::ZERO);
    let end = end_of_transfer(flow);
    let duration_ns = end.saturating_since(start).as_nanos();
    let bytes = flow.unique_bytes();
    let goodput_bps = if duration_ns > 0 {
        bytes as f64 * 8e9 / duration_ns as f64
    } else {
        0.0
    };
    let mut retransmissions = RetransmissionCounts::default();
    for r in &flow.retransmissions {
        retransmissions.total += 1;
        match r.kind {
            RetransmissionKind::Fast => retransmissions.fast += 1,
            RetransmissionKind::Rto => retransmissions.rto += 1,
            RetransmissionKind::Probe => retransmissions.probe += 1,
        }
        retransmissions.spurious += u64::from(r.spurious);
        retransmissions.lost_before_capture += u64::from(r.lost_before_capture);
    }
    let scale = connection.scale_of(to);
    let mut windows: Vec<u64> = flow.acks.iter().map(|a| a.window).collect();
    windows.sort_unstable();
    let mut zero_windows = flow.zero_windows.clone();
    if let Some(since) = flow.zero_since {
        zero_windows.push((since, connection.last_at));
    }
    let window = WindowSummary {
        scale,
        scale_known: scale.is_some(),
        max_bytes: windows.last().copied().unwrap_or(0),
        median_bytes: quantile::of_sorted(&windows, 0.5).unwrap_or(0),
        zero_window_acks: flow.zero_window_acks,
        zero_window_ns: zero_windows
            .iter()
            .map(|(a, b)| b.saturating_since(*a).as_nanos())
            .sum(),
    };
    // The receiver's MSS bounds the segments; a capture at a receiver with GRO holds
    // larger ones.
    let mss = connection.syn[to]
        .and_then(|syn| syn.mss)
        .map_or(flow.largest_payload, |mss| {
            u32::from(mss).min(flow.largest_payload.max(1))
        })
        .max(1);
    let metrics = metrics(flow, &rtt, config, bytes, duration_ns, mss);
    let limits = Slices::classify(connection, from, &rtt, start, end, mss, &zero_windows);
    let verdict = verdict(
        &limits,
        flow,
        &rtt,
        &retransmissions,
        &metrics,
        goodput_bps,
        scale,
    );
    FlowReport {
        from: connection.ends[from],
        to: connection.ends[to],
        bytes,
        bytes_transmitted: flow.bytes_sent,
        bytes_retransmitted: flow.retransmitted_bytes,
        data_segments: flow.data_segments,
        mss_bytes: flow.largest_payload,
        duration_ns,
        goodput_bps,
        rtt,
        retransmissions,
        out_of_order: flow.out_of_order,
        holes: flow.holes,
        dropped_at_capture: flow.dropped_at_capture,
        window,
        metrics,
        verdict,
        series: series(flow, &samples, start, end),
    }
}

fn metrics(
    flow: &Flow,
    rtt: &RttSummary,
    config: &AnalyzerConfig,
    bytes: u64,
    duration_ns: u64,
    mss: u32,
) -> TraceMetrics {
    let overhead = PacketOverhead::new(config.framing, flow.vlan, flow.ipv6, flow.timestamps);
    // The MTU of the full-size segments: the MSS in use and the headers every segment has.
    let mtu = mss + overhead.ip_header_bytes + overhead.tcp_header_bytes;
    let ideal_rate_bps = config
        .bottleneck_bps
        .filter(|rate| *rate > 0.0)
        .map(|rate| ideal_tcp_rate_bps(rate, mtu, &overhead));
    TraceMetrics {
        tcp_efficiency: tcp_efficiency(flow.bytes_sent, flow.retransmitted_bytes),
        buffer_delay_percent: (rtt.samples > 0 && rtt.min_ns > 0)
            .then(|| buffer_delay_percent(rtt.mean_ns, rtt.min_ns as f64)),
        ideal_rate_bps,
        transfer_time_ratio: ideal_rate_bps.filter(|_| duration_ns > 0).map(|ideal| {
            transfer_time_ratio(duration_ns as f64 * 1e-9, transfer_time_s(bytes, ideal))
        }),
        mtu_bytes: mtu,
    }
}

/// The transfer's time cut into slices of one minimum RTT, each with what limited it.
struct Slices {
    start: Instant,
    slice_ns: u64,
    window: Vec<bool>,
    idle_ns: Vec<u64>,
}

impl Slices {
    fn index(&self, at: Instant) -> usize {
        ((at.saturating_since(self.start).as_nanos() / self.slice_ns) as usize)
            .min(self.window.len() - 1)
    }

    /// Adds `[from, to)` to the slices' idle time.
    fn idle(&mut self, from: Instant, to: Instant) {
        let mut at = from;
        while at < to {
            let index = self.index(at);
            // A capture's times are its own: a slice of a huge minimum RTT ends past u64.
            let slice_end = Instant::from_nanos(
                self.start
                    .as_nanos()
                    .saturating_add((index as u64 + 1).saturating_mul(self.slice_ns)),
            );
            let until = slice_end.min(to);
            self.idle_ns[index] =
                self.idle_ns[index].saturating_add(until.saturating_since(at).as_nanos());
            if index + 1 == self.window.len() {
                break;
            }
            at = until;
        }
    }

    fn classify(
        connection: &Connection,
        from: usize,
        rtt: &RttSummary,
        start: Instant,
        end: Instant,
        mss: u32,
        zero_windows: &[(Instant, Instant)],
    ) -> Limits {
        let flow = &connection.flows[from];
        let duration = end.saturating_since(start).as_nanos().max(1);
        let mut slice_ns = if rtt.min_ns > 0 {
            rtt.min_ns
        } else {
            DEFAULT_SLICE_NS
        };
        slice_ns = slice_ns.max(duration.div_ceil(MAX_SLICES)).max(1);
        let count = duration.div_ceil(slice_ns).max(1) as usize;
        let mut slices = Slices {
            start,
            slice_ns,
            window: vec![false; count],
            idle_ns: vec![0; count],
        };
        let near_ns = connection.half_min(from).unwrap_or(0);
        // The receiver's window: a new segment reaching the edge the sender could know.
        if connection.scale_of(1 - from).is_some() {
            for send in flow.sends.iter().filter(|s| !s.retransmission) {
                let known_at = send.at.as_nanos().saturating_sub(near_ns);
                let known = flow.acks.partition_point(|a| a.at.as_nanos() <= known_at);
                if let Some(ack) = known.checked_sub(1).map(|i| flow.acks[i]) {
                    if send.end.saturating_add(i64::from(mss)) >= ack.right_edge {
                        let index = slices.index(send.at);
                        slices.window[index] = true;
                    }
                }
            }
        }
        for &(a, b) in zero_windows {
            let (first, last) = (slices.index(a.max(start)), slices.index(b.min(end)));
            for hit in &mut slices.window[first..=last] {
                *hit = true;
            }
        }
        // The application: everything ACKed, nothing new for longer than the sender needs
        // to answer an ACK.
        let mut sends = flow.sends.iter().filter(|s| !s.retransmission).peekable();
        let mut highest = i64::MIN;
        let mut idle_from: Option<Instant> = None;
        for ack in &flow.acks {
            while let Some(send) = sends.next_if(|s| s.at <= ack.at) {
                if let Some(from) = idle_from.take() {
                    let from = Instant::from_nanos(from.as_nanos().saturating_add(near_ns));
                    if from < send.at {
                        slices.idle(from, send.at);
                    }
                }
                highest = highest.max(send.end);
            }
            if ack.acked >= highest && highest > i64::MIN && ack.at < end {
                idle_from.get_or_insert(ack.at);
            }
        }
        let (mut window, mut application, mut congestion) = (0u64, 0u64, 0u64);
        for index in 0..count {
            if slices.window[index] {
                window += 1;
            } else if slices.idle_ns[index] >= slice_ns.div_ceil(2) {
                application += 1;
            } else {
                congestion += 1;
            }
        }
        let total = count as f64;
        Limits {
            receiver_window: window as f64 / total,
            send_buffer: 0.0,
            congestion: congestion as f64 / total,
            application: application as f64 / total,
        }
    }
}

fn verdict(
    limits: &Limits,
    flow: &Flow,
    rtt: &RttSummary,
    retransmissions: &RetransmissionCounts,
    metrics: &TraceMetrics,
    goodput_bps: f64,
    scale: Option<u8>,
) -> FlowVerdict {
    let (limit, share) = limits.largest();
    let percent = format::fraction_as_percent(share, Digits::fixed(0));
    let rate = format::rate(goodput_bps, Digits::up_to(2));
    let median_rtt = format::time(rtt.median_ns as f64 * 1e-9, Digits::up_to(2));
    let mut cap_bps = None;
    let mut sentence = match limit {
        Limit::ReceiverWindow => {
            // The window while it limited: the median of those advertised.
            let mut windows: Vec<u64> = flow.acks.iter().map(|a| a.window).collect();
            windows.sort_unstable();
            let window = quantile::of_sorted(&windows, 0.5).unwrap_or(0);
            let cap = window_limited_rate_bps(window, rtt.median_ns.max(1));
            cap_bps = Some(cap);
            format!(
                "limited by the receiver's window {percent} of the time: {} at a {median_rtt} \
                 RTT caps it at {} (it moved {rate}); the receiving application or its receive \
                 buffer (SO_RCVBUF, net.ipv4.tcp_rmem) is the bottleneck; see `pathlab tune`",
                format::bytes_binary(window, Digits::up_to(2)),
                format::rate(cap, Digits::up_to(2)),
            )
        }
        Limit::Application => format!(
            "application-limited {percent} of the time: everything sent was ACKed and the \
             sender had nothing new to send (it moved {rate}); TCP and the path could carry more"
        ),
        _ => {
            let head =
                format!("limited by congestion control {percent} of the time (it moved {rate})");
            let resent = 1.0 - metrics.tcp_efficiency.unwrap_or(1.0);
            if resent >= 0.001 {
                format!(
                    "{head}: the path loses packets ({} of the bytes were sent again: {} \
                     retransmissions, {} fast, {} after a timeout, {} probes, {} spurious)",
                    format::fraction_as_percent(resent, Digits::fixed(2)),
                    retransmissions.total,
                    retransmissions.fast,
                    retransmissions.rto,
                    retransmissions.probe,
                    retransmissions.spurious
                )
            } else if metrics.buffer_delay_percent.is_some_and(|p| p > 50.0) {
                format!(
                    "{head}: a queue on the path (mean RTT {} against a minimum of {}: buffer \
                     delay {})",
                    format::time(rtt.mean_ns * 1e-9, Digits::up_to(2)),
                    format::time(rtt.min_ns as f64 * 1e-9, Digits::up_to(2)),
                    format::percent_as_is(
                        metrics.buffer_delay_percent.unwrap_or(0.0),
                        Digits::fixed(0)
                    )
                )
            } else {
                format!(
                    "{head}: the congestion window was still growing or the path is full (no \
                     losses, no queue)"
                )
            }
        }
    };
    if scale.is_none() {
        sentence.push_str(
            " (the receiver's window was not judged: the capture lacks the handshake, so its \
             scale is unknown)",
        );
    }
    FlowVerdict {
        limit,
        share,
        limits: *limits,
        cap_bps,
        sentence,
    }
}

/// Every `len / MAX_POINTS`-th item, so a long series keeps its shape in bounded size.
fn thin<T: Copy>(items: impl ExactSizeIterator<Item = T>) -> Vec<T> {
    let stride = items.len().div_ceil(MAX_POINTS).max(1);
    items.step_by(stride).collect()
}

fn series(flow: &Flow, rtt: &[(Instant, u64)], start: Instant, end: Instant) -> FlowSeries {
    let position = |p: i64| p.max(0) as u64;
    let new_data: Vec<_> = flow.sends.iter().filter(|s| !s.retransmission).collect();
    let duration = end.saturating_since(start).as_nanos().max(1);
    let slice_ns = duration.div_ceil(RATE_SLICES).max(1_000_000);
    let slices = duration.div_ceil(slice_ns).max(1) as usize;
    let mut sent = vec![0u64; slices];
    let mut acked = vec![0u64; slices];
    let slice_of =
        |at: Instant| ((at.saturating_since(start).as_nanos() / slice_ns) as usize).min(slices - 1);
    for send in &flow.sends {
        sent[slice_of(send.at)] += (send.end - send.start) as u64;
    }
    let mut previous = 0i64;
    for ack in &flow.acks {
        if ack.acked > previous {
            acked[slice_of(ack.at)] += (ack.acked - previous) as u64;
            previous = ack.acked;
        }
    }
    let rate = |bytes: &[u64]| {
        bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                (
                    start.as_nanos().saturating_add(i as u64 * slice_ns),
                    b as f64 * 8e9 / slice_ns as f64,
                )
            })
            .collect()
    };
    FlowSeries {
        segments: thin(
            new_data
                .iter()
                .map(|s| (s.at.as_nanos(), position(s.start), position(s.end))),
        ),
        retransmissions: flow
            .sends
            .iter()
            .filter(|s| s.retransmission)
            .map(|s| (s.at.as_nanos(), position(s.start), position(s.end)))
            .collect(),
        acks: thin(
            flow.acks
                .iter()
                .map(|a| (a.at.as_nanos(), position(a.acked), position(a.right_edge))),
        ),
        flight: thin(new_data.iter().map(|s| {
            let window = flow
                .acks
                .partition_point(|a| a.at <= s.at)
                .checked_sub(1)
                .map_or(0, |i| flow.acks[i].window);
            (s.at.as_nanos(), position(s.flight), window)
        })),
        rtt: thin(rtt.iter().map(|&(at, ns)| (at.as_nanos(), ns))),
        goodput: rate(&acked),
        throughput: rate(&sent),
    }
}

#[cfg(test)]
mod slice_tests {
    use super::*;

    #[test]
    fn halves_that_sum_past_the_clocks_end_give_a_vantage() {
        // A capture's two half round trips near u64::MAX each (a fuzzer's input): their sum
        // overflowed.
        let far = vantage(Some(u64::MAX - 1), Some(u64::MAX - 1));
        assert_eq!(far.kind, VantageKind::Middle);
        let near_client = vantage(Some(1), Some(u64::MAX));
        assert_eq!(near_client.kind, VantageKind::Client);
    }

    #[test]
    fn idle_time_in_a_slice_that_ends_past_the_clocks_end_is_counted() {
        // A capture's clock near its end, a minimum RTT of half of it (a fuzzer's input):
        // the first slice ends past u64::MAX, which overflowed.
        let start = Instant::from_nanos(u64::MAX - 10);
        let mut slices = Slices {
            start,
            slice_ns: u64::MAX / 2,
            window: vec![false; 3],
            idle_ns: vec![0; 3],
        };
        slices.idle(start, Instant::from_nanos(u64::MAX - 4));
        assert_eq!(slices.idle_ns, [6, 0, 0]);
    }
}
