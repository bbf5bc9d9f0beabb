//! The bottleneck: its rate (from the deliveries of a saturating train), its packet-rate
//! limit (small packets at a high rate), the buffer in front of it (queueing delay at
//! saturation times the rate) and how it drops (tail drop, or an AQM that begins dropping
//! at a delay well below the buffer's).
//!
//! A packet that arrives with a one-way delay well above anything seen at low load waited
//! in the queue, so the bottleneck was busy when it came and it left right after the one
//! before: the deliveries of a run of such packets are paced by the bottleneck alone,
//! whatever the sender did (the packet-train idea; Jain and Dovrolis's pathload,
//! Flexlab's capacity). Losses before the bottleneck take no time on it and are not
//! counted.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::queued::{at_its_end, queued_run, run_rate, STILL_RAMPING};
use crate::samples::{Clocks, Sample};
use crate::stats::{batch_half_width, BATCHES};

/// The rate of a run and its interval: batch means over ten stretches, widened by the
/// timestamps' resolution at both ends of the run.
fn rate_figure(run: &[(u64, f64, u32)], resolution_ns: f64, what: &str) -> Option<Figure> {
    let value = run_rate(run)?;
    let stretch = run.len() / BATCHES;
    let estimates: Vec<f64> = if stretch >= 2 {
        (0..BATCHES)
            .filter_map(|i| run_rate(&run[i * stretch..(i + 1) * stretch]))
            .collect()
    } else {
        Vec::new()
    };
    let span_ns = (run.last()?.0 - run.first()?.0) as f64;
    let half =
        batch_half_width(&estimates).unwrap_or(value) + value * 2.0 * resolution_ns / span_ns;
    Some(Figure::new(
        value,
        value - half,
        value + half,
        format!(
            "{what} of {} queued packets delivered back to back over {:.0} ms at saturation; \
             batch-means interval over {BATCHES} stretches",
            run.len(),
            span_ns / 1e6
        ),
    ))
}

/// The bottleneck's rate, bits per second of the frames it carried (`len_bytes` as the
/// samples count them), from a phase that overfed it; `queued_ns` is the relative delay
/// above which a packet waited (the low-load variation's largest, plus a margin).
/// `None` if fewer than 10 packets queued.
pub fn bottleneck_rate(
    saturated: &[Sample],
    clocks: &Clocks,
    queued_ns: f64,
    resolution_ns: f64,
) -> Option<Figure> {
    bottleneck_rate_beside(saturated, &[], 0.0, clocks, queued_ns, resolution_ns)
}

/// [`bottleneck_rate`] with a flow `beside` the saturating one through the same bottleneck
/// (the sparse flow of [`crate::isolation`]): its packets delivered while the queued run
/// was took the bottleneck's time too (50 probes a second of 242 bytes are 0.97% of 10
/// Mbit/s, 9.7% of 1 Mbit/s), each as much as `min_bytes` where that is more than its own
/// (a packet-rate limit's slot: the rate over 8 times the limit; 0 without one).
pub fn bottleneck_rate_beside(
    saturated: &[Sample],
    beside: &[Sample],
    min_bytes: f64,
    clocks: &Clocks,
    queued_ns: f64,
    resolution_ns: f64,
) -> Option<Figure> {
    let whole = queued_run(saturated, clocks, queued_ns);
    if whole.len() < 10 {
        return None;
    }
    let run = at_its_end(&whole);
    let mut figure = rate_figure(run, resolution_ns, "bytes")?;
    if run.len() < whole.len() {
        let _ = write!(
            figure.how,
            "; the second half of {} such packets, which came more than {:.0}% faster than \
             the first (the path still ramping up)",
            whole.len(),
            STILL_RAMPING * 100.0
        );
    }
    let (first, last) = (run.first()?.0, run.last()?.0);
    let run_bytes: u64 = run[1..].iter().map(|a| u64::from(a.2)).sum();
    let beside: Vec<f64> = beside
        .iter()
        .filter(|s| s.received_ns.is_some_and(|t| t > first && t <= last))
        .map(|s| f64::from(s.len_bytes).max(min_bytes))
        .collect();
    if beside.is_empty() {
        return Some(figure);
    }
    let beside_bytes: f64 = beside.iter().sum();
    let scaled = figure.scaled(1.0 + beside_bytes / run_bytes.max(1) as f64);
    Some(Figure {
        how: format!(
            "{}, plus the {} packets of a sparse flow delivered beside them in that time \
             ({beside_bytes:.0} bytes' time)",
            scaled.how,
            beside.len()
        ),
        ..scaled
    })
}

/// What small packets at a high rate say about a packet-rate limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum PacketRate {
    /// The bottleneck passes at most this many packets a second, below what its byte
    /// rate allows them (the seed's modem).
    Limited {
        /// Packets per second.
        pps: Figure,
    },
    /// Small packets left as fast as the byte rate allows: no packet-rate limit up to
    /// this many packets a second.
    NoneBelow {
        /// Packets per second the small packets reached.
        pps: Figure,
    },
}

/// The packet-rate limit from a phase of small packets that overfed the bottleneck, given
/// its byte rate (bits per second, from [`bottleneck_rate`]). A limit when the small
/// packets left at least 5% slower than the byte rate would carry them.
pub fn packet_rate(
    small: &[Sample],
    clocks: &Clocks,
    queued_ns: f64,
    resolution_ns: f64,
    byte_rate_bps: f64,
) -> Option<PacketRate> {
    let run = queued_run(small, clocks, queued_ns);
    if run.len() < 10 {
        return None;
    }
    // Packets a second: the same run counted in packets of one bit.
    let counted: Vec<(u64, f64, u32)> = run.iter().map(|a| (a.0, a.1, 1)).collect();
    let pps = rate_figure(&counted, resolution_ns, "packets")?.scaled(1.0 / 8.0);
    let mean_bytes = run.iter().map(|a| f64::from(a.2)).sum::<f64>() / run.len() as f64;
    let allowed = byte_rate_bps / (mean_bytes * 8.0);
    Some(if pps.high < 0.95 * allowed {
        PacketRate::Limited { pps }
    } else {
        PacketRate::NoneBelow { pps }
    })
}

#[cfg(test)]
mod tests;
