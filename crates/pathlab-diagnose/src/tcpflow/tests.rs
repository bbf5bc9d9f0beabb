//! The analysis of hand-built traces whose every retransmission, RTT and window is known.

use std::net::SocketAddr;

use pathlab_core::Instant;

use super::*;
use crate::capture::{TcpFlags, TcpOptions, TcpSegment};

const CLIENT: &str = "198.18.0.1:40000";
const SERVER: &str = "198.18.0.2:5001";
const MS: u64 = 1_000_000;

/// A segment from the client (`from_client`) or the server.
fn segment(
    from_client: bool,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    payload: u32,
) -> TcpSegment {
    let (source, destination): (SocketAddr, SocketAddr) = if from_client {
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap())
    } else {
        (SERVER.parse().unwrap(), CLIENT.parse().unwrap())
    };
    TcpSegment {
        source,
        destination,
        seq,
        ack,
        flags: TcpFlags(flags),
        window,
        options: TcpOptions::default(),
        payload_len: payload,
        ip_len: 52 + payload,
        ip_header_len: 20,
        tcp_header_len: 32,
        vlan: false,
    }
}

fn syn(from_client: bool, seq: u32, ack: u32, scale: u8) -> TcpSegment {
    let flags = if from_client {
        TcpFlags::SYN
    } else {
        TcpFlags::SYN | TcpFlags::ACK
    };
    let mut s = segment(from_client, seq, ack, flags, 64_000, 0);
    s.options.window_scale = Some(scale);
    s.options.mss = Some(1000);
    s
}

const ACK: u8 = TcpFlags::ACK;

/// Runs `events` (time in µs, segment) through an analyzer.
fn analyze(events: Vec<(u64, TcpSegment)>, config: AnalyzerConfig) -> ConnectionReport {
    let mut analyzer = Analyzer::new(config);
    for (at_us, segment) in events {
        analyzer.handle_segment(Instant::from_micros(at_us), &segment, false);
    }
    let mut reports = analyzer.finish();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

/// A capture at the client (the sender) with a 20 ms RTT: one fast retransmit after three
/// SACKed duplicate ACKs, one retransmission after a 300 ms timeout, a 50 ms zero window.
fn sender_side_trace() -> Vec<(u64, TcpSegment)> {
    let mut e = vec![
        (0, syn(true, 0, 0, 7)),
        (20_000, syn(false, 0, 1, 2)),
        (20_000, segment(true, 1, 1, ACK, 500, 0)),
    ];
    let data = |k: u32| segment(true, 1 + 1000 * k, 1, ACK, 500, 1000);
    for k in 0..10u64 {
        e.push((20_000 + 100 * k, data(k as u32))); // segment 3 is lost after the capture
    }
    for k in 0..10u32 {
        let at = 40_000 + 100 * u64::from(k);
        if k < 3 {
            e.push((at, segment(false, 1, 1 + 1000 * (k + 1), ACK, 10_000, 0)));
        } else if k > 3 {
            let mut dup = segment(false, 1, 3001, ACK, 10_000, 0);
            dup.options.sack = vec![(4001, 1 + 1000 * (k + 1))];
            e.push((at, dup));
        }
    }
    e.push((40_650, data(3))); // fast retransmit after the third duplicate
    e.push((60_650, segment(false, 1, 10_001, ACK, 10_000, 0)));
    e.push((60_700, data(10))); // lost
    e.push((360_700, data(10))); // the timer's retransmission
    e.push((380_700, segment(false, 1, 11_001, ACK, 0, 0))); // zero window
    e.push((430_700, segment(false, 1, 11_001, ACK, 10_000, 0))); // window update
    e.push((430_750, data(11)));
    e.push((450_750, segment(false, 1, 12_001, ACK, 10_000, 0)));
    e.push((
        450_800,
        segment(true, 12_001, 1, ACK | TcpFlags::FIN, 500, 0),
    ));
    e.push((
        470_800,
        segment(false, 1, 12_002, ACK | TcpFlags::FIN, 10_000, 0),
    ));
    e.push((470_800, segment(true, 12_002, 2, ACK, 500, 0)));
    e
}

#[test]
fn retransmissions_rtt_and_zero_window_of_a_known_trace() {
    let report = analyze(sender_side_trace(), AnalyzerConfig::default());
    assert!(report.handshake_seen);
    assert_eq!(report.client.to_string(), CLIENT);
    assert_eq!(report.vantage.kind, VantageKind::Client);
    assert_eq!(report.vantage.client_half_ns, Some(0));
    assert_eq!(report.vantage.server_half_ns, Some(20 * MS));
    assert_eq!(report.flows.len(), 1, "only the client sent data");
    let flow = &report.flows[0];
    assert_eq!(
        (flow.bytes, flow.bytes_transmitted, flow.bytes_retransmitted),
        (12_000, 14_000, 2000)
    );
    assert_eq!(flow.data_segments, 14);
    let r = flow.retransmissions;
    assert_eq!(
        (r.total, r.fast, r.rto, r.probe, r.spurious),
        (2, 1, 1, 0, 0)
    );
    // Karn: the ACKs that cover retransmitted segments give no sample; the handshake, the
    // three ACKs before the loss and the last one do, each exactly 20 ms (the handshake's
    // ACK left with the SYN-ACK: the client's half is 0).
    assert_eq!(flow.rtt.samples, 5, "{:?}", flow.series.rtt);
    assert_eq!(
        (flow.rtt.min_ns, flow.rtt.median_ns, flow.rtt.p95_ns),
        (20 * MS, 20 * MS, 20 * MS)
    );
    assert_eq!(
        flow.window.scale,
        Some(2),
        "the server's shift applies to its windows"
    );
    assert_eq!(
        flow.window.max_bytes, 64_000,
        "the SYN-ACK's window, never scaled"
    );
    assert_eq!(flow.window.median_bytes, 40_000);
    assert_eq!(
        (flow.window.zero_window_acks, flow.window.zero_window_ns),
        (1, 50 * MS)
    );
    let metrics = flow.metrics;
    assert_eq!(metrics.tcp_efficiency, Some(12_000.0 / 14_000.0));
    assert_eq!(metrics.buffer_delay_percent, Some(0.0));
    assert_eq!(metrics.transfer_time_ratio, None, "no --rate");
    assert_eq!(flow.series.retransmissions.len(), 2);
    assert_eq!(flow.series.retransmissions[0], (40_650_000, 3000, 4000));
    // From the first data (20 ms) to the ACK of the last byte (450.75 ms).
    assert_eq!(flow.duration_ns, 430_750_000);
}

#[test]
fn the_transfer_time_ratio_uses_rfc6349s_ideal_rate() {
    let config = AnalyzerConfig {
        bottleneck_bps: Some(1e6),
        framing: pathlab_probe::rfc6349::Framing::Ip,
    };
    let report = analyze(sender_side_trace(), config);
    let metrics = report.flows[0].metrics;
    // MSS 1000 with 20 + 20 bytes of headers (no timestamps): MTU 1040, payload share
    // 1000/1040 of 1 Mbit/s; 12 000 bytes take 0.09984 s ideally, 0.43075 s actually.
    assert_eq!(metrics.mtu_bytes, 1040);
    let ideal = 1e6 * 1000.0 / 1040.0;
    assert!((metrics.ideal_rate_bps.unwrap() - ideal).abs() < 1e-6);
    let ratio = 0.43075 / (12_000.0 * 8.0 / ideal);
    assert!(
        (metrics.transfer_time_ratio.unwrap() - ratio).abs() < 1e-9,
        "{metrics:?}"
    );
}

/// A sender that always has data, behind a receiver that advertises 4000 bytes (1000 << 2)
/// across a 20 ms RTT, captured in the middle: 8 ms from the client and back, 12 ms from
/// the server and back.
#[test]
fn a_window_limited_transfer_captured_in_the_middle() {
    let (near, far) = (8_000u64, 12_000u64);
    let mut e = vec![
        (0, syn(true, 0, 0, 7)),
        (far, syn(false, 0, 1, 2)),
        (far + near, segment(true, 1, 1, ACK, 500, 0)),
    ];
    let mut next = 0u32; // segments sent
    let mut t = far + near;
    // Each round: 4 segments (the whole window) leave, their ACKs come back `far` later,
    // and the next round reaches the capture point `near` after that.
    for _round in 0..50 {
        for k in 0..4 {
            e.push((
                t + k * 10,
                segment(true, 1 + 1000 * (next + k as u32), 1, ACK, 500, 1000),
            ));
        }
        for k in 0..4 {
            let acked = 1 + 1000 * (next + k as u32 + 1);
            e.push((t + far + k * 10, segment(false, 1, acked, ACK, 1000, 0)));
        }
        next += 4;
        t += far + near;
    }
    let report = analyze(e, AnalyzerConfig::default());
    assert_eq!(report.vantage.kind, VantageKind::Middle);
    assert_eq!(report.vantage.client_half_ns, Some(near * 1000));
    let flow = &report.flows[0];
    assert_eq!(flow.bytes, 200 * 1000);
    assert_eq!(
        flow.rtt.min_ns,
        (near + far) * 1000,
        "the two halves add up"
    );
    assert_eq!(flow.retransmissions.total, 0);
    let verdict = &flow.verdict;
    assert_eq!(verdict.limit, Limit::ReceiverWindow, "{verdict:?}");
    assert!(verdict.share > 0.9, "{verdict:?}");
    // 4000 bytes over 20 ms: 1.6 Mbit/s.
    assert_eq!(verdict.cap_bps, Some(1.6e6));
    assert!(
        verdict
            .sentence
            .contains("3.91 KiB at a 20 ms RTT caps it at 1.6 Mbit/s"),
        "{}",
        verdict.sentence
    );
}

/// One 1000-byte write every 100 ms over a 20 ms RTT: the application sets the pace.
#[test]
fn an_application_limited_transfer() {
    let mut e = vec![
        (0, syn(true, 0, 0, 7)),
        (20_000, syn(false, 0, 1, 7)),
        (20_000, segment(true, 1, 1, ACK, 500, 0)),
    ];
    for k in 0..30u32 {
        let t = 20_000 + 100_000 * u64::from(k);
        e.push((t, segment(true, 1 + 1000 * k, 1, ACK, 500, 1000)));
        e.push((
            t + 20_000,
            segment(false, 1, 1 + 1000 * (k + 1), ACK, 1000, 0),
        ));
    }
    let report = analyze(e, AnalyzerConfig::default());
    let verdict = &report.flows[0].verdict;
    assert_eq!(verdict.limit, Limit::Application, "{verdict:?}");
    assert!(verdict.share > 0.7, "{verdict:?}");
}

#[test]
fn spurious_retransmissions_reordering_and_a_missing_handshake() {
    // No handshake: the capture starts mid-transfer.
    let data = |k: u32| segment(true, 5001 + 1000 * k, 1, ACK, 500, 1000);
    let mut e = vec![(0, data(0)), (100, data(2)), (200, data(1))]; // 1 arrives late: reordered
    e.push((20_000, segment(false, 1, 8001, ACK, 100, 0)));
    // Segment 0 again, already ACKed: spurious at sight.
    e.push((20_100, data(0)));
    // Segment 2 again, reported by a D-SACK afterwards.
    e.push((300_000, data(2)));
    let mut dsack = segment(false, 1, 8001, ACK, 100, 0);
    dsack.options.sack = vec![(7001, 8001)];
    e.push((320_000, dsack));
    let report = analyze(e, AnalyzerConfig::default());
    assert!(!report.handshake_seen);
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("window scale is unknown")));
    let flow = &report.flows[0];
    assert_eq!(flow.out_of_order, 1);
    assert_eq!(flow.bytes, 3000);
    let r = flow.retransmissions;
    assert_eq!((r.total, r.spurious, r.rto), (2, 2, 1));
    assert!(!flow.window.scale_known);
    assert!(flow.verdict.sentence.contains("was not judged"));
}

#[test]
fn sequence_numbers_wrap() {
    assert_eq!(flow::unwrap_seq(u32::MAX - 9, 0, 5), 15);
    assert_eq!(flow::unwrap_seq(100, 0, 99), -1);
    assert_eq!(flow::unwrap_seq(0, (1 << 32) + 10, 20), (1 << 32) + 20);
}
