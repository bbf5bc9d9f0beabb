//! IPv4 headers (RFC 791): the fields' places, and [`Ipv4Packet`], a checked view that
//! reads and writes them by name.

use std::net::Ipv4Addr;

use super::checksum::{checksum_add, checksum_finish, checksum_update};
use super::{u16_at, HeaderError};

/// The header's fields: the one table every reader and writer of IPv4 headers uses.
pub mod field {
    /// A field's byte range.
    pub type Field = core::ops::Range<usize>;

    /// Version (high nibble) and header length in 32-bit words (low nibble).
    pub const VERSION_IHL: usize = 0;
    /// DSCP (high six bits) and ECN (low two).
    pub const DSCP_ECN: usize = 1;
    /// The packet's length, header included.
    pub const TOTAL_LEN: Field = 2..4;
    /// Identification.
    pub const IDENT: Field = 4..6;
    /// Flags (high three bits) and fragment offset in 8-byte units.
    pub const FLAGS_FRAGMENT: Field = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// The payload's protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SOURCE: Field = 12..16;
    /// Destination address.
    pub const DESTINATION: Field = 16..20;
}

/// Bytes of a header without options (20).
pub const HEADER_LEN: usize = field::DESTINATION.end;
/// The flags' "more fragments" bit within [`field::FLAGS_FRAGMENT`].
pub const MORE_FRAGMENTS: u16 = 0x2000;
/// The flags' "don't fragment" bit.
pub const DONT_FRAGMENT: u16 = 0x4000;
/// The fragment offset's bits.
pub const FRAGMENT_OFFSET_MASK: u16 = 0x1fff;

/// A checked view of an IPv4 packet.
///
/// [`Ipv4Packet::new_checked`] checks the version and that the whole header, options
/// included, is in the buffer; the accessors then neither fail nor panic. The total length
/// is read, not trusted: a capture cut by its snaplen, or a super-packet a sender's TSO
/// made (total length 0), holds fewer or more bytes than it says, and
/// [`Ipv4Packet::payload`] is what the buffer holds after the header, up to the total
/// length where that is in range. Allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Reads `buffer` as an IPv4 packet: version 4, a header length of at least 20 bytes,
    /// all of it in the buffer.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>, HeaderError> {
        let bytes = buffer.as_ref();
        HeaderError::check_len("IPv4", bytes.len(), HEADER_LEN)?;
        let version = bytes[field::VERSION_IHL] >> 4;
        if version != 4 {
            return Err(HeaderError::Version {
                header: "IPv4",
                found: version,
            });
        }
        let header_len = usize::from(bytes[field::VERSION_IHL] & 0x0f) * 4;
        if header_len < HEADER_LEN {
            return Err(HeaderError::HeaderLen {
                header: "IPv4",
                len: header_len,
            });
        }
        HeaderError::check_len("IPv4", bytes.len(), header_len)?;
        Ok(Ipv4Packet { buffer })
    }

    /// The header's length, options included, bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.bytes()[field::VERSION_IHL] & 0x0f) * 4
    }

    getters! {
        /// DSCP and ECN, as the byte holds them.
        dscp_ecn: u8 = field::DSCP_ECN;
        /// The total length the header states, bytes.
        total_len: u16 = field::TOTAL_LEN;
        /// Identification.
        ident: u16 = field::IDENT;
        /// Flags and fragment offset, as the two bytes hold them.
        flags_fragment: u16 = field::FLAGS_FRAGMENT;
    }

    /// The fragment offset, in 8-byte units.
    pub fn fragment_offset(&self) -> u16 {
        self.flags_fragment() & FRAGMENT_OFFSET_MASK
    }

    /// Whether this is a fragment: more to come, or not the first.
    pub fn is_fragment(&self) -> bool {
        self.flags_fragment() & (MORE_FRAGMENTS | FRAGMENT_OFFSET_MASK) != 0
    }

    getters! {
        /// Time to live.
        ttl: u8 = field::TTL;
        /// The payload's protocol number.
        protocol: u8 = field::PROTOCOL;
        /// The header checksum.
        checksum: u16 = field::CHECKSUM;
    }

    /// Whether the header's checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum_finish(checksum_add(0, self.header())) == 0
    }

    getters! {
        /// The source address.
        source: Ipv4Addr = field::SOURCE;
        /// The destination address.
        destination: Ipv4Addr = field::DESTINATION;
    }

    /// The header's bytes, options included.
    pub fn header(&self) -> &[u8] {
        &self.bytes()[..self.header_len()]
    }

    /// The bytes after the header: up to the total length where it lies between the
    /// header's end and the buffer's, else to the buffer's end.
    pub fn payload(&self) -> &[u8] {
        let bytes = self.bytes();
        let total = usize::from(self.total_len());
        let end = if (self.header_len()..=bytes.len()).contains(&total) {
            total
        } else {
            bytes.len()
        };
        &bytes[self.header_len()..end]
    }

    /// The buffer the view was made from.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Makes an option-less header in `buffer` (at least [`HEADER_LEN`] bytes): version 4,
    /// header length 20, every other field zero, for the caller to set.
    pub fn new_header(mut buffer: T) -> Result<Ipv4Packet<T>, HeaderError> {
        let bytes = buffer.as_mut();
        HeaderError::check_len("IPv4", bytes.len(), HEADER_LEN)?;
        bytes[..HEADER_LEN].fill(0);
        bytes[field::VERSION_IHL] = 0x45;
        Ok(Ipv4Packet { buffer })
    }

    setters! {
        /// Sets DSCP and ECN.
        set_dscp_ecn: u8 = field::DSCP_ECN;
        /// Sets the total length.
        set_total_len: u16 = field::TOTAL_LEN;
        /// Sets the identification.
        set_ident: u16 = field::IDENT;
        /// Sets the flags and fragment offset.
        set_flags_fragment: u16 = field::FLAGS_FRAGMENT;
    }

    /// Sets DSCP and ECN and updates the checksum for the change alone (RFC 1624 eqn. 3),
    /// as a router does: a header whose checksum was wrong stays wrong by as much.
    pub fn rewrite_dscp_ecn(&mut self, value: u8) {
        let word = |ip: &Self| u16_at(ip.bytes(), field::VERSION_IHL);
        let old = word(self);
        self.set_dscp_ecn(value);
        let sum = checksum_update(self.checksum(), old, word(self));
        self.set_checksum(sum);
    }

    setters! {
        /// Sets the time to live.
        set_ttl: u8 = field::TTL;
        /// Sets the payload's protocol.
        set_protocol: u8 = field::PROTOCOL;
        /// Sets the checksum as it is (see [`Ipv4Packet::fill_checksum`]).
        set_checksum: u16 = field::CHECKSUM;
    }

    /// Computes the header's checksum over its other fields and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum_finish(checksum_add(0, self.header()));
        self.set_checksum(sum);
    }

    setters! {
        /// Sets the source address.
        set_source: Ipv4Addr = field::SOURCE;
        /// Sets the destination address.
        set_destination: Ipv4Addr = field::DESTINATION;
    }

    /// The bytes after the header, as [`Ipv4Packet::payload`] bounds them, to write.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = {
            let payload = self.payload();
            let start = self.header_len();
            start..start + payload.len()
        };
        &mut self.bytes_mut()[range]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's worked example is for words; this is a header Wireshark shows as valid:
    /// 198.18.0.1 to 198.18.0.2, UDP, 28 bytes, TTL 64, id 0x1c46, DF.
    fn header() -> [u8; 28] {
        let mut bytes = [0u8; 28];
        let mut ip = Ipv4Packet::new_header(&mut bytes[..]).unwrap();
        ip.set_total_len(28);
        ip.set_ident(0x1c46);
        ip.set_flags_fragment(DONT_FRAGMENT);
        ip.set_ttl(64);
        ip.set_protocol(17);
        ip.set_source(Ipv4Addr::new(198, 18, 0, 1));
        ip.set_destination(Ipv4Addr::new(198, 18, 0, 2));
        ip.fill_checksum();
        bytes
    }

    #[test]
    fn fields_read_back_as_written_and_the_checksum_verifies() {
        let bytes = header();
        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.total_len(), 28);
        assert_eq!(ip.ident(), 0x1c46);
        assert!(!ip.is_fragment());
        assert_eq!(ip.ttl(), 64);
        assert_eq!(ip.protocol(), 17);
        assert_eq!(ip.source(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(ip.destination(), Ipv4Addr::new(198, 18, 0, 2));
        assert!(ip.verify_checksum());
        assert_eq!(ip.payload().len(), 8);
        // The checksum by hand: the header's 16-bit words, folded and complemented.
        let mut sum: u32 = bytes[..20]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "a right header sums to all ones");
        let mut corrupt = bytes;
        corrupt[field::TTL] = 63;
        assert!(!Ipv4Packet::new_checked(&corrupt[..])
            .unwrap()
            .verify_checksum());
    }

    #[test]
    fn the_payload_ends_at_the_total_length_when_it_is_in_range() {
        let mut bytes = header().to_vec();
        bytes.extend_from_slice(&[0xee; 6]); // Ethernet padding after the datagram
        assert_eq!(
            Ipv4Packet::new_checked(&bytes[..]).unwrap().payload().len(),
            8
        );
        // A TSO super-packet says 0; a snaplen cut the rest: the buffer's end.
        bytes[field::TOTAL_LEN].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&bytes[..]).unwrap().payload().len(),
            14
        );
        bytes[field::TOTAL_LEN].copy_from_slice(&1500u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&bytes[..]).unwrap().payload().len(),
            14
        );
    }

    #[test]
    fn fragments_are_told_apart() {
        let mut bytes = header();
        for (flags, fragment) in [(0, false), (MORE_FRAGMENTS, true), (185, true)] {
            let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
            ip.set_flags_fragment(flags);
            assert_eq!(ip.is_fragment(), fragment, "{flags:#x}");
        }
    }

    #[test]
    fn short_wrong_version_and_cut_options_are_errors() {
        let bytes = header();
        assert_eq!(
            Ipv4Packet::new_checked(&bytes[..19]).unwrap_err(),
            HeaderError::Truncated {
                header: "IPv4",
                len: 19,
                need: 20
            }
        );
        let mut six = bytes;
        six[0] = 0x65;
        assert!(matches!(
            Ipv4Packet::new_checked(&six[..]),
            Err(HeaderError::Version { found: 6, .. })
        ));
        let mut short_ihl = bytes;
        short_ihl[0] = 0x44;
        assert!(matches!(
            Ipv4Packet::new_checked(&short_ihl[..]),
            Err(HeaderError::HeaderLen { len: 16, .. })
        ));
        let mut options = bytes;
        options[0] = 0x4f; // 60 bytes of header in a 28-byte buffer
        assert!(matches!(
            Ipv4Packet::new_checked(&options[..]),
            Err(HeaderError::Truncated { need: 60, .. })
        ));
        assert!(Ipv4Packet::new_header(&mut [0u8; 19][..]).is_err());
    }
}
