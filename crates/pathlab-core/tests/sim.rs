//! The link model against queueing theory, in virtual time.
//!
//! Every expected figure is a formula with its source; tolerances are stated with it.

use pathlab_core::sim::{self, Load, LoadKind, SimConfig};
use pathlab_core::spec::{DelaySpec, Distribution, FixedRate, QueueSpec, RateSpec};
use pathlab_core::{BitsPerSec, Duration, LinkSpec, Probability};

fn fixed_rate(rate: BitsPerSec) -> RateSpec {
    RateSpec::Fixed(FixedRate {
        rate,
        packet_overhead: 0,
        cell_size: 0,
        cell_overhead: 0,
    })
}

fn bottleneck(rate: BitsPerSec, limit_packets: u32) -> LinkSpec {
    LinkSpec {
        rate: Some(fixed_rate(rate)),
        queue: QueueSpec {
            limit_packets: Some(limit_packets),
            ..QueueSpec::default()
        },
        ..LinkSpec::default()
    }
}

fn constant_delay(delay: Duration) -> DelaySpec {
    DelaySpec {
        delay,
        jitter: Duration::ZERO,
        correlation: Probability::ZERO,
        distribution: Distribution::Uniform,
    }
}

fn run(forward: LinkSpec, loads: Vec<Load>, seconds: u64) -> sim::SimReport {
    sim::run(&SimConfig {
        forward,
        reverse: LinkSpec::default(),
        loads,
        duration: Duration::from_secs(seconds),
        seed: 1,
        sample_every: Duration::from_millis(10),
    })
    .expect("valid simulation")
}

fn relative_error(measured: f64, expected: f64) -> f64 {
    (measured - expected).abs() / expected
}

/// An overloaded tail-drop queue of `limit` packets of `size` bytes served at `rate_bps`:
/// it delivered `delivered_bps` (within 0.5%), dropped the rest of what was offered
/// (within 1%), every packet is accounted for, and a full queue drains in
/// `limit x size x 8 / rate`, the median queue delay (within 2%) since every accepted
/// packet joins a (nearly) full queue.
fn assert_overloaded_tail_drop(
    load: &sim::LoadReport,
    delivered_bps: f64,
    (limit, size): (u32, u32),
    rate_bps: f64,
) {
    assert!(
        relative_error(load.delivered_bps, delivered_bps) < 0.005,
        "delivered {} bit/s, expected {delivered_bps}",
        load.delivered_bps
    );
    let drop_fraction = load.lost_fraction();
    let expected_drop = 1.0 - delivered_bps / load.offered_bps;
    assert!(
        relative_error(drop_fraction, expected_drop) < 0.01,
        "drop fraction {drop_fraction}, expected {expected_drop}"
    );
    assert_eq!(
        load.sent_packets,
        load.delivered_packets + load.dropped_total() + load.in_flight_at_end
    );
    let expected_delay = f64::from(limit) * f64::from(size) * 8.0 / rate_bps;
    assert!(
        relative_error(load.queue_delay.p50.as_secs_f64(), expected_delay) < 0.02,
        "median queue delay {}, expected {expected_delay} s",
        load.queue_delay.p50
    );
}

/// CBR at 15 Mbit/s into a 10 Mbit/s tail-drop queue of 100 packets of 1500 bytes.
#[test]
fn overload_through_tail_drop_matches_theory() {
    let rate = BitsPerSec::mbit(10);
    let (limit, size) = (100, 1500);
    let report = run(
        bottleneck(rate, limit),
        vec![Load::cbr(BitsPerSec::mbit(15), size)],
        30,
    );
    let load = &report.loads[0];

    // A work-conserving server of rate R that is never idle delivers R (100 x 1500 x 8 /
    // 10e6 = 120 ms of queue).
    assert_overloaded_tail_drop(load, rate.as_f64(), (limit, size), rate.as_f64());
    // The sampled queue length sits at the limit once full.
    let late = &report.samples[report.samples.len() / 2..];
    assert!(late
        .iter()
        .all(|s| s.forward_queue_packets >= limit - 1 && s.forward_queue_packets <= limit));
}

/// The same overload through a token bucket of 150 KB (tbf's `rate 10mbit burst 150kb
/// limit 150000`): the bucket's bytes leave first, then the rate; the queue behind it
/// fills and drops as tail drop does.
#[test]
fn overload_through_a_token_bucket_delivers_its_burst_then_the_rate() {
    let (limit, size) = (100, 1500);
    let spec = LinkSpec::parse("rate 10mbit burst 150kb limit 100").unwrap();
    let report = run(spec, vec![Load::cbr(BitsPerSec::mbit(15), size)], 30);
    let load = &report.loads[0];
    // Delivered: the bucket once, then the rate: (150 KiB x 8 + 10 Mbit/s x 30 s) / 30 s;
    // once the bucket is empty the full queue drains at the rate, as tail drop's.
    let burst_bits = 150.0 * 1024.0 * 8.0;
    let expected = (burst_bits + 10e6 * 30.0) / 30.0;
    assert_overloaded_tail_drop(load, expected, (limit, size), 10e6);
    // The first 150 KiB went at once (no peak): the queue stayed empty until the
    // bucket ran out, 150 KiB / (15 - 10 Mbit/s) = 246 ms in.
    let empty_until = report
        .samples
        .iter()
        .take_while(|s| s.forward_queue_packets <= 1)
        .last()
        .map(|s| s.at.as_secs_f64())
        .unwrap();
    assert!(
        (empty_until - 0.246).abs() < 0.02,
        "the queue began to fill at {empty_until} s"
    );
}

/// Below the rate, CBR packets never wait: the gap (2.4 ms) exceeds the serialization time
/// (1.2 ms), so each finds the line idle.
#[test]
fn underload_never_queues_or_drops() {
    let rate = BitsPerSec::mbit(10);
    let report = run(
        bottleneck(rate, 100),
        vec![Load::cbr(BitsPerSec::mbit(5), 1500)],
        10,
    );
    let load = &report.loads[0];
    assert_eq!(load.dropped_total(), 0);
    let serialization = rate.serialization_time(1500);
    assert!(
        load.queue_delay.max < serialization,
        "max queue delay {}",
        load.queue_delay.max
    );
    // One-way delay is exactly the serialization time.
    assert_eq!(load.owd.min, serialization);
    assert_eq!(load.owd.max, serialization);
}

/// A constant delay D adds exactly D, with and without a bottleneck in front of it.
#[test]
fn constant_delay_adds_exactly_d() {
    let delay = Duration::from_millis(25);
    let load = vec![Load::cbr(BitsPerSec::mbit(1), 1000)];
    let report = run(
        LinkSpec {
            delay: Some(constant_delay(delay)),
            ..LinkSpec::default()
        },
        load.clone(),
        5,
    );
    assert_eq!(report.loads[0].owd.min, delay);
    assert_eq!(report.loads[0].owd.max, delay);

    let rate = BitsPerSec::mbit(100);
    let report = run(
        LinkSpec {
            delay: Some(constant_delay(delay)),
            rate: Some(fixed_rate(rate)),
            ..LinkSpec::default()
        },
        load,
        5,
    );
    let expected = delay + rate.serialization_time(1000);
    assert_eq!(report.loads[0].owd.min, expected);
    assert_eq!(report.loads[0].owd.max, expected);
}

/// The same seed replays bit for bit.
#[test]
fn same_seed_same_report() {
    let loads = vec![
        Load::cbr(BitsPerSec::mbit(12), 1500),
        Load {
            kind: LoadKind::Poisson,
            ..Load::cbr(BitsPerSec::mbit(2), 200)
        },
    ];
    let a = run(bottleneck(BitsPerSec::mbit(10), 50), loads.clone(), 5);
    let b = run(bottleneck(BitsPerSec::mbit(10), 50), loads, 5);
    assert_eq!(a, b);
}

/// A load marked `reverse` crosses the reverse spec, not the forward one; an on-off load
/// offers rate x on / (on + off) on average.
#[test]
fn reverse_and_on_off_loads() {
    let reverse: Load = "cbr:1mbit:1000:reverse".parse().expect("valid load");
    let on_off: Load = "onoff:8mbit:1000:on=1s:off=3s".parse().expect("valid load");
    let report = sim::run(&SimConfig {
        forward: LinkSpec {
            delay: Some(constant_delay(Duration::from_millis(3))),
            ..LinkSpec::default()
        },
        reverse: LinkSpec {
            delay: Some(constant_delay(Duration::from_millis(11))),
            ..LinkSpec::default()
        },
        loads: vec![reverse, on_off],
        duration: Duration::from_secs(8),
        seed: 2,
        sample_every: Duration::from_millis(100),
    })
    .expect("valid simulation");
    assert_eq!(report.loads[0].owd.max, Duration::from_millis(11));
    assert_eq!(report.loads[1].owd.max, Duration::from_millis(3));
    // Two bursts of 1 s at 8 Mbit/s in 8 s: 1000 packets each, 2 Mbit/s on average.
    assert_eq!(report.loads[1].sent_packets, 2000);
    assert!((report.loads[1].offered_bps - 2e6).abs() < 1.0);
    assert_eq!(report.reverse.packets_in, report.loads[0].sent_packets);
}
