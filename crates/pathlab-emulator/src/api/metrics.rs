//! The Prometheus exposition of emulators' counters: every series labelled with the
//! emulator (a lab's link name, or `emulate --name`) and the direction.

use pathlab_core::DropReason;
use pathlab_http::prometheus::{Exposition, HistogramData, Kind};

use crate::emulator::{DirectionCounters, EmulatorStats};
use crate::fidelity::EXPOSED_EDGES_NS;

/// A metric taken from each direction: name, help, value.
type Field<T> = (&'static str, &'static str, fn(&DirectionCounters) -> T);

/// The Prometheus exposition of emulators' counters (one, or a lab's links): each series
/// equals the field of `emulate stats -J` it is named after (times in seconds), labelled
/// `emulator` (its name: a lab's link) and `direction` (`FROM -> TO`).
pub fn metrics(all: &[EmulatorStats]) -> String {
    let mut e = Exposition::new();
    // (emulator, direction, its counters), every direction of every emulator.
    let directions: Vec<(&str, String, &DirectionCounters)> = all
        .iter()
        .flat_map(|stats| {
            stats
                .directions
                .iter()
                .map(|d| (stats.name.as_str(), format!("{} -> {}", d.from, d.to), d))
        })
        .collect();
    let each = |e: &mut Exposition, value: &dyn Fn(&DirectionCounters) -> f64| {
        for (name, label, d) in &directions {
            e.sample(&[("emulator", name), ("direction", label)], value(d));
        }
    };
    e.family(
        "pathlab_emulator_uptime_seconds",
        Kind::Gauge,
        "Time since the emulator started.",
    );
    for stats in all {
        e.sample(&[("emulator", &stats.name)], stats.uptime_ns as f64 / 1e9);
    }
    e.family(
        "pathlab_emulator_realtime_priority",
        Kind::Gauge,
        "The SCHED_FIFO priority of the emulator's forwarding threads; 0 when they run at \
         normal priority (asked with --priority normal, or not permitted).",
    );
    for stats in all {
        if let Some(scheduling) = &stats.scheduling {
            let priority = if scheduling.policy == "fifo" {
                scheduling.priority
            } else {
                0
            };
            e.sample(
                &[("emulator", &stats.name), ("asked", &scheduling.asked)],
                f64::from(priority),
            );
        }
    }
    let counters: [Field<u64>; 9] = [
        (
            "pathlab_emulator_received_frames_total",
            "Frames read from the interface (a GSO super-packet counts once).",
            |d| d.frames_received,
        ),
        (
            "pathlab_emulator_received_packets_total",
            "Wire packets that entered the link.",
            |d| d.link.packets_in,
        ),
        (
            "pathlab_emulator_received_bytes_total",
            "Bytes that entered the link.",
            |d| d.link.bytes_in,
        ),
        (
            "pathlab_emulator_forwarded_packets_total",
            "Packets sent out of the other interface.",
            |d| d.forwarded,
        ),
        (
            "pathlab_emulator_forwarded_bytes_total",
            "Bytes sent out of the other interface.",
            |d| d.forwarded_bytes,
        ),
        (
            "pathlab_emulator_send_errors_total",
            "Packets the link let through but the send failed.",
            |d| d.send_errors,
        ),
        (
            "pathlab_emulator_egress_full_total",
            "Packets the link let through that the outgoing interface had no room for.",
            |d| d.egress_full,
        ),
        (
            "pathlab_emulator_malformed_frames_total",
            "Frames that could not be read (cut short, bad offload metadata).",
            |d| d.malformed,
        ),
        (
            "pathlab_emulator_ring_full_total",
            "Times the kernel said the receive ring overflowed.",
            |d| d.ring_full,
        ),
    ];
    for (name, help, value) in counters {
        e.family(name, Kind::Counter, help);
        each(&mut e, &|d| value(d) as f64);
    }
    for (name, help, bytes) in [
        (
            "pathlab_emulator_dropped_packets_total",
            "Packets the link dropped, by reason.",
            false,
        ),
        (
            "pathlab_emulator_dropped_bytes_total",
            "Bytes the link dropped, by reason.",
            true,
        ),
    ] {
        e.family(name, Kind::Counter, help);
        for (emulator, label, d) in &directions {
            for reason in DropReason::ALL {
                let counts = if bytes {
                    &d.link.dropped_bytes
                } else {
                    &d.link.dropped_packets
                };
                e.sample(
                    &[
                        ("emulator", emulator),
                        ("direction", label),
                        ("reason", reason.name()),
                    ],
                    counts[reason.index()] as f64,
                );
            }
        }
    }
    let altered: [Field<u64>; 4] = [
        (
            "pathlab_emulator_ce_marked_packets_total",
            "Packets marked CE instead of dropped.",
            |d| d.link.ce_marked,
        ),
        (
            "pathlab_emulator_duplicated_packets_total",
            "Copies made by duplicate.",
            |d| d.link.duplicated,
        ),
        (
            "pathlab_emulator_corrupted_packets_total",
            "Packets with a flipped bit.",
            |d| d.link.corrupted,
        ),
        (
            "pathlab_emulator_reordered_packets_total",
            "Packets sent ahead of their turn by reorder.",
            |d| d.link.reordered,
        ),
    ];
    for (name, help, value) in altered {
        e.family(name, Kind::Counter, help);
        each(&mut e, &|d| value(d) as f64);
    }
    let gauges: [Field<f64>; 4] = [
        (
            "pathlab_emulator_queue_packets",
            "Packets waiting in the bottleneck queue.",
            |d| d.queue_packets as f64,
        ),
        (
            "pathlab_emulator_queue_bytes",
            "Bytes waiting in the bottleneck queue.",
            |d| d.queue_bytes as f64,
        ),
        (
            "pathlab_emulator_queue_delay_seconds",
            "How long the last packet out waited in the queue (0 with an empty queue).",
            |d| d.queue_delay_ns as f64 / 1e9,
        ),
        (
            "pathlab_emulator_in_flight_packets",
            "Packets inside the link (queued, in service, delayed).",
            |d| d.in_flight as f64,
        ),
    ];
    for (name, help, value) in gauges {
        e.family(name, Kind::Gauge, help);
        each(&mut e, &value);
    }
    e.family(
        "pathlab_emulator_lateness_seconds",
        Kind::Histogram,
        "How late packets left against the model's departure instant (the fidelity guard).",
    );
    for (emulator, label, d) in &directions {
        let late = &d.lateness;
        e.histogram(
            &[("emulator", emulator), ("direction", label)],
            &HistogramData {
                buckets: EXPOSED_EDGES_NS
                    .iter()
                    .zip(&late.at_most)
                    .map(|(&edge, &count)| (edge as f64 / 1e9, count))
                    .collect(),
                count: late.packets,
                sum: late.sum_ns as f64 / 1e9,
            },
        );
    }
    e.family(
        "pathlab_emulator_late_last_second_p99_seconds",
        Kind::Gauge,
        "p99 of how late packets left over the last second.",
    );
    each(&mut e, &|d| d.lateness.last_second_p99_ns as f64 / 1e9);
    e.family(
        "pathlab_emulator_late_seconds_total",
        Kind::Counter,
        "Whole seconds whose p99 lateness exceeded the guard's bound.",
    );
    each(&mut e, &|d| d.lateness.late_seconds as f64);
    e.family(
        "pathlab_emulator_judged_seconds_total",
        Kind::Counter,
        "Whole seconds the fidelity guard judged.",
    );
    each(&mut e, &|d| d.lateness.seconds as f64);
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::super::example_stats;
    use super::*;
    use pathlab_http::prometheus;

    #[test]
    fn metrics_parse_and_equal_the_stats_they_came_from() {
        let all = [
            example_stats("x", 5_000_000, 7),
            example_stats("y", 1_000, 0),
        ];
        let families = prometheus::parse(&metrics(&all)).expect("the exposition parses");
        let of = |name: &str, labels: &[(&str, &str)]| {
            prometheus::value(&families, name, labels).unwrap_or_else(|| panic!("{name}"))
        };
        let x_ab = [("emulator", "x"), ("direction", "a -> b")];
        let with = |reason| [x_ab[0], x_ab[1], ("reason", reason)];
        assert_eq!(
            of(
                "pathlab_emulator_dropped_packets_total",
                &with("queue-full")
            ),
            7.0
        );
        assert_eq!(
            of("pathlab_emulator_dropped_packets_total", &with("loss")),
            0.0
        );
        assert_eq!(
            of("pathlab_emulator_forwarded_bytes_total", &x_ab),
            5_000_000.0
        );
        assert_eq!(
            of(
                "pathlab_emulator_forwarded_bytes_total",
                &[("emulator", "y"), ("direction", "b -> a")]
            ),
            1_000.0
        );
        assert_eq!(of("pathlab_emulator_queue_delay_seconds", &x_ab), 0.0025);
        assert_eq!(of("pathlab_emulator_lateness_seconds_count", &x_ab), 10.0);
        let at_1ms = [x_ab[0], x_ab[1], ("le", "0.001")];
        assert_eq!(of("pathlab_emulator_lateness_seconds_bucket", &at_1ms), 9.0);
        assert_eq!(of("pathlab_emulator_lateness_seconds_sum", &x_ab), 123e-6);
        assert_eq!(
            of("pathlab_emulator_uptime_seconds", &[("emulator", "y")]),
            12.0
        );
    }
}
