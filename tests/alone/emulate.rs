//! The tests of `emulate` that need the machine to themselves (see `alone.rs`).

mod frames;
mod iface;
mod lifecycle;
mod load;
mod swap;
mod vlan;

use crate::util::emulated::{privileged, with_server_in_h2, Lab, PATHLAB};
use crate::util::lab_spec::LabSpec;
use crate::util::late::Lateness;
use crate::util::recorded::{assert_delay_changed, judge_round_trips, recorded_pings, ECHO_FRAME};
use crate::util::{median, TempDir};
use pathlab_os::topology::{Line, H1_V4, H2_V4, H2_V6, HOST_PORT};
use pathlab_probe_driver::ping::Pinger;
use pathlab_results::recording::read_recording;
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use crate::emulate::*;

#[test]
fn delay_20ms_each_way_gives_a_40ms_ping() {
    let Some(_serial) = privileged("delay_20ms_each_way_gives_a_40ms_ping") else {
        return;
    };
    let mut lab = Lab::start("delay", "delay 20ms", &[], false);
    // The first ping also waits for ARP, which crosses the emulator twice.
    lab.ping(IpAddr::V4(H2_V4), 1, Duration::from_millis(10), 56);
    let results = lab.ping(IpAddr::V4(H2_V4), 100, Duration::from_millis(20), 56);
    let rtts = rtts_ms(&results);
    assert_eq!(rtts.len(), 100, "no ping lost on a lossless link");
    let median = median(&rtts);
    eprintln!(
        "delay 20ms each way: median ping RTT {median:.3} ms (min {:.3}, max {:.3})",
        rtts[0], rtts[99]
    );
    assert!(
        (median - 40.0).abs() <= 0.5,
        "median RTT {median:.3} ms, expected 40 +- 0.5 ms"
    );
    // IPv6 crosses too (neighbour discovery, then echo).
    let v6 = lab.ping(IpAddr::V6(H2_V6), 5, Duration::from_millis(50), 56);
    assert!(
        v6.iter().skip(1).all(|r| r.rtt.is_some()),
        "IPv6 pings: {v6:?}"
    );
    let live = lab.stats();
    assert_eq!(live.directions[0].spec, "delay 20ms");
    // Every frame came with the kernel's receive stamp, on the clock it is read against
    // (a stamp on another clock would be seconds or years off, not microseconds).
    for direction in &live.directions {
        let waited = &direction.waited;
        // One reading per stamped frame (a super-packet's segments share one).
        assert!(
            waited.packets == direction.frames_received && waited.packets > 0,
            "stamped frames: {waited:?} of {}",
            direction.frames_received
        );
        assert!(waited.max_ns < 1_000_000_000, "{waited:?}");
    }
    assert!(
        live.directions[0].forwarded >= 106,
        "stats while running: {live:?}"
    );
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The recorded truth: every ICMP echo (98-byte frames) spent 20 ms in the link.
    for dir in 0..2 {
        for record in recording.packets(dir).filter(|r| r.len_bytes == 98) {
            let departed = record.departed.expect("nothing was dropped");
            assert_eq!(
                (departed - record.arrived).as_nanos(),
                20_000_000,
                "{record:?}"
            );
        }
    }
    // What h2 received is what the emulator forwarded towards it.
    let h2 = Line::interface(&lab.line.h2, HOST_PORT).expect("h2's eth0");
    assert_eq!(
        h2.rx_packets, stats.directions[0].forwarded,
        "h2 received exactly what was forwarded"
    );
    let _ = H1_V4;
}

/// Each ping through `delay 20ms` each way is timed by the kernel (the request's transmit
/// stamp to the reply's receive stamp), and its round trip is the link's 40 ms within
/// 0.1 ms plus what the emulator measured of its own lateness (both directions' largest):
/// the pinger's wake-up delays are not in it, so it holds on a busy machine too.
#[test]
fn pings_are_timed_by_the_kernel_within_the_emulators_lateness() {
    let Some(_serial) = privileged("pings_are_timed_by_the_kernel_within_the_emulators_lateness")
    else {
        return;
    };
    let lab = Lab::start("stamps", "delay 20ms", &[], false);
    // The first pings also wait for ARP and neighbour discovery.
    lab.ping(IpAddr::V4(H2_V4), 1, Duration::from_millis(10), 56);
    lab.ping(IpAddr::V6(H2_V6), 1, Duration::from_millis(10), 56);
    let mut results = lab.ping(IpAddr::V4(H2_V4), 100, Duration::from_millis(20), 56);
    results.extend(lab.ping(IpAddr::V6(H2_V6), 20, Duration::from_millis(20), 56));
    let stats = lab.stats();
    let late_ms: f64 = stats
        .directions
        .iter()
        .map(|d| d.lateness.max_ns as f64 / 1e6)
        .sum();
    let tolerance_ms = 0.1 + late_ms;
    let (mut kernel, mut user_space) = (Vec::new(), Vec::new());
    for result in &results {
        assert_eq!(
            result.timed_by,
            Some(pathlab_probe_driver::ping::TimedBy::Kernel),
            "{result:?}"
        );
        let rtt = result.rtt.expect("no loss").as_secs_f64() * 1e3;
        let seen = result.user_space_rtt.expect("no loss").as_secs_f64() * 1e3;
        assert!(rtt <= seen, "kernel {rtt:.4} ms > user space {seen:.4} ms");
        assert!(
            (rtt - 40.0).abs() <= tolerance_ms,
            "ping {}: {rtt:.4} ms, expected 40 ms within 0.1 + {late_ms:.3} ms (the emulator's lateness)",
            result.seq
        );
        kernel.push(rtt);
        user_space.push(seen);
    }
    let extra: Vec<f64> = kernel.iter().zip(&user_space).map(|(k, u)| u - k).collect();
    let quantiles = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let q = |q| pathlab_core::quantile::of_sorted(&values, q).unwrap_or(f64::NAN);
        format!("p50 {:.4} p99 {:.4} max {:.4}", q(0.5), q(0.99), q(1.0))
    };
    eprintln!(
        "delay 20ms each way, {} pings: kernel RTT {} ms; user-space RTT {} ms; user space \
         longer by {} ms; emulator lateness max {late_ms:.3} ms (both ways)",
        results.len(),
        quantiles(kernel),
        quantiles(user_space),
        quantiles(extra),
    );
}

#[test]
fn emulate_set_changes_the_delay_within_one_ping() {
    let Some(_serial) = privileged("emulate_set_changes_the_delay_within_one_ping") else {
        return;
    };
    let mut lab = Lab::start("set", "delay 20ms", &[], true);
    let mut pinger = lab
        .line
        .h1
        .run(|| Pinger::new(IpAddr::V4(H2_V4), 56))
        .unwrap()
        .expect("socket");
    let count = 150;
    let pings = std::thread::spawn(move || {
        pinger
            .run(count, Duration::from_millis(20), Duration::from_secs(1))
            .expect("ping")
    });
    std::thread::sleep(Duration::from_millis(1500));
    let before = unix_now_ns();
    lab.set("delay 80ms");
    let after = unix_now_ns();
    let results = pings.join().expect("pinger");
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The change, judged on the recording (model time, exact): made while `set` ran, and
    // from then on every packet takes 80 ms, every packet that entered before still 20 ms,
    // both ways.
    let zero = recording
        .header
        .as_ref()
        .expect("header")
        .clock_zero_unix_ns;
    for (dir, at) in assert_delay_changed(&recording, 20, 80)
        .into_iter()
        .enumerate()
    {
        // The recording's zero and the test read the wall clock apart: 1 ms for that.
        assert!(
            before - zero <= at + 1_000_000 && at <= after - zero + 1_000_000,
            "direction {dir}: changed at {at} ns, `set` ran from {} to {} ns",
            before - zero,
            after - zero
        );
    }
    // Each ping, by the recording: both ways at the old delay (40 ms), both at the new
    // one (160 ms), or in flight across the change (100 ms); of those at most two, the
    // requests that entered in the one-way time (20 ms) before it.
    let recorded = recorded_pings(&recording, ECHO_FRAME, 0);
    assert_eq!(recorded.len(), count, "every request crossed");
    let in_link_ms: Vec<u64> = recorded
        .iter()
        .map(|p| p.in_link_ns().expect("every ping answered") / 1_000_000)
        .collect();
    let class = |ms: u64| in_link_ms.iter().filter(|&&x| x == ms).count();
    let (old, across, new) = (class(40), class(100), class(160));
    assert_eq!(old + across + new, count, "{in_link_ms:?}");
    assert!(
        across <= 2,
        "{across} pings across the change: {in_link_ms:?}"
    );
    // 1.5 s of 20 ms pings before the change, 1.5 s after.
    assert!(old >= 60 && new >= 60, "{old} old, {new} new");
    // What the pinger saw against the recording of the same packets: each round trip is
    // its two crossings' recorded time, each as late as the emulator recorded sending it,
    // and the hosts' part.
    judge_round_trips(&seen(&results), &recorded, Duration::from_millis(20));
}

#[test]
fn rtt_medians_and_the_one_way_split_match_the_emulators_delays() {
    let Some(_serial) = privileged("rtt_medians_and_the_one_way_split_match_the_emulators_delays")
    else {
        return;
    };
    let mut lab = Lab::start("rtt", "delay 10ms", &["--reverse", "delay 30ms"], true);
    let report = with_server_in_h2(&lab, |client| {
        client.round_trip(Duration::from_millis(10), 64, 300)
    });
    let (stats, _) = lab.stop();
    let ms = |ns: u64| ns as f64 / 1e6;
    eprintln!(
        "rtt through delay 10ms / 30ms: p50 {:.3} ms, up p50 {:.3}, down p50 {:.3}, offset {:?} {}",
        ms(report.rtt.p50_ns),
        ms(report.up.p50_ns),
        ms(report.down.p50_ns),
        report.offset_basis,
        report.clock_offset_ns
    );
    assert_eq!(report.replies, 300, "no loss");
    assert_eq!(report.reflector_received, 300);
    // The emulator's truth: 10 + 30 ms in the links, and its median lateness each way as
    // it measured it; the rest is two kernel stacks.
    let late_ms = Lateness::of_stats(&stats).round_trip_median_ms();
    assert!(
        (-0.2..=0.2 + late_ms).contains(&(ms(report.rtt.p50_ns) - 40.0)),
        "median RTT {:.3} ms, the emulator late by {late_ms:.3} ms",
        ms(report.rtt.p50_ns)
    );
    assert!(
        (ms(report.up.p50_ns) - 10.0).abs() <= 1.0,
        "up {:.3} ms",
        ms(report.up.p50_ns)
    );
    assert!(
        (ms(report.down.p50_ns) - 30.0).abs() <= 1.0,
        "down {:.3} ms",
        ms(report.down.p50_ns)
    );
    assert_conservation(&stats);
}

#[test]
fn a_ping_workload_sees_the_delay_of_both_directions_and_the_loss() {
    let Some(_serial) =
        privileged("a_ping_workload_sees_the_delay_of_both_directions_and_the_loss")
    else {
        return;
    };
    let dir = TempDir::new("lab-ping");
    let spec = dir.path("ping.toml");
    // The link is a measured path's (`twin = FILE`, read beside the spec): its up spec
    // from h1 to h2, its down spec back.
    std::fs::write(
        dir.path("line.toml"),
        pathlab_twin::file::EXAMPLE
            .replace(
                "delay 10ms quantiles 0 1ms 3ms loss 1%",
                "delay 10ms loss 20%",
            )
            .replace("spec = \"delay 10ms\"", "spec = \"delay 25ms\""),
    )
    .expect("write the twin");
    LabSpec::new("ping", "4s")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("twin", "line.toml")
        .workload("echo", "ping", "h1", "h2")
        .with("interval", "20ms")
        .with("duration", "3s")
        .write(&spec);
    let out = dir.path("out");
    let output = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("pathlab lab runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let run = read_lab_run(&out.join("result.json"));
    let pathlab_results::lab::LabOutcome::Ping(report) = &run.workloads[0].outcome else {
        panic!("{:?}", run.workloads[0].outcome);
    };
    assert_eq!(report.sent, 150, "3 s every 20 ms");
    // 10 + 25 ms, plus microseconds of forwarding.
    let min = report.rtt.min_ns as f64 / 1e6;
    assert!((35.0..36.0).contains(&min), "{report:?}");
    assert!(report.rtt.p50_ns as f64 / 1e6 < 36.0, "{report:?}");
    // What the emulator dropped is what ping missed: the loss is the truth's, not a guess.
    let file = std::fs::File::open(out.join("link-h1-h2.jsonl")).expect("recorded");
    let recording = read_recording(std::io::BufReader::new(file)).expect("reads");
    // The echo requests: 56 B of payload in 8 B of ICMP, 20 of IPv4 and 14 of Ethernet
    // (the link also carries the kernel's own IPv6 chatter).
    let dropped = recording
        .packets(0)
        .filter(|p| p.len_bytes == 98 && p.dropped.is_some())
        .count() as u64;
    assert!(dropped > 0);
    assert_eq!(report.sent - report.received, dropped, "{report:?}");
    assert_eq!(report.series_sent_ns.len() as u64, report.received);
}

/// The network-namespace inodes some process or descriptor still holds.
fn live_netns_inodes() -> std::collections::HashSet<String> {
    let mut inodes = std::collections::HashSet::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.path();
        for link in [pid.join("ns/net")] {
            if let Ok(target) = std::fs::read_link(link) {
                inodes.insert(target.to_string_lossy().into_owned());
            }
        }
        for fd in std::fs::read_dir(pid.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let target = target.to_string_lossy().into_owned();
                if target.starts_with("net:[") {
                    inodes.insert(target);
                }
            }
        }
    }
    inodes
}

/// Now on the wall clock, ns since the Unix epoch (a recording's `clock_zero_unix_ns` is
/// on it).
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

fn root_interfaces() -> Vec<String> {
    let mut netlink = pathlab_os::netlink::Netlink::open().expect("netlink");
    let mut names: Vec<String> = netlink
        .links()
        .expect("links")
        .into_iter()
        .map(|l| l.name)
        .collect();
    names.sort();
    names
}
