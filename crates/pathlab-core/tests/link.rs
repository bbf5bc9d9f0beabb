//! Properties of the composed link that must hold for every spec, also when the spec
//! changes while packets are inside: every packet is accounted for, and the ground-truth
//! record agrees with what came out.

use pathlab_core::{Duration, Ecn, Instant, Link, LinkSpec, Packet};
use proptest::prelude::*;

const PARTS: &[&str] = &[
    "delay 10ms",
    "delay 10ms 4ms distribution normal",
    "delay 5ms 5ms 50% distribution pareto reorder 10% gap 3",
    "loss 3%",
    "loss gemodel 2% 20% 80% 0.1%",
    "loss state 2% 40% 10% 30% 0.5% ecn",
    "duplicate 5%",
    "corrupt 2%",
    "rate 8mbit limit 30",
    "rate 8mbit 14 limit 50kb",
    "schedule 200ms 8mbit 0bit 2mbit loop limit 40",
    "rate 8mbit queue codel",
    "rate 8mbit queue fq_codel limit 60",
    "rate 8mbit queue pie limit 60",
    "rate 8mbit queue red min 10kb max 30kb probability 10% ecn",
    "rate 8mbit queue headdrop limit 20",
    "slot 2ms 6ms packets 3",
];

fn spec_from(choices: &[usize]) -> LinkSpec {
    // At most one rate-like part and one delay-like part: later ones are skipped.
    let (mut text, mut rate, mut delay, mut loss) = (String::new(), false, false, false);
    for &choice in choices {
        let part = PARTS[choice % PARTS.len()];
        let is_rate = part.starts_with("rate") || part.starts_with("schedule");
        let is_delay = part.starts_with("delay");
        let is_loss = part.starts_with("loss");
        if (is_rate && rate) || (is_delay && delay) || (is_loss && loss) || text.contains(part) {
            continue;
        }
        rate |= is_rate;
        delay |= is_delay;
        loss |= is_loss;
        text.push(' ');
        text.push_str(part);
    }
    LinkSpec::parse(&text).unwrap_or_else(|e| panic!("'{text}': {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_packet_is_accounted_for(
        choices in prop::collection::vec(0usize..PARTS.len(), 0..5),
        later in prop::collection::vec(0usize..PARTS.len(), 0..5),
        gaps_us in prop::collection::vec(0u64..3_000, 1..600),
        seed in any::<u64>(),
    ) {
        let spec = spec_from(&choices);
        let mut link = Link::new(&spec, seed).expect("buildable");
        link.record();
        let mut now = Instant::ZERO;
        let mut out = Vec::new();
        let change_at = gaps_us.len() / 2;
        for (i, gap) in gaps_us.iter().enumerate() {
            now += Duration::from_micros(*gap);
            // Time only moves forward: what is due by now leaves before anything else
            // happens at now.
            while let Some(at) = link.poll_at().filter(|at| *at <= now) {
                while let Some(packet) = link.dequeue(at) {
                    out.push((at, packet));
                }
            }
            if i == change_at {
                // Half way, the spec changes at run time (emulate set); nothing may be lost.
                link.set_spec(now, &spec_from(&later)).expect("buildable");
            }
            let ecn = if i % 2 == 0 { Ecn::Ect0 } else { Ecn::NotEct };
            link.enqueue(now, Packet::synthetic(now, 200 + (i as u32 % 7) * 200, i as u64 % 5, ecn));
        }
        // Drain: every deadline is finite unless a schedule ends in an outage (it loops).
        while let Some(at) = link.poll_at() {
            prop_assert!(at < Instant::from_secs(3600), "deadline {} for '{}'", at, spec);
            while let Some(packet) = link.dequeue(at) {
                out.push((at, packet));
            }
        }
        let counters = link.counters();
        prop_assert_eq!(link.in_flight(), 0);
        prop_assert_eq!(
            counters.packets_in + counters.duplicated,
            counters.packets_out + counters.dropped_total(),
            "'{}': {:?}", spec, counters
        );
        prop_assert_eq!(out.len() as u64, counters.packets_out);
        let records = link.recorder().expect("recording").drain_finished();
        prop_assert_eq!(records.len() as u64, counters.packets_in + counters.duplicated);
        for (at, packet) in &out {
            let record = &records[(packet.id - 1) as usize];
            prop_assert_eq!(record.departed, Some(*at));
            prop_assert!(record.arrived <= *at);
            if let (Some(dequeued), Some(transmitted)) = (record.dequeued, record.transmitted) {
                prop_assert!(record.arrived <= dequeued && dequeued <= transmitted && transmitted <= *at);
                prop_assert_eq!(packet.queue_delay, dequeued - record.arrived);
            }
            prop_assert_eq!(record.ce_marked, packet.ecn == Ecn::Ce && record.ecn_on_arrival != Ecn::Ce);
        }
        let dropped = records.iter().filter(|r| r.dropped.is_some()).count() as u64;
        prop_assert_eq!(dropped, counters.dropped_total());
    }
}
