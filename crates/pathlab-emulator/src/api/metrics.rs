//! The Prometheus exposition of emulators' counters: every series labelled with the
//! emulator (a lab's link name, or `emulate --name`) and the direction.

use pathlab_core::DropReason;
use pathlab_http::prometheus::{Exposition, HistogramData, Kind, Metric};

use crate::emulator::{DirectionCounters, EmulatorStats};
use crate::fidelity::EXPOSED_EDGES_NS;

/// The counters of each direction of each emulator, as `emulate stats -J` has them.
const COUNTERS: [Metric<DirectionCounters>; 9] = [
    Metric::counter(
        "pathlab_emulator_received_frames_total",
        "Frames read from the interface (a GSO super-packet counts once).",
        |d| Some(d.frames_received as f64),
    ),
    Metric::counter(
        "pathlab_emulator_received_packets_total",
        "Wire packets that entered the link.",
        |d| Some(d.link.packets_in as f64),
    ),
    Metric::counter(
        "pathlab_emulator_received_bytes_total",
        "Bytes that entered the link.",
        |d| Some(d.link.bytes_in as f64),
    ),
    Metric::counter(
        "pathlab_emulator_forwarded_packets_total",
        "Packets sent out of the other interface.",
        |d| Some(d.forwarded as f64),
    ),
    Metric::counter(
        "pathlab_emulator_forwarded_bytes_total",
        "Bytes sent out of the other interface.",
        |d| Some(d.forwarded_bytes as f64),
    ),
    Metric::counter(
        "pathlab_emulator_send_errors_total",
        "Packets the link let through but the send failed.",
        |d| Some(d.send_errors as f64),
    ),
    Metric::counter(
        "pathlab_emulator_egress_full_total",
        "Packets the link let through that the outgoing interface had no room for.",
        |d| Some(d.egress_full as f64),
    ),
    Metric::counter(
        "pathlab_emulator_malformed_frames_total",
        "Frames that could not be read (cut short, bad offload metadata).",
        |d| Some(d.malformed as f64),
    ),
    Metric::counter(
        "pathlab_emulator_ring_full_total",
        "Times the kernel said the receive ring overflowed.",
        |d| Some(d.ring_full as f64),
    ),
];

/// What the link did to packets besides dropping them.
const ALTERED: [Metric<DirectionCounters>; 4] = [
    Metric::counter(
        "pathlab_emulator_ce_marked_packets_total",
        "Packets marked CE instead of dropped.",
        |d| Some(d.link.ce_marked as f64),
    ),
    Metric::counter(
        "pathlab_emulator_duplicated_packets_total",
        "Copies made by duplicate.",
        |d| Some(d.link.duplicated as f64),
    ),
    Metric::counter(
        "pathlab_emulator_corrupted_packets_total",
        "Packets with a flipped bit.",
        |d| Some(d.link.corrupted as f64),
    ),
    Metric::counter(
        "pathlab_emulator_reordered_packets_total",
        "Packets sent ahead of their turn by reorder.",
        |d| Some(d.link.reordered as f64),
    ),
];

/// The queue and what is inside the link now.
const GAUGES: [Metric<DirectionCounters>; 4] = [
    Metric::gauge(
        "pathlab_emulator_queue_packets",
        "Packets waiting in the bottleneck queue.",
        |d| Some(d.queue_packets as f64),
    ),
    Metric::gauge(
        "pathlab_emulator_queue_bytes",
        "Bytes waiting in the bottleneck queue.",
        |d| Some(d.queue_bytes as f64),
    ),
    Metric::gauge(
        "pathlab_emulator_queue_delay_seconds",
        "How long the last packet out waited in the queue (0 with an empty queue).",
        |d| Some(d.queue_delay_ns as f64 / 1e9),
    ),
    Metric::gauge(
        "pathlab_emulator_in_flight_packets",
        "Packets inside the link (queued, in service, delayed).",
        |d| Some(d.in_flight as f64),
    ),
];

/// The fidelity guard's figures besides its histogram.
const LATENESS: [Metric<DirectionCounters>; 3] = [
    Metric::gauge(
        "pathlab_emulator_late_last_second_p99_seconds",
        "p99 of how late packets left over the last second.",
        |d| Some(d.lateness.last_second_p99_ns as f64 / 1e9),
    ),
    Metric::counter(
        "pathlab_emulator_late_seconds_total",
        "Whole seconds whose p99 lateness exceeded the guard's bound.",
        |d| Some(d.lateness.late_seconds as f64),
    ),
    Metric::counter(
        "pathlab_emulator_judged_seconds_total",
        "Whole seconds the fidelity guard judged.",
        |d| Some(d.lateness.seconds as f64),
    ),
];

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
    let labelled: Vec<([(&str, &str); 2], &DirectionCounters)> = directions
        .iter()
        .map(|(name, label, d)| ([("emulator", *name), ("direction", label.as_str())], *d))
        .collect();
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
    e.metrics(&COUNTERS, &labelled);
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
    e.metrics(&ALTERED, &labelled);
    e.metrics(&GAUGES, &labelled);
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
    e.metrics(&LATENESS, &labelled);
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
