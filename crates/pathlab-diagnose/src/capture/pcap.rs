//! Classic pcap: a 24-byte file header, then records of a 16-byte header and the data.

use super::format::{
    PCAP_FILE_HEADER_BYTES, PCAP_MAGIC_MICROS, PCAP_MAGIC_NANOS, PCAP_RECORD_HEADER_BYTES,
};
use super::{CaptureError, Endian, Interface, Packet};

/// The largest record this reader accepts, bytes: libpcap's own limit for any link type
/// (`MAXIMUM_SNAPLEN`), so a corrupt length is an error, not a huge slice.
const MAX_RECORD_BYTES: u32 = 262_144;

mod field {
    pub const VERSION_MAJOR: usize = 4;
    pub const SNAPLEN: usize = 16;
    pub const LINK_TYPE: usize = 20;
    pub const TS_SECONDS: usize = 0;
    pub const TS_FRACTION: usize = 4;
    pub const CAPTURED_LEN: usize = 8;
    pub const ORIGINAL_LEN: usize = 12;
}

#[derive(Debug)]
pub(crate) struct PcapReader<'a> {
    bytes: &'a [u8],
    endian: Endian,
    nanos: bool,
    interfaces: [Interface; 1],
    at: usize,
    index: u64,
}

impl<'a> PcapReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Result<PcapReader<'a>, CaptureError> {
        let header_error = |problem: String| CaptureError::PcapHeader { problem };
        if bytes.len() < PCAP_FILE_HEADER_BYTES {
            return Err(header_error(format!(
                "the file is {} bytes, the header alone is {PCAP_FILE_HEADER_BYTES}",
                bytes.len()
            )));
        }
        let little = Endian::Little.u32(bytes, 0).unwrap_or(0);
        let (endian, magic) = if little == PCAP_MAGIC_MICROS || little == PCAP_MAGIC_NANOS {
            (Endian::Little, little)
        } else {
            (Endian::Big, Endian::Big.u32(bytes, 0).unwrap_or(0))
        };
        let major = endian.u16(bytes, field::VERSION_MAJOR).unwrap_or(0);
        if major != 2 {
            return Err(header_error(format!(
                "version {major}; pcap files are version 2"
            )));
        }
        // The link type is the low 16 bits; the upper ones carry the FCS length flags.
        let link_type = (endian.u32(bytes, field::LINK_TYPE).unwrap_or(0) & 0xFFFF) as u16;
        Ok(PcapReader {
            bytes,
            endian,
            nanos: magic == PCAP_MAGIC_NANOS,
            interfaces: [Interface {
                link_type,
                name: None,
                snaplen: endian.u32(bytes, field::SNAPLEN).unwrap_or(0),
            }],
            at: PCAP_FILE_HEADER_BYTES,
            index: 0,
        })
    }

    pub(crate) fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    pub(crate) fn next_packet(&mut self) -> Result<Option<Packet<'a>>, CaptureError> {
        let remaining = self.bytes.len() - self.at;
        if remaining == 0 {
            return Ok(None);
        }
        let error = |problem: String| CaptureError::Record {
            index: self.index,
            offset: self.at,
            problem,
        };
        if remaining < PCAP_RECORD_HEADER_BYTES {
            return Err(error(format!(
                "truncated: {remaining} bytes left, a record header is {PCAP_RECORD_HEADER_BYTES}"
            )));
        }
        let read = |field: usize| self.endian.u32(self.bytes, self.at + field).unwrap_or(0);
        let seconds = u64::from(read(field::TS_SECONDS));
        let fraction = u64::from(read(field::TS_FRACTION));
        let captured = read(field::CAPTURED_LEN);
        let original_len = read(field::ORIGINAL_LEN);
        let fraction_limit = if self.nanos { 1_000_000_000 } else { 1_000_000 };
        if fraction >= fraction_limit {
            return Err(error(format!(
                "its timestamp's fraction {fraction} is not below {fraction_limit}"
            )));
        }
        if captured > MAX_RECORD_BYTES {
            return Err(error(format!(
                "captured length {captured} is more than any pcap record holds \
                 ({MAX_RECORD_BYTES}): the file is corrupt"
            )));
        }
        let data_at = self.at + PCAP_RECORD_HEADER_BYTES;
        let Some(data) = self.bytes.get(data_at..data_at + captured as usize) else {
            return Err(error(format!(
                "truncated: it holds {captured} bytes of packet, the file has {} left",
                self.bytes.len() - data_at
            )));
        };
        let timestamp_ns = seconds * 1_000_000_000 + fraction * if self.nanos { 1 } else { 1000 };
        self.at = data_at + captured as usize;
        self.index += 1;
        Ok(Some(Packet {
            interface: 0,
            link_type: self.interfaces[0].link_type,
            timestamp_ns: Some(timestamp_ns),
            data,
            original_len: original_len.max(captured),
            comment: None,
            direction: None,
        }))
    }
}
