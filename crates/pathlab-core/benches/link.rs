//! Packets per second through a link with delay + rate + CoDel + loss, on one core.
//!
//! The reference is the same loop through a bare `VecDeque` delay line (push, pop at the
//! deadline): the ratio says what the model costs over the least a forwarder must do.

use std::collections::VecDeque;

use divan::counter::ItemsCount;
use divan::Bencher;
use pathlab_core::spec::{
    Chance, CodelConfig, DelaySpec, Discipline, Distribution, FixedRate, LossSpec, QueueSpec,
    RateSpec,
};
use pathlab_core::{BitsPerSec, Duration, Ecn, Instant, Link, LinkSpec, Packet, Probability};

const PACKETS: u64 = 200_000;
const SIZE: u32 = 1500;

fn main() {
    divan::main();
}

fn spec() -> LinkSpec {
    LinkSpec {
        delay: Some(DelaySpec {
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(1),
            correlation: Probability::ZERO,
            distribution: Distribution::Normal,
        }),
        loss: Some(LossSpec::Random(Chance {
            probability: Probability::from_percent(1.0).expect("1% is valid"),
            correlation: Probability::ZERO,
        })),
        rate: Some(RateSpec::Fixed(FixedRate {
            rate: BitsPerSec::gbit(10),
            packet_overhead: 0,
            cell_size: 0,
            cell_overhead: 0,
        })),
        queue: QueueSpec {
            limit_packets: Some(1000),
            limit_bytes: None,
            discipline: Discipline::Codel(CodelConfig::default()),
            ring: None,
        },
        ..LinkSpec::default()
    }
}

/// Offered at 11 Gbit/s into 10 Gbit/s, so the queue builds and CoDel works.
fn gap() -> Duration {
    Duration::from_nanos(u64::from(SIZE) * 8 * 1_000_000_000 / 11_000_000_000)
}

#[divan::bench]
fn link_delay_rate_codel_loss(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(PACKETS))
        .with_inputs(|| Link::new(&spec(), 1).expect("valid spec"))
        .bench_local_values(|mut link| {
            let gap = gap();
            let mut now = Instant::ZERO;
            let mut delivered = 0u64;
            for i in 0..PACKETS {
                link.enqueue(now, Packet::synthetic(now, SIZE, i & 7, Ecn::NotEct));
                while let Some(packet) = link.dequeue(now) {
                    delivered += u64::from(packet.len_bytes);
                }
                now += gap;
            }
            divan::black_box(delivered)
        });
}

#[divan::bench]
fn reference_vecdeque_delay_line(bencher: Bencher) {
    bencher.counter(ItemsCount::new(PACKETS)).bench_local(|| {
        let gap = gap();
        let delay = Duration::from_millis(20);
        let mut line: VecDeque<(Instant, Packet)> = VecDeque::new();
        let mut now = Instant::ZERO;
        let mut delivered = 0u64;
        for i in 0..PACKETS {
            line.push_back((
                now + delay,
                Packet::synthetic(now, SIZE, i & 7, Ecn::NotEct),
            ));
            while line.front().is_some_and(|(t, _)| *t <= now) {
                let (_, packet) = line.pop_front().expect("front exists");
                delivered += u64::from(packet.len_bytes);
            }
            now += gap;
        }
        divan::black_box(delivered)
    });
}
