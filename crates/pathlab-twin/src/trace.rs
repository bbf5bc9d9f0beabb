//! A delivery trace in mahimahi's format when the bottleneck's rate moves over time (a
//! cellular line): one line per delivery opportunity of one full-size frame, in whole
//! milliseconds, as mahimahi records them from a saturating flow. `pathlab-core` parses
//! such files ([`pathlab_core::spec::trace::Trace::parse`], fuzzed) and its rate model
//! replays them.

use std::fmt::Write as _;

use pathlab_core::stage::rate::MAHIMAHI_OPPORTUNITY_BYTES;
use serde::{Deserialize, Serialize};

use crate::queued::queued_run;
use crate::samples::{Clocks, Sample};

/// The window the rate over time is taken in, ns: 100 ms.
pub const WINDOW_NS: u64 = 100_000_000;

/// A rate moves when its windows' coefficient of variation is above this: a fixed rate's
/// windows differ by a packet or two (about 1% at 10 Mbit/s).
pub const MOVING_VARIATION: f64 = 0.05;

/// The rate over time of a saturating phase's queued deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateOverTime {
    /// Bits per second in each [`WINDOW_NS`] window, in order.
    pub windows_bps: Vec<f64>,
    /// Their standard deviation over their mean.
    pub variation: f64,
    /// Whether the rate moves ([`MOVING_VARIATION`], at least five windows).
    pub moves: bool,
}

/// The rate over time of the queued deliveries of a saturating phase.
pub fn rate_over_time(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> RateOverTime {
    let run = queued_run(saturated, clocks, queued_ns);
    let mut windows_bps = Vec::new();
    if let Some(first) = run.first() {
        let windows = ((run.last().map_or(0, |a| a.0) - first.0) / WINDOW_NS) as usize;
        windows_bps = vec![0.0; windows];
        // Bytes of every packet after the first, in the window it arrived in.
        for arrival in &run[1..] {
            let index = ((arrival.0 - first.0) / WINDOW_NS) as usize;
            if let Some(window) = windows_bps.get_mut(index) {
                *window += f64::from(arrival.2) * 8.0 / (WINDOW_NS as f64 * 1e-9);
            }
        }
    }
    let n = windows_bps.len() as f64;
    let mean = windows_bps.iter().sum::<f64>() / n.max(1.0);
    let sd = (windows_bps.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / n.max(1.0)).sqrt();
    let variation = if mean > 0.0 { sd / mean } else { 0.0 };
    RateOverTime {
        moves: windows_bps.len() >= 5 && variation > MOVING_VARIATION,
        windows_bps,
        variation,
    }
}

/// The delivery trace of a saturating phase: its queued deliveries, each full-size frame's
/// worth of bytes one opportunity at the millisecond it arrived (from the first arrival,
/// which is 0 ms); the text of a mahimahi trace file. `None` with fewer than two
/// opportunities, or a trace that would last 0 ms.
pub fn delivery_trace(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Option<String> {
    let run = queued_run(saturated, clocks, queued_ns);
    let first = run.first()?.0;
    let mut text = String::new();
    let mut bytes = 0u64;
    let mut last_ms = 0;
    // The first packet's bytes left before the run's clock starts: its end is time 0.
    for arrival in &run[1..] {
        bytes += u64::from(arrival.2);
        while bytes >= u64::from(MAHIMAHI_OPPORTUNITY_BYTES) {
            bytes -= u64::from(MAHIMAHI_OPPORTUNITY_BYTES);
            last_ms = (arrival.0 - first) / 1_000_000;
            let _ = writeln!(text, "{last_ms}");
        }
    }
    (last_ms > 0).then_some(text)
}
