//! Per-packet limits of the bottleneck against their formulas, in virtual time: a packet
//! rate (`pps N`) beside a byte rate, a packet rate alone, and ATM's cell tax.
//!
//! Each run overloads the bottleneck with CBR (twice what it can carry), so its server is
//! never idle and delivers one packet per service time. Over a run of a few seconds the
//! count is off by at most the packet in service at each end (under 0.02% here), so every
//! figure must match its formula within 0.1%.

use pathlab_core::sim::{self, Load, SimConfig};
use pathlab_core::{BitsPerSec, Duration, LinkSpec};

const TOLERANCE: f64 = 1e-3;

/// Packets per second delivered when `size`-byte packets overload `spec` for `seconds`.
fn delivered_pps(spec: &str, offered: BitsPerSec, size: u32, seconds: u64) -> f64 {
    let report = sim::run(&SimConfig {
        forward: LinkSpec::parse(spec).expect("valid spec"),
        reverse: LinkSpec::default(),
        loads: vec![Load::cbr(offered, size)],
        duration: Duration::from_secs(seconds),
        seed: 1,
        sample_every: Duration::from_millis(100),
    })
    .expect("valid simulation");
    report.loads[0].delivered_bps / (8.0 * f64::from(size))
}

fn assert_close(measured: f64, theory: f64, what: &str) {
    assert!(
        (measured / theory - 1.0).abs() < TOLERANCE,
        "{what}: delivered {measured:.2} packets/s, theory {theory:.2}"
    );
}

/// `rate R pps N`: a packet's service time is max(8 size / R, 1/N), so small packets
/// leave at N per second and large ones at R / (8 size); the two meet at size = R / (8 N)
/// = 10e6 / (8 x 5000) = 250 bytes.
#[test]
fn small_packets_leave_at_the_packet_rate_and_large_ones_at_the_byte_rate() {
    let (rate, pps): (f64, f64) = (10e6, 5000.0);
    let spec = "rate 10mbit pps 5000 limit 20";
    let theory = |size: u32| pps.min(rate / (8.0 * f64::from(size)));
    let mut last_at_the_packet_rate = 0;
    for size in (240..=260).chain([64, 100, 200, 300, 500, 1000, 1514]) {
        let measured = delivered_pps(spec, BitsPerSec::mbit(20), size, 2);
        assert_close(measured, theory(size), &format!("{size} bytes"));
        if (measured / pps - 1.0).abs() < 1e-4 {
            last_at_the_packet_rate = last_at_the_packet_rate.max(size);
        }
    }
    // The crossing: 250 bytes still leave at 5000/s, 251 bytes at 4980/s (0.4% less).
    assert_eq!(
        last_at_the_packet_rate, 250,
        "the packet rate should govern up to rate / (8 N) = 250 bytes"
    );
}

/// `pps N` alone: every packet takes 1/N s whatever its size; below N nothing queues.
#[test]
fn a_packet_rate_alone_serves_n_packets_per_second_of_any_size() {
    for size in [64, 1514, 9000] {
        let offered = BitsPerSec(2 * 2000 * 8 * u64::from(size));
        let measured = delivered_pps("pps 2000 limit 20", offered, size, 2);
        assert_close(measured, 2000.0, &format!("{size} bytes"));
    }
    // 1000 packets/s into 2000/s: each is served in 0.5 ms, before the next arrives.
    let report = sim::run(&SimConfig {
        forward: LinkSpec::parse("pps 2000").expect("valid spec"),
        reverse: LinkSpec::default(),
        loads: vec![Load::cbr(BitsPerSec(1000 * 8 * 100), 100)],
        duration: Duration::from_secs(2),
        seed: 1,
        sample_every: Duration::from_millis(100),
    })
    .expect("valid simulation");
    let load = &report.loads[0];
    assert_eq!(load.dropped_total(), 0);
    assert_eq!(load.queue_delay.max, Duration::ZERO);
    assert_eq!(load.owd.max, Duration::from_micros(500));
}

/// ATM's cell tax, `rate R OVERHEAD 48 5` (netem's `packet_time_ns`; tc-netem(8): ATM
/// cells carry 48 bytes of payload and 5 of header): a packet of `size` bytes takes
/// cells = ceil((size + OVERHEAD) / 48) cells of 53 bytes, so the link delivers
/// R / (8 x 53 x cells) packets per second: a staircase, one step every 48 bytes.
#[test]
fn atm_cells_tax_every_packet_by_the_cell_formula() {
    let (rate, overhead) = (1e6, 10u32);
    let spec = "rate 1mbit 10 48 5 limit 20";
    let theory = |size: u32| {
        let cells = (size + overhead).div_ceil(48);
        rate / (8.0 * 53.0 * f64::from(cells))
    };
    for size in (20..=150).chain([1514]) {
        let measured = delivered_pps(spec, BitsPerSec::mbit(2), size, 3);
        assert_close(measured, theory(size), &format!("{size} bytes"));
    }
    // The steps: 38 bytes + 10 fill one cell exactly, 39 need two.
    assert_eq!((theory(38) / theory(39)).round(), 2.0);
}

/// Both limits at once, as a modem with a slow processor on an ATM line: the larger of
/// the cell time and 1/N. At 11 Mbit/s and 48 5 cells with 12 bytes of overhead, a
/// 242-byte frame takes 6 cells (318 B, 231 us) and 1/5000 s = 200 us: the cells govern;
/// a 100-byte frame takes 3 cells (116 us) and the packet rate governs.
#[test]
fn a_packet_rate_and_atm_cells_combine_as_the_larger_service_time() {
    let spec = "rate 11mbit 12 48 5 pps 5000 limit 20";
    let cells = |size: u32| f64::from((size + 12).div_ceil(48));
    for (size, theory) in [(242, 11e6 / (8.0 * 53.0 * cells(242))), (100, 5000.0)] {
        let measured = delivered_pps(spec, BitsPerSec::mbit(22), size, 2);
        assert_close(measured, theory, &format!("{size} bytes"));
    }
}
