//! `pathlab bond` end to end: real TCP through the tunnel over emulated lines in namespaces
//! (the `bond` recipe), checked against the emulators' recordings; bad input; cleanup.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::util::emulated::{
    privileged_heavy, privileged_paired, privileged_shared, run_quick_recipe,
    run_quick_recipe_points, PATHLAB,
};
use crate::util::lab_results::{json_out, lab_goodput, lab_intervals, lab_outcome, run_spec};
use crate::util::late::{ms, Lateness, Quantile};
use crate::util::{median, quantile, TempDir};

/// One upward packet of a line's recording: when it arrived at the emulator, when it left
/// the queue (None: dropped before), its length on the wire.
struct Packet {
    arrived_s: f64,
    queue_ms: Option<f64>,
    len: u64,
}

/// The upward packets of `link-NAME.jsonl`, and the instants its spec changed (s).
fn read_line(path: &Path) -> (Vec<Packet>, Vec<f64>) {
    let text = std::fs::read_to_string(path).expect("the lab records every line");
    let mut packets = Vec::new();
    let mut changes = Vec::new();
    for line in text.lines() {
        let value: serde_json::Value = serde_json::from_str(line).expect("JSON lines");
        if value["dir"] != 0 {
            continue;
        }
        let at = |key: &str| value[key].as_u64().map(|ns| ns as f64 / 1e9);
        match value["type"].as_str() {
            Some("packet") => packets.push(Packet {
                arrived_s: at("arrived").unwrap(),
                queue_ms: value["dequeued"]
                    .as_u64()
                    .map(|d| (d - value["arrived"].as_u64().unwrap()) as f64 / 1e6),
                len: value["len_bytes"].as_u64().unwrap(),
            }),
            Some("spec") => changes.push(at("at").unwrap()),
            _ => {}
        }
    }
    (packets, changes)
}

/// Nearest-rank quantile of the queue delays of packets that arrived in [from, to).
fn queue_quantile(packets: &[Packet], from: f64, to: f64, q: f64) -> f64 {
    let delays: Vec<f64> = packets
        .iter()
        .filter(|p| p.arrived_s >= from && p.arrived_s < to)
        .filter_map(|p| p.queue_ms)
        .collect();
    assert!(!delays.is_empty(), "no packets in [{from}, {to})");
    quantile(&delays, q)
}

/// A `pathlab tcp -J` output: goodput per one-second interval, Mbit/s.
fn intervals(out: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(out).expect("the workload wrote its output");
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", out.display()));
    value["up"][0]["interval_bytes"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|b| b.as_f64().unwrap() * 8.0 / 1e6)
        .collect()
}

/// Data datagrams (larger than the tunnel's control datagrams) and when they arrived.
fn data_arrivals(packets: &[Packet]) -> impl Iterator<Item = f64> + '_ {
    packets.iter().filter(|p| p.len > 400).map(|p| p.arrived_s)
}

#[test]
fn the_bond_recipe_fills_three_lines_without_bloat_and_survives_a_line_failure() {
    let Some(_serial) = privileged_heavy("the_bond_recipe_fills_three_lines_without_bloat") else {
        return;
    };
    let dir = TempDir::new("lab-bond");
    let out = dir.path("run");
    run_quick_recipe("bond", &out);
    // The quick form halves the recipe's times: each line alone 4 s from 1, 5 and 9 s; the
    // round robin's flow from 14 s for 8.5 s; the delay controller's from 24.5 s for 17 s,
    // the cable line dead from 35 to 38 s.
    // The steady state: without the first second (slow start) and the last half (the end).
    let alone: Vec<f64> = ["alone-isp0", "alone-isp1", "alone-isp2"]
        .iter()
        .map(|name| lab_goodput(&out, name, 1.0, 3.5))
        .collect();
    let sum_alone: f64 = alone.iter().sum();
    let steady = lab_goodput(&out, "tunnel-delay", 2.0, 10.0);
    let rr_steady = lab_goodput(&out, "tunnel-rr", 2.0, 7.5);
    eprintln!(
        "alone {alone:.2?} (sum {sum_alone:.2}); tunnel {steady:.2} Mbit/s ({:.1}%), round robin {rr_steady:.2}",
        100.0 * steady / sum_alone
    );
    // The issue asks 90% of the sum, and docs/bond-results.md claims it (91.8-93.2% in the
    // quick form, 8 s of steady state): the test holds the claim.
    assert!(
        steady >= 0.90 * sum_alone,
        "{steady:.2} Mbit/s through the tunnel against {sum_alone:.2} alone"
    );
    // The unpaced round robin does what users of other tunnels report: below the best line.
    assert!(rr_steady < alone[0], "round robin {rr_steady:.2} Mbit/s");

    let lines: Vec<(Vec<Packet>, Vec<f64>)> = ["site-isp0", "site-isp1", "site-isp2"]
        .iter()
        .map(|name| read_line(&out.join(format!("link-{name}.jsonl"))))
        .collect();
    // Each line's queue while the delay controller's tunnel is saturated (emulator truth).
    for (k, (packets, _)) in lines.iter().enumerate() {
        let p95 = queue_quantile(packets, 27.0, 34.5, 0.95);
        eprintln!("line {k}: queue p95 {p95:.1} ms under the delay controller");
        assert!(p95 < 30.0, "line {k}: queue p95 {p95:.1} ms");
    }
    // Round robin fills the slow line's modem (250 packets at 3 Mbit/s: 1 s).
    let rr_p50 = queue_quantile(&lines[2].0, 16.0, 22.0, 0.5);
    eprintln!("line 2 under round robin: queue p50 {rr_p50:.0} ms");
    assert!(rr_p50 > 150.0, "round robin: queue p50 {rr_p50:.0} ms");

    // The failure: the cable line's spec changes at 35 s (dead) and 38 s (back).
    let (cable, changes) = &lines[1];
    let (died, back) = (changes[0], changes[1]);
    let last_before_back = data_arrivals(cable)
        .filter(|&t| t >= died && t < back)
        .fold(died, f64::max);
    eprintln!(
        "data left the dead line {:.2} s after it died",
        last_before_back - died
    );
    assert!(
        last_before_back - died <= 0.5,
        "{:.2} s",
        last_before_back - died
    );
    let rejoined = data_arrivals(cable)
        .find(|&t| t >= back)
        .expect("the line carried data again");
    eprintln!(
        "the line carried data again {:.2} s after it came back",
        rejoined - back
    );
    assert!(rejoined - back <= 2.0, "{:.2} s", rejoined - back);
    // The flow never stalled more than a second: over the three lines together, data kept
    // arriving at the emulators throughout the delay controller's flow.
    let mut all: Vec<f64> = lines
        .iter()
        .flat_map(|(packets, _)| data_arrivals(packets).collect::<Vec<_>>())
        .filter(|&t| (25.5..41.0).contains(&t))
        .collect();
    all.sort_by(f64::total_cmp);
    let stall = all.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    eprintln!("longest gap in the tunnel's data: {stall:.3} s");
    assert!(stall < 1.0, "the flow stalled {stall:.2} s");

    // RTT through the tunnel under load: the delay controller's against round robin's.
    let rtt_p50 = |name: &str| {
        lab_outcome(&out, name)["outcome"]["data"]["rtt"]["p50_ns"]
            .as_f64()
            .map(|ns| ns / 1e6)
    };
    let delay_rtt = rtt_p50("rtt-delay").expect("RTT probes through the delay tunnel");
    let rr_rtt = rtt_p50("rtt-rr").expect("RTT probes through the round-robin tunnel");
    eprintln!("RTT p50 through the tunnel: delay {delay_rtt:.1} ms, round robin {rr_rtt:.1} ms");
    // The slowest line's base RTT is 80 ms; the delay controller keeps the flow's RTT near
    // the lines' own, round robin adds the slow modem's full buffer.
    assert!(
        delay_rtt < 0.6 * rr_rtt,
        "{delay_rtt:.1} ms against {rr_rtt:.1}"
    );
}

/// Runs `pathlab ARGS`; (exit code, stderr).
fn pathlab(args: &[&str]) -> (i32, String) {
    let output = util::emulated::pathlab(args);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_bond_input_exits_2_with_a_message_that_names_it() {
    let dir = TempDir::new("bond-input");
    let short = dir.path("short.key");
    util::write_secret(&short, "too short");
    // A key file other users may read is refused as ssh refuses one (issue 30).
    let open = dir.path("open.key");
    std::fs::write(&open, "0123456789abcdef0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = dir.path("good.key");
    let made = util::emulated::pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert!(made.status.success(), "{made:?}");
    let printed = String::from_utf8_lossy(&made.stdout).trim().to_owned();
    let written = std::fs::read_to_string(&key).unwrap();
    assert_eq!(written.trim().len(), 64, "32 bytes in hex");
    let (code, stderr) = pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert_eq!(code, 2, "an existing key is not overwritten: {stderr}");
    // `bond key` prints the key's public half, and `bond public` reads it back.
    let read = util::emulated::pathlab(&["bond", "public", key.to_str().unwrap()]);
    assert!(read.status.success(), "{read:?}");
    let public = String::from_utf8_lossy(&read.stdout).trim().to_owned();
    assert_eq!(public.len(), 64, "{public}");
    assert_eq!(public, printed);
    assert_ne!(
        public,
        written.trim(),
        "the public key is not the private one"
    );
    let key = key.to_str().unwrap();
    let peer_spec = format!("site-a,key={public}");
    check_bad_key_files_are_refused(&short, &open);
    check_bad_line_options_are_refused(key);
    check_bad_addresses_and_targets_are_refused(key);
    check_missing_keys_and_peers_are_refused(key, &peer_spec);
    check_bad_class_rules_are_refused(key);
}

/// A malformed `--class` rule, at either end: exit 2 naming the rule and the problem.
fn check_bad_class_rules_are_refused(key: &str) {
    let client = |rule: &'static str| -> Vec<&'static str> {
        vec![
            "bond",
            "client",
            "198.18.0.1:7000",
            "--line",
            "eth9",
            "--class",
            rule,
        ]
    };
    let server = |rule: &'static str| -> Vec<&'static str> {
        vec![
            "bond",
            "server",
            "--listen",
            "198.18.0.1:7000",
            "--class",
            rule,
        ]
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (client("fast:udp"), "unknown class \"fast\""),
        (client("redundant"), "no match after \"redundant:\""),
        (
            client("redundant:dport=70000"),
            "\"70000\" is not a number from 0 to 65535",
        ),
        (client("redundant:dport=9-3"), "runs backwards"),
        (server("interactive:dscp=64"), "from 0 to 63"),
        (server("bulk:sctp"), "unknown match \"sctp\""),
    ];
    for (mut args, needle) in cases {
        let rule = args[args.len() - 1];
        args.extend(["--psk", key]);
        let (code, stderr) = pathlab(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            stderr.contains(rule),
            "{args:?} does not name the rule: {stderr}"
        );
    }
    let mut many = vec![
        "bond",
        "client",
        "198.18.0.1:7000",
        "--line",
        "eth9",
        "--psk",
        key,
    ];
    for _ in 0..65 {
        many.extend(["--class", "bulk:tcp"]);
    }
    let (code, stderr) = pathlab(&many);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("at most 64 rules, 65 given"), "{stderr}");
}

/// Runs `pathlab` with each of `cases`' arguments: each must exit 2 with a message that
/// contains the case's text.
fn assert_each_refused(cases: &[(&[&str], &str)]) {
    for (args, needle) in cases {
        let (code, stderr) = pathlab(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// A client's --psk file missing, too `short`, or readable by others (`open`).
fn check_bad_key_files_are_refused(short: &Path, open: &Path) {
    assert_each_refused(&[
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--psk",
                "/nonexistent/key",
            ],
            "/nonexistent/key",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--psk",
                short.to_str().unwrap(),
            ],
            "short.key",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--psk",
                open.to_str().unwrap(),
            ],
            "chmod 600",
        ),
    ]);
}

/// A client's line options out of range or missing (speed, via, overhead, a weighted
/// scheduler's rates), with the good key file `key`.
fn check_bad_line_options_are_refused(key: &str) {
    assert_each_refused(&[
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9,speed=3",
                "--psk",
                key,
            ],
            "speed=3",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9,via=gateway",
                "--psk",
                key,
            ],
            "'gateway' is not an IP address",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9,overhead=300",
                "--psk",
                key,
            ],
            "overhead=300 is not a byte count from 0 to 256",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9,overhead=-4",
                "--psk",
                key,
            ],
            "overhead=-4",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--scheduler",
                "wrr",
                "--psk",
                key,
            ],
            "rate=RATE",
        ),
    ]);
}

/// A server's address without a prefix length or with a bad one, and a client's target
/// delay above 1 s, with the good key file `key`.
fn check_bad_addresses_and_targets_are_refused(key: &str) {
    assert_each_refused(&[
        (
            &[
                "bond",
                "server",
                "--listen",
                "198.18.0.1:7000",
                "--address",
                "198.19.0.1",
                "--psk",
                key,
            ],
            "no /LENGTH",
        ),
        (
            &[
                "bond",
                "server",
                "--listen",
                "198.18.0.1:7000",
                "--address",
                "198.19.0.1/33",
                "--psk",
                key,
            ],
            "prefix length",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--target",
                "5s",
                "--psk",
                key,
            ],
            "at most 1s",
        ),
    ]);
}

/// Public-key options without their other halves (the server's key, a peer, a peer's
/// key; `peer_spec` a peer with the key but the server with only a PSK), no key at all,
/// and `bond stats` of no tunnel.
fn check_missing_keys_and_peers_are_refused(key: &str, peer_spec: &str) {
    assert_each_refused(&[
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--key",
                key,
            ],
            "--server-key PUBLIC",
        ),
        (
            &[
                "bond",
                "client",
                "198.18.0.1:7000",
                "--line",
                "eth9",
                "--key",
                key,
                "--server-key",
                "abcd",
            ],
            "64 hex digits",
        ),
        (
            &["bond", "client", "198.18.0.1:7000", "--line", "eth9"],
            "give --psk FILE",
        ),
        (
            &[
                "bond",
                "server",
                "--listen",
                "198.18.0.1:7000",
                "--key",
                key,
            ],
            "--peer NAME,key=PUBLIC",
        ),
        (
            &[
                "bond",
                "server",
                "--listen",
                "198.18.0.1:7000",
                "--key",
                key,
                "--peer",
                "site-a,allowed=198.19.1.0/24",
            ],
            "no key=PUBLIC",
        ),
        (
            &[
                "bond",
                "server",
                "--listen",
                "198.18.0.1:7000",
                "--psk",
                key,
                "--peer",
                peer_spec,
            ],
            "give the server's own --key",
        ),
        (
            &["bond", "stats", "--name", "no-such-tunnel"],
            "no tunnel named 'no-such-tunnel'",
        ),
    ]);
}

/// Interface names in a namespace.
fn links_in(netns: &pathlab_os::netns::Netns) -> Vec<String> {
    netns
        .run(|| {
            pathlab_os::netlink::Netlink::open()
                .and_then(|mut n| n.links())
                .map(|links| links.into_iter().map(|l| l.name).collect::<Vec<_>>())
        })
        .unwrap()
        .unwrap()
}

/// Issue 27: two tunnels with the default names (TUN `bond0`, name `bond0`) in two
/// namespaces of one machine both run, each found by `bond stats` from its own namespace
/// (the stats sockets' names were global: the second one was refused as taken).
#[test]
fn two_tunnels_with_default_names_in_two_namespaces_both_run() {
    let Some(_serial) = privileged_paired("two_tunnels_with_default_names_in_two_namespaces")
    else {
        return;
    };
    let dir = TempDir::new("bond-names");
    let key = dir.path("bond.key");
    assert_eq!(pathlab(&["bond", "key", key.to_str().unwrap()]).0, 0);
    let key = key.to_str().unwrap();
    let namespaces: Vec<pathlab_os::netns::Netns> = (0..2)
        .map(|_| pathlab_os::testing::netns_with_loopback().unwrap())
        .collect();
    // Clients of a server nobody runs: each stays connecting, with its TUN and its socket.
    let mut children: Vec<std::process::Child> = namespaces
        .iter()
        .map(|netns| {
            netns
                .command(PATHLAB)
                .args([
                    "bond",
                    "client",
                    "127.0.0.1:7000",
                    "--line",
                    "lo",
                    "--psk",
                    key,
                ])
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for netns in &namespaces {
        let mut waited = 0;
        while !links_in(netns).contains(&"bond0".to_owned()) && waited < 100 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            waited += 1;
        }
    }
    for (netns, child) in namespaces.iter().zip(&mut children) {
        assert_eq!(child.try_wait().unwrap(), None, "both still run");
        assert!(links_in(netns).contains(&"bond0".to_owned()));
        let stats = netns
            .run(|| pathlab_bond_driver::tunnel::request_stats("bond0"))
            .unwrap()
            .expect("each answers in its own namespace");
        assert_eq!(stats.role, "client");
    }
    for mut child in children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let (code, stderr) = pathlab(&["lab", "clean"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_client_fails_cleanly_on_a_missing_interface_and_a_silent_server_and_leaves_nothing() {
    let Some(_serial) = privileged_paired("a_client_fails_cleanly_on_a_missing_interface") else {
        return;
    };
    let dir = TempDir::new("bond-fail");
    let key = dir.path("bond.key");
    assert_eq!(pathlab(&["bond", "key", key.to_str().unwrap()]).0, 0);
    let netns = pathlab_os::testing::netns_with_loopback().unwrap();
    let key = key.to_str().unwrap();
    check_a_missing_interface_is_refused(&netns, key);
    check_a_silent_server_is_given_up_cleanly(&netns, key);
    check_a_killed_client_leaves_its_socket_to_lab_clean(&netns, key);
}

/// Runs `pathlab ARGS` in `netns`; (exit code, stderr).
fn pathlab_in(netns: &pathlab_os::netns::Netns, args: &[&str]) -> (i32, String) {
    let output = netns.command(PATHLAB).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A client on a line that does not exist in `netns` exits 2 naming it.
fn check_a_missing_interface_is_refused(netns: &pathlab_os::netns::Netns, key: &str) {
    let run = |args: &[&str]| pathlab_in(netns, args);
    let (code, stderr) = run(&[
        "bond",
        "client",
        "127.0.0.1:7000",
        "--line",
        "eth9",
        "--psk",
        key,
        "--name",
        "bond-test-a",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("eth9"), "{stderr}");
}

/// Nobody answers on 127.0.0.1:7000: the client gives up after --connect-timeout, and
/// leaves neither its TUN device nor its stats socket in `netns`.
fn check_a_silent_server_is_given_up_cleanly(netns: &pathlab_os::netns::Netns, key: &str) {
    let run = |args: &[&str]| pathlab_in(netns, args);
    let (code, stderr) = run(&[
        "bond",
        "client",
        "127.0.0.1:7000",
        "--line",
        "lo",
        "--psk",
        key,
        "--connect-timeout",
        "1s",
        "--name",
        "bond-test-b",
        "--tun",
        "pl-bondt",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("no answer from the server 127.0.0.1:7000"),
        "{stderr}"
    );
    assert_eq!(
        links_in(netns),
        vec!["lo".to_owned()],
        "the TUN device is gone"
    );
    assert!(
        !netns
            .run(|| pathlab_bond_driver::tunnel::stats_socket_path("bond-test-b"))
            .unwrap()
            .exists(),
        "the stats socket is gone"
    );
}

/// Killed with SIGKILL while connecting: the TUN device goes with the process, the
/// stats socket is left for `pathlab lab clean`, which removes it.
fn check_a_killed_client_leaves_its_socket_to_lab_clean(
    netns: &pathlab_os::netns::Netns,
    key: &str,
) {
    let mut child = netns
        .command(PATHLAB)
        .args([
            "bond",
            "client",
            "127.0.0.1:7000",
            "--line",
            "lo",
            "--psk",
            key,
            "--name",
            "bond-test-c",
            "--tun",
            "pl-bondk",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Names are per namespace: the tunnel's socket is found from its namespace.
    let socket = netns
        .run(|| pathlab_bond_driver::tunnel::stats_socket_path("bond-test-c"))
        .unwrap();
    let mut waited = 0;
    while !links_in(netns).contains(&"pl-bondk".to_owned()) && waited < 100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waited += 1;
    }
    assert!(
        links_in(netns).contains(&"pl-bondk".to_owned()),
        "the client made its TUN"
    );
    let stats = netns
        .run(|| pathlab_bond_driver::tunnel::request_stats("bond-test-c"))
        .unwrap()
        .expect("stats answer");
    assert_eq!(stats.role, "client");
    assert!(!stats.sessions[0].open);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(links_in(netns), vec!["lo".to_owned()]);
    assert!(socket.exists());
    let (code, stderr) = pathlab(&["lab", "clean"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!socket.exists(), "lab clean removes the stale stats socket");
}

/// Mbit/s of upward packets that left a line's emulator in [from, to) s (its truth of what
/// the line carried), frames as the emulator counts them.
fn delivered_mbps(packets: &[Packet], from: f64, to: f64) -> f64 {
    let bytes: u64 = packets
        .iter()
        .filter(|p| p.queue_ms.is_some() && p.arrived_s >= from && p.arrived_s < to)
        .map(|p| p.len)
        .sum();
    bytes as f64 * 8.0 / (to - from) / 1e6
}

const TWO_CLIENTS: &str = r#"
name = "bond-two-clients"
duration = "15s"
quick = "15s"
[[node]]
name = "site1"
[[node]]
name = "site2"
[[node]]
name = "net"
kind = "router"
[[node]]
name = "srv"
[[link]]
between = ["site1", "net"]
spec = "delay 10ms rate 8mbit limit 200"
reverse = "delay 10ms rate 50mbit limit 200"
[[link]]
between = ["site2", "net"]
spec = "delay 20ms rate 4mbit limit 200"
reverse = "delay 20ms rate 50mbit limit 200"
[[link]]
between = ["net", "srv"]
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
command = ["{pathlab}", "bond", "server", "--listen", "198.18.2.2:7000", "--psk", "{out}/bond.key", "--address", "198.19.0.1/24", "--name", "NAME-srv", "-J"]
[[workload]]
name = "client-a"
kind = "command"
from = "site1"
start = "2s"
command = ["{pathlab}", "bond", "client", "198.18.2.2:7000", "--line", "to-net", "--psk", "{out}/bond.key", "--address", "198.19.0.2/24", "--name", "NAME-a", "-J"]
[[workload]]
name = "client-b"
kind = "command"
from = "site2"
start = "2s"
command = ["{pathlab}", "bond", "client", "198.18.2.2:7000", "--line", "to-net", "--psk", "{out}/bond.key", "--address", "198.19.0.3/24", "--name", "NAME-b", "-J"]
[[workload]]
name = "tcp-a"
kind = "tcp"
from = "site1"
to = "srv"
address = "198.19.0.1"
start = "4s"
duration = "8s"
congestion = "cubic"
[[workload]]
name = "rtt-b"
kind = "rtt"
from = "site2"
to = "srv"
address = "198.19.0.1"
start = "3s"
duration = "10s"
interval = "50ms"
[[workload]]
name = "tcp-b"
kind = "tcp"
from = "site2"
to = "srv"
address = "198.19.0.1"
start = "4s"
duration = "8s"
congestion = "cubic"
[[workload]]
name = "server-stats"
kind = "command"
from = "srv"
start = "9s"
duration = "1s"
command = ["{pathlab}", "bond", "stats", "--name", "NAME-srv", "-J"]
"#;

#[test]
fn two_clients_carry_traffic_through_one_server_at_once() {
    let Some(_serial) = privileged_paired("two_clients_carry_traffic_through_one_server_at_once")
    else {
        return;
    };
    let dir = TempDir::new("bond-two");
    let out = dir.path("run");
    run_spec(&dir, TWO_CLIENTS, &out);
    // Both flows from 4 to 12 s, one per client, each over its own line (8 and 4 Mbit/s).
    for (flow, line, rate) in [("tcp-a", "site1-net", 8.0), ("tcp-b", "site2-net", 4.0)] {
        let series = lab_intervals(&out, flow);
        let goodput = median(&series[1..series.len() - 1]);
        let (packets, _) = read_line(&out.join(format!("link-{line}.jsonl")));
        let carried = delivered_mbps(&packets, 6.0, 11.0);
        eprintln!(
            "{flow}: {goodput:.2} Mbit/s through the tunnel; its line carried {carried:.2} of {rate}"
        );
        // The emulator's truth: the line was busy with this client's tunnel (the tunnel and
        // the inner headers cost about 9% of a 1514-byte frame), and the flow got most of it.
        assert!(carried > 0.85 * rate, "{line} carried {carried:.2} Mbit/s");
        assert!(
            goodput < carried && goodput > 0.8 * carried,
            "{flow}: {goodput:.2} Mbit/s of {carried:.2} carried"
        );
    }
    let rtt = &lab_outcome(&out, "rtt-b")["outcome"]["data"];
    assert!(rtt["replies"].as_u64().unwrap() + 5 >= rtt["sent"].as_u64().unwrap());
    // The server saw both clients at once: two open sessions, the clients' own.
    let stats = json_out(&out, "server-stats");
    let sessions = stats["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{stats}");
    for client in ["client-a", "client-b"] {
        let id = json_out(&out, client)["sessions"][0]["session"].clone();
        let session = sessions
            .iter()
            .find(|s| s["session"] == id)
            .unwrap_or_else(|| panic!("{client}'s session {id} is not the server's"));
        assert_eq!(session["open"], true);
        // Its inner packets reached the server's TUN device: thousands of them.
        let delivered = session["counters"]["inner_out"].as_u64().unwrap();
        eprintln!("{client}: session {id}, {delivered} inner packets delivered by 9 s");
        assert!(delivered > 1000, "{client}: {delivered}");
    }
}

const IPV6: &str = r#"
name = "bond-ipv6"
duration = "15s"
quick = "15s"
[[node]]
name = "site"
[[node]]
name = "isp0"
kind = "router"
[[node]]
name = "isp1"
kind = "router"
[[node]]
name = "srv"
[[link]]
between = ["site", "isp0"]
spec = "delay 10ms rate 6mbit limit 300"
reverse = "delay 10ms rate 50mbit limit 300"
[[link]]
between = ["site", "isp1"]
spec = "delay 20ms rate 3mbit limit 300"
reverse = "delay 20ms rate 50mbit limit 300"
[[link]]
between = ["isp0", "srv"]
[[link]]
between = ["isp1", "srv"]
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
command = ["{pathlab}", "bond", "server", "--listen", "[2001:2:0:2::2]:7000", "--psk", "{out}/bond.key", "--address", "2001:2:ff::1/64", "--address", "198.19.0.1/24", "--name", "NAME-srv6", "-J"]
# The lab's own server answers IPv4 only: a pathlab server on every address of srv.
[[workload]]
name = "measure-server"
kind = "command"
from = "srv"
command = ["{pathlab}", "server", "--listen", "[::]:4920"]
[[workload]]
name = "client"
kind = "command"
from = "site"
start = "2s"
command = ["{pathlab}", "bond", "client", "[2001:2:0:2::2]:7000", "--line", "to-isp0", "--line", "to-isp1,via=2001:2:0:1::2", "--psk", "{out}/bond.key", "--address", "2001:2:ff::2/64", "--address", "198.19.0.2/24", "--name", "NAME-c6", "-J"]
[[workload]]
name = "tcp6"
kind = "command"
from = "site"
start = "4s"
duration = "9s"
command = ["{pathlab}", "tcp", "2001:2:ff::1", "-t", "{duration}", "-C", "cubic", "-J"]
[[workload]]
name = "rtt6"
kind = "command"
from = "site"
start = "3s"
duration = "11s"
command = ["{pathlab}", "rtt", "2001:2:ff::1", "-i", "50ms", "-t", "{duration}", "-J"]
[[workload]]
name = "rtt4"
kind = "command"
from = "site"
start = "3s"
duration = "11s"
command = ["{pathlab}", "rtt", "198.19.0.1", "-i", "100ms", "-t", "{duration}", "-J"]
"#;

#[test]
fn ipv6_inside_the_tunnel_over_ipv6_lines() {
    let Some(_serial) = privileged_paired("ipv6_inside_the_tunnel_over_ipv6_lines") else {
        return;
    };
    let dir = TempDir::new("bond-ipv6");
    let out = dir.path("run");
    run_spec(&dir, IPV6, &out);
    // IPv6 outside: both ends size their datagrams for IPv6 lines (1500 - 40 - 8 bytes, less
    // 46 of the tunnel, plus what header compression saves on a bulk TCP segment: a TUN MTU
    // of 1434), so a full inner packet is one datagram, not two IPv6 fragments.
    let mtu = 1452 - 46 + pathlab_bond::headers::BULK_TCP_SAVED_BYTES;
    for end in ["bond-server", "client"] {
        let text = std::fs::read_to_string(out.join(format!("{end}.out"))).unwrap();
        assert!(text.contains(&format!("MTU {mtu}")), "{end}: {text}");
    }
    let lines: Vec<Vec<Packet>> = ["site-isp0", "site-isp1"]
        .iter()
        .map(|name| read_line(&out.join(format!("link-{name}.jsonl"))).0)
        .collect();
    // tcp6 sends from 4 s for 7.2 s (80% of its slot).
    let series = intervals(&out.join("tcp6.out"));
    let goodput = median(&series[1..series.len() - 1]);
    let carried: Vec<f64> = lines.iter().map(|l| delivered_mbps(l, 6.0, 10.0)).collect();
    eprintln!("IPv6 TCP through the tunnel {goodput:.2} Mbit/s; the lines carried {carried:.2?}");
    // Both IPv6 lines carried the flow, the second one through its `via` gateway, and the
    // flow got most of what they carried (an IPv6 tunnel over IPv6 costs about 12% of a
    // 1514-byte frame).
    assert!(
        carried[0] > 0.8 * 6.0 && carried[1] > 0.8 * 3.0,
        "{carried:?}"
    );
    let sum: f64 = carried.iter().sum();
    assert!(
        goodput < sum && goodput > 0.75 * sum,
        "{goodput:.2} Mbit/s of {sum:.2} carried"
    );
    // No datagram is longer than a 1500-byte IPv6 line's frame takes.
    for packets in &lines {
        assert!(packets.iter().all(|p| p.len <= 1514));
    }
    // Round trips over IPv6 and IPv4 inside, at once, all answered.
    for (name, base_ms) in [("rtt6", 20.0), ("rtt4", 20.0)] {
        let rtt = json_out(&out, name);
        let (sent, replies) = (
            rtt["sent"].as_u64().unwrap(),
            rtt["replies"].as_u64().unwrap(),
        );
        let p50 = rtt["rtt"]["p50_ns"].as_f64().unwrap() / 1e6;
        eprintln!("{name}: {replies} of {sent} answered, p50 {p50:.1} ms");
        assert!(
            sent > 50 && replies + 3 >= sent,
            "{name}: {replies} of {sent}"
        );
        assert!(
            p50 >= base_ms,
            "{name}: {p50:.1} ms below the lines' base RTT"
        );
    }
}

/// One sharing of the `bond-fair` recipe: the pinging user's RTTs (ms) before the bulk
/// and under it, the line's queue delays under it (emulator truth, ms), and each bulk
/// flow's result.
struct FairRun {
    /// Pings sent.
    pings: u64,
    idle_ms: Vec<f64>,
    loaded_ms: Vec<f64>,
    line_queue_ms: Vec<f64>,
    bulk: Vec<BulkFlow>,
}

/// A bulk flow of the `bond-fair` recipe, which is a result whether or not the sharing
/// let its data through to the end.
struct BulkFlow {
    name: String,
    /// Its goodput, Mbit/s (of a starved flow: what got through, over the test's time).
    goodput_mbps: f64,
    /// How long none of its data got through, s, if a queue starved it.
    starved_s: Option<f64>,
}

/// The quick form's times: the ping every 50 ms from 2 s, the 14 bulk flows from 7.5 to
/// 22.5 s; under load is from 3 s after they start (their slow starts over) to their end.
const FAIR_BULK_START_S: f64 = 7.5;
const FAIR_LOADED: (f64, f64) = (10.5, 22.5);

fn fair_run(out: &Path) -> FairRun {
    let ping = lab_outcome(out, "ping");
    let start_s = ping["start_ns"].as_f64().unwrap() / 1e9;
    let mut idle_ms = Vec::new();
    let mut loaded_ms = Vec::new();
    for sample in ping["outcome"]["data"]["series"].as_array().unwrap() {
        let sent_s = start_s + sample[0].as_f64().unwrap() * 0.05;
        let rtt_ms = sample[1].as_f64().unwrap() / 1e6;
        if sent_s < FAIR_BULK_START_S {
            idle_ms.push(rtt_ms);
        } else if (FAIR_LOADED.0..FAIR_LOADED.1).contains(&sent_s) {
            loaded_ms.push(rtt_ms);
        }
    }
    idle_ms.sort_by(f64::total_cmp);
    loaded_ms.sort_by(f64::total_cmp);
    let (packets, _) = read_line(&out.join("link-site-srv.jsonl"));
    let mut line_queue_ms: Vec<f64> = packets
        .iter()
        .filter(|p| (FAIR_LOADED.0..FAIR_LOADED.1).contains(&p.arrived_s))
        .filter_map(|p| p.queue_ms)
        .collect();
    line_queue_ms.sort_by(f64::total_cmp);
    // Every bulk flow is a `tcp` result (`lab_outcome` fails on a failed one): a flow the
    // sharing starved is one, with its gap, not a failure.
    let bulk = (1..=14)
        .map(|k| {
            let name = format!("bulk-{k}");
            let data = &lab_outcome(out, &name)["outcome"]["data"];
            let stream = &data["up"][0];
            BulkFlow {
                goodput_mbps: data["up_bps"].as_f64().expect("a tcp result") / 1e6,
                starved_s: stream
                    .get("starved")
                    .map(|starved| starved["longest_gap_ns"].as_f64().unwrap() / 1e9),
                name,
            }
        })
        .collect();
    FairRun {
        pings: ping["outcome"]["data"]["sent"].as_u64().unwrap(),
        idle_ms,
        loaded_ms,
        line_queue_ms,
        bulk,
    }
}

#[test]
fn the_bond_fair_recipe_keeps_a_pinging_user_one_frame_behind_fourteen_bulk_users() {
    let Some(_serial) = privileged_heavy("the_bond_fair_recipe_keeps_a_pinging_user") else {
        return;
    };
    let dir = TempDir::new("lab-bond-fair");
    let out = dir.path("run");
    // Shared by source and not shared: `--fair flow` tells the same users apart here (one
    // flow each), the same claim as `src` (users' --quick runs all three).
    let summary = run_quick_recipe_points("bond-fair", &[("fair", r#"["src", "off"]"#)], &out);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    // One frame of the seed's line: 1500 bytes at 1 Mbit/s.
    let frame_ms = 12.0;
    let mut added_p50 = std::collections::HashMap::new();
    for fair in ["src", "off"] {
        let dir = out.join(format!("fair-{fair}"));
        let run = fair_run(&dir);
        let figures = SharingFigures::of(&run, &dir);
        let starved: Vec<&BulkFlow> = run.bulk.iter().filter(|b| b.starved_s.is_some()).collect();
        print_the_figures(fair, &run, &figures, &starved);
        check_the_idle_path_and_the_line_queue(fair, &run, &figures);
        added_p50.insert(fair, (figures.p50, figures.p50 - figures.queue_p50));
        check_starved_flows_are_reported(fair, &starved, &summary, &report);
        if fair == "off" {
            // One FIFO drops the ping's packets as it drops everyone's (CoDel): enough are
            // answered for a median, a quarter of them.
            assert!(
                run.loaded_ms.len() > 60,
                "{fair}: {} loaded",
                run.loaded_ms.len()
            );
        } else {
            check_the_ping_has_its_own_share(fair, &run, &figures, &starved, frame_ms);
        }
    }
    // One FIFO: the ping waits behind the bulk users' packets in the tunnel's ingress,
    // several frames (the seed's worst case per packet: 14).
    let (off, off_ingress) = added_p50["off"];
    assert!(
        off_ingress > 4.0 * frame_ms && off > 3.0 * added_p50["src"].0,
        "one FIFO: added RTT p50 {off:.1} ms, {off_ingress:.1} in the ingress"
    );
}

/// The figures of one sharing's run of the fair recipe, ms (but `total`).
#[derive(Clone, Copy)]
struct SharingFigures {
    /// The ping's median RTT before the bulk flows.
    idle: f64,
    /// The ping's RTT under the bulk flows above `idle`: median and p95.
    p50: f64,
    p95: f64,
    /// The line's recorded queue delay under the bulk flows: median and p95.
    queue_p50: f64,
    queue_p95: f64,
    /// The line's emulator's lateness both ways at its median and p99, up to half a frame.
    late_p50: f64,
    late_p99: f64,
    /// The bulk flows' goodput together, Mbit/s.
    total: f64,
}

impl SharingFigures {
    /// The figures of `run`, whose result is in `dir`.
    fn of(run: &FairRun, dir: &Path) -> SharingFigures {
        let idle = quantile(&run.idle_ms, 0.5);
        let (p50, p95) = (
            quantile(&run.loaded_ms, 0.5) - idle,
            quantile(&run.loaded_ms, 0.95) - idle,
        );
        let (queue_p50, queue_p95) = (
            quantile(&run.line_queue_ms, 0.5),
            quantile(&run.line_queue_ms, 0.95),
        );
        // The ping crosses the line's emulator both ways: its lateness (from the run's
        // result) is in every figure, its median in the medians, its p99 in the p95s. Past
        // half a frame the test cannot tell one frame from two.
        let lateness = Lateness::of_lab_link(&dir.join("result.json"), "site-srv");
        let half_frame = Duration::from_millis(6);
        let late_p50 = ms(lateness.slack(Quantile::P50, &[0, 1], half_frame));
        let late_p99 = ms(lateness.slack(Quantile::P99, &[0, 1], half_frame));
        let total: f64 = run.bulk.iter().map(|b| b.goodput_mbps).sum();
        SharingFigures {
            idle,
            p50,
            p95,
            queue_p50,
            queue_p95,
            late_p50,
            late_p99,
            total,
        }
    }
}

/// Says the sharing `fair`'s figures, its `run`'s counts and its `starved` flows.
fn print_the_figures(fair: &str, run: &FairRun, figures: &SharingFigures, starved: &[&BulkFlow]) {
    let SharingFigures {
        idle,
        p50,
        p95,
        queue_p50,
        queue_p95,
        total,
        ..
    } = *figures;
    eprintln!(
        "--fair {fair}: idle RTT {idle:.1} ms; under 14 bulk flows ({total:.3} Mbit/s, {} \
         starved: {:.1?} s without data) the ping's added RTT p50 {p50:.1} ms, p95 \
         {p95:.1} ms ({} idle and {} loaded round trips of {} pings); the line's queue \
         p50 {queue_p50:.1} ms, p95 {queue_p95:.1} ms",
        starved.len(),
        starved
            .iter()
            .map(|b| b.starved_s.unwrap())
            .collect::<Vec<_>>(),
        run.idle_ms.len(),
        run.loaded_ms.len(),
        run.pings
    );
}

/// The idle path against the emulator's, and the line's queue under the delay
/// controller, in the sharing `fair`'s run.
fn check_the_idle_path_and_the_line_queue(fair: &str, run: &FairRun, figures: &SharingFigures) {
    let SharingFigures {
        idle,
        queue_p95,
        late_p50,
        ..
    } = *figures;
    // The idle path against the emulator's: 2 x 10 ms, the ping's datagram (100 bytes
    // inside, 196 on the wire) serialized at 1 and 10 Mbit/s, 1.725 ms, which no ping
    // beats (0.2 ms for the clocks); above it the emulator's median lateness and up to
    // 4 ms of the tunnel's and the hosts' own time (a busy loop on each core: 0.4 ms).
    // Before the bulk nothing is lost: 5.5 s of pings, 110.
    assert!(run.idle_ms.len() > 80, "{fair}: {} idle", run.idle_ms.len());
    let path_ms = 20.0 + 196.0 * 8.0 / 1e6 * 1e3 + 196.0 * 8.0 / 10e6 * 1e3;
    assert!(
        idle >= path_ms - 0.2 && idle <= path_ms + 4.0 + late_p50,
        "{fair}: idle RTT {idle:.2} ms against the path's {path_ms:.3} + up to 4 + {late_p50:.3} ms"
    );
    // The delay controller holds the modem's queue near its target whatever the
    // sharing (emulator truth): what the ping waits beyond it is the tunnel's ingress.
    assert!(queue_p95 < 30.0, "{fair}: line queue p95 {queue_p95:.1} ms");
}

/// A starved flow is a result the lab reports as such, in its `summary` (this
/// sharing's lines) and its `report`.
fn check_starved_flows_are_reported(
    fair: &str,
    starved: &[&BulkFlow],
    summary: &str,
    report: &str,
) {
    let said: Vec<&str> = summary
        .lines()
        .skip_while(|line| !line.contains(&format!("(fair={fair})")))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    for flow in starved {
        let starved = format!("starved: no data for {:.1} s", flow.starved_s.unwrap());
        assert!(
            said.iter()
                .any(|line| line.starts_with(&format!("  {}: ", flow.name))
                    && line.ends_with(&starved)),
            "{fair}: the summary does not say '{}: ... {starved}': {said:#?}",
            flow.name
        );
        assert!(
            report.contains(&format!("tcp, {starved}")),
            "{fair}: the report does not say '{starved}'"
        );
    }
}

/// Shared by source: the ping has its own share of the line, waits at most one frame
/// (`frame_ms`) in the tunnel's ingress at the median and two at the p95, and no bulk
/// flow is `starved`.
fn check_the_ping_has_its_own_share(
    fair: &str,
    run: &FairRun,
    figures: &SharingFigures,
    starved: &[&BulkFlow],
    frame_ms: f64,
) {
    let SharingFigures {
        p50,
        p95,
        queue_p50,
        queue_p95,
        late_p50,
        late_p99,
        total,
        ..
    } = *figures;
    // Under load the ping has its own share: 12 s of pings, 240, nearly all
    // answered.
    assert!(
        run.loaded_ms.len() > 150,
        "{fair}: {} loaded",
        run.loaded_ms.len()
    );
    // The issue's figure: at most 2 x 12 ms while 14 others saturate the line, at
    // the median, plus the emulator's lateness. Against the recorded truth: the
    // tunnel's ingress adds at most one frame to the modem's queue (the line's
    // recorded queue delay) at the median, and at most two at the p95 (the seed's
    // "at most two"; the queue's p95 is what the delay controller let it reach).
    assert!(
        p50 <= 2.0 * frame_ms + late_p50,
        "{fair}: added RTT p50 {p50:.1} ms, the emulator late by {late_p50:.3}"
    );
    assert!(
        p50 - queue_p50 <= frame_ms + late_p50,
        "{fair}: {:.1} ms in the tunnel's ingress at the median",
        p50 - queue_p50
    );
    assert!(
        p95 - queue_p95 <= 2.0 * frame_ms + late_p99,
        "{fair}: added RTT p95 {p95:.1} ms, the line's queue p95 {queue_p95:.1} ms, \
         the emulator late by {late_p99:.3}"
    );
    // Shared by volume, no user is starved, and the 14 saturate the line between
    // them.
    assert!(
        starved.is_empty(),
        "{fair}: {} starved",
        starved
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(total > 0.7, "{fair}: {total:.3} Mbit/s");
}

#[test]
fn without_cap_net_admin_bond_refuses_before_touching_anything() {
    // Shared: refused as nobody before anything is made (its directory has this pid).
    let Some(_serial) = privileged_shared("without_cap_net_admin_bond_refuses") else {
        return;
    };
    let dir = TempDir::new("bond-unpriv");
    std::fs::set_permissions(dir.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = dir.path("bond.key");
    let (code, stderr) = pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    // nobody's own (0600), so the refusal is the capability's, not the key file's.
    std::os::unix::fs::chown(&key, Some(65534), Some(65534)).unwrap();
    let key = key.to_str().unwrap();
    let tun = "plunpriv0";
    for args in [
        &[
            "bond",
            "server",
            "--listen",
            "127.0.0.1:7999",
            "--psk",
            key,
            "--tun",
            tun,
            "--name",
            "unpriv-srv",
        ][..],
        &[
            "bond",
            "client",
            "127.0.0.1:7999",
            "--line",
            "lo",
            "--psk",
            key,
            "--tun",
            tun,
            "--name",
            "unpriv-cli",
        ][..],
    ] {
        util::emulated::refused_without_cap_net_admin(args);
    }
    // No TUN device, no stats socket.
    assert!(!std::path::Path::new(&format!("/sys/class/net/{tun}")).exists());
    for name in ["unpriv-srv", "unpriv-cli"] {
        assert!(!pathlab_os::runtime::runtime_dir()
            .join("bond")
            .join(format!("{name}.sock"))
            .exists());
    }
}
