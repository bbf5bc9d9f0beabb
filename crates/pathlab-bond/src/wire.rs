//! The tunnel's wire format (docs/bond.md): a clear header, then an AEAD-sealed body of
//! frames.
//!
//! Every UDP datagram of the tunnel is
//!
//! ```text
//! header (16 bytes, clear, authenticated as associated data)
//!   kind u8 | line u8 | reserved u16 (0) | session u32 | seq u64
//! body (sealed with ChaCha20-Poly1305 under the sender's direction key)
//!   Hello / Welcome: their fields
//!   Data: sent_ns u64, then frames until the end
//! tag (16 bytes)
//! ```
//!
//! All integers are big-endian. `seq` counts the datagrams the sender sent on `line`
//! (from 1); with the line it forms the AEAD nonce, so it never repeats under one key.

/// Bytes of the clear header.
pub const HEADER_BYTES: usize = 16;
/// Bytes of the AEAD tag that ends every datagram.
pub const TAG_BYTES: usize = 16;
/// Bytes of a Data body before its first frame (the sender's timestamp).
pub const DATA_PREFIX_BYTES: usize = 8;
/// The largest datagram the tunnel sends or accepts (the largest IPv4 UDP payload).
pub const MAX_DATAGRAM_BYTES: usize = 65_507;

/// Which kind of datagram a header starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client to server, on every line, until welcomed: opens a session.
    Hello = 1,
    /// Server to client: accepts a session.
    Welcome = 2,
    /// Either way, once the session is open: frames.
    Data = 3,
}

/// The clear header of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body is.
    pub kind: Kind,
    /// The sender's line the datagram was sent on (the client's line index; the server
    /// answers on the same index).
    pub line: u8,
    /// The session, chosen by the server in its Welcome; 0 in a Hello.
    pub session: u32,
    /// Datagrams sent on this line in this direction, from 1.
    pub seq: u64,
}

/// A Hello's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The client's random nonce for this session; the session keys derive from it.
    pub client_nonce: [u8; 16],
    /// How many lines the client has.
    pub lines: u8,
}

/// A Welcome's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    /// The Hello's nonce, echoed: the client matches the Welcome to its Hello.
    pub client_nonce: [u8; 16],
    /// The server's random nonce for this session.
    pub server_nonce: [u8; 16],
    /// The session id the client puts in every Data header from now on.
    pub session: u32,
}

/// One piece of an inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// The inner packet's tunnel-wide number in this direction (from 1).
    pub packet: u32,
    /// Where this piece starts in the (possibly compressed) packet.
    pub offset: u16,
    /// Length of the whole (possibly compressed) packet.
    pub total_len: u16,
    /// Whether the packet's bytes are LZ4-compressed (its first bytes give the original length).
    pub compressed: bool,
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
}

/// Bytes of a Fragment frame before its data: type, stream, packet, offset, total length,
/// flags, length.
pub const FRAGMENT_HEADER_BYTES: usize = 14;
