//! A delivery trace in mahimahi's format when the bottleneck's rate moves over time (a
//! cellular line): one line per delivery opportunity of one full-size frame, in whole
//! milliseconds, as mahimahi records them from a saturating flow. `pathlab-core` parses
//! such files ([`pathlab_core::spec::trace::Trace::parse`], fuzzed) and its rate model
//! replays them.

use std::fmt::Write as _;

use pathlab_core::stage::rate::MAHIMAHI_OPPORTUNITY_BYTES;
use serde::{Deserialize, Serialize};

use crate::queued::{at_its_end, queued_run};
use crate::samples::{Clocks, Sample};

/// The window the rate over time is taken in, ns: 100 ms.
pub const WINDOW_NS: u64 = 100_000_000;

/// Windows of [`WINDOW_NS`] summed into one that a rate's moving is judged in: 500 ms.
pub const WINDOWS_JUDGED: usize = 5;

/// A rate moves when the coefficient of variation of its [`WINDOWS_JUDGED`] windows is
/// above this: a fixed rate's differ by a packet or two (about 1% at 10 Mbit/s).
///
/// Judged in 500 ms, not 100 ms: the bond over three lines, each line's rate fixed, varied
/// by 2-7% from one 100 ms window to the next (its scheduler and the lines' controllers),
/// and a trace replaying that took a fixed rate's place (each packet then waits for a
/// whole-millisecond opportunity: base RTT +0.3-1.5 ms, loaded RTT +10-30%, 2026-12-07). A
/// rate that really moves (a cellular line's, the test's steps) moves as much in 500 ms
/// windows; noise about a fixed rate averages out in them. 10%, not 5%: the bond's
/// fixed lines still varied 5.4% and 5.8% in 500 ms windows in 2 of 14 twins (0.5-3.2% in
/// the others), replayed as traces, its loaded round trips' p95 +10% to +13% (and p50
/// +5%); a real cellular trace (mahimahi's TMobile-LTE-short) moved 20.6% and 45.4%. The
/// next bond twin reached 10.5% (13.9% in 100 ms): one threshold on one window length does
/// not tell such noise from a rate that moves (issue 41's next step).
pub const MOVING_VARIATION: f64 = 0.10;

/// The least judged windows for a verdict (fewer: a fixed rate): 2 s.
pub const MIN_JUDGED: usize = 4;

/// The rate over time of a saturating phase's queued deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateOverTime {
    /// Bits per second in each [`WINDOW_NS`] window, in order.
    pub windows_bps: Vec<f64>,
    /// Their standard deviation over their mean.
    pub variation: f64,
    /// How many [`WINDOWS_JUDGED`] windows there were (whole ones only).
    pub judged_windows: usize,
    /// Their variation, as `variation`.
    pub judged_variation: f64,
    /// Whether the rate moves: [`MOVING_VARIATION`] in at least [`MIN_JUDGED`] judged
    /// windows.
    pub moves: bool,
}

/// The stretch of a saturating phase's queued deliveries the rate is taken from
/// ([`at_its_end`]): a path still ramping up at the phase's end is judged, and replayed,
/// at its end, not over its ramp.
///
/// Judged over the whole run, the bond over three lines ramping through its phase (100 ms
/// windows from 32-37 to 38-39 Mbit/s) 'moved' in 4 of 12 twins, and its trace, replaying
/// the ramp, carried 8-10% less than a transfer met there (2026-12-07).
fn steady_run(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Vec<(u64, f64, u32)> {
    at_its_end(&queued_run(saturated, clocks, queued_ns)).to_vec()
}

/// The rate over time of the queued deliveries of a saturating phase, over the stretch the
/// rate is taken from ([`steady_run`]).
pub fn rate_over_time(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> RateOverTime {
    let run = steady_run(saturated, clocks, queued_ns);
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
    let judged: Vec<f64> = windows_bps
        .chunks_exact(WINDOWS_JUDGED)
        .map(|w| w.iter().sum::<f64>() / WINDOWS_JUDGED as f64)
        .collect();
    let judged_variation = variation_of(&judged);
    RateOverTime {
        moves: judged.len() >= MIN_JUDGED && judged_variation > MOVING_VARIATION,
        variation: variation_of(&windows_bps),
        judged_windows: judged.len(),
        judged_variation,
        windows_bps,
    }
}

/// Standard deviation over mean; 0 for no windows or none delivered.
fn variation_of(windows: &[f64]) -> f64 {
    let n = windows.len() as f64;
    let mean = windows.iter().sum::<f64>() / n.max(1.0);
    let sd = (windows.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / n.max(1.0)).sqrt();
    if mean > 0.0 {
        sd / mean
    } else {
        0.0
    }
}

/// The delivery trace of a saturating phase: its queued deliveries ([`steady_run`]), each full-size frame's
/// worth of bytes one opportunity at the millisecond it arrived (from the first arrival,
/// which is 0 ms); the text of a mahimahi trace file. `None` with fewer than two
/// opportunities, or a trace that would last 0 ms.
pub fn delivery_trace(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Option<String> {
    let run = steady_run(saturated, clocks, queued_ns);
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
