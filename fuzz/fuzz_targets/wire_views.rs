//! Any bytes read through the checked wire views (Ethernet, IPv4, IPv6, TCP, UDP) as the
//! link model, the offload code, the bond and the capture decoder read them: a view is
//! made or refused, never a panic, and every accessor of a made view answers within the
//! buffer: payloads and options are slices of it, lengths agree with them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_core::wire::ethernet::EthernetFrame;
use pathlab_core::wire::ipv4::Ipv4Packet;
use pathlab_core::wire::ipv6::Ipv6Packet;
use pathlab_core::wire::tcp::TcpSegment;
use pathlab_core::wire::udp::UdpDatagram;
use pathlab_core::wire::{PROTOCOL_TCP, PROTOCOL_UDP};

/// Reads `bytes` as an upper-layer header of `protocol` and checks its accessors.
fn upper_layer(protocol: u8, bytes: &[u8]) {
    match protocol {
        PROTOCOL_TCP => {
            if let Ok(tcp) = TcpSegment::new_checked(bytes) {
                let _ = (tcp.source_port(), tcp.destination_port(), tcp.seq(), tcp.ack());
                let _ = (tcp.flags(), tcp.window(), tcp.checksum(), tcp.urgent());
                assert!(tcp.header_len() >= 20);
                assert_eq!(tcp.is_cut(), bytes.len() < tcp.header_len());
                assert_eq!(20 + tcp.options().len() + tcp.payload().len(), bytes.len());
            }
        }
        PROTOCOL_UDP => {
            if let Ok(udp) = UdpDatagram::new_checked(bytes) {
                let _ = (udp.source_port(), udp.destination_port(), udp.checksum());
                assert!(8 + udp.payload().len() <= bytes.len());
            }
        }
        _ => {}
    }
}

/// Reads `bytes` as an IP packet of either version and checks its accessors, then reads
/// what it carries.
fn ip(bytes: &[u8]) {
    if let Ok(ip) = Ipv4Packet::new_checked(bytes) {
        let _ = (ip.dscp_ecn(), ip.ident(), ip.ttl(), ip.checksum(), ip.verify_checksum());
        let _ = (ip.source(), ip.destination(), ip.is_fragment());
        assert!(ip.header_len() >= 20 && ip.header_len() <= bytes.len());
        assert_eq!(ip.header().len(), ip.header_len());
        assert!(ip.header_len() + ip.payload().len() <= bytes.len());
        upper_layer(ip.protocol(), ip.payload());
    }
    if let Ok(ip) = Ipv6Packet::new_checked(bytes) {
        let _ = (ip.traffic_class(), ip.flow_label(), ip.hop_limit());
        let _ = (ip.source(), ip.destination());
        assert!(40 + ip.payload().len() <= bytes.len());
        assert!(ip.flow_label() < 1 << 20);
        if let Ok((protocol, at)) = ip.upper_layer() {
            assert!(at >= 40 && at <= bytes.len());
            upper_layer(protocol, &bytes[at..]);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    ip(data);
    if let Ok(frame) = EthernetFrame::new_checked(data) {
        let _ = (frame.destination(), frame.source(), frame.ethertype());
        assert_eq!(frame.vlan_tags().count(), frame.vlan_tag_count());
        assert_eq!(frame.payload_offset() + frame.payload().len(), data.len());
        ip(frame.payload());
    }
});
