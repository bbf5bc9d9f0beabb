//! The sending side: a context per flow, full headers until the far end acknowledges a
//! reference, then compressed packets checked before they go.

use std::collections::HashMap;

use pathlab_core::{Duration, Instant};

use super::decompress::rebuild;
use super::{
    ext, flow_key, kind, put_varint, read_prefix, read_u16, read_u32, shape, tcp, write_prefix,
    FlowKey, HeaderCounters, Prefix, Reader, Reference, Shape, GENERATIONS_KEPT, MAX_CONTEXTS,
};
use crate::wire::HeaderAck;
use pathlab_core::wire::ipv4::{self, Ipv4Packet};
use pathlab_core::wire::ipv6::{self, Ipv6Packet};
use pathlab_core::wire::udp;

/// The compressor's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressorConfig {
    /// Flows it holds contexts for at once (at most [`MAX_CONTEXTS`]); beyond, the least
    /// recently used flow's context goes to the new one.
    pub max_contexts: u16,
    /// How long a reference asked for (a Full packet, or a compressed one saying "store
    /// me") may go unacknowledged before another is asked for (the earlier ones still
    /// count when their acknowledgement comes: up to [`MAX_PENDING`] of them). Each
    /// further unacknowledged request doubles it, up to 64 times (RFC 2507's backoff:
    /// a peer that never acknowledges, its header compression off, costs a whole packet's
    /// prefix every 6.4 s per flow).
    pub retry_after: Duration,
    /// How old the acknowledged reference must be before a newer one is asked for (one at
    /// a time: so about once per round trip).
    pub refresh_after: Duration,
}

impl Default for CompressorConfig {
    fn default() -> CompressorConfig {
        CompressorConfig {
            max_contexts: 256,
            retry_after: Duration::from_millis(100),
            refresh_after: Duration::from_millis(10),
        }
    }
}

/// References a flow may have asked for and not seen acknowledged yet (the oldest is
/// forgotten beyond).
pub const MAX_PENDING: usize = 4;

/// A reference asked for and not acknowledged yet.
#[derive(Debug, Clone)]
struct Pending {
    generation: u8,
    reference: Reference,
    sent: Instant,
}

/// One flow's context.
#[derive(Debug, Clone)]
struct Context {
    key: FlowKey,
    last_used: Instant,
    /// The newest acknowledged reference, its generation and when it was asked for.
    acked: Option<(u8, Reference, Instant)>,
    /// Oldest first.
    pending: Vec<Pending>,
    /// The previous packet's seq and ack, to learn the stride.
    last_numbers: Option<(u32, u32)>,
    /// The smallest positive step of seq or ack seen since the last reference was asked
    /// for (0: none yet).
    smallest_step: u32,
    /// Requests in a row not acknowledged (the wait before the next doubles with each).
    unanswered: u32,
}

/// The sending side of header compression: one per session end.
#[derive(Debug)]
pub struct Compressor {
    config: CompressorConfig,
    contexts: Vec<Option<Context>>,
    /// Each context id's next generation: it goes on across the flows that hold the id, so
    /// a (cid, generation) pair names one reference for 256 references.
    next_generation: Vec<u8>,
    flows: HashMap<FlowKey, u16>,
    counters: HeaderCounters,
    scratch: Vec<u8>,
}

impl Compressor {
    /// A compressor with no context.
    pub fn new(config: CompressorConfig) -> Compressor {
        let max = config.max_contexts.clamp(1, MAX_CONTEXTS);
        Compressor {
            config: CompressorConfig {
                max_contexts: max,
                ..config
            },
            contexts: vec![None; usize::from(max)],
            next_generation: vec![0; usize::from(max)],
            flows: HashMap::new(),
            counters: HeaderCounters::default(),
            scratch: Vec::new(),
        }
    }

    /// Forgets every context (a new session: the far end's table is new too).
    pub fn reset(&mut self) {
        self.contexts.iter_mut().for_each(|c| *c = None);
        self.next_generation.iter_mut().for_each(|g| *g = 0);
        self.flows.clear();
        self.counters.contexts = 0;
    }

    /// The counters of this side (`compressed`, `saved_bytes`, `full_sent`, `contexts`,
    /// `verify_failed`, `acks_received`).
    pub fn counters(&self) -> HeaderCounters {
        self.counters
    }

    /// The far end stored a reference.
    pub fn handle_ack(&mut self, now: Instant, ack: HeaderAck) {
        self.counters.acks_received += 1;
        let Some(Some(context)) = self.contexts.get_mut(usize::from(ack.cid)) else {
            return;
        };
        let Some(index) = context
            .pending
            .iter()
            .position(|pending| pending.generation == ack.generation)
        else {
            return;
        };
        // Those asked for before it are no use any more: it is newer.
        let pending = context
            .pending
            .drain(..=index)
            .next_back()
            .expect("index found");
        context.acked = Some((pending.generation, pending.reference, pending.sent));
        context.unanswered = 0;
        context.last_used = context.last_used.max(now);
    }

    /// Codes an inner packet at `now`: `true` if `out` (cleared first) now holds its
    /// header-compressed form (a Full or a compressed packet), `false` if it goes as it
    /// came.
    pub fn compress(&mut self, now: Instant, packet: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        let Some(shape) = shape(packet) else {
            return false;
        };
        let cid = self.context_for(now, flow_key(packet, shape));
        let config = self.config;
        let context = self.contexts[usize::from(cid)]
            .as_mut()
            .expect("context_for made it");
        context.last_used = now;
        learn_stride(context, packet, shape);
        // The far end keeps GENERATIONS_KEPT references of a context: once that many were
        // asked for since the acknowledged one, it may hold it no longer (every newer one
        // stored, all their acknowledgements lost), and a packet compressed against it
        // would be dropped there, as every later one. A new reference is asked for
        // instead (a Full packet, the packets between going whole).
        if context.acked.as_ref().is_some_and(|(generation, ..)| {
            let asked_since = self.next_generation[usize::from(cid)]
                .wrapping_sub(*generation)
                .wrapping_sub(1);
            usize::from(asked_since) >= GENERATIONS_KEPT
        }) {
            context.acked = None;
        }
        let wait = config
            .retry_after
            .saturating_mul(1 << context.unanswered.min(MAX_BACKOFF_DOUBLINGS));
        let may_ask = context
            .pending
            .last()
            .is_none_or(|p| now.saturating_since(p.sent) >= wait);
        if let Some((generation, reference, asked)) = &context.acked {
            let ask = may_ask && now.saturating_since(*asked) >= config.refresh_after;
            let store = ask.then(|| {
                let stride = if context.smallest_step > 0 {
                    context.smallest_step
                } else {
                    reference.stride
                };
                (self.next_generation[usize::from(cid)], stride)
            });
            if encode(reference, *generation, cid, store, packet, shape, out) {
                if verify(reference, out, packet, &mut self.scratch) {
                    if let Some((new_generation, stride)) = store {
                        self.next_generation[usize::from(cid)] = new_generation.wrapping_add(1);
                        push_pending(
                            context,
                            Pending {
                                generation: new_generation,
                                reference: Reference::new(packet, shape, stride),
                                sent: now,
                            },
                        );
                        context.smallest_step = 0;
                    }
                    self.counters.compressed += 1;
                    self.counters.saved_bytes += packet.len().saturating_sub(out.len()) as u64;
                    return true;
                }
                self.counters.verify_failed += 1;
            }
            out.clear();
        }
        if !may_ask {
            return false;
        }
        // No reference to compress against (or the packet did not fit it): establish one.
        let generation = self.next_generation[usize::from(cid)];
        self.next_generation[usize::from(cid)] = generation.wrapping_add(1);
        let prefix = Prefix {
            b0: kind::FULL,
            cid,
            generation,
            store: None,
        };
        write_prefix(out, &prefix);
        out.extend_from_slice(packet);
        push_pending(
            context,
            Pending {
                generation,
                reference: Reference::new(packet, shape, 0),
                sent: now,
            },
        );
        self.counters.full_sent += 1;
        true
    }

    /// The context id of a flow: its own, a free one, or the least recently used one's.
    fn context_for(&mut self, now: Instant, key: FlowKey) -> u16 {
        if let Some(&cid) = self.flows.get(&key) {
            return cid;
        }
        let cid = match self.contexts.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                let (oldest, _) = self
                    .contexts
                    .iter()
                    .enumerate()
                    .filter_map(|(cid, c)| c.as_ref().map(|c| (cid, c.last_used)))
                    .min_by_key(|(_, last_used)| *last_used)
                    .expect("the table is full");
                if let Some(evicted) = self.contexts[oldest].take() {
                    self.flows.remove(&evicted.key);
                }
                oldest
            }
        };
        self.contexts[cid] = Some(Context {
            key,
            last_used: now,
            acked: None,
            pending: Vec::new(),
            last_numbers: None,
            smallest_step: 0,
            unanswered: 0,
        });
        self.flows.insert(key, cid as u16);
        self.counters.contexts = self.flows.len() as u64;
        cid as u16
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): flows with a context (at most
    /// `max_contexts`, their slots allocated once) and the references awaiting an
    /// acknowledgement.
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("headers.flows", self.flows.len());
        let live = self.contexts.iter().flatten();
        sizes.add("headers.contexts", live.clone().count());
        sizes.add("headers.pending", live.map(|c| c.pending.len()).sum());
    }
}

/// How many times the wait for an acknowledgement doubles at most (2^6 = 64).
const MAX_BACKOFF_DOUBLINGS: u32 = 6;

fn push_pending(context: &mut Context, pending: Pending) {
    if !context.pending.is_empty() {
        context.unanswered += 1;
    }
    if context.pending.len() >= MAX_PENDING {
        context.pending.remove(0);
    }
    context.pending.push(pending);
}

/// Notes the step of seq and ack from the flow's previous packet: the stride the next
/// reference gives deltas in (a segment's size, what an ACK acknowledges at a time).
fn learn_stride(context: &mut Context, packet: &[u8], shape: Shape) {
    if !shape.is_tcp() {
        return;
    }
    let ip = shape.ip_len;
    let seq = read_u32(&packet[ip + tcp::field::SEQ.start..ip + tcp::field::SEQ.end]);
    let ack = read_u32(&packet[ip + tcp::field::ACK.start..ip + tcp::field::ACK.end]);
    if let Some((last_seq, last_ack)) = context.last_numbers {
        for step in [seq.wrapping_sub(last_seq), ack.wrapping_sub(last_ack)] {
            if step > 0
                && u16::try_from(step).is_ok()
                && (context.smallest_step == 0 || step < context.smallest_step)
            {
                context.smallest_step = step;
            }
        }
    }
    context.last_numbers = Some((seq, ack));
}

/// Whether `out` decodes against `reference` to exactly `packet`.
fn verify(reference: &Reference, out: &[u8], packet: &[u8], scratch: &mut Vec<u8>) -> bool {
    let mut reader = Reader::new(out);
    let Ok(prefix) = read_prefix(&mut reader) else {
        return false;
    };
    scratch.clear();
    match rebuild(reference, prefix.b0, &mut reader) {
        Ok((rebuilt, _)) => rebuilt == packet,
        Err(_) => false,
    }
}

/// A seq or ack delta as the format gives it: in strides (odd) when it is a whole number
/// of them, else in bytes (even).
fn scaled(delta: u32, stride: u32) -> u64 {
    if stride > 0 && delta.is_multiple_of(stride) {
        (u64::from(delta / stride) << 1) | 1
    } else {
        u64::from(delta) << 1
    }
}

/// Writes `packet` compressed against `reference` (generation `generation` of `cid`),
/// asking the far end to store it as `store` if given. `false` if a field cannot be said
/// (TCP's reserved bits differ, or the shapes differ).
fn encode(
    reference: &Reference,
    generation: u8,
    cid: u16,
    store: Option<(u8, u32)>,
    packet: &[u8],
    shape: Shape,
    out: &mut Vec<u8>,
) -> bool {
    let rshape = reference.shape;
    if rshape.version != shape.version || rshape.protocol != shape.protocol {
        return false;
    }
    let mut encoding = Encoding::default();
    if store.is_some() {
        encoding.b0 |= kind::STORE;
    }
    if shape.version == 4 {
        let field = ipv4::field::IDENT;
        let id = read_u16(&packet[field.clone()]).wrapping_sub(read_u16(&reference.header[field]));
        encoding.fields[0] = Some(u64::from(id));
    }
    if shape.is_tcp() && !encoding.tcp_fields(reference, packet, shape) {
        return false;
    }
    encoding.ip_fields(&reference.header, packet, shape);
    encoding.write(out, packet, shape, |b0| Prefix {
        b0,
        cid,
        generation,
        store,
    });
    true
}

/// A compressed header as it is worked out: the first byte's bits, the extension bits,
/// the varint fields (IP id, seq, ack, TSval, TSecr; `None` when not sent) and the
/// extension fields in the order the decompressor reads them.
struct Encoding {
    b0: u8,
    ext_bits: u8,
    fields: [Option<u64>; 5],
    ext_fields: Vec<u8>,
}

impl Default for Encoding {
    fn default() -> Encoding {
        Encoding {
            b0: kind::COMPRESSED,
            ext_bits: 0,
            fields: [None; 5],
            ext_fields: Vec::new(),
        }
    }
}

impl Encoding {
    /// Adds what changed in the TCP header against the reference's: seq and ack deltas,
    /// timestamps (when only they changed in the options), the window, flags, options and
    /// urgent pointer. False when the packet cannot be sent against this reference (its
    /// reserved bits differ).
    fn tcp_fields(&mut self, reference: &Reference, packet: &[u8], shape: Shape) -> bool {
        let base = &reference.header;
        let ip = shape.ip_len;
        let (l4, base_l4) = (&packet[ip..], &base[ip..]);
        if l4[tcp::field::DATA_OFFSET] & 0x0f != base_l4[tcp::field::DATA_OFFSET] & 0x0f {
            return false;
        }
        for (index, flag, range) in [
            (1, kind::SEQ, tcp::field::SEQ),
            (2, kind::ACK, tcp::field::ACK),
        ] {
            let delta = read_u32(&l4[range.clone()]).wrapping_sub(read_u32(&base_l4[range]));
            if delta != 0 {
                self.b0 |= flag;
                self.fields[index] = Some(scaled(delta, reference.stride));
            }
        }
        let options = &packet[shape.options()];
        let raw_options = options != &base[reference.shape.options()]
            && !self.timestamps_only(reference, options);
        if l4[tcp::field::WINDOW] != base_l4[tcp::field::WINDOW] {
            self.ext_bits |= ext::WINDOW;
            self.ext_fields.extend_from_slice(&l4[tcp::field::WINDOW]);
        }
        if l4[tcp::field::FLAGS] != base_l4[tcp::field::FLAGS] {
            self.ext_bits |= ext::TCP_FLAGS;
            self.ext_fields.push(l4[tcp::field::FLAGS]);
        }
        if raw_options {
            self.ext_bits |= ext::OPTIONS;
            self.ext_fields.push(options.len() as u8);
            self.ext_fields.extend_from_slice(options);
        }
        if l4[tcp::field::URGENT] != base_l4[tcp::field::URGENT] {
            self.ext_bits |= ext::URGENT;
            self.ext_fields.extend_from_slice(&l4[tcp::field::URGENT]);
        }
        true
    }

    /// Whether `options` (which differ from the reference's) differ only in the
    /// timestamps' values; if so their deltas are added as the TSval and TSecr fields.
    fn timestamps_only(&mut self, reference: &Reference, options: &[u8]) -> bool {
        let base_options = &reference.header[reference.shape.options()];
        let Some(at) = reference.timestamps_at else {
            return false;
        };
        if options.len() != base_options.len() {
            return false;
        }
        let relative = at - reference.shape.options().start;
        let outside = |o: &[u8]| {
            let mut copy = o.to_vec();
            copy[relative..relative + 8].fill(0);
            copy
        };
        if outside(options) != outside(base_options) {
            return false;
        }
        self.b0 |= kind::TS;
        for (index, offset) in [(3, 0), (4, 4)] {
            let value = relative + offset..relative + offset + 4;
            let delta =
                read_u32(&options[value.clone()]).wrapping_sub(read_u32(&base_options[value]));
            self.fields[index] = Some(u64::from(delta));
        }
        true
    }

    /// Adds what changed in the IP header against the reference's `base`: the TTL or hop
    /// limit, the DSCP (the ECN bits always go in the first byte), IPv4's flags or IPv6's
    /// flow label.
    fn ip_fields(&mut self, base: &[u8], packet: &[u8], shape: Shape) {
        let ttl = if shape.version == 4 {
            ipv4::field::TTL
        } else {
            ipv6::field::HOP_LIMIT
        };
        if packet[ttl] != base[ttl] {
            self.ext_bits |= ext::TTL;
            self.ext_fields.push(packet[ttl]);
        }
        let (class, base_class) = (traffic_class(packet), traffic_class(base));
        if class & !0b11 != base_class & !0b11 {
            self.ext_bits |= ext::TOS;
            self.ext_fields.push(class & !0b11);
        }
        self.b0 |= (class & 0b11) << kind::ECN_SHIFT;
        if let (Ok(v4), Ok(base_v4)) = (
            Ipv4Packet::new_checked(packet),
            Ipv4Packet::new_checked(base),
        ) {
            if v4.flags_fragment() != base_v4.flags_fragment() {
                self.ext_bits |= ext::IP_FLAGS;
                self.ext_fields
                    .extend_from_slice(&v4.flags_fragment().to_be_bytes());
            }
        } else if let (Ok(v6), Ok(base_v6)) = (
            Ipv6Packet::new_checked(packet),
            Ipv6Packet::new_checked(base),
        ) {
            if v6.flow_label() != base_v6.flow_label() {
                self.ext_bits |= ext::IP_FLAGS;
                self.ext_fields
                    .extend_from_slice(&v6.flow_label().to_be_bytes()[1..]);
            }
        }
    }

    /// Writes the compressed packet to `out`: the prefix `prefix` makes from the first
    /// byte, the extension bits, the varints, the extension fields, the L4 checksum as
    /// sent, and the payload.
    fn write(
        mut self,
        out: &mut Vec<u8>,
        packet: &[u8],
        shape: Shape,
        prefix: impl FnOnce(u8) -> Prefix,
    ) {
        if self.ext_bits != 0 {
            self.b0 |= kind::EXT;
        }
        write_prefix(out, &prefix(self.b0));
        if self.ext_bits != 0 {
            out.push(self.ext_bits);
        }
        for value in self.fields.into_iter().flatten() {
            put_varint(out, value);
        }
        out.extend_from_slice(&self.ext_fields);
        let l4 = &packet[shape.ip_len..];
        let checksum = if shape.is_tcp() {
            tcp::field::CHECKSUM
        } else {
            udp::field::CHECKSUM
        };
        out.extend_from_slice(&l4[checksum]);
        out.extend_from_slice(&packet[shape.header_len()..]);
    }
}

/// The DSCP and ECN bits of an IP packet: IPv4's TOS byte, IPv6's traffic class.
fn traffic_class(packet: &[u8]) -> u8 {
    if let Ok(v4) = Ipv4Packet::new_checked(packet) {
        v4.dscp_ecn()
    } else {
        Ipv6Packet::new_checked(packet).map_or(0, |v6| v6.traffic_class())
    }
}
