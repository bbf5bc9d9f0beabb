//! `pathlab bond` end to end: real TCP through the tunnel over emulated lines in namespaces
//! (the `bond` recipe), checked against the emulators' recordings; bad input; cleanup.

mod util;

use std::path::Path;

use util::emulated::{privileged, run_quick_recipe, PATHLAB};
use util::TempDir;

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
    let mut delays: Vec<f64> = packets
        .iter()
        .filter(|p| p.arrived_s >= from && p.arrived_s < to)
        .filter_map(|p| p.queue_ms)
        .collect();
    assert!(!delays.is_empty(), "no packets in [{from}, {to})");
    delays.sort_by(f64::total_cmp);
    delays[((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len()) - 1]
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

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Data datagrams (larger than the tunnel's control datagrams) and when they arrived.
fn data_arrivals(packets: &[Packet]) -> impl Iterator<Item = f64> + '_ {
    packets.iter().filter(|p| p.len > 400).map(|p| p.arrived_s)
}

#[test]
fn the_bond_recipe_fills_three_lines_without_bloat_and_survives_a_line_failure() {
    let Some(_serial) = privileged("the_bond_recipe_fills_three_lines_without_bloat") else {
        return;
    };
    let dir = TempDir::new("lab-bond");
    let out = dir.path("run");
    run_quick_recipe("bond", &out);
    // The quick form halves the recipe's times: each line alone 4 s from 1, 5 and 9 s; the
    // round robin's flow from 14 s for 8.5 s; the delay controller's from 24.5 s for 17 s,
    // the cable line dead from 35 to 38 s.
    let alone: Vec<f64> = ["alone-isp0", "alone-isp1", "alone-isp2"]
        .iter()
        .map(|name| {
            let series = intervals(&out.join(format!("{name}.out")));
            // The steady state: without the first second (slow start) and the last (partial).
            median(&series[1..series.len() - 1])
        })
        .collect();
    let sum_alone: f64 = alone.iter().sum();
    let delay = intervals(&out.join("tunnel-delay.out"));
    let steady: f64 = delay[2..10].iter().sum::<f64>() / 8.0;
    let rr = intervals(&out.join("tunnel-rr.out"));
    let rr_steady: f64 = rr[2..rr.len() - 1].iter().sum::<f64>() / (rr.len() - 3) as f64;
    eprintln!(
        "alone {alone:.2?} (sum {sum_alone:.2}); tunnel {steady:.2} Mbit/s ({:.1}%), round robin {rr_steady:.2}",
        100.0 * steady / sum_alone
    );
    // The issue asks 90% of the sum; this machine measures 90-91% in the quick form (8 s of
    // steady state). The guard leaves 5 points for a busy CI host.
    assert!(
        steady >= 0.85 * sum_alone,
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
        let text = std::fs::read_to_string(out.join(format!("{name}.out"))).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["rtt"]["p50_ns"].as_f64().map(|ns| ns / 1e6)
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
    std::fs::write(&short, b"too short").unwrap();
    let key = dir.path("good.key");
    let (code, stderr) = pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let written = std::fs::read_to_string(&key).unwrap();
    assert_eq!(written.trim().len(), 64, "32 bytes in hex");
    let (code, stderr) = pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert_eq!(code, 2, "an existing key is not overwritten: {stderr}");
    let key = key.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
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
                "eth9",
                "--scheduler",
                "wrr",
                "--psk",
                key,
            ],
            "rate=RATE",
        ),
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
            "ADDRESS/PREFIX",
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
        (
            &["bond", "stats", "--name", "no-such-tunnel"],
            "no tunnel named 'no-such-tunnel'",
        ),
    ];
    for (args, needle) in cases {
        let (code, stderr) = pathlab(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// Interface names in a namespace.
fn links_in(netns: &pathlab_io::netns::Netns) -> Vec<String> {
    netns
        .run(|| {
            pathlab_io::netlink::Netlink::open()
                .and_then(|mut n| n.links())
                .map(|links| links.into_iter().map(|l| l.name).collect::<Vec<_>>())
        })
        .unwrap()
        .unwrap()
}

#[test]
fn a_client_fails_cleanly_on_a_missing_interface_and_a_silent_server_and_leaves_nothing() {
    let Some(_serial) = privileged("a_client_fails_cleanly_on_a_missing_interface") else {
        return;
    };
    let dir = TempDir::new("bond-fail");
    let key = dir.path("bond.key");
    assert_eq!(pathlab(&["bond", "key", key.to_str().unwrap()]).0, 0);
    let netns = pathlab_io::netns::Netns::new().unwrap();
    netns
        .run(|| {
            let mut netlink = pathlab_io::netlink::Netlink::open().unwrap();
            let lo = netlink.link_by_name("lo").unwrap().unwrap();
            netlink.set_up(lo.index, true).unwrap();
        })
        .unwrap();
    let run = |args: &[&str]| {
        let output = netns.command(PATHLAB).args(args).output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let key = key.to_str().unwrap();
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
    // Nobody answers on 127.0.0.1:7000: the client gives up after --connect-timeout.
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
        links_in(&netns),
        vec!["lo".to_owned()],
        "the TUN device is gone"
    );
    assert!(
        !pathlab_io::bond::stats_socket_path("bond-test-b").exists(),
        "the stats socket is gone"
    );
    // Killed with SIGKILL while connecting: the TUN device goes with the process, the
    // stats socket is left for `pathlab lab clean`.
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
    let socket = pathlab_io::bond::stats_socket_path("bond-test-c");
    let mut waited = 0;
    while !links_in(&netns).contains(&"pl-bondk".to_owned()) && waited < 100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waited += 1;
    }
    assert!(
        links_in(&netns).contains(&"pl-bondk".to_owned()),
        "the client made its TUN"
    );
    let stats = pathlab_io::bond::request_stats("bond-test-c").expect("stats answer");
    assert_eq!(stats.role, "client");
    assert!(!stats.sessions[0].open);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(links_in(&netns), vec!["lo".to_owned()]);
    assert!(socket.exists());
    let (code, stderr) = pathlab(&["lab", "clean"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!socket.exists(), "lab clean removes the stale stats socket");
}
