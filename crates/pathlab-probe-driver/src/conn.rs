//! The control connection: bytes between a TCP stream and a session of
//! [`pathlab_probe::session`], on the sessions' clock.

use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pathlab_os::sys;
use pathlab_os::Clock;
use pathlab_probe::control::Message;
use pathlab_probe::session::{ClientEvent, ClientSession, ServerEvent, ServerSession};

use crate::MeasureError;

/// The sessions' clock: the process's [`Clock`], whose zero is its first reading.
pub(crate) fn clock() -> pathlab_core::Instant {
    Clock::process().now()
}

/// A std duration until `at` on the sessions' clock (zero if past).
pub(crate) fn until(at: pathlab_core::Instant) -> Duration {
    Clock::process().until(at)
}

/// Random bytes from the kernel (session ids, nonces).
pub(crate) fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    sys::random_bytes(&mut bytes)?;
    Ok(bytes)
}

/// A session the driver moves bytes for: the client's or the server's end.
pub(crate) trait Dialogue {
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

/// How long a server waits for a client to take any of a control message: a client that
/// takes nothing for this long, or takes a message slower than this plus its length at
/// [`CONTROL_WRITE_FLOOR`], ends its test (a client that stops reading would otherwise hold a blocked writer, its test's
/// slot, and the server's shutdown, forever).
pub(crate) const CONTROL_WRITE_GRACE: Duration = Duration::from_secs(10);

/// The slowest a client may take a long control message (a test's records), bytes per
/// second: 64 kbit/s, below any path a measurement runs on.
pub(crate) const CONTROL_WRITE_FLOOR: u64 = 8_000;

/// A control connection and its session.
#[derive(Debug)]
pub(crate) struct Conn<D> {
    pub(crate) stream: TcpStream,
    pub(crate) session: D,
    pub(crate) closed: bool,
    /// Set on the server: writes end at their deadline ([`CONTROL_WRITE_GRACE`]), or as
    /// soon as the flag says the server stops.
    bounded: Option<Arc<AtomicBool>>,
}

impl<D: Dialogue> Conn<D> {
    pub(crate) fn new(stream: TcpStream, session: D) -> Conn<D> {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            session,
            closed: false,
            bounded: None,
        }
    }

    /// Bounds every write from now on: each message must go within
    /// [`CONTROL_WRITE_GRACE`] plus its length at [`CONTROL_WRITE_FLOOR`], and none waits
    /// once `stop` is set.
    pub(crate) fn bound_writes(&mut self, stop: Arc<AtomicBool>) {
        self.bounded = Some(stop);
    }

    /// Writes what the session has to send (blocking, within the bound if there is one: a
    /// test's records are worth waiting for, a client that takes none is not).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while let Some(bytes) = self.session.poll_transmit() {
            if self.closed {
                continue;
            }
            match &self.bounded {
                None => self.stream.write_all(&bytes)?,
                Some(stop) => write_within(&self.stream, &bytes, stop)?,
            }
        }
        Ok(())
    }

    /// Reads what is there without waiting; feeds it, or the close, to the session.
    pub(crate) fn read_ready(&mut self) -> io::Result<()> {
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
    pub(crate) fn pump(&mut self, wait: Duration) -> Result<Option<D::Event>, MeasureError> {
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

/// Writes `bytes` to `stream` within [`CONTROL_WRITE_GRACE`] plus their length at
/// [`CONTROL_WRITE_FLOOR`]; gives up at once when `stop` is set and the socket is full.
/// Leaves the stream blocking.
fn write_within(mut stream: &TcpStream, bytes: &[u8], stop: &AtomicBool) -> io::Result<()> {
    let allowance = Duration::from_secs_f64(bytes.len() as f64 / CONTROL_WRITE_FLOOR as f64);
    let give_up = std::time::Instant::now() + CONTROL_WRITE_GRACE + allowance;
    let mut progressed = std::time::Instant::now();
    // A bounded connection (the server's, during a test) is otherwise blocking.
    stream.set_nonblocking(true)?;
    let mut rest = bytes;
    let outcome = loop {
        if rest.is_empty() {
            break Ok(());
        }
        match stream.write(rest) {
            Ok(n) => {
                rest = &rest[n..];
                progressed = std::time::Instant::now();
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    break Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "the server is shutting down",
                    ));
                }
                let now = std::time::Instant::now();
                let left = give_up
                    .min(progressed + CONTROL_WRITE_GRACE)
                    .saturating_duration_since(now);
                if left.is_zero() {
                    break Err(io::Error::new(io::ErrorKind::TimedOut, StalledClient));
                }
                sys::poll_writable(stream.as_fd(), left.min(Duration::from_millis(50)))?;
            }
            Err(error) => break Err(error),
        }
    };
    stream.set_nonblocking(false)?;
    outcome
}

/// Why a server ended a test whose client stopped taking its control messages.
#[derive(Debug, thiserror::Error)]
#[error("the client stopped reading the control connection (its messages did not go within the deadline)")]
pub(crate) struct StalledClient;

impl StalledClient {
    /// Whether `error` is this one.
    pub(crate) fn is(error: &MeasureError) -> bool {
        matches!(error, MeasureError::Io(io) if io.get_ref().is_some_and(<dyn std::error::Error + Send + Sync>::is::<StalledClient>))
    }
}

/// The control connection as the data plane's loops see it: messages of the running test.
pub(crate) trait Control {
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

/// Whether a blocking call ended because its socket timeout passed (or, on a
/// non-blocking socket, nothing was ready), not because of a failure.
pub(crate) fn timed_out(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// [`pathlab_probe::session::TEST_GRACE`] as a std duration.
pub(crate) const TEST_GRACE_STD: Duration = pathlab_probe::session::TEST_GRACE.to_std();
/// [`pathlab_probe::session::STRAGGLERS`] as a std duration.
pub(crate) const STRAGGLERS_STD: Duration = pathlab_probe::session::STRAGGLERS.to_std();

/// Receive buffer asked for on probe sockets: 4 MiB holds about 10 ms of probes at
/// 1 Gbit/s (plus the kernel's per-datagram overhead), so a receiver that is descheduled
/// for a moment does not count its own drops as path loss.
const PROBE_RECEIVE_BUFFER: usize = 4 << 20;

/// Kernel receive timestamps on, and a receive buffer as large as the host allows.
pub(crate) fn prepare_probe_socket(udp: &UdpSocket) -> io::Result<()> {
    sys::enable_receive_timestamps(udp.as_fd())?;
    sys::grow_receive_buffer(udp.as_fd(), PROBE_RECEIVE_BUFFER)?;
    Ok(())
}
