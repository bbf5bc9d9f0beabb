//! The tests of `emulate::iface` that need the machine to themselves (see `alone.rs`).

use crate::util::emulated::{link_index, pathlab, privileged};
use crate::util::late::Lateness;
use pathlab_os::interpose::InterfaceView;
use pathlab_os::netlink::{Netlink, Route, RT_TABLE_MAIN};
use pathlab_os::netns::Netns;
use pathlab_os::testing::NamedNetns;
use std::net::IpAddr;
use std::time::Duration;

use crate::emulate::iface::*;

#[test]
fn an_interface_keeps_what_its_programs_see_follows_the_specs_and_comes_back() {
    let Some(_guard) = privileged("an_interface_keeps_what_its_programs_see") else {
        return;
    };
    let pid = std::process::id();
    // A: a named namespace (`ip netns add`); B: anonymous, known by its process's pid.
    let named = NamedNetns::add(&format!("plt{pid}-a")).expect("named namespace");
    let a = Netns::open(named.path()).expect("opens");
    let b = Netns::new().expect("namespace");
    let resident = Resident::in_netns(&b);
    a.run(|| Netlink::open()?.create_veth("va", "vb", Some(b.fd())))
        .unwrap()
        .expect("veth");
    configure(&a, "va", "198.18.0.1", Some("2001:2::1"));
    configure(&b, "vb", "198.18.0.2", Some("2001:2::2"));
    decorate(&a, "va", "198.18.0.2", "2001:2::2");
    decorate(&b, "vb", "198.18.0.1", "2001:2::1");
    let (before_a, before_b) = (settled(&a, "va"), settled(&b, "vb"));
    // Routes in both tables, of both families; the kernel's own as well.
    assert!(before_a.routes.len() >= 8, "{before_a:?}");
    assert_eq!(before_a.neighbours.len(), 1);

    let ns_a = format!("plt{pid}-a");
    let emulator_a = Emulator::start(
        &format!("t{pid}-ifa"),
        &ns_a,
        "va",
        "delay 5ms",
        "delay 2ms",
    );
    let ns_b = format!("pid:{}", resident.pid());
    // Without its guardian (a test hook), so that its SIGKILL below is left to `lab clean`
    // (tests/alone/emulate/swap.rs has the guardian's part).
    let emulator_b = Emulator::start_with(
        &format!("t{pid}-ifb"),
        &ns_b,
        "vb",
        "delay 3ms",
        "delay 1ms",
        &[("PATHLAB_TEST_NO_GUARDIAN", "1")],
    );
    assert_eq!(
        seen(&a, "va"),
        before_a,
        "what A's programs see of va while it is emulated"
    );
    assert_eq!(
        seen(&b, "vb"),
        before_b,
        "what B's programs see of vb while it is emulated"
    );
    // A request: 5 ms leaving A, 1 ms entering B; its reply: 3 ms leaving B, 2 ms entering A.
    // Each crossing adds its emulator's median lateness (their stats after the pings).
    let pings = [ping_ms(&a, "198.18.0.2"), ping_ms(&a, "2001:2::2")];
    let late_ms: f64 = [&emulator_a, &emulator_b]
        .iter()
        .map(|e| Lateness::of_stats(&e.stats()).round_trip_median_ms())
        .sum();
    for (target, rtt) in ["198.18.0.2", "2001:2::2"].iter().zip(pings) {
        judge_rtt(target, rtt, 11.0, late_ms);
    }

    // A second emulator on either is refused, whichever way it names the namespace.
    let output = pathlab(&["emulate", "--netns", &ns_b, "--iface", "vb", "delay", "1ms"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already emulated by emulator"), "{stderr}");
    let path = named.path().to_string_lossy().into_owned();
    let output = pathlab(&["emulate", "--netns", &path, "--iface", "va", "delay", "1ms"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already emulated"), "{stderr}");

    // SIGTERM puts va back at once.
    let stats = emulator_a.stop();
    for d in &stats.directions {
        assert!(
            d.forwarded >= 44,
            "{} -> {}: forwarded {}",
            d.from,
            d.to,
            d.forwarded
        );
    }
    assert_eq!(seen(&a, "va"), before_a, "va after SIGTERM");
    no_record_left(&a);

    // SIGKILL (and no guardian) leaves vb swapped; `lab clean` puts it back.
    emulator_b.kill();
    let output = pathlab(&["emulate", "--netns", &ns_b, "--iface", "vb", "delay", "1ms"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("left swapped by a killed emulator"),
        "{stderr}"
    );
    let output = pathlab(&["lab", "clean"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("restored interface vb in {ns_b}")),
        "{stdout}"
    );
    assert_eq!(seen(&b, "vb"), before_b, "vb after SIGKILL and lab clean");
    no_record_left(&b);
    // Back as it was: a plain wire.
    assert!(ping_ms(&a, "198.18.0.2") < 1.0);
}

#[test]
fn a_vxlan_device_and_a_macvlan_are_emulated_in_place() {
    let Some(_guard) = privileged("a_vxlan_device_and_a_macvlan_are_emulated_in_place") else {
        return;
    };
    let pid = std::process::id();
    // Two "machines" joined by an underlay veth; a VXLAN link between them as meshnet
    // makes one across machines, and a macvlan on a second veth.
    let named = NamedNetns::add(&format!("plt{pid}-m1")).expect("named namespace");
    let m1 = Netns::open(named.path()).expect("opens");
    let m2 = Netns::new().expect("namespace");
    for (a, b) in [("u1", "u2"), ("l1", "l2")] {
        m1.run(|| Netlink::open()?.create_veth(a, b, Some(m2.fd())))
            .unwrap()
            .expect("veth");
    }
    configure(&m1, "u1", "198.18.100.1", None);
    configure(&m2, "u2", "198.18.100.2", None);
    for (netns, local, remote, address) in [
        (&m1, "198.18.100.1", "198.18.100.2", "198.18.1.1"),
        (&m2, "198.18.100.2", "198.18.100.1", "198.18.1.2"),
    ] {
        let underlay = link_index(netns, if local.ends_with(".1") { "u1" } else { "u2" });
        netns
            .run(|| {
                Netlink::open()?.create_vxlan(
                    "vx0",
                    42,
                    local.parse().unwrap(),
                    remote.parse().unwrap(),
                    4789,
                    underlay,
                )
            })
            .unwrap()
            .expect("vxlan");
        configure(netns, "vx0", address, None);
    }
    let lower = link_index(&m1, "l1");
    m1.run(|| -> std::io::Result<()> {
        let mut netlink = Netlink::open()?;
        netlink.set_up(lower, true)?;
        netlink.create_macvlan("mv0", lower)
    })
    .unwrap()
    .expect("macvlan");
    configure(&m1, "mv0", "198.18.2.1", None);
    configure(&m2, "l2", "198.18.2.2", None);
    let before = [settled(&m1, "vx0"), settled(&m1, "mv0")];

    let path = named.path().to_string_lossy().into_owned();
    let vxlan = Emulator::start(
        &format!("t{pid}-vx"),
        &path,
        "vx0",
        "delay 4ms",
        "delay 0ms",
    );
    let macvlan = Emulator::start(
        &format!("t{pid}-mv"),
        &path,
        "mv0",
        "delay 3ms",
        "delay 3ms",
    );
    assert_eq!([seen(&m1, "vx0"), seen(&m1, "mv0")], before);
    assert_rtt(&m1, "198.18.1.2", 4.0);
    assert_rtt(&m1, "198.18.2.2", 6.0);
    vxlan.stop();
    macvlan.stop();
    assert_eq!([seen(&m1, "vx0"), seen(&m1, "mv0")], before);
    no_record_left(&m1);
}

/// Gives interface `name` of `netns` an address per family, brings it up, and the
/// namespace's loopback. Without duplicate address detection, so that its link-local
/// address (and that address's routes) are final at once, not a second later.
pub(super) fn configure(netns: &Netns, name: &str, v4: &str, v6: Option<&str>) {
    let index = link_index(netns, name);
    netns
        .run(|| -> std::io::Result<()> {
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_dad"), "0")?;
            let mut netlink = Netlink::open()?;
            netlink.add_address(index, v4.parse().unwrap(), 24, None)?;
            if let Some(v6) = v6 {
                netlink.add_address(index, v6.parse().unwrap(), 64, None)?;
            }
            netlink.set_up(index, true)?;
            netlink.set_up(1, true)
        })
        .unwrap()
        .expect("configured");
}

/// What a person or a program gave an interface beyond its addresses: routes in the main
/// table and in table 100 (IPv4 and IPv6), a permanent neighbour, a sysctl.
pub(super) fn decorate(netns: &Netns, name: &str, gateway_v4: &str, gateway_v6: &str) {
    let index = link_index(netns, name);
    netns
        .run(|| -> std::io::Result<()> {
            let mut netlink = Netlink::open()?;
            let route = |destination: &str, len, gateway: &str, table| Route {
                destination: Some((destination.parse().unwrap(), len)),
                gateway: Some(gateway.parse().unwrap()),
                interface: index,
                ipv6: gateway.contains(':'),
                table,
                metric: None,
            };
            netlink.new_route(&route("198.18.7.0", 24, gateway_v4, RT_TABLE_MAIN))?;
            netlink.new_route(&route("198.18.8.0", 24, gateway_v4, 100))?;
            netlink.new_route(&route("2001:2:0:7::", 64, gateway_v6, RT_TABLE_MAIN))?;
            netlink.add_neighbor(index, "198.18.0.9".parse().unwrap(), &[2, 0, 0, 0, 0, 9])?;
            std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/rp_filter"), "2")
        })
        .unwrap()
        .expect("decorated");
}

/// The interface once the kernel has finished with it: its link-local address there (the
/// kernel adds it when the link comes up) and two looks 100 ms apart the same.
pub(super) fn settled(netns: &Netns, name: &str) -> InterfaceView {
    let mut last = seen(netns, name);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = seen(netns, name);
        let link_local = now
            .addresses
            .iter()
            .any(|(a, _)| matches!(a, IpAddr::V6(v6) if v6.segments()[0] == 0xfe80));
        if now == last && link_local {
            return now;
        }
        last = now;
    }
    panic!("{name} did not settle: {last:?}");
}

fn assert_rtt(netns: &Netns, target: &str, theory_ms: f64) {
    judge_rtt(target, ping_ms(netns, target), theory_ms, 0.0);
}

/// A median round trip against the specs', within [`RTT_TOLERANCE_MS`] plus `late_ms`
/// above (the emulators' median lateness on the crossings, measured in the test).
fn judge_rtt(target: &str, rtt: f64, theory_ms: f64, late_ms: f64) {
    eprintln!("ping {target}: median {rtt:.2} ms (specs {theory_ms} ms, emulators late by {late_ms:.3} ms)");
    assert!(
        (-RTT_TOLERANCE_MS..=RTT_TOLERANCE_MS + late_ms).contains(&(rtt - theory_ms)),
        "ping {target}: median {rtt:.2} ms, the specs add up to {theory_ms} ms (+-{RTT_TOLERANCE_MS}, \
         + {late_ms:.3} of the emulators' lateness)"
    );
}

fn no_record_left(netns: &Netns) {
    let inode = netns.inode().expect("inode");
    let dir = pathlab_os::runtime::runtime_dir().join("interpose");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(&format!("netns-{inode}-")))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "records left in {}: {left:?}",
        dir.display()
    );
}
