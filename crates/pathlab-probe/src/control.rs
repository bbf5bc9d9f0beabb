//! The control connection: length-prefixed frames over TCP, each one JSON message.
//!
//! ```text
//! | length u32 (bytes after this field) | version u8 | flags u8 | counter u64 | JSON body | tag (32, if flags & 1) |
//! ```
//!
//! A client says [`Message::Hello`], the server answers [`Message::Welcome`] with its
//! limits; the client asks for a test ([`Message::Request`]); the server answers
//! [`Message::Accept`] (a session id and a UDP port) or [`Message::Refuse`] with the limit
//! that was hit. Then the probes flow over UDP; at the end, the side that received them
//! sends what it saw ([`Message::Received`], in chunks) and [`Message::Done`]. The counter
//! and tag are there when both sides have the key (see [`crate::auth`]); without a key
//! the counter is 0 and there is no tag. With a key, every message after the hello is
//! tagged, the welcome included: its tag proves the server's key to the client before the
//! client says anything more. The dialogue's state machines are in [`crate::session`].

use serde::{Deserialize, Serialize};

use crate::auth::{ControlAuth, NONCE_LEN, TAG_LEN};

/// The control protocol version this build speaks.
pub const VERSION: u8 = 2;
/// The largest frame accepted (a chunk of received records fits with room to spare).
pub const MAX_FRAME: usize = 1 << 20;
/// Records per [`Message::Received`] chunk.
pub const RECORDS_PER_CHUNK: usize = 10_000;
/// The largest frame a server takes before it accepts a test: a hello or a request is a
/// few hundred bytes, and without this bound every connection in its handshake could make
/// the server hold a [`MAX_FRAME`] (256 of them: 256 MB) before saying anything.
pub const MAX_HANDSHAKE_FRAME: usize = 4096;
/// [`Limits::max_test_memory`] unless a server says otherwise: 64 MiB.
pub const DEFAULT_MAX_TEST_MEMORY: u64 = 64 << 20;

const PREFIX_LEN: usize = 4;
const HEADER_LEN: usize = 10;
const FLAG_AUTH: u8 = 1;

/// Most probes a path MTU test may send (a search to the byte needs about 45 at worst).
pub const MTU_MAX_PROBES: u32 = 100;
/// How long a path MTU test may take, ns (its bound on the server).
pub const MTU_TEST_NS: u64 = 20_000_000_000;

/// Which way probes go in a one-way test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl Direction {
    /// `up` or `down`, as the command line and the reports say it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// Which way a TCP test's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcpDirection {
    /// Client to server.
    Up,
    /// Server to client (`-R`).
    Down,
    /// Both at once (`--bidir`).
    Both,
}

/// One-way probes in trains: `trains` trains of `length` probes, a train starting every
/// `period_ns`, its probes `spacing_ns` apart (0: back to back). Packet pairs and trains
/// measure capacity by their dispersion; periodic streams at a rate measure available
/// bandwidth by their delay trend. On the wire its fields sit beside the request's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainsTest {
    /// Which way.
    pub direction: Direction,
    /// UDP payload bytes per probe.
    pub size: u32,
    /// Probes per train.
    pub length: u32,
    /// How many trains.
    pub trains: u32,
    /// Between the probes of a train, ns (0: back to back).
    pub spacing_ns: u64,
    /// From the start of one train to the start of the next, ns.
    pub period_ns: u64,
}

impl TrainsTest {
    /// Probes sent: `length` per train.
    pub fn count(&self) -> u64 {
        u64::from(self.length) * u64::from(self.trains)
    }
}

/// What the client asks the server for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TestRequest {
    /// One-way probes at a constant rate.
    OneWay {
        /// Which way.
        direction: Direction,
        /// Offered rate in bits per second (UDP payload).
        rate_bps: u64,
        /// UDP payload bytes per probe.
        size: u32,
        /// How many probes.
        count: u64,
    },
    /// Bulk TCP streams on their own connections to the test's TCP port.
    Tcp {
        /// Parallel streams per direction.
        streams: u32,
        /// Up, down, or both at once (`bidir`).
        direction: TcpDirection,
        /// How long each stream sends, ns.
        duration_ns: u64,
        /// Per-interval throughput granularity, ns.
        interval_ns: u64,
        /// How often the sender samples TCP_INFO, ns.
        sample_ns: u64,
        /// Socket buffer size (SO_SNDBUF/SO_RCVBUF) for both ends, bytes.
        window: Option<u32>,
        /// TCP_MAXSEG, bytes.
        mss: Option<u32>,
        /// TCP_CONGESTION for the senders.
        congestion: Option<String>,
    },
    /// One-way probes in trains ([`TrainsTest`]).
    Trains(TrainsTest),
    /// Path MTU discovery with DF probes (RFC 4821): the client searches, probe by probe;
    /// up, the server reports each probe that arrives ([`Message::MtuArrived`]); down, it
    /// sends each probe the client asks for ([`Message::MtuProbe`], [`Message::MtuSent`]).
    PathMtu {
        /// Which way the probes go.
        direction: Direction,
        /// The largest UDP payload the client will probe with, bytes.
        max_size: u32,
    },
    /// Isochronous round trips.
    RoundTrip {
        /// Interval between requests in ns.
        interval_ns: u64,
        /// UDP payload bytes per probe.
        size: u32,
        /// How many requests.
        count: u64,
    },
}

/// One line for a server's log: `one-way up: 1000 x 1200 B at 10 Mbit/s`.
impl std::fmt::Display for TestRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mbit = |bps: u64| bps as f64 / 1e6;
        match self {
            TestRequest::OneWay {
                direction,
                rate_bps,
                size,
                count,
            } => {
                let way = direction.name();
                write!(
                    f,
                    "one-way {way}: {count} x {size} B at {} Mbit/s",
                    mbit(*rate_bps)
                )
            }
            TestRequest::Tcp {
                streams,
                direction,
                duration_ns,
                window,
                mss,
                congestion,
                ..
            } => {
                let way = match direction {
                    TcpDirection::Up => "up",
                    TcpDirection::Down => "down",
                    TcpDirection::Both => "both ways",
                };
                write!(
                    f,
                    "tcp {way}: {streams} stream(s) for {:.1} s",
                    *duration_ns as f64 * 1e-9
                )?;
                if let Some(window) = window {
                    write!(f, ", window {window} B")?;
                }
                if let Some(mss) = mss {
                    write!(f, ", mss {mss} B")?;
                }
                if let Some(congestion) = congestion {
                    write!(f, ", {congestion}")?;
                }
                Ok(())
            }
            TestRequest::Trains(t) => write!(
                f,
                "trains {}: {} x {} x {} B, {:.1} us apart, every {:.1} ms",
                t.direction.name(),
                t.trains,
                t.length,
                t.size,
                t.spacing_ns as f64 * 1e-3,
                t.period_ns as f64 * 1e-6
            ),
            TestRequest::PathMtu {
                direction,
                max_size,
            } => {
                let way = direction.name();
                write!(f, "path mtu {way}: probes up to {max_size} B")
            }
            TestRequest::RoundTrip {
                interval_ns,
                size,
                count,
            } => write!(
                f,
                "round trips: {count} x {size} B every {:.3} ms",
                *interval_ns as f64 * 1e-6
            ),
        }
    }
}

/// When each probe of a one-way test is due, after the first: trains of `length` probes
/// `spacing_ns` apart, one train every `period_ns`. Evenly paced probes are one long train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Probes per train.
    pub length: u64,
    /// Between the probes of a train, ns.
    pub spacing_ns: f64,
    /// From the start of one train to the next, ns.
    pub period_ns: f64,
}

impl Schedule {
    /// Probe `seq`'s send time after the first probe's, ns.
    pub fn due_ns(&self, seq: u64) -> f64 {
        let length = self.length.max(1);
        (seq / length) as f64 * self.period_ns + (seq % length) as f64 * self.spacing_ns
    }

    /// How long `count` probes take: `count` spacings for one train, whole periods for
    /// several.
    pub fn duration_ns(&self, count: u64) -> u64 {
        let length = self.length.max(1);
        if length >= count {
            (count as f64 * self.spacing_ns) as u64
        } else {
            (count.div_ceil(length) as f64 * self.period_ns) as u64
        }
    }
}

impl TestRequest {
    /// A one-way test's direction, probe size, probe count and schedule (`None` for the
    /// other kinds).
    pub fn one_way(&self) -> Option<(Direction, u32, u64, Schedule)> {
        match *self {
            TestRequest::OneWay {
                direction,
                rate_bps,
                size,
                count,
            } => Some((
                direction,
                size,
                count,
                Schedule {
                    length: count,
                    spacing_ns: f64::from(size) * 8.0 * 1e9 / rate_bps.max(1) as f64,
                    period_ns: 0.0,
                },
            )),
            TestRequest::Trains(t) => Some((
                t.direction,
                t.size,
                t.count(),
                Schedule {
                    length: u64::from(t.length),
                    spacing_ns: t.spacing_ns as f64,
                    period_ns: t.period_ns as f64,
                },
            )),
            _ => None,
        }
    }

    /// The rate the test offers, in bits per second of UDP payload.
    pub fn rate_bps(&self) -> u64 {
        match *self {
            // TCP finds its own rate; the server bounds it by duration and test count.
            TestRequest::Tcp { .. } => 0,
            TestRequest::OneWay { rate_bps, .. } => rate_bps,
            TestRequest::Trains(_) => {
                let (_, size, count, schedule) = self.one_way().expect("a one-way test");
                (u128::from(count) * u128::from(size) * 8 * 1_000_000_000
                    / u128::from(schedule.duration_ns(count).max(1))) as u64
            }
            TestRequest::PathMtu { max_size, .. } => {
                u64::from(MTU_MAX_PROBES) * u64::from(max_size) * 8 * 1_000_000_000 / MTU_TEST_NS
            }
            TestRequest::RoundTrip {
                interval_ns, size, ..
            } => (u128::from(size) * 8 * 1_000_000_000 / u128::from(interval_ns.max(1))) as u64,
        }
    }

    /// How long the test lasts in ns.
    pub fn duration_ns(&self) -> u64 {
        match *self {
            TestRequest::Tcp { duration_ns, .. } => duration_ns,
            TestRequest::PathMtu { .. } => MTU_TEST_NS,
            TestRequest::Trains(_) => {
                let (_, _, count, schedule) = self.one_way().expect("a one-way test");
                schedule.duration_ns(count)
            }
            TestRequest::OneWay {
                rate_bps,
                size,
                count,
                ..
            } => {
                (u128::from(count) * u128::from(size) * 8 * 1_000_000_000
                    / u128::from(rate_bps.max(1))) as u64
            }
            TestRequest::RoundTrip {
                interval_ns, count, ..
            } => interval_ns.saturating_mul(count),
        }
    }
}

/// A server's limits, announced in [`Message::Welcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Highest rate a test may offer, bits per second.
    pub max_rate_bps: u64,
    /// Longest test, ns.
    pub max_duration_ns: u64,
    /// Most tests at once.
    pub max_tests: u32,
    /// Most memory one test may hold on the server, bytes (its records, reports and
    /// buffers, known from the request before it is accepted).
    #[serde(default = "default_max_test_memory")]
    pub max_test_memory: u64,
}

fn default_max_test_memory() -> u64 {
    DEFAULT_MAX_TEST_MEMORY
}

/// Why a server refused a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Refusal {
    /// The rate is above the server's `--max-rate`.
    #[error("the server allows at most {max_rate_bps} bit/s, the test asked for {asked_bps}")]
    RateTooHigh {
        /// The limit.
        max_rate_bps: u64,
        /// What was asked.
        asked_bps: u64,
    },
    /// The test is longer than `--max-duration`.
    #[error("the server allows tests of at most {max_ns} ns, the test would take {asked_ns}")]
    TooLong {
        /// The limit.
        max_ns: u64,
        /// What was asked.
        asked_ns: u64,
    },
    /// `--max-tests` are running.
    #[error("the server is running its maximum of {max_tests} tests; try again later")]
    Busy {
        /// The limit.
        max_tests: u32,
    },
    /// `--max-clients` connections from the client's address are open.
    #[error("the server takes at most {max_clients} connections at once from one address (--max-clients); try again when one ends")]
    TooManyClients {
        /// The limit.
        max_clients: u32,
    },
    /// The test would hold more memory on the server than its `--max-test-memory`.
    #[error("the test would hold {asked_bytes} bytes on the server, which allows at most {max_bytes} per test (--max-test-memory); ask for fewer probes, streams or report intervals")]
    TooMuchMemory {
        /// The limit.
        max_bytes: u64,
        /// What the test would hold.
        asked_bytes: u64,
    },
    /// The request makes no sense (zero size, zero rate) or is outside the protocol's
    /// bounds. (A struct variant: an internally tagged enum cannot carry a bare string,
    /// and serializing the tuple variant this was panicked the server at the first such
    /// refusal.)
    #[error("bad request: {why}")]
    BadRequest {
        /// What is wrong, and what would do.
        why: String,
    },
}

impl Refusal {
    /// A [`Refusal::BadRequest`] saying `why`.
    pub fn bad_request(why: impl Into<String>) -> Refusal {
        Refusal::BadRequest { why: why.into() }
    }
}

/// One probe as its receiver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedProbe {
    /// Sequence number.
    pub seq: u64,
    /// The sender's timestamp.
    pub sent_ns: u64,
    /// The receiver's timestamp (kernel receive time where available).
    pub received_ns: u64,
}

/// How late a one-way test's sender wrote its probes against their schedule: its clock
/// when it wrote each probe minus the time the probe was due. A sender the machine held
/// back sends what fell due meanwhile together, and those probes then queue at a
/// bottleneck for real: a deviation up to this lateness is the sender's, not the path's.
/// The sender's own report, bounded where a peer's is read ([`SendLateness::bounded`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SendLateness {
    /// The median probe's lateness, ns.
    pub p50_ns: u64,
    /// The 99th percentile, ns.
    pub p99_ns: u64,
    /// The latest probe's, ns.
    pub max_ns: u64,
}

impl SendLateness {
    /// The most lateness a report may say: an hour, longer than any test runs.
    pub const MAX_NS: u64 = 3_600_000_000_000;

    /// A peer's report made sane: each figure at most [`SendLateness::MAX_NS`], and in
    /// order (p50 <= p99 <= max).
    pub fn bounded(self) -> SendLateness {
        let max_ns = self.max_ns.min(Self::MAX_NS);
        let p99_ns = self.p99_ns.min(max_ns);
        SendLateness {
            p50_ns: self.p50_ns.min(p99_ns),
            p99_ns,
            max_ns,
        }
    }
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Message {
    /// Client: who it is, its nonce, whether it authenticates.
    Hello {
        /// Software and version.
        software: String,
        /// Random nonce (hex).
        nonce: String,
        /// Whether the client has a key.
        authenticated: bool,
    },
    /// Server: its nonce and limits.
    Welcome {
        /// Software and version.
        software: String,
        /// Random nonce (hex).
        nonce: String,
        /// Limits.
        limits: Limits,
    },
    /// Client: run this test.
    Request {
        /// The test.
        test: TestRequest,
        /// The client's UDP port for probes to it (down, round trips).
        client_port: u16,
    },
    /// Server: go; probes carry `session` and go to (or come from) `server_port`.
    Accept {
        /// Session id.
        session: u64,
        /// The server's UDP port for this test.
        server_port: u16,
    },
    /// Server: no, and why.
    Refuse {
        /// Why.
        refusal: Refusal,
    },
    /// Sender: all probes are out (with how many were sent, and over how long).
    Sent {
        /// Probes sent.
        count: u64,
        /// From the first send to the last, ns.
        duration_ns: u64,
        /// How late the sender wrote its probes (absent from an older sender).
        #[serde(default)]
        late: SendLateness,
    },
    /// Receiver: some of what it received, in arrival order.
    Received {
        /// Records.
        probes: Vec<ReceivedProbe>,
    },
    /// Receiver (or reflector): no more records; with its counters.
    Done {
        /// Probes received (a one-way receiver: each sequence number once; a reflector:
        /// requests reflected).
        received: u64,
        /// Probes dropped because they failed authentication or did not belong to the test.
        rejected: u64,
        /// Copies of a sequence number already received: counted, not recorded.
        #[serde(default)]
        duplicates: u64,
        /// Requests a reflector dropped for coming faster than the test's rate, or beyond
        /// its count.
        #[serde(default)]
        excess: u64,
    },
    /// Either side, at the end of a TCP test: its view of every stream and the CPU time it
    /// spent.
    TcpReport {
        /// Streams sent by the client (as this end saw them).
        up: Vec<crate::tcp::StreamReport>,
        /// Streams sent by the server.
        down: Vec<crate::tcp::StreamReport>,
        /// CPU time this end's process used during the test, ns.
        cpu_ns: u64,
    },
    /// Client, path MTU down: send probe `seq` with `size` bytes of UDP payload, DF set.
    MtuProbe {
        /// Sequence number.
        seq: u64,
        /// UDP payload bytes.
        size: u32,
    },
    /// Server, path MTU down: probe `seq` went out (or its own route refused it).
    MtuSent {
        /// Sequence number.
        seq: u64,
        /// Whether the server's kernel sent it (false: longer than the server's route MTU).
        sent: bool,
        /// The MTU of the server's route to the client, bytes.
        route_mtu: u32,
    },
    /// Server, path MTU up: probe `seq` of `size` payload bytes arrived.
    MtuArrived {
        /// Sequence number.
        seq: u64,
        /// UDP payload bytes.
        size: u32,
    },
    /// Either side: something went wrong.
    Error {
        /// What.
        message: String,
    },
}

/// Why a frame is not a control message.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The frame says it is longer than the reader takes ([`MAX_FRAME`], or
    /// [`MAX_HANDSHAKE_FRAME`] before a test is accepted).
    #[error("a control frame of {0} bytes is larger than this end takes")]
    Oversized(usize),
    /// Shorter than its header (and tag).
    #[error("control frame truncated: {got} bytes, at least {need} needed")]
    Truncated {
        /// Needed.
        need: usize,
        /// There.
        got: usize,
    },
    /// Another protocol version.
    #[error("control protocol version {0}, this pathlab speaks {VERSION}")]
    WrongVersion(u8),
    /// The peer authenticates and we do not, or the other way round.
    #[error("the peer {0}")]
    AuthMismatch(&'static str),
    /// The tag or counter is wrong: another key, tampering, or a replay.
    #[error("control message failed authentication (wrong key, tampered or replayed)")]
    BadTag,
    /// The body is not a message.
    #[error("control message is not valid: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Encodes a message as one frame.
pub fn encode(message: &Message, auth: Option<&mut ControlAuth>) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("messages serialize");
    let mut frame = vec![0u8; PREFIX_LEN];
    frame.push(VERSION);
    match auth {
        Some(auth) => {
            let (counter, tag) = auth.seal(&body);
            frame.push(FLAG_AUTH);
            frame.extend_from_slice(&counter.to_be_bytes());
            frame.extend_from_slice(&body);
            frame.extend_from_slice(&tag);
        }
        None => {
            frame.push(0);
            frame.extend_from_slice(&0u64.to_be_bytes());
            frame.extend_from_slice(&body);
        }
    }
    let len = (frame.len() - PREFIX_LEN) as u32;
    frame[..PREFIX_LEN].copy_from_slice(&len.to_be_bytes());
    frame
}

/// Decodes one frame's contents (after the length prefix).
pub fn decode(frame: &[u8], auth: Option<&mut ControlAuth>) -> Result<Message, ControlError> {
    if frame.len() > MAX_FRAME {
        return Err(ControlError::Oversized(frame.len()));
    }
    if frame.len() < HEADER_LEN {
        return Err(ControlError::Truncated {
            need: HEADER_LEN,
            got: frame.len(),
        });
    }
    if frame[0] != VERSION {
        return Err(ControlError::WrongVersion(frame[0]));
    }
    let authenticated = frame[1] & FLAG_AUTH != 0;
    let counter = u64::from_be_bytes(frame[2..10].try_into().expect("8 bytes"));
    let body = match (auth, authenticated) {
        (Some(auth), true) => {
            if frame.len() < HEADER_LEN + TAG_LEN {
                return Err(ControlError::Truncated {
                    need: HEADER_LEN + TAG_LEN,
                    got: frame.len(),
                });
            }
            let (body, tag) = frame[HEADER_LEN..].split_at(frame.len() - HEADER_LEN - TAG_LEN);
            if !auth.open(counter, body, tag) {
                return Err(ControlError::BadTag);
            }
            body
        }
        (Some(_), false) => {
            return Err(ControlError::AuthMismatch(
                "sent an unauthenticated message; it needs the same --psk",
            ))
        }
        (None, true) => {
            return Err(ControlError::AuthMismatch(
                "authenticates its messages; give the same --psk",
            ))
        }
        (None, false) => &frame[HEADER_LEN..],
    };
    Ok(serde_json::from_slice(body)?)
}

/// Decodes the server's welcome, the first tagged frame, whose tag can only be checked once
/// its nonce is read: the body is parsed first, the tag checked with the keys it gives.
/// Returns the message and, with `key`, the client's authentication state.
pub fn decode_welcome(
    frame: &[u8],
    key: Option<&crate::auth::Key>,
    client_nonce: [u8; NONCE_LEN],
) -> Result<(Message, Option<ControlAuth>), ControlError> {
    let Some(key) = key else {
        return Ok((decode(frame, None)?, None));
    };
    if frame.len() < HEADER_LEN + TAG_LEN || frame[1] & FLAG_AUTH == 0 {
        // Untagged: a refusal (say why), or a server without a key.
        return match decode(frame, None) {
            Ok(message @ (Message::Error { .. } | Message::Refuse { .. })) => Ok((message, None)),
            Ok(_) => Err(ControlError::AuthMismatch(
                "has no pre-shared key; run without --psk",
            )),
            Err(error) => Err(error),
        };
    }
    if frame[0] != VERSION {
        return Err(ControlError::WrongVersion(frame[0]));
    }
    let body = &frame[HEADER_LEN..frame.len() - TAG_LEN];
    let message: Message = serde_json::from_slice(body)?;
    let Message::Welcome { nonce, .. } = &message else {
        return Err(ControlError::BadTag);
    };
    let server_nonce = nonce_from_hex(nonce).ok_or(ControlError::BadTag)?;
    let mut auth = ControlAuth::new(
        key.clone(),
        client_nonce,
        server_nonce,
        crate::auth::Role::Client,
    );
    decode(frame, Some(&mut auth))?;
    Ok((message, Some(auth)))
}

/// Cuts a byte stream into frames (sans-IO: feed it what the socket gave).
#[derive(Debug)]
pub struct FrameReader {
    buffer: Vec<u8>,
    max: usize,
}

impl Default for FrameReader {
    fn default() -> FrameReader {
        FrameReader {
            buffer: Vec::new(),
            max: MAX_FRAME,
        }
    }
}

impl FrameReader {
    /// Frames longer than `max` bytes (at most [`MAX_FRAME`]) are errors from now on, seen
    /// from their length prefix before their bytes are kept.
    pub fn limit(&mut self, max: usize) {
        self.max = max.min(MAX_FRAME);
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete frame's contents, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ControlError> {
        if self.buffer.len() < PREFIX_LEN {
            return Ok(None);
        }
        let len =
            u32::from_be_bytes(self.buffer[..PREFIX_LEN].try_into().expect("4 bytes")) as usize;
        if len > self.max {
            return Err(ControlError::Oversized(len));
        }
        if self.buffer.len() < PREFIX_LEN + len {
            return Ok(None);
        }
        let frame = self.buffer[PREFIX_LEN..PREFIX_LEN + len].to_vec();
        self.buffer.drain(..PREFIX_LEN + len);
        Ok(Some(frame))
    }
}

/// A nonce as hex text.
pub fn nonce_to_hex(nonce: &[u8; NONCE_LEN]) -> String {
    pathlab_core::format::hex(nonce)
}

/// A nonce from hex text.
pub fn nonce_from_hex(text: &str) -> Option<[u8; NONCE_LEN]> {
    pathlab_core::format::from_hex(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Key, Role};
    use proptest::prelude::*;

    fn messages() -> Vec<Message> {
        vec![
            Message::Hello {
                software: "pathlab 0.1.0".into(),
                nonce: nonce_to_hex(&[7; 16]),
                authenticated: true,
            },
            Message::Welcome {
                software: "pathlab 0.1.0".into(),
                nonce: nonce_to_hex(&[9; 16]),
                limits: Limits {
                    max_rate_bps: 1_000_000_000,
                    max_duration_ns: 60_000_000_000,
                    max_tests: 16,
                    max_test_memory: DEFAULT_MAX_TEST_MEMORY,
                },
            },
            Message::Request {
                test: TestRequest::OneWay {
                    direction: Direction::Up,
                    rate_bps: 10_000_000,
                    size: 1200,
                    count: 1000,
                },
                client_port: 4000,
            },
            Message::Refuse {
                refusal: Refusal::RateTooHigh {
                    max_rate_bps: 1,
                    asked_bps: 2,
                },
            },
            // Regression (issue 30): a bad request's refusal did not serialize (a tuple
            // variant of a tagged enum), and the server panicked at the first one.
            Message::Refuse {
                refusal: Refusal::BadRequest {
                    why: "size 0 and count 0".into(),
                },
            },
            Message::Refuse {
                refusal: Refusal::TooMuchMemory {
                    max_bytes: 1,
                    asked_bytes: 2,
                },
            },
            Message::Received {
                probes: vec![ReceivedProbe {
                    seq: 1,
                    sent_ns: 2,
                    received_ns: 3,
                }],
            },
            Message::Done {
                received: 5,
                rejected: 1,
                duplicates: 2,
                excess: 3,
            },
        ]
    }

    /// A trains request's fields sit beside its `kind`, as when they were the variant's
    /// own: a peer from before [`TrainsTest`] reads it, and its requests read here.
    #[test]
    fn a_trains_request_is_flat_beside_its_kind_on_the_wire() {
        let test = TestRequest::Trains(TrainsTest {
            direction: Direction::Up,
            size: 1200,
            length: 2,
            trains: 3,
            spacing_ns: 0,
            period_ns: 5,
        });
        let json = serde_json::to_value(&test).unwrap();
        let flat = serde_json::json!({
            "kind": "trains", "direction": "up", "size": 1200, "length": 2, "trains": 3,
            "spacing_ns": 0, "period_ns": 5
        });
        assert_eq!(json, flat);
        assert_eq!(serde_json::from_value::<TestRequest>(flat).unwrap(), test);
    }

    #[test]
    fn messages_round_trip_through_a_split_stream() {
        let mut reader = FrameReader::default();
        let bytes: Vec<u8> = messages().iter().flat_map(|m| encode(m, None)).collect();
        let mut decoded = Vec::new();
        for chunk in bytes.chunks(7) {
            reader.push(chunk);
            while let Some(frame) = reader.next_frame().unwrap() {
                decoded.push(decode(&frame, None).unwrap());
            }
        }
        assert_eq!(decoded, messages());
    }

    #[test]
    fn authenticated_messages_round_trip_and_mismatches_are_named() {
        let key = Key::from_file_contents(b"0123456789abcdef").unwrap();
        let mut client = ControlAuth::new(key.clone(), [1; 16], [2; 16], Role::Client);
        let mut server = ControlAuth::new(key, [1; 16], [2; 16], Role::Server);
        for message in messages() {
            let frame = encode(&message, Some(&mut client));
            assert_eq!(decode(&frame[4..], Some(&mut server)).unwrap(), message);
        }
        let plain = encode(&messages()[0], None);
        assert!(matches!(
            decode(&plain[4..], Some(&mut server)),
            Err(ControlError::AuthMismatch(_))
        ));
        let signed = encode(&messages()[0], Some(&mut client));
        assert!(matches!(
            decode(&signed[4..], None),
            Err(ControlError::AuthMismatch(_))
        ));
        let mut replay_target = server.clone();
        let _ = decode(&signed[4..], Some(&mut server)).unwrap();
        assert!(
            matches!(
                decode(&signed[4..], Some(&mut server)),
                Err(ControlError::BadTag)
            ),
            "replayed"
        );
        let mut tampered = signed.clone();
        let last = tampered.len() - 40;
        tampered[last] ^= 1;
        assert!(matches!(
            decode(&tampered[4..], Some(&mut replay_target)),
            Err(ControlError::BadTag)
        ));
    }

    #[test]
    fn bad_frames_are_named() {
        assert!(matches!(
            decode(&[1, 0, 0], None),
            Err(ControlError::Truncated { need: 10, got: 3 })
        ));
        assert!(matches!(
            decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'{'], None),
            Err(ControlError::WrongVersion(1))
        ));
        assert!(matches!(
            decode(&[VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'{'], None),
            Err(ControlError::Malformed(_))
        ));
        let mut reader = FrameReader::default();
        reader.push(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert!(matches!(
            reader.next_frame(),
            Err(ControlError::Oversized(_))
        ));
        assert_eq!(nonce_from_hex("zz"), None);
        assert_eq!(nonce_from_hex(&nonce_to_hex(&[0xab; 16])), Some([0xab; 16]));
    }

    proptest! {
        #[test]
        fn garbage_frames_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes, None);
            let mut reader = FrameReader::default();
            reader.push(&bytes);
            while let Ok(Some(frame)) = reader.next_frame() {
                let _ = decode(&frame, None);
            }
        }
    }
}
