//! The inner packets' IP headers, as far as the tunnel reads them: version and addresses
//! (to tell users apart and to route to the right session); and, in TAP mode
//! ([`Framing::Ethernet`]), the Ethernet header and VLAN tags in front of them, read with
//! `pathlab-core`'s one Ethernet view ([`EthernetFrame`]).
//!
//! How a TAP frame is classified (decided here, documented in `docs/bond.md`):
//! - its **flow** is the IP flow of the packet under the header and tags (the 5-tuple, as
//!   [`Packet::from_ethernet`] hashes it), with the VLAN ids of its tags mixed in, so the
//!   same addresses in two VLANs are two flows; a frame that is not IP (ARP, LLDP...) is
//!   one flow per EtherType, source MAC address and VLAN ids;
//! - its **user** (the fair queue's `FairKey::Source`) is the inner IP address on the site's side (the
//!   source going up, the destination coming down) with the VLAN ids, or for a frame that
//!   is not IP the MAC address on that side with the VLAN ids. An untagged IP frame's user
//!   is the one its IP packet would have through a TUN device.

use std::net::{IpAddr, Ipv4Addr};

use pathlab_core::packet::flow_hash;
use pathlab_core::wire;
use pathlab_core::wire::ethernet::{self, EthernetFrame};
use pathlab_core::wire::ipv4::{self, Ipv4Packet};
use pathlab_core::wire::ipv6::Ipv6Packet;
use pathlab_core::wire::udp::{self, UdpDatagram};
use pathlab_core::{Instant, Packet};

/// What the tunnel device reads and writes, so what an inner packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// IP packets (a TUN device): byte 0 is the IP version.
    #[default]
    Ip,
    /// Ethernet frames with their VLAN tags (a TAP device, `--tap`): the IP packet, if
    /// any, starts after the header and the tags ([`Packet::ip_offset`]).
    Ethernet,
}

impl Framing {
    /// Bytes of a full-size frame beyond the device's MTU, which the MTU must leave room
    /// for so that a frame still goes whole in one datagram: none for IP; for Ethernet its
    /// header and one 802.1Q tag (what a tagged port of a bridge adds, and what the kernel
    /// lets a frame carry beyond the MTU). A frame with more tags (802.1ad over 802.1Q) of
    /// full size crosses in two fragments.
    pub const fn device_overhead_bytes(self) -> usize {
        match self {
            Framing::Ip => 0,
            Framing::Ethernet => ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN,
        }
    }

    /// Whether every inner packet is an IP packet from its first byte. Header compression
    /// works on IP packets: where this is false it must leave the packet alone (or work on
    /// the IP packet at [`Packet::ip_offset`], keeping the bytes before it as they are).
    pub const fn carries_bare_ip(self) -> bool {
        matches!(self, Framing::Ip)
    }
}

/// The [`Packet`] an inner packet of `framing` is queued as, its `flow` set as the module
/// says (for IP framing, [`Packet::from_ip`]'s 5-tuple).
pub fn packet(now: Instant, data: Vec<u8>, framing: Framing) -> Packet {
    match framing {
        Framing::Ip => Packet::from_ip(now, data),
        Framing::Ethernet => {
            let mut packet = Packet::from_ethernet(now, data);
            if let Ok(frame) = EthernetFrame::new_checked(packet.data.as_slice()) {
                let (vids, len) = vlan_ids(&frame);
                packet.flow = match packet.ip_offset() {
                    Some(_) if len == 0 => packet.flow,
                    Some(_) => flow_hash(&[&packet.flow.to_be_bytes(), &vids[..len]]),
                    None => flow_hash(&[
                        &frame.ethertype().to_be_bytes(),
                        &frame.source(),
                        &vids[..len],
                    ]),
                };
            }
            packet
        }
    }
}

/// The user a frame of [`Framing::Ethernet`] belongs to, as the fair queue's key (what
/// `fair::source_key` and `destination_key` are for IP packets, and equal to them for an
/// untagged IP frame): the site's side is the source going up (`downward` false, a client)
/// and the destination coming down (a server). 0 for a frame too short to read.
pub fn frame_user_key(packet: &Packet, downward: bool) -> u64 {
    let Ok(frame) = EthernetFrame::new_checked(packet.data.as_slice()) else {
        return 0;
    };
    let (vids, len) = vlan_ids(&frame);
    let ip = packet.ip_offset().and_then(|offset| {
        let (source, destination) = addresses(&packet.data[offset..])?;
        Some(if downward { destination } else { source })
    });
    let vids = &vids[..len];
    match ip {
        Some(ip) => with_octets(ip, |octets| flow_hash(&[octets, vids])),
        None => {
            let mac = if downward {
                frame.destination()
            } else {
                frame.source()
            };
            flow_hash(&[&mac, vids])
        }
    }
}

/// The VLAN ids of a frame's tags, outermost first, two bytes each, and how many bytes.
fn vlan_ids(frame: &EthernetFrame<&[u8]>) -> ([u8; 2 * ethernet::MAX_VLAN_TAGS], usize) {
    let mut vids = [0u8; 2 * ethernet::MAX_VLAN_TAGS];
    let mut len = 0;
    for tag in frame.vlan_tags() {
        vids[len..len + 2].copy_from_slice(&tag.vid().to_be_bytes());
        len += 2;
    }
    (vids, len)
}

/// An IPv4/UDP packet of `len` bytes (at least 28) from `source` to `destination`, ports
/// 4000 to 5000, TTL 64, its payload zeros (checksums left zero: for simulations and
/// tests, which never hand it to a kernel).
pub fn ipv4_udp(source: Ipv4Addr, destination: Ipv4Addr, len: usize) -> Vec<u8> {
    let len = len.max(ipv4::HEADER_LEN + udp::HEADER_LEN);
    let mut packet = vec![0u8; len];
    let mut ip = Ipv4Packet::new_header(&mut packet[..]).expect("at least a header's bytes");
    ip.set_total_len(len as u16);
    ip.set_ttl(64);
    ip.set_protocol(wire::PROTOCOL_UDP);
    ip.set_source(source);
    ip.set_destination(destination);
    let mut udp = UdpDatagram::new_checked(ip.payload_mut()).expect("at least a header's bytes");
    udp.set_source_port(4000);
    udp.set_destination_port(5000);
    udp.set_len((len - ipv4::HEADER_LEN) as u16);
    packet
}

/// The source and destination addresses of an IPv4 or IPv6 packet.
pub fn addresses(packet: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match wire::ip_version(packet)? {
        4 => {
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            Some((ip.source().into(), ip.destination().into()))
        }
        _ => {
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            Some((ip.source().into(), ip.destination().into()))
        }
    }
}

/// `hash` of an address's bytes as a packet carries them (4 or 16).
pub fn with_octets<R>(address: IpAddr, hash: impl FnOnce(&[u8]) -> R) -> R {
    match address {
        IpAddr::V4(v4) => hash(&v4.octets()),
        IpAddr::V6(v6) => hash(&v6.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    /// A frame from MAC_A to MAC_B with `tags` (TPID, VID), around `payload` of `ethertype`.
    fn frame(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        frame.extend_from_slice(&MAC_B);
        frame.extend_from_slice(&MAC_A);
        for &(tpid, vid) in tags {
            frame.extend_from_slice(&tpid.to_be_bytes());
            frame.extend_from_slice(&vid.to_be_bytes());
        }
        frame.extend_from_slice(&ethertype.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    fn udp(source: [u8; 4], destination: [u8; 4]) -> Vec<u8> {
        ipv4_udp(source.into(), destination.into(), 60)
    }

    #[test]
    fn a_frame_is_its_ip_flow_with_its_vlan_ids_and_its_user_is_its_address_per_vlan() {
        let ip = udp([198, 18, 0, 1], [198, 18, 0, 2]);
        let at = |data: Vec<u8>| packet(Instant::ZERO, data, Framing::Ethernet);
        let untagged = at(frame(&[], ethernet::ETHERTYPE_IPV4, &ip));
        let vlan10 = at(frame(&[(0x8100, 10)], ethernet::ETHERTYPE_IPV4, &ip));
        let vlan20 = at(frame(&[(0x8100, 20)], ethernet::ETHERTYPE_IPV4, &ip));
        let qinq = at(frame(
            &[(0x88a8, 100), (0x8100, 10)],
            ethernet::ETHERTYPE_IPV4,
            &ip,
        ));
        let through_tun = packet(Instant::ZERO, ip.clone(), Framing::Ip);
        // Untagged: the flow a TUN device would have given the packet, and the user its
        // address (tests/sessions.rs checks it is the fair queue's key of the packet).
        assert_eq!(untagged.flow, through_tun.flow);
        assert_eq!(untagged.ip_offset(), Some(14));
        assert_eq!(frame_user_key(&untagged, false), flow_hash(&[&ip[12..16]]));
        assert_eq!(frame_user_key(&untagged, true), flow_hash(&[&ip[16..20]]));
        // Tagged: the same packet in each VLAN is a flow and a user of its own.
        let flows = [untagged.flow, vlan10.flow, vlan20.flow, qinq.flow];
        let users = [&untagged, &vlan10, &vlan20, &qinq].map(|p| frame_user_key(p, false));
        for i in 0..4 {
            for j in i + 1..4 {
                assert_ne!(flows[i], flows[j], "flows {i} and {j}");
                assert_ne!(users[i], users[j], "users {i} and {j}");
            }
        }
        assert_eq!(qinq.ip_offset(), Some(22));
        // Another port of the same hosts: another flow, the same user.
        let mut other_port = ip.clone();
        other_port[20] = 9;
        let other = at(frame(
            &[(0x8100, 10)],
            ethernet::ETHERTYPE_IPV4,
            &other_port,
        ));
        assert_ne!(other.flow, vlan10.flow);
        assert_eq!(frame_user_key(&other, false), users[1]);
    }

    #[test]
    fn a_frame_that_is_not_ip_is_a_flow_per_source_mac_and_vlan_and_garbage_is_zero() {
        let arp = frame(&[(0x8100, 10)], 0x0806, &[0; 28]);
        let a = packet(Instant::ZERO, arp.clone(), Framing::Ethernet);
        assert_eq!(a.ip_offset(), None);
        assert_ne!(a.flow, 0);
        let mut from_b = arp.clone();
        from_b[6..12].copy_from_slice(&MAC_B);
        let b = packet(Instant::ZERO, from_b, Framing::Ethernet);
        assert_ne!(a.flow, b.flow);
        let other_vlan = packet(
            Instant::ZERO,
            frame(&[(0x8100, 20)], 0x0806, &[0; 28]),
            Framing::Ethernet,
        );
        assert_ne!(a.flow, other_vlan.flow);
        // Its user is the MAC address on the site's side.
        assert_ne!(frame_user_key(&a, false), frame_user_key(&a, true));
        // Too short for a header, or a tag cut short: flow and user 0, no panic.
        for bad in [vec![0u8; 13], frame(&[], 0x8100, &[0x00])] {
            let p = packet(Instant::ZERO, bad, Framing::Ethernet);
            assert_eq!((p.flow, frame_user_key(&p, false)), (0, 0));
        }
    }

    proptest::proptest! {
        /// Whatever a TAP hands over (a peer's frames come out of it at the far end), it
        /// is classified without a panic.
        #[test]
        fn any_bytes_are_classified_without_panicking(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            tags in 0usize..6,
        ) {
            let mut data = data;
            let at = 12.min(data.len());
            for _ in 0..tags {
                data.splice(at..at, [0x81, 0x00, 0x00, 0x0a]);
            }
            let p = packet(Instant::ZERO, data, Framing::Ethernet);
            let _ = (frame_user_key(&p, false), frame_user_key(&p, true));
        }
    }

    #[test]
    fn the_device_mtu_leaves_room_for_the_ethernet_header_and_one_tag() {
        assert_eq!(Framing::Ip.device_overhead_bytes(), 0);
        assert_eq!(Framing::Ethernet.device_overhead_bytes(), 18);
        assert!(Framing::Ip.carries_bare_ip());
        assert!(!Framing::Ethernet.carries_bare_ip());
    }

    #[test]
    fn addresses_of_both_versions_and_nothing_from_garbage() {
        let mut v4 = vec![0u8; 20];
        v4[0] = 0x45;
        v4[12..16].copy_from_slice(&[198, 18, 0, 1]);
        v4[16..20].copy_from_slice(&[198, 18, 0, 2]);
        assert_eq!(
            addresses(&v4),
            Some(("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap()))
        );
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[8..24].copy_from_slice(&"2001:2::1".parse::<Ipv6Addr>().unwrap().octets());
        v6[24..40].copy_from_slice(&"2001:2::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(
            addresses(&v6).map(|(s, _)| s),
            Some("2001:2::1".parse().unwrap())
        );
        assert_eq!(addresses(&v4[..19]), None);
        assert_eq!(addresses(&[0x50; 40]), None);
        assert_eq!(addresses(&[]), None);
    }
}
