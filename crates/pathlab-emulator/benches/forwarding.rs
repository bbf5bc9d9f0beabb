//! The emulator against kernel forwarding, on the same h1 - r - h2 line, in one run:
//! TCP throughput through a kernel bridge and through `pathlab emulate` with an empty spec,
//! their ratio, the packets per second that makes; both directions at once against one;
//! TCP through a bottleneck of R Mbit/s against the TCP ideal; and how far from its model
//! time the emulator sends packets under a 100 Mbit/s load.
//!
//! `cargo bench -p pathlab-emulator --bench forwarding` (as root). PATHLAB_BENCH_SECS sets the
//! length of each empty-spec TCP run (default 5), PATHLAB_BENCH_LONG_SECS and
//! PATHLAB_BENCH_RATES the bottleneck runs', and PATHLAB_BENCH_TRACE prints each
//! direction's rate, queue and lateness every second of a bottleneck run.
//! PATHLAB_BENCH_RECEIVE set to `ring` or `socket` makes every port receive that way
//! (default: as `ReceiveMode::for_link` chooses), to compare the two; PATHLAB_BENCH_PRIORITY
//! set to `normal` runs the forwarding threads at normal priority (default: `realtime`,
//! as `pathlab emulate`). PATHLAB_BENCH_PARTS
//! (comma-separated: `empty`, `both`, `bottleneck`, `udp`; default all) runs only those parts.

use std::time::Duration;

use pathlab_core::{quantile, LinkSpec};
use pathlab_emulator::emulator::{self, EmulatorConfig, EmulatorStats};
use pathlab_emulator::port::{PacketPort, ReceiveMode};
use pathlab_os::scheduling::Priority;
use pathlab_os::topology::{Check, Line, Middle, R_PORT_H1, R_PORT_H2};

/// How long each run counts: PATHLAB_BENCH_SECS, default 5.
fn seconds() -> Duration {
    seconds_from_env("PATHLAB_BENCH_SECS", 5)
}

/// The whole seconds environment variable `name` gives, else `default`.
fn seconds_from_env(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// Builds the line with an emulator running `spec` in r; returns both.
fn with_emulator(spec: &str) -> (Line, emulator::EmulatorHandle) {
    let line = Line::build(Middle::Emulator, true).expect("namespaces");
    let ports = line
        .r
        .run(
            || -> Result<[PacketPort; 2], pathlab_emulator::port::PortError> {
                let spec = LinkSpec::parse(spec).expect("spec");
                let mode = match std::env::var("PATHLAB_BENCH_RECEIVE").as_deref() {
                    Ok("ring") => ReceiveMode::ring_for_link(&spec),
                    Ok("socket") => ReceiveMode::socket_for_link(&spec),
                    _ => ReceiveMode::for_link(&spec),
                };
                Ok([
                    PacketPort::open_with(R_PORT_H1, mode)?,
                    PacketPort::open_with(R_PORT_H2, mode)?,
                ])
            },
        )
        .expect("thread in r")
        .expect("ports open");
    let spec = LinkSpec::parse(spec).expect("spec");
    // PATHLAB_BENCH_PRIORITY=normal compares with forwarding threads at normal priority.
    let priority = std::env::var("PATHLAB_BENCH_PRIORITY")
        .ok()
        .map_or(Ok(Priority::Realtime), |p| p.parse())
        .expect("PATHLAB_BENCH_PRIORITY is realtime or normal");
    let request = pathlab_os::scheduling::Request {
        priority,
        cpus: None,
    };
    let pool = emulator::Pool::with_scheduling(2, &request).expect("forwarding threads");
    let handle = pool
        .spawn(
            ports,
            EmulatorConfig {
                name: "bench".into(),
                forward: spec.clone(),
                reverse: spec,
                seed: 1,
                record: None,
                pcap: None,
                queue_sample_interval: pathlab_core::Duration::from_millis(10),
                command: vec![],
                on_interface_gone: pathlab_emulator::emulator::OnInterfaceGone::Stop,
            },
        )
        .expect("emulator starts");
    (line, handle)
}

fn tcp(line: &Line) -> f64 {
    line.start_tcp_bulk(5201, seconds(), Duration::from_secs(1), Check::Nothing)
        .expect("transfer starts")
        .finish()
        .expect("transfer")
        * 8.0
}

/// Whether PATHLAB_BENCH_PARTS asks for `part` (all parts when it is not set).
fn wanted(part: &str) -> bool {
    std::env::var("PATHLAB_BENCH_PARTS")
        .map_or(true, |parts| parts.split(',').any(|p| p.trim() == part))
}

fn main() {
    if pathlab_os::require_net_admin("the forwarding benchmark").is_err() {
        eprintln!("the forwarding benchmark needs CAP_NET_ADMIN: run it as root");
        return;
    }
    let rounds = 3;
    let kernel_bps = if wanted("empty") {
        empty_spec_runs(rounds)
    } else {
        let line = Line::build(Middle::KernelBridge, true).expect("namespaces");
        tcp(&line)
    };
    if wanted("both") {
        bidirectional_runs(rounds);
    }
    if wanted("bottleneck") {
        bottleneck_runs(kernel_bps);
    }
    if wanted("udp") {
        udp_lateness();
    }
}

/// The emulator with an empty spec against the kernel bridge, alternated for `rounds`
/// rounds; returns the kernel bridge's median TCP rate in bit/s.
fn empty_spec_runs(rounds: usize) -> f64 {
    // Alternate the two, several rounds: this machine's speed drifts by a factor of
    // several between minutes, and the ratio within a round is what is comparable.
    let mut ratios = Vec::new();
    let mut kernel_rates = Vec::new();
    let mut last_stats = None;
    println!(
        "TCP h1 -> h2, {} s per run, default congestion control:",
        seconds().as_secs()
    );
    for round in 1..=rounds {
        let kernel = {
            let line = Line::build(Middle::KernelBridge, true).expect("namespaces");
            tcp(&line)
        };
        let (line, handle) = with_emulator("");
        let pathlab = tcp(&line);
        let stats = handle.stop();
        drop(line);
        let forward = &stats.directions[0];
        let seconds_up = stats.uptime_ns as f64 * 1e-9;
        println!(
            "  round {round}: kernel bridge {:6.3} Gbit/s, pathlab emulate '' {:6.3} Gbit/s, ratio {:.3}; \
             emulator {:.0} packets/s of {:.0} bytes ({} frames in, {} segments)",
            kernel * 1e-9,
            pathlab * 1e-9,
            pathlab / kernel,
            forward.forwarded as f64 / seconds_up,
            forward.forwarded_bytes as f64 / forward.forwarded.max(1) as f64,
            forward.frames_received,
            forward.packets_received
        );
        ratios.push(pathlab / kernel);
        kernel_rates.push(kernel);
        last_stats = Some(stats);
    }
    ratios.sort_by(f64::total_cmp);
    kernel_rates.sort_by(f64::total_cmp);
    let median = |sorted: &[f64]| quantile::of_sorted(sorted, 0.5).expect("at least one round");
    println!("  median ratio {:.3}", median(&ratios));
    let stats = last_stats.expect("at least one round");
    print_lateness("  sent late (empty spec)", &stats);

    median(&kernel_rates)
}

/// UDP at 100 Mbit/s through `delay 10ms`: the one-way delay the application sees beyond
/// the 10 ms, and the emulator's own send error.
fn udp_lateness() {
    let (line, handle) = with_emulator("delay 10ms");
    let mut delays = line
        .udp_one_way_delays(5202, 100e6, 1472, Duration::from_secs(3))
        .expect("udp");
    let stats = handle.stop();
    delays.sort();
    let added: Vec<Duration> = delays
        .iter()
        .map(|d| d.saturating_sub(Duration::from_millis(10)))
        .collect();
    println!(
        "UDP 100 Mbit/s of 1472-byte datagrams through 'delay 10ms' ({} received):",
        delays.len()
    );
    let added_us = |q| {
        quantile::of_sorted(&added, q)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e6
    };
    println!(
        "  one-way delay minus 10 ms, application to application: p50 {:.1} us, p99 {:.1} us",
        added_us(0.5),
        added_us(0.99)
    );
    print_lateness("  emulator's own send error", &stats);
}

/// How long each bottleneck run counts (after 5 s of warm-up): PATHLAB_BENCH_LONG_SECS,
/// default 15 (cubic needs long to grow a window of tens of MB again after a loss).
fn long_seconds() -> Duration {
    seconds_from_env("PATHLAB_BENCH_LONG_SECS", 15)
}

/// TCP through `rate R delay 40ms` each way with a queue of one bandwidth-delay product,
/// 128 MB socket buffers, for R up to the kernel's rate, cubic and bbr: goodput against the
/// TCP ideal at R (1448 bytes of payload per 1514-byte frame), and the emulator's lateness.
/// PATHLAB_BENCH_RATES (Mbit/s, comma-separated) picks the rates.
fn bottleneck_runs(kernel_bps: f64) {
    let rates: Vec<f64> = std::env::var("PATHLAB_BENCH_RATES").ok().map_or_else(
        || vec![1000.0, 2000.0, 4000.0],
        |list| {
            list.split(',')
                .filter_map(|r| r.trim().parse().ok())
                .collect()
        },
    );
    println!(
        "TCP through 'rate R delay 40ms limit BDP' (each way), 128 MB buffers; kernel bridge {:.2} Gbit/s:",
        kernel_bps * 1e-9
    );
    for mbit in rates {
        for congestion in ["cubic", "bbr"] {
            let rate = mbit * 1e6;
            let bdp_packets = (rate * 0.080 / (1514.0 * 8.0)).ceil() as u64;
            let (line, handle) =
                with_emulator(&format!("rate {mbit}mbit delay 40ms limit {bdp_packets}"));
            let done = std::sync::atomic::AtomicBool::new(false);
            let goodput = std::thread::scope(|scope| {
                if std::env::var_os("PATHLAB_BENCH_TRACE").is_some() {
                    scope.spawn(|| trace(&handle, &done));
                }
                let goodput = line
                    .start_tcp_bulk_with(
                        5203,
                        long_seconds() + Duration::from_secs(5),
                        Duration::from_secs(5),
                        pathlab_os::topology::Check::Nothing,
                        &pathlab_os::topology::BulkOptions {
                            window: Some(128 << 20),
                            congestion: Some(congestion.into()),
                            reverse: false,
                        },
                    )
                    .expect("transfer starts")
                    .finish()
                    .expect("transfer")
                    * 8.0;
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                goodput
            });
            let stats = handle.stop();
            drop(line);
            let ideal = rate * 1448.0 / 1514.0;
            let forward = &stats.directions[0];
            let late = &forward.lateness;
            println!(
                "  {mbit:5.0} Mbit/s ({:.2} of the kernel's) {congestion:5}: {:7.1} Mbit/s, {:5.1}% of the TCP ideal {:.1}; sent late p50 {} us, p99 {} us, max {} us; dropped by the queue {}, ring full {}, send errors {}",
                rate / kernel_bps,
                goodput * 1e-6,
                100.0 * goodput / ideal,
                ideal * 1e-6,
                late.p50_ns as f64 / 1e3,
                late.p99_ns as f64 / 1e3,
                late.max_ns as f64 / 1e3,
                forward.link.dropped_total(),
                forward.ring_full,
                forward.send_errors,
            );
        }
    }
}

/// Every second until `done`: each direction's rate out, queue, packets inside the link
/// and lateness p99 over the last second (PATHLAB_BENCH_TRACE set).
fn trace(handle: &emulator::EmulatorHandle, done: &std::sync::atomic::AtomicBool) {
    let mut last = [0u64; 2];
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        let Some(stats) = handle.stats() else { return };
        let line: Vec<String> = stats
            .directions
            .iter()
            .zip(&mut last)
            .map(|(d, last)| {
                let rate = (d.forwarded_bytes - *last) as f64 * 8e-6;
                *last = d.forwarded_bytes;
                format!(
                    "{} -> {}: {rate:7.1} Mbit/s, queue {} packets, inside {}, late p99 {} us, waited p99 {} us, ring full {}",
                    d.from, d.to, d.queue_packets, d.in_flight, d.lateness.last_second_p99_ns / 1000, d.waited.last_second_p99_ns / 1000, d.ring_full
                )
            })
            .collect();
        eprintln!("    {}", line.join("; "));
    }
}

/// Both directions saturated at once through an empty spec, against one direction alone,
/// in the same round, through the kernel bridge and through the emulator: what a thread per
/// direction buys, against what the machine's cores allow the kernel.
fn bidirectional_runs(rounds: usize) {
    println!(
        "TCP both ways at once against one way, {} s per run:",
        seconds().as_secs()
    );
    let mut gains = Vec::new();
    for round in 1..=rounds {
        let kernel = {
            let line = Line::build(Middle::KernelBridge, true).expect("namespaces");
            both_ways(&line)
        };
        let (line, handle) = with_emulator("");
        let pathlab = both_ways(&line);
        drop(handle);
        for (name, (one, up, down)) in [("kernel bridge", kernel), ("pathlab emulate ''", pathlab)]
        {
            println!(
                "  round {round}: {name:18}: one way {:6.3} Gbit/s; both ways {:6.3} + {:6.3} = {:6.3} Gbit/s, {:.2} x one way",
                one * 1e-9,
                up * 1e-9,
                down * 1e-9,
                (up + down) * 1e-9,
                (up + down) / one
            );
        }
        gains.push((
            (kernel.1 + kernel.2) / kernel.0,
            (pathlab.1 + pathlab.2) / pathlab.0,
        ));
    }
    let mut kernel: Vec<f64> = gains.iter().map(|g| g.0).collect();
    let mut pathlab: Vec<f64> = gains.iter().map(|g| g.1).collect();
    kernel.sort_by(f64::total_cmp);
    pathlab.sort_by(f64::total_cmp);
    println!(
        "  median gain: kernel bridge {:.2}, pathlab emulate {:.2}",
        quantile::of_sorted(&kernel, 0.5).expect("at least one round"),
        quantile::of_sorted(&pathlab, 0.5).expect("at least one round")
    );
}

/// TCP one way alone, then both ways at once on `line`: (one, up, down) in bit/s.
fn both_ways(line: &Line) -> (f64, f64, f64) {
    let one = tcp(line);
    let start = |port, reverse| {
        line.start_tcp_bulk_with(
            port,
            seconds(),
            Duration::from_secs(1),
            Check::Nothing,
            &pathlab_os::topology::BulkOptions {
                reverse,
                ..Default::default()
            },
        )
        .expect("transfer starts")
    };
    let (up, down) = (start(5204, false), start(5205, true));
    let [up, down] = [up, down].map(|t| t.finish().expect("transfer") * 8.0);
    (one, up, down)
}

fn print_lateness(label: &str, stats: &EmulatorStats) {
    let late = &stats.directions[0].lateness;
    println!(
        "{label}: p50 {} us, p99 {} us, max {} us over {} packets",
        late.p50_ns as f64 / 1e3,
        late.p99_ns as f64 / 1e3,
        late.max_ns as f64 / 1e3,
        late.packets
    );
}
