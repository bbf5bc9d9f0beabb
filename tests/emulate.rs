//! End-to-end tests of `pathlab emulate`, `pathlab shell` and `pathlab lab clean` on
//! namespaces: h1 - r - h2 with the emulator in r, checked against theory and against the
//! emulator's own recorded truth.
//!
//! They need CAP_NET_ADMIN. Without it they fail when `CI=true` (CI runs as root, so a
//! missing capability is a broken CI, not a reason to skip) and skip with a message
//! elsewhere.

use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use pathlab_core_driver::emulator::EmulatorStats;
use pathlab_core_driver::port::{PacketPort, Port};
use pathlab_os::topology::{Check, Line, H1_V4, H2_V4, H2_V6, HOST_PORT, R_PORT_H1, R_PORT_H2};
use pathlab_probe::owd::QueueVerdict;
use pathlab_probe_driver::ping::{PingResult, Pinger};
use pathlab_results::recording::read_recording;

mod iface;
mod vlan;

use crate::util;
use crate::util::emulated::{
    pathlab, privileged, privileged_paired, privileged_shared, run_quick_recipe,
    run_quick_recipe_points, with_server_in_h2, Lab, PATHLAB,
};
use crate::util::lab_spec::LabSpec;
use crate::util::late::Lateness;
use crate::util::recorded::{
    assert_delay_changed, judge_round_trips, recorded_delay_trend, recorded_pings, SeenPing,
    ECHO_FRAME,
};
use crate::util::{median, TempDir};

/// 10 Mbit/s of 1514-byte frames carrying 1448 bytes of TCP payload each (timestamps on),
/// in bytes per second: what a bulk transfer can get through `rate 10mbit`.
const TCP_GOODPUT_10MBIT: f64 = 10e6 / 8.0 * 1448.0 / 1514.0;

/// The median RTT of 20 pings from h1 to h2, in ms, before any load.
fn base_rtt_ms(lab: &Lab) -> f64 {
    median(&rtts_ms(&lab.ping(
        IpAddr::V4(H2_V4),
        20,
        Duration::from_millis(10),
        56,
    )))
}

fn rtts_ms(results: &[PingResult]) -> Vec<f64> {
    let mut rtts: Vec<f64> = results
        .iter()
        .filter_map(|r| r.rtt)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    rtts.sort_by(f64::total_cmp);
    rtts
}

/// The pings as the pinger saw them.
fn seen(results: &[PingResult]) -> Vec<SeenPing> {
    results
        .iter()
        .map(|r| SeenPing {
            sent: Some(r.sent - results[0].sent),
            rtt: r.rtt,
        })
        .collect()
}

/// Every direction's truth adds up: what entered the link left it or was dropped (nothing
/// is inside once stopped), and what left was sent.
fn assert_conservation(stats: &EmulatorStats) {
    for d in &stats.directions {
        assert_eq!(
            d.link.packets_in,
            d.packets_received + d.link.duplicated,
            "{} -> {}: link saw every packet",
            d.from,
            d.to
        );
        assert_eq!(
            d.link.packets_in,
            d.link.packets_out + d.link.dropped_total() + d.in_flight,
            "{} -> {}: in = out + dropped + inside",
            d.from,
            d.to
        );
        assert_eq!(
            d.link.packets_out,
            d.forwarded + d.send_errors,
            "{} -> {}: out = forwarded + failed",
            d.from,
            d.to
        );
    }
}

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

/// The two-sided 99.9% binomial interval of a count of `n` trials with probability `p`
/// (normal approximation; z = 3.29).
fn binomial_bound(n: usize, p: f64) -> (f64, f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (mean - 3.29 * sd, mean + 3.29 * sd)
}

#[test]
fn loss_2_percent_each_way_matches_binomial_and_the_recorded_drops() {
    let Some(_serial) =
        privileged_paired("loss_2_percent_each_way_matches_binomial_and_the_recorded_drops")
    else {
        return;
    };
    let mut lab = Lab::start("loss", "loss 2%", &["--seed", "7"], true);
    let count = 5000;
    let results = lab.ping(IpAddr::V4(H2_V4), count, Duration::from_millis(1), 56);
    let lost = results.iter().filter(|r| r.rtt.is_none()).count();
    // A ping is lost if its request or its reply is: 1 - 0.98^2.
    let p = 1.0 - 0.98f64 * 0.98;
    let (low, high) = binomial_bound(count, p);
    eprintln!("loss 2% each way: {lost} of {count} pings lost, 99.9% bound {low:.0}..{high:.0}");
    assert!(
        (low..=high).contains(&(lost as f64)),
        "{lost} of {count} pings lost, 99.9% bound {low:.0}..{high:.0}"
    );
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The truth: each lost ping is exactly one dropped echo request or reply.
    let dropped_echoes: usize = (0..2)
        .map(|dir| {
            recording
                .packets(dir)
                .filter(|r| r.len_bytes == ECHO_FRAME && r.dropped.is_some())
                .count()
        })
        .sum();
    assert_eq!(
        dropped_echoes, lost,
        "recorded drops of echo frames = lost pings"
    );
    let requests = recording
        .packets(0)
        .filter(|r| r.len_bytes == ECHO_FRAME)
        .count();
    assert_eq!(requests, count, "every request was recorded");
    for d in &stats.directions {
        let (low, high) = binomial_bound(d.link.packets_in as usize, 0.02);
        let dropped = d.link.dropped_total() as f64;
        assert!(
            (low..=high).contains(&dropped),
            "{} -> {}: {dropped} of {} dropped",
            d.from,
            d.to,
            d.link.packets_in
        );
    }
}

/// Bytes per second a TCP bulk transfer from h1 to h2 achieves over `[warmup, duration]`,
/// with ping RTTs taken during the transfer (after the warm-up).
fn bulk_transfer_with_pings(
    lab: &Lab,
    duration: Duration,
    warmup: Duration,
) -> (f64, Vec<PingResult>) {
    // Windows large enough that the sender is limited by its congestion window, not by
    // the receiver: the queue fills only if more than BDP + 100 packets may be in flight
    // (Linux starts receive windows at 64 KB, 45 packets).
    lab.line
        .h2
        .set_sysctl("net/ipv4/tcp_rmem", "4096 4194304 8388608")
        .expect("tcp_rmem");
    lab.line
        .h1
        .set_sysctl("net/ipv4/tcp_wmem", "4096 4194304 8388608")
        .expect("tcp_wmem");
    // Loss-based congestion control, as in the bufferbloat experiments: BBR (this machine's
    // default) keeps its own queue short whatever the buffer. Reno, because a namespace may
    // only choose among tcp_allowed_congestion_control, which always has it.
    lab.line
        .h1
        .set_sysctl("net/ipv4/tcp_congestion_control", "reno")
        .expect("reno");
    let transfer = lab
        .line
        .start_tcp_bulk(5201, duration, warmup, Check::EveryByte)
        .expect("transfer starts");
    std::thread::sleep(warmup);
    let ping_time = duration
        .saturating_sub(warmup)
        .saturating_sub(Duration::from_millis(500));
    let pings = lab.ping(
        IpAddr::V4(H2_V4),
        (ping_time.as_millis() / 50) as usize,
        Duration::from_millis(50),
        56,
    );
    (transfer.finish().expect("transfer"), pings)
}

#[test]
fn rate_10mbit_limit_100_fills_the_link_and_the_queue() {
    let Some(_serial) = privileged_paired("rate_10mbit_limit_100_fills_the_link_and_the_queue")
    else {
        return;
    };
    let mut lab = Lab::start("rate", "rate 10mbit limit 100", &["--reverse", ""], true);
    let base = base_rtt_ms(&lab);
    let (goodput, pings) =
        bulk_transfer_with_pings(&lab, Duration::from_secs(12), Duration::from_secs(2));
    let ideal = TCP_GOODPUT_10MBIT;
    let ratio = goodput / ideal;
    eprintln!(
        "rate 10mbit limit 100: goodput {:.3} Mbit/s = {:.1}% of {:.3}",
        goodput * 8e-6,
        ratio * 100.0,
        ideal * 8e-6
    );
    assert!(
        (0.93..=1.0).contains(&ratio),
        "goodput {:.3} Mbit/s = {:.1}% of {:.3}",
        goodput * 8e-6,
        ratio * 100.0,
        ideal * 8e-6
    );
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The sampled queue length: every 10 ms, never above the limit, full at times.
    let samples: Vec<(pathlab_core::Instant, u32, u64)> = recording.queue_samples(0).collect();
    assert!(samples
        .windows(2)
        .all(|w| (w[1].0 - w[0].0).as_nanos() == 10_000_000));
    let queue_peak = samples.iter().map(|s| s.1).max().expect("samples");
    assert!(
        (90..=100).contains(&queue_peak),
        "queue peak {queue_peak} packets"
    );
    // The pings under load are the last requests that crossed (the base RTT's came first).
    let recorded = recorded_pings(&recording, ECHO_FRAME, 0);
    let under_load = &recorded[recorded.len() - pings.len()..];
    // Against theory, in the recording (model time): the queue's worth of delay, 100 x
    // 1514 x 8 / 10e6 = 121.1 ms, on top of the idle crossing, at the p95 (Reno's sawtooth
    // keeps the queue full only at its peaks).
    let full_queue_ms = 100.0 * 1514.0 * 8.0 / 10e6 * 1e3;
    let mut in_link_ms: Vec<f64> = under_load
        .iter()
        .filter_map(|p| Some(p.in_link_ns()? as f64 / 1e6))
        .collect();
    in_link_ms.sort_by(f64::total_cmp);
    let idle_ms = recorded[0].in_link_ns().expect("the first base ping") as f64 / 1e6;
    let peak = in_link_ms[in_link_ms.len() * 95 / 100];
    let rtts = rtts_ms(&pings);
    eprintln!(
        "rate 10mbit limit 100: base RTT {base:.2} ms; under load RTT median {:.1} ms, p95 {:.1} ms; recorded in the link {idle_ms:.3} ms idle, p95 {peak:.1} ms",
        median(&rtts),
        rtts[rtts.len() * 95 / 100]
    );
    assert!(
        ((peak - idle_ms) / full_queue_ms - 1.0).abs() <= 0.10,
        "recorded p95 under load {peak:.1} ms, idle {idle_ms:.3} ms, expected + {full_queue_ms:.1} ms within 10%"
    );
    // What the pinger saw is what the emulator recorded for the same packets, the request
    // through the queue and the reply back (direction 1), plus the hosts' part, within
    // the lateness the emulator measured of itself and the pinger's own.
    judge_round_trips(
        &seen(&pings),
        under_load,
        &Lateness::of_stats(&stats),
        Duration::from_millis(50),
    );
}

#[test]
fn codel_keeps_the_rtt_under_load_near_the_base() {
    let Some(_serial) = privileged_paired("codel_keeps_the_rtt_under_load_near_the_base") else {
        return;
    };
    let mut lab = Lab::start(
        "codel",
        "rate 10mbit limit 100 queue codel",
        &["--reverse", ""],
        true,
    );
    let base = base_rtt_ms(&lab);
    let (goodput, pings) =
        bulk_transfer_with_pings(&lab, Duration::from_secs(10), Duration::from_secs(2));
    let rtts = rtts_ms(&pings);
    let median_under_load = median(&rtts);
    eprintln!(
        "codel: base {base:.2} ms, median under load {median_under_load:.2} ms, p95 {:.2} ms, goodput {:.1}%",
        util::quantile(&rtts, 0.95),
        goodput / TCP_GOODPUT_10MBIT * 100.0
    );
    // "A few CoDel targets": within 4 x 5 ms of the base (tail drop sits at +121 ms).
    assert!(
        median_under_load - base <= 20.0,
        "median RTT under load {median_under_load:.1} ms, base {base:.2} ms"
    );
    let ideal = TCP_GOODPUT_10MBIT;
    assert!(
        goodput / ideal >= 0.85,
        "CoDel still fills the link: {:.1}%",
        goodput / ideal * 100.0
    );
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
    assert!(
        stats.directions[0]
            .link
            .dropped(pathlab_core::DropReason::Codel)
            > 0,
        "CoDel dropped"
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
    // its two crossings' recorded time and the hosts' part, within the lateness the
    // emulator measured of itself and the pinger's own.
    judge_round_trips(
        &seen(&results),
        &recorded,
        &Lateness::of_stats(&stats),
        Duration::from_millis(20),
    );
}

/// Now on the wall clock, ns since the Unix epoch (a recording's `clock_zero_unix_ns` is
/// on it).
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
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

#[test]
fn a_killed_emulator_leaves_nothing_once_lab_clean_ran() {
    let Some(_serial) = privileged("a_killed_emulator_leaves_nothing_once_lab_clean_ran") else {
        return;
    };
    let interfaces_before = root_interfaces();
    let mut lab = Lab::start("kill", "delay 5ms", &[], false);
    let inodes: Vec<String> = [&lab.line.h1, &lab.line.r, &lab.line.h2]
        .iter()
        .map(|ns| format!("net:[{}]", ns.inode().expect("inode")))
        .collect();
    let socket = pathlab_os::runtime::control_socket_path(&lab.name);
    assert!(
        socket.exists(),
        "control socket {} while running",
        socket.display()
    );
    let mut child = lab.emulator.take().expect("running");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(socket.exists(), "SIGKILL leaves the socket file");
    let stale = pathlab(&["emulate", "stats", "--name", &lab.name]);
    assert_eq!(
        stale.status.code(),
        Some(2),
        "a dead emulator is reported as not running"
    );
    assert!(String::from_utf8_lossy(&stale.stderr).contains("no emulator named"));
    let clean = pathlab(&["lab", "clean"]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(
        String::from_utf8_lossy(&clean.stdout).contains(&socket.display().to_string()),
        "clean names what it removed"
    );
    assert!(!socket.exists(), "lab clean removed the stale socket");
    let locks = pathlab_os::runtime::runtime_dir().join("locks");
    let r_inode = lab.line.r.inode().expect("inode");
    let leftover_locks: Vec<_> = std::fs::read_dir(&locks)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("netns-{r_inode}-"))
        })
        .collect();
    assert!(
        leftover_locks.is_empty(),
        "locks of the killed emulator: {leftover_locks:?}"
    );
    drop(lab);
    let live = live_netns_inodes();
    for inode in &inodes {
        assert!(!live.contains(inode), "namespace {inode} is still held");
    }
    assert_eq!(
        root_interfaces(),
        interfaces_before,
        "no interface was left in the root namespace"
    );
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pathlab"))
        .count();
    assert_eq!(named, 0, "no named namespace");
}

#[test]
fn bad_interfaces_busy_interfaces_and_bad_specs_exit_2_and_leave_nothing() {
    let Some(_serial) =
        privileged("bad_interfaces_busy_interfaces_and_bad_specs_exit_2_and_leave_nothing")
    else {
        return;
    };
    let lab = Lab::start("busy", "delay 1ms", &[], false);
    let run_in_r = |args: &[&str]| {
        lab.line
            .r
            .command(PATHLAB)
            .args(args)
            .output()
            .expect("runs")
    };
    let sockets_before = std::fs::read_dir(pathlab_os::runtime::runtime_dir().join("emulate"))
        .map_or(0, Iterator::count);
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "emulate",
                "--between",
                "nosuch0",
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad1",
            ],
            "no interface named 'nosuch0'",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad2",
            ],
            "is busy",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H2,
                "delay fast",
                "--name",
                "bad3",
            ],
            "expected a time like 25ms",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H1,
                "delay 1ms",
                "--name",
                "bad4",
            ],
            "two different interfaces",
        ),
        (
            &[
                "emulate",
                "--between",
                "lo",
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad5",
            ],
            "loopback",
        ),
        (
            &[
                "emulate",
                "--between",
                "x",
                "y",
                "delay 1ms",
                "--name",
                &lab.name,
            ],
            "already running",
        ),
    ];
    for (args, message) in cases {
        let output = run_in_r(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: stderr {stderr:?} should say {message:?}"
        );
    }
    let sockets_after = std::fs::read_dir(pathlab_os::runtime::runtime_dir().join("emulate"))
        .map_or(0, Iterator::count);
    assert_eq!(
        sockets_after, sockets_before,
        "failed starts leave no control socket"
    );
    // The running emulator was not disturbed.
    assert!(lab
        .ping(IpAddr::V4(H2_V4), 3, Duration::from_millis(10), 56)
        .iter()
        .skip(1)
        .all(|r| r.rtt.is_some()));
}

#[test]
fn without_cap_net_admin_emulate_and_shell_refuse_before_touching_anything() {
    // Shared: refused as nobody before anything is made; nothing to collide with.
    let Some(_serial) = privileged_shared(
        "without_cap_net_admin_emulate_and_shell_refuse_before_touching_anything",
    ) else {
        return;
    };
    for args in [
        &[
            "emulate",
            "--between",
            "a",
            "b",
            "delay 1ms",
            "--name",
            "unpriv",
        ][..],
        &["shell", "delay 1ms", "--", "true"][..],
        &["lab", "clean"][..],
    ] {
        util::emulated::refused_without_cap_net_admin(args);
    }
    assert!(!pathlab_os::runtime::control_socket_path("unpriv").exists());
}

#[test]
fn shell_runs_a_program_behind_the_link_and_nested_shells_reach_out_through_nat() {
    let Some(_serial) =
        privileged("shell_runs_a_program_behind_the_link_and_nested_shells_reach_out_through_nat")
    else {
        return;
    };
    // Everything in a namespace of the test's own: the shells' outside ends and the server.
    let outer = pathlab_os::netns::Netns::new().expect("namespace");
    // A new namespace takes IPv4 forwarding from the host's (net.core.devconf_inherit_init_net
    // 0), which a container engine turns on: off here, so turning it back off is seen.
    outer
        .set_sysctl("net/ipv4/ip_forward", "0")
        .expect("forwarding off in the test's namespace");
    let listener = outer
        .run(|| std::net::TcpListener::bind("0.0.0.0:7007"))
        .unwrap()
        .expect("listen");
    let server = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for _ in 0..2 {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = std::io::BufReader::new(&stream);
            let mut line = String::new();
            reader.read_line(&mut line).expect("read");
            (&stream).write_all(b"pong\n").expect("reply");
            lines.push(line.trim().to_owned());
        }
        lines
    });
    let dir = TempDir::new("shell");
    let record = dir.path("shell.jsonl");
    // One shell talks to the server; inside it, a nested shell does too, through two links
    // and the outer shell's NAT. Each prints the reply; the exit code comes back out.
    let script = r#"
        exec 3<>/dev/tcp/$PATHLAB_SHELL_OUTSIDE/7007; echo outer >&3; read reply <&3; echo "outer got $reply"
        export SERVER=$PATHLAB_SHELL_OUTSIDE
        "$PATHLAB" shell 'delay 5ms' -- bash -c 'exec 3<>/dev/tcp/$SERVER/7007; echo inner >&3; read reply <&3; echo "inner got $reply"; exit 3'
        exit $(( $? + 4 ))
    "#;
    let output = outer
        .command(PATHLAB)
        .args(["shell", "delay 10ms", "--record"])
        .arg(&record)
        .args(["--", "bash", "-c", script])
        .env("PATHLAB", PATHLAB)
        .output()
        .expect("pathlab shell runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(7),
        "exit code of the program (3 + 4); stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("outer got pong") && stdout.contains("inner got pong"),
        "{stdout}"
    );
    assert_eq!(server.join().expect("server"), vec!["outer", "inner"]);
    // The recorded truth: every packet spent exactly 10 ms in the outer link.
    let recording = read_recording(std::io::BufReader::new(
        std::fs::File::open(&record).expect("recording"),
    ))
    .expect("reads");
    let mut packets = 0;
    for dir in 0..2 {
        for record in recording.packets(dir) {
            assert!(record.dropped.is_none(), "nothing is dropped: {record:?}");
            // Packets still inside when the program exited have no departure.
            if let Some(departed) = record.departed {
                assert_eq!((departed - record.arrived).as_nanos(), 10_000_000);
                packets += 1;
            }
        }
    }
    assert!(
        packets >= 20,
        "both connections crossed the outer link: {packets} packets"
    );
    // Nothing is left in the namespace: no TUN device, no NAT table, forwarding back off.
    let interfaces: Vec<String> = outer
        .run(|| pathlab_os::netlink::Netlink::open().and_then(|mut n| n.links()))
        .unwrap()
        .expect("links")
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(interfaces, vec!["lo"], "only loopback is left");
    assert!(
        outer
            .run(pathlab_os::nat::tables)
            .unwrap()
            .expect("tables")
            .is_empty(),
        "NAT tables removed"
    );
    let forwarding = outer
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward"))
        .unwrap()
        .expect("sysctl");
    assert_eq!(forwarding.trim(), "0", "forwarding restored");
}

#[test]
fn vlan_qinq_and_unknown_frames_cross_byte_for_byte() {
    // Shared: it checks bytes, not time, on a line and an emulator of its own (`t{pid}-frames`).
    let Some(_serial) = privileged_shared("vlan_qinq_and_unknown_frames_cross_byte_for_byte")
    else {
        return;
    };
    let mut lab = Lab::start("frames", "delay 1ms", &[], false);
    let open = |ns: &pathlab_os::netns::Netns| {
        ns.run(|| PacketPort::open(HOST_PORT))
            .unwrap()
            .expect("raw port")
    };
    let (h1, mut h2) = (open(&lab.line.h1), open(&lab.line.h2));
    let source = [0x02, 0, 0, 0, 0, 0x01];
    let frame = |tags: &[u8], ethertype: [u8; 2], fill: u8| {
        let mut frame = vec![0xff; 6];
        frame.extend_from_slice(&source);
        frame.extend_from_slice(tags);
        frame.extend_from_slice(&ethertype);
        frame.extend(std::iter::repeat_n(fill, 64));
        frame
    };
    let sent = vec![
        frame(&[0x81, 0x00, 0x00, 0x64], [0x08, 0x00], 1), // VLAN 100
        frame(
            &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
            [0x86, 0xdd],
            2,
        ), // QinQ 10/20
        frame(&[], [0x88, 0xb5], 3),                       // local experimental
    ];
    let mut h1_out = h1.transmitter().expect("h1's sending half");
    for frame in &sent {
        h1_out.send(frame).expect("send from h1");
    }
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while received.len() < sent.len() && std::time::Instant::now() < deadline {
        h2.receive(
            64,
            &mut pathlab_os::buffers::BufferPool::default(),
            &mut |frame| {
                if frame[6..12] == source {
                    received.push(frame);
                }
            },
        )
        .expect("receive at h2");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(received, sent, "frames arrive as sent, in order");
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
}

/// The Enhanced Packet Blocks of a pcapng file: (interface, flags, comment, length).
fn pcapng_packets(bytes: &[u8]) -> Vec<(u32, u32, Option<String>, usize)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, total) = (u32_at(at), u32_at(at + 4) as usize);
        assert_eq!(
            u32_at(at + total - 4) as usize,
            total,
            "block lengths agree"
        );
        if kind == 6 {
            let body = at + 8;
            let captured = u32_at(body + 12) as usize;
            let mut option = body + 20 + captured.next_multiple_of(4);
            let (mut flags, mut comment) = (0, None);
            while option < at + total - 4 {
                let code = u16::from_le_bytes([bytes[option], bytes[option + 1]]);
                let len = u16::from_le_bytes([bytes[option + 2], bytes[option + 3]]) as usize;
                let value = &bytes[option + 4..option + 4 + len];
                match code {
                    0 => break,
                    1 => comment = Some(String::from_utf8_lossy(value).into_owned()),
                    2 => flags = u32::from_le_bytes(value.try_into().unwrap()),
                    _ => {}
                }
                option += 4 + len.next_multiple_of(4);
            }
            packets.push((u32_at(body), flags, comment, captured));
        }
        at += total;
    }
    packets
}

/// The data of the outbound packets written on `interface`, in file (send) order.
fn pcapng_outbound(bytes: &[u8], interface: u32) -> Vec<&[u8]> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, total) = (u32_at(at), u32_at(at + 4) as usize);
        if kind == 6 && u32_at(at + 8) == interface {
            let captured = u32_at(at + 20) as usize;
            let data = &bytes[at + 28..at + 28 + captured];
            let options = at + 28 + captured.next_multiple_of(4);
            // The first option is epb_flags: 2 = outbound.
            if u16::from_le_bytes([bytes[options], bytes[options + 1]]) == 2
                && u32_at(options + 4) == 0b10
            {
                packets.push(data);
            }
        }
        at += total;
    }
    packets
}

#[test]
fn pcap_holds_what_was_forwarded_and_what_was_dropped_with_the_reason() {
    let Some(_serial) =
        privileged("pcap_holds_what_was_forwarded_and_what_was_dropped_with_the_reason")
    else {
        return;
    };
    let dir = TempDir::new("pcap-file");
    let pcap = dir.path("capture.pcapng");
    let pcap_arg = pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "pcap",
        "loss 30%",
        &["--pcap", &pcap_arg, "--seed", "3"],
        true,
    );
    lab.ping(IpAddr::V4(H2_V4), 200, Duration::from_millis(2), 56);
    let (stats, _) = lab.stop();
    let packets = pcapng_packets(&std::fs::read(&pcap).expect("capture written"));
    for (index, d) in stats.directions.iter().enumerate() {
        let out_interface = 1 - index as u32;
        let forwarded = packets
            .iter()
            .filter(|p| p.0 == out_interface && p.1 == 0b10)
            .count();
        assert_eq!(
            forwarded as u64, d.forwarded,
            "{} -> {}: forwarded packets in the capture",
            d.from, d.to
        );
        let reason = format!("dropped {} -> {}: loss", d.from, d.to);
        let dropped = packets
            .iter()
            .filter(|p| {
                p.0 == index as u32 && p.1 == 0b01 && p.2.as_deref() == Some(reason.as_str())
            })
            .count();
        assert_eq!(
            dropped as u64,
            d.link.dropped_total(),
            "{reason}: drops in the capture"
        );
        assert!(
            dropped > 20,
            "30% of the pings' packets were dropped: {dropped}"
        );
    }
    if let Ok(tshark) = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "frame.comment", "-T", "fields", "-e", "frame.comment"])
        .output()
    {
        // Where tshark is installed, it reads the file and sees the drops too.
        assert!(
            tshark.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&tshark.stderr)
        );
        let comments = String::from_utf8_lossy(&tshark.stdout).lines().count() as u64;
        let drops: u64 = stats
            .directions
            .iter()
            .map(|d| d.link.dropped_total())
            .sum();
        assert_eq!(comments, drops, "tshark lists every drop");
    }
}

/// A counter of `/proc/net/snmp` (`Tcp`, `RetransSegs`) as seen from inside `netns`.
fn snmp(netns: &pathlab_os::netns::Netns, group: &str, name: &str) -> u64 {
    let text = netns
        .run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))
        .unwrap()
        .expect("snmp");
    let mut lines = text.lines().filter(|l| l.starts_with(&format!("{group}:")));
    let (names, values) = (lines.next().expect("names"), lines.next().expect("values"));
    let index = names
        .split_whitespace()
        .position(|n| n == name)
        .expect("counter exists");
    values
        .split_whitespace()
        .nth(index)
        .expect("value")
        .parse()
        .expect("number")
}

#[test]
fn tcp_through_a_delay_only_link_goes_out_as_gso_and_arrives_intact() {
    let Some(_serial) =
        privileged("tcp_through_a_delay_only_link_goes_out_as_gso_and_arrives_intact")
    else {
        return;
    };
    let mut lab = Lab::start("gso", "delay 5ms", &[], true);
    let goodput = lab
        .line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(3),
            Duration::from_millis(500),
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("transfer");
    let (stats, _) = lab.stop();
    assert_conservation(&stats);
    // The receiver checked every byte against the pattern the sender wrote; header or
    // length errors would show in h2's counters.
    assert_eq!(stats.directions[0].link.dropped_total(), 0);
    for (group, counter) in [
        ("Tcp", "InCsumErrors"),
        ("Tcp", "InErrs"),
        ("Ip", "InHdrErrors"),
        ("Ip", "InDiscards"),
    ] {
        assert_eq!(
            snmp(&lab.line.h2, group, counter),
            0,
            "{group} {counter} at h2"
        );
    }
    // Segments left as super-packets: h2 received fewer packets than wire frames.
    let h2 = Line::interface(&lab.line.h2, HOST_PORT).expect("h2");
    let forwarded = stats.directions[0].forwarded;
    eprintln!(
        "delay 5ms: goodput {:.2} Gbit/s, {forwarded} segments forwarded as {} packets",
        goodput * 8e-9,
        h2.rx_packets
    );
    assert!(
        h2.rx_packets * 2 < forwarded,
        "{} packets at h2 for {forwarded} segments",
        h2.rx_packets
    );
}

#[test]
fn corrupted_segments_fail_their_checksum_at_the_receiver_and_tcp_recovers() {
    let Some(_serial) =
        privileged("corrupted_segments_fail_their_checksum_at_the_receiver_and_tcp_recovers")
    else {
        return;
    };
    let mut lab = Lab::start(
        "corrupt",
        "delay 1ms corrupt 1%",
        &["--reverse", "delay 1ms"],
        true,
    );
    // The receiver checks every byte: corruption must never reach the application.
    lab.line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(2),
            Duration::ZERO,
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("intact transfer");
    let (stats, _) = lab.stop();
    let corrupted = stats.directions[0].link.corrupted;
    let checksum_errors = snmp(&lab.line.h2, "Tcp", "InCsumErrors");
    eprintln!("corrupt 1%: {corrupted} segments corrupted, h2 counted {checksum_errors} TCP checksum errors");
    assert!(corrupted > 10, "{corrupted}");
    // A corrupted segment fails its checksum at h2 (a flip in the IP header fails that
    // one instead) and is counted, unless TCP discards it unread first: a duplicate that is
    // out of window is dropped before its checksum is checked. So every error is a
    // corrupted segment, and nearly every corrupted segment is an error.
    let ip_errors =
        snmp(&lab.line.h2, "Ip", "InHdrErrors") + snmp(&lab.line.h2, "Ip", "InAddrErrors");
    let errors = checksum_errors + ip_errors;
    assert!(
        errors <= corrupted,
        "{errors} errors for {corrupted} corrupted segments"
    );
    assert!(
        errors as f64 >= 0.98 * corrupted as f64,
        "TCP {checksum_errors} + IP {ip_errors} errors for {corrupted} corrupted segments"
    );
}

/// A one-way test upwards from h1 to a server in h2.
fn owd_through(
    lab: &Lab,
    rate_bps: u64,
    size: u32,
    count: u64,
) -> pathlab_probe::owd::OneWayResult {
    with_server_in_h2(lab, |client| {
        client.one_way(
            pathlab_probe::control::Direction::Up,
            rate_bps,
            size,
            count,
            100,
        )
    })
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
    // The emulator's truth: 10 + 30 ms in the links; the rest is two kernel stacks.
    assert!(
        (ms(report.rtt.p50_ns) - 40.0).abs() <= 0.2,
        "median RTT {:.3} ms",
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
fn owd_sees_the_queue_the_emulator_builds_and_its_losses_exactly() {
    let Some(_serial) =
        privileged_paired("owd_sees_the_queue_the_emulator_builds_and_its_losses_exactly")
    else {
        return;
    };
    // Frames of 1200-byte probes: 1200 + 8 UDP + 20 IP + 14 Ethernet.
    let frame = 1242;
    for (rate, building) in [(15_000_000u64, true), (5_000_000, false)] {
        let mut lab = Lab::start("owd-rate", "rate 10mbit", &["--reverse", ""], true);
        let count = rate * 4 / (1200 * 8); // 4 s
        let result = owd_through(&lab, rate, 1200, count);
        let (_, recording) = lab.stop();
        let dropped = recording
            .packets(0)
            .filter(|r| r.len_bytes == frame && r.dropped.is_some())
            .count() as u64;
        eprintln!(
            "owd at {} Mbit/s into rate 10mbit: verdict {:?}, trend {:.0} us/s, rose {:.1} ms, lost {} (emulator dropped {dropped})",
            rate / 1_000_000,
            result.owd.verdict,
            result.owd.trend_us_per_s,
            result.owd.queue_growth_ns as f64 / 1e6,
            result.sequence.lost
        );
        assert_eq!(
            result.sequence.lost, dropped,
            "lost probes = the emulator's drops"
        );
        let expected = if building {
            QueueVerdict::Building
        } else {
            QueueVerdict::NotBuilding
        };
        assert_eq!(result.owd.verdict, expected, "{:?}", result.owd);
        if building {
            assert!(dropped > 0, "the buffer overflowed");
        } else {
            assert_eq!(dropped, 0);
        }
    }
}

#[test]
fn owd_loss_duplicates_and_reordering_equal_the_recorded_truth() {
    let Some(_serial) =
        privileged_paired("owd_loss_duplicates_and_reordering_equal_the_recorded_truth")
    else {
        return;
    };
    let dir = TempDir::new("owd-truth-pcap");
    let lab_pcap = dir.path("probes.pcapng");
    let pcap_arg = lab_pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "owd-truth",
        "delay 5ms loss 2% duplicate 2% reorder 5%",
        &["--reverse", "", "--seed", "11", "--pcap", &pcap_arg],
        true,
    );
    let size = 200;
    let result = owd_through(&lab, 2_000_000, size, 3000);
    let (_, recording) = lab.stop();
    let frame = size + 42;
    let probes: Vec<_> = recording
        .packets(0)
        .filter(|r| r.len_bytes == frame)
        .collect();
    let originals: Vec<_> = probes.iter().filter(|r| r.duplicate_of.is_none()).collect();
    assert_eq!(originals.len(), 3000, "every probe entered the link");
    // Loss: originals dropped whose copies (if any) were dropped too.
    let delivered_ids: std::collections::HashSet<u64> = probes
        .iter()
        .filter(|r| r.departed.is_some())
        .map(|r| r.duplicate_of.unwrap_or(r.id))
        .collect();
    let lost = originals
        .iter()
        .filter(|r| !delivered_ids.contains(&r.id))
        .count() as u64;
    let duplicates =
        probes.iter().filter(|r| r.departed.is_some()).count() as u64 - delivered_ids.len() as u64;
    // Reordering: RFC 4737 on the order the emulator put the probes on the wire, read
    // from its capture (the sequence number is 16 bytes into the probe).
    let capture = std::fs::read(&lab_pcap).expect("capture");
    let mut tracker = pathlab_probe::sequence::SequenceTracker::new(3000);
    let mut wire = 0;
    for data in pcapng_outbound(&capture, 1) {
        if data.len() == frame as usize {
            tracker.arrive(u64::from_be_bytes(
                data[42 + 16..42 + 24].try_into().unwrap(),
            ));
            wire += 1;
        }
    }
    assert_eq!(
        wire,
        probes.iter().filter(|r| r.departed.is_some()).count(),
        "the capture has every forwarded probe"
    );
    let truth = tracker.stats(3000);
    eprintln!(
        "owd through loss 2% duplicate 2% reorder 5%: lost {} (truth {lost}), duplicates {} (truth {duplicates}), reordered {} (truth {}), rejected {}, stats {:?}",
        result.sequence.lost, result.sequence.duplicates, result.sequence.reordered, truth.reordered, result.rejected, result.sequence
    );
    assert!(
        lost > 20 && duplicates > 20 && truth.reordered > 20,
        "the impairments happened"
    );
    assert_eq!(result.sequence.lost, lost);
    assert_eq!(result.sequence.duplicates, duplicates);
    assert_eq!(result.sequence.reordered, truth.reordered);
    assert_eq!(result.sequence.max_extent, truth.max_extent);
}

/// `pathlab tcp` upwards from h1 to a server in h2 with Reno for `seconds`.
fn tcp_through(lab: &Lab, seconds: u64) -> pathlab_probe::tcp::TcpTestReport {
    use pathlab_probe_driver::{TcpOptions, TcpTest};
    with_server_in_h2(lab, |client| {
        client.tcp(&TcpTest {
            streams: 1,
            direction: pathlab_probe::control::TcpDirection::Up,
            duration: Duration::from_secs(seconds),
            interval: Duration::from_secs(1),
            sample_every: Duration::from_millis(10),
            options: TcpOptions {
                window: Some(4 << 20),
                mss: None,
                congestion: Some("reno".into()),
            },
        })
    })
}

#[test]
fn tcp_goodput_and_retransmissions_match_the_emulators_truth() {
    let Some(_serial) =
        privileged_paired("tcp_goodput_and_retransmissions_match_the_emulators_truth")
    else {
        return;
    };
    // Clean, then lossy: goodput never above what the link carries and near it when
    // nothing is lost; every segment the emulator dropped is one TCP retransmitted.
    for (spec, fills) in [
        ("rate 10mbit delay 5ms limit 100", true),
        ("rate 10mbit delay 5ms limit 100 loss 1%", false),
    ] {
        let mut lab = Lab::start(
            "tcp-truth",
            spec,
            &["--reverse", "delay 5ms", "--seed", "5"],
            true,
        );
        let report = tcp_through(&lab, 6);
        let (_, recording) = lab.stop();
        let stream = &report.up[0];
        let last = stream.samples.last().expect("TCP_INFO samples");
        let retransmitted = u64::from(last.retrans_segments);
        // Full-size data segments the emulator dropped on the way up (the control
        // connection's messages are far smaller).
        let dropped = recording
            .packets(0)
            .filter(|r| r.len_bytes >= 1000 && r.dropped.is_some())
            .count() as u64;
        let goodput = report.up_bps / 8.0;
        eprintln!(
            "tcp through '{spec}': {:.3} Mbit/s = {:.1}% of {:.3}; retransmitted {} segments, emulator dropped {dropped}",
            report.up_bps * 1e-6,
            goodput / TCP_GOODPUT_10MBIT * 100.0,
            TCP_GOODPUT_10MBIT * 8e-6,
            retransmitted,
        );
        // The receiver's count over the sender's time includes the last flight in the
        // queue after the sender stopped writing: 1% over the ideal covers it.
        assert!(
            goodput <= TCP_GOODPUT_10MBIT * 1.01,
            "goodput {:.3} Mbit/s above the link's {:.3}",
            goodput * 8e-6,
            TCP_GOODPUT_10MBIT * 8e-6
        );
        if fills {
            assert!(
                goodput >= TCP_GOODPUT_10MBIT * 0.9,
                "a clean 10 Mbit/s link is filled: {:.3} Mbit/s",
                goodput * 8e-6
            );
        } else {
            assert!(dropped > 0, "1% of thousands of segments");
        }
        // Each dropped segment is sent again; a retransmission lost again counts twice on
        // both sides. A few spurious ones (tail loss probes) are allowed on top.
        assert!(
            retransmitted >= dropped && retransmitted <= dropped + dropped / 10 + 5,
            "retransmitted {retransmitted} for {dropped} dropped"
        );
    }
}

/// The lab run a `result.json` holds.
fn read_lab_run(result: &std::path::Path) -> pathlab_results::lab::LabRun {
    let text = std::fs::read_to_string(result).expect("result file");
    let file = pathlab_results::ResultFile::from_json(&text).expect("result file reads");
    let pathlab_results::RunResult::Lab(run) = file.result else {
        panic!("not a lab run");
    };
    *run
}

/// The RTT series of a lab run's `rtt` workload named `name`.
fn lab_rtts(result: &std::path::Path, name: &str) -> (u64, Vec<(u64, i64)>) {
    let run = read_lab_run(result);
    assert!(!run.interrupted);
    let workload = run
        .workloads
        .iter()
        .find(|w| w.name == name)
        .expect("workload");
    let pathlab_results::lab::LabOutcome::Rtt(report) = &workload.outcome else {
        panic!("{name}: {:?}", workload.outcome);
    };
    (report.sent, report.series.clone())
}

#[test]
fn the_bufferbloat_recipe_reaches_the_queueing_theory_plateau_for_each_queue() {
    let Some(_serial) = privileged_paired(
        "the_bufferbloat_recipe_reaches_the_queueing_theory_plateau_for_each_queue",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-bufferbloat");
    let out = dir.path("run");
    // The smallest and the largest queue: the theory is the same claim at every size, and
    // the plateau's growth shows between two (users' --quick runs 50 too).
    run_quick_recipe_points("bufferbloat", &[("queue", "[10, 100]")], &out);
    let mut plateaus = Vec::new();
    for queue in [10u32, 100] {
        let (sent, series) = lab_rtts(&out.join(format!("queue-{queue}/result.json")), "probes");
        assert!(
            series.len() as u64 >= sent * 9 / 10,
            "queue {queue}: most probes answered"
        );
        // The plateau: the 99th percentile of the second half, once Reno keeps the queue
        // between half and full. Theory: 4 x 5 ms + a full queue of 1514-byte frames.
        let mut late: Vec<f64> = series
            .iter()
            .filter(|(seq, _)| *seq >= sent / 2)
            .map(|(_, ns)| *ns as f64 / 1e6)
            .collect();
        late.sort_by(f64::total_cmp);
        let plateau = late[(late.len() - 1) * 99 / 100];
        let theory = 20.0 + f64::from(queue) * 1514.0 * 8.0 / 10e6 * 1e3;
        eprintln!("queue {queue}: plateau {plateau:.1} ms, theory {theory:.1} ms");
        assert!(
            (plateau / theory - 1.0).abs() <= 0.10,
            "queue {queue}: plateau {plateau:.1} ms against {theory:.1} ms"
        );
        plateaus.push(plateau);
    }
    assert!(
        plateaus.windows(2).all(|w| w[0] < w[1]),
        "the plateau grows with the queue: {plateaus:?}"
    );
    // The queue's oscillation (the seed: "the period grows as the square of the queue"):
    // overflows of the emulator's queue, spaced as one Reno flow's sawtooth.
    for queue in [10, 100] {
        let run_dir = out.join(format!("queue-{queue}"));
        let run = read_lab_run(&run_dir.join("result.json"));
        let experiment = pathlab_lab::spec::Experiment::parse(&run.spec).expect("parses");
        let sawtooths = pathlab_lab::summary::sawtooths(&experiment, &run, &run_dir);
        let [sawtooth] = sawtooths.as_slice() else {
            panic!("queue {queue}: {sawtooths:?}");
        };
        let theory = sawtooth.theory_s.expect("a fixed bottleneck");
        eprintln!(
            "queue {queue}: period {:.2} s over {} cycles, theory {theory:.2} s",
            sawtooth.period_s, sawtooth.cycles
        );
        assert!(
            (sawtooth.period_s / theory - 1.0).abs() <= 0.15,
            "queue {queue}: {sawtooth:?}"
        );
    }
    for queue in [10, 100] {
        let recording = out.join(format!("queue-{queue}/link-r1-h2.jsonl"));
        let file = std::fs::File::open(&recording).expect("the bottleneck was recorded");
        let recording = read_recording(std::io::BufReader::new(file)).expect("recording reads");
        let peak = recording
            .queue_samples(0)
            .map(|(_, packets, _)| packets)
            .max();
        assert_eq!(
            peak,
            Some(queue),
            "the emulator's queue filled to its limit"
        );
    }
}

/// The round trips of a lab run's `rtt` workload `name` as `(when it was sent on the
/// clock of the link `link`'s emulator, s; rtt, ms)`: the clock a rate schedule runs on.
fn rtts_on_emulator_clock(run_dir: &std::path::Path, name: &str, link: &str) -> Vec<(f64, f64)> {
    let run = read_lab_run(&run_dir.join("result.json"));
    let file = std::fs::File::open(run_dir.join(format!("link-{link}.jsonl"))).expect("recorded");
    let recording = read_recording(std::io::BufReader::new(file)).expect("recording reads");
    let zero = recording.header.expect("header").clock_zero_unix_ns as f64;
    let workload = run
        .workloads
        .iter()
        .find(|w| w.name == name)
        .expect("workload");
    let pathlab_results::lab::LabOutcome::Rtt(report) = &workload.outcome else {
        panic!("{name}: {:?}", workload.outcome);
    };
    assert_eq!(report.series_sent_ns.len(), report.series.len());
    let start = run.started_unix_ns as f64 + workload.start_ns as f64 - zero;
    report
        .series_sent_ns
        .iter()
        .zip(&report.series)
        .map(|(&sent, &(_, rtt))| ((start + sent as f64) / 1e9, rtt as f64 / 1e6))
        .collect()
}

#[test]
fn in_the_aqm_recipe_codel_and_fq_codel_keep_the_1_mbit_phases_rtt_far_below_tail_drop() {
    let Some(_serial) = privileged_paired(
        "in_the_aqm_recipe_codel_and_fq_codel_keep_the_1_mbit_phases_rtt_far_below_tail_drop",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-aqm");
    let out = dir.path("run");
    // Tail drop against the two AQMs whose figures are judged here. RED and PIE (users'
    // --quick runs them too) are held to their own laws in virtual time, where "below tail
    // drop" is implied: crates/pathlab-core/tests/aqm.rs.
    run_quick_recipe_points(
        "aqm",
        &[("queue", r#"["taildrop", "codel", "fq_codel"]"#)],
        &out,
    );
    // --quick: 18 s in six steps of 3 s at 100, 10, 1, 50, 1, 100 Mbit/s.
    let step = 3.0;
    let mut medians = std::collections::BTreeMap::new();
    for queue in ["taildrop", "codel", "fq_codel"] {
        let run_dir = out.join(format!("queue-{queue}"));
        let mut slow: Vec<f64> = rtts_on_emulator_clock(&run_dir, "probes", "r1-h2")
            .into_iter()
            .filter(|(at, _)| [2.0, 4.0].contains(&(at / step).floor()))
            .map(|(_, rtt)| rtt)
            .collect();
        assert!(
            slow.len() >= 20,
            "{queue}: {} probes in the 1 Mbit/s phases",
            slow.len()
        );
        slow.sort_by(f64::total_cmp);
        let median = median(&slow);
        // Goodput cannot exceed the schedule's mean rate less the headers (1448 of 1514 B).
        let run = read_lab_run(&run_dir.join("result.json"));
        let pathlab_results::lab::LabOutcome::Tcp(tcp) = &run.workloads[0].outcome else {
            panic!("{queue}: {:?}", run.workloads[0].outcome);
        };
        let capacity = (100.0 + 10.0 + 1.0 + 50.0 + 1.0 + 100.0) / 6.0 * 1e6 * 1448.0 / 1514.0;
        eprintln!(
            "{queue}: median RTT at 1 Mbit/s {median:.1} ms ({} probes), goodput {:.2} Mbit/s",
            slow.len(),
            tcp.up_bps / 1e6
        );
        assert!(
            tcp.up_bps > 0.0 && tcp.up_bps <= capacity * 1.01,
            "{queue}: {tcp:?}"
        );
        medians.insert(queue, median);
    }
    // Tail drop: the 100-packet buffer stays nearly full, 100 x 1514 B x 8 / 1 Mbit/s =
    // 1.21 s on top of the 20 ms base (less the slots the probes themselves hold, about
    // a tenth, and the first moments of each phase while the queue fills).
    let full = 20.0 + 100.0 * 1514.0 * 8.0 / 1e6 * 1e3;
    assert!(
        medians["taildrop"] >= 0.7 * full,
        "{medians:?} against {full:.0} ms"
    );
    // CoDel holds the sojourn near 5 ms (plus a 12 ms packet in service) once its control
    // law has caught up, which takes about half of a 3 s phase after a fall from 50 to
    // 1 Mbit/s: its median must be under a fifth of tail drop's (measured: 1/17).
    assert!(medians["codel"] <= medians["taildrop"] / 5.0, "{medians:?}");
    // FQ-CoDel serves the sparse probes ahead of the bulk flow: they wait at most for the
    // packet in service and one quantum, 2 x 12.1 ms, on top of the 20 ms base.
    assert!(
        medians["fq_codel"] <= 20.0 + 2.0 * 12.1 + 5.0,
        "{medians:?}"
    );
    assert!(
        medians["fq_codel"] <= medians["taildrop"] / 20.0,
        "{medians:?}"
    );
}

#[test]
fn in_the_wan_sweep_throughput_falls_with_loss_and_follows_the_mathis_bound() {
    let Some(_serial) = privileged_paired(
        "in_the_wan_sweep_throughput_falls_with_loss_and_follows_the_mathis_bound",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-wan-sweep");
    let out = dir.path("run");
    // Two delays by three losses of the quick grid (users' --quick runs 3 x 4): the Mathis
    // bound at 1 and 5% on two paths, the fall with loss from the line rate. At 0 ms the
    // bound says nothing (no RTT), and 2% lies between 1 and 5.
    run_quick_recipe_points(
        "wan-sweep",
        &[("delay", "[10, 25]"), ("loss", "[0, 1, 5]")],
        &out,
    );
    let line_goodput = 100e6 * 1448.0 / 1514.0;
    for delay in [10u32, 25] {
        let mut goodputs = Vec::new();
        for loss in ["0", "1", "5"] {
            let run_dir = out.join(format!("delay-{delay}_loss-{loss}"));
            let run = read_lab_run(&run_dir.join("result.json"));
            assert!(!run.interrupted);
            let workload = &run.workloads[0];
            let pathlab_results::lab::LabOutcome::Tcp(tcp) = &workload.outcome else {
                panic!("{delay} ms, {loss}%: {:?}", workload.outcome);
            };
            // The steady state: what arrived in the second half of the transfer (the first
            // seconds are slow start, which a model of congestion avoidance does not cover).
            let intervals = &tcp.up[0].interval_bytes;
            let late = &intervals[intervals.len() / 2..];
            let steady = late.iter().sum::<u64>() as f64 * 8.0
                / (late.len() as f64 * tcp.interval_ns as f64 / 1e9);
            assert!(
                tcp.up_bps <= line_goodput * 1.01,
                "{delay} ms, {loss}%: {tcp:?}"
            );
            goodputs.push(tcp.up_bps);
            if loss == "0" || delay == 0 {
                continue;
            }
            // The loss the transfer met, from the emulator's truth: its full-size packets
            // on the way there, and how many of them the loss model took.
            let file =
                std::fs::File::open(run_dir.join("link-client-wan.jsonl")).expect("recorded");
            let recording = read_recording(std::io::BufReader::new(file)).expect("reads");
            let data: Vec<_> = recording
                .packets(0)
                .filter(|p| p.len_bytes > 1000)
                .collect();
            let lost = data
                .iter()
                .filter(|p| matches!(p.dropped, Some((_, pathlab_core::DropReason::Loss))))
                .count();
            let p = lost as f64 / data.len() as f64;
            let nominal: f64 = loss.parse::<f64>().unwrap() / 100.0;
            assert!(
                (p / nominal - 1.0).abs() < 0.5,
                "{delay} ms: applied {p} for {nominal}"
            );
            // Mathis et al.: (MSS / RTT) x sqrt(3/2) / sqrt(p), with the base RTT (the real
            // one is longer, so this errs high). A run's goodput averages the sawtooth
            // cycles its N losses end, so it carries a sampling error of about 1/sqrt(N):
            // allow two of them.
            let rtt = 2.0 * f64::from(delay) / 1e3;
            let bound = pathlab_results::lab::mathis_bps(1448.0, rtt, p);
            let allowance = 1.0 + 2.0 / (lost as f64).sqrt();
            eprintln!(
                "{delay} ms, {loss}%: goodput {:.2} Mbit/s, steady {:.2}, Mathis {:.2} (p {p:.4}, {lost} losses, C = {:.2})",
                tcp.up_bps / 1e6,
                steady / 1e6,
                bound / 1e6,
                steady / bound * 1.5f64.sqrt()
            );
            assert!(
                steady <= bound * allowance,
                "{delay} ms, {loss}%: {steady:.0} bit/s above the Mathis bound {bound:.0} x {allowance:.2}"
            );
        }
        // Throughput falls with loss (where the line rate does not cap both) and loses at
        // least half at 5%.
        assert!(
            goodputs.windows(2).all(|w| w[1] <= w[0] * 1.03),
            "{delay} ms: {goodputs:?}"
        );
        assert!(goodputs[2] < goodputs[0] / 2.0, "{delay} ms: {goodputs:?}");
    }
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
    LabSpec::new("ping", "4s")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("spec", "delay 10ms loss 20%")
        .with("reverse", "delay 25ms")
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

#[test]
fn a_bad_lab_spec_is_refused_with_its_line_and_nothing_is_built() {
    let Some(_serial) = privileged("a_bad_lab_spec_is_refused_with_its_line_and_nothing_is_built")
    else {
        return;
    };
    let dir = TempDir::new("lab-bad-spec");
    let before = live_netns_inodes();
    let spec = dir.path("bad.toml");
    let out = dir.path("out");
    let two_nodes = || LabSpec::new("x", "5s").node("h1").node("h2");
    for (lab, expected) in [
        (
            two_nodes().link("h1", "h3"),
            "line 8: link end 'h3' is not a node",
        ),
        (
            two_nodes()
                .link("h1", "h2")
                .with("spec", "delay 5ms rate 10 mbit"),
            "line 9: bad SPEC 'delay 5ms rate 10 mbit'",
        ),
    ] {
        lab.write(&spec);
        let output = Command::new(PATHLAB)
            .arg("lab")
            .arg(&spec)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("pathlab lab runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("bad.toml"), "names the file: {stderr}");
        assert!(!out.exists(), "nothing created");
    }
    assert_eq!(live_netns_inodes(), before, "no namespace was made");
}

#[test]
fn ctrl_c_in_a_lab_run_keeps_the_recording_and_leaves_no_namespace() {
    let Some(_serial) =
        privileged("ctrl_c_in_a_lab_run_keeps_the_recording_and_leaves_no_namespace")
    else {
        return;
    };
    let dir = TempDir::new("lab-ctrl-c");
    let before = live_netns_inodes();
    let spec = dir.path("line.toml");
    LabSpec::new("line", "60s")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("spec", "delay 5ms")
        .workload("probes", "rtt", "h1", "h2")
        .write(&spec);
    let out = dir.path("out");
    let child = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pathlab lab starts");
    // Wait until the emulator has recorded traffic, then Ctrl-C.
    let recording = out.join("link-h1-h2.jsonl");
    for _ in 0..300 {
        if std::fs::metadata(&recording).is_ok_and(|m| m.len() > 10_000) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pathlab_os::kill(child.id(), 2).expect("SIGINT");
    let output = child.wait_with_output().expect("pathlab lab exits");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "an interrupted run says so");
    assert!(stdout.contains("interrupted"), "{stdout}");
    let run = read_lab_run(&out.join("result.json"));
    assert!(run.interrupted);
    assert!(run.duration_ns < 60_000_000_000);
    assert_eq!(run.workloads.len(), 1, "the cut-off workload is listed");
    let recorded = read_recording(std::io::BufReader::new(
        std::fs::File::open(&recording).expect("recording kept"),
    ))
    .expect("the recording reads to its last line");
    assert!(recorded.packets(0).count() > 0, "probes were recorded");
    assert_eq!(live_netns_inodes(), before, "no namespace is left");
}

#[test]
fn the_owd_probe_recipe_sees_the_queue_build_at_15_mbits_and_not_at_10() {
    let Some(_serial) =
        privileged_paired("the_owd_probe_recipe_sees_the_queue_build_at_15_mbits_and_not_at_10")
    else {
        return;
    };
    let dir = TempDir::new("lab-owd-probe");
    let out = dir.path("run");
    run_quick_recipe("owd-probe", &out);
    for (rate, building) in [(10e6, false), (15e6, true)] {
        let point = out.join(format!("rate-{}mbit", rate / 1e6));
        let run = read_lab_run(&point.join("result.json"));
        let pathlab_results::lab::LabOutcome::Owd(result) = &run.workloads[0].outcome else {
            panic!("{:?}", run.workloads[0].outcome);
        };
        assert_eq!(result.sequence.lost, 0, "the deep buffer drops nothing");
        // The truth: the same trend test on what the bottleneck link recorded of the probes
        // (frames of 1242 bytes, r1 -> h2), in model time.
        let recording = read_recording(std::io::BufReader::new(
            std::fs::File::open(point.join("link-r1-h2.jsonl")).expect("the link's recording"),
        ))
        .expect("the recording reads");
        let header = recording.header.as_ref().expect("a header");
        let towards_h2 = header
            .directions
            .iter()
            .position(|d| d.spec.contains("rate"))
            .expect("the shaped direction") as u8;
        let truth = recorded_delay_trend(&recording, towards_h2, 1242, result.owd.window as usize);
        let truth_us_per_s = truth.trend_ns_per_s * 1e-3;
        eprintln!(
            "{} Mbit/s: the probe says {:?}, {:.0} +- {:.0} us/s; the link's recording {:?}, \
             {truth_us_per_s:.0} us/s",
            rate / 1e6,
            result.owd.verdict,
            result.owd.trend_us_per_s,
            result.owd.trend_ci95_us_per_s,
            truth.verdict
        );
        assert_eq!(
            result.owd.verdict, truth.verdict,
            "the probe's verdict against the link's recording: {truth:?}"
        );
        // The probe's trend also carries the first hop and the hosts' timing (0.4 ms
        // over the run's 8 s): within that, its own 95% interval, the recording's, and 5%
        // of the recorded one.
        let tolerance = 50.0
            + 0.05 * truth_us_per_s.abs()
            + result.owd.trend_ci95_us_per_s
            + 1.96 * truth.trend_se_ns_per_s * 1e-3;
        assert!(
            (result.owd.trend_us_per_s - truth_us_per_s).abs() <= tolerance,
            "trend {:.0} us/s against {truth_us_per_s:.0} recorded (tolerance {tolerance:.0})",
            result.owd.trend_us_per_s
        );
        if building {
            // Frames of 1242 bytes arrive at lambda = 15 Mbit/s x 1242/1200 and leave at
            // mu = 11 Mbit/s: per second of arrivals the delay grows by (lambda - mu)/lambda.
            let lambda = rate * 1242.0 / 1200.0;
            let theory_us_per_s = (lambda - 11e6) / lambda * 1e6;
            assert_eq!(result.owd.verdict, QueueVerdict::Building);
            assert!(
                (result.owd.trend_us_per_s / theory_us_per_s - 1.0).abs() <= 0.05,
                "trend {:.0} us/s against {theory_us_per_s:.0}",
                result.owd.trend_us_per_s
            );
        } else if truth.verdict == QueueVerdict::Building {
            // 10 Mbit/s into 11 builds no queue when the probes leave on time; a sender
            // late on a busy machine that catches up in bursts does build one, and then the
            // claim judged is the probe's agreement with the recording, above.
            eprintln!("10 Mbit/s: the link's own queue grew (the sender caught up in bursts)");
        } else {
            assert_eq!(truth.verdict, QueueVerdict::NotBuilding);
        }
    }
}

/// CPU time (user + system) process `pid` has used, in clock ticks (100 per second).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Runs `change` on r's interface `name` through netlink, in r.
fn in_r(lab: &Lab, name: &str, change: impl FnOnce(&mut pathlab_os::netlink::Netlink, u32) + Send) {
    let name = name.to_owned();
    lab.line
        .r
        .run(move || {
            let mut netlink = pathlab_os::netlink::Netlink::open().unwrap();
            let link = netlink
                .link_by_name(&name)
                .unwrap()
                .expect("r has the port");
            change(&mut netlink, link.index);
        })
        .unwrap();
}

#[test]
fn an_interface_that_goes_down_pauses_without_cpu_and_one_that_disappears_ends_the_emulator() {
    let Some(_serial) = privileged("an_interface_that_goes_down_pauses_without_cpu") else {
        return;
    };
    let mut lab = Lab::start("if-down", "delay 1ms", &[], true);
    let pid = lab.emulator.as_ref().unwrap().id();
    let answered = |results: &[PingResult]| results.iter().filter(|r| r.rtt.is_some()).count();
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 5, Duration::from_millis(20), 56)),
        5
    );

    // Down: the direction waits, and the process sleeps. A loop spinning on the socket's
    // pending error used all of a core (200 ticks in 2 s, measured before the fix); a
    // sleeping one wakes once a second to see whether the interface is gone.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, false).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    eprintln!("CPU while {R_PORT_H2} was down: {used} ticks in 2 s");
    assert!(used <= 20, "{used} ticks of 200 in 2 s: the emulator spins");
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 3, Duration::from_millis(20), 56)),
        0
    );

    // Up again: forwarding resumes by itself, the outage counted.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, true).unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    let results = lab.ping(IpAddr::V4(H2_V4), 10, Duration::from_millis(20), 56);
    assert!(answered(&results) >= 9, "{results:?}");
    let stats = lab.stats();
    assert_eq!(stats.directions[1].from, R_PORT_H2);
    assert_eq!(stats.directions[1].went_down, 1, "{stats:?}");
    assert_eq!(stats.directions[0].went_down, 0);

    // Gone (the veth pair deleted): the emulator ends, exit 1, naming the interface.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.delete_link(index).unwrap();
    });
    let mut child = lab.emulator.take().unwrap();
    let mut status = None;
    for _ in 0..150 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the emulator still runs 3 s after {R_PORT_H2} disappeared");
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("interface {R_PORT_H2} disappeared")),
        "{stderr}"
    );
}

/// Puts back h2's wire to r after it was deleted, as a NIC plugged in again: a new veth
/// pair of the same names, h2's end with the old MAC address (so h1's neighbour entry
/// stays right), h2's addresses and its neighbour entry for h1 again, and r's end left
/// down for `before_up` (an interface that is back but down cannot be opened yet) before
/// it is brought up. Returns when r's end was brought up.
fn replug_h2(lab: &Lab, h2_mac: &[u8], h1_mac: &[u8], before_up: Duration) -> std::time::Instant {
    use pathlab_os::netlink::Netlink;
    use pathlab_os::topology::H1_V6;
    let r = lab.line.r.fd();
    lab.line
        .h2
        .run(|| {
            let mut netlink = Netlink::open().unwrap();
            netlink
                .create_veth(HOST_PORT, R_PORT_H2, Some(r))
                .expect("a new veth pair of the old names");
            let eth = netlink.link_by_name(HOST_PORT).unwrap().expect("h2's eth0");
            netlink.set_mac(eth.index, h2_mac).unwrap();
            netlink
                .add_address(eth.index, IpAddr::V4(H2_V4), 24, None)
                .unwrap();
            netlink
                .add_address(eth.index, IpAddr::V6(H2_V6), 64, None)
                .unwrap();
            netlink.set_up(eth.index, true).unwrap();
            netlink
                .add_neighbor(eth.index, IpAddr::V4(H1_V4), h1_mac)
                .unwrap();
            netlink
                .add_neighbor(eth.index, IpAddr::V6(H1_V6), h1_mac)
                .unwrap();
        })
        .unwrap();
    std::thread::sleep(before_up);
    in_r(lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, true).unwrap();
    });
    std::time::Instant::now()
}

#[test]
fn with_wait_an_interface_that_disappears_is_waited_for_without_cpu_and_reopened() {
    let Some(_serial) = privileged("with_wait_an_interface_that_disappears_is_waited_for") else {
        return;
    };
    let mut lab = Lab::start("if-wait", "delay 1ms", &["--wait"], true);
    let pid = lab.emulator.as_ref().unwrap().id();
    let mac = |netns| Line::interface(netns, HOST_PORT).expect("eth0").mac;
    let (h1_mac, h2_mac) = (mac(&lab.line.h1), mac(&lab.line.h2));
    let answered = |results: &[PingResult]| results.iter().filter(|r| r.rtt.is_some()).count();
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 5, Duration::from_millis(20), 56)),
        5
    );

    // Gone (the veth pair deleted): with --wait the emulator keeps running, and sleeps
    // while it waits (a check a second, and the recording's 10 ms queue samples).
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.delete_link(index).unwrap();
    });
    std::thread::sleep(Duration::from_millis(1500));
    let child = lab.emulator.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the emulator ended although it was told to wait"
    );
    let stats = lab.stats();
    assert_eq!(stats.directions[1].from, R_PORT_H2);
    assert_eq!(stats.directions[1].disappeared, 1, "{stats:?}");
    assert_eq!(stats.directions[1].reopened, 0, "{stats:?}");
    let wall = std::time::Instant::now();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    // /proc/PID/stat counts in USER_HZ, 100 per second on Linux.
    let used_s = (cpu_ticks(pid) - before) as f64 / 100.0;
    let wall_s = wall.elapsed().as_secs_f64();
    eprintln!(
        "CPU while waiting for {R_PORT_H2}: {used_s:.2} s in {wall_s:.2} s ({:.1}%)",
        used_s / wall_s * 100.0
    );
    assert!(
        used_s < 0.1 * wall_s,
        "{used_s:.2} s of CPU in {wall_s:.2} s while waiting: the emulator spins"
    );
    assert!(lab.emulator.as_mut().unwrap().try_wait().unwrap().is_none());

    // Back (same name, new index): reopened within a check, and forwarding resumes.
    let up = replug_h2(&lab, &h2_mac, &h1_mac, Duration::from_millis(1200));
    let mut reopened_after = None;
    while up.elapsed() < Duration::from_secs(3) {
        if lab.stats().directions[1].reopened == 1 {
            reopened_after = Some(up.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let reopened_after = reopened_after.expect("reopened within 3 s of the interface coming up");
    let results = lab.ping(IpAddr::V4(H2_V4), 10, Duration::from_millis(20), 56);
    let pings_done = up.elapsed();
    eprintln!(
        "{R_PORT_H2} back up: reopened after {:.0} ms, 10 pings done {:.0} ms after it came up",
        reopened_after.as_secs_f64() * 1e3,
        pings_done.as_secs_f64() * 1e3
    );
    assert!(answered(&results) >= 9, "{results:?}");
    let text = pathlab(&["emulate", "stats", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "gone       {R_PORT_H2} disappeared 1 time(s), reopened 1 time(s)"
        )),
        "{text}"
    );

    // Stopped as usual: exit 0, each state change said once.
    let child = lab.emulator.take().unwrap();
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for (said, times) in [
        (
            format!("interface {R_PORT_H2} disappeared; waiting for it to reappear"),
            1,
        ),
        (
            format!("named {R_PORT_H2} is back but cannot be opened yet"),
            1,
        ),
        (
            format!("interface {R_PORT_H2} is back; forwarding through it resumed"),
            1,
        ),
    ] {
        assert_eq!(
            stderr.matches(&said).count(),
            times,
            "'{said}' in: {stderr}"
        );
    }
    let stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("final stats");
    assert_eq!(
        (
            stats.directions[1].disappeared,
            stats.directions[1].reopened
        ),
        (1, 1)
    );
    assert_eq!(
        (
            stats.directions[0].disappeared,
            stats.directions[0].reopened
        ),
        (0, 0)
    );
    assert!(stats.failure.is_none());
    assert_conservation(&stats);
}

/// The fidelity guard (issue 16): an emulator given a rate it cannot follow warns once, with
/// the figure and the direction, says when it is on time again, and counts late seconds.
///
/// The load must make it late whatever the machine's speed. A plain `rate 40gbit` under
/// TCP is not enough for that: the model sees a frame when the emulator reads it, so a
/// backlog in the receive ring is not lateness, and what is measured is how long the
/// emulator takes to send one read batch, which depends on the batch size and the cost per
/// frame (measured here: a worst second's p99 of 1.3 to 8 ms from run to run). Instead
/// the spec makes the model itself demand the impossible: its rate alternates every 500 ms
/// between 10 Mbit/s and 40 Gbit/s, and a UDP load of 300 Mbit/s (which does not back off)
/// fills the 5000-packet queue during the slow half. At 40 Gbit/s the model sends those
/// 7.2 MB in 1.4 ms; a forwarder at 5 Gbit/s needs 12 ms, one at 20 Gbit/s 3 ms, so
/// thousands of the packets of every second leave more than 1 ms late (over 1% of the
/// second's ~20,000) on any forwarder that cannot do nearly 40 Gbit/s.
#[test]
fn an_emulator_that_cannot_follow_its_rate_warns_once_and_counts_the_late_seconds() {
    let Some(_serial) = privileged(
        "an_emulator_that_cannot_follow_its_rate_warns_once_and_counts_the_late_seconds",
    ) else {
        return;
    };
    let bound_ns = 1_000_000;
    let mut lab = Lab::start_with(
        "late",
        "schedule 500ms 10mbit 40gbit loop limit 5000",
        &["--late-warn", "1ms"],
        true,
        false,
    );
    let (peak_ns, text) = std::thread::scope(|scope| {
        let line = &lab.line;
        let load =
            scope.spawn(move || line.udp_one_way_delays(5301, 300e6, 1400, Duration::from_secs(5)));
        let mut peak_ns = 0;
        let mut text = String::new();
        while !load.is_finished() {
            std::thread::sleep(Duration::from_millis(250));
            let live = lab.stats();
            peak_ns = peak_ns.max(live.directions[0].lateness.last_second_p99_ns);
            if text.is_empty() && live.directions[0].lateness.late_seconds > 0 {
                let output = pathlab(&["emulate", "stats", "--name", &lab.name]);
                text = String::from_utf8_lossy(&output.stdout).into_owned();
            }
        }
        let delays = load.join().expect("load thread").expect("UDP load");
        assert!(!delays.is_empty(), "the load crossed");
        (peak_ns, text)
    });
    // Idle: what is left in the queue leaves at the next fast half, then the window
    // empties and the emulator is on time again.
    std::thread::sleep(Duration::from_millis(2_500));
    let child = lab.emulator.take().expect("running");
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).expect("signal");
    let output = child.wait_with_output().expect("emulator exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("final stats");
    let late = &stats.directions[0].lateness;
    eprintln!(
        "{}: p99 over a second up to {:.2} ms (live peak {:.2} ms), {} of {} s late; \
         run p50/p99/max {:.3}/{:.3}/{:.3} ms over {} packets\n{text}{stderr}",
        stats.directions[0].spec,
        late.worst_second_p99_ns as f64 / 1e6,
        peak_ns as f64 / 1e6,
        late.late_seconds,
        late.seconds,
        late.p50_ns as f64 / 1e6,
        late.p99_ns as f64 / 1e6,
        late.max_ns as f64 / 1e6,
        late.packets,
    );
    // The stats: the live window saw it, whole seconds were judged late against the bound,
    // and the text table says so.
    assert!(
        peak_ns > bound_ns,
        "live p99 over the last second {peak_ns} ns"
    );
    assert_eq!(late.bound_ns, Some(bound_ns));
    assert!(late.seconds >= 7, "{late:?}");
    assert!((1..=late.seconds).contains(&late.late_seconds), "{late:?}");
    assert!(late.worst_second_p99_ns > bound_ns, "{late:?}");
    assert!(
        text.contains("  guard      last second p99 ") && text.contains(" s (p99 over 1 ms)"),
        "{text}"
    );
    // The warnings: the first says it with the figure and the direction; within 10 s no
    // second one (the run is shorter); one line when it is over.
    let forward = format!("'{}': {R_PORT_H1} -> {R_PORT_H2} ", lab.name);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&forward)).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains(" sends late: p99 ")
            && lines[0].contains(" ms over the last second, over the 1 ms bound"),
        "{stderr}"
    );
    assert!(lines[1].contains(" sends on time again: p99 "), "{stderr}");
}

/// The fidelity guard in a lab: the same link the emulator cannot follow (see the test
/// above), under the lab's own `owd` workload at 200 Mbit/s (UDP, which fills the queue in
/// the slow halves), is marked in result.json (its lateness, its late seconds), in the
/// terminal summary and in the report, with the figure.
#[test]
fn a_lab_run_whose_emulator_cannot_follow_its_link_is_marked_late() {
    let Some(_serial) =
        privileged("a_lab_run_whose_emulator_cannot_follow_its_link_is_marked_late")
    else {
        return;
    };
    let dir = TempDir::new("lab-late");
    let spec = dir.path("late.toml");
    LabSpec::new("late", "4s")
        .with("late_warn", "1ms")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("spec", "schedule 500ms 10mbit 40gbit loop limit 5000")
        .workload("load", "owd", "h1", "h2")
        .with("rate", "200mbit")
        .with_number("size", 1400)
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
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{stdout}");
    let run = read_lab_run(&out.join("result.json"));
    // Late although its forwarding threads had real-time scheduling, and the result says so.
    let scheduling = run
        .scheduling
        .as_ref()
        .expect("the run says how it was scheduled");
    assert_eq!(
        (scheduling.policy.as_str(), scheduling.priority),
        ("fifo", 50)
    );
    let lateness = &run.links[0].lateness;
    assert_eq!(lateness.len(), 2, "both directions: {lateness:?}");
    let forward = &lateness[0];
    assert_eq!((forward.from.as_str(), forward.to.as_str()), ("h1", "h2"));
    assert_eq!(forward.bound_ns, Some(1_000_000));
    assert!(forward.seconds >= 3, "{forward:?}");
    assert!(
        (1..=forward.seconds).contains(&forward.late_seconds),
        "{forward:?}"
    );
    assert!(forward.worst_second_p99_ns > 1_000_000, "{forward:?}");
    let warning = forward.warning("h1-h2").expect("a late direction warns");
    assert!(
        warning.starts_with("link h1-h2 sent late (h1 to h2): p99 up to ")
            && warning.ends_with("results may reflect the emulator, not the link"),
        "{warning}"
    );
    assert!(
        stdout.contains(&format!("  warning: {warning}")),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("the lab wrote its report");
    assert!(
        html.contains(&format!("<p class=\"late\">{warning}</p>")),
        "the report marks the run"
    );
}

/// An Ethernet frame from the test's own source MAC (so the receiver can tell it from the
/// kernel's traffic): `tags` (VLAN headers), `ethertype`, then `payload`.
fn test_frame(tags: &[u8], ethertype: [u8; 2], payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&TEST_SOURCE_MAC);
    frame.extend_from_slice(tags);
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(payload);
    frame
}

const TEST_SOURCE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// An IPv4 header of `l4_len` bytes of protocol `protocol` from h1 to h2, with its
/// checksum.
fn ipv4_header(id: u16, protocol: u8, l4_len: usize) -> Vec<u8> {
    let mut header = vec![0x45, 0];
    header.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    header.extend_from_slice(&id.to_be_bytes());
    header.extend_from_slice(&[0x40, 0, 64, protocol, 0, 0]);
    header.extend_from_slice(&H1_V4.octets());
    header.extend_from_slice(&H2_V4.octets());
    let sum = pathlab_os::offload::checksum_add(0, &header);
    let checksum = pathlab_os::offload::checksum_finish(sum);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    header
}

/// Five full TCP segments of one flow (1448 bytes each, consecutive ids and sequence
/// numbers, PSH on the last) that [`pathlab_os::offload::build_gso`] joins into one
/// super-packet.
fn tcp_segments() -> Vec<Vec<u8>> {
    (0..5u16)
        .map(|i| {
            let payload: Vec<u8> = (0..1448u32).map(|b| (b * 7 + u32::from(i)) as u8).collect();
            let mut tcp = Vec::new();
            tcp.extend_from_slice(&40_000u16.to_be_bytes());
            tcp.extend_from_slice(&5201u16.to_be_bytes());
            tcp.extend_from_slice(&(1000 + u32::from(i) * 1448).to_be_bytes());
            tcp.extend_from_slice(&1u32.to_be_bytes());
            tcp.extend_from_slice(&[0x50, if i == 4 { 0x18 } else { 0x10 }]);
            tcp.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
            tcp.extend_from_slice(&payload);
            let mut packet = ipv4_header(100 + i, 6, tcp.len());
            packet.extend_from_slice(&tcp);
            test_frame(&[], [0x08, 0x00], &packet)
        })
        .collect()
}

/// A UDP datagram from h1 to h2 of `len` payload bytes (checksum 0: none, as IPv4 allows).
fn udp_frame(len: usize, fill: u8) -> Vec<u8> {
    let mut udp = Vec::new();
    udp.extend_from_slice(&40_001u16.to_be_bytes());
    udp.extend_from_slice(&9u16.to_be_bytes());
    udp.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend(std::iter::repeat_n(fill, len));
    let mut packet = ipv4_header(200 + u16::from(fill), 17, udp.len());
    packet.extend_from_slice(&udp);
    test_frame(&[], [0x08, 0x00], &packet)
}

/// What h2 receives of the test's frames when an emulator in r (`delay 1ms`) reads its
/// ports as `mode` says, h1 sending one GSO TCP super-packet, VLAN and QinQ frames and
/// plain UDP; and the emulator's counters. Then a second of real TCP (the kernel's own
/// super-packets), every byte checked; its goodput in bytes/s.
fn frames_through(mode: &str) -> (Vec<Vec<u8>>, EmulatorStats, f64) {
    use pathlab_core_driver::emulator::{self, EmulatorConfig};
    use pathlab_core_driver::port::ReceiveMode;
    let line = Line::build(pathlab_os::topology::Middle::Emulator, true).expect("namespaces");
    let spec = pathlab_core::LinkSpec::parse("delay 1ms").unwrap();
    let receive = if mode == "ring" {
        ReceiveMode::ring_for_link(&spec)
    } else {
        ReceiveMode::socket_for_link(&spec)
    };
    let ports = line
        .r
        .run(
            || -> Result<[PacketPort; 2], pathlab_core_driver::port::PortError> {
                Ok([
                    PacketPort::open_with(R_PORT_H1, receive)?,
                    PacketPort::open_with(R_PORT_H2, receive)?,
                ])
            },
        )
        .unwrap()
        .expect("r's ports open");
    let handle = emulator::spawn(
        ports,
        EmulatorConfig {
            name: format!("modes-{mode}"),
            forward: spec.clone(),
            reverse: spec,
            seed: 1,
            record: None,
            pcap: None,
            queue_sample_interval: pathlab_core::Duration::from_millis(10),
            command: vec![],
            on_interface_gone: pathlab_core_driver::emulator::OnInterfaceGone::Stop,
        },
    )
    .expect("emulator starts");
    let open = |ns: &pathlab_os::netns::Netns| {
        ns.run(|| PacketPort::open(HOST_PORT))
            .unwrap()
            .expect("raw port")
    };
    let (h1, mut h2) = (open(&line.h1), open(&line.h2));
    let mut h1 = h1.transmitter().expect("h1's sending half");
    let segments = tcp_segments();
    let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
    assert_eq!(pathlab_os::offload::coalescable_run(&views), 5);
    let (super_packet, vnet) = pathlab_os::offload::build_gso(&views);
    h1.send_gso(&super_packet, &vnet).expect("GSO from h1");
    for frame in [
        test_frame(&[0x81, 0x00, 0x00, 0x64], [0x08, 0x00], &[1; 64]), // VLAN 100
        test_frame(
            &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
            [0x86, 0xdd],
            &[2; 64],
        ), // QinQ 10/20
        udp_frame(18, 3),
        udp_frame(1000, 4),
        udp_frame(1472, 5),
    ] {
        h1.send(&frame).expect("send from h1");
    }
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while received.len() < 10 && std::time::Instant::now() < deadline {
        h2.receive(
            64,
            &mut pathlab_os::buffers::BufferPool::default(),
            &mut |frame| {
                if frame[6..12] == TEST_SOURCE_MAC {
                    received.push(frame);
                }
            },
        )
        .expect("receive at h2");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop((h1, h2));
    let goodput = line
        .start_tcp_bulk(
            5201,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Check::EveryByte,
        )
        .expect("starts")
        .finish()
        .expect("every byte arrives as sent");
    let stats = handle.stop();
    (received, stats, goodput)
}

#[test]
fn ring_and_socket_receive_deliver_the_same_frames() {
    let Some(_serial) = privileged("ring_and_socket_receive_deliver_the_same_frames") else {
        return;
    };
    // What should arrive: the super-packet as the wire frames it stands for, the rest as
    // sent (a VLAN tag the driver took off is put back).
    let segments = tcp_segments();
    let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
    let (super_packet, vnet) = pathlab_os::offload::build_gso(&views);
    let mut expected = Vec::new();
    pathlab_os::offload::to_wire_frames(super_packet, &vnet, &mut |f| expected.push(f))
        .expect("cuts");
    assert_eq!(expected.len(), 5);
    expected.push(test_frame(
        &[0x81, 0x00, 0x00, 0x64],
        [0x08, 0x00],
        &[1; 64],
    ));
    expected.push(test_frame(
        &[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14],
        [0x86, 0xdd],
        &[2; 64],
    ));
    expected.extend([udp_frame(18, 3), udp_frame(1000, 4), udp_frame(1472, 5)]);
    let (ring, ring_stats, ring_goodput) = frames_through("ring");
    let (socket, socket_stats, socket_goodput) = frames_through("socket");
    eprintln!(
        "TCP through delay 1ms, every byte checked: ring {:.2} Gbit/s, socket {:.2} Gbit/s",
        ring_goodput * 8e-9,
        socket_goodput * 8e-9
    );
    assert_eq!(ring.len(), expected.len(), "ring: every frame arrived");
    assert!(ring == expected, "ring: frames arrive as sent, in order");
    assert!(socket == ring, "the socket delivers what the ring does");
    for (mode, stats) in [("ring", &ring_stats), ("socket", &socket_stats)] {
        assert_conservation(stats);
        let h1_to_h2 = &stats.directions[0];
        assert_eq!(h1_to_h2.malformed, 0, "{mode}");
        // The kernel's TCP arrived as super-packets in both modes: fewer frames read
        // than wire frames they held.
        assert!(
            h1_to_h2.frames_received * 2 < h1_to_h2.packets_received,
            "{mode}: {} frames for {} packets",
            h1_to_h2.frames_received,
            h1_to_h2.packets_received
        );
    }
}

/// The network-namespace inodes process `pid` holds open (`net:[...]`).
fn netns_held_by(pid: u32) -> std::collections::HashSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with("net:["))
        .collect()
}

/// The named namespaces (`ip netns list`).
fn named_netns() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_lab_of_200_links_pings_across_its_hub_with_the_links_delays_and_leaves_nothing() {
    let Some(_serial) = privileged(
        "a_lab_of_200_links_pings_across_its_hub_with_the_links_delays_and_leaves_nothing",
    ) else {
        return;
    };
    // A star: router r, hosts h1..h200 each on an emulated link; h1's is `delay 2ms`,
    // h2's `delay 3ms`, the others `delay 1ms`. A ping h1 -> h2 crosses both ways of both.
    let hosts = 200;
    let mut lab = LabSpec::new("star200", "4s").router("r");
    for host in 1..=hosts {
        lab = lab.node(&format!("h{host}"));
    }
    for host in 1..=hosts {
        let delay = match host {
            1 => 2,
            2 => 3,
            _ => 1,
        };
        lab = lab
            .link("r", &format!("h{host}"))
            .with("spec", &format!("delay {delay}ms"));
    }
    let spec = lab
        .workload("across", "ping", "h1", "h2")
        .with("interval", "50ms")
        .with("duration", "3s");
    let dir = TempDir::new("lab-200");
    let spec_path = dir.path("star200.toml");
    spec.write(&spec_path);
    let out = dir.path("out");
    let named_before = named_netns();
    let mut child = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path("stderr")).unwrap())
        .spawn()
        .expect("pathlab lab starts");
    // Built once every emulator has opened its recording: then the lab's namespaces are
    // the ones it holds (201 nodes and the switchboard holding the 200 links' ports).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let recordings = || {
        std::fs::read_dir(&out).map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("link-"))
                .count()
        })
    };
    while recordings() < hosts
        && std::time::Instant::now() < deadline
        && child.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = netns_held_by(child.id());
    let status = child.wait().expect("pathlab lab ends");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(dir.path("stderr")).unwrap_or_default()
    );
    assert!(hosts > pathlab_lab::topology::SWITCHBOARD_FROM);
    assert_eq!(held.len(), hosts + 2, "namespaces held: {held:?}");

    let run = read_lab_run(&out.join("result.json"));
    let pathlab_results::lab::LabOutcome::Ping(report) = &run.workloads[0].outcome else {
        panic!("{:?}", run.workloads[0].outcome);
    };
    assert_eq!(report.sent, 60, "3 s every 50 ms");
    assert_eq!(report.received, report.sent, "{report:?}");
    // (2 + 3 ms) each way; the issue asks for the links' delays within 0.5 ms, and 0.5 ms
    // more is allowed for the median on 2 cores shared with 400 emulator threads (a debug
    // build forwarding four times per ping).
    let (min, p50) = (
        report.rtt.min_ns as f64 / 1e6,
        report.rtt.p50_ns as f64 / 1e6,
    );
    eprintln!("200 links: ping h1 -> h2 min {min:.3} ms, p50 {p50:.3} ms (theory 10 ms)");
    assert!((10.0..10.5).contains(&min), "{report:?}");
    assert!((10.0..11.0).contains(&p50), "{report:?}");

    // Torn down: no process holds any of the lab's namespaces, none was named, and no
    // interface of it reached this namespace.
    let live = live_netns_inodes();
    let left: Vec<&String> = held.intersection(&live).collect();
    assert!(left.is_empty(), "namespaces still alive: {left:?}");
    assert!(
        named_netns().is_subset(&named_before),
        "{:?}",
        named_netns()
    );
    let strays: Vec<String> = root_interfaces()
        .into_iter()
        .filter(|name| {
            name.starts_with("to-")
                || name == "a"
                || name == "b"
                || (name.starts_with('c')
                    && name[1..]
                        .trim_end_matches(['a', 'b'])
                        .parse::<u32>()
                        .is_ok())
        })
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// The scheduling of the forwarding threads (issue 43), read back from the kernel: by
/// default each is SCHED_FIFO at 50 with the process's memory locked, on the CPUs given,
/// and the emulator says so at start, in `stats` and in its final JSON; without
/// CAP_SYS_NICE it says once why it runs at normal priority, and does.
#[test]
fn the_emulator_reports_the_scheduling_it_asked_for_and_got() {
    let Some(_serial) = privileged("the_emulator_reports_the_scheduling_it_asked_for_and_got")
    else {
        return;
    };
    let cpu = pathlab_os::scheduling::machine_cpus()[0].to_string();
    let mut lab = Lab::start_with("sched", "delay 1ms", &["--cpus", &cpu], false, false);
    let emulator_pid = lab.emulator.as_ref().expect("running").id();
    let threads = forwarding_threads(emulator_pid);
    assert_eq!(threads.len(), 2, "a thread per direction: {threads:?}");
    for thread in &threads {
        assert_eq!(
            (thread.policy, thread.rt_priority),
            (libc::SCHED_FIFO as u32, 50),
            "{thread:?}"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{emulator_pid}/status")).unwrap();
    let locked_kb = status_kb(&status, "VmLck:");
    assert!(locked_kb > 0, "memory locked: VmLck {locked_kb} kB");
    let live = lab
        .stats()
        .scheduling
        .expect("stats say how it is scheduled");
    assert_eq!(
        (live.asked.as_str(), live.policy.as_str(), live.priority),
        ("realtime", "fifo", 50)
    );
    assert!(live.memory_locked && live.notes.is_empty(), "{live:?}");
    assert_eq!((live.cpus.as_str(), live.threads), (cpu.as_str(), 2));
    let text = pathlab(&["emulate", "stats", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "forwarding threads: real-time (SCHED_FIFO 50), memory locked, CPUs {cpu}, 2 \
             forwarding threads"
        )),
        "{text}"
    );
    let (stats, stderr) = stop_with_stderr(&mut lab);
    assert_eq!(stats.scheduling, Some(live));
    assert!(
        stderr.contains("forwarding threads: real-time (SCHED_FIFO 50)"),
        "{stderr}"
    );
    drop(lab);

    // The same emulator without CAP_SYS_NICE: normal priority, said once, and true.
    let line = Line::build(pathlab_os::topology::Middle::Emulator, false).expect("namespaces");
    let name = format!("t{}-sched-nonice", std::process::id());
    let mut command = line.r.command(PATHLAB);
    command
        .args(["emulate", "--between", R_PORT_H1, R_PORT_H2, "delay 1ms"])
        .args(["--name", &name, "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pathlab_os::sys::command_without_capability(&mut command, 23 /* CAP_SYS_NICE */);
    let mut lab = Lab {
        line,
        emulator: Some(command.spawn().expect("pathlab emulate starts")),
        name,
        dir: TempDir::new("sched-nonice"),
    };
    lab.wait_ready();
    let threads = forwarding_threads(lab.emulator.as_ref().unwrap().id());
    assert!(
        threads.iter().all(|t| t.policy == libc::SCHED_OTHER as u32),
        "{threads:?}"
    );
    let (stats, stderr) = stop_with_stderr(&mut lab);
    let got = stats
        .scheduling
        .expect("final stats say how it was scheduled");
    assert_eq!(
        (got.asked.as_str(), got.policy.as_str()),
        ("realtime", "normal")
    );
    let refusal = "no permission for real-time scheduling";
    assert!(got.notes.iter().any(|n| n.contains(refusal)), "{got:?}");
    assert_eq!(stderr.matches(refusal).count(), 1, "said once: {stderr}");
}

/// A forwarding thread of a process as the kernel reports it.
#[derive(Debug)]
struct ThreadClass {
    policy: u32,
    rt_priority: u32,
}

/// The `pathlab-forward` threads of process `pid`, with their scheduling class and
/// real-time priority from /proc (stat fields 40 and 41).
fn forwarding_threads(pid: u32) -> Vec<ThreadClass> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let path = task.expect("task").path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "pathlab-forward" {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).expect("stat");
        // Fields after the command name's closing parenthesis, from field 3 on.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        threads.push(ThreadClass {
            rt_priority: fields[40 - 3].parse().unwrap(),
            policy: fields[41 - 3].parse().unwrap(),
        });
    }
    threads
}

/// A `kB` figure of /proc/PID/status.
fn status_kb(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Stops a lab's emulator with SIGTERM; returns its final stats and what it said.
fn stop_with_stderr(lab: &mut Lab) -> (EmulatorStats, String) {
    let child = lab.emulator.take().expect("running");
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).expect("signal");
    let output = child.wait_with_output().expect("emulator exits");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (
        serde_json::from_slice(&output.stdout).expect("final stats"),
        stderr,
    )
}
