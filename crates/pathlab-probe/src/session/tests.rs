//! Both ends of the dialogue through emulated links in virtual time: no sockets, no root,
//! no sleeps. Port 0 of each node is the control connection (a lossless link stands in for
//! TCP), port 1 its probe socket.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

use pathlab_core::harness::{Network, Node, Port};
use pathlab_core::{Duration, Instant, LinkSpec};

use super::*;
use crate::auth::{Key, Way};
use crate::control::{Direction, Limits, Message, TcpDirection, TestRequest};
use crate::owd::{one_way_result, SendLateness, SenderReport};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));

fn limits() -> Limits {
    Limits {
        max_rate_bps: 100_000_000,
        max_duration_ns: 60_000_000_000,
        max_tests: 4,
        max_test_memory: crate::control::DEFAULT_MAX_TEST_MEMORY,
    }
}

fn key(text: &[u8]) -> Key {
    Key::from_file_contents(text).unwrap()
}

fn policy(key: Option<Key>) -> ServerPolicy {
    ServerPolicy {
        limits: limits(),
        key,
        software: "pathlab test".into(),
        congestion_allowed: vec!["reno".into(), "cubic".into(), "bbr".into()],
    }
}

/// One end's probes of a one-way test: the sender or the receiver, whichever this end is.
#[derive(Default)]
struct Probes {
    receiver: Option<ProbeReceiver>,
    sender: Option<ProbeSender>,
    sent_reported: bool,
}

impl Probes {
    /// Starts this end of `test` at `now`: it sends if the probes go `sending`'s way.
    fn start(&mut self, now: Instant, test: &TestRequest, sending: Way, padding: u8) {
        let (direction, size, count, schedule) = test.one_way().unwrap();
        let way = match direction {
            Direction::Up => Way::ClientToServer,
            Direction::Down => Way::ServerToClient,
        };
        if way == sending {
            let padding = Box::new([padding; 4096]);
            self.sender = Some(ProbeSender::new(now, way, schedule, size, count, padding));
        } else {
            self.receiver = Some(ProbeReceiver::new(way, size, count));
        }
    }

    /// The sender's `Sent` report, `sent`, arrived at `now`: the receiver, if this end is
    /// it, learns what was sent.
    fn handle_sent(&mut self, now: Instant, sent: &Message) {
        if let (
            Some(receiver),
            Message::Sent {
                count,
                duration_ns,
                late,
            },
        ) = (&mut self.receiver, sent)
        {
            receiver.handle_sent(now, *count, *duration_ns, *late);
        }
    }

    /// The receiver, once its test is over at `now`.
    fn finished(&mut self, now: Instant) -> Option<ProbeReceiver> {
        self.receiver.take_if(|receiver| receiver.is_finished(now))
    }

    /// Sends the probes due at `now` (port 1); returns the `Sent` message, once.
    fn send_due(
        &mut self,
        now: Instant,
        running: Option<&Running>,
        out: &mut VecDeque<(usize, Vec<u8>)>,
    ) -> Option<Message> {
        let sender = self.sender.as_mut()?;
        let mut bytes = Vec::new();
        while sender
            .poll_probe(now, now.as_nanos(), running.unwrap(), &mut bytes)
            .unwrap()
            .is_some()
        {
            out.push_back((1, std::mem::take(&mut bytes)));
        }
        let sent = sender.sent().filter(|_| !self.sent_reported);
        self.sent_reported |= sent.is_some();
        sent
    }

    /// A probe from `peer` arrived at `now`: the receiver takes it, if this end receives
    /// and its test (`running`, from the session) is on.
    fn handle_probe(
        &mut self,
        now: Instant,
        peer: IpAddr,
        data: &[u8],
        running: Option<(&mut Running, &mut Rejections)>,
    ) {
        if let (Some(receiver), Some((running, rejections))) = (&mut self.receiver, running) {
            receiver.handle_probe(now.as_nanos(), peer, data, false, running, rejections);
        }
    }

    /// The earliest deadline of this end: its control session's (`session`) or its
    /// probes'.
    fn poll_at(&self, session: Option<Instant>) -> Option<Instant> {
        [
            session,
            self.receiver.as_ref().and_then(ProbeReceiver::poll_at),
            self.sender.as_ref().and_then(ProbeSender::poll_at),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The [`Node`] of one end (`$node`, whose peer is at `$peer`): port 0 carries its control
/// session, port 1 its probes; after its own `work` it sends the probes due and the
/// session's bytes. Both ends' sessions have the same methods, so one text serves both.
/// The bytes of the control connection a packet carries (TCP's MSS on a 1500-byte path).
const CONTROL_SEGMENT: usize = 1448;

macro_rules! end_node {
    ($node:ty, $peer:expr) => {
        impl Node for $node {
            fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>) {
                if port == 0 {
                    self.session.handle_control(now, &data);
                } else {
                    let running = self.session.running_mut();
                    self.probes.handle_probe(now, $peer, &data, running);
                }
            }

            fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
                self.work(now);
                if let Some(sent) = self
                    .probes
                    .send_due(now, self.session.running(), &mut self.out)
                {
                    self.session.send(&sent);
                }
                // In segments, as TCP carries them: a long message arrives over time.
                while let Some(bytes) = self.session.poll_transmit() {
                    for segment in bytes.chunks(CONTROL_SEGMENT) {
                        self.out.push_back((0, segment.to_vec()));
                    }
                }
                self.out.pop_front()
            }

            fn poll_at(&self) -> Option<Instant> {
                self.probes.poll_at(self.session.poll_at())
            }
        }
    };
}

/// The server as a node: one connection, the one-way test's receiver or sender.
struct ServerNode {
    session: ServerSession,
    probes: Probes,
    out: VecDeque<(usize, Vec<u8>)>,
    ended: Option<Result<String, SessionError>>,
    session_id: u64,
}

impl ServerNode {
    fn new(key: Option<Key>, session_id: u64) -> ServerNode {
        ServerNode {
            session: ServerSession::new(Instant::ZERO, policy(key), CLIENT, [2; 16]),
            probes: Probes::default(),
            out: VecDeque::new(),
            ended: None,
            session_id,
        }
    }

    fn work(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        while let Some(event) = self.session.poll_event() {
            match event {
                ServerEvent::Request(test) => {
                    self.session.accept(now, self.session_id, 5000);
                    self.probes.start(now, &test, Way::ServerToClient, 7);
                }
                ServerEvent::Message(sent @ Message::Sent { .. }) => {
                    self.probes.handle_sent(now, &sent);
                }
                ServerEvent::Message(Message::Done { received, .. }) => {
                    self.session
                        .finish(format!("the client received {received}"));
                }
                ServerEvent::Message(other) => panic!("unexpected {other:?}"),
                ServerEvent::Ended(outcome) => self.ended = Some(outcome),
            }
        }
        if let Some(receiver) = self.probes.finished(now) {
            let rejected = self.session.rejections.probes;
            let (received, messages) = receiver.finish(rejected);
            for message in &messages {
                self.session.send(message);
            }
            self.session
                .finish(format!("received {}", received.arrivals.len()));
            self.work(now);
        }
    }
}

end_node!(ServerNode, CLIENT);

/// The client as a node: asks for `test` once connected.
struct ClientNode {
    session: ClientSession,
    test: TestRequest,
    probes: Probes,
    records: Vec<crate::control::ReceivedProbe>,
    done: Option<(u64, u64)>,
    failed: Option<SessionError>,
    out: VecDeque<(usize, Vec<u8>)>,
}

impl ClientNode {
    fn new(key: Option<Key>, test: TestRequest) -> ClientNode {
        ClientNode {
            session: ClientSession::new(Instant::ZERO, key, SERVER, [1; 16], "test".into()),
            test,
            probes: Probes::default(),
            records: Vec::new(),
            done: None,
            failed: None,
            out: VecDeque::new(),
        }
    }

    fn work(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        while let Some(event) = self.session.poll_event() {
            match event {
                ClientEvent::Connected { .. } => self.session.request(now, self.test.clone(), 6000),
                ClientEvent::Accepted => {
                    self.probes.start(now, &self.test, Way::ClientToServer, 9);
                }
                ClientEvent::Message(Message::Received { probes }) => self.records.extend(probes),
                ClientEvent::Message(Message::Done {
                    received, rejected, ..
                }) => {
                    self.done = Some((received, rejected));
                    self.session.finish();
                }
                ClientEvent::Message(sent @ Message::Sent { .. }) => {
                    self.probes.handle_sent(now, &sent);
                }
                ClientEvent::Message(other) => panic!("unexpected {other:?}"),
                ClientEvent::Failed(error) => self.failed = Some(error),
            }
        }
        if let Some(receiver) = self.probes.finished(now) {
            let rejected = self.session.rejections.probes;
            let (received, messages) = receiver.finish(rejected);
            self.session.send(messages.last().unwrap());
            self.done = Some((received.arrivals.len() as u64, rejected));
            self.records = received.arrivals;
            self.session.finish();
        }
    }
}

end_node!(ClientNode, SERVER);

fn spec(text: &str) -> LinkSpec {
    LinkSpec::parse(text).unwrap()
}

/// Runs `client` and `server` for `seconds`: control over a lossless 10 ms link each way,
/// probes over `probes` each way.
fn run(client: &mut ClientNode, server: &mut ServerNode, probes: &str, seconds: u64) {
    let mut network = Network::new(28);
    let control = spec("delay 10ms");
    network
        .connect(Port::new(0, 0), Port::new(1, 0), &control, &control, 1)
        .unwrap();
    network
        .connect(
            Port::new(0, 1),
            Port::new(1, 1),
            &spec(probes),
            &spec(probes),
            2,
        )
        .unwrap();
    network.run_until(Instant::from_secs(seconds), &mut [client, server]);
}

fn one_way(direction: Direction, count: u64) -> TestRequest {
    TestRequest::OneWay {
        direction,
        rate_bps: 1_000_000,
        size: 125,
        count,
    }
}

#[test]
fn a_one_way_test_runs_in_virtual_time_and_measures_the_link() {
    for (direction, psk) in [
        (Direction::Up, None),
        (Direction::Up, Some(key(b"0123456789abcdef"))),
        (Direction::Down, Some(key(b"0123456789abcdef"))),
    ] {
        let mut client = ClientNode::new(psk.clone(), one_way(direction, 2000));
        let mut server = ServerNode::new(psk.clone(), 0x5eed);
        // 1 Mbit/s of 125-byte probes: 1000 per second, 2 s; 2% loss, 25 ms.
        run(&mut client, &mut server, "delay 25ms loss 2%", 10);
        assert_eq!(client.failed, None, "{direction:?} {}", psk.is_some());
        let (received, rejected) = client.done.expect("the test ended");
        assert_eq!(rejected, 0);
        assert_eq!(received as usize, client.records.len());
        // Binomial(2000, 0.98): mean 1960, sd 6.3; 5 sd either way.
        assert!((1928..=1992).contains(&received), "{received} of 2000");
        let result = one_way_result(
            SenderReport {
                direction,
                rate_bps: 1_000_000,
                size: 125,
                sent: 2000,
                duration_ns: 0,
                late: SendLateness::default(),
            },
            &client.records,
            0,
            0,
            100,
        );
        assert_eq!(result.sequence.lost, 2000 - received);
        // The link has no rate: every probe took its delay, exactly.
        for record in &client.records {
            assert_eq!(record.received_ns - record.sent_ns, 25_000_000);
        }
        assert!(matches!(server.ended, Some(Ok(_))), "{:?}", server.ended);
    }
}

#[test]
fn limits_are_checked_and_refused_with_the_limit() {
    let mut client = ClientNode::new(
        None,
        TestRequest::OneWay {
            direction: Direction::Up,
            rate_bps: 200_000_000,
            size: 1200,
            count: 10,
        },
    );
    let mut server = ServerNode::new(None, 1);
    run(&mut client, &mut server, "delay 1ms", 2);
    assert_eq!(
        client.failed,
        Some(SessionError::Refused(Refusal::RateTooHigh {
            max_rate_bps: 100_000_000,
            asked_bps: 200_000_000
        }))
    );
    assert!(matches!(&server.ended, Some(Ok(line)) if line.starts_with("refused")));
    // What the server's counters read: the request's kind and the limit it hit.
    assert!(
        matches!(
            server.session.refused(),
            Some((
                TestRequest::OneWay { .. },
                Refusal::RateTooHigh {
                    asked_bps: 200_000_000,
                    ..
                }
            ))
        ),
        "{:?}",
        server.session.refused()
    );
}

#[test]
fn different_keys_fail_at_the_welcome_and_the_server_answers_nothing_more() {
    // A client with `client_key` asks a server with another key for a test.
    let against_server_key = |client_key| {
        let mut client = ClientNode::new(client_key, one_way(Direction::Up, 10));
        let mut server = ServerNode::new(Some(key(b"fedcba9876543210")), 1);
        run(&mut client, &mut server, "delay 1ms", 2);
        (client, server)
    };
    let auth_failed = |client: &ClientNode, why: &str| matches!(&client.failed, Some(SessionError::Auth(said)) if said.contains(why));
    let (client, server) = against_server_key(Some(key(b"0123456789abcdef")));
    assert!(auth_failed(&client, "keys differ"), "{:?}", client.failed);
    assert_eq!(client.session.rejections.control, 1);
    // The client said nothing after the hello: the server still waits for a request.
    assert!(server.session.in_handshake());
    // A key on one side only: the server says so in its answer to the hello.
    let (client, _) = against_server_key(None);
    let why = "requires a pre-shared key";
    assert!(auth_failed(&client, why), "{:?}", client.failed);
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let mut server = ServerSession::new(Instant::ZERO, policy(None), CLIENT, [2; 16]);
    assert_eq!(server.poll_at(), Some(Instant::ZERO + HANDSHAKE_TIMEOUT));
    server.handle_timeout(Instant::ZERO + HANDSHAKE_TIMEOUT - Duration::from_millis(1));
    assert!(server.poll_event().is_none());
    server.handle_timeout(Instant::ZERO + HANDSHAKE_TIMEOUT);
    assert_eq!(
        server.poll_event(),
        Some(ServerEvent::Ended(Err(SessionError::Timeout(
            "the client's hello"
        ))))
    );
    assert_eq!(
        server.poll_transmit(),
        None,
        "nothing said to a silent client"
    );
}

/// A node that stops answering at an instant (a server frozen by SIGSTOP).
struct Frozen<'a>(&'a mut ServerNode, Instant);
impl Node for Frozen<'_> {
    fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>) {
        if now < self.1 {
            self.0.handle(now, port, data);
        }
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        (now < self.1).then(|| self.0.poll_transmit(now)).flatten()
    }
    fn poll_at(&self) -> Option<Instant> {
        self.0.poll_at().filter(|&at| at < self.1)
    }
}

#[test]
fn a_frozen_server_ends_the_client_at_the_tests_time_plus_the_grace() {
    // The server accepts, then freezes (its node is not run any more): the probes flow
    // into the void and no results come back.
    let test = one_way(Direction::Up, 1000);
    let mut client = ClientNode::new(None, test.clone());
    let mut server = ServerNode::new(None, 3);
    let mut network = Network::new(28);
    let control = spec("delay 10ms");
    network
        .connect(Port::new(0, 0), Port::new(1, 0), &control, &control, 1)
        .unwrap();
    // Hello, welcome, request, accept: then the server stops answering.
    let mut frozen = Frozen(&mut server, Instant::from_millis(100));
    network.run_until(Instant::from_secs(60), &mut [&mut client, &mut frozen]);
    assert_eq!(
        client.failed,
        Some(SessionError::Timeout("the server's results"))
    );
    // Accepted at 40 ms (two round trips of 20 ms); the test takes 1 s; then the grace.
    let accepted = Instant::from_millis(40);
    let expected = accepted + Duration::from_nanos(test.duration_ns()) + TEST_GRACE;
    assert_eq!(client.session.poll_at(), None);
    assert!(network.now() >= expected);
}

/// Regression (benches/bond_soak.py, issue 40): a 20-minute test's 2.25 million records
/// took 10 s to come back through the tunnel, and the client gave up at the test's time
/// plus the grace while they were still arriving ("the server stopped answering"). A
/// server whose results are still coming is answering: each byte of them moves the
/// deadline to a grace after it. Here 2,000 records come back over a 24 kbit/s control
/// path, about 14 s after the test's end.
#[test]
fn results_that_are_still_arriving_after_the_grace_are_waited_for() {
    let test = one_way(Direction::Up, 2000);
    let mut client = ClientNode::new(None, test);
    let mut server = ServerNode::new(None, 3);
    let mut network = Network::new(28);
    let (up, down) = (
        spec("delay 10ms"),
        spec("delay 10ms rate 24kbit limit 100000"),
    );
    network
        .connect(Port::new(0, 0), Port::new(1, 0), &up, &down, 1)
        .unwrap();
    let probes = spec("delay 10ms");
    network
        .connect(Port::new(0, 1), Port::new(1, 1), &probes, &probes, 2)
        .unwrap();
    // A second past the test's 2 s and the grace: still arriving, not given up.
    let past_grace = Instant::ZERO + Duration::from_secs(3) + TEST_GRACE;
    network.run_until(past_grace, &mut [&mut client, &mut server]);
    assert_eq!(client.failed, None);
    assert!(
        client.done.is_none(),
        "the path is too fast to show the case"
    );
    network.run_until(Instant::from_secs(60), &mut [&mut client, &mut server]);
    assert_eq!(client.failed, None);
    let (received, _) = client.done.expect("the test ended");
    assert_eq!(received, 2000);
    assert_eq!(client.records.len(), 2000);
}

/// A server session in a running TCP test, and the client session that asked for it.
fn tcp_pair(
    psk: Option<Key>,
    direction: TcpDirection,
    session_id: u64,
) -> (ClientSession, ServerSession) {
    let now = Instant::ZERO;
    let mut client = ClientSession::new(now, psk.clone(), SERVER, [1; 16], "c".into());
    let mut server = ServerSession::new(now, policy(psk), CLIENT, [session_id as u8; 16]);
    let pump = |client: &mut ClientSession, server: &mut ServerSession| {
        for _ in 0..4 {
            while let Some(bytes) = client.poll_transmit() {
                server.handle_control(now, &bytes);
            }
            while let Some(bytes) = server.poll_transmit() {
                client.handle_control(now, &bytes);
            }
        }
    };
    pump(&mut client, &mut server);
    assert!(matches!(
        client.poll_event(),
        Some(ClientEvent::Connected { .. })
    ));
    client.request(
        now,
        TestRequest::Tcp {
            streams: 2,
            direction,
            duration_ns: 1_000_000_000,
            interval_ns: 100_000_000,
            sample_ns: 10_000_000,
            window: None,
            mss: None,
            congestion: None,
        },
        0,
    );
    pump(&mut client, &mut server);
    assert!(matches!(server.poll_event(), Some(ServerEvent::Request(_))));
    server.accept(now, session_id, 7000);
    pump(&mut client, &mut server);
    assert_eq!(client.poll_event(), Some(ClientEvent::Accepted));
    (client, server)
}

#[test]
fn greetings_open_only_the_streams_asked_for_in_their_own_session() {
    for psk in [None, Some(key(b"0123456789abcdef"))] {
        let authenticated = psk.is_some();
        let (client, mut server) = tcp_pair(psk.clone(), TcpDirection::Up, 0xa11ce);
        let (other, _) = tcp_pair(psk.clone(), TcpDirection::Up, 0xb0b);
        let running = client.running().unwrap();
        let (server_test, rejections) = server.running_mut().unwrap();
        // The two upward streams open, once each.
        assert_eq!(
            server_test.accept_greeting(&running.greeting(0, false), rejections),
            Some((0, false))
        );
        assert_eq!(
            server_test.accept_greeting(&running.greeting(0, false), rejections),
            None,
            "replayed"
        );
        assert_eq!(
            server_test.accept_greeting(&running.greeting(2, false), rejections),
            None,
            "stream 2 of 2"
        );
        assert_eq!(
            server_test.accept_greeting(&running.greeting(1, true), rejections),
            None,
            "down in an up test"
        );
        // Another session's greeting: its id differs (and, with a key, its greeting key).
        let foreign = other.running().unwrap().greeting(1, false);
        assert_eq!(
            server_test.accept_greeting(&foreign, rejections),
            None,
            "another session"
        );
        // A forged greeting: this session's id, a made-up tag.
        let mut forged = running.greeting(1, false);
        forged[20] ^= 1;
        let forged_ok = server_test.accept_greeting(&forged, rejections);
        if authenticated {
            assert_eq!(forged_ok, None, "forged");
            assert_eq!(rejections.greetings, 5);
            assert_eq!(
                server_test.accept_greeting(&running.greeting(1, false), rejections),
                Some((1, false))
            );
        } else {
            // Without a key the tag is not checked: the session id alone (64 random bits).
            assert_eq!(forged_ok, Some((1, false)));
            assert_eq!(rejections.greetings, 4);
        }
    }
}

#[test]
fn reflected_and_replayed_control_messages_are_refused_and_counted() {
    let psk = Some(key(b"0123456789abcdef"));
    // Reflected: the server's accept (its message 1) sent back to it as the client's.
    let (mut client, mut server) = tcp_pair(psk.clone(), TcpDirection::Up, 1);
    server.send(&Message::Done {
        received: 0,
        rejected: 0,
        duplicates: 0,
        excess: 0,
    });
    let server_message = server.poll_transmit().unwrap();
    client.handle_control(Instant::ZERO, &server_message);
    // The client has sent hello and request (message 0): its next counter is 1, and the
    // server's message 2 carries counter 2; resend the server's whole frame to it.
    while server.poll_event().is_some() {}
    server.handle_control(Instant::ZERO, &server_message);
    assert_eq!(server.rejections.control, 1, "reflected");
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Ended(Err(SessionError::Auth(_))))
    ));
    // Replayed from an earlier session: a request recorded in one dialogue, played into a
    // fresh one after its hello.
    let now = Instant::ZERO;
    let mut recorded = ClientSession::new(now, psk.clone(), SERVER, [1; 16], "c".into());
    let mut first = ServerSession::new(now, policy(psk.clone()), CLIENT, [2; 16]);
    first.handle_control(now, &recorded.poll_transmit().unwrap());
    recorded.handle_control(now, &first.poll_transmit().unwrap());
    recorded.request(now, one_way(Direction::Up, 10), 1);
    let request = recorded.poll_transmit().unwrap();
    let mut replay = ServerSession::new(now, policy(psk.clone()), CLIENT, [3; 16]);
    // The attacker replays the first hello too (it is not tagged)...
    let mut again = ClientSession::new(now, psk, SERVER, [1; 16], "c".into());
    replay.handle_control(now, &again.poll_transmit().unwrap());
    assert!(replay.poll_transmit().is_some(), "the hello is answered");
    // ...but the request was tagged under the first connection's nonces.
    replay.handle_control(now, &request);
    assert_eq!(replay.rejections.control, 1, "replayed");
    assert!(matches!(
        replay.poll_event(),
        Some(ServerEvent::Ended(Err(SessionError::Auth(_))))
    ));
    assert_eq!(replay.poll_transmit(), None, "nothing answered");
    // The same request in its own connection is accepted.
    first.handle_control(now, &request);
    assert!(matches!(first.poll_event(), Some(ServerEvent::Request(_))));
}

#[test]
fn a_sender_held_back_says_how_late_its_probes_went_and_a_peers_figures_are_bounded() {
    let (client, _) = tcp_pair(None, TcpDirection::Up, 10);
    let running = client.running().unwrap();
    // 100 probes 1 ms apart; the sender polled on time but for probes 40-49, which it
    // only gets to at 55 ms (10 ms after probe 45 was due, 15 after probe 40).
    let schedule = crate::control::Schedule {
        length: 1,
        spacing_ns: 0.0,
        period_ns: 1e6,
    };
    let mut sender = ProbeSender::new(
        Instant::ZERO,
        Way::ClientToServer,
        schedule,
        200,
        100,
        Box::new([0; 4096]),
    );
    let mut bytes = Vec::new();
    let mut ms = 0;
    while let Some(due) = sender.poll_at() {
        let now = if (40..55).contains(&ms) {
            Instant::ZERO + Duration::from_millis(55)
        } else {
            due
        };
        ms = now.as_nanos() / 1_000_000;
        while sender
            .poll_probe(now, 0, running, &mut bytes)
            .unwrap()
            .is_some()
        {}
        ms += 1;
    }
    let Some(Message::Sent { count, late, .. }) = sender.sent() else {
        panic!("the sender is done");
    };
    assert_eq!(count, 100);
    // 85 probes on time; 15 late by 15, 14, ... 1 ms (probes 40 to 54, all sent at 55).
    assert_eq!(late.p50_ns, 0);
    assert!((late.max_ns as f64 / 15e6 - 1.0).abs() < 1e-3, "{late:?}");
    assert!((late.p99_ns as f64 / 14e6 - 1.0).abs() < 1e-3, "{late:?}");
    // A peer's figures are put in order and capped at an hour.
    let wild = SendLateness {
        p50_ns: u64::MAX,
        p99_ns: 5,
        max_ns: u64::MAX,
    }
    .bounded();
    assert_eq!(
        (wild.p50_ns, wild.p99_ns, wild.max_ns),
        (5, 5, SendLateness::MAX_NS)
    );
}

#[test]
fn probes_of_another_session_sender_or_direction_are_refused_and_counted() {
    let psk = Some(key(b"0123456789abcdef"));
    let (client, mut server) = tcp_pair(psk.clone(), TcpDirection::Up, 10);
    let (other, _) = tcp_pair(psk, TcpDirection::Up, 11);
    let mut receiver = ProbeReceiver::new(Way::ClientToServer, 200, 10);
    let sender = |running: &Running, way: Way| {
        let mut bytes = Vec::new();
        let mut s = ProbeSender::new(
            Instant::ZERO,
            way,
            crate::control::Schedule {
                length: 1,
                spacing_ns: 0.0,
                period_ns: 0.0,
            },
            200,
            1,
            Box::new([0; 4096]),
        );
        s.poll_probe(Instant::ZERO, 1, running, &mut bytes)
            .unwrap()
            .unwrap();
        bytes
    };
    let good = sender(client.running().unwrap(), Way::ClientToServer);
    let foreign = sender(other.running().unwrap(), Way::ClientToServer);
    let wrong_way = sender(client.running().unwrap(), Way::ServerToClient);
    let (running, rejections) = server.running_mut().unwrap();
    assert!(receiver.handle_probe(5, CLIENT, &good, false, running, rejections));
    let stranger = IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9));
    for (from, probe, truncated, why) in [
        (CLIENT, &foreign, false, "another session"),
        (CLIENT, &wrong_way, false, "the server's own direction"),
        (stranger, &good, false, "another sender"),
        (CLIENT, &good, true, "truncated"),
    ] {
        let taken = receiver.handle_probe(5, from, probe, truncated, running, rejections);
        assert!(!taken, "{why}");
    }
    assert_eq!(rejections.probes, 4);
    assert_eq!(receiver.received(), 1);
    // An IPv4 client seen through a dual-stack socket is the same client.
    let mapped = IpAddr::V6(Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped());
    assert!(receiver.handle_probe(6, mapped, &good, false, running, rejections));
}

proptest::proptest! {
    /// Whatever bytes arrive, in whatever chunks, neither end panics; a session that ends
    /// says why once.
    #[test]
    fn any_bytes_on_the_control_connection_end_a_session_cleanly(
        chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..8),
        keyed: bool,
    ) {
        let psk = keyed.then(|| key(b"0123456789abcdef"));
        let mut server = ServerSession::new(Instant::ZERO, policy(psk.clone()), CLIENT, [2; 16]);
        let mut client = ClientSession::new(Instant::ZERO, psk, SERVER, [1; 16], "c".into());
        for chunk in &chunks {
            server.handle_control(Instant::ZERO, chunk);
            client.handle_control(Instant::ZERO, chunk);
        }
        server.handle_close(Instant::ZERO);
        client.handle_close(Instant::ZERO);
        let ended = std::iter::from_fn(|| server.poll_event())
            .filter(|e| matches!(e, ServerEvent::Ended(_)))
            .count();
        proptest::prop_assert_eq!(ended, 1);
        let failed = std::iter::from_fn(|| client.poll_event())
            .filter(|e| matches!(e, ClientEvent::Failed(_)))
            .count();
        proptest::prop_assert!(failed <= 1);
    }
}

/// Regression (issue 30): a TCP test's report interval had no floor, so `tcp -i 1us -t 20`
/// made the server keep 20 million slots. The interval is bounded below and the number of
/// intervals above, before the test is accepted.
#[test]
fn a_tcp_report_interval_is_bounded_below_and_its_count_above() {
    let tcp = |duration_ns: u64, interval_ns: u64| TestRequest::Tcp {
        streams: 1,
        direction: TcpDirection::Up,
        duration_ns,
        interval_ns,
        sample_ns: 10_000_000,
        window: None,
        mss: None,
        congestion: None,
    };
    let refusal = |test: &TestRequest| match check_limits(test, &limits()) {
        Err(Refusal::BadRequest { why }) => why,
        other => panic!("{other:?}"),
    };
    let min = MIN_REPORT_INTERVAL.as_nanos();
    assert!(refusal(&tcp(20_000_000_000, 1_000)).contains("at least 10 ms"));
    assert!(refusal(&tcp(20_000_000_000, 1)).contains("at least 10 ms"));
    assert!(refusal(&tcp(1_000_000_000, min - 1)).contains("at least 10 ms"));
    assert_eq!(check_limits(&tcp(1_000_000_000, min), &limits()), Ok(()));
    // 10,000 intervals are the most: 100 s at 10 ms (within a 200 s limit here).
    let long = Limits {
        max_duration_ns: 200_000_000_000,
        ..limits()
    };
    assert_eq!(check_limits(&tcp(100_000_000_000, min), &long), Ok(()));
    match check_limits(&tcp(100_000_000_001, min), &long) {
        Err(Refusal::BadRequest { why }) => {
            assert!(why.starts_with("10001 report intervals"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// Regression (issue 30): a client's error text and congestion-control name reached the
/// server's log raw (newlines, terminal escapes), and a root server loaded any module a
/// client named; an MSS of a few bytes multiplied the server's packets.
#[test]
fn a_peer_chooses_no_escape_no_odd_congestion_name_and_no_tiny_mss() {
    assert_eq!(peer_text("bad\n\u{1b}[31mred\r"), "bad\\n\\u{1b}[31mred\\r");
    assert_eq!(peer_text("naïve text"), "naïve text");
    let long = "x".repeat(MAX_PEER_TEXT + 10);
    assert_eq!(
        peer_text(&long),
        format!("{}...", "x".repeat(MAX_PEER_TEXT))
    );
    let tcp = |mss: Option<u32>, congestion: Option<&str>| TestRequest::Tcp {
        streams: 1,
        direction: TcpDirection::Up,
        duration_ns: 1_000_000_000,
        interval_ns: 100_000_000,
        sample_ns: 10_000_000,
        window: None,
        mss,
        congestion: congestion.map(str::to_owned),
    };
    let refused = |test: TestRequest| match check_limits(&test, &limits()) {
        Err(Refusal::BadRequest { why }) => why,
        other => panic!("{other:?}"),
    };
    for mss in [0, 1, MIN_MSS - 1, 65_536] {
        assert!(
            refused(tcp(Some(mss), None)).contains("536 to 65535"),
            "{mss}"
        );
    }
    for mss in [MIN_MSS, 1448, 65_535] {
        assert_eq!(
            check_limits(&tcp(Some(mss), None), &limits()),
            Ok(()),
            "{mss}"
        );
    }
    let escaped = refused(tcp(None, Some("cubic\n\u{1b}[2J")));
    assert!(escaped.contains("cubic\\n\\u{1b}[2J"), "{escaped}");
    for bad in ["", "Cubic", "tcp-lp", "../cubic", &"a".repeat(16)] {
        assert!(
            refused(tcp(None, Some(bad))).contains("a-z, 0-9, _"),
            "{bad}"
        );
    }
    for good in ["reno", "cubic", "bbr", &"a".repeat(15)] {
        assert_eq!(
            check_limits(&tcp(None, Some(good)), &limits()),
            Ok(()),
            "{good}"
        );
    }
}

/// Probes `0..count` of `running`'s test going up, each `size` bytes.
fn upward_probes(running: &Running, size: u32, count: u64) -> Vec<Vec<u8>> {
    let mut sender = ProbeSender::new(
        Instant::ZERO,
        Way::ClientToServer,
        crate::control::Schedule {
            length: count,
            spacing_ns: 0.0,
            period_ns: 0.0,
        },
        size,
        count,
        Box::new([0; 4096]),
    );
    (0..count)
        .map(|_| {
            let mut bytes = Vec::new();
            sender
                .poll_probe(Instant::ZERO, 1, running, &mut bytes)
                .unwrap()
                .unwrap();
            bytes
        })
        .collect()
}

/// Regression (issue 30): an upward test recorded every accepted probe, copies included,
/// with no cap at the count asked for (60 s of small probes at 1 Gbit/s: 5.6 GB). Each
/// sequence number is recorded once, copies are counted, and numbers past the count are
/// not the test's.
#[test]
fn a_receiver_records_each_probe_of_its_count_once_and_counts_the_copies() {
    let (client, mut server) = tcp_pair(None, TcpDirection::Up, 12);
    let probes = upward_probes(client.running().unwrap(), 200, 12);
    let mut receiver = ProbeReceiver::new(Way::ClientToServer, 200, 10);
    let (running, rejections) = server.running_mut().unwrap();
    // Every probe five times over, the two past the count included.
    for _ in 0..5 {
        for probe in &probes {
            receiver.handle_probe(1, CLIENT, probe, false, running, rejections);
        }
    }
    assert_eq!(rejections.probes, 2 * 5, "sequence numbers 10 and 11");
    let (received, messages) = receiver.finish(rejections.probes);
    assert_eq!(received.arrivals.len(), 10);
    let seqs: Vec<u64> = received.arrivals.iter().map(|a| a.seq).collect();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    assert_eq!(received.duplicates, 4 * 10);
    assert!(matches!(
        messages.last(),
        Some(Message::Done {
            received: 10,
            duplicates: 40,
            ..
        })
    ));
    // The copies still count as duplicates in the result, as they did when recorded.
    let result = one_way_result(
        SenderReport {
            direction: Direction::Up,
            rate_bps: 1_000_000,
            size: 200,
            sent: 10,
            duration_ns: 1,
            late: SendLateness::default(),
        },
        &received.arrivals,
        0,
        received.duplicates,
        100,
    );
    assert_eq!(
        (result.sequence.received, result.sequence.duplicates),
        (10, 40)
    );
}

/// Regression (issue 30): a reflector echoed requests of any number at any rate for the
/// whole test. It answers at most the count, at the test's rate with a second's burst.
#[test]
fn a_reflector_answers_the_asked_rate_and_count_and_counts_the_excess() {
    let interval = Duration::from_millis(10);
    // Ten times the asked rate (a request every ms) for 5 s: 5,000 requests for a test
    // of 1,000 at 100/s. The first second's burst (100) plus 100/s for 5 s (500) pass.
    let mut reflector = Reflector::new(Instant::ZERO, 1_000, interval);
    let mut answered = 0;
    for ms in 0..5_000 {
        if reflector.admit(Instant::ZERO + Duration::from_millis(ms)) {
            answered += 1;
        }
    }
    assert!((599..=601).contains(&answered), "{answered}");
    assert_eq!(reflector.excess(), 5_000 - answered);
    // At the asked rate every request passes, up to the count and not one more.
    let mut reflector = Reflector::new(Instant::ZERO, 300, interval);
    let answered = (0..400)
        .filter(|&i| reflector.admit(Instant::ZERO + Duration::from_millis(10 * i)))
        .count();
    assert_eq!(answered, 300);
    assert_eq!(reflector.excess(), 100);
}

/// Issue 30: what a test holds on the server is known before it is accepted, and a test
/// above `--max-test-memory` is refused saying so.
#[test]
fn a_test_that_would_hold_too_much_memory_is_refused_before_it_starts() {
    let limits = Limits {
        max_rate_bps: u64::MAX,
        ..limits()
    };
    // 60 s of 64-byte probes at 1 Gbit/s upward: 117 M records (2.8 GB).
    let count = 60 * 1_000_000_000 / (64 * 8);
    let up = TestRequest::OneWay {
        direction: Direction::Up,
        rate_bps: 1_000_000_000,
        size: 64,
        count,
    };
    let record = std::mem::size_of::<crate::control::ReceivedProbe>() as u64;
    assert!(test_memory(&up) >= count * record);
    match check_limits(&up, &limits) {
        Err(Refusal::TooMuchMemory {
            max_bytes,
            asked_bytes,
        }) => {
            assert_eq!(max_bytes, crate::control::DEFAULT_MAX_TEST_MEMORY);
            assert_eq!(asked_bytes, test_memory(&up));
        }
        other => panic!("{other:?}"),
    }
    // The same probes downwards are the client's to keep.
    let down = TestRequest::OneWay {
        direction: Direction::Down,
        rate_bps: 1_000_000_000,
        size: 64,
        count,
    };
    assert_eq!(check_limits(&down, &limits), Ok(()));
    // An ordinary upward test fits.
    let ordinary = one_way(Direction::Up, 50_000);
    assert_eq!(check_limits(&ordinary, &limits), Ok(()));
    // 128 streams sampled every ms for 60 s hold 2.5 GB of samples and report.
    let tcp = |streams: u32, sample_ns: u64| TestRequest::Tcp {
        streams,
        direction: TcpDirection::Both,
        duration_ns: 60_000_000_000,
        interval_ns: 100_000_000,
        sample_ns,
        window: None,
        mss: None,
        congestion: None,
    };
    assert!(matches!(
        check_limits(&tcp(128, 1_000_000), &limits),
        Err(Refusal::TooMuchMemory { .. })
    ));
    assert_eq!(check_limits(&tcp(8, 10_000_000), &limits), Ok(()));
    match check_limits(&tcp(1, 999_999), &limits) {
        Err(Refusal::BadRequest { why }) => assert!(why.contains("at least 1 ms"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// Regression (issue 30): each connection in its handshake could make the server buffer a
/// 1 MiB frame (256 of them: 256 MB) before saying anything. A frame longer than a hello
/// needs ends the handshake from its length prefix alone.
#[test]
fn a_handshake_frame_longer_than_a_hello_ends_the_session_unread() {
    let mut server = ServerSession::new(Instant::ZERO, policy(None), CLIENT, [3; 16]);
    let prefix = ((crate::control::MAX_HANDSHAKE_FRAME + 1) as u32).to_be_bytes();
    server.handle_control(Instant::ZERO, &prefix);
    server.handle_control(Instant::ZERO, &[b'x'; 1024]);
    match server.poll_event() {
        Some(ServerEvent::Ended(Err(SessionError::Protocol(why)))) => {
            assert!(why.contains("larger than this end takes"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // A running test's messages may be as large as the protocol allows (a TCP report).
    let (mut client, mut running) = tcp_pair(None, TcpDirection::Up, 13);
    let report = Message::TcpReport {
        up: vec![crate::tcp::StreamReport {
            interval_bytes: vec![u64::MAX; 2_000],
            ..Default::default()
        }],
        down: Vec::new(),
        cpu_ns: 0,
    };
    client.send(&report);
    let bytes = client.poll_transmit().unwrap();
    assert!(bytes.len() > crate::control::MAX_HANDSHAKE_FRAME);
    running.handle_control(Instant::ZERO, &bytes);
    assert_eq!(
        running.poll_event(),
        Some(ServerEvent::Message(report)),
        "accepted once the test runs"
    );
}

/// Issue 30: a TCP test may name only a congestion control the host allows, and the
/// refusal says which it allows.
#[test]
fn a_congestion_control_outside_the_hosts_allowed_list_is_refused() {
    let mut client = ClientSession::new(Instant::ZERO, None, SERVER, [1; 16], "c".into());
    let mut server = ServerSession::new(Instant::ZERO, policy(None), CLIENT, [2; 16]);
    let pump = |client: &mut ClientSession, server: &mut ServerSession| {
        for _ in 0..4 {
            while let Some(bytes) = client.poll_transmit() {
                server.handle_control(Instant::ZERO, &bytes);
            }
            while let Some(bytes) = server.poll_transmit() {
                client.handle_control(Instant::ZERO, &bytes);
            }
        }
    };
    pump(&mut client, &mut server);
    client.request(
        Instant::ZERO,
        TestRequest::Tcp {
            streams: 1,
            direction: TcpDirection::Down,
            duration_ns: 1_000_000_000,
            interval_ns: 100_000_000,
            sample_ns: 10_000_000,
            window: None,
            mss: None,
            congestion: Some("vegas".into()),
        },
        0,
    );
    pump(&mut client, &mut server);
    let refusal = server.refused().map(|(_, refusal)| refusal.to_string());
    assert_eq!(
        refusal.as_deref(),
        Some(
            "bad request: congestion control 'vegas' is not allowed on this server \
             (it allows: reno cubic bbr)"
        )
    );
}

/// A keyed probe smaller than its header and tag goes out at that least length: the
/// receiver takes it at that length (a reflector too, through the same `probe_len`).
#[test]
fn a_keyed_probe_below_its_least_length_is_received_at_that_length() {
    let psk = Some(key(b"0123456789abcdef"));
    let (client, mut server) = tcp_pair(psk, TcpDirection::Up, 14);
    let probes = upward_probes(client.running().unwrap(), 40, 3);
    let least = crate::probe::min_len(ProbeKind::OneWay, true);
    assert!(probes.iter().all(|p| p.len() == least));
    let mut receiver = ProbeReceiver::new(Way::ClientToServer, 40, 3);
    let (running, rejections) = server.running_mut().unwrap();
    assert_eq!(receiver.probe_len(running), least);
    for probe in &probes {
        assert!(receiver.handle_probe(1, CLIENT, probe, false, running, rejections));
    }
    assert_eq!((receiver.received(), rejections.probes), (3, 0));
}
