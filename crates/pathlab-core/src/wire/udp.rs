//! UDP headers (RFC 768): the fields' places, and [`UdpDatagram`], a checked view that
//! reads and writes them by name.

use std::net::{IpAddr, SocketAddr};

use super::checksum::{checksum_add, checksum_finish};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, Ipv6Packet};
use super::{HeaderError, PROTOCOL_UDP};

/// The header's fields: the one table every reader and writer of UDP headers uses.
pub mod field {
    /// A field's byte range.
    pub type Field = core::ops::Range<usize>;

    /// Source port.
    pub const SOURCE_PORT: Field = 0..2;
    /// Destination port.
    pub const DESTINATION_PORT: Field = 2..4;
    /// The datagram's length, header included.
    pub const LEN: Field = 4..6;
    /// Checksum (0: none, over IPv4).
    pub const CHECKSUM: Field = 6..8;
}

/// Bytes of the header (8).
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A checked view of a UDP datagram.
///
/// [`UdpDatagram::new_checked`] checks that the header is in the buffer; the accessors
/// then neither fail nor panic. The length field is read, not trusted (see
/// [`UdpDatagram::payload`]). Allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct UdpDatagram<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Reads `buffer` as a UDP datagram: its 8-byte header in the buffer.
    pub fn new_checked(buffer: T) -> Result<UdpDatagram<T>, HeaderError> {
        let len = buffer.as_ref().len();
        HeaderError::check_len("UDP", len, HEADER_LEN)?;
        Ok(UdpDatagram { buffer })
    }

    getters! {
        /// Source port.
        source_port: u16 = field::SOURCE_PORT;
        /// Destination port.
        destination_port: u16 = field::DESTINATION_PORT;
        /// The length the header states, bytes.
        len: u16 = field::LEN;
    }

    /// Whether the header states no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    getters! {
        /// Checksum.
        checksum: u16 = field::CHECKSUM;
    }

    /// The bytes after the header: up to the stated length where it lies between the
    /// header's end and the buffer's, else to the buffer's end.
    pub fn payload(&self) -> &[u8] {
        let bytes = self.bytes();
        let len = usize::from(self.len());
        let end = if (HEADER_LEN..=bytes.len()).contains(&len) {
            len
        } else {
            bytes.len()
        };
        &bytes[HEADER_LEN..end]
    }

    /// The buffer the view was made from.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

impl<'a> UdpDatagram<&'a [u8]> {
    /// [`UdpDatagram::payload`], borrowed from the buffer rather than from the view.
    pub fn into_payload(self) -> &'a [u8] {
        let len = self.payload().len();
        &self.buffer[HEADER_LEN..HEADER_LEN + len]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpDatagram<T> {
    setters! {
        /// Sets the source port.
        set_source_port: u16 = field::SOURCE_PORT;
        /// Sets the destination port.
        set_destination_port: u16 = field::DESTINATION_PORT;
        /// Sets the length.
        set_len: u16 = field::LEN;
        /// Sets the checksum as it is.
        set_checksum: u16 = field::CHECKSUM;
    }
}

/// The UDP checksum of `datagram` (its checksum field as it is) between `source` and
/// `destination`: 0 when the field holds the right one. A datagram over IPv4 without one
/// (field 0) is not checked here; the caller decides.
pub fn checksum_of(source: IpAddr, destination: IpAddr, datagram: &[u8]) -> u16 {
    let addresses = |address: IpAddr| match address {
        IpAddr::V4(v4) => checksum_add(0, &v4.octets()),
        IpAddr::V6(v6) => checksum_add(0, &v6.octets()),
    };
    let pseudo = addresses(source)
        + addresses(destination)
        + u64::from(PROTOCOL_UDP)
        + datagram.len() as u64;
    checksum_finish(checksum_add(pseudo, datagram))
}

/// A UDP datagram carrying `payload` from `source` to `destination` in an IPv4 or IPv6
/// packet (TTL or hop limit 64) with every checksum right, as a host's stack sends it;
/// `None` when the two addresses are of different families or the packet would pass
/// 65,535 bytes. For tests and simulations that hand packets to a kernel.
pub fn ip_packet(source: SocketAddr, destination: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let udp_len = u16::try_from(HEADER_LEN + payload.len()).ok()?;
    let ip_len = match (source.ip(), destination.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => ipv4::HEADER_LEN,
        (IpAddr::V6(_), IpAddr::V6(_)) => ipv6::HEADER_LEN,
        _ => return None,
    };
    let total = u16::try_from(ip_len + usize::from(udp_len)).ok()?;
    let mut packet = vec![0u8; usize::from(total)];
    let (header, datagram) = packet.split_at_mut(ip_len);
    let mut udp = UdpDatagram::new_checked(&mut *datagram).ok()?;
    udp.set_source_port(source.port());
    udp.set_destination_port(destination.port());
    udp.set_len(udp_len);
    datagram[HEADER_LEN..].copy_from_slice(payload);
    let checksum = match checksum_of(source.ip(), destination.ip(), datagram) {
        0 => 0xffff,
        sum => sum,
    };
    UdpDatagram::new_checked(&mut *datagram)
        .ok()?
        .set_checksum(checksum);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(from), IpAddr::V4(to)) => {
            let mut ip = Ipv4Packet::new_header(header).ok()?;
            ip.set_total_len(total);
            ip.set_ttl(64);
            ip.set_protocol(PROTOCOL_UDP);
            ip.set_source(from);
            ip.set_destination(to);
            ip.fill_checksum();
        }
        (IpAddr::V6(from), IpAddr::V6(to)) => {
            let mut ip = Ipv6Packet::new_header(header).ok()?;
            ip.set_payload_len(udp_len);
            ip.set_next_header(PROTOCOL_UDP);
            ip.set_hop_limit(64);
            ip.set_source(from);
            ip.set_destination(to);
        }
        _ => return None,
    }
    Some(packet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_as_written_and_the_length_bounds_the_payload() {
        let mut bytes = vec![0u8; 8 + 5 + 3];
        let mut udp = UdpDatagram::new_checked(&mut bytes[..]).unwrap();
        udp.set_source_port(4000);
        udp.set_destination_port(5000);
        udp.set_len(13);
        udp.set_checksum(0xffff);
        bytes[8..13].copy_from_slice(b"hello");
        let udp = UdpDatagram::new_checked(&bytes[..]).unwrap();
        assert_eq!(udp.source_port(), 4000);
        assert_eq!(udp.destination_port(), 5000);
        assert_eq!(udp.len(), 13);
        assert!(!udp.is_empty());
        assert_eq!(udp.checksum(), 0xffff);
        assert_eq!(udp.payload(), b"hello");
        // A length past the buffer, or inside the header: the buffer's end.
        for len in [100u16, 3] {
            let mut bytes = bytes.clone();
            bytes[field::LEN].copy_from_slice(&len.to_be_bytes());
            assert_eq!(
                UdpDatagram::new_checked(&bytes[..])
                    .unwrap()
                    .payload()
                    .len(),
                8
            );
        }
        assert!(matches!(
            UdpDatagram::new_checked(&bytes[..7]),
            Err(HeaderError::Truncated {
                len: 7,
                need: 8,
                ..
            })
        ));
    }

    #[test]
    fn a_built_packet_has_every_checksum_right_over_both_families() {
        let v4 = ip_packet(
            "198.18.0.1:4000".parse().unwrap(),
            "198.18.0.2:5000".parse().unwrap(),
            b"ping",
        )
        .unwrap();
        assert_eq!(v4.len(), 20 + 8 + 4);
        let ip = Ipv4Packet::new_checked(&v4[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.protocol(), ip.ttl(), ip.total_len()), (17, 64, 32));
        let udp = UdpDatagram::new_checked(ip.payload()).unwrap();
        assert_eq!((udp.source_port(), udp.destination_port()), (4000, 5000));
        assert_eq!(udp.payload(), b"ping");
        assert_eq!(
            checksum_of(ip.source().into(), ip.destination().into(), ip.payload()),
            0
        );
        let from: SocketAddr = "[2001:2::1]:53".parse().unwrap();
        let to: SocketAddr = "[2001:2::2]:9".parse().unwrap();
        let v6 = ip_packet(from, to, &[7; 100]).unwrap();
        let ip = Ipv6Packet::new_checked(&v6[..]).unwrap();
        assert_eq!(
            (ip.payload_len(), ip.next_header(), ip.hop_limit()),
            (108, 17, 64)
        );
        assert_eq!(checksum_of(from.ip(), to.ip(), ip.payload()), 0);
        assert_eq!(ip_packet(from, "198.18.0.2:9".parse().unwrap(), b""), None);
        assert_eq!(ip_packet(from, to, &vec![0; 65_528]), None);
    }
}
