//! The tunnel's wire format (docs/bond.md): a clear header, then an AEAD-sealed body of
//! frames.
//!
//! Every UDP datagram of the tunnel is
//!
//! ```text
//! header (12 bytes, clear, authenticated as associated data)
//!   kind u8 | line u8 | session u32 | seq u48
//! body (Data: sealed with ChaCha20-Poly1305 under the sender's direction key)
//!   Data: sent_ns u64, then frames until the end
//! tag (16 bytes)
//! ```
//!
//! Kinds: 1 Hello (the handshake's Initiation), 2 Welcome (its Response), 3 Data, 4 Cookie
//! (a CookieReply), 5 Stale (the server knows no such session). The handshake's messages
//! are laid out in [`crate::handshake`]; a Stale is the bare header of the Data it answers.
//!
//! All integers are big-endian. `seq` counts the datagrams the sender sent on `line`
//! (from 1); with the line it forms the AEAD nonce, so it never repeats under one key: a
//! line stops sending at [`MAX_SEQ`] (2^48 - 1: 9 years at a million datagrams a second).
//!
//! A Data body:
//!
//! ```text
//! Data     sent_ns u64 | frame*                                          (8 + frames)
//! ```
//!
//! Frames, each a type byte then fixed fields:
//!
//! ```text
//! 1 Fragment  stream u16 | packet u32 | offset u16 | total_len u16 | flags u8 | len u16 | data [len]
//!             flags: bit 0 LZ4-compressed, bit 1 header-compressed (crate::headers), other
//!             bits 0; len > 0, offset + len <= total_len
//! 7 Packet    stream u16 | packet u32 | flags u8 | len u16 | data [len]
//!             a whole packet (a Fragment at offset 0 of total_len = len, 4 bytes shorter)
//! 2 Feedback  line u8 | highest_seq u64 | received_packets u64 | received_bytes u64 |
//!             report_ns u64 | owd_min_ns i64 | owd_last_ns i64 | samples u32 |
//!             owd_min_len u16
//! 3 Echo      line u8 | echoed_ns u64 | held_ns u64
//! 4 Padding   len u16 | len zero bytes
//! 5 ProbeAck  line u8 | seq u64 | len_bytes u16
//! 6 Close     (nothing)
//! 8 HeaderAcks count u8 | (cid u16 | gen u8) * count
//!             the header-compression references the sender stored (crate::headers);
//!             1 <= count <= MAX_HEADER_ACKS, cid < MAX_HEADER_CONTEXTS
//! 9 RekeyInit  id u32 | message [48]   a rekey handshake's first message (crate::rekey)
//! 10 RekeyReply id u32 | message [48]  its answer, with the same id
//! ```
//!
//! A datagram that carries one whole inner packet spends 46 bytes on the tunnel (header
//! 12, timestamp 8, Packet frame 10, tag 16) and 28 on IPv4 and UDP: a 1500-byte line
//! carries inner packets of 1426 bytes in one datagram each (WireGuard spends 32 + 28).
//!
//! Decoding never panics and never allocates: [`Header::decode`], [`decode_data`] and the [`Frames`] iterator check every length
//! before they read, and frames borrow their bytes from the body. Every offset is in one
//! table (`mod field`), shared by the encoders and the decoders.

/// Bytes of the clear header.
pub const HEADER_BYTES: usize = 12;
/// The largest `seq` (48 bits on the wire).
pub const MAX_SEQ: u64 = (1 << 48) - 1;
/// Bytes of the AEAD tag that ends every datagram.
pub const TAG_BYTES: usize = 16;
/// Bytes of a Data body before its first frame (the sender's timestamp).
pub const DATA_PREFIX_BYTES: usize = 8;
/// The largest datagram the tunnel sends or accepts (the largest IPv4 UDP payload).
pub const MAX_DATAGRAM_BYTES: usize = 65_507;
/// Bytes a Data datagram spends before and after its frames: header, timestamp, tag.
pub const DATA_OVERHEAD_BYTES: usize = HEADER_BYTES + DATA_PREFIX_BYTES + TAG_BYTES;
/// Bytes of a Fragment frame before its data: the frame takes this plus `data.len()`.
pub const FRAGMENT_HEADER_BYTES: usize = 14;
/// Bytes of a Packet frame (a whole inner packet) before its data.
pub const PACKET_HEADER_BYTES: usize = 10;
/// Bytes of a Feedback frame.
pub const FEEDBACK_FRAME_BYTES: usize = 56;
/// Bytes of an Echo frame.
pub const ECHO_FRAME_BYTES: usize = 18;
/// Bytes of a Padding frame before its zeros: `Padding(n)` takes this plus `n`.
pub const PADDING_HEADER_BYTES: usize = 3;
/// Bytes of a ProbeAck frame.
pub const PROBE_ACK_FRAME_BYTES: usize = 12;
/// Bytes of a Close frame.
pub const CLOSE_FRAME_BYTES: usize = 1;
/// Bytes of a HeaderAcks frame before its entries.
pub const HEADER_ACKS_HEADER_BYTES: usize = 2;
/// Bytes of one HeaderAcks entry (cid u16, gen u8).
pub const HEADER_ACK_BYTES: usize = 3;
/// The most entries one HeaderAcks frame carries (a peer's count is refused beyond it).
pub const MAX_HEADER_ACKS: usize = 64;
/// Bytes of a RekeyInit or RekeyReply frame.
pub const REKEY_FRAME_BYTES: usize = 1 + 4 + REKEY_MESSAGE_BYTES;
/// Bytes of each rekey message ([`crate::rekey`]): an ephemeral key (32) and an empty
/// payload's tag (16). Defined here, with the frame that carries it, so the wire format
/// depends on no key code.
pub const REKEY_MESSAGE_BYTES: usize = 48;
/// Header-compression context ids are below this, in HeaderAcks frames and in the
/// compressed packets of [`crate::headers`].
pub const MAX_HEADER_CONTEXTS: u16 = 1024;

/// Where each field lives: the one table the encoders and decoders share.
mod field {
    /// A multi-byte field: its byte range.
    pub type Field = core::ops::Range<usize>;

    /// The clear header of every datagram.
    pub mod header {
        use super::Field;
        /// Kind of datagram.
        pub const KIND: usize = 0;
        /// Sender's line.
        pub const LINE: usize = 1;
        /// Session id.
        pub const SESSION: Field = 2..6;
        /// Datagram number on the line (48 bits).
        pub const SEQ: Field = 6..12;
    }

    /// The start of a Data body.
    pub mod data {
        use super::Field;
        /// The sender's timestamp.
        pub const SENT_NS: Field = 0..8;
    }

    /// Every frame starts with its type byte.
    pub const FRAME_TYPE: usize = 0;

    /// A Fragment frame, before its data.
    pub mod fragment {
        use super::Field;
        /// The stream (an inner flow) the packet belongs to.
        pub const STREAM: Field = 1..3;
        /// Inner packet number in its stream.
        pub const PACKET: Field = 3..7;
        /// Where the piece starts in the packet.
        pub const OFFSET: Field = 7..9;
        /// Length of the whole packet.
        pub const TOTAL_LEN: Field = 9..11;
        /// Bit 0: LZ4, bit 1: header-compressed; the others must be 0.
        pub const FLAGS: usize = 11;
        /// Length of the piece.
        pub const LEN: Field = 12..14;
    }

    /// A Packet frame (a whole inner packet), before its data.
    pub mod packet {
        use super::Field;
        /// The stream (an inner flow) the packet belongs to.
        pub const STREAM: Field = 1..3;
        /// Inner packet number in its stream.
        pub const PACKET: Field = 3..7;
        /// Bit 0: LZ4, bit 1: header-compressed; the others must be 0.
        pub const FLAGS: usize = 7;
        /// Length of the packet.
        pub const LEN: Field = 8..10;
    }

    /// A Feedback frame.
    pub mod feedback {
        use super::Field;
        /// The line reported on.
        pub const LINE: usize = 1;
        /// Highest seq received.
        pub const HIGHEST_SEQ: Field = 2..10;
        /// Datagrams received.
        pub const RECEIVED_PACKETS: Field = 10..18;
        /// Bytes received.
        pub const RECEIVED_BYTES: Field = 18..26;
        /// Receiver's clock at the report.
        pub const REPORT_NS: Field = 26..34;
        /// Lowest one-way delay sample.
        pub const OWD_MIN_NS: Field = 34..42;
        /// Latest one-way delay sample.
        pub const OWD_LAST_NS: Field = 42..50;
        /// Samples since the previous report.
        pub const SAMPLES: Field = 50..54;
        /// Length of the datagram of the lowest sample.
        pub const OWD_MIN_LEN: Field = 54..56;
    }

    /// An Echo frame.
    pub mod echo {
        use super::Field;
        /// The line the echoed datagram came by.
        pub const LINE: usize = 1;
        /// Its timestamp.
        pub const ECHOED_NS: Field = 2..10;
        /// How long it was held.
        pub const HELD_NS: Field = 10..18;
    }

    /// A Padding frame, before its zeros.
    pub mod padding {
        use super::Field;
        /// How many zeros follow.
        pub const LEN: Field = 1..3;
    }

    /// A HeaderAcks frame, before its entries.
    pub mod header_acks {
        /// How many entries follow.
        pub const COUNT: usize = 1;
    }

    /// One entry of a HeaderAcks frame.
    pub mod header_ack {
        use super::Field;
        /// The context.
        pub const CID: Field = 0..2;
        /// The generation stored.
        pub const GENERATION: usize = 2;
    }

    /// A RekeyInit or RekeyReply frame.
    pub mod rekey {
        use super::Field;
        /// The rekey's id.
        pub const ID: Field = 1..5;
        /// The handshake message.
        pub const MESSAGE: Field = 5..53;
    }

    /// A ProbeAck frame.
    pub mod probe_ack {
        use super::Field;
        /// The line the probe came by.
        pub const LINE: usize = 1;
        /// The probe's seq.
        pub const SEQ: Field = 2..10;
        /// The probe's length.
        pub const LEN_BYTES: Field = 10..12;
    }
}

// The sizes above are the ends of the tables: a field added to one without the other
// fails to compile.
const _: () = {
    assert!(field::header::SEQ.end == HEADER_BYTES);
    assert!(field::data::SENT_NS.end == DATA_PREFIX_BYTES);
    assert!(field::fragment::LEN.end == FRAGMENT_HEADER_BYTES);
    assert!(field::packet::LEN.end == PACKET_HEADER_BYTES);
    assert!(field::feedback::OWD_MIN_LEN.end == FEEDBACK_FRAME_BYTES);
    assert!(field::echo::HELD_NS.end == ECHO_FRAME_BYTES);
    assert!(field::padding::LEN.end == PADDING_HEADER_BYTES);
    assert!(field::probe_ack::LEN_BYTES.end == PROBE_ACK_FRAME_BYTES);
    assert!(field::FRAME_TYPE + 1 == CLOSE_FRAME_BYTES);
    assert!(field::header_acks::COUNT + 1 == HEADER_ACKS_HEADER_BYTES);
    assert!(field::header_ack::GENERATION + 1 == HEADER_ACK_BYTES);
    assert!(field::rekey::MESSAGE.end == REKEY_FRAME_BYTES);
};

/// The type byte of each frame.
mod frame_type {
    /// [`super::Frame::Fragment`].
    pub const FRAGMENT: u8 = 1;
    /// [`super::Frame::Feedback`].
    pub const FEEDBACK: u8 = 2;
    /// [`super::Frame::Echo`].
    pub const ECHO: u8 = 3;
    /// [`super::Frame::Padding`].
    pub const PADDING: u8 = 4;
    /// [`super::Frame::ProbeAck`].
    pub const PROBE_ACK: u8 = 5;
    /// [`super::Frame::Close`].
    pub const CLOSE: u8 = 6;
    /// [`super::Frame::Fragment`] of a whole packet.
    pub const PACKET: u8 = 7;
    /// [`super::Frame::HeaderAcks`].
    pub const HEADER_ACKS: u8 = 8;
    /// [`super::Frame::Rekey`] from the client.
    pub const REKEY_INIT: u8 = 9;
    /// [`super::Frame::Rekey`] from the server.
    pub const REKEY_REPLY: u8 = 10;

    /// The frame's name, for error messages.
    pub fn name(frame_type: u8) -> &'static str {
        match frame_type {
            FRAGMENT => "Fragment",
            FEEDBACK => "Feedback",
            ECHO => "Echo",
            PADDING => "Padding",
            PROBE_ACK => "ProbeAck",
            CLOSE => "Close",
            PACKET => "Packet",
            HEADER_ACKS => "HeaderAcks",
            REKEY_INIT => "RekeyInit",
            REKEY_REPLY => "RekeyReply",
            _ => "unknown",
        }
    }
}

/// The Fragment flag saying the packet is LZ4-compressed.
const FLAG_LZ4: u8 = 0x01;
/// The Fragment flag saying the packet's headers are compressed ([`crate::headers`]).
const FLAG_HEADERS: u8 = 0x02;
/// Every flag a Fragment may set; the other bits are reserved.
const FLAGS_DEFINED: u8 = FLAG_LZ4 | FLAG_HEADERS;

/// How an inner packet's bytes are coded on the wire: the Fragment and Packet frames' flags.
/// Headers are compressed first, then LZ4 applies to the result; the receiver undoes LZ4
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Coding {
    /// LZ4 with the original length prepended.
    pub lz4: bool,
    /// IP/TCP or IP/UDP headers compressed against a reference ([`crate::headers`]).
    pub headers: bool,
}

impl Coding {
    /// The packet as it came: no coding.
    pub const RAW: Coding = Coding {
        lz4: false,
        headers: false,
    };

    /// The flags byte.
    pub fn to_flags(self) -> u8 {
        (if self.lz4 { FLAG_LZ4 } else { 0 }) | (if self.headers { FLAG_HEADERS } else { 0 })
    }

    /// The coding a flags byte says, or the error for reserved bits.
    pub fn from_flags(flags: u8) -> Result<Coding, WireError> {
        if flags & !FLAGS_DEFINED != 0 {
            return Err(WireError::ReservedFlags(flags));
        }
        Ok(Coding {
            lz4: flags & FLAG_LZ4 != 0,
            headers: flags & FLAG_HEADERS != 0,
        })
    }

    /// The tag a queued [`pathlab_core::Packet`] carries for this coding (the fair queue
    /// hands it back with the packet's pieces).
    pub fn to_tag(self) -> u32 {
        u32::from(self.to_flags())
    }

    /// The coding a queued packet's tag says (a tag is only ever set by [`Coding::to_tag`]).
    pub fn from_tag(tag: u32) -> Coding {
        Coding::from_flags((tag & u32::from(FLAGS_DEFINED)) as u8).unwrap_or(Coding::RAW)
    }
}

/// Why bytes are not a valid datagram, body or frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The datagram is shorter than the clear header.
    #[error("truncated header: the datagram has {len} bytes, the header needs {HEADER_BYTES}")]
    TruncatedHeader {
        /// The datagram's length.
        len: usize,
    },
    /// The datagram is larger than any the tunnel sends.
    #[error("oversized datagram: {len} bytes, at most {MAX_DATAGRAM_BYTES} expected")]
    Oversized {
        /// The datagram's length.
        len: usize,
    },
    /// The header's kind byte is none of Hello, Welcome, Data, Cookie, Stale.
    #[error("unknown datagram kind {0}, expected 1 (Hello), 2 (Welcome), 3 (Data), 4 (Cookie) or 5 (Stale)")]
    UnknownKind(u8),
    /// A Data body is shorter than its timestamp.
    #[error("truncated Data body: {len} bytes, the timestamp needs {DATA_PREFIX_BYTES}")]
    TruncatedData {
        /// The body's length.
        len: usize,
    },
    /// A frame's type byte is not a known frame.
    #[error("unknown frame type {0}, expected 1 to 10")]
    UnknownFrameType(u8),
    /// A frame runs past the end of the body.
    #[error("truncated {frame} frame: it needs {needed} bytes, {available} remain in the body")]
    TruncatedFrame {
        /// The frame's name.
        frame: &'static str,
        /// Bytes the frame needs (its fixed part, then with its data or zeros).
        needed: usize,
        /// Bytes left in the body from the frame's type byte on.
        available: usize,
    },
    /// A Fragment sets flags that are reserved.
    #[error(
        "fragment flags {0:#04x} set reserved bits, only bits 0 (LZ4) and 1 (headers) are defined"
    )]
    ReservedFlags(u8),
    /// A Fragment is empty or lies outside its packet.
    #[error(
        "fragment of {len} bytes at offset {offset} does not fit a packet of {total_len} \
         bytes (expected len > 0, total_len > 0, offset + len <= total_len)"
    )]
    FragmentOutOfRange {
        /// The piece's offset.
        offset: u16,
        /// The piece's length.
        len: u16,
        /// The packet's length.
        total_len: u16,
    },
    /// A HeaderAcks frame's count is 0 or above [`MAX_HEADER_ACKS`].
    #[error("HeaderAcks frame with {0} entries, expected 1 to {MAX_HEADER_ACKS}")]
    HeaderAckCount(u8),
    /// A HeaderAcks entry names a context at or beyond [`MAX_HEADER_CONTEXTS`].
    #[error("HeaderAcks entry for context {0}, expected below {MAX_HEADER_CONTEXTS}")]
    ContextOutOfRange(u16),
    /// A Padding frame contains a byte that is not zero.
    #[error("padding byte {index} is {value:#04x}, expected 0")]
    NonZeroPadding {
        /// Which of the frame's zeros it is (from 0).
        index: usize,
        /// Its value.
        value: u8,
    },
}

/// Which kind of datagram a header starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client to server, on every line, until welcomed: a handshake's Initiation.
    Hello = 1,
    /// Server to client: the handshake's Response, which opens the session.
    Welcome = 2,
    /// Either way, once the session is open: frames.
    Data = 3,
    /// Server to client: a CookieReply, asking the Initiation again with its cookie.
    Cookie = 4,
    /// Server to client: the session a Data named is unknown here (the server restarted or
    /// forgot it). Not authenticated: a hint to handshake again, taken only after silence.
    Stale = 5,
}

/// The clear header of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body is.
    pub kind: Kind,
    /// The sender's line the datagram was sent on (the client's line index; the server
    /// answers on the same index).
    pub line: u8,
    /// The session, chosen by the server in its Welcome's payload; in the handshake's
    /// messages, the client's sender index.
    pub session: u32,
    /// Datagrams sent on this line in this direction, from 1.
    pub seq: u64,
}

/// One piece of an inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// The stream (an inner flow: its own id and numbers) the packet belongs to: the
    /// receiver keeps order per stream.
    pub stream: u16,
    /// The inner packet's number in its stream, in this direction (from 1).
    pub packet: u32,
    /// Where this piece starts in the (possibly compressed) packet.
    pub offset: u16,
    /// Length of the whole (possibly compressed) packet.
    pub total_len: u16,
    /// How the packet's bytes are coded (LZ4, compressed headers).
    pub coding: Coding,
    /// The piece's bytes.
    pub data: &'a [u8],
}

/// What the receiver saw on one of the sender's lines, sent back so the sender can pace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Feedback {
    /// The line this reports on (the line the reported datagrams came by).
    pub line: u8,
    /// Highest `seq` received on the line.
    pub highest_seq: u64,
    /// Datagrams received on the line since the session opened (duplicates excluded).
    pub received_packets: u64,
    /// Bytes (whole UDP payloads) received on the line since the session opened.
    pub received_bytes: u64,
    /// The receiver's clock when it wrote this report, in ns.
    pub report_ns: u64,
    /// The lowest one-way delay sample (receiver's clock minus sender's timestamp, ns; the
    /// clocks' offset is in it) since the previous report on this line.
    pub owd_min_ns: i64,
    /// The most recent one-way delay sample, same units.
    pub owd_last_ns: i64,
    /// One-way delay samples since the previous report (0: `owd_*` are stale).
    pub samples: u32,
    /// Length (UDP payload) of the datagram that gave `owd_min_ns`: its own serialization
    /// is in that sample, and the sender, who knows the line's rate, takes it out.
    pub owd_min_len: u16,
}

/// A frame of a Data body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A piece of an inner packet.
    Fragment(Fragment<'a>),
    /// What arrived on one of the peer's lines.
    Feedback(Feedback),
    /// The sender's timestamp of the latest datagram received on `line`, echoed with how
    /// long it was held, so the peer measures each line's round trip.
    Echo {
        /// The line the echoed datagram came by.
        line: u8,
        /// Its `sent_ns`.
        echoed_ns: u64,
        /// Nanoseconds between its arrival and this frame's sending.
        held_ns: u64,
    },
    /// Zeros that make a datagram as large as a path MTU probe needs.
    Padding(u16),
    /// The receiver got a path MTU probe: datagram `seq` on `line`, `len_bytes` long (UDP
    /// payload).
    ProbeAck {
        /// The line the probe came by.
        line: u8,
        /// The probe's `seq`.
        seq: u64,
        /// The probe's UDP payload length.
        len_bytes: u16,
    },
    /// The sender ends the session.
    Close,
    /// Header-compression references the sender stored: the peer may compress against them.
    HeaderAcks(HeaderAcks<'a>),
    /// A rekey handshake's message ([`crate::rekey`]): the client's RekeyInit, or the
    /// server's RekeyReply to the RekeyInit of the same id.
    Rekey {
        /// Whether it is the server's reply.
        reply: bool,
        /// The rekey's id.
        id: u32,
        /// The Noise message.
        message: &'a [u8],
    },
}

/// One header-compression reference stored: context `cid`, generation `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderAck {
    /// The context id.
    pub cid: u16,
    /// The generation stored.
    pub generation: u8,
}

/// The entries of a HeaderAcks frame, borrowed from the body (1 to [`MAX_HEADER_ACKS`],
/// each checked when the frame was decoded or built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderAcks<'a> {
    entries: &'a [u8],
}

impl<'a> HeaderAcks<'a> {
    /// Writes up to [`MAX_HEADER_ACKS`] of `acks` as a frame's entries into `scratch` and
    /// returns the frame over them (`None` if `acks` is empty).
    pub fn build(acks: &[HeaderAck], scratch: &'a mut Vec<u8>) -> Option<HeaderAcks<'a>> {
        use field::header_ack::{CID, GENERATION};
        scratch.clear();
        for ack in acks.iter().take(MAX_HEADER_ACKS) {
            let entry = grow(scratch, HEADER_ACK_BYTES);
            entry[CID].copy_from_slice(&ack.cid.to_be_bytes());
            entry[GENERATION] = ack.generation;
        }
        (!scratch.is_empty()).then_some(HeaderAcks { entries: scratch })
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len() / HEADER_ACK_BYTES
    }

    /// Whether there are none (never, for a decoded frame).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries.
    pub fn iter(&self) -> impl Iterator<Item = HeaderAck> + 'a {
        use field::header_ack::{CID, GENERATION};
        self.entries
            .chunks_exact(HEADER_ACK_BYTES)
            .map(|entry| HeaderAck {
                cid: read_u16(&entry[CID]),
                generation: entry[GENERATION],
            })
    }
}

/// A big-endian `u16` from a 2-byte field.
fn read_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes(bytes.try_into().expect("the field table gives 2 bytes"))
}

/// A big-endian `u32` from a 4-byte field.
fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes.try_into().expect("the field table gives 4 bytes"))
}

/// A big-endian `u64` from an 8-byte field.
fn read_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("the field table gives 8 bytes"))
}

/// A big-endian `i64` from an 8-byte field.
fn read_i64(bytes: &[u8]) -> i64 {
    i64::from_be_bytes(bytes.try_into().expect("the field table gives 8 bytes"))
}

/// Appends `len` zero bytes to `out` and returns them, for the encoders to fill by field.
fn grow(out: &mut Vec<u8>, len: usize) -> &mut [u8] {
    let start = out.len();
    out.resize(start + len, 0);
    &mut out[start..]
}

impl TryFrom<u8> for Kind {
    type Error = WireError;

    fn try_from(byte: u8) -> Result<Kind, WireError> {
        match byte {
            1 => Ok(Kind::Hello),
            2 => Ok(Kind::Welcome),
            3 => Ok(Kind::Data),
            4 => Ok(Kind::Cookie),
            5 => Ok(Kind::Stale),
            other => Err(WireError::UnknownKind(other)),
        }
    }
}

impl Header {
    /// The header's 12 bytes. `seq` must be at most [`MAX_SEQ`] (checked in debug builds;
    /// its low 48 bits are written).
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        use field::header::{KIND, LINE, SEQ, SESSION};
        debug_assert!(self.seq <= MAX_SEQ, "seq {} is past 48 bits", self.seq);
        let mut bytes = [0; HEADER_BYTES];
        bytes[KIND] = self.kind as u8;
        bytes[LINE] = self.line;
        bytes[SESSION].copy_from_slice(&self.session.to_be_bytes());
        bytes[SEQ].copy_from_slice(&self.seq.to_be_bytes()[2..]);
        bytes
    }

    /// Appends the header's 12 bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The header that starts `datagram` (a whole datagram, or at least its first 12 bytes).
    ///
    /// Checks the length (at least [`HEADER_BYTES`], at most [`MAX_DATAGRAM_BYTES`]) and the
    /// kind. It does not judge `session` or `seq`: the session state and the replay window
    /// do.
    pub fn decode(datagram: &[u8]) -> Result<Header, WireError> {
        use field::header::{KIND, LINE, SEQ, SESSION};
        if datagram.len() > MAX_DATAGRAM_BYTES {
            return Err(WireError::Oversized {
                len: datagram.len(),
            });
        }
        let Some(bytes) = datagram.get(..HEADER_BYTES) else {
            return Err(WireError::TruncatedHeader {
                len: datagram.len(),
            });
        };
        let kind = Kind::try_from(bytes[KIND])?;
        let mut seq = [0; 8];
        seq[2..].copy_from_slice(&bytes[SEQ]);
        Ok(Header {
            kind,
            line: bytes[LINE],
            session: read_u32(&bytes[SESSION]),
            seq: u64::from_be_bytes(seq),
        })
    }
}

/// Bytes a Fragment's frame spends before its data: a whole packet goes as a Packet frame.
pub fn fragment_frame_bytes(fragment: &Fragment<'_>) -> usize {
    piece_header_bytes(
        usize::from(fragment.offset),
        fragment.data.len(),
        usize::from(fragment.total_len),
    )
}

/// Bytes the frame of a piece of `len` bytes at `offset` of a packet of `total_len` spends
/// before its data.
pub fn piece_header_bytes(offset: usize, len: usize, total_len: usize) -> usize {
    if offset == 0 && len == total_len {
        PACKET_HEADER_BYTES
    } else {
        FRAGMENT_HEADER_BYTES
    }
}

/// Appends the start of a Data body, the sender's timestamp; frames follow.
pub fn encode_data_prefix(sent_ns: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&sent_ns.to_be_bytes());
}

/// Splits a (decrypted) Data body into the sender's timestamp (`sent_ns`) and its frames.
pub fn decode_data(body: &[u8]) -> Result<(u64, Frames<'_>), WireError> {
    let Some(prefix) = body.get(field::data::SENT_NS) else {
        return Err(WireError::TruncatedData { len: body.len() });
    };
    Ok((read_u64(prefix), Frames::new(&body[DATA_PREFIX_BYTES..])))
}

impl Frame<'_> {
    /// How many bytes [`Frame::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        match self {
            Frame::Fragment(fragment) => fragment_frame_bytes(fragment) + fragment.data.len(),
            Frame::Feedback(_) => FEEDBACK_FRAME_BYTES,
            Frame::Echo { .. } => ECHO_FRAME_BYTES,
            Frame::Padding(zeros) => PADDING_HEADER_BYTES + usize::from(*zeros),
            Frame::ProbeAck { .. } => PROBE_ACK_FRAME_BYTES,
            Frame::Close => CLOSE_FRAME_BYTES,
            Frame::HeaderAcks(acks) => HEADER_ACKS_HEADER_BYTES + acks.entries.len(),
            Frame::Rekey { .. } => REKEY_FRAME_BYTES,
        }
    }

    /// Appends the frame to `out` (no allocation if `out` has [`Frame::encoded_len`] bytes
    /// of spare capacity).
    ///
    /// A Fragment must be one the decoder accepts: 1 to 65535 bytes of data, `total_len > 0`
    /// and `offset + data.len() <= total_len` (checked in debug builds; a release build
    /// writes the length truncated to 16 bits and the peer rejects the frame).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Fragment(fragment) => {
                use field::fragment::{FLAGS, LEN, OFFSET, PACKET, STREAM, TOTAL_LEN};
                debug_assert!(
                    !fragment.data.is_empty()
                        && u16::try_from(fragment.data.len()).is_ok()
                        && usize::from(fragment.offset) + fragment.data.len()
                            <= usize::from(fragment.total_len),
                    "fragment of {} bytes at {} does not fit a packet of {}",
                    fragment.data.len(),
                    fragment.offset,
                    fragment.total_len
                );
                let flags = fragment.coding.to_flags();
                let len = (fragment.data.len() as u16).to_be_bytes();
                if fragment_frame_bytes(fragment) == PACKET_HEADER_BYTES {
                    let bytes = grow(out, PACKET_HEADER_BYTES);
                    bytes[field::FRAME_TYPE] = frame_type::PACKET;
                    bytes[field::packet::STREAM].copy_from_slice(&fragment.stream.to_be_bytes());
                    bytes[field::packet::PACKET].copy_from_slice(&fragment.packet.to_be_bytes());
                    bytes[field::packet::FLAGS] = flags;
                    bytes[field::packet::LEN].copy_from_slice(&len);
                } else {
                    let bytes = grow(out, FRAGMENT_HEADER_BYTES);
                    bytes[field::FRAME_TYPE] = frame_type::FRAGMENT;
                    bytes[STREAM].copy_from_slice(&fragment.stream.to_be_bytes());
                    bytes[PACKET].copy_from_slice(&fragment.packet.to_be_bytes());
                    bytes[OFFSET].copy_from_slice(&fragment.offset.to_be_bytes());
                    bytes[TOTAL_LEN].copy_from_slice(&fragment.total_len.to_be_bytes());
                    bytes[FLAGS] = flags;
                    bytes[LEN].copy_from_slice(&len);
                }
                out.extend_from_slice(fragment.data);
            }
            Frame::Feedback(feedback) => {
                use field::feedback::{
                    HIGHEST_SEQ, LINE, OWD_LAST_NS, OWD_MIN_LEN, OWD_MIN_NS, RECEIVED_BYTES,
                    RECEIVED_PACKETS, REPORT_NS, SAMPLES,
                };
                let bytes = grow(out, FEEDBACK_FRAME_BYTES);
                bytes[field::FRAME_TYPE] = frame_type::FEEDBACK;
                bytes[LINE] = feedback.line;
                bytes[HIGHEST_SEQ].copy_from_slice(&feedback.highest_seq.to_be_bytes());
                bytes[RECEIVED_PACKETS].copy_from_slice(&feedback.received_packets.to_be_bytes());
                bytes[RECEIVED_BYTES].copy_from_slice(&feedback.received_bytes.to_be_bytes());
                bytes[REPORT_NS].copy_from_slice(&feedback.report_ns.to_be_bytes());
                bytes[OWD_MIN_NS].copy_from_slice(&feedback.owd_min_ns.to_be_bytes());
                bytes[OWD_LAST_NS].copy_from_slice(&feedback.owd_last_ns.to_be_bytes());
                bytes[SAMPLES].copy_from_slice(&feedback.samples.to_be_bytes());
                bytes[OWD_MIN_LEN].copy_from_slice(&feedback.owd_min_len.to_be_bytes());
            }
            Frame::Echo {
                line,
                echoed_ns,
                held_ns,
            } => {
                use field::echo::{ECHOED_NS, HELD_NS, LINE};
                let bytes = grow(out, ECHO_FRAME_BYTES);
                bytes[field::FRAME_TYPE] = frame_type::ECHO;
                bytes[LINE] = *line;
                bytes[ECHOED_NS].copy_from_slice(&echoed_ns.to_be_bytes());
                bytes[HELD_NS].copy_from_slice(&held_ns.to_be_bytes());
            }
            Frame::Padding(zeros) => {
                let bytes = grow(out, PADDING_HEADER_BYTES + usize::from(*zeros));
                bytes[field::FRAME_TYPE] = frame_type::PADDING;
                bytes[field::padding::LEN].copy_from_slice(&zeros.to_be_bytes());
            }
            Frame::ProbeAck {
                line,
                seq,
                len_bytes,
            } => {
                use field::probe_ack::{LEN_BYTES, LINE, SEQ};
                let bytes = grow(out, PROBE_ACK_FRAME_BYTES);
                bytes[field::FRAME_TYPE] = frame_type::PROBE_ACK;
                bytes[LINE] = *line;
                bytes[SEQ].copy_from_slice(&seq.to_be_bytes());
                bytes[LEN_BYTES].copy_from_slice(&len_bytes.to_be_bytes());
            }
            Frame::Close => out.push(frame_type::CLOSE),
            Frame::HeaderAcks(acks) => {
                out.push(frame_type::HEADER_ACKS);
                out.push(acks.len() as u8);
                out.extend_from_slice(acks.entries);
            }
            Frame::Rekey { reply, id, message } => {
                debug_assert_eq!(message.len(), REKEY_MESSAGE_BYTES);
                let bytes = grow(out, REKEY_FRAME_BYTES);
                bytes[field::FRAME_TYPE] = if *reply {
                    frame_type::REKEY_REPLY
                } else {
                    frame_type::REKEY_INIT
                };
                bytes[field::rekey::ID].copy_from_slice(&id.to_be_bytes());
                let message = &message[..message.len().min(REKEY_MESSAGE_BYTES)];
                bytes[field::rekey::MESSAGE][..message.len()].copy_from_slice(message);
            }
        }
    }

    /// The frame that starts `bytes` (non-empty) and how many bytes it takes.
    fn decode(bytes: &[u8]) -> Result<(Frame<'_>, usize), WireError> {
        let kind = bytes[field::FRAME_TYPE];
        let fixed = match kind {
            frame_type::FRAGMENT => FRAGMENT_HEADER_BYTES,
            frame_type::PACKET => PACKET_HEADER_BYTES,
            frame_type::FEEDBACK => FEEDBACK_FRAME_BYTES,
            frame_type::ECHO => ECHO_FRAME_BYTES,
            frame_type::PADDING => PADDING_HEADER_BYTES,
            frame_type::PROBE_ACK => PROBE_ACK_FRAME_BYTES,
            frame_type::CLOSE => CLOSE_FRAME_BYTES,
            frame_type::HEADER_ACKS => HEADER_ACKS_HEADER_BYTES,
            frame_type::REKEY_INIT | frame_type::REKEY_REPLY => REKEY_FRAME_BYTES,
            other => return Err(WireError::UnknownFrameType(other)),
        };
        if bytes.len() < fixed {
            return Err(truncated(bytes, fixed));
        }
        match kind {
            frame_type::FRAGMENT => Frame::decode_fragment(bytes),
            frame_type::PACKET => Frame::decode_packet(bytes),
            frame_type::FEEDBACK => {
                use field::feedback::{
                    HIGHEST_SEQ, LINE, OWD_LAST_NS, OWD_MIN_LEN, OWD_MIN_NS, RECEIVED_BYTES,
                    RECEIVED_PACKETS, REPORT_NS, SAMPLES,
                };
                let feedback = Feedback {
                    line: bytes[LINE],
                    highest_seq: read_u64(&bytes[HIGHEST_SEQ]),
                    received_packets: read_u64(&bytes[RECEIVED_PACKETS]),
                    received_bytes: read_u64(&bytes[RECEIVED_BYTES]),
                    report_ns: read_u64(&bytes[REPORT_NS]),
                    owd_min_ns: read_i64(&bytes[OWD_MIN_NS]),
                    owd_last_ns: read_i64(&bytes[OWD_LAST_NS]),
                    samples: read_u32(&bytes[SAMPLES]),
                    owd_min_len: read_u16(&bytes[OWD_MIN_LEN]),
                };
                Ok((Frame::Feedback(feedback), FEEDBACK_FRAME_BYTES))
            }
            frame_type::ECHO => {
                use field::echo::{ECHOED_NS, HELD_NS, LINE};
                let echo = Frame::Echo {
                    line: bytes[LINE],
                    echoed_ns: read_u64(&bytes[ECHOED_NS]),
                    held_ns: read_u64(&bytes[HELD_NS]),
                };
                Ok((echo, ECHO_FRAME_BYTES))
            }
            frame_type::PADDING => Frame::decode_padding(bytes),
            frame_type::PROBE_ACK => {
                use field::probe_ack::{LEN_BYTES, LINE, SEQ};
                let probe_ack = Frame::ProbeAck {
                    line: bytes[LINE],
                    seq: read_u64(&bytes[SEQ]),
                    len_bytes: read_u16(&bytes[LEN_BYTES]),
                };
                Ok((probe_ack, PROBE_ACK_FRAME_BYTES))
            }
            frame_type::HEADER_ACKS => Frame::decode_header_acks(bytes),
            frame_type::REKEY_INIT | frame_type::REKEY_REPLY => {
                let rekey = Frame::Rekey {
                    reply: kind == frame_type::REKEY_REPLY,
                    id: read_u32(&bytes[field::rekey::ID]),
                    message: &bytes[field::rekey::MESSAGE],
                };
                Ok((rekey, REKEY_FRAME_BYTES))
            }
            _ => Ok((Frame::Close, CLOSE_FRAME_BYTES)),
        }
    }

    /// The Fragment frame that starts `bytes` (its fixed header known to be there) and how
    /// many bytes it takes.
    fn decode_fragment(bytes: &[u8]) -> Result<(Frame<'_>, usize), WireError> {
        use field::fragment::{FLAGS, LEN, OFFSET, PACKET, STREAM, TOTAL_LEN};
        let coding = Coding::from_flags(bytes[FLAGS])?;
        let offset = read_u16(&bytes[OFFSET]);
        let total_len = read_u16(&bytes[TOTAL_LEN]);
        let len = read_u16(&bytes[LEN]);
        if len == 0 || total_len == 0 || u32::from(offset) + u32::from(len) > u32::from(total_len) {
            return Err(WireError::FragmentOutOfRange {
                offset,
                len,
                total_len,
            });
        }
        let end = FRAGMENT_HEADER_BYTES + usize::from(len);
        let Some(data) = bytes.get(FRAGMENT_HEADER_BYTES..end) else {
            return Err(truncated(bytes, end));
        };
        let fragment = Fragment {
            stream: read_u16(&bytes[STREAM]),
            packet: read_u32(&bytes[PACKET]),
            offset,
            total_len,
            coding,
            data,
        };
        Ok((Frame::Fragment(fragment), end))
    }

    /// The Packet frame (a whole packet: a Fragment at offset 0 of its own length) that
    /// starts `bytes` (its fixed header known to be there) and how many bytes it takes.
    fn decode_packet(bytes: &[u8]) -> Result<(Frame<'_>, usize), WireError> {
        use field::packet::{FLAGS, LEN, PACKET, STREAM};
        let coding = Coding::from_flags(bytes[FLAGS])?;
        let len = read_u16(&bytes[LEN]);
        if len == 0 {
            return Err(WireError::FragmentOutOfRange {
                offset: 0,
                len,
                total_len: len,
            });
        }
        let end = PACKET_HEADER_BYTES + usize::from(len);
        let Some(data) = bytes.get(PACKET_HEADER_BYTES..end) else {
            return Err(truncated(bytes, end));
        };
        let fragment = Fragment {
            stream: read_u16(&bytes[STREAM]),
            packet: read_u32(&bytes[PACKET]),
            offset: 0,
            total_len: len,
            coding,
            data,
        };
        Ok((Frame::Fragment(fragment), end))
    }

    /// The Padding frame that starts `bytes` (its fixed header known to be there), its
    /// zeros checked, and how many bytes it takes.
    fn decode_padding(bytes: &[u8]) -> Result<(Frame<'_>, usize), WireError> {
        let zeros = read_u16(&bytes[field::padding::LEN]);
        let end = PADDING_HEADER_BYTES + usize::from(zeros);
        let Some(padding) = bytes.get(PADDING_HEADER_BYTES..end) else {
            return Err(truncated(bytes, end));
        };
        if let Some(index) = padding.iter().position(|&byte| byte != 0) {
            return Err(WireError::NonZeroPadding {
                index,
                value: padding[index],
            });
        }
        Ok((Frame::Padding(zeros), end))
    }

    /// The Header Acks frame that starts `bytes` (its fixed header known to be there), its
    /// count and contexts checked, and how many bytes it takes.
    fn decode_header_acks(bytes: &[u8]) -> Result<(Frame<'_>, usize), WireError> {
        let count = bytes[field::header_acks::COUNT];
        if count == 0 || usize::from(count) > MAX_HEADER_ACKS {
            return Err(WireError::HeaderAckCount(count));
        }
        let end = HEADER_ACKS_HEADER_BYTES + usize::from(count) * HEADER_ACK_BYTES;
        let Some(entries) = bytes.get(HEADER_ACKS_HEADER_BYTES..end) else {
            return Err(truncated(bytes, end));
        };
        let acks = HeaderAcks { entries };
        if let Some(ack) = acks.iter().find(|ack| ack.cid >= MAX_HEADER_CONTEXTS) {
            return Err(WireError::ContextOutOfRange(ack.cid));
        }
        Ok((Frame::HeaderAcks(acks), end))
    }
}

/// The error for the frame that starts `bytes` (non-empty) when it needs `needed` bytes
/// and `bytes` has fewer.
fn truncated(bytes: &[u8], needed: usize) -> WireError {
    WireError::TruncatedFrame {
        frame: frame_type::name(bytes[field::FRAME_TYPE]),
        needed,
        available: bytes.len(),
    }
}

/// The frames of a Data body (after its timestamp: see [`decode_data`]), decoded one by one
/// as they are iterated, borrowing from the body.
///
/// Yields every frame until the end of the bytes; at the first invalid frame it yields that
/// error and then nothing more, since what follows a bad frame cannot be found.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    /// The bytes not decoded yet; emptied by an error.
    rest: &'a [u8],
}

impl<'a> Frames<'a> {
    /// The frames in `frames`, the bytes of a Data body after [`DATA_PREFIX_BYTES`].
    pub fn new(frames: &'a [u8]) -> Frames<'a> {
        Frames { rest: frames }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match Frame::decode(self.rest) {
            Ok((frame, len)) => {
                self.rest = &self.rest[len..];
                Some(Ok(frame))
            }
            Err(error) => {
                self.rest = &[];
                Some(Err(error))
            }
        }
    }
}

impl core::iter::FusedIterator for Frames<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One frame of each kind, with every field distinct so a swapped field shows.
    fn one_of_each(data: &[u8]) -> Vec<Frame<'_>> {
        vec![
            Frame::Fragment(Fragment {
                stream: 0xA1B2,
                packet: 0x0102_0304,
                offset: 5,
                total_len: 5 + data.len() as u16 + 7,
                coding: Coding {
                    lz4: true,
                    headers: false,
                },
                data,
            }),
            Frame::Feedback(Feedback {
                line: 3,
                highest_seq: 11,
                received_packets: 12,
                received_bytes: 13,
                report_ns: 14,
                owd_min_ns: -15,
                owd_last_ns: 16,
                samples: 17,
                owd_min_len: 1472,
            }),
            Frame::Echo {
                line: 4,
                echoed_ns: 21,
                held_ns: 22,
            },
            Frame::Padding(9),
            Frame::ProbeAck {
                line: 5,
                seq: 31,
                len_bytes: 1400,
            },
            Frame::Close,
        ]
    }

    fn encode_all(frames: &[Frame<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in frames {
            let before = out.len();
            frame.encode(&mut out);
            assert_eq!(out.len() - before, frame.encoded_len(), "{frame:?}");
        }
        out
    }

    #[test]
    fn header_bytes_are_the_documented_layout() {
        let header = Header {
            kind: Kind::Data,
            line: 2,
            session: 0x0a0b_0c0d,
            seq: 0x0000_0304_0506_0708,
        };
        let bytes = header.to_bytes();
        assert_eq!(bytes, [3, 2, 0x0a, 0x0b, 0x0c, 0x0d, 3, 4, 5, 6, 7, 8]);
        let last = Header {
            seq: MAX_SEQ,
            ..header
        };
        assert_eq!(Header::decode(&last.to_bytes()), Ok(last));
        assert_eq!(Header::decode(&bytes), Ok(header));
        let mut out = vec![0xee];
        header.encode(&mut out);
        assert_eq!(&out[1..], &bytes);
    }

    #[test]
    fn header_errors_name_what_was_wrong() {
        let good = Header {
            kind: Kind::Hello,
            line: 0,
            session: 0,
            seq: 1,
        }
        .to_bytes();
        assert_eq!(
            Header::decode(&good[..HEADER_BYTES - 1]),
            Err(WireError::TruncatedHeader {
                len: HEADER_BYTES - 1
            })
        );
        let mut bad_kind = good;
        bad_kind[0] = 6;
        assert_eq!(Header::decode(&bad_kind), Err(WireError::UnknownKind(6)));
        bad_kind[0] = 0;
        assert_eq!(Header::decode(&bad_kind), Err(WireError::UnknownKind(0)));
        let mut huge = vec![0; MAX_DATAGRAM_BYTES + 1];
        huge[..HEADER_BYTES].copy_from_slice(&good);
        assert_eq!(
            Header::decode(&huge),
            Err(WireError::Oversized {
                len: MAX_DATAGRAM_BYTES + 1
            })
        );
        assert!(Header::decode(&huge[..MAX_DATAGRAM_BYTES]).is_ok());
        assert_eq!(
            WireError::TruncatedHeader { len: 15 }.to_string(),
            "truncated header: the datagram has 15 bytes, the header needs 12"
        );
    }

    #[test]
    fn fragment_bytes_are_the_documented_layout() {
        let frame = Frame::Fragment(Fragment {
            stream: 3,
            packet: 7,
            offset: 2,
            total_len: 5,
            coding: Coding {
                lz4: true,
                headers: false,
            },
            data: b"abc",
        });
        let bytes = encode_all(&[frame]);
        assert_eq!(
            bytes,
            [1, 0, 3, 0, 0, 0, 7, 0, 2, 0, 5, 1, 0, 3, b'a', b'b', b'c']
        );
    }

    #[test]
    fn every_frame_round_trips_and_the_iterator_stops_at_the_end() {
        let frames = one_of_each(b"payload");
        let bytes = encode_all(&frames);
        let decoded: Vec<_> = Frames::new(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(decoded, frames);
        assert_eq!(Frames::new(&[]).next(), None);
    }

    #[test]
    fn data_bodies_split_into_timestamp_and_frames() {
        let mut body = Vec::new();
        encode_data_prefix(0x1122_3344_5566_7788, &mut body);
        Frame::Close.encode(&mut body);
        let (sent_ns, mut frames) = decode_data(&body).unwrap();
        assert_eq!(sent_ns, 0x1122_3344_5566_7788);
        assert_eq!(frames.next(), Some(Ok(Frame::Close)));
        assert_eq!(frames.next(), None);
        assert_eq!(
            decode_data(&body[..7]).map(|(sent_ns, _)| sent_ns),
            Err(WireError::TruncatedData { len: 7 })
        );
    }

    #[test]
    fn garbage_yields_one_error_then_nothing() {
        let mut bytes = encode_all(&[Frame::Close]);
        // Type 0 is no frame; the Close frames after it must not be reached.
        bytes.extend_from_slice(&[0, 6, 6]);
        let mut frames = Frames::new(&bytes);
        assert_eq!(frames.next(), Some(Ok(Frame::Close)));
        assert_eq!(frames.next(), Some(Err(WireError::UnknownFrameType(0))));
        assert_eq!(frames.next(), None);
        assert_eq!(frames.next(), None);
    }

    #[test]
    fn fragments_outside_their_packet_are_rejected() {
        // stream 0, packet 1, offset, total_len, flags 0, len, then data for any len.
        let fragment = |offset: u16, total_len: u16, len: u16| {
            let mut bytes = vec![1, 0, 0, 0, 0, 0, 1];
            bytes.extend_from_slice(&offset.to_be_bytes());
            bytes.extend_from_slice(&total_len.to_be_bytes());
            bytes.push(0);
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.resize(bytes.len() + usize::from(len), 0xaa);
            Frames::new(&bytes).next().unwrap().map(|_| ())
        };
        assert_eq!(fragment(0, 10, 10), Ok(()));
        assert_eq!(fragment(9, 10, 1), Ok(()));
        for (offset, total_len, len) in [(0, 10, 0), (0, 0, 0), (9, 10, 2), (65535, 65535, 1)] {
            assert_eq!(
                fragment(offset, total_len, len),
                Err(WireError::FragmentOutOfRange {
                    offset,
                    len,
                    total_len
                })
            );
        }
    }

    #[test]
    fn a_whole_packet_goes_as_a_packet_frame_four_bytes_shorter() {
        let whole = Frame::Fragment(Fragment {
            stream: 0x0102,
            packet: 0x0304_0506,
            offset: 0,
            total_len: 3,
            coding: Coding {
                lz4: true,
                headers: false,
            },
            data: b"abc",
        });
        let bytes = encode_all(&[whole]);
        assert_eq!(bytes, [7, 1, 2, 3, 4, 5, 6, 1, 0, 3, b'a', b'b', b'c']);
        assert_eq!(whole.encoded_len(), PACKET_HEADER_BYTES + 3);
        assert_eq!(Frames::new(&bytes).next(), Some(Ok(whole)));
        // The format still allows a whole packet as a Fragment frame (what the fuzz target's
        // round trip allows for): it decodes to the same frame, which encodes as above.
        let as_fragment = [1, 1, 2, 3, 4, 5, 6, 0, 0, 0, 3, 1, 0, 3, b'a', b'b', b'c'];
        assert_eq!(Frames::new(&as_fragment).next(), Some(Ok(whole)));
        let piece = Frame::Fragment(Fragment {
            total_len: 4,
            ..match whole {
                Frame::Fragment(f) => f,
                _ => unreachable!(),
            }
        });
        assert_eq!(piece.encoded_len(), FRAGMENT_HEADER_BYTES + 3);
        assert_eq!(encode_all(&[piece])[0], 1);
        let empty = [7, 0, 0, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(
            Frames::new(&empty).next(),
            Some(Err(WireError::FragmentOutOfRange {
                offset: 0,
                len: 0,
                total_len: 0
            }))
        );
        assert!(matches!(
            Frames::new(&bytes[..12]).next(),
            Some(Err(WireError::TruncatedFrame { needed: 13, .. }))
        ));
    }

    #[test]
    fn reserved_flags_and_non_zero_padding_are_rejected() {
        // A whole packet goes as a Packet frame, a piece as a Fragment: both check flags.
        for (total_len, flags) in [(1, field::packet::FLAGS), (2, field::fragment::FLAGS)] {
            let mut bytes = encode_all(&[Frame::Fragment(Fragment {
                stream: 0,
                packet: 1,
                offset: 0,
                total_len,
                coding: Coding::RAW,
                data: b"x",
            })]);
            bytes[flags] = 0x04;
            assert_eq!(
                Frames::new(&bytes).next(),
                Some(Err(WireError::ReservedFlags(0x04)))
            );
        }
        let mut bytes = encode_all(&[Frame::Padding(4)]);
        bytes[5] = 0x80;
        assert_eq!(
            Frames::new(&bytes).next(),
            Some(Err(WireError::NonZeroPadding {
                index: 2,
                value: 0x80
            }))
        );
    }

    #[test]
    fn every_truncation_of_a_frame_is_an_error() {
        for frame in one_of_each(b"some data") {
            let bytes = encode_all(&[frame]);
            assert_eq!(Frames::new(&bytes[..0]).next(), None);
            for len in 1..bytes.len() {
                let mut frames = Frames::new(&bytes[..len]);
                match frames.next() {
                    Some(Err(WireError::TruncatedFrame {
                        needed, available, ..
                    })) => {
                        assert_eq!(available, len);
                        assert!(needed > len, "{frame:?} cut at {len}: needs {needed}");
                    }
                    other => panic!("{frame:?} cut at {len} gave {other:?}"),
                }
                assert_eq!(frames.next(), None);
            }
        }
    }

    fn arb_frame() -> impl Strategy<Value = FrameValues> {
        (
            0u8..6,
            any::<u32>(),
            any::<u16>(),
            0u16..2000,
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 1..300),
            (
                any::<u8>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<i64>(),
                any::<i64>(),
                any::<u32>(),
            )
                .prop_map(
                    |(line, highest_seq, packets, bytes, report_ns, min, last, samples)| Feedback {
                        line,
                        highest_seq,
                        received_packets: packets,
                        received_bytes: bytes,
                        report_ns,
                        owd_min_ns: min,
                        owd_last_ns: last,
                        samples,
                        owd_min_len: samples as u16,
                    },
                ),
            any::<u64>(),
        )
    }

    /// The values `arb_frame` draws: which frame, then fields it takes from.
    type FrameValues = (u8, u32, u16, u16, bool, Vec<u8>, Feedback, u64);

    /// A valid frame from `arb_frame`'s values; the data stays with the caller.
    fn build((choice, packet, a, b, flag, data, feedback, wide): &FrameValues) -> Frame<'_> {
        match choice {
            0 => {
                let len = data.len() as u16;
                let total_len = len + b;
                Frame::Fragment(Fragment {
                    stream: *packet as u16,
                    packet: *packet,
                    offset: a % (total_len - len + 1),
                    total_len,
                    coding: Coding {
                        lz4: *flag,
                        headers: !*flag,
                    },
                    data,
                })
            }
            1 => Frame::Feedback(*feedback),
            2 => Frame::Echo {
                line: *a as u8,
                echoed_ns: *wide,
                held_ns: u64::from(*packet),
            },
            3 => Frame::Padding(*b),
            4 => Frame::ProbeAck {
                line: *b as u8,
                seq: *wide,
                len_bytes: *a,
            },
            _ => Frame::Close,
        }
    }

    proptest! {
        #[test]
        fn random_frame_lists_round_trip(values in proptest::collection::vec(arb_frame(), 0..12)) {
            let frames: Vec<Frame<'_>> = values.iter().map(build).collect();
            let bytes = encode_all(&frames);
            let decoded: Vec<Frame<'_>> = Frames::new(&bytes).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(decoded, frames);
        }

        #[test]
        fn a_cut_frame_is_an_error(value in arb_frame(), cut in any::<prop::sample::Index>()) {
            let frame = build(&value);
            let bytes = encode_all(&[frame]);
            if bytes.len() == 1 {
                // A Close frame: its only cut, the empty one, holds no frame.
                prop_assert_eq!(Frames::new(&bytes[..0]).next(), None);
                return Ok(());
            }
            let len = 1 + cut.index(bytes.len() - 1);
            let results: Vec<_> = Frames::new(&bytes[..len]).collect();
            prop_assert_eq!(results.len(), 1);
            let is_truncated = matches!(results[0], Err(WireError::TruncatedFrame { .. }));
            prop_assert!(is_truncated, "{:?}", results[0]);
        }

        #[test]
        fn altered_frames_decode_to_an_error_or_to_themselves(
            values in proptest::collection::vec(arb_frame(), 1..6),
            at in any::<prop::sample::Index>(),
            flip in 1u8..,
        ) {
            let frames: Vec<Frame<'_>> = values.iter().map(build).collect();
            let mut bytes = encode_all(&frames);
            let index = at.index(bytes.len());
            bytes[index] ^= flip;
            // What still decodes is a prefix that re-encodes to the same bytes.
            let mut again = Vec::new();
            let mut errors = 0;
            for frame in Frames::new(&bytes) {
                match frame {
                    Ok(frame) => frame.encode(&mut again),
                    Err(_) => errors += 1,
                }
            }
            prop_assert!(errors <= 1);
            prop_assert_eq!(&bytes[..again.len()], &again[..]);
        }

        #[test]
        fn headers_round_trip(kind in 1u8..=5, line in any::<u8>(), session in any::<u32>(), seq in 0..=MAX_SEQ) {
            let header = Header { kind: Kind::try_from(kind).unwrap(), line, session, seq };
            prop_assert_eq!(Header::decode(&header.to_bytes()), Ok(header));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Header::decode(&bytes);
            if let Ok((_, frames)) = decode_data(&bytes) {
                let mut errors = 0;
                for frame in frames {
                    // Whatever decodes re-encodes to its own length.
                    match frame {
                        Ok(frame) => prop_assert!(frame.encoded_len() <= bytes.len()),
                        Err(_) => errors += 1,
                    }
                }
                prop_assert!(errors <= 1);
            }
        }
    }
}
