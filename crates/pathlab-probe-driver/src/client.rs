//! A client's end: connect, ask for a test, run its data plane.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use pathlab_probe::auth::Way;
use pathlab_probe::control::{Direction, Limits, Message, ReceivedProbe, TestRequest, TrainsTest};
use pathlab_probe::owd::{one_way_result, OneWayResult, SendLateness, SenderReport};
use pathlab_probe::probe::{self, Probe, ProbeKind, Reflection};
use pathlab_probe::rtt::{self, RoundTrip, RttReport, TimedBy};
use pathlab_probe::session::{
    fill_padding, ClientEvent, ClientSession, ProbeReceiver, Rejections, Running, SessionError,
};

use crate::probes::{receive_into, send_probes};
use crate::{
    clock, prepare_probe_socket, random, Conn, Control, Interruption, MeasureError, Partial,
    DEFAULT_PORT, TEST_GRACE_STD,
};
use pathlab_os::sys;
use pathlab_os::unix_now_ns;

/// How long the commands wait for a TCP connection to the server (the control connection
/// and each data stream of a TCP test): a host that left the network answers nothing, and
/// the kernel's own SYN retries would wait two minutes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client waits for the welcome and for the answer to its request
/// ([`pathlab_probe::session::ANSWER_TIMEOUT`]).
const ANSWER_TIMEOUT_STD: Duration = pathlab_probe::session::ANSWER_TIMEOUT.to_std();

/// A client's connection to a server, after the hello exchange.
#[derive(Debug)]
pub struct Client {
    conn: Conn<ClientSession>,
    pub(super) server: SocketAddr,
    /// The server's limits.
    pub limits: Limits,
    /// How long a TCP connection to the server may take.
    pub(super) connect_timeout: Duration,
    /// When the server accepted the running test.
    test_started: Option<Instant>,
    /// The last sign of life from the server during the test.
    last_heard: Option<Instant>,
}

impl Control for Client {
    fn poll_message(&mut self, wait: Duration) -> Result<Option<Message>, MeasureError> {
        match self.conn.pump(wait)? {
            Some(ClientEvent::Message(message)) => {
                self.heard(Instant::now());
                Ok(Some(message))
            }
            Some(ClientEvent::Failed(SessionError::Timeout(_))) if self.test_started.is_some() => {
                Err(self.interrupted(
                    false,
                    "results",
                    format!("within {:.0} s of its end", TEST_GRACE_STD.as_secs_f64()),
                ))
            }
            Some(ClientEvent::Failed(SessionError::Closed(_))) if self.test_started.is_some() => {
                Err(self.interrupted(true, "results", String::new()))
            }
            Some(ClientEvent::Failed(error)) => Err(error.into()),
            Some(other) => Err(MeasureError::Session(SessionError::Protocol(format!(
                "unexpected {other:?}"
            )))),
            None if self.conn.closed => Err(if self.test_started.is_some() {
                self.interrupted(true, "results", String::new())
            } else {
                MeasureError::Session(SessionError::Closed("the server's results"))
            }),
            None => Ok(None),
        }
    }

    fn send(&mut self, message: &Message) -> Result<(), MeasureError> {
        self.conn.session.send(message);
        match self.conn.flush() {
            Ok(()) => Ok(()),
            // The control connection's write timeout: a server that takes nothing for that
            // long is not reading.
            Err(error) if self.test_started.is_some() && crate::timed_out(&error) => Err(self
                .interrupted(
                    false,
                    "room for a control message",
                    format!("within {:.0} s", TEST_GRACE_STD.as_secs_f64()),
                )),
            Err(error)
                if self.test_started.is_some()
                    && matches!(
                        error.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
            {
                Err(self.interrupted(true, "results", String::new()))
            }
            Err(error) => Err(error.into()),
        }
    }

    fn heard_from_peer(&mut self) {
        self.heard(Instant::now());
    }
}

/// The next event of the session while it awaits the server's answer (`awaited`: the
/// welcome, the answer to a request). A wait that timed out is [`MeasureError::NoAnswer`]
/// for `awaited`, a failure the session's error, and a connection that closed first
/// [`SessionError::Closed`] naming `closed`.
fn next_answer(
    conn: &mut Conn<ClientSession>,
    awaited: &'static str,
    closed: &'static str,
) -> Result<ClientEvent, MeasureError> {
    loop {
        match conn.pump(Duration::from_secs(3600))? {
            Some(ClientEvent::Failed(SessionError::Timeout(_))) => {
                return Err(MeasureError::NoAnswer {
                    what: awaited,
                    within: ANSWER_TIMEOUT_STD,
                })
            }
            Some(ClientEvent::Failed(error)) => return Err(error.into()),
            Some(event) => return Ok(event),
            None if conn.closed => return Err(MeasureError::Session(SessionError::Closed(closed))),
            None => {}
        }
    }
}

impl Client {
    /// Connects to `host` (a name or address, with or without `:port`), exchanges hellos,
    /// and sets up authentication when `key` is given.
    pub fn connect(
        host: &str,
        key: Option<pathlab_probe::auth::Key>,
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
        // Control messages are small; a write that cannot go out for the grace period is
        // a server that stopped reading, and must not hold the client forever.
        stream.set_write_timeout(Some(TEST_GRACE_STD))?;
        let session = ClientSession::new(
            clock(),
            key,
            address.ip(),
            random()?,
            format!("pathlab {}", env!("CARGO_PKG_VERSION")),
        );
        let mut conn = Conn::new(stream, session);
        match next_answer(&mut conn, "welcome", "the server's welcome")? {
            ClientEvent::Connected { limits, .. } => Ok(Client {
                conn,
                server: address,
                limits,
                connect_timeout: timeout,
                test_started: None,
                last_heard: None,
            }),
            other => Err(MeasureError::Session(SessionError::Protocol(format!(
                "expected a welcome, got {other:?}"
            )))),
        }
    }

    /// Whether the dialogue is authenticated (probes then carry tags).
    pub(super) fn authenticated(&self) -> bool {
        self.conn.session.authenticated()
    }

    /// Asks for `test`; returns the accepted test (session, ports, keys).
    pub(super) fn request(
        &mut self,
        test: TestRequest,
        client_port: u16,
    ) -> Result<Running, MeasureError> {
        self.conn.session.request(clock(), test, client_port);
        match next_answer(
            &mut self.conn,
            "answer to the test request",
            "the server's answer",
        )? {
            ClientEvent::Accepted => {
                let now = Instant::now();
                self.test_started = Some(now);
                self.last_heard = Some(now);
                Ok(self.conn.session.running().expect("accepted").clone())
            }
            other => Err(MeasureError::Session(SessionError::Protocol(format!(
                "expected accept or refuse, got {other:?}"
            )))),
        }
    }

    /// The test is over.
    pub(super) fn finish(&mut self) {
        self.conn.session.finish();
    }

    /// Whether the dialogue is over (a failure ended it).
    pub(super) fn session_ended(&self) -> bool {
        self.conn.session.is_ended()
    }

    /// The server gave a sign of life at `at`.
    pub(super) fn heard(&mut self, at: Instant) {
        if self.last_heard.is_none_or(|last| at > last) {
            self.last_heard = Some(at);
        }
    }

    /// The running test's error for a server that went silent (or `closed` the
    /// connection) while `awaited` was awaited `bound`.
    pub(super) fn interrupted(
        &self,
        closed: bool,
        awaited: &'static str,
        bound: String,
    ) -> MeasureError {
        let started = self.test_started.unwrap_or_else(Instant::now);
        let heard = self
            .last_heard
            .map(|at| at.saturating_duration_since(started))
            // Heard from only at its accept: nothing during the test.
            .filter(|since| !since.is_zero());
        MeasureError::Interrupted(Interruption {
            closed,
            at_s: started.elapsed().as_secs_f64(),
            last_heard_s: heard.map(|since| since.as_secs_f64()),
            awaited,
            bound,
        })
    }

    /// The server's next message of the running test, if it comes within `wait` (and
    /// before the session's deadline); else the error of a server that went silent while
    /// `awaited` was awaited.
    pub(super) fn next_message_within(
        &mut self,
        wait: Duration,
        awaited: &'static str,
    ) -> Result<Message, MeasureError> {
        let give_up = Instant::now() + wait;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.interrupted(
                    false,
                    awaited,
                    format!("within {:.0} s", wait.as_secs_f64()),
                ));
            }
            if let Some(message) = self.poll_message(left)? {
                return Ok(message);
            }
        }
    }

    /// Where the server's end of `running` is.
    pub(super) fn server_address(&self, running: &Running) -> SocketAddr {
        SocketAddr::new(self.server.ip(), running.server_port)
    }

    pub(super) fn udp_socket(&self) -> io::Result<UdpSocket> {
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
        self.one_way_or_partial(direction, rate_bps, size, count, window)
            .map_err(|partial| partial.error)
    }

    /// [`Client::one_way`], keeping what a test that fails part way measured: downwards,
    /// the probes received until then (see [`OneWayTest::run_or_partial`]).
    pub fn one_way_or_partial(
        self,
        direction: Direction,
        rate_bps: u64,
        size: u32,
        count: u64,
        window: usize,
    ) -> Result<OneWayResult, Partial<OneWayResult>> {
        self.start_one_way(direction, rate_bps, size, count, window)?
            .run_or_partial()
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
            TestRequest::Trains(TrainsTest {
                direction,
                size,
                length,
                trains,
                spacing_ns: spacing.as_nanos() as u64,
                period_ns: period.as_nanos() as u64,
            }),
            0,
        )?
        .run_raw()
    }

    fn start_probes(
        mut self,
        test: TestRequest,
        window: usize,
    ) -> Result<OneWayTest, MeasureError> {
        let (direction, size, count, _) = test.one_way().expect("a one-way test");
        let udp = self.udp_socket()?;
        let rate_bps = test.rate_bps();
        let running = self.request(test, udp.local_addr()?.port())?;
        Ok(OneWayTest {
            server: self.server_address(&running),
            client: self,
            udp,
            running,
            sender: SenderReport {
                direction,
                rate_bps,
                size,
                sent: count,
                duration_ns: 0,
                late: SendLateness::default(),
            },
            window,
        })
    }
}

/// What the receiving end of a one-way test recorded, and what the sender says it sent.
#[derive(Debug, Clone)]
pub struct ProbeArrivals {
    /// Each accepted probe's first arrival, in arrival order.
    pub arrivals: Vec<ReceivedProbe>,
    /// Datagrams the receiver rejected.
    pub rejected: u64,
    /// Copies of probes already received (counted, not recorded).
    pub duplicates: u64,
    /// Probes the sender sent.
    pub sent: u64,
    /// From the sender's first probe to its last, ns.
    pub duration_ns: u64,
    /// How late the sender says it sent them.
    pub late: SendLateness,
}

/// What a receiver that stopped early holds: its arrivals, counted as sent up to the
/// highest sequence number among them, over the span of their send times (none if none
/// arrived).
fn arrivals_so_far(
    arrivals: Vec<ReceivedProbe>,
    rejected: u64,
    duplicates: u64,
) -> Option<ProbeArrivals> {
    let sent = arrivals.iter().map(|p| p.seq + 1).max()?;
    let first = arrivals.iter().map(|p| p.sent_ns).min().unwrap_or(0);
    let last = arrivals.iter().map(|p| p.sent_ns).max().unwrap_or(0);
    Some(ProbeArrivals {
        arrivals,
        rejected,
        duplicates,
        sent,
        duration_ns: last - first,
        late: SendLateness::default(),
    })
}

/// Puts the kernel's transmit stamp of each probe in `arrivals` (this host's, from `log`)
/// in place of the sender's reading the probe carried, where one came no earlier than
/// that reading; none after a refused send (see [`sys::TransmitLog::refused`]). Returns
/// how many it replaced.
fn kernel_send_times(arrivals: &mut [ReceivedProbe], log: &sys::TransmitLog) -> u64 {
    if log.refused() {
        return 0;
    }
    let mut replaced = 0;
    for probe in arrivals {
        if let Some(kernel_ns) = log.get(probe.seq).filter(|&ns| ns >= probe.sent_ns) {
            probe.sent_ns = kernel_ns;
            replaced += 1;
        }
    }
    replaced
}

/// A one-way test the server has accepted, not yet run.
#[derive(Debug)]
pub struct OneWayTest {
    client: Client,
    udp: UdpSocket,
    running: Running,
    server: SocketAddr,
    /// The test as asked (`sent` is the count asked for).
    sender: SenderReport,
    window: usize,
}

impl OneWayTest {
    /// Where the server receives (up) or sends (down) this test's probes.
    pub fn server_probe_address(&self) -> SocketAddr {
        self.server
    }

    /// The session number the server gave the test (in every probe).
    pub fn session(&self) -> u64 {
        self.running.session
    }

    /// Where this client sends (up) or receives (down) this test's probes.
    pub fn local_probe_address(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    /// Runs the test and analyses it.
    pub fn run(self) -> Result<OneWayResult, MeasureError> {
        self.run_or_partial().map_err(|partial| partial.error)
    }

    /// Runs the test and analyses it; a test that fails part way keeps what this end
    /// received. That is something only downwards (upwards the server's records come at
    /// the end): the probes received, counted as sent up to the highest sequence number
    /// among them (the server's own count never came), its send rate over the span of
    /// their send times.
    pub fn run_or_partial(self) -> Result<OneWayResult, Partial<OneWayResult>> {
        let (sender, window) = (self.sender, self.window);
        let analyse = |run: ProbeArrivals| {
            one_way_result(
                SenderReport {
                    sent: run.sent,
                    duration_ns: run.duration_ns,
                    late: run.late,
                    ..sender
                },
                &run.arrivals,
                run.rejected,
                run.duplicates,
                window,
            )
        };
        match self.run_or_partial_raw() {
            Ok(run) => Ok(analyse(run)),
            Err(Partial { error, measured }) => Err(Partial {
                error,
                measured: measured.map(|run| Box::new(analyse(*run))),
            }),
        }
    }

    /// Runs the test; returns what the receiver recorded.
    pub fn run_raw(self) -> Result<ProbeArrivals, MeasureError> {
        self.run_or_partial_raw().map_err(|partial| partial.error)
    }

    fn run_or_partial_raw(mut self) -> Result<ProbeArrivals, Partial<ProbeArrivals>> {
        let (direction, size, count, _) = self.running.test.one_way().expect("a one-way test");
        let result = match direction {
            Direction::Up => {
                self.udp.connect(self.server).map_err(MeasureError::from)?;
                // Each probe's send time from the kernel where it gives one, as it left
                // for this host's queue (a shaper on this host is part of the path).
                let mut transmit =
                    sys::enable_timestamping(self.udp.as_fd(), sys::TransmitPoint::Queue)
                        .is_ok()
                        .then(|| sys::TransmitLog::with_capacity(count.min(1 << 20) as usize));
                let sent = send_probes(
                    &self.udp,
                    &self.running,
                    Way::ClientToServer,
                    &mut self.client,
                    transmit.as_mut(),
                )?;
                let Message::Sent {
                    count,
                    duration_ns,
                    late,
                } = sent
                else {
                    unreachable!("the sender ends with Sent")
                };
                self.client.send(&sent)?;
                let mut arrivals = Vec::new();
                loop {
                    match self.client.next_message()? {
                        Message::Received { probes } => arrivals.extend(probes),
                        Message::Done {
                            rejected,
                            duplicates,
                            ..
                        } => {
                            if let Some(log) = &transmit {
                                kernel_send_times(&mut arrivals, log);
                            }
                            break ProbeArrivals {
                                arrivals,
                                rejected,
                                duplicates,
                                sent: count,
                                duration_ns,
                                late,
                            };
                        }
                        other => {
                            return Err(MeasureError::Session(SessionError::Protocol(format!(
                                "unexpected {other:?}"
                            )))
                            .into())
                        }
                    }
                }
            }
            Direction::Down => {
                let mut rejections = Rejections::default();
                let mut receiver = ProbeReceiver::new(Way::ServerToClient, size, count);
                let outcome = receive_into(
                    &mut receiver,
                    &self.udp,
                    &mut self.client,
                    &self.running,
                    &mut rejections,
                );
                let (received, _) = receiver.finish(rejections.probes);
                if let Err(error) = outcome {
                    return Err(Partial {
                        error,
                        measured: arrivals_so_far(
                            received.arrivals,
                            rejections.probes,
                            received.duplicates,
                        )
                        .map(Box::new),
                    });
                }
                self.client.send(&Message::Done {
                    received: received.arrivals.len() as u64,
                    rejected: rejections.probes,
                    duplicates: received.duplicates,
                    excess: 0,
                })?;
                ProbeArrivals {
                    arrivals: received.arrivals,
                    rejected: rejections.probes,
                    duplicates: received.duplicates,
                    sent: received.sent,
                    duration_ns: received.duration_ns,
                    late: received.late,
                }
            }
        };
        self.client.finish();
        Ok(result)
    }
}

/// What a round-trip test has so far: every reply in arrival order, how late each
/// request left, and when the kernel sent each.
///
/// A reply's `sent_ns` is first the client's clock just before the send, which the
/// request carries; [`RoundTrips::timed_replies`] puts the kernel's transmit stamp in its
/// place once it has been read (it may be read after the reply), and says which clock
/// timed each round trip.
#[derive(Debug, Default)]
struct RoundTrips {
    replies: Vec<RoundTrip>,
    send_errors: Vec<u64>,
    /// When the kernel sent each request, by sequence number (the socket sends nothing
    /// else).
    transmit: sys::TransmitLog,
}

impl RoundTrips {
    /// The replies with the kernel's send time where it gave one. A round trip is the
    /// kernel's when both its reply's receive stamp and its request's transmit stamp came,
    /// the transmit stamp no earlier than the request's own reading (which a stamp given
    /// to the wrong request would be) and no later than the reply.
    fn timed_replies(&self) -> Vec<RoundTrip> {
        self.replies
            .iter()
            .map(|reply| {
                let transmit_ns = self
                    .transmit
                    .get(reply.seq)
                    .filter(|&t| t >= reply.sent_ns && t <= reply.received_ns);
                match (reply.timed_by, transmit_ns) {
                    (TimedBy::Kernel, Some(sent_ns)) => RoundTrip { sent_ns, ..*reply },
                    _ => RoundTrip {
                        timed_by: TimedBy::UserSpace,
                        ..*reply
                    },
                }
            })
            .collect()
    }

    /// The report of a test cut short after `sent` requests: the server's count of what it
    /// received never came, so it is what the replies prove (every loss counts as lost
    /// on the way up).
    fn partial(&self, sent: u64) -> Option<RttReport> {
        if sent == 0 {
            return None;
        }
        let mut answered: Vec<u64> = self.replies.iter().map(|r| r.seq).collect();
        answered.sort_unstable();
        answered.dedup();
        Some(rtt::analyse(
            &self.timed_replies(),
            sent,
            answered.len() as u64,
            0,
            &self.send_errors,
        ))
    }
}

impl Client {
    /// Runs `count` isochronous round trips, one every `interval`, of `size` bytes.
    pub fn round_trip(
        self,
        interval: Duration,
        size: u32,
        count: u64,
    ) -> Result<RttReport, MeasureError> {
        self.round_trip_or_partial(interval, size, count)
            .map_err(|partial| partial.error)
    }

    /// [`Client::round_trip`], keeping what a test that fails part way measured: every
    /// request sent and every reply received, with the server's count of what it received
    /// taken as what the replies prove.
    pub fn round_trip_or_partial(
        mut self,
        interval: Duration,
        size: u32,
        count: u64,
    ) -> Result<RttReport, Partial<RttReport>> {
        let udp = self.udp_socket().map_err(MeasureError::from)?;
        let test = TestRequest::RoundTrip {
            interval_ns: interval.as_nanos() as u64,
            size,
            count,
        };
        let running = self.request(test, udp.local_addr().map_err(MeasureError::from)?.port())?;
        let mut so_far = RoundTrips::default();
        let mut sent = 0;
        match self.run_round_trips(
            &udp,
            &running,
            interval,
            size,
            count,
            &mut so_far,
            &mut sent,
        ) {
            Ok(report) => Ok(report),
            Err(error) => Err(Partial {
                error,
                measured: so_far.partial(sent).map(Box::new),
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_round_trips(
        &mut self,
        udp: &UdpSocket,
        running: &Running,
        interval: Duration,
        size: u32,
        count: u64,
        so_far: &mut RoundTrips,
        sent: &mut u64,
    ) -> Result<RttReport, MeasureError> {
        udp.connect(self.server_address(running))?;
        udp.set_nonblocking(true)?;
        // The kernel's transmit stamps, numbered from the first request: a round trip from
        // them is free of the client's own delays (see `RoundTrips::timed_replies`). A
        // kernel that refuses leaves every round trip to the client's clock.
        let stamped = sys::enable_timestamping(udp.as_fd(), sys::TransmitPoint::Device).is_ok();
        let padding = Box::new(random::<4096>()?);
        let mut bytes = Vec::with_capacity(size as usize + 64);
        let mut replies = ReplyReader {
            udp,
            running,
            stamped,
            buffer: vec![0u8; probe::MAX_LEN + 1],
            rejections: Rejections::default(),
        };
        so_far.replies.reserve(count as usize);
        so_far.send_errors.reserve(count as usize);
        so_far.transmit = sys::TransmitLog::with_capacity(count as usize);
        let start = Instant::now();
        while *sent < count {
            let seq = *sent;
            let due = start + interval.mul_f64(seq as f64);
            let now = Instant::now();
            if now >= due {
                let header = Probe {
                    kind: ProbeKind::Request,
                    session: running.session,
                    seq,
                    sent_ns: unix_now_ns(),
                    reflection: Reflection::default(),
                };
                running
                    .encode_probe(
                        Way::ClientToServer,
                        &header,
                        size as usize,
                        &mut |pad| fill_padding(pad, &padding, seq),
                        &mut bytes,
                    )
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let taken = udp.send(&bytes).is_ok();
                so_far.transmit.sent(seq, taken);
                so_far
                    .send_errors
                    .push(now.duration_since(due).as_nanos() as u64);
                *sent += 1;
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
            replies.read(self, so_far)?;
            // A server that gave up (or says why it stops) ends the test now.
            if let Some(message) = self.poll_message(Duration::ZERO)? {
                return Err(MeasureError::Session(SessionError::Protocol(format!(
                    "unexpected {message:?} during the test"
                ))));
            }
        }
        let sending = start.elapsed();
        replies.read_late(self, so_far, count)?;
        self.send(&Message::Sent {
            count,
            duration_ns: sending.as_nanos() as u64,
            // A round-trip test judges its own sends (`send_errors`); the server
            // has no use for them.
            late: SendLateness::default(),
        })?;
        match self.next_message()? {
            Message::Done {
                received, excess, ..
            } => {
                replies.read(self, so_far)?;
                self.finish();
                Ok(rtt::analyse(
                    &so_far.timed_replies(),
                    count,
                    received,
                    excess,
                    &so_far.send_errors,
                ))
            }
            other => Err(MeasureError::Session(SessionError::Protocol(format!(
                "unexpected {other:?}"
            )))),
        }
    }
}

/// Reads the replies of a round-trip test as they come, with their receive times.
struct ReplyReader<'a> {
    /// The test's socket, connected to the server.
    udp: &'a UdpSocket,
    /// The test, whose replies it accepts.
    running: &'a Running,
    /// Whether the kernel stamps the requests' transmit times.
    stamped: bool,
    /// One datagram's room, and a byte more to see one too long.
    buffer: Vec<u8>,
    /// What it refused, and why.
    rejections: Rejections,
}

impl ReplyReader<'_> {
    /// Reads the transmit stamps and every reply waiting into `so_far`, telling `client`
    /// it heard from the server when a reply came.
    fn read(&mut self, client: &mut Client, so_far: &mut RoundTrips) -> io::Result<()> {
        if self.stamped {
            so_far.transmit.take(self.udp.as_fd())?;
        }
        let replies = &mut so_far.replies;
        let before = replies.len();
        while let Ok((len, source, kernel_ns)) =
            sys::recv_timestamped(self.udp.as_fd(), &mut self.buffer)
        {
            let received_ns = kernel_ns.unwrap_or_else(unix_now_ns);
            if let Some(p) = self.running.accept_probe(
                Way::ServerToClient,
                ProbeKind::Reply,
                source.ip(),
                &self.buffer[..len],
                &mut self.rejections,
            ) {
                replies.push(RoundTrip {
                    seq: p.seq,
                    sent_ns: p.sent_ns,
                    reflector_received_ns: p.reflection.received_ns,
                    reflector_sent_ns: p.reflection.sent_ns,
                    received_ns,
                    // Until the transmit stamp is read: see `timed_replies`.
                    timed_by: if kernel_ns.is_some() {
                        TimedBy::Kernel
                    } else {
                        TimedBy::UserSpace
                    },
                });
            }
        }
        if replies.len() > before {
            client.heard(Instant::now());
        }
        Ok(())
    }

    /// After the last request, reads the replies still on their way until all `count`
    /// are in or it has waited a second (or ten of the slowest round trips, at least
    /// 200 ms).
    fn read_late(
        &mut self,
        client: &mut Client,
        so_far: &mut RoundTrips,
        count: u64,
    ) -> io::Result<()> {
        let slowest = so_far
            .replies
            .iter()
            .map(RoundTrip::rtt_ns)
            .max()
            .unwrap_or(0)
            .max(0) as u64;
        let wait_until = Instant::now()
            + Duration::from_nanos(slowest.saturating_mul(10))
                .clamp(Duration::from_millis(200), Duration::from_secs(1));
        while (so_far.replies.len() as u64) < count && Instant::now() < wait_until {
            let _ = sys::poll_readable(
                &[self.udp.as_fd()],
                Some(Duration::from_millis(10)),
                &mut [false],
            );
            self.read(client, so_far)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(seq: u64, sent_ns: u64) -> ReceivedProbe {
        ReceivedProbe {
            seq,
            sent_ns,
            received_ns: sent_ns + 1_000,
        }
    }

    #[test]
    fn a_receiver_cut_short_counts_as_sent_what_precedes_its_last_arrival() {
        assert!(
            arrivals_so_far(Vec::new(), 3, 0).is_none(),
            "nothing arrived"
        );
        // Probes 0..=9 sent 1 ms apart; 4 lost, 9 the last to arrive, 7 late.
        let arrivals: Vec<ReceivedProbe> = [0, 1, 2, 3, 5, 6, 8, 9, 7]
            .into_iter()
            .map(|seq| arrival(seq, 1_000_000_000 + seq * 1_000_000))
            .collect();
        let run = arrivals_so_far(arrivals, 3, 0).unwrap();
        assert_eq!((run.sent, run.rejected), (10, 3));
        assert_eq!(run.duration_ns, 9_000_000, "first to last send time");
    }

    #[test]
    fn probes_take_the_kernels_send_time_unless_it_is_before_their_own_or_a_send_was_refused() {
        // Probes 0..4 read 1 ms apart; the kernel took each 40 us later, but 2's stamp is
        // before its reading (another probe's) and 3 got none.
        let arrivals: Vec<ReceivedProbe> = (0..4)
            .map(|seq| arrival(seq, 1_000_000_000 + seq * 1_000_000))
            .collect();
        let mut log = sys::TransmitLog::default();
        for seq in 0..4 {
            log.sent(seq, true);
        }
        log.set(0, 1_000_040_000);
        log.set(1, 1_001_040_000);
        log.set(2, 1_001_500_000);
        let mut timed = arrivals.clone();
        assert_eq!(kernel_send_times(&mut timed, &log), 2);
        let sent: Vec<u64> = timed.iter().map(|p| p.sent_ns).collect();
        assert_eq!(
            sent,
            [1_000_040_000, 1_001_040_000, 1_002_000_000, 1_003_000_000]
        );
        log.sent(4, false);
        let mut kept = arrivals.clone();
        assert_eq!(
            kernel_send_times(&mut kept, &log),
            0,
            "after a refusal, none"
        );
        assert_eq!(kept, arrivals);
    }

    #[test]
    fn round_trips_cut_short_count_what_the_replies_prove() {
        let reply = |seq: u64| RoundTrip {
            seq,
            sent_ns: seq * 10_000_000,
            reflector_received_ns: seq * 10_000_000 + 500_000,
            reflector_sent_ns: seq * 10_000_000 + 520_000,
            received_ns: seq * 10_000_000 + 1_000_000,
            timed_by: TimedBy::Kernel,
        };
        let so_far = RoundTrips {
            // 0..=99 answered, 42 twice; nothing after.
            replies: (0..100).chain([42]).map(reply).collect(),
            send_errors: vec![0; 300],
            ..RoundTrips::default()
        };
        assert!(so_far.partial(0).is_none());
        let report = so_far.partial(300).unwrap();
        assert_eq!(
            (report.sent, report.replies, report.duplicates),
            (300, 100, 1)
        );
        assert_eq!(report.reflector_received, 100);
        assert_eq!((report.lost_up, report.lost_down), (200, 0));
        // No transmit stamp was read: every round trip is the client's own.
        assert_eq!(report.timed_by.only(), Some(TimedBy::UserSpace));
    }

    #[test]
    fn a_round_trip_takes_its_requests_transmit_stamp_when_it_fits() {
        let reply = |seq: u64, timed_by| RoundTrip {
            seq,
            sent_ns: 1_000_000 + seq * 10_000_000,
            reflector_received_ns: 1_000_000 + seq * 10_000_000 + 500_000,
            reflector_sent_ns: 1_000_000 + seq * 10_000_000 + 520_000,
            received_ns: 1_000_000 + seq * 10_000_000 + 1_000_000,
            timed_by,
        };
        let mut so_far = RoundTrips::default();
        // Request 2 never reached the kernel: datagram 2 is request 3.
        for seq in 0..5 {
            so_far.transmit.sent(seq, seq != 2);
        }
        assert_eq!(so_far.transmit.datagram_seqs(), [0, 1, 3, 4]);
        so_far.transmit.set(0, 1_000_000 + 30_000); // 30 us after the client's reading
        so_far.transmit.set(1, 11_000_000 + 20_000);
        so_far.transmit.set(3, 20_000_000); // before its reading: another request's
        so_far.transmit.set(4, 41_000_000 + 40_000);
        so_far.replies = vec![
            reply(0, TimedBy::Kernel),
            reply(1, TimedBy::UserSpace), // the reply came without a receive stamp
            reply(3, TimedBy::Kernel),
            reply(4, TimedBy::Kernel),
        ];
        let timed = so_far.timed_replies();
        let clocks: Vec<TimedBy> = timed.iter().map(|r| r.timed_by).collect();
        assert_eq!(
            clocks,
            [
                TimedBy::Kernel,
                TimedBy::UserSpace,
                TimedBy::UserSpace,
                TimedBy::Kernel
            ]
        );
        assert_eq!(timed[0].sent_ns, 1_030_000);
        assert_eq!(timed[1].sent_ns, 11_000_000, "the client's reading kept");
        assert_eq!(timed[2].sent_ns, 31_000_000, "the misfiled stamp ignored");
        assert_eq!(timed[3].rtt_ns(), 1_000_000 - 40_000 - 20_000);
    }
}
