//! The receiving side: stores references, acknowledges them, rebuilds packets.

use std::collections::{HashMap, VecDeque};

use pathlab_core::wire::checksum::{checksum_add, checksum_finish};

use super::{
    ext, kind, l4_checksum_ok, read_prefix, read_u16, read_u32, shape, tcp, HeaderCounters, Reader,
    Reference, Shape, GENERATIONS_KEPT, MAX_PENDING_ACKS,
};
use crate::inner::field::{ipv4, ipv6, udp};
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
}

/// The packet a compressed packet's fields (after its prefix, in `reader`) and `b0` make
/// against `reference`, and its shape; the TCP or UDP checksum is checked.
pub(super) fn rebuild(
    reference: &Reference,
    b0: u8,
    reader: &mut Reader<'_>,
) -> Result<(Vec<u8>, Shape), DecompressError> {
    let mut shape = reference.shape;
    let is_tcp = shape.is_tcp();
    let ip = shape.ip_len;
    let ext_bits = if b0 & kind::EXT != 0 { reader.u8()? } else { 0 };
    if ext_bits & ext::RESERVED != 0
        || (!is_tcp
            && (b0 & (kind::SEQ | kind::ACK | kind::TS) != 0 || ext_bits & ext::TCP_ONLY != 0))
        || (b0 & kind::TS != 0
            && (reference.timestamps_at.is_none() || ext_bits & ext::OPTIONS != 0))
    {
        return Err(DecompressError::BadFields);
    }
    let mut header = reference.header.clone();
    let ecn = (b0 & kind::ECN) >> kind::ECN_SHIFT;
    if shape.version == 4 {
        let delta = reader.varint(16)? as u16;
        let id = read_u16(&header[ipv4::ID]).wrapping_add(delta);
        header[ipv4::ID].copy_from_slice(&id.to_be_bytes());
    }
    if is_tcp {
        let stride = reference.stride;
        for (flag, range) in [(kind::SEQ, tcp::SEQ), (kind::ACK, tcp::ACK)] {
            if b0 & flag == 0 {
                continue;
            }
            let coded = reader.varint(33)?;
            let delta = if coded & 1 == 1 {
                if stride == 0 {
                    return Err(DecompressError::BadFields);
                }
                ((coded >> 1) * u64::from(stride)) as u32
            } else {
                (coded >> 1) as u32
            };
            let at = ip + range.start..ip + range.end;
            let value = read_u32(&header[at.clone()]).wrapping_add(delta);
            header[at].copy_from_slice(&value.to_be_bytes());
        }
        if b0 & kind::TS != 0 {
            let at = reference.timestamps_at.expect("checked above");
            for field in [at..at + 4, at + 4..at + 8] {
                let delta = reader.varint(32)? as u32;
                let value = read_u32(&header[field.clone()]).wrapping_add(delta);
                header[field].copy_from_slice(&value.to_be_bytes());
            }
        }
    }
    let mut options = None;
    if ext_bits & ext::WINDOW != 0 {
        let window = reader.take(2)?;
        header[ip + tcp::WINDOW.start..ip + tcp::WINDOW.end].copy_from_slice(window);
    }
    if ext_bits & ext::TCP_FLAGS != 0 {
        header[ip + tcp::FLAGS] = reader.u8()?;
    }
    if ext_bits & ext::OPTIONS != 0 {
        let len = usize::from(reader.u8()?);
        if len % 4 != 0 || len > tcp::MAX_HEADER - tcp::MIN_HEADER {
            return Err(DecompressError::BadFields);
        }
        options = Some(reader.take(len)?);
    }
    if ext_bits & ext::URGENT != 0 {
        let urgent = reader.take(2)?;
        header[ip + tcp::URGENT.start..ip + tcp::URGENT.end].copy_from_slice(urgent);
    }
    if ext_bits & ext::TTL != 0 {
        let ttl = reader.u8()?;
        header[if shape.version == 4 {
            ipv4::TTL
        } else {
            ipv6::HOP_LIMIT
        }] = ttl;
    }
    if ext_bits & ext::TOS != 0 {
        let class = reader.u8()?;
        if class & 0b11 != 0 {
            return Err(DecompressError::BadFields);
        }
        if shape.version == 4 {
            header[ipv4::TOS] = class;
        } else {
            header[0] = 0x60 | (class >> 4);
            header[1] = (class << 4) | (header[1] & 0x0f);
        }
    }
    if ext_bits & ext::IP_FLAGS != 0 {
        if shape.version == 4 {
            let flags = reader.take(2)?;
            if read_u16(flags) & 0x3fff != 0 {
                return Err(DecompressError::BadFields);
            }
            header[ipv4::FLAGS_FRAGMENT].copy_from_slice(flags);
        } else {
            let label = reader.take(3)?;
            if label[0] & 0xf0 != 0 {
                return Err(DecompressError::BadFields);
            }
            header[1] = (header[1] & 0xf0) | label[0];
            header[2..4].copy_from_slice(&label[1..]);
        }
    }
    let checksum = reader.take(2)?;
    let payload = reader.rest();
    // ECN: the IPv4 TOS byte's low bits, bits 4-5 of IPv6's second byte.
    if shape.version == 4 {
        header[ipv4::TOS] |= ecn;
    } else {
        header[1] |= ecn << 4;
    }
    let fixed = if is_tcp {
        ip + tcp::MIN_HEADER
    } else {
        ip + udp::HEADER
    };
    let options = options.unwrap_or(&header[shape.options()]);
    let mut packet = Vec::with_capacity(fixed + options.len() + payload.len());
    packet.extend_from_slice(&header[..fixed]);
    packet.extend_from_slice(options);
    packet.extend_from_slice(payload);
    if u16::try_from(packet.len()).is_err() {
        return Err(DecompressError::BadFields);
    }
    let len = packet.len();
    if is_tcp {
        shape.l4_len = tcp::MIN_HEADER + options.len();
        let offset = &mut packet[ip + tcp::DATA_OFFSET];
        *offset = ((shape.l4_len / 4) as u8) << 4 | (*offset & 0x0f);
        packet[ip + tcp::CHECKSUM.start..ip + tcp::CHECKSUM.end].copy_from_slice(checksum);
    } else {
        let udp_len = ((len - ip) as u16).to_be_bytes();
        packet[ip + udp::LEN.start..ip + udp::LEN.end].copy_from_slice(&udp_len);
        packet[ip + udp::CHECKSUM.start..ip + udp::CHECKSUM.end].copy_from_slice(checksum);
    }
    if shape.version == 4 {
        packet[ipv4::TOTAL_LEN].copy_from_slice(&(len as u16).to_be_bytes());
        let sum = checksum_finish(checksum_add(0, &packet[..ipv4::MIN_HEADER]));
        packet[ipv4::CHECKSUM].copy_from_slice(&sum.to_be_bytes());
    } else {
        let payload_len = ((len - ipv6::HEADER) as u16).to_be_bytes();
        packet[ipv6::PAYLOAD_LEN].copy_from_slice(&payload_len);
    }
    if !l4_checksum_ok(&packet, shape) {
        return Err(DecompressError::Checksum);
    }
    Ok((packet, shape))
}
