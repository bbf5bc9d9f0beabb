//! A pcapng writer (draft-ietf-opsawg-pcapng): what an emulator forwarded and dropped, in
//! a file tshark and Wireshark read.
//!
//! pcapng rather than pcap because each packet can say its direction (`epb_flags`) and
//! carry a comment: a dropped packet is written on the interface it came in on, inbound,
//! with the comment `dropped A -> B: queue-full`, so `tshark -Y frame.comment` lists the
//! drops. Timestamps are in nanoseconds (`if_tsresol` = 9).

use std::io::{self, Write};

const BLOCK_SECTION_HEADER: u32 = 0x0A0D_0D0A;
const BLOCK_INTERFACE: u32 = 0x0000_0001;
const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;

/// The link type of an interface (the tcpdump LINKTYPE_ registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101): packets begin with an IPv4 or IPv6 header.
    RawIp,
}

impl LinkType {
    fn code(self) -> u16 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
        }
    }
}

/// Which way a packet crossed the interface it is written on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received on the interface.
    Inbound,
    /// Sent out of it.
    Outbound,
}

/// Writes a pcapng section: a header, interfaces, then packets.
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    writer: W,
    interfaces: u32,
}

/// Appends an option (code, length, value padded to 32 bits) to `block`.
fn option(block: &mut Vec<u8>, code: u16, value: &[u8]) {
    block.extend_from_slice(&code.to_le_bytes());
    block.extend_from_slice(&(value.len() as u16).to_le_bytes());
    block.extend_from_slice(value);
    pad(block);
}

fn pad(block: &mut Vec<u8>) {
    while !block.len().is_multiple_of(4) {
        block.push(0);
    }
}

impl<W: Write> PcapngWriter<W> {
    /// Starts a section; `application` goes in the header's `shb_userappl`.
    pub fn new(writer: W, application: &str) -> io::Result<PcapngWriter<W>> {
        let mut this = PcapngWriter {
            writer,
            interfaces: 0,
        };
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes()); // section length unknown
        option(&mut body, SHB_USERAPPL, application.as_bytes());
        option(&mut body, OPT_END, &[]);
        this.block(BLOCK_SECTION_HEADER, &body)?;
        Ok(this)
    }

    fn block(&mut self, kind: u32, body: &[u8]) -> io::Result<()> {
        let total = (12 + body.len()) as u32;
        self.writer.write_all(&kind.to_le_bytes())?;
        self.writer.write_all(&total.to_le_bytes())?;
        self.writer.write_all(body)?;
        self.writer.write_all(&total.to_le_bytes())
    }

    /// Describes an interface; returns its id for [`PcapngWriter::write_packet`].
    pub fn add_interface(
        &mut self,
        name: &str,
        link_type: LinkType,
        snaplen: u32,
    ) -> io::Result<u32> {
        let mut body = Vec::new();
        body.extend_from_slice(&link_type.code().to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&snaplen.to_le_bytes());
        option(&mut body, IF_NAME, name.as_bytes());
        option(&mut body, IF_TSRESOL, &[9]);
        option(&mut body, OPT_END, &[]);
        self.block(BLOCK_INTERFACE, &body)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Writes one packet seen on `interface` at `timestamp_ns` (since the Unix epoch).
    pub fn write_packet(
        &mut self,
        interface: u32,
        timestamp_ns: u64,
        data: &[u8],
        original_len: u32,
        direction: Direction,
        comment: Option<&str>,
    ) -> io::Result<()> {
        let mut body = Vec::with_capacity(32 + data.len() + comment.map_or(0, str::len));
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((timestamp_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(timestamp_ns as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(&original_len.to_le_bytes());
        body.extend_from_slice(data);
        pad(&mut body);
        let flags: u32 = match direction {
            Direction::Inbound => 0b01,
            Direction::Outbound => 0b10,
        };
        option(&mut body, EPB_FLAGS, &flags.to_le_bytes());
        if let Some(comment) = comment {
            option(&mut body, OPT_COMMENT, comment.as_bytes());
        }
        option(&mut body, OPT_END, &[]);
        self.block(BLOCK_ENHANCED_PACKET, &body)
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.writer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    /// Splits a file into (type, body) blocks, checking both length fields of each.
    fn blocks(bytes: &[u8]) -> Vec<(u32, &[u8])> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let total = u32_at(bytes, at + 4) as usize;
            assert_eq!(total % 4, 0, "blocks are 32-bit aligned");
            assert_eq!(
                u32_at(bytes, at + total - 4) as usize,
                total,
                "trailing length"
            );
            out.push((u32_at(bytes, at), &bytes[at + 8..at + total - 4]));
            at += total;
        }
        out
    }

    /// The options after `fixed` bytes of a block body, as (code, value).
    fn options(body: &[u8], fixed: usize) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = fixed;
        loop {
            let code = u16::from_le_bytes([body[at], body[at + 1]]);
            let len = u16::from_le_bytes([body[at + 2], body[at + 3]]) as usize;
            if code == OPT_END {
                assert_eq!(at + 4, body.len(), "end of options closes the block");
                return out;
            }
            out.push((code, body[at + 4..at + 4 + len].to_vec()));
            at += 4 + len.next_multiple_of(4);
        }
    }

    #[test]
    fn file_has_the_layout_of_the_pcapng_draft() {
        let mut writer = PcapngWriter::new(Vec::new(), "pathlab test").unwrap();
        assert_eq!(
            writer
                .add_interface("r-h1", LinkType::Ethernet, 65535)
                .unwrap(),
            0
        );
        assert_eq!(
            writer
                .add_interface("r-h2", LinkType::Ethernet, 65535)
                .unwrap(),
            1
        );
        let timestamp = 1_700_000_000_123_456_789u64;
        writer
            .write_packet(1, timestamp, &[1, 2, 3, 4, 5], 5, Direction::Outbound, None)
            .unwrap();
        writer
            .write_packet(
                0,
                timestamp + 1,
                &[9; 60],
                1514,
                Direction::Inbound,
                Some("dropped r-h1 -> r-h2: loss"),
            )
            .unwrap();
        let bytes = writer.into_inner();
        let blocks = blocks(&bytes);
        assert_eq!(
            blocks.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![BLOCK_SECTION_HEADER, 1, 1, 6, 6]
        );
        let (_, shb) = blocks[0];
        assert_eq!(u32_at(shb, 0), BYTE_ORDER_MAGIC);
        assert_eq!(&shb[4..8], &[1, 0, 0, 0], "version 1.0");
        assert_eq!(
            options(shb, 16),
            vec![(SHB_USERAPPL, b"pathlab test".to_vec())]
        );
        let (_, idb) = blocks[2];
        assert_eq!(&idb[0..2], &[1, 0], "LINKTYPE_ETHERNET");
        assert_eq!(u32_at(idb, 4), 65535);
        assert_eq!(
            options(idb, 8),
            vec![(IF_NAME, b"r-h2".to_vec()), (IF_TSRESOL, vec![9])]
        );
        let (_, first) = blocks[3];
        assert_eq!(u32_at(first, 0), 1);
        let ts = (u64::from(u32_at(first, 4)) << 32) | u64::from(u32_at(first, 8));
        assert_eq!(ts, timestamp);
        assert_eq!((u32_at(first, 12), u32_at(first, 16)), (5, 5));
        assert_eq!(&first[20..25], &[1, 2, 3, 4, 5]);
        assert_eq!(
            options(first, 28), // 20 fixed bytes, then 5 bytes of data padded to 8
            vec![(EPB_FLAGS, 2u32.to_le_bytes().to_vec())]
        );
        let (_, second) = blocks[4];
        assert_eq!((u32_at(second, 12), u32_at(second, 16)), (60, 1514));
        assert_eq!(
            options(second, 80),
            vec![
                (EPB_FLAGS, 1u32.to_le_bytes().to_vec()),
                (OPT_COMMENT, b"dropped r-h1 -> r-h2: loss".to_vec())
            ]
        );
    }
}
