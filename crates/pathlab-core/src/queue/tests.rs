//! Queue disciplines against their papers and RFCs, driven directly in virtual time.

use super::*;
use crate::packet::{Ecn, Packet};
use crate::spec::{CodelConfig, FqCodelConfig, PieConfig, RedConfig};
use crate::time::{Duration, Instant};
use crate::units::{BitsPerSec, Probability};
use crate::verdict::{DropReason, Verdicts};

fn packet(now: Instant, len: u32, flow: u64) -> Packet {
    Packet::synthetic(now, len, flow, Ecn::NotEct)
}

fn limits(packets: u32) -> Limits {
    Limits {
        packets,
        bytes: None,
    }
}

/// CoDel's control law: once dropping, drops are spaced by the control law
/// before (RFC 8289 section 5.4): count is 1 after the first drop, so the gap after drop
/// n is interval / sqrt(n). A queue held far above target with packets dequeued
/// every millisecond shows the spacing, rounded up to the dequeue grid.
#[test]
fn codel_drops_follow_the_control_law() {
    let config = CodelConfig::default();
    let mut codel = Codel::new(config, limits(100_000));
    let mut verdicts = Verdicts::default();
    for _ in 0..50_000 {
        codel.enqueue(Instant::ZERO, packet(Instant::ZERO, 1500, 0), &mut verdicts);
    }
    let mut drop_times = Vec::new();
    for ms in 1..3_000 {
        let now = Instant::from_millis(ms);
        codel.dequeue(now, &mut verdicts);
        drop_times.extend(verdicts.dropped.drain(..).map(|d| d.at));
    }
    // Sojourn reaches target (5 ms) at the dequeue at 5 ms; the first drop comes one
    // interval later if it never fell back below (section 5.3).
    assert_eq!(drop_times[0], Instant::from_millis(105));
    // drop_next advances by the law from the previous drop_next, not from the (1 ms grid)
    // instant of the drop: drop n+1 is due at 105 ms + sum over k = 1..n of 100 ms / sqrt(k)
    // and happens at the first dequeue at or after that.
    let mut due = 0.105;
    for (n, at) in drop_times.iter().enumerate().take(30).skip(1) {
        due += 0.1 / (n as f64).sqrt();
        let at = at.as_secs_f64();
        assert!(
            at >= due - 1e-9 && at < due + 0.001,
            "drop {n} at {at}, control law due {due}"
        );
    }
}

#[test]
fn codel_never_drops_below_capacity_or_with_one_packet_queued() {
    let mut codel = Codel::new(CodelConfig::default(), limits(1000));
    let mut verdicts = Verdicts::default();
    // One packet at a time, each waiting 50 ms (far above target): the backlog is never
    // more than one MTU, so CoDel must not drop (RFC 8289 section 5.2, maxpacket).
    for i in 0..1000 {
        let at = Instant::from_millis(i * 60);
        codel.enqueue(at, packet(at, 1500, 0), &mut verdicts);
        codel.dequeue(at + Duration::from_millis(50), &mut verdicts);
    }
    assert!(verdicts.dropped.is_empty());
}

/// DRR gives backlogged flows equal bytes whatever their packet sizes (RFC 8290 section 4).
#[test]
fn fq_codel_shares_bytes_equally_between_backlogged_flows() {
    let config = FqCodelConfig {
        codel: CodelConfig {
            target: Duration::from_secs(100),
            ..CodelConfig::default()
        },
        ..FqCodelConfig::default()
    };
    let mut fq = FqCodel::new(config, limits(100_000), crate::rng::Rng::seed_from(1));
    let mut verdicts = Verdicts::default();
    for _ in 0..20_000 {
        fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 1500, 1), &mut verdicts);
        fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 300, 2), &mut verdicts);
        fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 300, 2), &mut verdicts);
    }
    let mut bytes = [0u64; 3];
    let mut served = 0;
    while served < 5_000_000 {
        let p = fq
            .dequeue(Instant::ZERO, &mut verdicts)
            .expect("backlogged");
        bytes[p.flow as usize] += u64::from(p.len_bytes);
        served += u64::from(p.len_bytes);
    }
    let ratio = bytes[1] as f64 / bytes[2] as f64;
    assert!((ratio - 1.0).abs() < 0.01, "byte ratio {ratio}");
}

#[test]
fn fq_codel_overflow_drops_from_the_fattest_flow() {
    let mut fq = FqCodel::new(
        FqCodelConfig::default(),
        limits(100),
        crate::rng::Rng::seed_from(1),
    );
    let mut verdicts = Verdicts::default();
    for _ in 0..80 {
        fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 1500, 1), &mut verdicts);
    }
    for _ in 0..20 {
        fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 100, 2), &mut verdicts);
    }
    fq.enqueue(Instant::ZERO, packet(Instant::ZERO, 100, 2), &mut verdicts);
    assert!(!verdicts.dropped.is_empty());
    assert!(verdicts
        .dropped
        .iter()
        .all(|d| d.packet.flow == 1 && d.reason == DropReason::QueueFull));
    assert!(fq.len_packets() <= 100);
    assert_eq!(
        fq.len_bytes(),
        (80 - verdicts.dropped.len() as u64) * 1500 + 21 * 100
    );
}

fn red_config(max_probability: f64) -> RedConfig {
    RedConfig {
        min_bytes: 10 * 1000,
        max_bytes: 30 * 1000,
        max_probability: Probability::new(max_probability).expect("valid"),
        weight: 1.0,
        avpkt_bytes: 1000,
        ..RedConfig::default()
    }
}

#[test]
fn red_curve_is_linear_between_its_thresholds() {
    let config = red_config(0.1);
    assert_eq!(red::drop_curve(&config, 5_000.0), 0.0);
    for avg in [10_000.0, 15_000.0, 20_000.0, 29_999.0] {
        let expected = 0.1 * (avg - 10_000.0) / 20_000.0;
        assert!((red::drop_curve(&config, avg) - expected).abs() < 1e-12);
    }
    assert_eq!(red::drop_curve(&config, 30_000.0), 1.0);
    let gentle = RedConfig {
        gentle: true,
        ..config
    };
    assert!((red::drop_curve(&gentle, 45_000.0) - 0.55).abs() < 1e-12);
    assert_eq!(red::drop_curve(&gentle, 60_000.0), 1.0);
}

/// With the average held at a fixed point of the linear region (weight 1 and a backlog
/// kept at 20 packets), Floyd and Jacobson's count method (pa = pb / (1 - count pb), count
/// = packets let through since the last drop) gives P(gap = k) = pb for k = 1 ..= 1/pb:
/// the gap is uniform with mean (1 + 1/pb) / 2, so the drop fraction is 2 pb / (1 + pb)
/// (Floyd and Jacobson 1993, section 7).
#[test]
fn red_drop_fraction_follows_the_count_method() {
    for max_p in [0.02, 0.1] {
        let mut red = Red::new(
            red_config(max_p),
            limits(1000),
            crate::rng::Rng::seed_from(6),
        );
        let mut verdicts = Verdicts::default();
        // Fill to 20 packets without the AQM's help: enqueue until the backlog is there.
        while red.len_packets() < 20 {
            red.enqueue(Instant::ZERO, packet(Instant::ZERO, 1000, 0), &mut verdicts);
        }
        verdicts.dropped.clear();
        let trials = 400_000;
        for i in 0..trials {
            let now = Instant::from_micros(i);
            red.enqueue(now, packet(now, 1000, 0), &mut verdicts);
            if red.len_packets() > 20 {
                red.dequeue(now, &mut verdicts);
            }
        }
        let pb = max_p * 0.5; // backlog 20,000 bytes: halfway between min and max
        let expected = 2.0 * pb / (1.0 + pb);
        let fraction = verdicts.dropped.len() as f64 / f64::from(trials as u32);
        assert!(
            (fraction - expected).abs() / expected < 0.03,
            "max_p {max_p}: drop fraction {fraction}, expected {expected}"
        );
        assert!(verdicts.dropped.iter().all(|d| d.reason == DropReason::Red));
    }
}

#[test]
fn red_marks_ecn_capable_packets_instead_of_dropping() {
    let config = RedConfig {
        ecn: true,
        ..red_config(0.1)
    };
    let mut red = Red::new(config, limits(1000), crate::rng::Rng::seed_from(6));
    let mut verdicts = Verdicts::default();
    for i in 0..10_000 {
        let now = Instant::from_micros(i);
        red.enqueue(
            now,
            Packet::synthetic(now, 1000, 0, Ecn::Ect0),
            &mut verdicts,
        );
        if red.len_packets() > 20 {
            red.dequeue(now, &mut verdicts);
        }
    }
    assert!(verdicts.dropped.is_empty());
    assert!(verdicts.ce_marked > 100);
}

/// Feeds a PIE queue served at `line` with CBR `offered`, returning (drops, sojourns).
fn drive_pie(
    config: PieConfig,
    offered: BitsPerSec,
    line: BitsPerSec,
    seconds: u64,
) -> (usize, Vec<Duration>) {
    let mut pie = Pie::new(config, limits(10_000), crate::rng::Rng::seed_from(3));
    let mut verdicts = Verdicts::default();
    let arrival_gap = offered.serialization_time(1500);
    let service = line.serialization_time(1500);
    let end = Instant::from_secs(seconds);
    let (mut next_arrival, mut next_service) = (Instant::ZERO, Instant::ZERO);
    let mut sojourns = Vec::new();
    while next_arrival < end || next_service < end {
        if next_arrival <= next_service {
            pie.enqueue(next_arrival, packet(next_arrival, 1500, 0), &mut verdicts);
            next_arrival += arrival_gap;
        } else {
            let now = next_service;
            match pie.dequeue(now, &mut verdicts) {
                Some(p) => {
                    sojourns.push(now - p.enqueued);
                    next_service = now + service;
                }
                None => next_service = next_arrival.max(now),
            }
        }
    }
    (verdicts.dropped.len(), sojourns)
}

#[test]
fn pie_never_drops_below_capacity() {
    let (drops, sojourns) = drive_pie(
        PieConfig::default(),
        BitsPerSec::mbit(9),
        BitsPerSec::mbit(10),
        30,
    );
    assert_eq!(drops, 0);
    assert!(sojourns.iter().all(|s| *s < Duration::from_millis(2)));
}

/// A burst shorter than max_burst passes untouched (RFC 8033 section 4.4): 100 ms at
/// twice the line rate from idle builds 50 ms of queue, and nothing is dropped.
#[test]
fn pie_lets_a_short_burst_through() {
    let (drops, sojourns) = drive_pie(
        PieConfig::default(),
        BitsPerSec::mbit(20),
        BitsPerSec::mbit(10),
        0,
    );
    assert_eq!((drops, sojourns.len()), (0, 0));
    let mut pie = Pie::new(
        PieConfig::default(),
        limits(10_000),
        crate::rng::Rng::seed_from(3),
    );
    let mut verdicts = Verdicts::default();
    let gap = BitsPerSec::mbit(20).serialization_time(1500);
    let mut now = Instant::ZERO;
    while now < Instant::from_millis(100) {
        pie.enqueue(now, packet(now, 1500, 0), &mut verdicts);
        now += gap;
    }
    assert!(verdicts.dropped.is_empty());
    assert_eq!(pie.drop_probability(), 0.0);
}
