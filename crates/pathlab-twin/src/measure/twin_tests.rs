//! A twin made from the estimators on a path of known parameters: printed, read back, and
//! its own spec, measured again, gives the same figures.

use pathlab_core::spec::Discipline;
use pathlab_core::LinkSpec;

use super::{estimate as measure_estimate, DirectionSamples};
use crate::assemble::{direction, DirectionEstimates};
use crate::file::TwinFile;
use crate::testing::{at_rate, paced, spec, through, through_flows};

/// Measures one direction of `path` as the driver will, and estimates it as the driver
/// does ([`super::estimate`]): a low-load phase of 200-byte probes, a saturating one of
/// full-size frames with a sparse flow beside it, one of small packets.
fn estimate(path: &LinkSpec, seed: u64) -> DirectionEstimates {
    let low_load = through(path, seed, &paced(0, 5000, 2_000_000, 200));
    // Overfed at 50 Mbit/s (the paths below run at 20 Mbit/s or less), a sparse flow of
    // 200-byte probes every 20 ms beside it.
    let start = 20_000_000_000;
    let mut flows = through_flows(
        path,
        seed + 1,
        &[
            at_rate(start, 2_000_000_000, 50e6, 1514),
            paced(start, 100, 20_000_000, 200),
        ],
    );
    let sparse = flows.pop();
    let saturation = flows.pop();
    let small = through(
        path,
        seed + 2,
        &at_rate(30_000_000_000, 500_000_000, 20e6, 100),
    );
    let samples = DirectionSamples {
        longer: None,
        low_load,
        saturation,
        small: Some(small),
        sparse,
        tcp: None,
        tcp_after_idle: None,
        resolution_ns: 1.0,
    };
    measure_estimate(&samples, 0.0, 0.0).unwrap().estimates
}

fn twin_of(up: &LinkSpec, down: &LinkSpec) -> TwinFile {
    TwinFile {
        host: Some("192.0.2.7".into()),
        up: direction(&estimate(up, 1)),
        down: direction(&estimate(down, 11)),
    }
}

#[test]
fn a_twin_prints_reads_back_and_measures_like_its_original() {
    let up = spec("delay 20ms 1ms rate 5mbit pps 1000 limit 40");
    let down = spec("delay 15ms rate 20mbit limit 200 loss gemodel 1% 30%");
    let twin = twin_of(&up, &down);
    let text = twin.to_toml();
    eprintln!("{text}");
    let read = TwinFile::parse(&text).unwrap();
    // As it prints (to six digits, and probabilities to the digits a spec keeps).
    assert_eq!(read.to_toml(), text);
    let rate = &read.down.figures["rate_mbit"];
    assert!(
        (rate.value - twin.down.figures["rate_mbit"].value).abs() < 1e-4,
        "{rate:?}"
    );
    // The twin's spec, measured the same way, gives the same figures.
    for (original, copy) in [(&twin.up, &read.up), (&twin.down, &read.down)] {
        let again = direction(&estimate(&copy.spec, 21));
        for (name, tolerance) in [
            ("base_delay_ms", 0.001),
            ("rate_mbit", 0.01),
            ("buffer_packets", 0.10),
            ("delay_variation_p50_ms", 0.10),
        ] {
            let (a, b) = (&original.figures[name], &again.figures[name]);
            let error = (b.value - a.value).abs();
            assert!(
                error <= tolerance * a.value.abs().max(1e-3),
                "{name}: {} against {}",
                b.value,
                a.value
            );
        }
    }
    // The buffer as measured, in bytes (200 full frames down), not as a packet count,
    // which small packets beside full ones would fill first.
    let bytes = twin.down.spec.queue.limit_bytes.expect("a byte limit") as f64;
    assert!(
        (bytes / (200.0 * 1514.0) - 1.0).abs() < 0.10,
        "{}",
        twin.down.spec
    );
    assert_eq!(twin.down.spec.queue.limit_packets, None);
    assert!(twin.up.spec.packet_rate.is_some(), "{}", twin.up.spec);
    assert!(
        matches!(
            twin.down.spec.loss,
            Some(pathlab_core::spec::LossSpec::GilbertElliott { .. })
        ),
        "{}",
        twin.down.spec
    );
}

#[test]
fn a_path_that_keeps_flows_apart_gets_a_flow_queue_and_one_that_does_not_keeps_its_own() {
    for (path, fq) in [
        ("delay 10ms rate 10mbit limit 150kb queue fq_codel", true),
        ("delay 10ms rate 10mbit limit 100", false),
        ("delay 10ms rate 10mbit limit 150kb queue codel", false),
    ] {
        let twin = direction(&estimate(&spec(path), 5));
        let is_fq = matches!(twin.spec.queue.discipline, Discipline::FqCodel(_));
        assert_eq!(is_fq, fq, "{path}: {}: {:#?}", twin.spec, twin.figures);
        let sparse = &twin.figures["sparse_flow_delay_ms"];
        assert_eq!(sparse.value < 2.5, fq, "{path}: {sparse:?}");
        assert_eq!(twin.spec.queue.ring, None, "{path}: {}", twin.spec);
    }
}

#[test]
fn a_queue_below_the_flow_queues_becomes_the_twins_ring() {
    // The bond's shape: a fair queue, then lines that hold 5 ms under load.
    let twin = direction(&estimate(
        &spec("delay 10ms rate 10mbit limit 150kb queue fq_codel ring 5ms"),
        5,
    ));
    assert!(
        matches!(twin.spec.queue.discipline, Discipline::FqCodel(_)),
        "{}",
        twin.spec
    );
    let ring = twin.spec.queue.ring.expect("a ring").as_secs_f64() * 1e3;
    assert!((ring / 5.0 - 1.0).abs() < 0.1, "{}", twin.spec);
}
