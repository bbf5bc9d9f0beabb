//! A pcapng writer (draft-ietf-opsawg-pcapng): what an emulator forwarded and dropped, in
//! a file tshark and Wireshark read.
//!
//! pcapng rather than pcap because each packet can say its direction (`epb_flags`) and
//! carry a comment: a dropped packet is written on the interface it came in on, inbound,
//! with the comment `dropped A -> B: queue-full`, so `tshark -Y frame.comment` lists the
//! drops. Timestamps are in nanoseconds (`if_tsresol` = 9).

use std::io::{self, Write};

// One definition of each number, shared with the reader in pathlab-probe.
use pathlab_diagnose::capture::format::{
    BLOCK_ENHANCED_PACKET, BLOCK_INTERFACE, BLOCK_SECTION_HEADER, BYTE_ORDER_MAGIC, EPB_FLAGS,
    IF_NAME, IF_TSRESOL, LINKTYPE_ETHERNET, LINKTYPE_RAW, OPT_COMMENT, OPT_END, SHB_USERAPPL,
};

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
            LinkType::Ethernet => LINKTYPE_ETHERNET,
            LinkType::RawIp => LINKTYPE_RAW,
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
///
/// An option's length field is 16 bits: a longer value is an `InvalidInput` error rather
/// than a length that lies and a file no reader can parse.
fn option(block: &mut Vec<u8>, code: u16, value: &[u8]) -> io::Result<()> {
    let len = u16::try_from(value.len()).map_err(|_| {
        invalid_input(format!(
            "pcapng option {code} is {} bytes; an option holds at most 65535",
            value.len()
        ))
    })?;
    block.extend_from_slice(&code.to_le_bytes());
    block.extend_from_slice(&len.to_le_bytes());
    block.extend_from_slice(value);
    pad(block);
    Ok(())
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
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
        option(&mut body, SHB_USERAPPL, application.as_bytes())?;
        option(&mut body, OPT_END, &[])?;
        this.block(BLOCK_SECTION_HEADER, &body)?;
        Ok(this)
    }

    fn block(&mut self, kind: u32, body: &[u8]) -> io::Result<()> {
        let total = u32::try_from(12 + body.len()).map_err(|_| {
            invalid_input(format!(
                "pcapng block of {} bytes is longer than a block's 32-bit length",
                12 + body.len()
            ))
        })?;
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
        option(&mut body, IF_NAME, name.as_bytes())?;
        option(&mut body, IF_TSRESOL, &[9])?;
        option(&mut body, OPT_END, &[])?;
        self.block(BLOCK_INTERFACE, &body)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Writes one packet seen on `interface` at `timestamp_ns` (since the Unix epoch).
    ///
    /// `interface` must be an id [`PcapngWriter::add_interface`] returned, and `comment` at
    /// most 65535 bytes; otherwise nothing is written and the error is `InvalidInput`.
    pub fn write_packet(
        &mut self,
        interface: u32,
        timestamp_ns: u64,
        data: &[u8],
        original_len: u32,
        direction: Direction,
        comment: Option<&str>,
    ) -> io::Result<()> {
        if interface >= self.interfaces {
            return Err(invalid_input(format!(
                "pcapng packet on interface {interface}, but only {} were added",
                self.interfaces
            )));
        }
        let captured_len = u32::try_from(data.len()).map_err(|_| {
            invalid_input(format!(
                "pcapng packet of {} bytes is longer than a block holds",
                data.len()
            ))
        })?;
        let mut body = Vec::with_capacity(32 + data.len() + comment.map_or(0, str::len));
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((timestamp_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(timestamp_ns as u32).to_le_bytes());
        body.extend_from_slice(&captured_len.to_le_bytes());
        body.extend_from_slice(&original_len.to_le_bytes());
        body.extend_from_slice(data);
        pad(&mut body);
        let flags: u32 = match direction {
            Direction::Inbound => 0b01,
            Direction::Outbound => 0b10,
        };
        option(&mut body, EPB_FLAGS, &flags.to_le_bytes())?;
        if let Some(comment) = comment {
            option(&mut body, OPT_COMMENT, comment.as_bytes())?;
        }
        option(&mut body, OPT_END, &[])?;
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

    #[test]
    fn header_and_interface_blocks_byte_for_byte() {
        // Written out from draft-ietf-opsawg-pcapng sections 3.5, 4.1 and 4.2, little-endian.
        let mut writer = PcapngWriter::new(Vec::new(), "pl").unwrap();
        writer.add_interface("eth0", LinkType::RawIp, 1500).unwrap();
        let bytes = writer.into_inner();
        #[rustfmt::skip]
        let expected: [u8; 80] = [
            // Section Header Block: 8 + 16 fixed + 8 (userappl) + 4 (end) + 4 = 40 bytes.
            0x0A, 0x0D, 0x0D, 0x0A, // block type
            40, 0, 0, 0,            // block total length
            0x4D, 0x3C, 0x2B, 0x1A, // byte-order magic 0x1A2B3C4D
            1, 0, 0, 0,             // major 1, minor 0
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, // section length -1: unknown
            4, 0, 2, 0, b'p', b'l', 0, 0, // shb_userappl, length 2, padded to 4
            0, 0, 0, 0,             // opt_endofopt
            40, 0, 0, 0,            // block total length again
            // Interface Description Block: 8 + 8 fixed + 8 + 8 + 4 (end) + 4 = 40 bytes.
            1, 0, 0, 0,             // block type
            40, 0, 0, 0,            // block total length
            101, 0, 0, 0,           // LINKTYPE_RAW, reserved
            0xDC, 0x05, 0, 0,       // snaplen 1500
            2, 0, 4, 0, b'e', b't', b'h', b'0', // if_name, 4 bytes: no padding
            9, 0, 1, 0, 9, 0, 0, 0, // if_tsresol 9 (10^-9 s), padded to 4
            0, 0, 0, 0,             // opt_endofopt
            40, 0, 0, 0,            // block total length again
        ];
        assert_eq!(bytes, expected);
    }

    /// Arguments of one `write_packet` call: interface, timestamp (ns), data, original
    /// length, direction, comment.
    type TestPacket<'a> = (u32, u64, &'a [u8], u32, Direction, Option<&'a str>);

    /// A capture of three packets on two interfaces, `r-h1` (Ethernet) and `r-h2` (raw IP):
    /// one inbound with a timestamp whose words are 1 and 2, one outbound cut from 1500
    /// bytes to 7 at `u32::MAX` ns, one inbound with a comment.
    fn three_packets_on_two_interfaces() -> Vec<u8> {
        let mut writer = PcapngWriter::new(Vec::new(), "pathlab emulate").unwrap();
        let left = writer
            .add_interface("r-h1", LinkType::Ethernet, 65535)
            .unwrap();
        let right = writer
            .add_interface("r-h2", LinkType::RawIp, 65535)
            .unwrap();
        assert_eq!((left, right), (0, 1));
        // 0x0000_0001_0000_0002 ns: the high word must be 1 and the low word 2.
        let packets: [TestPacket; 3] = [
            (
                left,
                0x0000_0001_0000_0002,
                &[0xAA; 4],
                4,
                Direction::Inbound,
                None,
            ),
            (
                right,
                u64::from(u32::MAX),
                &[0xBB; 7],
                1500,
                Direction::Outbound,
                None,
            ),
            (
                left,
                1_700_000_000_000_000_001,
                &[0xCC; 1],
                1,
                Direction::Inbound,
                Some("dropped: queue full"),
            ),
        ];
        for (interface, timestamp_ns, data, original_len, direction, comment) in packets {
            writer
                .write_packet(
                    interface,
                    timestamp_ns,
                    data,
                    original_len,
                    direction,
                    comment,
                )
                .unwrap();
        }
        writer.flush().unwrap();
        writer.into_inner()
    }

    #[test]
    fn two_interfaces_three_packets() {
        let bytes = three_packets_on_two_interfaces();
        let blocks = blocks(&bytes);
        assert_eq!(
            blocks.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![
                BLOCK_SECTION_HEADER,
                BLOCK_INTERFACE,
                BLOCK_INTERFACE,
                6,
                6,
                6
            ]
        );
        let (_, second_idb) = blocks[2];
        assert_eq!(&second_idb[0..2], &[101, 0], "LINKTYPE_RAW");
        // Block total lengths: 12 (type, length, trailer) + 20 fixed + data padded to 4
        // + 8 (epb_flags: 4 header + 4 value) [+ 4 + comment padded] + 4 (end of options).
        let comment_len = "dropped: queue full".len(); // 19 -> padded to 20
        assert_eq!(comment_len, 19);
        let expected_totals = [
            12 + 20 + 4 + 8 + 4,
            12 + 20 + 8 + 8 + 4,
            12 + 20 + 4 + 8 + (4 + 20) + 4,
        ];
        let mut at = 0;
        for (index, block) in blocks.iter().enumerate() {
            if index >= 3 {
                assert_eq!(
                    u32_at(&bytes, at + 4) as usize,
                    expected_totals[index - 3],
                    "length of packet block {}",
                    index - 3
                );
            }
            at += block.1.len() + 12;
        }
        let epb = |index: usize| blocks[3 + index].1;
        // Timestamps: upper 32 bits first, then lower.
        assert_eq!((u32_at(epb(0), 4), u32_at(epb(0), 8)), (1, 2));
        assert_eq!((u32_at(epb(1), 4), u32_at(epb(1), 8)), (0, u32::MAX));
        let third = 1_700_000_000_000_000_001u64;
        assert_eq!(
            (u32_at(epb(2), 4), u32_at(epb(2), 8)),
            ((third >> 32) as u32, (third & 0xFFFF_FFFF) as u32)
        );
        // Interface, captured and original lengths.
        assert_eq!(u32_at(epb(1), 0), 1);
        assert_eq!((u32_at(epb(1), 12), u32_at(epb(1), 16)), (7, 1500));
        // Packet data, then zero padding to 32 bits.
        assert_eq!(&epb(1)[20..27], &[0xBB; 7]);
        assert_eq!(epb(1)[27], 0, "data padding is zero");
        assert_eq!(&epb(2)[20..24], &[0xCC, 0, 0, 0]);
        // epb_flags: bits 0-1 are the direction, 01 inbound, 10 outbound.
        assert_eq!(options(epb(0), 24), vec![(EPB_FLAGS, vec![1, 0, 0, 0])]);
        assert_eq!(options(epb(1), 28), vec![(EPB_FLAGS, vec![2, 0, 0, 0])]);
        assert_eq!(
            options(epb(2), 24),
            vec![
                (EPB_FLAGS, vec![1, 0, 0, 0]),
                (OPT_COMMENT, b"dropped: queue full".to_vec())
            ]
        );
        // The comment's option: code 1, length 19 (without padding), one zero pad byte.
        let comment_at = 24 + 8;
        assert_eq!(&epb(2)[comment_at..comment_at + 4], &[1, 0, 19, 0]);
        assert_eq!(epb(2)[comment_at + 4 + 19], 0, "option padding is zero");
    }

    #[test]
    fn what_would_make_a_broken_file_is_an_error() {
        let mut writer = PcapngWriter::new(Vec::new(), "pathlab").unwrap();
        let error = writer
            .write_packet(0, 0, &[1], 1, Direction::Inbound, None)
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("interface 0"), "{error}");
        writer
            .add_interface("eth0", LinkType::Ethernet, 65535)
            .unwrap();
        let long_comment = "x".repeat(70_000);
        let error = writer
            .write_packet(0, 0, &[1], 1, Direction::Inbound, Some(&long_comment))
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("70000 bytes"), "{error}");
        // Neither failed packet left anything behind: the file is SHB + IDB only.
        let bytes = writer.into_inner();
        assert_eq!(blocks(&bytes).len(), 2);
    }
}
