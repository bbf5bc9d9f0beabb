//! The deliveries of a saturating phase that waited in the queue: a run of them left the
//! bottleneck back to back, so their arrivals are paced by it alone (the packet-train
//! idea). The rate, the packet rate, the rate over time and the delivery trace are read
//! from such a run.

use crate::samples::{Clocks, Sample};

/// The received packets of a saturating phase that waited in the queue (relative delay
/// above `queued_ns`), in arrival order, longest unbroken run only, once the path
/// delivered at its rate ([`settled`]): `(arrival ns on the receiver's clock, relative
/// delay ns, bytes)`.
pub fn queued_run(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Vec<(u64, f64, u32)> {
    let longest = longest_queued(saturated, clocks, queued_ns);
    settled(&longest).to_vec()
}

/// The received packets of a saturating phase that waited in the queue, as
/// [`queued_run`], longest unbroken run only, whole: from its first packet, ramp or none.
/// Or, where that spans less than [`HELD_SHARE`] of the phase and all of them are more,
/// all of them when the path held the phase below what it was sent at in every 100 ms
/// window ([`overfed`]).
pub fn longest_queued(
    saturated: &[Sample],
    clocks: &Clocks,
    queued_ns: f64,
) -> Vec<(u64, f64, u32)> {
    let by_delay = longest_by_delay(saturated, clocks, queued_ns);
    if held_through(&by_delay, saturated) {
        return by_delay;
    }
    match overfed(saturated, clocks) {
        Some(all) if all.len() > by_delay.len() => all,
        _ => by_delay,
    }
}

/// A queued run spanning less than this share of its phase: the queue emptied (a rate
/// that rose above what the phase sent, a cellular line's peak: mahimahi's
/// TMobile-LTE-short up held 1.0 s of 4), or the delays do not tell it ([`overfed`]).
pub const HELD_SHARE: f64 = 0.5;

/// Whether `run` spans [`HELD_SHARE`] of the phase `saturated` (by send time) or more.
///
/// Such a run, packets that each waited, is the rate's measure; a run of all deliveries
/// ([`overfed`]) is taken only where it is not: on a busy machine the tbf twin's rate down
/// from all of a phase's deliveries was 2.3% low (19.54 of 20 Mbit/s, bulk TCP then met
/// more and the twin raised its rate, 2026-12-07), where the longest queued run had held
/// the whole phase.
pub fn held_through(run: &[(u64, f64, u32)], saturated: &[Sample]) -> bool {
    let span = |first: Option<u64>, last: Option<u64>| last.zip(first).map_or(0, |(l, f)| l - f);
    let sent = span(
        saturated.iter().map(|s| s.sent_ns).min(),
        saturated.iter().map(|s| s.sent_ns).max(),
    );
    let held = span(run.first().map(|a| a.0), run.last().map(|a| a.0));
    held as f64 >= HELD_SHARE * sent as f64
}

/// A window of a saturating phase that delivered less than this share of what the phase
/// was sent at ([`sent_window_bps`]) was held back by the path.
pub const OVERFED_SHARE: f64 = 0.95;

/// The least whole windows [`overfed`] judges: 1 s.
const OVERFED_WINDOWS: usize = 10;

/// The window [`overfed`] and [`sent_window_bps`] count in, ns: 100 ms.
pub const WINDOW_NS: u64 = 100_000_000;

/// All received packets of a saturating phase, in arrival order, when every whole
/// [`WINDOW_NS`] window from the first arrival to the last delivered less than
/// [`OVERFED_SHARE`] of what the phase sent in its window as long after its first send (at
/// least [`OVERFED_WINDOWS`] of them, those after its last send aside): the bottleneck was busy
/// throughout, whatever the packets' delays say. A sender that slowed is no path holding
/// its packets back.
///
/// Where the rate moves, the delay does not tell a queue: the low load's own delays
/// include the rate's stalls (through mahimahi's TMobile-LTE-short up, its p99 was 537 ms,
/// above the 180 ms its 200-packet buffer held), and a saturating phase at 80 Mbit/s,
/// six times the path's average, 'built no queue': the twin had no rate (2026-12-07).
pub fn overfed(saturated: &[Sample], clocks: &Clocks) -> Option<Vec<(u64, f64, u32)>> {
    let sent = sent_windows_bps(saturated);
    let mut arrivals: Vec<(u64, f64, u32)> = saturated
        .iter()
        .filter_map(|s| Some((s.received_ns?, clocks.relative_ns(s)?, s.len_bytes)))
        .collect();
    arrivals.sort_by_key(|a| a.0);
    let delivered = per_window_bps(arrivals.iter().map(|a| (a.0, a.2)));
    // Past the phase's sending, the path drains what it held: no window to judge.
    let judged = delivered.len().min(sent.len());
    let held = judged >= OVERFED_WINDOWS
        && delivered
            .iter()
            .zip(&sent)
            .all(|(&d, &s)| d < OVERFED_SHARE * s);
    held.then_some(arrivals)
}

/// The median of the bits/s a phase was sent at in its whole [`WINDOW_NS`] windows (by
/// send time): the rate it was sent at, a stall of the sender's aside.
pub fn sent_window_bps(saturated: &[Sample]) -> Option<f64> {
    let mut windows = sent_windows_bps(saturated);
    windows.sort_by(f64::total_cmp);
    windows.get(windows.len() / 2).copied()
}

/// Bits per second a phase was sent at in each whole [`WINDOW_NS`] window, by send time.
fn sent_windows_bps(saturated: &[Sample]) -> Vec<f64> {
    let mut sends: Vec<(u64, u32)> = saturated.iter().map(|s| (s.sent_ns, s.len_bytes)).collect();
    sends.sort_unstable();
    per_window_bps(sends.into_iter())
}

/// Bits per second in each whole [`WINDOW_NS`] window from the first of `points` (time ns,
/// bytes; in time order) to the last: the bytes of every point after the first, in the
/// window it fell in.
pub fn per_window_bps(points: impl Iterator<Item = (u64, u32)>) -> Vec<f64> {
    let mut points = points.peekable();
    let Some(&(first, _)) = points.peek() else {
        return Vec::new();
    };
    let mut windows: Vec<f64> = Vec::new();
    let mut last = first;
    for (at, bytes) in points.skip(1) {
        let index = ((at - first) / WINDOW_NS) as usize;
        if windows.len() <= index {
            windows.resize(index + 1, 0.0);
        }
        windows[index] += f64::from(bytes) * 8.0 / (WINDOW_NS as f64 * 1e-9);
        last = at;
    }
    windows.truncate(((last - first) / WINDOW_NS) as usize);
    windows
}

/// The longest unbroken run of packets whose relative delay was above `queued_ns`.
fn longest_by_delay(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Vec<(u64, f64, u32)> {
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
    arrivals.truncate(best.end);
    arrivals.drain(..best.start);
    arrivals
}

/// Bits per second delivered by a run of back-to-back departures: the bytes of all but
/// the first over the time from the first to the last.
pub fn run_rate(run: &[(u64, f64, u32)]) -> Option<f64> {
    let (first, last) = (run.first()?, run.last()?);
    let span_ns = last.0.checked_sub(first.0).filter(|&s| s > 0)?;
    let bytes: u64 = run[1..].iter().map(|a| u64::from(a.2)).sum();
    Some(bytes as f64 * 8.0 / (span_ns as f64 * 1e-9))
}

/// A run's second half delivering more than this share above its first: the path was still
/// ramping up at the phase's end.
pub const STILL_RAMPING: f64 = 0.03;

/// `run`'s second half when that delivered more than [`STILL_RAMPING`] above its first
/// (the rate a transfer longer than the phase meets), else the whole run.
///
/// The bond over three lines (its lines down 24, 12 and 6 Mbit/s) ramped through a whole
/// 4 s saturating phase, its 100 ms windows from 32-37 to 38-39 Mbit/s (too little to
/// 'move': their variation 3-4%, and no leading window below 90% of the median for
/// `queued_run` to cut): taken whole, the rate was 36.2-37.2 Mbit/s, and bulk TCP
/// through the tunnel for 10 s then carried 37.1-37.3 of goodput, 5-8% above what it
/// carried on the twin. A fixed rate's halves differ by far less (its windows by a packet
/// or two).
pub fn at_its_end(run: &[(u64, f64, u32)]) -> &[(u64, f64, u32)] {
    if run.len() < 20 {
        return run;
    }
    let half = run.len() / 2;
    match (run_rate(&run[..half]), run_rate(&run[half..])) {
        (Some(first), Some(second)) if second > (1.0 + STILL_RAMPING) * first => &run[half..],
        _ => run,
    }
}

/// The window the start of a run is judged in, ns: 100 ms (the rate over time's).
const RAMP_WINDOW_NS: u64 = 100_000_000;

/// A leading window below this share of the run's median window is the path still
/// ramping up.
const RAMPING_SHARE: f64 = 0.9;

/// `run` without its first windows while the path ramps up to its rate: the leading
/// [`RAMP_WINDOW_NS`] windows that delivered less than [`RAMPING_SHARE`] of the median
/// window, up to half the run.
///
/// A path whose sender paces it and adapts to load (the bond's line controllers, which
/// hold idle lines low and ramp them up once data waits) delivers a saturating phase at
/// its rate only after a second or so: through the bond over three lines the windows of
/// 250 ms went 5.0, 7.5, 13.1, 16.5, then 18.8-20.3 Mbit/s to the end. Taken whole, the
/// ramp made the rate 'move' (a trace replaying it every 4.5 s, 17.8 Mbit/s on average,
/// each probe waiting for a whole-millisecond opportunity: +1.2 ms on the base RTT) and the
/// rate low. A token bucket's burst (faster first) and a queue filling (at the rate from
/// the first packet) have no such ramp and are kept whole.
fn settled(run: &[(u64, f64, u32)]) -> &[(u64, f64, u32)] {
    let Some(first) = run.first() else {
        return run;
    };
    let mut windows: Vec<(usize, u64)> = Vec::new();
    for (i, arrival) in run.iter().enumerate() {
        let index = ((arrival.0 - first.0) / RAMP_WINDOW_NS) as usize;
        if windows.len() <= index {
            windows.resize(index + 1, (i, 0));
        }
        windows[index].1 += u64::from(arrival.2);
    }
    // The last window is partial.
    let whole = &windows[..windows.len().saturating_sub(1)];
    if whole.len() < 4 {
        return run;
    }
    let mut bytes: Vec<u64> = whole.iter().map(|w| w.1).collect();
    bytes.sort_unstable();
    let median = bytes[bytes.len() / 2] as f64;
    let ramp = whole
        .iter()
        .take(whole.len() / 2)
        .take_while(|w| (w.1 as f64) < RAMPING_SHARE * median)
        .count();
    &run[whole.get(ramp).map_or(0, |w| w.0)..]
}

/// The stretch of the a saturating phase's queued deliveries the rate is taken from
/// ([`at_its_end`]): a path still ramping up at the phase's end is judged, and replayed,
/// at its end, not over its ramp.
///
/// Judged over the whole run, the bond over three lines ramping through its phase (100 ms
/// windows from 32-37 to 38-39 Mbit/s) 'moved' in 4 of 12 twins, and its trace, replaying
/// the ramp, carried 8-10% less than a transfer met there (2026-12-07).
pub fn steady_run(saturated: &[Sample], clocks: &Clocks, queued_ns: f64) -> Vec<(u64, f64, u32)> {
    steady_of(&longest_queued(saturated, clocks, queued_ns))
}

/// [`steady_run`] of a phase's [`longest_queued`] run, already taken.
pub fn steady_of(longest: &[(u64, f64, u32)]) -> Vec<(u64, f64, u32)> {
    at_its_end(settled(longest)).to_vec()
}
