//! The sockets of the measurement commands: `pathlab server` and its clients.
//!
//! The dialogue, its limits and authentication, and what the data plane accepts are the
//! state machines of [`pathlab_probe::session`]; every estimator is in `pathlab-probe` too.
//! This module is their driver: it moves control bytes over TCP and probes over UDP, reads
//! the clock, paces probes (sleeping until 200 us before each send and spinning the rest),
//! and takes receive times from the kernel (`SO_TIMESTAMPNS`).
//!
//! The server runs every connection's handshake in one event loop (no thread per idle
//! connection), bounded overall and per source address; an accepted test runs on a thread
//! of its own, at most `--max-tests` of them.

use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pathlab_probe::control::{Message, Refusal};
use pathlab_probe::session::{
    ClientEvent, ClientSession, ServerEvent, ServerSession, SessionError,
};

use crate::sys;

mod client;
mod counters;
mod mtu;
mod probes;
mod server;
mod streams;

pub use client::{Client, OneWayTest, ProbeArrivals, CONNECT_TIMEOUT};
pub use counters::{metrics, RefusalReason, ServerCounters, TestKind, TestOutcome};
pub use pathlab_probe::session::MAX_STREAMS;
pub use server::{Server, ServerConfig};
pub use streams::{TcpOptions, TcpTest};

/// The server's default TCP port.
pub const DEFAULT_PORT: u16 = 4920;

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The server cannot be reached.
    #[error("cannot reach a pathlab server at {address}: {why}")]
    Unreachable {
        /// What was tried.
        address: String,
        /// Why (said in the message, so not a `source`: it would be printed twice).
        why: io::Error,
    },
    /// The host name does not resolve.
    #[error("cannot resolve '{0}'")]
    Resolve(String),
    /// The server said no.
    #[error("the server refused the test: {0}")]
    Refused(Refusal),
    /// The peer stopped answering.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The keys differ, or one side has none.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer closed the control connection while a message was awaited.
    #[error("the peer closed the connection while we waited for {0}")]
    Closed(&'static str),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The peer reported an error.
    #[error("the server reported: {0}")]
    Remote(String),
    /// The server is shutting down (said to its clients, which see it as `Remote`).
    #[error("the server is shutting down")]
    Stopped,
    /// The server sent no welcome, or no answer to a request, in time: it accepted the
    /// connection (its kernel did) but is frozen, overloaded, or cut off.
    #[error("the server stopped answering: no {what} within {:.0} s", within.as_secs_f64())]
    NoAnswer {
        /// What was awaited.
        what: &'static str,
        /// How long.
        within: Duration,
    },
    /// A running test's server went silent (frozen, or gone without closing the
    /// connection) or closed the connection before the test's results.
    #[error("{0}")]
    Interrupted(Interruption),
    /// A socket call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// How a server failed a running test, and when: what [`MeasureError::Interrupted`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct Interruption {
    /// Whether the server closed the connection (it stopped or crashed); else it went
    /// silent (frozen, or gone without a word: a host that left the network).
    pub closed: bool,
    /// Seconds from the test's start (the server's accept) to when the client gave up or
    /// saw the connection close.
    pub at_s: f64,
    /// Seconds from the test's start to the last sign of the server: a control message, a
    /// probe or reply, data received, data it took; `None` when it gave none during the
    /// test (an upward one-way test's receiver says nothing until the end).
    pub last_heard_s: Option<f64>,
    /// What the client waited for: "results", "answer to a path MTU probe".
    pub awaited: &'static str,
    /// The bound the wait had, as said in the message: "within 10 s of its end".
    pub bound: String,
}

impl std::fmt::Display for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.closed {
            write!(
                f,
                "the server closed the connection {:.1} s into the test, before its {} (it \
                 stopped or crashed)",
                self.at_s, self.awaited
            )
        } else {
            match self.last_heard_s {
                Some(heard) => {
                    write!(f, "the server stopped answering {heard:.1} s into the test")?;
                }
                None => write!(f, "the server stopped answering during the test")?,
            }
            write!(
                f,
                " (no {} {}; it is frozen, overloaded or unreachable)",
                self.awaited, self.bound
            )
        }
    }
}

/// A test (or a procedure of several) that ended early: why, and what it had measured by
/// then, for `--save` to keep.
#[derive(Debug)]
pub struct Partial<T, E = MeasureError> {
    /// Why it ended.
    pub error: E,
    /// What it measured before (none when nothing was: an upward one-way test whose
    /// receiver's records never came, a test that never started). Boxed: a result is
    /// large, and an error is passed up through every step.
    pub measured: Option<Box<T>>,
}

impl<T, E> Partial<T, E> {
    /// An error with nothing measured.
    pub fn nothing(error: E) -> Partial<T, E> {
        Partial {
            error,
            measured: None,
        }
    }
}

impl<T> From<MeasureError> for Partial<T> {
    fn from(error: MeasureError) -> Partial<T> {
        Partial::nothing(error)
    }
}

/// The control connection as the data plane's loops see it: messages of the running test.
trait Control {
    /// A message if one is here or arrives within `wait`.
    fn poll_message(&mut self, wait: Duration) -> Result<Option<Message>, MeasureError>;
    /// Sends a message.
    fn send(&mut self, message: &Message) -> Result<(), MeasureError>;
    /// The peer gave a sign of life on the data plane (a probe, a reply): a client says
    /// when the server was last heard from if it stops answering.
    fn heard_from_peer(&mut self) {}
    /// The next message, however long it takes (the session's deadline bounds it).
    fn next_message(&mut self) -> Result<Message, MeasureError> {
        loop {
            if let Some(message) = self.poll_message(Duration::from_secs(1))? {
                return Ok(message);
            }
        }
    }
}

impl From<SessionError> for MeasureError {
    fn from(error: SessionError) -> MeasureError {
        match error {
            SessionError::Timeout(what) => MeasureError::Timeout(what),
            SessionError::Auth(why) => MeasureError::Auth(why),
            SessionError::Closed(what) => MeasureError::Closed(what),
            SessionError::Protocol(why) => MeasureError::Protocol(why),
            SessionError::Remote(why) => MeasureError::Remote(why),
            SessionError::Refused(refusal) => MeasureError::Refused(refusal),
        }
    }
}

/// Wall-clock nanoseconds since the Unix epoch (probe timestamps: kernel receive times are
/// on this clock; one-way figures are deviations, so any common epoch works).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The sessions' clock: monotonic, from the process's first reading.
fn clock() -> pathlab_core::Instant {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    pathlab_core::Instant::from_nanos(origin.elapsed().as_nanos() as u64)
}

/// A std duration until `at` on the sessions' clock (zero if past).
fn until(at: pathlab_core::Instant) -> Duration {
    at.saturating_since(clock()).into()
}

fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    sys::random_bytes(&mut bytes)?;
    Ok(bytes)
}

/// A session the driver moves bytes for: the client's or the server's end.
trait Dialogue {
    type Event;
    fn handle_control(&mut self, now: pathlab_core::Instant, bytes: &[u8]);
    fn handle_close(&mut self, now: pathlab_core::Instant);
    fn handle_timeout(&mut self, now: pathlab_core::Instant);
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;
    fn poll_event(&mut self) -> Option<Self::Event>;
    fn poll_at(&self) -> Option<pathlab_core::Instant>;
}

macro_rules! dialogue {
    ($session:ty, $event:ty) => {
        impl Dialogue for $session {
            type Event = $event;
            fn handle_control(&mut self, now: pathlab_core::Instant, bytes: &[u8]) {
                <$session>::handle_control(self, now, bytes)
            }
            fn handle_close(&mut self, now: pathlab_core::Instant) {
                <$session>::handle_close(self, now)
            }
            fn handle_timeout(&mut self, now: pathlab_core::Instant) {
                <$session>::handle_timeout(self, now)
            }
            fn poll_transmit(&mut self) -> Option<Vec<u8>> {
                <$session>::poll_transmit(self)
            }
            fn poll_event(&mut self) -> Option<$event> {
                <$session>::poll_event(self)
            }
            fn poll_at(&self) -> Option<pathlab_core::Instant> {
                <$session>::poll_at(self)
            }
        }
    };
}
dialogue!(ClientSession, ClientEvent);
dialogue!(ServerSession, ServerEvent);

/// A control connection and its session.
#[derive(Debug)]
struct Conn<D> {
    stream: TcpStream,
    session: D,
    closed: bool,
}

impl<D: Dialogue> Conn<D> {
    fn new(stream: TcpStream, session: D) -> Conn<D> {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            session,
            closed: false,
        }
    }

    /// Writes what the session has to send (blocking: control messages are small, and a
    /// test's records are worth waiting for).
    fn flush(&mut self) -> io::Result<()> {
        while let Some(bytes) = self.session.poll_transmit() {
            if !self.closed {
                self.stream.write_all(&bytes)?;
            }
        }
        Ok(())
    }

    /// Reads what is there without waiting; feeds it, or the close, to the session.
    fn read_ready(&mut self) -> io::Result<()> {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut buffer) {
                Ok(0) => {
                    self.closed = true;
                    self.session.handle_close(clock());
                    return Ok(());
                }
                Ok(n) => self.session.handle_control(clock(), &buffer[..n]),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::ConnectionReset => {
                    self.closed = true;
                    self.session.handle_close(clock());
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The session's next event, waiting at most `wait` (and never past its deadline,
    /// where it produces one of its own).
    fn pump(&mut self, wait: Duration) -> Result<Option<D::Event>, MeasureError> {
        let give_up = clock() + pathlab_core::Duration::from(wait);
        loop {
            self.flush()?;
            if let Some(event) = self.session.poll_event() {
                return Ok(Some(event));
            }
            if !self.closed {
                let wake = self.session.poll_at().map_or(give_up, |at| at.min(give_up));
                let mut ready = [false];
                sys::poll_readable(&[self.stream.as_fd()], Some(until(wake)), &mut ready)?;
                if ready[0] {
                    self.stream.set_nonblocking(true)?;
                    let read = self.read_ready();
                    self.stream.set_nonblocking(false)?;
                    read?;
                }
            }
            let now = clock();
            self.session.handle_timeout(now);
            if let Some(event) = self.session.poll_event() {
                return Ok(Some(event));
            }
            if self.closed || now >= give_up {
                return Ok(None);
            }
        }
    }
}

/// Whether a blocking call ended because its socket timeout passed (or, on a
/// non-blocking socket, nothing was ready), not because of a failure.
fn timed_out(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// [`pathlab_probe::session::TEST_GRACE`] as a std duration.
const TEST_GRACE_STD: Duration = pathlab_probe::session::TEST_GRACE.to_std();
/// [`pathlab_probe::session::STRAGGLERS`] as a std duration.
const STRAGGLERS_STD: Duration = pathlab_probe::session::STRAGGLERS.to_std();

/// Receive buffer asked for on probe sockets: 4 MiB holds about 10 ms of probes at
/// 1 Gbit/s (plus the kernel's per-datagram overhead), so a receiver that is descheduled
/// for a moment does not count its own drops as path loss.
const PROBE_RECEIVE_BUFFER: usize = 4 << 20;

/// Kernel receive timestamps on, and a receive buffer as large as the host allows.
fn prepare_probe_socket(udp: &UdpSocket) -> io::Result<()> {
    sys::enable_receive_timestamps(udp.as_fd())?;
    sys::grow_receive_buffer(udp.as_fd(), PROBE_RECEIVE_BUFFER)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_says_what_happened_when_and_the_bound() {
        let frozen = Interruption {
            closed: false,
            at_s: 13.0,
            last_heard_s: Some(3.21),
            awaited: "results",
            bound: "within 10 s of its end".into(),
        };
        assert_eq!(
            frozen.to_string(),
            "the server stopped answering 3.2 s into the test (no results within 10 s of its \
             end; it is frozen, overloaded or unreachable)"
        );
        let unheard = Interruption {
            last_heard_s: None,
            ..frozen.clone()
        };
        assert!(unheard
            .to_string()
            .starts_with("the server stopped answering during the test (no results"));
        let killed = Interruption {
            closed: true,
            at_s: 1.04,
            ..frozen
        };
        assert_eq!(
            killed.to_string(),
            "the server closed the connection 1.0 s into the test, before its results (it \
             stopped or crashed)"
        );
    }
}
