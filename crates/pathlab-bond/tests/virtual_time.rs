//! The tunnel in virtual time, through emulated lines: its figures against theory and the
//! lines' ground truth.

use std::net::Ipv4Addr;

use pathlab_bond::crypto::Psk;
use pathlab_bond::line::LineState;
use pathlab_bond::sched::SchedulerKind;
use pathlab_bond::sim::{ClientNode, Flow, Host, ServerNode};
use pathlab_bond::{BondConfig, ServerConfig};
use pathlab_core::harness::{Network, Node, Port, WireId};
use pathlab_core::record::PacketRecord;
use pathlab_core::{BitsPerSec, Duration, Instant, LinkSpec};

const USER: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);

fn psk() -> Psk {
    Psk::from_file_contents(b"a test key of at least thirty-two bytes").unwrap()
}

/// Client-side host, client, server, far host; line `k` from client port k+1 to server
/// port k+1.
struct Tunnel {
    net: Network,
    near: Host,
    client: ClientNode,
    server: ServerNode,
    far: Host,
    /// Each line's upward (client to server) and downward wires.
    lines: Vec<(WireId, WireId)>,
}

impl Tunnel {
    fn new(lines: &[(&str, &str)], config: BondConfig, near: Host, far: Host) -> Tunnel {
        let mut net = Network::new(28);
        let ideal = LinkSpec::parse("").unwrap();
        net.connect(Port::new(0, 0), Port::new(1, 0), &ideal, &ideal, 1)
            .unwrap();
        net.connect(Port::new(2, 0), Port::new(3, 0), &ideal, &ideal, 2)
            .unwrap();
        let server_config = ServerConfig {
            session: config.clone(),
            max_clients: 8,
            idle_timeout: Duration::from_secs(60),
        };
        let server = ServerNode::new(server_config, psk(), 7);
        let mut wires = Vec::new();
        for (k, (up, down)) in lines.iter().enumerate() {
            let up = LinkSpec::parse(up).unwrap();
            let down = LinkSpec::parse(down).unwrap();
            let ids = net
                .connect(
                    Port::new(1, k + 1),
                    Port::new(2, server.port(0, k)),
                    &up,
                    &down,
                    100 + k as u64,
                )
                .unwrap();
            net.link_mut(ids.0).record();
            wires.push(ids);
        }
        Tunnel {
            net,
            near,
            client: ClientNode::new(config, psk(), 3),
            server,
            far,
            lines: wires,
        }
    }

    fn run_until(&mut self, at: Instant) {
        let nodes: &mut [&mut dyn Node] = &mut [
            &mut self.near,
            &mut self.client,
            &mut self.server,
            &mut self.far,
        ];
        self.net.run_until(at, nodes);
    }

    /// Finished records of line `k`'s upward link.
    fn records(&mut self, k: usize) -> Vec<PacketRecord> {
        self.net
            .link_mut(self.lines[k].0)
            .recorder()
            .unwrap()
            .drain_finished()
    }
}

fn secs(s: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(s)
}

/// Nearest-rank quantile of queue delays (ms) of the packets that entered between `from`
/// and `to`.
fn queue_delay_ms(records: &[PacketRecord], from: Instant, to: Instant, q: f64) -> f64 {
    let mut delays: Vec<f64> = records
        .iter()
        .filter(|r| r.arrived >= from && r.arrived < to)
        .filter_map(|r| r.dequeued.map(|d| d.saturating_since(r.arrived).as_millis_f64()))
        .collect();
    assert!(!delays.is_empty(), "no packets between {from} and {to}");
    delays.sort_by(f64::total_cmp);
    let rank = ((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len());
    delays[rank - 1]
}

/// Bytes (as the link counts them) that left the link between `from` and `to`.
fn bytes_out(records: &[PacketRecord], from: Instant, to: Instant) -> u64 {
    records
        .iter()
        .filter(|r| r.departed.is_some_and(|d| d >= from && d < to))
        .map(|r| u64::from(r.len_bytes))
        .sum()
}

fn bulk(rate_mbit: u64, until: f64) -> Host {
    Host::new().flow(Flow {
        source: USER,
        destination: FAR,
        rate: BitsPerSec(rate_mbit * 1_000_000),
        size_bytes: 1400,
        start: secs(0.5),
        stop: secs(until),
    })
}

/// ADSL/cable/4G-like lines: 12, 6 and 3 Mbit/s up, one-way 10, 20 and 40 ms, tail-drop
/// buffers of about a second; downward fast.
const THREE_LINES: [(&str, &str); 3] = [
    ("delay 10ms rate 12mbit limit 1000", "delay 10ms rate 50mbit"),
    ("delay 20ms rate 6mbit limit 500", "delay 20ms rate 50mbit"),
    ("delay 40ms rate 3mbit limit 250", "delay 40ms rate 50mbit"),
];
const RATES_MBIT: [f64; 3] = [12.0, 6.0, 3.0];

#[test]
fn the_session_opens_and_carries_packets_both_ways() {
    let near = bulk(1, 2.0);
    let far = Host::new().pings(FAR, USER, Duration::from_millis(100), 100, secs(1.0), secs(2.0));
    let mut tunnel = Tunnel::new(&THREE_LINES, BondConfig::new(3), near, far);
    tunnel.run_until(secs(3.0));
    assert!(tunnel.client.bond.is_open());
    let received = tunnel.far.from(USER);
    // 1 Mbit/s of 1400-byte packets for 1.5 s: 134 packets (the first ones may arrive
    // before the session opens and be dropped).
    assert!(received.packets >= 130, "{received:?}");
    assert_eq!(received.out_of_order, 0);
    // Pings from the far side cross the tunnel both ways.
    assert_eq!(tunnel.far.ping_samples.len(), 10);
}

#[test]
fn the_delay_controller_fills_each_line_and_holds_its_queue_near_target() {
    // 30 Mbit/s offered to 21 Mbit/s of lines, for 20 s.
    let mut tunnel = Tunnel::new(&THREE_LINES, BondConfig::new(3), bulk(30, 20.0), Host::new());
    tunnel.run_until(secs(20.0));
    let (from, to) = (secs(10.0), secs(20.0));
    for (k, rate) in RATES_MBIT.iter().enumerate() {
        let records = tunnel.records(k);
        let delivered_mbit = bytes_out(&records, from, to) as f64 * 8.0 / 10.0 / 1e6;
        let p50 = queue_delay_ms(&records, from, to, 0.5);
        let p95 = queue_delay_ms(&records, from, to, 0.95);
        eprintln!("line {k}: {delivered_mbit:.2} of {rate} Mbit/s, queue p50 {p50:.1} ms p95 {p95:.1} ms");
        // Within 5% of the line's rate (the link counts IP + UDP bytes: the line's own).
        assert!(
            (delivered_mbit - rate).abs() / rate < 0.05,
            "line {k}: {delivered_mbit:.2} Mbit/s of {rate}"
        );
        assert!(p95 < 30.0, "line {k}: queue p95 {p95:.1} ms");
    }
    assert_eq!(tunnel.far.from(USER).out_of_order, 0);
}
