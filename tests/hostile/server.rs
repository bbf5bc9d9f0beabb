//! `pathlab server` against a client that breaks the rules on purpose: it speaks the
//! protocol itself (the sans-IO session over a socket of its own), so it can ask for and
//! send what pathlab's own client never would. On loopback, bounded in rate and time.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use pathlab_os::Clock;
use pathlab_probe::auth::Way;
use pathlab_probe::control::{Direction, Message, Refusal, TcpDirection, TestRequest};
use pathlab_probe::probe::{Probe, ProbeKind, Reflection};
use pathlab_probe::session::{ClientEvent, ClientSession, Running, SessionError};

use crate::util::server_process::ServerProcess;
use crate::util::TestLock;

/// A client that drives the session by hand over a blocking socket.
struct RawClient {
    stream: TcpStream,
    session: ClientSession,
}

impl RawClient {
    /// Connects and waits for the welcome.
    fn connect(server: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(server).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let session = ClientSession::new(
            Clock::process().now(),
            None,
            server.ip(),
            [7; 16],
            "hostile".into(),
        );
        let mut client = RawClient { stream, session };
        match client.next_event() {
            ClientEvent::Connected { .. } => client,
            other => panic!("{other:?}"),
        }
    }

    /// Sends what the session has queued.
    fn flush(&mut self) {
        while let Some(bytes) = self.session.poll_transmit() {
            self.stream.write_all(&bytes).unwrap();
        }
    }

    /// The session's next event, reading as needed (10 s at most).
    fn next_event(&mut self) -> ClientEvent {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            self.flush();
            if let Some(event) = self.session.poll_event() {
                return event;
            }
            let now = Clock::process().now();
            match self.stream.read(&mut buffer) {
                Ok(0) => self.session.handle_close(now),
                Ok(n) => self.session.handle_control(now, &buffer[..n]),
                Err(error) => panic!("no answer from the server: {error}"),
            }
        }
    }

    /// Asks for `test` (probes to `client_port`); the running test, or the refusal.
    fn request(&mut self, test: TestRequest, client_port: u16) -> Result<Running, Refusal> {
        self.session
            .request(Clock::process().now(), test, client_port);
        match self.next_event() {
            ClientEvent::Accepted => Ok(self.session.running().unwrap().clone()),
            ClientEvent::Failed(SessionError::Refused(refusal)) => Err(refusal),
            other => panic!("{other:?}"),
        }
    }

    /// Asks for an upward one-way test of `count` probes of `size` bytes at `rate_bps`; the
    /// running test, the socket to send its probes from, and where to send them.
    fn upward(&mut self, rate_bps: u64, size: u32, count: u64) -> (Running, UdpSocket, SocketAddr) {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let test = TestRequest::OneWay {
            direction: Direction::Up,
            rate_bps,
            size,
            count,
        };
        let running = self
            .request(test, udp.local_addr().unwrap().port())
            .expect("accepted");
        let to = SocketAddr::new(self.stream.peer_addr().unwrap().ip(), running.server_port);
        (running, udp, to)
    }

    fn send(&mut self, message: &Message) {
        self.session.send(message);
        self.flush();
    }
}

/// Probe `seq` of `running`'s test, `size` bytes, going up.
fn probe(running: &Running, kind: ProbeKind, seq: u64, size: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    running
        .encode_probe(
            Way::ClientToServer,
            &Probe {
                kind,
                session: running.session,
                seq,
                sent_ns: pathlab_os::unix_now_ns(),
                reflection: Reflection::default(),
            },
            size as usize,
            &mut |pad| pad.fill(0x5a),
            &mut bytes,
        )
        .unwrap();
    bytes
}

/// The server's resident set, MiB.
fn rss_mib(server: &ServerProcess) -> u64 {
    server.threads_and_rss().1 / 1024
}

/// Regression (issue 30): `tcp -i 1us -t 20` made the server keep a slot per interval
/// (158 MB), and 1 ns asked for hundreds of GB. Asked by a client that skips the CLI's own
/// check, the server refuses it saying why, stays small, and goes on serving (a bad
/// request's refusal once panicked its loop: it did not serialize).
#[test]
fn a_one_microsecond_report_interval_is_refused_and_the_server_stays_small() {
    let server = ServerProcess::start(&[]);
    for interval_ns in [1_000, 1] {
        let mut client = RawClient::connect(server.address);
        let refusal = client
            .request(
                TestRequest::Tcp {
                    streams: 1,
                    direction: TcpDirection::Up,
                    duration_ns: 20_000_000_000,
                    interval_ns,
                    sample_ns: 10_000_000,
                    window: None,
                    mss: None,
                    congestion: None,
                },
                0,
            )
            .expect_err("refused");
        assert!(refusal.to_string().contains("at least 10 ms"), "{refusal}");
    }
    // Still serving: a real test after the refusals runs.
    let mut client = RawClient::connect(server.address);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let test = TestRequest::RoundTrip {
        size: 64,
        count: 1,
        interval_ns: 10_000_000,
    };
    client
        .request(test, udp.local_addr().unwrap().port())
        .expect("accepted");
    assert!(rss_mib(&server) < 100, "{} MiB", rss_mib(&server));
}

/// Issue 30: the memory a test would hold is known before it starts; a test above
/// `--max-test-memory` (60 s of 64-byte probes upwards at 1 Gbit/s: 117 M records,
/// 2.8 GB) is refused, and the CLI says so and what to change.
#[test]
fn a_test_above_the_servers_memory_bound_is_refused_with_the_reason() {
    let server = ServerProcess::start(&["--max-rate", "10gbit"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pathlab"))
        .args([
            "owd",
            &server.address.to_string(),
            "--rate",
            "1gbit",
            "--size",
            "64",
            "-t",
            "60s",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--max-test-memory") && stderr.contains("67108864"),
        "{stderr}"
    );
    assert!(rss_mib(&server) < 100, "{} MiB", rss_mib(&server));
}

/// Regression (issue 30): an upward test recorded every probe that arrived, copies
/// included, past the count asked for. Every probe five times and twenty numbers past the
/// count: the server records the count, counts the copies and rejects the rest.
#[test]
fn duplicated_upward_probes_are_counted_not_recorded() {
    let server = ServerProcess::start(&[]);
    let mut client = RawClient::connect(server.address);
    let count = 200;
    let (running, udp, to) = client.upward(1_000_000, 100, count);
    let mut sent = 0;
    for seq in 0..count + 20 {
        let bytes = probe(&running, ProbeKind::OneWay, seq, 100);
        for _ in 0..5 {
            udp.send_to(&bytes, to).unwrap();
            sent += 1;
        }
        // 1,100 datagrams paced at 0.2 ms: within a loopback socket's buffer.
        std::thread::sleep(Duration::from_micros(200));
    }
    client.send(&Message::Sent {
        count,
        duration_ns: 1,
        late: pathlab_probe::owd::SendLateness::default(),
    });
    let mut records = Vec::new();
    let (received, rejected, duplicates) = loop {
        match client.next_event() {
            ClientEvent::Message(Message::Received { probes }) => records.extend(probes),
            ClientEvent::Message(Message::Done {
                received,
                rejected,
                duplicates,
                ..
            }) => break (received, rejected, duplicates),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(records.len() as u64, received);
    assert!(received <= count, "{received} records of {count}");
    let mut seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len() as u64, received, "each number once");
    // Loopback loses nothing at this pace: every datagram is accounted for.
    assert_eq!((received, duplicates, rejected), (count, 4 * count, 5 * 20));
    assert_eq!(received + duplicates + rejected, sent);
}

/// Regression (issue 30): a reflector echoed requests at any rate for the whole test.
/// Requests at ten times the asked rate: the server answers at most a second's burst plus
/// the asked rate over the time they came, and counts the rest as excess.
#[test]
fn reflection_at_ten_times_the_asked_rate_is_held_to_the_rate() {
    // It spins a core for 2 s: never beside a timing test.
    let _lock = TestLock::shared();
    let server = ServerProcess::start(&[]);
    let mut client = RawClient::connect(server.address);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let (count, interval) = (1_000u64, Duration::from_millis(20));
    let running = client
        .request(
            TestRequest::RoundTrip {
                size: 64,
                count,
                interval_ns: interval.as_nanos() as u64,
            },
            udp.local_addr().unwrap().port(),
        )
        .expect("accepted");
    let to = SocketAddr::new(server.address.ip(), running.server_port);
    let started = Instant::now();
    let mut replies = 0u64;
    let mut buffer = [0u8; 2048];
    // 1,000 requests 2 ms apart: ten times the rate of one per 20 ms.
    for seq in 0..count {
        let due = started + interval / 10 * seq as u32;
        while Instant::now() < due {
            if udp.recv(&mut buffer).is_ok() {
                replies += 1;
            }
        }
        udp.send_to(&probe(&running, ProbeKind::Request, seq, 64), to)
            .unwrap();
    }
    client.send(&Message::Sent {
        count,
        duration_ns: 1,
        late: pathlab_probe::owd::SendLateness::default(),
    });
    let (received, rejected, excess) = match client.next_event() {
        ClientEvent::Message(Message::Done {
            received,
            rejected,
            excess,
            ..
        }) => (received, rejected, excess),
        other => panic!("{other:?}"),
    };
    // The server admitted requests from the first's arrival to the Sent's, within this.
    let span = started.elapsed();
    while udp.recv(&mut buffer).is_ok() {
        replies += 1;
    }
    let burst = 1_000 / 20;
    let most = burst + (span.as_nanos() / interval.as_nanos()) as u64 + 1;
    assert!(
        (burst..=most).contains(&received),
        "{received} reflected: a burst of {burst} plus one per 20 ms over {span:?} is at most {most}"
    );
    assert_eq!(received + excess + rejected, count, "every request counted");
    assert_eq!(rejected, 0);
    assert!(replies <= received, "{replies} replies of {received}");
}

/// Regression (issue 30): each handshake could make the server hold a 1 MiB frame; 256
/// handshakes held 256 MB. 300 connections each sending a 1 MiB frame before any hello:
/// every one is closed from its length prefix, and the server stays small.
#[test]
fn three_hundred_handshakes_sending_a_mebibyte_each_leave_the_server_small() {
    // 300 MiB through loopback: never beside a timing test.
    let _lock = TestLock::shared();
    let server = ServerProcess::start(&["--max-clients", "400"]);
    let frame_len = 1u32 << 20;
    let mut garbage = frame_len.to_be_bytes().to_vec();
    garbage.resize(4 + frame_len as usize, 0x5a);
    let mut peak = 0;
    let mut connections = Vec::new();
    for i in 0..300u32 {
        let source = Ipv4Addr::new(127, 0, 20 + (i / 200) as u8, 1 + (i % 200) as u8);
        let Ok(mut stream) = pathlab_os::testing::tcp_connect_from(source.into(), server.address)
        else {
            continue;
        };
        stream.set_nonblocking(true).unwrap();
        // As much of the frame as the socket takes now: a server that reads it all holds
        // it all.
        let mut written = 0;
        while written < garbage.len() {
            match stream.write(&garbage[written..]) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        connections.push(stream);
        if i % 50 == 49 {
            peak = peak.max(rss_mib(&server));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    peak = peak.max(rss_mib(&server));
    assert!(connections.len() >= 250, "{} connected", connections.len());
    assert!(peak < 100, "the server grew to {peak} MiB");
    // Closed by the server, not kept: the log names the oversized frame.
    let log = server.log_lines();
    let oversized = log
        .iter()
        .filter(|line| line.contains("larger than this end takes"))
        .count();
    assert!(
        oversized >= 250,
        "{oversized} of {}: {log:?}",
        connections.len()
    );
}

/// Regression (issue 30): a client's error text reached the server's log raw: a newline
/// and a terminal escape could forge log lines or rewrite a terminal.
#[test]
fn a_clients_error_text_is_logged_escaped() {
    let server = ServerProcess::start(&[]);
    let mut client = RawClient::connect(server.address);
    client.send(&Message::Error {
        message: "bad\npathlab server: FORGED\u{1b}[2J".into(),
    });
    let log = server.wait_for_log("FORGED", Duration::from_secs(10));
    let line = log
        .iter()
        .find(|l| l.contains("FORGED"))
        .expect("waited for");
    assert!(
        line.contains(r"bad\npathlab server: FORGED\u{1b}[2J"),
        "{line}"
    );
    assert!(!log.iter().any(|l| l.starts_with("pathlab server: FORGED")));
    assert!(!log.iter().any(|l| l.contains('\u{1b}')));
}

/// Issue 30: a client may name only a congestion control the host allows (or, for a
/// server with CAP_NET_ADMIN, one already registered): a root server no longer loads
/// whatever module a client names.
#[test]
fn a_congestion_control_the_host_does_not_offer_is_refused() {
    let server = ServerProcess::start(&[]);
    let mut client = RawClient::connect(server.address);
    let refusal = client
        .request(
            TestRequest::Tcp {
                streams: 1,
                direction: TcpDirection::Down,
                duration_ns: 1_000_000_000,
                interval_ns: 100_000_000,
                sample_ns: 10_000_000,
                window: None,
                mss: None,
                // No such module: were the check missing, a root server would only fail
                // to load it (a test must not load a module into the host's kernel).
                congestion: Some("nosuchcc".into()),
            },
            0,
        )
        .expect_err("refused");
    let text = refusal.to_string();
    assert!(text.contains("'nosuchcc' is not allowed"), "{text}");
    let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .unwrap_or_default();
    for name in allowed.split_whitespace() {
        assert!(text.contains(name), "{text} lists {name}");
    }
}

/// Issue 30: a client that stops reading its control connection during a test no longer
/// pins its slot for ever: the server ends it at the write deadline and counts it; and
/// with another such client still stuck, SIGTERM ends the server within a second.
#[test]
fn a_client_that_stops_reading_is_ended_and_sigterm_still_returns_within_a_second() {
    let server = ServerProcess::start(&["--max-rate", "10gbit"]);
    let stall = |count: u64| {
        // A socket that is never read keeps its receive buffer at the default (128 KiB):
        // the records fill it and the server's send buffer (4 MiB at most).
        let mut client = RawClient::connect(server.address);
        let (running, udp, to) = client.upward(100_000_000, 64, count);
        for seq in 0..count {
            let _ = udp.send_to(&probe(&running, ProbeKind::OneWay, seq, 64), to);
            if seq % 64 == 63 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        client.send(&Message::Sent {
            count,
            duration_ns: 1,
            late: pathlab_probe::owd::SendLateness::default(),
        });
        // And now read nothing.
        client
    };
    // 150,000 records are about 10 MB of messages: more than both ends' buffers take.
    let first = stall(150_000);
    server.wait_for_log("stopped reading", Duration::from_secs(60));
    let _second = stall(150_000);
    std::thread::sleep(Duration::from_secs(1));
    let mut server = server;
    let (status, took) = server.terminate(Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    let summary = server.log_lines().join("\n");
    assert!(summary.contains("1 clients stopped reading"), "{summary}");
    drop(first);
}
