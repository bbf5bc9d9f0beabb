//! IPv6 headers (RFC 8200): the fields' places, and [`Ipv6Packet`], a checked view that
//! reads and writes them by name and walks the extension headers to the upper layer.

use std::net::Ipv6Addr;

use super::HeaderError;

/// The header's fields: the one table every reader and writer of IPv6 headers uses.
pub mod field {
    /// A field's byte range.
    pub type Field = core::ops::Range<usize>;

    /// Version (4 bits), traffic class (8) and flow label (20).
    pub const VERSION_CLASS_LABEL: Field = 0..4;
    /// The payload's length, extension headers included.
    pub const PAYLOAD_LEN: Field = 4..6;
    /// The first extension header's or the upper layer's protocol.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SOURCE: Field = 8..24;
    /// Destination address.
    pub const DESTINATION: Field = 24..40;
}

/// Bytes of the fixed header (40).
pub const HEADER_LEN: usize = field::DESTINATION.end;

/// Extension headers [`Ipv6Packet::upper_layer`] walks over: hop-by-hop options, routing,
/// fragment, destination options.
pub const HOP_BY_HOP: u8 = 0;
/// Routing header.
pub const ROUTING: u8 = 43;
/// Fragment header (8 bytes).
pub const FRAGMENT: u8 = 44;
/// Destination options.
pub const DESTINATION_OPTIONS: u8 = 60;
/// More extension headers than this in one packet end the walk: a packet made of them
/// is not walked for long.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Why [`Ipv6Packet::upper_layer`] found no upper-layer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionError {
    /// The buffer ends inside an extension header.
    #[error("the packet ends inside its IPv6 extension headers")]
    Truncated,
    /// A fragment other than the first: the upper layer's header is in the first.
    #[error("a fragment other than the first")]
    LaterFragment,
    /// More than [`MAX_EXTENSION_HEADERS`].
    #[error("more than {MAX_EXTENSION_HEADERS} IPv6 extension headers")]
    TooMany,
}

/// A checked view of an IPv6 packet.
///
/// [`Ipv6Packet::new_checked`] checks the version and that the fixed header is in the
/// buffer; the accessors then neither fail nor panic. The payload length is read, not
/// trusted (see [`Ipv6Packet::payload`]). Allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Reads `buffer` as an IPv6 packet: version 6, the 40-byte header in the buffer.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>, HeaderError> {
        let bytes = buffer.as_ref();
        HeaderError::check_len("IPv6", bytes.len(), HEADER_LEN)?;
        let version = bytes[0] >> 4;
        if version != 6 {
            return Err(HeaderError::Version {
                header: "IPv6",
                found: version,
            });
        }
        Ok(Ipv6Packet { buffer })
    }

    /// The traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        let bytes = self.bytes();
        (bytes[0] << 4) | (bytes[1] >> 4)
    }

    /// The flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        let bytes = self.bytes();
        u32::from_be_bytes([0, bytes[1] & 0x0f, bytes[2], bytes[3]])
    }

    getters! {
        /// The payload length the header states, bytes.
        payload_len: u16 = field::PAYLOAD_LEN;
        /// The protocol of what follows the fixed header.
        next_header: u8 = field::NEXT_HEADER;
        /// Hop limit.
        hop_limit: u8 = field::HOP_LIMIT;
    }

    /// The bytes after the fixed header: up to the payload length where it fits in the
    /// buffer, else to the buffer's end (a capture's snaplen, a super-packet's 0).
    pub fn payload(&self) -> &[u8] {
        let bytes = self.bytes();
        let end = HEADER_LEN + usize::from(self.payload_len());
        &bytes[HEADER_LEN..end.min(bytes.len())]
    }

    getters! {
        /// The source address.
        source: Ipv6Addr = field::SOURCE;
        /// The destination address.
        destination: Ipv6Addr = field::DESTINATION;
    }

    /// The upper layer behind the extension headers this walk knows ([`HOP_BY_HOP`],
    /// [`ROUTING`], [`FRAGMENT`], [`DESTINATION_OPTIONS`]): its protocol and its offset
    /// from the packet's start (which may be the buffer's end: no upper-layer bytes held).
    pub fn upper_layer(&self) -> Result<(u8, usize), ExtensionError> {
        let bytes = self.bytes();
        let byte = |at: usize| bytes.get(at).copied().ok_or(ExtensionError::Truncated);
        let mut protocol = self.next_header();
        let mut at = HEADER_LEN;
        for _ in 0..=MAX_EXTENSION_HEADERS {
            let len = match protocol {
                HOP_BY_HOP | ROUTING | DESTINATION_OPTIONS => 8 + usize::from(byte(at + 1)?) * 8,
                FRAGMENT => {
                    let offset = u16::from_be_bytes([byte(at + 2)?, byte(at + 3)?]);
                    if offset >> 3 != 0 {
                        return Err(ExtensionError::LaterFragment);
                    }
                    8
                }
                _ if at <= bytes.len() => return Ok((protocol, at)),
                _ => return Err(ExtensionError::Truncated),
            };
            protocol = byte(at)?;
            at += len;
        }
        Err(ExtensionError::TooMany)
    }

    /// The buffer the view was made from.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Makes a header in `buffer` (at least [`HEADER_LEN`] bytes): version 6, every other
    /// field zero, for the caller to set.
    pub fn new_header(mut buffer: T) -> Result<Ipv6Packet<T>, HeaderError> {
        let bytes = buffer.as_mut();
        HeaderError::check_len("IPv6", bytes.len(), HEADER_LEN)?;
        bytes[..HEADER_LEN].fill(0);
        bytes[0] = 0x60;
        Ok(Ipv6Packet { buffer })
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, value: u8) {
        let bytes = self.buffer.as_mut();
        bytes[0] = (bytes[0] & 0xf0) | (value >> 4);
        bytes[1] = (bytes[1] & 0x0f) | (value << 4);
    }

    /// Sets the flow label (its low 20 bits).
    pub fn set_flow_label(&mut self, value: u32) {
        let [_, high, middle, low] = (value & 0x000f_ffff).to_be_bytes();
        let bytes = self.buffer.as_mut();
        bytes[1] = (bytes[1] & 0xf0) | high;
        bytes[2] = middle;
        bytes[3] = low;
    }

    setters! {
        /// Sets the payload length.
        set_payload_len: u16 = field::PAYLOAD_LEN;
        /// Sets the next header.
        set_next_header: u8 = field::NEXT_HEADER;
        /// Sets the hop limit.
        set_hop_limit: u8 = field::HOP_LIMIT;
        /// Sets the source address.
        set_source: Ipv6Addr = field::SOURCE;
        /// Sets the destination address.
        set_destination: Ipv6Addr = field::DESTINATION;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(payload: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; HEADER_LEN];
        bytes.extend_from_slice(payload);
        let mut ip = Ipv6Packet::new_header(&mut bytes[..]).unwrap();
        ip.set_traffic_class(0xb9);
        ip.set_flow_label(0xabcde);
        ip.set_payload_len(payload.len() as u16);
        ip.set_next_header(17);
        ip.set_hop_limit(64);
        ip.set_source("2001:2::1".parse().unwrap());
        ip.set_destination("2001:2::2".parse().unwrap());
        bytes
    }

    #[test]
    fn fields_read_back_as_written() {
        let bytes = packet(&[1; 8]);
        assert_eq!(&bytes[..4], &[0x6b, 0x9a, 0xbc, 0xde]);
        let ip = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ip.traffic_class(), 0xb9);
        assert_eq!(ip.flow_label(), 0xabcde);
        assert_eq!(ip.payload_len(), 8);
        assert_eq!(ip.next_header(), 17);
        assert_eq!(ip.hop_limit(), 64);
        assert_eq!(ip.source(), "2001:2::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ip.destination(), "2001:2::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ip.payload(), &[1; 8]);
        assert_eq!(ip.upper_layer(), Ok((17, 40)));
    }

    #[test]
    fn extension_headers_are_walked_to_the_upper_layer() {
        // Hop-by-hop (8 bytes), destination options (16), a first fragment (8), then TCP.
        let mut payload = vec![DESTINATION_OPTIONS, 0, 0, 0, 0, 0, 0, 0];
        payload.extend_from_slice(&[FRAGMENT, 1, 0, 0, 0, 0, 0, 0]);
        payload.extend_from_slice(&[0; 8]);
        payload.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 7]); // offset 0, more fragments
        payload.extend_from_slice(&[0; 20]);
        let mut bytes = packet(&payload);
        bytes[field::NEXT_HEADER] = HOP_BY_HOP;
        let ip = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ip.upper_layer(), Ok((6, 40 + 32)));
        // A later fragment has no TCP header; a cut walk and a loop of headers end.
        let mut later = bytes.clone();
        later[40 + 24 + 2..40 + 24 + 4].copy_from_slice(&(185u16 << 3).to_be_bytes());
        let walk = |bytes: &[u8]| Ipv6Packet::new_checked(bytes).unwrap().upper_layer();
        assert_eq!(walk(&later), Err(ExtensionError::LaterFragment));
        assert_eq!(walk(&bytes[..45]), Err(ExtensionError::Truncated));
        assert_eq!(walk(&bytes[..40 + 31]), Err(ExtensionError::Truncated));
        assert_eq!(
            walk(&bytes[..40 + 32]),
            Ok((6, 72)),
            "no TCP bytes, the offset found"
        );
        let mut chain = packet(&[HOP_BY_HOP, 0, 0, 0, 0, 0, 0, 0].repeat(20));
        chain[field::NEXT_HEADER] = HOP_BY_HOP;
        assert_eq!(walk(&chain), Err(ExtensionError::TooMany));
    }

    #[test]
    fn the_payload_is_bounded_by_the_buffer() {
        let mut bytes = packet(&[2; 10]);
        bytes[field::PAYLOAD_LEN].copy_from_slice(&9000u16.to_be_bytes());
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..]).unwrap().payload().len(),
            10
        );
        bytes[field::PAYLOAD_LEN].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..]).unwrap().payload().len(),
            4
        );
    }

    #[test]
    fn short_and_wrong_version_are_errors() {
        let bytes = packet(&[]);
        assert!(matches!(
            Ipv6Packet::new_checked(&bytes[..39]),
            Err(HeaderError::Truncated {
                len: 39,
                need: 40,
                ..
            })
        ));
        let mut four = bytes;
        four[0] = 0x45;
        assert!(matches!(
            Ipv6Packet::new_checked(&four[..]),
            Err(HeaderError::Version { found: 4, .. })
        ));
    }
}
