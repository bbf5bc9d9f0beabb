//! The receiving side: stores references, acknowledges them, rebuilds packets.

use std::collections::{HashMap, VecDeque};

use pathlab_core::packet::Ecn;
use pathlab_core::wire::ipv4::{self, Ipv4Packet};
use pathlab_core::wire::ipv6::{self, Ipv6Packet};
use pathlab_core::wire::tcp::TcpSegment;
use pathlab_core::wire::udp::{self, UdpDatagram};

use super::{
    ext, kind, l4_checksum_ok, read_prefix, read_u16, read_u32, shape, tcp, HeaderCounters, Reader,
    Reference, Shape, GENERATIONS_KEPT, MAX_PENDING_ACKS,
};
use crate::wire::HeaderAck;

/// Why a header-compressed packet was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    /// The bytes end before a field.
    #[error("header-compressed packet truncated")]
    Truncated,
    /// The first byte is no kind of header-compressed packet.
    #[error("unknown header-compressed packet kind {0:#04x}, expected 0x01 or 0x80 to 0xff")]
    UnknownKind(u8),
    /// A varint is longer or larger than its field allows.
    #[error("varint too long or too large for its field")]
    BadVarint,
    /// A context id at or beyond [`super::MAX_CONTEXTS`].
    #[error("context {0} out of range, expected below {max}", max = super::MAX_CONTEXTS)]
    ContextOutOfRange(u16),
    /// The reference the packet names is not held (never received, or replaced).
    #[error("no reference for context {cid} generation {generation}")]
    MissingContext {
        /// The context.
        cid: u16,
        /// The generation.
        generation: u8,
    },
    /// A Full packet that is not one header compression takes.
    #[error("a Full packet's header is not compressible IP/TCP or IP/UDP")]
    NotCompressible,
    /// Fields the reference cannot take (TCP fields on a UDP reference, timestamps on one
    /// without them, a reserved bit, options not a multiple of 4 or beyond 40 bytes, an
    /// IPv4 fragment).
    #[error("fields the reference cannot take")]
    BadFields,
    /// The rebuilt packet's TCP or UDP checksum is wrong.
    #[error("rebuilt packet fails its checksum")]
    Checksum,
}

/// The receiving side of header compression: one per session end.
#[derive(Debug)]
pub struct Decompressor {
    /// Whether Full packets and "store me" requests are stored and acknowledged (off: only
    /// Full packets decode, and the peer never compresses).
    stores: bool,
    /// Per context, its generations, oldest first (at most [`GENERATIONS_KEPT`]).
    contexts: HashMap<u16, VecDeque<(u8, Reference)>>,
    acks: VecDeque<HeaderAck>,
    counters: HeaderCounters,
}

impl Decompressor {
    /// An empty table; `stores` says whether it stores and acknowledges references.
    pub fn new(stores: bool) -> Decompressor {
        Decompressor {
            stores,
            contexts: HashMap::new(),
            acks: VecDeque::new(),
            counters: HeaderCounters::default(),
        }
    }

    /// Forgets every reference and pending acknowledgement (a new session).
    pub fn reset(&mut self) {
        self.contexts.clear();
        self.acks.clear();
    }

    /// The counters of this side (`missing_context`, `decode_failed`, `acks_sent`).
    pub fn counters(&self) -> HeaderCounters {
        self.counters
    }

    /// The packet that `bytes` (a header-compressed packet, LZ4 undone) stands for;
    /// stores the reference it establishes and queues its acknowledgement. Errors are
    /// counted; the packet is then dropped.
    pub fn decompress(&mut self, bytes: &[u8]) -> Result<Vec<u8>, DecompressError> {
        let result = self.decompress_uncounted(bytes);
        match result {
            Err(DecompressError::MissingContext { .. }) => self.counters.missing_context += 1,
            Err(_) => self.counters.decode_failed += 1,
            Ok(_) => {}
        }
        result
    }

    fn decompress_uncounted(&mut self, bytes: &[u8]) -> Result<Vec<u8>, DecompressError> {
        let mut reader = Reader::new(bytes);
        let prefix = read_prefix(&mut reader)?;
        if prefix.b0 == kind::FULL {
            let packet = reader.rest();
            let shape = shape(packet).ok_or(DecompressError::NotCompressible)?;
            self.store(
                prefix.cid,
                prefix.generation,
                Reference::new(packet, shape, 0),
            );
            return Ok(packet.to_vec());
        }
        let reference = self
            .contexts
            .get(&prefix.cid)
            .and_then(|generations| {
                generations
                    .iter()
                    .find(|(generation, _)| *generation == prefix.generation)
            })
            .map(|(_, reference)| reference)
            .ok_or(DecompressError::MissingContext {
                cid: prefix.cid,
                generation: prefix.generation,
            })?;
        let (packet, shape) = rebuild(reference, prefix.b0, &mut reader)?;
        if let Some((generation, stride)) = prefix.store {
            self.store(
                prefix.cid,
                generation,
                Reference::new(&packet, shape, stride),
            );
        }
        Ok(packet)
    }

    fn store(&mut self, cid: u16, generation: u8, reference: Reference) {
        if !self.stores {
            return;
        }
        let generations = self.contexts.entry(cid).or_default();
        generations.retain(|(held, _)| *held != generation);
        if generations.len() >= GENERATIONS_KEPT {
            generations.pop_front();
        }
        generations.push_back((generation, reference));
        let ack = HeaderAck { cid, generation };
        if !self.acks.contains(&ack) {
            if self.acks.len() >= MAX_PENDING_ACKS {
                self.acks.pop_front();
            }
            self.acks.push_back(ack);
        }
    }

    /// Whether acknowledgements wait to be sent.
    pub fn has_acks(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Moves up to `max` pending acknowledgements into `out` (cleared first), oldest first.
    pub fn take_acks(&mut self, max: usize, out: &mut Vec<HeaderAck>) {
        out.clear();
        let count = max.min(self.acks.len());
        out.extend(self.acks.drain(..count));
        self.counters.acks_sent += count as u64;
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): the peer's contexts, the references
    /// kept of them (at most [`GENERATIONS_KEPT`] each) and the acknowledgements to send.
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("headers.peer_contexts", self.contexts.len());
        sizes.add(
            "headers.peer_references",
            self.contexts.values().map(VecDeque::len).sum(),
        );
        sizes.add("headers.acks_out", self.acks.len());
    }
}

/// The packet a compressed packet's fields (after its prefix, in `reader`) and `b0` make
/// against `reference`, and its shape; the TCP or UDP checksum is checked.
pub(super) fn rebuild(
    reference: &Reference,
    b0: u8,
    reader: &mut Reader<'_>,
) -> Result<(Vec<u8>, Shape), DecompressError> {
    let ext_bits = if b0 & kind::EXT != 0 { reader.u8()? } else { 0 };
    check_fields(reference, b0, ext_bits)?;
    let mut header = reference.header.clone();
    apply_deltas(reference, b0, reader, &mut header)?;
    let options = apply_extensions(reference.shape, ext_bits, reader, &mut header)?;
    let checksum = reader.take(2)?;
    let rebuilt = Rebuilt {
        shape: reference.shape,
        header: &header,
        options: options.unwrap_or(&header[reference.shape.options()]),
        ecn: (b0 & kind::ECN) >> kind::ECN_SHIFT,
        checksum,
        payload: reader.rest(),
    };
    rebuilt.assemble()
}

/// Refuses fields the reference cannot take: reserved extension bits, TCP fields on a UDP
/// reference, timestamps on one without them or with new options.
fn check_fields(reference: &Reference, b0: u8, ext_bits: u8) -> Result<(), DecompressError> {
    let is_tcp = reference.shape.is_tcp();
    if ext_bits & ext::RESERVED != 0
        || (!is_tcp
            && (b0 & (kind::SEQ | kind::ACK | kind::TS) != 0 || ext_bits & ext::TCP_ONLY != 0))
        || (b0 & kind::TS != 0
            && (reference.timestamps_at.is_none() || ext_bits & ext::OPTIONS != 0))
    {
        return Err(DecompressError::BadFields);
    }
    Ok(())
}

/// Adds the deltas `b0` announces to the reference's copy in `header`: the IPv4 id (always
/// sent), TCP's sequence and acknowledgment numbers (in bytes, or in strides when the
/// coded value is odd) and its timestamps.
fn apply_deltas(
    reference: &Reference,
    b0: u8,
    reader: &mut Reader<'_>,
    header: &mut [u8],
) -> Result<(), DecompressError> {
    let ip = reference.shape.ip_len;
    let add = |header: &mut [u8], field: std::ops::Range<usize>, delta: u32| {
        let value = read_u32(&header[field.clone()]).wrapping_add(delta);
        header[field].copy_from_slice(&value.to_be_bytes());
    };
    if let Ok(mut v4) = Ipv4Packet::new_checked(&mut header[..ip]) {
        let delta = reader.varint(16)? as u16;
        v4.set_ident(v4.ident().wrapping_add(delta));
    }
    if !reference.shape.is_tcp() {
        return Ok(());
    }
    for (flag, range) in [(kind::SEQ, tcp::field::SEQ), (kind::ACK, tcp::field::ACK)] {
        if b0 & flag == 0 {
            continue;
        }
        let coded = reader.varint(33)?;
        let delta = if coded & 1 == 1 {
            if reference.stride == 0 {
                return Err(DecompressError::BadFields);
            }
            ((coded >> 1) * u64::from(reference.stride)) as u32
        } else {
            (coded >> 1) as u32
        };
        add(header, ip + range.start..ip + range.end, delta);
    }
    if b0 & kind::TS != 0 {
        let at = reference.timestamps_at.expect("checked by check_fields");
        for field in [at..at + 4, at + 4..at + 8] {
            let delta = reader.varint(32)? as u32;
            add(header, field, delta);
        }
    }
    Ok(())
}

/// Writes the fields the extension bits carry into `header` (TCP's window, flags and
/// urgent pointer; the TTL or hop limit, the DSCP, IPv4's flags or IPv6's flow label) and
/// returns the new TCP options, if sent.
fn apply_extensions<'a>(
    shape: Shape,
    ext_bits: u8,
    reader: &mut Reader<'a>,
    header: &mut [u8],
) -> Result<Option<&'a [u8]>, DecompressError> {
    let (ip, l4) = header.split_at_mut(shape.ip_len);
    let mut options = None;
    if ext_bits & ext::WINDOW != 0 {
        l4[tcp::field::WINDOW].copy_from_slice(reader.take(2)?);
    }
    if ext_bits & ext::TCP_FLAGS != 0 {
        l4[tcp::field::FLAGS] = reader.u8()?;
    }
    if ext_bits & ext::OPTIONS != 0 {
        let len = usize::from(reader.u8()?);
        if len % 4 != 0 || len > tcp::MAX_HEADER_LEN - tcp::HEADER_LEN {
            return Err(DecompressError::BadFields);
        }
        options = Some(reader.take(len)?);
    }
    if ext_bits & ext::URGENT != 0 {
        l4[tcp::field::URGENT].copy_from_slice(reader.take(2)?);
    }
    if ext_bits & ext::TTL != 0 {
        ip[if shape.version == 4 {
            ipv4::field::TTL
        } else {
            ipv6::field::HOP_LIMIT
        }] = reader.u8()?;
    }
    if ext_bits & ext::TOS != 0 {
        let class = reader.u8()?;
        if Ecn::from_bits(class) != Ecn::NotEct {
            return Err(DecompressError::BadFields);
        }
        set_class(ip, class);
    }
    if ext_bits & ext::IP_FLAGS != 0 {
        if let Ok(mut v4) = Ipv4Packet::new_checked(&mut *ip) {
            let flags = read_u16(reader.take(2)?);
            if flags & (ipv4::MORE_FRAGMENTS | ipv4::FRAGMENT_OFFSET_MASK) != 0 {
                return Err(DecompressError::BadFields);
            }
            v4.set_flags_fragment(flags);
        } else if let Ok(mut v6) = Ipv6Packet::new_checked(&mut *ip) {
            let label = reader.take(3)?;
            if label[0] & 0xf0 != 0 {
                return Err(DecompressError::BadFields);
            }
            v6.set_flow_label(u32::from_be_bytes([0, label[0], label[1], label[2]]));
        }
    }
    Ok(options)
}

/// Sets the DSCP and ECN bits of the IP header `ip`: IPv4's TOS byte, IPv6's traffic class.
fn set_class(ip: &mut [u8], class: u8) {
    if let Ok(mut v4) = Ipv4Packet::new_checked(&mut *ip) {
        v4.set_dscp_ecn(class);
    } else if let Ok(mut v6) = Ipv6Packet::new_checked(&mut *ip) {
        v6.set_traffic_class(class);
    }
}

/// What a rebuilt packet is made of: the reference's header with the deltas and
/// extensions applied, the options, the ECN bits, the L4 checksum and the payload.
struct Rebuilt<'a> {
    shape: Shape,
    header: &'a [u8],
    options: &'a [u8],
    ecn: u8,
    checksum: &'a [u8],
    payload: &'a [u8],
}

impl Rebuilt<'_> {
    /// The packet, its lengths and IPv4 header checksum set and its L4 checksum (the one
    /// sent) checked; and its shape, with the options' length.
    fn assemble(self) -> Result<(Vec<u8>, Shape), DecompressError> {
        let mut shape = self.shape;
        let ip_len = shape.ip_len;
        let fixed = ip_len
            + if shape.is_tcp() {
                tcp::HEADER_LEN
            } else {
                udp::HEADER_LEN
            };
        let mut packet = Vec::with_capacity(fixed + self.options.len() + self.payload.len());
        packet.extend_from_slice(&self.header[..fixed]);
        packet.extend_from_slice(self.options);
        packet.extend_from_slice(self.payload);
        let Ok(len) = u16::try_from(packet.len()) else {
            return Err(DecompressError::BadFields);
        };
        let (ip, l4) = packet.split_at_mut(ip_len);
        let checksum = read_u16(self.checksum);
        if shape.is_tcp() {
            shape.l4_len = tcp::HEADER_LEN + self.options.len();
            let offset = &mut l4[tcp::field::DATA_OFFSET];
            *offset = ((shape.l4_len / 4) as u8) << 4 | (*offset & 0x0f);
            if let Ok(mut tcp) = TcpSegment::new_checked(&mut *l4) {
                tcp.set_checksum(checksum);
            }
        } else if let Ok(mut udp) = UdpDatagram::new_checked(&mut *l4) {
            udp.set_len(len - ip_len as u16);
            udp.set_checksum(checksum);
        }
        if let Ok(mut v4) = Ipv4Packet::new_checked(&mut *ip) {
            v4.set_dscp_ecn(v4.dscp_ecn() | self.ecn);
            v4.set_total_len(len);
            v4.fill_checksum();
        } else if let Ok(mut v6) = Ipv6Packet::new_checked(&mut *ip) {
            v6.set_traffic_class(v6.traffic_class() | self.ecn);
            v6.set_payload_len(len - ipv6::HEADER_LEN as u16);
        }
        if !l4_checksum_ok(&packet, shape) {
            return Err(DecompressError::Checksum);
        }
        Ok((packet, shape))
    }
}
