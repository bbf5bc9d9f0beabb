//! The measurement dialogue as state machines: [`ServerSession`] and [`ClientSession`].
//!
//! Each takes the control connection's bytes as they arrive ([`handle_control`]) with the
//! time they arrived at, gives the bytes to send ([`poll_transmit`]) and what its driver
//! must act on ([`poll_event`]), and says when it next needs the clock ([`poll_at`],
//! [`handle_timeout`]), as quinn-proto's `Connection` does. Nothing here opens a socket or
//! reads a clock: `pathlab-probe-driver` moves the bytes and probes, and the tests run both ends
//! through `pathlab-core` links in virtual time.
//!
//! The sessions also decide what the data plane accepts: which probes belong to the test
//! (its session id, its sender, its direction's key), and which TCP streams (a greeting
//! tagged with the test's key, for a stream the request asked for, once).
//!
//! [`handle_control`]: ServerSession::handle_control
//! [`poll_transmit`]: ServerSession::poll_transmit
//! [`poll_event`]: ServerSession::poll_event
//! [`poll_at`]: ServerSession::poll_at
//! [`handle_timeout`]: ServerSession::handle_timeout

mod client;
mod probes;
mod server;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use pathlab_core::{Duration, Instant};

pub use client::{ClientEvent, ClientSession};
pub use probes::{fill_padding, ProbeReceiver, ProbeSender, Received, Reflector};
pub use server::{ServerEvent, ServerPolicy, ServerSession};

use crate::auth::{ControlAuth, Key, ProbeKeys, Role, Way, TAG_LEN};
use crate::control::{self, ControlError, FrameReader, Limits, Message, Refusal, TestRequest};
use crate::probe::{self, Probe, ProbeError, ProbeKind, Reflection};

/// How long a server waits from a connection's accept to its test request: the hello,
/// the welcome and the request take two round trips (1.2 s over a geostationary
/// satellite), and on a congested line each lost segment waits for TCP's retransmission
/// timeout, seconds when the round trips are long (the bond-fair recipe's one FIFO, 14
/// bulk flows starting at once on 1 Mbit/s: round trips p99 1.3 s, and a handshake closed
/// at 5 s in one busy run of seven); a connection that says nothing for longer is closed.
/// A flood of silent connections is held by `--max-handshakes`, which displaces the
/// oldest, not by this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a client waits for the welcome, and for the answer to its request.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long either end waits for its peer beyond the test's own time before it gives up:
/// the receiver's records take a moment to arrive, a TCP sender's last bytes to drain.
/// A frozen or vanished peer ends a test this long after its time; a client whose results
/// are still arriving waits this long after their last byte.
pub const TEST_GRACE: Duration = Duration::from_secs(10);

/// How long after the sender's last probe the receiver keeps listening for stragglers.
pub const STRAGGLERS: Duration = Duration::from_millis(500);

/// Most probes in one train.
pub const MAX_TRAIN: u32 = 10_000;

/// Most parallel streams a TCP test may ask for, per direction.
pub const MAX_STREAMS: u32 = 128;

/// Shortest report interval of a TCP test: the server keeps one slot per interval and
/// stream, and a client once asked for 1 us (158 MB for a 20 s test; 1 ns asked for
/// hundreds of GB).
pub const MIN_REPORT_INTERVAL: Duration = Duration::from_millis(10);

/// Smallest TCP MSS a test may ask for (RFC 1122's default for a path not known to take
/// more): smaller segments only multiply the packets a server sends for the same bytes.
pub const MIN_MSS: u32 = 536;

/// Longest congestion-control name (Linux's `TCP_CA_NAME_MAX` is 16 with its NUL).
pub const MAX_CONGESTION_NAME: usize = 15;

/// Most characters of a peer's own text (an error message) kept for a log.
pub const MAX_PEER_TEXT: usize = 256;

/// Text a peer chose (an error message), made safe to print in a log: control characters
/// (newlines, terminal escapes) shown escaped, and at most [`MAX_PEER_TEXT`] characters,
/// marked with `...` when cut.
pub fn peer_text(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == MAX_PEER_TEXT {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Most report intervals in one TCP test (at [`MIN_REPORT_INTERVAL`], 100 s of test).
pub const MAX_REPORT_INTERVALS: u64 = 10_000;

/// Shortest TCP_INFO sampling period of a TCP test (the server keeps every sample of the
/// streams it sends on until the test's report).
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(1);

/// What one record costs the server as it sends it back, beyond the record itself: its
/// JSON (field names and up to 20 digits per number).
const RECORD_JSON_BYTES: u64 = 100;
/// What one TCP_INFO sample costs in the report's JSON.
const SAMPLE_JSON_BYTES: u64 = 320;
/// What one interval's byte count costs in the report's JSON (20 digits and a comma).
const INTERVAL_JSON_BYTES: u64 = 21;
/// Datagrams the server's probe sockets take or send per system call (its batch buffers).
const DATAGRAM_BATCH: u64 = 64;

/// The memory a test holds on the server, bytes, known from its request before it is
/// accepted: an upward one-way test's records (one per sequence number: copies are
/// counted, not kept) and a bit per sequence number, a TCP test's per-interval counts and
/// TCP_INFO samples with their report's JSON and each stream's buffer, a probe socket's
/// batch buffers. An upper bound: the test's own probes and streams never need more.
pub fn test_memory(test: &TestRequest) -> u64 {
    let record = std::mem::size_of::<control::ReceivedProbe>() as u64;
    let batch = |size: u32| DATAGRAM_BATCH * (u64::from(size) + 64);
    if let Some((direction, size, count, _)) = test.one_way() {
        let kept = if direction == control::Direction::Up {
            let chunk = control::RECORDS_PER_CHUNK as u64 * (record + RECORD_JSON_BYTES);
            count
                .saturating_mul(record)
                .saturating_add(count.div_ceil(8))
                .saturating_add(chunk)
        } else {
            0
        };
        return kept.saturating_add(batch(size));
    }
    match *test {
        TestRequest::OneWay { .. } | TestRequest::Trains(_) => 0,
        TestRequest::RoundTrip { .. } | TestRequest::PathMtu { .. } => probe::MAX_LEN as u64 + 1,
        TestRequest::Tcp {
            streams,
            direction,
            duration_ns,
            interval_ns,
            sample_ns,
            ..
        } => {
            let buffer = (crate::tcp::TCP_CHUNK + 4096) as u64;
            let time_ns = duration_ns.saturating_add(TEST_GRACE.as_nanos());
            // The server receives the upward streams (a count per interval) and sends the
            // downward ones (a sample per period).
            let intervals = time_ns / interval_ns.max(1) + 1;
            let samples = duration_ns / sample_ns.max(1) + 2;
            let receiving =
                buffer.saturating_add(intervals.saturating_mul(8 + INTERVAL_JSON_BYTES));
            let sample = std::mem::size_of::<crate::tcp::TcpSample>() as u64;
            let sending = buffer.saturating_add(samples.saturating_mul(sample + SAMPLE_JSON_BYTES));
            let (up, down) = match direction {
                control::TcpDirection::Up => (1, 0),
                control::TcpDirection::Down => (0, 1),
                control::TcpDirection::Both => (1, 1),
            };
            u64::from(streams).saturating_mul((up * receiving).saturating_add(down * sending))
        }
    }
}

/// Bytes of a data stream's greeting: `session u64 | index u32 | down u8 | 0 0 0 | tag`
/// (the tag zero without a key).
pub const GREETING_LEN: usize = 16 + TAG_LEN;

/// Why a dialogue ended badly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The peer stopped answering.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The keys differ, or one side has none, or a message failed its tag.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer closed the control connection while a message was awaited.
    #[error("the peer closed the connection while we waited for {0}")]
    Closed(&'static str),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An end reported an error: the peer (its `Error` message), or the server itself
    /// when it ends a dialogue ([`ServerSession::abort`]).
    #[error("the {from} reported: {message}")]
    Remote {
        /// Which end said it.
        from: Role,
        /// What it said.
        message: String,
    },
    /// The server said no.
    #[error("the server refused the test: {0}")]
    Refused(Refusal),
}

impl From<ControlError> for SessionError {
    fn from(error: ControlError) -> SessionError {
        match error {
            ControlError::BadTag | ControlError::AuthMismatch(_) => {
                SessionError::Auth(error.to_string())
            }
            other => SessionError::Protocol(other.to_string()),
        }
    }
}

/// What a session refused, for the server's counters and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rejections {
    /// Control messages that failed authentication (a wrong key, a reflected, replayed or
    /// tampered message).
    pub control: u64,
    /// Probes that were not this test's: another session, another sender, a wrong tag or
    /// kind, a wrong size.
    pub probes: u64,
    /// Data stream greetings refused: untagged or forged, another session, a stream the
    /// test did not ask for, or one already open.
    pub greetings: u64,
    /// Round-trip requests a reflector dropped: faster than the test's rate or beyond its
    /// count ([`Reflector`]).
    pub excess: u64,
}

/// The control connection's framing and authentication: bytes in, messages out.
#[derive(Debug, Default)]
struct Channel {
    reader: FrameReader,
    out: Vec<u8>,
    auth: Option<ControlAuth>,
}

impl Channel {
    fn send(&mut self, message: &Message) {
        self.out
            .extend_from_slice(&control::encode(message, self.auth.as_mut()));
    }

    fn take_output(&mut self) -> Option<Vec<u8>> {
        (!self.out.is_empty()).then(|| std::mem::take(&mut self.out))
    }

    /// Decodes a message frame under the channel's authentication; a frame that fails it
    /// (a wrong key, a reflected, replayed or tampered message) counts in `rejections`.
    fn decode(
        &mut self,
        frame: &[u8],
        rejections: &mut Rejections,
    ) -> Result<Message, SessionError> {
        control::decode(frame, self.auth.as_mut()).map_err(|error| {
            if matches!(error, ControlError::BadTag | ControlError::AuthMismatch(_)) {
                rejections.control += 1;
            }
            error.into()
        })
    }
}

/// The test a session runs, once accepted.
#[derive(Debug, Clone)]
pub struct Running {
    /// The session id the server chose (a CSPRNG's, in every probe and greeting).
    pub session: u64,
    /// The test.
    pub test: TestRequest,
    /// The client's UDP port (probes to it).
    pub client_port: u16,
    /// The server's UDP port, or its TCP data port for a TCP test.
    pub server_port: u16,
    /// The peer's address: probes from anywhere else are not this test's.
    pub peer: IpAddr,
    probe_keys: Option<ProbeKeys>,
    greeting_key: Option<Key>,
    streams_open: Vec<(u32, bool)>,
}

impl Running {
    fn new(
        session: u64,
        test: TestRequest,
        client_port: u16,
        server_port: u16,
        peer: IpAddr,
        auth: Option<&ControlAuth>,
    ) -> Running {
        Running {
            session,
            test,
            client_port,
            server_port,
            peer,
            probe_keys: auth.map(|auth| auth.keys().probes(session)),
            greeting_key: auth.map(|auth| auth.keys().greetings(session)),
            streams_open: Vec::new(),
        }
    }

    /// The key of probes going `way`, if the test is authenticated.
    pub fn probe_key(&self, way: Way) -> Option<&Key> {
        self.probe_keys.as_ref().map(|keys| keys.of(way))
    }

    /// How long a probe of `kind` going `way` is on the wire when the test asked for `size`
    /// bytes: the size, or the least such a probe takes (a keyed one carries its tag).
    pub fn probe_len(&self, way: Way, kind: ProbeKind, size: u32) -> usize {
        (size as usize).max(probe::min_len(kind, self.probe_key(way).is_some()))
    }

    /// Writes probe `probe` going `way` as `len` bytes into `out`.
    pub fn encode_probe(
        &self,
        way: Way,
        probe: &Probe,
        len: usize,
        padding: &mut dyn FnMut(&mut [u8]),
        out: &mut Vec<u8>,
    ) -> Result<(), ProbeError> {
        probe::encode(probe, len, self.probe_key(way), padding, out)
    }

    /// The probe in `data` if it belongs to this test: from its peer, of `kind`, going
    /// `way` (tagged with that way's key when the test has one), with this session id.
    /// `None` counts as rejected in `rejections`.
    pub fn accept_probe(
        &self,
        way: Way,
        kind: ProbeKind,
        source: IpAddr,
        data: &[u8],
        rejections: &mut Rejections,
    ) -> Option<Probe> {
        let probe = probe::decode(data, self.probe_key(way)).ok().filter(|p| {
            p.session == self.session && p.kind == kind && same_host(source, self.peer)
        });
        if probe.is_none() {
            rejections.probes += 1;
        }
        probe
    }

    /// Turns a request in `data` (already accepted) into its reply in place, tagged with
    /// the server-to-client key.
    pub fn reflect(&self, data: &mut [u8], reflection: Reflection) -> Result<(), ProbeError> {
        probe::reflect(
            data,
            reflection,
            self.probe_key(Way::ClientToServer),
            self.probe_key(Way::ServerToClient),
        )
    }

    /// The greeting that opens data stream `index` (`down`: the server sends on it).
    pub fn greeting(&self, index: u32, down: bool) -> [u8; GREETING_LEN] {
        let mut greeting = [0u8; GREETING_LEN];
        greeting[..8].copy_from_slice(&self.session.to_be_bytes());
        greeting[8..12].copy_from_slice(&index.to_be_bytes());
        greeting[12] = u8::from(down);
        if let Some(key) = &self.greeting_key {
            let tag = key.tag(&[&greeting[..16]]);
            greeting[16..].copy_from_slice(&tag);
        }
        greeting
    }

    /// Checks a data stream's greeting: tagged with this test's key (when it has one), for
    /// this session, a stream the request asked for, not one already open. Returns the
    /// stream's index and whether it runs down.
    pub fn accept_greeting(
        &mut self,
        greeting: &[u8; GREETING_LEN],
        rejections: &mut Rejections,
    ) -> Option<(u32, bool)> {
        let stream = self.check_greeting(greeting);
        match stream {
            Some(stream) => self.streams_open.push(stream),
            None => rejections.greetings += 1,
        }
        stream
    }

    fn check_greeting(&self, greeting: &[u8; GREETING_LEN]) -> Option<(u32, bool)> {
        if let Some(key) = &self.greeting_key {
            if !key.verify(&[&greeting[..16]], &greeting[16..]) {
                return None;
            }
        }
        let session = u64::from_be_bytes(greeting[..8].try_into().expect("8 bytes"));
        let index = u32::from_be_bytes(greeting[8..12].try_into().expect("4 bytes"));
        let down = match greeting[12] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let TestRequest::Tcp {
            streams, direction, ..
        } = self.test
        else {
            return None;
        };
        let direction_asked = match direction {
            control::TcpDirection::Up => !down,
            control::TcpDirection::Down => down,
            control::TcpDirection::Both => true,
        };
        (session == self.session
            && index < streams
            && direction_asked
            && !self.streams_open.contains(&(index, down)))
        .then_some((index, down))
    }

    /// How many data streams the test opens.
    pub fn streams_expected(&self) -> usize {
        match self.test {
            TestRequest::Tcp {
                streams,
                direction: control::TcpDirection::Both,
                ..
            } => 2 * streams as usize,
            TestRequest::Tcp { streams, .. } => streams as usize,
            _ => 0,
        }
    }
}

/// Whether two addresses are one host (an IPv4 client seen on a dual-stack socket as
/// `::ffff:a.b.c.d` is the same client).
fn same_host(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// The server's limits on one request (besides the number of tests running, which the
/// driver knows).
pub fn check_limits(test: &TestRequest, limits: &Limits) -> Result<(), Refusal> {
    let (size, count) = match *test {
        TestRequest::Tcp { .. } => {
            check_tcp_limits(test, limits)?;
            return check_memory(test, limits);
        }
        // A rate or an interval of zero: probes at no pace.
        TestRequest::OneWay {
            size,
            count,
            rate_bps: pace,
            ..
        }
        | TestRequest::RoundTrip {
            size,
            count,
            interval_ns: pace,
        } => {
            if pace == 0 {
                let paced_by = match test {
                    TestRequest::OneWay { .. } => "rate",
                    _ => "interval",
                };
                return Err(Refusal::bad_request(format!("the {paced_by} is zero")));
            }
            (size, count)
        }
        TestRequest::PathMtu { max_size, .. } => (max_size, 1),
        TestRequest::Trains(t) => {
            let train_ns = u64::from(t.length.saturating_sub(1)).saturating_mul(t.spacing_ns);
            if t.length == 0 || t.length > MAX_TRAIN || t.trains == 0 || t.period_ns <= train_ns {
                return Err(Refusal::bad_request(format!(
                    "trains of {} probes (1 to {MAX_TRAIN}), {} of them, each within its period",
                    t.length, t.trains
                )));
            }
            (t.size, t.count())
        }
    };
    if size as usize > probe::MAX_LEN || count == 0 {
        return Err(Refusal::bad_request(format!(
            "size {size} and count {count}"
        )));
    }
    let asked_bps = test.rate_bps();
    if asked_bps > limits.max_rate_bps {
        return Err(Refusal::RateTooHigh {
            max_rate_bps: limits.max_rate_bps,
            asked_bps,
        });
    }
    let asked_ns = test.duration_ns();
    if asked_ns > limits.max_duration_ns {
        return Err(Refusal::TooLong {
            max_ns: limits.max_duration_ns,
            asked_ns,
        });
    }
    check_memory(test, limits)
}

/// A TCP test's own limits: its streams, length, MSS, congestion control name, report
/// intervals and sampling period (other tests have none of these).
fn check_tcp_limits(test: &TestRequest, limits: &Limits) -> Result<(), Refusal> {
    let TestRequest::Tcp {
        streams,
        duration_ns,
        interval_ns,
        sample_ns,
        mss,
        ref congestion,
        ..
    } = *test
    else {
        return Ok(());
    };
    if streams == 0 || streams > MAX_STREAMS {
        return Err(Refusal::bad_request(format!(
            "{streams} streams (1 to {MAX_STREAMS})"
        )));
    }
    if duration_ns > limits.max_duration_ns {
        return Err(Refusal::TooLong {
            max_ns: limits.max_duration_ns,
            asked_ns: duration_ns,
        });
    }
    if let Some(mss) = mss.filter(|m| !(MIN_MSS..=65_535).contains(m)) {
        return Err(Refusal::bad_request(format!(
            "an MSS of {mss} bytes: {MIN_MSS} to 65535"
        )));
    }
    if let Some(name) = congestion {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_CONGESTION_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !well_formed {
            return Err(Refusal::bad_request(format!(
                "congestion control '{}': 1 to {MAX_CONGESTION_NAME} of a-z, 0-9, _",
                peer_text(name)
            )));
        }
    }
    let min_interval_ns = MIN_REPORT_INTERVAL.as_nanos();
    if interval_ns < min_interval_ns {
        return Err(Refusal::bad_request(format!(
            "a report interval of {interval_ns} ns: at least {} ms",
            min_interval_ns / 1_000_000
        )));
    }
    let intervals = duration_ns.div_ceil(interval_ns);
    if intervals > MAX_REPORT_INTERVALS {
        return Err(Refusal::bad_request(format!(
            "{intervals} report intervals: at most {MAX_REPORT_INTERVALS} per test \
         (a longer interval, or a shorter test)"
        )));
    }
    let min_sample_ns = MIN_SAMPLE_INTERVAL.as_nanos();
    if sample_ns < min_sample_ns {
        return Err(Refusal::bad_request(format!(
            "a TCP_INFO sampling period of {sample_ns} ns: at least {} ms",
            min_sample_ns / 1_000_000
        )));
    }
    Ok(())
}

fn check_memory(test: &TestRequest, limits: &Limits) -> Result<(), Refusal> {
    let asked_bytes = test_memory(test);
    if asked_bytes > limits.max_test_memory {
        return Err(Refusal::TooMuchMemory {
            max_bytes: limits.max_test_memory,
            asked_bytes,
        });
    }
    Ok(())
}

/// When a running test is over for good: its time, plus [`TEST_GRACE`].
fn test_deadline(now: Instant, test: &TestRequest) -> Instant {
    now + Duration::from_nanos(test.duration_ns()) + TEST_GRACE
}
