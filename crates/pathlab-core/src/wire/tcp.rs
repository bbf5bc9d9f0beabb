//! TCP headers (RFC 9293): the fields' places, the flags, and [`TcpSegment`], a checked
//! view that reads and writes them by name.

use super::HeaderError;

/// The header's fields: the one table every reader and writer of TCP headers uses.
pub mod field {
    /// A field's byte range.
    pub type Field = core::ops::Range<usize>;

    /// Source port.
    pub const SOURCE_PORT: Field = 0..2;
    /// Destination port.
    pub const DESTINATION_PORT: Field = 2..4;
    /// Sequence number.
    pub const SEQ: Field = 4..8;
    /// Acknowledgment number.
    pub const ACK: Field = 8..12;
    /// Data offset in 32-bit words (high nibble) and reserved bits.
    pub const DATA_OFFSET: usize = 12;
    /// The flags (CWR to FIN).
    pub const FLAGS: usize = 13;
    /// Receive window.
    pub const WINDOW: Field = 14..16;
    /// Checksum.
    pub const CHECKSUM: Field = 16..18;
    /// Urgent pointer.
    pub const URGENT: Field = 18..20;
}

/// Bytes of a header without options (20).
pub const HEADER_LEN: usize = field::URGENT.end;
/// Bytes of the longest header: data offset 15 (60).
pub const MAX_HEADER_LEN: usize = 60;

/// FIN.
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;
/// PSH.
pub const PSH: u8 = 0x08;
/// ACK.
pub const ACK: u8 = 0x10;
/// URG.
pub const URG: u8 = 0x20;
/// ECE.
pub const ECE: u8 = 0x40;
/// CWR.
pub const CWR: u8 = 0x80;

/// A checked view of a TCP segment.
///
/// [`TcpSegment::new_checked`] checks that the fixed header is in the buffer and that the
/// data offset is not below it; the accessors then neither fail nor panic. The options may
/// be cut (a capture's snaplen): [`TcpSegment::options`] is what the buffer holds of them,
/// [`TcpSegment::is_cut`] says whether that is all. Allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Reads `buffer` as a TCP segment: its 20 fixed bytes in the buffer, a data offset of
    /// at least 20 bytes.
    pub fn new_checked(buffer: T) -> Result<TcpSegment<T>, HeaderError> {
        let bytes = buffer.as_ref();
        HeaderError::check_len("TCP", bytes.len(), HEADER_LEN)?;
        let header_len = usize::from(bytes[field::DATA_OFFSET] >> 4) * 4;
        if header_len < HEADER_LEN {
            return Err(HeaderError::HeaderLen {
                header: "TCP",
                len: header_len,
            });
        }
        Ok(TcpSegment { buffer })
    }

    getters! {
        /// Source port.
        source_port: u16 = field::SOURCE_PORT;
        /// Destination port.
        destination_port: u16 = field::DESTINATION_PORT;
        /// Sequence number.
        seq: u32 = field::SEQ;
        /// Acknowledgment number.
        ack: u32 = field::ACK;
    }

    /// The header's length, options included, bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.bytes()[field::DATA_OFFSET] >> 4) * 4
    }

    getters! {
        /// The flags byte ([`FIN`] to [`CWR`]).
        flags: u8 = field::FLAGS;
    }

    /// Whether every bit of `flags` is set.
    pub fn has(&self, flags: u8) -> bool {
        self.flags() & flags == flags
    }

    getters! {
        /// The receive window, unscaled.
        window: u16 = field::WINDOW;
        /// Checksum.
        checksum: u16 = field::CHECKSUM;
        /// Urgent pointer.
        urgent: u16 = field::URGENT;
    }

    /// Whether the buffer ends inside the options: the header is longer than the bytes.
    pub fn is_cut(&self) -> bool {
        self.bytes().len() < self.header_len()
    }

    /// The options' bytes, as far as the buffer holds them.
    pub fn options(&self) -> &[u8] {
        &self.bytes()[HEADER_LEN..self.header_end()]
    }

    /// The bytes after the header (none when the header is cut).
    pub fn payload(&self) -> &[u8] {
        &self.bytes()[self.header_end()..]
    }

    /// Where the header ends in the buffer: its length, or the buffer's if shorter.
    fn header_end(&self) -> usize {
        self.header_len().min(self.bytes().len())
    }

    /// The buffer the view was made from.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    /// Sets the sequence number.
    pub fn set_seq(&mut self, value: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the acknowledgment number.
    pub fn set_ack(&mut self, value: u32) {
        self.buffer.as_mut()[field::ACK].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets the checksum as it is.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> Vec<u8> {
        let mut bytes = vec![0u8; 24 + 3];
        bytes[field::SOURCE_PORT].copy_from_slice(&443u16.to_be_bytes());
        bytes[field::DESTINATION_PORT].copy_from_slice(&50000u16.to_be_bytes());
        bytes[field::DATA_OFFSET] = 6 << 4;
        bytes[field::WINDOW].copy_from_slice(&65535u16.to_be_bytes());
        bytes[20..24].copy_from_slice(&[2, 4, 0x05, 0xb4]); // MSS 1460
        bytes[24..].copy_from_slice(b"abc");
        let mut tcp = TcpSegment::new_checked(&mut bytes[..]).unwrap();
        tcp.set_seq(0xdead_beef);
        tcp.set_ack(7);
        tcp.set_flags(SYN | ACK);
        tcp.set_checksum(0x1234);
        bytes
    }

    #[test]
    fn fields_read_back_as_written() {
        let bytes = segment();
        let tcp = TcpSegment::new_checked(&bytes[..]).unwrap();
        assert_eq!(tcp.source_port(), 443);
        assert_eq!(tcp.destination_port(), 50000);
        assert_eq!(tcp.seq(), 0xdead_beef);
        assert_eq!(tcp.ack(), 7);
        assert_eq!(tcp.header_len(), 24);
        assert!(tcp.has(SYN) && tcp.has(SYN | ACK) && !tcp.has(FIN | SYN));
        assert_eq!(tcp.window(), 65535);
        assert_eq!(tcp.checksum(), 0x1234);
        assert_eq!(tcp.urgent(), 0);
        assert_eq!(tcp.options(), &[2, 4, 0x05, 0xb4]);
        assert_eq!(tcp.payload(), b"abc");
    }

    #[test]
    fn short_headers_and_bad_offsets_are_errors_and_cut_options_are_kept() {
        let bytes = segment();
        assert!(matches!(
            TcpSegment::new_checked(&bytes[..19]),
            Err(HeaderError::Truncated {
                len: 19,
                need: 20,
                ..
            })
        ));
        let cut = TcpSegment::new_checked(&bytes[..23]).unwrap();
        assert!(cut.is_cut());
        assert_eq!(cut.options(), &[2, 4, 0x05]);
        assert!(cut.payload().is_empty());
        assert!(!TcpSegment::new_checked(&bytes[..]).unwrap().is_cut());
        let mut low = bytes;
        low[field::DATA_OFFSET] = 4 << 4;
        assert!(matches!(
            TcpSegment::new_checked(&low[..]),
            Err(HeaderError::HeaderLen { len: 16, .. })
        ));
    }
}
