//! Frames through the emulator with the machine to itself: the pcap, GSO, corruption, ring and
//! socket receive.
use crate::util::emulated::{privileged, Lab};
use crate::util::TempDir;
use pathlab_emulator::emulator::EmulatorStats;
use pathlab_emulator::port::{PacketPort, Port};
use pathlab_os::topology::{Check, Line, H2_V4, HOST_PORT, R_PORT_H1, R_PORT_H2};
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use crate::emulate::*;

#[test]
fn pcap_holds_what_was_forwarded_and_what_was_dropped_with_the_reason() {
    let Some(_serial) =
        privileged("pcap_holds_what_was_forwarded_and_what_was_dropped_with_the_reason")
    else {
        return;
    };
    let dir = TempDir::new("pcap-file");
    let pcap = dir.path("capture.pcapng");
    let pcap_arg = pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "pcap",
        "loss 30%",
        &["--pcap", &pcap_arg, "--seed", "3"],
        true,
    );
    lab.ping(IpAddr::V4(H2_V4), 200, Duration::from_millis(2), 56);
    let (stats, _) = lab.stop();
    let packets = pcapng_packets(&std::fs::read(&pcap).expect("capture written"));
    for (index, d) in stats.directions.iter().enumerate() {
        let out_interface = 1 - index as u32;
        let forwarded = packets
            .iter()
            .filter(|p| p.0 == out_interface && p.1 == 0b10)
            .count();
        assert_eq!(
            forwarded as u64, d.forwarded,
            "{} -> {}: forwarded packets in the capture",
            d.from, d.to
        );
        let reason = format!("dropped {} -> {}: loss", d.from, d.to);
        let dropped = packets
            .iter()
            .filter(|p| {
                p.0 == index as u32 && p.1 == 0b01 && p.2.as_deref() == Some(reason.as_str())
            })
            .count();
        assert_eq!(
            dropped as u64,
            d.link.dropped_total(),
            "{reason}: drops in the capture"
        );
        assert!(
            dropped > 20,
            "30% of the pings' packets were dropped: {dropped}"
        );
    }
    if let Ok(tshark) = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "frame.comment", "-T", "fields", "-e", "frame.comment"])
        .output()
    {
        // Where tshark is installed, it reads the file and sees the drops too.
        assert!(
            tshark.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&tshark.stderr)
        );
        let comments = String::from_utf8_lossy(&tshark.stdout).lines().count() as u64;
        let drops: u64 = stats
            .directions
            .iter()
            .map(|d| d.link.dropped_total())
            .sum();
        assert_eq!(comments, drops, "tshark lists every drop");
    }
}

#[test]
fn tcp_through_a_delay_only_link_goes_out_as_gso_and_arrives_intact() {
    let Some(_serial) =
        privileged("tcp_through_a_delay_only_link_goes_out_as_gso_and_arrives_intact")
    else {
        return;
    };
    let mut lab = Lab::start("gso", "delay 5ms", &[], true);
    let goodput = lab
        .line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(3),
            Duration::from_millis(500),
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("transfer");
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
    // The receiver checked every byte against the pattern the sender wrote; header or
    // length errors would show in h2's counters.
    assert_eq!(stats.directions[0].link.dropped_total(), 0);
    for (group, counter) in [
        ("Tcp", "InCsumErrors"),
        ("Tcp", "InErrs"),
        ("Ip", "InHdrErrors"),
        ("Ip", "InDiscards"),
    ] {
        assert_eq!(
            snmp(&lab.line.h2, group, counter),
            0,
            "{group} {counter} at h2"
        );
    }
    // Segments left as super-packets: h2 received fewer packets than wire frames.
    let h2 = Line::interface(&lab.line.h2, HOST_PORT).expect("h2");
    let forwarded = stats.directions[0].forwarded;
    eprintln!(
        "delay 5ms: goodput {:.2} Gbit/s, {forwarded} segments forwarded as {} packets",
        goodput * 8e-9,
        h2.rx_packets
    );
    assert!(
        h2.rx_packets * 2 < forwarded,
        "{} packets at h2 for {forwarded} segments",
        h2.rx_packets
    );
}

#[test]
fn corrupted_segments_fail_their_checksum_at_the_receiver_and_tcp_recovers() {
    let Some(_serial) =
        privileged("corrupted_segments_fail_their_checksum_at_the_receiver_and_tcp_recovers")
    else {
        return;
    };
    let mut lab = Lab::start(
        "corrupt",
        "delay 1ms corrupt 1%",
        &["--reverse", "delay 1ms"],
        true,
    );
    // The receiver checks every byte: corruption must never reach the application.
    lab.line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(2),
            Duration::ZERO,
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("intact transfer");
    let (stats, _) = lab.stop();
    let corrupted = stats.directions[0].link.corrupted;
    let checksum_errors = snmp(&lab.line.h2, "Tcp", "InCsumErrors");
    eprintln!("corrupt 1%: {corrupted} segments corrupted, h2 counted {checksum_errors} TCP checksum errors");
    assert!(corrupted > 10, "{corrupted}");
    // A corrupted segment fails its checksum at h2 (a flip in the IP header fails that
    // one instead) and is counted, unless TCP discards it unread first: a duplicate that is
    // out of window is dropped before its checksum is checked. So every error is a
    // corrupted segment, and nearly every corrupted segment is an error.
    let ip_errors =
        snmp(&lab.line.h2, "Ip", "InHdrErrors") + snmp(&lab.line.h2, "Ip", "InAddrErrors");
    let errors = checksum_errors + ip_errors;
    assert!(
        errors <= corrupted,
        "{errors} errors for {corrupted} corrupted segments"
    );
    assert!(
        errors as f64 >= 0.98 * corrupted as f64,
        "TCP {checksum_errors} + IP {ip_errors} errors for {corrupted} corrupted segments"
    );
}

#[test]
fn ring_and_socket_receive_deliver_the_same_frames() {
    let Some(_serial) = privileged("ring_and_socket_receive_deliver_the_same_frames") else {
        return;
    };
    // What should arrive: the super-packet as the wire frames it stands for, the rest as
    // sent (a VLAN tag the driver took off is put back).
    let segments = tcp_segments();
    let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
    let (super_packet, vnet) = pathlab_core::wire::offload::build_gso(&views);
    let mut expected = Vec::new();
    pathlab_core::wire::offload::to_wire_frames(super_packet, &vnet, &mut |f| expected.push(f))
        .expect("cuts");
    assert_eq!(expected.len(), 5);
    expected.push(test_frame(
        &[0x81, 0x00, 0x00, 0x64],
        [0x08, 0x00],
        &[1; 64],
    ));
    expected.push(test_frame(
        &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
        [0x86, 0xdd],
        &[2; 64],
    ));
    expected.extend([udp_frame(18, 3), udp_frame(1000, 4), udp_frame(1472, 5)]);
    let (ring, ring_stats, ring_goodput) = frames_through("ring");
    let (socket, socket_stats, socket_goodput) = frames_through("socket");
    eprintln!(
        "TCP through delay 1ms, every byte checked: ring {:.2} Gbit/s, socket {:.2} Gbit/s",
        ring_goodput * 8e-9,
        socket_goodput * 8e-9
    );
    assert_eq!(ring.len(), expected.len(), "ring: every frame arrived");
    assert!(ring == expected, "ring: frames arrive as sent, in order");
    assert!(socket == ring, "the socket delivers what the ring does");
    for (mode, stats) in [("ring", &ring_stats), ("socket", &socket_stats)] {
        assert_conservation(stats);
        let h1_to_h2 = &stats.directions[0];
        assert_eq!(h1_to_h2.malformed, 0, "{mode}");
        // The kernel's TCP arrived as super-packets in both modes: fewer frames read
        // than wire frames they held.
        assert!(
            h1_to_h2.frames_received * 2 < h1_to_h2.packets_received,
            "{mode}: {} frames for {} packets",
            h1_to_h2.frames_received,
            h1_to_h2.packets_received
        );
    }
}

/// The Enhanced Packet Blocks of a pcapng file: (interface, flags, comment, length).
fn pcapng_packets(bytes: &[u8]) -> Vec<(u32, u32, Option<String>, usize)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, total) = (u32_at(at), u32_at(at + 4) as usize);
        assert_eq!(
            u32_at(at + total - 4) as usize,
            total,
            "block lengths agree"
        );
        if kind == 6 {
            let body = at + 8;
            let captured = u32_at(body + 12) as usize;
            let mut option = body + 20 + captured.next_multiple_of(4);
            let (mut flags, mut comment) = (0, None);
            while option < at + total - 4 {
                let code = u16::from_le_bytes([bytes[option], bytes[option + 1]]);
                let len = u16::from_le_bytes([bytes[option + 2], bytes[option + 3]]) as usize;
                let value = &bytes[option + 4..option + 4 + len];
                match code {
                    0 => break,
                    1 => comment = Some(String::from_utf8_lossy(value).into_owned()),
                    2 => flags = u32::from_le_bytes(value.try_into().unwrap()),
                    _ => {}
                }
                option += 4 + len.next_multiple_of(4);
            }
            packets.push((u32_at(body), flags, comment, captured));
        }
        at += total;
    }
    packets
}

/// What h2 receives of the test's frames when an emulator in r (`delay 1ms`) reads its
/// ports as `mode` says, h1 sending one GSO TCP super-packet, VLAN and QinQ frames and
/// plain UDP; and the emulator's counters. Then a second of real TCP (the kernel's own
/// super-packets), every byte checked; its goodput in bytes/s.
fn frames_through(mode: &str) -> (Vec<Vec<u8>>, EmulatorStats, f64) {
    use pathlab_emulator::emulator::{self, EmulatorConfig};
    use pathlab_emulator::port::ReceiveMode;
    let line = Line::build(pathlab_os::topology::Middle::Emulator, true).expect("namespaces");
    let spec = pathlab_core::LinkSpec::parse("delay 1ms").unwrap();
    let receive = if mode == "ring" {
        ReceiveMode::ring_for_link(&spec)
    } else {
        ReceiveMode::socket_for_link(&spec)
    };
    let ports = line
        .r
        .run(
            || -> Result<[PacketPort; 2], pathlab_emulator::port::PortError> {
                Ok([
                    PacketPort::open_with(R_PORT_H1, receive)?,
                    PacketPort::open_with(R_PORT_H2, receive)?,
                ])
            },
        )
        .unwrap()
        .expect("r's ports open");
    let handle = emulator::spawn(
        ports,
        EmulatorConfig {
            name: format!("modes-{mode}"),
            forward: spec.clone(),
            reverse: spec,
            seed: 1,
            record: None,
            pcap: None,
            queue_sample_interval: pathlab_core::Duration::from_millis(10),
            command: vec![],
            on_interface_gone: pathlab_emulator::emulator::OnInterfaceGone::Stop,
        },
    )
    .expect("emulator starts");
    let open = |ns: &pathlab_os::netns::Netns| {
        ns.run(|| PacketPort::open(HOST_PORT))
            .unwrap()
            .expect("raw port")
    };
    let (h1, mut h2) = (open(&line.h1), open(&line.h2));
    let mut h1 = h1.transmitter().expect("h1's sending half");
    let segments = tcp_segments();
    let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
    assert_eq!(pathlab_core::wire::offload::coalescable_run(&views), 5);
    let (super_packet, vnet) = pathlab_core::wire::offload::build_gso(&views);
    h1.send_gso(&super_packet, &vnet).expect("GSO from h1");
    for frame in [
        test_frame(&[0x81, 0x00, 0x00, 0x64], [0x08, 0x00], &[1; 64]), // VLAN 100
        test_frame(
            &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
            [0x86, 0xdd],
            &[2; 64],
        ), // QinQ 10/20
        udp_frame(18, 3),
        udp_frame(1000, 4),
        udp_frame(1472, 5),
    ] {
        h1.send(&frame).expect("send from h1");
    }
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while received.len() < 10 && std::time::Instant::now() < deadline {
        h2.receive(
            64,
            &mut pathlab_core::buffers::BufferPool::default(),
            &mut |frame| {
                if frame[6..12] == TEST_SOURCE_MAC {
                    received.push(frame);
                }
            },
        )
        .expect("receive at h2");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop((h1, h2));
    let goodput = line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("every byte arrives as sent");
    let stats = handle.stop();
    (received, stats, goodput)
}
