//! Inner header compression: the IP/TCP and IP/UDP headers of the tunnel's inner packets
//! sent as a few bytes against a reference both ends hold (sans-IO; no clock, no I/O).
//!
//! The references are RFC 2507's and RFC 6846's ideas (per-flow contexts, a context id, a
//! generation per context, deltas of the fields that change, the TCP checksum carried
//! whole, scaled sequence and acknowledgement numbers as ROHC-TCP's `ack_stride`), put
//! together for a tunnel whose lines lose and reorder datagrams:
//!
//! - **Immutable, acknowledged references.** A packet sent with its full header can
//!   establish `(cid, generation)` as a reference; the [`Decompressor`] stores it (the last
//!   [`GENERATIONS_KEPT`] generations of each context) and acknowledges it in a HeaderAcks
//!   frame ([`crate::wire::Frame::HeaderAcks`]). The [`Compressor`] compresses a flow's
//!   packets only against a generation the far end acknowledged; until then it sends full
//!   headers. A reference never changes once stored, so decoding a packet is a function of
//!   its bytes and its reference alone: a lost, late or reordered packet costs nothing but
//!   itself, and a packet whose generation is gone is dropped and counted, never guessed.
//! - **Refreshed by the packets themselves.** A compressed packet may say "store me as
//!   generation g'": the far end rebuilds it exactly from the acknowledged reference, stores
//!   it and acknowledges it, and the compressor moves to it. At most one such request is
//!   outstanding per flow, so a flow renews its reference about once per round trip
//!   (deltas stay a round trip's worth of progress) and the [`GENERATIONS_KEPT`]
//!   generations a decompressor keeps span several round trips of packets in flight.
//! - **Checked twice.** The compressor decodes its own output against the same reference
//!   before sending it and sends the packet whole unless the result is byte-identical; the
//!   decompressor checks the rebuilt packet's TCP or UDP checksum (only packets whose
//!   checksum is valid are compressed), so even a reference confused after 256
//!   generations cannot deliver a wrong packet.
//!
//! What is compressed: IPv4 (no options, not a fragment, valid header checksum) or IPv6 (no
//! extension header) carrying TCP or UDP, Not-ECT (an ECN-capable packet may be marked CE
//! in place by the fair queue's CoDel, which only a packet in the clear allows). The rest
//! goes as it came.
//!
//! The bytes of a header-compressed packet (the Fragment flag `headers`), big-endian,
//! varints LEB128 (7 bits a byte, least significant group first, at most 10 bytes):
//!
//! ```text
//! Full        0x01 | cid varint | gen u8 | the packet, whole
//!             establishes (cid, gen) as the packet's header
//! Compressed  b0 | cid varint | gen u8 | [new_gen u8 | stride varint] | [ext u8] |
//!             [ip_id delta varint] | [seq varint] | [ack varint] | [tsval varint |
//!             tsecr varint] | ext fields | checksum u16 | payload
//!   b0        bit 7: 1; bit 6 STORE (new_gen and stride follow: store the rebuilt packet
//!             as (cid, new_gen)); bits 5-4: the IP ECN field; bit 3 SEQ; bit 2 ACK;
//!             bit 1 TS; bit 0 EXT
//!   ip_id     IPv4 only: identification minus the reference's, mod 2^16
//!   seq, ack  the number minus the reference's mod 2^32, times 2, plus 1 when it is given
//!             in units of the reference's stride (the delta divided by the stride)
//!   tsval...  the timestamps minus the reference's, mod 2^32 (the options are the
//!             reference's with only the timestamps changed)
//!   ext       bit 0 window u16; bit 1 TCP flags u8; bit 2 options: len u8 and the bytes
//!             (a multiple of 4, at most 40); bit 3 urgent pointer u16; bit 4 TTL or hop
//!             limit u8; bit 5 TOS or traffic class without ECN u8; bit 6 IPv4 flags and
//!             fragment offset u16, or the IPv6 flow label u24; bit 7 reserved (0)
//!   checksum  the TCP or UDP checksum, as sent
//! ```
//!
//! Every field not given is the reference's; lengths come from the frame; the IPv4 header
//! checksum is computed. A UDP reference refuses SEQ, ACK, TS and the TCP ext bits.

mod compress;
mod decompress;

pub use compress::{Compressor, CompressorConfig};
pub use decompress::{DecompressError, Decompressor};

use pathlab_core::wire::checksum::{checksum_add, checksum_finish};

use pathlab_core::packet::Ecn;
use pathlab_core::wire;
use pathlab_core::wire::ipv4::{self, Ipv4Packet};
use pathlab_core::wire::ipv6::{self, Ipv6Packet};
use pathlab_core::wire::tcp::{self, TcpSegment};
use pathlab_core::wire::udp::{self, UdpDatagram};

/// Context ids are below this (on the wire, in acknowledgements, in tables).
pub use crate::wire::MAX_HEADER_CONTEXTS as MAX_CONTEXTS;
/// Bytes compression saves, at least, on a full-size segment of a bulk TCP flow over IPv4:
/// its 40 bytes of IP and TCP header go as at most 12 (b0, cid and generation; a
/// refresh's new generation and stride, 3; the IP ID and sequence deltas, 2 varint bytes
/// each up to 16,383 packets from the reference; the checksum), and with timestamps its 52
/// as at most 15 (both measured over round trips of 200 packets). The device's MTU counts
/// on it (the endpoint's `device_mtu`).
pub const BULK_TCP_SAVED_BYTES: usize = 28;
/// Generations a decompressor keeps per context.
pub const GENERATIONS_KEPT: usize = 8;
/// Acknowledgements a decompressor holds before the oldest is forgotten (the compressor
/// then establishes again).
pub const MAX_PENDING_ACKS: usize = 256;

/// The first byte of each kind of header-compressed packet.
mod kind {
    /// A whole packet that establishes a reference.
    pub const FULL: u8 = 0x01;
    /// A compressed packet (bit 7), and its flags.
    pub const COMPRESSED: u8 = 0x80;
    pub const STORE: u8 = 0x40;
    pub const ECN_SHIFT: u32 = 4;
    pub const ECN: u8 = 0x30;
    pub const SEQ: u8 = 0x08;
    pub const ACK: u8 = 0x04;
    pub const TS: u8 = 0x02;
    pub const EXT: u8 = 0x01;
}

/// The bits of a compressed packet's ext byte.
mod ext {
    pub const WINDOW: u8 = 0x01;
    pub const TCP_FLAGS: u8 = 0x02;
    pub const OPTIONS: u8 = 0x04;
    pub const URGENT: u8 = 0x08;
    pub const TTL: u8 = 0x10;
    pub const TOS: u8 = 0x20;
    pub const IP_FLAGS: u8 = 0x40;
    pub const RESERVED: u8 = 0x80;
    /// The bits only a TCP reference takes.
    pub const TCP_ONLY: u8 = WINDOW | TCP_FLAGS | OPTIONS | URGENT;
}

/// TCP option kinds the compressor reads.
mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const TIMESTAMPS: u8 = 8;
    pub const TIMESTAMPS_LEN: usize = 10;
}

/// Counters of header compression, both directions of one end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HeaderCounters {
    /// Packets sent with compressed headers.
    pub compressed: u64,
    /// Header bytes compression saved (whole packets' bytes minus what was sent).
    pub saved_bytes: u64,
    /// Packets sent whole to establish a reference.
    pub full_sent: u64,
    /// Flows the compressor holds a context for now.
    pub contexts: u64,
    /// Packets the compressor's own check refused (sent as they came).
    pub verify_failed: u64,
    /// Compressed packets received whose reference was not held: dropped.
    pub missing_context: u64,
    /// Header-compressed packets received that did not decode or whose checksum was wrong:
    /// dropped.
    pub decode_failed: u64,
    /// References stored for the peer and acknowledged.
    pub acks_sent: u64,
    /// Acknowledgements received.
    pub acks_received: u64,
}

/// Where a compressible packet's headers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// 4 or 6.
    version: u8,
    /// Bytes of the IP header.
    ip_len: usize,
    /// TCP or UDP.
    protocol: u8,
    /// Bytes of the TCP header with its options, or of the UDP header.
    l4_len: usize,
}

impl Shape {
    fn header_len(&self) -> usize {
        self.ip_len + self.l4_len
    }

    fn is_tcp(&self) -> bool {
        self.protocol == wire::PROTOCOL_TCP
    }

    /// The range of the TCP options (empty for UDP).
    fn options(&self) -> core::ops::Range<usize> {
        if self.is_tcp() {
            self.ip_len + tcp::HEADER_LEN..self.header_len()
        } else {
            self.header_len()..self.header_len()
        }
    }
}

/// A stored reference: a packet's header with the fields every compressed packet gives
/// (lengths, checksums, ECN) zeroed, so both ends store the same bytes whatever those were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    header: Vec<u8>,
    shape: Shape,
    /// Where the TCP timestamps' 8 bytes start in `header`, if it has them.
    timestamps_at: Option<usize>,
    /// The unit seq and ack deltas may be given in (0: none).
    stride: u32,
}

impl Reference {
    /// The reference a compressible packet makes.
    fn new(packet: &[u8], shape: Shape, stride: u32) -> Reference {
        let mut header = packet[..shape.header_len()].to_vec();
        let (ip, l4) = header.split_at_mut(shape.ip_len);
        if let Ok(mut ip) = Ipv4Packet::new_checked(&mut *ip) {
            ip.set_total_len(0);
            ip.set_checksum(0);
            ip.set_dscp_ecn(ip.dscp_ecn() & !0b11);
        } else if let Ok(mut ip) = Ipv6Packet::new_checked(&mut *ip) {
            ip.set_payload_len(0);
            ip.set_traffic_class(ip.traffic_class() & !0b11);
        }
        if shape.is_tcp() {
            if let Ok(mut tcp) = TcpSegment::new_checked(&mut *l4) {
                tcp.set_checksum(0);
            }
        } else if let Ok(mut udp) = UdpDatagram::new_checked(&mut *l4) {
            udp.set_len(0);
            udp.set_checksum(0);
        }
        let timestamps_at =
            timestamps_offset(&header[shape.options()]).map(|at| shape.options().start + at);
        Reference {
            header,
            shape,
            timestamps_at,
            stride,
        }
    }
}

/// Where the value of the Timestamps option starts in `options` (after kind and length).
fn timestamps_offset(options: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < options.len() {
        match options[at] {
            option::END => return None,
            option::NOP => at += 1,
            kind => {
                let len = usize::from(*options.get(at + 1)?);
                if len < 2 || at + len > options.len() {
                    return None;
                }
                if kind == option::TIMESTAMPS && len == option::TIMESTAMPS_LEN {
                    return Some(at + 2);
                }
                at += len;
            }
        }
    }
    None
}

/// The headers of `packet` if it is one header compression takes (see the module doc).
pub(crate) fn shape(packet: &[u8]) -> Option<Shape> {
    let (version, ip_len, protocol) = match wire::ip_version(packet)? {
        4 => {
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            let plain = ip.header_len() == ipv4::HEADER_LEN
                && usize::from(ip.total_len()) == packet.len()
                && !ip.is_fragment()
                && Ecn::from_bits(ip.dscp_ecn()) == Ecn::NotEct
                && ip.verify_checksum();
            if !plain {
                return None;
            }
            (4, ipv4::HEADER_LEN, ip.protocol())
        }
        _ => {
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            if usize::from(ip.payload_len()) + ipv6::HEADER_LEN != packet.len()
                || Ecn::from_bits(ip.traffic_class()) != Ecn::NotEct
            {
                return None;
            }
            (6, ipv6::HEADER_LEN, ip.next_header())
        }
    };
    let l4 = &packet[ip_len..];
    let l4_len = match protocol {
        wire::PROTOCOL_TCP => {
            let tcp = TcpSegment::new_checked(l4).ok()?;
            if tcp.is_cut() {
                return None;
            }
            tcp.header_len()
        }
        wire::PROTOCOL_UDP => {
            let udp = UdpDatagram::new_checked(l4).ok()?;
            if usize::from(udp.len()) != l4.len() {
                return None;
            }
            udp::HEADER_LEN
        }
        _ => return None,
    };
    let shape = Shape {
        version,
        ip_len,
        protocol,
        l4_len,
    };
    l4_checksum_ok(packet, shape).then_some(shape)
}

/// Whether the TCP or UDP checksum of a packet of `shape` is right (a UDP/IPv4 packet
/// without one passes; a UDP/IPv6 one does not, RFC 8200 section 8.1).
fn l4_checksum_ok(packet: &[u8], shape: Shape) -> bool {
    let ip = shape.ip_len;
    let l4 = &packet[ip..];
    if !shape.is_tcp() && UdpDatagram::new_checked(l4).is_ok_and(|udp| udp.checksum() == 0) {
        return shape.version == 4;
    }
    let addresses = if shape.version == 4 {
        &packet[ipv4::field::SOURCE.start..ipv4::field::DESTINATION.end]
    } else {
        &packet[ipv6::field::SOURCE.start..ipv6::field::DESTINATION.end]
    };
    let sum = checksum_add(0, addresses)
        + u64::from(shape.protocol)
        + l4.len() as u64
        + checksum_add(0, l4);
    checksum_finish(sum) == 0
}

/// What identifies a flow: version, protocol, addresses, ports.
pub(crate) type FlowKey = [u8; 38];

fn flow_key(packet: &[u8], shape: Shape) -> FlowKey {
    let mut key = [0; 38];
    key[0] = shape.version;
    key[1] = shape.protocol;
    let addresses = if shape.version == 4 {
        &packet[ipv4::field::SOURCE.start..ipv4::field::DESTINATION.end]
    } else {
        &packet[ipv6::field::SOURCE.start..ipv6::field::DESTINATION.end]
    };
    key[2..2 + addresses.len()].copy_from_slice(addresses);
    let ports = shape.ip_len + udp::field::SOURCE_PORT.start
        ..shape.ip_len + udp::field::DESTINATION_PORT.end;
    key[34..38].copy_from_slice(&packet[ports]);
    key
}

fn read_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Appends `value` as a LEB128 varint.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A cursor over a header-compressed packet's bytes; every read checks the length.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    fn u8(&mut self) -> Result<u8, DecompressError> {
        let byte = *self.bytes.get(self.at).ok_or(DecompressError::Truncated)?;
        self.at += 1;
        Ok(byte)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecompressError> {
        let bytes = self
            .bytes
            .get(self.at..self.at + len)
            .ok_or(DecompressError::Truncated)?;
        self.at += len;
        Ok(bytes)
    }

    /// A varint of at most `max_bits` bits (a longer or larger one is an error).
    fn varint(&mut self, max_bits: u32) -> Result<u64, DecompressError> {
        let mut value: u64 = 0;
        for group in 0..10u32 {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            let shift = 7 * group;
            if shift >= 64 || (bits << shift) >> shift != bits {
                return Err(DecompressError::BadVarint);
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                if max_bits < 64 && value >> max_bits != 0 {
                    return Err(DecompressError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(DecompressError::BadVarint)
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}

/// What precedes a header-compressed packet's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    /// [`kind::FULL`] or the compressed packet's b0.
    b0: u8,
    cid: u16,
    generation: u8,
    /// A compressed packet's "store me as": generation and stride.
    store: Option<(u8, u32)>,
}

/// Reads the prefix, bounding the context id and the stride where they are parsed.
fn read_prefix(reader: &mut Reader<'_>) -> Result<Prefix, DecompressError> {
    let b0 = reader.u8()?;
    if b0 != kind::FULL && b0 & kind::COMPRESSED == 0 {
        return Err(DecompressError::UnknownKind(b0));
    }
    let cid = reader.varint(16)? as u16;
    if cid >= MAX_CONTEXTS {
        return Err(DecompressError::ContextOutOfRange(cid));
    }
    let generation = reader.u8()?;
    let store = if b0 != kind::FULL && b0 & kind::STORE != 0 {
        let new_generation = reader.u8()?;
        let stride = reader.varint(16)? as u32;
        Some((new_generation, stride))
    } else {
        None
    };
    Ok(Prefix {
        b0,
        cid,
        generation,
        store,
    })
}

fn write_prefix(out: &mut Vec<u8>, prefix: &Prefix) {
    out.push(prefix.b0);
    put_varint(out, u64::from(prefix.cid));
    out.push(prefix.generation);
    if let Some((generation, stride)) = prefix.store {
        out.push(generation);
        put_varint(out, u64::from(stride));
    }
}

#[cfg(test)]
mod tests;
