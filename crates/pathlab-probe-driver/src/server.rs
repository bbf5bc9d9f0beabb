//! `pathlab server`'s driver: one event loop for every connection's handshake, a thread
//! per accepted test.
//!
//! Bounds (an open server meets scanners and floods): connections in their handshake at
//! most `max_handshakes`, the oldest dropped to make room for a new one (a flood of idle
//! connections cannot lock real clients out, it only shortens everyone's patience); at
//! most `max_clients` connections from one source address, refused with a message beyond
//! that; a handshake must be done in [`HANDSHAKE_TIMEOUT`]; tests at most `max_tests`. On
//! stop, handshakes are closed and every running test tells its client the server is
//! shutting down, within a fraction of a second.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pathlab_probe::auth::Way;
use pathlab_probe::control::{self, Direction, Limits, Message, Refusal, TestRequest};
use pathlab_probe::probe::{self, ProbeKind, Reflection};
use pathlab_probe::session::{
    Reflector, Rejections, Running, ServerEvent, ServerPolicy, ServerSession, SessionError,
};

use crate::conn::StalledClient;
use crate::counters::{MeasurementServerCounters, Moved, RefusalReason, TestKind, TestOutcome};
use crate::probes::{receive_one_way, send_probes};
use crate::streams::{serve_tcp, TcpOptions};
use crate::{clock, mtu, prepare_probe_socket, random, Conn, Control, MeasureError};
use pathlab_os::sys;
use pathlab_os::tcp_socket::{self, TcpSocketOptions};
use pathlab_os::unix_now_ns;

/// How long a stopping server waits for its tests to tell their clients.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(800);

/// The MSS of control connections: 1280 bytes less 40 of IPv6 and 20 of TCP header.
const CONTROL_MSS: u32 = 1220;

/// Limits and key of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen (TCP; UDP test ports are chosen per test on the same address).
    pub listen: SocketAddr,
    /// The limits every test must respect.
    pub limits: Limits,
    /// The pre-shared key, if tests must be authenticated.
    pub key: Option<pathlab_probe::auth::Key>,
    /// Most connections at once from one source address, an IPv6 client's /64 (handshakes
    /// and tests).
    pub max_clients: u32,
    /// Most connections in their handshake at once, from everywhere.
    pub max_handshakes: u32,
}

impl ServerConfig {
    /// `max_clients` unless said otherwise.
    pub const DEFAULT_MAX_CLIENTS: u32 = 8;
    /// `max_handshakes` unless said otherwise.
    pub const DEFAULT_MAX_HANDSHAKES: u32 = 256;

    /// A server on `listen` with `limits` and `key`, and the default connection bounds.
    pub fn new(
        listen: SocketAddr,
        limits: Limits,
        key: Option<pathlab_probe::auth::Key>,
    ) -> ServerConfig {
        ServerConfig {
            listen,
            limits,
            key,
            max_clients: Self::DEFAULT_MAX_CLIENTS,
            max_handshakes: Self::DEFAULT_MAX_HANDSHAKES,
        }
    }
}

/// A bound server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
    counters: Arc<MeasurementServerCounters>,
}

/// Connections per source (an IPv4 address, an IPv6 /64), shared by the loop and the
/// test threads.
type PerSource = Arc<Mutex<HashMap<IpAddr, u32>>>;

/// Releases a connection's place in the per-source count when it ends.
struct SourceSlot {
    per_source: PerSource,
    ip: IpAddr,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut map = self.per_source.lock().expect("not poisoned");
        if let Some(count) = map.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// A connection in its handshake.
struct Handshake {
    conn: Conn<ServerSession>,
    peer: SocketAddr,
    started: Instant,
    slot: SourceSlot,
}

impl Server {
    /// Binds the control port.
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        let listener = TcpListener::bind(config.listen)?;
        // Control connections carry multi-kilobyte messages (a test's records, a TCP
        // report); on a path that silently drops packets above its MTU they would stall.
        // Accepted connections inherit this MSS and announce it, so both ways send
        // segments that fit IPv6's minimum MTU (1280 bytes) with any headers.
        let control_options = TcpSocketOptions {
            mss_bytes: Some(CONTROL_MSS),
            ..TcpSocketOptions::default()
        };
        control_options.apply(listener.as_fd())?;
        listener.set_nonblocking(true)?;
        sys::raise_open_files_limit();
        let counters = Arc::new(MeasurementServerCounters::default());
        counters
            .started_unix_ns
            .store(unix_now_ns(), Ordering::Relaxed);
        Ok(Server {
            listener,
            config,
            counters,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// What it did and refused so far.
    pub fn counters(&self) -> &MeasurementServerCounters {
        &self.counters
    }

    /// Serves connections until `stop` returns true (checked at least every 50 ms), then
    /// closes the handshakes, tells running tests' clients it stops, and waits for them.
    pub fn run(&self, mut stop: impl FnMut() -> bool) {
        let policy = ServerPolicy {
            limits: self.config.limits,
            key: self.config.key.clone(),
            software: format!("pathlab {}", env!("CARGO_PKG_VERSION")),
            congestion_allowed: tcp_socket::allowed_congestion_controls(),
        };
        let stopping = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicU32::new(0));
        let per_source: PerSource = Arc::default();
        let mut handshakes: VecDeque<Handshake> = VecDeque::new();
        let mut workers: Vec<std::thread::JoinHandle<()>> = Vec::new();
        while !stop() {
            let mut fds = vec![self.listener.as_fd()];
            fds.extend(handshakes.iter().map(|h| h.conn.stream.as_fd()));
            let mut ready = vec![false; fds.len()];
            let wake = handshakes
                .iter()
                .filter_map(|h| h.conn.session.poll_at())
                .min()
                .map_or(Duration::from_millis(50), |at| {
                    crate::until(at).min(Duration::from_millis(50))
                });
            let _ = sys::poll_readable(&fds, Some(wake), &mut ready);
            drop(fds);
            if ready[0] {
                self.accept_all(&policy, &per_source, &mut handshakes);
            }
            let now = clock();
            let mut index = 0;
            while index < handshakes.len() {
                let handshake = &mut handshakes[index];
                if ready.get(index + 1).copied().unwrap_or(false) {
                    let _ = handshake.conn.stream.set_nonblocking(true);
                    if handshake.conn.read_ready().is_err() {
                        handshake.conn.closed = true;
                        handshake.conn.session.handle_close(now);
                    }
                }
                handshake.conn.session.handle_timeout(now);
                match self.step(handshake, &active) {
                    Step::Keep => index += 1,
                    Step::Close => {
                        handshakes.remove(index);
                    }
                    Step::Run => {
                        let handshake = handshakes.remove(index).expect("there");
                        active.fetch_add(1, Ordering::SeqCst);
                        self.counters.tests.fetch_add(1, Ordering::Relaxed);
                        self.counters.running.fetch_add(1, Ordering::Relaxed);
                        let active = Arc::clone(&active);
                        let stopping = Arc::clone(&stopping);
                        let counters = Arc::clone(&self.counters);
                        workers.push(std::thread::spawn(move || {
                            run_test(handshake, &stopping, &counters);
                            counters.running.fetch_sub(1, Ordering::Relaxed);
                            active.fetch_sub(1, Ordering::SeqCst);
                        }));
                    }
                }
            }
            self.counters
                .handshakes
                .store(handshakes.len() as u64, Ordering::Relaxed);
            workers.retain(|w| !w.is_finished());
        }
        stopping.store(true, Ordering::SeqCst);
        drop(handshakes);
        self.counters.handshakes.store(0, Ordering::Relaxed);
        // Tests see the flag within 50 ms and tell their clients; one whose client does
        // not take the message is left behind at the deadline, so a stop takes under a
        // second whatever clients do.
        let give_up = Instant::now() + SHUTDOWN_WAIT;
        for worker in workers {
            while !worker.is_finished() && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(5));
            }
            if worker.is_finished() {
                let _ = worker.join();
            }
        }
    }

    /// Accepts every waiting connection, within the bounds.
    fn accept_all(
        &self,
        policy: &ServerPolicy,
        per_source: &PerSource,
        handshakes: &mut VecDeque<Handshake>,
    ) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                Err(error) => {
                    // Out of descriptors, most likely: the handshakes' timeouts free some.
                    eprintln!("pathlab server: accept failed: {error}");
                    return;
                }
            };
            self.counters.connections.fetch_add(1, Ordering::Relaxed);
            let ip = pathlab_core::wire::source_prefix(peer.ip());
            let from_there = {
                let mut map = per_source.lock().expect("not poisoned");
                let count = map.entry(ip).or_insert(0);
                *count += 1;
                *count
            };
            let slot = SourceSlot {
                per_source: Arc::clone(per_source),
                ip,
            };
            if from_there > self.config.max_clients {
                self.counters.count_refusal(RefusalReason::PerSource);
                refuse_connection(
                    stream,
                    Refusal::TooManyClients {
                        max_clients: self.config.max_clients,
                    },
                );
                continue;
            }
            if handshakes.len() >= self.config.max_handshakes as usize {
                handshakes.pop_front();
                self.counters
                    .handshakes_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
            let Ok(nonce) = random() else { return };
            let session = ServerSession::new(clock(), policy.clone(), peer.ip(), nonce);
            handshakes.push_back(Handshake {
                conn: Conn::new(stream, session),
                peer,
                started: Instant::now(),
                slot,
            });
        }
    }

    /// Acts on a handshake's events.
    fn step(&self, handshake: &mut Handshake, active: &AtomicU32) -> Step {
        let mut step = Step::Keep;
        while let Some(event) = handshake.conn.session.poll_event() {
            match event {
                ServerEvent::Request(_) => {
                    if active.load(Ordering::SeqCst) >= self.config.limits.max_tests {
                        handshake.conn.session.refuse(Refusal::Busy {
                            max_tests: self.config.limits.max_tests,
                        });
                    } else {
                        step = Step::Run;
                    }
                }
                ServerEvent::Ended(outcome) => {
                    if matches!(outcome, Err(SessionError::Timeout(_))) {
                        self.counters
                            .handshake_timeouts
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    // Refused by the session's limits or by ours (`--max-tests`).
                    if let Some((test, refusal)) = handshake.conn.session.refused() {
                        self.counters
                            .count_test(TestKind::of(test), TestOutcome::Refused);
                        self.counters.count_refusal(RefusalReason::of(refusal));
                    }
                    log(handshake.peer, handshake.started, &outcome);
                    step = Step::Close;
                }
                ServerEvent::Message(_) => unreachable!("no test runs in a handshake"),
            }
        }
        self.counters
            .add(&std::mem::take(&mut handshake.conn.session.rejections));
        // Welcome and refusals are small: a client whose window cannot take them is gone.
        let _ = handshake.conn.stream.set_nonblocking(true);
        if handshake.conn.flush().is_err() {
            return Step::Close;
        }
        step
    }
}

enum Step {
    Keep,
    Close,
    Run,
}

/// Says why a connection is refused, untagged (the refusal precedes any key), and closes.
fn refuse_connection(mut stream: TcpStream, refusal: Refusal) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&control::encode(&Message::Refuse { refusal }, None));
}

fn log(peer: SocketAddr, started: Instant, outcome: &Result<String, SessionError>) {
    let seconds = started.elapsed().as_secs_f64();
    match outcome {
        Ok(line) => eprintln!("pathlab server: {peer}: {line} ({seconds:.1} s)"),
        Err(error) => eprintln!("pathlab server: {peer}: {error} ({seconds:.1} s)"),
    }
}

/// The control connection of a test running on the server.
struct TestConn<'a> {
    conn: Conn<ServerSession>,
    stopping: &'a AtomicBool,
}

impl Control for TestConn<'_> {
    fn poll_message(&mut self, wait: Duration) -> Result<Option<Message>, MeasureError> {
        // Waits in slices, so a stop is seen within 50 ms however long the wait.
        let end = Instant::now() + wait;
        loop {
            if self.stopping.load(Ordering::Relaxed) {
                return Err(MeasureError::Stopped);
            }
            let slice = end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            match self.conn.pump(slice)? {
                Some(ServerEvent::Message(message)) => return Ok(Some(message)),
                Some(ServerEvent::Ended(Err(error))) => return Err(error.into()),
                Some(other) => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?}"
                    ))))
                }
                None if self.conn.closed => {
                    return Err(MeasureError::Session(SessionError::Closed(
                        "the end of the test",
                    )))
                }
                None if Instant::now() >= end => return Ok(None),
                None => {}
            }
        }
    }

    fn send(&mut self, message: &Message) -> Result<(), MeasureError> {
        self.conn.session.send(message);
        match self.conn.flush() {
            Err(_) if self.stopping() => Err(MeasureError::Stopped),
            outcome => Ok(outcome?),
        }
    }
}

impl TestConn<'_> {
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// Runs an accepted test to its end on its own thread.
fn run_test(
    handshake: Handshake,
    stopping: &Arc<AtomicBool>,
    counters: &MeasurementServerCounters,
) {
    let Handshake {
        mut conn,
        peer,
        started,
        slot,
    } = handshake;
    let _slot = slot;
    let kind = TestKind::of(&pending_test(&conn.session));
    conn.bound_writes(Arc::clone(stopping));
    let mut test = TestConn { conn, stopping };
    let mut moved = Moved::default();
    let outcome = serve(&mut test, peer, counters, &mut moved);
    counters.count_bytes(kind, moved.sent_bytes, moved.received_bytes);
    counters.count_test(
        kind,
        match &outcome {
            Ok(_) => TestOutcome::Completed,
            Err(MeasureError::Stopped) => TestOutcome::Aborted,
            Err(_) => TestOutcome::Failed,
        },
    );
    let stalled = outcome.as_ref().is_err_and(StalledClient::is);
    if stalled {
        counters.stalled_clients.fetch_add(1, Ordering::Relaxed);
    }
    let outcome = match outcome {
        Ok(line) => Ok(line),
        Err(error) => {
            let why = match &error {
                MeasureError::Stopped => "the server is shutting down".to_owned(),
                other => other.to_string(),
            };
            test.conn.session.abort(&why);
            Err(error)
        }
    };
    // A client that took nothing for the deadline takes no goodbye either.
    if !stalled {
        let _ = test.conn.flush();
    }
    counters.add(&test.conn.session.rejections);
    let seconds = started.elapsed().as_secs_f64();
    match outcome {
        Ok(line) => eprintln!("pathlab server: {peer}: {line} ({seconds:.1} s)"),
        Err(error) => eprintln!("pathlab server: {peer}: {error} ({seconds:.1} s)"),
    }
}

fn serve(
    test: &mut TestConn<'_>,
    peer: SocketAddr,
    counters: &MeasurementServerCounters,
    moved: &mut Moved,
) -> Result<String, MeasureError> {
    test.conn.stream.set_nonblocking(false)?;
    let local = test.conn.stream.local_addr()?;
    let udp = UdpSocket::bind(SocketAddr::new(local.ip(), 0))?;
    prepare_probe_socket(&udp)?;
    let session: u64 = u64::from_ne_bytes(random()?);
    let pending_test = pending_test(&test.conn.session);
    let data_listener = data_listener(&pending_test, local)?;
    let server_port = match &data_listener {
        Some(listener) => listener.local_addr()?.port(),
        None => udp.local_addr()?.port(),
    };
    test.conn.session.accept(clock(), session, server_port);
    test.conn.flush()?;
    let mut running = test.conn.session.running().expect("accepted").clone();
    let mut rejections = Rejections::default();
    let client = SocketAddr::new(peer.ip(), running.client_port);
    let line = match running.test.clone() {
        TestRequest::OneWay { .. } | TestRequest::Trains(_) => {
            let (direction, size, count, _) = running.test.one_way().expect("a one-way test");
            match direction {
                Direction::Up => {
                    let received = receive_one_way(
                        &udp,
                        test,
                        &running,
                        &mut rejections,
                        Way::ClientToServer,
                        size,
                        count,
                    )?;
                    let count = received.arrivals.len() as u64;
                    moved.received_bytes = count * u64::from(size);
                    for chunk in received
                        .arrivals
                        .chunks(pathlab_probe::control::RECORDS_PER_CHUNK)
                    {
                        test.send(&Message::Received {
                            probes: chunk.to_vec(),
                        })?;
                    }
                    test.send(&Message::Done {
                        received: count,
                        rejected: rejections.probes,
                        duplicates: received.duplicates,
                        excess: 0,
                    })?;
                    format!(
                        "{}: received {count}, {} duplicates, rejected {}",
                        running.test, received.duplicates, rejections.probes
                    )
                }
                Direction::Down => {
                    udp.connect(client)?;
                    let sent = send_probes(&udp, &running, Way::ServerToClient, test, None)?;
                    let count = match sent {
                        Message::Sent { count, .. } => count,
                        _ => 0,
                    };
                    moved.sent_bytes = count * u64::from(size);
                    test.send(&sent)?;
                    let done = test.next_message()?;
                    format!("{}: sent {count}, {}", running.test, describe_done(&done))
                }
            }
        }
        TestRequest::Tcp { .. } => {
            drop(udp);
            let listener = data_listener.expect("a TCP test has a data listener");
            let line = serve_tcp(test, &listener, &mut running, &mut rejections, moved)?;
            format!("{}: {line}", running.test)
        }
        TestRequest::PathMtu {
            direction,
            max_size,
        } => {
            let line = mtu::serve(&udp, test, &running, client, direction, max_size)?;
            format!("{}: {line}", running.test)
        }
        TestRequest::RoundTrip { size, .. } => {
            let received = reflect_probes(&udp, test, &running, &mut rejections)?;
            // Each reflection is as long as its request (no amplification).
            moved.received_bytes = received * u64::from(size);
            moved.sent_bytes = moved.received_bytes;
            test.send(&Message::Done {
                received,
                rejected: rejections.probes,
                duplicates: 0,
                excess: rejections.excess,
            })?;
            format!(
                "{}: reflected {received}, rejected {}, {} beyond the test's rate or count",
                running.test, rejections.probes, rejections.excess
            )
        }
    };
    counters.add(&rejections);
    test.conn.session.finish(line.clone());
    Ok(line)
}

/// A TCP test's streams connect to a listener of their own (its port goes in Accept): one
/// on `local`'s address with the test's socket options; `None` for any other test.
fn data_listener(test: &TestRequest, local: SocketAddr) -> io::Result<Option<TcpListener>> {
    Ok(match test {
        TestRequest::Tcp {
            window,
            mss,
            congestion,
            ..
        } => {
            // Set before it listens: the streams' window scale and MSS go out in the
            // SYN-ACKs, and its connections start with its congestion control (the kernel
            // starts one at the handshake; BBR's pacing stays on after a change, so a
            // download asked for with cubic on a host whose default is BBR was paced).
            // Upward streams only receive on the server, where it does nothing.
            let options = TcpOptions {
                window: *window,
                mss: *mss,
                congestion: congestion.clone(),
            };
            let address = SocketAddr::new(local.ip(), 0);
            Some(tcp_socket::listen(address, &options.socket_options(true))?)
        }
        _ => None,
    })
}

/// The request a session awaits a decision on (the loop handed it over undecided).
fn pending_test(session: &ServerSession) -> TestRequest {
    session
        .pending_request()
        .expect("a request awaits a decision")
        .clone()
}

/// The client's closing message of a downward one-way test, for the log.
fn describe_done(done: &Message) -> String {
    match done {
        Message::Done {
            received,
            rejected,
            duplicates,
            ..
        } => {
            format!("the client received {received}, {duplicates} duplicates, rejected {rejected}")
        }
        other => format!("the client ended with {other:?}"),
    }
}

/// Reflects round-trip requests until the client's `Sent` plus a moment for stragglers;
/// returns how many it reflected. Only requests of the test's size are reflected, at most
/// its count at its rate ([`Reflector`]); the rest are counted in `rejections`.
fn reflect_probes(
    udp: &UdpSocket,
    control: &mut TestConn<'_>,
    running: &Running,
    rejections: &mut Rejections,
) -> Result<u64, MeasureError> {
    let TestRequest::RoundTrip {
        size,
        count,
        interval_ns,
    } = running.test
    else {
        unreachable!("a round-trip test")
    };
    let request_len = running.probe_len(Way::ClientToServer, ProbeKind::Request, size);
    let mut reflector = Reflector::new(
        clock(),
        count,
        pathlab_core::Duration::from_nanos(interval_ns),
    );
    let mut buffer = vec![0u8; probe::MAX_LEN + 1];
    let mut received = 0u64;
    let mut finish_by: Option<Instant> = None;
    udp.set_nonblocking(true)?;
    loop {
        let mut ready = [false];
        let _ = sys::poll_readable(&[udp.as_fd()], Some(Duration::from_millis(5)), &mut ready);
        if ready[0] {
            while let Ok((len, source, kernel_ns)) = sys::recv_timestamped(udp.as_fd(), &mut buffer)
            {
                let received_ns = kernel_ns.unwrap_or_else(unix_now_ns);
                if len != request_len {
                    rejections.probes += 1;
                    continue;
                }
                if running
                    .accept_probe(
                        Way::ClientToServer,
                        ProbeKind::Request,
                        source.ip(),
                        &buffer[..len],
                        rejections,
                    )
                    .is_none()
                {
                    continue;
                }
                if !reflector.admit(clock()) {
                    continue;
                }
                received += 1;
                let reflection = Reflection {
                    received_ns,
                    sent_ns: unix_now_ns(),
                    received_count: received,
                };
                // Same length as the request: no amplification.
                if running.reflect(&mut buffer[..len], reflection).is_ok() {
                    let _ = udp.send_to(&buffer[..len], source);
                }
            }
        }
        if finish_by.is_none() {
            match control.poll_message(Duration::ZERO)? {
                Some(Message::Sent { .. }) => {
                    finish_by = Some(Instant::now() + crate::STRAGGLERS_STD);
                }
                Some(other) => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?} during the test"
                    ))))
                }
                None => {}
            }
        } else if control.stopping() {
            return Err(MeasureError::Stopped);
        }
        if finish_by.is_some_and(|t| Instant::now() >= t) {
            rejections.excess += reflector.excess();
            return Ok(received);
        }
    }
}
