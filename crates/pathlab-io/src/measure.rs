//! The sockets of the measurement commands: `pathlab server` and the `owd` client.
//!
//! The protocol and every estimator are in `pathlab-probe`; this module moves its messages
//! over TCP and its probes over UDP, paces probes (sleeping until 200 us before each send
//! and spinning the rest), and takes receive times from the kernel (`SO_TIMESTAMPNS`).
//! Each control connection of the server runs on its own thread.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pathlab_probe::auth::{ControlAuth, Key, NONCE_LEN};
use pathlab_probe::control::TcpDirection;
use pathlab_probe::control::{
    self, ControlError, Direction, FrameReader, Limits, Message, ReceivedProbe, Refusal, Schedule,
    TestRequest, RECORDS_PER_CHUNK,
};
use pathlab_probe::owd::{one_way_result, OneWayResult, SenderReport};
use pathlab_probe::probe::{self, Probe, ProbeKind, Reflection};
use pathlab_probe::rtt::{self, RoundTrip, RttReport};
use pathlab_probe::tcp::{
    self as tcp_report, IntervalCounter, StreamReport, TcpSample, TcpTestReport,
};

use crate::sys;

mod mtu;

/// The server's default TCP port.
pub const DEFAULT_PORT: u16 = 4920;

thread_local! {
    /// The data listener of the TCP test this connection thread is serving.
    static DATA_LISTENER: std::cell::RefCell<Option<TcpListener>> = const { std::cell::RefCell::new(None) };
}

/// How long after the sender's last probe the receiver keeps listening for stragglers.
const GRACE: Duration = Duration::from_millis(500);

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
    /// A socket call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl From<ControlError> for MeasureError {
    fn from(error: ControlError) -> MeasureError {
        match error {
            ControlError::BadTag | ControlError::AuthMismatch(_) => {
                MeasureError::Auth(error.to_string())
            }
            other => MeasureError::Protocol(other.to_string()),
        }
    }
}

/// Wall-clock nanoseconds since the Unix epoch (probe timestamps; any common epoch works,
/// one-way figures are deviations).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn random_nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut nonce = [0u8; NONCE_LEN];
    sys::random_bytes(&mut nonce)?;
    Ok(nonce)
}

/// A control connection: frames in and out, authenticated once both nonces are known.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    reader: FrameReader,
    auth: Option<ControlAuth>,
}

impl Connection {
    fn new(stream: TcpStream) -> Connection {
        let _ = stream.set_nodelay(true);
        Connection {
            stream,
            reader: FrameReader::default(),
            auth: None,
        }
    }

    fn send(&mut self, message: &Message) -> io::Result<()> {
        let frame = control::encode(message, self.auth.as_mut());
        self.stream.write_all(&frame)
    }

    /// The next message, waiting at most `timeout`.
    fn receive(&mut self, timeout: Duration, what: &'static str) -> Result<Message, MeasureError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(frame) = self.reader.next_frame()? {
                return match control::decode(&frame, self.auth.as_mut()) {
                    // A peer whose key differs cannot tag its error message; read it
                    // untagged to say why (it ends the test, so trusting it risks nothing).
                    Err(ControlError::AuthMismatch(_)) if self.auth.is_some() => {
                        match control::decode(&frame, None) {
                            Ok(Message::Error { message }) => Err(MeasureError::Auth(format!(
                                "the peer says: {message}; give both sides the same --psk file"
                            ))),
                            _ => Err(MeasureError::Auth(
                                "the peer sent a message without a tag; give both sides the same --psk file".into(),
                            )),
                        }
                    }
                    other => Ok(other?),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(MeasureError::Timeout(what));
            }
            self.stream.set_read_timeout(Some(left))?;
            let mut buffer = [0u8; 16 * 1024];
            match self.stream.read(&mut buffer) {
                Ok(0) => return Err(MeasureError::Closed(what)),
                Ok(n) => self.reader.push(&buffer[..n]),
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(MeasureError::Timeout(what));
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// A message if one is already here or arrives within `wait`.
    fn poll(&mut self, wait: Duration) -> Result<Option<Message>, MeasureError> {
        match self.receive(wait.max(Duration::from_micros(1)), "a control message") {
            Ok(message) => Ok(Some(message)),
            Err(MeasureError::Timeout(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// The MSS of control connections: 1280 bytes less 40 of IPv6 and 20 of TCP header.
const CONTROL_MSS: libc::c_int = 1220;

/// Limits and key of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen (TCP; UDP test ports are chosen per test on the same address).
    pub listen: SocketAddr,
    /// The limits every test must respect.
    pub limits: Limits,
    /// The pre-shared key, if tests must be authenticated.
    pub key: Option<Key>,
}

/// A bound server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
    active: Arc<AtomicU32>,
    next_session: Arc<AtomicU64>,
}

impl Server {
    /// Binds the control port.
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        let listener = TcpListener::bind(config.listen)?;
        // Control connections carry multi-kilobyte messages (a test's records, a TCP
        // report); on a path that silently drops packets above its MTU they would stall.
        // Accepted connections inherit this MSS and announce it, so both ways send
        // segments that fit IPv6's minimum MTU (1280 bytes) with any headers.
        sys::setsockopt(
            listener.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            &CONTROL_MSS,
        )?;
        listener.set_nonblocking(true)?;
        let mut seed = [0u8; 8];
        sys::random_bytes(&mut seed)?;
        Ok(Server {
            listener,
            config,
            active: Arc::new(AtomicU32::new(0)),
            next_session: Arc::new(AtomicU64::new(u64::from_ne_bytes(seed) >> 1)),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves connections until `stop` returns true (checked every 50 ms), then waits for
    /// running tests to end.
    pub fn run(&self, mut stop: impl FnMut() -> bool) {
        let mut workers = Vec::new();
        while !stop() {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let config = self.config.clone();
                    let active = Arc::clone(&self.active);
                    let next_session = Arc::clone(&self.next_session);
                    workers.push(std::thread::spawn(move || {
                        let started = Instant::now();
                        let outcome =
                            serve_connection(stream, peer, &config, &active, &next_session);
                        let seconds = started.elapsed().as_secs_f64();
                        match outcome {
                            Ok(line) => {
                                eprintln!("pathlab server: {peer}: {line} ({seconds:.1} s)");
                            }
                            Err(error) => {
                                eprintln!("pathlab server: {peer}: {error} ({seconds:.1} s)");
                            }
                        }
                    }));
                    workers.retain(|w| !w.is_finished());
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    let _ = sys::poll_readable(
                        &[self.listener.as_fd()],
                        Some(Duration::from_millis(50)),
                        &mut [false],
                    );
                }
                Err(error) => {
                    eprintln!("pathlab server: accept failed: {error}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        for worker in workers {
            let _ = worker.join();
        }
    }
}

/// Decrements the active-test count when a test ends, however it ends.
struct ActiveTest<'a>(&'a AtomicU32);

impl Drop for ActiveTest<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Most probes in one train.
const MAX_TRAIN: u32 = 10_000;

/// Most parallel streams a TCP test may ask for, per direction.
pub const MAX_STREAMS: u32 = 128;

fn check_limits(test: &TestRequest, limits: &Limits) -> Result<(), Refusal> {
    let (size, count) = match *test {
        TestRequest::Tcp {
            streams,
            duration_ns,
            ..
        } => {
            if streams == 0 || streams > MAX_STREAMS {
                return Err(Refusal::BadRequest(format!(
                    "{streams} streams (1 to {MAX_STREAMS})"
                )));
            }
            if duration_ns > limits.max_duration_ns {
                return Err(Refusal::TooLong {
                    max_ns: limits.max_duration_ns,
                    asked_ns: duration_ns,
                });
            }
            return Ok(());
        }
        TestRequest::OneWay {
            size,
            count,
            rate_bps,
            ..
        } => {
            if rate_bps == 0 {
                return Err(Refusal::BadRequest("the rate is zero".into()));
            }
            (size, count)
        }
        TestRequest::PathMtu { max_size, .. } => (max_size, 1),
        TestRequest::Trains {
            size,
            length,
            trains,
            spacing_ns,
            period_ns,
            ..
        } => {
            let train_ns = u64::from(length.saturating_sub(1)).saturating_mul(spacing_ns);
            if length == 0 || length > MAX_TRAIN || trains == 0 || period_ns <= train_ns {
                return Err(Refusal::BadRequest(format!(
                    "trains of {length} probes (1 to {MAX_TRAIN}), {trains} of them, each within its period"
                )));
            }
            (size, u64::from(length) * u64::from(trains))
        }
        TestRequest::RoundTrip {
            size,
            count,
            interval_ns,
        } => {
            if interval_ns == 0 {
                return Err(Refusal::BadRequest("the interval is zero".into()));
            }
            (size, count)
        }
    };
    if size as usize > probe::MAX_LEN || count == 0 {
        return Err(Refusal::BadRequest(format!(
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
    Ok(())
}

fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    config: &ServerConfig,
    active: &AtomicU32,
    next_session: &AtomicU64,
) -> Result<String, MeasureError> {
    stream.set_nonblocking(false)?;
    let local = stream.local_addr()?;
    let mut connection = Connection::new(stream);
    let Message::Hello {
        nonce,
        authenticated,
        ..
    } = connection.receive(Duration::from_secs(10), "the client's hello")?
    else {
        return Err(MeasureError::Protocol(
            "the client did not start with hello".into(),
        ));
    };
    let client_nonce = control::nonce_from_hex(&nonce)
        .ok_or_else(|| MeasureError::Protocol("bad nonce".into()))?;
    if authenticated != config.key.is_some() {
        let message = if config.key.is_some() {
            "this server requires a pre-shared key (--psk)"
        } else {
            "this server has no pre-shared key; run without --psk"
        };
        connection.send(&Message::Error {
            message: message.into(),
        })?;
        return Err(MeasureError::Auth(message.into()));
    }
    let server_nonce = random_nonce()?;
    connection.send(&Message::Welcome {
        software: format!("pathlab {}", env!("CARGO_PKG_VERSION")),
        nonce: control::nonce_to_hex(&server_nonce),
        limits: config.limits,
    })?;
    connection.auth = config
        .key
        .clone()
        .map(|key| ControlAuth::new(key, client_nonce, server_nonce));
    let request = match connection.receive(Duration::from_secs(10), "the test request") {
        // A client that only checked the server is there (capacity and tune do, before
        // their steps) leaves without a test.
        Err(MeasureError::Closed(_)) => return Ok("left without asking for a test".into()),
        Err(MeasureError::Auth(problem)) => {
            // Said without a tag: the client cannot check a tag made with a key it lacks.
            connection.auth = None;
            connection.send(&Message::Error {
                message: "the request failed authentication: the keys differ".into(),
            })?;
            return Err(MeasureError::Auth(problem));
        }
        other => other?,
    };
    let Message::Request { test, client_port } = request else {
        return Err(MeasureError::Protocol("expected a test request".into()));
    };
    if let Err(refusal) = check_limits(&test, &config.limits) {
        connection.send(&Message::Refuse {
            refusal: refusal.clone(),
        })?;
        return Ok(format!("refused {test}: {refusal}"));
    }
    if active.fetch_add(1, Ordering::SeqCst) >= config.limits.max_tests {
        active.fetch_sub(1, Ordering::SeqCst);
        let refusal = Refusal::Busy {
            max_tests: config.limits.max_tests,
        };
        connection.send(&Message::Refuse {
            refusal: refusal.clone(),
        })?;
        return Ok(format!("refused: {refusal}"));
    }
    let _active = ActiveTest(active);
    let session = next_session.fetch_add(1, Ordering::SeqCst);
    let udp = UdpSocket::bind(SocketAddr::new(local.ip(), 0))?;
    prepare_probe_socket(&udp)?;
    let probe_key = connection.auth.as_ref().map(|auth| auth.probe_key(session));
    // A TCP test's streams connect to a listener of their own; its port goes in Accept.
    let data_listener = match &test {
        TestRequest::Tcp { window, mss, .. } => {
            let listener = TcpListener::bind(SocketAddr::new(local.ip(), 0))?;
            apply_tcp_options(
                listener.as_fd(),
                &TcpOptions {
                    window: *window,
                    mss: *mss,
                    congestion: None,
                },
            )?;
            Some(listener)
        }
        _ => None,
    };
    let server_port = match &data_listener {
        Some(listener) => listener.local_addr()?.port(),
        None => udp.local_addr()?.port(),
    };
    connection.send(&Message::Accept {
        session,
        server_port,
    })?;
    DATA_LISTENER.with(|slot| *slot.borrow_mut() = data_listener);
    let client = SocketAddr::new(peer.ip(), client_port);
    let deadline = Duration::from_nanos(test.duration_ns()) + Duration::from_secs(10);
    match test {
        TestRequest::OneWay { .. } | TestRequest::Trains { .. } => {
            let (direction, size, count, schedule) = test.one_way().expect("a one-way test");
            match direction {
                Direction::Up => {
                    let expected = Expected {
                        session,
                        from: peer.ip(),
                        key: probe_key.as_ref(),
                        size,
                        count,
                    };
                    let (arrivals, rejected, _, _) =
                        receive_one_way(&udp, &mut connection, &expected, deadline)?;
                    let received = arrivals.len() as u64;
                    for chunk in arrivals.chunks(RECORDS_PER_CHUNK) {
                        connection.send(&Message::Received {
                            probes: chunk.to_vec(),
                        })?;
                    }
                    connection.send(&Message::Done { received, rejected })?;
                    Ok(format!("{test}: received {received}, rejected {rejected}"))
                }
                Direction::Down => {
                    udp.connect(client)?;
                    let (sent, duration_ns) =
                        send_probes(&udp, session, probe_key.as_ref(), &schedule, size, count)?;
                    connection.send(&Message::Sent {
                        count: sent,
                        duration_ns,
                    })?;
                    let done = connection.receive(deadline, "the client's results")?;
                    Ok(format!("{test}: sent {sent}, {}", describe_done(&done)))
                }
            }
        }
        TestRequest::Tcp {
            streams,
            direction,
            duration_ns,
            interval_ns,
            sample_ns,
            ref window,
            ref mss,
            ref congestion,
        } => {
            drop(udp);
            let options = TcpOptions {
                window: *window,
                mss: *mss,
                congestion: congestion.clone(),
            };
            let line = serve_tcp(
                &mut connection,
                session,
                local.ip(),
                streams,
                direction,
                duration_ns,
                interval_ns,
                sample_ns,
                &options,
            )?;
            Ok(format!("{test}: {line}"))
        }
        TestRequest::PathMtu {
            direction,
            max_size,
        } => {
            let line = mtu::serve(
                &udp,
                &mut connection,
                session,
                client,
                probe_key.as_ref(),
                direction,
                max_size,
            )?;
            Ok(format!("{test}: {line}"))
        }
        TestRequest::RoundTrip { .. } => {
            let (received, rejected) = reflect_probes(
                &udp,
                &mut connection,
                session,
                peer.ip(),
                probe_key.as_ref(),
                deadline,
            )?;
            connection.send(&Message::Done { received, rejected })?;
            Ok(format!("{test}: reflected {received}, rejected {rejected}"))
        }
    }
}

/// The client's closing message of a downward one-way test, for the log.
fn describe_done(done: &Message) -> String {
    match done {
        Message::Done { received, rejected } => {
            format!("the client received {received}, rejected {rejected}")
        }
        other => format!("the client ended with {other:?}"),
    }
}

/// Probes sent in one `sendmmsg` at most: when the schedule is behind (rates above what one
/// system call per probe keeps up with), what is due goes out together.
const SEND_BATCH: usize = 64;

/// Sends up to `count` one-way probes on `schedule`; returns how many went out and the
/// time from the first to the last. Each probe is stamped when it is written, so probes
/// sent in one batch (a late schedule, or a back-to-back train) carry their real send
/// time. A sender that cannot keep up stops when the test's time is over by half plus a
/// second, and says how many it sent: the receiver counts loss against that, and the
/// report shows the rate achieved.
fn send_probes(
    udp: &UdpSocket,
    session: u64,
    key: Option<&Key>,
    schedule: &Schedule,
    size: u32,
    count: u64,
) -> io::Result<(u64, u64)> {
    let due = |seq: u64| Duration::from_nanos(schedule.due_ns(seq) as u64);
    let give_up =
        Duration::from_nanos(schedule.duration_ns(count)).mul_f64(1.5) + Duration::from_secs(1);
    let mut padding = [0u8; 4096];
    sys::random_bytes(&mut padding)?;
    let mut batch: Vec<Vec<u8>> = (0..SEND_BATCH)
        .map(|_| Vec::with_capacity(size as usize + 64))
        .collect();
    let start = Instant::now();
    let mut last = start;
    let mut seq = 0;
    while seq < count {
        pace_until(start + due(seq));
        let now = Instant::now();
        if now - start > give_up {
            break;
        }
        let mut n = 0;
        while n < SEND_BATCH
            && seq + (n as u64) < count
            && (n == 0 || start + due(seq + n as u64) <= now)
        {
            let this = seq + n as u64;
            let header = Probe {
                kind: ProbeKind::OneWay,
                session,
                seq: this,
                sent_ns: now_ns(),
                reflection: Reflection::default(),
            };
            probe::encode(
                &header,
                size as usize,
                key,
                &mut |pad| fill_padding(pad, &padding, this),
                &mut batch[n],
            )
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            n += 1;
        }
        let packets: Vec<&[u8]> = batch[..n].iter().map(Vec::as_slice).collect();
        // A full socket buffer loses probes as a congested path would: they count as sent
        // and, not arriving, as lost.
        let _ = sys::send_batch(udp.as_fd(), &packets);
        seq += n as u64;
        last = Instant::now();
    }
    Ok((seq, (last - start).as_nanos() as u64))
}

/// Random-looking padding without a random call per probe: a window into a random block.
fn fill_padding(pad: &mut [u8], random: &[u8; 4096], seq: u64) {
    let offset = (seq as usize * 131) % random.len();
    for (i, byte) in pad.iter_mut().enumerate() {
        *byte = random[(offset + i) % random.len()];
    }
}

/// Sleeps until 200 us before `due`, then spins (the kernel's sleep is tens of us late).
fn pace_until(due: Instant) {
    let now = Instant::now();
    if due > now + Duration::from_micros(200) {
        std::thread::sleep((due - now).saturating_sub(Duration::from_micros(200)));
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// Reflects round-trip requests of `session` until the client's `Sent` plus a grace
/// period; returns (reflected, rejected).
fn reflect_probes(
    udp: &UdpSocket,
    connection: &mut Connection,
    session: u64,
    from: IpAddr,
    key: Option<&Key>,
    deadline: Duration,
) -> Result<(u64, u64), MeasureError> {
    let started = Instant::now();
    let mut buffer = vec![0u8; probe::MAX_LEN + 1];
    let (mut received, mut rejected) = (0u64, 0u64);
    let mut finish_by: Option<Instant> = None;
    loop {
        let mut ready = [false];
        let _ = sys::poll_readable(&[udp.as_fd()], Some(Duration::from_millis(5)), &mut ready);
        if ready[0] {
            udp.set_nonblocking(true)?;
            while let Ok((len, source, kernel_ns)) = sys::recv_timestamped(udp.as_fd(), &mut buffer)
            {
                let received_ns = kernel_ns.unwrap_or_else(now_ns);
                let ok = matches!(probe::decode(&buffer[..len], key), Ok(p) if p.session == session && p.kind == ProbeKind::Request)
                    && source.ip() == from;
                if !ok {
                    rejected += 1;
                    continue;
                }
                received += 1;
                let reflection = Reflection {
                    received_ns,
                    sent_ns: now_ns(),
                    received_count: received,
                };
                // Same length as the request: no amplification.
                if probe::reflect(&mut buffer[..len], reflection, key).is_ok() {
                    let _ = udp.send_to(&buffer[..len], source);
                }
            }
        }
        if finish_by.is_none() {
            if let Some(message) = connection.poll(Duration::ZERO)? {
                match message {
                    Message::Sent { .. } => finish_by = Some(Instant::now() + GRACE),
                    other => {
                        return Err(MeasureError::Protocol(format!(
                            "unexpected {other:?} during the test"
                        )))
                    }
                }
            }
        }
        if finish_by.is_some_and(|t| Instant::now() >= t) {
            return Ok((received, rejected));
        }
        if started.elapsed() > deadline {
            return Err(MeasureError::Timeout("the end of the test"));
        }
    }
}

/// A client's connection to a server, after the hello exchange.
#[derive(Debug)]
pub struct Client {
    connection: Connection,
    server: SocketAddr,
    /// The server's limits.
    pub limits: Limits,
}

impl Client {
    /// Connects to `host` (a name or address, with or without `:port`), exchanges hellos,
    /// and sets up authentication when `key` is given.
    pub fn connect(
        host: &str,
        key: Option<Key>,
        timeout: Duration,
    ) -> Result<Client, MeasureError> {
        let with_port = if host.parse::<IpAddr>().is_ok() || !host.contains(':') {
            match host.parse::<IpAddr>() {
                Ok(IpAddr::V6(v6)) => format!("[{v6}]:{DEFAULT_PORT}"),
                _ => format!("{host}:{DEFAULT_PORT}"),
            }
        } else {
            host.to_owned()
        };
        let address = with_port
            .to_socket_addrs()
            .map_err(|_| MeasureError::Resolve(host.to_owned()))?
            .next()
            .ok_or_else(|| MeasureError::Resolve(host.to_owned()))?;
        let stream = TcpStream::connect_timeout(&address, timeout).map_err(|source| {
            MeasureError::Unreachable {
                address: address.to_string(),
                why: source,
            }
        })?;
        let mut connection = Connection::new(stream);
        let client_nonce = random_nonce()?;
        connection.send(&Message::Hello {
            software: format!("pathlab {}", env!("CARGO_PKG_VERSION")),
            nonce: control::nonce_to_hex(&client_nonce),
            authenticated: key.is_some(),
        })?;
        match connection.receive(timeout.max(Duration::from_secs(5)), "the server's welcome")? {
            Message::Welcome { nonce, limits, .. } => {
                let server_nonce = control::nonce_from_hex(&nonce)
                    .ok_or_else(|| MeasureError::Protocol("bad nonce".into()))?;
                connection.auth = key.map(|key| ControlAuth::new(key, client_nonce, server_nonce));
                Ok(Client {
                    connection,
                    server: address,
                    limits,
                })
            }
            Message::Error { message } => Err(MeasureError::Auth(message)),
            other => Err(MeasureError::Protocol(format!(
                "expected a welcome, got {other:?}"
            ))),
        }
    }

    /// Asks for `test`; returns the session, the server's UDP address and the probe key.
    fn request(
        &mut self,
        test: TestRequest,
        client_port: u16,
    ) -> Result<(u64, SocketAddr, Option<Key>), MeasureError> {
        self.connection
            .send(&Message::Request { test, client_port })?;
        match self
            .connection
            .receive(Duration::from_secs(10), "the server's answer")?
        {
            Message::Accept {
                session,
                server_port,
            } => {
                let key = self
                    .connection
                    .auth
                    .as_ref()
                    .map(|auth| auth.probe_key(session));
                Ok((session, SocketAddr::new(self.server.ip(), server_port), key))
            }
            Message::Refuse { refusal } => Err(MeasureError::Refused(refusal)),
            Message::Error { message } => Err(MeasureError::Remote(message)),
            other => Err(MeasureError::Protocol(format!(
                "expected accept or refuse, got {other:?}"
            ))),
        }
    }

    fn udp_socket(&self) -> io::Result<UdpSocket> {
        let unspecified: IpAddr = if self.server.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        let udp = UdpSocket::bind(SocketAddr::new(unspecified, 0))?;
        prepare_probe_socket(&udp)?;
        Ok(udp)
    }

    /// Runs a one-way test in `direction` and analyses it (deviation window `window`).
    pub fn one_way(
        self,
        direction: Direction,
        rate_bps: u64,
        size: u32,
        count: u64,
        window: usize,
    ) -> Result<OneWayResult, MeasureError> {
        self.start_one_way(direction, rate_bps, size, count, window)?
            .run()
    }

    /// Asks for a one-way test and stops once the server has accepted it, its probe socket
    /// open: [`OneWayTest::run`] runs it. In between, the addresses of both probe sockets
    /// are known (what a test of the receivers' defences needs).
    pub fn start_one_way(
        self,
        direction: Direction,
        rate_bps: u64,
        size: u32,
        count: u64,
        window: usize,
    ) -> Result<OneWayTest, MeasureError> {
        self.start_probes(
            TestRequest::OneWay {
                direction,
                rate_bps,
                size,
                count,
            },
            window,
        )
    }

    /// Sends `trains` trains of `length` probes of `size` bytes in `direction`, a train
    /// every `period`, its probes `spacing` apart (zero: back to back); returns what the
    /// receiver recorded.
    pub fn trains(
        self,
        direction: Direction,
        size: u32,
        length: u32,
        trains: u32,
        spacing: Duration,
        period: Duration,
    ) -> Result<ProbeArrivals, MeasureError> {
        self.start_probes(
            TestRequest::Trains {
                direction,
                size,
                length,
                trains,
                spacing_ns: spacing.as_nanos() as u64,
                period_ns: period.as_nanos() as u64,
            },
            0,
        )?
        .run_raw()
    }

    fn start_probes(
        mut self,
        test: TestRequest,
        window: usize,
    ) -> Result<OneWayTest, MeasureError> {
        let (direction, size, count, schedule) = test.one_way().expect("a one-way test");
        let udp = self.udp_socket()?;
        let deadline = Duration::from_nanos(test.duration_ns()) + Duration::from_secs(10);
        let rate_bps = test.rate_bps();
        let (session, server, key) = self.request(test, udp.local_addr()?.port())?;
        Ok(OneWayTest {
            client: self,
            deadline,
            udp,
            session,
            server,
            key,
            schedule,
            sender: SenderReport {
                direction,
                rate_bps,
                size,
                sent: count,
                duration_ns: 0,
            },
            window,
        })
    }
}

/// What the receiving end of a one-way test recorded, and what the sender says it sent.
#[derive(Debug, Clone)]
pub struct ProbeArrivals {
    /// Every accepted probe in arrival order (duplicates included).
    pub arrivals: Vec<ReceivedProbe>,
    /// Datagrams the receiver rejected.
    pub rejected: u64,
    /// Probes the sender sent.
    pub sent: u64,
    /// From the sender's first probe to its last, ns.
    pub duration_ns: u64,
}

/// A one-way test the server has accepted, not yet run.
#[derive(Debug)]
pub struct OneWayTest {
    client: Client,
    udp: UdpSocket,
    session: u64,
    server: SocketAddr,
    key: Option<Key>,
    schedule: Schedule,
    /// The test as asked (`sent` is the count asked for).
    sender: SenderReport,
    window: usize,
    /// When the receiving end gives up: the test's time plus 10 s.
    deadline: Duration,
}

impl OneWayTest {
    /// Where the server receives (up) or sends (down) this test's probes.
    pub fn server_probe_address(&self) -> SocketAddr {
        self.server
    }

    /// The session number the server gave the test (in every probe).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Where this client sends (up) or receives (down) this test's probes.
    pub fn local_probe_address(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    /// Runs the test and analyses it.
    pub fn run(self) -> Result<OneWayResult, MeasureError> {
        let (sender, window) = (self.sender, self.window);
        let run = self.run_raw()?;
        Ok(one_way_result(
            SenderReport {
                sent: run.sent,
                duration_ns: run.duration_ns,
                ..sender
            },
            &run.arrivals,
            run.rejected,
            window,
        ))
    }

    /// Runs the test; returns what the receiver recorded.
    pub fn run_raw(mut self) -> Result<ProbeArrivals, MeasureError> {
        let SenderReport {
            direction,
            size,
            sent: count,
            ..
        } = self.sender;
        let deadline = self.deadline;
        let connection = &mut self.client.connection;
        let (arrivals, rejected, sent, duration_ns) = match direction {
            Direction::Up => {
                self.udp.connect(self.server)?;
                let (sent, duration_ns) = send_probes(
                    &self.udp,
                    self.session,
                    self.key.as_ref(),
                    &self.schedule,
                    size,
                    count,
                )?;
                connection.send(&Message::Sent {
                    count: sent,
                    duration_ns,
                })?;
                let mut arrivals = Vec::new();
                loop {
                    match connection.receive(deadline, "the server's results")? {
                        Message::Received { probes } => arrivals.extend(probes),
                        Message::Done { rejected, .. } => {
                            break (arrivals, rejected, sent, duration_ns);
                        }
                        Message::Error { message } => return Err(MeasureError::Remote(message)),
                        other => {
                            return Err(MeasureError::Protocol(format!("unexpected {other:?}")))
                        }
                    }
                }
            }
            Direction::Down => {
                let expected = Expected {
                    session: self.session,
                    from: self.server.ip(),
                    key: self.key.as_ref(),
                    size,
                    count,
                };
                let (arrivals, rejected, sent, duration_ns) =
                    receive_one_way(&self.udp, connection, &expected, deadline)?;
                connection.send(&Message::Done {
                    received: arrivals.len() as u64,
                    rejected,
                })?;
                (arrivals, rejected, sent, duration_ns)
            }
        };
        Ok(ProbeArrivals {
            arrivals,
            rejected,
            sent,
            duration_ns,
        })
    }
}

impl Client {
    /// Runs `count` isochronous round trips, one every `interval`, of `size` bytes.
    pub fn round_trip(
        mut self,
        interval: Duration,
        size: u32,
        count: u64,
    ) -> Result<RttReport, MeasureError> {
        let udp = self.udp_socket()?;
        let test = TestRequest::RoundTrip {
            interval_ns: interval.as_nanos() as u64,
            size,
            count,
        };
        let (session, server, key) = self.request(test, udp.local_addr()?.port())?;
        udp.connect(server)?;
        udp.set_nonblocking(true)?;
        let mut padding = [0u8; 4096];
        sys::random_bytes(&mut padding)?;
        let mut bytes = Vec::with_capacity(size as usize + 64);
        let mut buffer = vec![0u8; probe::MAX_LEN + 1];
        let mut replies = Vec::with_capacity(count as usize);
        let mut send_errors = Vec::with_capacity(count as usize);
        let start = Instant::now();
        let mut seq = 0;
        let mut collect = |replies: &mut Vec<RoundTrip>| {
            while let Ok((len, _, kernel_ns)) = sys::recv_timestamped(udp.as_fd(), &mut buffer) {
                let received_ns = kernel_ns.unwrap_or_else(now_ns);
                if let Ok(p) = probe::decode(&buffer[..len], key.as_ref()) {
                    if p.session == session && p.kind == ProbeKind::Reply {
                        replies.push(RoundTrip {
                            seq: p.seq,
                            sent_ns: p.sent_ns,
                            reflector_received_ns: p.reflection.received_ns,
                            reflector_sent_ns: p.reflection.sent_ns,
                            received_ns,
                        });
                    }
                }
            }
        };
        while seq < count {
            let due = start + interval.mul_f64(seq as f64);
            let now = Instant::now();
            if now >= due {
                let header = Probe {
                    kind: ProbeKind::Request,
                    session,
                    seq,
                    sent_ns: now_ns(),
                    reflection: Reflection::default(),
                };
                probe::encode(
                    &header,
                    size as usize,
                    key.as_ref(),
                    &mut |pad| fill_padding(pad, &padding, seq),
                    &mut bytes,
                )
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let _ = udp.send(&bytes);
                send_errors.push(now.duration_since(due).as_nanos() as u64);
                seq += 1;
                continue;
            }
            let left = due - now;
            if left > Duration::from_micros(300) {
                let _ = sys::poll_readable(
                    &[udp.as_fd()],
                    Some(left.saturating_sub(Duration::from_micros(200))),
                    &mut [false],
                );
            }
            collect(&mut replies);
        }
        let sending = start.elapsed();
        // Replies still on their way: wait up to a second (or ten round trips) for them.
        let slowest = replies
            .iter()
            .map(RoundTrip::rtt_ns)
            .max()
            .unwrap_or(0)
            .max(0) as u64;
        let wait_until = Instant::now()
            + Duration::from_nanos(slowest.saturating_mul(10))
                .clamp(Duration::from_millis(200), Duration::from_secs(1));
        while (replies.len() as u64) < count && Instant::now() < wait_until {
            let _ = sys::poll_readable(
                &[udp.as_fd()],
                Some(Duration::from_millis(10)),
                &mut [false],
            );
            collect(&mut replies);
        }
        self.connection.send(&Message::Sent {
            count,
            duration_ns: sending.as_nanos() as u64,
        })?;
        match self
            .connection
            .receive(Duration::from_secs(10), "the reflector's count")?
        {
            Message::Done { received, .. } => {
                collect(&mut replies);
                Ok(rtt::analyse(&replies, count, received, &send_errors))
            }
            Message::Error { message } => Err(MeasureError::Remote(message)),
            other => Err(MeasureError::Protocol(format!("unexpected {other:?}"))),
        }
    }
}

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

/// Datagrams taken from the socket per `recvmmsg`.
const RECEIVE_BATCH: usize = 64;

/// What the receiver of a one-way test accepts: probes of `session` from `from`, `size`
/// bytes long, authenticated with `key` when there is one; `count` of them at most.
#[derive(Debug)]
struct Expected<'a> {
    session: u64,
    from: IpAddr,
    key: Option<&'a Key>,
    size: u32,
    count: u64,
}

/// The receiving side of a one-way test (the server for up, the client for down): every
/// accepted probe, in arrival order, until the sender's `Sent` plus a grace period; with
/// the rejected count and what the sender says it sent.
fn receive_one_way(
    udp: &UdpSocket,
    connection: &mut Connection,
    expected: &Expected<'_>,
    deadline: Duration,
) -> Result<(Vec<ReceivedProbe>, u64, u64, u64), MeasureError> {
    let Expected {
        session,
        from,
        key,
        size,
        count,
    } = *expected;
    let started = Instant::now();
    let mut arrivals = Vec::with_capacity(count.min(10_000_000) as usize);
    let mut rejected = 0;
    // A probe longer than the test's size is not one of its probes: the slot holds one byte
    // more, so such a datagram shows as truncated.
    let mut batch = sys::RecvBatch::new(RECEIVE_BATCH, size as usize + 1);
    let mut sent: Option<(u64, u64, Instant)> = None;
    loop {
        let mut ready = [false];
        let _ = sys::poll_readable(&[udp.as_fd()], Some(Duration::from_millis(5)), &mut ready);
        while batch.recv(udp.as_fd())? > 0 {
            for datagram in batch.datagrams() {
                let received_ns = datagram.kernel_ns.unwrap_or_else(now_ns);
                match probe::decode(datagram.data, key) {
                    Ok(p)
                        if !datagram.truncated
                            && p.session == session
                            && p.kind == ProbeKind::OneWay
                            && datagram.source.ip() == from =>
                    {
                        arrivals.push(ReceivedProbe {
                            seq: p.seq,
                            sent_ns: p.sent_ns,
                            received_ns,
                        });
                    }
                    _ => rejected += 1,
                }
            }
        }
        if sent.is_none() {
            if let Some(message) = connection.poll(Duration::ZERO)? {
                match message {
                    Message::Sent { count, duration_ns } => {
                        sent = Some((count, duration_ns, Instant::now() + GRACE));
                    }
                    Message::Error { message } => return Err(MeasureError::Remote(message)),
                    other => {
                        return Err(MeasureError::Protocol(format!(
                            "unexpected {other:?} during the test"
                        )))
                    }
                }
            }
        }
        if let Some((count, duration_ns, finish_by)) = sent {
            if Instant::now() >= finish_by {
                return Ok((arrivals, rejected, count, duration_ns));
            }
        }
        if started.elapsed() > deadline {
            return Err(MeasureError::Timeout("the probes"));
        }
    }
}

/// Socket options of a TCP test.
#[derive(Debug, Clone, Default)]
pub struct TcpOptions {
    /// SO_SNDBUF and SO_RCVBUF, bytes.
    pub window: Option<u32>,
    /// TCP_MAXSEG, bytes.
    pub mss: Option<u32>,
    /// TCP_CONGESTION (senders only).
    pub congestion: Option<String>,
}

/// Bytes written per `write` by a TCP sender.
const TCP_CHUNK: usize = 128 * 1024;
/// Bytes of a data connection's greeting: session, stream index, direction.
const GREETING_LEN: usize = 16;

fn apply_tcp_options(fd: std::os::fd::BorrowedFd<'_>, options: &TcpOptions) -> io::Result<()> {
    if let Some(window) = options.window {
        let window = window as i32;
        sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &window)?;
        sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &window)?;
    }
    if let Some(mss) = options.mss {
        sys::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, &(mss as i32))?;
    }
    if let Some(algorithm) = &options.congestion {
        sys::setsockopt_bytes(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            algorithm.as_bytes(),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("congestion control '{algorithm}': {e}")))?;
    }
    Ok(())
}

/// Connects a data stream with the options set before the handshake (window scaling and
/// MSS are negotiated in it) and sends the greeting.
fn connect_stream(
    server: SocketAddr,
    options: &TcpOptions,
    session: u64,
    index: u32,
    down: bool,
) -> io::Result<TcpStream> {
    let domain = if server.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let socket = sys::socket(domain, libc::SOCK_STREAM, 0)?;
    apply_tcp_options(
        socket.as_fd(),
        &TcpOptions {
            congestion: if down {
                None
            } else {
                options.congestion.clone()
            },
            ..options.clone()
        },
    )?;
    sys::connect(socket.as_fd(), server)?;
    let mut stream = TcpStream::from(socket);
    let mut greeting = [0u8; GREETING_LEN];
    greeting[..8].copy_from_slice(&session.to_be_bytes());
    greeting[8..12].copy_from_slice(&index.to_be_bytes());
    greeting[12] = u8::from(down);
    stream.write_all(&greeting)?;
    Ok(stream)
}

fn sample(stream: &TcpStream, start: Instant) -> Option<TcpSample> {
    let info = sys::tcp_info(stream.as_fd()).ok()?;
    Some(TcpSample {
        at_ns: start.elapsed().as_nanos() as u64,
        cwnd: info.tcpi_snd_cwnd,
        ssthresh: info.tcpi_snd_ssthresh,
        srtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        retrans_segments: info.tcpi_total_retrans,
        retrans_bytes: info.tcpi_bytes_retrans,
        sent_bytes: info.tcpi_bytes_sent,
        delivery_rate: info.tcpi_delivery_rate,
        pacing_rate: info.tcpi_pacing_rate,
        mss: info.tcpi_snd_mss,
    })
}

/// Unsent bytes a sender keeps in its socket (TCP_NOTSENT_LOWAT): 50 ms at the rate TCP
/// delivers, at least two writes. Without a bound a large window on a slow path holds
/// seconds of data that drain after the test's time is over (4 MB at 10 Mbit/s is 3.4 s),
/// and the test overruns by that much. Where 50 ms is more than a default send buffer
/// holds anyway (above 640 Mbit/s) the bound is lifted (0: the kernel's default, none):
/// any bound there measured a few percent slower on loopback. What is in flight (cwnd) is
/// not affected either way.
fn unsent_bytes(delivery_rate: u64) -> u64 {
    const TIME: f64 = 0.05;
    const MIN: u64 = 2 * TCP_CHUNK as u64;
    const NO_BOUND_FROM: u64 = 4 << 20;
    let bytes = ((delivery_rate as f64 * TIME) as u64).max(MIN);
    if bytes >= NO_BOUND_FROM {
        0
    } else {
        bytes
    }
}

/// Sends for `duration`, sampling TCP_INFO every `sample_every`. One thread does both: the
/// socket is non-blocking and the thread sleeps in poll until it can write or the next
/// sample is due. (A second thread sampling while this one writes contends for the socket
/// lock, which cost a tenth of the throughput on loopback.)
fn send_stream(
    mut stream: TcpStream,
    index: u32,
    duration: Duration,
    sample_every: Duration,
) -> io::Result<StreamReport> {
    let start = Instant::now();
    let end = start + duration;
    let limit_unsent = |stream: &TcpStream, bytes: u64| {
        let _ = sys::setsockopt(
            stream.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            &(bytes as libc::c_int),
        );
    };
    limit_unsent(&stream, unsent_bytes(0));
    stream.set_nonblocking(true)?;
    let mut chunk_storage = vec![0x5au8; TCP_CHUNK + PAGE];
    let chunk = page_aligned(&mut chunk_storage);
    let mut offset = 0;
    let mut samples = Vec::new();
    let mut next_sample = start;
    loop {
        let now = Instant::now();
        if now >= next_sample {
            if let Some(taken) = sample(&stream, start) {
                limit_unsent(&stream, unsent_bytes(taken.delivery_rate));
                samples.push(taken);
            }
            next_sample = (next_sample + sample_every).max(now);
        }
        if now >= end {
            break;
        }
        match stream.write(&chunk[offset..]) {
            Ok(n) => offset = (offset + n) % TCP_CHUNK,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                sys::poll_writable(stream.as_fd(), next_sample.min(end) - now)?;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    stream.set_nonblocking(false)?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Wait for the receiver to close: its last ACKs belong in the samples.
    let mut sink = [0u8; 64];
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.read(&mut sink);
    samples.extend(sample(&stream, start));
    Ok(StreamReport {
        index,
        samples,
        ..StreamReport::default()
    })
}

const PAGE: usize = 4096;

/// `TCP_CHUNK` bytes of `storage` (`TCP_CHUNK + PAGE` long) starting on a page boundary:
/// the kernel copies to and from page-aligned buffers fastest (the allocator's large
/// blocks start 16 bytes into a page).
fn page_aligned(storage: &mut [u8]) -> &mut [u8] {
    let skip = storage.as_ptr().align_offset(PAGE);
    &mut storage[skip..skip + TCP_CHUNK]
}

/// Receives until the sender closes, counting bytes per interval.
fn receive_stream(
    mut stream: TcpStream,
    index: u32,
    interval: Duration,
) -> io::Result<StreamReport> {
    let start = Instant::now();
    let mut counter = IntervalCounter::new(interval.as_nanos() as u64);
    let mut storage = vec![0u8; TCP_CHUNK + PAGE];
    let buffer = page_aligned(&mut storage);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    loop {
        let n = stream.read(buffer)?;
        if n == 0 {
            break;
        }
        counter.add(start.elapsed().as_nanos() as u64, n as u64);
    }
    let receive_ns = start.elapsed().as_nanos() as u64;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(StreamReport {
        index,
        interval_bytes: counter.intervals,
        bytes: counter.total,
        receive_ns,
        samples: Vec::new(),
    })
}

/// Runs one stream's end in a thread: sends if `send`, else receives. With the CPU time
/// the thread used: a test's CPU is the sum over its threads, not the process's, which
/// may run other tests (a server, a lab) at the same time.
fn stream_thread(
    stream: TcpStream,
    index: u32,
    send: bool,
    duration: Duration,
    interval: Duration,
    sample_every: Duration,
) -> std::thread::JoinHandle<io::Result<(StreamReport, Duration)>> {
    std::thread::spawn(move || {
        let report = if send {
            send_stream(stream, index, duration, sample_every)?
        } else {
            receive_stream(stream, index, interval)?
        };
        Ok((report, sys::thread_cpu_time()))
    })
}

/// A stream's thread, and whether the stream runs downwards.
type StreamThread = (
    bool,
    std::thread::JoinHandle<io::Result<(StreamReport, Duration)>>,
);

/// Waits for every stream of one end of a test: its upward and downward reports, each in
/// index order, and the CPU time of the test on this end (the streams' threads plus what
/// the calling thread used since `control_cpu_start`).
fn join_streams(
    threads: Vec<StreamThread>,
    control_cpu_start: Duration,
) -> io::Result<(Vec<StreamReport>, Vec<StreamReport>, Duration)> {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let mut cpu = sys::thread_cpu_time().saturating_sub(control_cpu_start);
    for (is_down, thread) in threads {
        let (report, stream_cpu) = thread.join().expect("stream threads do not panic")?;
        cpu += stream_cpu;
        if is_down {
            down.push(report);
        } else {
            up.push(report);
        }
    }
    up.sort_by_key(|s| s.index);
    down.sort_by_key(|s| s.index);
    Ok((up, down, cpu))
}

#[allow(clippy::too_many_arguments)]
fn serve_tcp(
    connection: &mut Connection,
    session: u64,
    _local: IpAddr,
    streams: u32,
    direction: TcpDirection,
    duration_ns: u64,
    interval_ns: u64,
    sample_ns: u64,
    options: &TcpOptions,
) -> Result<String, MeasureError> {
    let listener = DATA_LISTENER
        .with(|slot| slot.borrow_mut().take())
        .expect("a TCP test has a data listener");
    let expected = match direction {
        TcpDirection::Both => 2 * streams,
        _ => streams,
    } as usize;
    let control_cpu_start = sys::thread_cpu_time();
    let duration = Duration::from_nanos(duration_ns);
    let interval = Duration::from_nanos(interval_ns.max(1));
    let sample_every = Duration::from_nanos(sample_ns.max(1_000_000));
    let mut threads = Vec::new();
    let accept_deadline = Instant::now() + Duration::from_secs(10);
    listener.set_nonblocking(true)?;
    while threads.len() < expected {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false)?;
                let mut greeting = [0u8; GREETING_LEN];
                stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                if stream.read_exact(&mut greeting).is_err()
                    || u64::from_be_bytes(greeting[..8].try_into().expect("8 bytes")) != session
                {
                    continue;
                }
                let index = u32::from_be_bytes(greeting[8..12].try_into().expect("4 bytes"));
                let down = greeting[12] == 1;
                if down {
                    if let Some(algorithm) = &options.congestion {
                        sys::setsockopt_bytes(
                            stream.as_fd(),
                            libc::IPPROTO_TCP,
                            libc::TCP_CONGESTION,
                            algorithm.as_bytes(),
                        )?;
                    }
                }
                threads.push((
                    down,
                    stream_thread(stream, index, down, duration, interval, sample_every),
                ));
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > accept_deadline {
                    return Err(MeasureError::Timeout("the test's TCP streams"));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(error) => return Err(error.into()),
        }
    }
    let (up, down, cpu) = join_streams(threads, control_cpu_start)?;
    let cpu_ns = cpu.as_nanos() as u64;
    let received: u64 = up.iter().map(|s| s.bytes).sum();
    connection.send(&Message::TcpReport { up, down, cpu_ns })?;
    Ok(format!(
        "received {received} bytes, cpu {:.2} s",
        cpu_ns as f64 * 1e-9
    ))
}

/// A TCP test as the client asks for it.
#[derive(Debug, Clone)]
pub struct TcpTest {
    /// Parallel streams per direction.
    pub streams: u32,
    /// Which way.
    pub direction: TcpDirection,
    /// How long.
    pub duration: Duration,
    /// Reporting interval.
    pub interval: Duration,
    /// TCP_INFO sampling period.
    pub sample_every: Duration,
    /// Socket options.
    pub options: TcpOptions,
}

impl Client {
    /// Runs a bulk TCP test.
    pub fn tcp(mut self, test: &TcpTest) -> Result<TcpTestReport, MeasureError> {
        let request = TestRequest::Tcp {
            streams: test.streams,
            direction: test.direction,
            duration_ns: test.duration.as_nanos() as u64,
            interval_ns: test.interval.as_nanos() as u64,
            sample_ns: test.sample_every.as_nanos() as u64,
            window: test.options.window,
            mss: test.options.mss,
            congestion: test.options.congestion.clone(),
        };
        let (session, server, _) = self.request(request, 0)?;
        let control_cpu_start = sys::thread_cpu_time();
        let mut threads = Vec::new();
        let directions: &[bool] = match test.direction {
            TcpDirection::Up => &[false],
            TcpDirection::Down => &[true],
            TcpDirection::Both => &[false, true],
        };
        for &down in directions {
            for index in 0..test.streams {
                let stream =
                    connect_stream(server, &test.options, session, index, down).map_err(|why| {
                        MeasureError::Unreachable {
                            address: server.to_string(),
                            why,
                        }
                    })?;
                // The client sends the upward streams and receives the downward ones.
                threads.push((
                    down,
                    stream_thread(
                        stream,
                        index,
                        !down,
                        test.duration,
                        test.interval,
                        test.sample_every,
                    ),
                ));
            }
        }
        let (sent_up, received_down, client_cpu) = join_streams(threads, control_cpu_start)?;
        let deadline = Duration::from_secs(30);
        match self.connection.receive(deadline, "the server's report")? {
            Message::TcpReport { up, down, cpu_ns } => {
                let up = tcp_report::merge_streams(&up, &sent_up);
                let down = tcp_report::merge_streams(&received_down, &down);
                Ok(TcpTestReport {
                    interval_ns: test.interval.as_nanos() as u64,
                    up_bps: tcp_report::goodput_bps(&up),
                    down_bps: tcp_report::goodput_bps(&down),
                    up,
                    down,
                    client_cpu_s: client_cpu.as_secs_f64(),
                    server_cpu_s: cpu_ns as f64 * 1e-9,
                })
            }
            Message::Error { message } => Err(MeasureError::Remote(message)),
            other => Err(MeasureError::Protocol(format!("unexpected {other:?}"))),
        }
    }
}
