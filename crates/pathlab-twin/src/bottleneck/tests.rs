//! The bottleneck's estimators against `pathlab-core` links of known rate, packet rate,
//! buffer and discipline, in virtual time.

use std::fmt::Write as _;
use std::sync::Arc;

use pathlab_core::spec::trace::Trace;
use pathlab_core::spec::{RateSpec, TraceRef};
use pathlab_core::LinkSpec;

use super::*;
use crate::buffer::{buffer, Drops};
use crate::delay::delay_variation;
use crate::queued::longest_queued;
use crate::testing::{at_rate, paced, spec, through, through_flows};
use crate::trace::{delivery_trace, may_move, moves, MAY_MOVE, MOVING_VARIATION};

/// A full-size Ethernet frame, bytes.
const FRAME: u32 = 1514;

/// What a measurement of one direction saw: a low-load phase, then one that overfed the
/// bottleneck with `len_bytes` packets at `rate_bps` for `duration_ns`.
struct Measured {
    clocks: Clocks,
    /// Relative delay above which a packet waited in the queue.
    queued_ns: f64,
    low_load_median_ns: f64,
    saturated: Vec<Sample>,
}

fn measure(
    path: &LinkSpec,
    seed: u64,
    rate_bps: f64,
    duration_ns: u64,
    len_bytes: u32,
) -> Measured {
    let low = through(path, seed, &paced(0, 1000, 2_000_000, 200));
    let clocks = Clocks::from_low_load(&low).unwrap();
    let variation = delay_variation(&low, &clocks, 20).unwrap();
    let saturated = through(
        path,
        seed + 1,
        &at_rate(3_000_000_000, duration_ns, rate_bps, len_bytes),
    );
    Measured {
        clocks,
        queued_ns: variation.quantiles.last().unwrap().value_ns + 100_000.0,
        low_load_median_ns: variation.quantiles[10].value_ns,
        saturated,
    }
}

fn rate_of(m: &Measured) -> Figure {
    bottleneck_rate(&m.saturated, &m.clocks, m.queued_ns, 1.0).unwrap()
}

#[test]
fn the_rate_is_recovered_within_one_percent_and_inside_its_interval() {
    for (text, truth) in [
        ("delay 10ms rate 10mbit limit 100", 10e6),
        ("delay 30ms 1ms rate 48mbit limit 300", 48e6),
        ("delay 5ms rate 2mbit limit 50 loss 1%", 2e6),
    ] {
        let path = spec(text);
        let mut covered = 0;
        for seed in 0..10 {
            let m = measure(&path, seed * 2, truth * 1.5, 2_000_000_000, FRAME);
            let rate = rate_of(&m);
            assert!((rate.value / truth - 1.0).abs() < 0.01, "{text}: {rate:?}");
            covered += usize::from(rate.covers(truth));
        }
        eprintln!("{text}: rate interval covered {covered} of 10");
        assert!(covered >= 8, "{text}: {covered}");
    }
}

#[test]
fn a_few_packets_held_up_past_the_queue_do_not_make_the_plateau() {
    // 100 frames at 10 Mbit/s: 121 ms. Ten packets of the full queue arrive 15 ms late (a
    // timestamp taken late, an emulator's late moment): the plateau was those ten, and
    // the buffer 13% too large, while it was read from the highest delay.
    let path = spec("delay 10ms rate 10mbit limit 100");
    let mut m = measure(&path, 5, 30e6, 3_000_000_000, FRAME);
    let rate = rate_of(&m);
    for sample in m.saturated.iter_mut().skip(2000).step_by(50).take(10) {
        sample.received_ns = sample.received_ns.map(|t| t + 15_000_000);
    }
    let found = buffer(&m.saturated, &m.clocks, &rate, m.low_load_median_ns, 0.0).unwrap();
    assert!(
        (found.packets.value / 100.0 - 1.0).abs() < 0.05,
        "{found:?}"
    );
    // And 3% of them (a busy loop on each core: 88 packets of a tbf's plateau came 7 ms
    // late, and it was read at their delay).
    for sample in m.saturated.iter_mut().skip(100).step_by(33) {
        sample.received_ns = sample.received_ns.map(|t| t + 15_000_000);
    }
    let found = buffer(&m.saturated, &m.clocks, &rate, m.low_load_median_ns, 0.0).unwrap();
    assert!(
        (found.packets.value / 100.0 - 1.0).abs() < 0.05,
        "{found:?}"
    );
}

#[test]
fn a_sparse_flow_beside_the_saturating_one_counts_as_the_bottlenecks_work() {
    // 50 probes a second of 242 bytes beside 1.5 Mbit/s into 1: without them the rate
    // reads about 9.7% low.
    for text in [
        "delay 10ms rate 1mbit limit 30",
        "delay 10ms rate 1mbit limit 45kb queue fq_codel",
    ] {
        let path = spec(text);
        let low = through(&path, 1, &paced(0, 1000, 2_000_000, 200));
        let clocks = Clocks::from_low_load(&low).unwrap();
        let queued_ns = delay_variation(&low, &clocks, 20)
            .unwrap()
            .quantiles
            .last()
            .unwrap()
            .value_ns
            + 100_000.0;
        let start = 3_000_000_000;
        let flows = through_flows(
            &path,
            2,
            &[
                at_rate(start, 4_000_000_000, 1.5e6, FRAME),
                paced(start, 200, 20_000_000, 242),
            ],
        );
        let alone = bottleneck_rate(&flows[0], &clocks, queued_ns, 1.0).unwrap();
        let beside = bottleneck_rate_beside(&flows[0], &flows[1], 0.0, &clocks, queued_ns, 1.0);
        let beside = beside.unwrap();
        eprintln!(
            "{text}: {:.0} alone, {:.0} beside",
            alone.value, beside.value
        );
        assert!(alone.value < 0.95e6, "{text}: {alone:?}");
        assert!(
            (beside.value / 1e6 - 1.0).abs() < 0.01,
            "{text}: {beside:?}"
        );
    }
}

#[test]
fn a_packet_rate_limit_is_found_with_small_packets_and_none_where_there_is_none() {
    let limited = spec("delay 10ms rate 10mbit pps 2000 limit 200");
    let m = measure(&limited, 3, 4000.0 * 100.0 * 8.0, 1_000_000_000, 100);
    let Some(PacketRate::Limited { pps }) =
        packet_rate(&m.saturated, &m.clocks, m.queued_ns, 1.0, 10e6)
    else {
        panic!("no limit found");
    };
    assert!(
        (pps.value / 2000.0 - 1.0).abs() < 0.01 && pps.covers(2000.0),
        "{pps:?}"
    );
    // The same small packets on a line without a packet-rate limit: 12500 a second.
    let free = spec("delay 10ms rate 10mbit limit 200");
    let m = measure(&free, 3, 16e6, 1_000_000_000, 100);
    let Some(PacketRate::NoneBelow { pps }) =
        packet_rate(&m.saturated, &m.clocks, m.queued_ns, 1.0, 10e6)
    else {
        panic!("a limit where there is none");
    };
    assert!((pps.value / 12_500.0 - 1.0).abs() < 0.01, "{pps:?}");
}

#[test]
fn a_tail_drop_buffer_is_sized_within_ten_percent() {
    for (text, limit) in [
        ("delay 10ms rate 10mbit limit 100", 100.0),
        ("delay 20ms 2ms rate 20mbit limit 400", 400.0),
        ("delay 10ms rate 5mbit limit 30", 30.0),
    ] {
        let path = spec(text);
        let m = measure(&path, 5, 15e6 * 2.0, 3_000_000_000, FRAME);
        let rate = rate_of(&m);
        let found = buffer(&m.saturated, &m.clocks, &rate, m.low_load_median_ns, 0.0).unwrap();
        eprintln!(
            "{text}: {:.1} packets, {:?}",
            found.packets.value, found.drops
        );
        assert!(
            (found.packets.value / limit - 1.0).abs() < 0.10,
            "{text}: {found:?}"
        );
        let bytes = limit * f64::from(FRAME);
        assert!(
            (found.bytes.value / bytes - 1.0).abs() < 0.10,
            "{text}: {found:?}"
        );
        assert!(
            matches!(found.drops, Drops::TailDrop { .. }),
            "{text}: {found:?}"
        );
    }
}

#[test]
fn codel_is_told_from_tail_drop_by_where_its_drops_begin() {
    // CoDel begins dropping once the sojourn stayed above 5 ms for 100 ms; at 1.5 times
    // the rate the queue grows 0.5 s a second, so near 55 ms, while the buffer (300
    // frames at 10 Mbit/s) holds 363 ms.
    let path = spec("delay 10ms rate 10mbit queue codel limit 300");
    let m = measure(&path, 9, 15e6, 3_000_000_000, FRAME);
    let rate = rate_of(&m);
    let found = buffer(&m.saturated, &m.clocks, &rate, m.low_load_median_ns, 0.0).unwrap();
    eprintln!(
        "codel: {:.1} packets, {:?}",
        found.packets.value, found.drops
    );
    let Drops::Aqm { onset_delay_ns } = found.drops else {
        panic!("not told an AQM: {found:?}");
    };
    assert!(onset_delay_ns < 150e6, "{onset_delay_ns}");
}

/// A trace alternating `low` and `high` opportunities per 10 ms every `half_ms`.
fn stepped_trace(half_ms: u64, periods: u64) -> String {
    let mut text = String::new();
    for ms in 1..=(2 * half_ms * periods) {
        let per_ms = if (ms / half_ms).is_multiple_of(2) {
            1
        } else {
            2
        };
        for _ in 0..per_ms {
            let _ = writeln!(text, "{ms}");
        }
    }
    text
}

/// The queued deliveries of a longer phase through `path` at `rate_bps` for `seconds`.
fn longer_run(path: &LinkSpec, m: &Measured, rate_bps: f64, seconds: u64) -> Vec<(u64, f64, u32)> {
    let sends = at_rate(3_000_000_000, seconds * 1_000_000_000, rate_bps, FRAME);
    longest_queued(&through(path, 12, &sends), &m.clocks, m.queued_ns)
}

/// A trace's path: `text`, replayed.
fn traced(text: &str) -> LinkSpec {
    let mut path = spec("delay 10ms limit 2000");
    path.rate = Some(RateSpec::Trace(TraceRef {
        path: "steps".into(),
        trace: Some(Arc::new(Trace::parse(text).unwrap())),
    }));
    path
}

#[test]
fn a_moving_rate_gives_a_trace_that_replays_its_deliveries() {
    // 1 and 2 frames a ms each second: 12.1 and 24.2 Mbit/s; overfed at 30 Mbit/s, then
    // at twice the fastest 100 ms window.
    let path = traced(&stepped_trace(1000, 10));
    let m = measure(&path, 11, 30e6, 4_000_000_000, FRAME);
    let (may, first) = may_move(&m.saturated, &m.clocks, m.queued_ns);
    assert!(may && first.above(MAY_MOVE), "{first:?}");
    let run = longer_run(&path, &m, 2.0 * first.highest_bps(), 15);
    let (moving, [fast, long]) = moves(&run);
    // Its 2 s windows hold a second of each: alike; its 500 ms ones are not.
    assert!(moving && fast.judged_variation > 0.25, "{fast:?}");
    assert!(long.judged_variation < 0.02, "{long:?}");
    let recovered = Trace::parse(&delivery_trace(&run).unwrap()).unwrap();
    // Opportunities per 100 ms window: 100 or 200 (1 or 2 a ms), but for the one a step
    // falls in: 14 steps in 14 s.
    let mut counts = vec![0u32; 140];
    for o in &recovered.opportunities {
        if let Some(c) = counts.get_mut((o.as_nanos() / 100_000_000) as usize) {
            *c += 1;
        }
    }
    let at = |level: u32| counts.iter().filter(|&&c| c.abs_diff(level) <= 2).count();
    assert!(
        at(100) >= 55 && at(200) >= 55 && at(100) + at(200) >= 120,
        "{counts:?}"
    );
    // A fixed rate may not move: no longer phase.
    let fixed = measure(
        &spec("delay 10ms rate 10mbit limit 2000"),
        11,
        15e6,
        3_000_000_000,
        FRAME,
    );
    assert!(!may_move(&fixed.saturated, &fixed.clocks, fixed.queued_ns).0);
}

/// A fixed rate with noise from one 100 ms window to the next (the bond over three lines:
/// 2-7%, its scheduler and the lines' controllers) may not move: judged in 500 ms it
/// averages out. Here the rate alternates 18 and 22 Mbit/s every 100 ms (10% in 100 ms).
#[test]
fn a_rate_that_wobbles_from_one_100_ms_window_to_the_next_does_not_move() {
    let wobbling = spec("delay 10ms schedule 100ms 18mbit 22mbit loop limit 4000");
    let m = measure(&wobbling, 11, 30e6, 4_000_000_000, FRAME);
    let (may, over_time) = may_move(&m.saturated, &m.clocks, m.queued_ns);
    assert!(over_time.variation > 0.08, "{over_time:?}");
    assert!(over_time.judged_variation < 0.03, "{over_time:?}");
    assert!(!may, "{over_time:?}");
    // 10, 20, 10, 20, 15 Mbit/s every 100 ms is alike in 500 ms too, but jumps by 30%:
    // more than any fixed rate seen (the bond's 14%), a suspicion.
    let jumping =
        spec("delay 10ms schedule 100ms 10mbit 20mbit 10mbit 20mbit 15mbit loop limit 4000");
    let m = measure(&jumping, 11, 30e6, 4_000_000_000, FRAME);
    let (may, over_time) = may_move(&m.saturated, &m.clocks, m.queued_ns);
    assert!(over_time.judged_variation < 0.05, "{over_time:?}");
    assert!(may && over_time.variation > 0.25, "{over_time:?}");
}

/// Noise at 500 ms (the bond's fixed lines reached 10.5% in a 4 s phase) is a suspicion
/// that a longer phase clears: here 18 and 22 Mbit/s every 500 ms.
#[test]
fn a_rate_that_wobbles_every_500_ms_is_judged_again_and_is_fixed() {
    let wobbling = spec("delay 10ms schedule 500ms 18mbit 22mbit loop limit 4000");
    let m = measure(&wobbling, 11, 30e6, 4_000_000_000, FRAME);
    let (may, first) = may_move(&m.saturated, &m.clocks, m.queued_ns);
    assert!(may && first.judged_variation > MAY_MOVE, "{first:?}");
    let (moving, [fast, long]) = moves(&longer_run(&wobbling, &m, 44e6, 15));
    assert!(fast.judged_variation > 0.08, "{fast:?}");
    assert!(
        long.judged_windows >= 6 && long.judged_variation < 0.02,
        "{long:?}"
    );
    assert!(!moving, "{fast:?} {long:?}");
    // A rate that moves over seconds (10, 20, 15, 25 Mbit/s for 3 s each) moves at 2 s.
    let slow = spec("delay 10ms schedule 3s 10mbit 20mbit 15mbit 25mbit loop limit 4000");
    let (moving, [_, long]) = moves(&longer_run(&slow, &m, 50e6, 15));
    assert!(
        moving && long.judged_variation > MOVING_VARIATION,
        "{long:?}"
    );
}

/// A first phase that overfed the path for only a second of its four (the rate rose above
/// what it sent: 10 Mbit/s for 1 s, then 40, sent at 15) may move, whatever its few windows
/// say.
#[test]
fn a_first_phase_that_did_not_overfeed_the_path_throughout_may_move() {
    let rising = spec("delay 10ms schedule 1s 10mbit 40mbit 40mbit 40mbit loop limit 4000");
    let m = measure(&rising, 11, 15e6, 4_000_000_000, FRAME);
    let (may, over_time) = may_move(&m.saturated, &m.clocks, m.queued_ns);
    assert!(may && !over_time.above(MAY_MOVE), "{over_time:?}");
}

/// A first phase whose queue emptied (here its sender slowed for 1.8 s: 300 Mbit/s into
/// 200 for 1 s, 20 Mbit/s, then 300 for 1 s again) may move, though each run delivered the
/// fixed rate and no window what it was sent at: a longer phase judges what it could not.
/// (200 Mbit/s: a full frame's own serialization, 61 us, stays below what reads as a queue,
/// and the slow stretch's packets break the run.)
#[test]
fn a_first_phase_whose_queue_emptied_may_move() {
    let path = spec("delay 10ms rate 200mbit limit 20000");
    let m = measure(&path, 11, 15e6, 1_000_000_000, FRAME);
    let mut sends = at_rate(3_000_000_000, 1_000_000_000, 300e6, FRAME);
    sends.extend(at_rate(4_000_000_000, 1_800_000_000, 20e6, FRAME));
    sends.extend(at_rate(5_800_000_000, 1_000_000_000, 300e6, FRAME));
    let stalled = through(&path, 12, &sends);
    let (may, over_time) = may_move(&stalled, &m.clocks, m.queued_ns);
    assert!(may && !over_time.above(MAY_MOVE), "{over_time:?}");
    assert!(over_time.highest_bps() < 0.95 * 300e6, "{over_time:?}");
}

/// Where the packets that waited held through the phase, they are its run, not all of its
/// deliveries though the path held it back throughout: the first packets, before a queue
/// stood, are no measure of the rate (a busy machine's stall, where all were taken, put
/// the tbf twin's rate 2.3% low).
#[test]
fn a_queue_that_held_through_the_phase_is_its_run_not_every_delivery() {
    // 200 Mbit/s: a full frame's own serialization (61 us) reads as no queue.
    let path = spec("delay 10ms rate 200mbit limit 20000");
    let m = measure(&path, 11, 300e6, 2_000_000_000, FRAME);
    let all = crate::queued::overfed(&m.saturated, &m.clocks).expect("overfed throughout");
    let run = longest_queued(&m.saturated, &m.clocks, m.queued_ns);
    assert!(
        run.len() < all.len() && run.len() + 5 >= all.len(),
        "{} of {}",
        run.len(),
        all.len()
    );
    assert!(run.first().unwrap().1 > m.queued_ns);
}
