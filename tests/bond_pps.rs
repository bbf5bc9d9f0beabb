//! `pathlab bond` over modems that forward a bounded number of packets per second, in
//! namespaces (the release binary): small UDP packets through the tunnel, packed several to
//! a datagram and one per datagram (`--packing off`), against what the lines can carry.
//!
//! Theory, per run: the `owd` stream sends `size`-byte UDP payloads at a fixed rate; one per
//! datagram, each datagram is `size + 28` (the inner IP packet) `+ 46` (the tunnel's header,
//! timestamp, tag and packet header) `+ 42` (UDP, IP and Ethernet) bytes on the line, and a
//! line of `rate R pps N` forwards `min(N, R / (8 x that))` of them per second; packed, the
//! line forwards about ten times fewer datagrams for the same packets and all of them cross.
//! Tolerance 5% on the delivered rate: the delivered packet rate is a slope over the whole
//! stream (from its start, while the line's controller ramps up from 1 Mbit/s), and the
//! emulator's late sends on this busy 2-core machine move it a little.

use std::path::Path;

use crate::util::emulated::{privileged_paired, run_quick_recipe, run_quick_recipe_points};
use crate::util::TempDir;
use pathlab_results::lab::{LabOutcome, LabRun};

/// Bytes a datagram carrying one inner packet of `size` bytes of UDP payload takes on a line
/// counted as Ethernet frames: the inner IP packet, the tunnel's 46, UDP/IP/Ethernet's 42.
fn single_frame_bytes(size: u32) -> f64 {
    f64::from(size + 28 + 46 + 42)
}

/// The issue's figure: one line limited to 1,000 packets/s at 10 Mbit/s (a 100-packet modem
/// buffer), 200-byte UDP at 4 Mbit/s (2,500 packets/s) through a one-line tunnel, packed and
/// one per datagram. The stream ends 10 s before the run (5 s in the quick form): its
/// results come back through the tunnel, whose downward line starts at 1 Mbit/s. The tunnel
/// shares by flow: one per datagram, the stream loses 60% of its packets in the tunnel's
/// queue, and its own control connection (the same user) must not lose them too.
const ONE_LINE: &str = r#"
name = "bond-pps-one-line"
description = "site - srv over one line of 'rate 10mbit pps 1000'; 200-byte UDP at 4 Mbit/s through pathlab bond, packed and one per datagram"
duration = "30s"
quick = "15s"

[sweep]
packing = ["on", "off"]

[[node]]
name = "site"
[[node]]
name = "srv"

[[link]]
between = ["site", "srv"]
spec = "delay 10ms rate 10mbit pps 1000 limit 100"
reverse = "delay 10ms rate 10mbit limit 100"

[[workload]]
name = "key"
kind = "command"
from = "srv"
duration = "1s"
command = ["{pathlab}", "bond", "key", "{out}/bond.key"]

[[workload]]
name = "bond-server"
kind = "command"
from = "srv"
start = "1s"
command = ["{pathlab}", "bond", "server", "--listen", "198.18.0.2:7000", "--psk", "{out}/bond.key", "--address", "198.19.0.1/24", "--packing", "{packing}", "--fair", "flow", "--name", "lab-bond-pps1-srv"]

[[workload]]
name = "client"
kind = "command"
from = "site"
start = "2s"
command = ["{pathlab}", "bond", "client", "198.18.0.2:7000", "--line", "to-srv", "--psk", "{out}/bond.key", "--address", "198.19.0.2/24", "--packing", "{packing}", "--fair", "flow", "--name", "lab-bond-pps1", "-J"]

[[workload]]
name = "base-rtt"
kind = "rtt"
from = "site"
to = "srv"
interval = "1s"

[[workload]]
name = "small-udp"
kind = "owd"
from = "site"
to = "srv"
address = "198.19.0.1"
rate = "4mbit"
size = 200
start = "6s"
duration = "14s"
"#;

/// What the `small-udp` stream of one run did.
struct Stream {
    /// UDP payload bytes per packet.
    size: u32,
    /// Mbit/s of UDP payload the sender sent.
    sent_mbps: f64,
    /// Mbit/s of UDP payload that arrived (the delivered packet rate's slope).
    delivered_mbps: f64,
    /// Packets per second that arrived.
    delivered_pps: f64,
    /// Fraction of the stream's packets never received.
    loss: f64,
}

fn stream(dir: &Path) -> Stream {
    let text = std::fs::read_to_string(dir.join("result.json")).expect("result.json");
    let run: LabRun = match pathlab_results::ResultFile::from_json(&text)
        .expect("a result file")
        .result
    {
        pathlab_results::RunResult::Lab(run) => *run,
        _ => panic!("not a lab run"),
    };
    let workload = run
        .workloads
        .iter()
        .find(|w| w.name == "small-udp")
        .expect("the stream ran");
    let LabOutcome::Owd(result) = &workload.outcome else {
        panic!("small-udp: {:?}", workload.outcome)
    };
    let delivered_pps = result.delivered_pps().expect("probes arrived");
    let bits = f64::from(result.size) * 8.0 / 1e6;
    Stream {
        size: result.size,
        sent_mbps: result.achieved_rate_bps / 1e6,
        delivered_mbps: delivered_pps * bits,
        delivered_pps,
        loss: result.sequence.lost as f64 / result.sequence.sent.max(1) as f64,
    }
}

/// Prints both runs and the theory of the one per datagram.
fn print_runs(packed: &Stream, single: &Stream, limit_pps: f64) {
    for (name, s) in [("packed", packed), ("one per datagram", single)] {
        eprintln!(
            "{name}: sent {:.2} Mbit/s, delivered {:.2} Mbit/s ({:.0} packets/s), {:.2}% lost",
            s.sent_mbps,
            s.delivered_mbps,
            s.delivered_pps,
            100.0 * s.loss
        );
    }
    eprintln!("one per datagram, theory: {limit_pps:.0} packets/s");
}

#[test]
fn small_udp_crosses_a_packet_limited_line_packed_and_one_per_datagram_hits_its_limit() {
    let Some(_serial) = privileged_paired("bond_pps_one_line") else {
        return;
    };
    let dir = TempDir::new("lab-bond-pps-one-line");
    let spec = dir.path("bond-pps-one-line.toml");
    std::fs::write(&spec, ONE_LINE).unwrap();
    let out = dir.path("run");
    run_quick_recipe(spec.to_str().unwrap(), &out);
    let packed = stream(&out.join("packing-on"));
    let single = stream(&out.join("packing-off"));
    // One per datagram: min(1,000, 10 Mbit/s / (8 x frame)) datagrams/s, one packet each.
    let limit_pps = 1000f64.min(10e6 / (8.0 * single_frame_bytes(single.size)));
    print_runs(&packed, &single, limit_pps);
    // The issue's figure: 90% of 4 Mbit/s or more, under 2% lost.
    assert!(
        packed.delivered_mbps >= 0.9 * 4.0,
        "packed: {:.2} Mbit/s",
        packed.delivered_mbps
    );
    assert!(
        packed.loss < 0.02,
        "packed: {:.2}% lost",
        100.0 * packed.loss
    );
    assert!(
        (single.delivered_pps / limit_pps - 1.0).abs() < 0.05,
        "one per datagram: {:.0} packets/s against {limit_pps:.0}",
        single.delivered_pps
    );
}

#[test]
fn the_bond_pps_recipe_packs_small_packets_through_two_of_the_seeds_modems() {
    let Some(_serial) = privileged_paired("bond_pps_recipe") else {
        return;
    };
    let dir = TempDir::new("lab-bond-pps");
    let out = dir.path("run");
    // Packed only: one per datagram (users' --quick runs it too) is held to the lines'
    // packet rate, the claim the one-line test makes to within 5%.
    run_quick_recipe_points("bond-pps", &[("packing", r#"["on"]"#)], &out);
    let packed = stream(&out.join("packing-on"));
    eprintln!(
        "packed: sent {:.2} Mbit/s, delivered {:.2} Mbit/s ({:.0} packets/s), {:.2}% lost",
        packed.sent_mbps,
        packed.delivered_mbps,
        packed.delivered_pps,
        100.0 * packed.loss
    );
    assert!(
        packed.delivered_mbps >= 0.9 * packed.sent_mbps,
        "packed: {:.2} of {:.2} Mbit/s",
        packed.delivered_mbps,
        packed.sent_mbps
    );
    assert!(
        packed.loss < 0.02,
        "packed: {:.2}% lost",
        100.0 * packed.loss
    );
}
