//! Packet captures read from bytes: pcap (either byte order, microsecond or nanosecond
//! timestamps) and pcapng (sections of either byte order, several interfaces each with its
//! own link type and timestamp resolution, enhanced, simple and obsolete packet blocks,
//! packet comments), and the TCP segments decoded from them ([`decode`]).
//!
//! Sans-IO: the caller reads the file; [`CaptureReader`] walks its bytes and lends out one
//! packet at a time, so a capture of any size is read without copying it. Every malformed
//! input is an error that names the block or record, its offset and what is wrong; nothing
//! here panics on any input (a fuzz target and a property test hold it to that).

use std::borrow::Cow;

pub mod decode;
pub mod format;
mod pcap;
mod pcapng;
#[cfg(test)]
mod tests;

pub use decode::{decode, DecodeError, TcpFlags, TcpOptions, TcpSegment};

/// Which format a capture is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Classic pcap (libpcap).
    Pcap,
    /// pcapng (draft-ietf-opsawg-pcapng).
    Pcapng,
}

/// Which way a packet crossed the interface, when the capture says (pcapng `epb_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received on the interface.
    Inbound,
    /// Sent out of it.
    Outbound,
}

/// One interface of a capture: a pcap file has one, a pcapng section any number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its LINKTYPE_ code ([`format`]).
    pub link_type: u16,
    /// Its name (`if_name`), if the capture gives one.
    pub name: Option<String>,
    /// The most bytes of a packet the capture kept.
    pub snaplen: u32,
}

/// One captured packet, borrowed from the capture's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Index of the interface it was seen on, into [`CaptureReader::interfaces`].
    pub interface: u32,
    /// The interface's link type.
    pub link_type: u16,
    /// When it was seen, ns since the Unix epoch (`None` for a simple packet block, which
    /// has no timestamp).
    pub timestamp_ns: Option<u64>,
    /// The bytes captured: the packet's first `data.len()` bytes.
    pub data: &'a [u8],
    /// The packet's length on the wire, bytes (more than `data` when the snaplen cut it).
    pub original_len: u32,
    /// Its comment (`opt_comment`), if any: `pathlab emulate --pcap` marks each packet it
    /// dropped with `dropped A -> B: REASON`.
    pub comment: Option<Cow<'a, str>>,
    /// Which way it went, if the capture says.
    pub direction: Option<Direction>,
}

impl Packet<'_> {
    /// Whether its comment says `pathlab emulate` dropped it at the capture point.
    pub fn dropped_by_emulator(&self) -> bool {
        self.comment
            .as_deref()
            .is_some_and(|comment| comment.starts_with("dropped "))
    }
}

/// Why a capture could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// The file is shorter than any capture's header.
    #[error("the file is {len} bytes: too short for a pcap or pcapng header")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// The first bytes are no pcap magic and no pcapng section header.
    #[error(
        "not a pcap or pcapng file: it starts with {magic:02x?}, where a pcap file starts with \
         a1b2c3d4 or a1b23c4d (either byte order) and a pcapng file with 0a0d0d0a"
    )]
    UnknownFormat {
        /// The first four bytes.
        magic: [u8; 4],
    },
    /// A pcap file's header is not one this reader knows.
    #[error("pcap file header: {problem}")]
    PcapHeader {
        /// What is wrong.
        problem: String,
    },
    /// A pcap record is malformed.
    #[error("pcap record {index} at offset {offset}: {problem}")]
    Record {
        /// Its number, from 0.
        index: u64,
        /// Where its header starts in the file.
        offset: usize,
        /// What is wrong.
        problem: String,
    },
    /// A pcapng block is malformed.
    #[error("pcapng block {index} at offset {offset}: {problem}")]
    Block {
        /// Its number, from 0.
        index: u64,
        /// Where it starts in the file.
        offset: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Reads a capture's packets in file order.
#[derive(Debug)]
pub struct CaptureReader<'a> {
    inner: Inner<'a>,
}

#[derive(Debug)]
enum Inner<'a> {
    Pcap(pcap::PcapReader<'a>),
    Pcapng(pcapng::PcapngReader<'a>),
}

impl<'a> CaptureReader<'a> {
    /// Reads the header of the capture in `bytes`, recognising its format by its magic.
    pub fn new(bytes: &'a [u8]) -> Result<CaptureReader<'a>, CaptureError> {
        let Some(magic) = bytes.get(..4) else {
            return Err(CaptureError::TooShort { len: bytes.len() });
        };
        let magic: [u8; 4] = magic.try_into().expect("four bytes");
        let inner = if u32::from_le_bytes(magic) == format::BLOCK_SECTION_HEADER {
            Inner::Pcapng(pcapng::PcapngReader::new(bytes)?)
        } else if [format::PCAP_MAGIC_MICROS, format::PCAP_MAGIC_NANOS]
            .iter()
            .any(|m| u32::from_le_bytes(magic) == *m || u32::from_be_bytes(magic) == *m)
        {
            Inner::Pcap(pcap::PcapReader::new(bytes)?)
        } else {
            return Err(CaptureError::UnknownFormat { magic });
        };
        Ok(CaptureReader { inner })
    }

    /// The format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap(_) => Format::Pcap,
            Inner::Pcapng(_) => Format::Pcapng,
        }
    }

    /// The interfaces described so far (a pcapng file may describe more further on).
    pub fn interfaces(&self) -> &[Interface] {
        match &self.inner {
            Inner::Pcap(reader) => reader.interfaces(),
            Inner::Pcapng(reader) => reader.interfaces(),
        }
    }

    /// The next packet, `None` at the end of the file.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'a>>, CaptureError> {
        match &mut self.inner {
            Inner::Pcap(reader) => reader.next_packet(),
            Inner::Pcapng(reader) => reader.next_packet(),
        }
    }
}

/// A byte order read from a magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endian {
    Little,
    Big,
}

impl Endian {
    pub(crate) fn u16(self, bytes: &[u8], at: usize) -> Option<u16> {
        let b: [u8; 2] = bytes.get(at..at + 2)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        })
    }

    pub(crate) fn u32(self, bytes: &[u8], at: usize) -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        })
    }

    pub(crate) fn u64(self, bytes: &[u8], at: usize) -> Option<u64> {
        let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        })
    }
}
