//! The inner packets' IP headers, as far as the tunnel reads them: version and addresses
//! (to tell users apart and to route to the right session).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where each header field lives: the one table the tunnel's readers of inner packets
/// (this module, [`crate::headers`]) share.
pub(crate) mod field {
    pub mod ipv4 {
        pub const VERSION_IHL: usize = 0;
        pub const TOS: usize = 1;
        pub const TOTAL_LEN: std::ops::Range<usize> = 2..4;
        pub const ID: std::ops::Range<usize> = 4..6;
        pub const FLAGS_FRAGMENT: std::ops::Range<usize> = 6..8;
        pub const TTL: usize = 8;
        pub const PROTOCOL: usize = 9;
        pub const CHECKSUM: std::ops::Range<usize> = 10..12;
        pub const SOURCE: std::ops::Range<usize> = 12..16;
        pub const DESTINATION: std::ops::Range<usize> = 16..20;
        pub const MIN_HEADER: usize = 20;
    }
    pub mod udp {
        pub const SOURCE_PORT: std::ops::Range<usize> = 0..2;
        pub const DESTINATION_PORT: std::ops::Range<usize> = 2..4;
        pub const LEN: std::ops::Range<usize> = 4..6;
        pub const CHECKSUM: std::ops::Range<usize> = 6..8;
        pub const HEADER: usize = 8;
    }
    pub mod tcp {
        pub const SEQ: std::ops::Range<usize> = 4..8;
        pub const ACK: std::ops::Range<usize> = 8..12;
        /// Data offset (high nibble) and reserved bits.
        pub const DATA_OFFSET: usize = 12;
        pub const FLAGS: usize = 13;
        pub const WINDOW: std::ops::Range<usize> = 14..16;
        pub const CHECKSUM: std::ops::Range<usize> = 16..18;
        pub const URGENT: std::ops::Range<usize> = 18..20;
        pub const MIN_HEADER: usize = 20;
        pub const MAX_HEADER: usize = 60;
    }
    pub mod ipv6 {
        pub const PAYLOAD_LEN: std::ops::Range<usize> = 4..6;
        pub const NEXT_HEADER: usize = 6;
        pub const HOP_LIMIT: usize = 7;
        pub const SOURCE: std::ops::Range<usize> = 8..24;
        pub const DESTINATION: std::ops::Range<usize> = 24..40;
        pub const HEADER: usize = 40;
    }
    /// IP protocol numbers.
    pub const PROTOCOL_TCP: u8 = 6;
    pub const PROTOCOL_UDP: u8 = 17;
}

/// An IPv4/UDP packet of `len` bytes (at least 28) from `source` to `destination`, ports
/// 4000 to 5000, TTL 64, its payload zeros (checksums left zero: for simulations and
/// tests, which never hand it to a kernel).
pub fn ipv4_udp(source: Ipv4Addr, destination: Ipv4Addr, len: usize) -> Vec<u8> {
    use field::{ipv4, udp};
    let len = len.max(ipv4::MIN_HEADER + udp::HEADER);
    let mut packet = vec![0u8; len];
    packet[ipv4::VERSION_IHL] = 0x45;
    packet[ipv4::TOTAL_LEN].copy_from_slice(&(len as u16).to_be_bytes());
    packet[ipv4::TTL] = 64;
    packet[ipv4::PROTOCOL] = field::PROTOCOL_UDP;
    packet[ipv4::SOURCE].copy_from_slice(&source.octets());
    packet[ipv4::DESTINATION].copy_from_slice(&destination.octets());
    let udp = &mut packet[ipv4::MIN_HEADER..];
    udp[udp::SOURCE_PORT].copy_from_slice(&4000u16.to_be_bytes());
    udp[udp::DESTINATION_PORT].copy_from_slice(&5000u16.to_be_bytes());
    udp[udp::LEN].copy_from_slice(&((len - ipv4::MIN_HEADER) as u16).to_be_bytes());
    packet
}

/// The IP version of a packet (the first byte's high nibble), if 4 or 6.
pub fn version(packet: &[u8]) -> Option<u8> {
    packet
        .first()
        .map(|b| b >> 4)
        .filter(|v| *v == 4 || *v == 6)
}

/// The source and destination addresses of an IPv4 or IPv6 packet.
pub fn addresses(packet: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match version(packet)? {
        4 if packet.len() >= field::ipv4::MIN_HEADER => {
            let source: [u8; 4] = packet[field::ipv4::SOURCE].try_into().ok()?;
            let destination: [u8; 4] = packet[field::ipv4::DESTINATION].try_into().ok()?;
            Some((
                Ipv4Addr::from(source).into(),
                Ipv4Addr::from(destination).into(),
            ))
        }
        6 if packet.len() >= field::ipv6::HEADER => {
            let source: [u8; 16] = packet[field::ipv6::SOURCE].try_into().ok()?;
            let destination: [u8; 16] = packet[field::ipv6::DESTINATION].try_into().ok()?;
            Some((
                Ipv6Addr::from(source).into(),
                Ipv6Addr::from(destination).into(),
            ))
        }
        _ => None,
    }
}

/// The bytes of the source address, for keying users.
pub fn source_bytes(packet: &[u8]) -> Option<&[u8]> {
    match version(packet)? {
        4 if packet.len() >= field::ipv4::MIN_HEADER => Some(&packet[field::ipv4::SOURCE]),
        6 if packet.len() >= field::ipv6::HEADER => Some(&packet[field::ipv6::SOURCE]),
        _ => None,
    }
}

/// The bytes of the destination address, for keying the site's users at the server.
pub fn destination_bytes(packet: &[u8]) -> Option<&[u8]> {
    match version(packet)? {
        4 if packet.len() >= field::ipv4::MIN_HEADER => Some(&packet[field::ipv4::DESTINATION]),
        6 if packet.len() >= field::ipv6::HEADER => Some(&packet[field::ipv6::DESTINATION]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
