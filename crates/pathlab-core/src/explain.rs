//! What a spec does, in words: the lines `pathlab spec --preset NAME` prints under each
//! direction, so a reader sees what a preset's numbers amount to (its delay, its
//! bottleneck, how long its full queue takes to drain, its slots) without working them out.
//! A module of its own, above [`crate::spec`] and [`crate::stage`]: the drain time is the
//! rate model's, and the rate model reads specs.

use crate::format::{self, Digits};
use crate::spec::{Discipline, LinkSpec, RateSpec, SlotInterval};
use crate::stage::rate::RateModel;
use crate::time::{Duration, Instant};

/// How long a full queue of full-size frames ([`crate::units::FRAME_BYTES`]) takes to
/// leave through `spec`'s fixed rate, counting its per-packet overhead and cells; `None`
/// without a fixed rate.
pub fn full_queue_drain(spec: &LinkSpec) -> Option<Duration> {
    let Some(rate @ RateSpec::Fixed(_)) = &spec.rate else {
        return None;
    };
    let packets = spec.queue.effective_limit_packets();
    // One full-size frame's time through the rate model itself (overhead and cells).
    let frame_time = RateModel::new(rate)
        .ok()
        .map_or(Duration::ZERO, |mut model| {
            model.transmit(Instant::ZERO, crate::units::FRAME_BYTES as u32) - Instant::ZERO
        });
    Some(Duration::from_nanos(
        frame_time.as_nanos().saturating_mul(u64::from(packets)),
    ))
}

/// What `spec` does, in words, a line per stage it has: its delay and jitter, its fixed
/// bottleneck, its queue (and the time it holds when full), its slots.
pub fn meaning(spec: &LinkSpec) -> Vec<String> {
    let ms = |d: Duration| format::in_millis(d.as_secs_f64(), Digits::fixed(3));
    let mut lines = Vec::new();
    if let Some(delay) = spec.delay {
        let jitter = if delay.jitter.is_zero() {
            String::new()
        } else {
            format!(
                ", jitter {} ms ({:?})",
                ms(delay.jitter),
                delay.distribution
            )
            .to_lowercase()
        };
        lines.push(format!("one-way delay {} ms{jitter}", ms(delay.delay)));
    }
    if let Some(quantiles) = &spec.delay_quantiles {
        let last = quantiles.quantiles.last().copied().unwrap_or_default();
        lines.push(format!(
            "plus a measured variation: {} quantiles from 0 to {} ms, mean {} ms",
            quantiles.quantiles.len(),
            ms(last),
            ms(quantiles.mean())
        ));
    }
    if let Some(RateSpec::Fixed(fixed)) = &spec.rate {
        let cells = if fixed.cell_size > 0 {
            format!(
                ", each packet +{} bytes in cells of {}+{} bytes (ATM)",
                fixed.packet_overhead, fixed.cell_size, fixed.cell_overhead
            )
        } else {
            String::new()
        };
        lines.push(format!(
            "bottleneck {}{cells}",
            format::rate(fixed.rate.0 as f64, Digits::fixed(2))
        ));
    }
    if let Some(drain) = full_queue_drain(spec) {
        let packets = spec.queue.effective_limit_packets();
        let discipline = match spec.queue.discipline {
            Discipline::TailDrop => "tail drop".to_owned(),
            Discipline::HeadDrop => "head drop".to_owned(),
            Discipline::Red(_) => "RED".to_owned(),
            Discipline::Codel(c) => format!("CoDel, target {} ms", ms(c.target)),
            Discipline::FqCodel(c) => {
                format!("FQ-CoDel, target {} ms", ms(c.codel.target))
            }
            Discipline::Pie(c) => format!("PIE, target {} ms", ms(c.target)),
        };
        lines.push(format!(
            "queue {packets} packets, {discipline}: {} ms of full-size frames when full \
                 (change with limit N or queue ...)",
            ms(drain)
        ));
        if let Some(ring) = spec.queue.ring {
            lines.push(format!(
                "ring of {} ms below the queue: under load every packet waits that long \
                 more, after the discipline chose it",
                ms(ring)
            ));
        }
    }
    if let Some(slot) = spec.slot {
        let every = match slot.interval {
            SlotInterval::Uniform { min, max } if min == max => {
                format!("every {} ms", ms(min))
            }
            SlotInterval::Uniform { min, max } => {
                format!("every {} to {} ms", ms(min), ms(max))
            }
            SlotInterval::Distribution { delay, .. } => {
                format!("every {} ms on average", ms(delay))
            }
        };
        lines.push(format!(
            "packets leave in slots {every} (radio scheduling, aggregation)"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> LinkSpec {
        LinkSpec::parse(text).unwrap()
    }

    #[test]
    fn a_spec_without_delay_adds_no_one_way_delay() {
        assert_eq!(spec("rate 10mbit").one_way_delay(), Duration::ZERO);
        assert_eq!(
            spec("delay 25ms 5ms").one_way_delay(),
            Duration::from_millis(25)
        );
    }

    #[test]
    fn a_full_queue_drains_in_its_frames_times_a_frames_serialization() {
        // 100 frames of 1514 bytes at 10 Mbit/s: 100 * 1514 * 8 / 1e7 s = 121.12 ms.
        let drain = full_queue_drain(&spec("rate 10mbit limit 100")).unwrap();
        assert_eq!(drain, Duration::from_micros(121_120));
        assert_eq!(full_queue_drain(&spec("delay 10ms")), None);
    }

    #[test]
    fn the_meaning_has_a_line_per_stage() {
        let lines = meaning(&spec("delay 20ms rate 10mbit limit 100"));
        assert_eq!(
            lines,
            [
                "one-way delay 20.000 ms",
                "bottleneck 10.00 Mbit/s",
                "queue 100 packets, tail drop: 121.120 ms of full-size frames when full \
                 (change with limit N or queue ...)",
            ]
        );
        assert!(meaning(&spec("loss 1%")).is_empty());
    }
}
