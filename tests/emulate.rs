//! End-to-end tests of `pathlab emulate`, `pathlab shell` and `pathlab lab clean` on
//! namespaces: h1 - r - h2 with the emulator in r, checked against theory and against the
//! emulator's own recorded truth.
//!
//! They need CAP_NET_ADMIN. Without it they fail when `CI=true` (CI runs as root, so a
//! missing capability is a broken CI, not a reason to skip) and skip with a message
//! elsewhere.

use std::net::IpAddr;
use std::time::Duration;

use pathlab_emulator::emulator::EmulatorStats;
use pathlab_emulator::port::{PacketPort, Port};
use pathlab_os::topology::{Check, H1_V4, H2_V4, HOST_PORT};
use pathlab_probe::owd::QueueVerdict;
use pathlab_probe_driver::ping::{PingResult, TimedBy};

pub(crate) mod iface;
mod recipes;
pub(crate) mod vlan;

use crate::util;
use crate::util::emulated::{privileged_paired, privileged_shared, with_server_in_h2, Lab};
use crate::util::recorded::{judge_round_trips, recorded_pings, SeenPing, ECHO_FRAME};
use crate::util::{median, TempDir};

/// 10 Mbit/s of 1514-byte frames carrying 1448 bytes of TCP payload each (timestamps on),
/// in bytes per second: what a bulk transfer can get through `rate 10mbit`.
const TCP_GOODPUT_10MBIT: f64 = 10e6 / 8.0 * 1448.0 / 1514.0;

/// The median RTT of 20 pings from h1 to h2, in ms, before any load.
fn base_rtt_ms(lab: &Lab) -> f64 {
    median(&rtts_ms(&lab.ping(
        IpAddr::V4(H2_V4),
        20,
        Duration::from_millis(10),
        56,
    )))
}

pub(crate) fn rtts_ms(results: &[PingResult]) -> Vec<f64> {
    let mut rtts: Vec<f64> = results
        .iter()
        .filter_map(|r| r.rtt)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    rtts.sort_by(f64::total_cmp);
    rtts
}

/// The pings as the pinger saw them.
pub(crate) fn seen(results: &[PingResult]) -> Vec<SeenPing> {
    results
        .iter()
        .map(|r| SeenPing {
            sent: Some(r.sent - results[0].sent),
            rtt: r.rtt,
            by_kernel: r.timed_by == Some(TimedBy::Kernel),
        })
        .collect()
}

/// Every direction's truth adds up: what entered the link left it or was dropped (nothing
/// is inside once stopped), and what left was sent.
pub(crate) fn assert_conservation(stats: &EmulatorStats) {
    for d in &stats.directions {
        assert_eq!(
            d.link.packets_in,
            d.packets_received + d.link.duplicated,
            "{} -> {}: link saw every packet",
            d.from,
            d.to
        );
        assert_eq!(
            d.link.packets_in,
            d.link.packets_out + d.link.dropped_total() + d.in_flight,
            "{} -> {}: in = out + dropped + inside",
            d.from,
            d.to
        );
        assert_eq!(
            d.link.packets_out,
            d.forwarded + d.send_errors,
            "{} -> {}: out = forwarded + failed",
            d.from,
            d.to
        );
    }
}

/// The two-sided 99.9% binomial interval of a count of `n` trials with probability `p`
/// (normal approximation; z = 3.29).
fn binomial_bound(n: usize, p: f64) -> (f64, f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (mean - 3.29 * sd, mean + 3.29 * sd)
}

#[test]
fn loss_2_percent_each_way_matches_binomial_and_the_recorded_drops() {
    let Some(_serial) =
        privileged_paired("loss_2_percent_each_way_matches_binomial_and_the_recorded_drops")
    else {
        return;
    };
    let mut lab = Lab::start("loss", "loss 2%", &["--seed", "7"], true);
    let count = 5000;
    let results = lab.ping(IpAddr::V4(H2_V4), count, Duration::from_millis(1), 56);
    let lost = results.iter().filter(|r| r.rtt.is_none()).count();
    // A ping is lost if its request or its reply is: 1 - 0.98^2.
    let p = 1.0 - 0.98f64 * 0.98;
    let (low, high) = binomial_bound(count, p);
    eprintln!("loss 2% each way: {lost} of {count} pings lost, 99.9% bound {low:.0}..{high:.0}");
    assert!(
        (low..=high).contains(&(lost as f64)),
        "{lost} of {count} pings lost, 99.9% bound {low:.0}..{high:.0}"
    );
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The truth: each lost ping is exactly one dropped echo request or reply.
    let dropped_echoes: usize = (0..2)
        .map(|dir| {
            recording
                .packets(dir)
                .filter(|r| r.len_bytes == ECHO_FRAME && r.dropped.is_some())
                .count()
        })
        .sum();
    assert_eq!(
        dropped_echoes, lost,
        "recorded drops of echo frames = lost pings"
    );
    let requests = recording
        .packets(0)
        .filter(|r| r.len_bytes == ECHO_FRAME)
        .count();
    assert_eq!(requests, count, "every request was recorded");
    for d in &stats.directions {
        let (low, high) = binomial_bound(d.link.packets_in as usize, 0.02);
        let dropped = d.link.dropped_total() as f64;
        assert!(
            (low..=high).contains(&dropped),
            "{} -> {}: {dropped} of {} dropped",
            d.from,
            d.to,
            d.link.packets_in
        );
    }
}

/// Bytes per second a TCP bulk transfer from h1 to h2 achieves over `[warmup, duration]`,
/// with ping RTTs taken during the transfer (after the warm-up).
fn bulk_transfer_with_pings(
    lab: &Lab,
    duration: Duration,
    warmup: Duration,
) -> (f64, Vec<PingResult>) {
    // Windows large enough that the sender is limited by its congestion window, not by
    // the receiver: the queue fills only if more than BDP + 100 packets may be in flight
    // (Linux starts receive windows at 64 KB, 45 packets).
    lab.line
        .h2
        .set_sysctl("net/ipv4/tcp_rmem", "4096 4194304 8388608")
        .expect("tcp_rmem");
    lab.line
        .h1
        .set_sysctl("net/ipv4/tcp_wmem", "4096 4194304 8388608")
        .expect("tcp_wmem");
    // Loss-based congestion control, as in the bufferbloat experiments: BBR (this machine's
    // default) keeps its own queue short whatever the buffer. Reno, because a namespace may
    // only choose among tcp_allowed_congestion_control, which always has it.
    lab.line
        .h1
        .set_sysctl("net/ipv4/tcp_congestion_control", "reno")
        .expect("reno");
    let transfer = lab
        .line
        .start_tcp_bulk(5201, duration, warmup, Check::EveryByte)
        .expect("transfer starts");
    std::thread::sleep(warmup);
    let ping_time = duration
        .saturating_sub(warmup)
        .saturating_sub(Duration::from_millis(500));
    let pings = lab.ping(
        IpAddr::V4(H2_V4),
        (ping_time.as_millis() / 50) as usize,
        Duration::from_millis(50),
        56,
    );
    (transfer.finish().expect("transfer"), pings)
}

#[test]
fn rate_10mbit_limit_100_fills_the_link_and_the_queue() {
    let Some(_serial) = privileged_paired("rate_10mbit_limit_100_fills_the_link_and_the_queue")
    else {
        return;
    };
    let mut lab = Lab::start("rate", "rate 10mbit limit 100", &["--reverse", ""], true);
    let base = base_rtt_ms(&lab);
    let (goodput, pings) =
        bulk_transfer_with_pings(&lab, Duration::from_secs(12), Duration::from_secs(2));
    let ideal = TCP_GOODPUT_10MBIT;
    let ratio = goodput / ideal;
    eprintln!(
        "rate 10mbit limit 100: goodput {:.3} Mbit/s = {:.1}% of {:.3}",
        goodput * 8e-6,
        ratio * 100.0,
        ideal * 8e-6
    );
    assert!(
        (0.93..=1.0).contains(&ratio),
        "goodput {:.3} Mbit/s = {:.1}% of {:.3}",
        goodput * 8e-6,
        ratio * 100.0,
        ideal * 8e-6
    );
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The sampled queue length: every 10 ms, never above the limit, full at times.
    let samples: Vec<(pathlab_core::Instant, u32, u64)> = recording.queue_samples(0).collect();
    assert!(samples
        .windows(2)
        .all(|w| (w[1].0 - w[0].0).as_nanos() == 10_000_000));
    let queue_peak = samples.iter().map(|s| s.1).max().expect("samples");
    assert!(
        (90..=100).contains(&queue_peak),
        "queue peak {queue_peak} packets"
    );
    // The pings under load are the last requests that crossed (the base RTT's came first).
    let recorded = recorded_pings(&recording, ECHO_FRAME, 0);
    let under_load = &recorded[recorded.len() - pings.len()..];
    // Against theory, in the recording (model time): the queue's worth of delay, 100 x
    // 1514 x 8 / 10e6 = 121.1 ms, on top of the idle crossing, at the p95 (Reno's sawtooth
    // keeps the queue full only at its peaks).
    let full_queue_ms = 100.0 * 1514.0 * 8.0 / 10e6 * 1e3;
    let mut in_link_ms: Vec<f64> = under_load
        .iter()
        .filter_map(|p| Some(p.in_link_ns()? as f64 / 1e6))
        .collect();
    in_link_ms.sort_by(f64::total_cmp);
    let idle_ms = recorded[0].in_link_ns().expect("the first base ping") as f64 / 1e6;
    let peak = in_link_ms[in_link_ms.len() * 95 / 100];
    let rtts = rtts_ms(&pings);
    eprintln!(
        "rate 10mbit limit 100: base RTT {base:.2} ms; under load RTT median {:.1} ms, p95 {:.1} ms; recorded in the link {idle_ms:.3} ms idle, p95 {peak:.1} ms",
        median(&rtts),
        rtts[rtts.len() * 95 / 100]
    );
    assert!(
        ((peak - idle_ms) / full_queue_ms - 1.0).abs() <= 0.10,
        "recorded p95 under load {peak:.1} ms, idle {idle_ms:.3} ms, expected + {full_queue_ms:.1} ms within 10%"
    );
    // What the pinger saw is what the emulator recorded for the same packets, the request
    // through the queue and the reply back (direction 1), each as late as the emulator
    // recorded sending it, plus the hosts' part.
    judge_round_trips(&seen(&pings), under_load, Duration::from_millis(50));
}

#[test]
fn codel_keeps_the_rtt_under_load_near_the_base() {
    let Some(_serial) = privileged_paired("codel_keeps_the_rtt_under_load_near_the_base") else {
        return;
    };
    let mut lab = Lab::start(
        "codel",
        "rate 10mbit limit 100 queue codel",
        &["--reverse", ""],
        true,
    );
    let base = base_rtt_ms(&lab);
    let (goodput, pings) =
        bulk_transfer_with_pings(&lab, Duration::from_secs(10), Duration::from_secs(2));
    let rtts = rtts_ms(&pings);
    let median_under_load = median(&rtts);
    eprintln!(
        "codel: base {base:.2} ms, median under load {median_under_load:.2} ms, p95 {:.2} ms, goodput {:.1}%",
        util::quantile(&rtts, 0.95),
        goodput / TCP_GOODPUT_10MBIT * 100.0
    );
    // "A few CoDel targets": within 4 x 5 ms of the base (tail drop sits at +121 ms).
    assert!(
        median_under_load - base <= 20.0,
        "median RTT under load {median_under_load:.1} ms, base {base:.2} ms"
    );
    let ideal = TCP_GOODPUT_10MBIT;
    assert!(
        goodput / ideal >= 0.85,
        "CoDel still fills the link: {:.1}%",
        goodput / ideal * 100.0
    );
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
    assert!(
        stats.directions[0]
            .link
            .dropped(pathlab_core::DropReason::Codel)
            > 0,
        "CoDel dropped"
    );
}

#[test]
fn without_cap_net_admin_emulate_and_shell_refuse_before_touching_anything() {
    // Shared: refused as nobody before anything is made; nothing to collide with.
    let Some(_serial) = privileged_shared(
        "without_cap_net_admin_emulate_and_shell_refuse_before_touching_anything",
    ) else {
        return;
    };
    for args in [
        &[
            "emulate",
            "--between",
            "a",
            "b",
            "delay 1ms",
            "--name",
            "unpriv",
        ][..],
        &["shell", "delay 1ms", "--", "true"][..],
        &["lab", "clean"][..],
    ] {
        util::emulated::refused_without_cap_net_admin(args);
    }
    assert!(!pathlab_os::runtime::control_socket_path("unpriv").exists());
}

#[test]
fn vlan_qinq_and_unknown_frames_cross_byte_for_byte() {
    // Shared: it checks bytes, not time, on a line and an emulator of its own (`t{pid}-frames`).
    let Some(_serial) = privileged_shared("vlan_qinq_and_unknown_frames_cross_byte_for_byte")
    else {
        return;
    };
    let mut lab = Lab::start("frames", "delay 1ms", &[], false);
    let open = |ns: &pathlab_os::netns::Netns| {
        ns.run(|| PacketPort::open(HOST_PORT))
            .unwrap()
            .expect("raw port")
    };
    let (h1, mut h2) = (open(&lab.line.h1), open(&lab.line.h2));
    let source = [0x02, 0, 0, 0, 0, 0x01];
    let frame = |tags: &[u8], ethertype: [u8; 2], fill: u8| {
        let mut frame = vec![0xff; 6];
        frame.extend_from_slice(&source);
        frame.extend_from_slice(tags);
        frame.extend_from_slice(&ethertype);
        frame.extend(std::iter::repeat_n(fill, 64));
        frame
    };
    let sent = vec![
        frame(&[0x81, 0x00, 0x00, 0x64], [0x08, 0x00], 1), // VLAN 100
        frame(
            &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
            [0x86, 0xdd],
            2,
        ), // QinQ 10/20
        frame(&[], [0x88, 0xb5], 3),                       // local experimental
    ];
    let mut h1_out = h1.transmitter().expect("h1's sending half");
    for frame in &sent {
        h1_out.send(frame).expect("send from h1");
    }
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while received.len() < sent.len() && std::time::Instant::now() < deadline {
        h2.receive(
            64,
            &mut pathlab_core::buffers::BufferPool::default(),
            &mut |frame| {
                if frame[6..12] == source {
                    received.push(frame);
                }
            },
        )
        .expect("receive at h2");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(received, sent, "frames arrive as sent, in order");
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
}

/// The data of the outbound packets written on `interface`, in file (send) order.
pub(crate) fn pcapng_outbound(bytes: &[u8], interface: u32) -> Vec<&[u8]> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, total) = (u32_at(at), u32_at(at + 4) as usize);
        if kind == 6 && u32_at(at + 8) == interface {
            let captured = u32_at(at + 20) as usize;
            let data = &bytes[at + 28..at + 28 + captured];
            let options = at + 28 + captured.next_multiple_of(4);
            // The first option is epb_flags: 2 = outbound.
            if u16::from_le_bytes([bytes[options], bytes[options + 1]]) == 2
                && u32_at(options + 4) == 0b10
            {
                packets.push(data);
            }
        }
        at += total;
    }
    packets
}

/// A counter of `/proc/net/snmp` (`Tcp`, `RetransSegs`) as seen from inside `netns`.
pub(crate) fn snmp(netns: &pathlab_os::netns::Netns, group: &str, name: &str) -> u64 {
    let text = netns
        .run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))
        .unwrap()
        .expect("snmp");
    let mut lines = text.lines().filter(|l| l.starts_with(&format!("{group}:")));
    let (names, values) = (lines.next().expect("names"), lines.next().expect("values"));
    let index = names
        .split_whitespace()
        .position(|n| n == name)
        .expect("counter exists");
    values
        .split_whitespace()
        .nth(index)
        .expect("value")
        .parse()
        .expect("number")
}

/// A one-way test upwards from h1 to a server in h2.
fn owd_through(
    lab: &Lab,
    rate_bps: u64,
    size: u32,
    count: u64,
) -> pathlab_probe::owd::OneWayResult {
    with_server_in_h2(lab, |client| {
        client.one_way(
            pathlab_probe::control::Direction::Up,
            rate_bps,
            size,
            count,
            100,
        )
    })
}

#[test]
fn owd_sees_the_queue_the_emulator_builds_and_its_losses_exactly() {
    let Some(_serial) =
        privileged_paired("owd_sees_the_queue_the_emulator_builds_and_its_losses_exactly")
    else {
        return;
    };
    // Frames of 1200-byte probes: 1200 + 8 UDP + 20 IP + 14 Ethernet.
    let frame = 1242;
    for (rate, building) in [(15_000_000u64, true), (5_000_000, false)] {
        let mut lab = Lab::start("owd-rate", "rate 10mbit", &["--reverse", ""], true);
        let count = rate * 4 / (1200 * 8); // 4 s
        let result = owd_through(&lab, rate, 1200, count);
        let (_, recording) = lab.stop();
        let dropped = recording
            .packets(0)
            .filter(|r| r.len_bytes == frame && r.dropped.is_some())
            .count() as u64;
        eprintln!(
            "owd at {} Mbit/s into rate 10mbit: verdict {:?}, trend {:.0} us/s, rose {:.1} ms, lost {} (emulator dropped {dropped})",
            rate / 1_000_000,
            result.owd.verdict,
            result.owd.trend_us_per_s,
            result.owd.queue_growth_ns as f64 / 1e6,
            result.sequence.lost
        );
        assert_eq!(
            result.sequence.lost, dropped,
            "lost probes = the emulator's drops"
        );
        let expected = if building {
            QueueVerdict::Building
        } else {
            QueueVerdict::NotBuilding
        };
        assert_eq!(result.owd.verdict, expected, "{:?}", result.owd);
        if building {
            assert!(dropped > 0, "the buffer overflowed");
        } else {
            assert_eq!(dropped, 0);
        }
    }
}

#[test]
fn owd_loss_duplicates_and_reordering_equal_the_recorded_truth() {
    let Some(_serial) =
        privileged_paired("owd_loss_duplicates_and_reordering_equal_the_recorded_truth")
    else {
        return;
    };
    let dir = TempDir::new("owd-truth-pcap");
    let lab_pcap = dir.path("probes.pcapng");
    let pcap_arg = lab_pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "owd-truth",
        "delay 5ms loss 2% duplicate 2% reorder 5%",
        &["--reverse", "", "--seed", "11", "--pcap", &pcap_arg],
        true,
    );
    let size = 200;
    let result = owd_through(&lab, 2_000_000, size, 3000);
    let (_, recording) = lab.stop();
    let frame = size + 42;
    let probes: Vec<_> = recording
        .packets(0)
        .filter(|r| r.len_bytes == frame)
        .collect();
    let originals: Vec<_> = probes.iter().filter(|r| r.duplicate_of.is_none()).collect();
    assert_eq!(originals.len(), 3000, "every probe entered the link");
    // Loss: originals dropped whose copies (if any) were dropped too.
    let delivered_ids: std::collections::HashSet<u64> = probes
        .iter()
        .filter(|r| r.departed.is_some())
        .map(|r| r.duplicate_of.unwrap_or(r.id))
        .collect();
    let lost = originals
        .iter()
        .filter(|r| !delivered_ids.contains(&r.id))
        .count() as u64;
    let duplicates =
        probes.iter().filter(|r| r.departed.is_some()).count() as u64 - delivered_ids.len() as u64;
    // Reordering: RFC 4737 on the order the emulator put the probes on the wire, read
    // from its capture (the sequence number is 16 bytes into the probe).
    let capture = std::fs::read(&lab_pcap).expect("capture");
    let mut tracker = pathlab_probe::sequence::SequenceTracker::new(3000);
    let mut wire = 0;
    for data in pcapng_outbound(&capture, 1) {
        if data.len() == frame as usize {
            tracker.arrive(u64::from_be_bytes(
                data[42 + 16..42 + 24].try_into().unwrap(),
            ));
            wire += 1;
        }
    }
    assert_eq!(
        wire,
        probes.iter().filter(|r| r.departed.is_some()).count(),
        "the capture has every forwarded probe"
    );
    let truth = tracker.stats(3000);
    eprintln!(
        "owd through loss 2% duplicate 2% reorder 5%: lost {} (truth {lost}), duplicates {} (truth {duplicates}), reordered {} (truth {}), rejected {}, stats {:?}",
        result.sequence.lost, result.sequence.duplicates, result.sequence.reordered, truth.reordered, result.rejected, result.sequence
    );
    assert!(
        lost > 20 && duplicates > 20 && truth.reordered > 20,
        "the impairments happened"
    );
    assert_eq!(result.sequence.lost, lost);
    assert_eq!(result.sequence.duplicates, duplicates);
    assert_eq!(result.sequence.reordered, truth.reordered);
    assert_eq!(result.sequence.max_extent, truth.max_extent);
}

/// `pathlab tcp` upwards from h1 to a server in h2 with Reno for `seconds`.
fn tcp_through(lab: &Lab, seconds: u64) -> pathlab_probe::tcp::TcpTestReport {
    use pathlab_probe_driver::{TcpOptions, TcpTest};
    with_server_in_h2(lab, |client| {
        client.tcp(&TcpTest {
            streams: 1,
            direction: pathlab_probe::control::TcpDirection::Up,
            duration: Duration::from_secs(seconds),
            interval: Duration::from_secs(1),
            sample_every: Duration::from_millis(10),
            options: TcpOptions {
                window: Some(4 << 20),
                mss: None,
                congestion: Some("reno".into()),
            },
        })
    })
}

#[test]
fn tcp_goodput_and_retransmissions_match_the_emulators_truth() {
    let Some(_serial) =
        privileged_paired("tcp_goodput_and_retransmissions_match_the_emulators_truth")
    else {
        return;
    };
    // Clean, then lossy: goodput never above what the link carries and near it when
    // nothing is lost; every segment the emulator dropped is one TCP retransmitted.
    for (spec, fills) in [
        ("rate 10mbit delay 5ms limit 100", true),
        ("rate 10mbit delay 5ms limit 100 loss 1%", false),
    ] {
        let mut lab = Lab::start(
            "tcp-truth",
            spec,
            &["--reverse", "delay 5ms", "--seed", "5"],
            true,
        );
        let report = tcp_through(&lab, 6);
        let (_, recording) = lab.stop();
        let stream = &report.up[0];
        let last = stream.samples.last().expect("TCP_INFO samples");
        let retransmitted = u64::from(last.retrans_segments);
        // Full-size data segments the emulator dropped on the way up (the control
        // connection's messages are far smaller).
        let dropped = recording
            .packets(0)
            .filter(|r| r.len_bytes >= 1000 && r.dropped.is_some())
            .count() as u64;
        let goodput = report.up_bps / 8.0;
        eprintln!(
            "tcp through '{spec}': {:.3} Mbit/s = {:.1}% of {:.3}; retransmitted {} segments, emulator dropped {dropped}",
            report.up_bps * 1e-6,
            goodput / TCP_GOODPUT_10MBIT * 100.0,
            TCP_GOODPUT_10MBIT * 8e-6,
            retransmitted,
        );
        // The receiver's count over the sender's time includes the last flight in the
        // queue after the sender stopped writing: 1% over the ideal covers it.
        assert!(
            goodput <= TCP_GOODPUT_10MBIT * 1.01,
            "goodput {:.3} Mbit/s above the link's {:.3}",
            goodput * 8e-6,
            TCP_GOODPUT_10MBIT * 8e-6
        );
        if fills {
            assert!(
                goodput >= TCP_GOODPUT_10MBIT * 0.9,
                "a clean 10 Mbit/s link is filled: {:.3} Mbit/s",
                goodput * 8e-6
            );
        } else {
            assert!(dropped > 0, "1% of thousands of segments");
        }
        // Each dropped segment is sent again; a retransmission lost again counts twice on
        // both sides. A few spurious ones (tail loss probes) are allowed on top.
        assert!(
            retransmitted >= dropped && retransmitted <= dropped + dropped / 10 + 5,
            "retransmitted {retransmitted} for {dropped} dropped"
        );
    }
}

/// The lab run a `result.json` holds.
pub(crate) fn read_lab_run(result: &std::path::Path) -> pathlab_results::lab::LabRun {
    let text = std::fs::read_to_string(result).expect("result file");
    let file = pathlab_results::ResultFile::from_json(&text).expect("result file reads");
    let pathlab_results::RunResult::Lab(run) = file.result else {
        panic!("not a lab run");
    };
    *run
}

/// Runs `change` on r's interface `name` through netlink, in r.
pub(crate) fn in_r(
    lab: &Lab,
    name: &str,
    change: impl FnOnce(&mut pathlab_os::netlink::Netlink, u32) + Send,
) {
    let name = name.to_owned();
    lab.line
        .r
        .run(move || {
            let mut netlink = pathlab_os::netlink::Netlink::open().unwrap();
            let link = netlink
                .link_by_name(&name)
                .unwrap()
                .expect("r has the port");
            change(&mut netlink, link.index);
        })
        .unwrap();
}

/// An Ethernet frame from the test's own source MAC (so the receiver can tell it from the
/// kernel's traffic): `tags` (VLAN headers), `ethertype`, then `payload`.
pub(crate) fn test_frame(tags: &[u8], ethertype: [u8; 2], payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&TEST_SOURCE_MAC);
    frame.extend_from_slice(tags);
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(payload);
    frame
}

pub(crate) const TEST_SOURCE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// An IPv4 header of `l4_len` bytes of protocol `protocol` from h1 to h2, with its
/// checksum.
fn ipv4_header(id: u16, protocol: u8, l4_len: usize) -> Vec<u8> {
    let mut header = vec![0x45, 0];
    header.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    header.extend_from_slice(&id.to_be_bytes());
    header.extend_from_slice(&[0x40, 0, 64, protocol, 0, 0]);
    header.extend_from_slice(&H1_V4.octets());
    header.extend_from_slice(&H2_V4.octets());
    let sum = pathlab_core::wire::checksum::checksum_add(0, &header);
    let checksum = pathlab_core::wire::checksum::checksum_finish(sum);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    header
}

/// Five full TCP segments of one flow (1448 bytes each, consecutive ids and sequence
/// numbers, PSH on the last) that [`pathlab_core::wire::offload::build_gso`] joins into one
/// super-packet.
pub(crate) fn tcp_segments() -> Vec<Vec<u8>> {
    (0..5u16)
        .map(|i| {
            let payload: Vec<u8> = (0..1448u32).map(|b| (b * 7 + u32::from(i)) as u8).collect();
            let mut tcp = Vec::new();
            tcp.extend_from_slice(&40_000u16.to_be_bytes());
            tcp.extend_from_slice(&5201u16.to_be_bytes());
            tcp.extend_from_slice(&(1000 + u32::from(i) * 1448).to_be_bytes());
            tcp.extend_from_slice(&1u32.to_be_bytes());
            tcp.extend_from_slice(&[0x50, if i == 4 { 0x18 } else { 0x10 }]);
            tcp.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
            tcp.extend_from_slice(&payload);
            let mut packet = ipv4_header(100 + i, 6, tcp.len());
            packet.extend_from_slice(&tcp);
            test_frame(&[], [0x08, 0x00], &packet)
        })
        .collect()
}

/// A UDP datagram from h1 to h2 of `len` payload bytes (checksum 0: none, as IPv4 allows).
pub(crate) fn udp_frame(len: usize, fill: u8) -> Vec<u8> {
    let mut udp = Vec::new();
    udp.extend_from_slice(&40_001u16.to_be_bytes());
    udp.extend_from_slice(&9u16.to_be_bytes());
    udp.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend(std::iter::repeat_n(fill, len));
    let mut packet = ipv4_header(200 + u16::from(fill), 17, udp.len());
    packet.extend_from_slice(&udp);
    test_frame(&[], [0x08, 0x00], &packet)
}
