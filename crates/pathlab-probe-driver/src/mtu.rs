//! The path MTU test's two ends (the search itself is [`pathlab_probe::mtu`]).
//!
//! Up, the client sends DF probes and the server says over the control connection which
//! arrived; down, the client asks over the control connection for each probe and the
//! server sends it with DF. The server sends only what an authenticated (or at least
//! TCP-verified) client asked for, at most [`MTU_MAX_PROBES`] probes within
//! [`MTU_TEST_NS`], so a small request never turns into a flood towards anyone.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use pathlab_probe::auth::Way;
use pathlab_probe::control::{Direction, Message, MTU_MAX_PROBES, MTU_TEST_NS};
use pathlab_probe::mtu::{self, MtuSearch, PathMtu};
use pathlab_probe::owd::SendLateness;
use pathlab_probe::probe::{self, Probe, ProbeKind, Reflection};
use pathlab_probe::session::{Rejections, Running, SessionError};

use crate::{Client, Control, MeasureError, TEST_GRACE_STD};
use pathlab_os::sys;
use pathlab_os::unix_now_ns;

/// How long a probe may take before it counts as missing: three times the slowest arrival
/// so far, at least 100 ms; 1 s before anything has arrived.
fn probe_timeout(slowest: Option<Duration>) -> Duration {
    slowest.map_or(Duration::from_secs(1), |s| {
        (s * 3).max(Duration::from_millis(100))
    })
}

fn encode(running: &Running, way: Way, seq: u64, size: u32) -> Result<Vec<u8>, MeasureError> {
    let mut bytes = Vec::with_capacity(size as usize);
    running
        .encode_probe(
            way,
            &Probe {
                kind: ProbeKind::OneWay,
                session: running.session,
                seq,
                sent_ns: unix_now_ns(),
                reflection: Reflection::default(),
            },
            size as usize,
            &mut |pad| pad.fill(0x5a),
            &mut bytes,
        )
        .map_err(|e| SessionError::Protocol(e.to_string()))?;
    Ok(bytes)
}

/// A route's MTU, or the largest IP packet a probe can make (65535 bytes over IPv4, less
/// than loopback's 65536), whichever is smaller.
fn largest_probe(route_mtu: u32, ipv6: bool) -> u32 {
    route_mtu.min(probe::MAX_LEN as u32 + mtu::overhead(ipv6))
}

/// Whether a send failed because the datagram is longer than the route's MTU.
fn too_big(error: &std::io::Error) -> bool {
    error.raw_os_error() == Some(libc::EMSGSIZE)
}

impl Client {
    /// Finds the largest IP packet that crosses the path to (up) or from (down) the server
    /// with DF set, by packetization-layer probing (RFC 4821): no ICMP needed.
    pub fn path_mtu(mut self, direction: Direction) -> Result<PathMtu, MeasureError> {
        let ipv6 = self.server.is_ipv6();
        let udp = self.udp_socket()?;
        sys::set_df_probe(udp.as_fd(), ipv6)?;
        // The route towards the server says how large a probe this host can send at all.
        udp.connect(self.server)?;
        let route_mtu = sys::route_mtu(udp.as_fd(), ipv6)?;
        let smallest = probe::min_len(ProbeKind::OneWay, self.authenticated()) as u32;
        let max_size = match direction {
            Direction::Up => route_mtu.saturating_sub(mtu::overhead(ipv6)),
            Direction::Down => probe::MAX_LEN as u32,
        }
        .max(smallest);
        let test = pathlab_probe::control::TestRequest::PathMtu {
            direction,
            max_size,
        };
        let running = self.request(test, udp.local_addr()?.port())?;
        let server = self.server_address(&running);
        let found = match direction {
            Direction::Up => {
                udp.connect(server)?;
                let search = MtuSearch::new(largest_probe(route_mtu, ipv6), smallest, ipv6)
                    .map_err(|e| SessionError::Protocol(e.to_string()))?;
                search_up(&mut self, &udp, &running, search)
            }
            Direction::Down => search_down(&mut self, &udp, server, &running, smallest, ipv6),
        };
        // The search asks the server nothing once it is over: the end of the test is
        // awaited for the grace period, not for the rest of the 20 s a search may take.
        // A search that failed (nothing arrived) asks too: a server that does not answer
        // is frozen or gone, not behind a path that drops UDP.
        let found = match found {
            Err(error) if self.session_ended() || matches!(error, MeasureError::Interrupted(_)) => {
                return Err(error)
            }
            other => other,
        };
        let probes = found.as_ref().map_or(0, |found| found.probes);
        self.send(&Message::Sent {
            count: u64::from(probes),
            duration_ns: 0,
            late: SendLateness::default(),
        })?;
        let end = self.next_message_within(TEST_GRACE_STD, "end of the path MTU test");
        let found = match (found, end) {
            (Ok(_), Err(error)) | (Err(_), Err(error @ MeasureError::Interrupted(_))) => {
                return Err(error)
            }
            (Err(error), _) => return Err(error),
            (Ok(found), Ok(end)) => match end {
                Message::Done { .. } => found,
                other => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?}"
                    ))))
                }
            },
        };
        self.finish();
        Ok(found)
    }
}

fn search_up(
    connection: &mut Client,
    udp: &UdpSocket,
    running: &Running,
    mut search: MtuSearch,
) -> Result<PathMtu, MeasureError> {
    let mut slowest: Option<Duration> = None;
    let mut seq = 0u64;
    while let Some(size) = search.next_size() {
        seq += 1;
        let bytes = encode(running, Way::ClientToServer, seq, size)?;
        let sent_at = Instant::now();
        match udp.send(&bytes) {
            Ok(_) => {}
            Err(error) if too_big(&error) => {
                search.too_big_here(size);
                continue;
            }
            // An ICMP port unreachable for an earlier probe: the server's test is gone,
            // which its control connection says (closed) in a moment.
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(error) => return Err(error.into()),
        }
        let deadline = sent_at + probe_timeout(slowest);
        let mut arrived = false;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match connection.poll_message(left)? {
                Some(Message::MtuArrived { seq: s, .. }) if s == seq => {
                    let took = sent_at.elapsed();
                    slowest = Some(slowest.map_or(took, |s| s.max(took)));
                    arrived = true;
                    break;
                }
                // A probe judged lost that arrived after all: its size was tried again.
                Some(Message::MtuArrived { .. }) | None => {}
                Some(other) => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?} during the path MTU search"
                    ))))
                }
            }
        }
        search
            .record(size, arrived)
            .map_err(|e| SessionError::Protocol(e.to_string()))?;
    }
    Ok(search.result(Direction::Up))
}

fn search_down(
    connection: &mut Client,
    udp: &UdpSocket,
    server: SocketAddr,
    running: &Running,
    smallest: u32,
    ipv6: bool,
) -> Result<PathMtu, MeasureError> {
    udp.connect(server)?;
    udp.set_nonblocking(true)?;
    let mut buffer = vec![0u8; probe::MAX_LEN + 1];
    let mut slowest: Option<Duration> = None;
    let mut search: Option<MtuSearch> = None;
    let mut size = smallest;
    let mut seq = 0u64;
    loop {
        seq += 1;
        let asked_at = Instant::now();
        connection.send(&Message::MtuProbe { seq, size })?;
        // The server answers each request at once: one that says nothing for the grace
        // period is frozen or gone.
        let answer =
            connection.next_message_within(TEST_GRACE_STD, "answer to a path MTU probe")?;
        let (sent, route_mtu) = match answer {
            Message::MtuSent {
                seq: s,
                sent,
                route_mtu,
            } if s == seq => (sent, route_mtu),
            other => {
                return Err(MeasureError::Session(SessionError::Protocol(format!(
                    "unexpected {other:?} during the path MTU search"
                ))))
            }
        };
        // The server's route MTU bounds the search: known with its first answer.
        let search = match &mut search {
            Some(search) => search,
            None => {
                let mut new = MtuSearch::new(largest_probe(route_mtu, ipv6), smallest, ipv6)
                    .map_err(|e| SessionError::Protocol(e.to_string()))?;
                new.next_size();
                search.insert(new)
            }
        };
        if sent {
            let deadline = asked_at + probe_timeout(slowest);
            let mut arrived = false;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                let mut ready = [false];
                let _ = sys::poll_readable(&[udp.as_fd()], Some(left), &mut ready);
                for (probe, len) in waiting_probes(udp, running, Way::ServerToClient, &mut buffer) {
                    if probe.seq == seq && len == size as usize {
                        arrived = true;
                    }
                }
                if arrived {
                    let took = asked_at.elapsed();
                    slowest = Some(slowest.map_or(took, |s| s.max(took)));
                    break;
                }
            }
            search
                .record(size, arrived)
                .map_err(|e| SessionError::Protocol(e.to_string()))?;
        } else {
            search.too_big_here(size);
        }
        match search.next_size() {
            Some(next) => size = next,
            None => return Ok(search.result(Direction::Down)),
        }
    }
}

/// The server's end: reports arrivals (up) or sends what the client asks for (down) until
/// the client's `Sent`; returns the log line.
pub(super) fn serve(
    udp: &UdpSocket,
    connection: &mut dyn Control,
    running: &Running,
    client: SocketAddr,
    direction: Direction,
    max_size: u32,
) -> Result<String, MeasureError> {
    let started = Instant::now();
    let (count, largest) = match direction {
        Direction::Up => report_arrivals(udp, connection, running, started)?,
        Direction::Down => send_asked_probes(udp, connection, running, client, max_size, started)?,
    };
    connection.send(&Message::Done {
        received: count,
        rejected: 0,
        duplicates: 0,
        excess: 0,
    })?;
    let way = match direction {
        Direction::Up => "received",
        Direction::Down => "sent",
    };
    Ok(format!("{way} {count} probes, the largest {largest} B"))
}

/// The probes of `running`'s test going `way` waiting on `udp` (non-blocking), each with
/// its length; anything else waiting is read and dropped. `buffer` holds the longest.
fn waiting_probes(
    udp: &UdpSocket,
    running: &Running,
    way: Way,
    buffer: &mut [u8],
) -> Vec<(Probe, usize)> {
    let mut probes = Vec::new();
    while let Ok((len, source)) = udp.recv_from(buffer) {
        let data = &buffer[..len];
        let rejections = &mut Rejections::default();
        if let Some(probe) =
            running.accept_probe(way, ProbeKind::OneWay, source.ip(), data, rejections)
        {
            probes.push((probe, len));
        }
    }
    probes
}

/// The server's end upwards: reports each probe that arrives until the client's `Sent`;
/// gives how many arrived and the largest, bytes.
fn report_arrivals(
    udp: &UdpSocket,
    connection: &mut dyn Control,
    running: &Running,
    started: Instant,
) -> Result<(u64, usize), MeasureError> {
    let limit = Duration::from_nanos(MTU_TEST_NS);
    let mut count = 0u64;
    let mut largest = 0usize;
    udp.set_nonblocking(true)?;
    let mut buffer = vec![0u8; probe::MAX_LEN + 1];
    loop {
        let mut ready = [false];
        let _ = sys::poll_readable(&[udp.as_fd()], Some(Duration::from_millis(5)), &mut ready);
        for (probe, len) in waiting_probes(udp, running, Way::ClientToServer, &mut buffer) {
            count += 1;
            largest = largest.max(len);
            connection.send(&Message::MtuArrived {
                seq: probe.seq,
                size: len as u32,
            })?;
        }
        if let Some(message) = connection.poll_message(Duration::ZERO)? {
            match message {
                Message::Sent { .. } => break,
                other => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?} during the path MTU test"
                    ))))
                }
            }
        }
        if started.elapsed() > limit {
            return Err(MeasureError::Session(SessionError::Timeout(
                "the end of the path MTU test",
            )));
        }
    }
    Ok((count, largest))
}

/// The server's end downwards: sends each probe the client asks for (at most
/// [`MTU_MAX_PROBES`], none above `max_size`) and says whether it went, until the
/// client's `Sent`; gives how many were asked for and the largest sent, bytes.
fn send_asked_probes(
    udp: &UdpSocket,
    connection: &mut dyn Control,
    running: &Running,
    client: SocketAddr,
    max_size: u32,
    started: Instant,
) -> Result<(u64, usize), MeasureError> {
    let limit = Duration::from_nanos(MTU_TEST_NS);
    let ipv6 = client.is_ipv6();
    let mut count = 0u64;
    let mut largest = 0usize;
    udp.connect(client)?;
    sys::set_df_probe(udp.as_fd(), ipv6)?;
    loop {
        if started.elapsed() > limit {
            return Err(MeasureError::Session(SessionError::Timeout(
                "the client's next probe",
            )));
        }
        match connection.next_message()? {
            Message::MtuProbe { seq, size } => {
                count += 1;
                if count > u64::from(MTU_MAX_PROBES) || size > max_size {
                    let message = format!(
                        "a path MTU test sends at most {MTU_MAX_PROBES} probes of at most {max_size} bytes"
                    );
                    connection.send(&Message::Error {
                        message: message.clone(),
                    })?;
                    return Err(MeasureError::Session(SessionError::Protocol(message)));
                }
                let bytes = encode(running, Way::ServerToClient, seq, size)?;
                let sent = match udp.send(&bytes) {
                    Ok(_) => true,
                    Err(error) if too_big(&error) => false,
                    Err(error) => return Err(error.into()),
                };
                if sent {
                    largest = largest.max(bytes.len());
                }
                connection.send(&Message::MtuSent {
                    seq,
                    sent,
                    route_mtu: sys::route_mtu(udp.as_fd(), ipv6)?,
                })?;
            }
            Message::Sent { .. } => break,
            other => {
                return Err(MeasureError::Session(SessionError::Protocol(format!(
                    "unexpected {other:?} during the path MTU test"
                ))))
            }
        }
    }
    Ok((count, largest))
}
