//! The tests of `emulate::vlan` that need the machine to themselves (see `alone.rs`).

use crate::emulate::{assert_conservation, pcapng_outbound, rtts_ms, TEST_SOURCE_MAC};
use crate::util::emulated::{pathlab, privileged, PATHLAB};
use crate::util::late::{Lateness, Quantile};
use crate::util::median;
use crate::util::TempDir;
use pathlab_emulator::emulator::{self, EmulatorConfig, EmulatorHandle, EmulatorStats, Pool};
use pathlab_emulator::port::{PacketPort, Port, ReceiveMode};
use pathlab_emulator::vlan::{self, TrunkVlans};
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::topology::{Check, Line, Middle, H2_V4, R_PORT_H1, R_PORT_H2};
use std::net::IpAddr;
use std::process::Stdio;
use std::time::Duration;

use crate::emulate::vlan::*;

#[test]
fn the_vlan_box_rewrites_5_to_6_and_back_and_forwards_nothing_else() {
    let Some(_serial) =
        privileged("the_vlan_box_rewrites_5_to_6_and_back_and_forwards_nothing_else")
    else {
        return;
    };
    let switch = Netns::new().expect("the switch's namespace");
    switch
        .set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")
        .expect("IPv6 off");
    let the_box = box_wired_to(&switch, "sw");
    let dir = TempDir::new("vlan-frames");
    let name = format!("t{}-vlan-frames", std::process::id());
    let pcap = dir.path("box.pcapng");
    let child = start_box(
        &the_box,
        &name,
        "delay 1ms rate 100mbit",
        &[
            "--pcap",
            pcap.to_str().unwrap(),
            "--record",
            dir.path("box.jsonl").to_str().unwrap(),
        ],
    );
    check_only_vlans_5_and_6_cross_the_tag_rewritten(&switch);
    // What the box saw: its own frames did not come back in (the trunk's socket sees what
    // the box sends), and it counted nothing it did not forward.
    let live: EmulatorStats =
        serde_json::from_slice(&pathlab(&["emulate", "stats", "--name", &name, "-J"]).stdout)
            .expect("stats");
    let stats = stop_box(child);
    check_the_box_counted_only_what_it_forwarded(&live, &stats);
    check_the_capture_holds_the_frames_untagged(&pcap);
    check_the_recording_names_the_directions_by_vlan(&dir);
    check_a_native_vlan_crosses_untagged(&the_box, &switch, &name);
}

/// Sends through the box (from `switch`'s port to it) frames of VLANs 5, 6 and others,
/// untagged, double-tagged and a BPDU: only VLANs 5 and 6 cross, the tag rewritten.
fn check_only_vlans_5_and_6_cross_the_tag_rewritten(switch: &Netns) {
    let stp = {
        let mut bpdu = frame(&tag(0, 5), 9);
        bpdu[..6].copy_from_slice(&[0x01, 0x80, 0xC2, 0, 0, 0]);
        bpdu
    };
    let sent = [
        frame(&tag(0, 5), 1),                // VLAN 5: forwarded into 6
        frame(&tag(0, 6), 2),                // VLAN 6: forwarded into 5
        frame(&[], 3),                       // untagged: not forwarded
        frame(&tag(0, 7), 4),                // VLAN 7: not forwarded
        frame(&tag(5, 5), 5),                // VLAN 5, priority 5: into 6, priority 0
        frame(&[0x88, 0xa8, 0x00, 0x05], 6), // 802.1ad outer tag 5: not forwarded
        stp,                                 // a BPDU in VLAN 5: not forwarded
        frame(&tag(0, 0), 8),                // priority tag only: untagged
    ];
    let received = through_the_box(switch, &sent);
    let expected = vec![
        frame(&tag(0, 6), 1),
        frame(&tag(0, 5), 2),
        frame(&tag(0, 6), 5),
    ];
    let mut sorted = received.clone();
    sorted.sort_by_key(|f| f[f.len() - 1]);
    assert_eq!(
        sorted, expected,
        "only VLANs 5 and 6 cross, the tag rewritten"
    );
}

/// The box's stats while it ran (`live`) and when it stopped (`stats`): it counted the
/// frames of VLANs 5 and 6 only, each forwarded.
fn check_the_box_counted_only_what_it_forwarded(live: &EmulatorStats, stats: &EmulatorStats) {
    assert_eq!(live.directions[0].packets_received, 2);
    for (d, (from, to, received)) in stats
        .directions
        .iter()
        .zip([("trunk.5", "trunk.6", 2), ("trunk.6", "trunk.5", 1)])
    {
        assert_eq!((d.from.as_str(), d.to.as_str()), (from, to));
        assert_eq!(d.packets_received, received, "{from} -> {to}");
        assert_eq!(d.forwarded, received, "{from} -> {to}");
        assert_eq!(d.malformed, 0);
    }
    assert_conservation(stats);
}

/// The capture holds the frames as the link carried them, without a tag, on the
/// interface of the VLAN they left into.
fn check_the_capture_holds_the_frames_untagged(pcap: &std::path::Path) {
    let capture = std::fs::read(pcap).expect("the capture");
    let into_6: Vec<&[u8]> = pcapng_outbound(&capture, 1);
    assert_eq!(into_6, [&frame(&[], 1)[..], &frame(&[], 5)[..]]);
    assert_eq!(pcapng_outbound(&capture, 0), [&frame(&[], 2)[..]]);
    let text = String::from_utf8_lossy(&capture);
    assert!(
        text.contains("trunk.5") && text.contains("trunk.6"),
        "named by VLAN"
    );
}

/// The recording names the directions by VLAN and holds every packet.
fn check_the_recording_names_the_directions_by_vlan(dir: &TempDir) {
    let file = std::fs::File::open(dir.path("box.jsonl")).expect("the recording");
    let recording = pathlab_results::recording::read_recording(std::io::BufReader::new(file))
        .expect("the recording reads");
    let header = recording.header.as_ref().expect("a header");
    assert_eq!(
        (
            header.directions[0].from.as_str(),
            header.directions[0].to.as_str()
        ),
        ("trunk.5", "trunk.6")
    );
    assert_eq!(recording.packets(0).count(), 2);
    assert_eq!(recording.packets(1).count(), 1);
}

/// With --native-vlan 5 the trunk carries VLAN 5 untagged: untagged (and
/// priority-tagged) frames go into 6, and 6's frames leave untagged. BPDUs still stay.
fn check_a_native_vlan_crosses_untagged(the_box: &Netns, switch: &Netns, name: &str) {
    let child = start_box(the_box, name, "delay 1ms", &["--native-vlan", "5"]);
    let untagged_stp = {
        let mut bpdu = frame(&[], 9);
        bpdu[..6].copy_from_slice(&[0x01, 0x80, 0xC2, 0, 0, 0]);
        bpdu
    };
    let sent = [
        frame(&[], 1),        // untagged: VLAN 5, into 6
        frame(&tag(0, 6), 2), // VLAN 6: leaves untagged
        frame(&tag(0, 5), 3), // tagged 5 is still 5
        frame(&tag(0, 7), 4), // VLAN 7: not forwarded
        frame(&tag(3, 0), 5), // priority tag only: VLAN 5
        untagged_stp,         // the switch's BPDU: not forwarded
    ];
    let mut received = through_the_box(switch, &sent);
    received.sort_by_key(|f| f[f.len() - 1]);
    assert_eq!(
        received,
        vec![
            frame(&tag(0, 6), 1),
            frame(&[], 2),
            frame(&tag(0, 6), 3),
            frame(&tag(0, 6), 5),
        ]
    );
    let stats = stop_box(child);
    assert_eq!(stats.directions[0].forwarded, 3);
    assert_eq!(stats.directions[1].forwarded, 1);
    assert_conservation(&stats);
}

#[test]
fn a_ping_from_vlan_5_to_vlan_6_through_the_one_port_box_takes_the_specs_delay() {
    let Some(_serial) =
        privileged("a_ping_from_vlan_5_to_vlan_6_through_the_one_port_box_takes_the_specs_delay")
    else {
        return;
    };
    // h1 (client, VLAN 5) - r (switch) - h2 (server, VLAN 6), and the box on r's trunk
    // port `r-box`, tagged 5 and 6.
    let line = Line::build(Middle::Emulator, false).expect("namespaces");
    let the_box = box_wired_to(&line.r, "r-box");
    let [access_5, access_6, trunk_5, trunk_6] = open_the_switchs_ports(&line.r);
    let pool = Pool::with_spin(1, pathlab_core::Duration::from_micros(200), 0.05)
        .expect("the switch's thread");
    let switch = [
        access_port(&pool, access_5, trunk_5),
        access_port(&pool, access_6, trunk_6),
    ];
    let name = format!("t{}-vlan-ping", std::process::id());
    // Through the box with nothing in the link: the switch's and the box's own cost.
    let child = start_box(&the_box, &name, "", &[]);
    check_the_delay_adds_20ms_to_the_ping(&line, &name, &switch);
    // TCP both ways, every byte checked: runs of segments leave the box as tagged GSO
    // super-packets.
    let _ = line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(1),
            Duration::from_millis(200),
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("every byte arrives through the box");
    let stats = stop_box(child);
    let [_, into_vlan_6] = switch.map(EmulatorHandle::stop);
    check_the_box_sent_tagged_super_packets(&stats, &into_vlan_6);
}

/// Opens the switch's ports in `r`: the access ports to h1 and h2, then the trunk port
/// `r-box`'s VLANs 5 and 6.
fn open_the_switchs_ports(r: &Netns) -> [Box<dyn Port>; 4] {
    let spec = pathlab_core::LinkSpec::default();
    let mode = ReceiveMode::socket_for_link(&spec);
    r.run(
        || -> Result<[Box<dyn Port>; 4], pathlab_emulator::port::PortError> {
            let vlans = TrunkVlans::parse("5,6").expect("two VLANs");
            let [trunk_5, trunk_6] = vlan::open_trunk("r-box", vlans, [mode; 2])?;
            Ok([
                Box::new(PacketPort::open_with(R_PORT_H1, mode)?),
                Box::new(PacketPort::open_with(R_PORT_H2, mode)?),
                Box::new(trunk_5),
                Box::new(trunk_6),
            ])
        },
    )
    .unwrap()
    .expect("the switch's ports")
}

/// `count` pings from h1 to h2, 20 ms apart: the round trips of those answered, in ms.
fn ping_h2_from_h1(line: &Line, count: usize) -> Vec<f64> {
    let mut pinger = line
        .h1
        .run(|| pathlab_probe_driver::ping::Pinger::new(IpAddr::V4(H2_V4), 56))
        .unwrap()
        .expect("raw ICMP socket");
    let results = pinger
        .run(count, Duration::from_millis(20), Duration::from_secs(2))
        .expect("ping runs");
    rtts_ms(&results)
}

/// The box running with an empty spec: pings measure the switch's and the box's own cost;
/// then `emulate set --name NAME 'delay 10ms'` adds 20 ms to the round trip.
fn check_the_delay_adds_20ms_to_the_ping(line: &Line, name: &str, switch: &[EmulatorHandle]) {
    let ping = |count: usize| ping_h2_from_h1(line, count);
    let base = ping(50);
    assert_eq!(base.len(), 50, "every ping of the empty link came back");
    // 10 ms each way: 20 ms more.
    let output = pathlab(&["emulate", "set", "--name", name, "delay 10ms"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rtts = ping(50);
    assert_eq!(rtts.len(), 50, "every ping came back");
    // The lower quartile and the median: the switch is a user-space thread with little
    // spinning, so on a loaded 2-core machine the upper half of the pings waits for CPU.
    let quartile = |sorted: &[f64]| sorted[sorted.len() / 4];
    let (min, low, med) = (rtts[0], quartile(&rtts), median(&rtts));
    let (base_low, base_med) = (quartile(&base), median(&base));
    eprintln!(
        "one-port VLAN box: empty link RTT lower quartile {base_low:.3} ms, median \
         {base_med:.3} ms; delay 10ms each way: min {min:.3} ms, lower quartile {low:.3} ms, \
         median {med:.3} ms, max {:.3} ms (theory: 20 ms + the empty link's)",
        rtts[rtts.len() - 1]
    );
    assert!(
        min >= 20.0,
        "no ping beats the 20 ms the link adds: {min:.3} ms"
    );
    // A ping crosses both directions of the box and of both switch emulators: their
    // median lateness over these pings widens the bounds (CI with helpers' builds beside
    // it: lower quartile 22.3 ms for 20.24, which a fixed 1 ms could not hold).
    let output = pathlab(&["emulate", "stats", "--name", name, "-J"]);
    assert!(output.status.success(), "{output:?}");
    let box_stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("stats");
    let late_ms: f64 = std::iter::once(Lateness::of_stats(&box_stats))
        .chain(
            switch
                .iter()
                .map(|s| Lateness::of_stats(&s.stats().expect("the switch runs"))),
        )
        .map(|late| {
            late.slack(Quantile::P50, &[0, 1], Duration::from_millis(5))
                .as_secs_f64()
                * 1e3
        })
        .sum();
    eprintln!("the box's and the switch's median lateness, both ways: {late_ms:.3} ms");
    assert!(
        (low - base_low - 20.0).abs() < 1.0 + late_ms,
        "lower quartile {low:.3} ms is 20 ms above the empty link's {base_low:.3} ms, within \
         1 ms and the emulators' {late_ms:.3} ms of lateness"
    );
    assert!(
        (med - base_med - 20.0).abs() < 3.0 + late_ms,
        "median {med:.3} ms is 20 ms above the empty link's {base_med:.3} ms, within 3 ms and \
         the emulators' {late_ms:.3} ms of lateness"
    );
}

/// The server's side of the switch (`into_vlan_6`) read super-packets off its trunk port,
/// and the box (`stats`) forwarded both ways without errors.
fn check_the_box_sent_tagged_super_packets(stats: &EmulatorStats, into_vlan_6: &EmulatorStats) {
    // The server's side of the switch read super-packets off its trunk port: the box sent
    // the data as tagged GSO packets, which the kernel cut with the tag in every segment.
    let from_the_box = &into_vlan_6.directions[1];
    assert!(
        from_the_box.frames_received < from_the_box.packets_received,
        "tagged super-packets reached the switch: {} frames, {} packets",
        from_the_box.frames_received,
        from_the_box.packets_received
    );
    for d in &stats.directions {
        assert!(d.forwarded > 60, "{} -> {}: {}", d.from, d.to, d.forwarded);
        assert_eq!(
            (d.send_errors, d.malformed),
            (0, 0),
            "{} -> {}",
            d.from,
            d.to
        );
    }
    assert_conservation(stats);
}

/// Wires a new namespace's `trunk` to `peer_port` in `peer`, both up, IPv6 off in the new
/// one (the box sends nothing of its own); returns the new namespace.
fn box_wired_to(peer: &Netns, peer_port: &str) -> Netns {
    let the_box = Netns::new().expect("the box's namespace");
    the_box
        .set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")
        .expect("IPv6 off");
    the_box
        .set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")
        .expect("IPv6 off");
    let peer_fd = peer.fd();
    the_box
        .run(|| Netlink::open()?.create_veth(TRUNK, peer_port, Some(peer_fd)))
        .unwrap()
        .expect("the trunk veth");
    for (netns, name) in [(&the_box, TRUNK), (peer, peer_port)] {
        netns
            .run(|| -> std::io::Result<()> {
                let mut netlink = Netlink::open()?;
                let link = netlink.link_by_name(name)?.expect("just made");
                netlink.set_up(link.index, true)
            })
            .unwrap()
            .expect("up");
    }
    the_box
}

/// `pathlab emulate --trunk trunk --vlans 5,6 SPEC EXTRA..` in `the_box`, once its control
/// socket answers.
fn start_box(the_box: &Netns, name: &str, spec: &str, extra: &[&str]) -> BoxProcess {
    let child = the_box
        .command(PATHLAB)
        .args(["emulate", "--trunk", TRUNK, "--vlans", "5,6", spec])
        .args(["--name", name, "-J"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pathlab emulate starts");
    let process = BoxProcess(Some(child));
    for _ in 0..200 {
        if pathlab(&["emulate", "stats", "--name", name])
            .status
            .success()
        {
            return process;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the VLAN box {name} did not come up");
}

/// Sends `frames` into the trunk from the switch's side (`sw` in `switch`) and returns
/// what came back out of it within a second, tags in their bytes.
fn through_the_box(switch: &Netns, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut port = switch
        .run(|| PacketPort::open("sw"))
        .unwrap()
        .expect("the switch side's port");
    let mut out = port.transmitter().expect("its sending half");
    for frame in frames {
        out.send(frame).expect("into the trunk");
    }
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let mut pool = pathlab_core::buffers::BufferPool::default();
    while std::time::Instant::now() < deadline {
        port.receive(64, &mut pool, &mut |frame| {
            if frame[6..12] == TEST_SOURCE_MAC {
                received.push(frame);
            }
        })
        .expect("receive from the trunk");
        std::thread::sleep(Duration::from_millis(5));
    }
    received
}

/// One access port of the test's switch: an emulator with an empty spec between an
/// access interface (untagged) and VLAN `vid` of the switch's trunk port.
fn access_port(pool: &Pool, access: Box<dyn Port>, trunk_vlan: Box<dyn Port>) -> EmulatorHandle {
    let name = format!("switch-{}", access.name());
    pool.spawn(
        [access, trunk_vlan],
        EmulatorConfig {
            name,
            forward: pathlab_core::LinkSpec::default(),
            reverse: pathlab_core::LinkSpec::default(),
            seed: 1,
            record: None,
            pcap: None,
            queue_sample_interval: pathlab_core::Duration::from_millis(10),
            command: vec![],
            on_interface_gone: emulator::OnInterfaceGone::Stop,
        },
    )
    .expect("an access port")
}
