//! pcapng: blocks of a type, a length, a body and the length again; sections each start
//! with a Section Header Block that sets the byte order and forgets the interfaces before.

use std::borrow::Cow;

use super::format::{
    BLOCK_ENHANCED_PACKET, BLOCK_INTERFACE, BLOCK_MIN_BYTES, BLOCK_OBSOLETE_PACKET,
    BLOCK_SECTION_HEADER, BLOCK_SIMPLE_PACKET, BYTE_ORDER_MAGIC, EPB_FLAGS, IF_NAME, IF_TSOFFSET,
    IF_TSRESOL, OPT_COMMENT, OPT_END,
};
use super::{CaptureError, Direction, Endian, Interface, Packet};

/// An interface's timestamp units, from `if_tsresol` (microseconds when it is absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resolution {
    /// Bit 7 clear: 10^-n s per tick; set: 2^-n s.
    code: u8,
    /// `if_tsoffset`: seconds added to every timestamp.
    offset_s: i64,
}

impl Resolution {
    const MICROS: Resolution = Resolution {
        code: 6,
        offset_s: 0,
    };

    /// `ticks` as ns since the epoch (saturating: a timestamp past 2554 is corrupt anyway).
    fn to_ns(self, ticks: u64) -> u64 {
        let ticks = u128::from(ticks);
        let ns = if self.code & 0x80 == 0 {
            let exponent = u32::from(self.code);
            if exponent <= 9 {
                ticks * 10u128.pow(9 - exponent)
            } else {
                10u128
                    .checked_pow(exponent - 9)
                    .map_or(0, |divisor| ticks / divisor)
            }
        } else {
            let exponent = u32::from(self.code & 0x7F);
            (ticks * 1_000_000_000) >> exponent.min(127)
        };
        let offset = i128::from(self.offset_s) * 1_000_000_000;
        (ns as i128 + offset).clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[derive(Debug)]
pub(crate) struct PcapngReader<'a> {
    bytes: &'a [u8],
    endian: Endian,
    interfaces: Vec<Interface>,
    resolutions: Vec<Resolution>,
    at: usize,
    index: u64,
}

/// A block's options: (code, value) until `opt_endofopt` or the end of the body.
struct Options<'a> {
    body: &'a [u8],
    at: usize,
    endian: Endian,
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<(u16, &'a [u8]), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at + 4 > self.body.len() {
            return None;
        }
        let code = self.endian.u16(self.body, self.at)?;
        let len = usize::from(self.endian.u16(self.body, self.at + 2)?);
        if code == OPT_END {
            return None;
        }
        let start = self.at + 4;
        let Some(value) = self.body.get(start..start + len) else {
            self.at = self.body.len();
            return Some(Err(format!(
                "option {code} of {len} bytes runs past the block's end"
            )));
        };
        self.at = start + len.next_multiple_of(4);
        Some(Ok((code, value)))
    }
}

impl<'a> PcapngReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Result<PcapngReader<'a>, CaptureError> {
        let mut reader = PcapngReader {
            bytes,
            endian: Endian::Little,
            interfaces: Vec::new(),
            resolutions: Vec::new(),
            at: 0,
            index: 0,
        };
        // The first block must be a section header; reading it sets the byte order.
        reader.section_header()?;
        Ok(reader)
    }

    pub(crate) fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// An error unless `body` holds the `fixed` bytes of its block's fixed part (`what`
    /// block's body).
    fn check_fixed(&self, body: &[u8], fixed: usize, what: &str) -> Result<(), CaptureError> {
        if body.len() < fixed {
            return Err(self.error(format!(
                "{what} body of {} bytes, the fixed part is {fixed}",
                body.len()
            )));
        }
        Ok(())
    }

    fn error(&self, problem: String) -> CaptureError {
        CaptureError::Block {
            index: self.index,
            offset: self.at,
            problem,
        }
    }

    /// Reads the Section Header Block at `self.at`: its byte-order magic, version and
    /// length.
    fn section_header(&mut self) -> Result<(), CaptureError> {
        let magic = Endian::Little.u32(self.bytes, self.at + 8).ok_or_else(|| {
            self.error(format!(
                "truncated section header: {} bytes left, it needs at least 28",
                self.bytes.len() - self.at
            ))
        })?;
        self.endian = if magic == BYTE_ORDER_MAGIC {
            Endian::Little
        } else if magic.swap_bytes() == BYTE_ORDER_MAGIC {
            Endian::Big
        } else {
            return Err(self.error(format!(
                "section header's byte-order magic is {magic:08x}, expected 1a2b3c4d in \
                 either byte order"
            )));
        };
        let body = self.block_body(BLOCK_SECTION_HEADER)?;
        let major = self.endian.u16(body, 4).unwrap_or(0);
        if major != 1 {
            return Err(self.error(format!(
                "section header of version {major}; this reader knows version 1"
            )));
        }
        self.check_fixed(body, 16, "section header")?;
        self.interfaces.clear();
        self.resolutions.clear();
        self.advance(body.len());
        Ok(())
    }

    /// The body of the block at `self.at` (checked: both lengths agree, it fits the file);
    /// `kind` only names it in errors.
    fn block_body(&self, kind: u32) -> Result<&'a [u8], CaptureError> {
        let left = self.bytes.len() - self.at;
        if left < BLOCK_MIN_BYTES {
            return Err(self.error(format!(
                "truncated: {left} bytes left, a block is at least {BLOCK_MIN_BYTES}"
            )));
        }
        let total = self.endian.u32(self.bytes, self.at + 4).unwrap_or(0) as usize;
        if total < BLOCK_MIN_BYTES || !total.is_multiple_of(4) {
            return Err(self.error(format!(
                "block of type {kind:#x} has length {total}: a length is a multiple of 4, at \
                 least {BLOCK_MIN_BYTES}"
            )));
        }
        if total > left {
            return Err(self.error(format!(
                "truncated: block of type {kind:#x} is {total} bytes long, the file has {left} \
                 left"
            )));
        }
        let trailing = self
            .endian
            .u32(self.bytes, self.at + total - 4)
            .unwrap_or(0) as usize;
        if trailing != total {
            return Err(self.error(format!(
                "block of type {kind:#x}: its trailing length {trailing} differs from its \
                 leading length {total}"
            )));
        }
        Ok(&self.bytes[self.at + 8..self.at + total - 4])
    }

    fn advance(&mut self, body_len: usize) {
        self.at += body_len + BLOCK_MIN_BYTES;
        self.index += 1;
    }

    fn options(&self, body: &'a [u8], fixed: usize) -> Options<'a> {
        Options {
            body,
            at: fixed,
            endian: self.endian,
        }
    }

    fn interface_block(&mut self, body: &'a [u8]) -> Result<(), CaptureError> {
        if body.len() < 8 {
            return Err(self.error(format!(
                "interface description of {} bytes, the fixed part is 8",
                body.len()
            )));
        }
        let link_type = self.endian.u16(body, 0).unwrap_or(0);
        let snaplen = self.endian.u32(body, 4).unwrap_or(0);
        let mut name = None;
        let mut resolution = Resolution::MICROS;
        for option in self.options(body, 8) {
            let (code, value) = option.map_err(|problem| self.error(problem))?;
            match (code, value) {
                (IF_NAME, _) => name = Some(String::from_utf8_lossy(value).into_owned()),
                (IF_TSRESOL, [code, ..]) => resolution.code = *code,
                (IF_TSOFFSET, _) if value.len() == 8 => {
                    resolution.offset_s = self.endian.u64(value, 0).unwrap_or(0) as i64;
                }
                _ => {}
            }
        }
        self.interfaces.push(Interface {
            link_type,
            name,
            snaplen,
        });
        self.resolutions.push(resolution);
        Ok(())
    }

    /// The interface `id` and its resolution, or an error naming it.
    fn interface(&self, id: u32) -> Result<(u16, Resolution), CaptureError> {
        match self.interfaces.get(id as usize) {
            Some(interface) => Ok((interface.link_type, self.resolutions[id as usize])),
            None => Err(self.error(format!(
                "packet on interface {id}, but the section has described {} interfaces",
                self.interfaces.len()
            ))),
        }
    }

    /// A packet with a timestamp (enhanced or obsolete packet block): the fixed part's
    /// fields, the data, then options.
    fn timed_packet(
        &self,
        body: &'a [u8],
        interface: u32,
        fixed: usize,
    ) -> Result<Packet<'a>, CaptureError> {
        let (link_type, resolution) = self.interface(interface)?;
        let high = u64::from(self.endian.u32(body, fixed - 16).unwrap_or(0));
        let low = u64::from(self.endian.u32(body, fixed - 12).unwrap_or(0));
        let captured = self.endian.u32(body, fixed - 8).unwrap_or(0) as usize;
        let original_len = self.endian.u32(body, fixed - 4).unwrap_or(0);
        let Some(data) = body.get(fixed..fixed + captured) else {
            return Err(self.error(format!(
                "packet of {captured} captured bytes does not fit its block's {} bytes of body",
                body.len()
            )));
        };
        let mut packet = Packet {
            interface,
            link_type,
            timestamp_ns: Some(resolution.to_ns((high << 32) | low)),
            data,
            original_len: original_len.max(captured as u32),
            comment: None,
            direction: None,
        };
        for option in self.options(body, fixed + captured.next_multiple_of(4)) {
            let (code, value) = option.map_err(|problem| self.error(problem))?;
            match code {
                OPT_COMMENT => packet.comment = Some(String::from_utf8_lossy(value)),
                EPB_FLAGS if value.len() == 4 => {
                    packet.direction = match self.endian.u32(value, 0).unwrap_or(0) & 0b11 {
                        0b01 => Some(Direction::Inbound),
                        0b10 => Some(Direction::Outbound),
                        _ => None,
                    };
                }
                _ => {}
            }
        }
        Ok(packet)
    }

    pub(crate) fn next_packet(&mut self) -> Result<Option<Packet<'a>>, CaptureError> {
        loop {
            let left = self.bytes.len() - self.at;
            if left == 0 {
                return Ok(None);
            }
            if left < 8 {
                return Err(
                    self.error(format!("truncated: {left} bytes left, a block header is 8"))
                );
            }
            let kind = self.endian.u32(self.bytes, self.at).unwrap_or(0);
            if kind == BLOCK_SECTION_HEADER {
                self.section_header()?;
                continue;
            }
            let body = self.block_body(kind)?;
            let packet = match kind {
                BLOCK_INTERFACE => {
                    self.interface_block(body)?;
                    None
                }
                BLOCK_ENHANCED_PACKET => {
                    self.check_fixed(body, 20, "enhanced packet block")?;
                    let interface = self.endian.u32(body, 0).unwrap_or(0);
                    Some(self.timed_packet(body, interface, 20)?)
                }
                BLOCK_OBSOLETE_PACKET => {
                    self.check_fixed(body, 20, "packet block")?;
                    let interface = u32::from(self.endian.u16(body, 0).unwrap_or(0));
                    Some(self.timed_packet(body, interface, 20)?)
                }
                BLOCK_SIMPLE_PACKET => {
                    self.check_fixed(body, 4, "simple packet block")?;
                    let (link_type, _) = self.interface(0)?;
                    let original_len = self.endian.u32(body, 0).unwrap_or(0);
                    let snaplen = self.interfaces[0].snaplen;
                    // The data is the original length cut to the snaplen (0: no limit) and
                    // to the block.
                    let mut captured = original_len as usize;
                    if snaplen > 0 {
                        captured = captured.min(snaplen as usize);
                    }
                    captured = captured.min(body.len().saturating_sub(4));
                    Some(Packet {
                        interface: 0,
                        link_type,
                        timestamp_ns: None,
                        data: &body[4..4 + captured],
                        original_len: original_len.max(captured as u32),
                        comment: None::<Cow<'a, str>>,
                        direction: None,
                    })
                }
                // Name resolution, statistics, journal and custom blocks say nothing about
                // the packets' TCP: skipped.
                _ => None,
            };
            self.advance(body.len());
            if packet.is_some() {
                return Ok(packet);
            }
        }
    }
}
