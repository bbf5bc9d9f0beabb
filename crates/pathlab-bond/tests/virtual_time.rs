//! The tunnel in virtual time, through emulated lines: its figures against theory and the
//! lines' ground truth.

use std::net::Ipv4Addr;

use pathlab_bond::crypto::Psk;
use pathlab_bond::line::{LineFraming, LineState, LineTimers};
use pathlab_bond::reorder::ReorderCounters;
use pathlab_bond::sched::SchedulerKind;
use pathlab_bond::sim::{line_overhead_bytes, tunnel_network, ClientNode, Flow, Host, ServerNode};
use pathlab_bond::{BondConfig, ServerConfig};
use pathlab_core::harness::{Network, Node, WireId};
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
        let (mut net, wires) = tunnel_network(lines);
        for (up, _) in &wires {
            net.link_mut(*up).record();
        }
        let server_config = ServerConfig::new(config.clone(), 8);
        let server = ServerNode::new(server_config, &psk(), 7);
        Tunnel {
            net,
            near,
            client: ClientNode::new(config, &psk(), 3),
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
    /// Line `k`'s links from now on: `(up, down)` specs.
    fn set_line(&mut self, k: usize, (up, down): (&str, &str)) {
        let now = self.net.now();
        for (wire, spec) in [(self.lines[k].0, up), (self.lines[k].1, down)] {
            self.net
                .link_mut(wire)
                .set_spec(now, &LinkSpec::parse(spec).unwrap())
                .unwrap();
        }
    }

    /// Runs in 10 ms steps from `from` s until the client declares line `k` `state`, for
    /// at most `steps` steps: how long that took, seconds.
    fn line_becomes(&mut self, k: usize, state: LineState, from: f64, steps: u32) -> f64 {
        let after = (1..=steps)
            .map(|step| f64::from(step) * 0.01)
            .find(|&after| {
                self.run_until(secs(from + after));
                self.client.bond.lines()[k].state() == state
            });
        let after = after.unwrap_or_else(|| panic!("line {k} was never {state:?}"));
        eprintln!("line {k} {state:?} after {after:.2} s");
        after
    }

    fn records(&mut self, k: usize) -> Vec<PacketRecord> {
        self.net
            .link_mut(self.lines[k].0)
            .recorder()
            .unwrap()
            .drain_finished()
    }
}

/// The counters of the server's reassembly and reorder buffer (its first session's).
fn far_reorder(tunnel: &Tunnel) -> ReorderCounters {
    let (_, _, bond) = tunnel.server.server.sessions().next().expect("a session");
    bond.reorder().counters()
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
        .filter_map(|r| {
            r.dequeued
                .map(|d| d.saturating_since(r.arrived).as_millis_f64())
        })
        .collect();
    assert!(!delays.is_empty(), "no packets between {from} and {to}");
    delays.sort_by(f64::total_cmp);
    pathlab_core::quantile::of_sorted(&delays, q).expect("not empty")
}

/// Bytes (as the line counts them: each datagram's UDP payload, UDP and IPv4 headers and
/// Ethernet's header, [`line_overhead_bytes`]) that left the link between `from` and `to`.
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
    (
        "delay 10ms rate 12mbit limit 1000",
        "delay 10ms rate 50mbit",
    ),
    ("delay 20ms rate 6mbit limit 500", "delay 20ms rate 50mbit"),
    ("delay 40ms rate 3mbit limit 250", "delay 40ms rate 50mbit"),
];
const RATES_MBIT: [f64; 3] = [12.0, 6.0, 3.0];

#[test]
fn the_session_opens_and_carries_packets_both_ways() {
    let near = bulk(1, 2.0);
    let far = Host::new().pings(
        FAR,
        USER,
        Duration::from_millis(100),
        100,
        secs(1.0),
        secs(2.0),
    );
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
    let mut tunnel = Tunnel::new(
        &THREE_LINES,
        BondConfig::new(3),
        bulk(30, 20.0),
        Host::new(),
    );
    tunnel.run_until(secs(20.0));
    let (from, to) = (secs(10.0), secs(20.0));
    for (k, rate) in RATES_MBIT.iter().enumerate() {
        let records = tunnel.records(k);
        let delivered_mbit = bytes_out(&records, from, to) as f64 * 8.0 / 10.0 / 1e6;
        let p50 = queue_delay_ms(&records, from, to, 0.5);
        let p95 = queue_delay_ms(&records, from, to, 0.95);
        eprintln!(
            "line {k}: {delivered_mbit:.2} of {rate} Mbit/s, queue p50 {p50:.1} ms p95 {p95:.1} ms"
        );
        // Within 5% of the line's rate (in the line's bytes, headers and framing included).
        assert!(
            (delivered_mbit - rate).abs() / rate < 0.05,
            "line {k}: {delivered_mbit:.2} Mbit/s of {rate}"
        );
        assert!(p95 < 30.0, "line {k}: queue p95 {p95:.1} ms");
    }
    assert_eq!(tunnel.far.from(USER).out_of_order, 0);
}

/// Inner bytes the far host received from `source` between `from` and `to`.
fn inner_bytes(host: &Host, source: Ipv4Addr, from: Instant, to: Instant) -> u64 {
    host.from(source)
        .arrivals
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, len)| *len as u64)
        .sum()
}

/// The three lines carrying a 30 Mbit/s bulk flow until `until` s, to a far host that
/// records what arrives.
fn bulk_over_three_lines(until: f64) -> Tunnel {
    Tunnel::new(
        &THREE_LINES,
        BondConfig::new(3),
        bulk(30, until),
        recording_host(),
    )
}

/// A far host that records what arrives.
fn recording_host() -> Host {
    let mut far = Host::new();
    far.record_arrivals = true;
    far
}

#[test]
fn the_aggregate_carries_nearly_the_sum_of_the_lines() {
    let mut tunnel = bulk_over_three_lines(12.0);
    tunnel.run_until(secs(12.0));
    let (from, to) = (secs(4.0), secs(12.0));
    let goodput = inner_bytes(&tunnel.far, USER, from, to) as f64 * 8.0 / 8.0 / 1e6;
    let sum: f64 = RATES_MBIT.iter().sum();
    // The line's own bytes per datagram: Ethernet 14, IP + UDP 28; the tunnel's: header
    // 16, timestamp 8, tag 16, a report and an echo now and then, 14 per fragment: with
    // 1514-byte frames carrying 1400-byte packets, about 94% of each line's bytes are
    // inner bytes (92.7% measured when the lines counted no Ethernet header: 1500-byte
    // frames; x 1500 / 1514 = 91.8%).
    eprintln!("aggregate inner goodput {goodput:.2} Mbit/s of {sum} Mbit/s of lines");
    eprintln!(
        "client {:?} fair {:?}",
        tunnel.client.bond.counters(),
        tunnel.client.bond.fair().counters()
    );
    for line in tunnel.client.bond.lines() {
        eprintln!("line {:?}", line.counters());
    }
    let reorder = tunnel.client.bond.reorder().counters();
    let far_reorder = far_reorder(&tunnel);
    eprintln!("server reorder {far_reorder:?}, client {reorder:?}");
    assert_eq!(far_reorder.gaps_skipped, 0);
    assert!(goodput > 0.91 * sum, "{goodput:.2} Mbit/s of {sum}");
}

#[test]
fn round_robin_fills_the_modems_as_tunnels_do_today() {
    let mut config = BondConfig::new(3);
    config.scheduler = SchedulerKind::RoundRobin;
    let mut tunnel = Tunnel::new(&THREE_LINES, config, bulk(30, 12.0), Host::new());
    tunnel.run_until(secs(12.0));
    let records = tunnel.records(2);
    let p50 = queue_delay_ms(&records, secs(6.0), secs(12.0), 0.5);
    eprintln!("round robin: the 3 Mbit/s line's queue p50 {p50:.0} ms");
    // Unpaced, the slow line's modem buffer (250 packets at 3 Mbit/s: 0.99 s) stays full.
    assert!(p50 > 500.0, "queue p50 {p50:.0} ms");
}

#[test]
fn a_dead_line_is_left_within_half_a_second_and_rejoins_when_it_comes_back() {
    let mut tunnel = bulk_over_three_lines(14.0);
    tunnel.run_until(secs(5.0));
    tunnel.set_line(1, ("loss 100%", "loss 100%"));
    let down_after = tunnel.line_becomes(1, LineState::Down, 5.0, 100);
    assert!(down_after <= 0.5, "{down_after} s");
    // Traffic carries on over the other two lines: 15 Mbit/s of capacity.
    tunnel.run_until(secs(8.0));
    let carried = inner_bytes(&tunnel.far, USER, secs(6.0), secs(8.0)) as f64 * 8.0 / 2.0 / 1e6;
    eprintln!("while down: {carried:.2} Mbit/s");
    assert!(carried > 0.9 * 15.0, "{carried:.2} Mbit/s");
    // Back at 8 s.
    tunnel.set_line(1, THREE_LINES[1]);
    let up_after = tunnel.line_becomes(1, LineState::Up, 8.0, 300);
    assert!(up_after <= 2.0, "{up_after} s");
    tunnel.run_until(secs(14.0));
    let records = tunnel.records(1);
    let rejoined = bytes_out(&records, secs(12.0), secs(14.0)) as f64 * 8.0 / 2.0 / 1e6;
    eprintln!("line 1 after rejoining: {rejoined:.2} Mbit/s");
    assert!(rejoined > 0.9 * 6.0, "{rejoined:.2} Mbit/s");
}

/// The seed's case: a 1 Mbit/s line (one 1500-byte frame every 12 ms), 14 users sending
/// bulk and one pinging with 100 bytes. Per packet, the ping would wait up to 14 x 12 ms;
/// by volume, about one frame.
/// The pinging user's added RTTs (ms above its idle median) while 14 users saturate a
/// 1 Mbit/s line, its pings starting `offset_ms` after 1 s.
fn pinger_added_rtts_ms(fair: pathlab_bond::fair::FairKey, offset_ms: u64) -> Vec<f64> {
    let mut near = Host::new().pings(
        Ipv4Addr::new(198, 18, 1, 100),
        FAR,
        Duration::from_millis(50),
        100,
        secs(1.0) + Duration::from_millis(offset_ms),
        secs(20.0),
    );
    for user in 0..14u8 {
        near = near.flow(Flow {
            source: Ipv4Addr::new(198, 18, 1, 10 + user),
            destination: FAR,
            rate: BitsPerSec(150_000),
            size_bytes: 1400,
            start: secs(5.0),
            stop: secs(20.0),
        });
    }
    let mut config = BondConfig::new(1);
    config.fair.key = fair;
    // The fair queue is what is measured: the ping (small, steady UDP) would otherwise be
    // `redundant` by default and skip every queue.
    config.classes = pathlab_bond::class::parse_rules(&["bulk:any"]).unwrap();
    if fair == pathlab_bond::fair::FairKey::Off {
        // A plain FIFO, as a tunnel's tun0 without cake.
        config.fair.codel.target = Duration::from_secs(3600);
        config.fair.limit_bytes = 200_000;
    }
    let lines = [("delay 10ms rate 1mbit limit 100", "delay 10ms rate 10mbit")];
    let mut tunnel = Tunnel::new(&lines, config, near, Host::new());
    tunnel.run_until(secs(20.0));
    let rtts = |from: f64, to: f64| {
        let mut v: Vec<f64> = tunnel
            .near
            .ping_samples
            .iter()
            .filter(|s| s.sent >= secs(from) && s.sent < secs(to))
            .map(|s| s.rtt.as_millis_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let idle = rtts(2.0, 5.0);
    let loaded = rtts(10.0, 19.5);
    assert!(
        idle.len() > 50 && loaded.len() > 150,
        "{} {}",
        idle.len(),
        loaded.len()
    );
    let idle_median = pathlab_core::quantile::of_sorted(&idle, 0.5).expect("idle samples");
    loaded.iter().map(|rtt| rtt - idle_median).collect()
}

/// Median and p95 (nearest rank) of the added RTTs of runs whose pings start at each of
/// `offsets_ms`: where a ping falls between the 12 ms frames shifts each run's few worst
/// samples, so one run's p95 is one trajectory's; the pool is the distribution.
fn pinger_added_rtt_ms(fair: pathlab_bond::fair::FairKey, offsets_ms: &[u64]) -> (f64, f64) {
    let mut added: Vec<f64> = offsets_ms
        .iter()
        .flat_map(|&offset| pinger_added_rtts_ms(fair, offset))
        .collect();
    added.sort_by(f64::total_cmp);
    let quantile = |q| pathlab_core::quantile::of_sorted(&added, q).expect("added samples");
    (quantile(0.5), quantile(0.95))
}

#[test]
fn a_pinging_user_waits_about_one_frame_behind_fourteen_bulk_users() {
    let offsets = [0, 3, 7, 11, 17, 23, 31, 41];
    let (median, p95) = pinger_added_rtt_ms(pathlab_bond::fair::FairKey::Source, &offsets);
    eprintln!("by volume: added RTT median {median:.1} ms, p95 {p95:.1} ms");
    // The bound: two full frames' time on the 1 Mbit/s line (one in service at the
    // modem, one the ping's datagram borrows from the pacer), now that the line counts a
    // frame as its modem does (1500 + 14 bytes: 12.11 ms each), plus the ping's own
    // datagram (100 + 46 + 42 bytes: 1.5 ms). Measured: 23.7 ms when the line counted 28
    // bytes per datagram, 25.5 ms at 42 (issue 28; why the 14 bytes cost 1.8 ms is not
    // understood yet).
    let frame_ms = |bytes: f64| bytes * 8.0 / 1e6 * 1e3;
    let bound = 2.0 * frame_ms(1514.0) + frame_ms(188.0);
    assert!(p95 <= bound, "p95 added RTT {p95:.1} ms, bound {bound:.1}");
    // The same through one FIFO of 200 kB: the ping waits behind everyone's packets.
    let (median_fifo, p95_fifo) = pinger_added_rtt_ms(pathlab_bond::fair::FairKey::Off, &[0]);
    eprintln!("one FIFO: added RTT median {median_fifo:.1} ms, p95 {p95_fifo:.1} ms");
    assert!(
        median_fifo > 10.0 * median,
        "a FIFO makes the ping wait behind the bulk"
    );
}

/// Regression (issue 27): the server's queue keyed on the remote internet host (the inner
/// source going down), so a site user downloading from many hosts took a share per host.
/// Three site users on lines of 3 x 4 Mbit/s down: two each fed by one remote bulk sender,
/// one by eight. Each user offers 6 Mbit/s or more, so a queue fair by site user gives each
/// a third of what the tunnel delivers; keyed by remote host the third user would take 8/10.
#[test]
fn downstream_shares_follow_the_sites_users_not_the_remote_hosts() {
    let site_users = [
        Ipv4Addr::new(198, 18, 1, 1),
        Ipv4Addr::new(198, 18, 1, 2),
        Ipv4Addr::new(198, 18, 1, 3),
    ];
    let remotes: Vec<(Ipv4Addr, Ipv4Addr)> = (0..10u8)
        .map(|k| {
            let user = site_users[usize::from(k.min(2))];
            (Ipv4Addr::new(198, 18, 2, 1 + k), user)
        })
        .collect();
    let mut far = Host::new();
    for &(remote, user) in &remotes {
        far = far.flow(Flow {
            source: remote,
            destination: user,
            rate: BitsPerSec(6_000_000),
            size_bytes: 1400,
            start: secs(0.5),
            stop: secs(8.0),
        });
    }
    let mut near = Host::new();
    near.record_arrivals = true;
    // The site's first packet opens the session and teaches the server the route.
    let near = near.pings(
        site_users[0],
        FAR,
        Duration::from_millis(200),
        100,
        secs(0.0),
        secs(8.0),
    );
    let lines = [
        ("delay 10ms rate 50mbit", "delay 10ms rate 4mbit limit 300"),
        ("delay 20ms rate 50mbit", "delay 20ms rate 4mbit limit 300"),
        ("delay 30ms rate 50mbit", "delay 30ms rate 4mbit limit 300"),
    ];
    let mut tunnel = Tunnel::new(&lines, BondConfig::new(3), near, far);
    tunnel.run_until(secs(8.0));
    let (from, to) = (secs(3.0), secs(8.0));
    let per_user: Vec<u64> = site_users
        .iter()
        .map(|&user| {
            remotes
                .iter()
                .filter(|(_, u)| *u == user)
                .map(|&(remote, _)| inner_bytes(&tunnel.near, remote, from, to))
                .sum()
        })
        .collect();
    let total: u64 = per_user.iter().sum();
    eprintln!("bytes per site user {per_user:?} of {total}");
    assert!(total > 0);
    for (user, bytes) in site_users.iter().zip(&per_user) {
        let share = *bytes as f64 / total as f64;
        assert!(
            (share - 1.0 / 3.0).abs() < 0.05,
            "{user}: {share:.3} of the tunnel"
        );
    }
}

/// A route change that lengthens a line's delay for good (a 4G handover, a rerouted
/// ADSL backhaul) is not a queue: the line must not be starved until the old base delay
/// leaves the 30 s history. Found by the chaos test (`tests/bond_chaos.rs`): a line whose
/// one-way delay rose by 30 ms fell to 0.1-0.5 Mbit/s for about 30 s.
#[test]
fn a_line_whose_delay_rises_for_good_is_used_again_within_seconds() {
    let line = [(
        "delay 10ms rate 12mbit limit 1000",
        "delay 10ms rate 50mbit",
    )];
    let mut tunnel = Tunnel::new(&line, BondConfig::new(1), bulk(20, 30.0), Host::new());
    tunnel.run_until(secs(8.0));
    tunnel.set_line(
        0,
        (
            "delay 40ms rate 12mbit limit 1000",
            "delay 40ms rate 50mbit",
        ),
    );
    tunnel.run_until(secs(20.0));
    let records = tunnel.records(0);
    let mbit = |from: f64, to: f64| {
        bytes_out(&records, secs(from), secs(to)) as f64 * 8.0 / (to - from) / 1e6
    };
    let (before, after) = (mbit(4.0, 8.0), mbit(14.0, 20.0));
    let p95 = queue_delay_ms(&records, secs(14.0), secs(20.0), 0.95);
    let resets = tunnel.client.bond.lines()[0].controller().base_resets();
    eprintln!(
        "before {before:.2} Mbit/s, 6-12 s after the change {after:.2} Mbit/s, queue p95 {p95:.1} ms, {resets} base reset(s)"
    );
    assert!(before > 0.9 * 12.0, "{before:.2} Mbit/s before");
    assert!(after > 0.9 * 12.0, "{after:.2} Mbit/s after the delay rose");
    assert!(p95 < 30.0, "queue p95 {p95:.1} ms");
    assert_eq!(resets, 1);
}

/// The round trips (ms) of a host's pings (100 bytes every 100 ms, a flow of their own)
/// sent between 4 and 11.5 s while the same host's bulk flow (30 Mbit/s offered: its queue
/// in the tunnel stands) fills the three lines from 0.5 s; and the far host's count of
/// packets out of order per flow.
fn ping_beside_its_own_bulk_flow(config: BondConfig) -> (Vec<f64>, u64) {
    let near = bulk(30, 12.0).pings(
        USER,
        FAR,
        Duration::from_millis(100),
        100,
        secs(1.0),
        secs(12.0),
    );
    let mut tunnel = Tunnel::new(&THREE_LINES, config, near, Host::new());
    tunnel.run_until(secs(12.0));
    let mut rtts: Vec<f64> = tunnel
        .near
        .ping_samples
        .iter()
        .filter(|s| s.sent >= secs(4.0) && s.sent < secs(11.5))
        .map(|s| s.rtt.as_millis_f64())
        .collect();
    rtts.sort_by(f64::total_cmp);
    (rtts, tunnel.far.from(USER).out_of_order)
}

/// Issue 28, item 2: order per flow, not per user. A host's ping is another flow than its
/// bulk flow, so it neither waits behind that flow's queue at the sender (CoDel lets it
/// stand at 5 ms + (spread + 0.3 rtt) / 0.7, about 58 ms here, to keep the far lines busy)
/// nor behind its gaps at the receiver (the slowest line's 40 ms).
///
/// Theory: the ping takes the line where it lands first, the fastest (10 ms one way), held
/// by its controller at a queue of a few ms (p95 below 30 ms in the test above, about 10 in
/// practice), borrowing at most one frame's time (1 ms at 12 Mbit/s) from its pacer; the
/// pong comes back over an idle 50 Mbit/s line (10 ms). So p95 within the fastest line's
/// base RTT (20 ms) + 25 ms, the bound.
#[test]
fn a_ping_beside_its_hosts_bulk_flow_crosses_on_the_fastest_lines_time() {
    let (rtts, out_of_order) = ping_beside_its_own_bulk_flow(BondConfig::new(3));
    let quantile = |q| pathlab_core::quantile::of_sorted(&rtts, q).expect("samples");
    let (p50, p95) = (quantile(0.5), quantile(0.95));
    eprintln!(
        "order per flow: ping RTT p50 {p50:.1} ms, p95 {p95:.1} ms ({} samples)",
        rtts.len()
    );
    assert!(rtts.len() >= 74, "{} samples", rtts.len());
    assert_eq!(out_of_order, 0);
    let fastest_base_rtt = 20.0;
    assert!(p95 <= fastest_base_rtt + 25.0, "p95 {p95:.1} ms");
    // The same with order per user, as before: the ping queues behind its host's bulk
    // flow, whose unresponsive 30 Mbit/s holds the queue at its 4 MiB limit (1.6 s at the
    // lines' 21 Mbit/s), and CoDel or the overflow drops some pings with the bulk.
    let mut config = BondConfig::new(3);
    config.fair.order = pathlab_bond::fair::Order::User;
    let (per_user, _) = ping_beside_its_own_bulk_flow(config);
    let per_user_p50 = pathlab_core::quantile::of_sorted(&per_user, 0.5).expect("samples");
    eprintln!(
        "order per user: ping RTT p50 {per_user_p50:.1} ms ({} samples)",
        per_user.len()
    );
    assert!(per_user_p50 > fastest_base_rtt + 25.0);
}

/// Issue 28, item 2: fairness stays by user while one user opens many flows. User A
/// (198.18.1.1) spreads 40 Mbit/s over `flows` flows, user B (198.18.1.2) sends 30
/// Mbit/s in one; both more than half the lines' 21 Mbit/s, so deficit round robin by user
/// gives each half of what the tunnel carries (one quantum per round each; the rounds are
/// thousands a second, so the difference is well under a percent), however A's bytes are
/// split: 5% tolerance for the lines' start and CoDel's drops.
#[test]
fn a_user_opening_many_flows_keeps_one_users_share_of_the_tunnel() {
    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
    for flows in [40u64, 400] {
        let mut near = Host::new().flow(Flow {
            source: B,
            destination: FAR,
            rate: BitsPerSec(30_000_000),
            size_bytes: 1400,
            start: secs(0.5),
            stop: secs(8.0),
        });
        for _ in 0..flows {
            near = near.flow(Flow {
                source: A,
                destination: FAR,
                rate: BitsPerSec(40_000_000 / flows),
                size_bytes: 1400,
                start: secs(0.5),
                stop: secs(8.0),
            });
        }
        let mut tunnel = Tunnel::new(&THREE_LINES, BondConfig::new(3), near, recording_host());
        tunnel.run_until(secs(8.0));
        let (from, to) = (secs(3.0), secs(8.0));
        let (a, b) = (
            inner_bytes(&tunnel.far, A, from, to),
            inner_bytes(&tunnel.far, B, from, to),
        );
        let share = a as f64 / (a + b) as f64;
        let fair = tunnel.client.bond.fair();
        eprintln!(
            "{flows} flows against one: {:.2} and {:.2} Mbit/s, share {share:.3}, {} streams held",
            a as f64 * 8.0 / 5e6,
            b as f64 * 8.0 / 5e6,
            fair.stream_count()
        );
        let far_reorder = far_reorder(&tunnel);
        // Regression: a packet begun waited for its flow's next turn, a round of A's 400
        // flows (0.5 s), and the far end gave it up: A got 1.5 Mbit/s of the lines' 19.
        assert_eq!(far_reorder.fragments_timed_out, 0, "{far_reorder:?}");
        assert!(
            (share - 0.5).abs() < 0.05,
            "{flows} flows: share {share:.3}"
        );
        assert_eq!(tunnel.far.from(A).out_of_order, 0);
        assert_eq!(tunnel.far.from(B).out_of_order, 0);
    }
}
/// Datagrams that left a link between `from` and `to`, and their mean UDP payload (bytes).
fn datagrams_out(records: &[PacketRecord], from: Instant, to: Instant) -> (u64, f64) {
    let lens: Vec<u64> = records
        .iter()
        .filter(|r| r.departed.is_some_and(|d| d >= from && d < to))
        .map(|r| u64::from(r.len_bytes - line_overhead_bytes()))
        .collect();
    let count = lens.len() as u64;
    (count, lens.iter().sum::<u64>() as f64 / count.max(1) as f64)
}

/// A line of rate `R` whose modem adds `O` bytes of framing to each IP packet carries
/// datagrams of `len` bytes of UDP payload at `R / ((len + 28 + O) x 8)` per second (28:
/// the UDP and IPv4 headers). The line is capped at 10 Mbit/s (`rate=`) over a link four
/// times faster, so its pacer alone sets the pace; with full datagrams and with small ones
/// (one 228-byte packet each, packing off), where a pacer counting UDP payloads only would
/// be 15% fast.
#[test]
fn the_pacer_counts_each_datagram_with_its_headers_and_the_lines_framing() {
    let rate_bps = 10e6;
    for (framing_bytes, packing, size_bytes) in [
        (14, true, 1400),
        (40, true, 1400),
        (14, false, 228),
        (40, false, 228),
    ] {
        let mut config = BondConfig::new(1);
        config.line_rates = vec![Some(BitsPerSec(rate_bps as u64))];
        config.line_framing = vec![LineFraming {
            ipv6: false,
            framing_bytes,
        }];
        config.fair.packing = packing;
        let near = Host::new().flow(Flow {
            source: USER,
            destination: FAR,
            rate: BitsPerSec(12_000_000),
            size_bytes,
            start: secs(0.5),
            stop: secs(5.0),
        });
        let line = [(
            "delay 10ms rate 40mbit limit 1000",
            "delay 10ms rate 40mbit",
        )];
        let mut tunnel = Tunnel::new(&line, config, near, Host::new());
        tunnel.run_until(secs(5.0));
        let records = tunnel.records(0);
        let (count, mean_len) = datagrams_out(&records, secs(2.0), secs(5.0));
        let measured = count as f64 / 3.0;
        let theory = rate_bps / ((mean_len + 28.0 + f64::from(framing_bytes)) * 8.0);
        eprintln!(
            "framing {framing_bytes}, packing {packing}: {measured:.1} datagrams/s of {mean_len:.1} bytes, theory {theory:.1}"
        );
        // Within 1%: the pacer's own rounding is nanoseconds; what remains is the window's
        // edges (a datagram or two of ~2,700 to ~12,000).
        assert!(
            (measured - theory).abs() / theory < 0.01,
            "framing {framing_bytes}, packing {packing}: {measured:.1} datagrams/s, theory {theory:.1}"
        );
    }
}

/// What one loaded line did with `report_grace`: its sender's control-only datagrams per
/// second, the receiver's, the rate the line delivered (Mbit/s, line bytes) and its queue
/// p50 and p95 (ms), between 4 and 12 s.
fn loaded_line(report_grace: Duration) -> (f64, f64, f64, f64, f64) {
    let mut config = BondConfig::new(1);
    config.timers.report_grace = report_grace;
    let line = [(
        "delay 10ms rate 12mbit limit 1000",
        "delay 10ms rate 50mbit",
    )];
    let mut tunnel = Tunnel::new(&line, config, bulk(20, 12.0), Host::new());
    let control_only = |tunnel: &Tunnel| {
        let client = tunnel.client.bond.lines()[0]
            .counters()
            .control_only_packets;
        let session = tunnel.server.server.sessions().next().expect("a session").2;
        let server = session.lines()[0].counters().control_only_packets;
        (client, server)
    };
    tunnel.run_until(secs(4.0));
    let before = control_only(&tunnel);
    tunnel.run_until(secs(12.0));
    let after = control_only(&tunnel);
    let records = tunnel.records(0);
    let (from, to) = (secs(4.0), secs(12.0));
    (
        (after.0 - before.0) as f64 / 8.0,
        (after.1 - before.1) as f64 / 8.0,
        bytes_out(&records, from, to) as f64 * 8.0 / 8.0 / 1e6,
        queue_delay_ms(&records, from, to, 0.5),
        queue_delay_ms(&records, from, to, 0.95),
    )
}

/// A line loaded at 990 datagrams/s (12 Mbit/s of 1514-byte frames) sends its reports on
/// its data datagrams: none goes alone, where sending each report when due (a grace of 0,
/// the former rule) put ~40 a second in datagrams of their own, each a packet the modem
/// counts. The controller, fed the same reports a little later, holds the same queue and
/// rate. The receiving end, which has no data to send, reports alone every 25 ms as
/// before.
#[test]
fn reports_ride_on_data_and_the_controller_holds_the_line_as_well() {
    let (alone_before, server_before, rate_before, p50_before, p95_before) =
        loaded_line(Duration::ZERO);
    let (alone, server, rate, p50, p95) = loaded_line(LineTimers::default().report_grace);
    eprintln!(
        "control-only datagrams/s: sender {alone_before:.1} -> {alone:.1}, receiver {server_before:.1} -> {server:.1}; \
         delivered {rate_before:.2} -> {rate:.2} Mbit/s; queue p50 {p50_before:.1} -> {p50:.1} ms, p95 {p95_before:.1} -> {p95:.1} ms"
    );
    // Theory: a report falls due every 25 ms and data leaves every 1.01 ms, within the
    // 25 ms grace: none alone. Keepalives: the line is never silent for 50 ms.
    assert!(alone <= 0.5, "{alone:.1} control-only datagrams/s");
    assert!(
        alone_before >= 30.0,
        "the former rule: {alone_before:.1} control-only datagrams/s"
    );
    // The receiving end has no data: its reports go alone when due, 40 a second.
    assert!((server - 40.0).abs() <= 2.0, "{server:.1}/s");
    // Not worse: the line's rate within 1%, its queue within a millisecond.
    assert!(
        rate >= 0.99 * rate_before,
        "{rate:.2} Mbit/s against {rate_before:.2}"
    );
    assert!((rate - 12.0).abs() / 12.0 < 0.05, "{rate:.2} Mbit/s of 12");
    assert!(
        p50 <= p50_before + 1.0,
        "queue p50 {p50:.1} ms against {p50_before:.1}"
    );
    assert!(
        p95 <= p95_before + 1.0,
        "queue p95 {p95:.1} ms against {p95_before:.1}"
    );
}

/// 200-byte UDP at 4 Mbit/s (2,500 packets/s) through one line whose modem forwards at
/// most 1,000 packets/s at 10 Mbit/s (the case): packed several to a datagram,
/// all of it crosses; one per datagram, at most 1,000 x 200 x 8 = 1.6 Mbit/s can.
/// Returns (goodput in Mbit/s of UDP payload, loss) between 3 and 8 s.
fn small_packets_through_a_packet_limited_line(packing: bool) -> (f64, f64) {
    const UDP_PAYLOAD: usize = 200;
    let ip_len = UDP_PAYLOAD + 28;
    let packets_per_s = 2_500.0;
    let mut config = BondConfig::new(1);
    config.fair.packing = packing;
    let near = Host::new().flow(Flow {
        source: USER,
        destination: FAR,
        rate: BitsPerSec((packets_per_s * ip_len as f64 * 8.0) as u64),
        size_bytes: ip_len,
        start: secs(0.5),
        stop: secs(9.0),
    });
    let line = [(
        "delay 10ms rate 10mbit pps 1000 limit 100",
        "delay 10ms rate 10mbit pps 1000 limit 100",
    )];
    let mut tunnel = Tunnel::new(&line, config, near, recording_host());
    tunnel.run_until(secs(9.0));
    let received = tunnel
        .far
        .from(USER)
        .arrivals
        .iter()
        .filter(|(at, _)| *at >= secs(3.0) && *at < secs(8.0))
        .count() as f64;
    let goodput = received * UDP_PAYLOAD as f64 * 8.0 / 5.0 / 1e6;
    (goodput, 1.0 - received / (packets_per_s * 5.0))
}

#[test]
fn packing_carries_small_packets_through_a_packet_limited_line() {
    let (packed, packed_loss) = small_packets_through_a_packet_limited_line(true);
    let (single, single_loss) = small_packets_through_a_packet_limited_line(false);
    eprintln!(
        "200-byte UDP at 4 Mbit/s over 1,000 packets/s: packed {packed:.2} Mbit/s ({:.1}% lost), \
         one per datagram {single:.2} Mbit/s ({:.1}% lost)",
        100.0 * packed_loss,
        100.0 * single_loss
    );
    assert!(packed >= 0.9 * 4.0, "{packed:.2} Mbit/s");
    assert!(packed_loss < 0.02, "{:.1}% lost", 100.0 * packed_loss);
    // One per datagram: the modem's 1,000 packets/s are the ceiling, 1.6 Mbit/s.
    assert!(single <= 1.6 * 1.01, "{single:.2} Mbit/s");
    assert!(single >= 0.9 * 1.6, "{single:.2} Mbit/s");
}

/// The caller of the call tests: a user of its own beside the bulk flow's.
const CALLER: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
/// A call's packet: 160 bytes of voice, UDP and IPv4 headers; one every 20 ms.
const CALL_PACKET: usize = 160 + 28;
const CALL_EVERY_MS: u64 = 20;

/// What a call beside a bulk flow saw while line 0 (the fastest) was cut at `CUT_AT`.
struct CallRun {
    /// Call packets received, and each one's one-way delay (sent at its number's time).
    delays_ms: Vec<(f64, f64)>,
    /// Bulk goodput before the cut, Mbit/s.
    bulk_mbit: f64,
    /// Copies the far end dropped, and the near end's counters.
    duplicates: u64,
    classes: pathlab_bond::BondCounters,
}

const CUT_AT: f64 = 5.0;
const CALL_FROM: f64 = 2.0;
const CALL_UNTIL: f64 = 9.0;

/// A 30 Mbit/s bulk flow over the three lines, with the call if `call`, under `classes`
/// rules; line 0 cut both ways at `CUT_AT`.
fn call_with_its_best_line_cut(call: bool, classes: &[&str]) -> CallRun {
    call_beside_bulk_with_its_best_line_cut(call, classes, 30, CUT_AT)
}

/// [`call_with_its_best_line_cut`] beside a bulk flow of `bulk_mbit`, line 0 cut at
/// `cut_at` s.
fn call_beside_bulk_with_its_best_line_cut(
    call: bool,
    classes: &[&str],
    bulk_mbit: u64,
    cut_at: f64,
) -> CallRun {
    let mut config = BondConfig::new(3);
    config.classes = pathlab_bond::class::parse_rules(classes).unwrap();
    let mut near = bulk(bulk_mbit, 10.0);
    if call {
        near = near.flow(Flow {
            source: CALLER,
            destination: FAR,
            rate: BitsPerSec(CALL_PACKET as u64 * 8 * 1000 / CALL_EVERY_MS),
            size_bytes: CALL_PACKET,
            start: secs(CALL_FROM),
            stop: secs(CALL_UNTIL),
        });
    }
    let mut tunnel = Tunnel::new(&THREE_LINES, config, near, recording_host());
    tunnel.run_until(secs(cut_at));
    tunnel.set_line(0, ("loss 100%", "loss 100%"));
    tunnel.run_until(secs(10.0));
    // The tunnel keeps the call's order (asserted below), so its k-th arrival is the
    // packet sent at k x 20 ms once none is lost.
    let delays_ms = tunnel
        .far
        .from(CALLER)
        .arrivals
        .iter()
        .enumerate()
        .map(|(k, (at, _))| {
            let sent = CALL_FROM + (k as u64 * CALL_EVERY_MS) as f64 / 1e3;
            (sent, (at.as_secs_f64() - sent) * 1e3)
        })
        .collect();
    assert_eq!(tunnel.far.from(CALLER).out_of_order, 0);
    CallRun {
        delays_ms,
        bulk_mbit: inner_bytes(&tunnel.far, USER, secs(2.0), secs(cut_at)) as f64 * 8.0
            / (cut_at - 2.0)
            / 1e6,
        duplicates: far_reorder(&tunnel).duplicates,
        classes: tunnel.client.bond.counters(),
    }
}

fn p99(delays: impl Iterator<Item = f64>) -> f64 {
    let mut delays: Vec<f64> = delays.collect();
    delays.sort_by(f64::total_cmp);
    pathlab_core::quantile::of_sorted(&delays, 0.99).expect("not empty")
}

#[test]
fn a_call_loses_nothing_when_its_best_line_is_cut_and_bulk_keeps_its_share() {
    let run = call_with_its_best_line_cut(true, &[]);
    let sent = ((CALL_UNTIL - CALL_FROM) * 1e3 / CALL_EVERY_MS as f64).round() as usize;
    let alone = call_with_its_best_line_cut(false, &[]);
    let before = p99(run.delays_ms.iter().filter(|d| d.0 < CUT_AT).map(|d| d.1));
    let after = p99(run.delays_ms.iter().filter(|d| d.0 >= CUT_AT).map(|d| d.1));
    eprintln!(
        "call: {} of {sent} packets, one-way p99 {before:.1} ms before the cut, {after:.1} ms \
         after; {} duplicates dropped; {:?}; bulk {:.2} Mbit/s beside it, {:.2} alone",
        run.delays_ms.len(),
        run.duplicates,
        run.classes,
        run.bulk_mbit,
        alone.bulk_mbit
    );
    assert_eq!(run.delays_ms.len(), sent, "call packets lost");
    // Its fastest line's base delay (10 ms, then 20 ms once line 0 is cut) plus the
    // controller's target queue (5 ms), plus 5 ms; the 188-byte packet's time on the line
    // is in the 5 ms.
    assert!(
        before <= 10.0 + 5.0 + 5.0,
        "p99 {before:.1} ms before the cut"
    );
    assert!(after <= 20.0 + 5.0 + 5.0, "p99 {after:.1} ms after the cut");
    // Each packet copied at most once: the duplicates cost at most the call's own rate.
    assert!(run.classes.redundant_copies <= sent as u64);
    assert!(run.duplicates <= run.classes.redundant_copies);
    assert!(
        run.classes.class_redundant >= sent as u64 - 5,
        "{:?}",
        run.classes
    );
    // Bulk keeps its share: what it had alone less the call and its copies (2 x 75 kbit/s
    // of inner bytes) and 1%.
    let call_mbit = 2.0 * (CALL_PACKET * 8) as f64 / CALL_EVERY_MS as f64 / 1e3;
    assert!(
        run.bulk_mbit >= 0.99 * alone.bulk_mbit - call_mbit,
        "bulk {:.2} Mbit/s beside the call, {:.2} alone",
        run.bulk_mbit,
        alone.bulk_mbit
    );
}

/// Regression (issue 40, item 2): beside a bulk flow about as fast as the two lines that
/// survive the cut (6 + 3 Mbit/s), not one that overfills all three, those lines were
/// partly idle before the cut and filled up after it, and the one the call moved to went
/// past its rate before a report stopped it (see `control`'s module doc): the call's p99
/// after the cut was 54 ms at 11 Mbit/s of bulk and 36 ms at 14 before the probe stopped at
/// the first sign of a queue; then still 41 ms at 6 (the line the call moved to, idle at
/// a rate it never tested, restarted from 1 Mbit/s and its ramp, doubling per round trip
/// from a rate its reports showed 100 ms late, reached 16.7 Mbit/s on a 6 Mbit/s line: a
/// 38 ms queue) and 31-33 ms at 8-10 (a probe 3% per report went 13% past the line's rate
/// before its queue showed), until a restart after an idle spell grew from what the line
/// delivered and a probe was held to what its feedback can stop. The bound is the fastest
/// surviving line's base delay (20 ms) plus the target (5 ms) plus 5 ms, from the cut on
/// (its detection included), over the whole sweep: from the bulk flow the surviving lines
/// carry with room to spare to one that overfills all three, and at three moments of the
/// call (the controllers' phases differ: cut at 4.63 or 5.41 s instead, the old rules gave
/// 32.4 and 42.3 ms beside 6 Mbit/s, and 33.3 ms beside 14 at 5.41).
#[test]
fn a_call_keeps_its_delay_when_its_best_line_is_cut_beside_bulk_the_survivors_just_carry() {
    let mut failed = Vec::new();
    for cut_at in [CUT_AT, 4.63, 5.41] {
        for bulk_mbit in [6, 7, 8, 9, 10, 11, 12, 14, 17, 20, 25, 30] {
            let run = call_beside_bulk_with_its_best_line_cut(true, &[], bulk_mbit, cut_at);
            let sent = ((CALL_UNTIL - CALL_FROM) * 1e3 / CALL_EVERY_MS as f64).round() as usize;
            let after = p99(run.delays_ms.iter().filter(|d| d.0 >= cut_at).map(|d| d.1));
            eprintln!("cut at {cut_at} s, bulk {bulk_mbit} Mbit/s: call's p99 after {after:.1} ms");
            assert_eq!(run.delays_ms.len(), sent, "call packets lost");
            if after > 20.0 + 5.0 + 5.0 {
                failed.push((cut_at, bulk_mbit, after));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "(cut at s, bulk Mbit/s, call's p99 ms after the cut) over the bound: {failed:?}"
    );
}

#[test]
fn without_classes_a_call_loses_what_was_on_its_best_line_when_it_is_cut() {
    // `bulk:any` turns the default off: every packet bulk, as before classes.
    let run = call_with_its_best_line_cut(true, &["bulk:any"]);
    let sent = ((CALL_UNTIL - CALL_FROM) * 1e3 / CALL_EVERY_MS as f64).round() as usize;
    eprintln!(
        "bulk only: call {} of {sent} packets, one-way p99 {:.1} ms before the cut, {:?}",
        run.delays_ms.len(),
        p99(run.delays_ms.iter().filter(|d| d.0 < CUT_AT).map(|d| d.1)),
        run.classes
    );
    assert!(run.delays_ms.len() < sent);
    assert_eq!(run.duplicates, 0);
}

/// The client's process, not run from `from` until `until` (a busy host): what arrives
/// meanwhile waits, as in a socket's buffer, and is handed over when it runs again.
struct Paused<'a> {
    node: &'a mut ClientNode,
    from: Instant,
    until: Instant,
    waiting: Vec<(usize, Vec<u8>)>,
}

impl Node for Paused<'_> {
    fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>) {
        if now >= self.from && now < self.until {
            self.waiting.push((port, data));
        } else {
            self.node.handle(now, port, data);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if now >= self.from && now < self.until {
            return None;
        }
        for (port, data) in self.waiting.drain(..) {
            self.node.handle(now, port, data);
        }
        self.node.poll_transmit(now)
    }

    fn poll_at(&self) -> Option<Instant> {
        let at = self.node.poll_at()?;
        Some(if at >= self.from && at < self.until {
            self.until
        } else {
            at
        })
    }
}

/// Regression (benches/bond_soak.py, issue 40): a tunnel end whose process did not run
/// for 550 ms (builds and a real-time emulator beside it) declared its lines down the
/// moment it woke: no report had come of what it sent, because it had sent nothing, and
/// what its peer had sent was still unread. Its own absence is not its lines' silence.
/// (The peer, which heard nothing for that long, may rightly take them for down.)
#[test]
fn a_client_that_did_not_run_for_half_a_second_keeps_its_lines_up() {
    let mut tunnel = Tunnel::new(
        &THREE_LINES,
        BondConfig::new(3),
        bulk(8, 6.0),
        recording_host(),
    );
    tunnel.run_until(secs(3.0));
    let downs = |tunnel: &Tunnel| -> Vec<u64> {
        tunnel
            .client
            .bond
            .lines()
            .iter()
            .map(|l| l.counters().went_down)
            .collect()
    };
    assert_eq!(downs(&tunnel), vec![0, 0, 0]);
    let mut paused = Paused {
        node: &mut tunnel.client,
        from: secs(3.0),
        until: secs(3.55),
        waiting: Vec::new(),
    };
    let nodes: &mut [&mut dyn Node] = &mut [
        &mut tunnel.near,
        &mut paused,
        &mut tunnel.server,
        &mut tunnel.far,
    ];
    tunnel.net.run_until(secs(5.0), nodes);
    // The server heard nothing for 550 ms and took the lines for down, rightly; they
    // came back.
    let (_, _, server) = tunnel.server.server.sessions().next().expect("its session");
    assert!(server.lines().iter().all(|l| l.state() == LineState::Up));
    assert_eq!(
        downs(&tunnel),
        vec![0, 0, 0],
        "the client took its own pause for dead lines"
    );
    assert!(tunnel.client.bond.is_open());
}
