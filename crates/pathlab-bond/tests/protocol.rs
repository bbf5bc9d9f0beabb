//! The tunnel's protocol against what it promises: bad datagrams are dropped, counted and
//! never answered; fragments, compression, several clients, IPv6 and reordering lines
//! deliver every inner packet byte for byte.
//!
//! The security tests drive a client [`Bond`] and a [`Server`] by hand in a [`Lab`], whose
//! every datagram and delivery goes into a log. Each attack is checked by difference: two
//! labs built alike (seeded entropy, virtual time) run the same script, one of them also
//! receives the bad datagram, and their logs must be identical (nothing sent in answer,
//! nothing delivered, no state that shows later, such as a report counting the datagram)
//! while their counters differ by exactly the expected one. A third lab that receives the
//! good datagram instead shows that the comparison does see a datagram that was accepted.
//!
//! The other tests run whole tunnels through emulated lines in virtual time (as
//! `virtual_time.rs`) and compare what left each end with what arrived at the other.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use pathlab_bond::crypto::Psk;
use pathlab_bond::handshake;
use pathlab_bond::reorder::ReorderCounters;
use pathlab_bond::sched::SchedulerKind;
use pathlab_bond::sim::{
    line_address, ClientNode, Host, SeededEntropy, ServerNode, SIM_UNIX_START_NS,
};
use pathlab_bond::wire::{self, Header, Kind, HEADER_BYTES};
use pathlab_bond::{Address, Bond, BondConfig, ClientKeys, SecretKey, Server, ServerConfig};
use pathlab_core::harness::{self, Network, Node, Port, WireId};
use pathlab_core::record::PacketRecord;
use pathlab_core::rng::Rng;
use pathlab_core::{BitsPerSec, Duration, Instant, LinkSpec};

fn psk() -> Psk {
    Psk::from_file_contents(b"a test key of at least thirty-two bytes").unwrap()
}

fn other_psk() -> Psk {
    Psk::from_file_contents(b"another key, just as long as the first one").unwrap()
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn secs(s: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(s)
}

fn server_config(lines: usize) -> ServerConfig {
    ServerConfig::new(BondConfig::new(lines), 8)
}

/// A client of `lines` lines in the simple mode of `psk`, seeded `seed`, starting at 0.
fn psk_client(lines: usize, psk: &Psk, seed: u64) -> Bond {
    let mut entropy = SeededEntropy(Rng::seed_from(seed));
    let keys = ClientKeys::from_psk(psk, SecretKey::generate(&mut entropy));
    Bond::client(
        BondConfig::new(lines),
        keys,
        Box::new(entropy),
        Instant::ZERO,
        SIM_UNIX_START_NS,
    )
}

/// A datagram from `remote`, to the server's only address.
fn from(remote: SocketAddr) -> Address {
    Address {
        remote,
        local: None,
    }
}

// ---------------------------------------------------------------------------------------
// Inner packets.

/// Bytes of an IPv4 header without options, and of a UDP header.
const IPV4_HEADER_BYTES: usize = 20;
const IPV6_HEADER_BYTES: usize = 40;
const UDP_HEADER_BYTES: usize = 8;

/// What fills an inner packet after its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Zeros,
    Random(u64),
}

fn fill_payload(payload: &mut [u8], number: u64, fill: Fill) {
    payload[..8].copy_from_slice(&number.to_be_bytes());
    if let Fill::Random(seed) = fill {
        let mut rng = Rng::seed_from(seed ^ number.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for chunk in payload[8..].chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
        }
    }
}

/// An IPv4/UDP packet of `len` bytes whose payload starts with `number`.
fn ipv4_udp(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    number: u64,
    len: usize,
    fill: Fill,
) -> Vec<u8> {
    let mut p = pathlab_bond::inner::ipv4_udp(source, destination, len);
    fill_payload(&mut p[IPV4_HEADER_BYTES + UDP_HEADER_BYTES..], number, fill);
    p
}

/// A minimal IPv6/UDP packet (no extension headers) of `len` bytes.
fn ipv6_udp(
    source: Ipv6Addr,
    destination: Ipv6Addr,
    number: u64,
    len: usize,
    fill: Fill,
) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((len - IPV6_HEADER_BYTES) as u16).to_be_bytes());
    p[6] = 17; // next header: UDP
    p[7] = 64; // hop limit
    p[8..24].copy_from_slice(&source.octets());
    p[24..40].copy_from_slice(&destination.octets());
    p[40..42].copy_from_slice(&4000u16.to_be_bytes());
    p[42..44].copy_from_slice(&5000u16.to_be_bytes());
    p[44..46].copy_from_slice(&((len - IPV6_HEADER_BYTES) as u16).to_be_bytes());
    fill_payload(&mut p[IPV6_HEADER_BYTES + UDP_HEADER_BYTES..], number, fill);
    p
}

/// The packet with source and destination swapped (an echo's answer).
fn swapped(packet: &[u8]) -> Vec<u8> {
    let mut reply = packet.to_vec();
    let (source, destination) = match packet[0] >> 4 {
        4 => (12..16, 16..20),
        6 => (8..24, 24..40),
        other => panic!("not IP: version {other}"),
    };
    reply[source.clone()].copy_from_slice(&packet[destination.clone()]);
    reply[destination].copy_from_slice(&packet[source]);
    reply
}

// ---------------------------------------------------------------------------------------
// The lab: a server and its clients driven by hand, every event logged.

/// Each datagram's one-way trip in the lab, both ways.
const ONE_WAY: Duration = Duration::from_millis(5);

/// Where the server answers from (the clients do not look at it).
fn server_address() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(203, 0, 113, 1).into(), 4433)
}

/// Where forged datagrams come from.
fn attacker() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(192, 0, 2, 66).into(), 666)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum To {
    Server,
    Client(usize),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    ServerSent {
        at: Instant,
        to: SocketAddr,
        data: Vec<u8>,
    },
    ServerDelivered {
        at: Instant,
        data: Vec<u8>,
    },
    ClientSent {
        at: Instant,
        client: usize,
        line: u8,
        data: Vec<u8>,
    },
    ClientDelivered {
        at: Instant,
        client: usize,
        data: Vec<u8>,
    },
}

struct Flight {
    at: Instant,
    to: To,
    from: SocketAddr,
    data: Vec<u8>,
}

/// A server and clients joined by ideal wires of [`ONE_WAY`] delay: client `c`'s line `k`
/// comes from [`line_address`]`(c, k)`.
struct Lab {
    now: Instant,
    server: Server,
    clients: Vec<Bond>,
    /// In flight, in arrival order (one delay for all, so pushing keeps the order).
    flights: VecDeque<Flight>,
    log: Vec<Event>,
    buf: Vec<u8>,
}

/// Clients of two lines each.
const LAB_LINES: usize = 2;

impl Lab {
    /// A server seeded `server_seed` and one client per `(seed, psk)`, run for 100 ms
    /// (which opens the sessions of clients with the server's key).
    fn new(server_seed: u64, clients: &[(u64, Psk)]) -> Lab {
        let server = Server::with_psk(
            server_config(LAB_LINES),
            &psk(),
            Box::new(SeededEntropy(Rng::seed_from(server_seed))),
        );
        let clients = clients
            .iter()
            .map(|(seed, key)| psk_client(LAB_LINES, key, *seed))
            .collect();
        let mut lab = Lab {
            now: Instant::ZERO,
            server,
            clients,
            flights: VecDeque::new(),
            log: Vec::new(),
            buf: Vec::new(),
        };
        lab.run_until(ms(100));
        lab
    }

    /// The client a server's datagram to `to` reaches, if any (an attacker's address
    /// reaches none; the log still shows the datagram).
    fn client_at(&self, to: SocketAddr) -> Option<usize> {
        (0..self.clients.len()).find(|&c| (0..LAB_LINES).any(|k| line_address(c as u8, k) == to))
    }

    /// Handles everything due now, until nothing is.
    fn pump(&mut self) {
        let now = self.now;
        loop {
            let mut moved = false;
            while self.flights.front().is_some_and(|f| f.at <= now) {
                let mut flight = self.flights.pop_front().expect("checked");
                match flight.to {
                    To::Server => {
                        self.server
                            .handle_datagram(now, from(flight.from), &mut flight.data);
                    }
                    To::Client(c) => {
                        let _ = self.clients[c].handle_datagram(now, &mut flight.data);
                    }
                }
                moved = true;
            }
            self.server.handle_timeout(now);
            while let Some(data) = self.server.poll_deliver() {
                self.log.push(Event::ServerDelivered { at: now, data });
                moved = true;
            }
            while let Some(to) = self.server.poll_transmit(now, &mut self.buf) {
                let to = to.remote;
                let data = self.buf.clone();
                if let Some(c) = self.client_at(to) {
                    self.flights.push_back(Flight {
                        at: now + ONE_WAY,
                        to: To::Client(c),
                        from: server_address(),
                        data: data.clone(),
                    });
                }
                self.log.push(Event::ServerSent { at: now, to, data });
                moved = true;
            }
            for c in 0..self.clients.len() {
                let client = &mut self.clients[c];
                client.handle_timeout(now);
                while let Some(data) = client.poll_deliver() {
                    self.log.push(Event::ClientDelivered {
                        at: now,
                        client: c,
                        data,
                    });
                    moved = true;
                }
                while let Some(transmit) = client.poll_transmit(now, &mut self.buf) {
                    let data = self.buf.clone();
                    self.flights.push_back(Flight {
                        at: now + ONE_WAY,
                        to: To::Server,
                        from: line_address(c as u8, usize::from(transmit.line)),
                        data: data.clone(),
                    });
                    self.log.push(Event::ClientSent {
                        at: now,
                        client: c,
                        line: transmit.line,
                        data,
                    });
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn run_until(&mut self, end: Instant) {
        let mut idle_wakeups = 0;
        loop {
            self.pump();
            let next = self
                .clients
                .iter()
                .filter_map(Bond::poll_at)
                .chain(self.server.poll_at())
                .chain(self.flights.front().map(|f| f.at))
                .min();
            if !harness::advance(&mut self.now, next, end, &mut idle_wakeups) {
                self.pump();
                return;
            }
        }
    }

    /// Client `c` takes `packet` from its TUN side now and sends the datagram that carries
    /// it; the datagram is logged as sent but put on no wire: the caller delivers it (or a
    /// changed copy), or not.
    fn take_datagram(&mut self, c: usize, packet: Vec<u8>) -> (u8, Vec<u8>) {
        let now = self.now;
        self.clients[c].handle_inner(now, packet);
        let transmit = self.clients[c]
            .poll_transmit(now, &mut self.buf)
            .expect("a new stream's packet leaves at once");
        let data = self.buf.clone();
        self.log.push(Event::ClientSent {
            at: now,
            client: c,
            line: transmit.line,
            data: data.clone(),
        });
        (transmit.line, data)
    }

    /// A datagram arrives at the server now from client 0's line `line`, outside the
    /// wires.
    fn inject_from_line(&mut self, line: u8, data: Vec<u8>) {
        self.inject(To::Server, line_address(0, usize::from(line)), data);
    }

    /// A datagram arrives now, outside the wires.
    fn inject(&mut self, to: To, from: SocketAddr, mut data: Vec<u8>) {
        match to {
            To::Server => self
                .server
                .handle_datagram(self.now, self::from(from), &mut data),
            To::Client(c) => {
                let _ = self.clients[c].handle_datagram(self.now, &mut data);
            }
        }
    }

    /// The log, sorted: two labs built alike must give the same multiset of events (the
    /// server hands out several sessions' deliveries in its hash map's order).
    fn sorted_log(&self) -> Vec<Event> {
        let mut log = self.log.clone();
        log.sort();
        log
    }

    /// The server's end of client `c`'s session.
    fn server_bond(&self, c: usize) -> Option<&Bond> {
        let id = self.clients[c].session()?;
        self.server
            .sessions()
            .find(|(s, _, _)| *s == id)
            .map(|(_, _, bond)| bond)
    }

    /// Every counter of the server, its sessions and the clients, by name: `server.*`,
    /// `s{c}.*` (the server's end of client c's session), `c{c}.*` (client c), with
    /// `.line{k}.*` and `.reorder.*` below each end.
    fn counters(&self) -> BTreeMap<String, u64> {
        let mut map = BTreeMap::new();
        fields(&mut map, "server", self.server.counters());
        for (c, client) in self.clients.iter().enumerate() {
            let ends = [
                (format!("c{c}"), Some(client)),
                (format!("s{c}"), self.server_bond(c)),
            ];
            for (name, bond) in ends {
                let Some(bond) = bond else { continue };
                fields(&mut map, &name, bond.counters());
                fields(
                    &mut map,
                    &format!("{name}.reorder"),
                    bond.reorder().counters(),
                );
                for (k, line) in bond.lines().iter().enumerate() {
                    fields(&mut map, &format!("{name}.line{k}"), line.counters());
                }
            }
        }
        map
    }
}

/// Adds the fields of a flat counters struct (from its `Debug` form) under `prefix`.
fn fields(map: &mut BTreeMap<String, u64>, prefix: &str, counters: impl Debug) {
    let text = format!("{counters:?}");
    let body = &text[text.find('{').expect("a struct") + 1..text.rfind('}').expect("a struct")];
    for field in body.split(',').filter(|f| !f.trim().is_empty()) {
        let (name, value) = field.split_once(':').expect("name: value");
        let value = value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{prefix}.{name}: {value}"));
        map.insert(format!("{prefix}.{}", name.trim()), value);
    }
}

/// The counters that differ between two labs, `after - before`.
fn difference(before: &Lab, after: &Lab) -> BTreeMap<String, i64> {
    let (before, after) = (before.counters(), after.counters());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the labs have the same sessions"
    );
    before
        .iter()
        .filter_map(|(name, b)| {
            let a = after[name];
            (a != *b).then(|| (name.clone(), a as i64 - *b as i64))
        })
        .collect()
}

fn expect(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

const USER: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);

/// How long after the bad datagram the labs are compared: several keepalives (50 ms) and
/// reports (25 ms) of both ends, and the reorder buffer's longest wait (500 ms).
const AFTERMATH: Duration = Duration::from_millis(600);

/// Asserts that `attacked` differs from `quiet`, a lab built alike, by the counters
/// `expected` and not at all in its log (`what`: the attack, for the messages).
fn assert_only_counted(quiet: &Lab, attacked: &Lab, expected: &[(&str, i64)], what: &str) {
    assert_eq!(difference(quiet, attacked), expect(expected), "{what}");
    assert!(
        quiet.sorted_log() == attacked.sorted_log(),
        "{what}: the logs differ"
    );
}

/// Runs `lab` on for [`AFTERMATH`] and returns it with the instant it stands at: a lab
/// to compare an attacked one with, run to the same instant.
fn run_aftermath(mut lab: Lab) -> (Lab, Instant) {
    let end = lab.now + AFTERMATH;
    lab.run_until(end);
    (lab, end)
}

/// One client's lab, open, at 100 ms, with the datagram that carries a 200-byte packet
/// taken off the wire.
fn lab_with_datagram() -> (Lab, u8, Vec<u8>) {
    let mut lab = Lab::new(7, &[(3, psk())]);
    assert!(lab.clients[0].is_open(), "the session opens within 100 ms");
    let (line, datagram) = lab.take_datagram(0, ipv4_udp(USER, FAR, 1, 200, Fill::Zeros));
    (lab, line, datagram)
}

/// Runs `attack` (given the lab and the good datagram `d` and its line) on a fresh lab
/// and checks against a lab where `d` was lost: same log, counters apart by `expected`.
/// The only answers allowed are the Stales `expected` counts (`server.stale_sent`): 12
/// bytes each, to a datagram that named an unknown session.
fn check_dropped(
    what: &str,
    attack: impl FnOnce(&mut Lab, u8, &[u8]),
    expected: &BTreeMap<String, i64>,
) {
    let (lost, end) = run_aftermath(lab_with_datagram().0);
    let (mut attacked, line, datagram) = lab_with_datagram();
    attack(&mut attacked, line, &datagram);
    attacked.run_until(end);
    assert_eq!(&difference(&lost, &attacked), expected, "{what}: counters");
    // Nothing answered (but Stales), nothing delivered, nothing that shows later.
    let is_stale = |e: &Event| matches!(e, Event::ServerSent { data, .. } if data.len() == HEADER_BYTES && data[0] == Kind::Stale as u8);
    let stales = attacked.log.iter().filter(|e| is_stale(e)).count();
    let expected_stales = expected.get("server.stale_sent").copied().unwrap_or(0);
    assert_eq!(stales as i64, expected_stales, "{what}: Stales sent");
    let (lost_log, mut attacked_log) = (lost.sorted_log(), attacked.sorted_log());
    attacked_log.retain(|e| !is_stale(e));
    assert_eq!(lost_log.len(), attacked_log.len(), "{what}: events");
    assert!(lost_log == attacked_log, "{what}: the logs differ");
}

/// The control: the good datagram, delivered, changes the log (it is delivered, and the
/// server's next report on its line counts it), so [`check_dropped`]'s comparison would
/// see a bad datagram that was accepted.
#[test]
fn an_accepted_datagram_shows_in_the_log_so_the_comparison_can_fail() {
    let (lost, end) = run_aftermath(lab_with_datagram().0);
    let (mut delivered, line, datagram) = lab_with_datagram();
    delivered.inject_from_line(line, datagram);
    delivered.run_until(end);
    let packet = ipv4_udp(USER, FAR, 1, 200, Fill::Zeros);
    let deliveries = |lab: &Lab| {
        lab.log
            .iter()
            .filter(|e| matches!(e, Event::ServerDelivered { data, .. } if *data == packet))
            .count()
    };
    assert_eq!(deliveries(&lost), 0);
    assert_eq!(deliveries(&delivered), 1);
    // The server's datagrams themselves differ (the reports count one more datagram), not
    // only the delivery.
    let server_sent = |lab: &Lab| -> Vec<Event> {
        lab.sorted_log()
            .into_iter()
            .filter(|e| matches!(e, Event::ServerSent { .. }))
            .collect()
    };
    assert_ne!(server_sent(&lost), server_sent(&delivered));
    let received = format!("s0.line{line}.received_packets");
    assert_eq!(difference(&lost, &delivered).get(&received), Some(&1));
}

#[test]
fn a_datagram_altered_in_any_byte_is_dropped_counted_and_unanswered() {
    let (_, _, datagram) = lab_with_datagram();
    eprintln!("datagram of {} bytes, every byte flipped", datagram.len());
    for index in 0..datagram.len() {
        // Which check catches it: the clear header's fields first, then the tag.
        let counters: &[(&str, i64)] = match index {
            // Kind: Data (3) ^ 1 = Welcome (2), which a server never takes.
            0 => &[("server.auth_failures", 2)],
            // Session id: no such session, which the server says in a 12-byte Stale (the
            // client, whose session it does not name, ignores it).
            2..=5 => &[("server.auth_failures", 2), ("server.stale_sent", 2)],
            // Line, seq (the AEAD nonce and associated data), body, tag.
            _ => &[("s0.auth_failures", 2)],
        };
        let what = format!("byte {index} of {}", datagram.len());
        check_dropped(
            &what,
            |lab, line, datagram| {
                let mut altered = datagram.to_vec();
                altered[index] ^= 0x01;
                // From the genuine line, and from an attacker, who must not become the
                // line's address either.
                lab.inject_from_line(line, altered.clone());
                lab.inject(To::Server, attacker(), altered);
            },
            &expect(counters),
        );
    }
}

#[test]
fn a_replayed_datagram_is_dropped_counted_and_unanswered() {
    // The "lost" lab of `check_dropped` lost the datagram; here both labs get it once and
    // the attacked one a second time, so compare against a lab given it once.
    let (mut once, line, datagram) = lab_with_datagram();
    once.inject_from_line(line, datagram);
    let (once, end) = run_aftermath(once);
    for (what, delay) in [
        ("at once", ms(0)),
        ("20 ms later", ms(20)),
        ("300 ms later", ms(300)),
    ] {
        let (mut twice, line, datagram) = lab_with_datagram();
        twice.inject_from_line(line, datagram.clone());
        let at = twice.now + (delay - Instant::ZERO);
        twice.run_until(at);
        twice.inject_from_line(line, datagram.clone());
        twice.run_until(end);
        let line_replays = format!("s0.line{line}.replays");
        assert_only_counted(
            &once,
            &twice,
            &[("s0.replays", 1), (&line_replays, 1)],
            &format!("replayed {what}"),
        );
    }
}

#[test]
fn a_truncated_datagram_is_dropped_counted_and_unanswered() {
    let (_, _, datagram) = lab_with_datagram();
    let len = datagram.len();
    let tag = wire::TAG_BYTES;
    for cut in [
        0,
        1,
        HEADER_BYTES - 1,
        HEADER_BYTES,
        HEADER_BYTES + 1,
        HEADER_BYTES + tag - 1,
        HEADER_BYTES + tag,
        len / 2,
        len - tag,
        len - 1,
    ] {
        // Shorter than a header: it does not parse; from a header on, it names the session
        // and fails its authentication.
        let counter = if cut < HEADER_BYTES {
            "server.malformed"
        } else {
            "s0.auth_failures"
        };
        check_dropped(
            &format!("cut to {cut} of {len} bytes"),
            |lab, line, datagram| {
                lab.inject_from_line(line, datagram[..cut].to_vec());
            },
            &expect(&[(counter, 1)]),
        );
    }
}

#[test]
fn a_client_with_another_key_gets_no_welcome_and_its_data_is_dropped() {
    // Its Hellos: on every line, again after 200 ms, then twice as long each time up to
    // 800 ms, each wait drawn from 75% to 100% of that; none answered.
    let mut stranger = Lab::new(7, &[(3, other_psk())]);
    stranger.run_until(ms(5000) + ONE_WAY);
    let sent_at = |line: u8| -> Vec<Instant> {
        stranger
            .log
            .iter()
            .filter_map(|e| match e {
                Event::ClientSent {
                    at, line: l, data, ..
                } if *l == line && data[0] == Kind::Hello as u8 => Some(*at),
                _ => None,
            })
            .collect()
    };
    let attempts = sent_at(0);
    assert_eq!(sent_at(1), attempts, "every attempt goes on both lines");
    let mut interval = 200.0;
    for pair in attempts.windows(2) {
        let gap = pair[1].saturating_since(pair[0]).as_millis_f64();
        assert!(
            (0.75 * interval - 1e-6..=interval + 1e-6).contains(&gap),
            "a wait of {gap} ms where {interval} ms (75-100%) was due: {attempts:?}"
        );
        interval = (2.0 * interval).min(800.0);
    }
    // 0, ~0.2, ~0.6, then every ~0.8 s (0.6-0.8) to 5 s: 7 to 9 attempts.
    assert!(
        (7..=9).contains(&attempts.len()),
        "{} attempts",
        attempts.len()
    );
    let hellos = 2 * attempts.len();
    let server_sent = stranger
        .log
        .iter()
        .filter(|e| matches!(e, Event::ServerSent { .. }))
        .count();
    eprintln!("{hellos} Hellos under another key, {server_sent} answers");
    assert_eq!(server_sent, 0);
    assert!(!stranger.clients[0].is_open());
    assert_eq!(stranger.server.counters().auth_failures, hellos as u64);
    assert_eq!(stranger.server.counters().handshakes, 0);
    assert_eq!(stranger.server.counters().sessions_opened, 0);

    // Its Data, from a session with another server of that key. Seeded alike, that session
    // has the same nonces and id as the lab's own: only the key differs, so the datagram
    // reaches the session and must fail there.
    let mut elsewhere = Lab::new(7, &[(3, other_psk())]);
    elsewhere.server = Server::with_psk(
        server_config(LAB_LINES),
        &other_psk(),
        Box::new(SeededEntropy(Rng::seed_from(7))),
    );
    elsewhere.run_until(ms(400));
    assert!(elsewhere.clients[0].is_open());
    let (line, foreign) = elsewhere.take_datagram(0, ipv4_udp(USER, FAR, 1, 200, Fill::Zeros));
    let (own, _, _) = lab_with_datagram();
    assert_eq!(
        elsewhere.clients[0].session(),
        own.clients[0].session(),
        "same session id"
    );
    check_dropped(
        "data under another key",
        |lab, _, _| {
            lab.inject_from_line(line, foreign.clone());
        },
        &expect(&[("s0.auth_failures", 1)]),
    );
}

#[test]
fn a_datagram_of_another_session_or_an_unknown_one_is_dropped_counted_and_unanswered() {
    // Two clients on one server: client 0's datagram relabelled with client 1's session.
    let two = || {
        let mut lab = Lab::new(7, &[(3, psk()), (4, psk())]);
        assert!(lab.clients.iter().all(Bond::is_open));
        let (line, datagram) = lab.take_datagram(0, ipv4_udp(USER, FAR, 1, 200, Fill::Zeros));
        (lab, line, datagram)
    };
    let (lost, end) = run_aftermath(two().0);
    let (mut attacked, line, mut datagram) = two();
    let other = attacked.clients[1].session().expect("open");
    assert_ne!(attacked.clients[0].session(), Some(other));
    datagram[2..6].copy_from_slice(&other.to_be_bytes());
    attacked.inject_from_line(line, datagram);
    attacked.run_until(end);
    assert_only_counted(
        &lost,
        &attacked,
        &[("s1.auth_failures", 1)],
        "another session's id",
    );

    // A server that does not know the session (restarted, say): seeded otherwise, its own
    // client's session has another id.
    let (_, line, datagram) = lab_with_datagram();
    let restarted = || Lab::new(8, &[(5, psk())]);
    let (quiet, end) = run_aftermath(restarted());
    let mut attacked = restarted();
    let id = Header::decode(&datagram).unwrap().session;
    assert!(
        attacked.server.sessions().all(|(s, _, _)| s != id),
        "the session is unknown"
    );
    attacked.inject_from_line(line, datagram.clone());
    attacked.run_until(end);
    assert_eq!(
        difference(&quiet, &attacked),
        expect(&[("server.auth_failures", 1), ("server.stale_sent", 1)])
    );
    // Its only answer: a Stale naming the unknown session, to where the datagram came from.
    let mut answered = attacked.sorted_log();
    let before = answered.len();
    answered.retain(|e| {
        !matches!(e, Event::ServerSent { data, to, .. }
            if *to == line_address(0, usize::from(line)) && data.len() == HEADER_BYTES
                && Header::decode(data).is_ok_and(|h| h.kind == Kind::Stale && h.session == id))
    });
    assert_eq!(before - answered.len(), 1, "one Stale");
    assert!(
        quiet.sorted_log() == answered,
        "unknown session: the logs differ"
    );

    // A restarted server seeded alike gave the same id to another client: the datagram
    // reaches that session, whose keys differ, and fails there.
    let restarted_alike = || Lab::new(7, &[(5, psk())]);
    let (quiet, end) = run_aftermath(restarted_alike());
    let mut attacked = restarted_alike();
    assert!(
        attacked.server.sessions().any(|(s, _, _)| s == id),
        "the id is reused"
    );
    attacked.inject_from_line(line, datagram);
    attacked.run_until(end);
    assert_only_counted(&quiet, &attacked, &[("s0.auth_failures", 1)], "reused id");
}

#[test]
fn reflected_datagrams_are_dropped_counted_and_unanswered() {
    let (lab, _, _) = lab_with_datagram();
    let last_server_datagram = |kind: Kind| {
        lab.log
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::ServerSent { to, data, .. } if data[0] == kind as u8 => {
                    Some((*to, data.clone()))
                }
                _ => None,
            })
            .expect("the server sent one")
    };
    // The server's Data, sent back to it from the line it went to: sealed server to
    // client, it does not open with the client-to-server key.
    let (to, data) = last_server_datagram(Kind::Data);
    check_dropped(
        "the server's Data reflected",
        |lab, _, _| lab.inject(To::Server, to, data.clone()),
        &expect(&[("s0.auth_failures", 1)]),
    );
    // Its Welcome, reflected: a server takes no Welcome.
    let (to, welcome) = last_server_datagram(Kind::Welcome);
    check_dropped(
        "the server's Welcome reflected",
        |lab, _, _| lab.inject(To::Server, to, welcome.clone()),
        &expect(&[("server.auth_failures", 1)]),
    );
    // And the client's own datagram, reflected to the client.
    check_dropped(
        "the client's Data reflected",
        |lab, _, datagram| lab.inject(To::Client(0), server_address(), datagram.to_vec()),
        &expect(&[("c0.auth_failures", 1)]),
    );
}

#[test]
fn the_server_never_answers_with_more_bytes_than_it_received() {
    // The clients' own Hellos (Initiations) and the Welcomes (Responses) they get.
    let lab = Lab::new(7, &[(3, psk()), (4, psk())]);
    let lens = |kind: Kind, server: bool| -> Vec<usize> {
        lab.log
            .iter()
            .filter_map(|e| match e {
                Event::ServerSent { data, .. } if server && data[0] == kind as u8 => {
                    Some(data.len())
                }
                Event::ClientSent { data, .. } if !server && data[0] == kind as u8 => {
                    Some(data.len())
                }
                _ => None,
            })
            .collect()
    };
    let hellos = lens(Kind::Hello, false);
    let welcomes = lens(Kind::Welcome, true);
    eprintln!("Hellos {hellos:?}, Welcomes {welcomes:?}");
    assert!(!welcomes.is_empty() && welcomes.len() <= hellos.len());
    assert!(welcomes.iter().max() <= hellos.iter().min());
    assert_eq!(hellos[0], handshake::INITIATION_BYTES);
    assert_eq!(welcomes[0], handshake::RESPONSE_BYTES);

    // A Hello of any other length, or garbage of a Hello's length, gets nothing (and no
    // session: it would hold a slot until it expired).
    let mut server = Server::with_psk(
        server_config(2),
        &psk(),
        Box::new(SeededEntropy(Rng::seed_from(1))),
    );
    let attacker = from(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
        999,
    ));
    let mut buf = Vec::new();
    let mut entropy = SeededEntropy(Rng::seed_from(11));
    let keys = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut entropy));
    let mut hello = Vec::new();
    let _ = handshake::Initiation::start(
        &keys,
        5,
        SIM_UNIX_START_NS,
        2,
        None,
        &mut entropy,
        &mut hello,
    );
    for len in [HEADER_BYTES, hello.len() - 1, hello.len() + 1, 1400] {
        let mut bytes = hello.clone();
        bytes.resize(len, 0);
        server.handle_datagram(ms(1), attacker, &mut bytes);
        assert_eq!(server.poll_transmit(ms(1), &mut buf), None, "{len} bytes");
    }
    let mut garbage = hello.clone();
    garbage[HEADER_BYTES..].fill(0x5a);
    server.handle_datagram(ms(1), attacker, &mut garbage);
    assert_eq!(server.poll_transmit(ms(1), &mut buf), None, "garbage");
    assert_eq!(server.counters().malformed, 4);
    assert_eq!(server.counters().auth_failures, 1);
    assert_eq!(server.counters().handshakes, 0);
    server.handle_datagram(ms(2), attacker, &mut hello.clone());
    assert_eq!(server.counters().handshakes, 1);
    assert_eq!(server.poll_transmit(ms(2), &mut buf), Some(attacker));
    assert_eq!(buf.len(), handshake::RESPONSE_BYTES);
    // Data for no session: a 12-byte Stale, for a datagram of at least 12.
    let mut data = vec![0u8; HEADER_BYTES];
    data[0] = Kind::Data as u8;
    data[5] = 9;
    server.handle_datagram(ms(3), attacker, &mut data);
    assert_eq!(server.poll_transmit(ms(3), &mut buf), Some(attacker));
    assert_eq!(buf.len(), HEADER_BYTES);
    assert_eq!(Header::decode(&buf).unwrap().kind, Kind::Stale);
    assert_eq!(Header::decode(&buf).unwrap().session, 9);
    let _ = wire::TAG_BYTES;
}

// ---------------------------------------------------------------------------------------
// Tunnels through emulated lines.

/// A host behind a tunnel end: sends given packets at given instants, records what
/// arrives, and, as an echo server, answers each packet with its addresses swapped.
#[derive(Debug, Default)]
struct Endpoint {
    to_send: VecDeque<(Instant, Vec<u8>)>,
    received: Vec<Vec<u8>>,
    echo: bool,
    outbox: VecDeque<Vec<u8>>,
}

impl Endpoint {
    fn sending(packets: impl IntoIterator<Item = (Instant, Vec<u8>)>) -> Endpoint {
        Endpoint {
            to_send: packets.into_iter().collect(),
            ..Endpoint::default()
        }
    }

    fn echo() -> Endpoint {
        Endpoint {
            echo: true,
            ..Endpoint::default()
        }
    }
}

impl Node for Endpoint {
    fn handle(&mut self, _now: Instant, _port: usize, data: Vec<u8>) {
        if self.echo {
            self.outbox.push_back(swapped(&data));
        }
        self.received.push(data);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if let Some(packet) = self.outbox.pop_front() {
            return Some((0, packet));
        }
        if self.to_send.front().is_some_and(|(at, _)| *at <= now) {
            return self.to_send.pop_front().map(|(_, p)| (0, p));
        }
        None
    }

    fn poll_at(&self) -> Option<Instant> {
        let outbox = (!self.outbox.is_empty()).then_some(Instant::ZERO);
        outbox
            .into_iter()
            .chain(self.to_send.front().map(|(at, _)| *at))
            .min()
    }
}

/// A [`Host`] that counts the packets that reach it for another address.
#[derive(Debug)]
struct Guarded {
    host: Host,
    address: Ipv4Addr,
    misdelivered: u64,
}

impl Node for Guarded {
    fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>) {
        if data.get(16..20) != Some(&self.address.octets()[..]) {
            self.misdelivered += 1;
        }
        self.host.handle(now, port, data);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        self.host.poll_transmit(now)
    }

    fn poll_at(&self) -> Option<Instant> {
        self.host.poll_at()
    }
}

/// Clients, each behind its near host, joined by their lines to one server with a far
/// host behind it. Nodes: near `c` is `2c`, client `c` is `2c + 1`, then server, far.
struct Tunnel<N: Node, F: Node> {
    net: Network,
    nears: Vec<N>,
    clients: Vec<ClientNode>,
    server: ServerNode,
    far: F,
    /// Each client's lines: upward (client to server) and downward wires.
    lines: Vec<Vec<(WireId, WireId)>>,
}

impl Tunnel<Endpoint, Endpoint> {
    /// One client whose near host sends `sent` (time, packet) to a far host that takes
    /// what arrives.
    fn one_sender(
        lines: &[(&str, &str)],
        config: &BondConfig,
        sent: &[(Instant, Vec<u8>)],
    ) -> Self {
        Tunnel::new(
            lines,
            config,
            vec![Endpoint::sending(sent.to_vec())],
            Endpoint::default(),
        )
    }
}

impl<N: Node, F: Node> Tunnel<N, F> {
    fn new(lines: &[(&str, &str)], config: &BondConfig, nears: Vec<N>, far: F) -> Tunnel<N, F> {
        let clients = nears.len();
        let mut net = Network::new(28);
        let ideal = LinkSpec::parse("").unwrap();
        let server_node = 2 * clients;
        let server = ServerNode::new(ServerConfig::new(config.clone(), 8), &psk(), 7);
        net.connect(
            Port::new(server_node, 0),
            Port::new(server_node + 1, 0),
            &ideal,
            &ideal,
            1,
        )
        .unwrap();
        let mut wires = Vec::new();
        for c in 0..clients {
            net.connect(
                Port::new(2 * c, 0),
                Port::new(2 * c + 1, 0),
                &ideal,
                &ideal,
                2,
            )
            .unwrap();
            let mut client_wires = Vec::new();
            for (k, (up, down)) in lines.iter().enumerate() {
                let ids = net
                    .connect(
                        Port::new(2 * c + 1, k + 1),
                        Port::new(server_node, server.port(c, k)),
                        &LinkSpec::parse(up).unwrap(),
                        &LinkSpec::parse(down).unwrap(),
                        100 + 16 * c as u64 + k as u64,
                    )
                    .unwrap();
                net.link_mut(ids.0).record();
                client_wires.push(ids);
            }
            wires.push(client_wires);
        }
        Tunnel {
            net,
            nears,
            clients: (0..clients)
                .map(|c| ClientNode::new(config.clone(), &psk(), 3 + c as u64))
                .collect(),
            server,
            far,
            lines: wires,
        }
    }

    fn run_until(&mut self, at: Instant) {
        let mut nodes: Vec<&mut dyn Node> = Vec::new();
        for (near, client) in self.nears.iter_mut().zip(self.clients.iter_mut()) {
            nodes.push(near);
            nodes.push(client);
        }
        nodes.push(&mut self.server);
        nodes.push(&mut self.far);
        self.net.run_until(at, &mut nodes);
    }

    /// Records of client `c`'s line `k` upward.
    fn records(&mut self, c: usize, k: usize) -> Vec<PacketRecord> {
        self.net
            .link_mut(self.lines[c][k].0)
            .recorder()
            .unwrap()
            .drain_finished()
    }

    /// The server's end of client `c`'s session.
    fn server_bond(&self, c: usize) -> &Bond {
        let id = self.clients[c].bond.session().expect("open");
        self.server
            .server
            .sessions()
            .find(|(s, _, _)| *s == id)
            .expect("the server has it")
            .2
    }
}

/// `count` packets made by `make(number)`, one every `every` from `start`.
fn schedule(
    start: Instant,
    every: Duration,
    count: u64,
    make: impl Fn(u64) -> Vec<u8>,
) -> Vec<(Instant, Vec<u8>)> {
    (1..=count)
        .map(|n| (start + every.saturating_mul(n - 1), make(n)))
        .collect()
}

/// Each of `received` is a packet of `sent` (numbered from 1 in bytes 28..36), none
/// altered, in order, none twice.
fn assert_in_order_and_unaltered(received: &[Vec<u8>], sent: &[(Instant, Vec<u8>)]) {
    let mut next = 0;
    for packet in received {
        let n = u64::from_be_bytes(packet[28..36].try_into().unwrap());
        assert!(n > next, "packet {n} after {next}: out of order or twice");
        assert!(*packet == sent[(n - 1) as usize].1, "packet {n} altered");
        next = n;
    }
}

fn packets_of(schedule: &[(Instant, Vec<u8>)]) -> Vec<Vec<u8>> {
    schedule.iter().map(|(_, p)| p.clone()).collect()
}

#[test]
fn fragments_are_put_back_together_byte_for_byte() {
    // 1500-byte packets of random bytes through datagrams of at most 600 bytes, over three
    // lines 10, 25 and 40 ms long: each packet in three or more pieces, on several lines.
    let sent = schedule(secs(0.5), Duration::from_millis(4), 500, |n| {
        ipv4_udp(USER, FAR, n, 1500, Fill::Random(1))
    });
    let mut config = BondConfig::new(3);
    config.max_payload = vec![600; 3];
    let lines = [
        ("delay 10ms rate 4mbit", "delay 10ms rate 20mbit"),
        ("delay 25ms rate 4mbit", "delay 25ms rate 20mbit"),
        ("delay 40ms rate 4mbit", "delay 40ms rate 20mbit"),
    ];
    let mut tunnel = Tunnel::one_sender(&lines, &config, &sent);
    tunnel.run_until(secs(4.0));
    let received = tunnel.far.received.clone();
    let reorder = tunnel.server_bond(0).reorder().counters();
    let mut largest = 0;
    let mut datagrams = 0;
    let mut lines_used = 0;
    for k in 0..3 {
        let records = tunnel.records(0, k);
        largest = largest.max(records.iter().map(|r| r.len_bytes).max().unwrap_or(0));
        let data = records.iter().filter(|r| r.len_bytes > 300).count();
        datagrams += data;
        lines_used += usize::from(data > 0);
    }
    eprintln!(
        "{} of {} packets, {datagrams} data datagrams, largest {largest} bytes on the wire, {lines_used} lines; {reorder:?}",
        received.len(),
        sent.len()
    );
    // Every datagram within 600 bytes (+ 28 of IP and UDP), and the packets in pieces.
    assert!(largest <= 600 + 28, "{largest}");
    assert!(
        datagrams >= 3 * sent.len(),
        "{datagrams} datagrams for {} packets",
        sent.len()
    );
    assert_eq!(lines_used, 3);
    assert!(reorder.reordered > 0, "the lines' spread reordered pieces");
    assert_eq!(reorder.bad_fragments, 0);
    assert_eq!(received.len(), sent.len());
    assert!(
        received == packets_of(&sent),
        "a packet came back altered or out of order"
    );
}

#[test]
fn over_a_lossy_line_packets_lose_fragments_as_theory_says_and_none_is_corrupted() {
    // One line losing 5% of datagrams upward; a 1500-byte packet every 10 ms, in 600-byte
    // datagrams: exactly three pieces each (560 bytes per datagram after header, timestamp
    // and tag, less 14 per piece and at most one report of 74 per packet: 472 + 546 + 546
    // >= 1500 > 2 x 546). The controller's floor keeps the three within 3 ms, so no two
    // packets share a datagram.
    const P: f64 = 0.05;
    const PIECES: i32 = 3;
    let count = 2000;
    let sent = schedule(secs(0.5), Duration::from_millis(10), count, |n| {
        ipv4_udp(USER, FAR, n, 1500, Fill::Random(2))
    });
    let mut config = BondConfig::new(1);
    config.max_payload = vec![600];
    config.controller.min_rate = BitsPerSec(5_000_000);
    config.controller.initial_rate = BitsPerSec(5_000_000);
    let lines = [("loss 5% delay 10ms rate 20mbit", "delay 10ms rate 20mbit")];
    let mut tunnel = Tunnel::one_sender(&lines, &config, &sent);
    tunnel.run_until(secs(22.0));

    // Ground truth of the line: three data datagrams per packet (reports alone are
    // about 140 bytes on the wire, a packet's pieces 400 to 628), 5% of them lost. The
    // path MTU probes (576 and 628 bytes, tried again after 150 ms if lost) go before the
    // first packet, at 0.5 s.
    let mut records = tunnel.records(0, 0);
    records.sort_by_key(|r| r.id);
    let data: Vec<&PacketRecord> = records
        .iter()
        .filter(|r| r.len_bytes > 300 && r.arrived >= secs(0.5))
        .collect();
    let lost_datagrams = data.iter().filter(|r| r.dropped.is_some()).count();
    eprintln!(
        "{} data datagrams, {lost_datagrams} lost ({:.2}%)",
        data.len(),
        100.0 * lost_datagrams as f64 / data.len() as f64
    );
    assert_eq!(data.len() as u64, 3 * count, "three datagrams per packet");
    // Packets go one after the other, so packet n is the n-th three: the packets that
    // must be missing are those with a datagram lost.
    let hit: Vec<u64> = data
        .chunks(3)
        .zip(1..)
        .filter(|(pieces, _)| pieces.iter().any(|r| r.dropped.is_some()))
        .map(|(_, n)| n)
        .collect();

    // What arrived: each a packet that was sent, in order, none twice, none altered.
    let received = &tunnel.far.received;
    assert_in_order_and_unaltered(received, &sent);
    let numbers: std::collections::BTreeSet<u64> = received
        .iter()
        .map(|p| u64::from_be_bytes(p[28..36].try_into().unwrap()))
        .collect();
    let missing: Vec<u64> = (1..=count).filter(|n| !numbers.contains(n)).collect();
    assert_eq!(
        missing, hit,
        "the packets missing are exactly those whose pieces were lost"
    );
    // A packet arrives if its three datagrams do: (1 - p)^3. Binomial: the lost count
    // within 4 standard deviations of its mean.
    let survive = (1.0 - P).powi(PIECES);
    let n = count as f64;
    let expected_lost = n * (1.0 - survive);
    let sigma = (n * survive * (1.0 - survive)).sqrt();
    let lost = (count - received.len() as u64) as f64;
    // Packets that lost some but not all pieces: 1 - (1-p)^3 - p^3 of them.
    let partial = n * (1.0 - survive - P.powi(PIECES));
    let reorder = tunnel.server_bond(0).reorder().counters();
    let fair = tunnel.clients[0].bond.fair().counters();
    eprintln!(
        "lost {lost} of {count} packets (theory {expected_lost:.0} +- {:.0}); incomplete {} (theory {partial:.0}); {reorder:?}; sender {fair:?}",
        4.0 * sigma,
        reorder.fragments_timed_out
    );
    assert_eq!(tunnel.clients[0].bond.counters().no_line_dropped, 0);
    assert!(
        (lost - expected_lost).abs() <= 4.0 * sigma,
        "lost {lost}, theory {expected_lost:.0}"
    );
    // Every packet that lost some of its pieces is counted as timed out: the same binomial
    // tolerance.
    let sigma_partial = (n * (partial / n) * (1.0 - partial / n)).sqrt();
    assert!(reorder.fragments_timed_out > 0);
    assert!(
        reorder.fragments_timed_out <= lost as u64,
        "only lost packets are incomplete"
    );
    assert!(
        (reorder.fragments_timed_out as f64 - partial).abs() <= 4.0 * sigma_partial,
        "incomplete {}, theory {partial:.0}",
        reorder.fragments_timed_out
    );
    assert_eq!(reorder.bad_fragments, 0);
}

#[test]
fn compressible_packets_are_compressed_and_random_ones_are_not() {
    let zeros = schedule(secs(0.5), Duration::from_millis(5), 200, |n| {
        ipv4_udp(USER, FAR, n, 1400, Fill::Zeros)
    });
    let random = schedule(secs(2.0), Duration::from_millis(5), 200, |n| {
        ipv4_udp(USER, FAR, 200 + n, 1400, Fill::Random(3))
    });
    // The rule: kept compressed when LZ4 (with its 4-byte length) is shorter.
    let saving = |packets: &[(Instant, Vec<u8>)]| -> (u64, u64) {
        packets.iter().fold((0, 0), |(count, saved), (_, p)| {
            let compressed = lz4_flex::compress_prepend_size(p).len();
            if compressed < p.len() {
                (count + 1, saved + (p.len() - compressed) as u64)
            } else {
                (count, saved)
            }
        })
    };
    let (zeros_compressible, zeros_saved) = saving(&zeros);
    let (random_compressible, _) = saving(&random);
    assert_eq!((zeros_compressible, random_compressible), (200, 0));
    let mut config = BondConfig::new(2);
    config.compress = true;
    let lines = [
        ("delay 10ms rate 10mbit", "delay 10ms rate 10mbit"),
        ("delay 30ms rate 5mbit", "delay 30ms rate 5mbit"),
    ];
    let all: Vec<_> = zeros.iter().chain(&random).cloned().collect();
    let mut tunnel = Tunnel::one_sender(&lines, &config, &all);
    tunnel.run_until(secs(1.9));
    let after_zeros = tunnel.clients[0].bond.counters();
    tunnel.run_until(secs(4.0));
    let after_random = tunnel.clients[0].bond.counters();
    let server = tunnel.server_bond(0).counters();
    eprintln!(
        "after the zeros: {} compressed, {} bytes saved (theory {zeros_saved}); after the random: {} compressed",
        after_zeros.compressed, after_zeros.compression_saved_bytes, after_random.compressed
    );
    assert_eq!(after_zeros.compressed, 200);
    assert_eq!(after_zeros.compression_saved_bytes, zeros_saved);
    assert_eq!(
        after_random.compressed, 200,
        "random packets are not compressed"
    );
    assert_eq!(after_random.compression_saved_bytes, zeros_saved);
    assert_eq!(server.decompress_failures, 0);
    assert!(
        tunnel.far.received == packets_of(&all),
        "a packet came back altered"
    );
}

const USER_A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const USER_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);

const TWO_LINES: [(&str, &str); 2] = [
    ("delay 10ms rate 10mbit", "delay 10ms rate 20mbit"),
    ("delay 30ms rate 5mbit", "delay 30ms rate 20mbit"),
];

#[test]
fn two_clients_share_a_server_and_each_gets_its_own_replies() {
    let pinger = |user: Ipv4Addr, start: f64| Guarded {
        host: Host::new().pings(
            user,
            FAR,
            Duration::from_millis(100),
            200,
            secs(start),
            secs(start + 2.0),
        ),
        address: user,
        misdelivered: 0,
    };
    // Client 0 pings at 1.0, 1.1, ..., client 1 at 1.05, 1.15, ...: both in flight at once.
    let nears = vec![pinger(USER_A, 1.0), pinger(USER_B, 1.05)];
    let mut tunnel = Tunnel::new(&TWO_LINES, &BondConfig::new(2), nears, Host::new());
    tunnel.run_until(secs(4.0));
    let ids: Vec<u32> = tunnel
        .clients
        .iter()
        .map(|c| c.bond.session().expect("open"))
        .collect();
    let server_ids: Vec<u32> = tunnel
        .server
        .server
        .sessions()
        .map(|(id, _, _)| id)
        .collect();
    eprintln!(
        "sessions {ids:?}, the server's {server_ids:?}, {:?}",
        tunnel.server.server.counters()
    );
    assert_ne!(ids[0], ids[1]);
    assert_eq!(server_ids.len(), 2);
    assert!(ids.iter().all(|id| server_ids.contains(id)));
    assert_eq!(tunnel.server.server.counters().sessions_opened, 2);
    assert_eq!(tunnel.server.server.counters().unroutable, 0);
    for (c, user) in [USER_A, USER_B].into_iter().enumerate() {
        let near = &tunnel.nears[c];
        eprintln!(
            "client {c}: far got {} pings, {} pongs back, {} misdelivered",
            tunnel.far.from(user).packets,
            near.host.ping_samples.len(),
            near.misdelivered
        );
        assert_eq!(
            tunnel.far.from(user).packets,
            20,
            "client {c}'s pings reach the far host"
        );
        assert_eq!(
            near.host.ping_samples.len(),
            20,
            "client {c}'s pongs come back"
        );
        assert_eq!(near.misdelivered, 0, "client {c} got another's packets");
        // Each session carried its own client's packets only, both ways.
        let server_end = tunnel.server_bond(c).counters();
        assert_eq!(
            (server_end.inner_out, server_end.inner_in),
            (20, 20),
            "client {c}"
        );
    }
}

#[test]
fn ipv6_packets_cross_the_tunnel_and_route_back_to_their_client() {
    let user = |c: u16| Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, c + 1);
    let far = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
    let sent: Vec<Vec<(Instant, Vec<u8>)>> = (0..2u16)
        .map(|c| {
            schedule(
                secs(0.5 + 0.003 * f64::from(c)),
                Duration::from_millis(10),
                100,
                |n| {
                    ipv6_udp(
                        user(c),
                        far,
                        n,
                        600 + 4 * n as usize,
                        Fill::Random(u64::from(c)),
                    )
                },
            )
        })
        .collect();
    let nears = sent.iter().map(|s| Endpoint::sending(s.clone())).collect();
    let mut tunnel = Tunnel::new(&TWO_LINES, &BondConfig::new(2), nears, Endpoint::echo());
    tunnel.run_until(secs(3.0));
    let counters = tunnel.server.server.counters();
    eprintln!(
        "{} at the far end; back: {} and {}; {counters:?}",
        tunnel.far.received.len(),
        tunnel.nears[0].received.len(),
        tunnel.nears[1].received.len()
    );
    assert_eq!(
        tunnel.server.server.sessions().count(),
        2,
        "routing must choose between two"
    );
    assert_eq!(counters.unroutable, 0);
    for (c, sent) in sent.iter().enumerate() {
        let from_c: Vec<Vec<u8>> = tunnel
            .far
            .received
            .iter()
            .filter(|p| p[8..24] == user(c as u16).octets())
            .cloned()
            .collect();
        assert!(
            from_c == packets_of(sent),
            "client {c}'s packets at the far end"
        );
        let echoes: Vec<Vec<u8>> = sent.iter().map(|(_, p)| swapped(p)).collect();
        assert!(
            tunnel.nears[c].received == echoes,
            "client {c} got exactly its own echoes"
        );
    }
}

/// One flow of 1000-byte packets at 10 Mbit/s (more than either 8 Mbit/s line, so both
/// carry it; at 2 Mbit/s the fastest line takes it all, and only a jitter-made loss that
/// the controller took for a policer used to push some onto the other) over two lines whose
/// datagrams overtake each other: returns how many were overtaken on the
/// lines, and the server's reorder counters, after checking that every packet that left
/// the sender arrived once, in order, unaltered.
fn flow_over_reordering_lines(scheduler: SchedulerKind) -> (usize, ReorderCounters) {
    // pathlab's links keep a line's order under jitter alone (stage/delay.rs); in
    // `reorder` mode they release datagrams by their drawn delay, as netem without `rate`
    // does, so a uniform 10 ms jitter reorders datagrams sent within 20 ms of each other.
    // `reorder 0%` sends none ahead of its delay. The lines' delays spread 20 to 60 ms.
    let lines = [
        (
            "delay 20ms 10ms reorder 0% rate 8mbit",
            "delay 20ms rate 20mbit",
        ),
        (
            "delay 60ms 10ms reorder 0% rate 8mbit",
            "delay 60ms rate 20mbit",
        ),
    ];
    let sent = schedule(secs(1.0), Duration::from_micros(800), 2000, |n| {
        ipv4_udp(USER, FAR, n, 1000, Fill::Random(4))
    });
    let mut config = BondConfig::new(2);
    config.scheduler = scheduler;
    let mut tunnel = Tunnel::one_sender(&lines, &config, &sent);
    tunnel.run_until(secs(10.0));
    // Ground truth: datagrams that left a line after one that entered it later.
    let mut overtaken = 0;
    let mut carried = Vec::new();
    for k in 0..2 {
        let mut records = tunnel.records(0, k);
        records.retain(|r| r.departed.is_some());
        carried.push(records.iter().filter(|r| r.len_bytes > 300).count());
        records.sort_by_key(|r| r.departed);
        let mut latest_id = 0;
        for record in &records {
            if record.id < latest_id {
                overtaken += 1;
            }
            latest_id = latest_id.max(record.id);
        }
    }
    let reorder = tunnel.server_bond(0).reorder().counters();
    let received = &tunnel.far.received;
    let fair = tunnel.clients[0].bond.fair().counters();
    eprintln!(
        "{scheduler:?}: data datagrams per line {carried:?}, {overtaken} overtaken on the lines; {} of {} packets; {reorder:?}; sender {fair:?}",
        received.len(),
        sent.len()
    );
    assert!(
        carried.iter().all(|&n| n >= 20),
        "both lines carry the flow: {carried:?}"
    );
    // The sender's CoDel may drop a few packets when a jitter spike makes a line's
    // controller slow down; those never leave (they are numbered when their first byte
    // does), so they leave no gap. Every packet that left must arrive, in order.
    let dropped_at_sender = (fair.codel_dropped + fair.overflow_dropped) as usize;
    assert!(
        dropped_at_sender * 100 <= sent.len(),
        "the sender dropped {dropped_at_sender}"
    );
    assert_eq!(reorder.gaps_skipped, 0);
    assert_eq!(received.len(), sent.len() - dropped_at_sender);
    assert_in_order_and_unaltered(received, &sent);
    (overtaken, reorder)
}

#[test]
fn a_flow_over_reordering_lines_arrives_in_order_without_gaps() {
    for scheduler in [SchedulerKind::Delay, SchedulerKind::RoundRobin] {
        let (overtaken, reorder) = flow_over_reordering_lines(scheduler);
        assert!(
            overtaken > 100,
            "{scheduler:?}: the lines reorder ({overtaken})"
        );
        assert!(
            reorder.reordered > 100,
            "{scheduler:?}: the buffer put packets back in order"
        );
    }
}

#[test]
fn a_line_narrower_than_its_interface_is_found_and_full_size_packets_still_cross() {
    // The line's interface carries 1500-byte IP packets, its path only 1300 (a PPPoE or
    // tunnel hop), and no ICMP says so: the too-big datagrams vanish. In this harness a
    // datagram is its payload plus 28 bytes and a link's `mtu M` passes up to M + 14
    // (it does not count an Ethernet header the harness does not add): `mtu 1286` is an
    // IP path MTU of 1300, a UDP payload of 1272. Downward the path is 1500 wide.
    let path_payload = 1300 - 28;
    let sent = schedule(secs(1.0), Duration::from_millis(5), 400, |n| {
        ipv4_udp(USER, FAR, n, 1500, Fill::Random(3))
    });
    let mut config = BondConfig::new(1);
    config.max_payload = vec![1472];
    // Fast enough from the start for 2.4 Mbit/s of packets: no CoDel drop to account for.
    config.controller.initial_rate = BitsPerSec(5_000_000);
    let lines = [("delay 10ms rate 20mbit mtu 1286", "delay 10ms rate 20mbit")];
    let mut tunnel = Tunnel::one_sender(&lines, &config, &sent);
    tunnel.run_until(secs(4.0));

    let client_line = &tunnel.clients[0].bond.lines()[0];
    let (probes, lost) = client_line.mtu().probes();
    eprintln!(
        "upward: limit {} bytes after {probes} probes ({lost} lost)",
        client_line.payload_limit()
    );
    assert!(!client_line.mtu().searching());
    assert_eq!(
        client_line.payload_limit(),
        path_payload,
        "found to the byte"
    );
    // Bisection from 548 to 1472: about log2(925) steps, each too-big size tried 3 times.
    assert!(probes <= 40, "{probes} probes");
    // The lost probes are not loss to the rate controller (counted as loss, 21 of ~190
    // datagrams took the line to its floor of 64 kbit/s and nothing crossed).
    let rate = client_line.controller().rate();
    assert!(rate.0 >= 2_400_000, "the line paced at {rate}");
    let server_line = &tunnel.server_bond(0).lines()[0];
    assert_eq!(
        server_line.payload_limit(),
        1472,
        "the way down is as wide as it says"
    );
    assert_eq!(
        tunnel.clients[0].bond.tunnel_mtu(),
        Some(path_payload - 46 + pathlab_bond::headers::BULK_TCP_SAVED_BYTES),
        "the TUN's MTU: a whole packet, its headers compressed, in one datagram of the \
         narrowest line"
    );
    // Only probes were too big for the path: data never exceeded what was proven.
    let records = tunnel.records(0, 0);
    let too_big = records
        .iter()
        .filter(|r| matches!(r.dropped, Some((_, pathlab_core::DropReason::Mtu))))
        .count() as u64;
    assert_eq!(
        too_big, lost,
        "every datagram the path dropped was a lost probe"
    );
    // Every 1500-byte packet crossed, in pieces, intact and in order.
    assert_eq!(tunnel.far.received.len(), sent.len());
    assert!(tunnel.far.received == packets_of(&sent));
}
