//! The tunnel in virtual time: client, server and the hosts behind them as
//! [`pathlab_core::harness::Node`]s, each line an emulated link.
//!
//! The tests check the tunnel's figures here, deterministically and fast, against theory
//! and against the links' ground truth (their queue delays and delivered bytes).
//!
//! Node ports: a [`ClientNode`] has its TUN side on port 0 and line `k` on port `k + 1`; a
//! [`ServerNode`] has its TUN side on port 0 and receives line `k` on port `k + 1` (one
//! UDP socket in a real deployment: here each line comes from its own address); a
//! [`Host`] has one port, 0.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};

use pathlab_core::harness::{Network, Node, Port, WireId};
use pathlab_core::rng::Rng;
use pathlab_core::{BitsPerSec, Duration, Instant, LinkSpec};

use crate::crypto::Psk;
use crate::endpoint::{Bond, BondConfig};
use crate::handshake::{ClientKeys, SecretKey};
use crate::line::LineFraming;
use crate::server::{Address, Server, ServerConfig};

/// The wall clock a simulation's clients start at (2026-01-01, unix ns): handshake
/// timestamps grow from it.
pub const SIM_UNIX_START_NS: u64 = 1_767_225_600_000_000_000;

pub use crate::entropy::SeededEntropy;

/// The client end as a node.
#[derive(Debug)]
pub struct ClientNode {
    /// The endpoint.
    pub bond: Bond,
    buf: Vec<u8>,
}

impl ClientNode {
    /// A client with `config` in the simple mode of `psk` (a fresh key of its own),
    /// seeded by `seed`.
    pub fn new(config: BondConfig, psk: &Psk, seed: u64) -> ClientNode {
        let mut entropy = SeededEntropy(Rng::seed_from(seed));
        let keys = ClientKeys::from_psk(psk, SecretKey::generate(&mut entropy));
        ClientNode::with_keys(config, keys, seed)
    }

    /// A client with `config` and `keys`, seeded by `seed`, starting at `Instant::ZERO`.
    pub fn with_keys(config: BondConfig, keys: ClientKeys, seed: u64) -> ClientNode {
        ClientNode {
            bond: Bond::client(
                config,
                keys,
                Box::new(SeededEntropy(Rng::seed_from(seed ^ 0x5eed))),
                Instant::ZERO,
                SIM_UNIX_START_NS,
            ),
            buf: Vec::new(),
        }
    }
}

impl Node for ClientNode {
    fn handle(&mut self, now: Instant, port: usize, mut data: Vec<u8>) {
        if port == 0 {
            self.bond.handle_inner(now, data);
        } else {
            self.bond.handle_datagram(now, &mut data);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if let Some(packet) = self.bond.poll_deliver() {
            return Some((0, packet));
        }
        self.bond.handle_timeout(now);
        if let Some(packet) = self.bond.poll_deliver() {
            return Some((0, packet));
        }
        let transmit = self.bond.poll_transmit(now, &mut self.buf)?;
        Some((usize::from(transmit.line) + 1, self.buf.clone()))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.bond.poll_at()
    }
}

/// What a simulated line counts per datagram beyond the UDP payload the simulation
/// carries, for [`pathlab_core::harness::Network::new`]: the UDP and IPv4 headers and
/// Ethernet's header (42 bytes), as `pathlab emulate` counts a real line's frames and as a
/// line of [`LineFraming::default`] paces them. So a simulated `rate 10mbit` carries what
/// a real one does.
pub fn line_overhead_bytes() -> u32 {
    LineFraming::default().overhead_bytes() as u32
}

/// The network of one client's tunnel: the near host (node 0) joined to the client's TUN
/// side (node 1) and the server's TUN side (node 2) to the far host (node 3) by ideal
/// links, then line `k` of `lines` (its upward and downward specs) from the client's port
/// `k + 1` to the server's, with seed `100 + k`. Returns each line's (upward, downward)
/// wires.
pub fn tunnel_network(lines: &[(&str, &str)]) -> (Network, Vec<(WireId, WireId)>) {
    let mut net = Network::new(line_overhead_bytes());
    let ideal = LinkSpec::parse("").expect("no impairment");
    net.connect(Port::new(0, 0), Port::new(1, 0), &ideal, &ideal, 1)
        .expect("a new port");
    net.connect(Port::new(2, 0), Port::new(3, 0), &ideal, &ideal, 2)
        .expect("a new port");
    let wires = lines
        .iter()
        .enumerate()
        .map(|(k, (up, down))| {
            let spec = |text: &str| LinkSpec::parse(text).expect("a line's spec");
            net.connect(
                Port::new(1, k + 1),
                Port::new(2, k + 1),
                &spec(up),
                &spec(down),
                100 + k as u64,
            )
            .expect("a new port")
        })
        .collect();
    (net, wires)
}

/// The address the server sees line `k` of client `client` come from.
pub fn line_address(client: u8, line: usize) -> SocketAddr {
    SocketAddr::new(
        Ipv4Addr::new(198, 19, client, line as u8 + 1).into(),
        40_000,
    )
}

/// The server as a node; several clients reach it: client `c`'s line `k` arrives on port
/// `1 + c * lines_per_client + k`.
#[derive(Debug)]
pub struct ServerNode {
    /// The server.
    pub server: Server,
    lines_per_client: usize,
    buf: Vec<u8>,
}

impl ServerNode {
    /// A server in the simple mode of `psk` whose clients have at most
    /// `config.session.lines` lines each.
    pub fn new(config: ServerConfig, psk: &Psk, seed: u64) -> ServerNode {
        let entropy = Box::new(SeededEntropy(Rng::seed_from(seed)));
        ServerNode::with_server(Server::with_psk(config, psk, entropy))
    }

    /// A node around `server`.
    pub fn with_server(server: Server) -> ServerNode {
        ServerNode {
            lines_per_client: server.config().session.lines,
            server,
            buf: Vec::new(),
        }
    }

    /// The port client `client`'s line `line` arrives on.
    pub fn port(&self, client: usize, line: usize) -> usize {
        1 + client * self.lines_per_client + line
    }
}

impl Node for ServerNode {
    fn handle(&mut self, now: Instant, port: usize, mut data: Vec<u8>) {
        if port == 0 {
            self.server.handle_inner(now, data);
        } else {
            let client = (port - 1) / self.lines_per_client;
            let line = (port - 1) % self.lines_per_client;
            let from = Address {
                remote: line_address(client as u8, line),
                local: None,
            };
            self.server.handle_datagram(now, from, &mut data);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if let Some(packet) = self.server.poll_deliver() {
            return Some((0, packet));
        }
        self.server.handle_timeout(now);
        if let Some(packet) = self.server.poll_deliver() {
            return Some((0, packet));
        }
        let to = self.server.poll_transmit(now, &mut self.buf)?;
        let IpAddrs { client, line } = IpAddrs::of(to.remote);
        Some((self.port(client, line), self.buf.clone()))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.server.poll_at()
    }
}

struct IpAddrs {
    client: usize,
    line: usize,
}

impl IpAddrs {
    fn of(address: SocketAddr) -> IpAddrs {
        match address.ip() {
            std::net::IpAddr::V4(v4) => {
                let o = v4.octets();
                IpAddrs {
                    client: usize::from(o[2]),
                    line: usize::from(o[3]) - 1,
                }
            }
            std::net::IpAddr::V6(_) => IpAddrs { client: 0, line: 0 },
        }
    }
}

/// A traffic source behind a tunnel end: one UDP flow (a host's `k`-th flow leaves from
/// port [`FLOW_PORT`]` + k`, so two flows of one host are two 5-tuples).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    /// Inner source address (the user).
    pub source: Ipv4Addr,
    /// Inner destination.
    pub destination: Ipv4Addr,
    /// Rate while active.
    pub rate: BitsPerSec,
    /// IP packet length.
    pub size_bytes: usize,
    /// When it starts.
    pub start: Instant,
    /// When it stops.
    pub stop: Instant,
}

/// What a host received from one source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Received {
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// Packets that arrived with a lower number than one before them of the same flow
    /// (out of order: the tunnel keeps order per flow).
    pub out_of_order: u64,
    /// Highest number seen, of any flow.
    pub highest: u64,
    /// Highest number seen per flow (by UDP source port).
    pub highest_by_port: HashMap<u16, u64>,
    /// Arrival instants and lengths, when recording.
    pub arrivals: Vec<(Instant, usize)>,
}

/// A ping's round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingSample {
    /// When the request left.
    pub sent: Instant,
    /// Its round trip.
    pub rtt: Duration,
}

/// A host: sends flows and pings, answers pings, counts what it receives.
#[derive(Debug, Default)]
pub struct Host {
    flows: Vec<(Flow, Instant, u64)>,
    pings: Option<Pinger>,
    outbox: std::collections::VecDeque<Vec<u8>>,
    /// What arrived, by inner source address.
    pub received: HashMap<Ipv4Addr, Received>,
    /// Round trips of this host's pings.
    pub ping_samples: Vec<PingSample>,
    /// Whether to record every arrival (for goodput over time).
    pub record_arrivals: bool,
}

#[derive(Debug, Clone, Copy)]
struct Pinger {
    source: Ipv4Addr,
    destination: Ipv4Addr,
    every: Duration,
    size_bytes: usize,
    next: Instant,
    seq: u64,
    stop: Instant,
}

/// The UDP source port of a host's first flow; its `k`-th leaves from `FLOW_PORT + k`.
pub const FLOW_PORT: u16 = 4000;
/// The UDP source port of a host's pings: a flow of its own, apart from its data flows.
pub const PING_PORT: u16 = 3000;
/// Where the UDP source port sits in the host's IPv4 packets (no IP options).
const SOURCE_PORT_AT: std::ops::Range<usize> = 20..22;

/// Payload marks: a data packet, a ping, a pong.
const DATA: u8 = 0;
const PING: u8 = 1;
const PONG: u8 = 2;
/// IPv4 + UDP headers, then mark u8, number u64, sent u64.
const PAYLOAD_AT: usize = 28;
const MIN_PACKET: usize = PAYLOAD_AT + 17;

impl Host {
    /// A host with no traffic of its own.
    pub fn new() -> Host {
        Host::default()
    }

    /// Adds a constant-bit-rate flow.
    pub fn flow(mut self, flow: Flow) -> Host {
        self.flows.push((flow, flow.start, 0));
        self
    }

    /// Pings `destination` from `source` every `every`, `size_bytes` long, until `stop`.
    pub fn pings(
        mut self,
        source: Ipv4Addr,
        destination: Ipv4Addr,
        every: Duration,
        size_bytes: usize,
        start: Instant,
        stop: Instant,
    ) -> Host {
        self.pings = Some(Pinger {
            source,
            destination,
            every,
            size_bytes: size_bytes.max(MIN_PACKET),
            next: start,
            seq: 0,
            stop,
        });
        self
    }

    /// What arrived from `source`.
    pub fn from(&self, source: Ipv4Addr) -> Received {
        self.received.get(&source).cloned().unwrap_or_default()
    }
}

/// An IPv4/UDP packet of `len` bytes with the host's payload.
pub fn packet(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    len: usize,
    mark: u8,
    number: u64,
    sent: Instant,
) -> Vec<u8> {
    let mut p = crate::inner::ipv4_udp(source, destination, len.max(MIN_PACKET));
    p[SOURCE_PORT_AT].copy_from_slice(&FLOW_PORT.to_be_bytes());
    p[PAYLOAD_AT] = mark;
    p[PAYLOAD_AT + 1..PAYLOAD_AT + 9].copy_from_slice(&number.to_be_bytes());
    p[PAYLOAD_AT + 9..PAYLOAD_AT + 17].copy_from_slice(&sent.as_nanos().to_be_bytes());
    p
}

impl Node for Host {
    fn handle(&mut self, now: Instant, _port: usize, data: Vec<u8>) {
        if data.len() < MIN_PACKET {
            return;
        }
        let source = Ipv4Addr::new(data[12], data[13], data[14], data[15]);
        let destination = Ipv4Addr::new(data[16], data[17], data[18], data[19]);
        let mark = data[PAYLOAD_AT];
        let number = u64::from_be_bytes(data[PAYLOAD_AT + 1..PAYLOAD_AT + 9].try_into().unwrap());
        let sent = u64::from_be_bytes(data[PAYLOAD_AT + 9..PAYLOAD_AT + 17].try_into().unwrap());
        match mark {
            PING => {
                let mut reply = data.clone();
                reply[12..16].copy_from_slice(&destination.octets());
                reply[16..20].copy_from_slice(&source.octets());
                reply[PAYLOAD_AT] = PONG;
                self.outbox.push_back(reply);
            }
            PONG => self.ping_samples.push(PingSample {
                sent: Instant::from_nanos(sent),
                rtt: now.saturating_since(Instant::from_nanos(sent)),
            }),
            _ => {}
        }
        let record = self.record_arrivals;
        let received = self.received.entry(source).or_default();
        received.packets += 1;
        received.bytes += data.len() as u64;
        if mark == DATA {
            let port =
                u16::from_be_bytes([data[SOURCE_PORT_AT.start], data[SOURCE_PORT_AT.start + 1]]);
            let highest = received.highest_by_port.entry(port).or_default();
            if number < *highest {
                received.out_of_order += 1;
            }
            *highest = (*highest).max(number);
            received.highest = received.highest.max(number);
        }
        if record {
            received.arrivals.push((now, data.len()));
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if let Some(packet) = self.outbox.pop_front() {
            return Some((0, packet));
        }
        if let Some(pinger) = &mut self.pings {
            if now >= pinger.next && now < pinger.stop {
                pinger.seq += 1;
                pinger.next += pinger.every;
                let mut p = packet(
                    pinger.source,
                    pinger.destination,
                    pinger.size_bytes,
                    PING,
                    pinger.seq,
                    now,
                );
                p[SOURCE_PORT_AT].copy_from_slice(&PING_PORT.to_be_bytes());
                return Some((0, p));
            }
        }
        for (k, (flow, next, number)) in self.flows.iter_mut().enumerate() {
            if now >= *next && now < flow.stop {
                *number += 1;
                *next += flow.rate.serialization_time(flow.size_bytes as u64);
                let mut p = packet(
                    flow.source,
                    flow.destination,
                    flow.size_bytes,
                    DATA,
                    *number,
                    now,
                );
                let port = FLOW_PORT.wrapping_add(k as u16);
                p[SOURCE_PORT_AT].copy_from_slice(&port.to_be_bytes());
                return Some((0, p));
            }
        }
        None
    }

    fn poll_at(&self) -> Option<Instant> {
        let flows = self
            .flows
            .iter()
            .filter(|(flow, next, _)| *next < flow.stop)
            .map(|(_, next, _)| *next);
        let pings = self
            .pings
            .iter()
            .filter(|p| p.next < p.stop)
            .map(|p| p.next);
        let outbox = (!self.outbox.is_empty()).then_some(Instant::ZERO);
        flows.chain(pings).chain(outbox).min()
    }
}
