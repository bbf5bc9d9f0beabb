//! A client's end: connect, ask for a test, run its data plane.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use pathlab_probe::auth::Way;
use pathlab_probe::control::{Direction, Limits, Message, ReceivedProbe, TestRequest};
use pathlab_probe::owd::{one_way_result, OneWayResult, SenderReport};
use pathlab_probe::probe::{self, Probe, ProbeKind, Reflection};
use pathlab_probe::rtt::{self, RoundTrip, RttReport};
use pathlab_probe::session::{fill_padding, ClientEvent, ClientSession, Rejections, Running};

use super::probes::{receive_one_way, send_probes};
use super::{
    clock, now_ns, prepare_probe_socket, random, Conn, Control, MeasureError, DEFAULT_PORT,
};
use crate::sys;

/// A client's connection to a server, after the hello exchange.
#[derive(Debug)]
pub struct Client {
    conn: Conn<ClientSession>,
    pub(super) server: SocketAddr,
    /// The server's limits.
    pub limits: Limits,
}

impl Control for Client {
    fn poll_message(&mut self, wait: Duration) -> Result<Option<Message>, MeasureError> {
        match self.conn.pump(wait)? {
            Some(ClientEvent::Message(message)) => Ok(Some(message)),
            Some(ClientEvent::Failed(error)) => Err(error.into()),
            Some(other) => Err(MeasureError::Protocol(format!("unexpected {other:?}"))),
            None if self.conn.closed => Err(MeasureError::Closed("the server's results")),
            None => Ok(None),
        }
    }

    fn send(&mut self, message: &Message) -> Result<(), MeasureError> {
        self.conn.session.send(message);
        Ok(self.conn.flush()?)
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
        let session = ClientSession::new(
            clock(),
            key,
            address.ip(),
            random()?,
            format!("pathlab {}", env!("CARGO_PKG_VERSION")),
        );
        let mut conn = Conn::new(stream, session);
        loop {
            match conn.pump(Duration::from_secs(3600))? {
                Some(ClientEvent::Connected { limits, .. }) => {
                    return Ok(Client {
                        conn,
                        server: address,
                        limits,
                    })
                }
                Some(ClientEvent::Failed(error)) => return Err(error.into()),
                Some(other) => {
                    return Err(MeasureError::Protocol(format!(
                        "expected a welcome, got {other:?}"
                    )))
                }
                None if conn.closed => return Err(MeasureError::Closed("the server's welcome")),
                None => {}
            }
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
        loop {
            match self.conn.pump(Duration::from_secs(3600))? {
                Some(ClientEvent::Accepted) => {
                    return Ok(self.conn.session.running().expect("accepted").clone())
                }
                Some(ClientEvent::Failed(error)) => return Err(error.into()),
                Some(other) => {
                    return Err(MeasureError::Protocol(format!(
                        "expected accept or refuse, got {other:?}"
                    )))
                }
                None if self.conn.closed => {
                    return Err(MeasureError::Closed("the server's answer"))
                }
                None => {}
            }
        }
    }

    /// The test is over.
    pub(super) fn finish(&mut self) {
        self.conn.session.finish();
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
        let (direction, size, count, schedule) =
            self.running.test.one_way().expect("a one-way test");
        let result = match direction {
            Direction::Up => {
                self.udp.connect(self.server)?;
                let sent = send_probes(
                    &self.udp,
                    &self.running,
                    Way::ClientToServer,
                    schedule,
                    size,
                    count,
                    &mut self.client,
                )?;
                let Message::Sent { count, duration_ns } = sent else {
                    unreachable!("the sender ends with Sent")
                };
                self.client.send(&sent)?;
                let mut arrivals = Vec::new();
                loop {
                    match self.client.next_message()? {
                        Message::Received { probes } => arrivals.extend(probes),
                        Message::Done { rejected, .. } => {
                            break ProbeArrivals {
                                arrivals,
                                rejected,
                                sent: count,
                                duration_ns,
                            };
                        }
                        other => {
                            return Err(MeasureError::Protocol(format!("unexpected {other:?}")))
                        }
                    }
                }
            }
            Direction::Down => {
                let mut rejections = Rejections::default();
                let received = receive_one_way(
                    &self.udp,
                    &mut self.client,
                    &self.running,
                    &mut rejections,
                    Way::ServerToClient,
                    size,
                    count,
                )?;
                self.client.send(&Message::Done {
                    received: received.arrivals.len() as u64,
                    rejected: rejections.probes,
                })?;
                ProbeArrivals {
                    arrivals: received.arrivals,
                    rejected: rejections.probes,
                    sent: received.sent,
                    duration_ns: received.duration_ns,
                }
            }
        };
        self.client.finish();
        Ok(result)
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
        let running = self.request(test, udp.local_addr()?.port())?;
        udp.connect(self.server_address(&running))?;
        udp.set_nonblocking(true)?;
        let padding = Box::new(random::<4096>()?);
        let mut bytes = Vec::with_capacity(size as usize + 64);
        let mut buffer = vec![0u8; probe::MAX_LEN + 1];
        let mut replies = Vec::with_capacity(count as usize);
        let mut send_errors = Vec::with_capacity(count as usize);
        let mut rejections = Rejections::default();
        let start = Instant::now();
        let mut seq = 0;
        let mut collect = |replies: &mut Vec<RoundTrip>, rejections: &mut Rejections| {
            while let Ok((len, source, kernel_ns)) = sys::recv_timestamped(udp.as_fd(), &mut buffer)
            {
                let received_ns = kernel_ns.unwrap_or_else(now_ns);
                if let Some(p) = running.accept_probe(
                    Way::ServerToClient,
                    ProbeKind::Reply,
                    source.ip(),
                    &buffer[..len],
                    rejections,
                ) {
                    replies.push(RoundTrip {
                        seq: p.seq,
                        sent_ns: p.sent_ns,
                        reflector_received_ns: p.reflection.received_ns,
                        reflector_sent_ns: p.reflection.sent_ns,
                        received_ns,
                    });
                }
            }
        };
        while seq < count {
            let due = start + interval.mul_f64(seq as f64);
            let now = Instant::now();
            if now >= due {
                let header = Probe {
                    kind: ProbeKind::Request,
                    session: running.session,
                    seq,
                    sent_ns: now_ns(),
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
            collect(&mut replies, &mut rejections);
            // A server that gave up (or says why it stops) ends the test now.
            if let Some(message) = self.poll_message(Duration::ZERO)? {
                return Err(MeasureError::Protocol(format!(
                    "unexpected {message:?} during the test"
                )));
            }
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
            collect(&mut replies, &mut rejections);
        }
        self.send(&Message::Sent {
            count,
            duration_ns: sending.as_nanos() as u64,
        })?;
        match self.next_message()? {
            Message::Done { received, .. } => {
                collect(&mut replies, &mut rejections);
                self.finish();
                Ok(rtt::analyse(&replies, count, received, &send_errors))
            }
            other => Err(MeasureError::Protocol(format!("unexpected {other:?}"))),
        }
    }
}
