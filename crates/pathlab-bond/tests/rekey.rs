//! Keys that roll over inside a session, in virtual time ([`pathlab_bond::rekey`]): a
//! session rekeyed every 10 s for 10 minutes with traffic both ways loses nothing for want
//! of a key (a slow line keeps datagrams in flight across every switch), keeps its id and
//! its state, and refuses a datagram under a key past `reject_after`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr};

use pathlab_bond::crypto::Psk;
use pathlab_bond::sim::{packet, SeededEntropy, SIM_UNIX_START_NS};
use pathlab_bond::wire::Header;
use pathlab_bond::{Address, Bond, BondConfig, ClientKeys, SecretKey, Server, ServerConfig};
use pathlab_core::rng::Rng;
use pathlab_core::{Duration, Instant};

const USER: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
/// Each line's one-way delay: line 1 is slow, so at every switch its datagrams under the
/// old keys arrive after line 0's under the new ones.
const LINE_DELAY_MS: [u64; 2] = [10, 70];
/// One inner packet each way this often.
const PACKET_EVERY: Duration = Duration::from_millis(20);
/// Where a sim packet's number lies.
const NUMBER_AT: std::ops::Range<usize> = 29..37;

fn psk() -> Psk {
    Psk::from_file_contents(b"q0Yv3C1nX7d6m2Jx9oU4b8Ws5Lk0Tg1Rz2Ea3Hf4Ip8=\n").unwrap()
}

fn line_from(line: usize) -> Address {
    Address {
        remote: SocketAddr::new(Ipv4Addr::new(198, 18, 9, line as u8 + 1).into(), 40_000),
        local: None,
    }
}

/// A datagram on its way: when it arrives, whether to the server, its bytes.
type InFlight = Reverse<(Instant, u64, bool, Vec<u8>)>;

/// A client and a server joined by two lines of fixed delays, carrying a numbered packet
/// each way every [`PACKET_EVERY`].
struct Tunnel {
    client: Bond,
    server: Server,
    now: Instant,
    wire: BinaryHeap<InFlight>,
    sent: u64,
    next_packet: Instant,
    numbers_sent: u64,
    /// The numbers delivered at the server (up) and at the client (down), in order.
    up: Vec<u64>,
    down: Vec<u64>,
    /// A copy of a datagram of the client's, to be sent again later.
    held: Option<Vec<u8>>,
    hold_at: Option<Instant>,
    buf: Vec<u8>,
}

impl Tunnel {
    fn new(config: BondConfig) -> Tunnel {
        let mut entropy = SeededEntropy(Rng::seed_from(40));
        let keys = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut entropy));
        let client = Bond::client(
            config.clone(),
            keys,
            Box::new(entropy),
            Instant::ZERO,
            SIM_UNIX_START_NS,
        );
        let server = Server::with_psk(
            ServerConfig::new(config, 4),
            &psk(),
            Box::new(SeededEntropy(Rng::seed_from(41))),
        );
        Tunnel {
            client,
            server,
            now: Instant::ZERO,
            wire: BinaryHeap::new(),
            sent: 0,
            next_packet: Instant::ZERO + Duration::from_secs(1),
            numbers_sent: 0,
            up: Vec::new(),
            down: Vec::new(),
            held: None,
            hold_at: None,
            buf: Vec::new(),
        }
    }

    fn put(&mut self, to_server: bool, datagram: Vec<u8>) {
        let line = usize::from(Header::decode(&datagram).unwrap().line);
        let at = self.now + Duration::from_millis(LINE_DELAY_MS[line % 2]);
        self.sent += 1;
        self.wire
            .push(Reverse((at, self.sent, to_server, datagram)));
    }

    /// Everything both ends would send now, onto the wire.
    fn transmit(&mut self) {
        loop {
            let mut any = false;
            while self.client.poll_transmit(self.now, &mut self.buf).is_some() {
                let datagram = self.buf.clone();
                if self.hold_at.is_some_and(|at| self.now >= at) && self.held.is_none() {
                    self.held = Some(datagram.clone());
                    self.hold_at = None;
                }
                self.put(true, datagram);
                any = true;
            }
            while self.server.poll_transmit(self.now, &mut self.buf).is_some() {
                let datagram = self.buf.clone();
                self.put(false, datagram);
                any = true;
            }
            if !any {
                return;
            }
        }
    }

    fn deliver(&mut self) {
        while let Some(p) = self.server.poll_deliver() {
            self.up
                .push(u64::from_be_bytes(p[NUMBER_AT].try_into().unwrap()));
        }
        while let Some(p) = self.client.poll_deliver() {
            self.down
                .push(u64::from_be_bytes(p[NUMBER_AT].try_into().unwrap()));
        }
    }

    /// Runs until `until`, with traffic both ways until `traffic_until`.
    fn run(&mut self, until: Instant, traffic_until: Instant) {
        while self.now < until {
            let traffic = (self.next_packet < traffic_until).then_some(self.next_packet);
            let next = [
                self.wire.peek().map(|Reverse((at, ..))| *at),
                self.client.poll_at(),
                self.server.poll_at(),
                traffic,
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(until)
            .max(self.now)
            .min(until);
            self.now = next;
            while self
                .wire
                .peek()
                .is_some_and(|Reverse((at, ..))| *at <= self.now)
            {
                let Reverse((_, _, to_server, mut datagram)) = self.wire.pop().unwrap();
                if to_server {
                    let line = usize::from(Header::decode(&datagram).unwrap().line);
                    self.server
                        .handle_datagram(self.now, line_from(line), &mut datagram);
                } else {
                    let _ = self.client.handle_datagram(self.now, &mut datagram);
                }
            }
            if traffic.is_some_and(|at| at <= self.now) {
                self.numbers_sent += 1;
                let n = self.numbers_sent;
                self.client
                    .handle_inner(self.now, packet(USER, FAR, 200, 1, n, self.now));
                self.server
                    .handle_inner(self.now, packet(FAR, USER, 200, 2, n, self.now));
                self.next_packet += PACKET_EVERY;
            }
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
            self.transmit();
            self.deliver();
        }
    }

    fn server_session(&self) -> &Bond {
        let mut sessions = self.server.sessions();
        let (_, _, bond) = sessions.next().expect("one session");
        assert!(
            sessions.next().is_none(),
            "a rekey opened no second session"
        );
        bond
    }
}

fn secs(s: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(s)
}

/// Every number from 1 to `last`, once each, in order.
fn in_order(numbers: &[u64], last: u64) -> bool {
    numbers.len() as u64 == last && numbers.iter().zip(1..).all(|(n, expected)| *n == expected)
}

#[test]
fn ten_minutes_of_rekeys_every_10_s_lose_nothing_and_keep_the_session() {
    let mut config = BondConfig::new(2);
    config.rekey_after = Duration::from_secs(10);
    let mut tunnel = Tunnel::new(config);
    tunnel.run(secs(2), secs(2));
    let session = tunnel.client.session().expect("open");
    // A copy of a datagram sent at 5 s, held back 200 s: its key is long gone when it
    // comes.
    tunnel.hold_at = Some(secs(5));
    tunnel.run(secs(600), secs(599));
    let sent = tunnel.numbers_sent;
    assert!(sent >= 29_000, "{sent} packets each way");

    let client = tunnel.client.counters();
    let server = tunnel.server_session().counters();
    // One rekey every 10 s from the session's start (and its handshake's round trip).
    assert!(client.rekeys >= 55, "client rekeys {}", client.rekeys);
    assert!(server.rekeys >= 55, "server rekeys {}", server.rekeys);
    assert!(client.rekeys.abs_diff(server.rekeys) <= 1);
    assert!(client.rekeys <= 60);
    // Nothing dropped for want of a key, including what the slow line carried across
    // every switch; every packet delivered once, in order.
    assert_eq!(client.auth_failures, 0);
    assert_eq!(server.auth_failures, 0);
    assert_eq!(client.replays + server.replays, 0);
    assert!(
        in_order(&tunnel.up, sent),
        "up: {} of {sent}",
        tunnel.up.len()
    );
    assert!(
        in_order(&tunnel.down, sent),
        "down: {} of {sent}",
        tunnel.down.len()
    );
    // The same session, its state carried over: its id, one session at the server, no
    // reconnect, and the reorder buffers' counts never reset (a new session renews
    // them).
    assert_eq!(tunnel.client.session(), Some(session));
    assert_eq!(client.reconnects, 0);
    assert_eq!(client.handshakes, 1);
    assert_eq!(tunnel.server.counters().sessions_opened, 1);
    assert_eq!(tunnel.client.reorder().counters().delivered, sent);
    assert_eq!(tunnel.server_session().reorder().counters().delivered, sent);

    // The datagram held back since 5 s: refused, counted, nothing delivered.
    let held = tunnel.held.take().expect("a datagram was held");
    let before = tunnel.server_session().counters();
    let up = tunnel.up.len();
    let mut held_copy = held.clone();
    tunnel
        .server
        .handle_datagram(tunnel.now, line_from(0), &mut held_copy);
    tunnel.deliver();
    let after = tunnel.server_session().counters();
    assert_eq!(after.auth_failures, before.auth_failures + 1);
    assert_eq!(tunnel.up.len(), up);
}

#[test]
fn a_previous_key_opens_what_was_in_flight_until_reject_after_then_nothing() {
    let mut config = BondConfig::new(2);
    config.rekey_after = Duration::from_secs(100);
    let mut tunnel = Tunnel::new(config);
    // A datagram sealed at 95 s under the first keys (agreed at about 0 s).
    tunnel.hold_at = Some(secs(95));
    tunnel.run(secs(150), secs(149));
    let rekeys = tunnel.client.counters().rekeys;
    assert_eq!(rekeys, 1, "one rekey at 100 s");
    let held = tunnel.held.take().expect("held");
    // At 150 s the previous key still opens it: it is too old for the line's replay
    // window only (counted as a replay, not as a failed authentication).
    let before = tunnel.server_session().counters();
    tunnel
        .server
        .handle_datagram(tunnel.now, line_from(0), &mut held.clone());
    let after = tunnel.server_session().counters();
    assert_eq!(after.auth_failures, before.auth_failures);
    assert_eq!(after.replays, before.replays + 1);
    // Past 180 s from the first keys' agreement the previous key is gone (zeroed): the
    // same datagram fails authentication.
    tunnel.run(secs(185), secs(184));
    let before = tunnel.server_session().counters();
    tunnel
        .server
        .handle_datagram(tunnel.now, line_from(0), &mut held.clone());
    let after = tunnel.server_session().counters();
    assert_eq!(after.auth_failures, before.auth_failures + 1);
    assert_eq!(after.replays, before.replays);
}

#[test]
fn a_key_near_its_message_bound_is_replaced_whatever_its_age() {
    let mut config = BondConfig::new(2);
    config.rekey_after_messages = 1_000;
    let mut tunnel = Tunnel::new(config);
    tunnel.run(secs(60), secs(59));
    let client = tunnel.client.counters();
    // About 50 inner packets a second (some share a datagram) and keepalives: some 4000
    // datagrams a minute, so several rekeys long before 120 s.
    assert!(client.rekeys >= 3, "rekeys {}", client.rekeys);
    assert_eq!(client.auth_failures, 0);
    assert!(in_order(&tunnel.up, tunnel.numbers_sent));
}

#[test]
fn a_lost_rekey_handshake_is_retried() {
    let mut config = BondConfig::new(2);
    config.rekey_after = Duration::from_secs(10);
    let mut tunnel = Tunnel::new(config);
    tunnel.run(secs(9) + Duration::from_millis(950), secs(9));
    // Every line goes dark for 350 ms as the rekey starts (less than the silence that
    // opens a new session): its first RekeyInits are lost.
    let dark_until = secs(10) + Duration::from_millis(300);
    while tunnel.now < dark_until {
        tunnel.run(tunnel.now + Duration::from_millis(5), secs(9));
        tunnel.wire.clear();
    }
    tunnel.run(secs(20), secs(9));
    let client = tunnel.client.counters();
    assert_eq!(client.rekeys, 1);
    assert!(client.rekey_handshakes >= 2, "{}", client.rekey_handshakes);
    assert_eq!(client.reconnects, 0);
    assert_eq!(tunnel.server_session().counters().rekeys, 1);
}
