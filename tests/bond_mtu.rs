//! `pathlab bond` over a line whose path is narrower than its interface (a PPPoE or tunnel
//! hop, no ICMP): the client's path MTU search finds it to the byte, only its probes are
//! lost, the TUN device's MTU follows, and TCP through the tunnel runs near the line's
//! rate. Checked against the emulator's recording, in namespaces; the same with `--tap`,
//! whose device MTU stays 18 bytes (Ethernet header and one VLAN tag) below the TUN's.

use crate::util::emulated::{privileged_paired, run_quick_recipe};
use crate::util::TempDir;

/// site - isp - srv; the site's line 1500 bytes wide at its interface, 1300 on its path
/// (the emulator drops larger frames silently); the way down is 1500 wide.
const RECIPE: &str = r#"
name = "bond-mtu"
description = "a bonding tunnel over a line 1300 bytes wide behind a 1500-byte interface"
duration = "12s"
quick = "12s"

[[node]]
name = "site"
[[node]]
name = "isp"
kind = "router"
[[node]]
name = "srv"

[[link]]
between = ["site", "isp"]
spec = "delay 5ms rate 20mbit mtu 1300"
reverse = "delay 5ms rate 20mbit"
[[link]]
between = ["isp", "srv"]

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
command = ["{pathlab}", "bond", "server", "--listen", "198.18.1.2:7000", "--psk", "{out}/bond.key", "--address", "198.19.0.1/24", "--name", "test-mtu-srv"]

[[workload]]
name = "client"
kind = "command"
from = "site"
start = "2s"
duration = "9s"
command = ["{pathlab}", "bond", "client", "198.18.1.2:7000", "--line", "to-isp", "--psk", "{out}/bond.key", "--address", "198.19.0.2/24", "--name", "test-mtu-client", "-J"]

# Starts the lab's measurement server in srv (it listens on the tunnel's address too).
[[workload]]
name = "base-rtt"
kind = "rtt"
from = "site"
to = "srv"
interval = "1s"

[[workload]]
name = "tunnel"
kind = "command"
from = "site"
start = "4s"
duration = "6s"
command = ["{pathlab}", "tcp", "198.19.0.1", "-t", "{duration}", "-C", "cubic", "-J"]
"#;

/// The path's MTU, and the UDP payload it carries.
const PATH_MTU: u64 = 1300;
const PATH_PAYLOAD: u64 = PATH_MTU - 28;
/// Bytes of a frame's Ethernet header: the emulator counts it, its `mtu` does not.
const ETHERNET: u64 = 14;
/// Bytes a datagram spends around a whole inner packet (header, timestamp, Packet frame,
/// tag).
const TUNNEL: u64 = 12 + 8 + 10 + 16;
/// Bytes a TAP's MTU leaves for a frame's Ethernet header and one VLAN tag.
const TAP_FRAME: u64 = 14 + 4;
/// IPv4 and TCP headers with timestamps.
const TCP_IP: u64 = 20 + 32;
/// Bytes a TUN's MTU counts on header compression saving on a bulk TCP segment (on by
/// default; a TAP's frames go whole).
const SAVED: u64 = pathlab_bond::headers::BULK_TCP_SAVED_BYTES as u64;

#[test]
fn a_narrow_path_behind_a_wide_interface_is_found_and_the_tunnel_runs_at_its_rate() {
    let Some(_serial) = privileged_paired("a_narrow_path_behind_a_wide_interface") else {
        return;
    };
    narrow_path(false);
}

#[test]
fn a_tap_s_mtu_follows_a_narrow_path_too_and_its_tunnel_runs_at_its_rate() {
    let Some(_serial) = privileged_paired("a_tap_s_mtu_follows_a_narrow_path_too") else {
        return;
    };
    narrow_path(true);
}

/// The recipe with a TUN device, or a TAP (`--tap`, the tunnel's addresses on the TAPs,
/// ARP across), checked.
fn narrow_path(tap: bool) {
    // Each its own directory, lab and tunnel names: the two run side by side.
    let variant = if tap { "tap" } else { "tun" };
    let dir = TempDir::new(&format!("lab-bond-mtu-{variant}"));
    let recipe = dir.path("bond-mtu.toml");
    let text = RECIPE
        .replace(
            r#"name = "bond-mtu""#,
            &format!(r#"name = "bond-mtu-{variant}""#),
        )
        .replace("test-mtu-", &format!("test-mtu-{variant}-"));
    let text = if tap {
        text.replace(
            r#""--address", "198.19"#,
            r#""--tap", "--address", "198.19"#,
        )
    } else {
        text
    };
    std::fs::write(&recipe, text).unwrap();
    let out = dir.path("run");
    run_quick_recipe(recipe.to_str().unwrap(), &out);

    // The client's own account: the line's search found the path to the byte.
    let text = std::fs::read_to_string(out.join("client.out")).unwrap();
    let tun_mtu = if tap {
        PATH_PAYLOAD - TUNNEL - TAP_FRAME
    } else {
        PATH_PAYLOAD - TUNNEL + SAVED
    };
    assert!(
        text.contains(&format!("MTU lowered to {tun_mtu}")),
        "the TUN's MTU follows the line: {text}"
    );
    let stats: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let line = &stats["sessions"][0]["lines"][0];
    eprintln!("the client's line: {line}");
    assert_eq!(line["payload_limit_bytes"], PATH_PAYLOAD);
    assert_eq!(line["mtu_searching"], false);
    let lost_probes = line["mtu_probes"][1].as_u64().unwrap();

    // The emulator's truth: what it dropped was too big for the path, and exactly the
    // probes the client counted lost; nothing else upward was lost.
    let mut dropped = Vec::new();
    let mut carried = 0;
    for record in std::fs::read_to_string(out.join("link-site-isp.jsonl"))
        .unwrap()
        .lines()
    {
        let value: serde_json::Value = serde_json::from_str(record).unwrap();
        if value["type"] != "packet" || value["dir"] != 0 {
            continue;
        }
        let len = value["len_bytes"].as_u64().unwrap();
        if value["dequeued"].is_null() {
            dropped.push(len);
        } else {
            carried += 1;
            assert!(len <= PATH_MTU + ETHERNET, "a {len}-byte frame crossed");
        }
    }
    eprintln!("{carried} frames carried, dropped: {dropped:?}");
    assert!(dropped.iter().all(|&len| len > PATH_MTU + ETHERNET));
    assert_eq!(dropped.len() as u64, lost_probes);
    // The search tried the interface's size and bisected down: at least those sizes.
    assert!(dropped.contains(&(1500 + ETHERNET)));

    // TCP through the tunnel: each 1314-byte frame on the line carries one inner packet of
    // the device's MTU (a TAP's, in a frame 4 bytes short of the path; a TUN's with its
    // headers compressed by SAVED or more), so the line's 20 Mbit/s give 20 x (MTU - 52) /
    // (1300 + 14) of TCP payload (TUN 18.6 Mbit/s, TAP 17.5). A third of it off for a
    // loaded CI host.
    let tunnel: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tunnel.out")).unwrap()).unwrap();
    let mut steady: Vec<f64> = tunnel["up"][0]["interval_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap() * 8.0 / 1e6)
        .collect();
    steady = steady[1..steady.len() - 1].to_vec();
    let median = crate::util::median(&steady);
    let theory = 20.0 * (tun_mtu - TCP_IP) as f64 / (PATH_MTU + ETHERNET) as f64;
    // A bulk segment's 52 bytes of headers go as 9 or so (the cid, the flags, the checksum
    // and small deltas: never under 4), more than SAVED shorter, so a TUN's frames may be
    // shorter than the path and the ceiling higher.
    let ceiling = if tap {
        theory
    } else {
        20.0 * (tun_mtu - TCP_IP) as f64 / (PATH_MTU + ETHERNET - (TCP_IP - 4 - SAVED)) as f64
    };
    eprintln!(
        "TCP through the tunnel: {median:.2} Mbit/s, theory {theory:.2} (ceiling {ceiling:.2})"
    );
    assert!(median >= 0.67 * theory && median <= ceiling * 1.01);
}
