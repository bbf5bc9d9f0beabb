//! Sessions left running, in virtual time: the client comes back after the server restarts,
//! after every line was down longer than the server remembers it, and a clean stop frees
//! the server's slot at once; replayed and reflected handshakes change nothing; a client
//! cannot take another's inner addresses; under load the server asks for cookies.
//!
//! Each recovery is checked against the timers that bound it (the figures in
//! [`BondConfig::new`]): a ping through the tunnel every 20 ms shows when traffic flows
//! again.

use std::net::{Ipv4Addr, SocketAddr};

use pathlab_bond::crypto::Psk;
use pathlab_bond::handshake::{self, Initiation};
use pathlab_bond::inner::Framing;
use pathlab_bond::peers::PeerConfig;
use pathlab_bond::sim::{ClientNode, Flow, Host, SeededEntropy, ServerNode, SIM_UNIX_START_NS};
use pathlab_bond::wire::{Header, Kind};
use pathlab_bond::{
    Address, Bond, BondConfig, ClientKeys, Peers, SecretKey, Server, ServerConfig, ServerKeys,
};
use pathlab_core::harness::{Network, Node, Port, WireId};
use pathlab_core::rng::Rng;
use pathlab_core::{BitsPerSec, Duration, Instant, LinkSpec};

const USER: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
/// Each line's one-way delay, both ways.
const ONE_WAY_MS: u64 = 10;
const RTT: Duration = Duration::from_millis(2 * ONE_WAY_MS);
const PING_EVERY: Duration = Duration::from_millis(20);

fn psk() -> Psk {
    Psk::from_file_contents(b"a test key of at least thirty-two bytes").unwrap()
}

fn secs(s: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(s)
}

fn line_spec() -> LinkSpec {
    LinkSpec::parse(&format!("delay {ONE_WAY_MS}ms rate 10mbit")).unwrap()
}

/// Hosts, clients and a server: node 0 the far host, 1 the server, then per client its
/// host and itself. Client `c`'s line `k` joins its port `k + 1` to the server's.
struct Site {
    net: Network,
    far: Host,
    server: ServerNode,
    hosts: Vec<Host>,
    clients: Vec<ClientNode>,
    lines: Vec<Vec<(WireId, WireId)>>,
}

impl Site {
    fn new(server: ServerNode, clients: Vec<(Host, ClientNode)>, lines: usize) -> Site {
        let mut net = Network::new(28);
        let ideal = LinkSpec::parse("").unwrap();
        net.connect(Port::new(0, 0), Port::new(1, 0), &ideal, &ideal, 1)
            .unwrap();
        let mut wires = Vec::new();
        for c in 0..clients.len() {
            let (host, client) = (2 + 2 * c, 3 + 2 * c);
            net.connect(Port::new(host, 0), Port::new(client, 0), &ideal, &ideal, 2)
                .unwrap();
            wires.push(
                (0..lines)
                    .map(|k| {
                        net.connect(
                            Port::new(client, k + 1),
                            Port::new(1, server.port(c, k)),
                            &line_spec(),
                            &line_spec(),
                            100 + (10 * c + k) as u64,
                        )
                        .unwrap()
                    })
                    .collect(),
            );
        }
        let (hosts, clients) = clients.into_iter().unzip();
        Site {
            net,
            far: Host::new(),
            server,
            hosts,
            clients,
            lines: wires,
        }
    }

    /// One client in the simple mode of `psk()`, its host pinging the far host every
    /// 20 ms from 0.5 s to `until`.
    fn pinging(lines: usize, until: Instant) -> Site {
        let config = BondConfig::new(lines);
        let server = ServerNode::new(ServerConfig::new(config.clone(), 8), &psk(), 7);
        let host = Host::new().pings(USER, FAR, PING_EVERY, 100, secs(0.5), until);
        Site::new(
            server,
            vec![(host, ClientNode::new(config, &psk(), 3))],
            lines,
        )
    }

    fn run_until(&mut self, at: Instant) {
        let mut nodes: Vec<&mut dyn Node> = vec![&mut self.far, &mut self.server];
        for (host, client) in self.hosts.iter_mut().zip(&mut self.clients) {
            nodes.push(host);
            nodes.push(client);
        }
        self.net.run_until(at, &mut nodes);
    }

    /// Takes every line of client `c` down (all lost, both ways) or back up.
    fn set_lines(&mut self, c: usize, up: bool) {
        let spec = if up {
            line_spec()
        } else {
            LinkSpec::parse("loss 100%").unwrap()
        };
        let now = self.net.now();
        for &(a, b) in &self.lines[c] {
            self.net.link_mut(a).set_spec(now, &spec).unwrap();
            self.net.link_mut(b).set_spec(now, &spec).unwrap();
        }
    }

    /// How long after `since` the first ping sent after it came back (its round trip
    /// included): when traffic flowed again.
    fn back_after(&self, c: usize, since: Instant) -> Duration {
        let sample = self.hosts[c]
            .ping_samples
            .iter()
            .find(|s| s.sent >= since)
            .expect("a ping came back");
        (sample.sent + sample.rtt).saturating_since(since)
    }
}

#[test]
fn after_a_server_restart_traffic_flows_again_within_the_stale_signal_s_bound() {
    let mut site = Site::pinging(3, secs(6.0));
    site.run_until(secs(3.0));
    assert!(site.clients[0].bond.is_open());
    let before = site.hosts[0].ping_samples.len();
    assert!(before > 100, "{before} pings before the restart");
    // The restart: a new server of the same key, knowing nothing.
    let restart = site.net.now();
    let config = site.server.server.config().clone();
    site.server = ServerNode::new(config, &psk(), 99);
    site.run_until(secs(6.0));
    let back = site.back_after(0, restart);
    // The client's next datagram (a keepalive at most 50 ms away) gets a Stale, believed
    // once 100 ms passed without an authenticated datagram; a handshake takes a round
    // trip, the next ping leaves within 20 ms and takes another.
    let config = BondConfig::new(3);
    let bound = config.stale_after + config.timers.keepalive + RTT + RTT + PING_EVERY + RTT;
    eprintln!("traffic flows again {back} after the restart (bound {bound})");
    assert!(back <= bound, "{back} > {bound}");
    assert!(back < Duration::from_secs(1));
    let client = site.clients[0].bond.counters();
    assert_eq!(client.reconnects, 1);
    assert!(client.stale_signals >= 1);
    let server = site.server.server.counters();
    assert_eq!(server.sessions_opened, 1);
    assert!(server.stale_sent >= 1);
    // Every ping after recovery came back.
    let after = &site.hosts[0].ping_samples;
    let recovered = restart + back;
    let expected = (secs(6.0).saturating_since(recovered).as_secs_f64() / 0.02).floor() as usize;
    let got = after.iter().filter(|s| s.sent >= recovered).count();
    assert!(
        got + 2 >= expected,
        "{got} of {expected} pings after recovery"
    );
}

#[test]
fn after_every_line_was_down_90_s_the_forgotten_session_comes_back_within_the_backoff() {
    let mut site = Site::pinging(2, secs(95.0));
    site.run_until(secs(2.0));
    assert!(site.clients[0].bond.is_open());
    site.set_lines(0, false);
    site.run_until(secs(92.0));
    // The server forgot the session after its idle timeout (60 s).
    assert_eq!(site.server.server.sessions().count(), 0);
    assert_eq!(site.server.server.counters().sessions_ended, 1);
    // The client kept trying, with backoff and no busy loop: 200, 400, then 800 ms waits
    // (75-100% of each).
    let handshakes = site.clients[0].bond.counters().handshakes;
    let (least, most) = (90.0 / 0.8, 90.0 / 0.6 + 3.0);
    eprintln!("{handshakes} handshakes in 90 s of outage");
    assert!(
        (least as u64..=most as u64).contains(&(handshakes - 1)),
        "{handshakes} handshakes, {least:.0}-{most:.0} expected"
    );
    let up = site.net.now();
    site.set_lines(0, true);
    site.run_until(secs(95.0));
    let back = site.back_after(0, up);
    let config = BondConfig::new(2);
    let bound = config.hello_backoff_max + RTT + PING_EVERY + RTT;
    eprintln!("traffic flows again {back} after the lines came back (bound {bound})");
    assert!(back <= bound, "{back} > {bound}");
    assert_eq!(site.clients[0].bond.counters().reconnects, 1);
    assert_eq!(site.server.server.counters().sessions_opened, 2);
}

#[test]
fn a_clean_stop_frees_the_server_slot_at_once() {
    let mut site = Site::pinging(2, secs(1.0));
    site.run_until(secs(1.0));
    assert_eq!(site.server.server.sessions().count(), 1);
    site.clients[0].bond.close();
    site.run_until(secs(1.0) + RTT);
    assert!(site.clients[0].bond.is_closed());
    assert_eq!(
        site.server.server.sessions().count(),
        0,
        "freed within a one-way delay"
    );
    assert_eq!(site.server.server.counters().sessions_closed, 1);
    // A closed client stays quiet: no handshake, nothing sent.
    let handshakes = site.clients[0].bond.counters().handshakes;
    site.run_until(secs(5.0));
    assert_eq!(site.clients[0].bond.counters().handshakes, handshakes);
    assert_eq!(site.clients[0].bond.poll_at(), None);
}

/// A client and a server driven by hand, and the datagrams between them.
struct Pair {
    client: Bond,
    server: Server,
    now: Instant,
    buf: Vec<u8>,
}

/// A client of `psk()` with a key of its own (from `seed`), starting at `now`.
fn client_of(config: BondConfig, seed: u64, now: Instant) -> Bond {
    let mut entropy = SeededEntropy(Rng::seed_from(seed));
    let keys = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut entropy));
    let unix_now = SIM_UNIX_START_NS + now.saturating_since(Instant::ZERO).as_nanos();
    Bond::client(config, keys, Box::new(entropy), now, unix_now)
}

fn line_from(line: usize) -> Address {
    Address {
        remote: SocketAddr::new(Ipv4Addr::new(198, 18, 9, line as u8 + 1).into(), 40_000),
        local: None,
    }
}

fn attacker() -> Address {
    Address {
        remote: "198.18.66.66:666".parse().unwrap(),
        local: None,
    }
}

impl Pair {
    fn new(server: Server) -> Pair {
        Pair {
            client: client_of(BondConfig::new(2), 5, Instant::ZERO),
            server,
            now: Instant::ZERO,
            buf: Vec::new(),
        }
    }

    /// What the client sends now, by line.
    fn sent_by_client(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf) {
            out.push((usize::from(t.line), self.buf.clone()));
        }
        out
    }

    /// What the server sends now.
    fn sent_by_server(&mut self) -> Vec<(Address, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(to) = self.server.poll_transmit(self.now, &mut self.buf) {
            out.push((to, self.buf.clone()));
        }
        out
    }

    /// Carries everything both ways, instantly, until quiet; returns the datagrams the
    /// client sent.
    fn exchange(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut sent = Vec::new();
        loop {
            let up = self.sent_by_client();
            for (line, mut data) in up.clone() {
                self.server
                    .handle_datagram(self.now, line_from(line), &mut data);
            }
            let down = self.sent_by_server();
            for (_, mut data) in down.clone() {
                let _ = self.client.handle_datagram(self.now, &mut data);
            }
            if up.is_empty() && down.is_empty() {
                return sent;
            }
            sent.extend(up);
        }
    }
}

/// A server for up to 4 clients of 2 lines each, its entropy seeded with `seed`.
fn two_line_server(seed: u64) -> Server {
    Server::with_psk(
        ServerConfig::new(BondConfig::new(2), 4),
        &psk(),
        Box::new(SeededEntropy(Rng::seed_from(seed))),
    )
}

/// An Initiation of the [`Pair`]'s client's key (the one seed 5 gives) dated just before
/// the simulation's start: older than any that client sent.
fn older_initiation() -> Vec<u8> {
    let mut entropy = SeededEntropy(Rng::seed_from(5));
    let keys = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut entropy));
    let mut old = Vec::new();
    let _ = Initiation::start(
        &keys,
        7,
        SIM_UNIX_START_NS - 1,
        2,
        None,
        &mut entropy,
        &mut old,
    );
    old
}

/// The authentication failures counted by the first of `server`'s open sessions.
fn first_session_auth_failures(server: &Server) -> u64 {
    server.sessions().next().unwrap().2.counters().auth_failures
}

#[test]
fn replayed_and_reflected_handshakes_change_nothing_and_are_counted() {
    let mut pair = Pair::new(two_line_server(1));
    let sent = pair.exchange();
    let initiation = sent
        .iter()
        .find(|(_, d)| d[0] == Kind::Hello as u8)
        .expect("an Initiation")
        .1
        .clone();
    assert_eq!(initiation.len(), handshake::INITIATION_BYTES);
    assert!(pair.client.is_open());
    // Data confirms the server's session and teaches it both lines' addresses.
    pair.now = secs(0.1);
    pair.exchange();
    assert_eq!(pair.server.sessions().count(), 1);
    let session = pair.client.session();
    let counters = pair.server.counters();
    assert_eq!(counters.handshakes, 1);
    assert_eq!(
        counters.hello_copies, 1,
        "the second line's copy was answered"
    );

    // The Initiation replayed from elsewhere, once the session confirmed: refused, no
    // answer, the session and its lines' addresses unchanged.
    pair.now = secs(0.2);
    pair.server
        .handle_datagram(pair.now, attacker(), &mut initiation.clone());
    assert!(pair
        .sent_by_server()
        .iter()
        .all(|(to, _)| *to != attacker()));
    assert_eq!(pair.server.counters().replayed_hellos, 1);
    assert_eq!(pair.server.counters().handshakes, 1);
    pair.now = secs(0.3);
    pair.client
        .handle_inner(pair.now, pathlab_bond::inner::ipv4_udp(USER, FAR, 200));
    let down = {
        pair.exchange();
        pair.server
            .handle_inner(pair.now, pathlab_bond::inner::ipv4_udp(FAR, USER, 200));
        pair.sent_by_server()
    };
    assert!(!down.is_empty());
    assert!(down
        .iter()
        .all(|(to, _)| *to == line_from(0) || *to == line_from(1)));
    assert_eq!(pair.client.session(), session);

    // An older Initiation of the same client (a newer one was accepted): refused by its
    // timestamp, even with a fresh ephemeral key, before any session changes.
    let mut old = older_initiation();
    pair.server.handle_datagram(pair.now, attacker(), &mut old);
    assert!(pair.sent_by_server().is_empty());
    assert_eq!(pair.server.counters().replayed_hellos, 2);

    // Reflections: the Initiation back to the client, the server's Data back to the server.
    let before = pair.client.counters().auth_failures;
    let _ = pair
        .client
        .handle_datagram(pair.now, &mut initiation.clone());
    assert_eq!(pair.client.counters().auth_failures, before + 1);
    assert!(pair
        .sent_by_client()
        .iter()
        .all(|(_, d)| d[0] == Kind::Data as u8));
    let (_, mut reflected) = down[0].clone();
    let before = first_session_auth_failures(&pair.server);
    pair.server
        .handle_datagram(pair.now, line_from(0), &mut reflected);
    let after = first_session_auth_failures(&pair.server);
    assert_eq!(after, before + 1);

    // After a restart forgot the timestamps, the replayed Initiation opens a session that
    // never confirms (no Data can come under its keys) and expires; nothing routes to it.
    let mut restarted = two_line_server(2);
    restarted.handle_datagram(secs(1.0), attacker(), &mut initiation.clone());
    assert_eq!(restarted.counters().handshakes, 1);
    assert_eq!(restarted.sessions().count(), 0, "unconfirmed");
    restarted.handle_inner(secs(1.0), pathlab_bond::inner::ipv4_udp(FAR, USER, 200));
    assert_eq!(restarted.counters().unroutable, 1);
    restarted.handle_timeout(secs(11.0));
    assert_eq!(restarted.counters().unconfirmed_expired, 1);
    assert_eq!(restarted.unconfirmed_sessions(), 0);
}

#[test]
fn under_load_the_server_asks_for_cookies_and_a_real_client_still_gets_in() {
    let mut config = ServerConfig::new(BondConfig::new(2), 8);
    config.handshakes_before_cookie = 2;
    let server = Server::with_psk(config, &psk(), Box::new(SeededEntropy(Rng::seed_from(1))));
    let mut pair = Pair::new(server);
    // A flood of valid-looking Initiations (the simple mode's key known) from one source.
    let mut entropy = SeededEntropy(Rng::seed_from(9));
    for k in 0..10u64 {
        let keys = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut entropy));
        let mut flood = Vec::new();
        let _ = Initiation::start(
            &keys,
            1,
            SIM_UNIX_START_NS + k,
            1,
            None,
            &mut entropy,
            &mut flood,
        );
        pair.server
            .handle_datagram(Instant::ZERO, attacker(), &mut flood);
    }
    let answers = pair.sent_by_server();
    let cookies = answers
        .iter()
        .filter(|(_, d)| d[0] == Kind::Cookie as u8)
        .count();
    assert_eq!(
        pair.server.counters().handshakes,
        2,
        "two Diffie-Hellmans, then cookies"
    );
    assert_eq!(cookies, 8);
    assert!(answers
        .iter()
        .all(|(_, d)| d.len() < handshake::INITIATION_BYTES));
    // The real client: a cookie first, then (its next attempt, with mac2) a session.
    pair.exchange();
    assert!(!pair.client.is_open());
    assert_eq!(pair.client.counters().cookies, 2, "one per line's copy");
    pair.now = secs(0.25);
    pair.client.handle_timeout(pair.now);
    pair.exchange();
    assert!(pair.client.is_open(), "in with its cookie");
    assert_eq!(pair.server.counters().handshakes, 3);
    let header = Header::decode(&answers[0].1).unwrap();
    assert_eq!(header.kind, Kind::Cookie);
}

#[test]
fn a_client_cannot_send_from_another_client_s_addresses_nor_take_its_traffic() {
    // Two sites with keys of their own: A owns 198.18.1.0/24, B owns 198.18.3.0/24.
    let mut entropy = SeededEntropy(Rng::seed_from(21));
    let server_key = SecretKey::generate(&mut entropy);
    let (a_key, b_key) = (
        SecretKey::generate(&mut entropy),
        SecretKey::generate(&mut entropy),
    );
    let peers = vec![
        PeerConfig::parse(&format!(
            "a,key={},allowed=198.18.1.0/24",
            a_key.public_key()
        ))
        .unwrap(),
        PeerConfig::parse(&format!(
            "b,key={},allowed=198.18.3.0/24",
            b_key.public_key()
        ))
        .unwrap(),
    ];
    let config = BondConfig::new(1);
    let server = Server::new(
        ServerConfig::new(config.clone(), 4),
        ServerKeys::new(server_key.clone(), None),
        Peers::Listed(peers),
        Box::new(SeededEntropy(Rng::seed_from(7))),
    )
    .unwrap();
    let b_user = Ipv4Addr::new(198, 18, 3, 9);
    // A's host sends from its own address and from B's; B's host pings the far end.
    let flow = |source| Flow {
        source,
        destination: FAR,
        rate: BitsPerSec::kbit(1000),
        size_bytes: 500,
        start: secs(0.5),
        stop: secs(2.5),
    };
    let a_host = Host::new().flow(flow(USER)).flow(flow(b_user));
    let b_host = Host::new().pings(b_user, FAR, PING_EVERY, 100, secs(0.5), secs(2.5));
    let server_public = server_key.public_key();
    let mut site = Site::new(
        ServerNode::with_server(server),
        vec![
            (
                a_host,
                ClientNode::with_keys(
                    config.clone(),
                    ClientKeys::new(a_key, server_public, None),
                    3,
                ),
            ),
            (
                b_host,
                ClientNode::with_keys(config, ClientKeys::new(b_key, server_public, None), 4),
            ),
        ],
        1,
    );
    site.run_until(secs(3.0));
    let sent_each = (2.0 * 1e6 / (500.0 * 8.0)) as u64;
    let own = site.far.from(USER).packets;
    let spoofed = site.far.from(b_user).packets;
    let dropped = site.server.server.counters().spoofed_sources;
    eprintln!(
        "A's own {own}, spoofed delivered {spoofed}, dropped {dropped}; B's pings {}",
        site.hosts[1].ping_samples.len()
    );
    assert!(own + 5 >= sent_each, "{own} of {sent_each}");
    // B's pings are sent from 198.18.3.9 too: the far end sees them, none of A's.
    let b_pings = site.hosts[1].ping_samples.len() as u64;
    assert!(
        spoofed <= b_pings + 1,
        "{spoofed} packets from B's address, {b_pings} pings"
    );
    assert!(
        dropped + 5 >= sent_each,
        "{dropped} spoofed dropped of {sent_each}"
    );
    // B's traffic still comes back to B: its downstream was not taken.
    assert!(b_pings + 3 >= 100, "{b_pings} of B's pings answered");
    let names: Vec<String> = site
        .server
        .server
        .sessions()
        .map(|(_, n, _)| n.to_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// An Ethernet frame from `source` to `destination` (MACs) with one 802.1Q tag of `vid`
/// (none when 0), around `payload` of `ethertype`.
fn frame(source: u8, destination: u8, vid: u16, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![2, 0, 0, 0, 0, destination, 2, 0, 0, 0, 0, source];
    if vid != 0 {
        frame.extend_from_slice(&0x8100u16.to_be_bytes());
        frame.extend_from_slice(&vid.to_be_bytes());
    }
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[test]
fn a_tap_server_bridges_frames_with_their_tags_to_the_client_connected_last() {
    let mut config = BondConfig::new(2);
    config.framing = Framing::Ethernet;
    let server = Server::with_psk(
        ServerConfig::new(config.clone(), 8),
        &psk(),
        Box::new(SeededEntropy(Rng::seed_from(1))),
    );
    let mut pair = Pair::new(server);
    pair.client = client_of(config.clone(), 5, Instant::ZERO);
    pair.exchange();
    pair.now = secs(0.1);
    pair.exchange();
    assert_eq!(pair.server.sessions().count(), 1);
    let ip = pathlab_bond::inner::ipv4_udp(USER, FAR, 200);
    // Up: IP in VLAN 10, IP untagged, ARP in VLAN 20: each arrives as it was sent. An IP
    // server would have refused the ARP frame (no source address) and, in the simple mode,
    // learnt no route from frames.
    let up = [
        frame(0xa, 0xb, 10, 0x0800, &ip),
        frame(0xa, 0xb, 0, 0x0800, &ip),
        frame(0xa, 0xff, 20, 0x0806, &[1; 28]),
    ];
    for f in &up {
        pair.client.handle_inner(pair.now, f.clone());
    }
    pair.exchange();
    let mut delivered = Vec::new();
    while let Some(f) = pair.server.poll_deliver() {
        delivered.push(f);
    }
    delivered.sort();
    let mut expected = up.to_vec();
    expected.sort();
    assert_eq!(delivered, expected, "frames up");
    // Down: whatever the frame's addresses, to the one client.
    let down = frame(
        0xb,
        0xa,
        10,
        0x0800,
        &pathlab_bond::inner::ipv4_udp(FAR, USER, 300),
    );
    pair.server.handle_inner(pair.now, down.clone());
    pair.exchange();
    assert_eq!(pair.client.poll_deliver(), Some(down.clone()), "frame down");
    // Another client (the site's router restarted with a new key) connects while the old
    // session lingers: the TAP's frames go to it at once, not nowhere (an IP server in
    // the simple mode with two sessions and no route would have dropped them).
    pair.now = secs(0.2);
    pair.client = client_of(config, 6, pair.now);
    pair.exchange();
    pair.now = secs(0.3);
    pair.exchange();
    assert_eq!(pair.server.sessions().count(), 2);
    pair.server.handle_inner(pair.now, down.clone());
    pair.exchange();
    assert_eq!(
        pair.client.poll_deliver(),
        Some(down),
        "frame down after the restart"
    );
    let counters = pair.server.counters();
    assert_eq!((counters.unroutable, counters.spoofed_sources), (0, 0));
    // An untagged frame's user is the one its IP packet has through a TUN device.
    let untagged = pathlab_bond::inner::packet(pair.now, up[1].clone(), Framing::Ethernet);
    assert_eq!(
        pathlab_bond::inner::frame_user_key(&untagged, false),
        pathlab_bond::fair::source_key(&ip)
    );
}
