//! The deliveries of a saturating phase that waited in the queue: a run of them left the
//! bottleneck back to back, so their arrivals are paced by it alone (the packet-train
//! idea). The rate, the packet rate, the rate over time and the delivery trace are read
//! from such a run.

use crate::samples::{Clocks, Sample};

/// The received packets of a saturating phase that waited in the queue (relative delay
/// above `queued_ns`), in arrival order, longest unbroken run only: `(arrival ns on the
/// receiver's clock, relative delay ns, bytes)`.
pub fn queued_run(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Vec<(u64, f64, u32)> {
    let mut arrivals: Vec<(u64, f64, u32)> = saturated
        .iter()
        .filter_map(|s| Some((s.received_ns?, clocks.relative_ns(s)?, s.len_bytes)))
        .collect();
    arrivals.sort_by_key(|a| a.0);
    let mut best = 0..0;
    let mut start = 0;
    for (i, arrival) in arrivals.iter().enumerate() {
        if arrival.1 <= queued_ns {
            start = i + 1;
        } else if i + 1 - start > best.len() {
            best = start..i + 1;
        }
    }
    arrivals[best].to_vec()
}
