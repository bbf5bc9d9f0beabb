//! A delivery trace in mahimahi's format when the bottleneck's rate moves over time (a
//! cellular line): one line per delivery opportunity of one full-size frame, in whole
//! milliseconds, as mahimahi records them from a saturating flow. `pathlab-core` parses
//! such files ([`pathlab_core::spec::trace::Trace::parse`], fuzzed) and its rate model
//! replays them.

use std::fmt::Write as _;

use pathlab_core::stage::rate::MAHIMAHI_OPPORTUNITY_BYTES;
use serde::{Deserialize, Serialize};

pub use crate::queued::WINDOW_NS;
use crate::queued::{
    held_through, longest_queued, per_window_bps, sent_window_bps, steady_of, OVERFED_SHARE,
};
use crate::samples::{Clocks, Sample};

/// Windows of [`WINDOW_NS`] summed into one that the first saturating phase's rate is
/// judged in: 500 ms.
pub const WINDOWS_JUDGED: usize = 5;

/// The first saturating phase's rate may move when the coefficient of variation of its
/// [`WINDOWS_JUDGED`] windows is above this; a longer phase then judges
/// ([`LONG_WINDOWS_JUDGED`]), as it does where the phase's queue emptied ([`crate::queued::HELD_SHARE`])
/// or it did not overfeed the path ([`OVERFED_SHARE`]). A fixed rate's windows differ by a
/// packet or two (about 1% at 10 Mbit/s).
///
/// Judged in 500 ms, not 100 ms: the bond over three lines, each line's rate fixed, varied
/// by 2-7% from one 100 ms window to the next (its scheduler and the lines' controllers),
/// and a trace replaying that took a fixed rate's place (each packet then waits for a
/// whole-millisecond opportunity: base RTT +0.3-1.5 ms, loaded RTT +10-30%, 2026-12-07).
/// Even in 500 ms its fixed lines varied 5.4%, 5.8% and 10.5% in 3 of 15 twins (0.5-3.2%
/// in the others), replayed as traces (loaded round trips' p95 +10% to +13%), while a
/// real cellular trace (mahimahi's TMobile-LTE-short) moved 20.6% and 45.4%: no one
/// threshold on a few seconds tells the two apart, so a first phase above this one is only
/// a suspicion.
pub const MAY_MOVE: f64 = 0.05;

/// Windows of [`WINDOW_NS`] summed into one that the longer phase's rate is judged in: 2 s.
///
/// Noise about a fixed rate (a scheduler's, the bond's controllers') averages out over
/// seconds; a cellular line's rate moves over tens of them: mahimahi's TMobile-LTE-short
/// varies 63%/69% (up/down) in 100 ms windows, 61%/62% in 500 ms, 58%/53% in 2 s and
/// 57%/38% in 10 s.
pub const LONG_WINDOWS_JUDGED: usize = 20;

/// The longer phase's rate moves when its [`LONG_WINDOWS_JUDGED`] windows vary by more
/// than this (a move that persists over seconds), or its [`WINDOWS_JUDGED`] ones by more
/// than [`MOVING_FAST`].
pub const MOVING_VARIATION: f64 = 0.10;

/// The longer phase's rate moves when its [`WINDOWS_JUDGED`] windows vary by more than
/// this: twice the most the bond's fixed lines varied (10.5%), below a cellular line's
/// (61-66% in mahimahi's LTE traces) and a rate that alternates between 1 and 2 frames a
/// millisecond each second (33%), whose 2 s windows are all alike.
pub const MOVING_FAST: f64 = 0.20;

/// Whether the longer saturating phase's queued deliveries `run` move ([`MOVING_FAST`] in
/// [`WINDOWS_JUDGED`] windows or [`MOVING_VARIATION`] in [`LONG_WINDOWS_JUDGED`] ones),
/// with the rate over time at both lengths.
pub fn moves(run: &[(u64, f64, u32)]) -> (bool, [RateOverTime; 2]) {
    let fast = rate_over_time(run, WINDOWS_JUDGED);
    let long = rate_over_time(run, LONG_WINDOWS_JUDGED);
    (
        fast.above(MOVING_FAST) || long.above(MOVING_VARIATION),
        [fast, long],
    )
}

/// The least judged windows for a verdict (fewer: a fixed rate): 4 (2 s in the first
/// phase, 8 s in the longer one).
pub const MIN_JUDGED: usize = 4;

/// The rate over time of a saturating phase's queued deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateOverTime {
    /// Bits per second in each [`WINDOW_NS`] window, in order.
    pub windows_bps: Vec<f64>,
    /// Their standard deviation over their mean.
    pub variation: f64,
    /// How many [`WINDOW_NS`] windows each judged window sums.
    pub windows_per_judged: usize,
    /// How many judged windows there were (whole ones only).
    pub judged_windows: usize,
    /// Their variation, as `variation`.
    pub judged_variation: f64,
}

impl RateOverTime {
    /// Whether its judged windows, at least [`MIN_JUDGED`], varied by more than `share`.
    pub fn above(&self, share: f64) -> bool {
        self.judged_windows >= MIN_JUDGED && self.judged_variation > share
    }

    /// The judged window's length, ms.
    pub fn judged_ms(&self) -> u64 {
        WINDOW_NS / 1_000_000 * self.windows_per_judged as u64
    }

    /// The most delivered in one [`WINDOW_NS`] window, bits/s.
    pub fn highest_bps(&self) -> f64 {
        self.windows_bps.iter().copied().fold(0.0, f64::max)
    }
}

/// The rate over time of a run of queued deliveries, judged in windows of
/// `windows_per_judged` [`WINDOW_NS`] windows.
pub fn rate_over_time(run: &[(u64, f64, u32)], windows_per_judged: usize) -> RateOverTime {
    let windows_bps = per_window_bps(run.iter().map(|a| (a.0, a.2)));
    let judged: Vec<f64> = windows_bps
        .chunks_exact(windows_per_judged)
        .map(|w| w.iter().sum::<f64>() / windows_per_judged as f64)
        .collect();
    RateOverTime {
        variation: variation_of(&windows_bps),
        windows_per_judged,
        judged_windows: judged.len(),
        judged_variation: variation_of(&judged),
        windows_bps,
    }
}

/// Whether the first saturating phase's rate may move: its [`WINDOWS_JUDGED`] windows
/// varied by more than [`MAY_MOVE`] or its 100 ms ones by more than [`MOVING_FAST`] (a
/// stretch too short for 500 ms windows: mahimahi's TMobile-LTE-short down, overfed at
/// 80 Mbit/s, 31% in the 971 ms its rate was taken from; the bond's 100 ms windows 14% at
/// most), its longest queued run spanned less than
/// [`crate::queued::HELD_SHARE`] of it, or a 100 ms window of that run delivered [`OVERFED_SHARE`] of what it
/// sent (the median of its 100 ms windows by send time). The phase's rate over time with it.
pub fn may_move(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> (bool, RateOverTime) {
    let longest = longest_queued(saturated, clocks, queued_ns);
    let over_time = rate_over_time(&steady_of(&longest), WINDOWS_JUDGED);
    let fed = sent_window_bps(saturated).is_some_and(|sent| {
        let frames = OVERFED_SHARE * sent;
        let whole = rate_over_time(&longest, 1);
        whole.windows_bps.iter().any(|&w| w >= frames)
    });
    let emptied = !held_through(&longest, saturated);
    let jumpy = over_time.windows_bps.len() >= MIN_JUDGED && over_time.variation > MOVING_FAST;
    (
        over_time.above(MAY_MOVE) || jumpy || emptied || fed,
        over_time,
    )
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

/// The delivery trace of a run of queued deliveries: each full-size frame's worth of bytes
/// one opportunity at the millisecond it arrived (from the first arrival, which is 0 ms);
/// the text of a mahimahi trace file. `None` with fewer than two opportunities, or a trace
/// that would last 0 ms.
pub fn delivery_trace(run: &[(u64, f64, u32)]) -> Option<String> {
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
