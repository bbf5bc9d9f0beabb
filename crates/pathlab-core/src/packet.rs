//! Packets as the model sees them: bytes, a wire length, a flow, ECN bits and timestamps.
//!
//! A packet built from real bytes ([`Packet::from_ethernet`], [`Packet::from_ip`]) takes its
//! flow from the IPv4/IPv6 5-tuple and its ECN field from the IP header, and ECN marking
//! rewrites the header (with the IPv4 checksum). A synthetic packet ([`Packet::synthetic`])
//! has no bytes, only a length, a flow and ECN bits: simulations use those.

use crate::time::Instant;
use crate::wire::ethernet::{self, EthernetFrame};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{self, Ipv6Packet};

/// The two ECN bits of the IP header (RFC 3168).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Ecn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct,
    /// ECN-capable transport, ECT(1) (01).
    Ect1,
    /// ECN-capable transport, ECT(0) (10).
    Ect0,
    /// Congestion experienced (11).
    Ce,
}

impl Ecn {
    /// The ECN field from the low two bits of a TOS / traffic-class byte.
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit code point.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// Whether a router may mark this packet instead of dropping it (ECT or already CE).
    pub fn is_capable(self) -> bool {
        self != Ecn::NotEct
    }
}

/// A hash of a packet's flow (the 5-tuple when the bytes parse, else 0: one flow).
pub type FlowHash = u64;

/// Where the IP header of a parsed packet starts and which version it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IpHeader {
    None,
    V4 { offset: u16 },
    V6 { offset: u16 },
}

/// A packet travelling through a link.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Sequence number the link gave the packet on arrival (unique per link; a duplicate
    /// gets its own). Zero until the packet enters a link.
    pub id: u64,
    /// Caller's label carried untouched (a simulation's load index, an emulator's port).
    pub tag: u32,
    /// Bytes on the wire; empty for synthetic packets.
    pub data: Vec<u8>,
    /// Length that rates, limits and counters use, in bytes.
    pub len_bytes: u32,
    /// Flow the packet belongs to, for fair queueing.
    pub flow: FlowHash,
    /// Current ECN code point (queues may set CE).
    pub ecn: Ecn,
    /// Whether an impairment flipped a bit of this packet.
    pub corrupted: bool,
    /// When the packet entered the link.
    pub arrival: Instant,
    /// When the packet entered the queue it is in now (the AQMs measure sojourn from it).
    pub enqueued: Instant,
    /// How long the packet waited in the bottleneck queue (set when it starts transmission).
    pub queue_delay: crate::time::Duration,
    ip: IpHeader,
}

impl Packet {
    /// A packet without bytes, of `len_bytes`, in flow `flow`.
    pub fn synthetic(now: Instant, len_bytes: u32, flow: FlowHash, ecn: Ecn) -> Packet {
        Packet {
            id: 0,
            tag: 0,
            data: Vec::new(),
            len_bytes,
            flow,
            ecn,
            corrupted: false,
            arrival: now,
            enqueued: now,
            queue_delay: crate::time::Duration::ZERO,
            ip: IpHeader::None,
        }
    }

    /// A packet from an Ethernet frame (VLAN tags, [`ethernet::VLAN_TPIDS`], are skipped to
    /// find IP).
    pub fn from_ethernet(now: Instant, data: Vec<u8>) -> Packet {
        let ip = match EthernetFrame::new_checked(&data) {
            // At most 14 + MAX_VLAN_TAGS x 4 bytes in: the offset fits a u16.
            Ok(frame) => match frame.ethertype() {
                ethernet::ETHERTYPE_IPV4 => IpHeader::V4 {
                    offset: frame.payload_offset() as u16,
                },
                ethernet::ETHERTYPE_IPV6 => IpHeader::V6 {
                    offset: frame.payload_offset() as u16,
                },
                _ => IpHeader::None,
            },
            Err(_) => IpHeader::None,
        };
        Packet::with_ip_header(now, data, ip)
    }

    /// A packet from a raw IP datagram (as a TUN device without packet info gives it).
    pub fn from_ip(now: Instant, data: Vec<u8>) -> Packet {
        let ip = match data.first().map(|b| b >> 4) {
            Some(4) => IpHeader::V4 { offset: 0 },
            Some(6) => IpHeader::V6 { offset: 0 },
            _ => IpHeader::None,
        };
        Packet::with_ip_header(now, data, ip)
    }

    fn with_ip_header(now: Instant, data: Vec<u8>, ip: IpHeader) -> Packet {
        let len_bytes = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let (ip, flow, ecn) = match ip {
            IpHeader::V4 { offset } => match parse_ipv4(&data, usize::from(offset)) {
                Some((flow, ecn)) => (ip, flow, ecn),
                None => (IpHeader::None, 0, Ecn::NotEct),
            },
            IpHeader::V6 { offset } => match parse_ipv6(&data, usize::from(offset)) {
                Some((flow, ecn)) => (ip, flow, ecn),
                None => (IpHeader::None, 0, Ecn::NotEct),
            },
            IpHeader::None => (IpHeader::None, 0, Ecn::NotEct),
        };
        let mut packet = Packet::synthetic(now, len_bytes, flow, ecn);
        packet.data = data;
        packet.ip = ip;
        packet
    }

    /// Offset of the IP header in `data`, if the bytes parsed as IP.
    pub fn ip_offset(&self) -> Option<usize> {
        match self.ip {
            IpHeader::V4 { offset } | IpHeader::V6 { offset } => Some(usize::from(offset)),
            IpHeader::None => None,
        }
    }

    /// Marks the packet Congestion Experienced if it is ECN-capable, rewriting the IP header
    /// (and the IPv4 header checksum, incrementally as RFC 1624 says). Returns whether the
    /// packet now carries CE; a Not-ECT packet is left alone and must be dropped instead.
    pub fn mark_ce(&mut self) -> bool {
        if !self.ecn.is_capable() {
            return false;
        }
        if self.ecn == Ecn::Ce {
            return true;
        }
        self.ecn = Ecn::Ce;
        match self.ip {
            IpHeader::V4 { offset } => {
                if let Ok(mut ip) = Ipv4Packet::new_checked(&mut self.data[usize::from(offset)..]) {
                    ip.rewrite_dscp_ecn(ip.dscp_ecn() | Ecn::Ce.bits());
                }
            }
            IpHeader::V6 { offset } => {
                if let Ok(mut ip) = Ipv6Packet::new_checked(&mut self.data[usize::from(offset)..]) {
                    ip.set_traffic_class(ip.traffic_class() | Ecn::Ce.bits());
                }
            }
            IpHeader::None => {}
        }
        true
    }
}

/// FNV-1a over the 5-tuple: stable across runs and platforms, fast, good enough to spread
/// flows over fair-queueing buckets (which add their own perturbation). Public so that
/// whoever keys flows by more than the 5-tuple (a tunnel adding a frame's VLAN ids) hashes
/// as the packets do.
pub fn flow_hash(parts: &[&[u8]]) -> FlowHash {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    hash
}

fn ports(data: &[u8], offset: usize, protocol: u8) -> &[u8] {
    match protocol {
        // TCP, UDP, DCCP, SCTP, UDP-Lite: source and destination ports come first.
        6 | 17 | 33 | 132 | 136 => data.get(offset..offset + 4).unwrap_or(&[]),
        _ => &[],
    }
}

fn parse_ipv4(data: &[u8], offset: usize) -> Option<(FlowHash, Ecn)> {
    let ip = Ipv4Packet::new_checked(data.get(offset..)?).ok()?;
    let protocol = ip.protocol();
    let ports = if ip.fragment_offset() == 0 {
        ports(data, offset + ip.header_len(), protocol)
    } else {
        &[]
    };
    let addresses = [ip.source().octets(), ip.destination().octets()];
    let flow = flow_hash(&[&[4, protocol], addresses.as_flattened(), ports]);
    Some((flow, Ecn::from_bits(ip.dscp_ecn())))
}

fn parse_ipv6(data: &[u8], offset: usize) -> Option<(FlowHash, Ecn)> {
    let ip = Ipv6Packet::new_checked(data.get(offset..)?).ok()?;
    // Extension headers are not walked: the flow label stands in for the ports then.
    let next_header = ip.next_header();
    let ports = ports(data, offset + ipv6::HEADER_LEN, next_header);
    let addresses = [ip.source().octets(), ip.destination().octets()];
    let [_, label @ ..] = ip.flow_label().to_be_bytes();
    let flow = flow_hash(&[&[6, next_header], addresses.as_flattened(), ports, &label]);
    Some((flow, Ecn::from_bits(ip.traffic_class())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet::ETHERTYPE_IPV4;
    use crate::wire::udp::UdpDatagram;

    fn ipv4_udp_frame(tos: u8, src_port: u16) -> Vec<u8> {
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = Ipv4Packet::new_header(&mut frame[14..]).unwrap();
        ip.set_dscp_ecn(tos);
        ip.set_total_len(28);
        ip.set_ttl(64);
        ip.set_protocol(17);
        ip.set_source([198, 18, 0, 1].into());
        ip.set_destination([198, 18, 0, 2].into());
        ip.fill_checksum();
        let mut udp = UdpDatagram::new_checked(ip.payload_mut()).unwrap();
        udp.set_source_port(src_port);
        udp.set_destination_port(9);
        frame
    }

    /// The Internet checksum by 16-bit words, as RFC 1071 defines it (independent of the
    /// wide sum the code uses).
    fn checksum(header: &[u8]) -> u16 {
        let mut sum = 0u32;
        for chunk in header.chunks(2) {
            sum += u32::from(u16::from_be_bytes([chunk[0], chunk[1]]));
        }
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn ipv4_flow_and_ecn_are_parsed_and_ports_separate_flows() {
        let a = Packet::from_ethernet(Instant::ZERO, ipv4_udp_frame(0b10, 1000));
        let b = Packet::from_ethernet(Instant::ZERO, ipv4_udp_frame(0b10, 1001));
        assert_eq!(a.ecn, Ecn::Ect0);
        assert_eq!(a.ip_offset(), Some(14));
        assert_eq!(a.len_bytes, 42);
        assert_ne!(a.flow, b.flow);
        assert_ne!(a.flow, 0);
    }

    #[test]
    fn vlan_tagged_frames_are_parsed() {
        let mut frame = ipv4_udp_frame(0b01, 5);
        frame.splice(12..12, [0x81, 0x00, 0x00, 0x2A]);
        let packet = Packet::from_ethernet(Instant::ZERO, frame);
        assert_eq!(packet.ip_offset(), Some(18));
        assert_eq!(packet.ecn, Ecn::Ect1);
    }

    /// Guards the one tag walker: the link model classifies the flows of QinQ frames with
    /// any of the three TPIDs, as the offload code and the capture decoder do.
    #[test]
    fn qinq_and_pre_standard_9100_tagged_frames_are_parsed() {
        let untagged = Packet::from_ethernet(Instant::ZERO, ipv4_udp_frame(0b10, 5));
        for tags in [
            [0x88, 0xA8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x2A],
            [0x91, 0x00, 0x00, 0x64, 0x81, 0x00, 0x00, 0x2A],
        ] {
            let mut frame = ipv4_udp_frame(0b10, 5);
            frame.splice(12..12, tags);
            let packet = Packet::from_ethernet(Instant::ZERO, frame);
            assert_eq!(packet.ip_offset(), Some(22), "{tags:x?}");
            assert_eq!(packet.flow, untagged.flow, "{tags:x?}");
            assert_eq!(packet.ecn, Ecn::Ect0);
        }
    }

    #[test]
    fn marking_ce_keeps_the_ipv4_checksum_valid() {
        let mut packet = Packet::from_ethernet(Instant::ZERO, ipv4_udp_frame(0xB8 | 0b10, 7));
        assert!(packet.mark_ce());
        assert_eq!(packet.data[15] & 0b11, 0b11);
        assert_eq!(
            checksum(&packet.data[14..34]),
            0,
            "checksum must verify to zero"
        );
        let mut not_ect = Packet::from_ethernet(Instant::ZERO, ipv4_udp_frame(0, 7));
        assert!(!not_ect.mark_ce());
        assert_eq!(not_ect.ecn, Ecn::NotEct);
    }

    #[test]
    fn ipv6_ecn_is_read_and_marked() {
        let mut datagram = vec![0u8; 48];
        datagram[0] = 0x60;
        datagram[1] = 0x20; // traffic class low bits: ECT(0)
        datagram[6] = 17;
        let mut packet = Packet::from_ip(Instant::ZERO, datagram);
        assert_eq!(packet.ecn, Ecn::Ect0);
        assert!(packet.mark_ce());
        assert_eq!(packet.data[1] & 0x30, 0x30);
    }

    #[test]
    fn garbage_is_one_flow_and_not_ect() {
        for bytes in [vec![], vec![0x45], vec![0xFF; 60]] {
            let packet = Packet::from_ip(Instant::ZERO, bytes.clone());
            assert_eq!(packet.flow, 0);
            assert_eq!(packet.ecn, Ecn::NotEct);
            let frame = Packet::from_ethernet(Instant::ZERO, bytes);
            assert_eq!(frame.flow, 0);
        }
    }
}
